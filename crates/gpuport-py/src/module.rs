//! Modules, their functions and kernel launches for Python
//! (`gpuport.runtime.module_load`, `module_get_function`, `launch_kernel`),
//! and their argument adapters: the HIP-Python-style list adapters
//! (`ListOfBytes`, `ListOfPointer`, `ListOfInt`, `ListOfUnsigned`,
//! `ListOfUnsignedLong`) and `KernelArgs`: subclasses of `Pointer` that own a C array built from a list or tuple,
//! or wrap anything `Pointer` accepts. All are `frozen`: their state is
//! fixed at construction, so threads may share them freely. Their lists
//! are converted in [`crate::convert::arglist`].

use std::ffi::c_int;
use std::os::raw::c_ulong;

use gpuport::dynamic::module::c_string;
use gpuport::dynamic::runtime;
use gpuport::dynamic::{keep, AnyKernel, AnyModule, Code};
use gpuport::LaunchConfig;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString, PyTuple};

use crate::convert::arglist::{holds_memory, host_array, kernel_args_of, pack_args, seq_items, Arg};
use crate::convert::device::resolve_device;
use crate::convert::error::IntoPyResult;
use crate::convert::pointer::{to_ptr, Ptr, PyPointer, ACCEPTED};
use crate::convert::stream::stream_choice;

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

// ---- modules and kernels --------------------------------------------------------------

/// A loaded module (from ``module_load``).
///
///     >>> from gpuport import runtime as rt
///     >>> m = rt.module_load(device="host", name="builtins")
///     >>> m.name
///     'builtins'
#[pyclass(module = "gpuport._core", name = "Module", frozen)]
pub struct PyModule_ {
    inner: AnyModule,
    name: String,
}

#[pymethods]
impl PyModule_ {
    /// The module's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    fn __repr__(&self) -> String {
        format!("<Module {:?}>", self.name)
    }
}

/// A kernel of a module (from ``module_get_function``); keeps the module alive.
///
///     >>> from gpuport import runtime as rt
///     >>> f = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
///     >>> f.name
///     'gpuport_fill_u32'
#[pyclass(module = "gpuport._core", name = "Function", frozen)]
pub struct PyFunction {
    inner: AnyKernel,
    name: String,
    _module: Py<PyModule_>,
}

#[pymethods]
impl PyFunction {
    /// The kernel's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    fn __repr__(&self) -> String {
        format!("<Function {:?}>", self.name)
    }
}

fn options_of(options: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(o) = options.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    if let Ok(l) = o.cast::<PyListOfBytes>() {
        return l.get().strings().ok_or_else(|| {
            PyValueError::new_err("options: a non-owning ListOfBytes cannot be read; pass a list of bytes or str")
        });
    }
    let err = || PyTypeError::new_err("options is a list or tuple of bytes or str, or a ListOfBytes");
    let items: Vec<Bound<'_, PyAny>> = o.try_iter().map_err(|_| err())?.collect::<PyResult<_>>()?;
    if o.is_instance_of::<PyString>() || o.is_instance_of::<PyBytes>() {
        return Err(err());
    }
    items
        .iter()
        .map(|i| {
            if let Ok(b) = i.cast::<PyBytes>() {
                Ok(String::from_utf8_lossy(b.as_bytes()).into_owned())
            } else {
                i.extract::<String>().map_err(|_| err())
            }
        })
        .collect()
}

