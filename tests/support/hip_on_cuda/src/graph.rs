//! Stream capture and graphs: `hipStreamBeginCapture`, `hipStreamEndCapture`,
//! `hipStreamIsCapturing`, `hipThreadExchangeStreamCaptureMode`, `hipGraphGetNodes`, `hipGraphInstantiateWithFlags`,
//! `hipGraphLaunch`, `hipGraphExecUpdate`, `hipGraphDestroy`,
//! `hipGraphExecDestroy`, `hipStreamGetCaptureInfo_v2`, `hipUserObjectCreate`,
//! `hipGraphRetainUserObject`, forwarded to their CUDA twins. HIP's enums
//! (capture modes and statuses, update results) have CUDA's numbers.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};

use cudarc::driver::sys as cu;

use super::{bind, guard, hip, try_hip, HipError, HIP_ERROR_INVALID_VALUE, HIP_SUCCESS};

/// `hipError_t hipStreamBeginCapture(hipStream_t, hipStreamCaptureMode)`.
///
/// # Safety
/// `stream` must be live.
#[no_mangle]
pub unsafe extern "C" fn hipStreamBeginCapture(stream: cu::CUstream, mode: c_int) -> HipError {
    let mode = match mode {
        0 => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        1 => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        2 => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        _ => return HIP_ERROR_INVALID_VALUE,
    };
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuStreamBeginCapture_v2(stream, mode) })
    })
}

/// `hipError_t hipStreamEndCapture(hipStream_t, hipGraph_t*)`.
///
/// # Safety
/// `stream` must be live, `graph` writable.
#[no_mangle]
pub unsafe extern "C" fn hipStreamEndCapture(stream: cu::CUstream, graph: *mut cu::CUgraph) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuStreamEndCapture(stream, graph) })
    })
}

/// `hipError_t hipStreamIsCapturing(hipStream_t, hipStreamCaptureStatus*)`.
///
/// # Safety
/// `stream` must be live or null, `status` writable.
#[no_mangle]
pub unsafe extern "C" fn hipStreamIsCapturing(stream: cu::CUstream, status: *mut c_int) -> HipError {
    guard(|| {
        try_hip!(bind());
        let mut s = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: as documented for the caller; writes one status.
        try_hip!(hip(unsafe { cu::cuStreamIsCapturing(stream, &mut s) }));
        // SAFETY: the caller passes a writable int.
        unsafe { *status = s as c_int };
        HIP_SUCCESS
    })
}

/// `hipError_t hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode*)`:
/// the thread's mode is the CUDA thread's (HIP's numbering is CUDA's).
///
/// # Safety
/// `mode` must be readable and writable.
#[no_mangle]
pub unsafe extern "C" fn hipThreadExchangeStreamCaptureMode(mode: *mut c_int) -> HipError {
    guard(|| {
        // SAFETY: the caller passes a readable int.
        let mut m = match unsafe { *mode } {
            0 => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            1 => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            2 => cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            _ => return HIP_ERROR_INVALID_VALUE,
        };
        // SAFETY: reads and writes one mode of the calling thread's state.
        try_hip!(hip(unsafe { cu::cuThreadExchangeStreamCaptureMode(&mut m) }));
        // SAFETY: the caller passes a writable int.
        unsafe { *mode = m as c_int };
        HIP_SUCCESS
    })
}

/// `hipError_t hipGraphGetNodes(hipGraph_t, hipGraphNode_t*, size_t*)`.
///
/// # Safety
/// `graph` must be live; `nodes` null or room for `*count` handles.
#[no_mangle]
pub unsafe extern "C" fn hipGraphGetNodes(
    graph: cu::CUgraph,
    nodes: *mut cu::CUgraphNode,
    count: *mut usize,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuGraphGetNodes(graph, nodes, count) })
    })
}

/// `hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t*, hipGraph_t, unsigned long long)`.
///
/// # Safety
/// `exec` must be writable, `graph` live.
#[no_mangle]
pub unsafe extern "C" fn hipGraphInstantiateWithFlags(
    exec: *mut cu::CUgraphExec,
    graph: cu::CUgraph,
    flags: c_ulonglong,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuGraphInstantiateWithFlags(exec, graph, flags) })
    })
}

/// `hipError_t hipGraphLaunch(hipGraphExec_t, hipStream_t)`.
///
/// # Safety
/// Both handles must be live.
#[no_mangle]
pub unsafe extern "C" fn hipGraphLaunch(exec: cu::CUgraphExec, stream: cu::CUstream) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuGraphLaunch(exec, stream) })
    })
}

