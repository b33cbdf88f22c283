//! The low-level runtime for Python (`gpuport.runtime`): malloc/free,
//! memcpy (direction given or inferred), memset, modules and kernel launch,
//! taking every pointer argument through the adapters of [`crate::adapters`].
//!
//! Asynchronous work keeps its operands alive: after enqueuing, an event is
//! recorded and the operands (held buffers, allocations, Python objects) are
//! parked until the event completes; every runtime call prunes completed ones.

use std::marker::PhantomData;
use std::sync::Arc;

use gpuport::backend::{builtin, Backend, DeviceMemory, DeviceMemoryMut, HostMemory};
use gpuport::memory::Held;
use gpuport::{with_device, AnyDevice, BackendKind, Error, LaunchConfig, MemoryKind};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::adapters::{to_ptr, to_range, Alloc, Ptr, PyDeviceArray, Space};
use crate::arglists::{Arg, PyKernelArgs, PyListOfBytes};
use crate::device::{resolve_device, resolve_stream, same_device, spec, AnyStream};
use crate::errors::{self, IntoPyResult};
use gpuport::dynamic::{keep, AnyKernel, AnyModule, Code, DynDevice};

// ---- raw memory as `DeviceMemory` ------------------------------------------------------

/// An address range handed to a backend's copy or memset.
#[derive(Debug)]
struct RawMem<B> {
    ptr: u64,
    len: usize,
    ordinal: usize,
    kind: MemoryKind,
    _b: PhantomData<fn() -> B>,
}

// SAFETY: this module builds `RawMem` only from an address range the Python
// caller handed to `gpuport.runtime` as memory of that device, as HIP Python's
// runtime calls take it; where the object states its extent, the range was
// checked against it. A bare integer address is the caller's word alone, as
// the package README says.
unsafe impl<B: Backend> DeviceMemory for RawMem<B> {
    type B = B;
    fn len(&self) -> usize {
        self.len
    }
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn kind(&self) -> MemoryKind {
        self.kind
    }
}

// SAFETY: a `RawMem` is built for one call and handed out to no one else.
unsafe impl<B: Backend> DeviceMemoryMut for RawMem<B> {}

// ---- pending asynchronous work --------------------------------------------------------

/// Drops the operands of completed asynchronous work (called with the GIL
/// held, so the Python objects among them are released under it).
fn prune() {
    keep::prune();
}

/// Keeps `owners` alive until the work enqueued on `s` so far has run.
fn park(py: Python<'_>, s: &AnyStream, owners: Vec<Ptr>) -> PyResult<()> {
    keep::keep_until_done(s, Box::new(owners)).py_err(py)
}

/// Number of asynchronous operations whose operands are still held (for tests).
#[pyfunction]
pub fn _pending_operations() -> usize {
    prune();
    keep::pending()
}

// ---- malloc / free --------------------------------------------------------------------

fn alloc_on<D: DynDevice>(d: &Arc<D>, dev: &AnyDevice, kind: MemoryKind, size: usize) -> gpuport::Result<Alloc> {
    let current = || gpuport::memory::current_resource::<D::B>(d);
    Ok(match kind {
        // Pinned and device memory come from the current resource (the
        // caching pool, and the statistics and log gpuport.memory installs).
        // Their raw address is handed out, so, as with cudaFree, their
        // release waits for the whole device (`Held`, exported from the start).
        MemoryKind::Pinned => {
            let b = current()?.alloc_pinned(size, gpuport::memory::PinnedFlags::PORTABLE)?;
            let ptr = b.as_slice().as_ptr() as usize as u64;
            let mem = Box::new(Held::new(b, d, true));
            Alloc { dev: dev.clone(), kind, ptr, len: size, mem }
        }
        MemoryKind::Managed => {
            let b = d.alloc_managed(size)?;
            Alloc { dev: dev.clone(), kind, ptr: b.device_ptr(), len: size, mem: Box::new(b) }
        }
        MemoryKind::Device | MemoryKind::Host => {
            let a = current()?.alloc(size, d.default_stream())?;
            let ptr = a.device_ptr();
            let mem = Box::new(Held::new(a, d, true));
            Alloc { dev: dev.clone(), kind: MemoryKind::Device, ptr, len: size, mem }
        }
    })
}

fn parse_kind(kind: &str) -> PyResult<MemoryKind> {
    match kind {
        "device" => Ok(MemoryKind::Device),
        "pinned" | "host" => Ok(MemoryKind::Pinned),
        "managed" => Ok(MemoryKind::Managed),
        _ => Err(PyValueError::new_err(format!("kind {kind:?}: use \"device\", \"pinned\" or \"managed\""))),
    }
}

