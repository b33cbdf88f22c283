//! Graphs of any backend: a capture running on an [`AnyStream`]
//! ([`AnyCapture`]), the captured [`AnyGraph`] and its executable
//! [`AnyGraphExec`]. The rules are the core's ([`crate::backend::graph`],
//! `docs/design.md#graphs`); this layer adds what a binding needs:
//!
//! - **Operands a binding keeps.** [`keep::keep_until_done`](super::keep::keep_until_done)
//!   on a stream that an `AnyCapture` is capturing gives the owners to the
//!   graph (they live as long as the graph and every executable made from
//!   it), instead of parking them until an event that, recorded inside the
//!   capture, would only mean something once the graph runs.
//! - **The thread rule at run time.** A core [`Capture`] is not `Send`
//!   (CUDA ends a capture in [`CaptureMode::Global`] or
//!   [`CaptureMode::ThreadLocal`] only on the thread that began it). A
//!   binding's objects may move between threads, so `AnyCapture` is `Send`
//!   and checks instead: [`AnyCapture::end`] from another thread is
//!   [`GraphErrorKind::WrongThread`], and the capture keeps running.
//!
//! ```
//! use gpuport::dynamic::{keep, AnyModule, AnyStream, Code};
//! use gpuport::{builtin, CaptureMode, KernelArgs, LaunchConfig};
//! let dev = gpuport::open("host")?;
//! let s = AnyStream::create(&dev)?;
//! let empty = AnyModule::load(&dev, &Code::Builtin, "builtins", &[])?.kernel(builtin::EMPTY)?;
//!
//! let mut capture = s.begin_capture(CaptureMode::Global)?;
//! // SAFETY: the empty kernel takes no arguments and touches no memory.
//! unsafe { empty.launch(LaunchConfig::linear(1, 1), &KernelArgs::new(), &s)? };
//! keep::keep_until_done(&s, Box::new(vec![0u8; 16]))?; // held by the graph, not parked
//! let graph = capture.end()?;
//! assert_eq!(graph.node_count()?, 1);
//! let exec = graph.instantiate()?;
//! exec.launch(&s)?;
//! exec.launch(&s)?;
//! s.synchronize()?;
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};

use super::any::{mismatch, on_backend, Any, DynDevice, OnDevice, PerBackend};
use super::stream::AnyStream;
use crate::backend::graph::{check_device_wide_wait, check_not_capturing};
use crate::backend::registry::AnyDevice;
use crate::backend::{Backend, Capture, CaptureMode, CaptureStatus, Device, Graph, GraphExec};
use crate::error::{BackendKind, Error, GraphErrorKind, Result};

/// A running capture of backend `B`, as [`AnyCapture`] holds it.
pub struct Running<B: Backend>(Capture<B>);

impl<B: Backend> fmt::Debug for Running<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

// SAFETY: `Capture` is `!Send` through a `PhantomData<*const ()>` marker
// alone; its fields (a stream, an `Arc<Recorder>`, integers) are `Send +
// Sync`. The marker stands for a rule of the driver's, not of memory (a
// capture in Global or ThreadLocal mode ends on the thread that began it),
// which `AnyCapture` applies at run time instead: `end` from another thread
// is refused. Ending a capture on the wrong thread (a drop there) makes the
// driver refuse the end; it touches no memory another thread uses.
unsafe impl<B: Backend> Send for Running<B> {}
// SAFETY: through `&Running` only the capture's `status` and `stream` are
// reached, which read `Send + Sync` fields (the stream asks its driver).
unsafe impl<B: Backend> Sync for Running<B> {}

/// What [`AnyCapture`] holds per backend: the core's capture and its device.
#[derive(Debug)]
pub struct Captures;

impl PerBackend for Captures {
    type Of<B: Backend> = OnDevice<B, Running<B>>;
}

/// What [`AnyGraph`] holds per backend.
#[derive(Debug)]
pub struct Graphs;

impl PerBackend for Graphs {
    type Of<B: Backend> = OnDevice<B, Graph<B>>;
}

/// What [`AnyGraphExec`] holds per backend.
#[derive(Debug)]
pub struct GraphExecs;

impl PerBackend for GraphExecs {
    type Of<B: Backend> = OnDevice<B, GraphExec<B>>;
}

/// A captured graph of any backend; [`instantiate`](AnyGraph::instantiate) it to replay it.
/// Holds what the capture kept alive.
pub type AnyGraph = Any<Graphs>;

