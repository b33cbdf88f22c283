//! Graphs: stream capture, executable graphs, replay and update, on every
//! backend (design and rules: `docs/design.md#graphs`).
//!
//! Work enqueued on a stream between [`Device::begin_capture`] and
//! [`Capture::end`] is not run but recorded into a [`Graph`]: kernels,
//! copies, memsets, event records and waits (`cuStreamBeginCapture` /
//! `hipStreamBeginCapture` on the GPUs; on the host backend the stream keeps
//! the closures it would have run). [`Graph::instantiate`] makes a
//! [`GraphExec`], which [`GraphExec::launch`] replays on any stream of the
//! device, as often as wanted, and [`GraphExec::update`] refits from a
//! re-captured graph of the same shape.
//!
//! ```
//! use gpuport::{builtin, CaptureMode, Device, DeviceMemory, HostDevice, KernelArgs, ModuleSource};
//!
//! let d = HostDevice::open(0)?;
//! let stream = d.create_stream()?;
//! let buf = d.alloc(4 * 64)?;
//! let fill = d.kernel(&d.load_module(ModuleSource::Builtin)?, builtin::FILL_U32)?;
//!
//! let capture = d.begin_capture(&stream, CaptureMode::Global)?;
//! let mut args = KernelArgs::new();
//! args.push_buffer(&buf).push(&64u64).push(&7u32); // keeps `buf` alive for the graph
//! // SAFETY: the arguments match `fill_u32`; the graph keeps `buf` alive.
//! unsafe { d.launch(&fill, d.default_launch_config(&fill, 64)?, &args, capture.stream())? };
//! let graph = capture.end()?;
//! let exec = graph.instantiate()?;
//! drop(buf); // the graph still holds the memory
//! exec.launch(&stream)?;
//! exec.launch(&stream)?;
//! d.synchronize(&stream)?;
//! # Ok::<(), gpuport::Error>(())
//! ```
//!
//! ## Lifetimes
//! A graph keeps alive everything it references that has an owner to hold:
//! each buffer a captured copy or memset names ([`DeviceMemory::owner`]:
//! every backend's buffers have one), each buffer pushed into launch
//! arguments with [`KernelArgs::push_buffer`](crate::KernelArgs::push_buffer), each kernel's module (GPU),
//! and whatever [`Capture::keep_alive`] or [`KernelArgs::keep_alive`](crate::KernelArgs::keep_alive) was
//! given. They live until the graph and the last [`GraphExec`] made from it
//! are dropped, and a `GraphExec`'s drop first waits for its launches.
//!
//! What has no owner (host slices given to copies, pool allocations,
//! addresses pushed as plain integers) the caller keeps alive: the `unsafe`
//! enqueue calls' contract "until the stream has passed the operation"
//! means, for an operation enqueued in a capture, until the last
//! executable graph made from the capture has been dropped. That promise,
//! made at capture time, is what makes [`GraphExec::launch`] safe.
//!
//! ## Errors
//! Calls that would wait for a capturing stream are refused with
//! [`Error::Graph`] before the driver sees them, so the capture survives
//! them; see [`GraphErrorKind`] for every rule. A [`Capture`] dropped
//! without [`Capture::end`] ends the capture and discards the graph.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::gate::{CaptureGate, GateShared, DEVICE_WIDE};
use super::order::{hold_in_order, OrderLock};
use super::{Backend, Device, DeviceMemory, Stream};
use crate::error::{graph_error, BackendKind, Error, GraphErrorKind, Result};

pub(crate) use ops::{CaptureStream, RawGraph, RawGraphExec, Recorder};

/// Something that keeps memory (or a module) alive while it is held.
pub type Owner = Arc<dyn Any + Send + Sync>;

/// Something whose own work a graph's replays must be ordered with (a
/// `MemArray` whose kernel methods the graph captured): each
/// [`GraphExec::launch`] holds the [`order`](Self::order) lock of every
/// fence of the graph (`order.rs`), then runs inside
/// [`around_launch`](Self::around_launch) of each.
pub(crate) trait ReplayFence<B: Backend>: Send + Sync {
    /// The lock that the fenced work and the launches hold for each step.
    fn order(&self) -> OrderLock;

