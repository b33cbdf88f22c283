//! Element types from Python objects: a dtype named by a string, a builtin
//! type, or a NumPy, PyTorch or JAX dtype becomes the core's run-time
//! [`DType`]; NumPy's casting rules for `read_numpy_array`; a `fill`
//! value converted to a dtype's bytes ([`fill_value`]).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;

use crate::convert::error;

pub use gpuport::dynamic::array_access::FillValue;
pub use gpuport::dynamic::dtype::unsupported_dlpack_dtype;
pub use gpuport::dynamic::{DType, MAX_RANK};

/// A dtype from any Python object that names one: a string, the builtin
/// types `bool`/`int`/`float`/`complex`, a NumPy dtype or scalar type, a
/// PyTorch or JAX dtype (through its `name`, `__name__` or `str()`).
pub fn dtype_from_py(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    let py = obj.py();
    if obj.is_none() {
        return Ok(DType::Float64);
    }
    if let Some(d) = interned_name(obj) {
        return Ok(d);
    }
    let mut candidates = Vec::new();
    if let Ok(s) = obj.extract::<String>() {
        candidates.push(s);
    } else {
        for attr in ["name", "__name__"] {
            if let Ok(v) = obj.getattr(attr).and_then(|v| v.extract::<String>()) {
                candidates.push(v);
            }
        }
        if let Ok(v) = obj.str().and_then(|s| s.extract::<String>()) {
            candidates.push(v);
        }
    }
    for c in &candidates {
        if let Some(d) = DType::parse(c) {
            return Ok(d);
        }
    }
    let shown = obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "<unprintable>".into());
    Err(error::unsupported_dtype(
        py,
        format!("dtype {shown} is not supported; supported dtypes: {}", DType::supported()),
    ))
}

/// The dtype whose name `obj` is, when `obj` is that name's interned
/// string: CPython interns string constants that look like identifiers
/// (`"float32"` written in code), so a dtype named in a call is found by
/// address, with no UTF-8 copy (which the limited API makes for any other
/// string) and no parse.
fn interned_name(obj: &Bound<'_, PyAny>) -> Option<DType> {
    static NAMES: PyOnceLock<Vec<(Py<PyString>, DType)>> = PyOnceLock::new();
    let py = obj.py();
    let names =
        NAMES.get_or_init(py, || DType::ALL.iter().map(|&d| (PyString::intern(py, d.name()).unbind(), d)).collect());
    names.iter().find(|(n, _)| n.as_ptr() == obj.as_ptr()).map(|&(_, d)| d)
}

/// NumPy's casting rules, least permissive first (`numpy.can_cast`).
pub const CASTINGS: [&str; 5] = ["no", "equiv", "safe", "same_kind", "unsafe"];

/// The ml_dtypes scalar type of `d` (`ml_dtypes.float8_e4m3fn`) for the
/// fp8/fp6/fp4 dtypes and bfloat16, when ml_dtypes is installed (and has it).
pub fn ml_dtype<'py>(py: Python<'py>, d: DType) -> Option<Bound<'py, PyAny>> {
    if !d.in_ml_dtypes() {
        return None;
    }
    py.import("ml_dtypes").ok()?.getattr(d.name()).ok()
}

/// The NumPy dtype of `d`, where NumPy has one (not complex32); for
/// bfloat16 and the fp8/fp6/fp4 dtypes, the one ml_dtypes registers, when
/// it is installed.
fn numpy_dtype<'py>(np: &Bound<'py, PyModule>, d: DType) -> Option<Bound<'py, PyAny>> {
    if d.in_ml_dtypes() {
        let ml = ml_dtype(np.py(), d)?;
        return np.getattr("dtype").ok()?.call1((ml,)).ok();
    }
    np.getattr("dtype").ok()?.call1((d.name(),)).ok()
}

/// The NumPy dtype a Python value of `d` converts through: NumPy's own, or
/// ml_dtypes' for bfloat16 and the fp8/fp6/fp4 dtypes; `None` where neither
/// has one (complex32; ml_dtypes not installed).
pub fn value_dtype<'py>(np: &Bound<'py, PyModule>, d: DType) -> Option<Bound<'py, PyAny>> {
    match ml_dtype(np.py(), d) {
        Some(ml) => np.getattr("dtype").ok()?.call1((ml,)).ok(),
        None if d.in_ml_dtypes() => None,
        None => numpy_dtype(np, d),
    }
}

/// A `fill` value for an array of `d`, for the core's rules
/// (`AnyArray::fill_value`): `bytes` as given; another value converted by
/// NumPy to `d` (`numpy.asarray(value, dtype)`, through ml_dtypes for the
/// low-precision floats), or not converted where NumPy has no such dtype.
pub fn fill_value(value: &Bound<'_, PyAny>, d: DType) -> PyResult<FillValue> {
    if let Ok(b) = value.cast::<pyo3::types::PyBytes>() {
        return Ok(FillValue::Bytes(b.as_bytes().to_vec()));
    }
    let np = value.py().import("numpy")?;
    let Some(nd) = value_dtype(&np, d) else { return Ok(FillValue::NotConverted) };
    let converted = np.call_method1("asarray", (value, nd))?;
    Ok(FillValue::Converted {
        shape: converted.getattr("shape")?.extract()?,
        bytes: converted.call_method0("tobytes")?.extract()?,
    })
}

/// The ml_dtypes dtype of a NumPy array (`bfloat16`, `float8_e4m3fn`, ...),
/// which NumPy cannot export through DLPack.
pub fn low_precision_numpy_dtype(obj: &Bound<'_, PyAny>) -> PyResult<Option<DType>> {
    let py = obj.py();
    let Ok(np) = py.import("numpy") else { return Ok(None) };
    if !obj.is_instance(&np.getattr("ndarray")?)? {
        return Ok(None);
    }
    let name: String = obj.getattr("dtype")?.getattr("name")?.extract()?;
    Ok(DType::parse(&name).filter(|d| d.in_ml_dtypes()))
}

