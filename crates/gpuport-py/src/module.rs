//! The HIP-Python-style list adapters (`ListOfBytes`, `ListOfPointer`,
//! `ListOfInt`, `ListOfUnsigned`, `ListOfUnsignedLong`) and `KernelArgs`,
//! the argument adapters of module loads and kernel launches:
//! subclasses of `Pointer` that own a C array built from a list or tuple,
//! or wrap anything `Pointer` accepts. All are `frozen`: their state is
//! fixed at construction, so threads may share them freely. Their lists
//! are converted in [`crate::convert::arglist`].

use std::ffi::c_int;
use std::os::raw::c_ulong;

use gpuport::dynamic::module::c_string;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::convert::arglist::{host_array, kernel_args_of, pack_args, seq_items, Arg};
use crate::convert::pointer::{to_ptr, Ptr, PyPointer, ACCEPTED};

macro_rules! list_of_numbers {
    ($rust:ident, $pyname:literal, $t:ty, $what:literal) => {
        #[doc = concat!("A C array of ", $what, " (owning, from a list or tuple) or anything Pointer accepts (non-owning).")]
        ///
        ///     >>> from gpuport import runtime as rt
        #[doc = concat!("    >>> values = rt.", $pyname, "([1, 2, 3])")]
        ///     >>> values.is_owner, len(values), values.memory_kind
        ///     (True, 3, 'host')
        #[doc = concat!("    >>> rt.", $pyname, "(values).is_owner          # wraps the same array")]
        ///     False
        #[pyclass(module = "gpuport._core", name = $pyname, extends = PyPointer, subclass, frozen)]
        pub struct $rust {
            values: Option<Vec<$t>>,
        }

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = (obj=None))]
            fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
                let Some(o) = obj else {
                    return Ok(PyClassInitializer::from(PyPointer::from_ptr(Ptr::null())).add_subclass($rust { values: None }));
                };
                if let Some(items) = seq_items(o) {
                    let mut v: Vec<$t> = Vec::with_capacity(items.len());
                    for (i, it) in items.iter().enumerate() {
                        v.push(it.extract::<$t>().map_err(|_| {
                            PyTypeError::new_err(format!(
                                concat!($pyname, ": item {} ({}) is not convertible to ", $what),
                                i,
                                it.repr().map(|r| r.to_string()).unwrap_or_default()
                            ))
                        })?);
                    }
                    let p = host_array(&v);
                    return Ok(PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass($rust { values: Some(v) }));
                }
                let p = to_ptr(o).map_err(|e| {
                    if e.is_instance_of::<PyTypeError>(o.py()) {
                        PyTypeError::new_err(format!(
                            concat!($pyname, " accepts a list or tuple of ", $what, ", or {}; got {}"),
                            ACCEPTED,
                            o.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                        ))
                    } else {
                        e
                    }
                })?;
                Ok(PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass($rust { values: None }))
            }

            /// Whether this adapter owns its C array (made from a list or tuple).
            #[getter]
            fn is_owner(&self) -> bool {
                self.values.is_some()
            }

            /// The values of an owned array (None when not owned).
            ///
            ///     >>> from gpuport import runtime as rt
            #[doc = concat!("    >>> rt.", $pyname, "((4, 5)).tolist()")]
            ///     [4, 5]
            #[doc = concat!("    >>> print(rt.", $pyname, "(None).tolist())")]
            ///     None
            fn tolist(&self) -> Option<Vec<$t>> {
                self.values.clone()
            }

            fn __len__(&self) -> PyResult<usize> {
                self.values.as_ref().map(|v| v.len()).ok_or_else(|| PyTypeError::new_err("len() of a non-owning list adapter"))
            }
        }
    };
}

list_of_numbers!(PyListOfInt, "ListOfInt", c_int, "C int");
list_of_numbers!(PyListOfUnsigned, "ListOfUnsigned", u32, "C unsigned");
list_of_numbers!(PyListOfUnsignedLong, "ListOfUnsignedLong", c_ulong, "C unsigned long");

/// NUL-terminated strings and the C array of their addresses.
type OwnedStrings = (Vec<Box<[u8]>>, Vec<u64>);

