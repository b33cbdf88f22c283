//! The C functions behind `gpuport.cupy`'s allocator: CuPy's
//! `cupy.cuda.memory.CFunctionAllocator` calls
//!
//! - `void* gpuport_cupy_malloc(void* param, size_t size, int device_id)`
//! - `void gpuport_cupy_free(void* param, void* ptr, int device_id)`
//!
//! so that a CuPy allocation costs no Python call of ours: the memory comes
//! from the device's current gpuport resource (the caching pool, with
//! `gpuport.memory`'s statistics and log), in the order of CuPy's current
//! stream, which `malloc` reads through the C function CuPy exports for it
//! (`cupy.cuda.stream.__pyx_capi__["get_current_stream_ptr"]`).
//!
//! CuPy calls both from Cython with the GIL held. An allocation that
//! succeeds calls nothing of Python's or PyO3's but CuPy's stream function:
//! PyO3 is entered (`Python::attach`) only to report a failure. `malloc`
//! has no error return in CuPy's signature: on failure it sets a Python
//! exception and returns [`FAILED`] (-1 as a pointer). CuPy's `_call_malloc`
//! is a Cython 3 `cdef` function returning `intptr_t`, so -1 with an
//! exception set makes it raise that exception, before the pointer is
//! stored (`gpuport.cupy` checks this once per process and otherwise keeps
//! its Python allocator). `free` ignores [`FAILED`] and pointers it did not
//! allocate. Neither unwinds.

use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use gpuport::dynamic::memory::{self as core_memory, NegativeId};
use gpuport::BackendKind;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::convert::error::IntoPyResult;

/// What `gpuport_cupy_malloc` returns on failure, with a Python exception set.
pub const FAILED: *mut c_void = usize::MAX as *mut c_void;

/// The signature CuPy's capsule names for `get_current_stream_ptr`.
const STREAM_FN_SIGNATURE: &CStr = c"intptr_t (void)";

/// CuPy's `get_current_stream_ptr` (0: not installed yet).
static CURRENT_STREAM_FN: AtomicUsize = AtomicUsize::new(0);
/// The backend CuPy's device ordinals name ([`backend_code`]).
static BACKEND: AtomicU8 = AtomicU8::new(0);

fn backend_code(kind: BackendKind) -> u8 {
    match kind {
        BackendKind::Host => 1,
        BackendKind::Cuda => 2,
        BackendKind::Rocm => 3,
    }
}

fn backend_of_code(code: u8) -> Option<BackendKind> {
    match code {
        1 => Some(BackendKind::Host),
        2 => Some(BackendKind::Cuda),
        3 => Some(BackendKind::Rocm),
        _ => None,
    }
}

/// Why `malloc` failed. Kept without touching Python until it is reported,
/// so that an allocation that succeeds makes no call into Python or PyO3
/// beyond CuPy's stream function (CuPy calls with the GIL held).
enum Failure {
    /// CuPy's stream function raised: its exception is set already.
    Raised,
    /// An exception to raise (made lazily: no Python object yet).
    Raise(PyErr),
    /// gpuport could not allocate `size` bytes on CuPy's device `device_id`.
    Alloc { kind: BackendKind, device_id: c_int, size: usize, error: gpuport::Error },
}

impl Failure {
    /// Sets the failure's Python exception.
    fn restore(self, py: Python<'_>) {
        match self {
            Failure::Raised => {}
            Failure::Raise(e) => e.restore(py),
            Failure::Alloc { kind, device_id, size, error } => cupy_error(py, kind, device_id, error, size).restore(py),
        }
    }
}

