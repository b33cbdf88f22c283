//! `gpuport.distributed`'s native half: the store and communicators of
//! `gpuport::collective`, converted to and from Python objects. The Python
//! module (`python/gpuport/distributed/__init__.py`) builds the API on these.
//!
//! A collective converts its arguments (each operand into a gpuport array's
//! state or, through the same adapters as `gpuport.runtime`, a `Ptr` and
//! its range; the strings into an `Op`; the stream into a `StreamChoice`)
//! and makes one call, `AnyCommunicator::collective`, which checks,
//! enqueues and hands back the work; the objects are then kept until the
//! stream has run it (`Enqueued::keep`; inside a group, from the group's
//! end on: the core defers them).

use std::sync::Arc;

use gpuport::collective::arguments::{call_mode, seconds, socket_addr, OpenRegistration};
use gpuport::collective::{AnyCommunicator, Given, GroupFailure, Op, OpKind, Operands, Sides, TcpStore};
use gpuport::dynamic::keep;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::convert::device::{resolve_device, PyDevice};
use crate::convert::dtype::dtype_from_py;
use crate::convert::error::IntoPyResult;
use crate::convert::exclusive::{Exclusive, ExclusiveGuard, LockDetached};
use crate::convert::memarray::PyMemArray;
use crate::convert::pointer::{to_range, Owner, Ptr};
use crate::convert::stream::{resolve_stream, stream_choice};

/// The key-value store through which the ranks of a job meet (rank 0
/// hosts it), as ``torch.distributed.TCPStore``.
///
///     >>> from gpuport import distributed as dist
///     >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True, timeout=10.0)
///     >>> store.set("x", b"1"); store.get("x")
///     b'1'
///     >>> store.add("n", 2)
///     2
///     >>> store.port > 0
///     True
#[pyclass(module = "gpuport._core", name = "TcpStore", frozen)]
pub struct PyTcpStore {
    pub inner: Arc<TcpStore>,
}

#[pymethods]
impl PyTcpStore {
    #[new]
    #[pyo3(signature = (host, port, is_host=false, timeout=300.0))]
    fn new(py: Python<'_>, host: &str, port: u16, is_host: bool, timeout: f64) -> PyResult<Self> {
        let addr = socket_addr(host, port).py_err(py)?;
        let timeout = seconds(timeout, "timeout").py_err(py)?;
        let store = py
            .detach(|| if is_host { TcpStore::host(addr, timeout) } else { TcpStore::connect(addr, timeout) })
            .py_err_in(py, "TcpStore")?;
        Ok(PyTcpStore { inner: Arc::new(store) })
    }

    /// The store of ``GPUPORT_MASTER_ADDR``/``GPUPORT_MASTER_PORT``;
    /// ``rank`` 0 hosts it.
    ///
    ///     >>> import os
    ///     >>> from gpuport import distributed as dist
    ///     >>> os.environ["GPUPORT_MASTER_PORT"] = "0"
    ///     >>> dist.TcpStore.from_env(0).port > 0
    ///     True
    #[staticmethod]
    fn from_env(py: Python<'_>, rank: usize) -> PyResult<Self> {
        let store = py.detach(|| TcpStore::from_env(rank)).py_err_in(py, "TcpStore.from_env")?;
        Ok(PyTcpStore { inner: Arc::new(store) })
    }

    /// The port rank 0 listens on.
    #[getter]
    fn port(&self) -> u16 {
        self.inner.addr().port()
    }

    /// Sets ``key`` to ``value`` (bytes).
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
    ///     >>> store.set("k", b"v")
    fn set(&self, py: Python<'_>, key: &str, value: &[u8]) -> PyResult<()> {
        py.detach(|| self.inner.set(key, value)).py_err_in(py, "set")
    }

    /// The value of ``key``, waiting until some rank sets it.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
    ///     >>> store.set("k", b"v"); store.get("k")
    ///     b'v'
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        let v = py.detach(|| self.inner.get(key)).py_err_in(py, "get")?;
        Ok(PyBytes::new(py, &v))
    }

    /// Adds ``delta`` to the counter ``key`` and returns its new value.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
    ///     >>> store.add("n", 1), store.add("n", 5)
    ///     (1, 6)
    fn add(&self, py: Python<'_>, key: &str, delta: i64) -> PyResult<i64> {
        py.detach(|| self.inner.add(key, delta)).py_err_in(py, "add")
    }

    /// Waits until ``world_size`` ranks called ``barrier(name, world_size)``.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
    ///     >>> store.barrier("start", 1)
    fn barrier(&self, py: Python<'_>, name: &str, world_size: usize) -> PyResult<()> {
        py.detach(|| self.inner.barrier(name, world_size)).py_err_in(py, "barrier")
    }
}