    /// Runs `launch`, one replay on `stream` (not capturing), after the
    /// work it fences (a device-side wait, no host wait), and records the
    /// replay's end as that work; `writes`: the replay writes what it
    /// fences. Called with [`order`](Self::order) held.
    fn around_launch(&self, stream: &Stream<B>, writes: bool, launch: &mut dyn FnMut() -> Result<()>) -> Result<()>;
}

/// A [`ReplayFence`] as a capture's recorder holds it: an owner, which
/// [`Capture::end`] picks out for the graph.
struct FenceOwner<B: Backend> {
    fence: Arc<dyn ReplayFence<B>>,
    writes: bool,
}

/// The owner to give a capture's graph (`Device::keep_for_graph`) so that
/// its replays run inside `fence` ([`ReplayFence::around_launch`]).
pub(crate) fn fence_owner<B: Backend>(fence: Arc<dyn ReplayFence<B>>, writes: bool) -> Owner {
    Arc::new(FenceOwner { fence, writes })
}

/// A graph's fences, each once (whether any capture of it writes), in
/// address order: the order launches take their locks in.
type Fences<B> = Arc<[(Arc<dyn ReplayFence<B>>, bool)]>;

fn fences_among<B: Backend>(owners: &[Owner]) -> Fences<B> {
    let address = |f: &Arc<dyn ReplayFence<B>>| Arc::as_ptr(f).cast::<()>() as usize;
    let mut fences: Vec<(Arc<dyn ReplayFence<B>>, bool)> =
        owners.iter().filter_map(|o| o.downcast_ref::<FenceOwner<B>>()).map(|f| (f.fence.clone(), f.writes)).collect();
    fences.sort_by_key(|(f, _)| address(f));
    fences.dedup_by(|(later, w), (kept, kept_writes)| {
        let same = address(later) == address(kept);
        *kept_writes |= same && *w;
        same
    });
    fences.into()
}

/// Runs `launch` inside every fence of `fences`, the first outermost.
fn launch_fenced<B: Backend>(
    fences: &[(Arc<dyn ReplayFence<B>>, bool)],
    stream: &Stream<B>,
    launch: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    match fences.split_first() {
        None => launch(),
        Some(((fence, writes), rest)) => {
            fence.around_launch(stream, *writes, &mut || launch_fenced(rest, stream, &mut *launch))
        }
    }
}

/// How a capture restricts calls made elsewhere while it runs (CUDA's
/// `CUstreamCaptureMode`, HIP's `hipStreamCaptureMode`). gpuport applies the
/// same rule on every backend to the calls that wait for the whole device
/// or the default stream ([`GraphErrorKind::SynchronousCall`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CaptureMode {
    /// Such calls are refused on every thread while the capture runs.
    #[default]
    Global,
    /// Such calls are refused on the thread that began the capture.
    ThreadLocal,
    /// No call elsewhere is refused (the capturing stream's own rules stay).
    Relaxed,
}

/// Whether a stream is capturing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Not capturing: work runs.
    None,
    /// Capturing: work is recorded.
    Active,
    /// Capturing, but an error invalidated the capture: ending it fails.
    Invalidated,
}

impl CaptureStatus {
    /// Whether the stream is in capture mode (active or invalidated).
    pub fn is_capturing(self) -> bool {
        self != CaptureStatus::None
    }
}

/// The backend side of graphs. The traits are public in name only (a
/// private module): [`Backend`] requires them of its types, and only this
/// crate's backends implement them.
mod ops {
    use super::*;

    /// The owners one capture collects, shared with its stream while it runs.
    #[derive(Default)]
    pub struct Recorder {
        owners: Mutex<Vec<Owner>>,
    }

