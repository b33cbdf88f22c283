//! `Graph` and its capture context `GraphCapture` (`Stream.capture()`,
//! `Graph.capture()`, `graph_capture()`): conversions to the core's run-time
//! graphs (`gpuport::dynamic::graph`), which hold every rule and every
//! backend.
//!
//! While a capture runs, the operands that `gpuport.runtime` calls keep
//! alive (`keep::keep_until_done`) go to the graph, so arrays used in a
//! capture live as long as the `Graph`. `GraphCapture.__exit__` ends the
//! capture whatever the body did; with an exception, what was captured is
//! discarded and the exception goes on.

use gpuport::dynamic::graph_slot::{
    self, capture_mode_name, capture_mode_named, update_between, BlockExit, CaptureBlock, GraphSlot,
};
use gpuport::dynamic::keep;
use gpuport::CaptureMode;
use pyo3::prelude::*;

use crate::convert::device::{resolve_device, spec, PyDevice};
use crate::convert::error::{self, IntoPyResult};
use crate::convert::exclusive::{Exclusive, LockDetached};
use crate::convert::stream::{stream_choice, PyStream};

/// A graph of captured work: `with g.capture(stream):` records the kernels,
/// copies and memsets enqueued on `stream`, and `g.replay()` runs them all again.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> g = gpuport.Graph()
///     >>> g.is_captured, g.node_count, g.device, g.stream
///     (False, 0, None, None)
///     >>> buf = rt.malloc(8, device="host")
///     >>> with g.capture(device="host") as same:       # a new stream on the host
///     ...     g.is_capturing
///     ...     rt.memset_async(buf, 2, 8, stream=g.stream)
///     True
///     >>> same is g, g.is_capturing, g.is_captured, g.node_count, g.kept_alive
///     (True, False, True, 1, 1)
///     >>> g.device.spec, g.stream.device.spec
///     ('host', 'host')
///     >>> g.replay(); g.synchronize()
///     >>> out = bytearray(8); rt.memcpy(out, buf, 8); out[0]
///     2
///
/// The core's slot holds every rule of the graph's life, and keeps the
/// Python stream its capture ran on (`GraphSlot::stream_owner`).
#[pyclass(module = "gpuport._core", name = "Graph", frozen)]
pub struct PyGraph {
    state: Exclusive<GraphSlot>,
}

impl PyGraph {
    fn new_empty() -> Self {
        PyGraph { state: Exclusive::new(GraphSlot::default(), "Graph") }
    }
}