/// An executable graph of any backend. Its drop waits for its launches,
/// then releases what the graph kept alive.
pub type AnyGraphExec = Any<GraphExecs>;

// ---- the captures running now, by stream, for `keep` ----------------------------------

/// Owners a binding handed over while a capture ran; one owner of its graph.
type Bag = Arc<Mutex<Vec<Box<dyn Send>>>>;

/// A stream, named across clones: backend, device ordinal, `Device::stream_id`.
pub(crate) type StreamKey = (BackendKind, usize, u64);

static RUNNING_COUNT: AtomicUsize = AtomicUsize::new(0);
static RUNNING: Mutex<Vec<(StreamKey, Bag)>> = Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<(StreamKey, Bag)>> {
    RUNNING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Gives `owners` to the [`AnyCapture`] running on `stream`, if there is
/// one; otherwise hands them back.
pub(crate) fn keep_for_capture(stream: &AnyStream, owners: Box<dyn Send>) -> std::result::Result<(), Box<dyn Send>> {
    if RUNNING_COUNT.load(Ordering::Acquire) == 0 {
        return Err(owners);
    }
    let Some(key) = stream.key() else { return Err(owners) };
    let bag = running().iter().find(|(k, _)| *k == key).map(|(_, b)| b.clone());
    match bag {
        Some(bag) => {
            bag.lock().unwrap_or_else(|p| p.into_inner()).push(owners);
            Ok(())
        }
        None => Err(owners),
    }
}

// ---- streams ----------------------------------------------------------------------------

fn wait_rule<D: Device>(d: &D, s: &crate::backend::Stream<D::B>, op: &'static str) -> Result<()> {
    let kind = <D::B as Backend>::KIND;
    let ordinal = d.info().ordinal;
    if d.stream_id(s).is_some() && d.stream_id(s) == d.stream_id(d.default_stream()) {
        check_device_wide_wait(kind, ordinal, op)
    } else {
        check_not_capturing(kind, op, d.capture_status(s))
    }
}

impl AnyStream {
    /// A number naming this stream and its clones (the backend's
    /// `Device::stream_id`), or `None` where the backend cannot tell streams apart.
    pub fn id(&self) -> Option<u64> {
        on_backend!(self, v => v.device.stream_id(&v.item))
    }

    /// (backend, ordinal, stream id): names this stream and its clones
    /// process-wide, or `None` where the backend cannot tell streams apart.
    pub(crate) fn key(&self) -> Option<StreamKey> {
        let backend = self.backend();
        on_backend!(self, v => v.device.stream_id(&v.item).map(|id| (backend, v.device.info().ordinal, id)))
    }

    /// Enters the stream's capture gate (`crate::backend::graph::capture_section`):
    /// no gpuport capture begins or ends on it until the guard is dropped.
    pub(crate) fn capture_section(&self) -> crate::backend::gate::GateShared<'_> {
        on_backend!(self, v => crate::backend::graph::CaptureStream::gate(&v.item).shared())
    }

    /// Whether the stream is capturing (the driver's answer on GPUs, so a
    /// capture begun by another library on a borrowed stream counts too).
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        on_backend!(self, v => v.device.capture_status(&v.item))
    }

    /// Whether a call named `op` that waits for this stream would be
    /// refused now, with the error it would get
    /// ([`GraphErrorKind::SynchronousCall`]): the stream is capturing, or it
    /// is the default stream and a capture's mode forbids waiting for it.
    /// For calls that enqueue work and then wait: checked first, nothing is
    /// enqueued into a capture that the wait would then refuse.
    pub fn check_can_wait(&self, op: &'static str) -> Result<()> {
        on_backend!(self, v => wait_rule(&*v.device, &v.item, op))
    }

    /// Refuses `op`, an operation that cannot be captured, on a capturing
    /// stream ([`GraphErrorKind::NotCapturable`], `why` in the reason),
    /// before it enqueues anything (so the capture stays valid).
    /// A stream whose state cannot be asked counts as not capturing (CUDA's
    /// legacy default stream answers an error while another blocking
    /// stream captures); the operation then meets the driver's own rules.
    pub fn refuse_in_capture(&self, op: &'static str, why: &str) -> Result<()> {
        match self.capture_status() {
            Ok(status) if status.is_capturing() => Err(Error::Graph {
                backend: self.device().backend(),
                op,
                kind: GraphErrorKind::NotCapturable,
                reason: format!("the stream is capturing a graph, and {why}"),
            }),
            _ => Ok(()),
        }
    }

    /// Starts capturing this stream into a graph: work enqueued on it (and
    /// owners given to [`keep::keep_until_done`](super::keep::keep_until_done)
    /// for it) is recorded, not run, until [`AnyCapture::end`]. Refused,
    /// with [`Error::Graph`], for the default stream
    /// ([`GraphErrorKind::DefaultStream`]) and a stream already capturing
    /// ([`GraphErrorKind::AlreadyCapturing`]).
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<AnyCapture> {
        let inner: Any<Captures> = on_backend!(map self, v => OnDevice {
            device: v.device.clone(),
            item: Running(v.device.begin_capture(&v.item, mode)?),
        });
        let bag: Bag = Arc::default();
        on_backend!(&inner, v => v.item.0.keep_alive(bag.clone()));
        let key = self.key();
        if let Some(k) = key {
            running().push((k, bag.clone()));
            RUNNING_COUNT.fetch_add(1, Ordering::AcqRel);
        }
        Ok(AnyCapture {
            inner: Some(inner),
            stream: self.clone(),
            registered: key.is_some(),
            bag,
            mode,
            thread: thread::current().id(),
        })
    }
}

