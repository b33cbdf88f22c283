//! HIP-Python-style pointer adapters (docs/design.md#pointer-adapters): `Pointer`, `DeviceArray`,
//! `ListOfBytes`, `ListOfPointer`, `ListOfInt`, `ListOfUnsigned`,
//! `ListOfUnsignedLong` and `KernelArgs`.
//!
//! Conversion order of `Pointer` (as in HIP Python, plus DLPack last): None
//! (NULL), another `Pointer` (no ownership transfer: the other object is
//! kept alive, its buffer handle stays its own), an int address, a
//! `ctypes.c_void_p`, an object with `__cuda_array_interface__`, a
//! contiguous buffer-protocol object (held until the adapter dies), a
//! DLPack producer (`__dlpack__`; the tensor is held likewise).
//!
//! Safety model: an address is *held* when it came from memory this
//! extension keeps alive (a `malloc` allocation, a buffer or DLPack tensor
//! held by an adapter, a `ListOf*` array). gpuport dereferences host-side
//! addresses, and on the host backend device-side ones, only when they are
//! held (raw ints are looked up among the live allocations); raw device
//! addresses on a GPU backend go to the driver unchecked, the caller's
//! responsibility as in HIP Python.

use std::any::Any;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::os::raw::c_ulong;
use std::sync::{Arc, Mutex, Weak};

use gpuport::dlpack::DLDeviceType;
use gpuport::{AnyDevice, BackendKind, MemoryKind};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySlice, PyTuple};

use crate::dlpack::{take_capsule, Producer};

// ---- the buffer protocol (not in the limited API before 3.11) -------------------

/// `Py_buffer`, whose layout is unchanged since Python 3.3.
#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
    fn PyObject_CheckBuffer(obj: *mut ffi::PyObject) -> c_int;
}

const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
const PYBUF_ANY_CONTIGUOUS: c_int = 0x0080 | PYBUF_STRIDES;

/// A buffer export held until drop (then released, under the GIL).
pub struct HeldBuffer {
    view: Box<RawBuffer>,
}

// SAFETY: the view is only touched in `acquire` and in `Drop`, both with the
// GIL held; the address it exposes is plain data.
unsafe impl Send for HeldBuffer {}
// SAFETY: as above; shared references never touch the view.
unsafe impl Sync for HeldBuffer {}

impl HeldBuffer {
    /// Acquires a contiguous buffer of `obj` (writable if it can be), or
    /// `Ok(None)` when `obj` does not export buffers.
    fn acquire(obj: &Bound<'_, PyAny>) -> PyResult<Option<HeldBuffer>> {
        let py = obj.py();
        // SAFETY: `obj` is a live object and we hold the GIL.
        if unsafe { PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
            return Ok(None);
        }
        let mut view = Box::new(RawBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        for flags in [PYBUF_ANY_CONTIGUOUS | PYBUF_WRITABLE, PYBUF_ANY_CONTIGUOUS] {
            // SAFETY: `view` is a writable `Py_buffer`; on success it must be
            // released once, which `Drop` does.
            if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } == 0 {
                return Ok(Some(HeldBuffer { view }));
            }
            let err = PyErr::fetch(py);
            if flags & PYBUF_WRITABLE == 0 {
                return Err(PyBufferError::new_err(format!(
                    "Pointer accepts only contiguous buffers; {} refused: {err}",
                    obj.get_type().name()?
                )));
            }
        }
        unreachable!("the loop returns on its last pass")
    }

    fn addr(&self) -> u64 {
        self.view.buf as usize as u64
    }
    fn len(&self) -> usize {
        self.view.len.max(0) as usize
    }
    fn writable(&self) -> bool {
        self.view.readonly == 0
    }
}

impl Drop for HeldBuffer {
    fn drop(&mut self) {
        Python::attach(|_| {
            // SAFETY: the view was filled by a successful `PyObject_GetBuffer`
            // and is released exactly once, with the GIL held.
            unsafe { PyBuffer_Release(&mut *self.view) }
        });
    }
}

// ---- allocations and the registry of live ones -----------------------------------

/// Memory allocated by `malloc*`, owned by Rust and freed on drop.
pub struct Alloc {
    pub dev: AnyDevice,
    pub kind: MemoryKind,
    pub ptr: u64,
    pub len: usize,
    pub mem: Box<dyn Any + Send + Sync>,
}

