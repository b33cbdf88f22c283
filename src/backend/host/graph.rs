//! Graphs on the host backend: a capturing [`HostStream`] keeps the closures
//! it would have queued, in order, as the nodes of a [`HostGraph`]; a
//! [`HostGraphExec`] replays them on a stream's worker thread.
//!
//! Each node is the very closure the stream would have run, holding the
//! owners of the memory it touches, so a graph keeps that memory alive the
//! way queued work does. Capture covers one stream: an event recorded inside
//! the capture can be waited for only inside it
//! ([`GraphErrorKind::Isolation`]), where stream order already satisfies
//! the wait.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::capture::{invalidated, HostCapture, NodeFn, NodeKind};
use super::stream::EventState;
use super::{Host, HostEvent, HostStream};
use crate::backend::graph::{CaptureMode, CaptureStatus, CaptureStream, Owner, RawGraph, RawGraphExec, Recorder};
use crate::error::{graph_error, BackendKind, Error, GraphErrorKind, Result};

/// [`GraphErrorKind::Isolation`] for `op`.
pub(super) fn isolation(op: &'static str, why: &str) -> Error {
    graph_error(
        BackendKind::Host,
        op,
        GraphErrorKind::Isolation,
        format!("{why}: a dependency across a capture's boundary (the host backend captures one stream)"),
    )
}

/// [`GraphErrorKind::CapturedEvent`] where the event's latest recording was in a capture.
pub(super) fn refuse_captured_event(st: &EventState, op: &'static str) -> Result<()> {
    match st.captured_in {
        None => Ok(()),
        Some(_) => Err(graph_error(
            BackendKind::Host,
            op,
            GraphErrorKind::CapturedEvent,
            "the event was last recorded inside a capture: it is recorded only when the graph runs".into(),
        )),
    }
}

/// `record_event` on a stream capturing as `capture`: a node that, at each
/// replay, records and reaches the event at once (the worker runs in order).
pub(super) fn record_in_capture(event: &HostEvent, stream: &HostStream, capture: u64) -> Result<()> {
    event.inner.0.lock().unwrap_or_else(|p| p.into_inner()).captured_in = Some(capture);
    let ev = event.clone();
    stream.enqueue(NodeKind::EventRecord, move || {
        let (lock, cvar) = &*ev.inner;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        st.recorded += 1;
        st.completed = st.recorded;
        st.captured_in = None;
        st.at = Some(Instant::now());
        cvar.notify_all();
    })
}

/// `wait_event` on a stream capturing as `capture`, for an event last
/// recorded in `captured_in`: inside the same capture stream order makes
/// it a no-op node; anything else invalidates the capture, as on CUDA
/// (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`).
pub(super) fn wait_in_capture(stream: &HostStream, capture: u64, captured_in: Option<u64>) -> Result<()> {
    if captured_in == Some(capture) {
        return stream.enqueue(NodeKind::EventWait, || {});
    }
    let why = "waiting inside a capture for an event recorded outside it";
    if let Some(c) = stream.inner.capture.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        c.invalidated.get_or_insert_with(|| why.to_string());
    }
    Err(isolation("wait_event", why))
}

impl CaptureStream<Host> for HostStream {
    fn capture_ordinal(&self) -> usize {
        0
    }

    fn gate(&self) -> &crate::backend::gate::CaptureGate {
        &self.inner.gate
    }

