//! [`MemArray`]: an `N`-dimensional array with a host copy and a device copy.
//!
//! The state rules below (residency, pending work, locks and exports) and
//! the moves between the copies are here. Element access is in
//! `access.rs`, the addresses and exports handed out in `export.rs`, the
//! kernel methods in `kernels.rs`, the host copy in `host_storage.rs`,
//! capture and graph replays in `capture.rs`, moves to another device in
//! `peer.rs`, the pipelined upload in `upload.rs`.
//!
//! ## Memory and streams
//! Every allocation of an array goes through its device's current resource
//! ([`current_resource`](crate::memory::current_resource)): the device copy is a [`DeviceAllocation`]
//! (of managed memory for a [`managed`](MemArray::managed) array,
//! `managed.rs`), and on
//! GPU backends the host copy is pinned memory of the same resource (the
//! caching pool's pinned pool), or an ordinary `Vec` where pinning fails.
//! The host backend's host copy is always a `Vec`.
//!
//! The device copy is allocated on the stream of the array's first device
//! use (the stream passed to [`MemArray::move_to`] or a kernel method; the
//! device's default stream for [`MemArray::try_clone`] and copying exports)
//! and belongs to that stream. Every copy or kernel the array enqueues on
//! another stream borrows it through [`DeviceAllocation::use_on`], so the
//! resource does not hand the block out again, on any stream, before that
//! work has completed.
//!
//! Memory whose address leaves the array is *exported*: DLPack exports
//! ([`MemArray::to_dlpack`]), views ([`MemArray::device_view`],
//! [`MemArray::host_view`]), [`MemArray::device_parts`] and
//! [`MemArray::host_parts`], and the raw addresses of
//! [`MemArray::device_ptr`], [`MemArray::host_ptr`] and
//! [`MemArray::indexer`] (and their `_mut` forms). Its consumers may enqueue
//! work on streams we never see, so when exported memory is finally released
//! (the array and every export dropped) the whole device is synchronized
//! first ([`Device::synchronize_device`], what a synchronous `cudaFree`
//! implies) and only then is the memory returned to the resource. The mark
//! is permanent for that block; an array that never hands out an address
//! pays nothing.

use std::fmt;
use std::sync::Arc;

use super::{checked_len, Element, Location, LockError, ResidencyError, ShapeError};
use crate::backend::{Device, DeviceMemory, Event, Stream};
use crate::error::Result;
use crate::memory::{DeviceAllocation, GuardedRelease, StreamUse};
use crate::HostDevice;

mod access;
mod capture;
mod device_data;
mod export;
mod host_storage;
mod kernels;
mod managed;
mod peer;
mod replay;
mod upload;
use capture::not_capturable;
pub use capture::DeviceCopyToken;
use host_storage::{zeroed_vec, HostStorage};

/// An id that locks a [`MemArray`] for one user (docs/design.md#lock-ids).
///
/// While an array is locked ([`MemArray::enter`]), every access must pass
/// the same id, so code that does not know it (e.g. Rust code racing a
/// Python `with` block holding a DLPack export) gets an error instead of
/// touching memory that someone else has reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockId(pub u64);

/// Whether [`MemArray::move_to`] waits for the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// Wait for the copy, and so (stream order) for the work enqueued on the
    /// stream before it; the data is there when `move_to` returns.
    Sync,
    /// Enqueue the copy on the stream and return; work enqueued later on the
    /// same stream sees the data. Host access through the array waits for it.
    Async,
}

/// Which copies of a [`MemArray`] hold the current data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    /// Only the host copy.
    Host,
    /// Only the device copy.
    Device,
    /// Both copies hold the same data.
    Both,
}

impl Residency {
    /// Whether the copy at `loc` is current.
    pub fn includes(self, loc: Location) -> bool {
        matches!(
            (self, loc),
            (Residency::Both, _) | (Residency::Host, Location::Host) | (Residency::Device, Location::Device)
        )
    }

    fn any_current(self) -> Location {
        match self {
            Residency::Device => Location::Device,
            _ => Location::Host,
        }
    }
}

/// Flags and behaviour of a DLPack export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportOptions {
    /// Export a fresh copy instead of the array's memory (sets the
    /// versioned `IS_COPIED` flag).
    pub copy: bool,
    /// Mark the export read-only (versioned `READ_ONLY` flag).
    pub read_only: bool,
}

