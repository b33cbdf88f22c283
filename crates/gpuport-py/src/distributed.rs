//! `gpuport.distributed`'s native half: the store and communicators of
//! `gpuport::collective`, converted to and from Python objects. The Python
//! module (`python/gpuport/distributed/__init__.py`) builds the API on these.
//!
//! A collective takes any pointer-like object (a gpuport array, a torch or
//! CuPy tensor, an allocation) through the same adapters as
//! `gpuport.runtime`, and parks the objects until the stream has run the
//! collective, as `runtime.memcpy_async` does. Inside a group the parking
//! waits until the group has ended (the engine enqueues the calls then).

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gpuport::collective::{AnyCommunicator, CallMode, Op, OpKind, ReduceOp, TcpStore};
use gpuport::dynamic::{keep, AnyStream};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::adapters::{to_range, Keep, Ptr};
use crate::array::ReplayedArray;
use crate::device::spec;
use crate::device::{resolve_device, resolve_stream, PyDevice};
use crate::dtype::dtype_from_py;
use crate::errors;
use crate::errors::IntoPyResult;
use crate::memarray::PyMemArray;
use gpuport::dynamic::AnyArray;
use gpuport::{AnyDevice, BackendKind};

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

fn socket_addr(host: &str, port: u16) -> PyResult<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| PyValueError::new_err(format!("{host}:{port} does not resolve to an address")))
}

fn seconds(timeout: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(timeout)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| PyValueError::new_err(format!("{what}={timeout}: give a positive number of seconds")))
}

#[pymethods]
impl PyTcpStore {
    #[new]
    #[pyo3(signature = (host, port, is_host=false, timeout=300.0))]
    fn new(py: Python<'_>, host: &str, port: u16, is_host: bool, timeout: f64) -> PyResult<Self> {
        let addr = socket_addr(host, port)?;
        let timeout = seconds(timeout, "timeout")?;
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
    inner: Mutex<AnyCommunicator>,
}

/// A collective's operands and the stream they wait for.
type Parked = (AnyStream, Vec<Ptr>);

thread_local! {
    /// Operands of collectives made inside this thread's open group, parked
    /// once it ends.
    static GROUP: RefCell<Option<Vec<Parked>>> = const { RefCell::new(None) };
}

/// The call mode `mode` names; `None` is `GPUPORT_COLLECTIVE_BOUNDED`'s.
fn call_mode(mode: Option<&str>) -> PyResult<CallMode> {
    match mode {
        None => Ok(CallMode::from_env()),
        Some(name) => CallMode::from_name(name).ok_or_else(|| {
            PyValueError::new_err(format!(
                "mode={name:?}: use \"blocking\" or \"bounded\" (or None for GPUPORT_COLLECTIVE_BOUNDED's choice)"
            ))
        }),
    }
}

fn reduce_op(name: &str) -> PyResult<ReduceOp> {
    ReduceOp::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!("op {name:?}: use \"sum\", \"prod\", \"max\", \"min\" or \"avg\""))
    })
}

fn op_kind(kind: &str, op: &str, root: usize, peer: usize) -> PyResult<OpKind> {
    Ok(match kind {
        "all_reduce" => OpKind::AllReduce(reduce_op(op)?),
        "broadcast" => OpKind::Broadcast { root },
        "reduce" => OpKind::Reduce { op: reduce_op(op)?, root },
        "all_gather" => OpKind::AllGather,
        "reduce_scatter" => OpKind::ReduceScatter(reduce_op(op)?),
        "send" => OpKind::Send { peer },
        "recv" => OpKind::Recv { peer },
        other => {
            return Err(PyValueError::new_err(format!(
                "collective {other:?}: use all_reduce, broadcast, reduce, all_gather, reduce_scatter, send or recv"
            )))
        }
    })
}

/// One side of a collective: a gpuport array (its device copy, ordered by
/// the array itself), another object's memory, or nothing.
enum Operand<'py> {
    None,
    Array(Bound<'py, PyMemArray>),
    Raw(Ptr),
}

