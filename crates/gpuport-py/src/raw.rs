//! The `Pointer` adapter's Python methods (its type, [`PyPointer`], is in
//! [`crate::convert::pointer`], where the conversion of pointer arguments
//! recognises it), `DeviceArray` (device memory with shape and type, over
//! the core's raw allocations, `gpuport::dynamic::raw`) and
//! `gpuport.runtime.malloc`/`free`, which make and free them.
//!
//! Threads: `Pointer` and `DeviceArray` are `frozen`; the little they
//! change (a DeviceArray's shape and type, the address `free` clears) sits
//! in `Mutex`es held only for plain Rust work, with the GIL, so no PyO3
//! borrow can fail and no Python code (an `__index__`, a `__del__`) can
//! find them taken by another thread.

use std::sync::{Arc, Mutex};

use gpuport::dynamic::device_array::{self, ArrayDims, DeviceArray, FreeTarget, IndexKey, TypeName};
use gpuport::dynamic::raw::{Place, RawAllocation};
use gpuport::dynamic::runtime;
use gpuport::{Advice, BackendKind};
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PyTuple};

use crate::convert::cai::{CaiDesc, ReadInterface};
use crate::convert::device::{managed_target, resolve_device};
use crate::convert::error::IntoPyResult;
use crate::convert::pointer::{state, to_ptr, Ptr, PyPointer};
use crate::convert::stream::resolve_stream;

#[pymethods]
impl PyPointer {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyPointer::from_ptr(match obj {
            Some(o) => to_ptr(o)?,
            None => Ptr::null(),
        }))
    }

    fn __int__(&self) -> PyResult<u64> {
        self.addr()
    }

    /// Whether the address is NULL.
    #[getter]
    fn is_null(&self) -> PyResult<bool> {
        Ok(self.addr()? == 0)
    }

    /// Bytes known from the address: held memory, or the extent the object
    /// states (None for raw addresses and strided views).
    #[getter]
    fn nbytes(&self) -> PyResult<Option<usize>> {
        let p = state(&self.p)?;
        Ok(if p.strided.is_some() { None } else { p.known_size() })
    }

    /// Where the memory is: "null", "unknown", "host", "device", "managed" or "pinned".
    #[getter]
    fn memory_kind(&self) -> PyResult<&'static str> {
        Ok(Place::name(&state(&self.p)?.space))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().name()?;
        let (addr, kind) = {
            let p = state(&slf.get().p)?;
            (p.addr, Place::name(&p.space))
        };
        Ok(format!("<{name} {addr:#x} ({kind})>"))
    }
}

// ---- DeviceArray ----------------------------------------------------------------------

/// A `configure` type argument as the core names it: a string as given, a
/// dtype, or (for an object that names none) its repr.
fn type_name_of(t: &Bound<'_, PyAny>) -> TypeName {
    if let Ok(s) = t.extract::<String>() {
        return TypeName::Text(s);
    }
    match crate::convert::dtype::dtype_from_py(t) {
        Ok(d) => TypeName::DType(d),
        Err(_) => TypeName::Unknown(t.repr().map(|r| r.to_string()).unwrap_or_default()),
    }
}

/// A slice bound as Python's `slice.indices` reads it: None, or an
/// `__index__` clamped to the `isize` range.
fn slice_bound(b: &Bound<'_, PyAny>) -> PyResult<Option<isize>> {
    if b.is_none() {
        return Ok(None);
    }
    let i = b
        .call_method0("__index__")
        .map_err(|_| PyTypeError::new_err("slice indices must be integers or None or have an __index__ method"))?;
    match i.extract::<isize>() {
        Ok(v) => Ok(Some(v)),
        Err(_) => Ok(Some(if i.lt(0)? { isize::MIN } else { isize::MAX })),
    }
}

