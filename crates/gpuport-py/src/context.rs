//! `DLPackContext`, what `MemArray.get_dlpack()` returns: a context manager
//! that locks the array for its `with` block and exports it through DLPack
//! with the lock id.
//!
//! A context is used once: fresh (exports without a lock, as a plain
//! export), entered (holds the array's lock id; exports with it), then
//! closed (exports nothing more: the array may move or change its data
//! after the block; tensors taken inside keep their memory alive, so they
//! stay safe to read and write, but they no longer track the array).
//! `__exit__` always gives the lock back: it waits (GIL released) for a
//! call another thread is making on the array and cannot fail to unlock.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use gpuport::array::Location;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::stream::StreamArg;
use crate::errors::{self, IntoPyResult};
use crate::exchange::{parse_dl_device, parse_version, ExportRequest};
use crate::memarray::PyMemArray;

const FRESH: u8 = 0;
const ENTERED: u8 = 1;
const CLOSED: u8 = 2;

/// Lock ids handed out by `get_dlpack`: a per-process random base plus a counter.
fn next_lock_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(std::process::id() as u64);
        h.finish() >> 16
    });
    base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) | 1
}

/// The object `MemArray.get_dlpack()` returns: a context manager that locks
/// the array for its block and exports it through DLPack with the lock id.
///
///     >>> import gpuport, numpy as np
///     >>> a = gpuport.MemArray(2, "int32", device="host")
///     >>> ctx = a.get_dlpack()
///     >>> ctx.array is a
///     True
///     >>> with ctx:
///     ...     x = np.from_dlpack(ctx)              # `ctx.__dlpack__`, with the lock
///     ...     a.lock_id == ctx.lock_id
///     True
///     >>> x
///     array([0, 0], dtype=int32)
#[pyclass(module = "gpuport._core", name = "DLPackContext", frozen)]
pub struct DLPackContext {
    array: Py<PyMemArray>,
    lock_id: u64,
    readonly: bool,
    /// The copy `get_dlpack(device_type)` asked for, and the stream to move it
    /// on (a foreign stream's object kept with it).
    prefer: Option<(Location, StreamArg)>,
    /// FRESH, ENTERED or CLOSED; changed only while holding the array's lock.
    phase: AtomicU8,
}

impl DLPackContext {
    pub fn new(array: Py<PyMemArray>, readonly: bool, prefer: Option<(Location, StreamArg)>) -> Self {
        DLPackContext { array, lock_id: next_lock_id(), readonly, prefer, phase: AtomicU8::new(FRESH) }
    }

    fn ended(&self, py: Python<'_>, what: &str) -> PyErr {
        errors::dlpack(
            py,
            format!(
                "{what}: this get_dlpack block has ended (lock id {}); the array may have moved or changed since, \
                 so call array.get_dlpack() again (tensors taken inside the block stay valid)",
                self.lock_id
            ),
        )
    }
}

#[pymethods]
impl DLPackContext {
    /// The lock id this context holds inside its `with` block.
    #[getter]
    fn lock_id(&self) -> u64 {
        self.lock_id
    }

    /// The array.
    #[getter]
    fn array(&self, py: Python<'_>) -> Py<PyMemArray> {
        self.array.clone_ref(py)
    }

    /// Locks the array with this context's id (and makes the copy
    /// `get_dlpack(device_type)` named current, under the lock).
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        let me = slf.get();
        let array = me.array.bind(py).get();
        let mut st = array.state(py)?;
        match me.phase.load(Ordering::Acquire) {
            FRESH => {}
            ENTERED => {
                return Err(errors::lock(
                    py,
                    format!("this get_dlpack block (lock id {}) is already entered; a context is entered once", me.lock_id),
                ))
            }
            _ => {
                return Err(errors::lock(
                    py,
                    format!(
                        "__enter__: this get_dlpack block has ended (lock id {}); call array.get_dlpack() again for a new block",
                        me.lock_id
                    ),
                ))
            }
        }
        // The core re-moves an owned array to the copy asked for (another
        // thread may have moved it since get_dlpack()), now locked.
        let entered = match &me.prefer {
            Some((to, s)) => py.detach(|| st.enter_block(me.lock_id, Some((*to, s)))),
            None => st.enter_block(me.lock_id, None),
        };
        entered.py_err_in(py, "get_dlpack")?;
        me.phase.store(ENTERED, Ordering::Release);
        drop(st);
        Ok(slf)
    }

    /// Unlocks the array (whatever happened in the block) and closes the context.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let array = self.array.bind(py).get();
        let mut st = array.state(py)?;
        // Only an entered block closes; exiting a fresh or closed one releases nothing.
        let was_entered = self.phase.compare_exchange(ENTERED, CLOSED, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if was_entered && st.lock_id() == Some(self.lock_id) {
            st.exit();
        }
        Ok(false)
    }

    /// As `MemArray.__dlpack__`, with this context's lock (and READ_ONLY
    /// when made with `readonly=True`); refused once the block has ended.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let array = self.array.bind(py).get();
        let mut req = ExportRequest {
            stream,
            max_version: parse_version(max_version)?,
            dl_device: parse_dl_device(dl_device)?,
            copy,
            read_only: self.readonly,
            lock: None,
            prefer: self.prefer.as_ref().map(|(l, _)| *l),
        };
        let mut st = array.state(py)?;
        match self.phase.load(Ordering::Acquire) {
            FRESH => {}
            ENTERED => req.lock = Some(gpuport::array::LockId(self.lock_id)),
            _ => return Err(self.ended(py, "__dlpack__")),
        }
        crate::exchange::export(py, &mut st, req)
    }

    fn __dlpack_device__(&self, py: Python<'_>) -> PyResult<(i32, i32)> {
        let array = self.array.bind(py).get();
        let st = array.state(py)?;
        let loc = self.prefer.as_ref().map(|(l, _)| *l).unwrap_or_else(|| st.natural());
        Ok(crate::exchange::dl_pair(st.dl(loc)))
    }
}
