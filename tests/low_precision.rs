//! The DLPack 1.1 low-precision floats (fp8, fp6, fp4) as gpuport elements:
//! bits survive arrays and DLPack round trips (proptest), the codes map both
//! ways, sub-byte types travel padded (flagged) and are refused packed, the
//! version a 1.1 code is stated under, run-time dtypes, fill, and the typed
//! refusal of arithmetic kernels.

use std::sync::Arc;

use gpuport::array::element::{
    Float4E2M1Fn, Float6E2M3Fn, Float6E3M2Fn, Float8E3M4, Float8E4M3, Float8E4M3B11Fnuz, Float8E4M3Fnuz,
    Float8E5M2Fnuz, Float8E8M0Fnu, F8E4M3, F8E5M2,
};
use gpuport::array::{Element, ExportOptions};
use gpuport::dlpack::ffi::{DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_READ_ONLY};
use gpuport::dlpack::{DLDataType, DLDataTypeCode, DLPackError, ImportedTensor};
use gpuport::dynamic::exchange::{export, ExportRequest};
use gpuport::dynamic::{new_owned, AnyArray, AnyStream, DType};
use gpuport::{Device, Error, HostDevice, Location, MemArray};
use proptest::prelude::*;

fn host() -> Arc<HostDevice> {
    HostDevice::open(0).unwrap()
}

/// A type whose values are made from, and read back as, bits.
trait Bits: Element {
    fn make(b: u8) -> Self;
    fn bits(self) -> u8;
}

macro_rules! bits8 {
    ($($t:ty),*) => { $(impl Bits for $t {
        fn make(b: u8) -> Self { <$t>::from_bits(b) }
        fn bits(self) -> u8 { self.to_bits() }
    })* };
}
bits8!(F8E4M3, F8E5M2, Float8E3M4, Float8E4M3, Float8E4M3B11Fnuz, Float8E4M3Fnuz, Float8E5M2Fnuz, Float8E8M0Fnu);

macro_rules! bits_sub {
    ($($t:ty),*) => { $(impl Bits for $t {
        fn make(b: u8) -> Self { <$t>::from_bits(b & <$t>::MASK).unwrap() }
        fn bits(self) -> u8 { self.to_bits() }
    })* };
}
bits_sub!(Float6E2M3Fn, Float6E3M2Fn, Float4E2M1Fn);

/// An array of `bytes` as `T`, exported versioned from its host copy and
/// imported back: the same bits, the type's code, the padded flag exactly
/// for sub-byte types, version 1.1.
fn round_trip<T: Bits>(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
    let values: Vec<T> = bytes.iter().map(|&b| T::make(b)).collect();
    let want: Vec<u8> = values.iter().map(|v| v.bits()).collect();
    let a = MemArray::from_vec(&host(), [values.len()], values).unwrap();
    let m = a.to_dlpack_versioned(Location::Host, ExportOptions::default(), None).unwrap();
    prop_assert_eq!(m.dl_tensor().dtype, T::DTYPE);
    let padded = m.flags() & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0;
    prop_assert_eq!(padded, T::DTYPE.bits < 8);
    // SAFETY: a live tensor we produced, handed over once.
    let imp = unsafe { ImportedTensor::from_versioned(m.into_raw()) }.unwrap();
    prop_assert_eq!(imp.version().map(|v| (v.major, v.minor)), Some((1, 1)));
    prop_assert_eq!(imp.is_subbyte_padded(), T::DTYPE.bits < 8);
    let got: Vec<u8> = imp.as_slice::<T>().unwrap().iter().map(|v| v.bits()).collect();
    prop_assert_eq!(&got, &want);
    let dt = DType::from_dlpack(imp.dtype()).unwrap();
    prop_assert_eq!(dt.dlpack(), T::DTYPE);
    Ok(())
}

