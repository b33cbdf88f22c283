//! DLPack exchange of an [`AnyArray`]: export negotiation as `__dlpack__`
//! receives it (the consumer's stream, `max_version`, `dl_device`, `copy`),
//! and the stream a consumer passes to a producer's `__dlpack__`.
//!
//! A writable export hands out the address of one copy (host or device) and
//! makes that copy the only current one, so whatever the consumer writes
//! there is what the array's next read sees (the other copy is refreshed
//! from it). Read-only exports leave both copies current.
//!
//! Streams follow the array API standard, per device type:
//! - CUDA (`kDLCUDA`, `kDLCUDAManaged`): `None` is the legacy default stream
//!   (1), 1 and 2 are the legacy and per-thread default streams, `-1` asks
//!   for no synchronization, and 0 is refused as ambiguous.
//! - ROCm (`kDLROCM`): `None` and 0 are the default (null) stream, there are
//!   no 1/2 sentinels, and `-1` asks for no synchronization.
//! - Host memory: `None` or `-1`.
//!
//! ```
//! use gpuport::dynamic::exchange::{export, ExportRequest};
//! use gpuport::dynamic::{new_owned, AnyArray, DType};
//! let dev = gpuport::open("host")?;
//! let mut a = AnyArray::Owned(new_owned(&dev, DType::Int32, &[4])?);
//! // SAFETY: no stream is named.
//! let e = unsafe { export(&mut a, ExportRequest { max_version: Some((1, 1)), ..Default::default() }) }?;
//! assert_eq!(e.shape()[..], [4]);
//! let tensor = e.into_versioned();
//! assert_eq!(tensor.dl_tensor().ndim, 1);
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::ffi::c_void;
use std::sync::Arc;

use super::array::{natural_of, AnyArray, Shape, Strides};
pub use super::export::Export;
use super::stream::AnyStream;
use crate::array::dtype::DType;
use crate::array::element::dtype_is_subbyte;
use crate::array::{Location, LockId, Transfer};
use crate::backend::registry::AnyDevice;
use crate::dlpack::export::Dims;
use crate::dlpack::ffi::{DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MINOR_VERSION};
use crate::dlpack::{is_host_accessible, DLDevice, DLDeviceType, DLPackError, ExportSource};
use crate::dlpack::{ManagedTensor, ManagedTensorVersioned};
use crate::error::{Error, Result};

/// A DLPack export request, as `__dlpack__` receives it.
#[derive(Debug, Clone, Default)]
pub struct ExportRequest {
    /// The consumer's stream, as the standard's integer (see the module docs).
    pub stream: Option<i64>,
    /// The highest DLPack version the consumer understands; `None` for a
    /// consumer older than DLPack 1.0 (a legacy capsule).
    pub max_version: Option<(u32, u32)>,
    /// The `(device_type, device_id)` the consumer wants the data on.
    pub dl_device: Option<(i32, i32)>,
    /// `Some(true)`: always copy; `Some(false)`: never copy; `None`: copy only if needed.
    pub copy: Option<bool>,
    /// The consumer will only read (the export is flagged read-only).
    pub read_only: bool,
    /// The lock id of the `get_dlpack` block the request comes from.
    pub lock: Option<LockId>,
    /// The copy to export (host or device), when the caller chose one.
    pub prefer: Option<Location>,
}

impl Export {
    /// An imported array's memory, as it is (no copy, no move): what both the
    /// Python protocol and the C exchange table export for one.
    pub(super) fn of_imported(
        f: &super::imported::ImportedArray,
        versioned_minor: Option<u32>,
        read_only: bool,
    ) -> Self {
        Export {
            data: f.data(),
            device: f.dl(),
            dtype: f.dtype(),
            shape: f.shape().clone(),
            strides: Some(f.strides().clone()),
            keep: f.owner(),
            versioned_minor,
            read_only: read_only || f.is_read_only(),
            copied: false,
        }
    }

