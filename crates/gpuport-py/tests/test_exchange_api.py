"""DLPack 1.3's C exchange API (``type(x).__dlpack_c_exchange_api__``).

- gpuport as producer: ``MemArray`` offers the capsule on every backend; its
  table is read with ctypes and used by a real C consumer
  (``dlpack_exchange_consumer.c``, compiled here with the system ``cc`` and
  loaded with ``ctypes.PyDLL``; those tests skip with the reason when no
  compiler works).
- gpuport as consumer: ``gpuport.from_dlpack`` takes a producer through its
  table when the table is usable, else through ``__dlpack__`` (fake
  producers whose tables are built with ctypes show both, and the typed
  error of a producer whose ``current_work_stream`` fails).
- PyTorch both ways, when the installed torch offers the API.

The structures below are those of ``dlpack/dlpack.h`` 1.3.
"""

import ctypes
import gc
import sys

import numpy as np
import pytest

import gpuport

from conftest import build_c_library, capsule_name_is, collect, dl_device_type, init_array, stats

CAPSULE = b"dlpack_exchange_api"
kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCM = 1, 2, 3, 10


# ---- dlpack.h 1.3 in ctypes ------------------------------------------------------------


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]


class DLPackExchangeAPIHeader(ctypes.Structure):
    pass


DLPackExchangeAPIHeader._fields_ = [("version", DLPackVersion), ("prev_api", ctypes.POINTER(DLPackExchangeAPIHeader))]


class DLPackExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


FROM_PY_OBJECT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(DLManagedTensorVersioned)))
CURRENT_WORK_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))

# CPython functions with this module's own signatures (ctypes.pythonapi's are shared).
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_decref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_DecRef", ctypes.pythonapi))


def table_of(cls) -> DLPackExchangeAPI:
    """The table ``cls.__dlpack_c_exchange_api__`` holds, read with ctypes."""
    cap = cls.__dlpack_c_exchange_api__
    assert capsule_name_is(cap, CAPSULE.decode())
    return DLPackExchangeAPI.from_address(_capsule_pointer(cap, CAPSULE))


def filled(shape=(2, 3), dtype="float32", device="host"):
    a = gpuport.MemArray(shape, dtype, device=device)
    a.read_numpy_array(init_array(shape, dtype))
    return a


def like():
    """Any MemArray: the C consumer finds a table through an object's type."""
    return gpuport.MemArray((1,), "uint8", device="host")


def through_table():
    return stats()["imports_through_table"]


def read(a, shape, dtype):
    """The elements of ``a`` (device memory too, through gpuport.runtime.memcpy)."""
    out = np.empty(shape, dtype)
    if a.__dlpack_device__()[0] == kDLCPU:
        out[...] = np.from_dlpack(a)
    else:
        gpuport.runtime.memcpy(out, a, out.nbytes)
    return out


# ---- gpuport as producer ---------------------------------------------------------------


def test_memarray_offers_the_capsule_on_the_type_on_every_backend(device):
    a = filled(device=device)
    cap = type(a).__dlpack_c_exchange_api__
    assert type(cap).__name__ == "PyCapsule" and capsule_name_is(cap, "dlpack_exchange_api")
    assert a.__dlpack_c_exchange_api__ is cap and gpuport.MemArray.__dlpack_c_exchange_api__ is cap


def test_the_table_states_dlpack_1_3_and_every_function_a_consumer_needs():
    t = table_of(gpuport.MemArray)
    assert (t.header.version.major, t.header.version.minor) == (1, 3)
    assert not t.header.prev_api  # no older table
    for f in ("managed_tensor_allocator", "managed_tensor_from_py_object_no_sync",
              "managed_tensor_to_py_object_no_sync", "current_work_stream"):
        assert getattr(t, f), f"{f} is NULL"
    # Optional in the header; gpuport keeps no shape/stride arrays that could outlive an export.
    assert t.dltensor_from_py_object_no_sync is None


