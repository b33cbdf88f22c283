//! DLPack 1.3's C exchange API for Python (`dlpack/dlpack.h`, section
//! "DLPack `__dlpack_c_exchange_api__` fast exchange protocol definitions").
//!
//! Producer: `MemArray.__dlpack_c_exchange_api__` is a `PyCapsule` named
//! "dlpack_exchange_api" holding [`API`], gpuport's one `DLPackExchangeAPI`
//! for the process, on every backend. Its `extern "C"` functions convert
//! Python objects and call the core ([`gpuport::dynamic::exchange_api`]),
//! which does the work the same way for host, CUDA and ROCm arrays:
//! - `managed_tensor_from_py_object_no_sync`: a `MemArray` to an owning
//!   versioned tensor, without synchronizing the consumer;
//! - `managed_tensor_to_py_object_no_sync`: a tensor (of any producer) to a
//!   `MemArray` over it, stealing the tensor;
//! - `current_work_stream`: the device's default stream (NULL on CUDA and
//!   ROCm; host memory has none);
//! - `managed_tensor_allocator`: a zero-filled `MemArray` through the core's
//!   `new_owned`, exported whole;
//! - `dltensor_from_py_object_no_sync` is NULL (the header allows it): a
//!   `MemArray` has no shape and stride arrays of its own that could stay
//!   valid without an export.
//!
//! Each function returns 0 on success and -1 on failure. The ones that take
//! or make Python objects, and `current_work_stream`, leave a Python
//! exception set on failure, as the header asks; the allocator calls its
//! `SetError(error_ctx, kind, message)` (or, when the caller passed none,
//! sets a Python exception). No Rust panic crosses the C boundary: each
//! body runs under `catch_unwind`, and a panic becomes a `RuntimeError`.
//!
//! Consumer: [`import_through_table`], used by `gpuport.from_dlpack` when
//! `type(x).__dlpack_c_exchange_api__` is a usable table.

use std::ffi::{c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use gpuport::dlpack::ffi::{
    DLManagedTensorVersioned, DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackSetError, DLPackVersion,
    DLPACK_EXCHANGE_API_ATTRIBUTE, DLPACK_EXCHANGE_API_CAPSULE_NAME, DLPACK_EXCHANGE_API_MINOR_VERSION,
    DLPACK_MAJOR_VERSION,
};
use gpuport::dlpack::{DLDevice, DLDeviceType, DLTensor};
use gpuport::dynamic::exchange::Export;
use gpuport::dynamic::exchange_api as core;
use gpuport::dynamic::import_route::{self, LazyView};
use gpuport::Error;
use pyo3::exceptions::{PyAttributeError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;

use crate::convert::capsule::{count_table_export, count_table_import, take_versioned, track, Producer};
use crate::convert::error::{self, IntoPyResult};
use crate::convert::exchange::{device_of, imported_from_producer};
use crate::convert::memarray::{AnyArray, PyMemArray};
use crate::convert::stream::resolve_stream;

/// gpuport's table, one for the whole process as the header requires.
/// `header.version` is 1.3, the header version that defines this table.
pub static API: DLPackExchangeAPI = DLPackExchangeAPI {
    header: DLPackExchangeAPIHeader {
        version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_EXCHANGE_API_MINOR_VERSION },
        prev_api: std::ptr::null_mut(),
    },
    managed_tensor_allocator: Some(managed_tensor_allocator),
    managed_tensor_from_py_object_no_sync: Some(managed_tensor_from_py_object_no_sync),
    managed_tensor_to_py_object_no_sync: Some(managed_tensor_to_py_object_no_sync),
    dltensor_from_py_object_no_sync: None,
    current_work_stream: Some(current_work_stream),
};

/// The capsule `MemArray.__dlpack_c_exchange_api__` holds: [`API`], under
/// the header's name, with no destructor (the table is static).
pub fn capsule(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let ptr = std::ptr::addr_of!(API).cast_mut().cast::<c_void>();
    // SAFETY: `ptr` is a static that outlives the capsule; the name is a
    // static C string, as `PyCapsule_New` keeps the pointer.
    let cap = unsafe { ffi::PyCapsule_New(ptr, DLPACK_EXCHANGE_API_CAPSULE_NAME.as_ptr(), None) };
    if cap.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `PyCapsule_New` returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}

// ---- producer: the table's functions ----------------------------------------------------

/// Runs `f` with the GIL (taken if the caller does not hold it): an error
/// is left set as the Python exception and gives -1, as does a panic (as a
/// `RuntimeError` naming `what`); success gives 0.
fn with_python(what: &str, f: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    guarded(what, || Python::attach(|py| report(py, f(py))))
}

/// [`with_python`] for the table's two functions on Python objects, which
/// the header has the caller call with the GIL held (they take or return a
/// `PyObject*` and leave a Python exception on failure): the GIL is not
/// taken again. pyo3's `attach` from a thread pyo3 has not seen attached
/// calls `PyGILState_Ensure` and `Release` every time, about a tenth of a
/// table export's time (measured with perf).
///
/// # Safety
/// The calling thread holds the GIL.
unsafe fn with_held_python(what: &str, f: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    guarded(what, || {
        // SAFETY: the caller holds the GIL for the whole call; the token
        // does not outlive `f`.
        let py = unsafe { Python::assume_attached() };
        report(py, f(py))
    })
}

/// `f`'s code, or -1 with a `RuntimeError` naming `what` when it panicked.
fn guarded(what: &str, f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        raise_panic(what);
        -1
    })
}