    /// Address of the element at index 0.
    pub fn data(&self) -> u64 {
        self.data
    }
    /// Where the memory is.
    pub fn device(&self) -> DLDevice {
        self.device
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Extents.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    /// Strides in elements; `None` for compact row-major.
    pub fn strides(&self) -> Option<&Strides> {
        self.strides.as_ref()
    }
    /// `Some(minor)` for a versioned tensor of version `1.minor`; `None` for a legacy one.
    pub fn versioned_minor(&self) -> Option<u32> {
        self.versioned_minor
    }
    /// Whether the export is flagged read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
    /// Whether the export is a copy (DLPack's `IS_COPIED` flag).
    pub fn is_copied(&self) -> bool {
        self.copied
    }

    /// Packages the export for a consumer that understands DLPack up to
    /// `max_version` (`None`: older than 1.0, a legacy tensor). A read-only
    /// export needs a versioned tensor (a legacy one has no flag to say so).
    pub fn set_max_version(&mut self, max_version: Option<(u32, u32)>) -> Result<()> {
        let minor = match max_version {
            Some((major, minor)) if major >= 1 => Some(if major > 1 { DLPACK_MINOR_VERSION } else { minor }),
            _ => None,
        };
        if minor.is_none() && self.read_only {
            return Err(refused(
                "a read-only export needs a versioned DLPack capsule; pass max_version >= (1, 0)".into(),
            ));
        }
        let since = self.dtype.dlpack().code.since_minor();
        self.versioned_minor = minor.map(|m| m.max(since).min(DLPACK_MINOR_VERSION));
        Ok(())
    }

    /// Describes the same memory as elements of `dtype`, whose size is
    /// the export's (the bytes of a one-byte dtype as `uint8`, say).
    pub fn view_as(&mut self, dtype: DType) -> Result<()> {
        if dtype.itemsize() != self.dtype.itemsize() {
            return Err(Error::InvalidArgument {
                name: "dtype",
                reason: format!(
                    "{} is {} bytes an element; a view of {} needs a dtype of {} bytes",
                    dtype.name(),
                    dtype.itemsize(),
                    self.dtype.name(),
                    self.dtype.itemsize()
                ),
            });
        }
        self.dtype = dtype;
        Ok(())
    }

    /// Keeps `also` alive as long as the export's memory: dropped when the
    /// consumer releases the tensor (a counter of live exports, say).
    pub fn keep_also(&mut self, also: Arc<dyn Send + Sync>) {
        let keep = std::mem::replace(&mut self.keep, Arc::new(()));
        self.keep = Arc::new((keep, also));
    }
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("data", &format_args!("{:#x}", self.data))
            .field("device", &self.device)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("versioned_minor", &self.versioned_minor)
            .finish()
    }
}

/// `(device_type, device_id)` of a DLPack device, as `__dlpack_device__` returns it.
pub fn dl_pair(d: DLDevice) -> (i32, i32) {
    (i32::try_from(d.device_type.0).unwrap_or(i32::MAX), d.device_id)
}

/// Whether `t`, a device type as `__dlpack__`'s arguments carry it, is `ty`.
fn is_type(t: i32, ty: DLDeviceType) -> bool {
    u32::try_from(t) == Ok(ty.0)
}

/// Whether DLPack device type `t` is CUDA device memory (streams with 1/2 sentinels).
pub fn is_cuda_type(t: i32) -> bool {
    is_type(t, DLDeviceType::CUDA) || is_type(t, DLDeviceType::CUDA_MANAGED)
}

fn bad_stream(reason: String) -> Error {
    DLPackError::BadStream { reason }.into()
}

fn refused(reason: String) -> Error {
    DLPackError::Refused { reason }.into()
}

