//! `gpuport._core`: the Python extension of gpuport (PyO3, abi3 for Python 3.9+).
//!
//! The package `gpuport` (python/gpuport/__init__.py) re-exports this module.
//! Layout: [`device`] (Device, Stream, Event, stream arguments; Stream's
//! methods in [`stream`]), [`array`]
//! (MemArray over every dtype, rank 0..=8 and device; the type and its
//! state in [`memarray`]), [`exchange`] (its
//! DLPack export and import, array-interface dicts), [`asarray`]
//! (`from_dlpack`, `asarray`), [`exchange_api`]
//! (DLPack 1.3's C exchange API: `MemArray.__dlpack_c_exchange_api__` and
//! its use by `from_dlpack`), [`context`]
//! (`get_dlpack`'s context manager), [`exclusive`] (the core's lock that
//! lets threads share one object, taken with the GIL released), [`dlpack`] (capsules), [`cai`] (CUDA Array
//! Interface; the layout of CAI, DLPack and buffer objects),
//! [`errors`] (the exception classes and the one error mapping), [`dtype`],
//! [`graph`] (Graph and its capture context, over the core's run-time graphs),
//! [`memory`] (the current memory resource from Python; the C-ABI
//! allocation functions for PyTorch's `CUDAPluggableAllocator`), [`cupy_hook`] (the C
//! allocation functions for CuPy's `CFunctionAllocator`).
//!
//! No panic is meant to cross into Python: user input is validated and every
//! gpuport error becomes an exception whose message speaks Python. Long
//! copies release the GIL (`Python::detach`); objects whose methods do that
//! are `frozen` pyclasses whose mutable state sits in an
//! [`exclusive::Exclusive`] (threads take turns) or a short-lived `Mutex`, so
//! no PyO3 borrow can fail or panic when threads share them.
#![warn(rust_2018_idioms, unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use pyo3::prelude::*;

pub mod adapters;
pub mod arglists;
pub mod array;
pub mod asarray;
pub mod buffer;
pub mod cai;
pub mod context;
pub mod cupy_hook;
pub mod device;
pub mod distributed;
pub mod dlpack;
pub mod dtype;
pub mod errors;
pub mod exchange;
pub mod exchange_api;
pub mod exclusive;
pub mod graph;
pub mod memarray;
pub mod memory;
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
    errors::register(m)?;
    m.add_class::<device::PyDevice>()?;
    m.add_class::<distributed::PyTcpStore>()?;
    m.add_class::<distributed::PyCommunicator>()?;
    m.add_class::<device::PyStream>()?;
    m.add_class::<device::PyEvent>()?;
    m.add_class::<memarray::PyMemArray>()?;
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
    m.add_function(wrap_pyfunction!(asarray::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(asarray::_from_dlpack_protocol, m)?)?;
    m.add_function(wrap_pyfunction!(asarray::asarray, m)?)?;
    m.add_function(wrap_pyfunction!(cai::from_cuda_array_interface, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::_dlpack_stats, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_error_samples, m)?)?;
    m.add_class::<adapters::PyPointer>()?;
    m.add_class::<adapters::PyDeviceArray>()?;
    m.add_class::<arglists::PyListOfBytes>()?;
    m.add_class::<arglists::PyListOfPointer>()?;
    m.add_class::<arglists::PyListOfInt>()?;
    m.add_class::<arglists::PyListOfUnsigned>()?;
    m.add_class::<arglists::PyListOfUnsignedLong>()?;
    m.add_class::<arglists::PyKernelArgs>()?;
    m.add_class::<runtime::PyModule_>()?;
    m.add_class::<runtime::PyFunction>()?;
    m.add_function(wrap_pyfunction!(runtime::malloc, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::malloc_pinned, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::malloc_managed, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::free, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy_async, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy_peer, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy_peer_async, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memset, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memset_async, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::module_load, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::module_get_function, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::launch_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::device_synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_pending_operations, m)?)?;
    m.add("MAX_RANK", dtype::MAX_RANK)?;
    m.add("DTYPES", dtype::DType::ALL.iter().map(|d| d.name()).collect::<Vec<_>>())?;
    // Every build carries every backend (each loads its library at run time).
    m.add("CUDA_COMPILED", true)?;
    m.add("ROCM_COMPILED", true)?;
    Ok(())
}
