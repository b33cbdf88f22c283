//! [`ImportedArray`]: another library's memory, imported without a copy.
//!
//! Its fields are private: the kernels it runs trust its address, extents
//! and device, so it is made only from a validated DLPack tensor
//! ([`ImportedArray::from_tensor`]) or from a description whose caller
//! vouches for the memory ([`ImportedArray::from_raw`], `unsafe`).

use std::sync::Arc;

use super::any::DynDevice;
use super::array::{check_extents, new_owned, rank_error, AnyArray, Shape, Stored, Strides};
use super::same_device;
use super::stream::AnyStream;
use crate::array::dtype::{with_dtype, with_rank, DType, MAX_RANK};
use crate::array::{Location, LockError};
use crate::backend::registry::AnyDevice;
use crate::dlpack::{is_host_accessible, is_host_memory, DLDevice, DLDeviceType, DLPackError, ImportedTensor};
use crate::error::{BackendKind, Error, Result};
use crate::on_backend;

/// Another library's memory, imported without a copy and kept alive by its
/// owner (the producer's DLPack tensor, or the Python object of a CUDA
/// Array Interface import).
pub struct ImportedArray {
    dtype: DType,
    shape: Shape,
    strides: Strides,
    data: u64,
    dl: DLDevice,
    read_only: bool,
    keep: Arc<dyn Send + Sync>,
    device: AnyDevice,
    lock: Option<u64>,
}

/// The description [`ImportedArray::from_raw`] takes.
#[derive(Debug, Clone)]
pub struct RawImport {
    /// The element type.
    pub dtype: DType,
    /// The extents.
    pub shape: Shape,
    /// Strides in elements, one per axis.
    pub strides: Strides,
    /// Address of the element at index 0.
    pub data: u64,
    /// Where the memory is, as DLPack says.
    pub dl: DLDevice,
    /// The producer marked the memory read-only.
    pub read_only: bool,
    /// The gpuport device whose kernels reach the memory (that of `dl`).
    pub device: AnyDevice,
}

fn invalid(name: &'static str, reason: String) -> Error {
    Error::InvalidArgument { name, reason }
}

/// Whether `device` is the gpuport device of memory on DLPack device `dl`
/// (as [`super::device_for_dl`] picks it).
fn is_device_of(dl: DLDevice, device: &AnyDevice) -> bool {
    let ordinal = usize::try_from(dl.device_id).ok();
    match dl.device_type {
        t if is_host_memory(t) => device.backend() == BackendKind::Host,
        DLDeviceType::CUDA | DLDeviceType::CUDA_MANAGED => {
            device.backend() == BackendKind::Cuda && ordinal == Some(device.info().ordinal)
        }
        DLDeviceType::ROCM => device.backend() == BackendKind::Rocm && ordinal == Some(device.info().ordinal),
        _ => false,
    }
}

/// A tensor's element type and extents as gpuport holds them: a dtype it
/// has, a rank it takes, extents that are not negative.
fn dtype_and_shape(t: &ImportedTensor) -> Result<(DType, Shape)> {
    let dtype = DType::from_dlpack(t.dtype()).ok_or_else(|| {
        let dt = t.dtype();
        Error::from(DLPackError::UnknownDType { code: dt.code.0, bits: dt.bits, lanes: dt.lanes })
    })?;
    if t.ndim() > MAX_RANK {
        return Err(rank_error(t.ndim()));
    }
    // Extents are validated non-negative when the tensor is imported.
    let shape = t
        .shape()
        .iter()
        .enumerate()
        .map(|(axis, &value)| usize::try_from(value).map_err(|_| DLPackError::NegativeExtent { axis, value }))
        .collect::<std::result::Result<Shape, _>>()?;
    Ok((dtype, shape))
}

