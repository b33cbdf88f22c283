//! Argument lists: the items of a list or tuple, the host C array the list
//! adapters own, and kernel arguments packed from ctypes values and
//! pointer-likes ([`pack_args`]). The adapter classes (`ListOf*`,
//! `KernelArgs`) are in [`crate::module`].

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyTuple, PyType};

use crate::convert::buffer::ValueBytes;
use crate::convert::pointer::{to_ptr, Place, Ptr, PyPointer, ACCEPTED};

// ---- lists -------------------------------------------------------------------------

/// The items of a list or tuple; `None` for any other object.
pub fn seq_items<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = obj.cast::<PyList>() {
        return Some(l.iter().collect());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Some(t.iter().collect());
    }
    None
}

/// The C array `v` as a kept host range (NULL when empty); the adapter
/// that owns `v` keeps it alive.
pub fn host_array<T: Copy>(v: &[T]) -> Ptr {
    if v.is_empty() {
        return Ptr::null();
    }
    Ptr::kept_at(v.as_ptr() as usize as u64, Place::Host, std::mem::size_of_val(v), false, Vec::new())
}

// ---- kernel arguments ----------------------------------------------------------------

/// One packed kernel argument.
pub enum Arg {
    /// A by-value ctypes argument.
    Value(ValueBytes),
    /// A pointer argument (8 bytes), with what keeps its memory alive.
    Pointer(Ptr),
}

/// ctypes' data types, looked up once per process: the base classes of
/// values passed by value, and their metaclasses.
struct Ctypes {
    /// `(_SimpleCData, _Pointer, Structure, Union, Array)` (`c_void_p` is a `_SimpleCData`).
    bases: Py<PyTuple>,
    /// The metaclasses of those bases (`type(c_int)`, ...).
    metas: Vec<Py<PyType>>,
}

static CTYPES: PyOnceLock<Ctypes> = PyOnceLock::new();

fn ctypes_types(py: Python<'_>) -> PyResult<&Ctypes> {
    CTYPES.get_or_try_init(py, || {
        let ct = py.import("ctypes")?;
        let mut bases = Vec::new();
        let mut metas: Vec<Py<PyType>> = Vec::new();
        for name in ["c_void_p", "_SimpleCData", "_Pointer", "Structure", "Union", "Array"] {
            let base = ct.getattr(name)?;
            let meta = base.get_type();
            if !metas.iter().any(|m| m.bind(py).is(&meta)) {
                metas.push(meta.unbind());
            }
            bases.push(base);
        }
        Ok(Ctypes { bases: PyTuple::new(py, bases)?.unbind(), metas })
    })
}

/// Whether `obj` is a ctypes value (passed by value): an instance of one of
/// ctypes' data types. Most objects answer without `isinstance`: a type
/// whose metaclass is one of ctypes' is a ctypes data type, and a type whose
/// metaclass is plain `type` cannot derive from one (a class's metaclass
/// derives from the metaclasses of its bases). Other metaclasses (ABCMeta,
/// torch's) ask `isinstance` as before.
fn is_ctypes_value(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = obj.py();
    let ct = ctypes_types(py)?;
    let meta = obj.get_type().get_type();
    if ct.metas.iter().any(|m| m.bind(py).is(&meta)) {
        return Ok(true);
    }
    if meta.is(py.get_type::<PyType>()) {
        return Ok(false);
    }
    obj.is_instance(ct.bases.bind(py).as_any())
}

/// Converts one kernel argument (`i`: its position, for errors).
fn pack_one(i: usize, it: &Bound<'_, PyAny>) -> PyResult<Arg> {
    // None and Pointer adapters first: never ctypes values, and `to_ptr`
    // takes them at once.
    if it.is_none() || it.is_instance_of::<PyPointer>() {
        return to_ptr(it).map(Arg::Pointer);
    }
    if is_ctypes_value(it)? {
        let bytes = match crate::convert::buffer::copy_bytes(it) {
            Some(b) => b,
            None => it.py().get_type::<PyBytes>().call1((it,))?.extract::<Vec<u8>>()?.into(),
        };
        return Ok(Arg::Value(bytes));
    }
    to_ptr(it).map(Arg::Pointer).map_err(|e| {
        if e.is_instance_of::<PyTypeError>(it.py()) {
            PyTypeError::new_err(format!(
                "kernel argument {i}: not a ctypes value, and a pointer argument accepts {ACCEPTED}; got {}",
                it.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        } else {
            e
        }
    })
}

/// Packs a list of kernel arguments.
pub fn pack_args(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Arg>> {
    let not_a_list = || {
        PyTypeError::new_err(format!(
            "kernel arguments are a list or tuple of ctypes values and pointer-likes ({ACCEPTED}); got {}",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    };
    // Straight from the list or tuple, without collecting the items first.
    if let Ok(l) = obj.cast::<PyList>() {
        let mut out = Vec::with_capacity(l.len());
        for (i, it) in l.iter().enumerate() {
            out.push(pack_one(i, &it)?);
        }
        return Ok(out);
    }
    let t = obj.cast::<PyTuple>().map_err(|_| not_a_list())?;
    let mut out = Vec::with_capacity(t.len());
    for (i, it) in t.iter().enumerate() {
        out.push(pack_one(i, &it)?);
    }
    Ok(out)
}

/// The kernel arguments of packed `args`, for the core's launch.
pub fn kernel_args_of(args: &[Arg]) -> gpuport::KernelArgs {
    let mut k = gpuport::KernelArgs::with_capacity(args.len());
    for a in args {
        match a {
            Arg::Value(b) => k.push_bytes(b),
            Arg::Pointer(p) => k.push(&p.addr),
        };
    }
    k
}

/// Whether any pointer argument keeps memory alive (an adapter, a held
/// buffer or DLPack tensor, an allocation): only then must a launch park
/// something. By-value bytes are copied by the launch itself (CUDA and HIP
/// copy kernel parameters when the launch call returns; the host backend
/// clones them into its task), and raw unknown addresses and NULL have no
/// owner gpuport could keep.
pub fn holds_memory(args: &[Arg]) -> bool {
    args.iter().any(|a| matches!(a, Arg::Pointer(p) if !p.owners.is_empty()))
}