def test_from_dlpack_round_trips_gpuport_to_gpuport_through_the_table(device):
    a = filled((3, 4), "int32", device)
    collect()
    before = stats()
    b = gpuport.from_dlpack(a)
    after = stats()
    assert after["imports_through_table"] == before["imports_through_table"] + 1
    assert after["exports_through_table"] == before["exports_through_table"] + 1
    assert after["capsules_freed_unused"] == before["capsules_freed_unused"]
    assert b.is_imported and b.shape == (3, 4) and b.dtype == "int32"
    assert b.data_ptr == a.data_ptr  # zero-copy
    assert b.__dlpack_device__() == a.__dlpack_device__()
    # The copy __dlpack__ exports with no arguments: a GPU array whose data is
    # still on the host (read_numpy_array) exports its host copy, both ways.
    through_protocol = gpuport._core._from_dlpack_protocol(a)
    assert b.device == through_protocol.device
    del through_protocol
    np.testing.assert_array_equal(read(b, (3, 4), np.int32), init_array((3, 4), "int32"))
    b.add_index()  # a writer through the import: a sees it
    np.testing.assert_array_equal(a.to_numpy(), init_array((3, 4), "int32") + np.indices((3, 4)).sum(axis=0))
    del a, b
    collect()
    after = stats()
    assert after["exports_live"] == before["exports_live"]
    assert after["imports_live"] == before["imports_live"]


def test_the_python_protocol_gives_the_same_array():
    a = filled((5,), "float64")
    via_table = gpuport.from_dlpack(a)
    n = through_table()
    via_protocol = gpuport._core._from_dlpack_protocol(a)
    assert through_table() == n
    assert via_protocol.data_ptr == via_table.data_ptr == a.data_ptr
    np.testing.assert_array_equal(via_protocol.to_numpy(), via_table.to_numpy())


def test_from_dlpack_of_a_locked_array_raises_the_producers_lock_error():
    a = filled()
    with a.get_dlpack() as ctx:
        with pytest.raises(gpuport.LockError, match="__dlpack_c_exchange_api__"):
            gpuport.from_dlpack(a)
        assert gpuport.from_dlpack(ctx).data_ptr  # the block's context exports (no table: the protocol)


def test_an_export_through_the_table_waits_for_pending_host_backend_work():
    a = gpuport.MemArray((4,), "float32", device="host")
    a.add_index()  # host-backend "device" work, pending
    b = gpuport.from_dlpack(a)
    assert not a.transfer_pending
    np.testing.assert_array_equal(np.from_dlpack(b), [0, 1, 2, 3])


def test_copy_true_and_capsules_keep_the_protocol():
    a = filled()
    n = through_table()
    c = gpuport.from_dlpack(a, copy=True)
    assert c.data_ptr != a.data_ptr and not c.is_imported
    gpuport.from_dlpack(a.__dlpack__(max_version=(1, 1)))
    assert through_table() == n


# ---- a compiled C consumer -----------------------------------------------------------------


def _compile_consumer(tmp_dir) -> "ctypes.PyDLL":
    lib = build_c_library("dlpack_exchange_consumer.c", tmp_dir, "the C consumer")
    po, i32, i64p = ctypes.py_object, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64)
    sig = {
        "xc_table_version": ([po], ctypes.c_long),
        "xc_table_functions": ([po], ctypes.c_long),
        "xc_exchange": ([po, po], ctypes.c_void_p),
        "xc_take": ([po, i64p], ctypes.c_int),
        "xc_take_protocol": ([po, i64p], ctypes.c_int),
        "xc_take_many": ([po, ctypes.c_long, ctypes.c_int, i64p], ctypes.c_int),
        "xc_allocate": ([po, i32, i64p, i32, i32, i32, i32, ctypes.c_char_p, ctypes.c_char_p], ctypes.c_void_p),
        "xc_allocate_without_set_error": ([po, i32, i32], ctypes.c_int),
        "xc_current_work_stream": ([po, i32, i32], ctypes.c_longlong),
        "xc_from_wrong_object": ([po, po], ctypes.c_int),
    }
    for name, (args, res) in sig.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    return lib


@pytest.fixture(scope="session")
def consumer(tmp_path_factory):
    """The C consumer, compiled once (skipped, with the reason, where no compiler works)."""
    return _compile_consumer(tmp_path_factory.mktemp("cconsumer"))


def new_reference(address: int):
    """The object a C function returned as a new reference (ctypes would add one more)."""
    assert address, "the C consumer returned NULL without an exception"
    obj = ctypes.cast(address, ctypes.py_object).value
    _decref(obj)  # the C function's reference; `obj` holds ours
    return obj


def test_c_consumer_reads_gpuport_s_table(consumer):
    a = filled()
    assert consumer.xc_table_version(a) == 1003
    assert consumer.xc_table_functions(a) == 0b10111  # all but dltensor_from_py_object_no_sync


