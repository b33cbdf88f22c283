"""Collectives across devices and processes: NCCL on CUDA devices, RCCL on
ROCm devices, and the job's store on the host backend (for tests and
programs without a GPU). The work is done by ``gpuport::collective`` in
the Rust core; this module only converts arguments.

Each collective takes gpuport arrays, torch and CuPy tensors, or any
pointer-like object, without copies, and runs on a stream (the device's
default stream unless ``stream`` is given), in order with that stream's
other work. It returns at once; ``synchronize`` waits, and raises if a
rank failed or the ranks stopped making progress.

One process per device (launch with ``python -m gpuport.distributed.run
-n 2 script.py``, ``torchrun`` or ``mpirun``)::

    comm = gpuport.distributed.init()          # rank, size, store from the environment
    comm.all_reduce(tensor, op="sum")
    comm.synchronize()

    >>> from gpuport import distributed as dist
    >>> import numpy as np, gpuport
    >>> (comm,) = dist.init_all(["host"])       # one rank, on the host backend
    >>> a = gpuport.asarray(np.arange(4, dtype=np.float32), device="host")
    >>> _ = comm.all_reduce(a, op="max"); comm.synchronize()
    >>> a.to_numpy()
    array([0., 1., 2., 3.], dtype=float32)
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from gpuport._core import Communicator as _Communicator
from gpuport._core import Registration, TcpStore

__all__ = ["Communicator", "Registration", "TcpStore", "init", "init_all", "rank_and_size"]


def _dtype_and_count(x: Any) -> tuple[str, int]:
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        raise TypeError(
            f"{type(x).__name__} has no dtype: pass a gpuport array, a torch or CuPy tensor, or a NumPy-like array"
        )
    numel = getattr(x, "numel", None)
    count = int(numel()) if callable(numel) else int(getattr(x, "size"))
    # The extension reads the name (``DType::parse``: "float32",
    # "torch.float32", ">f4" refused as big-endian), as for any dtype it takes.
    return str(dtype), count


def rank_and_size() -> tuple[int, int]:
    """``(rank, world size)`` from ``GPUPORT_RANK``/``GPUPORT_WORLD_SIZE``,
    torchrun's ``RANK``/``WORLD_SIZE`` or Open MPI's variables.

    >>> import os
    >>> from gpuport import distributed as dist
    >>> os.environ.update(GPUPORT_RANK="1", GPUPORT_WORLD_SIZE="2")
    >>> dist.rank_and_size()
    (1, 2)
    >>> del os.environ["GPUPORT_RANK"], os.environ["GPUPORT_WORLD_SIZE"]
    """
    for r, s in (
        ("GPUPORT_RANK", "GPUPORT_WORLD_SIZE"),
        ("RANK", "WORLD_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    raise RuntimeError(
        "no rank in the environment: set GPUPORT_RANK and GPUPORT_WORLD_SIZE (the launcher "
        "`python -m gpuport.distributed.run -n N script.py` does), or run under torchrun or mpirun"
    )


def _local_rank(rank: int) -> int:
    for name in ("GPUPORT_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return rank


class Communicator:
    """One rank of a group of devices; make it with ``init`` or ``init_all``.

    >>> from gpuport import distributed as dist
    >>> (comm,) = dist.init_all(["host"])
    >>> comm.rank, comm.size, comm.engine, comm.device.backend
    (0, 1, 'host', 'host')
    >>> comm.timeout = 60.0; comm.timeout, comm.aborted
    (60.0, False)
    """

    def __init__(self, native: _Communicator) -> None:
        self._c = native

    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def size(self) -> int:
        return self._c.size

    @property
    def device(self) -> Any:
        return self._c.device

    @property
    def engine(self) -> str:
        return self._c.engine

    @property
    def mode(self) -> str:
        """How the calls wait: ``"blocking"`` or ``"bounded"`` (see ``init``).

        >>> from gpuport import distributed as dist
        >>> dist.init_all(["host"], mode="blocking")[0].mode  # the host engine's waits are always bounded
        'bounded'
        """
        return self._c.mode

    @property
    def timeout(self) -> float:
        """Seconds ``synchronize`` waits before it aborts the communicator."""
        return self._c.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._c.timeout = seconds

    def __repr__(self) -> str:
        return f"Communicator({self.engine}, rank {self.rank} of {self.size}, {self.device})"

    def _run(self, kind: str, send: Any, recv: Any, like: Any, count: int | None = None, **kw: Any) -> None:
        dtype, n = _dtype_and_count(like)
        self._c.collective(kind, send, recv, dtype, n if count is None else count, **kw)

    def all_reduce(self, x: Any, op: str = "sum", out: Any = None, stream: Any = None) -> Any:
        """Every rank's ``out`` (default: ``x`` itself) becomes the
        reduction (``"sum"``, ``"prod"``, ``"max"``, ``"min"``, ``"avg"``)
        of every rank's ``x``. Returns ``out``.

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> (comm,) = dist.init_all(["host"])
        >>> a = gpuport.asarray(np.ones(3, dtype=np.int32), device="host")
        >>> comm.all_reduce(a) is a
        True
        """
        out = x if out is None else out
        self._run("all_reduce", x, out, x, op=op, stream=stream)
        return out

    def broadcast(self, x: Any, root: int = 0, stream: Any = None) -> Any:
        """Every rank's ``x`` becomes ``root``'s. Returns ``x``.

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> (comm,) = dist.init_all(["host"])
        >>> a = gpuport.asarray(np.ones(3), device="host")
        >>> comm.broadcast(a, root=0) is a
        True
        """
        self._run("broadcast", x, x, x, root=root, stream=stream)
        return x

    def reduce(self, x: Any, root: int = 0, op: str = "sum", out: Any = None, stream: Any = None) -> Any:
        """``root``'s ``out`` (default ``x``) becomes the reduction of every
        rank's ``x``; other ranks' are unchanged. Returns ``out``.

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> (comm,) = dist.init_all(["host"])
        >>> a = gpuport.asarray(np.ones(2), device="host")
        >>> comm.reduce(a, root=0, op="sum").to_numpy()
        array([1., 1.])
        """
        out = x if out is None else out
        self._run("reduce", x, out, x, op=op, root=root, stream=stream)
        return out

    def all_gather(self, x: Any, out: Any, stream: Any = None) -> Any:
        """``out`` (``size`` times as many elements as ``x``) gets every
        rank's ``x`` in rank order. Returns ``out``.

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> (comm,) = dist.init_all(["host"])
        >>> x = gpuport.asarray(np.array([7], dtype=np.int64), device="host")
        >>> out = gpuport.asarray(np.zeros(1, dtype=np.int64), device="host")
        >>> comm.all_gather(x, out).to_numpy()
        array([7])
        """
        self._run("all_gather", x, out, x, stream=stream)
        return out

    def reduce_scatter(self, x: Any, out: Any, op: str = "sum", stream: Any = None) -> Any:
        """``out`` gets this rank's block of the reduction of every rank's
        ``x`` (which holds ``size`` times as many elements). Returns ``out``.

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> (comm,) = dist.init_all(["host"])
        >>> x = gpuport.asarray(np.array([5.0]), device="host")
        >>> out = gpuport.asarray(np.zeros(1), device="host")
        >>> comm.reduce_scatter(x, out).to_numpy()
        array([5.])
        """
        self._run("reduce_scatter", x, out, out, stream=stream)
        return out

    def send(self, x: Any, peer: int, stream: Any = None) -> None:
        """Sends ``x`` to rank ``peer``, which calls ``recv``.

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> a, b = dist.init_all(["host", "host"])
        >>> x = gpuport.asarray(np.arange(3.0), device="host")
        >>> y = gpuport.asarray(np.zeros(3), device="host")
        >>> _ = a.group(lambda: (a.send(x, 1), b.recv(y, 0)))
        >>> y.to_numpy()
        array([0., 1., 2.])
        """
        self._run("send", x, None, x, peer=peer, stream=stream)

    def recv(self, x: Any, peer: int, stream: Any = None) -> Any:
        """Receives into ``x`` what rank ``peer`` sends. Returns ``x``.

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> a, b = dist.init_all(["host", "host"])
        >>> x = gpuport.asarray(np.ones(2), device="host")
        >>> y = gpuport.asarray(np.zeros(2), device="host")
        >>> _ = a.group(lambda: (b.recv(y, 0), a.send(x, 1)))
        >>> y.to_numpy()
        array([1., 1.])
        """
        self._run("recv", None, x, x, peer=peer, stream=stream)
        return x

    def group(self, fn: Callable[[], Any]) -> Any:
        """Runs ``fn()`` as one group: the collectives it makes (of several
        communicators of this process, or sends and receives) are enqueued
        together when it returns, as ``ncclGroupStart``/``ncclGroupEnd`` do.

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> a, b = dist.init_all(["host", "host"])
        >>> x = gpuport.asarray(np.ones(2), device="host")
        >>> y = gpuport.asarray(np.full(2, 2.0), device="host")
        >>> _ = a.group(lambda: (a.all_reduce(x), b.all_reduce(y)))
        >>> x.to_numpy()
        array([3., 3.])
        """
        return self._c.group(fn)

    def synchronize(self, stream: Any = None) -> None:
        """Waits for the stream's collectives; raises if one failed or made
        no progress within ``timeout`` seconds (the communicator is then
        aborted).

        >>> from gpuport import distributed as dist
        >>> (comm,) = dist.init_all(["host"])
        >>> comm.synchronize()
        """
        self._c.synchronize(stream)

    def abort(self) -> None:
        """Stops this communicator; later collectives raise.

        >>> from gpuport import distributed as dist
        >>> (comm,) = dist.init_all(["host"])
        >>> comm.abort(); comm.aborted
        True
        """
        self._c.abort()

    @property
    def aborted(self) -> bool:
        return self._c.aborted

    def split(self, color: int, key: int = 0) -> Communicator | None:
        """Splits the group: every rank calls it, and the ranks that give
        the same ``color`` form a new communicator, ordered by ``key`` and
        then by rank (NCCL's ``ncclCommSplit`` where the library has it).
        A negative ``color`` puts this rank in none: ``None``.

        >>> from gpuport import distributed as dist
        >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
        >>> comm = dist.init(device="host", rank=0, world_size=1, store=store)
        >>> comm.split(0).size, comm.split(-1)
        (1, None)
        """
        child = self._c.split(color, key)
        return None if child is None else Communicator(child)

    def shrink(self, exclude: Sequence[int]) -> Communicator:
        """A communicator of every rank but ``exclude`` (ranks that died),
        in their order here. The survivors of a failure call it, all with
        the same ``exclude``, after ``abort()`` or a collective that raised
        (NCCL's ``ncclCommShrink`` where the library has it, else a new
        communicator through the store).

        >>> from gpuport import distributed as dist
        >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
        >>> comm = dist.init(device="host", rank=0, world_size=1, store=store)
        >>> comm.abort(); comm.shrink([]).rank
        0
        """
        return Communicator(self._c.shrink(list(exclude)))

    def register(self, memory: Any) -> Registration:
        """Registers ``memory`` (a gpuport array, a tensor, any object with
        a pointer and a size, one contiguous range) with NCCL or RCCL
        (``ncclCommRegister``), so that collectives on it skip the
        library's staging copies; they run on it as before. Use it for
        memory that lives long. The ``Registration`` is a context manager
        that deregisters at ``close()``, at the end of the ``with`` block or
        when dropped, and keeps ``memory`` alive until then. Memory of
        another device raises ``DeviceMismatchError``. On the host engine,
        and with an NCCL older than 2.19, nothing is registered
        (``held`` is False).

        >>> from gpuport import distributed as dist
        >>> import numpy as np, gpuport
        >>> (comm,) = dist.init_all(["host"])
        >>> a = gpuport.asarray(np.ones(4, dtype=np.float32), device="host")
        >>> with comm.register(a) as r:
        ...     _ = comm.all_reduce(a); comm.synchronize()
        >>> r.closed, a.to_numpy()
        (True, array([1., 1., 1., 1.], dtype=float32))
        """
        return self._c.register(memory)

    def set_checks(self, on: bool = True) -> None:
        """Before each collective, compare what every rank calls (through
        the store), so that mismatched calls raise instead of hanging.

        >>> from gpuport import distributed as dist
        >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
        >>> comm = dist.init(device="host", rank=0, world_size=1, store=store)
        >>> comm.set_checks(True)
        """
        self._c.set_checks(on)


def init(
    device: Any = None,
    rank: int | None = None,
    world_size: int | None = None,
    store: Any = None,
    *,
    mpi_comm: Any = None,
    mode: str | None = None,
) -> Communicator:
    """This process's communicator.

    - ``rank`` and ``world_size`` default to the environment
      (``rank_and_size``), or to ``mpi_comm``'s;
    - ``device`` to the default backend's device ``LOCAL_RANK``;
    - the ranks meet through ``store``: a ``TcpStore`` (default:
      ``TcpStore.from_env(rank)``, on ``GPUPORT_MASTER_ADDR``/``PORT``, or
      under torchrun on ``MASTER_ADDR`` and ``MASTER_PORT + 1``), or
      ``torch.distributed``'s store (anything with ``set`` and ``get``);
      or through ``mpi_comm`` (an ``mpi4py`` communicator), which
      broadcasts rank 0's id;
    - ``mode`` is how NCCL's and RCCL's calls wait: ``"blocking"`` (their
      default and fastest: a rank gone before its first connection blocks
      that call; later failures end in ``synchronize``'s timeout) or
      ``"bounded"`` (non-blocking communicators: every call, the start
      included, gives up after ``timeout`` and aborts the communicator, at a
      cost per call); ``None`` takes ``"bounded"`` when
      ``GPUPORT_COLLECTIVE_BOUNDED=1``. The host engine's waits are always
      bounded.

    >>> from gpuport import distributed as dist
    >>> store = dist.TcpStore("127.0.0.1", 0, is_host=True)
    >>> dist.init(device="host", rank=0, world_size=1, store=store).size
    1
    """
    if mpi_comm is not None:
        rank = mpi_comm.Get_rank() if rank is None else rank
        world_size = mpi_comm.Get_size() if world_size is None else world_size
    if rank is None or world_size is None:
        env_rank, env_size = rank_and_size()
        rank = env_rank if rank is None else rank
        world_size = env_size if world_size is None else world_size
    if device is None:
        import gpuport

        backend = gpuport.default_device().backend
        device = backend if backend == "host" else f"{backend}:{_local_rank(rank)}"
    if mpi_comm is not None:
        unique = _Communicator.new_id(device) if rank == 0 else None
        unique = mpi_comm.bcast(unique, root=0)
        mpi_comm.Barrier()
        return Communicator(_Communicator.init_with_id(device, rank, world_size, unique, mode))
    if store is not None and not isinstance(store, TcpStore):
        return _init_through(store, device, rank, world_size, mode)
    if store is None:
        if "GPUPORT_MASTER_PORT" not in os.environ and "MASTER_PORT" in os.environ:
            os.environ["GPUPORT_MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1)
            os.environ.setdefault("GPUPORT_MASTER_ADDR", os.environ.get("MASTER_ADDR", "127.0.0.1"))
        store = TcpStore.from_env(rank)
    return Communicator(_Communicator.init_rank(device, rank, world_size, store, mode))


_THROUGH: dict[int, int] = {}


def _init_through(store: Any, device: Any, rank: int, world_size: int, mode: str | None) -> Communicator:
    """``init`` through another library's store (``set``, ``get`` and ``add``,
    as ``torch.distributed.Store`` has): rank 0 sets the id, every rank
    reads it and counts itself in before the engine's blocking start."""
    n = _THROUGH.get(id(store), 0)
    _THROUGH[id(store)] = n + 1
    key = f"gpuport/communicator/{n}"
    if rank == 0:
        store.set(f"{key}/id", _Communicator.new_id(device))
    unique = bytes(store.get(f"{key}/id"))
    store.add(f"{key}/arrived", 1)
    if hasattr(store, "wait"):
        while int(store.add(f"{key}/arrived", 0)) < world_size:
            import time

            time.sleep(0.001)
    return Communicator(_Communicator.init_with_id(device, rank, world_size, unique, mode))


def init_all(devices: Sequence[Any], mode: str | None = None) -> list[Communicator]:
    """One communicator per device, for one process driving them all
    (``ncclCommInitAll``); call their collectives inside ``group``.
    ``mode`` as for ``init``.

    >>> from gpuport import distributed as dist
    >>> [c.rank for c in dist.init_all(["host", "host"])]
    [0, 1]
    """
    return [Communicator(c) for c in _Communicator.init_all(list(devices), mode)]
