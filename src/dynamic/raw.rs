//! Copies, memsets and allocations on address ranges, the shape of HIP
//! Python's `hipMemcpy(dst, src, size, kind)`: what a binding's low-level
//! runtime (`gpuport.runtime` in Python) hands down once it has turned its
//! pointer-like objects into [`RawRange`]s.
//!
//! The checks live here, once for every backend: a size past what a range
//! holds or states, a NULL range, host memory given as device memory (or
//! the reverse), memory of another device, a read-only destination. Each
//! is an [`Error::InvalidArgument`] naming the operand and what is accepted.
//!
//! ```
//! use gpuport::dynamic::raw::{self, Place, RawRange};
//! use gpuport::dynamic::AnyStream;
//! let dev = gpuport::open("host")?;
//! let s = AnyStream::default_for(&dev);
//! let src = [7u8; 16];
//! let mut dst = [0u8; 16];
//! // SAFETY: both arrays outlive the synchronous copy and hold 16 bytes.
//! let (d, r) = unsafe {
//!     (
//!         RawRange::new(dst.as_mut_ptr() as u64, Place::Host, Some(16), None, true),
//!         RawRange::new(src.as_ptr() as u64, Place::Host, Some(16), None, false),
//!     )
//! };
//! raw::copy(&dev, &s, &d, &r, 16, None, true)?;
//! s.synchronize()?;
//! assert_eq!(dst, [7u8; 16]);
//! // A size past what the destination holds is refused, not copied.
//! assert!(raw::copy(&dev, &s, &d, &r, 17, None, true).is_err());
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, Weak};

use super::any::{same_device, DynDevice};
use super::memory::resources;
use super::stream::AnyStream;
use crate::array::Location;
use crate::backend::registry::AnyDevice;
use crate::backend::{Advice, Backend, Buffer, DeviceMemory, DeviceMemoryMut, HostMemory, ManagedPlace, MemoryKind};
use crate::backend::{MemoryDevice, PeerDevice};
use crate::error::{BackendKind, Error, Result};
use crate::memory::{pageable_copier, GuardedRelease, MemoryError, PageableCopier, PinnedFlags};
use crate::on_backend;

/// Where a range's memory lives, as far as the object that named it knows.
#[derive(Clone, Debug)]
pub enum Place {
    /// The NULL address.
    Null,
    /// A bare address nothing is known about.
    Unknown,
    /// Pageable host memory (a buffer, a host DLPack tensor).
    Host,
    /// Device memory, of this device where known.
    Device(Option<AnyDevice>),
    /// Managed (unified) memory of this device.
    Managed(AnyDevice),
    /// Page-locked host memory of this device.
    Pinned(AnyDevice),
}

impl Place {
    /// The short name (`"host"`, `"device"`, …) bindings print.
    pub fn name(&self) -> &'static str {
        match self {
            Place::Null => "null",
            Place::Unknown => "unknown",
            Place::Host => "host",
            Place::Device(_) => "device",
            Place::Managed(_) => "managed",
            Place::Pinned(_) => "pinned",
        }
    }

    /// The device of the memory, where known.
    pub fn device(&self) -> Option<AnyDevice> {
        match self {
            Place::Device(d) => d.clone(),
            Place::Managed(d) | Place::Pinned(d) => Some(d.clone()),
            _ => None,
        }
    }

    /// The place once the device of the object that named it is known:
    /// device memory of no known device (a CUDA Array Interface names none)
    /// becomes `dev`'s, as an array's own device says; other places are
    /// kept. Every caller that turns an array into a range goes through
    /// this, so a collective's registration or a copy sees the device.
    ///
    /// ```
    /// use gpuport::dynamic::raw::Place;
    /// let host = gpuport::open("host")?;
    /// assert!(Place::Device(None).on_known_device(&host).device().is_some());
    /// assert!(Place::Host.on_known_device(&host).device().is_none());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn on_known_device(self, dev: &AnyDevice) -> Place {
        match self {
            Place::Device(None) => Place::Device(Some(dev.clone())),
            other => other,
        }
    }
}

