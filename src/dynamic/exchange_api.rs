//! DLPack 1.3's C exchange API, the part that is the same for every
//! backend and every binding: what gpuport's `DLPackExchangeAPI` table does
//! as a producer, and what a consumer of another library's table must do
//! about streams. The table's types are in [`crate::dlpack::ffi`]; a binding
//! (the Python package) fills the table with `extern "C"` functions that
//! convert its objects and call these.
//!
//! Producer (the header's names in backticks):
//! - `current_work_stream`: [`current_work_stream`], the stream gpuport
//!   works on for a device when no stream is named: the device's default
//!   stream (every gpuport call given `stream=None` uses it). Its handle is
//!   NULL on CUDA (the legacy default stream) and ROCm; host memory has none.
//! - `managed_tensor_from_py_object_no_sync`: [`export_no_sync`]. "No
//!   sync" means the consumer is not synchronized with; the export still
//!   keeps gpuport's promise that work on the current work stream sees the
//!   data: the array's pending work (a kernel or copy on another stream) is
//!   ordered before that stream through an event, and for host memory the
//!   host waits for it, as `__dlpack__` does for a consumer without a stream.
//! - `managed_tensor_allocator`: [`allocate`], a zero-filled array made
//!   through [`new_owned`] and exported whole.
//!
//! Consumer: after taking a tensor through another library's table, work on
//! gpuport's stream must come after the producer's work on its current
//! stream: [`order_after_producer`].
//!
//! ```
//! use gpuport::dlpack::{DLDevice, DLDeviceType};
//! use gpuport::dynamic::exchange_api::{allocate, current_work_stream};
//! use gpuport::dynamic::{new_owned, AnyArray, DType};
//! let cpu = DLDevice { device_type: DLDeviceType::CPU, device_id: 0 };
//! assert_eq!(current_work_stream(cpu)?, 0); // host memory has no stream
//! let mut shape = [2i64, 3];
//! let prototype = gpuport::dlpack::DLTensor {
//!     data: std::ptr::null_mut(),
//!     device: cpu,
//!     ndim: 2,
//!     dtype: DType::Float32.dlpack(),
//!     shape: shape.as_mut_ptr(),
//!     strides: std::ptr::null_mut(),
//!     byte_offset: 0,
//! };
//! // SAFETY: `prototype.shape` points to `ndim` extents.
//! let t = unsafe { allocate(&prototype) }?.into_versioned();
//! assert_eq!(t.dl_tensor().ndim, 2);
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::sync::Arc;

use super::array::{device_for_dl, natural_of, new_owned, rank_error, AnyArray, DynArray, Shape};
use super::exchange::Export;
use super::imported::ImportedArray;
use super::stream::AnyStream;
use crate::array::dtype::{DType, MAX_RANK};
use crate::array::{Location, Transfer};
use crate::backend::registry::AnyDevice;
#[cfg(any(feature = "cuda", feature = "rocm"))]
use crate::backend::Device;
use crate::dlpack::ffi::DLPACK_MINOR_VERSION;
use crate::dlpack::{DLDevice, DLDeviceType, DLPackError, DLTensor};
use crate::error::Result;

/// The gpuport device whose streams order work on memory of `dl`: `None`
/// for host memory (plain, or pinned by a GPU runtime), which no stream
/// orders.
fn stream_device(dl: DLDevice) -> Result<Option<AnyDevice>> {
    match dl.device_type {
        t if is_ordered_by_streams(t) => device_for_dl(dl).map(Some),
        t if crate::dlpack::is_host_memory(t) => Ok(None),
        other => Err(DLPackError::UnsupportedDevice { device_type: other.0, device_id: dl.device_id }.into()),
    }
}

/// Whether memory of DLPack device type `t` is ordered by a GPU's streams:
/// CUDA device and managed memory, ROCm device memory.
pub fn is_ordered_by_streams(t: DLDeviceType) -> bool {
    matches!(t, DLDeviceType::CUDA | DLDeviceType::CUDA_MANAGED | DLDeviceType::ROCM)
}

/// `current_work_stream` of gpuport's table: the native handle of the
/// stream gpuport works on for memory of `dl` when no stream is named (the
/// device's default stream; 0, which is NULL, on CUDA and ROCm), or 0 for
/// host memory, which has none.
///
/// Errors: a device type gpuport does not know, or a device it cannot open
/// (its backend did not load, or there is no such ordinal).
pub fn current_work_stream(dl: DLDevice) -> Result<usize> {
    // The default stream's handle, read in place (no stream object is made).
    Ok(match stream_device(dl)? {
        None | Some(AnyDevice::Host(_)) => 0,
        #[cfg(feature = "cuda")]
        Some(AnyDevice::Cuda(d)) => d.default_stream().address(),
        #[cfg(feature = "rocm")]
        Some(AnyDevice::Rocm(d)) => d.default_stream().address(),
    })
}