/// What [`HostStorage`] needs of its type-erased pinned block.
trait Exportable: Send + Sync {
    /// Records that the block's address was handed out.
    fn mark_exported(&self);
}

impl<M: Send + Sync + 'static, D: Device> Exportable for GuardedRelease<M, D> {
    fn mark_exported(&self) {
        GuardedRelease::mark_exported(self);
    }
}

/// The device copy: an allocation of the device's current resource, held
/// by the array and its exports (through an `Arc`).
type DeviceCopy<D> = GuardedRelease<DeviceAllocation<<D as Device>::B>, D>;

impl<D: Device> DeviceCopy<D> {
    /// Marks the copy exported and returns its address, for handing out.
    fn export(&self) -> u64 {
        self.mark_exported();
        self.device_ptr()
    }
}

impl<D: Device> fmt::Debug for DeviceCopy<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceCopy({:?}, exported {})", **self, self.is_exported())
    }
}

/// The device copy is memory of the device's backend, so kernels and copies
/// take it (or a [`StreamUse`] of it) directly.
// SAFETY: forwards the allocation's answers; `GuardedRelease` owns the allocation.
unsafe impl<D: Device> DeviceMemory for DeviceCopy<D> {
    type B = D::B;
    fn len(&self) -> usize {
        (**self).len()
    }
    fn device_ptr(&self) -> u64 {
        (**self).device_ptr()
    }
    fn ordinal(&self) -> usize {
        (**self).ordinal()
    }
    fn kind(&self) -> crate::MemoryKind {
        (**self).kind()
    }
    fn owner(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        (**self).owner()
    }
}

/// An `N`-dimensional array of `T` on device `D`, with a host copy and a
/// device copy (docs/design.md#memarray).
///
/// # Invariants
/// - `len` is the product of `shape` and `len * size_of::<T>() <= isize::MAX`.
/// - The host copy always exists (`len` elements); the device copy exists
///   once the array has been on the device and `len > 0`. Both come from the
///   device's current resource (see the [module docs](self) for the stream
///   rules); exported memory is marked and synchronizes the device on release.
/// - `residency` says which copies hold the current data; no copy is made
///   when the requested one is already current.
/// - `pending` is the event recorded after the last asynchronous copy or
///   kernel (on the stream `pending_stream`); every host access and
///   the drop wait for it, so the host never races a copy, and work the array
///   enqueues on another stream is ordered after it.
/// - While `lock` is `Some(id)`, every access needs `Some(LockId(id))`.
///
/// Element access is row-major. Moving a `MemArray` (or `std::mem::swap`,
/// [`MemArray::swap`]) moves handles only, never data.
pub struct MemArray<T: Element, const N: usize, D: Device = HostDevice> {
    shape: [usize; N],
    len: usize,
    device: Arc<D>,
    host: Arc<HostStorage<T>>,
    buffer: Option<Arc<DeviceCopy<D>>>,
    residency: Residency,
    /// The device copy already holds the host copy's data, uploaded ahead
    /// of a move by [`read_from_slice`](Self::read_from_slice) (the upload
    /// is `pending` or done), while only the host copy is reported current:
    /// `move_to(Location::Device, ..)` then only marks the device copy
    /// current. Only with `residency == Host`; every residency change
    /// ([`set_residency`](Self::set_residency)), which every write makes,
    /// clears it.
    staged: bool,
    lock: Option<u64>,
    pending: Option<Arc<Event<D::B>>>,
    pending_stream: Option<Stream<D::B>>,
    /// Shared with graphs that captured kernel methods on the device copy (`replay.rs`).
    replay: Option<replay::ArrayLink<D>>,
    /// The device copy is managed memory, from a `ManagedResource` rather
    /// than the current resource (`managed.rs`).
    managed: bool,
}

