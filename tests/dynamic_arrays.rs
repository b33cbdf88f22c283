//! The run-time layer's array entry points that a binding calls once per
//! Python call, on every backend: `new_checked` (`MemArray(shape, dtype,
//! device)`) and `exchange_api::import_own` (`from_dlpack` of gpuport's own
//! array, the exchange table's export and import without the tensor), and
//! `array_access`'s `fill_value` (`MemArray.fill`: the value's rules).

mod common;

use gpuport::array::{Location, Transfer};
use gpuport::dynamic::array::new_checked;
use gpuport::dynamic::array_access::FillValue;
use gpuport::dynamic::exchange_api::import_own;
use gpuport::dynamic::{new_owned, AnyArray, AnyStream, DType};
use gpuport::error::python::ExceptionClass;
use gpuport::Error;

/// The first `n` float32 of `a`'s host copy (moved there and waited for;
/// an import's memory must be host memory).
fn host_f32(a: &mut AnyArray, n: usize) -> Vec<f32> {
    let s = AnyStream::default_for(&a.device());
    if let AnyArray::Owned(o) = a {
        o.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
    }
    let (ptr, _keep) = a.host_bytes("test").unwrap();
    let ptr = usize::try_from(ptr).unwrap();
    // SAFETY: `n` float32 of a host-readable copy, current and idle, kept
    // alive by `_keep`; `a` is borrowed mutably, so nothing else writes it.
    unsafe { std::slice::from_raw_parts(ptr as *const f32, n) }.to_vec()
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn new_checked_refuses_bad_shapes_before_allocating_and_zero_fills(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let e = new_checked(&dev, DType::Float32, &[1; 9]).map(drop).unwrap_err();
    assert!(e.to_string().contains("9 dimensions"), "{e}");
    // Rank first: nine huge extents are a rank error, not a size error.
    let e = new_checked(&dev, DType::Float32, &[usize::MAX; 9]).map(drop).unwrap_err();
    assert!(e.to_string().contains("9 dimensions"), "{e}");
    let e = new_checked(&dev, DType::UInt8, &[0, 1 << 63]).map(drop).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    let mut a = AnyArray::Owned(new_checked(&dev, DType::Float32, &[2, 3]).unwrap());
    assert_eq!((a.dtype(), &a.shape()[..]), (DType::Float32, &[2, 3][..]));
    assert_eq!(host_f32(&mut a, 6), [0.0; 6]);
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn an_own_import_shares_the_memory_and_keeps_it_alive(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::default_for(&dev);
    let mut a = AnyArray::Owned(new_checked(&dev, DType::Float32, &[4]).unwrap());
    a.add_index(&s, None).unwrap();
    let mut packed = 0;
    let mut b = AnyArray::Imported(import_own(&mut a, None, |_| packed += 1).unwrap());
    assert_eq!(packed, 1, "the export is handed to `pack` once");
    assert_eq!((b.dtype(), &b.shape()[..], b.device().info().spec()), (DType::Float32, &[4][..], dev.info().spec()));
    assert_eq!(b.dl(b.natural()), a.dl(a.natural()), "the copy the table exports");
    assert_eq!(a.live_exports(), 1, "the import holds the export");
    // A write through the import is what the array reads next.
    b.add_index(&s, None).unwrap();
    assert_eq!(host_f32(&mut a, 4), [0.0, 2.0, 4.0, 6.0]);
    drop(a);
    b.add_index(&s, None).unwrap();
    if dev.backend() == gpuport::BackendKind::Host {
        // Host memory reads in place (a GPU import's memory is the device's).
        assert_eq!(host_f32(&mut b, 4), [0.0, 3.0, 6.0, 9.0], "the import keeps the memory");
    }
    let c = import_own(&mut b, None, |_| ()).unwrap();
    assert_eq!(c.strides()[..], [1], "an import of an import keeps its strides");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn an_own_import_of_a_host_copy_is_on_the_host_device(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::default_for(&dev);
    let mut a = AnyArray::Owned(new_checked(&dev, DType::Float32, &[4]).unwrap());
    if let AnyArray::Owned(o) = &mut a {
        o.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
    }
    let b = AnyArray::Imported(import_own(&mut a, None, |_| ()).unwrap());
    // The table exports the host copy (no device copy is current), so the
    // import, as one through `__dlpack__`, is host memory of the host device.
    assert_eq!(b.dl(b.natural()).device_type, gpuport::dlpack::DLDeviceType::CPU);
    assert_eq!(b.device().info().spec(), "host", "an import's device is that of the memory it holds");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn an_own_import_is_ordered_after_the_arrays_pending_work(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let (other, ours) = (AnyStream::create(&dev).unwrap(), AnyStream::create(&dev).unwrap());
    const LEN: usize = 1 << 20;
    let mut a = AnyArray::Owned(new_checked(&dev, DType::Float32, &[LEN]).unwrap());
    a.add_index(&other, None).unwrap();
    // Pending on `other`: handed to the default stream, which `ours` waits for.
    let mut b = AnyArray::Imported(import_own(&mut a, Some(&ours), |_| ()).unwrap());
    b.add_index(&ours, None).unwrap(); // an import's add_index waits for its kernel
    drop(b);
    let values = host_f32(&mut a, LEN);
    let wrong = (0..LEN).filter(|&i| values[i] != 2.0 * i as f32).count();
    assert_eq!(wrong, 0, "the array's add_index, then the import's: every element twice its index");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_get_dlpack_block_locks_then_makes_the_asked_copy_current(#[case] spec: &str) {
    use gpuport::array::Residency;
    let Some(dev) = common::open_or_skip(spec) else { return };
    let s = AnyStream::create(&dev).unwrap();
    let mut a = AnyArray::Owned(new_checked(&dev, DType::Float32, &[4]).unwrap());
    a.enter_block(7, Some((Location::Device, &s))).unwrap();
    assert_eq!(a.lock_id(), Some(7));
    assert!(matches!(a.residency(), Some(Residency::Device | Residency::Both)), "the device copy is current");
    // A second block is refused and leaves the first one's lock.
    let e = a.enter_block(8, Some((Location::Host, &s))).unwrap_err();
    assert!(e.to_string().contains("already locked"), "{e}");
    assert_eq!(a.lock_id(), Some(7));
    a.exit();
    a.enter_block(9, None).unwrap();
    assert_eq!(a.lock_id(), Some(9));
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn reading_host_elements_takes_a_tensor_of_the_arrays_shape_only(#[case] spec: &str) {
    use gpuport::array::MemArray;
    use gpuport::dlpack::ImportedTensor;
    let Some(dev) = common::open_or_skip(spec) else { return };
    let on_host = gpuport::open("host").unwrap();
    let tensor = |shape: [usize; 2]| {
        let values: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let t = gpuport::on_backend!(&on_host, d => MemArray::from_vec(d, shape, values).unwrap()
            .to_dlpack(Location::Host, false, None).unwrap());
        // SAFETY: a live tensor gpuport produced, handed over once.
        unsafe { ImportedTensor::from_legacy(t.into_raw()) }.unwrap()
    };
    let s = AnyStream::default_for(&dev);
    let mut a = AnyArray::Owned(new_checked(&dev, DType::Float32, &[2, 3]).unwrap());
    let e = a.read_host("read_numpy_array", &tensor([3, 2]), &s).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{e}");
    assert!(e.python_message(None).contains("read_numpy_array: shape (3, 2) differs from (2, 3)"), "{e}");
    a.read_host("read_numpy_array", &tensor([2, 3]), &s).unwrap();
    assert_eq!(host_f32(&mut a, 6), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
}

/// A tensor another library handed over, as a binding holds it.
struct Handed(gpuport::dlpack::ImportedTensor);

impl AsRef<gpuport::dlpack::ImportedTensor> for Handed {
    fn as_ref(&self) -> &gpuport::dlpack::ImportedTensor {
        &self.0
    }
}

// SAFETY: the tensor is gpuport's own export, whose deleter may run on any
// thread; only the description's plain fields are read.
unsafe impl Send for Handed {}
// SAFETY: as above; shared access only reads plain fields.
unsafe impl Sync for Handed {}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn an_array_says_whether_it_is_imported_and_whether_its_producer_made_it_read_only(#[case] spec: &str) {
    use gpuport::array::{ExportOptions, MemArray};
    use gpuport::dynamic::ImportedArray;
    let Some(dev) = common::open_or_skip(spec) else { return };
    let mut a = AnyArray::Owned(new_checked(&dev, DType::Float32, &[4]).unwrap());
    assert!(!a.is_imported() && !a.is_read_only(), "a gpuport array is its own and writable");
    let b = AnyArray::Imported(import_own(&mut a, None, |_| ()).unwrap());
    assert!(b.is_imported() && !b.is_read_only(), "an own import is writable");
    let read_only = ExportOptions { read_only: true, ..Default::default() };
    let t = gpuport::on_backend!(&dev, d => MemArray::from_vec(d, [4], vec![1.0f32; 4]).unwrap()
        .to_dlpack_versioned(Location::Host, read_only, None).unwrap());
    // SAFETY: a live tensor gpuport produced, handed over once.
    let t = unsafe { gpuport::dlpack::ImportedTensor::from_versioned(t.into_raw()) }.unwrap();
    let c = AnyArray::Imported(ImportedArray::from_tensor(std::sync::Arc::new(Handed(t))).unwrap());
    assert!(c.is_imported() && c.is_read_only(), "the producer's READ_ONLY flag holds");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn fill_takes_one_value_as_bytes_or_converted_and_says_what_to_pass_without_a_conversion(#[case] spec: &str) {
    let Some(dev) = common::open_or_skip(spec) else { return };
    let mut a = AnyArray::Owned(new_owned(&dev, DType::Float32, &[3]).unwrap());
    let one = |v: f32| v.to_le_bytes().to_vec();
    a.fill_value(FillValue::Converted { shape: vec![], bytes: one(2.5) }).unwrap();
    assert_eq!(host_f32(&mut a, 3), [2.5; 3]);
    a.fill_value(FillValue::Bytes(one(1.0))).unwrap();
    assert_eq!(host_f32(&mut a, 3), [1.0; 3]);

    // More than one value: refused, the array unchanged.
    let two = [one(4.0), one(5.0)].concat();
    let e = a.fill_value(FillValue::Converted { shape: vec![2], bytes: two }).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "value", .. }), "{e}");
    assert!(e.to_string().contains("fill takes one value, not an array of shape (2,)"), "{e}");
    let e = a.fill_value(FillValue::Bytes(vec![1, 2])).unwrap_err();
    assert!(e.to_string().contains("4 bytes, not 2"), "{e}");
    assert_eq!(host_f32(&mut a, 3), [1.0; 3]);

    // No conversion of a number: one element's bytes are asked for, and
    // ml_dtypes named where it has the dtype.
    let mut fp8 = AnyArray::Owned(new_owned(&dev, DType::Float8E4M3Fn, &[2]).unwrap());
    let e = fp8.fill_value(FillValue::NotConverted).unwrap_err();
    assert!(matches!(e, Error::NoValueConversion { itemsize: 1, in_ml_dtypes: true, .. }), "{e}");
    assert_eq!(e.python_class(), ExceptionClass::UnsupportedDType);
    let said = e.python_message(Some("fill"));
    assert!(said.contains("install ml_dtypes") && said.contains("pass one element's 1 byte(s) as bytes"), "{said}");
    let mut c32 = AnyArray::Owned(new_owned(&dev, DType::Complex32, &[2]).unwrap());
    let said = c32.fill_value(FillValue::NotConverted).unwrap_err().python_message(Some("fill"));
    assert!(!said.contains("ml_dtypes") && said.contains("NumPy has no dtype complex32"), "{said}");
}
