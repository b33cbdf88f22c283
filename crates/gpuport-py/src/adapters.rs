//! HIP-Python-style pointer adapters ("Pointer adapters" in `docs/design.md`):
//! `Pointer` and `DeviceArray`,
//! and the conversion of every pointer argument (the list adapters and
//! `KernelArgs` are in [`crate::arglists`]).
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
//!
//! Sizes: every object that states its extent (a buffer, a DLPack tensor,
//! a CUDA Array Interface object's shape, strides and type, a MemArray, a
//! DeviceArray, an allocation) carries it in its `Ptr`, and copies and
//! memsets never go past it; only raw addresses are unchecked. A strided
//! object is an address but not a range: copies refuse it.
//!
//! Threads: `Pointer` and `DeviceArray` are `frozen`; the little they
//! change (a DeviceArray's shape and type, the address `free` clears) sits
//! in `Mutex`es held only for plain Rust work, with the GIL, so no PyO3
//! borrow can fail and no Python code (an `__index__`, a `__del__`) can
//! find them taken by another thread.

use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use gpuport::dlpack::{is_host_memory, DLDeviceType};
pub use gpuport::dynamic::raw::Place;
use gpuport::dynamic::raw::{RawAllocation, RawRange};
use gpuport::error::python;
use gpuport::{AnyDevice, BackendKind};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PySlice, PyTuple, PyType};

use crate::buffer::{Acquired, BufferExport};
use crate::cai::{itemsize_of, layout, CaiDesc, ReadInterface};
use crate::dlpack::{take_capsule, Producer};
use crate::errors::IntoPyResult;

// ---- what a pointer argument resolved to -----------------------------------------

