//! The Python `MemArray`'s type, [`PyMemArray`], and what it holds: the
//! array's state ([`AnyArray`], the core's owned or imported array) behind
//! its lock, and the helpers the modules that name the type share (state,
//! moves, targets, extent checks).
//!
//! The type sits here, among the conversions, because the conversions
//! recognise it (DLPack, the C exchange table, the CUDA Array Interface) and
//! several class files hand it out. Its Python methods are in
//! [`crate::array`], `get_dlpack` in [`crate::context`].

use gpuport::array::{Location, LockId, Transfer};
pub use gpuport::dynamic::array::natural_of;
use gpuport::dynamic::target::{move_target, TargetName};
pub use gpuport::dynamic::{AnyArray, DynArray, ImportedArray};
use gpuport::AnyDevice;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::convert::dtype::DType;
use crate::convert::error::IntoPyResult;
use crate::convert::exclusive::{Exclusive, ExclusiveGuard, LockDetached};
use crate::convert::stream::AnyStream;

/// What never changes about an array: read without its lock.
pub(crate) struct Meta {
    pub(crate) dtype: DType,
    pub(crate) shape: gpuport::dynamic::Shape,
    pub(crate) device: AnyDevice,
    pub(crate) imported: bool,
    pub(crate) read_only: bool,
}

/// An N-dimensional array with a host copy and a device copy (`MemArray` in
/// `docs/design.md`), or a zero-copy import of another library's array.
///
///     >>> import gpuport, numpy as np
///     >>> a = gpuport.MemArray((2, 3), "float32", device="host")   # zero-filled
///     >>> a.shape, a.ndim, a.size, len(a)
///     ((2, 3), 2, 6, 2)
///     >>> a.dtype, a.itemsize, a.nbytes
///     ('float32', 4, 24)
///     >>> a.device.spec, a.residency, a.is_imported, a.readonly
///     ('host', 'host', False, False)
///     >>> a.lock_id, a.transfer_pending, a.live_exports, a.data_ptr != 0
///     (None, False, 0, True)
///     >>> a.add_index()                      # on the device: the device copy is current
///     >>> a.residency
///     'device'
///     >>> np.from_dlpack(a)                  # DLPack, zero-copy (`__dlpack__`)
///     array([[0., 1., 2.],
///            [1., 2., 3.]], dtype=float32)
///
/// `frozen`, with its mutable state in an [`Exclusive`]: calls from several
/// threads take turns (a waiting call releases the GIL), so no PyO3 borrow
/// error or panic can reach Python and no call sees another's half-done work.
/// Graph replays do not take it: the core orders them with the array
/// (`src/array/memarray/replay.rs`).
#[pyclass(module = "gpuport._core", name = "MemArray", weakref, frozen)]
pub struct PyMemArray {
    pub(crate) meta: Meta,
    st: Exclusive<AnyArray>,
}

impl PyMemArray {
    /// An owned or imported array.
    pub fn from_storage(st: AnyArray) -> Self {
        let meta = Meta {
            dtype: st.dtype(),
            shape: st.shape(),
            device: st.device(),
            imported: st.is_imported(),
            read_only: st.is_read_only(),
        };
        PyMemArray { meta, st: Exclusive::new(st, "MemArray") }
    }

    /// An owned array.
    pub fn from_owned(a: Box<dyn DynArray>) -> Self {
        Self::from_storage(AnyArray::Owned(a))
    }

    /// An imported array.
    pub fn from_imported(f: ImportedArray) -> Self {
        Self::from_storage(AnyArray::Imported(f))
    }

    /// The array's state, waiting (GIL released) while another thread uses it.
    pub fn state(&self, py: Python<'_>) -> PyResult<ExclusiveGuard<'_, AnyArray>> {
        self.st.lock_detached(py)
    }

    /// The array's device.
    pub fn any_device(&self) -> &AnyDevice {
        &self.meta.device
    }

    /// The copy a `move_memory`/`get_dlpack` target names, with its
    /// `device_id` (the rule is the core's: [`move_target`]).
    pub fn target(
        &self,
        py: Python<'_>,
        device_type: &Bound<'_, PyAny>,
        device_id: Option<usize>,
    ) -> PyResult<Location> {
        let name = device_type.extract::<String>();
        let target = match &name {
            Ok(s) => TargetName::Name(s),
            Err(_) => TargetName::DLPack(device_type.extract().map_err(|_| {
                PyTypeError::new_err("device_type must be a DLPack device type (int), \"host\" or \"device\"")
            })?),
        };
        move_target(&self.meta.device, target, device_id).py_err(py)
    }

    /// Moves the data so that the copy at `to` is current, under the
    /// array's lock, with the lock id `lock` (a get_dlpack block's, if the
    /// caller holds it).
    #[allow(clippy::too_many_arguments)]
    pub fn move_locked(
        &self,
        py: Python<'_>,
        to: Location,
        s: &AnyStream,
        async_copy: bool,
        lock: Option<u64>,
        call: &str,
    ) -> PyResult<()> {
        let mut st = self.state(py)?;
        let st: &mut AnyArray = &mut st;
        let mode = if async_copy { Transfer::Async } else { Transfer::Sync };
        py.detach(|| st.move_to(to, s, mode, lock.map(LockId))).py_err_in(py, call)
    }
}
