//! `gpuport._core`: the Python extension of gpuport (PyO3, abi3 for Python 3.10+).
//!
//! The package `gpuport` (python/gpuport/__init__.py) re-exports this module.
//! Layout, in three floors: [`convert`] at the bottom (Python objects into
//! the core's values and back, the class types those conversions recognise,
//! and the one error mapping); the Python classes and functions on it, in
//! files named after their counterparts in `src/dynamic/`, each importing
//! only `convert`: [`array`](mod@array) (MemArray's methods), [`context`]
//! (`get_dlpack`'s context manager), [`graph`] (Graph, its capture context,
//! `Stream.capture`), [`memory`] (the current memory resource from Python),
//! [`module`] (module loads, kernel launches, their argument lists),
//! [`raw`] (`Pointer`'s methods, `DeviceArray`, malloc/free), [`runtime`]
//! (copies, memset, device synchronisation), [`stream`] (Stream, Event);
//! and those without a counterpart there: [`device`] (Device's methods, the
//! device functions), [`asarray`] (`from_dlpack`, `asarray`,
//! `from_cuda_array_interface`), [`distributed`] (the store and
//! communicators of `gpuport::collective`); the C entry points of the
//! allocator hooks, [`torch_hook`] (PyTorch's `CUDAPluggableAllocator`) and
//! [`cupy_hook`] (CuPy's `CFunctionAllocator`); this file on top.
//!
//! No panic is meant to cross into Python: user input is validated and every
//! gpuport error becomes an exception whose message speaks Python. Long
//! copies release the GIL (`Python::detach`); objects whose methods do that
//! are `frozen` pyclasses whose mutable state sits in an
//! [`convert::exclusive::Exclusive`] (threads take turns) or a short-lived `Mutex`, so
//! no PyO3 borrow can fail or panic when threads share them.
#![warn(rust_2018_idioms, unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use pyo3::prelude::*;

pub mod array;
pub mod asarray;
pub mod context;
pub mod convert;
pub mod cupy_hook;
pub mod device;
pub mod distributed;
pub mod graph;
pub mod memory;
pub mod module;
pub mod raw;
pub mod runtime;
pub mod stream;
pub mod torch_hook;

/// The extension module. It declares that it needs the GIL (pyo3 0.28
/// and later assume free-threaded support unless told): several adapters
/// rely on the GIL to keep short Rust critical sections from being entered
/// by another thread, and the abi3 build cannot load on a free-threaded
/// interpreter anyway.
#[pymodule(gil_used = true)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    convert::error::register(m)?;
    m.add_class::<convert::device::PyDevice>()?;
    m.add_class::<distributed::PyTcpStore>()?;
    m.add_class::<distributed::PyCommunicator>()?;
    m.add_class::<distributed::PyRegistration>()?;
    m.add_class::<convert::stream::PyStream>()?;
    m.add_class::<stream::PyEvent>()?;
    m.add_class::<convert::memarray::PyMemArray>()?;
    m.add_class::<context::DLPackContext>()?;
    m.add_class::<graph::PyGraph>()?;
    m.add_class::<graph::PyGraphCapture>()?;
    m.add_function(wrap_pyfunction!(graph::graph_capture, m)?)?;
    memory::register(m)?;
    cupy_hook::register(m)?;
    torch_hook::register(m)?;
    m.add_function(wrap_pyfunction!(device::devices, m)?)?;
    m.add_function(wrap_pyfunction!(device::py_default_device, m)?)?;
    m.add_function(wrap_pyfunction!(device::backend_status, m)?)?;
    m.add_function(wrap_pyfunction!(device::_set_site_packages, m)?)?;
    m.add_function(wrap_pyfunction!(asarray::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(asarray::_from_dlpack_protocol, m)?)?;
    m.add_function(wrap_pyfunction!(asarray::asarray, m)?)?;
    m.add_function(wrap_pyfunction!(asarray::from_cuda_array_interface, m)?)?;
    m.add_function(wrap_pyfunction!(convert::capsule::_dlpack_stats, m)?)?;
    m.add_function(wrap_pyfunction!(convert::error::_error_samples, m)?)?;
    m.add_class::<convert::pointer::PyPointer>()?;
    m.add_class::<raw::PyDeviceArray>()?;
    m.add_class::<module::PyListOfBytes>()?;
    m.add_class::<module::PyListOfPointer>()?;
    m.add_class::<module::PyListOfInt>()?;
    m.add_class::<module::PyListOfUnsigned>()?;
    m.add_class::<module::PyListOfUnsignedLong>()?;
    m.add_class::<module::PyKernelArgs>()?;
    m.add_class::<module::PyModule_>()?;
    m.add_class::<module::PyFunction>()?;
    m.add_function(wrap_pyfunction!(raw::malloc, m)?)?;
    m.add_function(wrap_pyfunction!(raw::malloc_pinned, m)?)?;
    m.add_function(wrap_pyfunction!(raw::malloc_managed, m)?)?;
    m.add_function(wrap_pyfunction!(raw::free, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy_async, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy_peer, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy_peer_async, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memset, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memset_async, m)?)?;
    m.add_function(wrap_pyfunction!(module::module_load, m)?)?;
    m.add_function(wrap_pyfunction!(module::module_get_function, m)?)?;
    m.add_function(wrap_pyfunction!(module::launch_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::device_synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_pending_operations, m)?)?;
    // The core's version, so the package reports the crate's one version.
    m.add("__version__", gpuport::VERSION)?;
    m.add("MAX_RANK", convert::dtype::MAX_RANK)?;
    m.add("DTYPES", convert::dtype::DType::ALL.iter().map(|d| d.name()).collect::<Vec<_>>())?;
    // Every build carries every backend (each loads its library at run time).
    m.add("CUDA_COMPILED", true)?;
    m.add("ROCM_COMPILED", true)?;
    Ok(())
}
