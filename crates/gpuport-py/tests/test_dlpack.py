"""DLPack per the array API standard, against NumPy through host memory, on
every backend (``device``), and device copies through gpuport itself on
every GPU backend (``gpu_device``)."""

import numpy as np
import pytest

import gpuport

from conftest import NUMPY_DTYPES, SHAPES, DLPackOnly, capsule_name_is, collect, dl_device_type, init_array, stats


def filled(shape=(2, 3), dtype="float32", device="host"):
    """A host-resident array (any backend keeps what read_numpy_array wrote on the host)."""
    a = gpuport.MemArray(shape, dtype, device=device)
    a.read_numpy_array(init_array(shape, dtype))
    return a


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_every_dtype_and_rank_round_trips_through_numpy_zero_copy(device, shape, dtype):
    a = filled(shape, dtype, device)
    x = np.from_dlpack(a)
    assert x.ctypes.data == a.data_ptr  # the same memory
    np.testing.assert_array_equal(x, init_array(shape, dtype))
    y = np.asarray(a)  # array interface
    assert y.ctypes.data == a.data_ptr
    b = gpuport.from_dlpack(x)  # and back, zero-copy
    assert b.data_ptr == a.data_ptr and b.shape == shape and b.dtype == a.dtype


def test_versioned_capsule_when_asked_for_1_x_legacy_otherwise(device):
    a = filled(device=device)
    assert capsule_name_is(a.__dlpack__(), "dltensor")
    assert capsule_name_is(a.__dlpack__(max_version=None), "dltensor")
    assert capsule_name_is(a.__dlpack__(max_version=(0, 8)), "dltensor")
    assert capsule_name_is(a.__dlpack__(max_version=(1, 0)), "dltensor_versioned")
    assert capsule_name_is(a.__dlpack__(max_version=(2, 3)), "dltensor_versioned")


def test_numpy_gets_a_writable_view_of_a_versioned_export(device):
    a = filled(device=device)
    x = np.from_dlpack(a)
    assert x.flags.writeable
    x[0, 0] = 42
    np.testing.assert_array_equal(a.to_numpy()[0, 0], 42)


def test_read_only_export_sets_the_flag_and_numpy_honours_it(device):
    a = filled(device=device)
    with a.get_dlpack(readonly=True) as d:
        x = np.from_dlpack(d)
        assert not x.flags.writeable
        with pytest.raises(BufferError, match="versioned"):
            d.__dlpack__()  # a legacy capsule cannot say read-only


def test_copy_true_exports_a_copy(device):
    a = filled(device=device)
    x = np.from_dlpack(a, copy=True)
    assert x.ctypes.data != a.data_ptr
    x[...] = 0
    assert a.to_numpy().any()


def test_copy_false_and_dl_device_are_honoured_or_refused():
    a = filled()
    x = np.from_dlpack(a, copy=False, device="cpu")
    assert x.ctypes.data == a.data_ptr
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(10, 0))


def test_device_only_host_backend_data_exports_its_device_copy():
    a = filled((4,), "int32")
    a.add_index()
    assert a.residency == "device"
    x = np.from_dlpack(a)  # host backend: the device copy is CPU memory
    np.testing.assert_array_equal(x, init_array((4,), "int32") + np.arange(4))


def test_host_memory_takes_no_stream(device):
    a = filled(device=device)
    a.__dlpack__(stream=None)
    a.__dlpack__(stream=-1)
    if device.backend == "host":
        with pytest.raises(ValueError, match="stream=None"):
            a.__dlpack__(stream=1)
        return
    # On a GPU device a stream names GPU memory: the consumer was told the
    # GPU device, so the device copy is brought back and exported
    # (`streamed_location` in src/dynamic/exchange.rs), not refused.
    stream = 1 if device.backend == "cuda" else 0
    a.__dlpack__(stream=stream)
    assert a.residency == "device", a.residency  # the exported copy is the only current one


def test_dlpack_device_is_kdlcpu_for_host_memory(device):
    assert filled(device=device).__dlpack_device__() == (gpuport.DLDeviceType.kDLCPU, 0)


def test_unconsumed_capsules_are_freed_by_their_destructor(device):
    a = filled(device=device)
    collect()
    before = stats()
    for versioned in (None, (1, 0)):
        cap = a.__dlpack__(max_version=versioned)
        assert a.live_exports == 1
        del cap
        collect()
        assert a.live_exports == 0
    after = stats()
    assert after["capsules_freed_unused"] - before["capsules_freed_unused"] == 2
    assert after["exports_live"] == before["exports_live"]


def test_consumed_capsules_are_freed_by_the_consumer_once(device):
    a = filled(device=device)
    collect()
    before = stats()
    x = np.from_dlpack(a)
    assert a.live_exports == 1
    assert stats()["exports_live"] == before["exports_live"] + 1
    del x
    collect()
    after = stats()
    assert a.live_exports == 0 and after["exports_live"] == before["exports_live"]
    assert after["capsules_freed_unused"] == before["capsules_freed_unused"]


def test_a_capsule_is_consumed_only_once(device):
    cap = filled(device=device).__dlpack__(max_version=(1, 0))
    b = gpuport.from_dlpack(cap)
    assert capsule_name_is(cap, "used_dltensor_versioned")
    with pytest.raises(gpuport.DLPackError, match="consumed only once"):
        gpuport.from_dlpack(cap)
    assert b.shape == (2, 3)


def test_from_dlpack_of_a_non_producer_is_a_type_error():
    with pytest.raises(TypeError, match="does not support DLPack"):
        gpuport.from_dlpack([1, 2, 3])