static REGISTRY: Mutex<BTreeMap<u64, Weak<Alloc>>> = Mutex::new(BTreeMap::new());

impl Alloc {
    /// Registers a fresh allocation, so raw ints inside it are recognized.
    pub fn register(a: Alloc) -> Arc<Alloc> {
        let a = Arc::new(a);
        REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).insert(a.ptr, Arc::downgrade(&a));
        a
    }

    /// The live allocation containing `addr`, if any.
    pub fn find(addr: u64) -> Option<Arc<Alloc>> {
        let reg = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        let (_, w) = reg.range(..=addr).next_back()?;
        let a = w.upgrade()?;
        (addr < a.ptr.saturating_add(a.len as u64)).then_some(a)
    }
}

impl Drop for Alloc {
    fn drop(&mut self) {
        let mut reg = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        if reg.get(&self.ptr).is_some_and(|w| w.strong_count() == 0) {
            reg.remove(&self.ptr);
        }
    }
}

// ---- what a pointer argument resolved to -----------------------------------------

/// Where an address points.
#[derive(Clone)]
pub enum Space {
    /// NULL.
    Null,
    /// A raw address nothing is known about.
    Unknown,
    /// Host memory (a buffer, a host DLPack tensor, a `ListOf*` array).
    Host,
    /// Device memory, of this device where known.
    Device(Option<AnyDevice>),
    /// Managed memory.
    Managed(AnyDevice),
    /// Pinned host memory of this device.
    Pinned(AnyDevice),
}