/// Makes work on the current work stream of `a`'s copy at `loc` see the
/// array's pending work: an event wait for device memory, a host wait for
/// host memory (which no stream orders). Nothing when that work is done.
fn hand_over(a: &mut dyn DynArray, loc: Location) -> Result<()> {
    if !a.transfer_pending()? {
        return Ok(());
    }
    if is_ordered_by_streams(a.dl_device(loc).device_type) {
        a.order_on(&AnyStream::default_for(&a.device()))
    } else {
        a.synchronize()
    }
}

/// `managed_tensor_from_py_object_no_sync` of gpuport's table: exports the
/// copy `__dlpack__` would export with no arguments (the device copy of a
/// GPU array when it is current, else the current copy) as a versioned
/// tensor, with no synchronization of the consumer: the array's pending
/// work is handed to the current work stream ([`current_work_stream`]) and
/// the consumer is expected to work on that stream. The exported copy
/// becomes the only current one, since the consumer may write it.
///
/// Errors: the array is locked by a `get_dlpack` block (as `__dlpack__`
/// without the block's id), or a backend error ordering the pending work.
pub fn export_no_sync(array: &mut AnyArray) -> Result<Export> {
    export_no_sync_then(array, |e| e)
}

/// [`export_no_sync`], with the export handed to `then` (which packs it,
/// typically): the export (about 230 bytes) is built in place as `then`'s
/// argument instead of being moved out through a `Result`.
#[inline]
pub fn export_no_sync_then<R>(array: &mut AnyArray, then: impl FnOnce(Export) -> R) -> Result<R> {
    match array {
        AnyArray::Owned(a) => {
            let loc = natural_of(a.as_ref());
            hand_over(a.as_mut(), loc)?;
            let (data, keep) = a.parts(loc, None)?;
            a.mark_written(loc, None)?;
            Ok(then(Export {
                data,
                device: a.dl_device(loc),
                dtype: a.dtype(),
                shape: a.shape(),
                strides: None,
                keep,
                versioned_minor: Some(DLPACK_MINOR_VERSION),
                read_only: false,
                copied: false,
            }))
        }
        AnyArray::Imported(f) => {
            f.check_lock("__dlpack_c_exchange_api__", None)?;
            Ok(then(Export::of_imported(f, Some(DLPACK_MINOR_VERSION), false)))
        }
    }
}

/// `from_dlpack` of one of gpuport's own arrays through gpuport's own
/// table, without the tensor in between: the export that
/// `managed_tensor_from_py_object_no_sync` makes ([`export_no_sync_then`],
/// handed to `pack` first, which may count it or add an owner), taken
/// directly as the import that `managed_tensor_to_py_object_no_sync` would
/// make of it. The ownership and ordering rules are the table's: the
/// import keeps the export's owner alive; the array's pending work is
/// handed to the current work stream, and `ours` (`None`: that same
/// stream, the device's default stream) then waits for it
/// ([`order_after_producer`]).
///
/// Errors: those of [`export_no_sync`] (a `get_dlpack` block's lock), and
/// a backend error ordering `ours`.
pub fn import_own(
    array: &mut AnyArray,
    ours: Option<&AnyStream>,
    pack: impl FnOnce(&mut Export),
) -> Result<ImportedArray> {
    let owner_device = array.device();
    let import = export_no_sync_then(array, |mut e| {
        pack(&mut e);
        // The import's device is that of the copy exported, as through the
        // protocol: a GPU array whose host copy is current exports host memory.
        let device = if crate::dlpack::is_host_memory(e.device.device_type) {
            super::array::device_for_dl(e.device)?
        } else {
            owner_device
        };
        Ok::<_, crate::Error>(ImportedArray::from_export(e, device))
    })??;
    if let Some(ours) = ours {
        let dl = import.dl();
        if is_ordered_by_streams(dl.device_type) {
            let theirs = current_work_stream(dl)?;
            // SAFETY: `theirs` is gpuport's current work stream of this
            // device (its default stream's handle), alive for the process.
            unsafe { order_after_producer(dl, ours, theirs) }?;
        }
    }
    Ok(import)
}

/// What keeps an allocation alive: its memory, and the array itself (so
/// that the copy that fills the device copy, enqueued on the work stream,
/// is not waited for by the array's drop before the consumer has it).
struct Allocation {
    _memory: Arc<dyn Send + Sync>,
    _array: Box<dyn DynArray>,
}

