//! A slot for one captured graph, as a binding's `Graph` object holds it:
//! empty, capturing a stream, or holding a graph ready to replay. The
//! rules of that life live here once, for every binding: one capture at a
//! time, no replay, update or reset while capturing, a capture whose block
//! failed holds nothing, and a reset waits for the replays it drops.
//! Here too: the capture modes' names, the stream a capture runs on
//! ([`capture_stream`]), the binding's stream object a capture keeps until
//! the slot is empty again, abandoning a block nobody exits, a binding's
//! whole replay ([`replay_and_keep`]), and updating two slots from each
//! other without deadlock.
//!
//! ```
//! use gpuport::dynamic::graph_slot::GraphSlot;
//! use gpuport::dynamic::runtime::StreamChoice;
//! use gpuport::dynamic::{AnyModule, AnyStream, Code};
//! use gpuport::{builtin, CaptureMode, KernelArgs, LaunchConfig};
//! let dev = gpuport::open("host")?;
//! let s = AnyStream::create(&dev)?;
//! let empty = AnyModule::load(&dev, &Code::Builtin, "builtins", &[])?.kernel(builtin::EMPTY)?;
//!
//! let mut slot = GraphSlot::default();
//! slot.begin_capture(&s, CaptureMode::Global)?;
//! // SAFETY: the empty kernel takes no arguments and touches no memory.
//! unsafe { empty.launch(LaunchConfig::linear(1, 1), &KernelArgs::new(), &s)? };
//! assert!(slot.replay(StreamChoice::Default).is_err()); // still capturing
//! slot.end_capture(false)?;
//! assert_eq!(slot.node_count()?, 1);
//! slot.replay(StreamChoice::Default)?;
//! slot.synchronize()?;
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::any::Any as StdAny;
use std::sync::atomic::{AtomicBool, Ordering};

use super::exclusive::Exclusive;
use super::graph::{AnyCapture, AnyGraph, AnyGraphExec};
use super::keep;
use super::runtime::{default_device, StreamChoice};
use super::stream::AnyStream;
use crate::backend::registry::AnyDevice;
use crate::backend::CaptureMode;
use crate::error::{BackendKind, Error, GraphErrorKind, Result};

/// What a slot holds.
#[derive(Default)]
enum State {
    #[default]
    Empty,
    Capturing(AnyCapture),
    Ready {
        graph: AnyGraph,
        exec: AnyGraphExec,
    },
}

/// One captured graph's life: empty, capturing, ready (see the module docs).
#[derive(Default)]
pub struct GraphSlot {
    state: State,
    /// Operands the capture kept for the graph.
    kept: usize,
    /// The binding's object of the stream a block's capture ran on
    /// ([`CaptureBlock::enter_keeping`]): kept while the slot is not empty.
    stream_owner: Option<Box<dyn StdAny + Send + Sync>>,
}

/// A capture mode's name (torch's `capture_error_mode` names): `"global"`,
/// `"thread_local"` or `"relaxed"`.
pub fn capture_mode_name(mode: CaptureMode) -> &'static str {
    match mode {
        CaptureMode::Global => "global",
        CaptureMode::ThreadLocal => "thread_local",
        CaptureMode::Relaxed => "relaxed",
    }
}

/// The capture mode named `name` (see [`capture_mode_name`]); another name
/// is [`Error::InvalidArgument`].
pub fn capture_mode_named(name: &str) -> Result<CaptureMode> {
    [CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed]
        .into_iter()
        .find(|&m| capture_mode_name(m) == name)
        .ok_or_else(|| Error::InvalidArgument {
            name: "mode",
            reason: format!(
                "capture mode {name:?}: use \"global\" (waits for the device are refused on every thread while the \
                 capture runs), \"thread_local\" (refused on the capturing thread) or \"relaxed\" (not refused)"
            ),
        })
}

/// The stream a capture runs on, from the stream a binding was given and
/// its device argument (`None`: none given):
/// - [`StreamChoice::Default`] (no stream): a new stream on `device`, else
///   on [`default_device`];
/// - a gpuport stream: that stream, which must be of `device` where one is
///   given ([`Error::DeviceMismatch`]);
/// - a handle: borrowed on `device`, else on [`default_device`].
pub fn capture_stream(stream: &StreamChoice<'_>, device: Option<&AnyDevice>) -> Result<AnyStream> {
    let given_or_default = || device.cloned().map_or_else(default_device, Ok);
    match stream.device() {
        Some(own) => stream.on(device.unwrap_or(&own)),
        None if stream.is_default() => AnyStream::create(&given_or_default()?),
        None => stream.on(&given_or_default()?),
    }
}