/// One rank's communicator (see ``gpuport.distributed``).
///
///     >>> from gpuport import distributed as dist
///     >>> (comm,) = dist.Communicator.init_all(["host"])
///     >>> comm.rank, comm.size, comm.engine
///     (0, 1, 'host')
#[pyclass(module = "gpuport._core", name = "Communicator", frozen)]
pub struct PyCommunicator {
    /// Taken with the GIL released while another thread holds it (a
    /// collective that waits runs with the GIL released): a plain mutex
    /// here let a thread wait for it holding the GIL, which the holder
    /// needs back to return.
    inner: Exclusive<AnyCommunicator>,
}

/// One Python operand of a collective, converted: a gpuport array (its
/// state is entered for the call) or another object's memory.
type PyOperand<'py> = Given<Bound<'py, PyMemArray>, Ptr>;

/// Converts `obj`, operand `what` ("send" or "recv").
fn convert_operand<'py>(obj: Bound<'py, PyAny>, what: &str) -> PyResult<PyOperand<'py>> {
    match obj.cast::<PyMemArray>() {
        Ok(a) => Ok(Given::Array(a.clone())),
        Err(_) => Ok(Given::Raw(to_range(&obj, what)?)),
    }
}

/// What keeps an array object's memory alive: the object.
fn keep_array(a: Bound<'_, PyMemArray>) -> Ptr {
    Ptr { owners: vec![Owner::Obj(a.into_any().unbind())], ..Ptr::null() }
}

impl PyCommunicator {
    fn lock(&self, py: Python<'_>) -> PyResult<ExclusiveGuard<'_, AnyCommunicator>> {
        self.inner.lock_detached(py)
    }

    fn new(comm: AnyCommunicator) -> Self {
        PyCommunicator { inner: Exclusive::new(comm, "Communicator") }
    }
}

#[pymethods]
impl PyCommunicator {
    /// Joins ``device`` to ``size`` ranks as ``rank`` through ``store``;
    /// ``mode`` is how NCCL's and RCCL's calls wait: ``"blocking"`` (their
    /// default, fastest), ``"bounded"`` (non-blocking, every call given up
    /// after the timeout) or ``None`` (``"bounded"`` when
    /// ``GPUPORT_COLLECTIVE_BOUNDED=1``).
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
    ///     >>> dist.Communicator.init_rank("host", 0, 1, store).size
    ///     1
    #[staticmethod]
    #[pyo3(signature = (device, rank, size, store, mode=None))]
    fn init_rank(
        py: Python<'_>,
        device: &Bound<'_, PyAny>,
        rank: usize,
        size: usize,
        store: &PyTcpStore,
        mode: Option<&str>,
    ) -> PyResult<Self> {
        let mode = call_mode(mode).py_err(py)?;
        let store = store.inner.clone();
        // A device that does not open fails the other ranks fast too, as
        // init_rank's own failures do.
        let dev = resolve_device(py, Some(device)).inspect_err(|e| {
            let reason = format!("device {device}: {e}");
            py.detach(|| AnyCommunicator::report_failed_init(rank, size, &store, &reason));
        })?;
        let comm =
            py.detach(|| AnyCommunicator::init_rank(&dev, rank, size, &store, mode)).py_err_in(py, "init_rank")?;
        Ok(PyCommunicator::new(comm))
    }

    /// A new id naming one communicator (bytes): rank 0 makes it and sends
    /// it to every rank (an MPI broadcast, another library's store), and
    /// each calls ``init_with_id``.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> id_ = dist.Communicator.new_id("host")
    ///     >>> dist.Communicator.init_with_id("host", 0, 1, id_).size
    ///     1
    #[staticmethod]
    fn new_id<'py>(py: Python<'py>, device: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        let dev = resolve_device(py, Some(device))?;
        let id = py.detach(|| AnyCommunicator::new_id(&dev)).py_err_in(py, "new_id")?;
        Ok(PyBytes::new(py, &id))
    }

