//! HIP's stream-capture and graph calls ([`GraphCalls`]): `hipStreamBeginCapture`,
//! `hipStreamEndCapture`, `hipStreamIsCapturing`, `hipThreadExchangeStreamCaptureMode`, `hipGraphGetNodes`,
//! `hipGraphInstantiateWithFlags`, `hipGraphLaunch`, `hipGraphExecUpdate`,
//! `hipGraphDestroy`, `hipGraphExecDestroy`, `hipStreamGetCaptureInfo_v2`,
//! `hipUserObjectCreate`, `hipGraphRetainUserObject`. Optional symbols: a runtime
//! without one fails graphs alone, with [`Error::Unsupported`](crate::Error::Unsupported).
//! HIP's enums share CUDA's numbering (modes, statuses, update results).

use std::ffi::{c_int, c_void};

use super::sys::{self, hipError_t};
use super::{check, HipDriver};
use crate::backend::gpu::GraphCalls;
use crate::backend::graph::{CaptureMode, CaptureStatus};
use crate::error::Result;

/// HIP's graph calls.
pub struct HipGraphs;

/// `hipStreamCaptureMode`'s number for `mode` (CUDA's numbering).
fn capture_mode(mode: CaptureMode) -> sys::hipStreamCaptureMode {
    match mode {
        CaptureMode::Global => 0,
        CaptureMode::ThreadLocal => 1,
        CaptureMode::Relaxed => 2,
    }
}

/// The optional function `$f` of `$d`'s runtime, or `Unsupported` naming it.
macro_rules! graph_fn {
    ($d:expr, $f:ident) => {
        $d.api().$f.ok_or_else(|| $d.missing_function(stringify!($f), "stream capture and graphs"))?
    };
}

// SAFETY: each method makes the HIP call its name says and reports failure
// as an error; handles come only from those calls.
unsafe impl GraphCalls<HipDriver> for HipGraphs {
    type Graph = sys::hipGraph_t;
    type Exec = sys::hipGraphExec_t;

    const CAPTURE_INVALIDATED: hipError_t = sys::hipErrorStreamCaptureInvalidated;

    unsafe fn begin_capture(d: &HipDriver, stream: sys::hipStream_t, mode: CaptureMode) -> Result<()> {
        let begin = graph_fn!(d, hipStreamBeginCapture);
        // SAFETY: the caller's contract: a live stream of the current device.
        check("hipStreamBeginCapture", unsafe { begin(stream, capture_mode(mode)) })
    }

    unsafe fn end_capture(d: &HipDriver, stream: sys::hipStream_t) -> Result<sys::hipGraph_t> {
        let end = graph_fn!(d, hipStreamEndCapture);
        let mut graph = std::ptr::null_mut();
        // SAFETY: the caller's contract; writes one graph handle.
        check("hipStreamEndCapture", unsafe { end(stream, &mut graph) })?;
        Ok(graph)
    }

    unsafe fn capture_status(d: &HipDriver, stream: sys::hipStream_t) -> Result<CaptureStatus> {
        let is_capturing = graph_fn!(d, hipStreamIsCapturing);
        let mut s = 0;
        // SAFETY: the caller's contract; writes one status.
        check("hipStreamIsCapturing", unsafe { is_capturing(stream, &mut s) })?;
        Ok(match s {
            0 => CaptureStatus::None,
            1 => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        })
    }

    fn exchange_capture_mode(d: &HipDriver, mode: CaptureMode) -> Result<CaptureMode> {
        let exchange = graph_fn!(d, hipThreadExchangeStreamCaptureMode);
        let mut raw = capture_mode(mode);
        // SAFETY: reads and writes one mode of the calling thread's state.
        check("hipThreadExchangeStreamCaptureMode", unsafe { exchange(&mut raw) })?;
        Ok(match raw {
            0 => CaptureMode::Global,
            1 => CaptureMode::ThreadLocal,
            _ => CaptureMode::Relaxed,
        })
    }

    unsafe fn node_count(d: &HipDriver, graph: sys::hipGraph_t) -> Result<usize> {
        let get_nodes = graph_fn!(d, hipGraphGetNodes);
        let mut n = 0;
        // SAFETY: the caller's contract; with a null array the call writes the count only.
        check("hipGraphGetNodes", unsafe { get_nodes(graph, std::ptr::null_mut(), &mut n) })?;
        Ok(n)
    }