/// Loads a module on ``device``: ``code`` None (gpuport's built-in kernels),
/// kernel source (str or bytes, compiled by NVRTC/hiprtc with ``options``:
/// a list of bytes or str, or a ListOfBytes), PTX text, or a cubin/fatbin/
/// code object (bytes). ``kind`` ("builtin", "source", "ptx", "binary")
/// is inferred when None: bytes starting with ELF or fatbin magic are a
/// binary, text with ``.version`` and ``.target`` lines is PTX, other
/// text is source. The host backend runs only the built-ins.
///
///     >>> from gpuport import runtime as rt
///     >>> m = rt.module_load(device="host")  # gpuport's built-in kernels
///     >>> m.name
///     'module'
///     >>> rt.module_load('extern "C" __global__ void k() {}', device="host")
///     Traceback (most recent call last):
///     gpuport.UnsupportedError: compiling kernel source is not supported by the host backend: ...
#[pyfunction]
#[pyo3(signature = (code=None, options=None, kind=None, name="module", device=None))]
pub fn module_load(
    py: Python<'_>,
    code: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyAny>>,
    kind: Option<&str>,
    name: &str,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyModule_> {
    keep::prune();
    let options = options_of(options)?;
    let code = match code.filter(|c| !c.is_none()) {
        None => Code::Builtin,
        Some(c) => {
            let bytes = if let Ok(s) = c.extract::<String>() {
                s.into_bytes()
            } else if let Ok(b) = c.cast::<PyBytes>() {
                b.as_bytes().to_vec()
            } else {
                return Err(PyTypeError::new_err(format!(
                    "module code is None (built-ins), str or bytes; got {}",
                    c.get_type().name()?
                )));
            };
            Code::from_bytes(bytes, kind).py_err(py)?
        }
    };
    let dev = resolve_device(py, device)?;
    let name = name.to_string();
    let inner = py.detach(|| AnyModule::load(&dev, &code, &name, &options)).py_err(py)?;
    Ok(PyModule_ { inner, name })
}

/// The kernel ``name`` of ``module``.
///
///     >>> from gpuport import runtime as rt
///     >>> f = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
///     >>> f
///     <Function "gpuport_fill_u32">
#[pyfunction]
pub fn module_get_function(py: Python<'_>, module: &Bound<'_, PyModule_>, name: &str) -> PyResult<PyFunction> {
    let m = module.get();
    let inner = m.inner.kernel(name).py_err(py)?;
    Ok(PyFunction { inner, name: name.to_string(), _module: module.clone().unbind() })
}

fn dim3(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<[u32; 3]> {
    let err = || PyTypeError::new_err(format!("{what} is an int or a tuple of 1 to 3 ints (x, y, z)"));
    // The common shapes first, without a failed conversion's exception.
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<u32>().map(|x| [x, 1, 1]).map_err(|_| err());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        if t.is_empty() || t.len() > 3 {
            return Err(err());
        }
        let mut out = [1u32; 3];
        for (o, v) in out.iter_mut().zip(t.iter()) {
            *o = v.extract().map_err(|_| err())?;
        }
        return Ok(out);
    }
    if let Ok(x) = obj.extract::<u32>() {
        return Ok([x, 1, 1]);
    }
    let v: Vec<u32> = obj.extract().map_err(|_| err())?;
    if v.is_empty() || v.len() > 3 {
        return Err(err());
    }
    let mut out = [1u32; 3];
    out[..v.len()].copy_from_slice(&v);
    Ok(out)
}

/// Launches ``func`` with ``grid`` and ``block`` (an int or a tuple of up to
/// 3 ints), ``args`` (a KernelArgs, or a list/tuple of ctypes values and
/// pointer-likes), ``shared_mem`` bytes of dynamic shared memory, on
/// ``stream`` (default: the device's default stream), without waiting. The
/// arguments must match the kernel's parameters; pointer arguments are the
/// caller's responsibility on GPUs (as in HIP), and are checked on the host
/// backend. Their memory is kept alive until the launch has run.
///
///     >>> import ctypes, numpy as np
///     >>> from gpuport import runtime as rt
///     >>> f = rt.module_get_function(rt.module_load(device="host"), "gpuport_fill_u32")
///     >>> a = rt.malloc(4 * 256, device="host")
///     >>> rt.launch_kernel(f, 1, 256, [a, ctypes.c_uint64(256), ctypes.c_uint32(9)])
///     >>> out = np.zeros(256, dtype=np.uint32)
///     >>> rt.memcpy(out, a, out.nbytes)      # on the same (default) stream
///     >>> bool((out == 9).all())
///     True
#[pyfunction]
#[pyo3(signature = (func, grid, block, args=None, shared_mem=0, stream=None))]
pub fn launch_kernel(
    py: Python<'_>,
    func: &Bound<'_, PyFunction>,
    grid: &Bound<'_, PyAny>,
    block: &Bound<'_, PyAny>,
    args: Option<&Bound<'_, PyAny>>,
    shared_mem: u32,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let f = func.get();
    let config = LaunchConfig { grid: dim3(grid, "grid")?, block: dim3(block, "block")?, shared_mem_bytes: shared_mem };
    let stream = stream_choice(stream)?;
    // The arguments: none, a KernelArgs (its pointer arguments' owners stay
    // with it), or a list or tuple converted here, without a KernelArgs object.
    let adapter = args.filter(|a| !a.is_none()).map(|a| a.cast::<PyKernelArgs>().map_err(|_| a)).transpose();
    let list: Vec<Arg> = match &adapter {
        Err(a) => pack_args(a)?,
        Ok(_) => Vec::new(),
    };
    let (arg_list, kernel_args): (&[Arg], gpuport::KernelArgs) = match &adapter {
        Ok(None) => (&[], gpuport::KernelArgs::new()),
        Ok(Some(k)) => (&k.get().args, k.get().to_kernel_args()),
        Err(_) => (&list, kernel_args_of(&list)),
    };
    let first = match arg_list.first() {
        Some(Arg::Pointer(p)) => Some(p.range()),
        _ => None,
    };
    // What must outlive the launch: the owners of its pointer arguments'
    // memory (a DeviceArray, a held buffer or DLPack tensor, an allocation
    // a raw address lies in), and a foreign stream's object, where one
    // named the stream. Nothing else: the driver copies the argument bytes
    // during the launch call, so a launch whose pointers hold nothing (no
    // arguments, values only, NULL or raw device addresses, which are the
    // caller's responsibility as in HIP) records no event.
    let held: Option<Box<dyn Send>> = match (&adapter, holds_memory(arg_list)) {
        (_, false) => None,
        // The adapter (frozen) keeps its pointer arguments' owners.
        (Ok(Some(k)), true) => Some(Box::new(Bound::clone(k).unbind())),
        // The packed list itself, moved: its pointers hold their owners.
        (_, true) => Some(Box::new(list)),
    };
    let owners = (held.is_some() || stream.owner.is_some()).then_some((held, stream.owner));
    // SAFETY: on GPUs the arguments are the caller's contract, as with
    // HIP's hipModuleLaunchKernel (documented); on the host backend the
    // runtime runs only the built-ins it checks. `first` is the range of
    // the first pointer argument. The owners of the pointer arguments'
    // memory are kept until the launch has run.
    unsafe { runtime::launch_and_keep(&f.inner, &f.name, config, &kernel_args, first.as_ref(), stream.choice, owners) }
        .py_err_in(py, "launch_kernel")
}
