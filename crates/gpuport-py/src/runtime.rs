//! The low-level runtime for Python (`gpuport.runtime`): malloc/free,
//! memcpy (direction given or inferred), memset, modules and kernel launch,
//! taking every pointer argument through the conversions of
//! [`crate::convert::pointer`].
//!
//! Each call converts its arguments (pointer-likes into `Ptr`s and their
//! ranges, the stream into a `StreamChoice`, names into the core's
//! `CopyDirection` and `MemoryKind`) and makes one call into
//! `gpuport::dynamic::runtime`, which drops the operands of completed work
//! (with the GIL held, so the Python objects among them are released under
//! it), picks the device and stream, checks, enqueues and waits (without
//! the GIL), and keeps the operands of asynchronous work until the stream
//! passes it.

use gpuport::dynamic::device_array::{self, FreeTarget};
use gpuport::dynamic::runtime::{self, Blocking, CopyDirection, Enqueued, StreamChoice, Whole};
use gpuport::LaunchConfig;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyInt, PyString, PyTuple};

use crate::convert::arglist::{holds_memory, kernel_args_of, pack_args, Arg};
use crate::convert::device::resolve_device;
use crate::convert::pointer::{to_ptr, to_range, Ptr};
use crate::convert::stream::stream_choice;
use crate::errors::IntoPyResult;
use crate::module::{PyKernelArgs, PyListOfBytes};
use crate::raw::PyDeviceArray;
use gpuport::dynamic::{keep, AnyKernel, AnyModule, Code};

// ---- pending asynchronous work --------------------------------------------------------

/// Drops the operands of completed asynchronous work (called with the GIL
/// held, so the Python objects among them are released under it).
fn prune() {
    keep::prune();
}