    /// Every mode behaves alike on one stream; the modes' rules for other
    /// calls are the generic layer's (`check_device_wide_wait`). Nodes keep
    /// their owners themselves; the recorder takes those of `keep_for_graph`.
    fn begin_capture(&self, _mode: CaptureMode, recorder: Arc<Recorder>) -> Result<()> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let mut capture = self.inner.capture.lock().unwrap_or_else(|p| p.into_inner());
        if capture.is_some() {
            return Err(graph_error(
                BackendKind::Host,
                "begin_capture",
                GraphErrorKind::AlreadyCapturing,
                "the stream is already capturing; end that capture first".into(),
            ));
        }
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        *capture = Some(HostCapture { id, nodes: Vec::new(), invalidated: None, recorder });
        // Under the lock, with the slot (see `HostStream::capture_slot`).
        self.inner.capturing.store(true, Ordering::Release);
        Ok(())
    }

    fn end_capture(&self) -> Result<HostGraph> {
        let capture = {
            let mut slot = self.inner.capture.lock().unwrap_or_else(|p| p.into_inner());
            self.inner.capturing.store(false, Ordering::Release);
            slot.take()
        };
        let Some(capture) = capture else {
            return Err(graph_error(
                BackendKind::Host,
                "end_capture",
                GraphErrorKind::Invalidated,
                "the stream is not capturing".into(),
            ));
        };
        if let Some(why) = capture.invalidated {
            return Err(invalidated("end_capture", &why));
        }
        Ok(HostGraph { nodes: capture.nodes.into() })
    }

    fn keep_for_graph(&self, owner: Owner) {
        if let Some(slot) = self.capture_slot() {
            if let Some(c) = slot.as_ref() {
                c.recorder.keep(owner);
            }
        }
    }

    fn capture_id(&self) -> Result<Option<u64>> {
        Ok(HostStream::capture_id(self))
    }

    #[inline]
    fn capture_status(&self) -> Result<CaptureStatus> {
        let Some(slot) = self.capture_slot() else { return Ok(CaptureStatus::None) };
        Ok(match slot.as_ref() {
            None => CaptureStatus::None,
            Some(c) if c.invalidated.is_some() => CaptureStatus::Invalidated,
            Some(_) => CaptureStatus::Active,
        })
    }
}

/// A graph captured on the host backend: the captured closures, in order.
pub struct HostGraph {
    nodes: Arc<[(NodeKind, NodeFn)]>,
}

impl fmt::Debug for HostGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostGraph({} nodes)", self.nodes.len())
    }
}

impl RawGraph<Host> for HostGraph {
    fn node_count(&self) -> Result<usize> {
        Ok(self.nodes.len())
    }

    fn instantiate(&self) -> Result<HostGraphExec> {
        Ok(HostGraphExec { nodes: self.nodes.clone(), flight: Arc::default(), last: Mutex::new(None) })
    }
}

/// Launches of an executable graph not yet run to the end.
#[derive(Default)]
struct Flight {
    count: Mutex<u64>,
    done: Condvar,
}

/// Marks one launch done when dropped, even if a node panicked.
struct Landing<'a>(&'a Flight);

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        let mut count = self.0.count.lock().unwrap_or_else(|p| p.into_inner());
        *count -= 1;
        if *count == 0 {
            self.0.done.notify_all();
        }
    }
}

/// Marks a launch's event reached when dropped, even if a node panicked.
struct Reach<'a>(&'a HostEvent);

impl Drop for Reach<'_> {
    fn drop(&mut self) {
        let (lock, cvar) = &*self.0.inner;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        st.completed = st.recorded;
        st.at = Some(Instant::now());
        cvar.notify_all();
    }
}

/// An executable host graph: each launch queues one task that runs every
/// node in order on the stream's worker thread.
pub struct HostGraphExec {
    nodes: Arc<[(NodeKind, NodeFn)]>,
    flight: Arc<Flight>,
    /// Reached when the latest launch has run (each launch waits for the one before).
    last: Mutex<Option<HostEvent>>,
}

impl fmt::Debug for HostGraphExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let in_flight = *self.flight.count.lock().unwrap_or_else(|p| p.into_inner());
        write!(f, "HostGraphExec({} nodes, {in_flight} launches in flight)", self.nodes.len())
    }
}