/// Something a `Ptr` keeps alive.
pub enum Keep {
    Obj(#[allow(dead_code)] Py<PyAny>),
    Buf(#[allow(dead_code)] HeldBuffer),
    Alloc(Arc<Alloc>),
    Dl(#[allow(dead_code)] Producer),
}

/// A resolved pointer: the address, what is known about it, and what keeps it alive.
pub struct Ptr {
    pub addr: u64,
    pub space: Space,
    /// Bytes from `addr` that are known to be valid; `Some` only when held.
    pub len: Option<usize>,
    pub writable: bool,
    pub keep: Vec<Keep>,
}

impl Ptr {
    pub fn null() -> Ptr {
        Ptr { addr: 0, space: Space::Null, len: None, writable: false, keep: Vec::new() }
    }

    /// A raw address: recognized when it lies inside a live allocation.
    pub fn raw(addr: u64) -> Ptr {
        if addr == 0 {
            return Ptr::null();
        }
        match Alloc::find(addr) {
            Some(a) => Ptr::in_alloc(addr, a),
            None => Ptr { addr, space: Space::Unknown, len: None, writable: true, keep: Vec::new() },
        }
    }

    /// `addr` inside the allocation `a`.
    pub fn in_alloc(addr: u64, a: Arc<Alloc>) -> Ptr {
        let space = space_of(&a);
        let len = a.ptr.saturating_add(a.len as u64).saturating_sub(addr) as usize;
        Ptr { addr, space, len: Some(len), writable: true, keep: vec![Keep::Alloc(a)] }
    }

    /// Whether the memory is known and kept alive (safe to touch from the host side).
    pub fn held(&self) -> bool {
        self.len.is_some()
    }

    /// Whether the host may read and write the memory (host, pinned or
    /// managed memory, or the host backend's "device" memory).
    pub fn host_accessible(&self) -> bool {
        match &self.space {
            Space::Host | Space::Pinned(_) | Space::Managed(_) => true,
            Space::Device(Some(d)) => d.backend() == BackendKind::Host,
            _ => false,
        }
    }

    /// The device of the memory, where known.
    pub fn device(&self) -> Option<AnyDevice> {
        match &self.space {
            Space::Device(d) => d.clone(),
            Space::Managed(d) | Space::Pinned(d) => Some(d.clone()),
            _ => None,
        }
    }

    /// Another `Ptr` to the same memory (buffers are kept through `obj`).
    fn share(&self, obj: &Bound<'_, PyAny>) -> Ptr {
        let mut keep: Vec<Keep> = vec![Keep::Obj(obj.clone().unbind())];
        for k in &self.keep {
            if let Keep::Alloc(a) = k {
                keep.push(Keep::Alloc(a.clone()));
            }
        }
        Ptr { addr: self.addr, space: self.space.clone(), len: self.len, writable: self.writable, keep }
    }
}

fn space_of(a: &Alloc) -> Space {
    match a.kind {
        MemoryKind::Device | MemoryKind::Host => Space::Device(Some(a.dev.clone())),
        MemoryKind::Managed => Space::Managed(a.dev.clone()),
        MemoryKind::Pinned => Space::Pinned(a.dev.clone()),
    }
}

pub const ACCEPTED: &str = "None, a gpuport Pointer (or subclass), an int address, a ctypes.c_void_p, an object with __cuda_array_interface__, a contiguous buffer-protocol object, or a DLPack producer (__dlpack__)";

/// The error for an adapter already borrowed (re-entrant use from Python).
fn busy(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("the adapter is in use: {e}"))
}

fn ctypes_void_p<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    py.import("ctypes")?.getattr("c_void_p")
}

/// Converts anything `Pointer` accepts, in the order of docs/design.md#pointer-adapters.
pub fn to_ptr(obj: &Bound<'_, PyAny>) -> PyResult<Ptr> {
    let py = obj.py();
    // 1. None
    if obj.is_none() {
        return Ok(Ptr::null());
    }
    // 2. Pointer (and subclasses): no ownership transfer; the object is kept alive.
    if let Ok(p) = obj.cast::<PyPointer>() {
        let p = p.try_borrow().map_err(|e| PyValueError::new_err(format!("the Pointer is in use: {e}")))?;
        return Ok(p.p.share(obj));
    }
    // 3. int
    if obj.is_instance_of::<pyo3::types::PyInt>() {
        let addr: u64 = obj
            .extract()
            .map_err(|_| PyOverflowError::new_err(format!("address {obj} is not an unsigned 64-bit integer")))?;
        return Ok(Ptr::raw(addr));
    }
    // 4. ctypes.c_void_p
    if obj.is_instance(&ctypes_void_p(py)?)? {
        let v = obj.getattr("value")?;
        return Ok(if v.is_none() { Ptr::null() } else { Ptr::raw(v.extract()?) });
    }
    // 5. the CUDA Array Interface
    if obj.hasattr("__cuda_array_interface__")? {
        let cai = obj.getattr("__cuda_array_interface__")?;
        let cai = cai.cast::<PyDict>().map_err(|_| PyTypeError::new_err("__cuda_array_interface__ must be a dict"))?;
        let data =
            cai.get_item("data")?.ok_or_else(|| PyValueError::new_err("__cuda_array_interface__ has no \"data\""))?;
        let (addr, read_only): (u64, bool) = data.extract()?;
        let mut p = match Alloc::find(addr) {
            Some(a) => Ptr::in_alloc(addr, a),
            None => Ptr { addr, space: Space::Device(None), len: None, writable: !read_only, keep: Vec::new() },
        };
        if addr == 0 {
            p = Ptr::null();
        }
        p.writable = !read_only;
        p.keep.push(Keep::Obj(obj.clone().unbind()));
        return Ok(p);
    }
    // 6. the buffer protocol
    if let Some(b) = HeldBuffer::acquire(obj)? {
        return Ok(Ptr {
            addr: b.addr(),
            space: Space::Host,
            len: Some(b.len()),
            writable: b.writable(),
            keep: vec![Keep::Buf(b), Keep::Obj(obj.clone().unbind())],
        });
    }
    // 7. DLPack
    if obj.hasattr("__dlpack__")? {
        let cap = obj.call_method0("__dlpack__")?;
        let prod = take_capsule(py, &cap)?;
        let t = prod.tensor();
        if !t.is_contiguous() {
            return Err(PyBufferError::new_err("Pointer accepts only contiguous DLPack tensors"));
        }
        let dt = t.dtype();
        let nbytes = t.len().saturating_mul((dt.bits as usize * dt.lanes as usize).div_ceil(8));
        let dl = t.device();
        let addr = t.data_ptr() as usize as u64;
        let writable = !t.is_read_only();
        let open = |spec: String| gpuport::open(&spec).ok();
        let (space, len) = match dl.device_type {
            DLDeviceType::CPU | DLDeviceType::CUDA_HOST | DLDeviceType::ROCM_HOST => (Space::Host, Some(nbytes)),
            // Device memory of a known size, kept alive by the producer's tensor.
            DLDeviceType::CUDA => (Space::Device(open(format!("cuda:{}", dl.device_id.max(0)))), Some(nbytes)),
            DLDeviceType::ROCM => (Space::Device(open(format!("rocm:{}", dl.device_id.max(0)))), Some(nbytes)),
            DLDeviceType::CUDA_MANAGED => match open(format!("cuda:{}", dl.device_id.max(0))) {
                Some(d) => (Space::Managed(d), Some(nbytes)),
                None => (Space::Device(None), None),
            },
            other => return Err(PyValueError::new_err(format!("DLPack device type {} is not supported", other.0))),
        };
        let mut keep = vec![Keep::Dl(prod)];
        keep.push(Keep::Obj(obj.clone().unbind()));
        let space = if addr == 0 { Space::Null } else { space };
        return Ok(Ptr { addr, space, len, writable, keep });
    }
    Err(PyTypeError::new_err(format!("Pointer accepts {ACCEPTED}; got {}", obj.get_type().name()?)))
}

// ---- Pointer ---------------------------------------------------------------------

/// A pointer adapter (HIP Python's `Pointer`).
///
/// Built from None (NULL), another Pointer (no ownership transfer), an int
/// address, a ctypes.c_void_p, an object with __cuda_array_interface__, a
/// contiguous buffer-protocol object (the buffer is held until this adapter
/// is destroyed) or a DLPack producer. ``int(p)`` is the address.
///
/// Raw addresses (ints, c_void_p) are not owned and not checked: like in
/// HIP Python they are the caller's responsibility. gpuport never
/// dereferences them on the host unless they lie inside memory it holds.
#[pyclass(module = "gpuport._core", name = "Pointer", subclass)]
pub struct PyPointer {
    pub p: Ptr,
}

#[pymethods]
impl PyPointer {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyPointer {
            p: match obj {
                Some(o) => to_ptr(o)?,
                None => Ptr::null(),
            },
        })
    }

    fn __int__(&self) -> u64 {
        self.p.addr
    }

    /// Whether the address is NULL.
    #[getter]
    fn is_null(&self) -> bool {
        self.p.addr == 0
    }

    /// Bytes known to be valid from the address (None for raw addresses).
    #[getter]
    fn nbytes(&self) -> Option<usize> {
        self.p.len
    }

    /// Where the memory is: "null", "unknown", "host", "device", "managed" or "pinned".
    #[getter]
    fn memory_kind(&self) -> &'static str {
        match self.p.space {
            Space::Null => "null",
            Space::Unknown => "unknown",
            Space::Host => "host",
            Space::Device(_) => "device",
            Space::Managed(_) => "managed",
            Space::Pinned(_) => "pinned",
        }
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().name()?;
        let me = slf.try_borrow().map_err(busy)?;
        Ok(format!("<{name} {:#x} ({})>", me.p.addr, me.memory_kind()))
    }
}