/// `managed_tensor_allocator` of gpuport's table: a zero-filled tensor of
/// the `prototype`'s dtype, shape and device (its data, strides and byte
/// offset are not read), made through [`new_owned`]: `kDLCPU` memory of
/// the host backend, or the device copy of an array on `kDLCUDA` or
/// `kDLROCM` device `device_id`. Filling the device copy is enqueued on the
/// current work stream, as the consumer's own work will be.
///
/// Errors: a null prototype, or one whose `shape` is null while `ndim > 0`;
/// `ndim` outside 0..=8, a negative extent, a dtype gpuport cannot hold, a
/// size beyond the address space; another device type; a device that
/// cannot be opened; out of memory.
///
/// # Safety
/// `prototype` is null or points to a readable `DLTensor` whose `shape`,
/// if not null, points to `ndim` readable `i64`s.
pub unsafe fn allocate(prototype: *const DLTensor) -> Result<Export> {
    // SAFETY: per the contract, null or a readable DLTensor.
    let p = unsafe { prototype.as_ref() }.ok_or(DLPackError::NullPointer { what: "prototype DLTensor" })?;
    let ndim = usize::try_from(p.ndim)
        .map_err(|_| DLPackError::RankMismatch { expected: "a non-negative value".into(), found: p.ndim })?;
    if ndim > MAX_RANK {
        return Err(rank_error(ndim));
    }
    let extents: &[i64] = if ndim == 0 {
        &[]
    } else if p.shape.is_null() {
        return Err(DLPackError::NullPointer { what: "prototype shape" }.into());
    } else {
        // SAFETY: per the contract, `shape` points to `ndim` readable i64s.
        unsafe { std::slice::from_raw_parts(p.shape, ndim) }
    };
    let shape = extents
        .iter()
        .enumerate()
        .map(|(axis, &value)| usize::try_from(value).map_err(|_| DLPackError::NegativeExtent { axis, value }))
        .collect::<std::result::Result<Vec<usize>, _>>()?;
    let dtype = DType::from_dlpack(p.dtype).ok_or(DLPackError::UnknownDType {
        code: p.dtype.code.0,
        bits: p.dtype.bits,
        lanes: p.dtype.lanes,
    })?;
    // The bytes must fit DLPack's signed 64-bit extents and strides.
    let fits = shape
        .iter()
        .try_fold(dtype.itemsize().max(1) as u64, |acc, &e| acc.checked_mul((e as u64).max(1)))
        .is_some_and(|b| b <= i64::MAX as u64);
    if !fits {
        return Err(DLPackError::Overflow { shape: extents.to_vec(), strides: Vec::new(), byte_offset: 0 }.into());
    }
    let loc = match p.device.device_type {
        DLDeviceType::CPU => Location::Host,
        DLDeviceType::CUDA | DLDeviceType::ROCM => Location::Device,
        other => {
            return Err(DLPackError::Refused {
                reason: format!(
                    "gpuport's managed_tensor_allocator makes kDLCPU, kDLCUDA and kDLROCM tensors; {} (device type {}) was asked for",
                    other.name().unwrap_or("an unknown device type"),
                    other.0
                ),
            }
            .into());
        }
    };
    let dev = device_for_dl(p.device)?;
    let mut a = new_owned(&dev, dtype, &shape)?;
    if loc == Location::Device {
        a.move_to(Location::Device, &AnyStream::default_for(&dev), Transfer::Async, None)?;
    }
    let device = a.dl_device(loc);
    if device != p.device {
        return Err(DLPackError::Refused {
            reason: format!(
                "gpuport's managed_tensor_allocator was asked for DLPack device {:?} but {} gives memory on {:?}",
                (p.device.device_type.0, p.device.device_id),
                dev.info().spec(),
                (device.device_type.0, device.device_id)
            ),
        }
        .into());
    }
    let (data, memory) = a.parts(loc, None)?;
    a.mark_written(loc, None)?;
    Ok(Export {
        data,
        device,
        dtype,
        shape: Shape::from_vec(shape),
        strides: None,
        keep: Arc::new(Allocation { _memory: memory, _array: a }),
        versioned_minor: Some(DLPACK_MINOR_VERSION),
        read_only: false,
        copied: false,
    })
}