impl<T: Element, const N: usize, D: Device> fmt::Debug for MemArray<T, N, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemArray")
            .field("dtype", &super::element::dtype_name(T::DTYPE))
            .field("shape", &self.shape)
            .field("device", &self.device.info().spec())
            .field("residency", &self.residency)
            .field("lock", &self.lock)
            .field("pending", &self.pending.is_some())
            .finish()
    }
}

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// The number of dimensions.
    pub const NDIM: usize = N;

    /// A zero-filled array of `shape` on `device` (host copy current).
    ///
    /// ```
    /// use gpuport::{Device, array::MemArray};
    /// let dev = gpuport::HostDevice::open(0)?;
    /// let a = MemArray::<f32, 2, _>::zeros(&dev, [2, 3])?;
    /// assert_eq!(a.get([1, 2], None)?, 0.0);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn zeros(device: &Arc<D>, shape: [usize; N]) -> Result<Self> {
        let len = checked_len(&shape, std::mem::size_of::<T>())?;
        Ok(Self::with_host(device, shape, len, HostStorage::zeroed_for_device(device, len)?))
    }

    /// An array of `shape` holding `data` in row-major order (no copy).
    pub fn from_vec(device: &Arc<D>, shape: [usize; N], data: Vec<T>) -> Result<Self> {
        let len = checked_len(&shape, std::mem::size_of::<T>())?;
        if data.len() != len {
            return Err(ShapeError::LengthMismatch {
                what: "from_vec",
                shape: shape.to_vec(),
                expected: len,
                got: data.len(),
            }
            .into());
        }
        Ok(Self::from_parts(device, shape, len, data))
    }

    /// An array of `shape` holding a copy of `data` in row-major order.
    pub fn from_slice(device: &Arc<D>, shape: [usize; N], data: &[T]) -> Result<Self> {
        let len = checked_len(&shape, std::mem::size_of::<T>())?;
        if data.len() != len {
            return Err(ShapeError::LengthMismatch {
                what: "from_slice",
                shape: shape.to_vec(),
                expected: len,
                got: data.len(),
            }
            .into());
        }
        let mut v = zeroed_vec(len)?;
        v.copy_from_slice(data);
        Ok(Self::from_parts(device, shape, len, v))
    }

    fn from_parts(device: &Arc<D>, shape: [usize; N], len: usize, data: Vec<T>) -> Self {
        Self::with_host(device, shape, len, HostStorage::for_device(device, data))
    }

    fn with_host(device: &Arc<D>, shape: [usize; N], len: usize, host: HostStorage<T>) -> Self {
        MemArray {
            shape,
            len,
            device: device.clone(),
            host: Arc::new(host),
            buffer: None,
            residency: Residency::Host,
            staged: false,
            lock: None,
            pending: None,
            pending_stream: None,
            replay: None,
            managed: false,
        }
    }

    // ---- state -------------------------------------------------------------

    /// The extents.
    pub fn shape(&self) -> [usize; N] {
        self.shape
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device that owns the device copy.
    pub fn device(&self) -> &Arc<D> {
        &self.device
    }

    /// Which copies are current (a graph replay that wrote the device copy counts).
    pub fn residency(&self) -> Residency {
        self.residency_now()
    }

    /// Whether the device copy already holds the host copy's data, uploaded
    /// by [`read_from_slice`](Self::read_from_slice), so that moving the
    /// array to the device copies nothing.
    ///
    /// ```
    /// use gpuport::{Device, array::MemArray};
    /// let dev = gpuport::HostDevice::open(0)?;
    /// let mut a = MemArray::<f32, 1, _>::zeros(&dev, [2])?;
    /// a.read_from_slice(&[1.0, 2.0], dev.default_stream(), None)?;
    /// assert!(!a.is_staged()); // the host backend copies on the host only
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn is_staged(&self) -> bool {
        self.staged
    }

    /// Whether an asynchronous copy may still be running (see [`Transfer::Async`]).
    pub fn is_transfer_pending(&self) -> Result<bool> {
        match &self.pending {
            Some(ev) if !self.device.event_is_complete(ev)? => Ok(true),
            _ => self.unseen_replay_running(),
        }
    }

    /// [`MemArray::is_transfer_pending`], forgetting a copy that is done (as
    /// [`MemArray::synchronize`] does, without waiting), so that later
    /// calls neither ask the device again nor order streams after it.
    pub fn poll_transfer(&mut self) -> Result<bool> {
        let _order = self.replay_order();
        self.sync_replays();
        let pending = self.is_transfer_pending()?;
        if !pending {
            self.pending = None;
        }
        Ok(pending)
    }

    /// The event recorded after the last asynchronous copy, for ordering
    /// work on another stream after it (`Device::wait_event`). It is a
    /// marker event (`Device::create_marker_event`): not for timing.
    /// A graph replay of the array that no `&mut` method has taken yet is
    /// not in it: [`order_stream`](Self::order_stream) covers both.
    pub fn pending_event(&self) -> Option<&Event<D::B>> {
        self.pending.as_deref()
    }

    /// Waits for the last asynchronous copy.
    pub fn synchronize(&mut self) -> Result<()> {
        let _order = self.replay_order();
        self.sync_replays();
        if let Some(ev) = &self.pending {
            self.device.synchronize_event(ev)?;
        }
        self.pending = None;
        Ok(())
    }

    /// Makes later work on `stream` wait (on the device, without a host
    /// wait) for the array's pending copy or kernel and for the graph
    /// replays of it launched so far: for work that uses the array's memory
    /// on another stream (an export's consumer). Nothing is enqueued for
    /// pending work recorded on `stream` itself.
    ///
    /// ```
    /// use gpuport::{Device, array::MemArray};
    /// let dev = gpuport::HostDevice::open(0)?;
    /// let (s1, s2) = (dev.create_stream()?, dev.create_stream()?);
    /// let mut a = MemArray::<f32, 1, _>::zeros(&dev, [4])?;
    /// a.add_index(&s1, None)?;
    /// a.order_stream(&s2)?; // work on s2 now runs after the kernel
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn order_stream(&self, stream: &Stream<D::B>) -> Result<()> {
        match &self.pending {
            Some(ev) if !self.pending_on(stream) => self.device.wait_event(stream, ev)?,
            _ => {}
        }
        self.order_after_unseen_replays(stream)
    }

    /// Whether the pending work was recorded on `stream` (so stream order
    /// already puts new work on `stream` after it).
    fn pending_on(&self, stream: &Stream<D::B>) -> bool {
        let pending = self.pending_stream.as_ref().and_then(|s| self.device.stream_id(s));
        matches!((pending, self.device.stream_id(stream)), (Some(a), Some(b)) if a == b)
    }

    /// Sets which copies are current; a staged upload no longer matches
    /// (see `staged`).
    fn set_residency(&mut self, residency: Residency) {
        self.residency = residency;
        self.staged = false;
    }

    /// Records the end of the work just enqueued on `stream` as the array's pending work.
    fn record_pending(&mut self, stream: &Stream<D::B>) -> Result<()> {
        let ev = Arc::new(self.device.create_marker_event()?);
        self.device.record_event(&ev, stream)?;
        self.publish_pending(&ev, stream);
        self.pending = Some(ev);
        self.pending_stream = Some(stream.clone());
        Ok(())
    }

    /// Waits for a pending copy without forgetting it (for `&self` access).
    fn wait_pending(&self) -> Result<()> {
        if let Some(ev) = &self.pending {
            self.device.synchronize_event(ev)?;
        }
        self.wait_unseen_replays()
    }

    // ---- locks -------------------------------------------------------------

    /// Locks the array to `id`: until [`exit`](Self::exit), every access
    /// must pass `Some(id)`.
    pub fn enter(&mut self, id: LockId) -> Result<()> {
        if let Some(held) = self.lock {
            return Err(LockError::AlreadyLocked { held, requested: id.0 }.into());
        }
        self.lock = Some(id.0);
        Ok(())
    }

    /// Unlocks the array.
    pub fn exit(&mut self) {
        self.lock = None;
    }

    /// The id holding the lock, if locked.
    pub fn lock_id(&self) -> Option<LockId> {
        self.lock.map(LockId)
    }

    fn check_lock(&self, op: &'static str, given: Option<LockId>) -> Result<()> {
        match (self.lock, given) {
            (None, _) => Ok(()),
            (Some(held), None) => Err(LockError::Locked { op, held }.into()),
            (Some(held), Some(LockId(g))) if g == held => Ok(()),
            (Some(held), Some(LockId(given))) => Err(LockError::WrongId { op, held, given }.into()),
        }
    }

    /// The length error for `what` given `got` elements, unless `got` is `len()`.
    fn check_len(&self, what: &'static str, got: usize) -> Result<()> {
        if got == self.len {
            return Ok(());
        }
        Err(ShapeError::LengthMismatch { what, shape: self.shape.to_vec(), expected: self.len, got }.into())
    }

    fn check_resident(&self, op: &'static str, loc: Location) -> Result<()> {
        let residency = self.residency_now();
        if residency.includes(loc) {
            Ok(())
        } else {
            Err(ResidencyError::new(op, loc, residency.any_current()).into())
        }
    }

    fn linear(&self, index: [usize; N]) -> Result<usize> {
        let mut lin = 0usize;
        for axis in 0..N {
            if index[axis] >= self.shape[axis] {
                return Err(ShapeError::IndexOutOfBounds { index: index.to_vec(), shape: self.shape.to_vec() }.into());
            }
            // Cannot overflow: lin < product of extents so far <= len.
            lin = lin * self.shape[axis] + index[axis];
        }
        Ok(lin)
    }

    // ---- moves -------------------------------------------------------------

    /// The device copy, allocated from the current resource on `stream` if
    /// the array has none yet.
    fn ensure_buffer(&mut self, stream: &Stream<D::B>) -> Result<Arc<DeviceCopy<D>>> {
        if let Some(b) = &self.buffer {
            return Ok(b.clone());
        }
        let b = Arc::new(self.alloc_device_copy(stream, false)?);
        self.buffer = Some(b.clone());
        Ok(b)
    }

    /// A new device-copy-sized allocation of the current resource on `stream`.
    fn alloc_device_copy(&self, stream: &Stream<D::B>, exported: bool) -> Result<DeviceCopy<D>> {
        let memory = self.resource_on(&self.device)?.alloc(self.len * std::mem::size_of::<T>(), stream)?;
        Ok(GuardedRelease::new(memory, &self.device, exported))
    }

    /// A copy of the device copy, made on the default stream (where the new
    /// allocation lives) and waited for. `None` without a device copy.
    fn copy_device_copy(&self, exported: bool) -> Result<Option<DeviceCopy<D>>> {
        let Some(src) = &self.buffer else { return Ok(None) };
        let stream = self.device.default_stream();
        let mut memory = self.resource_on(&self.device)?.alloc(src.len(), stream)?;
        let from = src.use_on(stream)?;
        self.device.copy_device(&from, 0, &mut memory, 0, src.len())?;
        Ok(Some(GuardedRelease::new(memory, &self.device, exported)))
    }

    /// Makes the copy at `to` current, copying on `stream` if it is not.
    ///
    /// Returns at once when `to` is already current; after a staged read
    /// ([`read_from_slice`](Self::read_from_slice)) a move to the device
    /// copies nothing, ordering `stream` after the staged upload. With
    /// [`Transfer::Async`] the copy is only enqueued: later work on `stream`
    /// is ordered after it, host access through this array waits for it,
    /// and [`pending_event`](Self::pending_event) orders other streams.
    /// With [`Transfer::Sync`] it waits for the copy's event, which the
    /// stream passes only after everything enqueued on it before.
    pub fn move_to(&mut self, to: Location, stream: &Stream<D::B>, mode: Transfer, lock: Option<LockId>) -> Result<()> {
        let _section = self.section(stream); // no replay, nor capture, begins in between (`replay.rs`, `gate.rs`)
        self.check_lock("move_to", lock)?;
        self.sync_replays();
        if self.residency.includes(to) {
            return Ok(());
        }
        if self.len == 0 {
            self.set_residency(Residency::Both);
            return Ok(());
        }
        if self.device.capture_status(stream)?.is_capturing() {
            return Err(not_capturable::<D::B>(
                "move_to",
                "a copy between the array's host and device copies cannot be captured (a replay would copy \
                 whatever the host copy holds then, and the array could not tell which copy is current); move \
                 the array before the capture",
            ));
        }
        // Not on a capturing stream (refused above, as any move is).
        if to == Location::Device && self.staged {
            // The device copy holds the data already (or will, once the
            // pending upload is done): order `stream` after that upload.
            self.order_stream(stream)?;
            self.set_residency(Residency::Both);
            if mode == Transfer::Sync {
                self.synchronize()?;
            }
            return Ok(());
        }
        // No stream synchronize before the copy, even for `Sync`: the wait
        // for the copy's event below covers the stream's earlier work (it
        // was two more driver waits, about 3.5 µs of a zeros array's 19 µs
        // on the H100, benches/creation.py).
        self.order_stream(stream)?;
        let copy = self.ensure_buffer(stream)?;
        let bytes = self.len * std::mem::size_of::<T>();
        {
            // Through a `StreamUse`: on a stream other than the allocation's,
            // its drop (after the enqueue) records the use for the resource.
            let buffer: StreamUse<'_, D::B> = copy.use_on(stream)?;
            match to {
                Location::Device if !self.host.is_written() => {
                    // The host copy is current and still all zeros, never
                    // written: zero the device copy rather than writing
                    // the zeros on the host and copying them.
                    // SAFETY: the device copy is held by `self.buffer` and
                    // its resource reuses it only after this use; no host
                    // view of it exists (views come from `&mut self` methods
                    // that wait for `pending`, recorded below).
                    unsafe { self.device.memset_async(&buffer, 0, bytes, 0, stream)? };
                }
                Location::Device => {
                    // SAFETY: the host block lives in `self.host` (an `Arc` this
                    // array keeps until the copy is done: host writes and `Drop`
                    // wait for `pending`, recorded below); the range is the whole
                    // block of `bytes` initialized bytes.
                    let src = unsafe { std::slice::from_raw_parts(self.host.bytes_ptr(), bytes) };
                    // SAFETY: `src` outlives the copy as argued above; the
                    // device copy is held by `self.buffer`, and its resource
                    // reuses it only after this use (see the module docs).
                    unsafe { self.device.copy_to_device_async(src, &buffer, 0, stream)? };
                }
                Location::Host => {
                    // SAFETY: as above; no host access through this array happens
                    // until `pending` has completed, so the slice is not aliased
                    // by Rust code while the stream writes it.
                    let dst = unsafe { std::slice::from_raw_parts_mut(self.host.bytes_ptr(), bytes) };
                    // SAFETY: `dst` and the device copy outlive the copy as argued above.
                    unsafe { self.device.copy_to_host_async(&buffer, 0, dst, stream)? };
                }
            }
        }
        if let Err(e) = self.record_pending(stream) {
            // Without an event nothing would order later host access
            // after the copy: wait for it here before reporting.
            let _ = self.device.synchronize(stream);
            return Err(e);
        }
        self.set_residency(Residency::Both);
        if mode == Transfer::Sync {
            self.synchronize()?;
        }
        Ok(())
    }

    // ---- copies and swaps ----------------------------------------------------

    /// A deep copy. Current copies are copied where they are: a current
    /// device copy is copied on the device, not through the host.
    pub fn try_clone(&self, lock: Option<LockId>) -> Result<Self> {
        // No replay writes the device copy while it is copied.
        let _order = self.replay_order();
        self.check_lock("clone", lock)?;
        self.wait_pending()?;
        let residency = self.residency_now();
        let mut host = zeroed_vec::<T>(self.len)?;
        if residency.includes(Location::Host) {
            // SAFETY: no copy is writing (waited); writes need `&mut self`.
            host.copy_from_slice(unsafe { self.host.slice() });
        }
        let buffer = match residency.includes(Location::Device) {
            true => self.copy_device_copy(false)?.map(Arc::new),
            false => None,
        };
        let mut out = Self::from_parts(&self.device, self.shape, self.len, host);
        out.buffer = buffer;
        out.residency = residency;
        out.managed = self.managed;
        Ok(out)
    }

    /// Exchanges the contents of two arrays without copying data (locks,
    /// residency and pending copies go with their data).
    pub fn swap(&mut self, other: &mut Self) {
        std::mem::swap(self, other);
    }
}

impl<T: Element, const N: usize, D: Device> Clone for MemArray<T, N, D> {
    /// A deep copy, as [`try_clone`](MemArray::try_clone) without a lock id.
    ///
    /// # Panics
    /// If the array is locked (use `try_clone` with the id) or the device
    /// copy cannot be allocated or copied, as `Vec::clone` panics when out
    /// of memory.
    fn clone(&self) -> Self {
        match self.try_clone(None) {
            Ok(a) => a,
            Err(e) => panic!("MemArray::clone failed: {e}; use try_clone to handle this as an error"),
        }
    }
}