impl<'py> Operand<'py> {
    /// Resolves `obj` as operand `what` of `elems` elements of `op`, on
    /// the communicator's device `dev`.
    fn resolve(
        py: Python<'py>,
        obj: Option<&Bound<'py, PyAny>>,
        what: &'static str,
        elems: usize,
        writes: bool,
        op: &Op,
        dev: &AnyDevice,
    ) -> PyResult<Self> {
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            if elems > 0 {
                return Err(PyValueError::new_err(format!("{op}: {what} is needed ({elems} elements)")));
            }
            return Ok(Operand::None);
        };
        let bytes = elems
            .checked_mul(op.dtype.itemsize())
            .ok_or_else(|| PyValueError::new_err(format!("{op}: too many elements")))?;
        if let Ok(a) = obj.cast::<PyMemArray>() {
            let m = &a.get().meta;
            if !gpuport::dynamic::same_device(&m.device, dev) {
                return Err(errors::to_py(
                    py,
                    gpuport::Error::DeviceMismatch { what, expected: spec(dev), found: spec(&m.device) },
                ));
            }
            let have = m.shape.iter().product::<usize>().saturating_mul(m.dtype.itemsize());
            if have < bytes {
                return Err(PyValueError::new_err(format!(
                    "{op}: {what} holds {have} bytes, and the collective needs {bytes}"
                )));
            }
            return Ok(Operand::Array(a.clone()));
        }
        let ptr = to_range(obj, what)?;
        let range = ptr.range();
        range.check_size(bytes, what).py_err(py)?;
        if writes && !range.is_writable() {
            return Err(PyValueError::new_err(format!("{op}: {what} is read-only")));
        }
        if bytes > 0 {
            check_place(py, &range, what, dev)?;
        }
        Ok(Operand::Raw(ptr))
    }

    fn address(&self) -> u64 {
        match self {
            Operand::Raw(p) => p.range().addr(),
            _ => 0,
        }
    }

    /// What must stay alive until the stream has run the collective.
    fn into_kept(self) -> Option<Ptr> {
        match self {
            Operand::None => None,
            Operand::Raw(p) => Some(p),
            // An import's memory lives as long as its array object.
            Operand::Array(a) => Some(Ptr { keep: vec![Keep::Obj(a.into_any().unbind())], ..Ptr::null() }),
        }
    }
}

/// Refuses memory the communicator's engine cannot use: a GPU engine's
/// operands are its device's memory (host memory would be a fault on the
/// device); the host engine reads and writes held host memory only.
fn check_place(
    py: Python<'_>,
    range: &gpuport::dynamic::raw::RawRange,
    what: &'static str,
    dev: &AnyDevice,
) -> PyResult<()> {
    use gpuport::dynamic::raw::Place;
    if dev.backend() == BackendKind::Host {
        if range.host_accessible() && range.is_held() {
            return Ok(());
        }
        return Err(PyValueError::new_err(format!(
            "{what}: the host communicator reads and writes host memory it can check; pass the array or buffer \
             object (a raw address is not dereferenced)"
        )));
    }
    match range.place() {
        Place::Host | Place::Pinned(_) | Place::Null => Err(PyValueError::new_err(format!(
            "{what} is host memory; a {} communicator needs memory of its device: move the array there first",
            spec(dev)
        ))),
        Place::Device(Some(d)) | Place::Managed(d) if !gpuport::dynamic::same_device(d, dev) => {
            Err(errors::to_py(py, gpuport::Error::DeviceMismatch { what, expected: spec(dev), found: spec(d) }))
        }
        _ => Ok(()),
    }
}

