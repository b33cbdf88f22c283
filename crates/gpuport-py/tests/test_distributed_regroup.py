"""gpuport.distributed beyond one group of one node, on the host engine in
processes the launcher starts: ranks that fail fast at init, split,
recovery after a rank dies (abort, then shrink), and a job of two nodes on
one machine (two launchers, their store on a second loopback address)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

import pytest

import gpuport
from gpuport.distributed import run


def launch(tmp_path, body: str, *args: str, timeout: float = 60) -> subprocess.Popen[str]:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.Popen(
        [sys.executable, "-m", "gpuport.distributed.run", *args, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(p: subprocess.Popen[str], timeout: float = 60) -> str:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out
    return out


def test_a_rank_that_fails_at_init_fails_the_other_within_two_seconds(tmp_path):
    """Rank 1 comes for a world of 3: whichever rank comes second finds the
    difference, and the other learns of it through the store at once,
    though the store would wait its default 300 s."""
    body = """
    import os, time
    import gpuport
    from gpuport import distributed as dist
    r = int(os.environ["GPUPORT_RANK"])
    store = dist.TcpStore.from_env(r)
    start = time.monotonic()
    try:
        dist.init(device="host", rank=r, world_size=3 if r == 1 else 2, store=store)
    except gpuport.CollectiveError as e:
        assert e.kind == "peer_init_failed" and "world" in str(e), e
        print(f"rank {r} told in {time.monotonic() - start:.2f} s")
    except Exception as e:
        assert "world size" in str(e), e
        print(f"rank {r} found it")
    else:
        raise AssertionError("init with another world size returned")
    """
    p = launch(tmp_path, body, "-n", "2")
    out = finish(p)
    told = [line for line in out.splitlines() if "told in" in line]
    assert len(told) == 1 and "found it" in out, out
    assert float(told[0].split()[4]) < 2.0, out


def test_a_rank_whose_device_does_not_open_fails_the_other_within_two_seconds(tmp_path):
    """Rank 1 asks for a device that does not open: rank 0, waiting in
    init, learns of it through the store at once, naming rank 1 and its
    device, though the store would wait its default 300 s."""
    body = """
    import os, time
    import gpuport
    from gpuport import distributed as dist
    r = int(os.environ["GPUPORT_RANK"])
    store = dist.TcpStore.from_env(r)
    if r == 1:
        time.sleep(0.3)
    start = time.monotonic()
    try:
        dist.init(device="host" if r == 0 else "cuda:99", rank=r, world_size=2, store=store)
    except gpuport.CollectiveError as e:
        assert r == 0 and e.kind == "peer_init_failed" and "rank 1" in str(e) and "cuda:99" in str(e), e
        print(f"rank {r} told in {time.monotonic() - start:.2f} s")
    except Exception as e:
        assert r == 1, e
        print(f"rank {r} could not open its device")
    else:
        raise AssertionError("init on a device that does not open returned")
    """
    p = launch(tmp_path, body, "-n", "2")
    out = finish(p)
    told = [line for line in out.splitlines() if "told in" in line]
    assert len(told) == 1 and "could not open its device" in out, out
    assert float(told[0].split()[4]) < 2.0, out


def test_split_groups_ranks_by_color_and_key(tmp_path):
    body = """
    import numpy as np, gpuport
    from gpuport import distributed as dist
    comm = dist.init(device="host")
    r = comm.rank
    child = comm.split(-1 if r == 3 else r % 2, key=-r)
    if r == 3:
        assert child is None
    else:
        a = gpuport.asarray(np.array([r + 1.0], dtype=np.float32), device="host")
        child.all_reduce(a); child.synchronize()
        want = {0: (1, 2, 4.0), 2: (0, 2, 4.0), 1: (0, 1, 2.0)}[r]
        assert (child.rank, child.size, float(a.to_numpy()[0])) == want, (r, child.rank, a.to_numpy())
    print(f"rank {r} ok")
    """
    out = finish(launch(tmp_path, body, "-n", "4"))
    # The ranks' lines may interleave on one pipe: find them anywhere.
    assert sorted(re.findall(r"rank \d ok", out)) == [f"rank {r} ok" for r in range(4)]


SURVIVORS = """
import os
import numpy as np, gpuport
from gpuport import distributed as dist
DEVICE = {device!r}
comm = dist.init(device=DEVICE)
r = comm.rank
def total(c, x):
    a = gpuport.asarray(np.array([x, 10 * x], dtype=np.float64), device=c.device)
    c.all_reduce(a); c.synchronize()
    return a.to_numpy().tolist()
