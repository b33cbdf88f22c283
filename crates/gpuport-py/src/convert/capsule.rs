//! DLPack capsules: making them (export), taking them (import), and the
//! counters the tests read to prove nothing leaks.
//!
//! Capsule protocol (array API standard, DLPack's Python spec):
//! - an exported capsule is named `dltensor` (legacy) or
//!   `dltensor_versioned`; a consumer that takes the tensor renames it to
//!   `used_dltensor[_versioned]` and calls the deleter itself, later;
//! - the capsule's destructor calls the deleter only if the capsule still
//!   has its original name (never consumed), and keeps any exception that
//!   is being raised.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use gpuport::dlpack::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use gpuport::dlpack::ImportedTensor;
use gpuport::dynamic::exchange::Export;
use gpuport::dynamic::import_route::DLPACK_CALLS;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use crate::convert::error::{self, IntoPyResult};

const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";
const USED_LEGACY: &CStr = c"used_dltensor";
const USED_VERSIONED: &CStr = c"used_dltensor_versioned";

/// Exports made (capsules, array interfaces excluded).
static EXPORTS_MADE: AtomicUsize = AtomicUsize::new(0);
/// Exports whose memory is still held by a consumer or an unconsumed capsule.
static EXPORTS_LIVE: AtomicUsize = AtomicUsize::new(0);
/// Unconsumed capsules whose destructor called the deleter.
static CAPSULES_FREED_UNUSED: AtomicUsize = AtomicUsize::new(0);
/// Foreign tensors imported and not yet released to their producer.
static IMPORTS_LIVE: AtomicUsize = AtomicUsize::new(0);
/// Foreign tensors released to their producer (deleter called).
static IMPORTS_RELEASED: AtomicUsize = AtomicUsize::new(0);
/// Tensors handed out by gpuport's `__dlpack_c_exchange_api__` table
/// (`managed_tensor_from_py_object_no_sync` and the allocator).
static TABLE_EXPORTS: AtomicUsize = AtomicUsize::new(0);
/// Tensors `from_dlpack` took through a producer's exchange table.
static TABLE_IMPORTS: AtomicUsize = AtomicUsize::new(0);

/// Counts a tensor handed out through gpuport's exchange table.
pub fn count_table_export() {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    TABLE_EXPORTS.fetch_add(1, Ordering::SeqCst);
}

/// Counts a tensor taken through a producer's exchange table (once
/// counting has begun, as [`count_table_export`]).
pub fn count_table_import() {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    TABLE_IMPORTS.fetch_add(1, Ordering::SeqCst);
}

/// The owner of an export's memory, counted while alive.
struct Tracked;

impl Drop for Tracked {
    fn drop(&mut self) {
        EXPORTS_LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A foreign tensor kept by a `MemArray`; its producer's deleter runs
/// (through `ImportedTensor`'s drop) when the last holder lets go.
pub struct Producer(pub ImportedTensor);

impl AsRef<ImportedTensor> for Producer {
    fn as_ref(&self) -> &ImportedTensor {
        &self.0
    }
}

// SAFETY: an `ImportedTensor` is a validated description of memory plus the
// producer's deleter. DLPack allows the deleter to be called from any thread
// (producers that need the GIL, such as NumPy and PyTorch, take it in the
// deleter), and gpuport only reads the description's plain fields.
unsafe impl Send for Producer {}
// SAFETY: as above; shared access only reads plain fields.
unsafe impl Sync for Producer {}

impl Producer {
    /// The tensor (a method, so closures capture the `Sync` wrapper).
    pub fn tensor(&self) -> &ImportedTensor {
        &self.0
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        IMPORTS_LIVE.fetch_sub(1, Ordering::SeqCst);
        IMPORTS_RELEASED.fetch_add(1, Ordering::SeqCst);
    }
}

/// Whether exports are counted: from the first [`_dlpack_stats`] call on
/// (the tests'), so that an exchange pays nothing for the counters (an
/// allocation and two atomic operations were a fifth of a C-table export).
static COUNTING: AtomicBool = AtomicBool::new(false);

/// Counts an export (made, and live until its memory's owner goes): every
/// tensor gpuport hands out, through a capsule or the C exchange API, once
/// counting has begun.
///
/// Says whether it was counted. Takes the export by reference: moving it
/// in and out cost two copies of the struct per exchange.
pub fn track(e: &mut Export) -> bool {
    if !COUNTING.load(Ordering::Relaxed) {
        return false;
    }
    EXPORTS_MADE.fetch_add(1, Ordering::SeqCst);
    EXPORTS_LIVE.fetch_add(1, Ordering::SeqCst);
    e.keep_also(Arc::new(Tracked));
    true
}

/// Builds the capsule for an export the core negotiated.
pub fn make_capsule(py: Python<'_>, mut e: Export) -> PyResult<Bound<'_, PyAny>> {
    let counted = track(&mut e);
    if e.versioned_minor().is_some() {
        let raw = e.into_versioned().into_raw();
        // SAFETY: `raw` is a live tensor with the versioned name's layout, ours.
        unsafe { new_capsule(py, raw as *mut c_void, VERSIONED, versioned_destructor) }
    } else {
        // Refused for sub-byte dtypes (no flag says they are padded); the
        // core's `export` refuses those first, so this is a second guard.
        let raw = match e.into_legacy() {
            Ok(t) => t.into_raw(),
            Err(err) => {
                // Nothing was made: the export's `Tracked` owner is dropped already.
                if counted {
                    EXPORTS_MADE.fetch_sub(1, Ordering::SeqCst);
                }
                return Err(error::to_py(py, err));
            }
        };
        // SAFETY: as above, for a legacy tensor.
        unsafe { new_capsule(py, raw as *mut c_void, LEGACY, legacy_destructor) }
    }
}

/// # Safety
/// `ptr` is a live managed tensor of the kind `name` says, owned by us.
unsafe fn new_capsule<'py>(
    py: Python<'py>,
    ptr: *mut c_void,
    name: &'static CStr,
    destructor: unsafe extern "C" fn(*mut ffi::PyObject),
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `name` is static, as the capsule keeps the pointer.
    let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(destructor)) };
    if cap.is_null() {
        // Not handed over: free it ourselves.
        // SAFETY: the tensor is ours and live (see `# Safety`).
        unsafe { call_deleter(ptr, name) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `PyCapsule_New` returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) })
}