proptest! {
    #[test]
    fn bits_survive_a_dlpack_round_trip_for_every_low_precision_type(bytes in prop::collection::vec(any::<u8>(), 1..64)) {
        round_trip::<F8E4M3>(&bytes)?;
        round_trip::<F8E5M2>(&bytes)?;
        round_trip::<Float8E3M4>(&bytes)?;
        round_trip::<Float8E4M3>(&bytes)?;
        round_trip::<Float8E4M3B11Fnuz>(&bytes)?;
        round_trip::<Float8E4M3Fnuz>(&bytes)?;
        round_trip::<Float8E5M2Fnuz>(&bytes)?;
        round_trip::<Float8E8M0Fnu>(&bytes)?;
        round_trip::<Float6E2M3Fn>(&bytes)?;
        round_trip::<Float6E3M2Fn>(&bytes)?;
        round_trip::<Float4E2M1Fn>(&bytes)?;
    }

    /// A run-time array of every low-precision dtype, filled with any valid
    /// byte, exports those bytes under the dtype's DLPack code.
    #[test]
    fn dynamic_arrays_fill_and_export_any_valid_byte(b in any::<u8>(), n in 1usize..9) {
        let dev = gpuport::open("host").unwrap();
        for dt in DType::ALL.into_iter().filter(|d| d.is_low_precision_float()) {
            let mut a = AnyArray::Owned(new_owned(&dev, dt, &[n]).unwrap());
            let bits = dt.dlpack().bits;
            let r = a.fill_bytes(&[b], None);
            if bits < 8 && u32::from(b) >= 1u32 << bits {
                let refused = matches!(r, Err(Error::InvalidArgument { name: "value", .. }));
                prop_assert!(refused, "{}: {:?}", dt.name(), r);
                continue;
            }
            r.unwrap();
            // SAFETY: no stream is named.
            let e = unsafe { export(&mut a, ExportRequest { max_version: Some((1, 0)), ..Default::default() }) }.unwrap();
            let t = e.into_versioned();
            prop_assert_eq!(t.dl_tensor().dtype, dt.dlpack());
            // Asked for 1.0, stated 1.1: the version that defines the code.
            // SAFETY: our live tensor.
            prop_assert_eq!(unsafe { (*t.as_raw()).version.minor }, 1);
            // SAFETY: our live tensor, handed over once.
            let imp = unsafe { ImportedTensor::from_versioned(t.into_raw()) }.unwrap();
            // Read as bytes: every low-precision type is one byte per element.
            // SAFETY: host memory of `n` one-byte elements, alive while `imp` is.
            let got = unsafe { std::slice::from_raw_parts(imp.data_ptr() as *const u8, imp.len()) };
            prop_assert_eq!(got, &vec![b; n][..]);
        }
    }
}

#[test]
fn sub_byte_types_are_not_exported_as_legacy_tensors() {
    let a = MemArray::from_vec(&host(), [2], vec![Float4E2M1Fn::from_bits(1).unwrap(); 2]).unwrap();
    let e = a.to_dlpack(Location::Host, false, None).unwrap_err();
    assert!(matches!(&e, Error::DLPack(DLPackError::SubByteLayout { dtype, .. }) if dtype == "float4_e2m1fn"), "{e}");
    assert!(e.to_string().contains("padded only"), "the error says what is accepted: {e}");
    let e = a.host_view(None).unwrap().to_managed().unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::SubByteLayout { .. })), "{e}");
    // A versioned one is fine and flagged.
    let v = a.host_view(None).unwrap().to_managed_versioned(true).unwrap();
    assert_eq!(v.flags(), DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
    // 8-bit types are whole bytes: legacy exports are fine.
    let b = MemArray::from_vec(&host(), [2], vec![F8E4M3::from_f32(2.0); 2]).unwrap();
    let m = b.to_dlpack(Location::Host, false, None).unwrap();
    assert_eq!((m.dl_tensor().dtype.code.0, m.dl_tensor().dtype.bits), (10, 8));
}

#[test]
fn the_run_time_export_refuses_a_legacy_capsule_of_a_sub_byte_dtype_and_changes_nothing() {
    let dev = gpuport::open("host").unwrap();
    let mut a = AnyArray::Owned(new_owned(&dev, DType::Float6E3M2Fn, &[3]).unwrap());
    // SAFETY: no stream is named.
    let e = unsafe { export(&mut a, ExportRequest { max_version: None, ..Default::default() }) }.unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::SubByteLayout { .. })), "{e}");
    assert_eq!(a.live_exports(), 0);
    // SAFETY: no stream is named.
    let ok = unsafe { export(&mut a, ExportRequest { max_version: Some((1, 1)), ..Default::default() }) }.unwrap();
    let t = ok.into_versioned();
    assert_eq!(t.flags() & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
}

/// A versioned fp4 tensor with its padded flag cleared, and a legacy one,
/// are packed to a consumer: refused, with the producer's deleter run.
#[test]
fn packed_sub_byte_tensors_are_refused_on_import() {
    let a = MemArray::from_vec(&host(), [4], vec![Float4E2M1Fn::from_bits(3).unwrap(); 4]).unwrap();
    let raw = a.to_dlpack_versioned(Location::Host, ExportOptions::default(), None).unwrap().into_raw();
    // SAFETY: our live tensor, not yet handed to anyone; the flag is plain data.
    unsafe { (*raw).flags &= !DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED };
    // SAFETY: handed over once; on error the importer has called the deleter.
    let e = unsafe { ImportedTensor::from_versioned(raw) }.unwrap_err();
    assert!(matches!(&e, Error::DLPack(DLPackError::SubByteLayout { dtype, .. }) if dtype == "float4_e2m1fn"), "{e}");
    assert_eq!(a.live_exports(), 0, "the refused tensor was released");

    // A legacy tensor: a byte export relabelled fp6, as a legacy producer would send it.
    let bytes = MemArray::from_vec(&host(), [4], vec![1u8, 2, 3, 4]).unwrap();
    let raw = bytes.to_dlpack(Location::Host, false, None).unwrap().into_raw();
    // SAFETY: as above.
    unsafe { (*raw).dl_tensor.dtype = Float6E2M3Fn::DTYPE };
    // SAFETY: as above.
    let e = unsafe { ImportedTensor::from_legacy(raw) }.unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::SubByteLayout { .. })), "{e}");
    assert_eq!(bytes.live_exports(), 0);
}