impl RawGraphExec<Host> for HostGraphExec {
    /// One replay on `stream`'s worker, after the executable's previous
    /// launch whatever its stream: CUDA orders the launches of one
    /// executable graph, and two replays of the same nodes at once would
    /// race on the memory they write.
    fn launch(&self, stream: &HostStream) -> Result<()> {
        // The capture check and the enqueue agree (`gate.rs`): a capture
        // begun in between would take the replay as a node.
        let _section = crate::backend::graph::capture_section::<Host>(stream);
        if stream.capture_id().is_some() {
            return Err(graph_error(
                BackendKind::Host,
                "launch",
                GraphErrorKind::NestedLaunch,
                "the host backend does not capture a graph launch into another graph".into(),
            ));
        }
        // Launches are serialized here, so `last` is the launch before this one.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let previous = last.clone();
        let done = HostEvent::default();
        done.inner.0.lock().unwrap_or_else(|p| p.into_inner()).recorded = 1;
        // The replay's hold on the graph (and so on its owners) is taken
        // out and dropped before the replay counts as landed, so a drop of
        // the executable that waited for it releases the owners itself: a
        // closure's captures would outlive the landing (seen as a flaky
        // `dropping_an_executable_graph_waits_for_its_launches` on 2 cores).
        let (nodes, flight) = (Mutex::new(Some(self.nodes.clone())), self.flight.clone());
        let reached = done.clone();
        *flight.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        let launched = stream.enqueue(NodeKind::Replay, move || {
            let landing = Landing(&flight);
            // Reached even if a node panics, so later launches go on.
            let reach = Reach(&reached);
            if let Some(previous) = &previous {
                previous.wait_for(1);
            }
            let nodes = nodes.lock().unwrap_or_else(|p| p.into_inner()).take();
            for (_, node) in nodes.iter().flat_map(|n| n.iter()) {
                node();
            }
            drop(nodes);
            drop(reach);
            drop(landing);
        });
        match launched {
            Ok(()) => *last = Some(done),
            // Never queued: the closure (and its landing) will not run.
            Err(_) => *self.flight.count.lock().unwrap_or_else(|p| p.into_inner()) -= 1,
        }
        launched
    }

    fn update(&mut self, graph: &HostGraph) -> Result<()> {
        let kinds = |nodes: &[(NodeKind, NodeFn)]| nodes.iter().map(|(k, _)| *k).collect::<Vec<_>>();
        let (old, new) = (kinds(&self.nodes), kinds(&graph.nodes));
        if old != new {
            let reason = match old.iter().zip(&new).position(|(a, b)| a != b) {
                _ if old.len() != new.len() => format!("the graph has {} nodes, this one {}", new.len(), old.len()),
                Some(i) => format!("node {i} is {:?} in the graph, {:?} here", new[i], old[i]),
                None => "the graphs differ".into(),
            };
            return Err(graph_error(BackendKind::Host, "update", GraphErrorKind::UpdateRefused, reason));
        }
        self.nodes = graph.nodes.clone();
        Ok(())
    }

    fn is_idle(&self) -> bool {
        *self.flight.count.lock().unwrap_or_else(|p| p.into_inner()) == 0
    }

    fn wait_idle(&self) {
        let mut count = self.flight.count.lock().unwrap_or_else(|p| p.into_inner());
        while *count > 0 {
            count = self.flight.done.wait(count).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::{CaptureMode, CaptureStatus, Device};
    use crate::HostDevice;

    /// `HostStream::capture_slot` reads the capture flag without the lock:
    /// a thread ordered after `begin_capture` (here, spawned after it) must
    /// still see the capture and enqueue into it, and one ordered after
    /// `end_capture` must not.
    #[test]
    fn threads_ordered_after_begin_and_end_capture_see_them() {
        let d = HostDevice::open(0).unwrap();
        let s = d.create_stream().unwrap();
        let buf = d.alloc(64).unwrap();
        let capture = d.begin_capture(&s, CaptureMode::Relaxed).unwrap();
        std::thread::scope(|t| {
            t.spawn(|| {
                assert_eq!(d.capture_status(&s).unwrap(), CaptureStatus::Active);
                // SAFETY: `buf` outlives the graph (both dropped at the end of the test).
                unsafe { d.memset_async(&buf, 0, 64, 1, &s) }.unwrap();
            });
        });
        let graph = capture.end().unwrap();
        assert_eq!(graph.node_count().unwrap(), 1, "the other thread's memset went past the capture");
        std::thread::scope(|t| {
            t.spawn(|| assert_eq!(d.capture_status(&s).unwrap(), CaptureStatus::None));
        });
    }
}
