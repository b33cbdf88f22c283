"""gpuport.runtime's HIP-Python-style adapters (docs/design.md#pointer-adapters).

Every accepted input kind for every adapter, in the design's order (None,
Pointer, int, ctypes.c_void_p, __cuda_array_interface__, buffer, and
DLPack beyond HIP Python), including subclasses defined here; buffer
release at adapter destruction; and the list adapters. The runtime calls
that take them (malloc, memcpy, memset, launch_kernel) are in
tests/test_runtime_calls.py. Cases run on every backend (``device``: host,
cuda:0, rocm:0) and skip with the backend's reason where it is unavailable.
"""

import array
import ctypes
import gc
import weakref

import numpy as np
import pytest

from gpuport import runtime as rt

from conftest import DLPackOnly, FakeCAI

# ---- inputs in the design's order --------------------------------------------------


class MyPointer(rt.Pointer):
    pass


class MyDeviceArray(rt.DeviceArray):
    pass


class MyListOfBytes(rt.ListOfBytes):
    pass


class MyListOfPointer(rt.ListOfPointer):
    pass


class MyListOfInt(rt.ListOfInt):
    pass


class MyListOfUnsigned(rt.ListOfUnsigned):
    pass


class MyListOfUnsignedLong(rt.ListOfUnsignedLong):
    pass


ADAPTERS = [
    rt.Pointer,
    MyPointer,
    rt.DeviceArray,
    MyDeviceArray,
    rt.ListOfBytes,
    MyListOfBytes,
    rt.ListOfPointer,
    MyListOfPointer,
    rt.ListOfInt,
    MyListOfInt,
    rt.ListOfUnsigned,
    MyListOfUnsigned,
    rt.ListOfUnsignedLong,
    MyListOfUnsignedLong,
]
ADAPTER_IDS = [c.__name__ for c in ADAPTERS]


def pointer_inputs():
    """(kind, object, expected address, objects to keep alive) in the design's order."""
    buf = bytearray(b"0123456789abcdef")
    buf_addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    np_arr = np.arange(8, dtype=np.float32)
    base = rt.Pointer(bytearray(8))
    out = [
        ("None", None, 0),
        ("Pointer", base, int(base)),
        ("Pointer-subclass", MyPointer(base), int(base)),
        ("int", 0x1234_5000, 0x1234_5000),
        ("c_void_p", ctypes.c_void_p(0x4567_8000), 0x4567_8000),
        ("cuda_array_interface", FakeCAI(0x7F00_0000_2000), 0x7F00_0000_2000),
        ("buffer", buf, buf_addr),
        ("dlpack", DLPackOnly(np_arr), np_arr.ctypes.data),
    ]
    return out, (buf, np_arr, base)


INPUT_KINDS = ["None", "Pointer", "Pointer-subclass", "int", "c_void_p", "cuda_array_interface", "buffer", "dlpack"]


@pytest.mark.parametrize("cls", ADAPTERS, ids=ADAPTER_IDS)
@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_every_adapter_accepts_every_pointer_input(cls, kind):
    inputs, keep = pointer_inputs()
    (_, obj, addr), = [i for i in inputs if i[0] == kind]
    a = cls(obj)
    assert isinstance(a, rt.Pointer)
    assert isinstance(a, cls)
    assert int(a) == addr
    assert a.is_null == (addr == 0)
    del keep


@pytest.mark.parametrize("cls", ADAPTERS, ids=ADAPTER_IDS)
def test_every_adapter_accepts_every_adapter(cls):
    """Pointer and all its subclasses pass to any adapter (docs/design.md#pointer-adapters)."""
    src = bytearray(16)
    for other in [rt.Pointer(src), rt.ListOfInt([1, 2]), rt.malloc(8), MyListOfUnsigned(src)]:
        assert int(cls(other)) == int(other)


@pytest.mark.parametrize("cls", ADAPTERS, ids=ADAPTER_IDS)
@pytest.mark.parametrize("bad", [1.5, "text", object(), {"a": 1}, 1j])
def test_wrong_input_raises_typeerror_naming_the_kinds(cls, bad):
    with pytest.raises(TypeError) as e:
        cls(bad)
    msg = str(e.value)
    for kind in ["None", "Pointer", "int", "c_void_p", "__cuda_array_interface__", "buffer", "DLPack"]:
        assert kind in msg, (kind, msg)