/// The consumer stream a `__dlpack__(stream=...)` names for memory of
/// DLPack device type `dl_type` on `dev`: `None` for no synchronization.
///
/// # Safety
/// A `stream` that is not a sentinel (see the module docs) is a live stream
/// of `dev`, which stays alive while the returned stream is used: the
/// DLPack standard asks it of the consumer that passes it.
pub unsafe fn consumer_stream(dev: &AnyDevice, dl_type: i32, stream: Option<i64>) -> Result<Option<AnyStream>> {
    let borrow = |h: i64| -> Result<Option<AnyStream>> {
        let h = usize::try_from(h).map_err(|_| bad_stream(format!("stream={h} is not a stream handle")))?;
        // SAFETY: a sentinel of the vendor, or a live stream of `dev`
        // (this function's contract).
        unsafe { AnyStream::borrow(dev, h) }.map(Some)
    };
    if is_cuda_type(dl_type) {
        match stream {
            // The standard: None means the legacy default stream on CUDA.
            None => borrow(1),
            Some(-1) => Ok(None),
            Some(0) => Err(bad_stream(
                "stream=0 is ambiguous on CUDA and disallowed by the DLPack standard; use 1 (legacy default), 2 (per-thread default), a stream handle, or -1".into(),
            )),
            Some(h) if h < -1 => Err(bad_stream(format!("stream={h} is not a CUDA stream"))),
            Some(h) => borrow(h),
        }
    } else if is_type(dl_type, DLDeviceType::ROCM) {
        match stream {
            // ROCm has no sentinels: None and 0 are the default stream.
            None | Some(0) => borrow(0),
            Some(-1) => Ok(None),
            Some(h) if h < -1 => Err(bad_stream(format!("stream={h} is not a ROCm stream"))),
            Some(h) => borrow(h),
        }
    } else {
        match stream {
            None | Some(-1) => Ok(None),
            Some(h) => Err(bad_stream(format!(
                "stream={h} was given for memory on DLPack device type {dl_type}; host memory takes stream=None"
            ))),
        }
    }
}

/// The `stream` a consumer working on `ours` passes to a producer's
/// `__dlpack__` for memory of DLPack device type `dl_type`.
pub fn stream_for_producer(dl_type: i32, ours: &AnyStream) -> Option<i64> {
    let handle = i64::try_from(ours.handle()).unwrap_or(-1);
    if is_cuda_type(dl_type) {
        // Our default stream is the legacy (null) stream, which DLPack spells 1.
        Some(if handle == 0 { 1 } else { handle })
    } else if is_type(dl_type, DLDeviceType::ROCM) {
        Some(handle)
    } else {
        None
    }
}

/// Whether DLPack device type `t` is GPU memory that streams order (CUDA, ROCm).
fn takes_streams(t: i32) -> bool {
    is_cuda_type(t) || is_type(t, DLDeviceType::ROCM)
}

/// The device whose stream a consumer passes to a producer's `__dlpack__`
/// for memory at `dl` (`__dlpack_device__`'s pair): the device of memory
/// that streams order (CUDA device or managed memory, ROCm memory; the
/// stream is then [`stream_for_producer`]'s), `None` where no stream is
/// passed (host memory). Errors: the device cannot be opened.
pub fn consumer_device_for((device_type, device_id): (i32, i32)) -> Result<Option<AnyDevice>> {
    if !takes_streams(device_type) {
        return Ok(None);
    }
    // `takes_streams` holds for non-negative types only.
    let device_type = DLDeviceType(u32::try_from(device_type).unwrap_or_default());
    super::array::device_for_dl(DLDevice { device_type, device_id }).map(Some)
}

/// Where to export from for a consumer that passed `stream`, given the
/// array's natural copy `loc`. A stream (other than -1) names GPU memory
/// only, so such a consumer was told a GPU device by `__dlpack_device__`:
/// if another thread moved the array to the host since, the device copy is
/// brought back (waited for) and exported, rather than the request refused.
fn streamed_location(
    a: &mut Box<dyn super::array::DynArray>,
    loc: Location,
    stream: Option<i64>,
    lock: Option<LockId>,
) -> Result<Location> {
    let gpu = |l: Location| takes_streams(dl_pair(a.dl_device(l)).0);
    if matches!(stream, None | Some(-1)) || gpu(loc) || !gpu(Location::Device) {
        return Ok(loc);
    }
    if !a.residency().includes(Location::Device) {
        let s = AnyStream::default_for(&a.device());
        a.move_to(Location::Device, &s, Transfer::Sync, lock)?;
    }
    Ok(Location::Device)
}

fn other(loc: Location) -> Location {
    match loc {
        Location::Host => Location::Device,
        Location::Device => Location::Host,
    }
}