def test_from_dlpack_keeps_read_only_and_strides():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]
    x.flags.writeable = False
    b = gpuport.from_dlpack(x)
    assert b.readonly and b.shape == (3, 2)
    np.testing.assert_array_equal(np.from_dlpack(b), x)
    assert not np.from_dlpack(b).flags.writeable
    with pytest.raises(gpuport.DLPackError, match="read-only"):
        b.add_index()


def test_from_dlpack_copy_true_owns_its_memory():
    x = np.arange(6, dtype=np.float32)
    b = gpuport.from_dlpack(x, copy=True)
    assert not b.is_imported and b.data_ptr != x.ctypes.data
    np.testing.assert_array_equal(b.to_numpy(), x)


def test_asarray_accepts_lists_memarrays_and_producers():
    a = gpuport.asarray([[1.5, 2.5]])
    assert a.shape == (1, 2) and a.dtype == "float64"
    assert gpuport.asarray(a) is a
    x = np.ones(3, np.uint8)
    assert gpuport.asarray(x).data_ptr == x.ctypes.data


def test_asarray_on_the_data_s_own_device_imports_without_a_copy():
    x = np.arange(4, dtype=np.float32)
    a = gpuport.asarray(x, device="host")
    assert a.is_imported and a.data_ptr == x.ctypes.data
    m = gpuport.MemArray(3, "int8", device="host")
    assert gpuport.asarray(m, device=gpuport.Device("host")) is m
    assert gpuport.asarray([1, 2], device=None).device.spec == "host"


def test_asarray_refuses_a_memarray_on_another_device(gpu_device):
    m = gpuport.MemArray(3, "int8", device="host")
    with pytest.raises(ValueError, match=f"the data is on host, not {gpu_device.spec}"):
        gpuport.asarray(m, device=gpu_device)


def test_unsupported_dlpack_dtype_is_refused_listing_supported():
    x = np.zeros(3, np.float16)
    assert gpuport.from_dlpack(DLPackOnly(x)).dtype == "float16"
    with pytest.raises((gpuport.DLPackError, BufferError)):
        gpuport.from_dlpack(np.zeros(2, "datetime64[s]"))


def test_no_cuda_array_interface_on_host():
    a = filled()
    assert not hasattr(a, "__cuda_array_interface__")
    assert "data" in a.__array_interface__


# ---- device copies on every GPU backend ---------------------------------------------


def device_only(dev, shape=(2, 3), dtype="int32"):
    """A filled array whose device copy alone is current (add_index ran there)."""
    a = filled(shape, dtype, dev)
    a.add_index()
    assert a.residency == "device"
    return a


def test_device_copy_exports_its_dlpack_device(gpu_device):
    a = device_only(gpu_device)
    want = (dl_device_type(gpu_device), gpu_device.ordinal)
    assert a.__dlpack_device__() == want
    for versioned in (None, (1, 0)):
        cap = a.__dlpack__(max_version=versioned)
        assert capsule_name_is(cap, "dltensor_versioned" if versioned else "dltensor")
        del cap
    collect()
    assert a.live_exports == 0


def test_device_copy_stream_rules(gpu_device):
    """CUDA: None, 1, 2, a handle or -1; 0 is ambiguous. ROCm: None or 0
    (the default stream), a handle or -1; the 1/2 sentinels are CUDA's."""
    a = device_only(gpu_device)
    s = gpu_device.create_stream()
    for stream in (None, -1, s.handle):
        a.__dlpack__(stream=stream)  # accepted (the capsule is dropped unconsumed)
    if gpu_device.backend == "cuda":
        a.__dlpack__(stream=1)
        a.__dlpack__(stream=2)
        with pytest.raises(ValueError, match="ambiguous"):
            a.__dlpack__(stream=0)
    else:
        a.__dlpack__(stream=0)  # ROCm's default stream
    with pytest.raises(ValueError, match="stream=-2"):
        a.__dlpack__(stream=-2)
    s.synchronize()


def test_device_copy_round_trips_through_gpuport_zero_copy(gpu_device):
    collect()
    before = stats()
    a = device_only(gpu_device, (3, 4), "int32")
    b = gpuport.from_dlpack(a)  # gpuport consumer of a gpuport producer, on the device
    assert b.is_imported and b.device == gpu_device
    assert b.data_ptr == a.data_ptr and b.shape == (3, 4) and b.dtype == "int32"
    assert b.__dlpack_device__() == (dl_device_type(gpu_device), gpu_device.ordinal)
    b.add_index()  # writes a's device copy
    idx = np.indices((3, 4)).sum(axis=0)
    np.testing.assert_array_equal(a.to_numpy(), init_array((3, 4), "int32") + 2 * idx)
    del a, b
    collect()
    after = stats()
    assert after["exports_live"] == before["exports_live"]
    assert after["imports_live"] == before["imports_live"]


def test_an_import_refuses_what_only_its_producer_can_do():
    """The core's import rules (``src/dynamic/array_access.rs``): an
    import is copied and written through its producer, and its bytes are
    read on the host only from compact host memory; each refusal is a
    ``ResidencyError`` naming the call."""
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    a = gpuport.from_dlpack(x)
    assert a.is_imported and a.residency == "imported"
    assert a.tobytes() == x.tobytes()
    with pytest.raises(gpuport.ResidencyError, match=r"^copy of an imported array: do it through its producer"):
        a.copy()
    with pytest.raises(gpuport.ResidencyError, match=r"^read_numpy_array of an imported array"):
        a.read_numpy_array(np.zeros((2, 3), dtype=np.int32))
    a.move_memory("host")  # host memory: already where it is asked to be
    t = gpuport.from_dlpack(x.T)
    with pytest.raises(gpuport.ResidencyError, match=r"^tobytes needs compact host memory; the imported array is not"):
        t.tobytes()
