//! The CUDA Array Interface (versions 0 to 3 read, version 3 written), and
//! the layout arithmetic shared by everything that states its extent
//! (CUDA Array Interface and DLPack objects, buffers).
//!
//! Defined for CUDA memory only. On ROCm the interface is undefined (CuPy
//! refuses it there); DLPack, with its `kDLROCM` device and ROCm stream
//! rules, is the way to exchange ROCm memory.

use std::sync::Arc;

use gpuport::array::Location;
use gpuport::dlpack::{DLDevice, DLDeviceType};
use gpuport::error::python;
use gpuport::{AnyDevice, BackendKind};
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::device::{resolve_device, spec, stream_from_handle, AnyStream};
use crate::dtype::DType;
use crate::errors::{self, IntoPyResult};
use crate::exchange::interface_dict;
use crate::memarray::{AnyArray, ImportedArray, PyMemArray, MAX_EXTENT};
use gpuport::dynamic::RawImport;

// ---- layouts ----------------------------------------------------------------------

/// The memory a shape, strides and element size describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of all elements (the range's size when the layout is dense).
    pub bytes: usize,
    /// Row-major (C order) without gaps.
    pub c_order: bool,
    /// Column-major (Fortran order) without gaps.
    pub f_order: bool,
}

impl Layout {
    /// Whether the elements fill one contiguous range (C or Fortran order).
    pub fn is_dense(&self) -> bool {
        self.c_order || self.f_order
    }
}

/// The layout of `shape` with `strides` in bytes (None: C order) of
/// `itemsize`-byte elements. Errors (in words for a `ValueError`): sizes
/// beyond [`MAX_EXTENT`] bytes, strides of another rank.
pub fn layout(shape: &[usize], strides: Option<&[i64]>, itemsize: usize) -> Result<Layout, String> {
    let too_large = || {
        format!(
            "shape {} of {itemsize}-byte elements is too large (more than {MAX_EXTENT} bytes)",
            python::tuple(shape)
        )
    };
    let elems = shape.iter().try_fold(1usize, |acc, &e| acc.checked_mul(e)).ok_or_else(too_large)?;
    let bytes = elems.checked_mul(itemsize).filter(|&b| b as u64 <= MAX_EXTENT).ok_or_else(too_large)?;
    let Some(strides) = strides else { return Ok(Layout { bytes, c_order: true, f_order: shape.len() <= 1 }) };
    if strides.len() != shape.len() {
        return Err(format!("strides {} do not match shape {}", python::tuple(strides), python::tuple(shape)));
    }
    if elems == 0 {
        return Ok(Layout { bytes: 0, c_order: true, f_order: true });
    }
    let compact = |axes: &mut dyn Iterator<Item = usize>| {
        let mut expect = itemsize as i64;
        for a in axes {
            if shape[a] != 1 && strides[a] != expect {
                return false;
            }
            expect = expect.saturating_mul(shape[a] as i64);
        }
        true
    };
    let c_order = compact(&mut (0..shape.len()).rev());
    let f_order = compact(&mut (0..shape.len()));
    Ok(Layout { bytes, c_order, f_order })
}

/// Bytes per element of an array-interface type string such as `"<f4"`.
pub fn itemsize_of(typestr: &str) -> PyResult<usize> {
    let b = typestr.as_bytes();
    let ok = b.len() >= 3 && matches!(b[0], b'<' | b'>' | b'|' | b'=') && b[1].is_ascii_alphabetic();
    let n: Option<usize> = if ok { typestr[2..].parse().ok() } else { None };
    match n {
        Some(n) if n > 0 => Ok(n),
        _ => Err(PyValueError::new_err(format!(
            "typestr {typestr:?} is not an array-interface type string such as \"<f4\" or \"|u1\""
        ))),
    }
}

// ---- reading an interface ------------------------------------------------------------

/// What an object's `__cuda_array_interface__` says.
pub struct CaiDesc {
    pub version: Option<i64>,
    pub data: u64,
    pub read_only: bool,
    pub shape: Option<Vec<usize>>,
    pub typestr: Option<String>,
    /// In bytes; `None`: C order.
    pub strides: Option<Vec<i64>>,
    pub masked: bool,
    pub stream: Option<isize>,
}

impl CaiDesc {
    /// Reads `obj.__cuda_array_interface__`: `data` is required; a `version`
    /// present must be one the interface defines (0 to 3).
    pub fn read(obj: &Bound<'_, PyAny>) -> PyResult<CaiDesc> {
        Self::from_value(&obj.getattr("__cuda_array_interface__")?)
    }