// ---- captures ---------------------------------------------------------------------------

/// A capture running on an [`AnyStream`] (see the [module docs](self)).
/// Dropped before [`end`](Self::end), it ends the capture and discards
/// what was captured.
pub struct AnyCapture {
    /// `None` once ended.
    inner: Option<Any<Captures>>,
    stream: AnyStream,
    registered: bool,
    bag: Bag,
    mode: CaptureMode,
    thread: ThreadId,
}

impl fmt::Debug for AnyCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Some(c) => write!(f, "AnyCapture({c:?}, {:?})", self.mode),
            None => write!(f, "AnyCapture(ended)"),
        }
    }
}

impl AnyCapture {
    /// The capturing stream.
    pub fn stream(&self) -> &AnyStream {
        &self.stream
    }

    /// The stream's device.
    pub fn device(&self) -> AnyDevice {
        self.stream.device()
    }

    /// The capture's mode.
    pub fn mode(&self) -> CaptureMode {
        self.mode
    }

    /// Whether [`end`](Self::end) has run (successfully or not).
    pub fn is_ended(&self) -> bool {
        self.inner.is_none()
    }

    /// Whether the capture is still valid ([`CaptureStatus::Active`]) or was
    /// invalidated by an error ([`CaptureStatus::Invalidated`]);
    /// [`CaptureStatus::None`] once ended.
    pub fn status(&self) -> Result<CaptureStatus> {
        match &self.inner {
            Some(c) => on_backend!(c, v => v.item.0.status()),
            None => Ok(CaptureStatus::None),
        }
    }

    /// Keeps `owners` alive as long as the graph and every executable
    /// graph made from it.
    pub fn keep_alive(&self, owners: Box<dyn Send>) {
        self.bag.lock().unwrap_or_else(|p| p.into_inner()).push(owners);
    }

