"""The DLPack 1.1 low-precision floats (fp8, fp6, fp4) from Python: the dtype
names, creation, fill, DLPack export with the right type code (read from
the capsule itself), the padded flag of the sub-byte types, the refusal of
arithmetic kernels, and exchange with ml_dtypes arrays and torch tensors
(skipped, with the reason, where those libraries are absent)."""

import ctypes
import sys

import numpy as np
import pytest

import gpuport

from conftest import LOW_PRECISION_DTYPES, capsule_name_is

# (type code, bits) of each dtype, written out from dlpack.h (DLPack 1.1).
CODES = {
    "float8_e3m4": (7, 8),
    "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float8_e8m0fnu": (14, 8),
    "float6_e2m3fn": (15, 6),
    "float6_e3m2fn": (16, 6),
    "float4_e2m1fn": (17, 4),
}
SUBBYTE_PADDED = 1 << 2  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def read_capsule(capsule):
    """(code, bits, lanes, flags, (major, minor)) of an unconsumed capsule; legacy: flags and version None."""
    if capsule_name_is(capsule, "dltensor_versioned"):
        t = DLManagedTensorVersioned.from_address(_api.PyCapsule_GetPointer(capsule, b"dltensor_versioned"))
        dt = t.dl_tensor.dtype
        return dt.code, dt.bits, dt.lanes, t.flags, (t.major, t.minor)
    assert capsule_name_is(capsule, "dltensor")
    t = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(capsule, b"dltensor"))
    dt = t.dl_tensor.dtype
    return dt.code, dt.bits, dt.lanes, None, None


def sample_bytes(dtype, n):
    """`n` valid element bytes of `dtype` (sub-byte types use their low bits only)."""
    bits = CODES[dtype][1]
    return bytes((i * 37 + 5) % (1 << bits) for i in range(n))


def test_the_dtypes_are_exposed_by_name():
    assert list(gpuport.LOW_PRECISION_DTYPES) == list(CODES)
    assert LOW_PRECISION_DTYPES == list(CODES)
    assert gpuport.float8_e4m3fn == "float8_e4m3fn" and gpuport.float4_e2m1fn == "float4_e2m1fn"
    for name in CODES:
        assert name in gpuport.DTYPES and getattr(gpuport, name) == name
        a = gpuport.MemArray((2, 3), getattr(gpuport, name))
        assert (a.dtype, a.itemsize, a.nbytes) == (name, 1, 6)
        assert a.tobytes() == bytes(6)
    assert gpuport.MemArray(2, "torch.float8_e5m2").dtype == "float8_e5m2"


@pytest.mark.parametrize("dtype", list(CODES))
def test_the_export_carries_the_dlpack_1_1_code_and_the_padded_flag(dtype):
    a = gpuport.MemArray((3, 2), dtype)
    code, bits, lanes, flags, version = read_capsule(a.__dlpack__(max_version=(1, 0)))
    assert (code, bits, lanes) == (*CODES[dtype], 1)
    # Asked for 1.0, stated 1.1: the version whose header defines the code.
    assert version == (1, 1)
    assert bool(flags & SUBBYTE_PADDED) == (bits < 8)
    if bits < 8:
        # A legacy capsule has no flags: the padded elements would read as packed.
        with pytest.raises(gpuport.DLPackError, match="padded only"):
            a.__dlpack__()
        with pytest.raises(BufferError):
            a.__dlpack__()
    else:
        assert read_capsule(a.__dlpack__())[:3] == (*CODES[dtype], 1)


@pytest.mark.parametrize("dtype", list(CODES))
def test_fill_with_bytes_and_a_round_trip_through_gpuport(dtype):
    a = gpuport.MemArray((2, 4), dtype)
    one = sample_bytes(dtype, 1)
    a.fill(one)
    assert a.tobytes() == one * 8
    b = gpuport.from_dlpack(a)
    assert b.is_imported and b.dtype == dtype and b.data_ptr == a.data_ptr
    assert b.tobytes() == one * 8
    c = gpuport.from_dlpack(a, copy=True)
    assert not c.is_imported and c.dtype == dtype and c.tobytes() == one * 8


def test_fill_refuses_wrong_sizes_invalid_padding_and_arrays():
    a = gpuport.MemArray(3, gpuport.float4_e2m1fn)
    with pytest.raises(gpuport.InvalidArgumentError, match="0x10.*float4_e2m1fn"):
        a.fill(b"\x10")  # a bit above the 4 of fp4
    with pytest.raises(gpuport.InvalidArgumentError, match="1 bytes, not 2"):
        a.fill(b"\x01\x02")
    b = gpuport.MemArray(3, gpuport.float6_e3m2fn)
    b.fill(b"\x3f")
    assert b.tobytes() == b"\x3f" * 3