/// Allocates ``size`` bytes (``kind``: "device", "pinned" or "managed") on
/// ``device`` (default: the default device); the memory is owned by the
/// returned DeviceArray (shape ``(size,)``, typestr ``"|u1"``) and freed by
/// ``free`` or when the last reference goes. Device memory comes from the
/// device's current resource (the caching pool that ``gpuport.memory``
/// counts); as with ``cudaFree``, giving it back first waits for the device,
/// since any stream may still use the raw address.
#[pyfunction]
#[pyo3(signature = (size, device=None, kind="device"))]
pub fn malloc(
    py: Python<'_>,
    size: usize,
    device: Option<&Bound<'_, PyAny>>,
    kind: &str,
) -> PyResult<Py<PyDeviceArray>> {
    prune();
    let kind = parse_kind(kind)?;
    let dev = resolve_device(py, device)?;
    let a = py.detach(|| with_device!(&dev, d => alloc_on(d, &dev, kind, size))).py_err(py)?;
    Py::new(py, PyDeviceArray::from_alloc(Alloc::register(a)))
}

/// ``malloc(size, device, kind="pinned")``: page-locked host memory.
#[pyfunction]
#[pyo3(signature = (size, device=None))]
pub fn malloc_pinned(py: Python<'_>, size: usize, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyDeviceArray>> {
    malloc(py, size, device, "pinned")
}

/// ``malloc(size, device, kind="managed")``: unified memory.
#[pyfunction]
#[pyo3(signature = (size, device=None))]
pub fn malloc_managed(py: Python<'_>, size: usize, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyDeviceArray>> {
    malloc(py, size, device, "managed")
}

/// Frees an array returned by ``malloc``. ``free(None)`` (NULL) does
/// nothing; freeing twice raises ``ValueError``, as does freeing memory
/// gpuport does not own (raw addresses, views, buffers).
#[pyfunction]
pub fn free(ptr: &Bound<'_, PyAny>) -> PyResult<()> {
    prune();
    if ptr.is_none() {
        return Ok(());
    }
    if let Ok(d) = ptr.cast::<PyDeviceArray>() {
        return PyDeviceArray::free(d);
    }
    let p = to_ptr(ptr)?;
    if p.addr == 0 {
        return Ok(());
    }
    Err(PyValueError::new_err(format!(
        "free: {:#x} is not owned by gpuport; pass the DeviceArray that malloc returned",
        p.addr
    )))
}

// ---- copies ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Host,
    Device,
}

