//! The C functions behind `gpuport.torch`'s allocator, for PyTorch's
//! `torch.cuda.memory.CUDAPluggableAllocator`:
//!
//! - `void* gpuport_torch_malloc(ssize_t size, int device, cudaStream_t stream)`
//! - `void gpuport_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream)`
//!
//! They allocate from the device's current gpuport resource in the order of
//! PyTorch's stream. `device` is an ordinal of the backend PyTorch was built
//! for (CUDA, or ROCm/HIP: [`set_backend`]); -1 selects the host backend, for
//! tests without a GPU. A request of 0 bytes gets a null pointer, as from
//! PyTorch's own allocator. A failed allocation throws a C++ exception
//! (`csrc/torch_hook.cpp`), which PyTorch raises in Python as RuntimeError
//! with gpuport's message: PyTorch never checks the pointer, and a null one
//! became a tensor at address 0. Allocations during a `torch.cuda.graph`
//! capture come from the capture's graph pool (src/memory/pool/graph_pools.rs).

use std::ffi::{c_char, c_int, c_void};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicU8, Ordering};

use gpuport::dynamic::memory::{self as core_memory, NegativeId};
use gpuport::BackendKind;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The backend PyTorch's ordinals name: 0 CUDA (the default), 1 ROCm.
static BACKEND: AtomicU8 = AtomicU8::new(0);

fn backend() -> BackendKind {
    if BACKEND.load(Ordering::Acquire) == 1 {
        BackendKind::Rocm
    } else {
        BackendKind::Cuda
    }
}

fn torch_malloc(size: isize, device: c_int, stream: usize) -> gpuport::Result<*mut c_void> {
    let Some(size) = core_memory::signed_request(size)? else {
        return Ok(std::ptr::null_mut());
    };
    // SAFETY: PyTorch passes the live stream it allocates on (0: default).
    let ptr = unsafe { core_memory::alloc_kept(backend(), device, NegativeId::Host, stream, size) }?;
    Ok(ptr as usize as *mut c_void)
}

/// Copies `text` into `message` (`capacity` bytes), cut to fit, NUL-ended.
fn write_message(message: *mut c_char, capacity: usize, text: &str) {
    if message.is_null() || capacity == 0 {
        return;
    }
    let n = text.len().min(capacity - 1);
    // SAFETY: the caller passes `capacity` writable bytes at `message`;
    // `n + 1 <= capacity` are written.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), message, n);
        *message.add(n) = 0;
    }
}

/// Allocates as [`gpuport_torch_malloc`], but reports a failure by
/// returning null with the reason in `message` (`capacity` bytes,
/// NUL-ended). Null with an empty message: a request of 0 bytes. Never unwinds.
#[no_mangle]
pub extern "C" fn gpuport_torch_try_malloc(
    size: isize,
    device: c_int,
    stream: *mut c_void,
    message: *mut c_char,
    capacity: usize,
) -> *mut c_void {
    let stream = stream as usize;
    let text = match catch_unwind(|| torch_malloc(size, device, stream)) {
        Ok(Ok(p)) => return p,
        Ok(Err(e)) => format!("gpuport could not allocate {size} bytes for PyTorch on device {device}: {e}"),
        Err(_) => format!("gpuport panicked allocating {size} bytes for PyTorch on device {device}"),
    };
    write_message(message, capacity, &text);
    std::ptr::null_mut()
}

extern "C-unwind" {
    /// `csrc/torch_hook.cpp`: [`gpuport_torch_try_malloc`], throwing
    /// `std::runtime_error` with its message on failure.
    fn gpuport_torch_malloc_or_throw(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void;
}

/// Allocates `size` bytes on device `device` (-1: the host backend) on
/// stream `stream` (0: default) from the device's current gpuport resource.
/// Throws a C++ `std::runtime_error` on failure, which PyTorch raises as a
/// Python exception. For `torch.cuda.memory.CUDAPluggableAllocator`.
#[no_mangle]
// `stream` is a handle passed on to the driver, never dereferenced here.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub extern "C-unwind" fn gpuport_torch_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    // SAFETY: the C++ function takes plain values and calls only
    // `gpuport_torch_try_malloc`, which never unwinds; its own exception
    // unwinds through this frame, which holds nothing to drop, as the
    // "C-unwind" ABI allows.
    unsafe { gpuport_torch_malloc_or_throw(size, device, stream) }
}

/// Frees memory from [`gpuport_torch_malloc`] (in the order of the stream it
/// was allocated on). Null and unknown pointers are ignored. Never unwinds.
#[no_mangle]
pub extern "C" fn gpuport_torch_free(ptr: *mut c_void, _size: isize, _device: c_int, _stream: *mut c_void) {
    let ptr = ptr as usize as u64;
    let _ = catch_unwind(|| core_memory::release_by_address(ptr));
}

/// Number of live allocations made through [`gpuport_torch_malloc`].
#[no_mangle]
pub extern "C" fn gpuport_torch_live_count() -> usize {
    catch_unwind(core_memory::kept_by_address_count).unwrap_or(0)
}

/// Names of the C functions for `CUDAPluggableAllocator`.
#[pyfunction]
#[pyo3(name = "_torch_allocator_symbols")]
pub fn torch_allocator_symbols() -> (&'static str, &'static str) {
    ("gpuport_torch_malloc", "gpuport_torch_free")
}

/// Sets the backend PyTorch's device ordinals name: "cuda", or "rocm" for
/// a ROCm build of PyTorch (`torch.version.hip`).
#[pyfunction]
#[pyo3(name = "_torch_allocator_backend")]
pub fn set_backend(backend: &str) -> PyResult<()> {
    let code = match backend {
        "cuda" => 0,
        "rocm" => 1,
        other => {
            return Err(PyValueError::new_err(format!(
                "backend {other:?} is not one PyTorch allocates on; accepted: \"cuda\", \"rocm\""
            )))
        }
    };
    BACKEND.store(code, Ordering::Release);
    Ok(())
}

/// Registers this module's functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(torch_allocator_symbols, m)?)?;
    m.add_function(wrap_pyfunction!(set_backend, m)?)
}