@pytest.mark.parametrize("dtype", list(CODES))
def test_arithmetic_kernels_refuse_them_naming_the_kernel_and_dtype(dtype):
    a = gpuport.MemArray((2, 2), dtype)
    with pytest.raises(gpuport.UnsupportedDTypeError, match=f"add_index has no kernel for {dtype}"):
        a.add_index()


def test_without_ml_dtypes_numpy_exchange_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes fails
    a = gpuport.MemArray(2, gpuport.float8_e4m3fn)
    with pytest.raises(gpuport.UnsupportedDTypeError, match="install ml_dtypes"):
        a.to_numpy()
    with pytest.raises(gpuport.UnsupportedDTypeError, match="pass one element's 1 byte"):
        a.fill(1.0)
    a.fill(b"\x38")
    assert a.tobytes() == b"\x38\x38"


# ---- ml_dtypes ------------------------------------------------------------------


@pytest.fixture
def ml_dtypes():
    return pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed: NumPy exchange of fp8/fp6/fp4 untested")


def ml_type(ml_dtypes, name):
    t = getattr(ml_dtypes, name, None)
    if t is None:
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    return t


@pytest.mark.parametrize("dtype", list(CODES))
def test_every_bit_pattern_round_trips_with_ml_dtypes_zero_copy(ml_dtypes, dtype):
    t = ml_type(ml_dtypes, dtype)
    bits = CODES[dtype][1]
    x = np.arange(1 << bits, dtype=np.uint8).reshape(-1, 4 if bits > 4 else 2).view(t)
    a = gpuport.asarray(x)  # ml_dtypes arrays cannot export DLPack themselves: imported as bytes
    assert a.is_imported and a.dtype == dtype and a.data_ptr == x.ctypes.data
    assert a.tobytes() == x.tobytes()
    # Into an owned array and out again, zero-copy from its host copy.
    b = gpuport.MemArray(x.shape, t)
    b.read_numpy_array(x)
    y = b.to_numpy()
    assert y.dtype == np.dtype(t) and y.shape == x.shape and y.ctypes.data == b.data_ptr
    assert np.array_equal(y.view(np.uint8), x.view(np.uint8))


def test_numbers_convert_through_ml_dtypes(ml_dtypes):
    a = gpuport.MemArray((2, 2), gpuport.float8_e4m3fn)
    a.fill(-1.5)
    want = np.array(-1.5, dtype=ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert a.tobytes() == want.tobytes() * 4 == b"\xbc" * 4
    assert a.to_numpy().astype(np.float32).tolist() == [[-1.5, -1.5], [-1.5, -1.5]]
    # A float32 array read into an e5m2 array: NumPy's cast (ml_dtypes registers it).
    b = gpuport.MemArray(3, gpuport.float8_e5m2)
    b.read_numpy_array(np.array([1.0, -2.0, 57344.0], dtype=np.float32), casting="unsafe")
    assert b.to_numpy().astype(np.float32).tolist() == [1.0, -2.0, 57344.0]
    c = gpuport.MemArray(2, gpuport.float4_e2m1fn)
    c.fill(6.0)
    assert c.tobytes() == b"\x07\x07"


def test_a_strided_ml_dtypes_array_is_imported_with_its_strides(ml_dtypes):
    x = np.arange(24, dtype=np.uint8).reshape(4, 6).view(ml_dtypes.float8_e5m2)[:, ::2]
    a = gpuport.from_dlpack(x)
    assert a.shape == (4, 3) and a.dtype == "float8_e5m2"
    b = gpuport.MemArray((4, 3), "float8_e5m2")
    b.read_numpy_array(x)
    assert b.tobytes() == np.ascontiguousarray(x).tobytes()


# ---- torch ------------------------------------------------------------------------


@pytest.fixture
def torch_fp8():
    torch = pytest.importorskip("torch", reason="torch is not installed: torch float8 exchange untested")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8 dtypes")
    try:
        torch.utils.dlpack.to_dlpack(torch.zeros(1, dtype=torch.float8_e4m3fn))
    except Exception as e:  # noqa: BLE001 - torch's own refusal, reported as the skip reason
        pytest.skip(f"torch {torch.__version__} does not export float8 through DLPack: {e}")
    return torch


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_torch_float8_tensors_travel_both_ways(torch_fp8, name):
    torch = torch_fp8
    tdt = getattr(torch, name)
    t = torch.tensor([1.0, -2.0, 0.5, 448.0 if name == "float8_e4m3fn" else 57344.0]).to(tdt)
    a = gpuport.from_dlpack(t)
    assert a.dtype == name and a.data_ptr == t.data_ptr()
    assert a.tobytes() == t.view(torch.uint8).numpy().tobytes()
    b = gpuport.MemArray(4, name)
    b.fill(a.tobytes()[:1])
    u = torch.from_dlpack(b)
    assert u.dtype == tdt and u.data_ptr() == b.data_ptr
    assert u.view(torch.uint8).tolist() == [a.tobytes()[0]] * 4