/// A `__getitem__` key along one axis.
fn index_key(k: &Bound<'_, PyAny>) -> PyResult<IndexKey> {
    if let Ok(s) = k.cast::<PySlice>() {
        let bound = |name| slice_bound(&s.getattr(name)?);
        return Ok(IndexKey::Slice { start: bound("start")?, stop: bound("stop")?, step: bound("step")? });
    }
    k.extract().map(IndexKey::Int).map_err(|_| {
        PyTypeError::new_err(format!(
            "DeviceArray indices are ints and slices, not {}",
            k.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })
}

/// Device memory with shape and type: returned by ``malloc``; implements the
/// CUDA Array Interface (v3) for CUDA memory.
///
/// Also built from anything ``Pointer`` accepts; from an object with
/// ``__cuda_array_interface__`` (C-contiguous; or another DeviceArray) the
/// shape and type are copied, otherwise the array has no shape or type
/// until ``configure``.
///
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(16, device="host")
///     >>> a.shape, a.typestr, a.itemsize, a.size_bytes, len(a), a.owns_memory
///     ([16], '|u1', 1, 16, 16, True)
///     >>> view = a[4:8]                      # a view of a, which owns the memory
///     >>> view.shape, view.owns_memory
///     ([4], False)
///     >>> rt.free(a)
///     >>> a.owns_memory, a.is_null
///     (False, True)
#[pyclass(module = "gpuport._core", name = "DeviceArray", extends = PyPointer, subclass, frozen)]
pub struct PyDeviceArray {
    dims: Mutex<DeviceArray>,
}

impl PyDeviceArray {
    fn with(array: DeviceArray) -> Self {
        PyDeviceArray { dims: Mutex::new(array) }
    }

    /// A snapshot of the shape and type.
    fn dims(&self) -> PyResult<ArrayDims> {
        Ok(state(&self.dims)?.dims().clone())
    }

    pub fn from_alloc(a: Arc<RawAllocation>) -> PyClassInitializer<PyDeviceArray> {
        let p = Ptr::in_alloc(a.ptr(), a.clone());
        PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(DeviceArray::owning(a)))
    }

    /// The owned allocation, for `op`.
    fn allocation(&self, py: Python<'_>, op: &'static str) -> PyResult<Arc<RawAllocation>> {
        state(&self.dims)?.allocation(op).py_err(py)
    }

    /// `free` of this array (the core's [`device_array::free`]): the
    /// pointer is cleared once the allocation is given up.
    pub fn free(slf: &Bound<'_, Self>) -> PyResult<()> {
        let owned = device_array::free(FreeTarget::Array(&slf.get().dims)).py_err(slf.py())?;
        let old = std::mem::replace(&mut *state(&slf.as_super().get().p)?, Ptr::null());
        // Dropped outside the locks: releasing memory may run Python code.
        drop(old);
        drop(owned);
        Ok(())
    }
}

#[pymethods]
impl PyDeviceArray {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        let Some(o) = obj.filter(|o| !o.is_none()) else {
            return Ok(PyClassInitializer::from(PyPointer::from_ptr(Ptr::null()))
                .add_subclass(Self::with(DeviceArray::over(ArrayDims::bytes(None)))));
        };
        let dims = if let Ok(d) = o.cast::<PyDeviceArray>() {
            d.get().dims()?
        } else if !o.is_instance_of::<PyPointer>() && o.hasattr("__cuda_array_interface__")? {
            let producer = o.get_type().name()?.to_string();
            ArrayDims::of_interface(&CaiDesc::read(o)?, &producer).py_err(o.py())?
        } else {
            ArrayDims::bytes(None)
        };
        let p = to_ptr(o)?;
        Ok(PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(DeviceArray::over(dims))))
    }

    /// The shape (None when unknown).
    #[getter]
    fn shape(&self) -> PyResult<Option<Vec<usize>>> {
        Ok(self.dims()?.shape().map(<[usize]>::to_vec))
    }

    /// The array-interface type string (``"|u1"`` for raw bytes).
    #[getter]
    fn typestr(&self) -> PyResult<String> {
        Ok(state(&self.dims)?.dims().typestr().to_owned())
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> PyResult<usize> {
        Ok(state(&self.dims)?.dims().itemsize())
    }

    /// Enqueues on ``stream`` moving managed memory (``malloc_managed``)
    /// toward ``to`` (``cudaMemPrefetchAsync``): ``"host"``, or a device of
    /// the memory's backend (a Device, a spec, a CUDA ordinal; default: the
    /// memory's device). Memory that is not managed, or a device that cannot
    /// take it, raises ``GpuError``; on the host backend nothing moves.
    ///
    ///     >>> from gpuport import runtime as rt
    ///     >>> m = rt.malloc_managed(64, device="host")
    ///     >>> m.prefetch("host")
    ///     >>> m.prefetch()
    #[pyo3(signature = (to=None, stream=None))]
    fn prefetch(
        &self,
        py: Python<'_>,
        to: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = self.allocation(py, "prefetch")?;
        let place = managed_target(py, to)?.place_for(a.device()).py_err(py)?;
        let stream = resolve_stream(py, a.device(), stream)?;
        py.detach(|| a.prefetch(place, &stream)).py_err(py)
    }

    /// Gives the driver ``advice`` about managed memory for ``device``
    /// (``cudaMemAdvise``): ``"set_read_mostly"``, ``"unset_read_mostly"``,
    /// ``"set_preferred_location"``, ``"unset_preferred_location"``,
    /// ``"set_accessed_by"`` or ``"unset_accessed_by"``; ``device`` as
    /// ``prefetch``'s ``to``. An unknown advice is ``InvalidArgumentError``
    /// (a ``ValueError``).
    ///
    ///     >>> from gpuport import runtime as rt
    ///     >>> m = rt.malloc_managed(64, device="host")
    ///     >>> m.advise("set_preferred_location", "host")
    ///     >>> m.advise("loud")
    ///     Traceback (most recent call last):
    ///     gpuport.InvalidArgumentError: invalid argument advice: unknown advice 'loud'; one of set_read_mostly, unset_read_mostly, set_preferred_location, unset_preferred_location, set_accessed_by, unset_accessed_by
    #[pyo3(signature = (advice, device=None))]
    fn advise(&self, py: Python<'_>, advice: &str, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let advice = Advice::named(advice).py_err_in(py, "advise")?;
        let a = self.allocation(py, "advise")?;
        let place = managed_target(py, device)?.place_for(a.device()).py_err(py)?;
        py.detach(|| a.advise(advice, place)).py_err(py)
    }

    /// Whether this array owns an allocation (from ``malloc``) not yet freed.
    #[getter]
    fn owns_memory(&self) -> PyResult<bool> {
        Ok(state(&self.dims)?.owns_memory())
    }

    /// Changes shape and/or type; returns self. Sizes beyond the known
    /// memory (or any size when the memory is not known, e.g. a raw int)
    /// are refused unless ``_force=True`` (then accessing them is the
    /// caller's responsibility; gpuport's copies still check the real size).
    ///
    ///     >>> from gpuport import runtime as rt
    ///     >>> a = rt.malloc(16, device="host").configure(typestr="<u4")
    ///     >>> a.shape, a.typestr, a.itemsize  # 16 bytes are 4 uint32
    ///     ([4], '<u4', 4)
    ///     >>> a.configure(shape=(2, 2)).shape
    ///     [2, 2]
    ///     >>> a.configure(shape=8)
    ///     Traceback (most recent call last):
    ///     ValueError: configure: 32 bytes ((8,) of <u4) exceed the 16 bytes of the memory; ...
    #[pyo3(signature = (*, shape=None, typestr=None, _force=false))]
    fn configure<'py>(
        slf: Bound<'py, Self>,
        shape: Option<&Bound<'py, PyAny>>,
        typestr: Option<&Bound<'py, PyAny>>,
        _force: bool,
    ) -> PyResult<Bound<'py, Self>> {
        let typestr = typestr.filter(|t| !t.is_none()).map(type_name_of);
        let shape: Option<Vec<usize>> = match shape {
            Some(s) if !s.is_none() => Some(if let Ok(n) = s.extract::<usize>() {
                vec![n]
            } else {
                s.extract().map_err(|_| PyTypeError::new_err("shape must be an int or a sequence of ints >= 0"))?
            }),
            _ => None,
        };
        let have = state(&slf.as_super().get().p)?.known_size();
        state(&slf.get().dims)?.configure(shape, typestr.as_ref(), have, _force).py_err(slf.py())?;
        Ok(slf)
    }

    /// Size in bytes of shape x itemsize (0 without a shape).
    #[getter]
    fn size_bytes(&self, py: Python<'_>) -> PyResult<usize> {
        self.dims()?.nbytes().py_err(py)
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.dims()?.len().py_err(py)
    }

    /// The CUDA Array Interface (v3), for CUDA device or managed memory.
    #[getter]
    fn __cuda_array_interface__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let dims = slf.get().dims()?;
        let (shape, typestr) = (dims.shape(), dims.typestr());
        let (cuda, kind, addr, writable) = {
            let p = state(&slf.as_super().get().p)?;
            let cuda = match &p.space {
                Place::Device(Some(d)) | Place::Managed(d) => d.backend() == BackendKind::Cuda,
                Place::Device(None) => true, // from a CUDA Array Interface or a CUDA DLPack tensor
                _ => false,
            };
            (cuda, Place::name(&p.space), p.addr, p.writable)
        };
        if !cuda {
            return Err(PyAttributeError::new_err(format!(
                "__cuda_array_interface__ is defined for CUDA memory only; this DeviceArray holds {kind} memory"
            )));
        }
        let shape = shape.ok_or_else(|| {
            PyAttributeError::new_err("__cuda_array_interface__: the array has no shape (configure it)")
        })?;
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, shape)?)?;
        d.set_item("typestr", typestr)?;
        d.set_item("data", (addr, !writable))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    /// A sub-array: ints and at most one step-1 slice along the leading
    /// axes (the result is contiguous). The parent is kept alive.
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyDeviceArray>> {
        let py = slf.py();
        // A snapshot: reading the key below runs Python code (`__index__`),
        // which may use this array again.
        let dims = slf.get().dims()?;
        let mut p = state(&slf.as_super().get().p)?.share(slf.as_any());
        let keys: Vec<IndexKey> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().map(|k| index_key(&k)).collect::<PyResult<_>>()?,
            Err(_) => vec![index_key(key)?],
        };
        let sub = dims.index(&keys).py_err(py)?;
        p.addr = p.addr.wrapping_add(sub.byte_offset as u64);
        p.len = p.len.map(|l| sub.window(l));
        p.size = p.size.map(|l| sub.window(l));
        let init =
            PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(DeviceArray::over(sub.dims)));
        Py::new(py, init)
    }
}

