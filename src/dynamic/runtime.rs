//! The calls of a HIP-shaped runtime (`gpuport.runtime` in Python) as
//! whole operations: which device and stream a call runs on, the checks,
//! the copy, memset or launch, and then the wait or the keeping of the
//! operands' owners. A binding converts its arguments into [`RawRange`]s
//! and a [`StreamChoice`], makes one call here, and keeps what the returned
//! [`Enqueued`] asks it to keep.
//!
//! The device of a call: the given stream's, else the first operand that
//! names its device, else [`default_device`].
//!
//! ```
//! use gpuport::dynamic::raw::{self, Place, RawRange};
//! use gpuport::dynamic::runtime::{self, StreamChoice};
//! let dev = gpuport::open("host")?;
//! let a = raw::alloc(&dev, gpuport::MemoryKind::Device, 16)?;
//! let mut out = [0u8; 16];
//! // SAFETY: `out` outlives the synchronous copy below, which waits.
//! let host = unsafe { RawRange::new(out.as_mut_ptr() as u64, Place::Host, Some(16), None, true) };
//! // SAFETY: `a` outlives both synchronous calls.
//! let dst = unsafe { RawRange::new(a.ptr(), a.place(), Some(16), None, true) };
//! runtime::memset(&dst, 7, 16, StreamChoice::Default, true)?.keep(())?;
//! runtime::memcpy(&host, &dst, 16, None, StreamChoice::Default, true)?.keep(())?;
//! assert_eq!(out, [7u8; 16]);
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use super::any::same_device;
use super::keep;
use super::module::AnyKernel;
use super::raw::{self, RawAllocation, RawRange};
use super::stream::AnyStream;
use crate::array::Location;
use crate::backend::registry::AnyDevice;
use crate::backend::{builtin, KernelArgs, LaunchConfig, MemoryKind};
use crate::error::{BackendKind, Error, Result};

/// The device a call runs on when nothing names one: `GPUPORT_DEVICE`, else
/// the first GPU, else the host (see [`crate::default_device`]); chosen
/// once per process, with its memory resource installed.
pub fn default_device() -> Result<AnyDevice> {
    static DEFAULT: OnceLock<AnyDevice> = OnceLock::new();
    if let Some(d) = DEFAULT.get() {
        return Ok(d.clone());
    }
    let chosen = crate::default_device()?.device;
    // Errors surface at the first allocation, with the call that made it.
    let _ = super::memory::install(&chosen);
    Ok(DEFAULT.get_or_init(|| chosen).clone())
}

/// The stream a call was given: the default stream, a gpuport stream
/// (owned, or borrowed for the call: [`StreamChoice::borrowed`] clones no
/// handle), or a vendor handle. `Send`: a binding makes the call (a graph
/// replay, which may wait for an array's lock) without its interpreter lock.
#[derive(Clone)]
pub struct StreamChoice<'a>(Choice<'a>);

const _: () = {
    const fn is_send<T: Send>() {}
    is_send::<StreamChoice<'_>>();
};

#[derive(Clone)]
enum Choice<'a> {
    Default,
    Stream(Cow<'a, AnyStream>),
    Handle(usize),
}

impl StreamChoice<'static> {
    /// The default stream of the device the call picks.
    #[allow(non_upper_case_globals)]
    pub const Default: StreamChoice<'static> = StreamChoice(Choice::Default);

    /// A stream gpuport made or borrowed; the call runs on its device.
    pub fn stream(s: AnyStream) -> StreamChoice<'static> {
        StreamChoice(Choice::Stream(Cow::Owned(s)))
    }

    /// A vendor stream handle (`0`: the default stream; CUDA's `1` and `2`:
    /// the legacy and per-thread default streams), borrowed on the device
    /// the call picks from its operands.
    ///
    /// # Safety
    /// The handle is a live stream of that device (or one of its vendor's
    /// sentinels), and stays live until the call's work has run.
    pub unsafe fn handle(handle: usize) -> StreamChoice<'static> {
        StreamChoice(Choice::Handle(handle))
    }
}

