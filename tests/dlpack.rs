//! DLPack export and import: every dtype round trip, ownership (memory
//! outlives its Rust owner; deleters run exactly once, counted), flags, and
//! typed errors for tensors gpuport cannot take.

mod common;

use std::ffi::c_void;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::open_or_skip;
use gpuport::array::element::{
    Float8E3M4, Float8E4M3, Float8E4M3B11Fnuz, Float8E4M3Fnuz, Float8E5M2Fnuz, Float8E8M0Fnu, F8E4M3, F8E5M2,
};
use gpuport::array::{Element, ExportOptions};
use gpuport::dlpack::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
};
use gpuport::dlpack::{
    dl_device, DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLPackError, DLPackVersion, DLTensor, ExportSource,
    ImportedTensor,
};
use gpuport::{on_backend, BackendKind, Device, Error, Location, MemArray, MemoryKind, Transfer};
use half::{bf16, f16};
use num_complex::Complex;
use rstest::rstest;

/// Test values for every element type.
trait Sample: Element + PartialEq + Debug {
    fn sample(i: usize) -> Self;
}

macro_rules! sample_num {
    ($($t:ty),*) => { $(impl Sample for $t { fn sample(i: usize) -> Self { (i % 100) as $t } })* };
}
sample_num!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

impl Sample for bool {
    fn sample(i: usize) -> Self {
        i.is_multiple_of(3)
    }
}
impl Sample for f16 {
    fn sample(i: usize) -> Self {
        f16::from_f32(i as f32 * 0.5)
    }
}
impl Sample for bf16 {
    fn sample(i: usize) -> Self {
        bf16::from_f32(i as f32 * 0.25)
    }
}
macro_rules! sample_bits {
    ($($t:ty),*) => { $(impl Sample for $t { fn sample(i: usize) -> Self { <$t>::from_bits((i * 37 % 256) as u8) } })* };
}
sample_bits!(F8E4M3, F8E5M2, Float8E3M4, Float8E4M3, Float8E4M3B11Fnuz, Float8E4M3Fnuz, Float8E5M2Fnuz, Float8E8M0Fnu);

impl<T: Sample> Sample for Complex<T>
where
    Complex<T>: Element,
{
    fn sample(i: usize) -> Self {
        Complex::new(T::sample(i), T::sample(i + 1))
    }
}
impl<T: Sample, const L: usize> Sample for [T; L]
where
    [T; L]: Element,
{
    fn sample(i: usize) -> Self {
        std::array::from_fn(|l| T::sample(i * L + l))
    }
}

fn export_import_compare<T: Sample, D: Device>(dev: &Arc<D>) {
    let values: Vec<T> = (0..12).map(T::sample).collect();
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::from_vec(dev, [3, 4], values.clone()).unwrap();

    // Legacy, host copy.
    let m = a.to_dlpack(Location::Host, false, None).unwrap();
    assert_eq!(m.dl_tensor().dtype, T::DTYPE);
    // SAFETY: a live tensor we produced, handed over once.
    let imp = unsafe { ImportedTensor::from_legacy(m.into_raw()) }.unwrap();
    assert_eq!(imp.shape(), &[3, 4]);
    assert_eq!(imp.as_slice::<T>().unwrap(), &values[..]);
    assert_eq!(imp.host_view::<T, 2>().unwrap().to_vec(), values);
    assert_eq!(imp.version(), None);
    drop(imp);

    // Versioned, device copy: same pointer, the backend's device type.
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    let m = a.to_dlpack_versioned(Location::Device, ExportOptions::default(), None).unwrap();
    // SAFETY: as above.
    let imp = unsafe { ImportedTensor::from_versioned(m.into_raw()) }.unwrap();
    assert_eq!(imp.data_ptr() as u64, a.device_ptr(None).unwrap());
    assert_eq!(imp.device(), a.dl_device(Location::Device));
    assert_eq!(imp.version().map(|v| v.major), Some(1));
    if imp.device().device_type == DLDeviceType::CPU {
        assert_eq!(imp.to_vec::<T>().unwrap(), values);
    } else {
        assert_eq!(imp.device_view::<T, 2>().unwrap().extents(), [3, 4]);
        assert!(matches!(imp.as_slice::<T>(), Err(Error::DLPack(DLPackError::WrongDevice { .. }))));
    }
}