/// What [`replay_and_keep`] runs without the binding's lock: the slot's
/// lock and the replay's enqueue, giving the stream it ran on.
pub type Replaying<'a> = &'a mut (dyn FnMut() -> Result<AnyStream> + Send);

/// A binding's whole replay (Python's `Graph.replay` and `Graph.launch`):
/// drops the owners of completed work ([`keep::prune`], on the caller's
/// thread, under its interpreter lock), then runs through `unlocked` the
/// slot's lock and one replay on `stream` ([`GraphSlot::replay`]), and
/// keeps `owner` (the binding's object of a foreign stream, if any) until
/// the replay has run. `unlocked` is where a binding releases its
/// interpreter lock (PyO3: `|op| py.detach(op)`): the lock may wait for
/// another thread's call on the slot, and the replay for an array's step
/// on another thread (the replay link's order, `src/backend/order.rs`).
pub fn replay_and_keep<T: Send + 'static>(
    slot: &Exclusive<GraphSlot>,
    stream: StreamChoice<'_>,
    owner: Option<T>,
    unlocked: impl FnOnce(Replaying<'_>) -> Result<AnyStream>,
) -> Result<()> {
    keep::prune();
    let ran_on = unlocked(&mut || slot.lock()?.replay_on(stream.clone()))?;
    match owner {
        Some(owner) => keep::keep_until_done(&ran_on, Box::new(owner)),
        None => Ok(()),
    }
}

/// Updates the slot in `this` from the slot in `other` ([`GraphSlot::update`]).
/// Both are locked in address order, so two threads updating two slots
/// from each other cannot deadlock; a slot updated from itself is
/// unchanged. `hook` runs each wait for a lock, as in
/// [`Exclusive::lock_with`].
pub fn update_between(
    this: &Exclusive<GraphSlot>,
    other: &Exclusive<GraphSlot>,
    hook: impl Fn(&(dyn Fn() + Sync)),
) -> Result<()> {
    if std::ptr::eq(this, other) {
        return Ok(());
    }
    let (mut target, template) = if (this as *const Exclusive<GraphSlot>) < (other as *const _) {
        let target = this.lock_with(&hook)?;
        (target, other.lock_with(&hook)?)
    } else {
        let template = other.lock_with(&hook)?;
        (this.lock_with(&hook)?, template)
    };
    target.update(&template)
}

/// A capture block over a slot (Python's `with g.capture(stream):`):
/// entered once, to begin the capture, and exited once, to end it. A block
/// entered again after its capture is over is [`GraphErrorKind::Capturing`];
/// one exited without a running capture is [`GraphErrorKind::NotCaptured`].
/// Exited on a thread that may not end its capture, the block stays
/// entered and the capture keeps running ([`BlockExit::StillRunning`]).
#[derive(Debug, Default)]
pub struct CaptureBlock {
    /// Between a successful enter and the exit that ends the capture.
    entered: AtomicBool,
}

/// How a [`CaptureBlock::exit`] went.
#[derive(Debug)]
pub enum BlockExit {
    /// The capture is over: ended (`Ok`, or `Ok` also when the block raised,
    /// whose exception goes on and whose capture is discarded) or failed to
    /// end (`Err`). The slot holds a graph exactly when the result is `Ok`
    /// and the block did not raise ([`GraphSlot::is_captured`]).
    Over(Result<()>),
    /// The capture keeps running, to be ended on its own thread (the error
    /// says so); the block stays entered.
    StillRunning(Error),
}

impl CaptureBlock {
    /// Whether the block was entered and its capture is not over.
    pub fn is_entered(&self) -> bool {
        self.entered.load(Ordering::Acquire)
    }

    /// [`enter`](Self::enter), and the slot keeps `owner` (a binding's
    /// object of `stream`) while it is not empty: through a capture that
    /// ends in a graph until [`GraphSlot::reset`]; dropped when the capture
    /// fails, is discarded or abandoned. Read it with
    /// [`GraphSlot::stream_owner`].
    pub fn enter_keeping(
        &self,
        slot: &mut GraphSlot,
        stream: &AnyStream,
        mode: CaptureMode,
        owner: Box<dyn StdAny + Send + Sync>,
    ) -> Result<()> {
        self.enter(slot, stream, mode)?;
        slot.stream_owner = Some(owner);
        Ok(())
    }

    /// Abandons the block's running capture, if it was entered and is not
    /// over (its owner went away without exiting it): see
    /// [`GraphSlot::abandon_capture`].
    pub fn abandon(&self, slot: &mut GraphSlot) {
        if self.entered.swap(false, Ordering::AcqRel) {
            slot.abandon_capture();
        }
    }

