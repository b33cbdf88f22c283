"""MemArray over every dtype and rank; the flow of docs/design.md#the-test-kernel; bad input."""

import numpy as np
import pytest

import gpuport
from gpuport import dlpack

from conftest import NUMPY_DTYPES, SHAPES, init_array, ref_add_index


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_memarray_flow(device, shape, dtype):
    """The test of docs/design.md#the-test-kernel: create, view through DLPack,
    move and back, read a NumPy array, run add_index on the device, compare
    with NumPy."""
    a = gpuport.MemArray(shape, dtype, device=device)
    assert a.shape == shape and a.dtype == np.dtype(dtype).name and a.ndim == len(shape)

    with a.get_dlpack() as d:
        local = np.from_dlpack(d)
        assert local.shape == shape
        assert local.dtype == np.dtype(dtype)
        assert not local.any()  # zero-filled

    a.move_memory("device")
    with a.get_dlpack(dlpack.kDLCPU) as d:
        back = np.from_dlpack(d)
        assert back.shape == shape

    a.move_memory("device")
    init = init_array(shape, dtype)
    a.read_numpy_array(init)
    assert a.residency == "host"
    a.move_memory("device")
    assert a.residency == "both"

    if not np.dtype(dtype).kind in "iuf":
        with pytest.raises(gpuport.UnsupportedDTypeError, match="add_index"):
            a.add_index()
        expected = init
    else:
        a.add_index()
        expected = ref_add_index(init)
        assert a.residency == "device"
    a.move_memory(dlpack.kDLCPU)
    with a.get_dlpack(dlpack.kDLCPU) as d:
        result = np.from_dlpack(d)
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("dtype", ["bfloat16", "complex32"])
def test_types_numpy_lacks_are_served_and_read_as_bytes(device, dtype):
    a = gpuport.MemArray((2, 3), dtype, device=device)
    assert a.itemsize == {"bfloat16": 2, "complex32": 4}[dtype]
    with pytest.raises((BufferError, RuntimeError)):  # NumPy has no such DLPack dtype
        np.from_dlpack(a)
    if dtype == "bfloat16":
        a.add_index()
        a.move_memory("host")
        bits = np.frombuffer(a.tobytes(), np.uint16).reshape(2, 3)
        want = np.indices((2, 3)).sum(axis=0).astype(np.float32)
        np.testing.assert_array_equal(bits, (want.view(np.uint32) >> 16).astype(np.uint16))
        b = gpuport.from_dlpack(a.get_dlpack("host"))  # gpuport understands its own bfloat16
        assert b.dtype == "bfloat16" and b.tobytes() == a.tobytes()
    else:
        with pytest.raises(gpuport.UnsupportedDTypeError):
            a.add_index()
        assert a.tobytes() == bytes(24)


@pytest.mark.parametrize("rank", range(0, gpuport.MAX_RANK + 1))
def test_every_rank_up_to_max_rank_is_served(device, rank):
    shape = tuple([2] * rank)
    a = gpuport.MemArray(shape, "int32", device=device)
    assert a.shape == shape and a.size == 2**rank
    x = a.to_numpy()
    assert x.shape == shape
    a.add_index()  # rank 0 too: one element, index sum 0
    a.move_memory("host")
    np.testing.assert_array_equal(a.to_numpy(), ref_add_index(np.zeros(shape, np.int32)))


def test_rank_beyond_max_rank_is_refused_with_the_limit():
    with pytest.raises(gpuport.InvalidArgumentError, match="0 to 8 dimensions"):
        gpuport.MemArray((1,) * 9, "float32")


def test_unsupported_dtype_lists_the_supported_ones():
    with pytest.raises(gpuport.UnsupportedDTypeError, match="supported dtypes: bool, int8") as e:
        gpuport.MemArray((3,), "float128")
    assert isinstance(e.value, TypeError) and isinstance(e.value, gpuport.GpuError)


@pytest.mark.parametrize(
    "spec,name",
    [(float, "float64"), (int, "int64"), (bool, "bool"), (complex, "complex128"), (np.float32, "float32"),
     (np.dtype("<u2"), "uint16"), ("f2", "float16"), ("bfloat16", "bfloat16"), (None, "float64")],
)
def test_dtypes_are_named_the_numpy_way(spec, name):
    assert gpuport.MemArray(2, spec).dtype == name