/// # Safety
/// `ptr` is a live tensor of the kind `name` says whose deleter nobody else calls.
unsafe fn call_deleter(ptr: *mut c_void, name: &CStr) {
    if ptr.is_null() {
        return;
    }
    if name == VERSIONED {
        let t = ptr as *mut DLManagedTensorVersioned;
        // SAFETY: per the contract.
        if let Some(d) = unsafe { (*t).deleter } {
            // SAFETY: the one call of the deleter.
            unsafe { d(t) };
        }
    } else {
        let t = ptr as *mut DLManagedTensor;
        // SAFETY: per the contract.
        if let Some(d) = unsafe { (*t).deleter } {
            // SAFETY: the one call of the deleter.
            unsafe { d(t) };
        }
    }
}

/// # Safety
/// Called by Python with a capsule made by `new_capsule`.
unsafe fn destroy(cap: *mut ffi::PyObject, name: &'static CStr) {
    // SAFETY: `cap` is a live capsule (Python calls the destructor on one).
    if unsafe { ffi::PyCapsule_IsValid(cap, name.as_ptr()) } != 1 {
        return; // renamed by a consumer, who owns the tensor now
    }
    let (mut t, mut v, mut tb) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: saving the error indicator, restored below, as the DLPack spec asks.
    unsafe { ffi::PyErr_Fetch(&mut t, &mut v, &mut tb) };
    // SAFETY: the capsule is valid with this name (checked).
    let ptr = unsafe { ffi::PyCapsule_GetPointer(cap, name.as_ptr()) };
    // SAFETY: an unconsumed capsule still owns its tensor; this is the one deleter call.
    unsafe { call_deleter(ptr, name) };
    CAPSULES_FREED_UNUSED.fetch_add(1, Ordering::SeqCst);
    // SAFETY: restores what was fetched above.
    unsafe { ffi::PyErr_Restore(t, v, tb) };
}

unsafe extern "C" fn legacy_destructor(cap: *mut ffi::PyObject) {
    // SAFETY: Python calls this with our capsule.
    unsafe { destroy(cap, LEGACY) }
}

unsafe extern "C" fn versioned_destructor(cap: *mut ffi::PyObject) {
    // SAFETY: Python calls this with our capsule.
    unsafe { destroy(cap, VERSIONED) }
}

