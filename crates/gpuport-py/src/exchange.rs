//! DLPack and array interfaces of a [`PyMemArray`]'s storage: exporting
//! (`__dlpack__` following the array API standard, the interface dicts) and
//! importing (`from_dlpack`, `asarray`).
//!
//! A writable export hands out the address of one copy (host or device) and
//! makes that copy the only current one, so whatever the consumer writes
//! there is what the array's next read sees (the other copy is refreshed
//! from it). Read-only exports leave both copies current.

use gpuport::array::{Location, LockId, Transfer};
use gpuport::dlpack::{is_host_accessible, DLDevice, DLDeviceType};
use gpuport::AnyDevice;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::array::{device_for_dl, foreign_from_producer, natural_of, new_owned, PyMemArray, Storage};
use crate::device::{is_cuda_dl, resolve_stream, spec, stream_from_handle, AnyStream};
use crate::dlpack::{make_capsule, take_capsule, ExportParts, Packaging, Producer};
use crate::dtype::{unsupported_dlpack_dtype, DType};
use crate::errors::{self, IntoPyResult};

pub fn dl_pair(d: DLDevice) -> (i32, i32) {
    (d.device_type.0 as i32, d.device_id)
}

/// A DLPack export request, as `__dlpack__` receives it.
pub struct Request {
    pub stream: Option<isize>,
    pub max_version: Option<(u32, u32)>,
    pub dl_device: Option<(i32, i32)>,
    pub copy: Option<bool>,
    pub read_only: bool,
    pub lock: Option<u64>,
    pub prefer: Option<Location>,
}

/// The consumer stream a `__dlpack__(stream=...)` names for memory of DLPack
/// device type `dl_t`: `None` for no synchronization.
fn consumer_stream(py: Python<'_>, dev: &AnyDevice, dl_t: i32, stream: Option<isize>) -> PyResult<Option<AnyStream>> {
    if is_cuda_dl(dl_t) {
        match stream {
            // The standard: None means the legacy default stream on CUDA.
            None => stream_from_handle(py, dev, 1).map(Some),
            Some(-1) => Ok(None),
            Some(0) => Err(PyValueError::new_err(
                "stream=0 is ambiguous on CUDA and disallowed by the DLPack standard; use 1 (legacy default), 2 (per-thread default), a stream handle, or -1",
            )),
            Some(h) if h < -1 => Err(PyValueError::new_err(format!("stream={h} is not a CUDA stream"))),
            Some(h) => stream_from_handle(py, dev, h).map(Some),
        }
    } else {
        match stream {
            None | Some(-1) => Ok(None),
            Some(h) => Err(PyValueError::new_err(format!(
                "stream={h} was given for memory on DLPack device type {dl_t}; host memory takes stream=None"
            ))),
        }
    }
}