/// Serves a `__dlpack__` request on `array`: picks the copy, makes the
/// consumer's stream wait for pending work (or the host, for host memory),
/// copies where asked or needed, and marks the exported copy written unless
/// the export is read-only.
///
/// # Safety
/// As for [`consumer_stream`]: `req.stream`, unless a sentinel, is a live
/// stream of the array's device.
pub unsafe fn export(array: &mut AnyArray, req: ExportRequest) -> Result<Export> {
    let versioned_minor = match req.max_version {
        Some((major, minor)) if major >= 1 => Some(if major > 1 { DLPACK_MINOR_VERSION } else { minor }),
        _ => None,
    };
    let dtype = array.dtype().dlpack();
    if versioned_minor.is_none() && dtype_is_subbyte(dtype) {
        // Refused before anything moves or is marked written.
        return ExportSource::refuse_legacy(dtype);
    }
    let lock = req.lock;
    let mut e = match array {
        AnyArray::Owned(a) => {
            if let Some(p) = req.prefer.filter(|&p| !a.residency().includes(p)) {
                // The copy get_dlpack(device_type) named went stale since (another call moved or wrote the array).
                let s = AnyStream::default_for(&a.device());
                a.move_to(p, &s, Transfer::Sync, lock)?;
            }
            let mut loc = req.prefer.unwrap_or_else(|| natural_of(a.as_ref()));
            if req.prefer.is_none() && req.dl_device.is_none() {
                loc = streamed_location(a, loc, req.stream, lock)?;
            }
            let mut to_host = false;
            if let Some(want) = req.dl_device {
                if want != dl_pair(a.dl_device(loc)) {
                    if a.residency().includes(other(loc)) && dl_pair(a.dl_device(other(loc))) == want {
                        loc = other(loc);
                    } else if is_type(want.0, DLDeviceType::CPU) {
                        if req.copy == Some(false) {
                            return Err(refused(format!(
                                "dl_device={want:?} needs a copy to host memory, but copy=False; the array's current copy is on {}",
                                a.device().info().spec()
                            )));
                        }
                        to_host = true;
                    } else {
                        return Err(refused(format!(
                            "cannot export to dl_device={want:?}: the array lives on {} (DLPack device {:?})",
                            a.device().info().spec(),
                            dl_pair(a.dl_device(loc))
                        )));
                    }
                }
            }
            let copied = to_host || req.copy == Some(true);
            let final_dl =
                if to_host { DLDevice { device_type: DLDeviceType::CPU, device_id: 0 } } else { a.dl_device(loc) };
            // SAFETY: `req.stream` is a sentinel or a live stream of the device (this function's contract).
            let consumer = unsafe { consumer_stream(&a.device(), dl_pair(final_dl).0, req.stream) }?;
            let (data, keep, device) = if copied {
                let mut c = a.try_clone(lock)?;
                let target = if to_host { Location::Host } else { loc };
                c.move_to(target, &AnyStream::default_for(&c.device()), Transfer::Sync, None)?;
                let (p, k) = c.parts(target, None)?;
                (p, k, c.dl_device(target))
            } else {
                if let Some(s) = &consumer {
                    a.order_on(s)?;
                    if req.stream.is_none() && is_host_accessible(final_dl.device_type) {
                        // Managed memory: a host consumer (NumPy) passes no
                        // stream and reads at once, so the host waits too.
                        a.synchronize()?;
                    }
                } else if is_host_accessible(final_dl.device_type) && req.stream != Some(-1) {
                    // The host itself is the consumer (host-backend device
                    // copies, managed memory): wait for pending kernels.
                    a.synchronize()?;
                }
                let (p, k) = a.parts(loc, lock)?;
                if !req.read_only {
                    // The consumer may write: the other copy is stale from now on.
                    a.mark_written(loc, lock)?;
                }
                (p, k, a.dl_device(loc))
            };
            Export {
                data,
                device,
                dtype: a.dtype(),
                shape: a.shape(),
                strides: None,
                keep,
                versioned_minor,
                read_only: req.read_only,
                copied,
            }
        }
        AnyArray::Imported(f) => {
            f.check_lock("__dlpack__", req.lock.map(|l| l.0))?;
            if let Some(want) = req.dl_device {
                if want != dl_pair(f.dl()) {
                    return Err(refused(format!(
                        "cannot export an imported array to dl_device={want:?}; it lives on DLPack device {:?}",
                        dl_pair(f.dl())
                    )));
                }
            }
            if req.copy == Some(true) {
                return Err(refused(
                    "copy=True is not supported for an imported array; copy it in its producer library".into(),
                ));
            }
            // SAFETY: as above.
            unsafe { consumer_stream(f.device(), dl_pair(f.dl()).0, req.stream) }?;
            Export::of_imported(f, versioned_minor, req.read_only)
        }
    };
    if e.read_only && e.versioned_minor.is_none() {
        return Err(refused(
            "a read-only export needs a versioned DLPack capsule, and the consumer did not pass max_version >= (1, 0)"
                .into(),
        ));
    }
    // A DLPack 1.1 dtype code is stated as version 1.1 whatever minor the
    // consumer named (see `ExportSource::versioned_in_place`).
    e.versioned_minor = e.versioned_minor.map(|m| m.max(dtype.code.since_minor()).min(DLPACK_MINOR_VERSION));
    Ok(e)
}