/// Takes the tensor out of a DLPack capsule (renaming it `used_*`, so its
/// destructor leaves the tensor to us) and validates it.
pub fn take_capsule(py: Python<'_>, cap: &Bound<'_, PyAny>) -> PyResult<Producer> {
    if !cap.is_instance_of::<PyCapsule>() {
        return Err(error::dlpack(py, format!("__dlpack__ returned {}, not a PyCapsule", cap.get_type().name()?)));
    }
    let p = cap.as_ptr();
    for (name, used, versioned) in [(VERSIONED, USED_VERSIONED, true), (LEGACY, USED_LEGACY, false)] {
        // SAFETY: `p` is a live capsule (type checked above).
        if unsafe { ffi::PyCapsule_IsValid(p, name.as_ptr()) } != 1 {
            continue;
        }
        // SAFETY: valid with this name.
        let ptr = unsafe { ffi::PyCapsule_GetPointer(p, name.as_ptr()) };
        if ptr.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `used` is static; after renaming, the capsule's destructor
        // (the producer's) must leave the tensor alone, and we own it.
        if unsafe { ffi::PyCapsule_SetName(p, used.as_ptr()) } != 0 {
            return Err(PyErr::fetch(py));
        }
        return if versioned {
            // SAFETY: a producer's live tensor whose deleter is now ours to
            // call (once, by `ImportedTensor`); DLPack producers keep the
            // memory and the shape/stride arrays alive until then.
            unsafe { take_versioned(py, ptr as *mut DLManagedTensorVersioned) }
        } else {
            take_tensor(py, || {
                // SAFETY: as above, for a legacy tensor.
                unsafe { ImportedTensor::from_legacy(ptr as *mut DLManagedTensor) }
            })
        };
    }
    Err(error::dlpack(
        py,
        "the capsule is not an unconsumed DLPack capsule (named \"dltensor\" or \"dltensor_versioned\"); \
         a capsule can be consumed only once"
            .into(),
    ))
}

/// Takes a producer's tensor (counted as an import; `take` validates it and
/// calls its deleter when it is refused).
fn take_tensor(py: Python<'_>, take: impl FnOnce() -> gpuport::Result<ImportedTensor>) -> PyResult<Producer> {
    IMPORTS_LIVE.fetch_add(1, Ordering::SeqCst);
    let t = take();
    if t.is_err() {
        // The deleter has run inside `from_*`.
        IMPORTS_LIVE.fetch_sub(1, Ordering::SeqCst);
        IMPORTS_RELEASED.fetch_add(1, Ordering::SeqCst);
    }
    t.map(Producer).py_err(py)
}

/// Takes ownership of a producer's versioned tensor (from a capsule or a
/// `__dlpack_c_exchange_api__` table) and validates it; a refused tensor
/// is released (its deleter called) before the error returns. A null
/// pointer is an error with nothing to release.
///
/// # Safety
/// `ptr` is null or a live `DLManagedTensorVersioned` whose deleter nobody
/// else will call, whose shape and strides arrays and memory stay valid
/// until then.
pub unsafe fn take_versioned(py: Python<'_>, ptr: *mut DLManagedTensorVersioned) -> PyResult<Producer> {
    // SAFETY: forwarded contract.
    take_tensor(py, || unsafe { ImportedTensor::from_versioned(ptr) })
}

/// `obj.__dlpack__(stream=stream, ...)` with each of the core's
/// [`DLPACK_CALLS`] in turn: a versioned capsule where the producer makes
/// one, else, from a producer that refuses the keywords (a `TypeError`), a
/// legacy one.
pub fn dlpack_capsule<'py>(
    obj: &Bound<'py, PyAny>,
    stream: Option<i64>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let mut refused = None;
    for max_version in DLPACK_CALLS {
        let kwargs = PyDict::new(py);
        kwargs.set_item("stream", stream)?;
        if let Some(v) = max_version {
            kwargs.set_item("max_version", v)?;
            if let Some(c) = copy {
                kwargs.set_item("copy", c)?;
            }
        }
        match obj.call_method("__dlpack__", (), Some(&kwargs)) {
            Err(e) if e.is_instance_of::<PyTypeError>(py) && max_version.is_some() => refused = Some(e),
            other => return other,
        }
    }
    Err(refused.unwrap_or_else(|| PyTypeError::new_err("__dlpack__ was not called")))
}

/// Counters for tests: exports made and live, unconsumed capsules freed,
/// imports live and released, tensors through exchange tables (ours, others').
/// The export counters ("exports_made", "exports_live",
/// "exports_through_table") and "imports_through_table" count from the
/// first call of this function on.
#[pyfunction]
pub fn _dlpack_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    COUNTING.store(true, Ordering::SeqCst);
    let d = PyDict::new(py);
    d.set_item("exports_made", EXPORTS_MADE.load(Ordering::SeqCst))?;
    d.set_item("exports_live", EXPORTS_LIVE.load(Ordering::SeqCst))?;
    d.set_item("capsules_freed_unused", CAPSULES_FREED_UNUSED.load(Ordering::SeqCst))?;
    d.set_item("imports_live", IMPORTS_LIVE.load(Ordering::SeqCst))?;
    d.set_item("imports_released", IMPORTS_RELEASED.load(Ordering::SeqCst))?;
    d.set_item("exports_through_table", TABLE_EXPORTS.load(Ordering::SeqCst))?;
    d.set_item("imports_through_table", TABLE_IMPORTS.load(Ordering::SeqCst))?;
    Ok(d)
}