// ---- DeviceArray -----------------------------------------------------------------

fn itemsize_of(typestr: &str) -> PyResult<usize> {
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

/// An array-interface type string from one (``"<f4"``) or from a dtype
/// (``"float32"``, ``numpy.float32``, a NumPy dtype).
fn normalize_typestr(t: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = t.extract::<String>() {
        if itemsize_of(&s).is_ok() {
            return Ok(s);
        }
    }
    let d = crate::dtype::dtype_from_py(t).map_err(|_| {
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
        .ok_or_else(|| PyOverflowError::new_err(format!("shape {shape:?} is too large")))
}

/// Device memory with shape and type: returned by ``malloc``; implements the
/// CUDA Array Interface (v3) for CUDA memory.
///
/// Also built from anything ``Pointer`` accepts; from an object with
/// ``__cuda_array_interface__`` (or another DeviceArray) the shape and type
/// are copied, otherwise the array has no shape or type until ``configure``.
#[pyclass(module = "gpuport._core", name = "DeviceArray", extends = PyPointer, subclass)]
pub struct PyDeviceArray {
    shape: Option<Vec<usize>>,
    typestr: String,
    itemsize: usize,
    /// The allocation this array owns (from `malloc`), until `free`.
    owned: Option<Arc<Alloc>>,
    freed: bool,
}

impl PyDeviceArray {
    pub fn from_alloc(a: Arc<Alloc>) -> PyClassInitializer<PyDeviceArray> {
        let p = Ptr::in_alloc(a.ptr, a.clone());
        PyClassInitializer::from(PyPointer { p }).add_subclass(PyDeviceArray {
            shape: Some(vec![a.len]),
            typestr: "|u1".into(),
            itemsize: 1,
            owned: Some(a),
            freed: false,
        })
    }

    /// Frees the owned allocation (the memory goes when no view or pending work needs it).
    pub fn free(slf: &Bound<'_, Self>) -> PyResult<()> {
        let mut me = slf.try_borrow_mut().map_err(busy)?;
        if me.freed {
            return Err(PyValueError::new_err("free: this DeviceArray was already freed (double free)"));
        }
        if me.owned.take().is_none() {
            return Err(PyValueError::new_err(
                "free: this DeviceArray does not own its memory (only arrays returned by malloc are freed by gpuport)",
            ));
        }
        me.freed = true;
        me.shape = Some(vec![0]);
        let mut base = me.into_super();
        base.p = Ptr::null();
        Ok(())
    }
}

#[pymethods]
impl PyDeviceArray {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        let Some(o) = obj.filter(|o| !o.is_none()) else {
            return Ok(PyClassInitializer::from(PyPointer { p: Ptr::null() }).add_subclass(PyDeviceArray {
                shape: None,
                typestr: "|u1".into(),
                itemsize: 1,
                owned: None,
                freed: false,
            }));
        };
        let (mut shape, mut typestr) = (None, "|u1".to_string());
        if let Ok(d) = o.cast::<PyDeviceArray>() {
            let d = d.try_borrow().map_err(|e| PyValueError::new_err(e.to_string()))?;
            shape.clone_from(&d.shape);
            typestr.clone_from(&d.typestr);
        } else if !o.is_instance_of::<PyPointer>() && o.hasattr("__cuda_array_interface__")? {
            let cai = o.getattr("__cuda_array_interface__")?;
            let cai =
                cai.cast::<PyDict>().map_err(|_| PyTypeError::new_err("__cuda_array_interface__ must be a dict"))?;
            if let Some(s) = cai.get_item("shape")? {
                shape = Some(s.extract::<Vec<usize>>()?);
            }
            if let Some(t) = cai.get_item("typestr")? {
                typestr = t.extract()?;
            }
        }
        let itemsize = itemsize_of(&typestr)?;
        let p = to_ptr(o)?;
        Ok(PyClassInitializer::from(PyPointer { p }).add_subclass(PyDeviceArray {
            shape,
            typestr,
            itemsize,
            owned: None,
            freed: false,
        }))
    }

    /// The shape (None when unknown).
    #[getter]
    fn shape(&self) -> Option<Vec<usize>> {
        self.shape.clone()
    }

    /// The array-interface type string (``"|u1"`` for raw bytes).
    #[getter]
    fn typestr(&self) -> String {
        self.typestr.clone()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.itemsize
    }

    /// Whether this array owns an allocation (from ``malloc``) not yet freed.
    #[getter]
    fn owns_memory(&self) -> bool {
        self.owned.is_some()
    }

    /// Changes shape and/or type; returns self. Sizes beyond the known
    /// memory (or any size when the memory is not known, e.g. a raw int)
    /// are refused unless ``_force=True`` (then accessing them is the
    /// caller's responsibility; gpuport's copies still check the real size).
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
        let have = slf.as_super().try_borrow().map_err(busy)?.p.len;
        let mut me = slf.try_borrow_mut().map_err(busy)?;
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
                    "configure: {need} bytes ({shape:?} of {typestr}) exceed the {h} bytes of the memory; pass _force=True to override"
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
        match &self.shape {
            Some(s) => nbytes_of(s, self.itemsize),
            None => Ok(0),
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        match self.shape.as_deref() {
            Some([n, ..]) => Ok(*n),
            _ => Err(PyTypeError::new_err("len() of a DeviceArray without a first axis")),
        }
    }

    /// The CUDA Array Interface (v3), for CUDA device or managed memory.
    #[getter]
    fn __cuda_array_interface__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let me = slf.try_borrow().map_err(busy)?;
        let base = slf.as_super().try_borrow().map_err(busy)?;
        let cuda = match &base.p.space {
            Space::Device(Some(d)) | Space::Managed(d) => d.backend() == BackendKind::Cuda,
            Space::Device(None) => true, // from a CUDA Array Interface or a CUDA DLPack tensor
            _ => false,
        };
        if !cuda {
            return Err(PyAttributeError::new_err(format!(
                "__cuda_array_interface__ is defined for CUDA memory only; this DeviceArray holds {} memory",
                base.memory_kind()
            )));
        }
        let shape = me.shape.clone().ok_or_else(|| {
            PyAttributeError::new_err("__cuda_array_interface__: the array has no shape (configure it)")
        })?;
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, shape)?)?;
        d.set_item("typestr", &me.typestr)?;
        d.set_item("data", (base.p.addr, !base.p.writable))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    /// A sub-array: ints and at most one step-1 slice along the leading
    /// axes (the result is contiguous). The parent is kept alive.
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyDeviceArray>> {
        let py = slf.py();
        let me = slf.try_borrow().map_err(busy)?;
        let shape =
            me.shape.clone().ok_or_else(|| PyTypeError::new_err("a DeviceArray without a shape cannot be indexed"))?;
        let keys: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![key.clone()],
        };
        if keys.len() > shape.len() {
            return Err(PyIndexError::new_err(format!("{} indices for {} dimensions", keys.len(), shape.len())));
        }
        let too_big = || PyOverflowError::new_err(format!("shape {shape:?} is too large to index"));
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
        let byte_off = offset.checked_mul(me.itemsize).ok_or_else(too_big)?;
        let nbytes = nbytes_of(&out_shape, me.itemsize)?;
        let base = slf.as_super().try_borrow().map_err(busy)?;
        let mut p = base.p.share(slf.as_any());
        p.addr = p.addr.wrapping_add(byte_off as u64);
        p.len = p.len.map(|l| l.saturating_sub(byte_off).min(nbytes));
        let init = PyClassInitializer::from(PyPointer { p }).add_subclass(PyDeviceArray {
            shape: Some(out_shape),
            typestr: me.typestr.clone(),
            itemsize: me.itemsize,
            owned: None,
            freed: false,
        });
        Py::new(py, init)
    }
}