impl ImportedArray {
    /// Describes the validated tensor that `keep` holds (the producer's
    /// tensor, or an object that owns it): the import keeps `keep`, and so
    /// the memory, alive.
    pub fn from_tensor<K: AsRef<ImportedTensor> + Send + Sync + 'static>(keep: Arc<K>) -> Result<ImportedArray> {
        let t: &ImportedTensor = (*keep).as_ref();
        let (dtype, shape) = dtype_and_shape(t)?;
        let (strides, data, dl, read_only) =
            (Strides::from_slice(t.strides()), t.data_ptr() as usize as u64, t.device(), t.is_read_only());
        Ok(ImportedArray {
            dtype,
            shape,
            strides,
            data,
            dl,
            read_only,
            device: super::device_for_dl(dl)?,
            lock: None,
            keep,
        })
    }

    /// An import of `e`, an export this layer made of one of gpuport's own
    /// arrays on `device`, without the DLPack tensor in between: the same
    /// array that taking `e` as a versioned tensor and validating it gives
    /// (an array with no element has a null address, as in the tensor),
    /// and it keeps `e`'s owner alive.
    pub(super) fn from_export(e: super::export::Export, device: AnyDevice) -> ImportedArray {
        let strides = match e.strides {
            Some(s) => s,
            None => {
                let mut s = Strides::from_elem(0, e.shape.len());
                let mut acc = 1i64;
                for (axis, &extent) in e.shape.iter().enumerate().rev() {
                    s[axis] = acc;
                    acc = acc.saturating_mul(i64::try_from(extent.max(1)).unwrap_or(i64::MAX));
                }
                s
            }
        };
        let data = if e.shape.contains(&0) { 0 } else { e.data };
        ImportedArray {
            dtype: e.dtype,
            shape: e.shape,
            strides,
            data,
            dl: e.device,
            read_only: e.read_only,
            keep: e.keep,
            device,
            lock: None,
        }
    }

    /// An import of the memory `desc` describes, kept alive by `keep` (the
    /// CUDA Array Interface's object, say). Checks what it can: the rank,
    /// one stride per axis, a size that fits `isize::MAX` bytes, a non-null
    /// address for a non-empty array, and that `desc.device` is the device
    /// of `desc.dl`.
    ///
    /// # Safety
    /// `desc.data` is the address of the element at index 0 of memory on
    /// `desc.dl` that holds a `desc.dtype` at every index the shape and
    /// strides reach; that memory stays allocated while `keep` (and each
    /// clone of it the import hands out) is alive. Unless `desc.read_only`,
    /// gpuport's kernels may write it meanwhile.
    pub unsafe fn from_raw(desc: RawImport, keep: Arc<dyn Send + Sync>) -> Result<ImportedArray> {
        let RawImport { dtype, shape, strides, data, dl, read_only, device } = desc;
        if shape.len() > MAX_RANK {
            return Err(rank_error(shape.len()));
        }
        if strides.len() != shape.len() {
            return Err(invalid(
                "strides",
                format!("{} strides for {} axes; give one stride per axis", strides.len(), shape.len()),
            ));
        }
        let bytes = shape.iter().try_fold(dtype.itemsize(), |acc, &e| acc.checked_mul(e));
        if !matches!(bytes, Some(b) if b <= isize::MAX as usize) {
            return Err(invalid("shape", format!("{shape:?} of {} is more than isize::MAX bytes", dtype.name())));
        }
        if data == 0 && !shape.contains(&0) {
            return Err(invalid("data", "a null address for an array with elements".into()));
        }
        if !is_device_of(dl, &device) {
            return Err(invalid(
                "device",
                format!("{} is not the device of memory on DLPack device {dl:?}", device.info().spec()),
            ));
        }
        Ok(ImportedArray { dtype, shape, strides, data, dl, read_only, keep, device, lock: None })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The extents.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    /// Strides in elements.
    pub fn strides(&self) -> &Strides {
        &self.strides
    }
    /// Strides in bytes, as the array interfaces state them (an import's
    /// strides in elements times the itemsize fit in `i64`: its extent was
    /// checked when it was imported).
    pub fn byte_strides(&self) -> Vec<i64> {
        let item = i64::try_from(self.dtype.itemsize()).unwrap_or(i64::MAX);
        self.strides.iter().map(|&s| s.saturating_mul(item)).collect()
    }
    /// Address of the element at index 0.
    pub fn data(&self) -> u64 {
        self.data
    }
    /// Where the memory is, as DLPack says.
    pub fn dl(&self) -> DLDevice {
        self.dl
    }
    /// Whether the producer marked the memory read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
    /// The gpuport device whose kernels can reach the memory.
    pub fn device(&self) -> &AnyDevice {
        &self.device
    }
    /// The id of the lock held on the import, if any.
    pub fn lock(&self) -> Option<u64> {
        self.lock
    }
    /// The owner that keeps the memory alive; keep a clone while using [`data`](Self::data).
    pub fn owner(&self) -> Arc<dyn Send + Sync> {
        self.keep.clone()
    }
    /// Owners of the memory other than the import (exports, views).
    pub fn other_owners(&self) -> usize {
        Arc::strong_count(&self.keep) - 1
    }

    /// Takes the lock with `id`.
    pub fn enter(&mut self, id: u64) -> Result<()> {
        match self.lock {
            Some(held) => Err(LockError::AlreadyLocked { held, requested: id }.into()),
            None => {
                self.lock = Some(id);
                Ok(())
            }
        }
    }
    /// Releases the lock.
    pub fn exit(&mut self) {
        self.lock = None;
    }

    /// Checks the lock id `given` against the lock held on the import.
    pub fn check_lock(&self, op: &'static str, given: Option<u64>) -> Result<()> {
        match (self.lock, given) {
            (None, _) => Ok(()),
            (Some(held), None) => Err(LockError::Locked { op, held }.into()),
            (Some(held), Some(g)) if g == held => Ok(()),
            (Some(held), Some(given)) => Err(LockError::WrongId { op, held, given }.into()),
        }
    }

    /// Which copy the imported memory stands for: host memory of the host backend, else the device copy.
    pub fn location(&self) -> Location {
        if is_host_accessible(self.dl.device_type) && self.device.backend() == BackendKind::Host {
            Location::Host
        } else {
            Location::Device
        }
    }

    /// Whether the strides are compact row-major.
    pub fn is_row_major(&self) -> bool {
        let mut expect = 1i64;
        for axis in (0..self.shape.len()).rev() {
            if self.shape[axis] > 1 && self.strides[axis] != expect {
                return false;
            }
            expect = expect.saturating_mul(i64::try_from(self.shape[axis]).unwrap_or(i64::MAX));
        }
        true
    }

    /// Refuses work `what` on the import unless its memory is compact
    /// row-major (and writable, where the work `writes`).
    pub(super) fn check_usable(&self, what: &str, writes: bool) -> Result<()> {
        if writes && self.read_only {
            return Err(DLPackError::ReadOnly.into());
        }
        if !self.is_row_major() {
            return Err(Error::InvalidArgument {
                name: "array",
                reason: format!(
                    "{what} needs compact row-major memory; the imported array has strides {:?}",
                    self.strides
                ),
            });
        }
        Ok(())
    }

    pub(super) fn add_index_imported(&self, s: &AnyStream) -> Result<()> {
        self.check_usable("add_index", true)?;
        let n = self.shape.len();
        on_backend!(&self.device, d => with_dtype!(self.dtype, T => with_rank!(n, N =>
            foreign_add_index::<T, N, _>(d, self.data, &self.shape, s), else => Err(rank_error(n)))))
    }
}