fn every_dtype<D: Device>(dev: &Arc<D>) {
    export_import_compare::<bool, D>(dev);
    export_import_compare::<i8, D>(dev);
    export_import_compare::<i16, D>(dev);
    export_import_compare::<i32, D>(dev);
    export_import_compare::<i64, D>(dev);
    export_import_compare::<u8, D>(dev);
    export_import_compare::<u16, D>(dev);
    export_import_compare::<u32, D>(dev);
    export_import_compare::<u64, D>(dev);
    export_import_compare::<f16, D>(dev);
    export_import_compare::<bf16, D>(dev);
    export_import_compare::<f32, D>(dev);
    export_import_compare::<f64, D>(dev);
    export_import_compare::<Complex<f16>, D>(dev);
    export_import_compare::<Complex<f32>, D>(dev);
    export_import_compare::<Complex<f64>, D>(dev);
    export_import_compare::<[f32; 4], D>(dev);
    export_import_compare::<[f16; 2], D>(dev);
    export_import_compare::<[i8; 16], D>(dev);
    export_import_compare::<[u32; 3], D>(dev);
    // DLPack 1.1 fp8 types (PartialEq of the float8 crate's types is a
    // float comparison: the samples avoid NaN bit patterns for them).
    export_import_compare::<Float8E3M4, D>(dev);
    export_import_compare::<Float8E4M3, D>(dev);
    export_import_compare::<Float8E4M3B11Fnuz, D>(dev);
    export_import_compare::<F8E4M3, D>(dev);
    export_import_compare::<Float8E4M3Fnuz, D>(dev);
    export_import_compare::<F8E5M2, D>(dev);
    export_import_compare::<Float8E5M2Fnuz, D>(dev);
    export_import_compare::<Float8E8M0Fnu, D>(dev);
    export_import_compare::<[F8E4M3; 4], D>(dev);
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn every_dtype_survives_export_then_import(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => every_dtype(d));
}

fn exports_outlive_the_array<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::from_vec(dev, [5], vec![1.5f64, 2.5, 3.5, 4.5, 5.5]).unwrap();
    let host = a.to_dlpack(Location::Host, false, None).unwrap();
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    let device = a.to_dlpack_versioned(Location::Device, ExportOptions::default(), None).unwrap();
    let device_ptr = a.device_ptr(None).unwrap();
    assert_eq!(a.live_exports(), 2);
    drop(a);
    // SAFETY: live tensors we produced, handed over once each.
    let host = unsafe { ImportedTensor::from_legacy(host.into_raw()) }.unwrap();
    assert_eq!(host.to_vec::<f64>().unwrap(), vec![1.5, 2.5, 3.5, 4.5, 5.5]);
    // SAFETY: as above.
    let device = unsafe { ImportedTensor::from_versioned(device.into_raw()) }.unwrap();
    assert_eq!(device.data_ptr() as u64, device_ptr);
    // The memory is still there: read it where the host can, else check
    // the view addresses the same device memory.
    match device.device_view::<f64, 1>() {
        Ok(v) => assert_eq!(v.as_ptr() as u64, device_ptr),
        Err(_) => assert_eq!(device.to_vec::<f64>().unwrap()[4], 5.5),
    }
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn exported_memory_stays_alive_after_the_array_is_dropped(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => exports_outlive_the_array(d));
}

fn host_dev() -> Arc<gpuport::HostDevice> {
    gpuport::HostDevice::open(0).unwrap()
}

#[test]
fn dropping_the_consumers_handle_releases_the_arrays_memory_share() {
    let a = MemArray::from_vec(&host_dev(), [2], vec![1u16, 2]).unwrap();
    let m = a.to_dlpack(Location::Host, false, None).unwrap();
    let v = a.to_dlpack_versioned(Location::Host, ExportOptions::default(), None).unwrap();
    assert_eq!(a.live_exports(), 2);
    drop(m);
    assert_eq!(a.live_exports(), 1);
    let raw = v.into_raw();
    // SAFETY: the consumer's one call of the deleter.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(a.live_exports(), 0);
}