impl Export {
    /// The data pointer and flags of the tensor: null for an array with no
    /// element, an address of this process's memory otherwise (a host
    /// pointer or a device address the driver gave it, which fits a pointer).
    fn data_and_flags(&self) -> (*mut c_void, u64) {
        #[allow(clippy::cast_possible_truncation)]
        let data = if self.shape.contains(&0) { std::ptr::null_mut() } else { self.data as usize as *mut c_void };
        let mut flags = 0;
        if self.read_only {
            flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
        }
        if self.copied {
            flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
        }
        (data, flags)
    }

    /// Pushes `shape`, then `strides` or the row-major strides, onto `dims`.
    fn fill_dims(shape: &Shape, strides: Option<&Strides>, dims: &mut Dims) {
        dims.extend(shape.iter().map(|&e| i64::try_from(e).unwrap_or(i64::MAX)));
        match strides {
            Some(s) => dims.extend(s.iter().copied()),
            None => push_row_major_strides(dims),
        }
    }

    /// A versioned managed tensor (the consumer passed `max_version >= (1, 0)`).
    pub fn into_versioned(self) -> ManagedTensorVersioned {
        let (data, flags) = self.data_and_flags();
        let minor = self.versioned_minor.unwrap_or(DLPACK_MINOR_VERSION);
        let Export { device, dtype, shape, strides, keep, .. } = self;
        // SAFETY: `data` addresses every element the row-major (or given)
        // strides reach in memory that `keep` owns, on `device`: `export`
        // takes it from a MemArray's `parts` or a validated import, whose
        // extents fit in i64 (checked when the array was made) and whose rank
        // is at most MAX_RANK, which fits in i32; `fill_dims` pushes the
        // shape and as many strides.
        unsafe {
            ExportSource::versioned_in_place(
                data,
                device,
                dtype.dlpack(),
                shape.len(),
                0,
                |dims| Self::fill_dims(&shape, strides.as_ref(), dims),
                keep,
                flags,
                minor,
            )
        }
    }

    /// A legacy managed tensor (for consumers older than DLPack 1.0);
    /// refused for sub-byte dtypes (see [`ExportSource::into_legacy`]).
    pub fn into_legacy(self) -> Result<ManagedTensor> {
        let (data, _) = self.data_and_flags();
        let mut dims = Dims::new();
        Self::fill_dims(&self.shape, self.strides.as_ref(), &mut dims);
        // SAFETY: as in `into_versioned`.
        let source = unsafe {
            ExportSource::from_dims(data, self.device, self.dtype.dlpack(), self.shape.len(), dims, 0, self.keep)
        };
        source.into_legacy()
    }
}

/// Appends to `dims`, which holds a shape, that shape's compact row-major
/// strides in elements.
fn push_row_major_strides(dims: &mut Dims) {
    let ndim = dims.len();
    dims.extend(std::iter::repeat_n(0, ndim));
    let mut acc = 1i64;
    for axis in (0..ndim).rev() {
        dims[ndim + axis] = acc;
        acc = acc.saturating_mul(dims[axis].max(1));
    }
}