/// Consumer side: makes `ours` wait for the work a producer has on its
/// current work stream `theirs` (the native handle its `current_work_stream`
/// gave) before the memory of `dl` is used on `ours`. Nothing to do for
/// host memory or when both are the same stream; otherwise an event is
/// recorded on the producer's stream and waited for on ours (no host wait).
///
/// # Safety
/// `theirs` is 0, a special handle of the vendor, or a live stream of the
/// device of `dl`, as a producer's `current_work_stream` reports it.
pub unsafe fn order_after_producer(dl: DLDevice, ours: &AnyStream, theirs: usize) -> Result<()> {
    if stream_device(dl)?.is_none() || theirs == ours.handle() {
        return Ok(());
    }
    // SAFETY: forwarded contract: the producer's live stream of this device.
    let producer = unsafe { AnyStream::borrow(&ours.device(), theirs) }?;
    ours.wait(&producer.record()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlpack::{DLDataType, DLDataTypeCode};

    fn prototype(device: DLDevice, shape: &mut [i64], dtype: DLDataType) -> DLTensor {
        DLTensor {
            data: std::ptr::null_mut(),
            device,
            ndim: i32::try_from(shape.len()).expect("a test shape has few dimensions"),
            dtype,
            shape: if shape.is_empty() { std::ptr::null_mut() } else { shape.as_mut_ptr() },
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }

    const CPU: DLDevice = DLDevice { device_type: DLDeviceType::CPU, device_id: 0 };

    #[test]
    fn host_memory_has_no_work_stream_and_unknown_devices_are_errors() {
        assert_eq!(current_work_stream(CPU).unwrap(), 0);
        let pinned = DLDevice { device_type: DLDeviceType::CUDA_HOST, device_id: 0 };
        assert_eq!(current_work_stream(pinned).unwrap(), 0);
        let vulkan = DLDevice { device_type: DLDeviceType::VULKAN, device_id: 0 };
        let e = current_work_stream(vulkan).unwrap_err();
        assert!(e.to_string().contains("device type 7"), "{e}");
    }

    #[test]
    fn the_allocator_makes_a_zeroed_tensor_of_the_prototype() {
        let mut shape = [2i64, 3, 4];
        let p = prototype(CPU, &mut shape, DType::Int16.dlpack());
        // SAFETY: the prototype's shape points to its 3 extents.
        let e = unsafe { allocate(&p) }.unwrap();
        let t = e.into_versioned();
        let dl = t.dl_tensor();
        assert_eq!((dl.ndim, dl.device, dl.dtype), (3, CPU, DType::Int16.dlpack()));
        // SAFETY: a live export of 3 dimensions with strides.
        let (s, st) = unsafe { (std::slice::from_raw_parts(dl.shape, 3), std::slice::from_raw_parts(dl.strides, 3)) };
        assert_eq!((s, st), (&[2, 3, 4][..], &[12, 4, 1][..]));
        // SAFETY: 24 int16 of host memory the tensor keeps alive.
        let v = unsafe { std::slice::from_raw_parts(dl.data.cast::<i16>(), 24) };
        assert!(v.iter().all(|&x| x == 0));
    }

    #[test]
    fn the_allocator_refuses_what_it_cannot_make() {
        let f32 = DType::Float32.dlpack();
        let check = |mut shape: Vec<i64>, device: DLDevice, dtype: DLDataType, says: &str| {
            let p = prototype(device, &mut shape, dtype);
            // SAFETY: the prototype's shape points to its extents.
            let e = unsafe { allocate(&p) }.map(drop).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        };
        check(vec![-1], CPU, f32, "extent -1 on axis 0");
        check(vec![1; 9], CPU, f32, "9 dimensions");
        check(vec![2], CPU, DLDataType { code: DLDataTypeCode(99), bits: 8, lanes: 1 }, "code 99");
        check(vec![i64::MAX, 2], CPU, f32, "overflows");
        let managed = DLDevice { device_type: DLDeviceType::CUDA_MANAGED, device_id: 0 };
        check(vec![2], managed, f32, "kDLCUDAManaged");
        // SAFETY: null is allowed and refused.
        let e = unsafe { allocate(std::ptr::null()) }.map(drop).unwrap_err();
        assert!(e.to_string().contains("null prototype"), "{e}");
        let mut p = prototype(CPU, &mut [], f32);
        p.ndim = 1;
        // SAFETY: a null shape with ndim 1 is refused before it is read.
        let e = unsafe { allocate(&p) }.map(drop).unwrap_err();
        assert!(e.to_string().contains("null prototype shape"), "{e}");
    }

    #[test]
    fn a_no_sync_export_waits_for_pending_host_backend_work() {
        let dev = crate::open("host").unwrap();
        let mut a = AnyArray::Owned(new_owned(&dev, DType::Float32, &[4]).unwrap());
        a.add_index(&AnyStream::default_for(&dev), None).unwrap();
        let t = export_no_sync(&mut a).unwrap().into_versioned();
        assert!(!a.transfer_pending().unwrap());
        // SAFETY: 4 floats of host memory the tensor keeps alive.
        let v = unsafe { std::slice::from_raw_parts(t.dl_tensor().data.cast::<f32>(), 4) };
        assert_eq!(v, [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(t.flags(), 0);
    }

    #[test]
    fn ordering_after_a_producer_is_nothing_for_host_memory() {
        let dev = crate::open("host").unwrap();
        // SAFETY: host memory never reads the handle.
        unsafe { order_after_producer(CPU, &AnyStream::default_for(&dev), 1234) }.unwrap();
    }
}