/// `obj` in native byte order, for `asarray`: a NumPy array of the other
/// byte order is converted by NumPy (a copy, as
/// `x.astype(x.dtype.newbyteorder("="))`), as `read_numpy_array`'s casts
/// convert it; DLPack cannot describe it. Anything else is returned as is.
pub fn native_byte_order<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let Ok(np) = py.import("numpy") else { return Ok(obj.clone()) };
    if !obj.is_instance(&np.getattr("ndarray")?)? {
        return Ok(obj.clone());
    }
    let dt = obj.getattr("dtype")?;
    if dt.getattr("isnative")?.extract::<bool>()? {
        return Ok(obj.clone());
    }
    obj.call_method1("astype", (dt.call_method1("newbyteorder", ("=",))?,))
}

/// How a NumPy dtype reads in a message: `float32`, or `>f4` when not native.
fn shown(dt: &Bound<'_, PyAny>) -> String {
    let native = dt.getattr("isnative").and_then(|v| v.extract::<bool>()).unwrap_or(true);
    let attr = if native { "name" } else { "str" };
    dt.getattr(attr).and_then(|v| v.extract::<String>()).unwrap_or_else(|_| dt.to_string())
}

/// Whether `their` is a NumPy dtype of `to`'s name in native byte order
/// (what `numpy.dtype(their) == numpy.dtype(to)` says, with two attribute reads).
fn same_native_dtype(their: &Bound<'_, PyAny>, to: DType) -> bool {
    let native = their.getattr("isnative").and_then(|v| v.extract::<bool>()).unwrap_or(false);
    native
        && their
            .getattr("name")
            .is_ok_and(|n| n.extract::<std::borrow::Cow<'_, str>>().is_ok_and(|n| DType::parse(&n) == Some(to)))
}

/// `array` ready to be read into a MemArray of dtype `to`: itself when the
/// dtypes agree, else cast by NumPy (`astype`) if the NumPy rule `casting`
/// allows it (`numpy.can_cast`), else a `TypeError` naming the rule that
/// would. Dtypes NumPy lacks (bfloat16, complex32; the fp8/fp6/fp4 dtypes
/// unless ml_dtypes is installed) are read only as they are.
pub fn cast_for_read<'py>(array: &Bound<'py, PyAny>, to: DType, casting: &str) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::exceptions::{PyTypeError, PyValueError};
    let py = array.py();
    if !CASTINGS.contains(&casting) {
        return Err(PyValueError::new_err(format!(
            "read_numpy_array: casting must be one of 'no', 'equiv', 'safe', 'same_kind', 'unsafe' (as for numpy.can_cast), not {casting:?}"
        )));
    }
    let Ok(their) = array.getattr("dtype") else { return Ok(array.clone()) };
    if same_native_dtype(&their, to) {
        return Ok(array.clone()); // the common case, without NumPy calls
    }
    let np = py.import("numpy")?;
    let ours = dtype_from_py(&their).ok();
    // NumPy's view of the source dtype: a NumPy dtype, or (PyTorch, JAX, a
    // MemArray's name) the NumPy dtype of the same name.
    let src = np.getattr("dtype")?.call1((&their,)).ok().or_else(|| ours.and_then(|d| numpy_dtype(&np, d)));
    match (src, numpy_dtype(&np, to)) {
        (Some(src), Some(dst)) => {
            if src.eq(&dst)? {
                return Ok(array.clone());
            }
            let can = |rule: &str| -> PyResult<bool> { np.call_method1("can_cast", (&src, &dst, rule))?.extract() };
            if !can(casting)? {
                let mut least = "unsafe";
                for rule in CASTINGS {
                    if can(rule)? {
                        least = rule;
                        break;
                    }
                }
                let loss = if least == "unsafe" {
                    " and may lose values (NaN and fractions in integers, imaginary parts, values out of range)"
                } else {
                    ""
                };
                let default = if casting == "same_kind" { " (the default)" } else { "" };
                return Err(PyTypeError::new_err(format!(
                    "read_numpy_array: cannot cast {} to {} under casting={casting:?}{default}; casting={least:?} allows it{loss}",
                    shown(&src),
                    shown(&dst)
                )
                .replace('"', "'")));
            }
            let cast = || -> PyResult<Bound<'py, PyAny>> {
                if array.hasattr("astype")? {
                    array.call_method1("astype", (&dst,))
                } else {
                    np.call_method1("asarray", (array,))?.call_method1("astype", (&dst,))
                }
            };
            if casting != "unsafe" {
                return cast();
            }
            // Asked for: NumPy's ComplexWarning about the dropped imaginary part is not news.
            let warnings = py.import("warnings")?;
            let guard = warnings.call_method0("catch_warnings")?;
            guard.call_method0("__enter__")?;
            let ignored = np
                .getattr("exceptions")
                .and_then(|e| e.getattr("ComplexWarning"))
                .and_then(|w| warnings.call_method1("simplefilter", ("ignore", w)));
            let out = ignored.and_then(|_| cast());
            guard.call_method1("__exit__", (py.None(), py.None(), py.None()))?;
            out
        }
        _ if ours.is_none() || ours == Some(to) => Ok(array.clone()),
        _ => Err(PyTypeError::new_err(format!(
            "read_numpy_array: NumPy cannot cast {} to {}; pass an array of dtype {}",
            ours.map_or("this dtype", |d| d.name()),
            to.name(),
            to.name()
        ))),
    }
}