    impl Recorder {
        /// Keeps `owner` for the graph.
        pub(crate) fn keep(&self, owner: Owner) {
            self.owners.lock().unwrap_or_else(|p| p.into_inner()).push(owner);
        }

        pub(super) fn take(&self) -> Vec<Owner> {
            std::mem::take(&mut *self.owners.lock().unwrap_or_else(|p| p.into_inner()))
        }
    }

    impl fmt::Debug for Recorder {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Recorder({} owners)", self.owners.lock().unwrap_or_else(|p| p.into_inner()).len())
        }
    }

    /// Capture on a backend's stream.
    pub trait CaptureStream<B: Backend> {
        /// The ordinal of the stream's device.
        fn capture_ordinal(&self) -> usize;
        /// The stream's capture gate (see [`capture_section`](super::capture_section)).
        fn gate(&self) -> &CaptureGate;
        /// Starts capturing; the stream's operations give `recorder` the
        /// owners of what they reference until the capture ends. A stream
        /// already capturing is [`GraphErrorKind::AlreadyCapturing`].
        fn begin_capture(&self, mode: CaptureMode, recorder: Arc<Recorder>) -> Result<()>;
        /// Ends the capture, whatever happens: the graph, or why there is
        /// none ([`GraphErrorKind::Invalidated`]).
        fn end_capture(&self) -> Result<B::RawGraph>;
        /// Whether the stream is capturing (the driver's answer on GPUs).
        fn capture_status(&self) -> Result<CaptureStatus>;
        /// While a gpuport capture runs on this stream, gives `owner` to its
        /// graph (kept as long as the graph and its executables); while
        /// another library's capture runs (GPUs), hands it to that graph
        /// through the driver (see `GraphCalls::retain_in_capture`), or
        /// where the driver cannot, keeps it for the rest of the process;
        /// otherwise drops it.
        fn keep_for_graph(&self, owner: Owner);
        /// The id of the capture running on this stream (gpuport's, or on
        /// GPUs another library's: the driver's id), `None` when the stream
        /// does not capture. No two captures of a backend share an id.
        fn capture_id(&self) -> Result<Option<u64>>;
    }

    /// A captured graph.
    pub trait RawGraph<B: Backend>: Send + Sync + fmt::Debug + Sized {
        /// Number of nodes.
        fn node_count(&self) -> Result<usize>;
        /// An executable graph of it.
        fn instantiate(&self) -> Result<B::RawGraphExec>;
    }

    /// An executable graph.
    pub trait RawGraphExec<B: Backend>: Send + Sync + fmt::Debug + Sized {
        /// Enqueues one replay on `stream` (of the graph's device: checked by the caller).
        fn launch(&self, stream: &B::Stream) -> Result<()>;
        /// Takes `graph`'s parameters; [`GraphErrorKind::UpdateRefused`]
        /// (and no change) for a graph of another shape.
        fn update(&mut self, graph: &B::RawGraph) -> Result<()>;
        /// Whether every launch so far has completed.
        fn is_idle(&self) -> bool;
        /// Waits for every launch so far.
        fn wait_idle(&self);
    }
}

// ---- owners a driver let go of ---------------------------------------------------------

/// Owners that a graph of another library held (see
/// `CaptureStream::keep_for_graph` on GPUs), handed back by the driver on a
/// thread of its own, where no driver call may be made: their drops (which
/// may free memory) run later, on a thread of gpuport's ([`drop_released`]).
static RELEASED: Mutex<Vec<Owner>> = Mutex::new(Vec::new());
static RELEASED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Keeps `owner` until the next [`drop_released`]; callable from any thread.
#[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
pub(crate) fn release_later(owner: Owner) {
    let mut released = RELEASED.lock().unwrap_or_else(|p| p.into_inner());
    released.push(owner);
    RELEASED_COUNT.store(released.len(), Ordering::Release);
}

/// Whether [`drop_released`] has owners to drop.
#[inline]
pub(crate) fn released_pending() -> bool {
    RELEASED_COUNT.load(Ordering::Acquire) != 0
}