/// A range of memory named by address, with what is known of it.
#[derive(Clone, Debug)]
pub struct RawRange {
    addr: u64,
    place: Place,
    held: Option<usize>,
    stated: Option<usize>,
    writable: bool,
}

impl RawRange {
    /// A range at `addr` in `place`. `held`: the bytes from `addr` that are
    /// kept alive for the range's use (so gpuport may touch them from the
    /// host); `stated`: the bytes the naming object says it spans, held or
    /// not. Copies never exceed either.
    ///
    /// # Safety
    /// - With `held = Some(n)`, `[addr, addr + n)` is memory of `place`, and
    ///   stays valid (and, with `writable`, writable with no other live Rust
    ///   reference to it) until every copy or memset given this range has
    ///   run: a synchronous call has returned and its stream was
    ///   synchronized, or the owner is kept until the stream passes the
    ///   work (see [`super::keep`]).
    /// - With `held = None`, the address is taken at the caller's word, as
    ///   HIP Python takes it: device memory of the device the call runs on,
    ///   valid for the size the call is given. gpuport never dereferences
    ///   such a range on the host.
    pub unsafe fn new(addr: u64, place: Place, held: Option<usize>, stated: Option<usize>, writable: bool) -> Self {
        RawRange { addr, place, held, stated, writable }
    }

    /// The address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Where the memory lives.
    pub fn place(&self) -> &Place {
        &self.place
    }