#[test]
fn padded_sub_byte_bytes_with_high_bits_set_are_invalid_values() {
    let bytes = MemArray::from_vec(&host(), [3], vec![1u8, 0x1f, 3]).unwrap();
    let m = bytes.to_dlpack_versioned(Location::Host, ExportOptions::default(), None).unwrap();
    // SAFETY: handed over once.
    let mut imp = unsafe { ImportedTensor::from_versioned(m.into_raw()) }.unwrap();
    imp.reinterpret(Float4E2M1Fn::DTYPE).unwrap();
    assert!(imp.is_subbyte_padded());
    let e = imp.as_slice::<Float4E2M1Fn>().unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::InvalidValues { .. })), "{e}");
    // Read as fp6 (6 bits), 0x1f is a value.
    let m = bytes.to_dlpack_versioned(Location::Host, ExportOptions::default(), None).unwrap();
    // SAFETY: handed over once.
    let mut imp = unsafe { ImportedTensor::from_versioned(m.into_raw()) }.unwrap();
    imp.reinterpret(Float6E3M2Fn::DTYPE).unwrap();
    let v: Vec<u8> = imp.to_vec::<Float6E3M2Fn>().unwrap().into_iter().map(Float6E3M2Fn::to_bits).collect();
    assert_eq!(v, [1, 0x1f, 3]);
}

#[test]
fn reinterpret_reads_the_same_bytes_as_another_one_byte_type_only() {
    let bytes = MemArray::from_vec(&host(), [2], vec![0x38u8, 0xb8]).unwrap();
    let m = bytes.to_dlpack_versioned(Location::Host, ExportOptions::default(), None).unwrap();
    // SAFETY: handed over once.
    let mut imp = unsafe { ImportedTensor::from_versioned(m.into_raw()) }.unwrap();
    let e = imp.reinterpret(half::f16::DTYPE).unwrap_err();
    assert!(matches!(e, Error::DLPack(DLPackError::DTypeMismatch { .. })), "{e}");
    let bad = DLDataType { code: DLDataTypeCode(10), bits: 16, lanes: 1 };
    assert!(matches!(imp.reinterpret(bad), Err(Error::DLPack(DLPackError::UnknownDType { .. }))));
    assert_eq!(imp.dtype(), u8::DTYPE, "a refused reinterpretation changes nothing");
    imp.reinterpret(F8E4M3::DTYPE).unwrap();
    let v: Vec<f32> = imp.as_slice::<F8E4M3>().unwrap().iter().map(|x| x.to_f32()).collect();
    assert_eq!(v, [1.0, -1.0]);
    assert!(!imp.is_subbyte_padded());
}

#[test]
fn arithmetic_kernels_refuse_low_precision_dtypes_naming_the_kernel_and_type() {
    let dev = gpuport::open("host").unwrap();
    for dt in DType::ALL.into_iter().filter(|d| d.is_low_precision_float()) {
        let mut a = AnyArray::Owned(new_owned(&dev, dt, &[2, 2]).unwrap());
        let e = a.add_index(&AnyStream::default_for(&dev), None).unwrap_err();
        assert!(matches!(e, Error::NoKernel { op: "add_index", .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("add_index") && msg.contains(dt.name()), "{msg}");
    }
}

#[test]
fn fill_bytes_checks_the_element_size() {
    let dev = gpuport::open("host").unwrap();
    let mut a = AnyArray::Owned(new_owned(&dev, DType::Float8E5M2, &[2]).unwrap());
    let e = a.fill_bytes(&[1, 2], None).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "value", .. }), "{e}");
    a.fill_bytes(&[F8E5M2::from_f32(-0.5).to_bits()], None).unwrap();
    let AnyArray::Owned(o) = &a else { unreachable!() };
    let (p, _keep) = o.parts(Location::Host, None).unwrap();
    // SAFETY: the host copy of 2 one-byte elements, kept alive by `_keep`.
    let got = unsafe { std::slice::from_raw_parts(p as usize as *const u8, 2) };
    assert_eq!(got, [0xb8, 0xb8]);
}