/// CuPy's current stream: a handle of CuPy's current device, 0 for the
/// legacy default stream.
///
/// # Safety
/// Called with the GIL held.
unsafe fn cupy_current_stream() -> Result<usize, Failure> {
    let f = CURRENT_STREAM_FN.load(Ordering::Acquire);
    if f == 0 {
        return Err(Failure::Raise(PyRuntimeError::new_err(
            "gpuport's CuPy allocator is not installed: call gpuport.cupy.use_gpuport_for_cupy()",
        )));
    }
    // SAFETY: `install` stored the pointer of a capsule named
    // "intptr_t (void)", CuPy's `get_current_stream_ptr`, whose module stays
    // imported (sys.modules) for the life of the process.
    let f: unsafe extern "C" fn() -> isize = unsafe { std::mem::transmute::<usize, _>(f) };
    // SAFETY: called with the GIL held (this function's contract), as
    // Cython functions expect.
    let handle = unsafe { f() };
    // The function is `except? -1` (a Cython 3 default): -1 is an error only
    // when an exception is set.
    // SAFETY: the GIL is held (this function's contract).
    if handle == -1 && !unsafe { pyo3::ffi::PyErr_Occurred() }.is_null() {
        return Err(Failure::Raised);
    }
    usize::try_from(handle).map_err(|_| {
        Failure::Raise(PyValueError::new_err(format!("CuPy's current stream is {handle}, not a stream handle")))
    })
}

/// # Safety
/// Called with the GIL held.
unsafe fn cupy_malloc(size: usize, device_id: c_int) -> Result<u64, Failure> {
    let size = core_memory::unsigned_request(size).map_err(|e| Failure::Raise(PyValueError::new_err(e.to_string())))?;
    let kind = backend_of_code(BACKEND.load(Ordering::Acquire))
        .ok_or_else(|| Failure::Raise(PyRuntimeError::new_err("gpuport's CuPy allocator is not installed")))?;
    // SAFETY: forwarded contract.
    let handle = unsafe { cupy_current_stream() }?;
    // SAFETY: CuPy's current stream is live (CuPy keeps the current stream
    // object alive while it is current) or 0, the default stream. The pool
    // names it only during this call (see crates/gpuport-py/src/memory.rs).
    unsafe { core_memory::alloc_kept(kind, device_id, NegativeId::Refused, handle, size) }
        .map_err(|error| Failure::Alloc { kind, device_id, size, error })
}

/// gpuport's error as CuPy raises its own: out of memory (after the pool's
/// retry) as `cupy.cuda.memory.OutOfMemoryError(size, total)`, caused by
/// gpuport's error, so code that catches CuPy's exception catches it; any
/// other error as gpuport's exception. `total` ("allocated so far") is
/// [`held_bytes`].
fn cupy_error(py: Python<'_>, kind: BackendKind, device_id: c_int, e: gpuport::Error, size: usize) -> PyErr {
    let oom = matches!(
        e,
        gpuport::Error::OutOfMemory { .. } | gpuport::Error::Graph { kind: gpuport::GraphErrorKind::OutOfMemory, .. }
    );
    let ours = Err::<(), _>(e).py_err(py).unwrap_err();
    if !oom {
        return ours;
    }
    // The device opened for the allocation, so it opens again here.
    let total = core_memory::hook_device(kind, device_id, NegativeId::Refused).map_or(0, |dev| held_bytes(&dev));
    let theirs = py
        .import("cupy.cuda.memory")
        .and_then(|m| m.getattr("OutOfMemoryError"))
        .and_then(|class| class.call1((size, total)));
    match theirs {
        Ok(exception) => {
            let err = PyErr::from_value(exception);
            err.set_cause(py, Some(ours));
            err
        }
        Err(_) => ours,
    }
}

/// What the device's resource holds from the driver, as CuPy's pool counts
/// its "allocated so far": a caching pool's reserved bytes (of expandable
/// segments, the bytes mapped, not the addresses reserved), else the bytes
/// live (0 if the resource cannot say).
fn held_bytes(dev: &gpuport::AnyDevice) -> usize {
    match core_memory::statistics(dev) {
        Ok((_, Some(report))) => report.reserved,
        Ok((s, None)) => s.current_bytes,
        Err(_) => 0,
    }
}

/// Allocates `size` bytes on CuPy's device `device_id` in the order of
/// CuPy's current stream. On failure sets a Python exception and returns
/// [`FAILED`]. `param` is unused. Never unwinds.
///
/// # Safety
/// Called with the GIL held (CuPy's `CFunctionAllocatorMemory` does so).
pub unsafe extern "C" fn gpuport_cupy_malloc(_param: *mut c_void, size: usize, device_id: c_int) -> *mut c_void {
    // SAFETY: CuPy calls with the GIL held (this function's contract).
    let run = catch_unwind(AssertUnwindSafe(|| match unsafe { cupy_malloc(size, device_id) } {
        Ok(ptr) => ptr as usize as *mut c_void,
        Err(failure) => {
            Python::attach(|py| failure.restore(py));
            FAILED
        }
    }));
    match run {
        Ok(p) => p,
        Err(_) => {
            let _ = catch_unwind(|| {
                Python::attach(|py| PyRuntimeError::new_err("gpuport panicked in its CuPy allocator").restore(py))
            });
            FAILED
        }
    }
}