/// 0 for success; -1 with the error left set as the Python exception.
fn report(py: Python<'_>, r: PyResult<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            e.restore(py);
            -1
        }
    }
}

/// Sets a `RuntimeError` for a panic caught in `what` (a second panic while
/// doing so is caught too: the function still returns -1).
fn raise_panic(what: &str) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        Python::attach(|py| {
            PyRuntimeError::new_err(format!("gpuport panicked in {what} of its __dlpack_c_exchange_api__")).restore(py)
        })
    }));
}

/// The owning tensor `managed_tensor_from_py_object_no_sync` gives for `obj`.
fn export_tensor(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<*mut DLManagedTensorVersioned> {
    let a = obj.cast::<PyMemArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "gpuport's managed_tensor_from_py_object_no_sync takes a gpuport.MemArray, not {}",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "another type".into())
        ))
    })?;
    let mut guard = a.get().state(py)?;
    let st: &mut AnyArray = &mut guard;
    let pack = |mut e: Export| {
        count_table_export();
        track(&mut e);
        e.into_versioned()
    };
    // Only pending work can make the export wait (the host waiting for it):
    // the GIL is released for that, and kept otherwise (it costs a switch).
    let t = if st.transfer_pending().py_err_in(py, "__dlpack_c_exchange_api__")? {
        py.detach(|| core::export_no_sync_then(st, pack))
    } else {
        core::export_no_sync_then(st, pack)
    };
    Ok(t.py_err_in(py, "__dlpack_c_exchange_api__")?.into_raw())
}

/// `managed_tensor_from_py_object_no_sync`.
unsafe extern "C" fn managed_tensor_from_py_object_no_sync(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    let body = |py: Python<'_>| {
        if out.is_null() || py_object.is_null() {
            return Err(PyValueError::new_err(
                "managed_tensor_from_py_object_no_sync: py_object and out must not be NULL",
            ));
        }
        // SAFETY: `out` is not null and, per the header, points to a
        // writable `DLManagedTensorVersioned*`.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: the header passes a live `PyObject*`, borrowed for the call.
        let obj = unsafe { Bound::from_borrowed_ptr(py, py_object.cast::<ffi::PyObject>()) };
        let t = export_tensor(py, &obj)?;
        // SAFETY: as above.
        unsafe { *out = t };
        Ok(())
    };
    // SAFETY: the header's caller holds the GIL for this function.
    unsafe { with_held_python("managed_tensor_from_py_object_no_sync", body) }
}

/// `managed_tensor_to_py_object_no_sync`: steals `tensor` (its deleter
/// runs once, when the `MemArray` is gone or at once on failure).
unsafe extern "C" fn managed_tensor_to_py_object_no_sync(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    let body = |py: Python<'_>| {
        // Taken first, so that every failure below releases the tensor.
        // SAFETY: the header hands over a live tensor (or null, refused
        // with nothing to release) whose ownership is stolen.
        let producer = unsafe { take_versioned(py, tensor) };
        if out_py_object.is_null() {
            return Err(PyValueError::new_err("managed_tensor_to_py_object_no_sync: out_py_object must not be NULL"));
        }
        // SAFETY: not null; per the header a writable `void*`.
        unsafe { *out_py_object = std::ptr::null_mut() };
        let array = PyMemArray::from_imported(imported_from_producer(py, producer?)?);
        let obj = Bound::new(py, array)?.into_any();
        // SAFETY: as above; the new reference goes to the caller.
        unsafe { *out_py_object = obj.into_ptr().cast::<c_void>() };
        Ok(())
    };
    // SAFETY: the header's caller holds the GIL for this function.
    unsafe { with_held_python("managed_tensor_to_py_object_no_sync", body) }
}