impl<'a> StreamChoice<'a> {
    /// As [`StreamChoice::stream`], borrowing `s` for the call: a binding's
    /// stream object lends its stream, and a launch then clones no stream
    /// handle at all (4 atomic operations fewer than a clone and its drop).
    ///
    /// ```
    /// use gpuport::dynamic::{runtime::StreamChoice, AnyStream};
    /// let dev = gpuport::open("host")?;
    /// let s = AnyStream::create(&dev)?;
    /// assert!(!StreamChoice::borrowed(&s).is_default());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn borrowed(s: &'a AnyStream) -> StreamChoice<'a> {
        StreamChoice(Choice::Stream(Cow::Borrowed(s)))
    }

    /// Whether it is [`StreamChoice::Default`] (no stream was given).
    pub fn is_default(&self) -> bool {
        matches!(self.0, Choice::Default)
    }

    /// The device a stream given as a gpuport stream belongs to.
    pub fn device(&self) -> Option<AnyDevice> {
        match &self.0 {
            Choice::Stream(s) => Some(s.device()),
            _ => None,
        }
    }

    /// The stream on `dev`: a gpuport stream of another device is refused
    /// ([`Error::DeviceMismatch`]).
    pub fn on(&self, dev: &AnyDevice) -> Result<AnyStream> {
        match &self.0 {
            Choice::Default => Ok(AnyStream::default_for(dev)),
            Choice::Stream(s) if same_device(&s.device(), dev) => Ok(s.as_ref().clone()),
            Choice::Stream(s) => Err(Error::DeviceMismatch {
                what: "stream",
                expected: dev.info().spec(),
                found: s.device().info().spec(),
            }),
            // SAFETY: `StreamChoice::handle`'s contract: a live stream of
            // the device the call picked, for as long as its work runs.
            Choice::Handle(h) => unsafe { AnyStream::borrow(dev, *h) },
        }
    }

    /// The device of a call: the stream's, else the first range that names
    /// its device, else [`default_device`].
    pub fn device_for(&self, ranges: &[&RawRange]) -> Result<AnyDevice> {
        match self.device().or_else(|| ranges.iter().find_map(|r| r.place().device())) {
            Some(d) => Ok(d),
            None => default_device(),
        }
    }
}

/// What a call left running: nothing (it waited, or had nothing to do), or
/// work on a stream that reads or writes the operands. Hand it the owners
/// of the operands' memory with [`Enqueued::keep`]; what the call itself
/// found it must keep (an allocation behind a bare address, an imported
/// array's memory) it keeps in any case, even when dropped unkept.
#[must_use = "the operands' owners must be kept until the work has run"]
pub struct Enqueued {
    stream: Option<AnyStream>,
    /// What the call found it must keep, kept with the owners.
    found: Found,
    /// The work reaches the stream when this thread's open
    /// [`keep::deferring`] scope ends (a collective group), if one is open.
    at_scope_end: bool,
}

/// What a call found it must keep until its work has run (an allocation
/// behind a bare address, an imported array's memory).
type Found = Vec<Arc<dyn Send + Sync>>;

impl Enqueued {
    fn done() -> Enqueued {
        Enqueued { stream: None, found: Vec::new(), at_scope_end: false }
    }

    /// Work on `s` that reaches it when this thread's open
    /// [`keep::deferring`] scope ends, or now outside one (a collective,
    /// which a group enqueues at its end); `found` is kept with the owners.
    pub(crate) fn at_scope_end(s: AnyStream, found: Vec<Arc<dyn Send + Sync>>) -> Enqueued {
        Enqueued { stream: Some(s), found, at_scope_end: true }
    }

    /// The stream the work runs on; `None` when the call waited.
    pub fn stream(&self) -> Option<&AnyStream> {
        self.stream.as_ref()
    }

    /// Keeps `owners` alive until the work has run (see
    /// [`keep::keep_until_done`]); drops them at once where the call waited.
    pub fn keep<T: Send + 'static>(mut self, owners: T) -> Result<()> {
        let found = std::mem::take(&mut self.found);
        match self.stream.take() {
            Some(s) if self.at_scope_end => keep::keep_at_scope_end(&s, Box::new((owners, found))),
            Some(s) => keep::keep_until_done(&s, Box::new((owners, found))),
            None => Ok(()),
        }
    }

    /// As [`Enqueued::keep`] where the caller may have nothing to keep:
    /// with nothing (and nothing found by the call), no marker is
    /// recorded on the stream.
    pub fn keep_some<T: Send + 'static>(self, owners: Option<T>) -> Result<()> {
        match (owners, self.found.is_empty()) {
            (None, true) => Ok(()),
            (owners, _) => self.keep(owners),
        }
    }
}