def test_c_consumer_takes_a_memarray_through_the_table(consumer, device):
    a = filled((6, 2), "float32", device)
    a.move_memory("device")  # the device copy of a GPU array (the host backend's is host memory)
    info = (ctypes.c_int64 * 8)()
    collect()
    before = stats()
    assert consumer.xc_take(a, info) == 0
    assert info[0] == a.data_ptr and info[1] == 2 and info[5] == 6
    assert info[2] == dl_device_type(device)
    # gpuport's current work stream: the device's default stream (NULL), none for host memory.
    assert info[3] == (device.default_stream.handle if device.backend != "host" else 0)
    assert info[4] == 1001  # tensors state DLPack 1.1, as gpuport's __dlpack__ exports do
    proto = (ctypes.c_int64 * 8)()
    assert consumer.xc_take_protocol(a, proto) == 0
    assert list(proto)[:3] == list(info)[:3]
    collect()
    after = stats()
    assert after["exports_through_table"] == before["exports_through_table"] + 1
    assert after["exports_live"] == before["exports_live"]  # the consumer's deleter calls freed both


def test_c_consumer_round_trips_gpuport_through_the_table(consumer, device):
    a = filled((2, 5), "int64", device)
    collect()
    before = stats()
    b = new_reference(consumer.xc_exchange(a, a))  # from_py_object, then to_py_object
    assert type(b) is gpuport.MemArray and b.is_imported and b.data_ptr == a.data_ptr
    np.testing.assert_array_equal(read(b, (2, 5), np.int64), init_array((2, 5), "int64"))
    del b
    collect()
    after = stats()
    assert after["exports_live"] == before["exports_live"]
    assert after["imports_live"] == before["imports_live"]


def test_c_consumer_allocates_through_gpuport_s_table(consumer, device):
    shape = (ctypes.c_int64 * 3)(2, 3, 4)
    kind, msg = ctypes.create_string_buffer(256), ctypes.create_string_buffer(256)
    dl_type = dl_device_type(device)
    a = new_reference(consumer.xc_allocate(like(), 3, shape, 2, 32, dl_type, device.ordinal, kind, msg))
    assert type(a) is gpuport.MemArray and a.shape == (2, 3, 4) and a.dtype == "float32"
    assert a.__dlpack_device__() == (dl_type, device.ordinal) and a.device == device
    device.synchronize()  # filling the device copy was enqueued on the default stream
    np.testing.assert_array_equal(read(a, (2, 3, 4), np.float32), np.zeros((2, 3, 4), np.float32))
    a.add_index()
    np.testing.assert_array_equal(read(a, (2, 3, 4), np.float32), np.indices((2, 3, 4)).sum(axis=0))


@pytest.mark.parametrize(
    "ndim, shape, code, bits, dl_type, kind, says",
    [
        (1, (-1,), 2, 32, kDLCPU, "BufferError", "extent -1 on axis 0"),
        (1, (4,), 99, 8, kDLCPU, "BufferError", "code 99"),
        (9, (1,) * 9, 2, 32, kDLCPU, "ValueError", "9 dimensions"),
        (1, (4,), 2, 32, kDLCUDAHost, "BufferError", "kDLCUDAHost"),
        (1, (4,), 2, 32, 7, "BufferError", "kDLVulkan"),
    ],
    ids=["negative-extent", "unknown-dtype", "rank-9", "pinned", "vulkan"],
)
def test_the_allocator_reports_failures_through_set_error(consumer, ndim, shape, code, bits, dl_type, kind, says):
    ext = (ctypes.c_int64 * len(shape))(*shape)
    k, m = ctypes.create_string_buffer(256), ctypes.create_string_buffer(256)
    with pytest.raises(ValueError, match="SetError called 1 time") as e:
        consumer.xc_allocate(like(), ndim, ext, code, bits, dl_type, 0, k, m)
    assert k.value.decode() == kind and says in m.value.decode(), (k.value, m.value, str(e.value))


def test_the_allocator_without_set_error_sets_a_python_exception(consumer):
    with pytest.raises(gpuport.DLPackError, match="code 99"):
        consumer.xc_allocate_without_set_error(like(), 99, 8)
    assert consumer.xc_allocate_without_set_error(like(), 2, 32) == 0


