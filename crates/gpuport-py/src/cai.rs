//! The CUDA Array Interface, version 3, both ways.
//!
//! Defined for CUDA memory only. On ROCm the interface is undefined (CuPy
//! refuses it there); DLPack, with its `kDLROCM` device and ROCm stream
//! rules, is the way to exchange ROCm memory.

use std::sync::Arc;

use gpuport::array::Location;
use gpuport::dlpack::{DLDevice, DLDeviceType};
use gpuport::{AnyDevice, BackendKind};
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::array::{interface_dict, Foreign, PyMemArray, Storage};
use crate::device::{export_stream, resolve_device, spec, stream_from_handle, AnyStream};
use crate::dtype::DType;
use crate::errors::{self, IntoPyResult};

/// `__cuda_array_interface__` of a CUDA-resident array.
pub fn export<'py>(py: Python<'py>, st: &Storage) -> PyResult<Bound<'py, PyDict>> {
    let not_cuda = |what: String| {
        PyAttributeError::new_err(format!(
            "__cuda_array_interface__ is defined for CUDA-resident arrays only; {what}; use __dlpack__ (ROCm and host memory have no CUDA Array Interface)"
        ))
    };
    let dtype = match st {
        Storage::Owned(a) => a.dtype(),
        Storage::Foreign(f) => f.dtype,
    };
    let typestr =
        dtype.typestr().ok_or_else(|| not_cuda(format!("{} has no array-interface type string", dtype.name())))?;
    match st {
        Storage::Owned(a) => {
            let dev = a.device();
            if dev.backend() != BackendKind::Cuda {
                return Err(not_cuda(format!("this array is on {}", spec(&dev))));
            }
            if !a.residency().includes(Location::Device) {
                return Err(not_cuda("its device copy is not current (call move_memory(\"device\") first)".into()));
            }
            let (data, _) = py.detach(|| a.parts(Location::Device, None)).py_err(py)?;
            // Pending work is handed to the consumer through a stream that
            // waits for it (an event, not a host sync); None when idle.
            let stream = if a.transfer_pending().py_err(py)? {
                let s = export_stream(&dev).py_err(py)?;
                a.order_on(&s).py_err(py)?;
                Some(s.handle())
            } else {
                None
            };
            interface_dict(py, &a.shape(), typestr, data, false, None, Some(stream), 3)
        }
        Storage::Foreign(f) => {
            if f.dl.device_type != DLDeviceType::CUDA && f.dl.device_type != DLDeviceType::CUDA_MANAGED {
                return Err(not_cuda(format!("this imported array is on DLPack device {}", f.dl.device_type.0)));
            }
            let item = f.dtype.itemsize() as i64;
            let strides: Vec<i64> = f.strides.iter().map(|&s| s * item).collect();
            interface_dict(py, &f.shape, typestr, f.data, f.read_only, Some(strides), Some(None), 3)
        }
    }
}

/// Keeps a Python object alive from Rust (the CAI producer).
struct PyOwner(#[allow(dead_code)] Py<PyAny>);

/// Imports an object exposing `__cuda_array_interface__` (v2 or v3) without a
/// copy; the object is kept alive while the result (or an export of it) is.
/// With a `stream` in the interface, our default stream waits for it through
/// an event. `device` names the CUDA device of the pointer (default cuda:0).
#[pyfunction]
#[pyo3(signature = (obj, /, device=None))]
pub fn from_cuda_array_interface(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyMemArray> {
    let cai = obj.getattr("__cuda_array_interface__")?;
    let cai = cai.cast::<PyDict>().map_err(|_| PyTypeError::new_err("__cuda_array_interface__ must be a dict"))?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        cai.get_item(k)?.ok_or_else(|| PyValueError::new_err(format!("__cuda_array_interface__ has no {k:?}")))
    };
    let version: u32 = get("version")?.extract()?;
    if version < 2 {
        return Err(PyValueError::new_err(format!(
            "CUDA Array Interface version {version}; versions 2 and 3 are read"
        )));
    }
    if let Some(mask) = cai.get_item("mask")? {
        if !mask.is_none() {
            return Err(PyValueError::new_err("masked CUDA arrays are not supported"));
        }
    }
    let shape: Vec<usize> = get("shape")?.extract()?;
    let typestr: String = get("typestr")?.extract()?;
    let dtype = DType::from_typestr(&typestr).ok_or_else(|| {
        errors::unsupported_dtype(
            py,
            format!("typestr {typestr:?} is not supported; supported: {}", DType::supported()),
        )
    })?;
    let (data, read_only): (usize, bool) = get("data")?.extract()?;
    let item = dtype.itemsize() as i64;
    let strides: Vec<i64> = match cai.get_item("strides")? {
        Some(s) if !s.is_none() => {
            let bytes: Vec<i64> = s.extract()?;
            if bytes.len() != shape.len() || bytes.iter().any(|b| b % item != 0) {
                return Err(PyValueError::new_err(format!(
                    "strides {bytes:?} (bytes) do not match shape {shape:?} of {item}-byte elements"
                )));
            }
            bytes.iter().map(|b| b / item).collect()
        }
        _ => {
            let mut s = vec![0i64; shape.len()];
            let mut acc = 1i64;
            for a in (0..shape.len()).rev() {
                s[a] = acc;
                acc = acc.saturating_mul(shape[a].max(1) as i64);
            }
            s
        }
    };
    let dev: AnyDevice = match device {
        Some(d) if !d.is_none() => resolve_device(py, Some(d))?,
        _ => py.detach(|| gpuport::open("cuda:0")).py_err(py)?,
    };
    if dev.backend() != BackendKind::Cuda {
        return Err(errors::unavailable(
            py,
            format!("CUDA Array Interface memory needs a CUDA device, not {}", spec(&dev)),
        ));
    }
    if shape.iter().product::<usize>() > 0 && data == 0 {
        return Err(PyValueError::new_err("CUDA Array Interface data pointer is null"));
    }
    if version >= 3 {
        if let Some(s) = cai.get_item("stream")? {
            if !s.is_none() {
                let h: isize = s.extract()?;
                if h == 0 {
                    return Err(PyValueError::new_err("CUDA Array Interface stream 0 is disallowed by the spec"));
                }
                // The producer's pending work: our default stream waits for it.
                let theirs = stream_from_handle(py, &dev, h)?;
                let ev = theirs.record().py_err(py)?;
                AnyStream::default_for(&dev).wait(&ev).py_err(py)?;
            }
        }
    }
    let ordinal = dev.info().ordinal as i32;
    Ok(PyMemArray::from_foreign(Foreign {
        dtype,
        shape,
        strides,
        data: data as u64,
        dl: DLDevice { device_type: DLDeviceType::CUDA, device_id: ordinal },
        read_only,
        keep: Arc::new(PyOwner(obj.clone().unbind())),
        device: dev,
        lock: None,
    }))
}
