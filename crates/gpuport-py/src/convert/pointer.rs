//! The conversion of every pointer argument ("Pointer adapters" in
//! `docs/design.md`) into a [`Ptr`], and the type of the `Pointer` adapter,
//! [`PyPointer`], which the conversion recognises (its Python methods and
//! `DeviceArray` are in [`crate::raw`]; the list adapters and `KernelArgs`
//! in [`crate::module`], the argument lists in [`crate::convert::arglist`]).
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
use gpuport::AnyDevice;
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::convert::buffer::{Acquired, BufferExport};
use crate::convert::cai::{layout, CaiDesc, ReadInterface};
use crate::convert::capsule::{take_capsule, Producer};
use crate::convert::error::IntoPyResult;
use crate::convert::memarray::PyMemArray;

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
    pub(crate) fn share(&self, obj: &Bound<'_, PyAny>) -> Ptr {
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
pub(crate) fn state<T>(m: &Mutex<T>) -> PyResult<MutexGuard<'_, T>> {
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
        // The interface names no device; a MemArray knows its own. Other
        // objects are not asked (a `device` attribute of a foreign type
        // may run any code and means what that library says).
        if matches!(p.space, Place::Device(None)) {
            if let Ok(a) = obj.cast::<PyMemArray>() {
                p.space = p.space.on_known_device(a.get().any_device());
            }
        }
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
        let cap = crate::convert::capsule::dlpack_capsule(obj, None, None)?;
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
    pub(crate) p: Mutex<Ptr>,
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