/// The `Stream` a capture runs on (the choice is the core's
/// `graph_slot::capture_stream`): the `Stream` given, or a new `Stream`
/// object over the stream chosen, keeping a foreign stream object given.
fn capture_stream(
    py: Python<'_>,
    stream: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyStream>> {
    let stream = stream.filter(|s| !s.is_none());
    let chosen = stream_choice(stream)?;
    let device = match device.filter(|d| !d.is_none()) {
        Some(d) => Some(resolve_device(py, Some(d))?),
        None => None,
    };
    let inner = graph_slot::capture_stream(&chosen.choice, device.as_ref()).py_err(py)?;
    match stream.and_then(|s| s.cast::<PyStream>().ok()) {
        Some(ours) => Ok(ours.clone().unbind()),
        None => Py::new(py, PyStream::wrap(inner, stream.map(|s| s.clone().unbind()))),
    }
}

/// A `GraphCapture` that captures `stream` into `graph`.
pub fn capture_into(py: Python<'_>, graph: Py<PyGraph>, stream: Py<PyStream>, mode: &str) -> PyResult<PyGraphCapture> {
    let mode = capture_mode_named(mode).py_err(py)?;
    Ok(PyGraphCapture { graph, stream, mode, block: CaptureBlock::default() })
}

#[pymethods]
impl PyGraph {
    /// An empty graph; capture into it with `with g.capture(stream):`.
    #[new]
    fn new() -> Self {
        Self::new_empty()
    }

    /// A context manager that captures the work enqueued on `stream` into
    /// this graph: `with g.capture(s): ...`. `stream`: a `Stream`, a foreign
    /// stream (a torch or CuPy stream, an object with `__cuda_stream__`, an
    /// int handle) of `device`, or None for a new stream on `device` (the
    /// default device when None), which `g.stream` gives. `mode`: "global"
    /// (default; calls that wait for the device or its default stream are
    /// refused on every thread during the capture), "thread_local" (refused
    /// on this thread) or "relaxed" (not refused).
    ///
    ///     >>> import gpuport
    ///     >>> from gpuport import runtime as rt
    ///     >>> s = gpuport.Stream("host")
    ///     >>> buf = rt.malloc(8, device="host")
    ///     >>> g = gpuport.Graph()
    ///     >>> with g.capture(s, mode="relaxed"):
    ///     ...     rt.memset_async(buf, 3, 8, stream=s)
    ///     >>> g.stream is s, g.node_count
    ///     (True, 1)
    #[pyo3(signature = (stream=None, *, mode="global", device=None))]
    fn capture(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        mode: &str,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyGraphCapture> {
        let py = slf.py();
        capture_mode_named(mode).py_err(py)?;
        let stream = capture_stream(py, stream, device)?;
        capture_into(py, slf.clone().unbind(), stream, mode)
    }

    /// Enqueues one replay of the captured work on `stream` (None: the
    /// device's default stream; a `Stream` or foreign stream of the graph's
    /// device), without waiting. Replays on one stream run in order.
    ///
    ///     >>> import gpuport
    ///     >>> from gpuport import runtime as rt
    ///     >>> s = gpuport.Stream("host")
    ///     >>> src, dst = rt.malloc(8, device="host"), rt.malloc(8, device="host")
    ///     >>> with s.capture() as g:
    ///     ...     rt.memcpy_async(dst, src, 8, stream=s)
    ///     >>> for value in (1, 2, 3):
    ///     ...     rt.memset(src, value, 8)
    ///     ...     g.replay(s)
    ///     ...     s.synchronize()
    ///     >>> out = bytearray(8); rt.memcpy(out, dst, 8); out[0]
    ///     3
    #[pyo3(signature = (stream=None))]
    fn replay(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.launch_as(py, stream, "Graph.replay")
    }

    /// `replay` under CuPy's name.
    ///
    ///     >>> import gpuport
    ///     >>> from gpuport import runtime as rt
    ///     >>> buf = rt.malloc(8, device="host")
    ///     >>> with gpuport.graph_capture(device="host") as g:
    ///     ...     rt.memset_async(buf, 4, 8, stream=g.stream)
    ///     >>> g.launch(g.stream); g.stream.synchronize()
    ///     >>> out = bytearray(8); rt.memcpy(out, buf, 8); out[0]
    ///     4
    #[pyo3(signature = (stream=None))]
    fn launch(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.launch_as(py, stream, "Graph.launch")
    }

    /// Takes the arguments of `other`, a re-capture of the same work (the
    /// same kernels, copies and memsets in the same order), without
    /// re-instantiating (`cuGraphExecUpdate`). Replays already enqueued
    /// run with the old arguments, and keep their operands alive; later
    /// replays use `other`'s, and this graph keeps `other`'s operands alive.
    /// A graph of another shape raises `GraphError` (kind "update_refused")
    /// and changes nothing.
    ///
    ///     >>> import gpuport
    ///     >>> from gpuport import runtime as rt
    ///     >>> s = gpuport.Stream("host")
    ///     >>> buf = rt.malloc(8, device="host")
    ///     >>> def fill_graph(value):
    ///     ...     with s.capture() as g:
    ///     ...         rt.memset_async(buf, value, 8, stream=s)
    ///     ...     return g
    ///     >>> g = fill_graph(5)
    ///     >>> g.update(fill_graph(6))           # same work, new arguments
    ///     >>> g.replay(s); s.synchronize()
    ///     >>> out = bytearray(8); rt.memcpy(out, buf, 8); out[0]
    ///     6
    fn update(&self, py: Python<'_>, other: &Bound<'_, PyGraph>) -> PyResult<()> {
        keep::prune();
        update_between(&self.state, &other.get().state, |wait| py.detach(wait))
            .map_err(|e| error::to_py_graph_call(py, e, "Graph.update"))
    }

    /// Waits until every replay enqueued so far has completed.
    ///
    ///     >>> import gpuport
    ///     >>> from gpuport import runtime as rt
    ///     >>> buf = rt.malloc(8, device="host")
    ///     >>> with gpuport.graph_capture(device="host") as g:
    ///     ...     rt.memset_async(buf, 7, 8, stream=g.stream)
    ///     >>> for _ in range(3):
    ///     ...     g.replay()
    ///     >>> g.synchronize()
    ///     >>> out = bytearray(8); rt.memcpy(out, buf, 8); out[0]
    ///     7
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let slot = self.state.lock_detached(py)?;
        let slot = &*slot;
        py.detach(|| slot.synchronize()).py_err_in(py, "Graph.synchronize")
    }

    /// Drops the captured work (after its replays have completed) and the
    /// operands it kept alive; the graph can capture again.
    ///
    ///     >>> import gpuport
    ///     >>> from gpuport import runtime as rt
    ///     >>> buf = rt.malloc(8, device="host")
    ///     >>> with gpuport.graph_capture(device="host") as g:
    ///     ...     rt.memset_async(buf, 1, 8, stream=g.stream)
    ///     >>> g.reset()
    ///     >>> g.is_captured, g.kept_alive, g.stream
    ///     (False, 0, None)
    ///     >>> with g.capture(device="host"):
    ///     ...     rt.memset_async(buf, 2, 8, stream=g.stream)
    ///     >>> g.is_captured
    ///     True
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        let retired = self.state.lock_detached(py)?.reset().py_err_in(py, "Graph.reset")?;
        py.detach(|| retired.wait());
        // Dropped with the interpreter lock: the operands include Python objects.
        drop(retired);
        keep::prune();
        Ok(())
    }

    /// Whether the graph holds captured work (replay is possible).
    #[getter]
    fn is_captured(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state.lock_detached(py)?.is_captured())
    }

    /// Whether a capture into this graph is running.
    #[getter]
    fn is_capturing(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state.lock_detached(py)?.is_capturing())
    }

    /// Number of operations captured (0 before a capture).
    #[getter]
    fn node_count(&self, py: Python<'_>) -> PyResult<usize> {
        self.state.lock_detached(py)?.node_count().py_err(py)
    }

    /// Number of operand sets (the arrays, buffers and arguments of one
    /// runtime call each) the graph keeps alive from its capture.
    #[getter]
    fn kept_alive(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.state.lock_detached(py)?.kept())
    }

    /// The device of the captured work (None before a capture).
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<Option<PyDevice>> {
        Ok(self.state.lock_detached(py)?.captured_device().map(PyDevice::from))
    }

    /// The stream the capture ran on (None before a capture).
    #[getter]
    fn stream(&self, py: Python<'_>) -> PyResult<Option<Py<PyStream>>> {
        let slot = self.state.lock_detached(py)?;
        Ok(slot.stream_owner::<Py<PyStream>>().map(|s| s.clone_ref(py)))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let slot = self.state.lock_detached(py)?;
        Ok(match slot.device() {
            _ if slot.is_capturing() => "Graph(capturing)".into(),
            Some(dev) => format!(
                "Graph({}, nodes={}, kept_alive={})",
                spec(&dev),
                slot.node_count().map(|n| n.to_string()).unwrap_or_else(|_| "?".into()),
                slot.kept()
            ),
            None => "Graph(empty)".into(),
        })
    }
}

