//! CUDA's stream-capture and graph calls ([`GraphCalls`]): `cuStreamBeginCapture_v2`,
//! `cuStreamEndCapture`, `cuStreamIsCapturing`, `cuThreadExchangeStreamCaptureMode`, `cuGraphGetNodes`,
//! `cuGraphInstantiateWithFlags`, `cuGraphLaunch`, `cuGraphExecUpdate_v2`,
//! `cuGraphDestroy`, `cuGraphExecDestroy` (all CUDA 12.0 drivers have them).

use cudarc::driver::sys;

use super::CudaDriver;
use crate::backend::gpu::{self, GraphCalls};
use crate::backend::graph::{CaptureMode, CaptureStatus};
use crate::error::Result;

/// CUDA's graph calls.
pub struct CudaGraphs;

fn status(call: &'static str, s: sys::CUresult) -> Result<()> {
    gpu::check::<CudaDriver>(call, s)
}

/// CUDA's `CUstreamCaptureMode` for `mode`.
fn raw_mode(mode: CaptureMode) -> sys::CUstreamCaptureMode {
    match mode {
        CaptureMode::Global => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        CaptureMode::ThreadLocal => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CaptureMode::Relaxed => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
    }
}

// SAFETY: each method makes the CUDA call its name says and reports failure
// as an error; handles come only from those calls.
unsafe impl GraphCalls<CudaDriver> for CudaGraphs {
    type Graph = sys::CUgraph;
    type Exec = sys::CUgraphExec;

    const CAPTURE_INVALIDATED: sys::CUresult = sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;

    unsafe fn begin_capture(_: &CudaDriver, stream: sys::CUstream, mode: CaptureMode) -> Result<()> {
        // SAFETY: the caller's contract: a live stream of the current context.
        status("cuStreamBeginCapture", unsafe { sys::cuStreamBeginCapture_v2(stream, raw_mode(mode)) })
    }

    unsafe fn end_capture(_: &CudaDriver, stream: sys::CUstream) -> Result<sys::CUgraph> {
        let mut graph = std::ptr::null_mut();
        // SAFETY: the caller's contract; writes one graph handle (null on failure).
        status("cuStreamEndCapture", unsafe { sys::cuStreamEndCapture(stream, &mut graph) })?;
        Ok(graph)
    }

    unsafe fn capture_status(_: &CudaDriver, stream: sys::CUstream) -> Result<CaptureStatus> {
        let mut s = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the caller's contract; writes one status.
        status("cuStreamIsCapturing", unsafe { sys::cuStreamIsCapturing(stream, &mut s) })?;
        Ok(match s {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => CaptureStatus::Invalidated,
        })
    }

    fn exchange_capture_mode(_: &CudaDriver, mode: CaptureMode) -> Result<CaptureMode> {
        let mut raw = raw_mode(mode);
        // SAFETY: reads and writes one mode of the calling thread's state.
        status("cuThreadExchangeStreamCaptureMode", unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut raw) })?;
        Ok(match raw {
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL => CaptureMode::Global,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL => CaptureMode::ThreadLocal,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED => CaptureMode::Relaxed,
        })
    }

    unsafe fn node_count(_: &CudaDriver, graph: sys::CUgraph) -> Result<usize> {
        let mut n = 0;
        // SAFETY: the caller's contract; with a null array the call writes the count only.
        status("cuGraphGetNodes", unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n) })?;
        Ok(n)
    }

    unsafe fn instantiate(_: &CudaDriver, graph: sys::CUgraph) -> Result<sys::CUgraphExec> {
        let mut exec = std::ptr::null_mut();
        // SAFETY: the caller's contract; writes one handle; no flags.
        status("cuGraphInstantiateWithFlags", unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) })?;
        Ok(exec)
    }

    unsafe fn launch(_: &CudaDriver, exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract: live handles of the current context.
        status("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec, stream) })
    }

    unsafe fn update(_: &CudaDriver, exec: sys::CUgraphExec, graph: sys::CUgraph) -> Result<Option<String>> {
        // SAFETY: a plain C struct of an enum and two handles; all-zero is valid.
        let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's contract; writes `info`.
        let s = unsafe { sys::cuGraphExecUpdate_v2(exec, graph, &mut info) };
        if s == sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE {
            return Ok(Some(format!("cuGraphExecUpdate: {:?}", info.result)));
        }
        status("cuGraphExecUpdate", s)?;
        Ok(None)
    }

    unsafe fn destroy_graph(_: &CudaDriver, graph: sys::CUgraph) -> Result<()> {
        // SAFETY: the caller's contract: destroyed once.
        status("cuGraphDestroy", unsafe { sys::cuGraphDestroy(graph) })
    }

    unsafe fn destroy_exec(_: &CudaDriver, exec: sys::CUgraphExec) -> Result<()> {
        // SAFETY: the caller's contract: destroyed once.
        status("cuGraphExecDestroy", unsafe { sys::cuGraphExecDestroy(exec) })
    }
}