/// `current_work_stream`: needs no Python unless it fails.
unsafe extern "C" fn current_work_stream(
    device_type: DLDeviceType,
    device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int {
    let run = catch_unwind(|| core::current_work_stream(DLDevice { device_type, device_id }));
    match run {
        Ok(Ok(handle)) if !out_current_stream.is_null() => {
            // SAFETY: not null; per the header a writable `void*`.
            unsafe { *out_current_stream = handle as *mut c_void };
            0
        }
        Ok(Ok(_)) => with_python("current_work_stream", |_| {
            Err(PyValueError::new_err("current_work_stream: out_current_stream must not be NULL"))
        }),
        Ok(Err(e)) => with_python("current_work_stream", |py| Err(error::to_py_in(py, e, Some("current_work_stream")))),
        Err(_) => {
            raise_panic("current_work_stream");
            -1
        }
    }
}

/// The builtin Python exception an allocator failure is reported as
/// (`SetError`'s `kind`): the builtin the gpuport class `from_dlpack` would
/// raise derives from.
fn builtin_kind(e: &Error) -> CString {
    CString::new(e.python_class().builtin()).unwrap_or_default()
}

/// `managed_tensor_allocator`: needs no Python unless it fails and the
/// caller passed no `SetError`.
unsafe extern "C" fn managed_tensor_allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<DLPackSetError>,
) -> c_int {
    const WHAT: &str = "managed_tensor_allocator";
    let run = catch_unwind(|| {
        if out.is_null() {
            return Err(Error::InvalidArgument { name: "out", reason: "must not be NULL".into() });
        }
        // SAFETY: not null; per the header a writable `DLManagedTensorVersioned*`.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: the header passes a prototype whose shape has `ndim` extents.
        let mut e = unsafe { core::allocate(prototype) }?;
        count_table_export();
        track(&mut e);
        let t = e.into_versioned().into_raw();
        // SAFETY: as above.
        unsafe { *out = t };
        Ok(())
    });
    let e = match run {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(_) => {
            match set_error {
                // SAFETY: the caller's callback with its own context and two C strings.
                Some(f) => unsafe {
                    f(error_ctx, c"RuntimeError".as_ptr(), c"gpuport panicked in managed_tensor_allocator".as_ptr())
                },
                None => raise_panic(WHAT),
            }
            return -1;
        }
    };
    match set_error {
        Some(f) => {
            let kind = builtin_kind(&e);
            let message = CString::new(e.python_message(Some(WHAT)).replace('\0', " ")).unwrap_or_default();
            // SAFETY: the caller's callback with its own context; both
            // strings outlive the call (the header: called exactly when
            // the allocator fails).
            unsafe { f(error_ctx, kind.as_ptr(), message.as_ptr()) };
            -1
        }
        None => with_python(WHAT, |py| Err(error::to_py_in(py, e, Some(WHAT)))),
    }
}

// ---- consumer --------------------------------------------------------------------------

/// `type(obj).__dlpack_c_exchange_api__` as a table of major version 1
/// (the capsule's, or one down its `prev_api` chain), or `None` when the
/// type offers none, offers something else than a capsule of that name, or
/// only tables of other major versions.
fn table_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<&'static DLPackExchangeAPI>> {
    static ATTR: PyOnceLock<Py<PyString>> = PyOnceLock::new();
    let py = obj.py();
    let name = ATTR.get_or_init(py, || PyString::intern(py, DLPACK_EXCHANGE_API_ATTRIBUTE).unbind());
    // Looked up on the type, as the header requires.
    let attr = match obj.get_type().as_any().getattr(name.bind(py)) {
        Ok(a) => a,
        Err(e) if e.is_instance_of::<PyAttributeError>(py) => return Ok(None),
        Err(e) => return Err(e),
    };
    let name = DLPACK_EXCHANGE_API_CAPSULE_NAME.as_ptr();
    // SAFETY: `attr` is a live object; `PyCapsule_IsValid` sets no error.
    if unsafe { ffi::PyCapsule_IsValid(attr.as_ptr(), name) } != 1 {
        return Ok(None);
    }
    // SAFETY: a valid capsule of this name: its pointer is not null.
    let header = unsafe { ffi::PyCapsule_GetPointer(attr.as_ptr(), name) };
    // SAFETY: a "dlpack_exchange_api" capsule holds a `DLPackExchangeAPI`
    // that the header requires to live, unchanged, for the whole process.
    Ok(unsafe { DLPackExchangeAPI::find_major(header.cast::<DLPackExchangeAPIHeader>()) })
}