    /// Begins the block's capture of `stream` in `mode` into `slot`.
    pub fn enter(&self, slot: &mut GraphSlot, stream: &AnyStream, mode: CaptureMode) -> Result<()> {
        if !slot.is_capturing() && self.is_entered() {
            return Err(refused(
                Some(stream.backend()),
                "enter_capture_block",
                GraphErrorKind::Capturing,
                "this capture context is already entered",
            ));
        }
        slot.begin_capture(stream, mode)?;
        self.entered.store(true, Ordering::Release);
        Ok(())
    }

    /// Ends the block's capture into `slot`; `raised`: the block raised, so
    /// what was captured is discarded and an error ending it is the
    /// consequence of the block's, not reported. Without a running capture
    /// of this block: [`GraphErrorKind::NotCaptured`].
    pub fn exit(&self, slot: &mut GraphSlot, raised: bool) -> Result<BlockExit> {
        if !self.is_entered() {
            return Err(refused(
                slot.backend(),
                "exit_capture_block",
                GraphErrorKind::NotCaptured,
                "no capture of this block is running",
            ));
        }
        match slot.end_capture(raised) {
            Err(e @ Error::Graph { kind: GraphErrorKind::WrongThread, .. }) => Ok(BlockExit::StillRunning(e)),
            ended => {
                self.entered.store(false, Ordering::Release);
                Ok(BlockExit::Over(if raised { Ok(()) } else { ended }))
            }
        }
    }
}

/// A graph taken out of its slot by [`GraphSlot::reset`]: wait for its
/// replays ([`Retired::wait`]), then drop it (a binding drops it where the
/// operands it kept may be released, e.g. with Python's interpreter lock).
#[must_use = "a retired graph's replays may still run: wait before dropping it"]
pub struct Retired(Option<(AnyGraph, AnyGraphExec)>);

impl Retired {
    /// Waits until every replay of the graph so far has completed.
    pub fn wait(&self) {
        if let Some((_, exec)) = &self.0 {
            exec.wait();
        }
    }
}

fn refused(backend: Option<BackendKind>, op: &'static str, kind: GraphErrorKind, reason: &str) -> Error {
    Error::Graph { backend: backend.unwrap_or(BackendKind::Host), op, kind, reason: reason.into() }
}

impl GraphSlot {
    /// Whether a capture into the slot is running.
    pub fn is_capturing(&self) -> bool {
        matches!(self.state, State::Capturing(_))
    }

    /// Whether the slot holds a graph ready to replay.
    pub fn is_captured(&self) -> bool {
        matches!(self.state, State::Ready { .. })
    }

    /// The device of the graph (or of the running capture).
    pub fn device(&self) -> Option<AnyDevice> {
        match &self.state {
            State::Empty => None,
            State::Capturing(c) => Some(c.device()),
            State::Ready { exec, .. } => Some(exec.device()),
        }
    }

    /// The device of the graph ready to replay (`None` while empty or
    /// capturing: Python's `Graph.device`).
    pub fn captured_device(&self) -> Option<AnyDevice> {
        self.device().filter(|_| self.is_captured())
    }

    /// Operations captured into the graph (0 while empty or capturing).
    pub fn node_count(&self) -> Result<usize> {
        match &self.state {
            State::Ready { graph, .. } => graph.node_count(),
            _ => Ok(0),
        }
    }

    /// Operands the capture kept alive for the graph.
    pub fn kept(&self) -> usize {
        self.kept
    }