/// Something a `Ptr` keeps alive.
pub enum Owner {
    Obj(#[allow(dead_code)] Py<PyAny>),
    Buf(#[allow(dead_code)] BufferExport),
    Alloc(Arc<RawAllocation>),
    Dl(#[allow(dead_code)] Producer),
}

/// A resolved pointer: the address, what is known about it, and what keeps it alive.
pub struct Ptr {
    pub addr: u64,
    pub space: Place,
    /// Bytes from `addr` that are known to be valid; `Some` only when held
    /// (kept alive by this `Ptr`, so gpuport may touch them from the host side).
    pub len: Option<usize>,
    /// Bytes from `addr` the object states it spans (a CUDA Array Interface
    /// object's shape and type), held or not: copies never exceed them.
    pub size: Option<usize>,
    /// `Some(layout)` when the object's elements do not fill one contiguous
    /// range (a strided view): fine as an address, refused by copies.
    pub strided: Option<String>,
    pub writable: bool,
    pub owners: Vec<Owner>,
}

impl Ptr {
    pub fn null() -> Ptr {
        Ptr { addr: 0, space: Place::Null, len: None, size: None, strided: None, writable: false, owners: Vec::new() }
    }

    /// A raw address: recognized when it lies inside a live allocation.
    pub fn raw(addr: u64) -> Ptr {
        if addr == 0 {
            return Ptr::null();
        }
        match RawAllocation::containing(addr) {
            Some(a) => Ptr::in_alloc(addr, a),
            None => Ptr { space: Place::Unknown, writable: true, ..Ptr::null_at(addr) },
        }
    }

    /// `addr` with nothing known about it yet.
    fn null_at(addr: u64) -> Ptr {
        Ptr { addr, ..Ptr::null() }
    }

    /// `addr` inside the allocation `a`.
    pub fn in_alloc(addr: u64, a: Arc<RawAllocation>) -> Ptr {
        let space = a.place();
        let len = a.ptr().saturating_add(a.len() as u64).saturating_sub(addr) as usize;
        Ptr { space, len: Some(len), writable: true, owners: vec![Owner::Alloc(a)], ..Ptr::null_at(addr) }
    }

    /// Kept memory of `len` bytes (a buffer, a DLPack tensor, a C array).
    pub fn kept_at(addr: u64, space: Place, len: usize, writable: bool, owners: Vec<Owner>) -> Ptr {
        Ptr { space, len: Some(len), size: Some(len), writable, owners, ..Ptr::null_at(addr) }
    }

    /// Whether the memory is known and kept alive (safe to touch from the host side).
    pub fn is_kept(&self) -> bool {
        self.len.is_some()
    }

    /// The range for the core's copies and memsets ([`gpuport::dynamic::raw`]).
    pub fn range(&self) -> RawRange {
        // SAFETY: `len` is `Some` only for memory this `Ptr` keeps alive
        // through `owners` (a buffer export, a DLPack tensor, an allocation),
        // writable only where the object allows writes; a caller keeps the
        // `Ptr` until its work has run (a synchronous call waits, an async
        // one hands it to `keep::keep_until_done`). A range not kept is a
        // bare address taken at the caller's word, as in HIP Python.
        unsafe { RawRange::new(self.addr, self.space.clone(), self.len, self.size, self.writable) }
    }

    /// The bytes a copy may reach from the address (see [`RawRange::known_size`]).
    pub fn known_size(&self) -> Option<usize> {
        self.range().known_size()
    }

    /// Whether the host may read and write the memory.
    pub fn host_accessible(&self) -> bool {
        self.range().host_accessible()
    }

    /// The device of the memory, where known.
    pub fn device(&self) -> Option<AnyDevice> {
        self.space.device()
    }

    /// Another `Ptr` to the same memory (buffers are kept through `obj`).
    fn share(&self, obj: &Bound<'_, PyAny>) -> Ptr {
        let allocs = self.owners.iter().filter(|k| matches!(k, Owner::Alloc(_))).count();
        let mut owners: Vec<Owner> = Vec::with_capacity(1 + allocs);
        owners.push(Owner::Obj(obj.clone().unbind()));
        for k in &self.owners {
            if let Owner::Alloc(a) = k {
                owners.push(Owner::Alloc(a.clone()));
            }
        }
        Ptr {
            addr: self.addr,
            space: self.space.clone(),
            len: self.len,
            size: self.size,
            strided: self.strided.clone(),
            writable: self.writable,
            owners,
        }
    }
}

pub const ACCEPTED: &str = "None, a gpuport Pointer (or subclass), an int address, a ctypes.c_void_p, an object with __cuda_array_interface__, a contiguous buffer-protocol object, or a DLPack producer (__dlpack__)";

/// What a copy or memset accepts as one contiguous range.
const RANGES: &str = "C- or Fortran-contiguous arrays and buffers (e.g. numpy.ascontiguousarray(x), \
     tensor.contiguous()), DLPack tensors and CUDA Array Interface objects with compact strides, MemArray, \
     DeviceArray, or a raw int address or ctypes.c_void_p (unchecked)";

/// The error for a strided object where a copy needs one contiguous range.
pub fn not_contiguous(what: &str, obj: &Bound<'_, PyAny>, layout: &str) -> PyErr {
    let name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into());
    PyValueError::new_err(format!(
        "{what}: the {name} ({layout}) is not contiguous, and a copy or memset needs one contiguous range of memory \
         (it would write or read the gaps between the elements); accepted: {RANGES}"
    ))
}

/// The error for an adapter used again from Python code that a call on it is running.
fn busy() -> PyErr {
    PyValueError::new_err(
        "the adapter is busy in this thread: a call on it is running Python code that used it again; use it after that call returns",
    )
}

/// Short-lived access to an adapter's state: taken with the GIL held, never
/// across Python code or a GIL release, so another thread cannot find it
/// taken; finding it taken means re-entry from this thread.
fn state<T>(m: &Mutex<T>) -> PyResult<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(TryLockError::WouldBlock) => Err(busy()),
    }
}

/// `ctypes.c_void_p`, looked up once.
fn ctypes_void_p(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static C_VOID_P: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let t = C_VOID_P.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        Ok(py.import("ctypes")?.getattr("c_void_p")?.cast_into::<PyType>()?.unbind())
    })?;
    Ok(t.bind(py))
}