    /// Reads the value of an object's `__cuda_array_interface__` attribute
    /// (for a caller that already fetched it: a property may be costly).
    pub fn from_value(cai: &Bound<'_, PyAny>) -> PyResult<CaiDesc> {
        let cai = cai.cast::<PyDict>().map_err(|_| PyTypeError::new_err("__cuda_array_interface__ must be a dict"))?;
        let item = |k: &str| -> PyResult<Option<Bound<'_, PyAny>>> { Ok(cai.get_item(k)?.filter(|v| !v.is_none())) };
        let bad =
            |k: &str, want: &str| PyValueError::new_err(format!("__cuda_array_interface__[{k:?}] must be {want}"));
        let version = match item("version")? {
            Some(v) => {
                let v: i64 = v.extract().map_err(|_| bad("version", "an int"))?;
                if !(0..=3).contains(&v) {
                    return Err(PyValueError::new_err(format!(
                        "CUDA Array Interface version {v} is not one the interface defines; versions 0 to 3 are read"
                    )));
                }
                Some(v)
            }
            None => None,
        };
        let data = item("data")?.ok_or_else(|| PyValueError::new_err("__cuda_array_interface__ has no \"data\""))?;
        let (data, read_only): (u64, bool) =
            data.extract().map_err(|_| bad("data", "a tuple (address: int, read_only: bool)"))?;
        let shape = match item("shape")? {
            Some(s) => Some(s.extract::<Vec<usize>>().map_err(|_| bad("shape", "a tuple of non-negative ints"))?),
            None => None,
        };
        let typestr = match item("typestr")? {
            Some(t) => Some(t.extract::<String>().map_err(|_| bad("typestr", "a str such as \"<f4\""))?),
            None => None,
        };
        let strides = match item("strides")? {
            Some(s) => Some(s.extract::<Vec<i64>>().map_err(|_| bad("strides", "None or a tuple of ints (bytes)"))?),
            None => None,
        };
        let masked = item("mask")?.is_some();
        let stream = match item("stream")? {
            Some(s) => Some(s.extract::<isize>().map_err(|_| bad("stream", "None or an int handle"))?),
            None => None,
        };
        Ok(CaiDesc { version, data, read_only, shape, typestr, strides, masked, stream })
    }

    /// The layout, when the interface gives a shape and a type string.
    pub fn layout(&self) -> PyResult<Option<Layout>> {
        let (Some(shape), Some(typestr)) = (&self.shape, &self.typestr) else { return Ok(None) };
        let itemsize = itemsize_of(typestr)?;
        layout(shape, self.strides.as_deref(), itemsize).map(Some).map_err(PyValueError::new_err)
    }
}

// ---- export ---------------------------------------------------------------------------

/// `__cuda_array_interface__` of a CUDA-resident array. The device copy
/// becomes the only current one: the consumer (CuPy, Numba, PyTorch) may
/// write it, and the next host read must copy it back.
pub fn export<'py>(py: Python<'py>, st: &mut AnyArray) -> PyResult<Bound<'py, PyDict>> {
    let not_cuda = |what: String| {
        PyAttributeError::new_err(format!(
            "__cuda_array_interface__ is defined for CUDA-resident arrays only; {what}; use __dlpack__ (ROCm and host memory have no CUDA Array Interface)"
        ))
    };
    let dtype = st.dtype();
    let typestr =
        dtype.typestr().ok_or_else(|| not_cuda(format!("{} has no array-interface type string", dtype.name())))?;
    match st {
        AnyArray::Owned(a) => {
            let dev = a.device();
            if dev.backend() != BackendKind::Cuda {
                return Err(not_cuda(format!("this array is on {}", spec(&dev))));
            }
            if !a.residency().includes(Location::Device) {
                return Err(not_cuda("its device copy is not current (call move_memory(\"device\") first)".into()));
            }
            let (data, _) = py.detach(|| a.parts(Location::Device, None)).py_err_in(py, "__cuda_array_interface__")?;
            // Pending work is handed to the consumer through a stream that
            // waits for it (an event, not a host sync); None when idle.
            let stream = if a.transfer_pending().py_err_in(py, "__cuda_array_interface__")? {
                let s = AnyStream::export_stream(&dev).py_err_in(py, "__cuda_array_interface__")?;
                a.order_on(&s).py_err_in(py, "__cuda_array_interface__")?;
                Some(s.handle())
            } else {
                None
            };
            a.mark_written(Location::Device, None).py_err_in(py, "__cuda_array_interface__")?;
            interface_dict(py, &a.shape(), typestr, data, false, None, Some(stream), 3)
        }
        AnyArray::Imported(f) => {
            let dl = f.dl();
            if dl.device_type != DLDeviceType::CUDA && dl.device_type != DLDeviceType::CUDA_MANAGED {
                return Err(not_cuda(format!("this imported array is on DLPack device {}", dl.device_type.0)));
            }
            let item = f.dtype().itemsize() as i64;
            let strides: Vec<i64> = f.strides().iter().map(|&s| s * item).collect();
            interface_dict(py, f.shape(), typestr, f.data(), f.is_read_only(), Some(strides), Some(None), 3)
        }
    }
}