    /// The object kept by [`CaptureBlock::enter_keeping`], if it is a `T`
    /// and the slot is not empty.
    pub fn stream_owner<T: 'static>(&self) -> Option<&T> {
        self.stream_owner.as_deref().and_then(|o| o.downcast_ref())
    }

    fn backend(&self) -> Option<BackendKind> {
        self.device().map(|d| d.backend())
    }

    /// The ready graph, or why there is none; `which` names the slot in
    /// the reason ("the graph", or "the other graph" of an update).
    fn ready(&self, op: &'static str, which: &str) -> Result<(&AnyGraph, &AnyGraphExec)> {
        match &self.state {
            State::Ready { graph, exec } => Ok((graph, exec)),
            State::Capturing(_) => Err(self.still_capturing(op, which)),
            State::Empty => Err(refused(
                self.backend(),
                op,
                GraphErrorKind::NotCaptured,
                &format!("{which} holds no captured work; capture first"),
            )),
        }
    }

    fn still_capturing(&self, op: &'static str, which: &str) -> Error {
        refused(
            self.backend(),
            op,
            GraphErrorKind::Capturing,
            &format!("{which} is still capturing; end the capture first"),
        )
    }

    /// Begins capturing `stream` in `mode` into the empty slot.
    pub fn begin_capture(&mut self, stream: &AnyStream, mode: CaptureMode) -> Result<()> {
        let backend = Some(stream.backend());
        match self.state {
            State::Capturing(_) => Err(refused(
                backend,
                "begin_capture",
                GraphErrorKind::Capturing,
                "the graph is already capturing; a graph captures one stream at a time",
            )),
            State::Ready { .. } => Err(refused(
                backend,
                "begin_capture",
                GraphErrorKind::Capturing,
                "the graph already holds captured work; call reset() first, capture into a new Graph, or capture a \
                 new Graph and pass it to update() to change the arguments",
            )),
            State::Empty => {
                self.state = State::Capturing(stream.begin_capture(mode)?);
                Ok(())
            }
        }
    }

    /// Ends the running capture. With `discard` (the capturing block
    /// failed), what was captured is dropped and the slot is empty again;
    /// else the graph is instantiated, ready to replay. From a thread that
    /// may not end it ([`GraphErrorKind::WrongThread`]) the capture keeps
    /// running. Without a running capture: [`GraphErrorKind::NotCaptured`].
    pub fn end_capture(&mut self, discard: bool) -> Result<()> {
        let mut capture = match std::mem::take(&mut self.state) {
            State::Capturing(c) => c,
            other => {
                self.state = other;
                return Err(refused(
                    self.backend(),
                    "end_capture",
                    GraphErrorKind::NotCaptured,
                    "no capture is running",
                ));
            }
        };
        let kept = capture.kept();
        let ended = match capture.end() {
            Err(e @ Error::Graph { kind: GraphErrorKind::WrongThread, .. }) => {
                self.state = State::Capturing(capture);
                return Err(e);
            }
            other => other,
        };
        drop(capture);
        let ready = ended.and_then(|graph| match discard {
            true => Ok(None),
            false => graph.instantiate().map(|exec| Some((graph, exec))),
        });
        match ready {
            Ok(Some((graph, exec))) => {
                self.state = State::Ready { graph, exec };
                self.kept = kept;
                Ok(())
            }
            // The slot stays empty.
            other => {
                self.stream_owner = None;
                other.map(drop)
            }
        }
    }

    /// Drops a running capture that will not be ended (its owner went
    /// away): the capture ends as it drops, and the slot is empty.
    pub fn abandon_capture(&mut self) {
        if self.is_capturing() {
            self.state = State::Empty;
            self.stream_owner = None;
        }
    }

    /// Enqueues one replay on the stream chosen: the default stream of the
    /// graph's device, a gpuport stream (of that device), or a handle
    /// borrowed on it.
    pub fn replay(&self, stream: StreamChoice<'_>) -> Result<()> {
        self.replay_on(stream).map(drop)
    }

    /// [`replay`](Self::replay), giving the stream the replay ran on.
    fn replay_on(&self, stream: StreamChoice<'_>) -> Result<AnyStream> {
        let (_, exec) = self.ready("replay", "the graph")?;
        let s = stream.on(&exec.device())?;
        exec.launch(&s)?;
        Ok(s)
    }

    /// Takes the arguments of `other`'s graph, a re-capture of the same
    /// work (see [`AnyGraphExec::update`]).
    pub fn update(&mut self, other: &GraphSlot) -> Result<()> {
        self.ready("update", "the graph")?;
        let (template, _) = other.ready("update", "the other graph")?;
        if let State::Ready { exec, .. } = &mut self.state {
            exec.update(template)?;
        }
        Ok(())
    }

    /// Waits until every replay enqueued so far has completed; refused
    /// where a capture on the device forbids waiting. Nothing to wait for
    /// while empty or capturing.
    pub fn synchronize(&self) -> Result<()> {
        if let State::Ready { exec, .. } = &self.state {
            AnyStream::default_for(&exec.device()).check_can_wait("synchronize")?;
            exec.wait();
        }
        Ok(())
    }

    /// Empties the slot: the graph comes back as [`Retired`], to wait for
    /// and drop. Refused while capturing, and where a capture on the device
    /// forbids waiting (the slot is then unchanged).
    pub fn reset(&mut self) -> Result<Retired> {
        if self.is_capturing() {
            return Err(self.still_capturing("reset", "the graph"));
        }
        if let State::Ready { exec, .. } = &self.state {
            AnyStream::default_for(&exec.device()).check_can_wait("reset")?;
        }
        self.kept = 0;
        self.stream_owner = None;
        Ok(Retired(match std::mem::take(&mut self.state) {
            State::Ready { graph, exec } => Some((graph, exec)),
            _ => None,
        }))
    }
}