impl PyGraph {
    fn launch_as(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>, call: &str) -> PyResult<()> {
        let stream = stream_choice(stream)?;
        graph_slot::replay_and_keep(&self.state, stream.choice, stream.owner, |op| py.detach(op))
            .map_err(|e| error::to_py_graph_call(py, e, call))
    }
}

/// A running (or ready) capture of a stream into a `Graph`: a context
/// manager whose `__enter__` begins the capture and returns the graph, and
/// whose `__exit__` ends it, even when the block raised.
///
///     >>> import gpuport
///     >>> s = gpuport.Stream("host")
///     >>> capture = s.capture(mode="thread_local")
///     >>> capture.mode, capture.stream is s, capture.graph.is_captured
///     ('thread_local', True, False)
///     >>> with capture as g:
///     ...     s.is_capturing
///     True
///     >>> g is capture.graph, s.is_capturing
///     (True, False)
#[pyclass(module = "gpuport._core", name = "GraphCapture", frozen)]
pub struct PyGraphCapture {
    graph: Py<PyGraph>,
    stream: Py<PyStream>,
    mode: CaptureMode,
    /// The block's rules: entered once, exited once (the core's).
    block: CaptureBlock,
}

#[pymethods]
impl PyGraphCapture {
    /// Begins the capture; returns the `Graph`.
    fn __enter__(&self, py: Python<'_>) -> PyResult<Py<PyGraph>> {
        keep::prune();
        let call = "Graph.capture";
        let mut slot = self.graph.get().state.lock_detached(py)?;
        let owner = Box::new(self.stream.clone_ref(py));
        self.block.enter_keeping(&mut slot, &self.stream.get().inner, self.mode, owner).py_err_in(py, call)?;
        Ok(self.graph.clone_ref(py))
    }