def test_pointer_none_is_null():
    p = rt.Pointer(None)
    assert int(p) == 0 and p.is_null and p.memory_kind == "null"
    assert int(rt.Pointer()) == 0
    assert int(rt.Pointer(ctypes.c_void_p())) == 0


def test_pointer_from_pointer_transfers_no_ownership():
    a = array.array("i", [1, 2, 3])
    p1 = rt.Pointer(a)
    p2 = MyPointer(p1)
    assert int(p2) == int(p1) == a.buffer_info()[0]
    del p1
    gc.collect()
    with pytest.raises(BufferError):  # p2 keeps p1 (and its export) alive
        a.append(4)
    del p2
    gc.collect()
    a.append(4)  # released


def test_int_and_c_void_p_are_not_owned():
    p = rt.Pointer(0xDEAD_0000)
    assert p.memory_kind == "unknown" and p.nbytes is None
    assert int(rt.Pointer(ctypes.c_void_p(0xDEAD_0000))) == 0xDEAD_0000
    with pytest.raises(OverflowError):
        rt.Pointer(-1)
    with pytest.raises(OverflowError):
        rt.Pointer(2**64)


def test_int_inside_an_allocation_is_recognized(device):
    a = rt.malloc(64, device=device)
    p = rt.Pointer(int(a) + 16)
    assert p.memory_kind == a.memory_kind == "device"
    assert p.nbytes == 48
    addr = int(a)
    del p
    rt.free(a)
    gc.collect()
    # Freed: the address is raw again (and refused where the host would dereference it).
    assert rt.Pointer(addr + 16).nbytes is None


def test_cai_object_is_kept_alive():
    obj = FakeCAI(0x7000_1000)
    ref = weakref.ref(obj)
    p = rt.Pointer(obj)
    del obj
    gc.collect()
    assert ref() is not None
    assert int(p) == 0x7000_1000
    del p
    gc.collect()
    assert ref() is None


def test_a_foreign_cai_object_is_not_asked_for_its_device():
    # The interface names no device. Only a MemArray's own is read; a
    # foreign object's `device` attribute is not touched (it may run any code).
    class WithDevice(FakeCAI):
        asked = 0

        @property
        def device(self):
            WithDevice.asked += 1
            raise AssertionError("device read")

    for make in (rt.Pointer, lambda o: rt.memset(o, 0, 0)):
        make(WithDevice(0x7000_2000))
    assert WithDevice.asked == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: bytearray(b"abcd"),
        lambda: b"abcd",
        lambda: memoryview(bytearray(8)),
        lambda: array.array("d", [1.0, 2.0]),
        lambda: np.zeros((3, 4), dtype=np.int16),
        lambda: np.asfortranarray(np.zeros((3, 4))),
        lambda: (ctypes.c_int * 4)(),
    ],
    ids=["bytearray", "bytes", "memoryview", "array", "numpy", "numpy-fortran", "ctypes-array"],
)
def test_contiguous_buffers_are_accepted(make):
    obj = make()
    p = rt.Pointer(obj)
    mv = memoryview(obj)
    assert p.memory_kind == "host"
    assert p.nbytes == mv.nbytes
    if isinstance(obj, np.ndarray):
        assert int(p) == obj.ctypes.data


def test_buffer_is_released_when_the_adapter_is_destroyed():
    a = array.array("i", [1, 2, 3])
    for cls in ADAPTERS:
        p = cls(a)
        with pytest.raises(BufferError):
            a.append(0)  # exported: cannot resize
        del p
        gc.collect()
        a.append(0)
        a.pop()


def test_bytearray_export_count_returns_to_zero():
    b = bytearray(16)
    ps = [rt.Pointer(b) for _ in range(5)]
    with pytest.raises(BufferError):
        b.extend(b"x")
    del ps
    gc.collect()
    b.extend(b"x")


@pytest.mark.parametrize(
    "make",
    [
        lambda: memoryview(bytearray(16))[::2],
        lambda: np.zeros((4, 4))[:, ::2],
        lambda: np.zeros(10)[::3],
    ],
    ids=["memoryview-step", "numpy-columns", "numpy-step"],
)
def test_non_contiguous_buffers_are_refused(make):
    obj = make()
    with pytest.raises(BufferError, match="contiguous"):
        rt.Pointer(obj)
    if isinstance(obj, np.ndarray):
        # Not refused as a buffer and then taken through DLPack instead.
        with pytest.raises(BufferError):
            rt.DeviceArray(obj)


