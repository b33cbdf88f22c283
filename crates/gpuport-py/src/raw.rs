//! The `Pointer` adapter's Python methods (its type, [`PyPointer`], is in
//! [`crate::convert::pointer`], where the conversion of pointer arguments
//! recognises it) and `DeviceArray`: device memory with shape and type,
//! over the core's raw allocations (`gpuport::dynamic::raw`).
//!
//! Threads: `Pointer` and `DeviceArray` are `frozen`; the little they
//! change (a DeviceArray's shape and type, the address `free` clears) sits
//! in `Mutex`es held only for plain Rust work, with the GIL, so no PyO3
//! borrow can fail and no Python code (an `__index__`, a `__del__`) can
//! find them taken by another thread.

use std::sync::{Arc, Mutex};

use gpuport::dynamic::raw::{Place, RawAllocation};
use gpuport::error::python;
use gpuport::{Advice, BackendKind};
use pyo3::exceptions::{PyAttributeError, PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PyTuple};

use crate::convert::cai::{itemsize_of, CaiDesc, ReadInterface};
use crate::convert::device::managed_target;
use crate::convert::pointer::{state, to_ptr, Ptr, PyPointer};
use crate::convert::stream::resolve_stream;
use crate::errors::IntoPyResult;

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

// ---- DeviceArray -----------------------------------------------------------------