impl Drop for Enqueued {
    /// Keeps what the call found (never the caller's owners, which an
    /// unkept `Enqueued` never had) until the work has run.
    fn drop(&mut self) {
        if let (Some(s), false) = (self.stream.take(), self.found.is_empty()) {
            let found = std::mem::take(&mut self.found);
            let _ = if self.at_scope_end {
                keep::keep_at_scope_end(&s, Box::new(found))
            } else {
                keep::keep_until_done(&s, Box::new(found))
            };
        }
    }
}

/// After the enqueue: wait for the stream (`wait`), or hand it back.
fn finish(s: AnyStream, wait: bool) -> Result<Enqueued> {
    if wait {
        s.synchronize()?;
        return Ok(Enqueued::done());
    }
    Ok(Enqueued { stream: Some(s), found: Vec::new(), at_scope_end: false })
}

/// `hipMemcpy` (`wait`) or `hipMemcpyAsync`: `size` bytes from `src` to
/// `dst`, in direction `dir` (`None`: inferred from each range's place; see
/// [`raw::copy`] for the checks). A waiting call on a capturing stream is
/// refused before anything is enqueued.
pub fn memcpy(
    dst: &RawRange,
    src: &RawRange,
    size: usize,
    dir: Option<(Location, Location)>,
    stream: StreamChoice<'_>,
    wait: bool,
) -> Result<Enqueued> {
    let call = if wait { "memcpy" } else { "memcpy_async" };
    dst.check_size(size, "dst")?;
    src.check_size(size, "src")?;
    let dev = stream.device_for(&[dst, src])?;
    let s = stream.on(&dev)?;
    if size == 0 {
        return Ok(Enqueued::done());
    }
    if wait {
        // Refused before anything is enqueued: a capture would otherwise
        // record the copy that the wait after it then refuses.
        s.check_can_wait(call)?;
    }
    raw::copy(&dev, &s, dst, src, size, dir, wait)?;
    finish(s, wait)
}

/// `hipMemcpyPeer` (`wait`) or `hipMemcpyPeerAsync`: `size` bytes from
/// `src`, memory of `src_dev`, to `dst`, memory of `dst_dev`, on a gpuport
/// stream of either device (default: `src_dev`'s; see [`raw::copy_peer`]).
pub fn memcpy_peer(
    dst: &RawRange,
    dst_dev: &AnyDevice,
    src: &RawRange,
    src_dev: &AnyDevice,
    size: usize,
    stream: StreamChoice<'_>,
    wait: bool,
) -> Result<Enqueued> {
    let call = if wait { "memcpy_peer" } else { "memcpy_peer_async" };
    // A gpuport stream of either device is taken as it is: `copy_peer`
    // refuses one of a third device.
    let s = match &stream.0 {
        Choice::Stream(s) => s.as_ref().clone(),
        _ => stream.on(src_dev)?,
    };
    if wait {
        s.check_can_wait(call)?;
    }
    raw::copy_peer(&s, dst, dst_dev, src, src_dev, size)?;
    finish(s, wait)
}

/// `hipMemset` (`wait`) or `hipMemsetAsync`: `size` bytes at `dst` set to `value`.
pub fn memset(dst: &RawRange, value: u8, size: usize, stream: StreamChoice<'_>, wait: bool) -> Result<Enqueued> {
    let call = if wait { "memset" } else { "memset_async" };
    dst.check_size(size, "dst")?;
    let dev = stream.device_for(&[dst])?;
    let s = stream.on(&dev)?;
    if size == 0 {
        return Ok(Enqueued::done());
    }
    if wait {
        s.check_can_wait(call)?;
    }
    raw::memset(&dev, &s, dst, value, size, wait)?;
    finish(s, wait)
}

// ---- a binding's whole calls ------------------------------------------------------------

/// A copy's direction as a HIP-shaped runtime names it (`hipMemcpyKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyDirection {
    /// `hipMemcpyHostToHost`.
    HostToHost,
    /// `hipMemcpyHostToDevice`.
    HostToDevice,
    /// `hipMemcpyDeviceToHost`.
    DeviceToHost,
    /// `hipMemcpyDeviceToDevice`.
    DeviceToDevice,
    /// `hipMemcpyDefault`: inferred from where each operand is.
    Default,
}