    /// Joins ``device`` to ``size`` ranks as ``rank`` with rank 0's
    /// ``new_id``. ``mode`` as for ``init_rank``; a ``"bounded"`` one waits
    /// up to ``timeout`` seconds for the other ranks (default
    /// ``GPUPORT_COLLECTIVE_TIMEOUT``, 300 s when unset), a ``"blocking"``
    /// one without a bound. ``timeout`` is also the communicator's.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> dist.Communicator.init_with_id("host", 0, 1, dist.Communicator.new_id("host")).rank
    ///     0
    #[staticmethod]
    #[pyo3(signature = (device, rank, size, id, mode=None, timeout=None))]
    fn init_with_id(
        py: Python<'_>,
        device: &Bound<'_, PyAny>,
        rank: usize,
        size: usize,
        id: &[u8],
        mode: Option<&str>,
        timeout: Option<f64>,
    ) -> PyResult<Self> {
        let mode = call_mode(mode).py_err(py)?;
        let timeout = timeout.map(|t| seconds(t, "timeout")).transpose().py_err(py)?;
        let dev = resolve_device(py, Some(device))?;
        let comm = py
            .detach(|| AnyCommunicator::init_with_id(&dev, rank, size, id, timeout, mode))
            .py_err_in(py, "init_with_id")?;
        Ok(PyCommunicator::new(comm))
    }

    /// One communicator per device, for one process driving them all;
    /// ``mode`` as for ``init_rank``.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> [c.rank for c in dist.Communicator.init_all(["host", "host"])]
    ///     [0, 1]
    #[staticmethod]
    #[pyo3(signature = (devices, mode=None))]
    fn init_all(py: Python<'_>, devices: Vec<Bound<'_, PyAny>>, mode: Option<&str>) -> PyResult<Vec<Self>> {
        let mode = call_mode(mode).py_err(py)?;
        let devs = devices.iter().map(|d| resolve_device(py, Some(d))).collect::<PyResult<Vec<_>>>()?;
        let comms = py.detach(|| AnyCommunicator::init_all(&devs, mode)).py_err_in(py, "init_all")?;
        Ok(comms.into_iter().map(PyCommunicator::new).collect())
    }