impl PyCommunicator {
    fn lock(&self) -> MutexGuard<'_, AnyCommunicator> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
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
        let mode = call_mode(mode)?;
        let dev = resolve_device(py, Some(device))?;
        let store = store.inner.clone();
        let comm =
            py.detach(|| AnyCommunicator::init_rank(&dev, rank, size, &store, mode)).py_err_in(py, "init_rank")?;
        Ok(PyCommunicator { inner: Mutex::new(comm) })
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
        let mode = call_mode(mode)?;
        let timeout = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let dev = resolve_device(py, Some(device))?;
        let comm = py
            .detach(|| AnyCommunicator::init_with_id(&dev, rank, size, id, timeout, mode))
            .py_err_in(py, "init_with_id")?;
        Ok(PyCommunicator { inner: Mutex::new(comm) })
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
        let mode = call_mode(mode)?;
        let devs = devices.iter().map(|d| resolve_device(py, Some(d))).collect::<PyResult<Vec<_>>>()?;
        let comms = py.detach(|| AnyCommunicator::init_all(&devs, mode)).py_err_in(py, "init_all")?;
        Ok(comms.into_iter().map(|c| PyCommunicator { inner: Mutex::new(c) }).collect())
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> usize {
        self.lock().rank()
    }

    /// The number of ranks.
    #[getter]
    fn size(&self) -> usize {
        self.lock().size()
    }