def test_order_cai_before_buffer_and_buffer_before_dlpack():
    class Both(bytearray):
        @property
        def __cuda_array_interface__(self):
            return {"shape": (1,), "typestr": "|u1", "data": (0x5000, False), "version": 3}

        def __dlpack__(self, **kw):
            raise AssertionError("DLPack must come after the buffer protocol")

    assert int(rt.Pointer(Both(b"x"))) == 0x5000

    class BufAndDL(bytearray):
        def __dlpack__(self, **kw):
            raise AssertionError("DLPack must come after the buffer protocol")

    b = BufAndDL(b"xyz")
    assert int(rt.Pointer(b)) == ctypes.addressof(ctypes.c_char.from_buffer(b))


def test_dlpack_producer_is_held():
    x = np.arange(6, dtype=np.int32)
    p = rt.Pointer(DLPackOnly(x))
    assert p.memory_kind == "host" and p.nbytes == 24
    out = bytearray(24)
    rt.memcpy(out, p, 24)
    assert np.frombuffer(out, dtype=np.int32).tolist() == list(range(6))


def test_pointer_repr_and_subclass_extras():
    class Tagged(rt.Pointer):
        def __init__(self, obj=None):
            self.tag = "mine"

    t = Tagged(bytearray(4))
    assert t.tag == "mine" and int(t) != 0
    assert "Tagged" in repr(t)


# ---- lists --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls,ctype,values",
    [
        (rt.ListOfInt, ctypes.c_int, [1, -2, 3]),
        (rt.ListOfUnsigned, ctypes.c_uint, [1, 2, 2**32 - 1]),
        (rt.ListOfUnsignedLong, ctypes.c_ulong, [1, 2**40, 3]),
        (MyListOfInt, ctypes.c_int, (7, 8)),
    ],
)
def test_number_lists_own_c_arrays(cls, ctype, values):
    lst = cls(values)
    assert lst.is_owner and len(lst) == len(values) and lst.tolist() == list(values)
    # Reading our own array back through ctypes (memory the adapter owns).
    c = (ctype * len(values)).from_address(int(lst))
    assert list(c) == list(values)
    non_owning = cls(lst)
    assert not non_owning.is_owner and int(non_owning) == int(lst)


def test_number_lists_refuse_bad_items():
    with pytest.raises(TypeError, match="item 1"):
        rt.ListOfInt([1, "x"])
    with pytest.raises(TypeError):
        rt.ListOfUnsigned([-1])
    with pytest.raises(TypeError):
        rt.ListOfInt([2**40])
    with pytest.raises(TypeError, match="list or tuple"):
        rt.ListOfInt(1.5)


def test_list_of_bytes():
    lst = rt.ListOfBytes([b"-O3", b"--gpu-architecture=sm_90"])
    assert lst.is_owner and lst.tolist() == [b"-O3", b"--gpu-architecture=sm_90"]
    c = (ctypes.c_char_p * 2).from_address(int(lst))
    assert list(c) == [b"-O3", b"--gpu-architecture=sm_90"]
    with pytest.raises(TypeError, match="not bytes"):
        rt.ListOfBytes(["str"])
    with pytest.raises(ValueError, match="NUL"):
        rt.ListOfBytes([b"a\0b"])
    assert int(rt.ListOfBytes([])) == 0


def test_list_of_pointer_holds_its_elements():
    a = array.array("b", [1, 2])
    dev = rt.malloc(8)
    lst = rt.ListOfPointer([None, a, dev, 0x1000, ctypes.c_void_p(0x2000), FakeCAI(0x3000)])
    assert lst.tolist() == [0, a.buffer_info()[0], int(dev), 0x1000, 0x2000, 0x3000]
    assert list((ctypes.c_uint64 * 6).from_address(int(lst))) == lst.tolist()
    with pytest.raises(BufferError):
        a.append(3)
    del lst
    gc.collect()
    a.append(3)
    with pytest.raises(TypeError, match="item 1"):
        rt.ListOfPointer([None, 2.5])