impl CopyDirection {
    /// Every direction, in `hipMemcpyKind` order (its index is the kind).
    pub const ALL: [CopyDirection; 5] = [
        CopyDirection::HostToHost,
        CopyDirection::HostToDevice,
        CopyDirection::DeviceToHost,
        CopyDirection::DeviceToDevice,
        CopyDirection::Default,
    ];

    /// The name (`"host_to_device"`); [`from_name`](Self::from_name) also
    /// takes the short form (`"HtoD"`, none for `"default"`).
    pub fn name(self) -> &'static str {
        self.names().0
    }

    fn names(self) -> (&'static str, Option<&'static str>) {
        match self {
            CopyDirection::HostToHost => ("host_to_host", Some("HtoH")),
            CopyDirection::HostToDevice => ("host_to_device", Some("HtoD")),
            CopyDirection::DeviceToHost => ("device_to_host", Some("DtoH")),
            CopyDirection::DeviceToDevice => ("device_to_device", Some("DtoD")),
            CopyDirection::Default => ("default", None),
        }
    }

    /// The direction `name` names, long or short; [`Error::InvalidArgument`]
    /// listing the names otherwise.
    pub fn from_name(name: &str) -> Result<CopyDirection> {
        Self::ALL.into_iter().find(|d| d.names().0 == name || d.names().1 == Some(name)).ok_or_else(|| {
            let names: Vec<String> = Self::ALL.iter().map(|d| format!("{:?}", d.name())).collect();
            let (last, first) = names.split_last().expect("five directions");
            Error::InvalidArgument {
                name: "kind",
                reason: format!("memcpy kind {name:?}: use {} or {last}", first.join(", ")),
            }
        })
    }

    /// The direction of `hipMemcpyKind` value `kind` (0 to 4).
    pub fn from_hip_kind(kind: i64) -> Result<CopyDirection> {
        usize::try_from(kind).ok().and_then(|k| Self::ALL.get(k).copied()).ok_or_else(|| Error::InvalidArgument {
            name: "kind",
            reason: format!("memcpy kind {kind}: 0..=4 (hipMemcpyKind order)"),
        })
    }

    /// The (source, destination) copies it names; `None` for [`CopyDirection::Default`].
    pub fn locations(self) -> Option<(Location, Location)> {
        use Location::{Device, Host};
        match self {
            CopyDirection::HostToHost => Some((Host, Host)),
            CopyDirection::HostToDevice => Some((Host, Device)),
            CopyDirection::DeviceToHost => Some((Device, Host)),
            CopyDirection::DeviceToDevice => Some((Device, Device)),
            CopyDirection::Default => None,
        }
    }
}

/// The kind of memory `malloc`'s `kind` names: `"device"`, `"pinned"`
/// (also `"host"`) or `"managed"`.
pub fn memory_kind_from_name(kind: &str) -> Result<MemoryKind> {
    match kind {
        "device" => Ok(MemoryKind::Device),
        "pinned" | "host" => Ok(MemoryKind::Pinned),
        "managed" => Ok(MemoryKind::Managed),
        _ => Err(Error::InvalidArgument {
            name: "kind",
            reason: format!("kind {kind:?}: use \"device\", \"pinned\" or \"managed\""),
        }),
    }
}