/// Counts its drops: the owner handed to an export.
struct DropCounter(Arc<AtomicUsize>);
impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counted_source(count: &Arc<AtomicUsize>, data: &mut [f32; 4]) -> ExportSource {
    // SAFETY: `data` outlives the exports in these tests; 4 compact f32s.
    unsafe {
        ExportSource::new(
            data.as_mut_ptr() as *mut c_void,
            dl_device(BackendKind::Host, MemoryKind::Host, 0),
            f32::DTYPE,
            &[4],
            &[1],
            0,
            Arc::new(DropCounter(count.clone())),
        )
    }
}

#[test]
fn export_deleters_free_their_owner_exactly_once() {
    let mut data = [1.0f32, 2.0, 3.0, 4.0];
    let count = Arc::new(AtomicUsize::new(0));
    // Dropped unconsumed: the deleter runs once.
    drop(counted_source(&count, &mut data).into_legacy().unwrap());
    assert_eq!(count.load(Ordering::SeqCst), 1);
    // Handed to a consumer that calls the deleter once.
    let raw = counted_source(&count, &mut data).into_versioned(DLPACK_FLAG_BITMASK_READ_ONLY).into_raw();
    assert_eq!(count.load(Ordering::SeqCst), 1, "not freed before the consumer is done");
    // SAFETY: the consumer's one call.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(count.load(Ordering::SeqCst), 2);
    // Imported back: dropping the import is the one call.
    let raw = counted_source(&count, &mut data).into_legacy().unwrap().into_raw();
    // SAFETY: handed over once.
    let imp = unsafe { ImportedTensor::from_legacy(raw) }.unwrap();
    assert_eq!(imp.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
    drop(imp);
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

#[test]
fn versioned_exports_carry_read_only_and_is_copied_flags() {
    let a = MemArray::from_vec(&host_dev(), [3], vec![1i32, 2, 3]).unwrap();
    let ro = a.to_dlpack_versioned(Location::Host, ExportOptions { read_only: true, copy: false }, None).unwrap();
    assert_eq!(ro.flags(), DLPACK_FLAG_BITMASK_READ_ONLY);
    // SAFETY: handed over once.
    let mut ro = unsafe { ImportedTensor::from_versioned(ro.into_raw()) }.unwrap();
    assert!(ro.is_read_only());
    assert!(matches!(ro.as_mut_slice::<i32>(), Err(Error::DLPack(DLPackError::ReadOnly))));

    let cp = a.to_dlpack_versioned(Location::Host, ExportOptions { read_only: false, copy: true }, None).unwrap();
    assert_eq!(cp.flags(), DLPACK_FLAG_BITMASK_IS_COPIED);
    assert_eq!(a.live_exports(), 1, "the copy does not share the array's memory");
    // SAFETY: handed over once; nobody else reads the copy.
    let mut cp = unsafe { ImportedTensor::from_versioned(cp.into_raw()) }.unwrap();
    assert!(cp.is_copied());
    cp.as_mut_slice::<i32>().unwrap()[0] = 100;
    assert_eq!(a.get([0], None).unwrap(), 1);
    assert_eq!(cp.as_slice::<i32>().unwrap(), &[100, 2, 3]);
}

#[test]
fn views_of_an_array_export_and_keep_it_alive() {
    let m = {
        let a = MemArray::from_vec(&host_dev(), [3, 4], (0..12u8).collect()).unwrap();
        let v = a.host_view(None).unwrap().slice([1..3, 1..4]).unwrap().step(1, 2).unwrap();
        v.to_managed().unwrap()
    };
    // SAFETY: handed over once.
    let imp = unsafe { ImportedTensor::from_legacy(m.into_raw()) }.unwrap();
    assert_eq!(imp.shape(), &[2, 2]);
    assert_eq!(imp.strides(), &[4, 2]);
    assert!(!imp.is_contiguous());
    assert!(matches!(imp.as_slice::<u8>(), Err(Error::DLPack(DLPackError::NotContiguous { .. }))));
    assert_eq!(imp.to_vec::<u8>().unwrap(), vec![5, 7, 9, 11]);
    assert_eq!(imp.host_view::<u8, 2>().unwrap().get([1, 1]), Some(11));
}

// ---- a foreign producer, written as a C library would ------------------------

/// The producer's context: the tensor, its metadata, its data, and a counter
/// of deleter calls the test keeps.
struct Foreign {
    legacy: DLManagedTensor,
    versioned: DLManagedTensorVersioned,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    data: Vec<u8>,
    deletes: Arc<AtomicUsize>,
}

unsafe extern "C" fn foreign_legacy_deleter(t: *mut DLManagedTensor) {
    // SAFETY: `manager_ctx` is the `Box<Foreign>` made by `foreign`.
    let ctx = unsafe { Box::from_raw((*t).manager_ctx as *mut Foreign) };
    ctx.deletes.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn foreign_versioned_deleter(t: *mut DLManagedTensorVersioned) {
    // SAFETY: as above.
    let ctx = unsafe { Box::from_raw((*t).manager_ctx as *mut Foreign) };
    ctx.deletes.fetch_add(1, Ordering::SeqCst);
}

struct Spec {
    dtype: DLDataType,
    device: DLDevice,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    data: Vec<u8>,
    flags: u64,
    major: u32,
}

fn spec_f32(values: &[f32]) -> Spec {
    Spec {
        dtype: f32::DTYPE,
        device: DLDevice { device_type: DLDeviceType::CPU, device_id: 0 },
        shape: vec![values.len() as i64],
        strides: None,
        byte_offset: 0,
        data: values.iter().flat_map(|v| v.to_ne_bytes()).collect(),
        flags: 0,
        major: 1,
    }
}

/// Builds a producer-owned tensor; returns (legacy, versioned) pointers of
/// which the test hands exactly one to the importer.
fn foreign(spec: Spec, deletes: &Arc<AtomicUsize>) -> *mut Foreign {
    let ctx = Box::into_raw(Box::new(Foreign {
        legacy: DLManagedTensor {
            dl_tensor: empty_tensor(),
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(foreign_legacy_deleter),
        },
        versioned: DLManagedTensorVersioned {
            version: DLPackVersion { major: spec.major, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(foreign_versioned_deleter),
            flags: spec.flags,
            dl_tensor: empty_tensor(),
        },
        shape: spec.shape,
        strides: spec.strides,
        data: spec.data,
        deletes: deletes.clone(),
    }));
    // SAFETY: `ctx` is a fresh unique box; the pointers go into its heap vectors.
    unsafe {
        let f = &mut *ctx;
        let t = DLTensor {
            data: f.data.as_mut_ptr() as *mut c_void,
            device: spec.device,
            ndim: f.shape.len() as i32,
            dtype: spec.dtype,
            shape: f.shape.as_mut_ptr(),
            strides: f.strides.as_mut().map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
            byte_offset: spec.byte_offset,
        };
        f.legacy.dl_tensor = t;
        f.versioned.dl_tensor = t;
        f.legacy.manager_ctx = ctx as *mut c_void;
        f.versioned.manager_ctx = ctx as *mut c_void;
    }
    ctx
}

fn empty_tensor() -> DLTensor {
    DLTensor {
        data: std::ptr::null_mut(),
        device: DLDevice { device_type: DLDeviceType::CPU, device_id: 0 },
        ndim: 0,
        dtype: u8::DTYPE,
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

fn import_legacy(spec: Spec, deletes: &Arc<AtomicUsize>) -> gpuport::Result<ImportedTensor> {
    let f = foreign(spec, deletes);
    // SAFETY: a live producer tensor handed over once.
    unsafe { ImportedTensor::from_legacy(std::ptr::addr_of_mut!((*f).legacy)) }
}

fn import_versioned(spec: Spec, deletes: &Arc<AtomicUsize>) -> gpuport::Result<ImportedTensor> {
    let f = foreign(spec, deletes);
    // SAFETY: as above.
    unsafe { ImportedTensor::from_versioned(std::ptr::addr_of_mut!((*f).versioned)) }
}

#[test]
fn a_foreign_tensor_with_null_strides_and_a_byte_offset_is_read_in_place() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut spec = spec_f32(&[9.0, 9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    spec.shape = vec![2, 3];
    spec.byte_offset = 8;
    let imp = import_legacy(spec, &deletes).unwrap();
    assert_eq!(imp.strides(), &[3, 1], "null strides mean compact row-major");
    assert_eq!(imp.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(imp.host_view::<f32, 2>().unwrap().get([1, 0]), Some(4.0));
    assert!(matches!(imp.host_view::<f32, 3>(), Err(Error::DLPack(DLPackError::RankMismatch { .. }))));
    assert!(matches!(imp.as_slice::<f64>(), Err(Error::DLPack(DLPackError::DTypeMismatch { .. }))));
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    drop(imp);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn a_read_only_foreign_tensor_gives_no_mutable_access() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut spec = spec_f32(&[1.0, 2.0]);
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let mut imp = import_versioned(spec, &deletes).unwrap();
    assert!(imp.is_read_only());
    assert!(matches!(imp.as_mut_slice::<f32>(), Err(Error::DLPack(DLPackError::ReadOnly))));
    assert_eq!(imp.as_slice::<f32>().unwrap(), &[1.0, 2.0]);
    drop(imp);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn a_writable_foreign_tensor_is_written_in_place() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut imp = import_versioned(spec_f32(&[1.0, 2.0]), &deletes).unwrap();
    imp.as_mut_slice::<f32>().unwrap()[1] = 7.0;
    assert_eq!(imp.as_slice::<f32>().unwrap(), &[1.0, 7.0]);
}

/// Each rejected tensor's deleter has run exactly once when the error returns.
fn rejected(spec: Spec, versioned: bool) -> DLPackError {
    let deletes = Arc::new(AtomicUsize::new(0));
    let r = if versioned { import_versioned(spec, &deletes) } else { import_legacy(spec, &deletes) };
    assert_eq!(deletes.load(Ordering::SeqCst), 1, "the deleter runs once on rejection");
    match r {
        Err(Error::DLPack(e)) => e,
        other => panic!("expected a DLPack error, got {other:?}"),
    }
}

#[test]
fn unknown_dtypes_are_rejected_with_a_typed_error() {
    let mut spec = spec_f32(&[1.0]);
    spec.dtype = DLDataType { code: DLDataTypeCode(18), bits: 8, lanes: 1 }; // past kDLFloat4_e2m1fn
    let e = rejected(spec, false);
    assert!(matches!(e, DLPackError::UnknownDType { code: 18, .. }));
    assert!(e.to_string().contains("accepted"));
    // kDLFloat with 8 bits is no fp8 type (NumPy exports ml_dtypes' float8_e5m2 so).
    let mut spec = spec_f32(&[1.0]);
    spec.dtype = DLDataType { code: DLDataTypeCode::FLOAT, bits: 8, lanes: 4 };
    assert!(matches!(rejected(spec, true), DLPackError::UnknownDType { code: 2, bits: 8, .. }));
    // kDLFloat8_e4m3fn has 8 bits, not 16.
    let mut spec = spec_f32(&[1.0]);
    spec.dtype = DLDataType { code: DLDataTypeCode(10), bits: 16, lanes: 1 };
    assert!(matches!(rejected(spec, true), DLPackError::UnknownDType { code: 10, bits: 16, .. }));
    let mut spec = spec_f32(&[1.0]);
    spec.dtype = DLDataType { code: DLDataTypeCode::FLOAT, bits: 32, lanes: 0 };
    assert!(matches!(rejected(spec, true), DLPackError::UnknownDType { lanes: 0, .. }));
}

#[test]
fn unsupported_devices_are_rejected_with_a_typed_error() {
    let mut spec = spec_f32(&[1.0]);
    spec.device = DLDevice { device_type: DLDeviceType::OPENCL, device_id: 0 };
    assert!(matches!(rejected(spec, false), DLPackError::UnsupportedDevice { device_type: 4, .. }));
    let mut spec = spec_f32(&[1.0]);
    spec.device = DLDevice { device_type: DLDeviceType(99), device_id: 1 };
    assert!(matches!(rejected(spec, true), DLPackError::UnsupportedDevice { device_type: 99, .. }));
}

#[test]
fn negative_and_overflowing_shapes_are_rejected() {
    let mut spec = spec_f32(&[1.0, 2.0]);
    spec.shape = vec![2, -1];
    assert!(matches!(rejected(spec, false), DLPackError::NegativeExtent { axis: 1, value: -1 }));
    let mut spec = spec_f32(&[1.0]);
    spec.shape = vec![i64::MAX, 4];
    assert!(matches!(rejected(spec, true), DLPackError::Overflow { .. }));
    let mut spec = spec_f32(&[1.0]);
    spec.shape = vec![2, 2];
    spec.strides = Some(vec![i64::MAX / 2, 1]);
    assert!(matches!(rejected(spec, false), DLPackError::Overflow { .. }));
}

#[test]
fn a_newer_major_version_is_rejected_after_calling_the_deleter() {
    let mut spec = spec_f32(&[1.0]);
    spec.major = 2;
    assert!(matches!(rejected(spec, true), DLPackError::UnsupportedVersion { major: 2, .. }));
}

#[test]
fn bools_that_are_not_zero_or_one_are_refused() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let spec = Spec { dtype: bool::DTYPE, shape: vec![3], data: vec![0, 1, 2, 0], ..spec_f32(&[]) };
    let imp = import_legacy(spec, &deletes).unwrap();
    assert!(matches!(imp.as_slice::<bool>(), Err(Error::DLPack(DLPackError::InvalidValues { .. }))));
    assert!(matches!(imp.to_vec::<bool>(), Err(Error::DLPack(DLPackError::InvalidValues { .. }))));
    assert!(imp.host_view::<bool, 1>().is_err());
}

#[test]
fn empty_foreign_tensors_need_no_data() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let spec = Spec { shape: vec![0, 5], data: vec![], ..spec_f32(&[]) };
    let imp = import_legacy(spec, &deletes).unwrap();
    assert!(imp.is_empty());
    assert_eq!(imp.as_slice::<f32>().unwrap(), &[] as &[f32]);
    assert_eq!(imp.host_view::<f32, 2>().unwrap().to_vec(), Vec::<f32>::new());
}

#[test]
fn the_device_type_follows_where_the_memory_is() {
    use BackendKind::*;
    use MemoryKind::*;
    let t = |b, k, o| dl_device(b, k, o);
    assert_eq!(t(BackendKind::Host, Device, 0).device_type, DLDeviceType::CPU);
    assert_eq!(t(Cuda, Device, 1), DLDevice { device_type: DLDeviceType::CUDA, device_id: 1 });
    assert_eq!(t(Cuda, Pinned, 1), DLDevice { device_type: DLDeviceType::CUDA_HOST, device_id: 0 });
    assert_eq!(t(Cuda, Managed, 1), DLDevice { device_type: DLDeviceType::CUDA_MANAGED, device_id: 0 });
    assert_eq!(t(Rocm, Device, 2), DLDevice { device_type: DLDeviceType::ROCM, device_id: 2 });
    assert_eq!(t(Rocm, Pinned, 2), DLDevice { device_type: DLDeviceType::ROCM_HOST, device_id: 0 });
    assert_eq!(t(Cuda, MemoryKind::Host, 0).device_type, DLDeviceType::CPU);
    assert_eq!(DLDeviceType::CUDA_MANAGED.0, 13);
    assert_eq!(DLDeviceType::ROCM_HOST.0, 11);
    assert_eq!(DLDeviceType::CUDA_HOST.0, 3);
}