/// An array-interface type string from one (``"<f4"``) or from a dtype
/// (``"float32"``, ``numpy.float32``, a NumPy dtype).
fn normalize_typestr(t: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = t.extract::<String>() {
        if itemsize_of(&s).is_ok() {
            return Ok(s);
        }
    }
    let d = crate::convert::dtype::dtype_from_py(t).map_err(|_| {
        PyValueError::new_err(format!(
            "typestr {}: pass an array-interface type string such as \"<f4\" or a dtype such as \"float32\"",
            t.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    d.typestr()
        .map(str::to_owned)
        .ok_or_else(|| PyValueError::new_err(format!("{} has no array-interface type string", d.name())))
}

fn nbytes_of(shape: &[usize], itemsize: usize) -> PyResult<usize> {
    shape
        .iter()
        .try_fold(itemsize, |acc, &e| acc.checked_mul(e))
        .ok_or_else(|| PyOverflowError::new_err(format!("shape {} is too large", python::tuple(shape))))
}

/// A DeviceArray's shape and type.
struct Dims {
    shape: Option<Vec<usize>>,
    typestr: String,
    itemsize: usize,
    /// The allocation this array owns (from `malloc`), until `free`.
    owned: Option<Arc<RawAllocation>>,
    freed: bool,
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
    dims: Mutex<Dims>,
}

impl PyDeviceArray {
    fn with(shape: Option<Vec<usize>>, typestr: &str, itemsize: usize, owned: Option<Arc<RawAllocation>>) -> Self {
        PyDeviceArray { dims: Mutex::new(Dims { shape, typestr: typestr.into(), itemsize, owned, freed: false }) }
    }

    pub fn from_alloc(a: Arc<RawAllocation>) -> PyClassInitializer<PyDeviceArray> {
        let p = Ptr::in_alloc(a.ptr(), a.clone());
        let len = a.len();
        PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(Some(vec![len]), "|u1", 1, Some(a)))
    }

    /// The owned allocation, or a ValueError naming `op`.
    fn allocation(&self, op: &str) -> PyResult<Arc<RawAllocation>> {
        state(&self.dims)?.owned.clone().ok_or_else(|| {
            PyValueError::new_err(format!("{op}: this DeviceArray owns no memory (only malloc_managed's is placed)"))
        })
    }

    /// Frees the owned allocation (the memory goes when no view or pending work needs it).
    pub fn free(slf: &Bound<'_, Self>) -> PyResult<()> {
        let owned = {
            let mut d = state(&slf.get().dims)?;
            if d.freed {
                return Err(PyValueError::new_err("free: this DeviceArray was already freed (double free)"));
            }
            let Some(owned) = d.owned.take() else {
                return Err(PyValueError::new_err(
                    "free: this DeviceArray does not own its memory (only arrays returned by malloc are freed by gpuport)",
                ));
            };
            d.freed = true;
            d.shape = Some(vec![0]);
            owned
        };
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
                .add_subclass(Self::with(None, "|u1", 1, None)));
        };
        let (mut shape, mut typestr) = (None, "|u1".to_string());
        if let Ok(d) = o.cast::<PyDeviceArray>() {
            let d = state(&d.get().dims)?;
            shape.clone_from(&d.shape);
            typestr.clone_from(&d.typestr);
        } else if !o.is_instance_of::<PyPointer>() && o.hasattr("__cuda_array_interface__")? {
            let desc = CaiDesc::read(o)?;
            if let Some(l) = desc.layout().py_err(o.py())? {
                if !l.c_order {
                    let strides = desc.strides.as_deref().unwrap_or_default();
                    let shape: Vec<i64> = desc.shape.iter().flatten().map(|&e| e as i64).collect();
                    let layout = format!("shape {}, strides {} bytes", python::tuple(&shape), python::tuple(strides));
                    return Err(PyValueError::new_err(format!(
                        "DeviceArray: the {} ({layout}) is not contiguous in C order, and a DeviceArray describes \
                         C-contiguous memory; pass a C-contiguous array (e.g. tensor.contiguous())",
                        o.get_type().name()?
                    )));
                }
            }
            shape = desc.shape;
            if let Some(t) = desc.typestr {
                typestr = t;
            }
        }
        let itemsize = itemsize_of(&typestr)?;
        let p = to_ptr(o)?;
        Ok(PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(shape, &typestr, itemsize, None)))
    }

    /// The shape (None when unknown).
    #[getter]
    fn shape(&self) -> PyResult<Option<Vec<usize>>> {
        Ok(state(&self.dims)?.shape.clone())
    }

    /// The array-interface type string (``"|u1"`` for raw bytes).
    #[getter]
    fn typestr(&self) -> PyResult<String> {
        Ok(state(&self.dims)?.typestr.clone())
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> PyResult<usize> {
        Ok(state(&self.dims)?.itemsize)
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
        let a = self.allocation("prefetch")?;
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
        let a = self.allocation("advise")?;
        let place = managed_target(py, device)?.place_for(a.device()).py_err(py)?;
        py.detach(|| a.advise(advice, place)).py_err(py)
    }

    /// Whether this array owns an allocation (from ``malloc``) not yet freed.
    #[getter]
    fn owns_memory(&self) -> PyResult<bool> {
        Ok(state(&self.dims)?.owned.is_some())
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
        let typestr = match typestr.filter(|t| !t.is_none()) {
            Some(t) => Some(normalize_typestr(t)?),
            None => None,
        };
        let shape: Option<Vec<usize>> = match shape {
            Some(s) if !s.is_none() => Some(if let Ok(n) = s.extract::<usize>() {
                vec![n]
            } else {
                s.extract().map_err(|_| PyTypeError::new_err("shape must be an int or a sequence of ints >= 0"))?
            }),
            _ => None,
        };
        let have = state(&slf.as_super().get().p)?.known_size();
        let mut me = state(&slf.get().dims)?;
        let typestr = typestr.unwrap_or_else(|| me.typestr.clone());
        let itemsize = itemsize_of(&typestr)?;
        let shape: Vec<usize> = match shape {
            Some(s) => s,
            None => match &me.shape {
                // A retype keeps the byte size: (n,) of u1 becomes (n/4,) of f4.
                Some(old) if old.len() == 1 => vec![nbytes_of(old, me.itemsize)? / itemsize],
                Some(old) => old.clone(),
                None => return Err(PyValueError::new_err("configure: this array has no shape; pass shape=")),
            },
        };
        let need = nbytes_of(&shape, itemsize)?;
        match have {
            Some(h) if need > h && !_force => {
                return Err(PyValueError::new_err(format!(
                    "configure: {need} bytes ({} of {typestr}) exceed the {h} bytes of the memory; pass _force=True to override",
                    python::tuple(&shape)
                )))
            }
            None if !_force => {
                return Err(PyValueError::new_err(
                    "configure: the size of this memory is not known (a raw address); pass _force=True",
                ))
            }
            _ => {}
        }
        me.shape = Some(shape);
        me.typestr = typestr;
        me.itemsize = itemsize;
        drop(me);
        Ok(slf)
    }

    /// Size in bytes of shape x itemsize (0 without a shape).
    #[getter]
    fn size_bytes(&self) -> PyResult<usize> {
        let d = state(&self.dims)?;
        match &d.shape {
            Some(s) => nbytes_of(s, d.itemsize),
            None => Ok(0),
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        match state(&self.dims)?.shape.as_deref() {
            Some([n, ..]) => Ok(*n),
            _ => Err(PyTypeError::new_err("len() of a DeviceArray without a first axis")),
        }
    }

    /// The CUDA Array Interface (v3), for CUDA device or managed memory.
    #[getter]
    fn __cuda_array_interface__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let (shape, typestr) = {
            let d = state(&slf.get().dims)?;
            (d.shape.clone(), d.typestr.clone())
        };
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
        let (shape, typestr, itemsize) = {
            let d = state(&slf.get().dims)?;
            (d.shape.clone(), d.typestr.clone(), d.itemsize)
        };
        let mut p = state(&slf.as_super().get().p)?.share(slf.as_any());
        let shape = shape.ok_or_else(|| PyTypeError::new_err("a DeviceArray without a shape cannot be indexed"))?;
        let keys: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![key.clone()],
        };
        if keys.len() > shape.len() {
            return Err(PyIndexError::new_err(format!("{} indices for {} dimensions", keys.len(), shape.len())));
        }
        let too_big = || PyOverflowError::new_err(format!("shape {} is too large to index", python::tuple(&shape)));
        let mut strides = vec![1usize; shape.len()];
        for a in (0..shape.len().saturating_sub(1)).rev() {
            strides[a] = strides[a + 1].checked_mul(shape[a + 1]).ok_or_else(too_big)?;
        }
        let mut offset = 0usize; // elements
        let mut out_shape = Vec::new();
        let mut sliced = false;
        for (axis, k) in keys.iter().enumerate() {
            let n = shape[axis];
            if let Ok(s) = k.cast::<PySlice>() {
                let ind = s.indices(n as isize)?;
                if ind.step != 1 {
                    return Err(PyIndexError::new_err("DeviceArray slices need step 1 (sub-arrays are contiguous)"));
                }
                if sliced && !(ind.start == 0 && ind.slicelength == n) {
                    return Err(PyIndexError::new_err(
                        "only contiguous sub-arrays: after a partial slice, the remaining axes must be whole",
                    ));
                }
                if !(ind.start == 0 && ind.slicelength == n) {
                    sliced = true;
                }
                offset = (ind.start as usize)
                    .checked_mul(strides[axis])
                    .and_then(|o| o.checked_add(offset))
                    .ok_or_else(too_big)?;
                out_shape.push(ind.slicelength);
            } else {
                if sliced || !out_shape.is_empty() {
                    return Err(PyIndexError::new_err(
                        "only contiguous sub-arrays: integer indices must come before slices",
                    ));
                }
                let i: isize = k.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "DeviceArray indices are ints and slices, not {}",
                        k.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                    ))
                })?;
                let j = if i < 0 { i + n as isize } else { i };
                if j < 0 || j as usize >= n {
                    return Err(PyIndexError::new_err(format!(
                        "index {i} is out of bounds for axis {axis} of size {n}"
                    )));
                }
                offset =
                    (j as usize).checked_mul(strides[axis]).and_then(|o| o.checked_add(offset)).ok_or_else(too_big)?;
            }
        }
        out_shape.extend_from_slice(&shape[keys.len()..]);
        let byte_off = offset.checked_mul(itemsize).ok_or_else(too_big)?;
        let nbytes = nbytes_of(&out_shape, itemsize)?;
        p.addr = p.addr.wrapping_add(byte_off as u64);
        p.len = p.len.map(|l| l.saturating_sub(byte_off).min(nbytes));
        p.size = p.size.map(|l| l.saturating_sub(byte_off).min(nbytes));
        let init = PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(
            Some(out_shape),
            &typestr,
            itemsize,
            None,
        ));
        Py::new(py, init)
    }
}
