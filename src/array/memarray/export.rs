//! The ways a [`MemArray`]'s memory leaves it: raw host and device addresses
//! for kernels, the [`ArrayIndexer`](crate::array::ArrayIndexer), DLPack
//! exports and the parts of views. Everything handed out here marks its
//! copy exported (see the [module docs](super)).

use std::sync::Arc;

use super::host_storage::{zeroed_vec, HostStorage};
use super::{DeviceCopy, Element, Location, LockId, MemArray, Residency};
use crate::array::{row_major_strides, ArrayIndexer, ShapeError};
use crate::backend::{address_to_usize, Backend, Device, DeviceMemory};
use crate::dlpack::export::Dims;
use crate::dlpack::ffi::DLDevice;
use crate::dlpack::{dl_device, ExportSource};
use crate::error::{BackendKind, Error, Result};

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// The address of the host copy, for reading.
    ///
    /// Obtaining the pointer is safe; using it is `unsafe` and the caller's
    /// contract is: read at most `len()` elements, only while the array is
    /// alive, not moved to the device and back, and not written through
    /// `&mut` methods. The host copy counts as exported from then on (see
    /// the [module docs](super)).
    pub fn host_ptr(&self, lock: Option<LockId>) -> Result<*const T> {
        self.check_lock("host_ptr", lock)?;
        self.check_resident("host_ptr", Location::Host)?;
        self.wait_pending()?;
        self.host.mark_exported();
        Ok(self.host.ptr())
    }

    /// The address of the host copy, for reading and writing. The host copy
    /// becomes the only current copy (the caller may write through it).
    ///
    /// Contract for using the pointer (the dereference is `unsafe`): at most
    /// `len()` elements, only until the next call on this array. The host
    /// copy counts as exported from then on.
    pub fn host_ptr_mut(&mut self, lock: Option<LockId>) -> Result<*mut T> {
        self.check_lock("host_ptr_mut", lock)?;
        self.check_resident("host_ptr_mut", Location::Host)?;
        self.synchronize()?;
        self.set_residency(Residency::Host);
        self.host.mark_exported();
        Ok(self.host.ptr())
    }

    /// The device address of the device copy (0 for an empty array), for
    /// kernels that only read it.
    ///
    /// Contract for kernels using it: read at most `len()` elements, on the
    /// stream of the last [`move_to`](Self::move_to) or after
    /// [`pending_event`](Self::pending_event), while the array is alive. The
    /// device copy counts as exported from then on: work on any stream may
    /// use the address, and the memory's release waits for the whole device
    /// (see the [module docs](super)).
    pub fn device_ptr(&self, lock: Option<LockId>) -> Result<u64> {
        let copy = self.device_copy("device_ptr", lock)?;
        Ok(copy.map_or(0, |b| b.export()))
    }

    /// The device address of the device copy for kernels that write it; the
    /// device copy becomes the only current copy. Contract as for
    /// [`device_ptr`](Self::device_ptr).
    pub fn device_ptr_mut(&mut self, lock: Option<LockId>) -> Result<u64> {
        let _order = self.replay_order();
        self.sync_replays();
        let p = self.device_ptr(lock)?;
        self.set_residency(Residency::Device);
        Ok(p)
    }

    /// The device copy after the checks of an operation that needs it
    /// current (`None` for an empty array).
    pub(super) fn device_copy(&self, op: &'static str, lock: Option<LockId>) -> Result<Option<&Arc<DeviceCopy<D>>>> {
        self.check_lock(op, lock)?;
        self.check_resident(op, Location::Device)?;
        Ok(self.buffer.as_ref())
    }

    /// An [`ArrayIndexer`] over the copy at `loc`, to pass to a kernel by
    /// value. The copy at `loc` becomes the only current one (the kernel may
    /// write). The indexer's address follows the contract of
    /// [`host_ptr_mut`](Self::host_ptr_mut) / [`device_ptr_mut`](Self::device_ptr_mut).
    pub fn indexer(&mut self, loc: Location, lock: Option<LockId>) -> Result<ArrayIndexer<T, N>> {
        let data = match loc {
            Location::Host => self.host_ptr_mut(lock)?,
            Location::Device => address_to_usize(self.device_ptr_mut(lock)?) as *mut T,
        };
        ArrayIndexer::new(data, self.shape_i64()).ok_or_else(|| {
            Error::from(ShapeError::TooLarge { shape: self.shape.to_vec(), elem_size: std::mem::size_of::<T>() })
        })
    }

    /// The extents as kernels take them.
    pub(super) fn shape_i64(&self) -> [i64; N] {
        let mut shape = [0i64; N];
        for (s, &e) in shape.iter_mut().zip(&self.shape) {
            *s = crate::array::extent_i64(e);
        }
        shape
    }

    /// The device's DLPack device for the copy at `loc`.
    pub fn dl_device(&self, loc: Location) -> DLDevice {
        match loc {
            Location::Host => dl_device(BackendKind::Host, crate::MemoryKind::Host, 0),
            Location::Device => {
                let kind = self.buffer.as_ref().map_or(crate::MemoryKind::Device, |b| b.kind());
                dl_device(<D::B as Backend>::KIND, kind, self.device.info().ordinal)
            }
        }
    }

    /// Element strides of the (row-major) array.
    pub fn strides(&self) -> [isize; N] {
        row_major_strides(&self.shape)
    }

    /// The pieces of a DLPack export of the copy at `loc` (optionally a
    /// fresh copy of it), keeping the memory alive through an `Arc`.
    pub(crate) fn export_source(&self, loc: Location, copy: bool, lock: Option<LockId>) -> Result<ExportSource> {
        // No replay writes the device copy while it is copied.
        let _order = self.replay_order();
        self.check_lock("to_dlpack", lock)?;
        self.check_resident("to_dlpack", loc)?;
        // An export has no stream to order against: finish pending copies.
        self.wait_pending()?;
        let (data, keep): (*mut T, Arc<dyn Send + Sync>) = match loc {
            Location::Host if copy => {
                let mut v = zeroed_vec::<T>(self.len)?;
                // SAFETY: as in `as_slice`.
                v.copy_from_slice(unsafe { self.host.slice() });
                let s = Arc::new(HostStorage::from_vec(v));
                (s.ptr(), s)
            }
            Location::Host => {
                self.host.mark_exported();
                (self.host.ptr(), self.host.clone())
            }
            Location::Device if copy => match self.copy_device_copy(true)? {
                Some(dst) => (address_to_usize(dst.device_ptr()) as *mut T, Arc::new(dst)),
                None => (std::ptr::null_mut(), Arc::new(())),
            },
            Location::Device => match &self.buffer {
                Some(b) => (address_to_usize(b.export()) as *mut T, b.clone()),
                None => (std::ptr::null_mut(), Arc::new(())),
            },
        };
        let data = if self.len == 0 { std::ptr::null_mut() } else { data };
        // The shape, then the strides, side by side.
        let dims: Dims = self
            .shape
            .iter()
            .map(|&e| crate::array::extent_i64(e))
            .chain(self.strides().iter().map(|&s| s as i64))
            .collect();
        // SAFETY: `data` addresses `len` elements laid out by the shape and
        // strides in `dims` (`N` of each) in the memory `keep` owns (or is
        // null for an empty array), in the device `dl_device(loc)` describes.
        Ok(unsafe { ExportSource::from_dims(data.cast(), self.dl_device(loc), T::DTYPE, N, dims, 0, keep) })
    }

    /// How many DLPack exports and views still share this array's host or
    /// device memory (each holds an `Arc` of it).
    pub fn live_exports(&self) -> usize {
        let dev = self.buffer.as_ref().map_or(0, |b| Arc::strong_count(b) - 1);
        Arc::strong_count(&self.host) - 1 + dev
    }

    /// The address of the current host copy and an owner that keeps it
    /// alive, for zero-copy exports built outside this crate (the Python
    /// package's DLPack and array-interface exports). Waits for pending copies.
    ///
    /// Contract for using the pointer: `len()` elements in row-major order,
    /// valid while the owner is alive; writes only while no `&mut` method of
    /// this array runs.
    pub fn host_parts(&self, lock: Option<LockId>) -> Result<(*mut T, Arc<dyn Send + Sync>)> {
        self.check_lock("host_view", lock)?;
        self.check_resident("host_view", Location::Host)?;
        self.wait_pending()?;
        self.host.mark_exported();
        Ok((self.host.ptr(), self.host.clone()))
    }

    /// The address of the current device copy (null for an empty array) and
    /// an owner that keeps it alive. Does not wait: order work on another
    /// stream after [`pending_event`](Self::pending_event). The device copy
    /// counts as exported from then on (see the [module docs](super)).
    pub fn device_parts(&self, lock: Option<LockId>) -> Result<(*mut T, Arc<dyn Send + Sync>)> {
        Ok(match self.device_copy("device_view", lock)? {
            Some(b) => (address_to_usize(b.export()) as *mut T, b.clone() as Arc<dyn Send + Sync>),
            None => (std::ptr::null_mut(), Arc::new(()) as Arc<dyn Send + Sync>),
        })
    }
}