/// Drops the owners [`release_later`] kept (one atomic load when there are
/// none: every allocation and free calls this, and the drop itself is out
/// of line so that the check needs no stack frame).
#[inline]
pub(crate) fn drop_released() {
    if released_pending() {
        drop_released_now();
    }
}

#[cold]
#[inline(never)]
fn drop_released_now() {
    let owners = {
        let mut released = RELEASED.lock().unwrap_or_else(|p| p.into_inner());
        RELEASED_COUNT.store(0, Ordering::Release);
        std::mem::take(&mut *released)
    };
    drop(owners);
}

/// [`GraphErrorKind::NestedLaunch`]: an executable graph launched into a capturing stream.
pub(crate) fn nested_launch(backend: BackendKind) -> Error {
    graph_error(
        backend,
        "launch",
        GraphErrorKind::NestedLaunch,
        "the stream is capturing: an executable graph cannot be launched into a capture; launch it after the \
         capture ends, or on another stream"
            .into(),
    )
}

// ---- the captures running now, for the capture modes' rules ---------------------------

struct Active {
    id: u64,
    backend: BackendKind,
    ordinal: usize,
    mode: CaptureMode,
    thread: std::thread::ThreadId,
}

static ACTIVE_COUNT: AtomicUsize = AtomicUsize::new(0);
static ACTIVE: Mutex<Vec<Active>> = Mutex::new(Vec::new());

fn register(backend: BackendKind, ordinal: usize, mode: CaptureMode) -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let thread = std::thread::current().id();
    ACTIVE.lock().unwrap_or_else(|p| p.into_inner()).push(Active { id, backend, ordinal, mode, thread });
    ACTIVE_COUNT.fetch_add(1, Ordering::AcqRel);
    id
}