/// Static types (not heap types: built-ins, `numpy.ndarray`, `array.array`)
/// whose instances were found without `__cuda_array_interface__` and have
/// no instance `__dict__`: their attributes are fixed (a static type cannot
/// be given attributes, nor can such an instance), so the next instance is
/// not asked again. Asking raises an AttributeError, which costs more than
/// the rest of the conversion of a buffer.
static NO_CAI: Mutex<Vec<Py<PyType>>> = Mutex::new(Vec::new());

/// Types remembered in `NO_CAI`, at most.
const NO_CAI_MAX: usize = 32;

/// `obj.__cuda_array_interface__`, or `None` where it has none (as
/// `hasattr`: only an AttributeError counts as none).
fn cuda_array_interface<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = obj.py();
    let ty = obj.get_type();
    let known = |t: &Py<PyType>| t.as_ptr() == ty.as_ptr();
    if NO_CAI.lock().unwrap_or_else(|p| p.into_inner()).iter().any(known) {
        return Ok(None);
    }
    match obj.getattr(pyo3::intern!(py, "__cuda_array_interface__")) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_instance_of::<PyAttributeError>(py) => {
            // SAFETY: `ty` is a live type object (held by `obj`), and we hold the GIL.
            let flags = unsafe { pyo3::ffi::PyType_GetFlags(ty.as_type_ptr()) };
            let heap = flags & pyo3::ffi::Py_TPFLAGS_HEAPTYPE != 0;
            if !heap && !obj.hasattr(pyo3::intern!(py, "__dict__"))? {
                let mut no = NO_CAI.lock().unwrap_or_else(|p| p.into_inner());
                if no.len() < NO_CAI_MAX && !no.iter().any(known) {
                    no.push(ty.unbind());
                }
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// What the caller needs of a pointer argument.
#[derive(Clone, Copy)]
enum Need<'a> {
    /// An address (a `Pointer`, a kernel argument): strided objects are
    /// taken as CUDA Array Interface objects, refused as buffers and DLPack
    /// tensors (`BufferError`, as always).
    Address,
    /// One contiguous range for the operand named here (memcpy, memset):
    /// every strided object is refused with a `ValueError`.
    Range(&'a str),
}

/// Converts anything `Pointer` accepts, in the order `docs/design.md` gives.
pub fn to_ptr(obj: &Bound<'_, PyAny>) -> PyResult<Ptr> {
    convert(obj, Need::Address)
}

/// Converts a pointer-like operand of a copy or memset (`what`: "dst" or
/// "src"): as `to_ptr`, and refuses memory that is not one contiguous range.
pub fn to_range(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Ptr> {
    let p = convert(obj, Need::Range(what))?;
    match &p.strided {
        Some(layout) => Err(not_contiguous(what, obj, layout)),
        None => Ok(p),
    }
}

fn convert(obj: &Bound<'_, PyAny>, need: Need<'_>) -> PyResult<Ptr> {
    let py = obj.py();
    // 1. None
    if obj.is_none() {
        return Ok(Ptr::null());
    }
    // 2. Pointer (and subclasses): no ownership transfer; the object is kept alive.
    if let Ok(p) = obj.cast::<PyPointer>() {
        let shared = state(&p.get().p)?.share(obj);
        return Ok(shared);
    }
    // 3. int
    if obj.is_instance_of::<pyo3::types::PyInt>() {
        let addr: u64 = obj
            .extract()
            .map_err(|_| PyOverflowError::new_err(format!("address {obj} is not an unsigned 64-bit integer")))?;
        return Ok(Ptr::raw(addr));
    }
    // 4. ctypes.c_void_p
    if obj.is_instance(ctypes_void_p(py)?.as_any())? {
        let v = obj.getattr("value")?;
        return Ok(if v.is_none() { Ptr::null() } else { Ptr::raw(v.extract()?) });
    }
    // 5. the CUDA Array Interface: its shape, strides and type give the extent.
    if let Some(cai) = cuda_array_interface(obj)? {
        let desc = CaiDesc::from_value(&cai)?;
        let layout = desc.layout().py_err(obj.py())?;
        let addr = desc.data;
        let mut p = match RawAllocation::containing(addr) {
            Some(a) => Ptr::in_alloc(addr, a),
            None => Ptr { space: Place::Device(None), ..Ptr::null_at(addr) },
        };
        if addr == 0 {
            p = Ptr::null();
        }
        match layout {
            Some(l) if l.is_dense() => p.size = Some(l.bytes),
            Some(_) => {
                let strides = desc.strides.as_deref().unwrap_or_default();
                let shape: Vec<i64> = desc.shape.iter().flatten().map(|&e| e as i64).collect();
                p.strided = Some(format!("shape {}, strides {} bytes", python::tuple(&shape), python::tuple(strides)));
                p.len = None; // an allocation's tail is not what the object covers
            }
            None => {}
        }
        p.writable = !desc.read_only;
        p.owners.push(Owner::Obj(obj.clone().unbind()));
        return Ok(p);
    }
    // 6. the buffer protocol
    match BufferExport::acquire(obj)? {
        Acquired::Contiguous(b) => {
            let (addr, len, writable) = (b.addr(), b.byte_len(), b.writable());
            return Ok(Ptr::kept_at(
                addr,
                Place::Host,
                len,
                writable,
                vec![Owner::Buf(b), Owner::Obj(obj.clone().unbind())],
            ));
        }
        Acquired::NotContiguous(layout, err) => {
            return Err(match need {
                Need::Range(what) => not_contiguous(what, obj, &layout),
                Need::Address => PyBufferError::new_err(format!(
                    "Pointer accepts only contiguous buffers; {} refused: {err}",
                    obj.get_type().name()?
                )),
            })
        }
        Acquired::NoBuffer => {}
    }
    // 7. DLPack
    if obj.hasattr("__dlpack__")? {
        // Versioned where the producer can: read-only and padded sub-byte
        // tensors come only in versioned capsules.
        let cap = crate::exchange::dlpack_capsule(obj, None, None)?;
        let prod = take_capsule(py, &cap)?;
        let t = prod.tensor();
        let dt = t.dtype();
        let itemsize = (dt.bits as usize * dt.lanes as usize).div_ceil(8);
        let shape: Vec<usize> = t.shape().iter().map(|&e| e as usize).collect();
        let strides: Vec<i64> = t.strides().iter().map(|&s| s.saturating_mul(itemsize as i64)).collect();
        let l = layout(&shape, Some(&strides), itemsize)?;
        if !l.is_dense() {
            let desc = format!("shape {}, strides {} bytes", python::tuple(&shape), python::tuple(&strides));
            return Err(match need {
                Need::Range(what) => not_contiguous(what, obj, &desc),
                Need::Address => PyBufferError::new_err(format!(
                    "Pointer accepts only contiguous DLPack tensors; the {} ({desc}) is strided, and a copy through it \
                     would reach the gaps between its elements; pass a C- or Fortran-contiguous tensor \
                     (tensor.contiguous(), numpy.ascontiguousarray(x))",
                    obj.get_type().name()?
                )),
            });
        }
        let nbytes = l.bytes;
        let dl = t.device();
        let addr = t.data_ptr() as usize as u64;
        let writable = !t.is_read_only();
        let open = |spec: String| gpuport::open(&spec).ok();
        let space = match dl.device_type {
            t if is_host_memory(t) => Place::Host,
            // Device memory of a known size, kept alive by the producer's tensor.
            DLDeviceType::CUDA => Place::Device(open(format!("cuda:{}", dl.device_id.max(0)))),
            DLDeviceType::ROCM => Place::Device(open(format!("rocm:{}", dl.device_id.max(0)))),
            DLDeviceType::CUDA_MANAGED => match open(format!("cuda:{}", dl.device_id.max(0))) {
                Some(d) => Place::Managed(d),
                None => Place::Device(None),
            },
            other => return Err(PyValueError::new_err(format!("DLPack device type {} is not supported", other.0))),
        };
        let owners = vec![Owner::Dl(prod), Owner::Obj(obj.clone().unbind())];
        let mut p = Ptr::kept_at(addr, space, nbytes, writable, owners);
        if matches!(p.space, Place::Device(None)) {
            p.len = None; // managed memory of a device we cannot open: size known, not held
        }
        if addr == 0 {
            p.space = Place::Null;
        }
        return Ok(p);
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
/// Sizes: an object that states its extent (a buffer, a DLPack tensor, a
/// CUDA Array Interface object, a MemArray, a DeviceArray) has ``nbytes``,
/// and every memcpy/memset checks it. Raw addresses (ints, c_void_p) are
/// unchecked: not owned and of unknown size, they are the caller's
/// responsibility, as in HIP Python. gpuport never dereferences them on the
/// host unless they lie inside memory it holds.
///
///     >>> from gpuport import runtime as rt
///     >>> p = rt.Pointer(bytearray(16))      # holds the buffer
///     >>> p.nbytes, p.memory_kind, p.is_null
///     (16, 'host', False)
///     >>> null = rt.Pointer(None)
///     >>> int(null), null.is_null, null.nbytes, null.memory_kind
///     (0, True, None, 'null')
#[pyclass(module = "gpuport._core", name = "Pointer", subclass, frozen)]
pub struct PyPointer {
    /// Changes only when a DeviceArray is freed.
    p: Mutex<Ptr>,
}

impl PyPointer {
    pub fn from_ptr(p: Ptr) -> Self {
        PyPointer { p: Mutex::new(p) }
    }

    /// The address.
    pub fn addr(&self) -> PyResult<u64> {
        Ok(state(&self.p)?.addr)
    }
}

#[pymethods]
impl PyPointer {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyPointer::from_ptr(match obj {
            Some(o) => to_ptr(o)?,
            None => Ptr::null(),
        }))
    }

    fn __int__(&self) -> PyResult<u64> {
        self.addr()
    }

    /// Whether the address is NULL.
    #[getter]
    fn is_null(&self) -> PyResult<bool> {
        Ok(self.addr()? == 0)
    }

    /// Bytes known from the address: held memory, or the extent the object
    /// states (None for raw addresses and strided views).
    #[getter]
    fn nbytes(&self) -> PyResult<Option<usize>> {
        let p = state(&self.p)?;
        Ok(if p.strided.is_some() { None } else { p.known_size() })
    }

    /// Where the memory is: "null", "unknown", "host", "device", "managed" or "pinned".
    #[getter]
    fn memory_kind(&self) -> PyResult<&'static str> {
        Ok(Place::name(&state(&self.p)?.space))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().name()?;
        let (addr, kind) = {
            let p = state(&slf.get().p)?;
            (p.addr, Place::name(&p.space))
        };
        Ok(format!("<{name} {addr:#x} ({kind})>"))
    }
}

// ---- DeviceArray -----------------------------------------------------------------

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
        .ok_or_else(|| PyOverflowError::new_err(format!("shape {} is too large", python::tuple(shape))))
}

/// A DeviceArray's shape and type.
struct Dims {
    shape: Option<Vec<usize>>,
    typestr: String,
    itemsize: usize,
    /// The allocation this array owns (from `malloc`), until `free`.
    owned: Option<Arc<RawAllocation>>,
    freed: bool,
}

/// Device memory with shape and type: returned by ``malloc``; implements the
/// CUDA Array Interface (v3) for CUDA memory.
///
/// Also built from anything ``Pointer`` accepts; from an object with
/// ``__cuda_array_interface__`` (C-contiguous; or another DeviceArray) the
/// shape and type are copied, otherwise the array has no shape or type
/// until ``configure``.
///
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(16, device="host")
///     >>> a.shape, a.typestr, a.itemsize, a.size_bytes, len(a), a.owns_memory
///     ([16], '|u1', 1, 16, 16, True)
///     >>> view = a[4:8]                      # a view of a, which owns the memory
///     >>> view.shape, view.owns_memory
///     ([4], False)
///     >>> rt.free(a)
///     >>> a.owns_memory, a.is_null
///     (False, True)
#[pyclass(module = "gpuport._core", name = "DeviceArray", extends = PyPointer, subclass, frozen)]
pub struct PyDeviceArray {
    dims: Mutex<Dims>,
}

impl PyDeviceArray {
    fn with(shape: Option<Vec<usize>>, typestr: &str, itemsize: usize, owned: Option<Arc<RawAllocation>>) -> Self {
        PyDeviceArray { dims: Mutex::new(Dims { shape, typestr: typestr.into(), itemsize, owned, freed: false }) }
    }

    pub fn from_alloc(a: Arc<RawAllocation>) -> PyClassInitializer<PyDeviceArray> {
        let p = Ptr::in_alloc(a.ptr(), a.clone());
        let len = a.len();
        PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(Some(vec![len]), "|u1", 1, Some(a)))
    }

    /// Frees the owned allocation (the memory goes when no view or pending work needs it).
    pub fn free(slf: &Bound<'_, Self>) -> PyResult<()> {
        let owned = {
            let mut d = state(&slf.get().dims)?;
            if d.freed {
                return Err(PyValueError::new_err("free: this DeviceArray was already freed (double free)"));
            }
            let Some(owned) = d.owned.take() else {
                return Err(PyValueError::new_err(
                    "free: this DeviceArray does not own its memory (only arrays returned by malloc are freed by gpuport)",
                ));
            };
            d.freed = true;
            d.shape = Some(vec![0]);
            owned
        };
        let old = std::mem::replace(&mut *state(&slf.as_super().get().p)?, Ptr::null());
        // Dropped outside the locks: releasing memory may run Python code.
        drop(old);
        drop(owned);
        Ok(())
    }
}