def test_default_dtype_is_float64_and_shape_may_be_an_int():
    a = gpuport.MemArray(4)
    assert a.shape == (4,) and a.dtype == "float64" and len(a) == 4


def test_read_numpy_array_shape_mismatch_raises_shape_error():
    a = gpuport.MemArray((2, 3), "float32")
    with pytest.raises(gpuport.ShapeError, match=r"shape \(3, 2\)|\[3, 2\]") as e:
        a.read_numpy_array(np.zeros((3, 2), np.float32))
    assert isinstance(e.value, ValueError)


def test_read_numpy_array_casts_and_gathers_strided_input(device):
    a = gpuport.MemArray((3, 2), "float32", device=device)
    src = np.arange(6, dtype=np.float64).reshape(2, 3).T  # strided, other dtype
    a.read_numpy_array(src)
    np.testing.assert_array_equal(a.to_numpy(), src.astype(np.float32))


def test_read_numpy_array_converts_a_non_native_byte_order(device):
    a = gpuport.MemArray((4,), "float32", device=device)
    a.read_numpy_array(np.arange(4, dtype=">f4"))  # float32 by name, big-endian bytes
    np.testing.assert_array_equal(a.to_numpy(), [0, 1, 2, 3])


def test_read_numpy_array_staged_on_the_gpu_moves_the_data_it_read(gpu_device):
    # A new array's read is staged on the device (the Rust tests check that
    # the move then copies nothing); the host copy is what NumPy sees, and a
    # host write after the read is what the move takes.
    n = (1 << 18) + 3
    x = np.arange(n, dtype=np.float32)
    a = gpuport.MemArray((n,), "float32", device=gpu_device)
    a.read_numpy_array(x)
    assert a.residency == "host"
    np.testing.assert_array_equal(np.from_dlpack(a), x)
    a.move_memory("device")
    assert a.residency == "both"
    a.add_index()  # on the device copy: it must hold x
    np.testing.assert_array_equal(a.to_numpy(), ref_add_index(x))
    a.move_memory("device")
    a.read_numpy_array(x)  # the device copy was current: staged again
    a.fill(1.0)  # a host write: the staged upload no longer matches
    a.move_memory("device")
    a.add_index()
    np.testing.assert_array_equal(a.to_numpy(), ref_add_index(np.ones(n, np.float32)))
    # A live NumPy view may write the host copy after the read: that read is
    # not staged, so the move copies what the view wrote.
    b = gpuport.MemArray((n,), "float32", device=gpu_device)
    view = b.to_numpy()
    b.move_memory("device")
    b.read_numpy_array(x)
    view[0] = 100.0
    b.move_memory("device")
    b.add_index()
    assert b.to_numpy()[0] == 100.0


def test_new_arrays_read_zero_where_freed_arrays_held_data(device):
    # A new array's zeros are written on first use (host) or set on the
    # device when its first move is there: either way, no old data shows.
    n = 1 << 14
    for _ in range(3):
        used = gpuport.MemArray((n,), "float32", device=device)
        used.read_numpy_array(np.full(n, 7, np.float32))
        used.move_memory("device")
        del used
        np.testing.assert_array_equal(gpuport.MemArray((n,), "float32", device=device).to_numpy(), 0)
        used = gpuport.MemArray((n,), "float32", device=device)
        used.read_numpy_array(np.full(n, 7, np.float32))
        used.move_memory("device")
        del used
        b = gpuport.MemArray((n,), "float32", device=device)
        b.move_memory("device")
        b.add_index()  # adds each element's index to the device copy
        np.testing.assert_array_equal(b.to_numpy(), np.arange(n, dtype=np.float32))