fn unregister(id: u64) {
    let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = active.iter().position(|a| a.id == id) {
        active.swap_remove(i);
        ACTIVE_COUNT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Things whose release needs a device-wide wait that a running capture
/// forbids (memory whose address was handed out: `memory::GuardedRelease`), kept
/// until no capture forbids it, with the device they wait for.
static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());

/// A deferred release: the device its wait is for, and what to drop.
type Deferred = (BackendKind, usize, Box<dyn Send>);

/// Keeps `item` until no running capture forbids a device-wide wait on
/// `backend:ordinal`, then drops it (at the end of the capture that
/// forbade it, or at `memory::release_all`): a release that needs such a
/// wait is deferred, never skipped.
pub(crate) fn defer_until_device_waits_allowed(backend: BackendKind, ordinal: usize, item: Box<dyn Send>) {
    DEFERRED.lock().unwrap_or_else(|p| p.into_inner()).push((backend, ordinal, item));
    // The capture may have ended since the refusal: then nothing else would release it.
    if check_device_wide_wait(backend, ordinal, "release").is_ok() {
        release_deferred();
    }
}

/// Drops what [`defer_until_device_waits_allowed`] kept, where no running
/// capture forbids its wait any more (on this thread).
pub(crate) fn release_deferred() {
    let ready: Vec<_> = {
        let mut deferred = DEFERRED.lock().unwrap_or_else(|p| p.into_inner());
        if deferred.is_empty() {
            return;
        }
        let (ready, kept) = std::mem::take(&mut *deferred)
            .into_iter()
            .partition(|(b, o, _)| check_device_wide_wait(*b, *o, "release").is_ok());
        *deferred = kept;
        ready
    };
    // Outside the lock: each drop waits for the device, and may defer again.
    drop(ready);
}

/// Refuses `op`, a call that waits for the whole device or its default
/// stream, where a running capture forbids it. On a GPU, every capture
/// does, in any mode: CUDA would invalidate it. On the host, one in
/// [`CaptureMode::Global`] (any thread) or [`CaptureMode::ThreadLocal`]
/// begun on this thread does.
///
/// On the GPU backends the rule spans the process, not the device: CUDA
/// forbids those calls on every device while a global capture runs on any
/// (`cuStreamBeginCapture`'s modes), and under the HIP-on-CUDA shim a HIP
/// capture is a CUDA one. The host backend's captures are gpuport's own
/// and bind only the host device. Captures another library runs on the
/// GPU are not seen here (the caching pool keeps its own watch for them).
pub(crate) fn check_device_wide_wait(backend: BackendKind, ordinal: usize, op: &'static str) -> Result<()> {
    check_wait_beside_captures(backend, ordinal, op, true)
}

/// [`check_device_wide_wait`]'s rule for a wait on the default stream
/// alone: the capture modes' (on a GPU too, a relaxed capture, or a
/// thread-local one of another thread, lets the legacy stream wait while
/// a non-blocking stream captures).
pub(crate) fn check_default_stream_wait(backend: BackendKind, ordinal: usize, op: &'static str) -> Result<()> {
    check_wait_beside_captures(backend, ordinal, op, false)
}

fn check_wait_beside_captures(
    backend: BackendKind,
    ordinal: usize,
    op: &'static str,
    whole_device: bool,
) -> Result<()> {
    if ACTIVE_COUNT.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let thread = std::thread::current().id();
    let active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    let host = BackendKind::Host;
    let forbidding = active.iter().find(|a| {
        let binds =
            if backend == host || a.backend == host { a.backend == backend && a.ordinal == ordinal } else { true };
        // On a GPU every capture forbids a device-wide wait, whatever its
        // mode: CUDA makes synchronizing a device or context while any of
        // its streams captures an error that invalidates the capture (the
        // modes govern only "potentially unsafe" calls such as `cuMemAlloc`).
        binds
            && ((whole_device && a.backend != host)
                || match a.mode {
                    CaptureMode::Global => true,
                    CaptureMode::ThreadLocal => a.thread == thread,
                    CaptureMode::Relaxed => false,
                })
    });
    match forbidding {
        Some(a) => Err(graph_error(
            backend,
            op,
            GraphErrorKind::SynchronousCall,
            if whole_device && a.backend != host {
                format!(
                    "a capture ({:?} mode) is running on {}:{}, and a wait for the whole device would invalidate \
                     it, in any mode; end the capture first",
                    a.mode, a.backend, a.ordinal
                )
            } else {
                format!(
                    "a capture in {:?} mode is running on {}:{}, and this call would wait for work the capture \
                     forbids waiting for; end the capture first, or capture in CaptureMode::Relaxed",
                    a.mode, a.backend, a.ordinal
                )
            },
        )),
        None => Ok(()),
    }
}

/// Enters `stream`'s capture gate for a section that asks whether the
/// stream captures and enqueues on the answer: no gpuport capture begins or
/// ends on `stream` until the guard is dropped, so the answer holds for
/// every enqueue and the bookkeeping in between (`src/backend/gate.rs`).
/// Re-entrant on one thread; uncontended, a thread-local lookup and one
/// atomic each way. Another library's capture (through the driver, on a
/// handle gpuport gave out) passes no gate: GPU code keeps asking the driver.
#[inline]
pub(crate) fn capture_section<B: Backend>(stream: &Stream<B>) -> GateShared<'_> {
    stream.gate().shared()
}

/// [`capture_section`] if it needs no wait; `None` while a capture begins
/// or ends on `stream` (see `CaptureGate::try_shared`).
pub(crate) fn try_capture_section<B: Backend>(stream: &Stream<B>) -> Option<GateShared<'_>> {
    stream.gate().try_shared()
}

/// Enters the process-wide section of calls that check a capture mode's
/// device-wide rule and then act on it (`keep::prune`'s event queries): no
/// capture begins until the guard is dropped.
pub(crate) fn device_wide_section() -> GateShared<'static> {
    DEVICE_WIDE.shared()
}

