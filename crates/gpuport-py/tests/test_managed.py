"""Placing managed memory from Python: ``DeviceArray.prefetch`` and
``advise`` on ``runtime.malloc_managed`` memory, and ``MemArray(...,
memory="managed")`` with its ``prefetch``, ``advise`` and host-accessible
exports, on every backend (on the host backend managed memory is the heap:
arrays of it are made and checked, and nothing moves; GPU cases skip with a
reason where absent)."""

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


# ---- MemArray(..., memory="managed") ----

def managed_array_or_skip(shape, dtype, device):
    """A managed ``MemArray``, or a skip saying why ``device`` has no managed memory."""
    try:
        return gpuport.MemArray(shape, dtype, device=device, memory="managed")
    except gpuport.UnsupportedError as e:
        pytest.skip(f"{device.spec}: no managed memory: {e}")


def test_a_managed_array_keeps_its_contents_when_placed(device):
    a = managed_array_or_skip((4, 256), "float32", device)
    assert a.is_managed and a.device.spec == device.spec
    a.add_index()
    for advice in ADVICE:
        a.advise(advice)
        a.advise(advice, "host")
    a.prefetch("host")
    a.prefetch()
    a.prefetch("device")
    a.prefetch(device)
    a.synchronize()
    expected = np.add.outer(np.arange(4), np.arange(256)).astype(np.float32)
    np.testing.assert_array_equal(a.to_numpy(), expected)
    assert a.copy().is_managed, "a copy's device copy is managed too"


def test_a_managed_array_exports_host_accessible_memory(device):
    a = managed_array_or_skip(8, "int32", device)
    a.add_index()
    assert a.residency == "device"
    if device.spec == "host":
        assert a.__dlpack_device__() == (1, 0)
    elif device.spec.startswith("cuda"):
        assert a.__dlpack_device__() == (gpuport.dlpack.kDLCUDAManaged, 0)
        cai = a.__cuda_array_interface__
        assert cai["data"][0] == a.data_ptr
    else:
        # DLPack has no ROCm managed device type: the memory is exported as ROCm memory.
        assert a.__dlpack_device__() == (gpuport.dlpack.kDLROCM, device.ordinal)
        pytest.skip(f"{device.spec}: ROCm managed memory is exported as device memory, not host-accessible")
    # The host reads the device copy itself, without a copy: NumPy through
    # DLPack and through the array interface.
    np.testing.assert_array_equal(np.from_dlpack(a), np.arange(8, dtype=np.int32))
    view = np.asarray(a)
    assert view.__array_interface__["data"][0] == a.data_ptr
    np.testing.assert_array_equal(view, np.arange(8, dtype=np.int32))


def test_an_array_that_is_not_managed_cannot_be_placed(device):
    a = gpuport.MemArray(16, "float32", device=device)
    assert not a.is_managed
    with pytest.raises(gpuport.GpuError, match='memory="managed"'):
        a.prefetch()
    with pytest.raises(gpuport.GpuError, match='memory="managed"'):
        a.advise("set_read_mostly")


def test_an_unknown_memory_or_advice_is_a_value_error():
    with pytest.raises(ValueError, match="unknown memory 'pinned'; one of 'device', 'managed'"):
        gpuport.MemArray(4, device="host", memory="pinned")
    a = gpuport.MemArray(4, device="host", memory="managed")
    with pytest.raises(gpuport.InvalidArgumentError, match="unknown advice 'loud'; one of set_read_mostly"):
        a.advise("loud")
    assert not gpuport.MemArray(4, device="host", memory="device").is_managed


def test_a_managed_array_is_placed_only_on_its_own_backend(gpu_device):
    a = managed_array_or_skip(4, "float32", gpu_device)
    with pytest.raises(gpuport.InvalidArgumentError, match="a device of its backend"):
        a.prefetch(gpuport.Device("host"))
    with pytest.raises(gpuport.InvalidArgumentError, match="a device of its backend"):
        a.advise("set_accessed_by", gpuport.Device("host"))


def test_an_imported_array_is_placed_by_its_producer():
    imported = gpuport.from_dlpack(np.zeros(4, np.float32))
    assert not imported.is_managed
    with pytest.raises(gpuport.ResidencyError, match="through its producer"):
        imported.prefetch("host")


def test_placing_inside_a_get_dlpack_block_is_a_lock_error():
    a = gpuport.MemArray(4, "float32", device="host", memory="managed")
    with a.get_dlpack():
        with pytest.raises(gpuport.LockError):
            a.prefetch()