def test_access_while_locked_raises_lock_error_and_unlocks_after(device):
    a = gpuport.MemArray((4,), "float32", device=device)
    with a.get_dlpack() as d:
        assert a.lock_id == d.lock_id
        with pytest.raises(gpuport.LockError):
            np.from_dlpack(a)
        with pytest.raises(gpuport.LockError):
            a.move_memory("device")
        with pytest.raises(gpuport.LockError):
            a.read_numpy_array(np.ones(4, np.float32))
        np.from_dlpack(d)  # the lock holder may
    assert a.lock_id is None
    a.move_memory("device")


def test_lock_is_released_when_the_block_raises(device):
    a = gpuport.MemArray((4,), "float32", device=device)
    with pytest.raises(KeyError):
        with a.get_dlpack():
            raise KeyError("boom")
    assert a.lock_id is None


def test_device_only_data_is_not_readable_as_host_without_a_move(device):
    a = gpuport.MemArray((4,), "float32", device=device)
    a.add_index()  # device copy current only
    assert a.residency == "device"
    with a.get_dlpack("host") as d:  # moves it back first
        np.testing.assert_array_equal(np.from_dlpack(d), [0, 1, 2, 3])


def test_async_move_then_host_access_waits(device):
    s = gpuport.Stream(device)
    a = gpuport.MemArray((1 << 16,), "float32", device=device)
    a.read_numpy_array(np.ones(1 << 16, np.float32))
    a.move_memory("device", stream=s, async_copy=True)
    a.add_index(stream=s)
    a.move_memory("host", stream=s, async_copy=True)
    np.testing.assert_array_equal(a.to_numpy(), 1 + np.arange(1 << 16, dtype=np.float32))
    assert not a.transfer_pending


def test_bad_targets_and_streams_are_refused():
    a = gpuport.MemArray((4,), "float32", device="host")
    with pytest.raises(gpuport.DeviceUnavailableError, match="use \"device\""):
        a.move_memory(dlpack.kDLCUDA)
    with pytest.raises(ValueError, match="unknown target"):
        a.move_memory("tpu")
    with pytest.raises(ValueError, match="host backend"):
        a.move_memory("device", stream=12345)
    with pytest.raises(TypeError, match="stream must be"):
        a.move_memory("device", stream=object())


def test_invalid_device_spec_is_a_value_error():
    with pytest.raises(gpuport.InvalidDeviceError) as e:
        gpuport.MemArray(3, device="tpu:0")
    assert isinstance(e.value, ValueError)


def test_copy_is_deep(device):
    a = gpuport.MemArray((3,), "int16", device=device)
    a.read_numpy_array(np.array([1, 2, 3], np.int16))
    b = a.copy()
    a.add_index()
    np.testing.assert_array_equal(b.to_numpy(), [1, 2, 3])
    np.testing.assert_array_equal(a.to_numpy(), [1, 3, 5])


def test_devices_streams_and_events(device):
    devs = gpuport.devices()
    assert devs[0].backend == "host" and devs[0].spec == "host"
    assert device in devs
    assert gpuport.Device(device.spec) == device and hash(gpuport.Device(device.spec)) == hash(device)
    s = device.create_stream()
    e1 = s.record_event()
    s.wait_event(e1)
    e2 = s.record_event()
    e2.synchronize()
    assert e2.query() and e1.elapsed_ms(e2) >= 0
    assert s.device == device
    if device.backend in ("cuda", "rocm"):  # ROCm gives its hipStream_t, as torch does
        assert s.__cuda_stream__() == (0, s.handle)
    else:  # a host stream has no handle to give
        with pytest.raises(TypeError, match="not a CUDA or ROCm stream"):
            s.__cuda_stream__()


def test_exceptions_form_one_hierarchy():
    assert issubclass(gpuport.GpuError, RuntimeError)
    assert issubclass(gpuport.OutOfMemoryError, MemoryError)
    assert issubclass(gpuport.DLPackError, BufferError)
    for name in ["OutOfMemoryError", "DeviceUnavailableError", "LockError", "ShapeError", "ResidencyError"]:
        assert issubclass(getattr(gpuport, name), gpuport.GpuError)


def test_out_of_memory_is_an_exception_not_a_crash(device):
    with pytest.raises((gpuport.OutOfMemoryError, gpuport.ShapeError)):
        gpuport.MemArray((1 << 40, 1 << 22), "float64", device=device)