/// Refuses `op`, a call that waits for `stream`, where `stream` is capturing.
pub(crate) fn check_not_capturing(backend: BackendKind, op: &'static str, status: Result<CaptureStatus>) -> Result<()> {
    match status? {
        CaptureStatus::None => Ok(()),
        status => Err(graph_error(
            backend,
            op,
            GraphErrorKind::SynchronousCall,
            format!(
                "the stream is capturing ({status:?}): its work has not run and will run only when the graph \
                 is launched, so nothing can wait for it; end the capture first"
            ),
        )),
    }
}

// ---- capture ------------------------------------------------------------------------

/// A capture running on a stream; [`end`](Self::end) returns the graph.
/// Dropped without `end`, it ends the capture and discards what was
/// captured, leaving the stream usable. Not `Send`: CUDA requires a capture
/// in [`CaptureMode::Global`] or [`CaptureMode::ThreadLocal`] to end on the
/// thread that began it.
#[must_use = "dropping a capture discards it"]
pub struct Capture<B: Backend> {
    stream: B::Stream,
    recorder: Arc<Recorder>,
    ordinal: usize,
    id: u64,
    ended: bool,
    _not_send: PhantomData<*const ()>,
}

impl<B: Backend> fmt::Debug for Capture<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Capture({:?} on {}:{}, {:?})", self.stream, B::KIND, self.ordinal, self.recorder)
    }
}

impl<B: Backend> Capture<B> {
    /// Starts capturing `stream` of `device` (what [`Device::begin_capture`] does).
    pub(crate) fn begin<D: Device<B = B>>(device: &D, stream: &Stream<B>, mode: CaptureMode) -> Result<Self> {
        let ordinal = device.info().ordinal;
        super::check_same_device("stream", B::KIND, ordinal, stream.capture_ordinal())?;
        let default = device.default_stream();
        if device.stream_id(stream).is_some() && device.stream_id(stream) == device.stream_id(default) {
            return Err(super::gate::default_stream_refused(B::KIND, "begin_capture"));
        }
        let recorder = Arc::new(Recorder::default());
        // Between gpuport's sections on the stream, and between `prune`'s
        // device-wide ones (see `gate.rs`).
        let _gate = stream.gate().exclusive(B::KIND, "begin_capture")?;
        let _wide = DEVICE_WIDE.exclusive(B::KIND, "begin_capture")?;
        stream.begin_capture(mode, recorder.clone())?;
        let id = register(B::KIND, ordinal, mode);
        Ok(Capture { stream: stream.clone(), recorder, ordinal, id, ended: false, _not_send: PhantomData })
    }

    /// The capturing stream: enqueue the work to record on it.
    pub fn stream(&self) -> &Stream<B> {
        &self.stream
    }

    /// Whether the capture is still valid ([`CaptureStatus::Active`]) or was
    /// invalidated by an error ([`CaptureStatus::Invalidated`]).
    pub fn status(&self) -> Result<CaptureStatus> {
        self.stream.capture_status()
    }

    /// Keeps `owner` alive as long as the graph (and every executable graph
    /// made from it): for memory whose address went into launch arguments
    /// without [`KernelArgs::push_buffer`](crate::KernelArgs::push_buffer)(crate::KernelArgs::push_buffer),
    /// or anything else the captured work needs.
    pub fn keep_alive(&self, owner: Owner) {
        self.recorder.keep(owner);
    }

    /// Keeps `memory` alive as long as the graph, through its
    /// [`owner`](DeviceMemory::owner). Memory without an owner (a pool
    /// allocation, a view) is an [`Error::InvalidArgument`]: keep it alive
    /// yourself until the last executable graph is dropped.
    pub fn keep<M: DeviceMemory<B = B> + ?Sized>(&self, memory: &M) -> Result<()> {
        match memory.owner() {
            Some(owner) => {
                self.recorder.keep(owner);
                Ok(())
            }
            None => Err(Error::InvalidArgument {
                name: "memory",
                reason: format!(
                    "{memory:?} has no owner the graph could hold; keep it alive until the last executable \
                     graph made from this capture is dropped"
                ),
            }),
        }
    }