#[pymethods]
impl PyDeviceArray {
    #[new]
    #[pyo3(signature = (obj=None))]
    fn new(obj: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        let Some(o) = obj.filter(|o| !o.is_none()) else {
            return Ok(PyClassInitializer::from(PyPointer::from_ptr(Ptr::null()))
                .add_subclass(Self::with(None, "|u1", 1, None)));
        };
        let (mut shape, mut typestr) = (None, "|u1".to_string());
        if let Ok(d) = o.cast::<PyDeviceArray>() {
            let d = state(&d.get().dims)?;
            shape.clone_from(&d.shape);
            typestr.clone_from(&d.typestr);
        } else if !o.is_instance_of::<PyPointer>() && o.hasattr("__cuda_array_interface__")? {
            let desc = CaiDesc::read(o)?;
            if let Some(l) = desc.layout().py_err(o.py())? {
                if !l.c_order {
                    let strides = desc.strides.as_deref().unwrap_or_default();
                    let shape: Vec<i64> = desc.shape.iter().flatten().map(|&e| e as i64).collect();
                    let layout = format!("shape {}, strides {} bytes", python::tuple(&shape), python::tuple(strides));
                    return Err(PyValueError::new_err(format!(
                        "DeviceArray: the {} ({layout}) is not contiguous in C order, and a DeviceArray describes \
                         C-contiguous memory; pass a C-contiguous array (e.g. tensor.contiguous())",
                        o.get_type().name()?
                    )));
                }
            }
            shape = desc.shape;
            if let Some(t) = desc.typestr {
                typestr = t;
            }
        }
        let itemsize = itemsize_of(&typestr)?;
        let p = to_ptr(o)?;
        Ok(PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(shape, &typestr, itemsize, None)))
    }

    /// The shape (None when unknown).
    #[getter]
    fn shape(&self) -> PyResult<Option<Vec<usize>>> {
        Ok(state(&self.dims)?.shape.clone())
    }

    /// The array-interface type string (``"|u1"`` for raw bytes).
    #[getter]
    fn typestr(&self) -> PyResult<String> {
        Ok(state(&self.dims)?.typestr.clone())
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> PyResult<usize> {
        Ok(state(&self.dims)?.itemsize)
    }

    /// Whether this array owns an allocation (from ``malloc``) not yet freed.
    #[getter]
    fn owns_memory(&self) -> PyResult<bool> {
        Ok(state(&self.dims)?.owned.is_some())
    }

    /// Changes shape and/or type; returns self. Sizes beyond the known
    /// memory (or any size when the memory is not known, e.g. a raw int)
    /// are refused unless ``_force=True`` (then accessing them is the
    /// caller's responsibility; gpuport's copies still check the real size).
    ///
    ///     >>> from gpuport import runtime as rt
    ///     >>> a = rt.malloc(16, device="host").configure(typestr="<u4")
    ///     >>> a.shape, a.typestr, a.itemsize  # 16 bytes are 4 uint32
    ///     ([4], '<u4', 4)
    ///     >>> a.configure(shape=(2, 2)).shape
    ///     [2, 2]
    ///     >>> a.configure(shape=8)
    ///     Traceback (most recent call last):
    ///     ValueError: configure: 32 bytes ((8,) of <u4) exceed the 16 bytes of the memory; ...
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
        let have = state(&slf.as_super().get().p)?.known_size();
        let mut me = state(&slf.get().dims)?;
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
                    "configure: {need} bytes ({} of {typestr}) exceed the {h} bytes of the memory; pass _force=True to override",
                    python::tuple(&shape)
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
        let d = state(&self.dims)?;
        match &d.shape {
            Some(s) => nbytes_of(s, d.itemsize),
            None => Ok(0),
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        match state(&self.dims)?.shape.as_deref() {
            Some([n, ..]) => Ok(*n),
            _ => Err(PyTypeError::new_err("len() of a DeviceArray without a first axis")),
        }
    }

    /// The CUDA Array Interface (v3), for CUDA device or managed memory.
    #[getter]
    fn __cuda_array_interface__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let (shape, typestr) = {
            let d = state(&slf.get().dims)?;
            (d.shape.clone(), d.typestr.clone())
        };
        let (cuda, kind, addr, writable) = {
            let p = state(&slf.as_super().get().p)?;
            let cuda = match &p.space {
                Place::Device(Some(d)) | Place::Managed(d) => d.backend() == BackendKind::Cuda,
                Place::Device(None) => true, // from a CUDA Array Interface or a CUDA DLPack tensor
                _ => false,
            };
            (cuda, Place::name(&p.space), p.addr, p.writable)
        };
        if !cuda {
            return Err(PyAttributeError::new_err(format!(
                "__cuda_array_interface__ is defined for CUDA memory only; this DeviceArray holds {kind} memory"
            )));
        }
        let shape = shape.ok_or_else(|| {
            PyAttributeError::new_err("__cuda_array_interface__: the array has no shape (configure it)")
        })?;
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, shape)?)?;
        d.set_item("typestr", typestr)?;
        d.set_item("data", (addr, !writable))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    /// A sub-array: ints and at most one step-1 slice along the leading
    /// axes (the result is contiguous). The parent is kept alive.
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyDeviceArray>> {
        let py = slf.py();
        // A snapshot: reading the key below runs Python code (`__index__`),
        // which may use this array again.
        let (shape, typestr, itemsize) = {
            let d = state(&slf.get().dims)?;
            (d.shape.clone(), d.typestr.clone(), d.itemsize)
        };
        let mut p = state(&slf.as_super().get().p)?.share(slf.as_any());
        let shape = shape.ok_or_else(|| PyTypeError::new_err("a DeviceArray without a shape cannot be indexed"))?;
        let keys: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![key.clone()],
        };
        if keys.len() > shape.len() {
            return Err(PyIndexError::new_err(format!("{} indices for {} dimensions", keys.len(), shape.len())));
        }
        let too_big = || PyOverflowError::new_err(format!("shape {} is too large to index", python::tuple(&shape)));
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
        let byte_off = offset.checked_mul(itemsize).ok_or_else(too_big)?;
        let nbytes = nbytes_of(&out_shape, itemsize)?;
        p.addr = p.addr.wrapping_add(byte_off as u64);
        p.len = p.len.map(|l| l.saturating_sub(byte_off).min(nbytes));
        p.size = p.size.map(|l| l.saturating_sub(byte_off).min(nbytes));
        let init = PyClassInitializer::from(PyPointer::from_ptr(p)).add_subclass(Self::with(
            Some(out_shape),
            &typestr,
            itemsize,
            None,
        ));
        Py::new(py, init)
    }
}