    /// This rank.
    #[getter]
    fn rank(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.lock(py)?.rank())
    }

    /// The number of ranks.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.lock(py)?.size())
    }

    /// This rank's device.
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<PyDevice> {
        Ok(PyDevice::from(self.lock(py)?.device()))
    }

    /// The engine and its version ("NCCL 2.28.5", "host").
    #[getter]
    fn engine(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.lock(py)?.engine())
    }

    /// How the calls wait: ``"blocking"`` or ``"bounded"`` (the mode asked
    /// for, except that the host engine is always bounded by its store's
    /// timeout and an NCCL or RCCL older than 2.14 always blocking).
    #[getter]
    fn mode(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.lock(py)?.mode().name())
    }

    /// Seconds ``synchronize`` waits before it aborts the communicator.
    #[getter]
    fn timeout(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.lock(py)?.timeout().as_secs_f64())
    }

    #[setter]
    fn set_timeout(&self, py: Python<'_>, seconds_: f64) -> PyResult<()> {
        let t = seconds(seconds_, "timeout").py_err(py)?;
        self.lock(py)?.set_timeout(t).py_err_in(py, "timeout")
    }

    /// Turns the cross-rank check of every collective on or off.
    fn set_checks(&self, py: Python<'_>, on: bool) -> PyResult<()> {
        self.lock(py)?.set_checks(on).py_err_in(py, "set_checks")
    }

    /// Stops this communicator's collectives; later calls raise.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.lock(py)?.abort().py_err_in(py, "abort")
    }

    /// Whether the communicator was aborted.
    #[getter]
    fn aborted(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.lock(py)?.is_aborted())
    }

    /// Splits the group: every rank calls it, and the ranks that give the
    /// same ``color`` form a new communicator, ordered by ``key`` and then
    /// by rank; a negative ``color`` puts this rank in none (``None``).
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
    ///     >>> comm = dist.Communicator.init_rank("host", 0, 1, store)
    ///     >>> comm.split(3).size, comm.split(-1)
    ///     (1, None)
    #[pyo3(signature = (color, key=0))]
    fn split(&self, py: Python<'_>, color: i32, key: i32) -> PyResult<Option<Self>> {
        let comm = self.lock(py)?;
        let c: &AnyCommunicator = &comm;
        let child = py.detach(|| c.split(color, key)).py_err_in(py, "split")?;
        Ok(child.map(PyCommunicator::new))
    }

    /// A communicator of every rank but ``exclude`` (ranks that died), in
    /// their order here: what the survivors of a failure call, all with the
    /// same ``exclude``, after ``abort()`` or a collective that failed.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
    ///     >>> comm = dist.Communicator.init_rank("host", 0, 1, store)
    ///     >>> comm.abort(); comm.shrink([]).size
    ///     1
    fn shrink(&self, py: Python<'_>, exclude: Vec<usize>) -> PyResult<Self> {
        let comm = self.lock(py)?;
        let c: &AnyCommunicator = &comm;
        let child = py.detach(|| c.shrink(&exclude)).py_err_in(py, "shrink")?;
        Ok(PyCommunicator::new(child))
    }

    /// Registers the memory of ``memory`` (a gpuport array, a tensor, any
    /// pointer-like object with a size, one contiguous range) with NCCL or
    /// RCCL, so that collectives on it skip the library's staging copies;
    /// collectives on it run as before. Memory of another device raises
    /// ``DeviceMismatchError``. Returns a ``Registration``.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> import numpy as np
    ///     >>> (comm,) = dist.init_all(["host"])
    ///     >>> with comm.register(np.zeros(4, np.float32)) as r:
    ///     ...     (r.held, r.bytes)
    ///     (False, 16)
    fn register(slf: &Bound<'_, Self>, memory: &Bound<'_, PyAny>) -> PyResult<PyRegistration> {
        let py = slf.py();
        let owner = to_range(memory, "memory")?;
        let range = owner.range();
        let comm = slf.get().lock(py)?;
        let c: &AnyCommunicator = &comm;
        // SAFETY: `owner` keeps the memory alive (or, for a bare address,
        // the caller vouches for it) and is held by the registration until
        // it is given back to `deregister`, in `close_in`.
        let registration = py.detach(|| unsafe { c.register_range(&range) }).py_err_in(py, "register")?;
        drop(comm);
        Ok(PyRegistration { comm: slf.clone().unbind(), open: OpenRegistration::new(registration, owner) })
    }

    /// Enqueues one collective (``kind``) reading ``send`` and writing
    /// ``recv`` (pointer-like objects; ``None`` where the collective has no
    /// such side) of ``count`` elements of ``dtype``, on ``stream``.
    #[pyo3(signature = (kind, send, recv, dtype, count, op="sum", root=0, peer=0, stream=None))]
    #[allow(clippy::too_many_arguments)]
    fn collective<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        send: Option<&Bound<'py, PyAny>>,
        recv: Option<&Bound<'py, PyAny>>,
        dtype: &Bound<'_, PyAny>,
        count: usize,
        op: &str,
        root: usize,
        peer: usize,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        keep::prune();
        let op = Op { kind: OpKind::from_name(kind, op, root, peer).py_err(py)?, dtype: dtype_from_py(dtype)?, count };
        let stream = stream_choice(stream)?;
        // One object as both sides is one operand, in place (the core's rule).
        let given = |o: Option<&Bound<'py, PyAny>>| o.filter(|o| !o.is_none()).cloned();
        let sides = Sides::of(given(send), given(recv), |a, b| a.is(b)).try_map(convert_operand)?;
        let mut entered =
            sides.as_ref().try_map(|o, _| o.array().map(|a| a.get().state(py)).transpose().map(|st| (o, st)))?;
        let operands = Operands::from(entered.as_mut().map(|(o, st)| o.operand(st.as_deref_mut(), Ptr::range)));
        let name = op.kind.name();
        let comm = self.lock(py)?;
        let c: &AnyCommunicator = &comm;
        // On a capturing stream the core orders the graph's replays with the
        // arrays it captured; the copies it names are not needed here.
        let (enqueued, _captured) = py.detach(|| c.collective(&op, operands, &stream.choice)).py_err_in(py, name)?;
        drop((comm, entered));
        let owners: Vec<Ptr> = sides.into_vec().into_iter().map(|o| o.into_kept(keep_array)).collect();
        enqueued.keep((owners, stream.owner)).py_err_in(py, name)
    }

    /// Waits for ``stream``'s collectives, raising if one failed or did not
    /// finish within ``timeout`` (the communicator is then aborted).
    #[pyo3(signature = (stream=None))]
    fn synchronize(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let dev = self.lock(py)?.device();
        let s = resolve_stream(py, &dev, stream)?;
        let comm = self.lock(py)?;
        let c: &AnyCommunicator = &comm;
        py.detach(|| c.synchronize(&s)).py_err_in(py, "synchronize")?;
        drop(comm);
        keep::prune();
        Ok(())
    }

    /// Runs ``fn()`` as one group of this communicator's backend (the
    /// core keeps the owners of the group's collectives from its end on).
    fn group(&self, py: Python<'_>, f: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let backend = self.lock(py)?.device().backend();
        match AnyCommunicator::group_with(backend, || f.call0().map(Bound::unbind)) {
            Ok(v) => Ok(v),
            Err(GroupFailure::Body(e)) => Err(e),
            Err(GroupFailure::End(e)) => Err(crate::convert::error::to_py_in(py, e, Some("group"))),
        }
    }
}