def test_current_work_stream_of_gpuport(consumer, device):
    assert consumer.xc_current_work_stream(like(), kDLCPU, 0) == 0  # host memory: no stream
    dl_type = dl_device_type(device)
    # The stream gpuport works on with stream=None: the device's default stream, handle 0 (NULL).
    assert consumer.xc_current_work_stream(like(), dl_type, device.ordinal) == device.default_stream.handle
    with pytest.raises(gpuport.DLPackError, match="device type 7"):
        consumer.xc_current_work_stream(like(), 7, 0)


def test_current_work_stream_of_an_unavailable_device_fails_with_an_exception(consumer):
    missing = [b for b, t in (("cuda", kDLCUDA), ("rocm", kDLROCM)) if not gpuport.is_available(b)]
    if not missing:
        pytest.skip("every GPU backend is available here")
    dl_type = {"cuda": kDLCUDA, "rocm": kDLROCM}[missing[0]]
    with pytest.raises(gpuport.GpuError):
        consumer.xc_current_work_stream(like(), dl_type, 0)


def test_from_py_object_refuses_another_type_with_a_type_error(consumer):
    with pytest.raises(TypeError, match="takes a gpuport.MemArray, not ndarray"):
        consumer.xc_from_wrong_object(like(), np.zeros(3))


# ---- gpuport as consumer: fake producers ------------------------------------------------------------


class Fake:
    """A producer over a NumPy array: ``__dlpack__`` through NumPy (counted),
    and whatever table a test installs on its class."""

    dunder_calls = 0

    def __init__(self, x):
        self.x = x

    def __dlpack__(self, **kw):
        type(self).dunder_calls += 1
        return self.x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