    /// Ends the capture: the graph, or [`GraphErrorKind::Invalidated`] if an
    /// error invalidated the capture (the stream is usable again either way).
    pub fn end(mut self) -> Result<Graph<B>> {
        self.finish(false)
    }

    fn finish(&mut self, dropping: bool) -> Result<Graph<B>> {
        // Between gpuport's sections on the stream. From inside one on this
        // thread (a drop that operation ran): `end` is refused and the
        // capture goes on; a drop ends it anyway.
        let gate = match self.stream.gate().exclusive(B::KIND, "end_capture") {
            Ok(g) => Some(g),
            Err(e) if !dropping => return Err(e),
            Err(_) => None,
        };
        self.ended = true;
        let raw = self.stream.end_capture();
        unregister(self.id);
        drop(gate);
        // Releases this capture forbade can run now.
        release_deferred();
        let owners: Arc<[Owner]> = self.recorder.take().into();
        let fences = fences_among::<B>(&owners);
        Ok(Graph { raw: raw?, owners, fences, ordinal: self.ordinal })
    }
}

impl<B: Backend> Drop for Capture<B> {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.finish(true);
        }
    }
}

// ---- graphs -------------------------------------------------------------------------

/// A captured graph: instantiate it to run it. Holds every owner the
/// capture recorded (see the [module docs](self)).
pub struct Graph<B: Backend> {
    // Declared before `owners`: the graph is destroyed before what it references goes.
    raw: B::RawGraph,
    owners: Arc<[Owner]>,
    fences: Fences<B>,
    ordinal: usize,
}

impl<B: Backend> fmt::Debug for Graph<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Graph({}:{}, {:?}, {} owners)", B::KIND, self.ordinal, self.raw, self.owners.len())
    }
}

impl<B: Backend> Graph<B> {
    /// An executable graph, to launch.
    pub fn instantiate(&self) -> Result<GraphExec<B>> {
        let raw = self.raw.instantiate()?;
        let (owners, fences) = (self.owners.clone(), self.fences.clone());
        Ok(GraphExec { raw, owners, fences, retired: Vec::new(), ordinal: self.ordinal })
    }

    /// Number of nodes (operations) captured.
    pub fn node_count(&self) -> Result<usize> {
        self.raw.node_count()
    }

    /// Number of owners the graph keeps alive.
    pub fn kept_alive(&self) -> usize {
        self.owners.len()
    }

    /// The backend's graph object.
    pub fn raw(&self) -> &B::RawGraph {
        &self.raw
    }
}

/// An executable graph: launch it on streams of its device. Its drop waits
/// for its launches before releasing what the graph kept alive.
pub struct GraphExec<B: Backend> {
    raw: B::RawGraphExec,
    owners: Arc<[Owner]>,
    /// What each launch is ordered with (the current graph's, after an update).
    fences: Fences<B>,
    /// Owners of graphs this one was updated from, while launches may still use them.
    retired: Vec<Arc<[Owner]>>,
    ordinal: usize,
}

impl<B: Backend> fmt::Debug for GraphExec<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GraphExec({}:{}, {:?}, {} owners)", B::KIND, self.ordinal, self.raw, self.owners.len())
    }
}

impl<B: Backend> GraphExec<B> {
    /// Enqueues one replay of the graph on `stream`, which must belong to
    /// the graph's device ([`Error::DeviceMismatch`] otherwise). Safe: what
    /// the graph references is kept alive by it, or was promised alive by
    /// the `unsafe` calls that captured it (see the [module docs](self)).
    ///
    /// Ordered with the arrays whose kernel methods the graph captured
    /// (`MemArray::add_index` and the like): `stream` first waits on the
    /// device for each array's latest work, and the replay becomes that
    /// array's pending work (its device copy the current one), so the
    /// array's later copies, host access and drop wait for it. A capturing
    /// `stream` is [`GraphErrorKind::NestedLaunch`].
    pub fn launch(&self, stream: &Stream<B>) -> Result<()> {
        super::check_same_device("stream", B::KIND, self.ordinal, stream.capture_ordinal())?;
        if self.fences.is_empty() {
            return self.raw.launch(stream);
        }
        // No method of a fenced array runs in between (`order.rs`), and the
        // capture check, the waits, the launch and the records agree (`gate.rs`).
        let _order = hold_in_order(self.fences.iter().map(|(f, _)| f.order()));
        let _section = capture_section::<B>(stream);
        if stream.capture_status()?.is_capturing() {
            return Err(nested_launch(B::KIND));
        }
        // One device check for the waits, the launch and the records
        // (`bound.rs`): inside, only gpuport's own code runs (the fences'
        // bookkeeping drops nothing but their previous events).
        let _bound = super::bound::scope();
        launch_fenced(&self.fences, stream, &mut || self.raw.launch(stream))
    }

