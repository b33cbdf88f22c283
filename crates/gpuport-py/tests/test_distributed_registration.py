"""Communicator.register: memory registered with a communicator's engine
(NCCL's ncclCommRegister), on the host engine here (which registers
nothing, but checks and keeps the same way) and on CUDA devices where they
exist (skipped with the reason otherwise)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpuport
from gpuport import distributed as dist


def one_rank() -> dist.Communicator:
    (comm,) = dist.init_all(["host"])
    return comm


def test_a_registration_is_a_context_manager_that_closes_once():
    comm = one_rank()
    a = gpuport.asarray(np.arange(8, dtype=np.float32), device="host")
    with comm.register(a) as r:
        assert (r.held, r.bytes, r.closed) == (False, 32, False)
        assert "32 bytes" in repr(r)
    assert r.closed
    r.close()  # a second close does nothing
    assert r.closed and "closed" in repr(r)


def test_a_registration_dropped_unclosed_deregisters_and_keeps_its_memory_until_then():
    comm = one_rank()
    x = np.ones(4, dtype=np.float64)
    r = comm.register(x)
    assert sys.getrefcount(x) > 2, "the registration keeps the array alive"
    del r
    comm.all_reduce(x)
    comm.synchronize()
    assert x.tolist() == [1.0] * 4


def test_registering_what_has_no_size_or_is_not_one_range_raises():
    comm = one_rank()
    with pytest.raises(ValueError, match="no size to register"):
        comm.register(12345678)
    with pytest.raises(ValueError, match="contiguous"):
        comm.register(np.zeros((4, 4), dtype=np.float32)[:, 1])


def test_device_memory_on_the_host_engine_is_refused():
    class OnADevice:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0x7F0000000000, False), "version": 3}

    with pytest.raises(ValueError, match="registered memory"):
        one_rank().register(OnADevice())


def test_an_aborted_communicator_registers_nothing():
    comm = one_rank()
    comm.abort()
    with pytest.raises(gpuport.CollectiveError, match="aborted"):
        comm.register(np.zeros(4, dtype=np.float32))


REGISTERED = """
import numpy as np, gpuport
from gpuport import distributed as dist
DEVICE = {device!r}
comm = dist.init(device=DEVICE)
r = comm.rank
a = gpuport.asarray(np.arange(4, dtype=np.float32) + r, device=comm.device)
with comm.register(a) as reg:
    for step in range(3):
        comm.all_reduce(a); comm.synchronize()
    held = reg.held
assert reg.closed
# 2 ranks: each all-reduce doubles the sum of the two starting arrays.
want = (np.arange(4) * 2 + 1) * 4
assert (a.to_numpy() == want).all(), a.to_numpy()
# After the registration, the array still takes part in collectives.
comm.all_reduce(a); comm.synchronize()
assert (a.to_numpy() == want * 2).all(), a.to_numpy()
print(f"rank {{r}} ok held={{held}}")
"""


def launch(tmp_path, body: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, "-m", "gpuport.distributed.run", "-n", "2", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_registered_arrays_are_all_reduced_across_two_host_processes(tmp_path):
    done = launch(tmp_path, REGISTERED.format(device="host"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok held=False") == 2, done.stdout


def _two_cuda_devices() -> str | None:
    try:
        gpuport.Device("cuda:1")
    except gpuport.GpuError as e:
        return f"two CUDA devices are needed: {e}"
    return None


@pytest.mark.skipif(_two_cuda_devices() is not None, reason=str(_two_cuda_devices()))
def test_registered_arrays_are_all_reduced_across_two_gpus(tmp_path):
    done = launch(tmp_path, REGISTERED.format(device=None))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(" ok held=") == 2, done.stdout


@pytest.mark.skipif(_two_cuda_devices() is not None, reason=str(_two_cuda_devices()))
def test_memory_of_another_gpu_or_of_the_host_is_refused():
    (comm,) = dist.init_all(["cuda:0"])
    other = gpuport.MemArray((16,), "float32", device="cuda:1")
    other.move_memory("device")  # a new MemArray's current copy is on the host
    with pytest.raises(gpuport.DeviceMismatchError, match="registered memory"):
        comm.register(other)
    # An array of the communicator's device whose current copy is the host's:
    # the message says how to make the device copy current.
    own = gpuport.MemArray((16,), "float32", device="cuda:0")
    with pytest.raises(ValueError, match=r'move_memory\("device"\)'):
        comm.register(own)
    own.move_memory("device")
    with comm.register(own) as r:
        assert r.bytes == 64
    with pytest.raises(ValueError, match="registered memory"):
        comm.register(np.zeros(16, dtype=np.float32))