// ---- import ---------------------------------------------------------------------------

/// Keeps a Python object alive from Rust (the CAI producer).
struct PyOwner(#[allow(dead_code)] Py<PyAny>);

/// Imports an object exposing `__cuda_array_interface__` (versions 0 to 3)
/// without a copy; the object is kept alive while the result (or an export
/// of it) is. With a `stream` in the interface, our default stream waits for
/// it through an event. `device` names the CUDA device of the pointer
/// (default cuda:0). CuPy, Numba and PyTorch CUDA arrays have the interface;
/// so can any object:
///
///     >>> import gpuport
///     >>> class Floats:
///     ...     __cuda_array_interface__ = {
///     ...         "version": 3, "shape": (4,), "typestr": "<f4", "data": (0, False)}
///     >>> gpuport.from_cuda_array_interface(Floats(), device="host")
///     Traceback (most recent call last):
///     gpuport.DeviceUnavailableError: CUDA Array Interface memory needs a CUDA device, not host
#[pyfunction]
#[pyo3(signature = (obj, /, device=None))]
pub fn from_cuda_array_interface(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyMemArray> {
    let desc = CaiDesc::read(obj)?;
    let Some(version) = desc.version else {
        return Err(PyValueError::new_err(
            "__cuda_array_interface__ has no \"version\"; versions 0 to 3 of the interface are read",
        ));
    };
    if desc.masked {
        return Err(PyValueError::new_err("masked CUDA arrays are not supported"));
    }
    for (missing, k) in [(desc.shape.is_none(), "shape"), (desc.typestr.is_none(), "typestr")] {
        if missing {
            return Err(PyValueError::new_err(format!("__cuda_array_interface__ has no {k:?}")));
        }
    }
    let (shape, typestr) = (desc.shape.clone().unwrap_or_default(), desc.typestr.clone().unwrap_or_default());
    let dtype = DType::from_typestr(&typestr).ok_or_else(|| {
        errors::unsupported_dtype(
            py,
            format!("typestr {typestr:?} is not supported; supported: {}", DType::supported()),
        )
    })?;
    let item = dtype.itemsize() as i64;
    let layout = desc.layout()?.unwrap_or(Layout { bytes: 0, c_order: true, f_order: true });
    crate::memarray::check_extents(py, &shape, dtype.itemsize())?;
    let strides: Vec<i64> = match &desc.strides {
        Some(bytes) => {
            if bytes.iter().any(|b| b % item != 0) {
                return Err(PyValueError::new_err(format!(
                    "strides {} (bytes) are not whole {item}-byte elements",
                    python::tuple(bytes)
                )));
            }
            bytes.iter().map(|b| b / item).collect()
        }
        None => {
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
    if layout.bytes > 0 && desc.data == 0 {
        return Err(PyValueError::new_err("CUDA Array Interface data pointer is null"));
    }
    if version >= 3 {
        if let Some(h) = desc.stream {
            if h == 0 {
                return Err(PyValueError::new_err("CUDA Array Interface stream 0 is disallowed by the spec"));
            }
            // The producer's pending work: our default stream waits for it.
            let theirs = stream_from_handle(py, &dev, h)?;
            let ev = theirs.record().py_err(py)?;
            AnyStream::default_for(&dev).wait(&ev).py_err(py)?;
        }
    }
    let ordinal = dev.info().ordinal as i32;
    let raw = RawImport {
        dtype,
        shape: shape.into(),
        strides: strides.into(),
        data: desc.data,
        dl: DLDevice { device_type: DLDeviceType::CUDA, device_id: ordinal },
        read_only: desc.read_only,
        device: dev,
    };
    // SAFETY: the CUDA Array Interface's producer states that `data` is
    // device memory of the shape, strides and type it describes, valid
    // while `obj` lives (kept here) and writable unless flagged read-only;
    // the extents were checked above.
    let f = unsafe { ImportedArray::from_raw(raw, Arc::new(PyOwner(obj.clone().unbind()))) };
    Ok(PyMemArray::from_imported(f.py_err(py)?))
}