/// A binding's whole `malloc` (`hipMalloc`, `hipHostMalloc`,
/// `hipMallocManaged`): drops the owners of completed work
/// ([`keep::prune`]), reads `kind` ([`memory_kind_from_name`]; refused
/// before anything is allocated) and allocates `size` bytes of it on `dev`
/// ([`raw::alloc`]) through `unlocked`, which a binding runs without its
/// interpreter lock (PyO3: `|op| py.detach(op)`; `|op| op()` otherwise).
pub fn malloc(
    dev: &AnyDevice,
    kind: &str,
    size: usize,
    unlocked: impl FnOnce(Allocating<'_>) -> Result<Arc<RawAllocation>>,
) -> Result<Arc<RawAllocation>> {
    keep::prune();
    let kind = memory_kind_from_name(kind)?;
    unlocked(&mut || raw::alloc(dev, kind, size))
}

/// What [`malloc`]'s `unlocked` is handed: the allocation.
pub type Allocating<'a> = &'a mut (dyn FnMut() -> Result<Arc<RawAllocation>> + Send);

/// How a binding makes a whole call ([`memcpy_and_keep`], [`memset_and_keep`],
/// [`memcpy_peer_and_keep`]): the stream, whether it waits, the owners of
/// the operands' memory, and how the part that may block is run.
pub struct Whole<'a, T, U> {
    /// The stream the call was given.
    pub stream: StreamChoice<'a>,
    /// Wait for the work (`hipMemcpy`), or leave it running (`hipMemcpyAsync`).
    pub wait: bool,
    /// Kept until the work has run; dropped at once where the call waited
    /// or failed.
    pub owners: T,
    /// Runs the enqueue and the wait, once: a binding releases its
    /// interpreter lock around them (PyO3: `|op| py.detach(op)`); `|op| op()` otherwise.
    pub unlocked: U,
}

/// What [`Whole::unlocked`] is handed: the enqueue and the wait.
pub type Blocking<'a> = &'a mut (dyn FnMut() -> Result<Enqueued> + Send);

impl<T: Send + 'static, U: FnOnce(Blocking<'_>) -> Result<Enqueued>> Whole<'_, T, U> {
    /// Drops the owners of completed work (before anything blocks, on the
    /// caller's thread and under its interpreter lock), runs `op` through
    /// `unlocked`, and keeps the owners until its work has run.
    fn run(self, op: impl Fn(StreamChoice<'_>, bool) -> Result<Enqueued> + Send + Sync) -> Result<()> {
        keep::prune();
        let Whole { stream, wait, owners, unlocked } = self;
        let enqueued = unlocked(&mut || op(stream.clone(), wait))?;
        enqueued.keep(owners)
    }
}

/// A binding's whole `memcpy`: drops the owners of completed work, makes
/// the [`memcpy`] in `dir`, and keeps `call.owners` until it has run.
pub fn memcpy_and_keep<T: Send + 'static, U: FnOnce(Blocking<'_>) -> Result<Enqueued>>(
    dst: &RawRange,
    src: &RawRange,
    size: usize,
    dir: CopyDirection,
    call: Whole<'_, T, U>,
) -> Result<()> {
    call.run(|stream, wait| memcpy(dst, src, size, dir.locations(), stream, wait))
}

/// A binding's whole `memcpy_peer`, as [`memcpy_and_keep`] with [`memcpy_peer`].
pub fn memcpy_peer_and_keep<T: Send + 'static, U: FnOnce(Blocking<'_>) -> Result<Enqueued>>(
    (dst, dst_dev): (&RawRange, &AnyDevice),
    (src, src_dev): (&RawRange, &AnyDevice),
    size: usize,
    call: Whole<'_, T, U>,
) -> Result<()> {
    call.run(|stream, wait| memcpy_peer(dst, dst_dev, src, src_dev, size, stream, wait))
}

/// A binding's whole `memset`, as [`memcpy_and_keep`] with [`memset`].
pub fn memset_and_keep<T: Send + 'static, U: FnOnce(Blocking<'_>) -> Result<Enqueued>>(
    dst: &RawRange,
    value: u8,
    size: usize,
    call: Whole<'_, T, U>,
) -> Result<()> {
    call.run(|stream, wait| memset(dst, value, size, stream, wait))
}

/// `hipDeviceSynchronize`: blocks until the work on every stream of `dev`
/// is done, gpuport's streams and other libraries' alike (a CuPy or torch
/// stream that `memset_async` or `launch` was given), as CUDA's and HIP's
/// device synchronize do. The caller then drops the owners of completed
/// work ([`keep::prune`]), with the GIL where they are Python objects.
///
/// Errors: refused while a capture runs on the device (a device-wide wait
/// would invalidate it); a driver error.
pub fn device_synchronize(dev: &AnyDevice) -> Result<()> {
    use crate::backend::Device as _;
    crate::on_backend!(&dev, d => d.synchronize_device())
}