    /// Takes the parameters of `graph` (kernel arguments, copy addresses,
    /// memset values), a re-capture of the same work, without
    /// re-instantiating (`cuGraphExecUpdate`, `hipGraphExecUpdate`). A graph
    /// of another shape is [`GraphErrorKind::UpdateRefused`], and this one
    /// is unchanged. Launches already enqueued run with the old parameters;
    /// the old graph's owners are kept until they have completed.
    pub fn update(&mut self, graph: &Graph<B>) -> Result<()> {
        super::check_same_device("graph", B::KIND, self.ordinal, graph.ordinal)?;
        self.raw.update(&graph.raw)?;
        let old = std::mem::replace(&mut self.owners, graph.owners.clone());
        self.fences = graph.fences.clone();
        if self.raw.is_idle() {
            self.retired.clear();
        } else {
            self.retired.push(old);
        }
        Ok(())
    }

    /// Waits until every launch so far has completed.
    pub fn wait(&self) {
        self.raw.wait_idle();
    }

    /// The backend's executable graph object.
    pub fn raw(&self) -> &B::RawGraphExec {
        &self.raw
    }
}

impl<B: Backend> Drop for GraphExec<B> {
    fn drop(&mut self) {
        // The raw graph goes with the fields, first; the owners after it.
        self.raw.wait_idle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CUDA's global capture mode binds every GPU of the process (and HIP
    /// through the shim shares it); the host backend's captures bind only
    /// the host. Registrations are process-wide, so this test owns the
    /// ordinals it registers on (7 and 9, which no other test uses).
    #[test]
    fn a_global_gpu_capture_forbids_device_waits_on_every_gpu_and_not_on_the_host() {
        let refused = |b, o| check_device_wide_wait(b, o, "test").is_err();
        let id = register(BackendKind::Cuda, 7, CaptureMode::Global);
        assert!(refused(BackendKind::Cuda, 7));
        assert!(refused(BackendKind::Cuda, 9), "another CUDA device");
        assert!(refused(BackendKind::Rocm, 9), "a HIP device (the shim shares CUDA's rule)");
        assert!(!refused(BackendKind::Host, 9), "the host device");
        unregister(id);
        // Any mode on a GPU: CUDA invalidates a capture of any mode on a device-wide wait.
        for mode in [CaptureMode::Relaxed, CaptureMode::ThreadLocal] {
            let id = register(BackendKind::Cuda, 7, mode);
            let other_thread = std::thread::spawn(move || refused(BackendKind::Cuda, 7)).join().unwrap();
            assert!(refused(BackendKind::Cuda, 7) && other_thread, "{mode:?} on a GPU");
            unregister(id);
        }
        let id = register(BackendKind::Host, 9, CaptureMode::Relaxed);
        assert!(!refused(BackendKind::Host, 9), "a relaxed host capture");
        unregister(id);
        let id = register(BackendKind::Host, 9, CaptureMode::Global);
        assert!(refused(BackendKind::Host, 9));
        assert!(!refused(BackendKind::Host, 7), "another host device");
        assert!(!refused(BackendKind::Cuda, 9), "a host capture binds no GPU");
        unregister(id);
    }
}