    /// Ends the capture. Without an exception in the block, the graph gets
    /// the captured work (instantiated, ready to replay); with one, what was
    /// captured is discarded and the exception goes on (returns False).
    #[pyo3(signature = (exc_type=None, exc_value=None, traceback=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc_value: Option<&Bound<'_, PyAny>>,
        traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _ = (exc_value, traceback);
        let call = "Graph.capture";
        let raised = exc_type.is_some_and(|t| !t.is_none());
        let mut slot = self.graph.get().state.lock_detached(py)?;
        let ended = match self.block.exit(&mut slot, raised).py_err_in(py, call)? {
            BlockExit::StillRunning(e) => return Err(error::to_py_in(py, e, Some(call))),
            BlockExit::Over(ended) => ended,
        };
        drop(slot);
        keep::prune();
        // False: the block's exception, if any, goes on.
        ended.map(|_| false).py_err_in(py, call)
    }

    /// The stream being captured.
    #[getter]
    fn stream(&self, py: Python<'_>) -> Py<PyStream> {
        self.stream.clone_ref(py)
    }

    /// The graph captured into.
    #[getter]
    fn graph(&self, py: Python<'_>) -> Py<PyGraph> {
        self.graph.clone_ref(py)
    }

    /// The capture mode ("global", "thread_local" or "relaxed").
    #[getter]
    fn mode(&self) -> &'static str {
        capture_mode_name(self.mode)
    }

    fn __repr__(&self) -> String {
        let state = if self.block.is_entered() { "running" } else { "not running" };
        format!(
            "GraphCapture({}, mode={:?}, {state})",
            spec(&self.stream.get().inner.device()),
            capture_mode_name(self.mode)
        )
    }
}

impl Drop for PyGraphCapture {
    /// A capture entered and never exited (a manual `__enter__`): the
    /// capture ends as it drops, and the graph stops capturing.
    fn drop(&mut self) {
        if self.block.is_entered() {
            Python::attach(|py| {
                if let Ok(mut slot) = self.graph.get().state.lock_detached(py) {
                    self.block.abandon(&mut slot);
                }
            });
        }
    }
}

/// `with gpuport.graph_capture(stream) as g:` captures into a new `Graph`
/// (`Graph().capture(stream, mode=mode, device=device)`).
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> buf = rt.malloc(8, device="host")
///     >>> with gpuport.graph_capture(device="host") as g:   # on a new stream, g.stream
///     ...     rt.memset_async(buf, 9, 8, stream=g.stream)
///     >>> g.replay(); g.synchronize()
///     >>> out = bytearray(8); rt.memcpy(out, buf, 8); out[0]
///     9
#[pyfunction]
#[pyo3(signature = (stream=None, *, mode="global", device=None))]
pub fn graph_capture(
    py: Python<'_>,
    stream: Option<&Bound<'_, PyAny>>,
    mode: &str,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyGraphCapture> {
    capture_mode_named(mode).py_err(py)?;
    let stream = capture_stream(py, stream, device)?;
    capture_into(py, Py::new(py, PyGraph::new_empty())?, stream, mode)
}

/// `Stream.capture`, written here beside the captures it starts.
#[pymethods]
impl PyStream {
    /// A context manager that captures the work enqueued on this stream
    /// into a new `Graph`: `with s.capture() as g: ...`, then `g.replay()`.
    /// `mode` as for `Graph.capture`.
    ///
    ///     >>> import gpuport
    ///     >>> from gpuport import runtime as rt
    ///     >>> s = gpuport.Stream("host")
    ///     >>> buf = rt.malloc(8, device="host")
    ///     >>> with s.capture() as g:
    ///     ...     rt.memset_async(buf, 1, 8, stream=s)   # recorded, not run
    ///     >>> g.replay(s)
    ///     >>> s.synchronize()
    ///     >>> out = bytearray(8); rt.memcpy(out, buf, 8); bytes(out)
    ///     b'\x01\x01\x01\x01\x01\x01\x01\x01'
    #[pyo3(signature = (mode="global"))]
    fn capture(slf: &Bound<'_, Self>, mode: &str) -> PyResult<PyGraphCapture> {
        let py = slf.py();
        graph_capture(py, Some(slf.as_any()), mode, None)
    }
}