/// `hipModuleLaunchKernel`: `kernel` with `config` and `args` on `stream`,
/// without waiting. The returned [`Enqueued`] keeps the owners of the
/// pointer arguments' memory until the launch has run.
///
/// On the host backend a kernel runs on the host and dereferences its
/// pointer arguments there, so only the built-ins whose arguments can be
/// checked run: `gpuport_empty`, `gpuport_sleep_ns`, and `gpuport_fill_u32`
/// whose target must be `first_pointer` (the range behind its first
/// argument, where the caller holds one) or lie in a live
/// [`RawAllocation`], with room for what it writes.
///
/// # Safety
/// On a GPU backend, as for [`AnyKernel::launch`]: `args` match the
/// kernel's parameters, and the memory they point to stays alive and
/// unaliased until the launch has run (keep its owners with the returned
/// [`Enqueued`]). `first_pointer`, where given, is the range the first
/// argument's address points into.
pub unsafe fn launch(
    kernel: &AnyKernel,
    name: &str,
    config: LaunchConfig,
    args: &KernelArgs,
    first_pointer: Option<&RawRange>,
    stream: StreamChoice<'_>,
) -> Result<Enqueued> {
    // SAFETY: the caller's contract, forwarded.
    let (s, found) = unsafe { launch_on(kernel, name, config, args, first_pointer, &stream) }?;
    Ok(Enqueued { stream: Some(s.into_owned()), found, at_scope_end: false })
}

/// [`launch`] without the [`Enqueued`]: the stream it ran on, borrowed
/// from `stream` where that names one (a launch clones no stream and no
/// device then: 8 atomic operations fewer per `launch_kernel` given a
/// stream), and what the call found it must keep.
///
/// # Safety
/// As for [`launch`].
unsafe fn launch_on<'a>(
    kernel: &AnyKernel,
    name: &str,
    config: LaunchConfig,
    args: &KernelArgs,
    first_pointer: Option<&RawRange>,
    stream: &'a StreamChoice<'_>,
) -> Result<(Cow<'a, AnyStream>, Found)> {
    let s = match &stream.0 {
        // `AnyKernel::launch` refuses another device's stream, with the
        // same error as `StreamChoice::on`.
        Choice::Stream(s) => Cow::Borrowed(s.as_ref()),
        _ => Cow::Owned(stream.on(&kernel.device())?),
    };
    let found =
        if kernel.backend() == BackendKind::Host { host_launch_target(name, args, first_pointer)? } else { None };
    // SAFETY: on the host backend only the checked built-ins run (their
    // target lies in held memory of the right size, kept by the caller
    // with `found`); on GPUs the arguments are the caller's contract.
    unsafe { kernel.launch(config, args, &s) }?;
    Ok((s, found.into_iter().map(|a| a as Arc<dyn Send + Sync>).collect()))
}

/// A binding's whole `launch_kernel` in one call: drops the owners of
/// completed work on streams with [`keep::LAUNCH_PRUNE_LEN`] or more kept
/// operations (as [`keep::prune`]), makes the [`launch`] and keeps
/// `owners` until it has run (`None`, with nothing found to keep either:
/// no marker is recorded, as [`Enqueued::keep_some`]).
///
/// The prune, the launch and the marker's record make their device current
/// once between them (`src/backend/bound.rs`): the owners the prune
/// releases, which may be a binding's objects with finalizers that change
/// the thread's current device, are dropped only after the last driver call.
///
/// # Safety
/// As for [`launch`]; `owners` are the owners of the memory the pointer
/// arguments point to.
pub unsafe fn launch_and_keep<T: Send + 'static>(
    kernel: &AnyKernel,
    name: &str,
    config: LaunchConfig,
    args: &KernelArgs,
    first_pointer: Option<&RawRange>,
    stream: StreamChoice<'_>,
    owners: Option<T>,
) -> Result<()> {
    // Declared first, so dropped last: after the scope below has ended.
    let completed;
    let _bound = crate::backend::bound::scope();
    completed = keep::take_completed(keep::LAUNCH_PRUNE_LEN);
    // SAFETY: the caller's contract, forwarded.
    let (s, found) = unsafe { launch_on(kernel, name, config, args, first_pointer, &stream) }?;
    // Nothing to keep: no marker, and no clone of the stream.
    let kept = match (owners, found.is_empty()) {
        (None, true) => Ok(()),
        (owners, _) => Enqueued { stream: Some(s.into_owned()), found, at_scope_end: false }.keep(owners),
    };
    drop(_bound);
    drop(completed);
    kept
}