// ---- lists -------------------------------------------------------------------------

fn seq_items<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = obj.cast::<PyList>() {
        return Some(l.iter().collect());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Some(t.iter().collect());
    }
    None
}

fn host_array<T: Copy>(v: &[T]) -> Ptr {
    if v.is_empty() {
        return Ptr::null();
    }
    Ptr {
        addr: v.as_ptr() as usize as u64,
        space: Space::Host,
        len: Some(std::mem::size_of_val(v)),
        writable: false,
        keep: Vec::new(),
    }
}

macro_rules! list_of_numbers {
    ($rust:ident, $pyname:literal, $t:ty, $what:literal) => {
        #[doc = concat!("A C array of ", $what, " (owning, from a list or tuple) or anything Pointer accepts (non-owning).")]
        #[pyclass(module = "gpuport._core", name = $pyname, extends = PyPointer, subclass)]
        pub struct $rust {
            values: Option<Vec<$t>>,
        }

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = (obj=None))]
            fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
                let Some(o) = obj else {
                    return Ok(PyClassInitializer::from(PyPointer { p: Ptr::null() }).add_subclass($rust { values: None }));
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
                    return Ok(PyClassInitializer::from(PyPointer { p }).add_subclass($rust { values: Some(v) }));
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
                Ok(PyClassInitializer::from(PyPointer { p }).add_subclass($rust { values: None }))
            }

            /// Whether this adapter owns its C array (made from a list or tuple).
            #[getter]
            fn is_owner(&self) -> bool {
                self.values.is_some()
            }

            /// The values of an owned array (None when not owned).
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
/// anything Pointer accepts (non-owning).
#[pyclass(module = "gpuport._core", name = "ListOfBytes", extends = PyPointer, subclass)]
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
            return Ok(
                PyClassInitializer::from(PyPointer { p: Ptr::null() }).add_subclass(PyListOfBytes { strings: None })
            );
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
                let b = b.as_bytes();
                if b.contains(&0) {
                    return Err(PyValueError::new_err(format!("ListOfBytes: item {i} contains a NUL byte")));
                }
                let mut v = b.to_vec();
                v.push(0);
                strings.push(v.into_boxed_slice());
            }
            let addrs: Vec<u64> = strings.iter().map(|s| s.as_ptr() as usize as u64).collect();
            let p = host_array(&addrs);
            return Ok(PyClassInitializer::from(PyPointer { p })
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
        Ok(PyClassInitializer::from(PyPointer { p }).add_subclass(PyListOfBytes { strings: None }))
    }

    /// Whether this adapter owns its C array.
    #[getter]
    fn is_owner(&self) -> bool {
        self.strings.is_some()
    }

    /// The strings of an owned array (None when not owned).
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
#[pyclass(module = "gpuport._core", name = "ListOfPointer", extends = PyPointer, subclass)]
pub struct PyListOfPointer {
    items: Option<(Vec<Ptr>, Vec<u64>)>,
}