fn parse_direction(kind: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(Side, Side)>> {
    let Some(k) = kind.filter(|k| !k.is_none()) else { return Ok(None) };
    use Side::*;
    let name: String = if let Ok(i) = k.extract::<i64>() {
        match i {
            0 => "host_to_host".into(),
            1 => "host_to_device".into(),
            2 => "device_to_host".into(),
            3 => "device_to_device".into(),
            4 => "default".into(),
            _ => return Err(PyValueError::new_err(format!("memcpy kind {i}: 0..=4 (hipMemcpyKind order)"))),
        }
    } else if let Ok(s) = k.extract::<String>() {
        s
    } else {
        return Err(PyTypeError::new_err("memcpy kind is None, a string such as \"host_to_device\", or an int 0..=4"));
    };
    Ok(match name.as_str() {
        "host_to_host" | "HtoH" => Some((Host, Host)),
        "host_to_device" | "HtoD" => Some((Host, Device)),
        "device_to_host" | "DtoH" => Some((Device, Host)),
        "device_to_device" | "DtoD" => Some((Device, Device)),
        "default" => None,
        other => {
            return Err(PyValueError::new_err(format!(
                "memcpy kind {other:?}: use \"host_to_host\", \"host_to_device\", \"device_to_host\", \"device_to_device\" or \"default\""
            )))
        }
    })
}

fn side_of(p: &Ptr, dev_is_host: bool, what: &str) -> PyResult<Side> {
    Ok(match &p.space {
        Space::Host | Space::Pinned(_) => Side::Host,
        Space::Device(_) | Space::Managed(_) => Side::Device,
        Space::Null => return Err(PyValueError::new_err(format!("{what} is NULL"))),
        Space::Unknown if dev_is_host => Side::Device,
        Space::Unknown => {
            return Err(PyValueError::new_err(format!(
                "cannot infer the memcpy direction: {what} is a raw address of unknown memory; pass kind="
            )))
        }
    })
}

/// Checks a copy of `size` bytes against everything known about `p`: the
/// memory gpuport holds and the extent the object states. Only raw
/// addresses (ints, `ctypes.c_void_p`) outside gpuport's allocations pass
/// unchecked, as in HIP Python.
fn check_size(p: &Ptr, size: usize, what: &str) -> PyResult<()> {
    if p.addr == 0 && size > 0 {
        return Err(PyValueError::new_err(format!("{what} is NULL")));
    }
    match p.known_size() {
        Some(l) if size > l => {
            Err(PyValueError::new_err(format!("{what}: {size} bytes exceed the {l} bytes of the memory")))
        }
        _ => Ok(()),
    }
}

/// The address of a held host range of `size` bytes (raw addresses are refused).
fn host_range(p: &Ptr, size: usize, what: &str, write: bool) -> PyResult<*mut u8> {
    if !p.held() {
        return Err(PyValueError::new_err(format!(
            "{what}: a raw host address is not dereferenced by gpuport; pass the buffer or array object instead"
        )));
    }
    if !p.host_accessible() {
        return Err(PyValueError::new_err(format!(
            "{what} is device memory, which the host cannot read or write; use a device-side copy direction"
        )));
    }
    if write && !p.writable {
        return Err(PyValueError::new_err(format!("{what} is read-only")));
    }
    check_size(p, size, what)?;
    Ok(p.addr as usize as *mut u8)
}

fn device_mem<B: Backend>(p: &Ptr, size: usize, dev: &AnyDevice, what: &str) -> PyResult<RawMem<B>> {
    if dev.backend() == BackendKind::Host && !(p.held() && p.host_accessible()) {
        return Err(PyValueError::new_err(format!(
            "{what}: the host backend dereferences device addresses on the host, so it takes only memory gpuport holds (malloc arrays, buffers, DLPack tensors), not raw address {:#x}",
            p.addr
        )));
    }
    if matches!(p.space, Space::Host) && dev.backend() != BackendKind::Host {
        return Err(PyValueError::new_err(format!(
            "{what} is pageable host memory, not memory of {}; use a host-side copy direction (or pinned memory from malloc_pinned)",
            spec(dev)
        )));
    }
    if let Some(d) = p.device() {
        if !same_device(&d, dev) {
            return Err(PyValueError::new_err(format!("{what} is memory of {}, not of {}", spec(&d), spec(dev))));
        }
    }
    Ok(RawMem {
        ptr: p.addr,
        len: p.known_size().unwrap_or(size),
        ordinal: dev.info().ordinal,
        kind: MemoryKind::Device,
        _b: PhantomData,
    })
}

/// The device's pipelined copier, for a synchronous copy of `size` bytes
/// whose host side is `host` on `dev`: only pageable memory (pinned memory
/// goes at full speed directly), a GPU backend, and at least 1 MiB. `None`
/// (the driver's own copy) also when the copier cannot be made.
fn pipelined_copier<D: DynDevice>(
    d: &Arc<D>,
    dev: &AnyDevice,
    host: &Ptr,
    size: usize,
    sync: bool,
) -> Option<Arc<gpuport::memory::PageableCopier<D::B>>> {
    let pageable = matches!(host.space, Space::Host);
    let wanted = sync && pageable && dev.backend() != BackendKind::Host && size >= 1 << 20;
    wanted.then(|| gpuport::memory::pageable_copier::<D::B>(d).ok()).flatten()
}

/// Why host-side copies and memsets refuse a capturing stream.
const HOST_SIDE: &str = "copies between two host buffers and memsets of host memory are made by the host at once \
    (after the stream's earlier work), not enqueued, so they cannot be captured; capture copies and memsets that \
    have device memory (malloc) on one side";

/// Copies `size` bytes on stream `s`; `sync` says the caller waits for the
/// copy, so a pageable host side may go through the pipelined copier (after
/// the stream's earlier work, which keeps the copy in stream order).
#[allow(clippy::too_many_arguments)]
fn copy_on<D: DynDevice>(
    py: Python<'_>,
    d: &Arc<D>,
    dev: &AnyDevice,
    s: &AnyStream,
    dst: &Ptr,
    src: &Ptr,
    size: usize,
    dir: (Side, Side),
    sync: bool,
) -> PyResult<()> {
    let call = if sync { "memcpy" } else { "memcpy_async" };
    let py_err = |e: Error| Python::attach(|py| errors::to_py_in(py, e, Some(call)));
    let st = s.of(d).map_err(py_err)?;
    match dir {
        (Side::Host, Side::Host) => {
            let from = host_range(src, size, "src", false)?;
            let to = host_range(dst, size, "dst", true)?;
            s.refuse_in_capture(call, HOST_SIDE).map_err(py_err)?;
            d.synchronize(st).map_err(py_err)?;
            // SAFETY: both ranges are held (buffer exports, DLPack tensors or
            // allocations kept alive by the `Ptr`s) with at least `size`
            // bytes (`host_range` checked), `dst` is writable; `copy` allows overlap.
            unsafe { std::ptr::copy(from, to, size) };
            Ok(())
        }
        (Side::Host, Side::Device) => {
            let from = host_range(src, size, "src", false)?;
            // SAFETY: held memory of at least `size` bytes, alive as long as `src`.
            let from = unsafe { std::slice::from_raw_parts(from as *const u8, size) };
            let mut to = device_mem::<D::B>(dst, size, dev, "dst")?;
            if let Some(copier) = pipelined_copier(d, dev, src, size, sync) {
                return py
                    .detach(|| d.synchronize(st).and_then(|()| copier.copy_to_device(from, &mut to, 0)))
                    .py_err(py);
            }
            // SAFETY: `src` and `dst` are kept alive by the caller until the
            // stream passes the copy (synchronous memcpy waits; async parks them).
            unsafe { d.copy_to_device_async(from, &to, 0, st) }.map_err(py_err)
        }
        (Side::Device, Side::Host) => {
            let from = device_mem::<D::B>(src, size, dev, "src")?;
            let to = host_range(dst, size, "dst", true)?;
            // SAFETY: held writable memory of at least `size` bytes, alive as
            // long as `dst`; no other Rust reference to it exists.
            let to = unsafe { std::slice::from_raw_parts_mut(to, size) };
            if let Some(copier) = pipelined_copier(d, dev, dst, size, sync) {
                return py.detach(|| d.synchronize(st).and_then(|()| copier.copy_to_host(&from, 0, to))).py_err(py);
            }
            // SAFETY: as above.
            unsafe { d.copy_to_host_async(&from, 0, to, st) }.map_err(py_err)
        }
        (Side::Device, Side::Device) => {
            let from = device_mem::<D::B>(src, size, dev, "src")?;
            let to = device_mem::<D::B>(dst, size, dev, "dst")?;
            // SAFETY: as above.
            unsafe { d.copy_device_async(&from, 0, &to, 0, size, st) }.map_err(py_err)
        }
    }
}

fn pick_device(py: Python<'_>, ptrs: &[&Ptr], stream: Option<&Bound<'_, PyAny>>) -> PyResult<AnyDevice> {
    if let Some(s) = stream.filter(|s| !s.is_none()) {
        if let Ok(s) = s.cast::<crate::device::PyStream>() {
            return Ok(s.get().inner.device());
        }
    }
    for p in ptrs {
        if let Some(d) = p.device() {
            return Ok(d);
        }
    }
    resolve_device(py, None)
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
    prune();
    let dst = to_range(dst, "dst")?;
    let src = to_range(src, "src")?;
    check_size(&dst, size, "dst")?;
    check_size(&src, size, "src")?;
    let dev = pick_device(py, &[&dst, &src], stream)?;
    let s = resolve_stream(py, &dev, stream)?;
    if size == 0 {
        return Ok(());
    }
    let host = dev.backend() == BackendKind::Host;
    let dir = match parse_direction(kind)? {
        Some(d) => d,
        None => (side_of(&src, host, "src")?, side_of(&dst, host, "dst")?),
    };
    if wait {
        // Refused before anything is enqueued: a capture would otherwise
        // record the copy that the wait after it then refuses.
        s.check_can_wait("memcpy").py_err_in(py, "memcpy")?;
    }
    with_device!(&dev, d => copy_on(py, d, &dev, &s, &dst, &src, size, dir, wait))?;
    if wait {
        py.detach(|| s.synchronize()).py_err_in(py, "memcpy")
    } else {
        park(py, &s, vec![dst, src])
    }
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

fn memset_on<D: DynDevice>(
    d: &Arc<D>,
    dev: &AnyDevice,
    s: &AnyStream,
    dst: &Ptr,
    value: u8,
    size: usize,
    call: &'static str,
) -> PyResult<()> {
    let py_err = |e: Error| Python::attach(|py| errors::to_py_in(py, e, Some(call)));
    let st = s.of(d).map_err(py_err)?;
    if matches!(dst.space, Space::Host | Space::Pinned(_)) {
        let to = host_range(dst, size, "dst", true)?;
        s.refuse_in_capture(call, HOST_SIDE).map_err(py_err)?;
        d.synchronize(st).map_err(py_err)?;
        // SAFETY: held writable memory of at least `size` bytes (`host_range`).
        unsafe { std::ptr::write_bytes(to, value, size) };
        return Ok(());
    }
    let to = device_mem::<D::B>(dst, size, dev, "dst")?;
    // SAFETY: `dst` is kept alive by the caller until the stream passes this.
    unsafe { d.memset_async(&to, 0, size, value, st) }.map_err(py_err)
}

fn memset_impl(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    value: u8,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
    wait: bool,
) -> PyResult<()> {
    prune();
    let dst = to_range(dst, "dst")?;
    check_size(&dst, size, "dst")?;
    let dev = pick_device(py, &[&dst], stream)?;
    let s = resolve_stream(py, &dev, stream)?;
    if size == 0 {
        return Ok(());
    }
    let call = if wait { "memset" } else { "memset_async" };
    if wait {
        // As in `memcpy_impl`: refused before anything is enqueued.
        s.check_can_wait(call).py_err_in(py, call)?;
    }
    with_device!(&dev, d => memset_on(d, &dev, &s, &dst, value, size, call))?;
    if wait {
        py.detach(|| s.synchronize()).py_err_in(py, call)
    } else {
        park(py, &s, vec![dst])
    }
}

/// Sets ``size`` bytes at ``dst`` (anything ``Pointer`` accepts) to ``value``
/// and waits. ``size`` is checked as for ``memcpy`` (raw addresses are
/// unchecked); a ``dst`` that is not one contiguous range raises ValueError.
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
            let (text, bytes): (Option<String>, Vec<u8>) = if let Ok(s) = c.extract::<String>() {
                (Some(s.clone()), s.into_bytes())
            } else if let Ok(b) = c.cast::<PyBytes>() {
                (std::str::from_utf8(b.as_bytes()).ok().map(str::to_owned), b.as_bytes().to_vec())
            } else {
                return Err(PyTypeError::new_err(format!(
                    "module code is None (built-ins), str or bytes; got {}",
                    c.get_type().name()?
                )));
            };
            let binary_magic = bytes.starts_with(b"\x7fELF") || bytes.starts_with(&[0x50, 0xed, 0x55, 0xba]);
            let kind = match kind {
                Some(k) => k.to_string(),
                None if binary_magic || text.is_none() => "binary".into(),
                None if text.as_deref().is_some_and(|t| t.contains(".version") && t.contains(".target")) => {
                    "ptx".into()
                }
                None => "source".into(),
            };
            let need_text =
                || text.clone().ok_or_else(|| PyValueError::new_err("kernel source and PTX must be UTF-8 text"));
            match kind.as_str() {
                "builtin" => Code::Builtin,
                "source" => Code::Source(need_text()?),
                "ptx" => Code::Ptx(need_text()?),
                "binary" => Code::Binary(bytes),
                other => {
                    return Err(PyValueError::new_err(format!(
                        "module kind {other:?}: use \"builtin\", \"source\", \"ptx\" or \"binary\""
                    )))
                }
            }
        }
    };
    let dev = resolve_device(py, device)?;
    let name = name.to_string();
    let inner = py.detach(|| AnyModule::load(&dev, &code, &name, &options)).py_err(py)?;
    Ok(PyModule_ { inner, name })
}