/// Exports `st` as a DLPack capsule following the array API standard.
pub fn export<'py>(py: Python<'py>, st: &mut Storage, req: Request) -> PyResult<Bound<'py, PyAny>> {
    let call = "__dlpack__";
    let versioned_minor = match req.max_version {
        Some((major, minor)) if major >= 1 => {
            Some(if major > 1 { gpuport::dlpack::ffi::DLPACK_MINOR_VERSION } else { minor })
        }
        _ => None,
    };
    let lock = req.lock.map(LockId);
    let (parts, copied, read_only) = match st {
        Storage::Owned(a) => {
            if let Some(p) = req.prefer.filter(|&p| !a.residency().includes(p)) {
                // The copy get_dlpack(device_type) named went stale since (another call moved or wrote the array).
                let s = AnyStream::default_for(&a.device());
                py.detach(|| a.move_to(p, &s, Transfer::Sync, lock)).py_err_in(py, call)?;
            }
            let mut loc = req.prefer.unwrap_or_else(|| natural_of(a.as_ref()));
            let mut to_host = false;
            if let Some(want) = req.dl_device {
                if want != dl_pair(a.dl_device(loc)) {
                    let other = if loc == Location::Host { Location::Device } else { Location::Host };
                    if a.residency().includes(other) && dl_pair(a.dl_device(other)) == want {
                        loc = other;
                    } else if want.0 == DLDeviceType::CPU.0 as i32 {
                        if req.copy == Some(false) {
                            return Err(PyBufferError::new_err(format!(
                                "dl_device={want:?} needs a copy to host memory, but copy=False; the array's current copy is on {}",
                                spec(&a.device())
                            )));
                        }
                        to_host = true;
                    } else {
                        return Err(PyBufferError::new_err(format!(
                            "cannot export to dl_device={want:?}: the array lives on {} (DLPack device {:?})",
                            spec(&a.device()),
                            dl_pair(a.dl_device(loc))
                        )));
                    }
                }
            }
            let copied = to_host || req.copy == Some(true);
            let final_dl =
                if to_host { DLDevice { device_type: DLDeviceType::CPU, device_id: 0 } } else { a.dl_device(loc) };
            let consumer = consumer_stream(py, &a.device(), final_dl.device_type.0 as i32, req.stream)?;
            let (data, keep, dl) = if copied {
                py.detach(|| -> gpuport::Result<_> {
                    let mut c = a.try_clone(lock)?;
                    let target = if to_host { Location::Host } else { loc };
                    c.move_to(target, &AnyStream::default_for(&c.device()), Transfer::Sync, None)?;
                    let (p, k) = c.parts(target, None)?;
                    Ok((p, k, c.dl_device(target)))
                })
                .py_err_in(py, call)?
            } else {
                if let Some(s) = &consumer {
                    a.order_on(s).py_err_in(py, call)?;
                } else if is_host_accessible(final_dl.device_type) && req.stream != Some(-1) {
                    // The host itself is the consumer (host-backend device
                    // copies, managed memory): wait for pending kernels.
                    py.detach(|| a.synchronize()).py_err_in(py, call)?;
                }
                let (p, k) = py.detach(|| a.parts(loc, lock)).py_err_in(py, call)?;
                if !req.read_only {
                    // The consumer may write: the other copy is stale from now on.
                    a.mark_written(loc, lock).py_err_in(py, call)?;
                }
                (p, k, a.dl_device(loc))
            };
            let parts = ExportParts { data, device: dl, dtype: a.dtype(), shape: a.shape(), strides: None, keep };
            (parts, copied, req.read_only)
        }
        Storage::Foreign(f) => {
            f.check_lock("__dlpack__", req.lock).py_err_in(py, call)?;
            if let Some(want) = req.dl_device {
                if want != dl_pair(f.dl) {
                    return Err(PyBufferError::new_err(format!(
                        "cannot export an imported array to dl_device={want:?}; it lives on DLPack device {:?}",
                        dl_pair(f.dl)
                    )));
                }
            }
            if req.copy == Some(true) {
                return Err(PyBufferError::new_err(
                    "copy=True is not supported for an imported array; copy it in its producer library",
                ));
            }
            consumer_stream(py, &f.device, f.dl.device_type.0 as i32, req.stream)?;
            let parts = ExportParts {
                data: f.data,
                device: f.dl,
                dtype: f.dtype,
                shape: f.shape.clone(),
                strides: Some(f.strides.clone()),
                keep: f.keep.clone(),
            };
            (parts, false, req.read_only || f.read_only)
        }
    };
    if read_only && versioned_minor.is_none() {
        return Err(PyBufferError::new_err(
            "a read-only export needs a versioned DLPack capsule, and the consumer did not pass max_version >= (1, 0)",
        ));
    }
    make_capsule(py, parts, Packaging { versioned_minor, read_only, copied })
}

/// Calls `obj.__dlpack__` as a consumer on `dev`'s default stream and takes the capsule.
pub fn import_producer(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Producer> {
    if obj.is_instance_of::<pyo3::types::PyCapsule>() {
        return take_capsule(py, obj);
    }
    if !obj.hasattr("__dlpack__")? {
        return Err(PyTypeError::new_err(format!(
            "{} does not support DLPack (no __dlpack__ method)",
            obj.get_type().name()?
        )));
    }
    let (dl_t, dl_id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    // The consumer's stream: ours, as the standard's integer.
    let stream_arg: Option<isize> = if is_cuda_dl(dl_t) {
        let dev = device_for_dl(py, DLDevice { device_type: DLDeviceType(dl_t as u32), device_id: dl_id })?;
        let s = resolve_stream(py, &dev, stream)?;
        // Our default stream is the legacy (null) stream, which DLPack spells 1.
        Some(match s.handle() {
            0 => 1,
            h => h as isize,
        })
    } else if dl_t == DLDeviceType::ROCM.0 as i32 {
        Some(0)
    } else {
        None
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("stream", stream_arg)?;
    kwargs.set_item("max_version", (1, gpuport::dlpack::ffi::DLPACK_MINOR_VERSION))?;
    if let Some(c) = copy {
        kwargs.set_item("copy", c)?;
    }
    let cap = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            // A producer older than DLPack 1.0 takes only `stream`.
            let kwargs = PyDict::new(py);
            kwargs.set_item("stream", stream_arg)?;
            obj.call_method("__dlpack__", (), Some(&kwargs))?
        }
        Err(e) => return Err(e),
    };
    take_capsule(py, &cap)
}

pub fn parse_version(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(u32, u32)>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract()?)),
    }
}