/// Number of asynchronous operations whose operands are still held (for tests).
#[pyfunction]
pub fn _pending_operations() -> usize {
    prune();
    keep::pending()
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

// ---- copies ---------------------------------------------------------------------------

/// `memcpy`'s `kind`: None, a name, or a `hipMemcpyKind` int.
fn direction_of(kind: Option<&Bound<'_, PyAny>>) -> PyResult<CopyDirection> {
    let Some(k) = kind.filter(|k| !k.is_none()) else { return Ok(CopyDirection::Default) };
    let direction = if let Ok(i) = k.extract::<i64>() {
        CopyDirection::from_hip_kind(i)
    } else if let Ok(s) = k.extract::<PyBackedStr>() {
        CopyDirection::from_name(&s)
    } else {
        return Err(PyTypeError::new_err("memcpy kind is None, a string such as \"host_to_device\", or an int 0..=4"));
    };
    direction.py_err(k.py())
}

/// How this binding makes a whole runtime call: the GIL released around
/// the enqueue and the wait.
fn whole<T>(
    py: Python<'_>,
    stream: StreamChoice,
    wait: bool,
    owners: T,
) -> Whole<T, impl FnOnce(Blocking<'_>) -> gpuport::Result<Enqueued> + '_> {
    Whole { stream, wait, owners, unlocked: move |op: Blocking<'_>| py.detach(op) }
}

fn memcpy_impl(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    size: usize,
    kind: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
    wait: bool,
) -> PyResult<()> {
    let (dst, src) = (to_range(dst, "dst")?, to_range(src, "src")?);
    let (dir, stream) = (direction_of(kind)?, stream_choice(stream)?);
    let (to, from) = (dst.range(), src.range());
    let call = if wait { "memcpy" } else { "memcpy_async" };
    runtime::memcpy_and_keep(&to, &from, size, dir, whole(py, stream.choice, wait, (dst, src, stream.owner)))
        .py_err_in(py, call)
}

/// Copies ``size`` bytes from ``src`` to ``dst`` and waits. Both accept
/// anything ``Pointer`` accepts. ``kind``: None or "default" (inferred
/// from what the pointers are), "host_to_host", "host_to_device",
/// "device_to_host", "device_to_device", or an int 0..=4 in hipMemcpyKind
/// order. ``size`` is checked against the extent of every operand that
/// states one (buffers, DLPack tensors, CUDA Array Interface objects such
/// as torch and CuPy arrays, MemArray, DeviceArray): going past it raises
/// ValueError, as does an operand that is not one contiguous range (a
/// strided view). Raw addresses (ints, ctypes.c_void_p) are unchecked, as
/// in HIP Python: host memory must be an object gpuport holds (a raw host
/// address is refused), and raw device addresses are the caller's
/// responsibility. Copies of 1 MiB
/// or more between pageable host memory (NumPy arrays, buffers) and a GPU
/// are pipelined through pinned staging on several host threads, several
/// times faster than the driver's pageable copy.
///
///     >>> import numpy as np
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(16, device="host")
///     >>> rt.memcpy(a, np.arange(4, dtype=np.uint32), 16)   # host to device
///     >>> out = np.zeros(4, dtype=np.uint32)
///     >>> rt.memcpy(out, a, 16, kind="device_to_host")
///     >>> out
///     array([0, 1, 2, 3], dtype=uint32)
///     >>> rt.memcpy(out, a, 32)                              # past both ends
///     Traceback (most recent call last):
///     gpuport.InvalidArgumentError: invalid argument dst: 32 bytes exceed the 16 bytes of the memory
#[pyfunction]
#[pyo3(signature = (dst, src, size, kind=None, stream=None))]
pub fn memcpy(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    size: usize,
    kind: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memcpy_impl(py, dst, src, size, kind, stream, true)
}

/// As ``memcpy``, enqueued on ``stream`` without waiting; the operands are
/// kept alive until the copy has run.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> s = gpuport.Stream("host")
///     >>> a = rt.malloc(4, device="host")
///     >>> rt.memcpy_async(a, b"\x01\x02\x03\x04", 4, stream=s)
///     >>> out = bytearray(4)
///     >>> rt.memcpy_async(out, a, 4, stream=s)
///     >>> s.synchronize()
///     >>> bytes(out)
///     b'\x01\x02\x03\x04'
#[pyfunction]
#[pyo3(signature = (dst, src, size, kind=None, stream=None))]
pub fn memcpy_async(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    size: usize,
    kind: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memcpy_impl(py, dst, src, size, kind, stream, false)
}

/// `memcpy_peer` and `memcpy_peer_async`; the core picks the stream
/// (`runtime::memcpy_peer`).
#[allow(clippy::too_many_arguments)] // the Python signature, and whether to wait
fn memcpy_peer_impl(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    dst_device: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    src_device: &Bound<'_, PyAny>,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
    wait: bool,
) -> PyResult<()> {
    let (dst, src) = (to_range(dst, "dst")?, to_range(src, "src")?);
    let dst_dev = resolve_device(py, Some(dst_device))?;
    let src_dev = resolve_device(py, Some(src_device))?;
    let stream = stream_choice(stream)?;
    let (to, from) = (dst.range(), src.range());
    let call = if wait { "memcpy_peer" } else { "memcpy_peer_async" };
    let whole = whole(py, stream.choice, wait, (dst, src, stream.owner));
    runtime::memcpy_peer_and_keep((&to, &dst_dev), (&from, &src_dev), size, whole).py_err_in(py, call)
}

/// Copies ``size`` bytes from ``src``, device memory of ``src_device``, to
/// ``dst``, device memory of ``dst_device`` (two devices of one backend, as
/// ``cudaMemcpyPeer``), and waits. The pointers are anything ``Pointer``
/// accepts; the devices anything ``Device`` accepts. It runs on ``stream``,
/// a stream of either device (default: the source device's default
/// stream). It works without peer access (the driver stages the copy
/// through the host) and is faster after ``Device.enable_peer_access``.
/// ``memcpy`` also copies between two devices when both operands say whose
/// memory they are (``malloc`` arrays, DLPack and CUDA Array Interface
/// tensors); this call also takes raw device addresses. Errors
/// (InvalidArgumentError) name what was wrong: devices of two backends, a
/// stream of a third device, memory of another device than the one given,
/// host memory, a size past either operand.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(4, device="host"); b = rt.malloc(4, device="host")
///     >>> rt.memset(a, 7, 4)
///     >>> rt.memcpy_peer(b, "host", a, "host", 4)   # on the host backend every peer is host:0
///     >>> out = bytearray(4); rt.memcpy(out, b, 4); bytes(out)
///     b'\x07\x07\x07\x07'
///     >>> rt.memcpy_peer(b, "host", a, "host", 8)             # past both ends
///     Traceback (most recent call last):
///     gpuport.InvalidArgumentError: invalid argument dst: 8 bytes exceed the 4 bytes of the memory
#[pyfunction]
#[pyo3(signature = (dst, dst_device, src, src_device, size, stream=None))]
pub fn memcpy_peer(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    dst_device: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    src_device: &Bound<'_, PyAny>,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memcpy_peer_impl(py, dst, dst_device, src, src_device, size, stream, true)
}

/// As ``memcpy_peer``, enqueued on ``stream`` (a stream of either device;
/// default: the source device's default stream) without waiting; the
/// operands are kept alive until the copy has run.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> s = gpuport.Stream("host")
///     >>> a = rt.malloc(4, device="host"); b = rt.malloc(4, device="host")
///     >>> rt.memset_async(a, 3, 4, stream=s)
///     >>> rt.memcpy_peer_async(b, "host", a, "host", 4, stream=s)
///     >>> s.synchronize()
///     >>> out = bytearray(4); rt.memcpy(out, b, 4); bytes(out)
///     b'\x03\x03\x03\x03'
#[pyfunction]
#[pyo3(signature = (dst, dst_device, src, src_device, size, stream=None))]
pub fn memcpy_peer_async(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    dst_device: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    src_device: &Bound<'_, PyAny>,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memcpy_peer_impl(py, dst, dst_device, src, src_device, size, stream, false)
}

fn memset_impl(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    value: u8,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
    wait: bool,
) -> PyResult<()> {
    let dst = to_range(dst, "dst")?;
    let (to, stream) = (dst.range(), stream_choice(stream)?);
    let call = if wait { "memset" } else { "memset_async" };
    runtime::memset_and_keep(&to, value, size, whole(py, stream.choice, wait, (dst, stream.owner))).py_err_in(py, call)
}

/// Sets ``size`` bytes at ``dst`` (anything ``Pointer`` accepts) to ``value``
/// and waits. ``size`` is checked as for ``memcpy`` (raw addresses are
/// unchecked); a ``dst`` that is not one contiguous range raises ValueError.
///
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(8, device="host")
///     >>> rt.memset(a, 0xAB, 4)
///     >>> rt.memset(a[4:], 0x01, 4)          # a view: the last 4 bytes
///     >>> out = bytearray(8); rt.memcpy(out, a, 8); bytes(out)
///     b'\xab\xab\xab\xab\x01\x01\x01\x01'
#[pyfunction]
#[pyo3(signature = (dst, value, size, stream=None))]
pub fn memset(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    value: u8,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memset_impl(py, dst, value, size, stream, true)
}

/// As ``memset``, enqueued on ``stream`` without waiting.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> s = gpuport.Stream("host")
///     >>> a = rt.malloc(4, device="host")
///     >>> rt.memset_async(a, 1, 4, stream=s)
///     >>> out = bytearray(4)
///     >>> rt.memcpy_async(out, a, 4, stream=s)
///     >>> s.synchronize()
///     >>> bytes(out)
///     b'\x01\x01\x01\x01'
#[pyfunction]
#[pyo3(signature = (dst, value, size, stream=None))]
pub fn memset_async(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    value: u8,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memset_impl(py, dst, value, size, stream, false)
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
    prune();
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
        (_, true) => Some(Box::new(
            list.into_iter()
                .filter_map(|a| match a {
                    Arg::Pointer(p) if !p.owners.is_empty() => Some(p),
                    _ => None,
                })
                .collect::<Vec<Ptr>>(),
        )),
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

/// Blocks until the work on every stream of ``device`` is done (as
/// ``hipDeviceSynchronize``: gpuport's streams and other libraries' streams
/// alike), and drops the operands of completed asynchronous work. Refused
/// with ``GraphError`` while a capture runs on the device.
///
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(1024, device="host")
///     >>> rt.memset_async(a, 0, 1024)        # the default stream, no wait
///     >>> rt.device_synchronize("host")
#[pyfunction]
#[pyo3(signature = (device=None))]
pub fn device_synchronize(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let dev = resolve_device(py, device)?;
    py.detach(|| gpuport::dynamic::runtime::device_synchronize(&dev)).py_err_in(py, "device_synchronize")?;
    prune();
    Ok(())
}