/// Returns memory from [`gpuport_cupy_malloc`] to its resource, in the
/// order of the stream it was allocated on. [`FAILED`] and pointers it did
/// not allocate are ignored. Never unwinds.
pub extern "C" fn gpuport_cupy_free(_param: *mut c_void, ptr: *mut c_void, _device_id: c_int) {
    if ptr == FAILED || ptr.is_null() {
        return;
    }
    let _ = catch_unwind(|| core_memory::release_by_address(ptr as usize as u64));
}

/// Installs CuPy's stream function and backend; returns the addresses of
/// `(malloc, free)` for `cupy.cuda.memory.CFunctionAllocator`.
///
/// `stream_fn` is `cupy.cuda.stream.__pyx_capi__["get_current_stream_ptr"]`
/// (a capsule named "intptr_t (void)"); `backend` is "cuda" or "rocm" (what
/// CuPy was built for), or "host" for tests without a GPU.
///
///     >>> import gpuport._core as core
///     >>> core._cupy_allocator_functions(42, "cuda")
///     Traceback (most recent call last):
///     TypeError: stream_fn must be CuPy's get_current_stream_ptr capsule, not int
#[pyfunction]
#[pyo3(name = "_cupy_allocator_functions")]
pub fn install(stream_fn: &Bound<'_, PyAny>, backend: &str) -> PyResult<(usize, usize)> {
    let kind = match backend {
        "cuda" => BackendKind::Cuda,
        "rocm" => BackendKind::Rocm,
        "host" => BackendKind::Host,
        other => {
            return Err(PyValueError::new_err(format!(
                "backend {other:?} is not one CuPy runs on; accepted: \"cuda\", \"rocm\", \"host\" (tests)"
            )))
        }
    };
    let cap = stream_fn.cast::<PyCapsule>().map_err(|_| {
        let ty = stream_fn.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "another type".into());
        PyTypeError::new_err(format!("stream_fn must be CuPy's get_current_stream_ptr capsule, not {ty}"))
    })?;
    let ptr = cap.pointer_checked(Some(STREAM_FN_SIGNATURE)).map_err(|_| {
        let name = cap.name().ok().flatten().map(|n| {
            // SAFETY: a capsule's name lives as long as the capsule, which
            // `cap` borrows here; it is copied into the message at once.
            format!("{:?}", unsafe { n.as_cstr() })
        });
        PyTypeError::new_err(format!(
            "stream_fn's capsule is named {}, not {STREAM_FN_SIGNATURE:?} (CuPy's get_current_stream_ptr)",
            name.unwrap_or_else(|| "nothing".into())
        ))
    })?;
    CURRENT_STREAM_FN.store(ptr.as_ptr() as usize, Ordering::Release);
    BACKEND.store(backend_code(kind), Ordering::Release);
    let malloc: unsafe extern "C" fn(*mut c_void, usize, c_int) -> *mut c_void = gpuport_cupy_malloc;
    let free: extern "C" fn(*mut c_void, *mut c_void, c_int) = gpuport_cupy_free;
    Ok((malloc as usize, free as usize))
}

/// Registers this module's functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(install, m)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ignores_the_failure_sentinel_and_unknown_pointers() {
        gpuport_cupy_free(std::ptr::null_mut(), FAILED, 0);
        gpuport_cupy_free(std::ptr::null_mut(), 0x1234 as *mut c_void, 0);
    }

    #[test]
    fn backend_codes_round_trip() {
        for k in [BackendKind::Host, BackendKind::Cuda, BackendKind::Rocm] {
            assert_eq!(backend_of_code(backend_code(k)), Some(k));
        }
        assert_eq!(backend_of_code(0), None);
    }
}