/// The error for a producer's table function that returned `rc` (the
/// producer's Python exception, if it set one, is the cause).
fn producer_failed(obj: &Bound<'_, PyAny>, call: &str, rc: c_int) -> PyErr {
    let py = obj.py();
    let cause = PyErr::take(py);
    let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    let why = match &cause {
        Some(c) => format!(": {c}"),
        None => " and set no Python exception".into(),
    };
    let e = error::dlpack(py, format!("{ty}.__dlpack_c_exchange_api__: {call} returned {rc}{why}"));
    e.set_cause(py, cause);
    e
}

/// The core's [`import_route::refuse_lazy_views`] for `obj`: its
/// `is_conj()` and `is_neg()`, where it has them (`LazyView::method`).
fn refuse_lazy_views(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = obj.py();
    let is_set = |view: LazyView| -> PyResult<bool> {
        let Ok(f) = obj.getattr(view.method()) else { return Ok(false) };
        f.call0()?.is_truthy()
    };
    let type_name = || obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "tensor".into());
    import_route::refuse_lazy_views(obj.cast::<crate::convert::memarray::PyMemArray>().is_ok(), is_set, type_name)?
        .py_err(py)
}

/// The table of `type(obj).__dlpack_c_exchange_api__` (DLPack 1.3) when
/// gpuport can use it: major version 1 and the functions a consumer needs
/// (`managed_tensor_from_py_object_no_sync`, `current_work_stream`) not
/// NULL. `Ok(None)` otherwise: `from_dlpack` then takes the Python-level
/// `__dlpack__` protocol (`gpuport::dynamic::import_route`).
pub fn usable_table(obj: &Bound<'_, PyAny>) -> PyResult<Option<&'static DLPackExchangeAPI>> {
    Ok(table_of(obj)?
        .filter(|api| api.managed_tensor_from_py_object_no_sync.is_some() && api.current_work_stream.is_some()))
}

/// Imports `obj` through its type's exchange table `api` (from [`usable_table`]).
///
/// A tensor marked conjugate or negative (torch's `is_conj()`, `is_neg()`)
/// is refused, as the Python protocol refuses it: its memory holds the
/// unconjugated (or unnegated) values, which a DLPack tensor cannot mark,
/// and the table may export it anyway.
///
/// The tensor comes unsynchronized; for GPU memory gpuport's stream
/// (`stream`, default: the device's default stream) then waits for the
/// producer's current work stream, as `__dlpack__(stream=ours)` would have
/// made it. When `managed_tensor_from_py_object_no_sync` fails, the
/// producer's own exception is raised (as when its `__dlpack__` raises);
/// when `current_work_stream` fails, a `DLPackError` naming the call, with
/// the producer's exception as its cause.
pub fn import_through_table(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    api: &'static DLPackExchangeAPI,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<Producer> {
    let (Some(from_py_object), Some(work_stream)) =
        (api.managed_tensor_from_py_object_no_sync, api.current_work_stream)
    else {
        return Err(error::dlpack(py, "the exchange table lacks a consumer's functions".into()));
    };
    refuse_lazy_views(obj)?;
    let mut raw: *mut DLManagedTensorVersioned = std::ptr::null_mut();
    // SAFETY: the table's function for objects of this type, called as the
    // header prescribes: the GIL held, a live object, a writable `out`.
    let rc = unsafe { from_py_object(obj.as_ptr().cast::<c_void>(), &mut raw) };
    if rc != 0 {
        // As the producer's `__dlpack__` raising would: its own exception.
        return Err(match PyErr::take(py) {
            Some(e) => e,
            None => producer_failed(obj, "managed_tensor_from_py_object_no_sync", rc),
        });
    }
    count_table_import();
    // SAFETY: on success the producer handed over an owning tensor.
    let producer = unsafe { take_versioned(py, raw) }?;
    let dl = producer.tensor().device();
    let mut theirs: *mut c_void = std::ptr::null_mut();
    // SAFETY: as above; any device type may be asked (host memory gives NULL).
    let rc = unsafe { work_stream(dl.device_type, dl.device_id, &mut theirs) };
    if rc != 0 {
        let call = format!(
            "current_work_stream({}, {})",
            dl.device_type.name().map(str::to_string).unwrap_or_else(|| dl.device_type.0.to_string()),
            dl.device_id
        );
        let e = producer_failed(obj, &call, rc);
        drop(producer); // the tensor goes back to its producer
        return Err(e);
    }
    if core::is_ordered_by_streams(dl.device_type) {
        let dev = device_of(py, dl)?;
        let ours = resolve_stream(py, &dev, stream)?;
        let theirs = theirs as usize;
        // SAFETY: the producer's current work stream of this device.
        py.detach(|| unsafe { core::order_after_producer(dl, &ours, theirs) }).py_err_in(py, "from_dlpack")?;
    }
    Ok(producer)
}