// ---- malloc / free --------------------------------------------------------------------

/// Allocates ``size`` bytes (``kind``: "device", "pinned" or "managed") on
/// ``device`` (default: the default device); the memory is owned by the
/// returned DeviceArray (shape ``(size,)``, typestr ``"|u1"``) and freed by
/// ``free`` or when the last reference goes. Device memory comes from the
/// device's current resource (the caching pool that ``gpuport.memory``
/// counts); as with ``cudaFree``, giving it back first waits for the device,
/// since any stream may still use the raw address.
///
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(64, device="host")
///     >>> a.shape, a.typestr, a.memory_kind
///     ([64], '|u1', 'device')
///     >>> rt.malloc(64, device="host", kind="pinned").memory_kind
///     'pinned'
#[pyfunction]
#[pyo3(signature = (size, device=None, kind="device"))]
pub fn malloc(
    py: Python<'_>,
    size: usize,
    device: Option<&Bound<'_, PyAny>>,
    kind: &str,
) -> PyResult<Py<PyDeviceArray>> {
    let dev = resolve_device(py, device)?;
    let a = runtime::malloc(&dev, kind, size, |op| py.detach(op)).py_err(py)?;
    Py::new(py, PyDeviceArray::from_alloc(a))
}

/// ``malloc(size, device, kind="pinned")``: page-locked host memory.
///
///     >>> from gpuport import runtime as rt
///     >>> staging = rt.malloc_pinned(64, device="host")
///     >>> staging.memory_kind, staging.nbytes
///     ('pinned', 64)
#[pyfunction]
#[pyo3(signature = (size, device=None))]
pub fn malloc_pinned(py: Python<'_>, size: usize, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyDeviceArray>> {
    malloc(py, size, device, "pinned")
}

/// ``malloc(size, device, kind="managed")``: unified memory.
///
///     >>> from gpuport import runtime as rt
///     >>> shared = rt.malloc_managed(64, device="host")
///     >>> shared.memory_kind, shared.nbytes
///     ('managed', 64)
#[pyfunction]
#[pyo3(signature = (size, device=None))]
pub fn malloc_managed(py: Python<'_>, size: usize, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyDeviceArray>> {
    malloc(py, size, device, "managed")
}

/// Frees an array returned by ``malloc``. ``free(None)`` (NULL) does
/// nothing; freeing twice raises ``ValueError``, as does freeing memory
/// gpuport does not own (raw addresses, views, buffers).
///
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(64, device="host")
///     >>> rt.free(a)
///     >>> rt.free(a)
///     Traceback (most recent call last):
///     ValueError: free: this DeviceArray was already freed (double free)
///     >>> rt.free(None)
#[pyfunction]
pub fn free(ptr: &Bound<'_, PyAny>) -> PyResult<()> {
    if let Ok(d) = ptr.cast::<PyDeviceArray>() {
        return PyDeviceArray::free(d);
    }
    device_array::free(FreeTarget::Address(to_ptr(ptr)?.addr)).map(drop).py_err(ptr.py())
}