/// `hipError_t hipGraphExecUpdate(hipGraphExec_t, hipGraph_t, hipGraphNode_t* errorNode,
/// hipGraphExecUpdateResult* result)`: HIP keeps CUDA 11's signature; this
/// calls `cuGraphExecUpdate_v2` and writes its result info's two fields.
///
/// # Safety
/// Both handles must be live; the out-pointers writable or null.
#[no_mangle]
pub unsafe extern "C" fn hipGraphExecUpdate(
    exec: cu::CUgraphExec,
    graph: cu::CUgraph,
    error_node: *mut cu::CUgraphNode,
    result: *mut c_int,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: a plain C struct of an enum and two handles; all-zero is valid.
        let mut info: cu::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        // SAFETY: as documented for the caller; writes `info`.
        let r = hip(unsafe { cu::cuGraphExecUpdate_v2(exec, graph, &mut info) });
        if !error_node.is_null() {
            // SAFETY: non-null and writable per the caller.
            unsafe { *error_node = info.errorNode };
        }
        if !result.is_null() {
            // SAFETY: non-null and writable per the caller.
            unsafe { *result = info.result as c_int };
        }
        r
    })
}

/// `hipError_t hipGraphDestroy(hipGraph_t)`.
///
/// # Safety
/// `graph` must be live; destroyed once.
#[no_mangle]
pub unsafe extern "C" fn hipGraphDestroy(graph: cu::CUgraph) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuGraphDestroy(graph) })
    })
}

/// `hipError_t hipGraphExecDestroy(hipGraphExec_t)`.
///
/// # Safety
/// `exec` must be live; destroyed once.
#[no_mangle]
pub unsafe extern "C" fn hipGraphExecDestroy(exec: cu::CUgraphExec) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuGraphExecDestroy(exec) })
    })
}

/// `hipError_t hipStreamGetCaptureInfo_v2(hipStream_t, hipStreamCaptureStatus*, unsigned long long* id,
/// hipGraph_t*, const hipGraphNode_t** deps, size_t* count)`: `cuStreamGetCaptureInfo_v3`
/// without its edge data (CUDA 13 drivers have both).
///
/// # Safety
/// `stream` must be live; every out-pointer writable.
#[no_mangle]
pub unsafe extern "C" fn hipStreamGetCaptureInfo_v2(
    stream: cu::CUstream,
    status: *mut c_int,
    id: *mut c_ulonglong,
    graph: *mut cu::CUgraph,
    deps: *mut *const cu::CUgraphNode,
    count: *mut usize,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        let mut s = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut edges = std::ptr::null();
        // SAFETY: as documented for the caller; writes the outputs.
        try_hip!(hip(unsafe { cu::cuStreamGetCaptureInfo_v3(stream, &mut s, id, graph, deps, &mut edges, count) }));
        // SAFETY: the caller passes a writable int.
        unsafe { *status = s as c_int };
        HIP_SUCCESS
    })
}

/// `hipError_t hipUserObjectCreate(hipUserObject_t*, void*, hipHostFn_t, unsigned int, unsigned int)`.
///
/// # Safety
/// As `cuUserObjectCreate`'s: `destroy(ptr)` is sound to call once from a driver thread.
#[no_mangle]
pub unsafe extern "C" fn hipUserObjectCreate(
    object: *mut cu::CUuserObject,
    ptr: *mut c_void,
    destroy: cu::CUhostFn,
    refcount: c_uint,
    flags: c_uint,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuUserObjectCreate(object, ptr, destroy, refcount, flags) })
    })
}

/// `hipError_t hipGraphRetainUserObject(hipGraph_t, hipUserObject_t, unsigned int, unsigned int)`.
///
/// # Safety
/// Both handles must be live.
#[no_mangle]
pub unsafe extern "C" fn hipGraphRetainUserObject(
    graph: cu::CUgraph,
    object: cu::CUuserObject,
    count: c_uint,
    flags: c_uint,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuGraphRetainUserObject(graph, object, count, flags) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hip_capture_enums_have_cudas_numbers() {
        assert_eq!(cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED as c_int, 2);
        assert_eq!(cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED as c_int, 2);
        assert_eq!(cu::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED as c_int, 2);
        assert_eq!(cu::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED as c_int, 901);
        assert_eq!(cu::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE as c_int, 910);
        // SAFETY: an invalid mode is refused before any pointer is used.
        assert_eq!(unsafe { hipStreamBeginCapture(std::ptr::null_mut(), 7) }, HIP_ERROR_INVALID_VALUE);
    }
}