/// The check of a host-backend launch (see [`launch`]): the allocation
/// the target lies in where it was found from a bare address.
fn host_launch_target(
    name: &str,
    args: &KernelArgs,
    first_pointer: Option<&RawRange>,
) -> Result<Option<Arc<RawAllocation>>> {
    let invalid = |reason: String| Error::InvalidArgument { name: "args", reason };
    match name {
        builtin::EMPTY | builtin::SLEEP_NS => Ok(None),
        builtin::FILL_U32 => {
            let (Some(ptr), Some(n)) = (args.get::<u64>(0), args.get::<u64>(1)) else {
                return Err(invalid("gpuport_fill_u32 takes (ptr u64, n u64, value u32)".into()));
            };
            let need = n.checked_mul(4).ok_or_else(|| invalid("gpuport_fill_u32: n is too large".into()))?;
            if need == 0 {
                return Ok(None);
            }
            // The target: the first pointer argument where the caller holds
            // it, else a live allocation the address lies in.
            let held = first_pointer.filter(|r| r.is_held() && r.host_accessible() && r.addr() == ptr);
            let (room, writable, found) = match held {
                Some(r) => (r.known_size(), r.is_writable(), None),
                None => match RawAllocation::containing(ptr) {
                    Some(a) if a.host_accessible() => {
                        // `ptr` lies inside the allocation: the rest is at most its length.
                        let offset = usize::try_from(ptr - a.ptr()).unwrap_or(usize::MAX);
                        let room = a.len().saturating_sub(offset);
                        (Some(room), true, Some(a))
                    }
                    _ => (None, false, None),
                },
            };
            match room {
                Some(l) if writable && need <= l as u64 => Ok(found),
                Some(l) => Err(invalid(format!(
                    "gpuport_fill_u32: {need} bytes at {ptr:#x} exceed the {l} writable bytes there"
                ))),
                None => Err(invalid(format!(
                    "gpuport_fill_u32 on the host backend: {ptr:#x} is not memory gpuport holds (pass a DeviceArray \
                     or a buffer)"
                ))),
            }
        }
        other => Err(Error::Unsupported {
            op: "launching this kernel through the runtime",
            backend: BackendKind::Host,
            hint: Some(format!(
                "{other}: on the host backend, gpuport_empty, gpuport_sleep_ns and gpuport_fill_u32 can be launched \
                 through the runtime (their pointer arguments are checked)"
            )),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::dynamic::{AnyModule, Code};

    /// Notes whether a bind scope was open on the thread that dropped it.
    struct DroppedInScope(Arc<AtomicBool>);
    impl Drop for DroppedInScope {
        fn drop(&mut self) {
            self.0.store(crate::backend::bound::scope_open(), Ordering::SeqCst);
        }
    }

    #[test]
    fn a_launch_drops_the_owners_of_finished_work_after_its_bind_scope() {
        let dev = crate::open("host").unwrap();
        let s = AnyStream::create(&dev).unwrap();
        let empty = AnyModule::load(&dev, &Code::Builtin, "builtins", &[]).unwrap().kernel(builtin::EMPTY).unwrap();
        let in_scope = Arc::new(AtomicBool::new(true));
        keep::keep_until_done(&s, Box::new(DroppedInScope(in_scope.clone()))).unwrap();
        // Enough kept for a launch to ask the stream (`keep::LAUNCH_PRUNE_LEN`).
        for _ in 1..keep::LAUNCH_PRUNE_LEN {
            keep::keep_until_done(&s, Box::new(())).unwrap();
        }
        s.synchronize().unwrap();
        let config = LaunchConfig::linear(1, 1);
        // SAFETY: the empty kernel takes no arguments and touches no memory.
        unsafe {
            launch_and_keep(
                &empty,
                builtin::EMPTY,
                config,
                &KernelArgs::new(),
                None,
                StreamChoice::stream(s),
                None::<()>,
            )
        }
        .unwrap();
        assert_eq!(Arc::strong_count(&in_scope), 1, "the launch did not drop the finished work's owners");
        assert!(!in_scope.load(Ordering::SeqCst), "an owner was dropped inside the bind scope");
    }
}