assert total(comm, 1.0) == [4.0, 40.0]
if r == 2:
    os._exit(0)  # dies without a word
comm.timeout = 2.0
try:
    total(comm, 1.0)
except gpuport.CollectiveError as e:
    assert e.kind in ("timeout", "remote_failure"), e
else:
    raise AssertionError("a collective with a dead rank returned")
comm.abort()
smaller = comm.shrink([2])
assert (smaller.rank, smaller.size) == ({{0: 0, 1: 1, 3: 2}}[r], 3)
for step in range(3):
    assert total(smaller, float(r + step)) == [4.0 + 3 * step, 40.0 + 30 * step]
print(f"rank {{r}} recovered")
"""


def _four_cuda_devices() -> str | None:
    try:
        gpuport.Device("cuda:3")
    except gpuport.GpuError as e:
        return f"four CUDA devices are needed: {e}"
    return None


@pytest.mark.parametrize(
    "device",
    [
        "host",
        pytest.param(
            None,
            id="cuda",
            marks=pytest.mark.skipif(_four_cuda_devices() is not None, reason=str(_four_cuda_devices())),
        ),
    ],
)
def test_survivors_of_a_rank_that_exits_shrink_and_all_reduce(tmp_path, device):
    """Four ranks; rank 2 exits. The survivors' next all-reduce fails, they
    abort and shrink with rank 2 excluded (on CUDA: ncclCommShrink of the
    aborted communicator with NCCL_SHRINK_ABORT where NCCL has it), and the
    new communicator all-reduces the right values, round after round."""
    out = finish(launch(tmp_path, SURVIVORS.format(device=device), "-n", "4"), timeout=120)
    assert out.count("recovered") == 3, out


TWO_NODES = """
import numpy as np, gpuport
from gpuport import distributed as dist
comm = dist.init(device="host")
r, n = comm.rank, comm.size
assert n == 4
def arr(x):
    return gpuport.asarray(np.asarray(x), device="host")
a = arr(np.arange(3, dtype=np.float32) + r)
comm.all_reduce(a); comm.synchronize()
assert a.to_numpy().tolist() == [6.0, 10.0, 14.0], a.to_numpy()
m = arr(np.array([r], dtype=np.int64))
comm.all_reduce(m, op="min"); comm.synchronize()
assert m.to_numpy().tolist() == [0]
b = arr(np.full(2, 7 * r, dtype=np.uint8))
comm.broadcast(b, root=3); comm.synchronize()
assert b.to_numpy().tolist() == [21, 21]
red = arr(np.array([1.0 + r]))
comm.reduce(red, root=1); comm.synchronize()
assert red.to_numpy().tolist() == ([10.0] if r == 1 else [1.0 + r])
g = arr(np.zeros(n, dtype=np.int32))
comm.all_gather(arr(np.array([10 * r], dtype=np.int32)), g); comm.synchronize()
assert g.to_numpy().tolist() == [0, 10, 20, 30], g.to_numpy()
out = arr(np.zeros(1, dtype=np.int32))
comm.reduce_scatter(arr(np.arange(n, dtype=np.int32)), out); comm.synchronize()
assert out.to_numpy().tolist() == [4 * r]
x, y = arr(np.full(2, float(r))), arr(np.zeros(2))
comm.group(lambda: (comm.send(x, (r + 1) % n), comm.recv(y, (r - 1) % n))); comm.synchronize()
assert y.to_numpy().tolist() == [float((r - 1) % n)] * 2
print(f"rank {r} ok")
"""


def test_two_nodes_on_one_machine_give_every_collectives_values(tmp_path):
    """Two launchers, as on two machines: node 0's rank 0 hosts the store
    on 127.0.0.2, which node 1 reaches over loopback."""
    port = run.free_port()
    common = ["--nnodes", "2", "--master-addr", "127.0.0.2", "--master-port", str(port), "-n", "2"]
    start = time.monotonic()
    nodes = [launch(tmp_path, TWO_NODES, *common, "--node-rank", str(k)) for k in (0, 1)]
    outs = [finish(p, timeout=30) for p in nodes]
    assert time.monotonic() - start < 30
    assert sorted(m for o in outs for m in re.findall(r"rank \d ok", o)) == [f"rank {r} ok" for r in range(4)]