pub fn parse_dl_device(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(i32, i32)>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract()?)),
    }
}

/// An array-interface dict (`__array_interface__` / `__cuda_array_interface__`).
#[allow(clippy::too_many_arguments)]
pub fn interface_dict<'py>(
    py: Python<'py>,
    shape: &[usize],
    typestr: &str,
    data: u64,
    read_only: bool,
    strides: Option<Vec<i64>>,
    stream: Option<Option<usize>>,
    version: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("shape", PyTuple::new(py, shape)?)?;
    d.set_item("typestr", typestr)?;
    d.set_item("descr", PyList::new(py, [("", typestr)])?)?;
    d.set_item("data", (data, read_only))?;
    match strides {
        Some(s) => d.set_item("strides", PyTuple::new(py, s)?)?,
        None => d.set_item("strides", py.None())?,
    }
    d.set_item("version", version)?;
    if let Some(s) = stream {
        d.set_item("stream", s)?;
    }
    Ok(d)
}

/// Imports any DLPack producer (NumPy, PyTorch, CuPy, JAX, another
/// MemArray, or a capsule) without a copy. The result keeps the producer's
/// memory alive; the producer's deleter runs once when it goes.
#[pyfunction]
#[pyo3(signature = (obj, /, *, stream=None, copy=None))]
pub fn from_dlpack(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<PyMemArray> {
    if copy == Some(true) {
        // An owned copy: import, then copy into a new host-backend array.
        let p = import_producer(py, obj, stream, None)?;
        let t = &p.0;
        if !is_host_accessible(t.device().device_type) {
            return Err(PyBufferError::new_err("from_dlpack(copy=True) copies host-accessible tensors only"));
        }
        let dtype =
            DType::from_dlpack(t.dtype()).ok_or_else(|| errors::dlpack(py, unsupported_dlpack_dtype(t.dtype())))?;
        let shape: Vec<usize> = t.shape().iter().map(|&e| e as usize).collect();
        let host = py.detach(|| gpuport::open("host")).py_err(py)?;
        let mut a = py.detach(|| new_owned(&host, dtype, &shape)).py_err(py)?;
        py.detach(|| a.read_imported(p.tensor(), None)).py_err(py)?;
        return Ok(PyMemArray::from_owned(a));
    }
    let p = import_producer(py, obj, stream, copy)?;
    Ok(PyMemArray::from_foreign(foreign_from_producer(py, p)?))
}

/// A MemArray from anything array-like: a MemArray (returned as is), a DLPack
/// producer (zero-copy), a CUDA Array Interface producer (zero-copy), or any
/// other object NumPy can convert (copied).
#[pyfunction]
#[pyo3(signature = (obj, /, *, device=None))]
pub fn asarray(py: Python<'_>, obj: &Bound<'_, PyAny>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
    if obj.is_instance_of::<PyMemArray>() {
        return Ok(obj.clone().unbind());
    }
    if obj.hasattr("__dlpack__")? {
        return Ok(Bound::new(py, from_dlpack(py, obj, None, None)?)?.into_any().unbind());
    }
    if obj.hasattr("__cuda_array_interface__")? {
        return Ok(Bound::new(py, crate::cai::from_cuda_array_interface(py, obj, device)?)?.into_any().unbind());
    }
    let arr = py.import("numpy")?.call_method1("ascontiguousarray", (obj,))?;
    Ok(Bound::new(py, from_dlpack(py, &arr, None, None)?)?.into_any().unbind())
}
