//! `gpuport._core`: the Python extension of gpuport (PyO3, abi3 for Python 3.9+).
//!
//! The package `gpuport` (python/gpuport/__init__.py) re-exports this module.
//! Layout: [`device`] (Device, Stream, Event, stream arguments), [`array`]
//! (MemArray over every dtype, rank 0..=8 and device; DLPack export and
//! import), [`dlpack`] (capsules), [`cai`] (CUDA Array Interface),
//! [`errors`] (the exception classes and the one error mapping), [`dtype`],
//! [`memory`] (the current memory resource from Python; the C-ABI
//! allocation functions for PyTorch's `CUDAPluggableAllocator`).
//!
//! No panic is meant to cross into Python: user input is validated and every
//! gpuport error becomes an exception. Long copies release the GIL
//! (`Python::detach`).
#![warn(rust_2018_idioms, unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use pyo3::prelude::*;

pub mod adapters;
pub mod array;
pub mod cai;
pub mod device;
pub mod dlpack;
pub mod dtype;
pub mod errors;
pub mod memory;
pub mod runtime;

/// The extension module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<device::PyDevice>()?;
    m.add_class::<device::PyStream>()?;
    m.add_class::<device::PyEvent>()?;
    m.add_class::<array::PyMemArray>()?;
    m.add_class::<array::DLPackContext>()?;
    memory::register(m)?;
    m.add_function(wrap_pyfunction!(device::devices, m)?)?;
    m.add_function(wrap_pyfunction!(device::py_default_device, m)?)?;
    m.add_function(wrap_pyfunction!(device::backend_status, m)?)?;
    m.add_function(wrap_pyfunction!(array::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(array::asarray, m)?)?;
    m.add_function(wrap_pyfunction!(cai::from_cuda_array_interface, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::_dlpack_stats, m)?)?;
    m.add_class::<adapters::PyPointer>()?;
    m.add_class::<adapters::PyDeviceArray>()?;
    m.add_class::<adapters::PyListOfBytes>()?;
    m.add_class::<adapters::PyListOfPointer>()?;
    m.add_class::<adapters::PyListOfInt>()?;
    m.add_class::<adapters::PyListOfUnsigned>()?;
    m.add_class::<adapters::PyListOfUnsignedLong>()?;
    m.add_class::<adapters::PyKernelArgs>()?;
    m.add_class::<runtime::PyModule_>()?;
    m.add_class::<runtime::PyFunction>()?;
    m.add_function(wrap_pyfunction!(runtime::malloc, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::malloc_pinned, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::malloc_managed, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::free, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memcpy_async, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memset, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::memset_async, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::module_load, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::module_get_function, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::launch_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::device_synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_pending_operations, m)?)?;
    m.add("MAX_RANK", dtype::MAX_RANK)?;
    m.add("DTYPES", dtype::DType::ALL.iter().map(|d| d.name()).collect::<Vec<_>>())?;
    m.add("CUDA_COMPILED", cfg!(feature = "cuda"))?;
    Ok(())
}
