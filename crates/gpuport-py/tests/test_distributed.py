"""gpuport.distributed: two ranks in two processes started by the launcher
(python -m gpuport.distributed.run), on the host backend here and on two
CUDA devices where they exist (skipped with the reason otherwise)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import gpuport
from gpuport import distributed as dist


def launch(tmp_path, body: str, n: int = 2, timeout: float = 120) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, "-m", "gpuport.distributed.run", "-n", str(n), str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


EVERY_COLLECTIVE = """
import numpy as np, gpuport
from gpuport import distributed as dist
DEVICE = {device!r}
comm = dist.init(device=None if DEVICE is None else DEVICE)
r, n = comm.rank, comm.size
dev = comm.device
def arr(x):
    x = np.asarray(x)
    a = gpuport.MemArray(x.shape, str(x.dtype), device=dev)
    a.read_numpy_array(x)
    return a
a = arr(np.arange(4, dtype=np.float32) + r)
comm.all_reduce(a); comm.synchronize()
assert (a.to_numpy() == np.arange(4) * 2 + 1).all(), a.to_numpy()
m = arr(np.array([r, -r], dtype=np.int64))
comm.all_reduce(m, op="max"); comm.synchronize()
assert m.to_numpy().tolist() == [1, 0], m.to_numpy()
b = arr(np.full(3, 10 * r, dtype=np.uint8))
comm.broadcast(b, root=1); comm.synchronize()
assert b.to_numpy().tolist() == [10, 10, 10]
g = arr(np.zeros(2 * n, dtype=np.int32))
comm.all_gather(arr(np.array([r, 100 + r], dtype=np.int32)), g); comm.synchronize()
assert g.to_numpy().tolist() == [0, 100, 1, 101], g.to_numpy()
out = arr(np.zeros(2, dtype=np.int32))
comm.reduce_scatter(g, out); comm.synchronize()
assert out.to_numpy().tolist() == ([0, 200] if r == 0 else [2, 202]), out.to_numpy()
x, y = arr(np.full(5, float(r))), arr(np.zeros(5))
comm.group(lambda: (comm.send(x, 1 - r), comm.recv(y, 1 - r))); comm.synchronize()
assert (y.to_numpy() == 1 - r).all()
import sys; sys.stdout.write(f"rank {{r}} ok {{comm.engine}}\\n")
"""


def test_every_collective_across_two_host_processes(tmp_path):
    p = launch(tmp_path, EVERY_COLLECTIVE.format(device="host"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0 ok host" in p.stdout and "rank 1 ok host" in p.stdout


def test_mismatched_counts_raise_on_every_rank(tmp_path):
    p = launch(
        tmp_path,
        """
        import numpy as np, gpuport
        from gpuport import distributed as dist
        comm = dist.init(device="host")
        a = gpuport.asarray(np.zeros(4 + 4 * comm.rank, dtype=np.float32), device="host")
        try:
            comm.all_reduce(a)
        except gpuport.CollectiveError as e:
            assert e.kind == "mismatch", e.kind
            assert "of 8 float32" in str(e) and "same collectives" in str(e), str(e)
            import sys; sys.stdout.write(f"rank {comm.rank} raised\\n")
        """,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("raised") == 2, p.stdout


def test_a_store_nobody_hosts_times_out_with_the_address():
    port = __import__("gpuport.distributed.run", fromlist=["free_port"]).free_port()
    with pytest.raises(gpuport.GpuError, match=f"127.0.0.1:{port}.*GPUPORT_MASTER"):
        dist.TcpStore("127.0.0.1", port, is_host=False, timeout=0.5)


def test_bad_arguments_raise_saying_what_is_accepted():
    (comm,) = dist.init_all(["host"])
    a = gpuport.asarray(__import__("numpy").zeros(2), device="host")
    with pytest.raises(ValueError, match='use "sum", "prod", "max", "min" or "avg"'):
        comm.all_reduce(a, op="mean")
    with pytest.raises(gpuport.GpuError, match="root 3 is not a rank"):
        comm.broadcast(a, root=3)
    with pytest.raises(TypeError, match="has no dtype"):
        comm.all_reduce(b"bytes")
    comm.abort()
    with pytest.raises(gpuport.CollectiveError, match="aborted") as e:
        comm.all_reduce(a)
    assert e.value.kind == "aborted"


def test_operand_dtypes_are_named_to_the_extension_as_they_print():
    # No parser of its own: "torch.float32" and NumPy's names reach DType::parse.
    class TorchLike:
        dtype = type("dtype", (), {"__str__": lambda self: "torch.float32"})()

        def numel(self) -> int:
            return 3

    assert dist._dtype_and_count(TorchLike()) == ("torch.float32", 3)
    np = __import__("numpy")
    assert dist._dtype_and_count(np.zeros(4, ">f4")) == (">f4", 4)
    assert gpuport.MemArray(1, "torch.float32").dtype == "float32"
    with pytest.raises(gpuport.UnsupportedDTypeError, match="supported dtypes: bool, int8"):
        gpuport.MemArray(1, ">f4")


def test_a_short_recv_buffer_is_refused():
    import numpy as np

    a, b = dist.init_all(["host", "host"])
    x = gpuport.asarray(np.zeros(4), device="host")
    small = gpuport.asarray(np.zeros(4), device="host")
    with pytest.raises(ValueError, match="recv holds 32 bytes, and the collective needs 64"):
        a.all_gather(x, small)


def test_mode_names_how_calls_wait_and_bad_names_say_what_is_accepted(monkeypatch):
    import numpy as np

    store = dist.TcpStore("127.0.0.1", 0, is_host=True, timeout=10.0)
    for mode in ("blocking", "bounded", None):
        comm = dist.init(device="host", rank=0, world_size=1, store=store, mode=mode)
        # The host engine's waits are always bounded by its store's timeout.
        assert comm.mode == "bounded"
        x = gpuport.asarray(np.ones(3), device="host")
        comm.all_reduce(x)
        comm.synchronize()
    (one,) = dist.init_all(["host"], mode="blocking")
    assert one.mode == "bounded"
    c = dist.Communicator(dist._Communicator.init_with_id("host", 0, 1, dist._Communicator.new_id("host"), timeout=7.5))
    assert c.timeout == 7.5
    for bad in (lambda: dist.init_all(["host"], mode="eager"),
                lambda: dist.init(device="host", rank=0, world_size=1, store=store, mode="Bounded"),
                lambda: dist._Communicator.init_with_id("host", 0, 1, b"", mode="async")):
        with pytest.raises(ValueError, match='use "blocking" or "bounded"'):
            bad()
    with pytest.raises(ValueError, match="timeout=-1"):
        dist._Communicator.init_with_id("host", 0, 1, dist._Communicator.new_id("host"), timeout=-1.0)


def _one_cuda_device_with_nccl() -> str | None:
    try:
        gpuport.Device("cuda:0")
    except gpuport.GpuError as e:
        return f"a CUDA device is needed: {e}"
    try:
        dist._Communicator.new_id("cuda:0")
    except gpuport.GpuError as e:
        return f"NCCL is needed: {e}"
    return None


@pytest.mark.skipif(_one_cuda_device_with_nccl() is not None, reason=str(_one_cuda_device_with_nccl()))
def test_nccl_communicators_are_made_in_the_mode_asked_for(monkeypatch):
    import numpy as np

    for mode in ("blocking", "bounded"):
        c = dist.Communicator(
            dist._Communicator.init_with_id("cuda:0", 0, 1, dist._Communicator.new_id("cuda:0"), mode=mode, timeout=30.0)
        )
        assert c.mode == mode, (mode, c.engine)
        assert c.timeout == 30.0
        x = gpuport.asarray(np.arange(4, dtype=np.float32), device="cuda:0")
        c.all_reduce(x)
        c.synchronize()
        np.testing.assert_array_equal(x.to_numpy(), np.arange(4, dtype=np.float32))
        (c2,) = dist.init_all(["cuda:0"], mode=mode)
        assert c2.mode == mode
        c.abort()
        c2.abort()
    monkeypatch.setenv("GPUPORT_COLLECTIVE_BOUNDED", "1")
    (c3,) = dist.init_all(["cuda:0"])
    assert c3.mode == "bounded"
    c3.abort()


def _two_cuda_devices() -> str | None:
    try:
        gpuport.Device("cuda:1")
    except gpuport.GpuError as e:
        return f"two CUDA devices are needed: {e}"
    return None


@pytest.mark.skipif(_two_cuda_devices() is not None, reason=str(_two_cuda_devices()))
def test_every_collective_across_two_gpus(tmp_path):
    p = launch(tmp_path, EVERY_COLLECTIVE.format(device=None))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("ok NCCL") == 2, p.stdout


@pytest.mark.skipif(_two_cuda_devices() is not None, reason=str(_two_cuda_devices()))
def test_torch_tensors_are_reduced_in_place(tmp_path):
    pytest.importorskip("torch")
    p = launch(
        tmp_path,
        """
        import torch
        from gpuport import distributed as dist
        comm = dist.init()
        t = torch.full((1 << 20,), float(comm.rank + 1), device=f"cuda:{comm.rank}")
        comm.all_reduce(t, stream=torch.cuda.current_stream(t.device).cuda_stream)
        torch.cuda.synchronize(t.device)
        assert bool((t == 3.0).all()), t[:4]
        import sys; sys.stdout.write(f"rank {comm.rank} torch ok\\n")
        """,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("torch ok") == 2


def test_ranks_meet_through_another_librarys_store(tmp_path):
    # Any object with set/get/add (as torch.distributed.Store has) carries the id.
    p = launch(
        tmp_path,
        """
        import os, numpy as np, gpuport
        from gpuport import distributed as dist
        rank, size = dist.rank_and_size()
        native = dist.TcpStore.from_env(rank)
        class Foreign:  # set/get/add only, like torch.distributed.Store
            def set(self, k, v): native.set(k, bytes(v))
            def get(self, k): return native.get(k)
            def add(self, k, d): return native.add(k, d)
        comm = dist.init(device="host", store=Foreign())
        a = gpuport.asarray(np.full(2, rank + 1.0), device="host")
        comm.all_reduce(a); comm.synchronize()
        assert a.to_numpy().tolist() == [3.0, 3.0], a.to_numpy()
        import sys; sys.stdout.write(f"rank {rank} ok\\n")
        """,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("ok") == 2


def _mpirun() -> str | None:
    import shutil

    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed"
    return None if shutil.which("mpirun") else "mpirun is not on PATH"


@pytest.mark.skipif(_mpirun() is not None, reason=str(_mpirun()))
def test_ranks_meet_through_mpi4py(tmp_path):
    script = tmp_path / "mpi_job.py"
    script.write_text(
        textwrap.dedent(
            """
            import numpy as np, gpuport
            from mpi4py import MPI
            from gpuport import distributed as dist
            comm = dist.init(device="host", mpi_comm=MPI.COMM_WORLD)
            a = gpuport.asarray(np.full(2, comm.rank + 1.0), device="host")
            comm.all_reduce(a); comm.synchronize()
            assert a.to_numpy().tolist() == [3.0, 3.0], a.to_numpy()
            import sys; sys.stdout.write(f"rank {comm.rank} mpi ok\\n")
            """
        )
    )
    p = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("mpi ok") == 2


def test_collectives_are_captured_and_each_replay_runs_them(gpu_device):
    """A collective enqueued on a capturing stream becomes part of the graph:
    nothing runs at capture time, and every replay gathers what is in the
    send buffer then (NCCL, or RCCL through the HIP-on-CUDA shim; one rank,
    so ``out`` is ``x``)."""
    import numpy as np

    device = gpu_device
    try:
        (comm,) = dist.init_all([device])
    except gpuport.GpuError as e:
        pytest.skip(f"no collective engine for {device}: {e}")
    n = 256
    x = gpuport.asarray(np.zeros(n, dtype=np.uint32), device=device)
    out = gpuport.asarray(np.full(n, 5, dtype=np.uint32), device=device)
    x.synchronize()
    out.synchronize()
    s = gpuport.Stream(device)
    with s.capture() as g:
        comm.all_gather(x, out, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), 5, err_msg="captured work must not run at capture time")
    for i in (3, 9):
        x.read_numpy_array(np.full(n, i, dtype=np.uint32))
        x.move_memory("device")
        g.replay(s)
        s.synchronize()
        np.testing.assert_array_equal(out.to_numpy(), i, err_msg=f"replay with {i}")
    x.read_numpy_array(np.zeros(n, dtype=np.uint32))  # the current copy is the host's now
    with s.capture():
        with pytest.raises(gpuport.GraphError, match="move the array to the device"):
            comm.all_gather(x, out, stream=s)
    comm.abort()


def test_the_host_engine_refuses_a_capturing_stream_and_the_capture_survives():
    """The host engine runs each collective on the calling thread once the
    stream's earlier work is done, so it cannot be captured: a GraphError
    saying so, and the capture goes on."""
    import numpy as np

    (comm,) = dist.init_all(["host"])
    x = gpuport.asarray(np.ones(4, dtype=np.float32), device="host")
    s = gpuport.Stream("host")
    with s.capture() as g:
        with pytest.raises(gpuport.GraphError, match="capturing a graph"):
            comm.all_reduce(x, stream=s)
        assert s.is_capturing
    assert g.is_captured


def test_a_communicator_busy_in_another_thread_is_waited_for_without_the_gil():
    """A thread blocked in a collective holds the communicator with the GIL
    released; another thread asking it anything (``rank``) waits without the
    GIL, so the first can take the GIL back and return. A lock taken while
    holding the GIL made this a deadlock; in a child process, so a
    regression fails here instead of hanging the suite."""
    script = r"""
import threading, time
import numpy as np
import gpuport, gpuport.distributed as dist
comms = dist.init_all(["host", "host"])
comms[0].timeout = 2.0
x = gpuport.asarray(np.ones(4), device="host")
failed = []
def lonely():
    try:
        comms[0].all_reduce(x)  # rank 1 never joins: waits out the timeout
        comms[0].synchronize()
    except Exception as e:
        failed.append(type(e).__name__)
t = threading.Thread(target=lonely)
t.start()
time.sleep(0.5)
start = time.monotonic()
rank = comms[0].rank  # waits for the thread, without the GIL
t.join()
print(rank, failed, round(time.monotonic() - start, 1))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    rank, failed = out.stdout.split()[0], out.stdout
    assert rank == "0", out.stdout
    assert "CollectiveError" in failed, out.stdout