    /// Number of owners handed to this capture (by [`keep_alive`](Self::keep_alive)
    /// and by `keep_until_done` on its stream); 0 once ended (the graph holds them).
    pub fn kept(&self) -> usize {
        self.bag.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn unregister(&mut self) {
        if std::mem::take(&mut self.registered) {
            let mut r = running();
            if let Some(i) = r.iter().position(|(_, b)| Arc::ptr_eq(b, &self.bag)) {
                r.swap_remove(i);
                RUNNING_COUNT.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Ends the capture: the graph, or why there is none
    /// ([`GraphErrorKind::Invalidated`]: an error invalidated the capture;
    /// the stream is usable again either way). From a thread other than the
    /// one that began a capture in [`CaptureMode::Global`] or
    /// [`CaptureMode::ThreadLocal`]: [`GraphErrorKind::WrongThread`], and
    /// the capture keeps running. Once ended, another call is
    /// [`GraphErrorKind::Invalidated`].
    pub fn end(&mut self) -> Result<AnyGraph> {
        let backend = self.device().backend();
        if self.mode != CaptureMode::Relaxed && thread::current().id() != self.thread {
            return Err(Error::Graph {
                backend,
                op: "end_capture",
                kind: GraphErrorKind::WrongThread,
                reason: format!(
                    "a capture in {:?} mode ends on the thread that began it (CUDA's rule); it keeps running \
                     until ended there",
                    self.mode
                ),
            });
        }
        let Some(inner) = self.inner.take() else {
            return Err(Error::Graph {
                backend,
                op: "end_capture",
                kind: GraphErrorKind::Invalidated,
                reason: "the capture has already ended".into(),
            });
        };
        // Work enqueued after this is not captured: stop taking owners first,
        // and leave the graph the only holder of those already taken.
        self.unregister();
        self.bag = Bag::default();
        Ok(on_backend!(map inner, v => OnDevice { device: v.device, item: v.item.0.end()? }))
    }
}

impl Drop for AnyCapture {
    fn drop(&mut self) {
        self.unregister();
        // `inner`, if still there, ends the capture and discards the graph as it drops.
    }
}

// ---- graphs -----------------------------------------------------------------------------

impl AnyGraph {
    /// The graph's device.
    pub fn device(&self) -> AnyDevice {
        on_backend!(self, v => DynDevice::any_device(&v.device))
    }

    /// Number of nodes (operations) captured.
    pub fn node_count(&self) -> Result<usize> {
        on_backend!(self, v => v.item.node_count())
    }

    /// An executable graph, to launch.
    pub fn instantiate(&self) -> Result<AnyGraphExec> {
        Ok(on_backend!(map self, v => OnDevice { device: v.device.clone(), item: v.item.instantiate()? }))
    }
}

impl AnyGraphExec {
    /// The graph's device.
    pub fn device(&self) -> AnyDevice {
        on_backend!(self, v => DynDevice::any_device(&v.device))
    }

    /// Enqueues one replay on `stream`, a stream of the graph's device
    /// ([`Error::DeviceMismatch`] otherwise). Each replay is ordered after
    /// the work of the arrays whose kernel methods or collectives the graph
    /// captured, and becomes their pending work: the core's replay link
    /// does this (`src/array/memarray/replay.rs`), with no lock of the
    /// arrays taken, so a replay never waits for a thread that holds one.
    pub fn launch(&self, stream: &AnyStream) -> Result<()> {
        on_backend!((self, stream), (g, s) => g.item.launch(&s.item),
            else => Err(mismatch("stream", &self.device(), &stream.device())))
    }

    /// Takes the parameters of `graph`, a re-capture of the same work
    /// ([`GraphErrorKind::UpdateRefused`], and no change, for another
    /// shape; [`Error::DeviceMismatch`] for a graph of another device).
    pub fn update(&mut self, graph: &AnyGraph) -> Result<()> {
        let (expected, found) = (self.device(), graph.device());
        on_backend!((self, graph), (e, g) => e.item.update(&g.item),
            else => Err(mismatch("graph", &expected, &found)))
    }

    /// Waits until every launch so far has completed.
    pub fn wait(&self) {
        on_backend!(self, v => v.item.wait())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Weak;

    use super::*;
    use crate::array::{Location, Transfer};
    use crate::dynamic::{keep, new_owned, AnyArray, DType, Exclusive};

    fn host() -> AnyDevice {
        crate::open("host").unwrap()
    }

    // Captures here are ThreadLocal or Relaxed: a Global one would refuse
    // the default-stream waits of tests running beside it.

    #[test]
    fn owners_kept_during_a_capture_live_as_long_as_the_graph() {
        let dev = host();
        let s = AnyStream::create(&dev).unwrap();
        let owner = Arc::new(5u32);
        let weak: Weak<u32> = Arc::downgrade(&owner);
        let mut capture = s.begin_capture(CaptureMode::ThreadLocal).unwrap();
        keep::keep_until_done(&s, Box::new(owner)).unwrap();
        assert_eq!(capture.kept(), 1);
        let graph = capture.end().unwrap();
        let exec = graph.instantiate().unwrap();
        drop(graph);
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert!(weak.upgrade().is_some(), "the executable graph holds what the capture kept");
        drop(exec);
        assert!(weak.upgrade().is_none(), "released with the last executable graph");
        // After the capture, the stream parks owners again.
        let after = Arc::new(1u8);
        let w = Arc::downgrade(&after);
        keep::keep_until_done(&s, Box::new(after)).unwrap();
        s.synchronize().unwrap();
        keep::prune();
        assert!(w.upgrade().is_none());
    }

    #[test]
    fn a_capture_ends_only_on_its_thread_unless_relaxed() {
        let dev = host();
        let s = AnyStream::create(&dev).unwrap();
        let capture = s.begin_capture(CaptureMode::ThreadLocal).unwrap();
        let mut capture = std::thread::spawn(move || {
            let mut c = capture;
            match c.end() {
                Err(Error::Graph { kind: GraphErrorKind::WrongThread, .. }) => {}
                other => panic!("expected WrongThread, got {other:?}"),
            }
            c
        })
        .join()
        .unwrap();
        assert!(capture.status().unwrap().is_capturing(), "still running after the refusal");
        capture.end().unwrap();
        assert!(matches!(capture.end(), Err(Error::Graph { kind: GraphErrorKind::Invalidated, .. })));
        let relaxed = s.begin_capture(CaptureMode::Relaxed).unwrap();
        std::thread::spawn(move || {
            let mut c = relaxed;
            c.end().unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
    }

    #[test]
    fn a_dropped_capture_ends_and_waits_are_checked_first() {
        let dev = host();
        let s = AnyStream::create(&dev).unwrap();
        let capture = s.begin_capture(CaptureMode::ThreadLocal).unwrap();
        let refused = |r: Result<()>| matches!(r, Err(Error::Graph { kind: GraphErrorKind::SynchronousCall, .. }));
        assert!(refused(s.check_can_wait("memcpy")));
        assert!(refused(AnyStream::default_for(&dev).check_can_wait("memcpy")));
        drop(capture);
        assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
        s.check_can_wait("memcpy").unwrap();
        AnyStream::default_for(&dev).check_can_wait("memcpy").unwrap();
    }

    fn host_f32(a: &Exclusive<AnyArray>, s: &AnyStream) -> Vec<f32> {
        let AnyArray::Owned(a) = &mut *a.lock().unwrap() else { unreachable!() };
        a.move_to(Location::Host, s, Transfer::Sync, None).unwrap();
        let (ptr, _keep) = a.parts(Location::Host, None).unwrap();
        let ptr = usize::try_from(ptr).unwrap();
        // SAFETY: the host copy of 4 f32, current and idle (moved synchronously), kept by `_keep`.
        unsafe { std::slice::from_raw_parts(ptr as *const f32, 4) }.to_vec()
    }

    #[test]
    fn memarray_kernels_are_captured_and_replays_are_ordered_with_the_array() {
        let dev = host();
        let s = AnyStream::create(&dev).unwrap();
        let a = Exclusive::new(AnyArray::Owned(new_owned(&dev, DType::Float32, &[4]).unwrap()), "MemArray");
        // Host-resident data cannot be captured (the copy to the device would be).
        let mut capture = s.begin_capture(CaptureMode::Relaxed).unwrap();
        match a.lock().unwrap().add_index(&s, None) {
            Err(Error::Graph { kind: GraphErrorKind::NotCapturable, .. }) => {}
            other => panic!("expected NotCapturable, got {other:?}"),
        }
        assert_eq!(capture.status().unwrap(), CaptureStatus::Active, "the refusal leaves the capture valid");
        assert_eq!(capture.end().unwrap().node_count().unwrap(), 0);

        {
            let AnyArray::Owned(o) = &mut *a.lock().unwrap() else { unreachable!() };
            o.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
        }
        let mut capture = s.begin_capture(CaptureMode::Relaxed).unwrap();
        a.lock().unwrap().add_index(&s, None).unwrap().expect("captured: the copy the graph writes");
        {
            // Moves inside the capture are refused, the capture stays valid.
            let AnyArray::Owned(o) = &mut *a.lock().unwrap() else { unreachable!() };
            match o.move_to(Location::Host, &s, Transfer::Async, None) {
                Err(Error::Graph { kind: GraphErrorKind::NotCapturable, .. }) => {}
                other => panic!("expected NotCapturable, got {other:?}"),
            }
        }
        let weak = {
            let AnyArray::Owned(o) = &*a.lock().unwrap() else { unreachable!() };
            Arc::downgrade(&o.parts(Location::Device, None).unwrap().1)
        };
        let graph = capture.end().unwrap();
        assert_eq!(graph.node_count().unwrap(), 1, "one captured kernel");
        let exec = graph.instantiate().unwrap();
        drop(graph);
        assert_eq!(host_f32(&a, &s), [0.0; 4], "captured, not run");
        // The host read made the host copy current; a replay makes the device copy current again.
        exec.launch(&s).unwrap();
        exec.launch(&s).unwrap();
        assert_eq!(host_f32(&a, &s), [0.0, 2.0, 4.0, 6.0], "two replays, each one add_index");
        // The graph, not the array, keeps the copy it writes.
        drop(a);
        assert!(weak.upgrade().is_some());
        drop(exec);
        assert!(weak.upgrade().is_none());
    }
}
