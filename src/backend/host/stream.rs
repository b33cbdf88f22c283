//! The host backend's streams and events: a [`HostStream`] is an in-order
//! queue run by its own worker thread (or, while it captures, the capture
//! that keeps its closures), and a [`HostEvent`] a marker that the worker
//! completes when it reaches it.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Instant;

use super::capture::{HostCapture, NodeKind};
use crate::error::{BackendKind, Error, Result};

type Task = Box<dyn FnOnce() + Send>;

/// Pending-work accounting shared between a stream handle and its worker.
#[derive(Default)]
pub(super) struct Pending {
    state: Mutex<PendingState>,
    idle: Condvar,
}

#[derive(Default)]
pub(super) struct PendingState {
    queued: u64,
    failure: Option<String>,
}

impl Pending {
    /// Blocks until no task is queued; a failure stays for the stream's own `synchronize`.
    pub(super) fn wait_idle(&self) -> std::sync::MutexGuard<'_, PendingState> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.queued > 0 {
            st = self.idle.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st
    }
}

pub(super) struct StreamInner {
    sender: Mutex<Option<mpsc::Sender<Task>>>,
    pub(super) pending: Arc<Pending>,
    worker: Mutex<Option<thread::JoinHandle<()>>>,
    pub(super) id: u64,
    /// The capture running on this stream, if any: enqueued work goes to it.
    pub(super) capture: Mutex<Option<HostCapture>>,
    /// Whether `capture` holds a capture; see [`HostStream::capture_slot`].
    pub(super) capturing: AtomicBool,
    /// Keeps captures from beginning or ending inside gpuport's sections.
    pub(super) gate: crate::backend::gate::CaptureGate,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        // Closing the channel ends the worker after it drains queued work.
        self.sender.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = handle.join();
        }
    }
}

/// An in-order work queue run by a dedicated worker thread.
#[derive(Clone)]
pub struct HostStream {
    pub(super) inner: Arc<StreamInner>,
}

impl fmt::Debug for HostStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostStream({})", self.inner.id)
    }
}

impl HostStream {
    pub(super) fn new() -> Result<Self> {
        Self::with_gate(Default::default())
    }

    /// The device's default stream, which gpuport never captures: its
    /// capture gate is closed (`crate::backend::gate`).
    pub(super) fn default_of_device() -> Result<Self> {
        Self::with_gate(crate::backend::gate::CaptureGate::closed())
    }

    fn with_gate(gate: crate::backend::gate::CaptureGate) -> Result<Self> {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel::<Task>();
        let pending = Arc::new(Pending::default());
        let worker_pending = pending.clone();
        let worker = thread::Builder::new()
            .name(format!("gpuport-host-stream-{id}"))
            .spawn(move || {
                for task in receiver {
                    let outcome = std::panic::catch_unwind(AssertUnwindSafe(task));
                    let mut st = worker_pending.state.lock().unwrap_or_else(|p| p.into_inner());
                    if let Err(panic) = outcome {
                        let msg = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "a queued task panicked".into());
                        st.failure.get_or_insert(msg);
                    }
                    st.queued -= 1;
                    if st.queued == 0 {
                        worker_pending.idle.notify_all();
                    }
                }
            })
            .map_err(|e| Error::HostTask(format!("could not start a stream worker thread: {e}")))?;
        Ok(HostStream {
            inner: Arc::new(StreamInner {
                sender: Mutex::new(Some(sender)),
                pending,
                worker: Mutex::new(Some(worker)),
                id,
                capture: Mutex::new(None),
                capturing: AtomicBool::new(false),
                gate,
            }),
        })
    }

    /// Queues `task` behind everything already on this stream, or, while
    /// the stream captures, adds it to the capture as a node of `kind`.
    pub(super) fn enqueue(&self, kind: NodeKind, task: impl Fn() + Send + Sync + 'static) -> Result<()> {
        if let Some(mut slot) = self.capture_slot() {
            if let Some(capture) = slot.as_mut() {
                return capture.push(kind, Arc::new(task));
            }
        }
        let pending = &self.inner.pending;
        pending.state.lock().unwrap_or_else(|p| p.into_inner()).queued += 1;
        let sender = self.inner.sender.lock().unwrap_or_else(|p| p.into_inner());
        let sent = sender.as_ref().map(|s| s.send(Box::new(task)).is_ok()).unwrap_or(false);
        if !sent {
            pending.state.lock().unwrap_or_else(|p| p.into_inner()).queued -= 1;
            return Err(Error::HostTask("the stream's worker thread has stopped".into()));
        }
        Ok(())
    }

    /// The stream's capture slot, locked; `None`, without taking the lock,
    /// when no capture runs (every operation asks, so a stream that never
    /// captures pays one atomic load, not a lock, per operation).
    ///
    /// `capturing` changes only under the slot's lock, with the slot
    /// (`begin_capture` sets both, `end_capture` clears both), and is read
    /// here without it. A read that sees `true` takes the lock and answers
    /// from the slot itself. A read that sees `false` answers "no capture"
    /// without looking: a `begin_capture` whose store it missed does not
    /// happen before it (if it did, the read would see the store, or a later
    /// one), so the two race, and the answer is the one the lock would give
    /// had this call taken it first. So every caller gets an answer it
    /// could have got with the lock, and a caller ordered after a
    /// `begin_capture` (the same thread, or synchronized with it) always
    /// sees that capture.
    #[inline]
    pub(super) fn capture_slot(&self) -> Option<MutexGuard<'_, Option<HostCapture>>> {
        if !self.inner.capturing.load(Ordering::Acquire) {
            return None;
        }
        Some(self.inner.capture.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether the stream is capturing, and if so the capture's id.
    pub(super) fn capture_id(&self) -> Option<u64> {
        self.capture_slot()?.as_ref().map(|c| c.id)
    }

    /// [`GraphErrorKind::SynchronousCall`] for `op` while the stream captures.
    pub(super) fn refuse_if_capturing(&self, op: &'static str) -> Result<()> {
        use crate::backend::graph::CaptureStream;
        crate::backend::graph::check_not_capturing(BackendKind::Host, op, self.capture_status())
    }

    pub(super) fn synchronize(&self) -> Result<()> {
        self.refuse_if_capturing("synchronize")?;
        match self.inner.pending.wait_idle().failure.take() {
            Some(msg) => Err(Error::HostTask(msg)),
            None => Ok(()),
        }
    }

    pub(super) fn is_idle(&self) -> bool {
        self.inner.pending.state.lock().unwrap_or_else(|p| p.into_inner()).queued == 0
    }
}

// ---- events -------------------------------------------------------------------

#[derive(Default)]
pub(super) struct EventState {
    /// Number of times the event was recorded.
    pub(super) recorded: u64,
    /// Highest recording that the stream has reached.
    pub(super) completed: u64,
    /// When the latest completed recording was reached.
    pub(super) at: Option<Instant>,
    /// The capture the latest recording was made in, if it was made in one:
    /// it happens only when the graph runs.
    pub(super) captured_in: Option<u64>,
}

/// A marker on a host stream.
#[derive(Clone, Default)]
pub struct HostEvent {
    pub(super) inner: Arc<(Mutex<EventState>, Condvar)>,
}

impl fmt::Debug for HostEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.0.lock().unwrap_or_else(|p| p.into_inner());
        write!(f, "HostEvent(recorded {}, completed {})", st.recorded, st.completed)
    }
}

impl HostEvent {
    pub(super) fn wait_for(&self, generation: u64) {
        let (lock, cvar) = &*self.inner;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        while st.completed < generation {
            st = cvar.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}