fn foreign_add_index<T: Stored, const N: usize, D: DynDevice>(
    d: &Arc<D>,
    data: u64,
    shape: &[usize],
    s: &AnyStream,
) -> Result<()> {
    let st = s.of(d)?;
    let mut sh = [0i64; N];
    for (o, &e) in sh.iter_mut().zip(shape) {
        // Fits: the size was checked against isize::MAX bytes when the
        // import was made (`from_raw`, or the DLPack import `from_tensor` takes).
        #[allow(clippy::cast_possible_wrap)]
        {
            *o = e as i64;
        }
    }
    // SAFETY: `data` addresses the import's `shape.product()` elements of
    // `T` on `d` (an `ImportedArray` is made only from a validated DLPack
    // tensor or under `from_raw`'s contract; row-major and writable checked
    // by the caller), kept alive by the `ImportedArray` that calls this; we
    // wait for the stream before returning.
    unsafe { T::add_index_raw::<N, D>(d, data, sh, st)? };
    d.synchronize(st)
}

/// Where [`import_tensor`] puts another library's tensor.
#[derive(Clone)]
pub enum Placement {
    /// Where it is, without a copy.
    InPlace,
    /// A new host array with a copy of the elements (the array API's
    /// `from_dlpack(copy=True)`); host-accessible tensors only.
    HostCopy,
    /// On this device: without a copy where the tensor is already there;
    /// host memory is copied up to a GPU device; memory of another device
    /// is refused (no copy between devices is made implicitly).
    On(AnyDevice),
}

impl Placement {
    /// Refuses data on `on` for [`Placement::On`] another device.
    ///
    /// ```
    /// use gpuport::dynamic::imported::Placement;
    /// let host = gpuport::open("host")?;
    /// assert!(Placement::On(host.clone()).check(&host).is_ok());
    /// assert!(Placement::InPlace.check(&host).is_ok());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn check(&self, on: &AnyDevice) -> Result<()> {
        match self {
            Placement::On(to) if !same_device(on, to) => Err(invalid(
                "device",
                format!(
                    "the data is on {}, not {}; only host data is copied to a device, not data between devices \
                     (import it without a device to keep it where it is)",
                    on.info().spec(),
                    to.info().spec()
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// An array over the tensor `keep` holds, placed as `placement` says (a
/// copy is made on the target device's default stream, and waited for
/// only as [`crate::array::MemArray`]'s copies are: later work on that
/// stream is ordered after it).
///
pub fn import_tensor<K: AsRef<ImportedTensor> + Send + Sync + 'static>(
    keep: Arc<K>,
    placement: Placement,
) -> Result<AnyArray> {
    let t: &ImportedTensor = (*keep).as_ref();
    let on_host = t.device().device_type == DLDeviceType::CPU;
    let copy_to = match &placement {
        Placement::HostCopy if !is_host_accessible(t.device().device_type) => {
            return Err(Error::DLPack(DLPackError::Refused {
                reason: "a copy (copy=True) is made of host-accessible tensors only".into(),
            }))
        }
        Placement::HostCopy => Some(crate::open("host")?),
        Placement::On(dev) if dev.backend() != BackendKind::Host && on_host => Some(dev.clone()),
        _ => None,
    };
    let Some(dev) = copy_to else {
        let a = ImportedArray::from_tensor(keep)?;
        placement.check(a.device())?;
        return Ok(AnyArray::Imported(a));
    };
    let (dtype, shape) = dtype_and_shape(t)?;
    check_extents(&shape, dtype.itemsize())?;
    let mut a = new_owned(&dev, dtype, &shape)?;
    let s = AnyStream::default_for(&dev);
    if matches!(placement, Placement::HostCopy) {
        a.read_imported(t, &s, None)?;
    } else {
        a.upload_imported(t, &s, None)?;
    }
    Ok(AnyArray::Owned(a))
}