/// Memory registered with a communicator (``Communicator.register``), so
/// that NCCL's collectives on it skip its staging copies. A context
/// manager: ``close()``, the end of a ``with`` block, or the object's end
/// deregisters it; it keeps the memory's object alive until then.
/// On the host engine, and with an NCCL older than 2.19, it holds nothing
/// (``held`` is False) and collectives run as before.
///
///     >>> from gpuport import distributed as dist
///     >>> import numpy as np
///     >>> (comm,) = dist.init_all(["host"])
///     >>> with comm.register(np.zeros(2, np.float64)) as r:
///     ...     r.bytes
///     16
#[pyclass(module = "gpuport._core", name = "Registration", frozen)]
pub struct PyRegistration {
    comm: Py<PyCommunicator>,
    /// The engine's registration and the owner of its memory, until closed.
    open: OpenRegistration<Ptr>,
}

impl PyRegistration {
    /// Deregisters once; later calls do nothing.
    fn close_in(&self, py: Python<'_>) -> PyResult<()> {
        self.open.close(|registration| {
            let comm = self.comm.get().lock(py)?;
            let c: &AnyCommunicator = &comm;
            py.detach(|| c.deregister(registration)).py_err_in(py, "Registration.close")
        })
    }
}

impl Drop for PyRegistration {
    fn drop(&mut self) {
        // An error cannot be raised from a drop; the communicator's own
        // release frees what is left.
        Python::attach(|py| {
            let _ = self.close_in(py);
        });
    }
}

#[pymethods]
impl PyRegistration {
    /// Whether NCCL or RCCL holds a registration (False on the host engine
    /// and with a library that cannot register).
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> import numpy as np
    ///     >>> (comm,) = dist.init_all(["host"])
    ///     >>> comm.register(np.zeros(2)).held
    ///     False
    #[getter]
    fn held(&self) -> bool {
        self.open.is_held()
    }

    /// The registered bytes.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> import numpy as np
    ///     >>> (comm,) = dist.init_all(["host"])
    ///     >>> comm.register(np.zeros(3, np.float32)).bytes
    ///     12
    #[getter]
    fn bytes(&self) -> usize {
        self.open.bytes()
    }

    /// Whether ``close()`` ran.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> import numpy as np
    ///     >>> (comm,) = dist.init_all(["host"])
    ///     >>> r = comm.register(np.zeros(2)); r.closed
    ///     False
    #[getter]
    fn closed(&self) -> bool {
        self.open.is_closed()
    }

    /// Deregisters the memory, after the device's work (collectives on
    /// it among that) has finished; a second call does nothing.
    ///
    ///     >>> from gpuport import distributed as dist
    ///     >>> import numpy as np
    ///     >>> (comm,) = dist.init_all(["host"])
    ///     >>> r = comm.register(np.zeros(2)); r.close(); r.close(); r.closed
    ///     True
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.close_in(py)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close_in(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() {
            "closed"
        } else if self.open.is_held() {
            "held"
        } else {
            "not held"
        };
        format!("Registration({} bytes, {state})", self.open.bytes())
    }
}