/// A C array of `const char*` (owning, from a list or tuple of bytes) or
/// anything Pointer accepts (non-owning): `module_load`'s options.
///
///     >>> from gpuport import runtime as rt
///     >>> options = rt.ListOfBytes([b"-default-device", b"-lineinfo"])
///     >>> options.is_owner, len(options), options.nbytes   # two 8-byte addresses
///     (True, 2, 16)
///     >>> rt.ListOfBytes(options).is_owner       # wraps the same array
///     False
#[pyclass(module = "gpuport._core", name = "ListOfBytes", extends = PyPointer, subclass, frozen)]
pub struct PyListOfBytes {
    /// The NUL-terminated strings and the array of their addresses.
    strings: Option<OwnedStrings>,
}

impl PyListOfBytes {
    /// The strings (without the terminating NUL), when owned.
    pub fn strings(&self) -> Option<Vec<String>> {
        self.strings
            .as_ref()
            .map(|(s, _)| s.iter().map(|b| String::from_utf8_lossy(&b[..b.len() - 1]).into_owned()).collect())
    }
}

#[pymethods]
impl PyListOfBytes {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        let Some(o) = obj else {
            return Ok(PyClassInitializer::from(PyPointer::from_ptr(Ptr::null()))
                .add_subclass(PyListOfBytes { strings: None }));
        };
        if let Some(items) = seq_items(o) {
            let mut strings = Vec::with_capacity(items.len());
            for (i, it) in items.iter().enumerate() {
                let b = it.cast::<PyBytes>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "ListOfBytes: item {i} is {}, not bytes",
                        it.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                    ))
                })?;
                let s = c_string("ListOfBytes", i, b.as_bytes()).map_err(|e| PyValueError::new_err(e.to_string()))?;
                strings.push(s);
            }
            let addrs: Vec<u64> = strings.iter().map(|s| s.as_ptr() as usize as u64).collect();
            let p = host_array(&addrs);
            return Ok(PyClassInitializer::from(PyPointer::from_ptr(p))
                .add_subclass(PyListOfBytes { strings: Some((strings, addrs)) }));
        }
        let p = to_ptr(o).map_err(|e| {
            if e.is_instance_of::<PyTypeError>(o.py()) {
                PyTypeError::new_err(format!(
                    "ListOfBytes accepts a list or tuple of bytes, or {ACCEPTED}; got {}",
                    o.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ))
            } else {
                e
            }
        })?;
        Ok(PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(PyListOfBytes { strings: None }))
    }

    /// Whether this adapter owns its C array.
    #[getter]
    fn is_owner(&self) -> bool {
        self.strings.is_some()
    }

    /// The strings of an owned array (None when not owned).
    ///
    ///     >>> from gpuport import runtime as rt
    ///     >>> rt.ListOfBytes([b"-O3"]).tolist()
    ///     [b'-O3']
    fn tolist<'py>(&self, py: Python<'py>) -> Option<Vec<Bound<'py, PyBytes>>> {
        self.strings.as_ref().map(|(s, _)| s.iter().map(|b| PyBytes::new(py, &b[..b.len() - 1])).collect())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.strings
            .as_ref()
            .map(|(s, _)| s.len())
            .ok_or_else(|| PyTypeError::new_err("len() of a non-owning list adapter"))
    }
}

/// A C array of pointers (owning, from a list or tuple of anything Pointer
/// accepts; the elements' memory is kept alive) or anything Pointer accepts
/// (non-owning).
///
///     >>> from gpuport import runtime as rt
///     >>> a, b = rt.malloc(8, device="host"), rt.malloc(8, device="host")
///     >>> ptrs = rt.ListOfPointer([a, b, None])
///     >>> ptrs.is_owner, len(ptrs), ptrs.nbytes
///     (True, 3, 24)
#[pyclass(module = "gpuport._core", name = "ListOfPointer", extends = PyPointer, subclass, frozen)]
pub struct PyListOfPointer {
    items: Option<(Vec<Ptr>, Vec<u64>)>,
}