    /// Whether the memory is known and kept alive.
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// Whether a write may go there.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The bytes a copy may reach: the least of what is held and what is
    /// stated; `None` for a bare address.
    pub fn known_size(&self) -> Option<usize> {
        match (self.held, self.stated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the host may read and write the memory (host, pinned or
    /// managed memory, or the host backend's "device" memory).
    pub fn host_accessible(&self) -> bool {
        match &self.place {
            Place::Host | Place::Pinned(_) | Place::Managed(_) => true,
            Place::Device(Some(d)) => d.backend() == BackendKind::Host,
            _ => false,
        }
    }

    /// Where a copy on `dev` reads or writes this range: host memory the
    /// host touches, or memory the device's copy engine reaches. Inferred
    /// from its place; `what` names the operand in the error.
    pub fn location(&self, dev: &AnyDevice, what: &'static str) -> Result<Location> {
        Ok(match &self.place {
            Place::Host | Place::Pinned(_) => Location::Host,
            Place::Device(_) | Place::Managed(_) => Location::Device,
            Place::Null => return Err(invalid(what, "is NULL".into())),
            Place::Unknown if dev.backend() == BackendKind::Host => Location::Device,
            Place::Unknown => {
                return Err(invalid(
                    what,
                    "is a raw address of unknown memory, so the copy direction cannot be inferred; give the direction"
                        .into(),
                ))
            }
        })
    }

    /// Checks `size` bytes against everything known of the range. Only bare
    /// addresses pass unchecked.
    pub fn check_size(&self, size: usize, what: &'static str) -> Result<()> {
        if self.addr == 0 && size > 0 {
            return Err(invalid(what, "is NULL".into()));
        }
        match self.known_size() {
            Some(l) if size > l => Err(invalid(what, format!("{size} bytes exceed the {l} bytes of the memory"))),
            _ => Ok(()),
        }
    }

    /// The host address of `size` held bytes (bare addresses are refused).
    fn host_ptr(&self, size: usize, what: &'static str, write: bool) -> Result<*mut u8> {
        if !self.is_held() {
            return Err(invalid(
                what,
                "a raw host address is not dereferenced by gpuport; pass the buffer or array object instead".into(),
            ));
        }
        if !self.host_accessible() {
            return Err(invalid(
                what,
                "is device memory, which the host cannot read or write; use a device-side copy direction".into(),
            ));
        }
        self.check_writable(write, what)?;
        self.check_size(size, what)?;
        usize::try_from(self.addr)
            .map(|a| a as *mut u8)
            .map_err(|_| invalid(what, format!("address {:#x} is outside this host's address space", self.addr)))
    }

    /// Refuses a write (`write`) to memory its owner flagged read-only.
    fn check_writable(&self, write: bool, what: &'static str) -> Result<()> {
        if write && !self.writable {
            return Err(invalid(
                what,
                "is read-only (its producer flagged it so), and cannot be written; read-only memory is accepted \
                 as a source, a destination must be writable"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The range as device memory of `dev`, for `size` bytes (to be
    /// written, where `write`).
    fn device_mem<B: Backend>(
        &self,
        size: usize,
        dev: &AnyDevice,
        what: &'static str,
        write: bool,
    ) -> Result<RawMem<B>> {
        if dev.backend() == BackendKind::Host && !(self.is_held() && self.host_accessible()) {
            return Err(invalid(
                what,
                format!(
                    "the host backend dereferences device addresses on the host, so it takes only memory gpuport \
                     holds (malloc arrays, buffers, DLPack tensors), not raw address {:#x}",
                    self.addr
                ),
            ));
        }
        if matches!(self.place, Place::Host) && dev.backend() != BackendKind::Host {
            return Err(invalid(
                what,
                format!(
                    "is pageable host memory, not memory of {}; use a host-side copy direction (or pinned memory from \
                     malloc_pinned)",
                    dev.info().spec()
                ),
            ));
        }
        if let Some(d) = self.place.device() {
            if !same_device(&d, dev) {
                return Err(invalid(what, format!("is memory of {}, not of {}", d.info().spec(), dev.info().spec())));
            }
        }
        self.check_writable(write, what)?;
        self.check_size(size, what)?;
        Ok(RawMem {
            ptr: self.addr,
            len: self.known_size().unwrap_or(size),
            ordinal: dev.info().ordinal,
            _b: PhantomData,
        })
    }
}

/// Why host-side copies and memsets refuse a capturing stream.
const HOST_SIDE: &str = "copies between two host buffers and memsets of host memory are made by the host at once \
    (after the stream's earlier work), not enqueued, so they cannot be captured; capture copies and memsets that \
    have device memory (malloc) on one side";

fn invalid(name: &'static str, reason: String) -> Error {
    Error::InvalidArgument { name, reason }
}

/// A [`RawRange`] handed to a backend's copy or memset as device memory.
#[derive(Debug)]
struct RawMem<B> {
    ptr: u64,
    len: usize,
    ordinal: usize,
    _b: PhantomData<fn() -> B>,
}

// SAFETY: a `RawMem` is built only by `RawRange::device_mem`, from a range
// whose constructor's contract says `[ptr, ptr + len)` is device memory of
// that device, valid until the work enqueued with it has run (a bare
// address: at the caller's word, for the size the call was given).
unsafe impl<B: Backend> DeviceMemory for RawMem<B> {
    type B = B;
    fn len(&self) -> usize {
        self.len
    }
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
}

// SAFETY: a `RawMem` lives for one call and is handed out to no one else;
// writes through it are allowed by `RawRange::new`'s contract.
unsafe impl<B: Backend> DeviceMemoryMut for RawMem<B> {}

/// The device's pipelined copier for a synchronous copy of `size` bytes
/// whose host side is `host`: pageable memory only (pinned memory goes at
/// full speed directly), a GPU backend, at least 1 MiB. `None` (the
/// driver's own copy) also when the copier cannot be made.
fn pipelined_copier<D: DynDevice>(
    d: &Arc<D>,
    host: &RawRange,
    size: usize,
    sync: bool,
) -> Option<Arc<PageableCopier<D::B>>> {
    let pageable = matches!(host.place, Place::Host);
    let wanted = sync && pageable && D::B::KIND != BackendKind::Host && size >= 1 << 20;
    wanted.then(|| pageable_copier::<D::B>(d).ok()).flatten()
}

/// Copies `size` bytes from `src` to `dst` on `stream` of `dev`. `dir`
/// gives the sides (`None`: inferred from each range's place). `sync` says
/// the caller waits for the copy, so a pageable host side of 1 MiB or more
/// may go through the pipelined copier, after the stream's earlier work.
/// Without `sync` the caller keeps both ranges' owners until the stream
/// has passed the copy.
pub fn copy(
    dev: &AnyDevice,
    stream: &AnyStream,
    dst: &RawRange,
    src: &RawRange,
    size: usize,
    dir: Option<(Location, Location)>,
    sync: bool,
) -> Result<()> {
    dst.check_size(size, "dst")?;
    src.check_size(size, "src")?;
    if size == 0 {
        return Ok(());
    }
    let dir = match dir {
        Some(d) => d,
        None => (src.location(dev, "src")?, dst.location(dev, "dst")?),
    };
    // Device memory of two devices: a peer copy, on the stream of `dev`
    // (one of the two, else `copy_peer` says so).
    if dir == (Location::Device, Location::Device) {
        if let (Some(sd), Some(dd)) = (src.place.device(), dst.place.device()) {
            if !same_device(&sd, &dd) {
                return copy_peer(stream, dst, &dd, src, &sd, size);
            }
        }
    }
    on_backend!(dev, d => copy_on(d, dev, stream, dst, src, size, dir, sync))
}

/// Copies `size` bytes from `src`, device memory of `src_dev`, to `dst`,
/// device memory of `dst_dev`: two devices of one backend (or one device
/// twice), on `stream`, a stream of either. Works without peer access (the
/// driver stages through the host), faster with it
/// ([`super::peer::enable_peer_access`]). The caller keeps both ranges'
/// owners until the stream has passed the copy. [`copy`] calls it for two
/// device ranges whose places name two devices.
///
/// Errors ([`Error::InvalidArgument`]): devices of two backends, a stream
/// of a third device, a range that is not device memory of its device, a
/// size past either range.
///
/// ```
/// use gpuport::dynamic::raw::{self, Place, RawRange};
/// use gpuport::dynamic::AnyStream;
/// let dev = gpuport::open("host")?;
/// let s = AnyStream::default_for(&dev);
/// let (a, b) = (raw::alloc(&dev, gpuport::MemoryKind::Device, 8)?, raw::alloc(&dev, gpuport::MemoryKind::Device, 8)?);
/// // SAFETY: both allocations outlive the copy (the stream is synchronized
/// // below) and hold 8 bytes.
/// let (src, dst) = unsafe {
///     (
///         RawRange::new(a.ptr(), Place::Device(Some(dev.clone())), Some(8), None, false),
///         RawRange::new(b.ptr(), Place::Device(Some(dev.clone())), Some(8), None, true),
///     )
/// };
/// raw::copy_peer(&s, &dst, &dev, &src, &dev, 8)?; // on the host backend, every peer is host:0
/// s.synchronize()?;
/// assert!(raw::copy_peer(&s, &dst, &dev, &src, &dev, 9).is_err()); // past both ends
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn copy_peer(
    stream: &AnyStream,
    dst: &RawRange,
    dst_dev: &AnyDevice,
    src: &RawRange,
    src_dev: &AnyDevice,
    size: usize,
) -> Result<()> {
    if src_dev.backend() != dst_dev.backend() {
        return Err(invalid(
            "dst_device",
            format!(
                "{} and {} are devices of two backends; a peer copy is between two devices of one backend (copy                  through the host between backends)",
                src_dev.info().spec(),
                dst_dev.info().spec()
            ),
        ));
    }
    let on = stream.device();
    if !same_device(&on, src_dev) && !same_device(&on, dst_dev) {
        return Err(invalid(
            "stream",
            format!(
                "is a stream of {}; a peer copy runs on a stream of its source ({}) or destination ({}) device",
                on.info().spec(),
                src_dev.info().spec(),
                dst_dev.info().spec()
            ),
        ));
    }
    dst.check_size(size, "dst")?;
    src.check_size(size, "src")?;
    if size == 0 {
        return Ok(());
    }
    on_backend!(&on, d => copy_peer_on(d, stream, dst, dst_dev, src, src_dev, size))
}

fn copy_peer_on<D: DynDevice + PeerDevice>(
    d: &Arc<D>,
    s: &AnyStream,
    dst: &RawRange,
    dst_dev: &AnyDevice,
    src: &RawRange,
    src_dev: &AnyDevice,
    size: usize,
) -> Result<()> {
    let st = s.of(d)?;
    let from = src.device_mem::<D::B>(size, src_dev, "src", false)?;
    let to = dst.device_mem::<D::B>(size, dst_dev, "dst", true)?;
    // SAFETY: both ranges stay valid until the stream passes the copy
    // (`RawRange::new`'s contract), which the caller keeps; `device_mem`
    // checked each is memory of its device, at least `size` bytes.
    unsafe { d.copy_peer_async(&from, 0, &to, 0, size, st) }
}

#[allow(clippy::too_many_arguments)] // the arguments of `copy`, with its device resolved
fn copy_on<D: DynDevice>(
    d: &Arc<D>,
    dev: &AnyDevice,
    s: &AnyStream,
    dst: &RawRange,
    src: &RawRange,
    size: usize,
    dir: (Location, Location),
    sync: bool,
) -> Result<()> {
    let st = s.of(d)?;
    match dir {
        (Location::Host, Location::Host) => {
            let from = src.host_ptr(size, "src", false)?;
            let to = dst.host_ptr(size, "dst", true)?;
            s.refuse_in_capture(if sync { "memcpy" } else { "memcpy_async" }, HOST_SIDE)?;
            d.synchronize(st)?;
            // SAFETY: both ranges are held with at least `size` bytes
            // (`host_ptr` checked; `RawRange::new`'s contract), `dst` is
            // writable; `ptr::copy` allows overlap.
            unsafe { std::ptr::copy(from, to, size) };
            Ok(())
        }
        (Location::Host, Location::Device) => {
            let from = src.host_ptr(size, "src", false)?;
            // SAFETY: held memory of at least `size` bytes, alive for this call.
            let from = unsafe { std::slice::from_raw_parts(from as *const u8, size) };
            let mut to = dst.device_mem::<D::B>(size, dev, "dst", true)?;
            if let Some(copier) = pipelined_copier(d, src, size, sync) {
                d.synchronize(st)?;
                return copier.copy_to_device(from, &mut to, 0);
            }
            // SAFETY: both ranges stay valid until the stream passes the
            // copy (`RawRange::new`'s contract).
            unsafe { d.copy_to_device_async(from, &to, 0, st) }
        }
        (Location::Device, Location::Host) => {
            let from = src.device_mem::<D::B>(size, dev, "src", false)?;
            let to = dst.host_ptr(size, "dst", true)?;
            // SAFETY: held writable memory of at least `size` bytes with no
            // other live Rust reference (`RawRange::new`'s contract).
            let to = unsafe { std::slice::from_raw_parts_mut(to, size) };
            if let Some(copier) = pipelined_copier(d, dst, size, sync) {
                d.synchronize(st)?;
                return copier.copy_to_host(&from, 0, to);
            }
            // SAFETY: as above.
            unsafe { d.copy_to_host_async(&from, 0, to, st) }
        }
        (Location::Device, Location::Device) => {
            let from = src.device_mem::<D::B>(size, dev, "src", false)?;
            let to = dst.device_mem::<D::B>(size, dev, "dst", true)?;
            // SAFETY: as above.
            unsafe { d.copy_device_async(&from, 0, &to, 0, size, st) }
        }
    }
}

/// Sets `size` bytes of `dst` to `value` on `stream` of `dev` (host memory
/// after the stream's earlier work, on the calling thread, and never in a
/// capture). `sync` says the caller waits for the stream; without it, the
/// caller keeps `dst`'s owner until the stream has passed the memset.
pub fn memset(dev: &AnyDevice, stream: &AnyStream, dst: &RawRange, value: u8, size: usize, sync: bool) -> Result<()> {
    dst.check_size(size, "dst")?;
    if size == 0 {
        return Ok(());
    }
    let op = if sync { "memset" } else { "memset_async" };
    on_backend!(dev, d => memset_on(d, dev, stream, dst, value, size, op))
}

fn memset_on<D: DynDevice>(
    d: &Arc<D>,
    dev: &AnyDevice,
    s: &AnyStream,
    dst: &RawRange,
    value: u8,
    size: usize,
    op: &'static str,
) -> Result<()> {
    let st = s.of(d)?;
    if matches!(dst.place, Place::Host | Place::Pinned(_)) {
        let to = dst.host_ptr(size, "dst", true)?;
        s.refuse_in_capture(op, HOST_SIDE)?;
        d.synchronize(st)?;
        // SAFETY: held writable memory of at least `size` bytes (`host_ptr`).
        unsafe { std::ptr::write_bytes(to, value, size) };
        return Ok(());
    }
    let to = dst.device_mem::<D::B>(size, dev, "dst", true)?;
    // SAFETY: `dst` stays valid until the stream passes this (`RawRange::new`).
    unsafe { d.memset_async(&to, 0, size, value, st) }
}

/// Memory allocated for a raw address (as `cudaMalloc` hands one out): its
/// address, extent, kind and device, and what owns it. Dropping the last
/// `Arc` frees the memory. While it lives, [`RawAllocation::containing`]
/// finds it from any address inside it, so a bare integer handed back by a
/// binding is recognized as memory gpuport holds.
pub struct RawAllocation {
    ptr: u64,
    len: usize,
    kind: MemoryKind,
    device: AnyDevice,
    /// Frees the memory when dropped; managed memory's is the backend's `Buffer`.
    owner: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for RawAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawAllocation({:?}, {} bytes at {:#x})", self.kind, self.len, self.ptr)
    }
}

/// The live raw allocations by address (weak: the registry keeps none alive).
static LIVE: Mutex<BTreeMap<u64, Weak<RawAllocation>>> = Mutex::new(BTreeMap::new());

impl RawAllocation {
    /// The address handed out (the host address of pinned memory).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bytes were asked for.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What was allocated: `Device` (the host backend's included), `Pinned` or `Managed`.
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// The device the memory belongs to.
    pub fn device(&self) -> &AnyDevice {
        &self.device
    }

    /// Where the memory lives, as a [`RawRange`] says it.
    pub fn place(&self) -> Place {
        match self.kind {
            MemoryKind::Managed => Place::Managed(self.device.clone()),
            MemoryKind::Pinned => Place::Pinned(self.device.clone()),
            MemoryKind::Device | MemoryKind::Host => Place::Device(Some(self.device.clone())),
        }
    }

    /// Whether the host may read and write the memory (pinned or managed
    /// memory, or the host backend's device memory).
    pub fn host_accessible(&self) -> bool {
        match self.kind {
            MemoryKind::Managed | MemoryKind::Pinned => true,
            MemoryKind::Device | MemoryKind::Host => self.device.backend() == BackendKind::Host,
        }
    }

    /// Enqueues on `stream` (of the allocation's device) moving managed
    /// memory toward `to` ([`MemoryDevice::prefetch_managed`]);
    /// other memory is [`MemoryError::NotManaged`].
    ///
    /// ```
    /// use gpuport::{dynamic::{raw, AnyStream}, ManagedPlace, MemoryKind};
    /// let dev = gpuport::open("host")?;
    /// let m = raw::alloc(&dev, MemoryKind::Managed, 64)?;
    /// m.prefetch(ManagedPlace::Host, &AnyStream::default_for(&dev))?;
    /// let d = raw::alloc(&dev, MemoryKind::Device, 64)?;
    /// assert!(d.prefetch(ManagedPlace::Host, &AnyStream::default_for(&dev)).is_err());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn prefetch(&self, to: ManagedPlace, stream: &AnyStream) -> Result<()> {
        on_backend!(&self.device, d => self.managed_buffer(d, "prefetch")
            .and_then(|b| d.prefetch_managed(b, to, stream.of(d)?)))
    }

    /// Gives the driver `advice` about managed memory for `place`
    /// ([`MemoryDevice::advise_managed`]).
    pub fn advise(&self, advice: Advice, place: ManagedPlace) -> Result<()> {
        on_backend!(&self.device, d => self.managed_buffer(d, "advise")
            .and_then(|b| d.advise_managed(b, advice, place)))
    }

    /// The managed buffer behind this allocation, or `NotManaged`.
    fn managed_buffer<D: DynDevice>(&self, _: &Arc<D>, op: &'static str) -> Result<&Buffer<D::B>> {
        let buffer = (self.kind == MemoryKind::Managed).then(|| self.owner.downcast_ref::<Buffer<D::B>>()).flatten();
        buffer.ok_or_else(|| MemoryError::NotManaged { op, kind: format!("{:?}", self.kind).to_lowercase() }.into())
    }

    /// The live allocation whose bytes include `addr`, if any.
    ///
    /// ```
    /// use gpuport::{dynamic::raw::{self, RawAllocation}, MemoryKind};
    /// let dev = gpuport::open("host")?;
    /// let a = raw::alloc(&dev, MemoryKind::Device, 64)?;
    /// let found = RawAllocation::containing(a.ptr() + 10).expect("inside");
    /// assert_eq!(found.ptr(), a.ptr());
    /// assert!(RawAllocation::containing(a.ptr() + 64).map_or(true, |b| b.ptr() != a.ptr()));
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn containing(addr: u64) -> Option<Arc<RawAllocation>> {
        let live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        let (_, weak) = live.range(..=addr).next_back()?;
        let a = weak.upgrade()?;
        (addr < a.ptr.saturating_add(a.len as u64)).then_some(a)
    }

    /// Registers a fresh allocation.
    fn register(self) -> Arc<RawAllocation> {
        let a = Arc::new(self);
        LIVE.lock().unwrap_or_else(|p| p.into_inner()).insert(a.ptr, Arc::downgrade(&a));
        a
    }
}

impl Drop for RawAllocation {
    fn drop(&mut self) {
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        // A new allocation at the same address may have replaced the entry.
        if live.get(&self.ptr).is_some_and(|w| w.strong_count() == 0) {
            live.remove(&self.ptr);
        }
    }
}

/// Allocates `size` bytes of `kind` on `dev`, whose address is handed out
/// as a bare number (as `cudaMalloc` does), and registers it so that
/// [`RawAllocation::containing`] finds it. Device and pinned memory come
/// from the device's observed resource ([`super::memory::resources`], so
/// [`super::memory::statistics`] counts them); as with `cudaFree`, their release
/// waits for the whole device, since any stream may still use the address.
///
/// ```
/// use gpuport::{dynamic::raw, MemoryKind};
/// let dev = gpuport::open("host")?;
/// let a = raw::alloc(&dev, MemoryKind::Device, 256)?;
/// assert_ne!(a.ptr(), 0);
/// assert_eq!(a.len(), 256);
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn alloc(dev: &AnyDevice, kind: MemoryKind, size: usize) -> Result<Arc<RawAllocation>> {
    let (ptr, kind, owner) = on_backend!(dev, d => alloc_on(d, kind, size))?;
    Ok(RawAllocation { ptr, len: size, kind, device: dev.clone(), owner }.register())
}

type Owner = Box<dyn std::any::Any + Send + Sync>;

fn alloc_on<D: DynDevice>(d: &Arc<D>, kind: MemoryKind, size: usize) -> Result<(u64, MemoryKind, Owner)> {
    Ok(match kind {
        MemoryKind::Pinned => {
            let b = resources(d)?.allocator.alloc_pinned(size, PinnedFlags::PORTABLE)?;
            let ptr = b.as_slice().as_ptr() as usize as u64;
            (ptr, kind, Box::new(GuardedRelease::new(b, d, true)))
        }
        MemoryKind::Managed => {
            let b = d.alloc_managed(size)?;
            (b.device_ptr(), kind, Box::new(b))
        }
        MemoryKind::Device | MemoryKind::Host => {
            let a = resources(d)?.allocator.alloc(size, d.default_stream())?;
            (a.device_ptr(), MemoryKind::Device, Box::new(GuardedRelease::new(a, d, true)))
        }
    })
}