    /// This rank's device.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice(self.lock().device())
    }

    /// The engine and its version ("NCCL 2.28.5", "host").
    #[getter]
    fn engine(&self) -> String {
        self.lock().engine()
    }

    /// How the calls wait: ``"blocking"`` or ``"bounded"`` (the mode asked
    /// for, except that the host engine is always bounded by its store's
    /// timeout and an NCCL or RCCL older than 2.14 always blocking).
    #[getter]
    fn mode(&self) -> &'static str {
        self.lock().mode().name()
    }

    /// Seconds ``synchronize`` waits before it aborts the communicator.
    #[getter]
    fn timeout(&self) -> f64 {
        self.lock().timeout().as_secs_f64()
    }

    #[setter]
    fn set_timeout(&self, py: Python<'_>, seconds_: f64) -> PyResult<()> {
        let t = seconds(seconds_, "timeout")?;
        self.lock().set_timeout(t).py_err_in(py, "timeout")
    }

    /// Turns the cross-rank check of every collective on or off.
    fn set_checks(&self, py: Python<'_>, on: bool) -> PyResult<()> {
        self.lock().set_checks(on).py_err_in(py, "set_checks")
    }

    /// Stops this communicator's collectives; later calls raise.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.lock().abort().py_err_in(py, "abort")
    }

    /// Whether the communicator was aborted.
    #[getter]
    fn aborted(&self) -> bool {
        self.lock().is_aborted()
    }

    /// Enqueues one collective (``kind``) reading ``send`` and writing
    /// ``recv`` (pointer-like objects; ``None`` where the collective has no
    /// such side) of ``count`` elements of ``dtype``, on ``stream``.
    #[pyo3(signature = (kind, send, recv, dtype, count, op="sum", root=0, peer=0, stream=None))]
    #[allow(clippy::too_many_arguments)]
    fn collective(
        &self,
        py: Python<'_>,
        kind: &str,
        send: Option<&Bound<'_, PyAny>>,
        recv: Option<&Bound<'_, PyAny>>,
        dtype: &Bound<'_, PyAny>,
        count: usize,
        op: &str,
        root: usize,
        peer: usize,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        keep::prune();
        let op = Op { kind: op_kind(kind, op, root, peer)?, dtype: dtype_from_py(dtype)?, count };
        let comm = self.lock();
        let size = comm.size();
        let dev = comm.device();
        let s = resolve_stream(py, &dev, stream)?;
        let send = Operand::resolve(py, send, "send", op.send_len(size), false, &op, &dev)?;
        let recv = Operand::resolve(py, recv, "recv", op.recv_len(size), true, &op, &dev)?;
        // A gpuport array as both operands (in place) is entered once.
        let same = matches!((&send, &recv), (Operand::Array(a), Operand::Array(b)) if a.is(b));
        let mut send_state = match &send {
            Operand::Array(a) => Some(a.get().state(py)?),
            _ => None,
        };
        let mut recv_state = match &recv {
            Operand::Array(a) if !same => Some(a.get().state(py)?),
            _ => None,
        };
        let (send_addr, recv_addr) = (send.address(), recv.address());
        let c: &AnyCommunicator = &comm;
        let name = op.kind.name();
        let (sa, ra): (Option<&mut AnyArray>, Option<&mut AnyArray>) =
            (send_state.as_deref_mut(), recv_state.as_deref_mut());
        // The device copies a capture used, for ordering its replays.
        let (mut send_used, mut recv_used) = (None, None);
        py.detach(|| {
            let run = |sp: u64, rp: u64| {
                // SAFETY: raw operands were checked against the size their
                // object holds (or are the caller's raw device pointer, as
                // in runtime.memcpy) and are parked below until the stream
                // has run the collective (after the group's end, inside a
                // group; by the graph, in a capture); a gpuport array gives
                // its device copy through `with_device_data`, which records
                // the collective as the array's pending work (or has the
                // graph keep the copy, in a capture).
                unsafe { c.enqueue_raw(&op, sp, rp, &s) }
            };
            match (sa, ra) {
                (None, None) => run(send_addr, recv_addr),
                (Some(a), None) if same => {
                    recv_used = a.with_device_data(name, true, &s, &mut |p| run(p, p))?;
                    Ok(())
                }
                (Some(a), None) => {
                    send_used = a.with_device_data(name, false, &s, &mut |p| run(p, recv_addr))?;
                    Ok(())
                }
                (None, Some(b)) => {
                    recv_used = b.with_device_data(name, true, &s, &mut |p| run(send_addr, p))?;
                    Ok(())
                }
                (Some(a), Some(b)) => {
                    (send_used, recv_used) =
                        AnyArray::with_device_data_pair(a, b, name, &s, &mut |sp, rp| run(sp, rp))?;
                    Ok(())
                }
            }
        })
        .py_err_in(py, name)?;
        drop((send_state, recv_state));
        for (operand, used, writes) in [(&send, send_used, false), (&recv, recv_used, true)] {
            if let (Operand::Array(a), Some(used)) = (operand, used) {
                ReplayedArray::order_replays(&s, a, used, writes);
            }
        }
        let operands: Vec<Ptr> = [send, recv].into_iter().filter_map(Operand::into_kept).collect();
        // Inside a group the engine enqueues at the group's end: park then.
        let mut operands = Some(operands);
        GROUP.with(|g| {
            if let Some(list) = g.borrow_mut().as_mut() {
                list.push((s.clone(), operands.take().unwrap_or_default()));
            }
        });
        if let Some(operands) = operands {
            keep::keep_until_done(&s, Box::new(operands)).py_err(py)?;
        }
        Ok(())
    }

    /// Waits for ``stream``'s collectives, raising if one failed or did not
    /// finish within ``timeout`` (the communicator is then aborted).
    #[pyo3(signature = (stream=None))]
    fn synchronize(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let dev = self.lock().device();
        let s = resolve_stream(py, &dev, stream)?;
        let comm = self.lock();
        let c: &AnyCommunicator = &comm;
        py.detach(|| c.synchronize(&s)).py_err_in(py, "synchronize")?;
        drop(comm);
        keep::prune();
        Ok(())
    }

    /// Runs ``fn()`` as one group of this communicator's backend.
    fn group(&self, py: Python<'_>, f: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let backend = self.lock().device().backend();
        let outer = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            let outer = g.is_some();
            if !outer {
                *g = Some(Vec::new());
            }
            outer
        });
        let mut result: Option<PyResult<Py<PyAny>>> = None;
        let ended = AnyCommunicator::group(backend, || {
            let r = f.call0().map(Bound::unbind);
            let failed = r.is_err();
            result = Some(r);
            if failed {
                Err(gpuport::Error::InvalidArgument { name: "group", reason: "the group's function raised".into() })
            } else {
                Ok(())
            }
        });
        if !outer {
            let parked = GROUP.with(|g| g.borrow_mut().take()).unwrap_or_default();
            for (s, ptrs) in parked {
                keep::keep_until_done(&s, Box::new(ptrs)).py_err(py)?;
            }
        }
        match (result, ended) {
            (Some(Err(e)), _) => Err(e),
            (_, Err(e)) => Err(crate::errors::to_py_in(py, e, Some("group"))),
            (Some(Ok(v)), Ok(())) => Ok(v),
            (None, Ok(())) => Ok(py.None()),
        }
    }
}