/// The kernel ``name`` of ``module``.
#[pyfunction]
pub fn module_get_function(py: Python<'_>, module: &Bound<'_, PyModule_>, name: &str) -> PyResult<PyFunction> {
    let m = module.get();
    let inner = m.inner.kernel(name).py_err(py)?;
    Ok(PyFunction { inner, name: name.to_string(), _module: module.clone().unbind() })
}

fn dim3(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<[u32; 3]> {
    let err = || PyTypeError::new_err(format!("{what} is an int or a tuple of 1 to 3 ints (x, y, z)"));
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

/// The host backend runs built-ins on the host, so pointer arguments must be
/// memory gpuport holds, with room for what the kernel writes.
fn check_host_launch(py: Python<'_>, name: &str, args: &PyKernelArgs) -> PyResult<Option<Ptr>> {
    let k = args.to_kernel_args();
    match name {
        builtin::EMPTY | builtin::SLEEP_NS => Ok(None),
        builtin::FILL_U32 => {
            let (Some(ptr), Some(n)) = (k.get::<u64>(0), k.get::<u64>(1)) else {
                return Err(PyValueError::new_err("gpuport_fill_u32 takes (ptr u64, n u64, value u32)"));
            };
            let need = n.checked_mul(4).ok_or_else(|| PyValueError::new_err("gpuport_fill_u32: n is too large"))?;
            if need == 0 {
                return Ok(None);
            }
            // The target must be a pointer argument (or a live allocation) gpuport holds.
            let mut candidates: Vec<Ptr> = Vec::new();
            if let Some(Arg::Pointer(p)) = args.args.first() {
                if p.held() && p.host_accessible() && p.addr == ptr {
                    candidates.push(Ptr::held_at(p.addr, p.space.clone(), p.known_size().unwrap_or(0), p.writable, Vec::new()));
                }
            }
            if candidates.is_empty() {
                candidates.push(Ptr::raw(ptr));
            }
            let p = candidates.swap_remove(0);
            let len = if p.host_accessible() { p.len } else { None };
            match len {
                // `p` keeps a raw address's allocation alive until the launch has run.
                Some(l) if p.writable && need <= l as u64 => Ok(Some(p)),
                Some(l) => Err(PyValueError::new_err(format!(
                    "gpuport_fill_u32: {need} bytes at {ptr:#x} exceed the {l} writable bytes there"
                ))),
                None => Err(PyValueError::new_err(format!(
                    "gpuport_fill_u32 on the host backend: {ptr:#x} is not memory gpuport holds (pass a DeviceArray or a buffer)"
                ))),
            }
        }
        other => Err(errors::to_py(
            py,
            Error::Unsupported {
                op: "launching this kernel from Python",
                backend: BackendKind::Host,
                hint: Some(format!(
                    "{other}: on the host backend, gpuport_empty, gpuport_sleep_ns and gpuport_fill_u32 can be launched from Python (their pointer arguments are checked)"
                )),
            },
        )),
    }
}

/// Launches ``func`` with ``grid`` and ``block`` (an int or a tuple of up to
/// 3 ints), ``args`` (a KernelArgs, or a list/tuple of ctypes values and
/// pointer-likes), ``shared_mem`` bytes of dynamic shared memory, on
/// ``stream`` (default: the device's default stream), without waiting. The
/// arguments must match the kernel's parameters; pointer arguments are the
/// caller's responsibility on GPUs (as in HIP), and are checked on the host
/// backend. Their memory is kept alive until the launch has run.
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
    prune();
    let f = func.get();
    let config = LaunchConfig { grid: dim3(grid, "grid")?, block: dim3(block, "block")?, shared_mem_bytes: shared_mem };
    let args_obj: Bound<'_, PyKernelArgs> = match args.filter(|a| !a.is_none()) {
        Some(a) => match a.cast::<PyKernelArgs>() {
            Ok(k) => k.clone(),
            Err(_) => Bound::new(py, PyKernelArgs::init(Some(a))?)?,
        },
        None => Bound::new(py, PyKernelArgs::init(None)?)?,
    };
    let ka = args_obj.get();
    let kargs = ka.to_kernel_args();
    let dev = f.inner.device();
    let s = resolve_stream(py, &dev, stream)?;
    let extra = if dev.backend() == BackendKind::Host { check_host_launch(py, &f.name, ka)? } else { None };
    // SAFETY: on the host backend the only kernels allowed are the checked
    // built-ins (their target range lies inside held memory of the right
    // size); on GPUs the arguments are the caller's contract, as with HIP's
    // hipModuleLaunchKernel (documented). Pointer operands gpuport holds are
    // parked until the launch has run.
    unsafe { f.inner.launch(config, &kargs, &s) }.py_err_in(py, "launch_kernel")?;
    let mut keep = vec![to_ptr(args_obj.as_any())?];
    keep.extend(extra);
    park(py, &s, keep)
}

/// Blocks until all work on ``device``'s default stream is done, and drops
/// the operands of completed asynchronous work.
#[pyfunction]
#[pyo3(signature = (device=None))]
pub fn device_synchronize(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let dev = resolve_device(py, device)?;
    let s = AnyStream::default_for(&dev);
    py.detach(|| s.synchronize()).py_err_in(py, "device_synchronize")?;
    prune();
    Ok(())
}
