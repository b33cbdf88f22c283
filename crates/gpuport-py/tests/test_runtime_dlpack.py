"""DLPack producers as gpuport.runtime operands: versioned capsules asked for
(legacy producers still served), read-only tensors as sources only, padded
sub-byte tensors, and strided tensors refused as plain pointers."""

import numpy as np
import pytest

import gpuport
from gpuport import runtime as rt


class Producer:
    """A DLPack producer without the buffer protocol (as a torch CPU tensor),
    recording the keywords of each ``__dlpack__`` call."""

    def __init__(self, array, legacy_only=False):
        self.array = array
        self.legacy_only = legacy_only
        self.calls = []

    def __dlpack__(self, stream=None, **kw):
        self.calls.append(kw)
        if self.legacy_only and kw:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self.array.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_a_strided_dlpack_tensor_is_refused_as_a_pointer_and_nothing_is_written():
    base = np.zeros(8, dtype=np.int32)
    view = Producer(base[::2])
    with pytest.raises(BufferError, match=r"only contiguous DLPack tensors.*strided.*contiguous\(\)"):
        rt.Pointer(view)
    src = np.arange(4, dtype=np.int32)
    with pytest.raises(ValueError, match="not contiguous"):
        rt.memcpy(view, src, 16)
    with pytest.raises(ValueError, match="not contiguous"):
        rt.memset(view, 1, 16)
    assert not base.any(), "nothing may be written through a strided view, nor into its gaps"


def test_pointer_and_memcpy_ask_for_versioned_capsules():
    p = Producer(np.arange(4, dtype=np.int32))
    assert rt.Pointer(p).nbytes == 16
    assert p.calls[-1].get("max_version", (0, 0))[0] == 1
    dst = bytearray(16)
    rt.memcpy(dst, p, 16)
    assert p.calls[-1].get("max_version", (0, 0))[0] == 1
    assert np.frombuffer(dst, dtype=np.int32).tolist() == [0, 1, 2, 3]


def test_a_producer_older_than_dlpack_1_gets_a_legacy_request():
    p = Producer(np.arange(4, dtype=np.int32), legacy_only=True)
    dst = bytearray(16)
    rt.memcpy(dst, p, 16)
    assert p.calls[-1] == {}, "the retry passes no max_version"
    assert np.frombuffer(dst, dtype=np.int32).tolist() == [0, 1, 2, 3]


def read_only(n=4):
    a = np.arange(n, dtype=np.int32)
    a.flags.writeable = False
    return a


def test_a_read_only_tensor_is_a_source():
    ro = read_only()
    dst = bytearray(16)
    rt.memcpy(dst, Producer(ro), 16)
    assert np.frombuffer(dst, dtype=np.int32).tolist() == [0, 1, 2, 3]
    # A read-only MemArray import, exported again through DLPack.
    m = gpuport.from_dlpack(ro)
    assert m.readonly
    dst2 = bytearray(16)
    rt.memcpy(dst2, m, 16)
    assert dst2 == dst


def test_a_read_only_tensor_is_never_a_destination():
    ro = read_only()
    for dst in (Producer(ro), gpuport.from_dlpack(ro)):
        with pytest.raises(ValueError, match="read-only.*source"):
            rt.memcpy(dst, bytes(16), 16)
        with pytest.raises(ValueError, match="read-only"):
            rt.memset(dst, 0, 16)
    assert ro.tolist() == [0, 1, 2, 3]


def test_a_padded_sub_byte_array_is_taken():
    a = gpuport.MemArray(6, gpuport.float4_e2m1fn, device="host")
    a.fill(1.0)
    p = rt.Pointer(a)
    assert p.nbytes == 6, "one padded element per byte"
    dst = bytearray(6)
    rt.memcpy(dst, a, 6)
    assert dst == bytes([0x2] * 6), "1.0 is 0b0010 in float4_e2m1fn"