#[pymethods]
impl PyListOfPointer {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        let Some(o) = obj else {
            return Ok(
                PyClassInitializer::from(PyPointer { p: Ptr::null() }).add_subclass(PyListOfPointer { items: None })
            );
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
            return Ok(
                PyClassInitializer::from(PyPointer { p }).add_subclass(PyListOfPointer { items: Some((ptrs, addrs)) })
            );
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
        Ok(PyClassInitializer::from(PyPointer { p }).add_subclass(PyListOfPointer { items: None }))
    }

    /// Whether this adapter owns its C array.
    #[getter]
    fn is_owner(&self) -> bool {
        self.items.is_some()
    }

    /// The addresses of an owned array (None when not owned).
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

/// One packed kernel argument.
pub enum Arg {
    /// A by-value ctypes argument.
    Value(Vec<u8>),
    /// A pointer argument (8 bytes), with what keeps its memory alive.
    Pointer(Ptr),
}

/// Kernel arguments for ``launch_kernel``: a list or tuple whose entries are
/// ctypes values (``c_int``, ``c_float``, ``c_uint64``, structures, ...;
/// passed by value) or anything ``Pointer`` accepts (passed as an address;
/// the memory is kept alive while the adapter is, and while a launch that
/// uses it is pending). ``int(args)`` is the address of the packed bytes.
#[pyclass(module = "gpuport._core", name = "KernelArgs", extends = PyPointer, subclass)]
pub struct PyKernelArgs {
    pub args: Vec<Arg>,
    packed: Vec<u8>,
}

fn is_ctypes_value(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let ct = obj.py().import("ctypes")?;
    if obj.is_instance(&ct.getattr("c_void_p")?)? {
        return Ok(true);
    }
    for base in ["_SimpleCData", "_Pointer", "Structure", "Union", "Array"] {
        if obj.is_instance(&ct.getattr(base)?)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Packs a list of kernel arguments.
pub fn pack_args(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Arg>> {
    let items = seq_items(obj).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "kernel arguments are a list or tuple of ctypes values and pointer-likes ({ACCEPTED}); got {}",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    let mut out = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        if is_ctypes_value(it)? {
            let b: Vec<u8> = obj.py().import("builtins")?.getattr("bytes")?.call1((it,))?.extract()?;
            out.push(Arg::Value(b));
        } else {
            out.push(Arg::Pointer(to_ptr(it).map_err(|e| {
                if e.is_instance_of::<PyTypeError>(obj.py()) {
                    PyTypeError::new_err(format!(
                        "kernel argument {i}: not a ctypes value, and a pointer argument accepts {ACCEPTED}; got {}",
                        it.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                    ))
                } else {
                    e
                }
            })?));
        }
    }
    Ok(out)
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
        Ok(PyClassInitializer::from(PyPointer { p }).add_subclass(PyKernelArgs { args, packed }))
    }

    pub fn to_kernel_args(&self) -> gpuport::KernelArgs {
        let mut k = gpuport::KernelArgs::new();
        for a in &self.args {
            match a {
                Arg::Value(b) => k.push_bytes(b),
                Arg::Pointer(p) => k.push(&p.addr),
            };
        }
        k
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

    /// The size in bytes of each argument.
    fn sizes(&self) -> Vec<usize> {
        self.args
            .iter()
            .map(|a| match a {
                Arg::Value(b) => b.len(),
                Arg::Pointer(_) => 8,
            })
            .collect()
    }

    /// The packed argument bytes, back to back.
    fn packed<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.packed)
    }
}
