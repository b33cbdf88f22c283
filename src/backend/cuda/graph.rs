//! CUDA's stream-capture and graph calls ([`GraphCalls`]): `cuStreamBeginCapture_v2`,
//! `cuStreamEndCapture`, `cuStreamIsCapturing`, `cuThreadExchangeStreamCaptureMode`, `cuGraphGetNodes`,
//! `cuGraphInstantiateWithFlags`, `cuGraphLaunch`, `cuGraphExecUpdate_v2`,
//! `cuGraphDestroy`, `cuGraphExecDestroy`, `cuUserObjectCreate`, `cuGraphRetainUserObject`,
//! `cuUserObjectRelease` (all CUDA 12.0 drivers have them), and `cuStreamGetCaptureInfo_v3`
//! or `_v2`, looked up by hand (see `capture_info`).

use std::ffi::c_void;
use std::sync::OnceLock;

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

/// `cuStreamGetCaptureInfo_v3` (drivers of CUDA 12.3 and later), else
/// `cuStreamGetCaptureInfo_v2` (CUDA 11.3 to 12.2), both looked up by hand:
/// cudarc declares each only for its own CUDA versions, and its lazy loader
/// panics on a driver without the symbol. `_v3` comes first: a CUDA 13
/// driver crashed (SIGSEGV inside the call, seen on the H200 under CuPy's
/// graph tests) when called through `_v2`'s six arguments. Gives the
/// capture's status, id and graph.
fn capture_info(stream: sys::CUstream) -> Result<(sys::CUstreamCaptureStatus, u64, sys::CUgraph)> {
    type GetV3 = unsafe extern "C" fn(
        sys::CUstream,
        *mut sys::CUstreamCaptureStatus,
        *mut u64,
        *mut sys::CUgraph,
        *mut *const sys::CUgraphNode,
        *mut *const sys::CUgraphEdgeData,
        *mut usize,
    ) -> sys::CUresult;
    type GetV2 = unsafe extern "C" fn(
        sys::CUstream,
        *mut sys::CUstreamCaptureStatus,
        *mut u64,
        *mut sys::CUgraph,
        *mut *const sys::CUgraphNode,
        *mut usize,
    ) -> sys::CUresult;
    static V3: OnceLock<Option<GetV3>> = OnceLock::new();
    static V2: OnceLock<Option<GetV2>> = OnceLock::new();
    // SAFETY: libcuda is loaded (every device was opened through the
    // backend's probe), and each symbol, where present, has the C signature
    // above (cuda.h of its CUDA version).
    let v3 = *V3.get_or_init(|| unsafe { sys::culib().get::<GetV3>(b"cuStreamGetCaptureInfo_v3").ok().map(|s| *s) });
    let (mut st, mut id, mut graph) =
        (sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE, 0u64, std::ptr::null_mut());
    let (mut deps, mut edges, mut n) = (std::ptr::null(), std::ptr::null(), 0usize);
    let r = match v3 {
        // SAFETY: the caller's stream is live; the driver writes the six outputs.
        Some(get) => unsafe { get(stream, &mut st, &mut id, &mut graph, &mut deps, &mut edges, &mut n) },
        None => {
            // SAFETY: as above.
            let v2 =
                *V2.get_or_init(|| unsafe { sys::culib().get::<GetV2>(b"cuStreamGetCaptureInfo_v2").ok().map(|s| *s) });
            let get = v2.ok_or_else(|| crate::Error::Unsupported {
                op: "capture info",
                backend: crate::error::BackendKind::Cuda,
                hint: Some("the driver exports neither cuStreamGetCaptureInfo_v3 nor _v2".into()),
            })?;
            // SAFETY: the caller's stream is live; the driver writes the five outputs.
            unsafe { get(stream, &mut st, &mut id, &mut graph, &mut deps, &mut n) }
        }
    };
    status("cuStreamGetCaptureInfo", r)?;
    Ok((st, id, graph))
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

    unsafe fn capture_id(_: &CudaDriver, stream: sys::CUstream) -> Result<Option<u64>> {
        let (st, id, _) = capture_info(stream)?;
        Ok((st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE).then_some(id))
    }

    unsafe fn retain_in_capture(
        _: &CudaDriver,
        stream: sys::CUstream,
        data: *mut c_void,
        release: unsafe extern "C" fn(*mut c_void),
    ) -> Result<()> {
        let (_, _, graph) = capture_info(stream)?;
        let mut object = std::ptr::null_mut();
        let no_sync = sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32;
        // SAFETY: the caller's contract on `release(data)`; one reference, which the graph takes below.
        status("cuUserObjectCreate", unsafe { sys::cuUserObjectCreate(&mut object, data, Some(release), 1, no_sync) })?;
        let moved = sys::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE as u32;
        // SAFETY: `graph` is the capture's live graph; the reference moves to it.
        // On failure the object keeps its one reference for good: `release`
        // is never called, as the trait promises for an error.
        status("cuGraphRetainUserObject", unsafe { sys::cuGraphRetainUserObject(graph, object, 1, moved) })
    }
}