class Tables:
    """Exchange tables built with ctypes for a class of ``Fake`` producers:
    ``from_py_object`` makes a versioned tensor over the producer's NumPy
    array (counted, as are the deleter's calls)."""

    def __init__(self):
        self.from_py_calls = 0
        self.stream_calls = 0
        self.deleted = 0
        self.live = {}  # address -> (tensor, shape, strides, producer): kept alive until the deleter runs
        self.keep = []  # tables, callbacks and capsule names: alive as long as the capsules
        self.deleter = DELETER(self._delete)
        self.from_py = FROM_PY_OBJECT(self._from_py)
        self.stream_ok = CURRENT_WORK_STREAM(self._stream)
        self.stream_silent_failure = CURRENT_WORK_STREAM(lambda t, i, out: -1)
        self.dtype_code = 2  # float

    def _delete(self, t):
        self.deleted += 1
        self.live.pop(ctypes.addressof(t.contents))

    def _from_py(self, obj, out):
        self.from_py_calls += 1
        producer = ctypes.cast(obj, ctypes.py_object).value
        x = producer.x
        t = DLManagedTensorVersioned()
        t.version = DLPackVersion(1, 3)
        t.deleter = self.deleter
        shape = (ctypes.c_int64 * x.ndim)(*x.shape)
        strides = (ctypes.c_int64 * x.ndim)(*(s // x.itemsize for s in x.strides))
        t.dl_tensor.data = x.ctypes.data
        t.dl_tensor.device = DLDevice(kDLCPU, 0)
        t.dl_tensor.ndim = x.ndim
        t.dl_tensor.dtype = DLDataType(self.dtype_code, x.itemsize * 8, 1)
        t.dl_tensor.shape = shape
        t.dl_tensor.strides = strides
        self.live[ctypes.addressof(t)] = (t, shape, strides, producer)
        out[0] = ctypes.pointer(t)
        return 0

    def _stream(self, device_type, device_id, out):
        self.stream_calls += 1
        out[0] = None
        return 0

    def fn(self, f) -> int:
        """The address of callback ``f`` (kept alive with the tables)."""
        self.keep.append(f)
        return ctypes.cast(f, ctypes.c_void_p).value

    def table(self, major=1, from_py="ok", stream="ok", prev=None) -> DLPackExchangeAPI:
        t = DLPackExchangeAPI()
        t.header.version = DLPackVersion(major, 3)
        if prev is not None:
            t.header.prev_api = ctypes.cast(ctypes.pointer(prev), ctypes.POINTER(DLPackExchangeAPIHeader))
        t.managed_tensor_from_py_object_no_sync = self.fn(self.from_py) if from_py == "ok" else from_py
        t.current_work_stream = {"ok": self.fn(self.stream_ok), "silent": self.fn(self.stream_silent_failure)}.get(
            stream, stream
        )
        self.keep.append(t)
        return t

    def capsule(self, table, name=CAPSULE):
        name = ctypes.create_string_buffer(name)
        self.keep.append(name)
        return _capsule_new(ctypes.addressof(table), ctypes.addressof(name), None)


def producer_class(attr):
    """A new ``Fake`` subclass whose ``__dlpack_c_exchange_api__`` is ``attr``."""
    return type("FakeProducer", (Fake,), {"__dlpack_c_exchange_api__": attr, "dunder_calls": 0})


def test_a_usable_table_is_used_and_its_tensor_released_once():
    tables = Tables()
    cls = producer_class(tables.capsule(tables.table()))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = gpuport.from_dlpack(cls(x))
    assert (tables.from_py_calls, tables.stream_calls, cls.dunder_calls) == (1, 1, 0)
    assert m.data_ptr == x.ctypes.data
    np.testing.assert_array_equal(m.to_numpy(), x)
    assert tables.deleted == 0
    del m
    collect()
    assert tables.deleted == 1 and not tables.live


def test_a_table_found_down_the_prev_api_chain_is_used():
    tables = Tables()
    v1 = tables.table(major=1)
    v2 = tables.table(major=2, from_py=tables.fn(FROM_PY_OBJECT(lambda *a: pytest.fail("a major-2 function was called"))), prev=v1)
    cls = producer_class(tables.capsule(v2))
    m = gpuport.from_dlpack(cls(np.ones(3)))
    assert (tables.from_py_calls, cls.dunder_calls) == (1, 0)
    np.testing.assert_array_equal(m.to_numpy(), np.ones(3))


@pytest.mark.parametrize(
    "case",
    ["unknown-major", "unknown-major-older-unknown", "no-from-py-object", "no-current-work-stream", "not-a-capsule",
     "wrong-capsule-name", "none"],
)
def test_an_unusable_table_falls_back_to_the_python_protocol(case):
    tables = Tables()
    attr = {
        "unknown-major": lambda: tables.capsule(tables.table(major=2)),
        "unknown-major-older-unknown": lambda: tables.capsule(tables.table(major=3, prev=tables.table(major=0))),
        "no-from-py-object": lambda: tables.capsule(tables.table(from_py=None)),
        "no-current-work-stream": lambda: tables.capsule(tables.table(stream=None)),
        # The address as an int: the convention before DLPack 1.3's capsule.
        "not-a-capsule": lambda: ctypes.addressof(tables.table()),
        "wrong-capsule-name": lambda: tables.capsule(tables.table(), name=b"dlpack_exchange_api_v2"),
        "none": lambda: None,
    }[case]()
    cls = producer_class(attr)
    x = np.arange(5, dtype=np.float32)
    n = through_table()
    m = gpuport.from_dlpack(cls(x))
    assert cls.dunder_calls == 1 and tables.from_py_calls == 0 and through_table() == n
    assert m.data_ptr == x.ctypes.data
    np.testing.assert_array_equal(m.to_numpy(), x)


def test_a_failing_current_work_stream_is_a_dlpack_error_and_the_tensor_goes_back():
    tables = Tables()
    cls = producer_class(tables.capsule(tables.table(stream="silent")))
    with pytest.raises(gpuport.DLPackError, match=r"FakeProducer.__dlpack_c_exchange_api__: "
                       r"current_work_stream\(kDLCPU, 0\) returned -1 and set no Python exception") as e:
        gpuport.from_dlpack(cls(np.ones(4)))
    assert isinstance(e.value, BufferError) and e.value.__cause__ is None
    assert tables.from_py_calls == 1 and cls.dunder_calls == 0
    collect()
    assert tables.deleted == 1 and not tables.live  # the tensor went back to its producer


def test_a_current_work_stream_that_raises_is_the_cause_of_the_dlpack_error(consumer):
    tables = Tables()
    failing = ctypes.cast(consumer.xc_failing_current_work_stream, ctypes.c_void_p).value
    cls = producer_class(tables.capsule(tables.table(stream=failing)))
    with pytest.raises(gpuport.DLPackError, match=r"current_work_stream\(kDLCPU, 0\) returned -1: "
                       "RuntimeError: fake producer: the stream of this device cannot be queried") as e:
        gpuport.from_dlpack(cls(np.ones(4)))
    assert isinstance(e.value.__cause__, RuntimeError)
    collect()
    assert tables.deleted == 1 and not tables.live


def test_a_failing_from_py_object_without_an_exception_is_a_dlpack_error():
    tables = Tables()
    cls = producer_class(tables.capsule(tables.table(from_py=tables.fn(FROM_PY_OBJECT(lambda o, out: -1)))))
    with pytest.raises(gpuport.DLPackError, match="managed_tensor_from_py_object_no_sync returned -1 and set no"):
        gpuport.from_dlpack(cls(np.ones(4)))
    assert cls.dunder_calls == 0


def test_a_tensor_gpuport_cannot_hold_is_released():
    tables = Tables()
    tables.dtype_code = 99
    cls = producer_class(tables.capsule(tables.table()))
    with pytest.raises(gpuport.DLPackError, match="code 99"):
        gpuport.from_dlpack(cls(np.ones(4)))
    collect()
    assert tables.from_py_calls == 1 and tables.deleted == 1 and not tables.live


# ---- PyTorch ------------------------------------------------------------------------------------


def _torch_with_table():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here")
    cap = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if cap is None or not capsule_name_is(cap, "dlpack_exchange_api"):
        pytest.skip(f"torch {torch.__version__} offers no __dlpack_c_exchange_api__ capsule")
    t = table_of(torch.Tensor)
    print(f"torch {torch.__version__}: DLPackExchangeAPI version "
          f"{t.header.version.major}.{t.header.version.minor}", file=sys.stderr)
    return torch


def _torch_place(on, request):
    """(gpuport device, torch device string) for a torch test on "cpu" or "cuda"."""
    if on == "cuda":
        dev = request.getfixturevalue("cuda_device")
        return dev, f"cuda:{dev.ordinal}"
    return gpuport.Device("host"), "cpu"


@pytest.mark.parametrize("on", ["cpu", "cuda"])
def test_gpuport_from_dlpack_takes_torch_tensors_through_torch_s_table(on, request):
    torch = _torch_with_table()
    dev, tdev = _torch_place(on, request)
    t = torch.arange(12, dtype=torch.float32, device=tdev).reshape(3, 4)
    collect()
    before = stats()
    m = gpuport.from_dlpack(t)
    assert stats()["imports_through_table"] == before["imports_through_table"] + 1
    assert m.data_ptr == t.data_ptr() and m.shape == (3, 4) and m.dtype == "float32" and m.device == dev
    np.testing.assert_array_equal(read(m, (3, 4), np.float32), np.arange(12).reshape(3, 4))
    m.add_index()  # gpuport writes torch's memory
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(12).reshape(3, 4) + np.indices((3, 4)).sum(axis=0))
    del m
    collect()
    assert stats()["imports_live"] == before["imports_live"]  # torch's deleter ran


@pytest.mark.parametrize("on", ["cpu", "cuda"])
def test_a_c_consumer_exchanges_between_torch_and_gpuport_through_both_tables(on, consumer, request):
    torch = _torch_with_table()
    dev, tdev = _torch_place(on, request)
    t = torch.arange(12, dtype=torch.float32, device=tdev).reshape(3, 4)
    # gpuport's tensor to torch's to_py_object, and torch's to gpuport's.
    a = filled((2, 3), "float32", dev)
    a.move_memory("device")
    u = new_reference(consumer.xc_exchange(a, t))
    assert isinstance(u, torch.Tensor) and u.data_ptr() == a.data_ptr and tuple(u.shape) == (2, 3)
    u.add_(1)
    if on == "cuda":
        torch.cuda.synchronize()
    np.testing.assert_array_equal(a.to_numpy(), init_array((2, 3), "float32") + 1)
    w = new_reference(consumer.xc_exchange(t, a))
    assert type(w) is gpuport.MemArray and w.data_ptr == t.data_ptr() and w.shape == (3, 4)
    # torch's allocator, through a C consumer.
    k, msg = ctypes.create_string_buffer(256), ctypes.create_string_buffer(256)
    dl_type = kDLCUDA if on == "cuda" else kDLCPU
    shape = (ctypes.c_int64 * 2)(4, 2)
    z = new_reference(consumer.xc_allocate(t, 2, shape, 2, 32, dl_type, dev.ordinal, k, msg))
    assert isinstance(z, torch.Tensor) and tuple(z.shape) == (4, 2) and z.device == t.device
    del u, w, z, a
    gc.collect()