    unsafe fn instantiate(d: &HipDriver, graph: sys::hipGraph_t) -> Result<sys::hipGraphExec_t> {
        let instantiate = graph_fn!(d, hipGraphInstantiateWithFlags);
        let mut exec = std::ptr::null_mut();
        // SAFETY: the caller's contract; writes one handle; no flags.
        check("hipGraphInstantiateWithFlags", unsafe { instantiate(&mut exec, graph, 0) })?;
        Ok(exec)
    }

    unsafe fn launch(d: &HipDriver, exec: sys::hipGraphExec_t, stream: sys::hipStream_t) -> Result<()> {
        let launch = graph_fn!(d, hipGraphLaunch);
        // SAFETY: the caller's contract: live handles of the current device.
        check("hipGraphLaunch", unsafe { launch(exec, stream) })
    }

    unsafe fn update(d: &HipDriver, exec: sys::hipGraphExec_t, graph: sys::hipGraph_t) -> Result<Option<String>> {
        let update = graph_fn!(d, hipGraphExecUpdate);
        let (mut node, mut result) = (std::ptr::null_mut(), 0);
        // SAFETY: the caller's contract; writes one node handle and one result.
        let s = unsafe { update(exec, graph, &mut node, &mut result) };
        if s == sys::hipErrorGraphExecUpdateFailure {
            return Ok(Some(format!("hipGraphExecUpdate: hipGraphExecUpdateResult {result}")));
        }
        check("hipGraphExecUpdate", s)?;
        Ok(None)
    }

    unsafe fn destroy_graph(d: &HipDriver, graph: sys::hipGraph_t) -> Result<()> {
        let destroy = graph_fn!(d, hipGraphDestroy);
        // SAFETY: the caller's contract: destroyed once.
        check("hipGraphDestroy", unsafe { destroy(graph) })
    }

    unsafe fn destroy_exec(d: &HipDriver, exec: sys::hipGraphExec_t) -> Result<()> {
        let destroy = graph_fn!(d, hipGraphExecDestroy);
        // SAFETY: the caller's contract: destroyed once.
        check("hipGraphExecDestroy", unsafe { destroy(exec) })
    }

    unsafe fn capture_id(d: &HipDriver, stream: sys::hipStream_t) -> Result<Option<u64>> {
        // SAFETY: the caller's contract.
        let (st, id, _) = unsafe { capture_info(d, stream)? };
        Ok((st != 0).then_some(id))
    }

    unsafe fn retain_in_capture(
        d: &HipDriver,
        stream: sys::hipStream_t,
        data: *mut c_void,
        release: unsafe extern "C" fn(*mut c_void),
    ) -> Result<()> {
        let create = graph_fn!(d, hipUserObjectCreate);
        let retain = graph_fn!(d, hipGraphRetainUserObject);
        // SAFETY: the caller's contract.
        let (_, _, graph) = unsafe { capture_info(d, stream)? };
        let mut object = std::ptr::null_mut();
        // `hipUserObjectNoDestructorSync` and `hipGraphUserObjectMove`: CUDA's numbering.
        let (no_sync, moved) = (1, 1);
        // SAFETY: the caller's contract on `release(data)`; one reference, which the graph takes below.
        check("hipUserObjectCreate", unsafe { create(&mut object, data, Some(release), 1, no_sync) })?;
        // SAFETY: `graph` is the capture's live graph; the reference moves to
        // it. On failure the object keeps its reference for good: `release`
        // is never called, as the trait promises for an error.
        check("hipGraphRetainUserObject", unsafe { retain(graph, object, 1, moved) })
    }
}

/// `hipStreamGetCaptureInfo_v2`: the capture's status, id and graph.
///
/// # Safety
/// `stream` is a live stream of `d`'s current device.
unsafe fn capture_info(d: &HipDriver, stream: sys::hipStream_t) -> Result<(c_int, u64, sys::hipGraph_t)> {
    let info = graph_fn!(d, hipStreamGetCaptureInfo_v2);
    let (mut st, mut id, mut graph, mut deps, mut n) = (0, 0u64, std::ptr::null_mut(), std::ptr::null(), 0usize);
    // SAFETY: the caller's contract; the runtime writes the five outputs.
    check("hipStreamGetCaptureInfo", unsafe { info(stream, &mut st, &mut id, &mut graph, &mut deps, &mut n) })?;
    Ok((st, id, graph))
}