#[pymethods]
impl PyListOfPointer {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        let Some(o) = obj else {
            return Ok(PyClassInitializer::from(PyPointer::from_ptr(Ptr::null()))
                .add_subclass(PyListOfPointer { items: None }));
        };
        if let Some(items) = seq_items(o) {
            let mut ptrs = Vec::with_capacity(items.len());
            for (i, it) in items.iter().enumerate() {
                ptrs.push(to_ptr(it).map_err(|e| {
                    if e.is_instance_of::<PyTypeError>(o.py()) {
                        PyTypeError::new_err(format!("ListOfPointer: item {i}: {e}"))
                    } else {
                        e
                    }
                })?);
            }
            let addrs: Vec<u64> = ptrs.iter().map(|p| p.addr).collect();
            let p = host_array(&addrs);
            return Ok(PyClassInitializer::from(PyPointer::from_ptr(p))
                .add_subclass(PyListOfPointer { items: Some((ptrs, addrs)) }));
        }
        let p = to_ptr(o).map_err(|e| {
            if e.is_instance_of::<PyTypeError>(o.py()) {
                PyTypeError::new_err(format!(
                    "ListOfPointer accepts a list or tuple of pointer-likes, or {ACCEPTED}; got {}",
                    o.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ))
            } else {
                e
            }
        })?;
        Ok(PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(PyListOfPointer { items: None }))
    }

    /// Whether this adapter owns its C array.
    #[getter]
    fn is_owner(&self) -> bool {
        self.items.is_some()
    }

    /// The addresses of an owned array (None when not owned).
    ///
    ///     >>> from gpuport import runtime as rt
    ///     >>> a = rt.malloc(8, device="host")
    ///     >>> rt.ListOfPointer([a, None]).tolist() == [int(a), 0]
    ///     True
    fn tolist(&self) -> Option<Vec<u64>> {
        self.items.as_ref().map(|(_, a)| a.clone())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.items
            .as_ref()
            .map(|(_, a)| a.len())
            .ok_or_else(|| PyTypeError::new_err("len() of a non-owning list adapter"))
    }
}

// ---- kernel arguments ----------------------------------------------------------------

/// Kernel arguments for ``launch_kernel``: a list or tuple whose entries are
/// ctypes values (``c_int``, ``c_float``, ``c_uint64``, structures, ...;
/// passed by value) or anything ``Pointer`` accepts (passed as an address;
/// the memory is kept alive while the adapter is, and while a launch that
/// uses it is pending). ``int(args)`` is the address of the packed bytes.
///
///     >>> import ctypes
///     >>> from gpuport import runtime as rt
///     >>> buf = rt.malloc(16, device="host")
///     >>> args = rt.KernelArgs([buf, ctypes.c_uint64(4), ctypes.c_uint32(7)])
///     >>> len(args), args.sizes()
///     (3, [8, 8, 4])
///     >>> f = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
///     >>> rt.launch_kernel(f, 1, 4, args)    # fills 4 uint32 of buf with 7
///     >>> out = bytearray(16); rt.memcpy(out, buf, 16); bytes(out[:8])
///     b'\x07\x00\x00\x00\x07\x00\x00\x00'
#[pyclass(module = "gpuport._core", name = "KernelArgs", extends = PyPointer, subclass, frozen)]
pub struct PyKernelArgs {
    pub args: Vec<Arg>,
    packed: Vec<u8>,
}

impl PyKernelArgs {
    /// The adapter for a list of arguments (None: no arguments).
    pub fn init(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        let args = match obj {
            None => Vec::new(),
            Some(o) if o.is_none() => Vec::new(),
            Some(o) => pack_args(o)?,
        };
        let mut packed = Vec::new();
        for a in &args {
            match a {
                Arg::Value(b) => packed.extend_from_slice(b),
                Arg::Pointer(p) => packed.extend_from_slice(&p.addr.to_ne_bytes()),
            }
        }
        let p = host_array(&packed);
        Ok(PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(PyKernelArgs { args, packed }))
    }

    pub fn to_kernel_args(&self) -> gpuport::KernelArgs {
        kernel_args_of(&self.args)
    }
}

#[pymethods]
impl PyKernelArgs {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        Self::init(obj)
    }

    fn __len__(&self) -> usize {
        self.args.len()
    }

    /// The size in bytes of each argument (a pointer takes 8).
    ///
    ///     >>> import ctypes
    ///     >>> from gpuport import runtime as rt
    ///     >>> rt.KernelArgs([ctypes.c_int8(1), ctypes.c_double(2.0), None]).sizes()
    ///     [1, 8, 8]
    fn sizes(&self) -> Vec<usize> {
        self.args
            .iter()
            .map(|a| match a {
                Arg::Value(b) => b.len(),
                Arg::Pointer(_) => 8,
            })
            .collect()
    }

    /// The packed argument bytes, back to back (no padding).
    ///
    ///     >>> import ctypes
    ///     >>> from gpuport import runtime as rt
    ///     >>> rt.KernelArgs([ctypes.c_uint16(1), ctypes.c_uint8(2)]).packed()
    ///     b'\x01\x00\x02'
    fn packed<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.packed)
    }
}
