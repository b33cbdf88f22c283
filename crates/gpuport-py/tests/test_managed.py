"""Placing managed memory from Python: ``DeviceArray.prefetch`` and
``advise`` on ``runtime.malloc_managed`` memory, on every backend (the host
backend checks and moves nothing; GPU cases skip with a reason where absent)."""

import numpy as np
import pytest

import gpuport
from gpuport import runtime as rt

ADVICE = ["set_read_mostly", "unset_read_mostly", "set_preferred_location", "unset_preferred_location",
          "set_accessed_by", "unset_accessed_by"]


def test_prefetch_and_advice_keep_the_contents(device):
    m = rt.malloc_managed(4096, device=device)
    data = (np.arange(4096) % 251).astype(np.uint8)
    rt.memcpy(m, data, 4096)
    for advice in ADVICE:
        m.advise(advice)
        m.advise(advice, "host")
    m.prefetch()
    m.prefetch("host")
    m.prefetch(device)
    rt.device_synchronize(device)
    back = np.zeros(4096, np.uint8)
    rt.memcpy(back, m, 4096, kind="device_to_host")
    np.testing.assert_array_equal(back, data)
    rt.free(m)


def test_memory_that_is_not_managed_is_refused(device):
    a = rt.malloc(64, device=device)
    with pytest.raises(gpuport.GpuError, match="managed memory"):
        a.prefetch()
    with pytest.raises(gpuport.GpuError, match="managed memory"):
        a.advise("set_read_mostly")
    rt.free(a)


def test_bad_arguments_are_value_errors():
    m = rt.malloc_managed(64, device="host")
    with pytest.raises(ValueError, match="unknown advice"):
        m.advise("loud")
    rt.free(m)
    with pytest.raises(ValueError, match="owns no memory"):
        m.prefetch()
