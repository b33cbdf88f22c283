"""The three tests of shared ownership, in both directions, with reference
counts and weak references (docs/design.md#shared-ownership-across-the-language-boundary)."""

import sys
import weakref

import numpy as np

import gpuport

from conftest import collect, stats


def test_memory_passed_to_python_stays_alive_after_rust_drops_it(device):
    """Rust -> Python: a NumPy array made from a MemArray keeps the Rust memory
    alive after the MemArray is deleted; it is freed when NumPy lets go."""
    collect()
    live0 = stats()["exports_live"]
    a = gpuport.MemArray((1000,), "float64", device=device)
    a.read_numpy_array(np.arange(1000.0))
    a.add_index()
    a.move_memory("host")
    gone = weakref.ref(a)
    x = np.from_dlpack(a, device="cpu")  # the host copy (on a GPU backend the device copy is current too)
    ptr = a.data_ptr
    del a
    collect()
    assert gone() is None  # the Python object is gone ...
    assert stats()["exports_live"] == live0 + 1  # ... its memory is held by the export
    np.testing.assert_array_equal(x, 2 * np.arange(1000.0))  # and still readable
    assert x.ctypes.data == ptr  # no copy
    x += 1  # and writable
    del x
    collect()
    assert stats()["exports_live"] == live0  # freed exactly when NumPy let go


def test_memory_from_python_stays_alive_after_python_drops_it():
    """Python -> Rust: a MemArray made from a NumPy array without copying keeps
    the NumPy object alive after Python drops its last name for it."""
    collect()
    before = stats()
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    ptr = x.ctypes.data
    gone = weakref.ref(x)
    refs = sys.getrefcount(x)
    m = gpuport.from_dlpack(x)
    assert sys.getrefcount(x) == refs + 1  # the producer's deleter holds one reference
    assert stats()["imports_live"] == before["imports_live"] + 1
    del x
    collect()
    assert gone() is not None  # kept alive by the MemArray
    m.add_index()  # Rust writes the memory after Python dropped it
    assert m.data_ptr == ptr
    y = np.from_dlpack(m)
    np.testing.assert_array_equal(y, np.arange(24).reshape(4, 6) + np.indices((4, 6)).sum(axis=0))
    del m
    collect()
    assert gone() is not None  # y (a view of the export) still holds it
    del y
    collect()
    assert gone() is None  # nothing leaked once both sides are gone
    after = stats()
    assert after["imports_live"] == before["imports_live"]
    assert after["imports_released"] == before["imports_released"] + 1


def test_memory_is_shared_not_copied_both_ways(device):
    """No copy: the addresses match and writes on one side show on the other."""
    a = gpuport.MemArray((3, 3), "float32", device=device)  # new arrays are host-resident
    x = np.from_dlpack(a)
    assert x.ctypes.data == a.data_ptr
    x[1, 1] = 7
    np.testing.assert_array_equal(a.to_numpy()[1, 1], 7)

    y = np.zeros((2, 2), np.float32)
    m = gpuport.from_dlpack(y)
    assert m.data_ptr == y.ctypes.data
    m.add_index()
    np.testing.assert_array_equal(y, [[0, 1], [1, 2]])


def test_refcounts_return_to_where_they_started(device):
    a = gpuport.MemArray((8,), "int8", device=device)
    r = sys.getrefcount(a)
    with a.get_dlpack() as d:
        assert sys.getrefcount(a) == r + 1  # the context holds the array
        x = np.from_dlpack(d)
    del d, x
    collect()
    assert sys.getrefcount(a) == r
    assert a.live_exports == 0
    x = np.asarray(a)  # the array interface keeps the MemArray itself alive
    assert sys.getrefcount(a) == r + 1
    del x
    assert sys.getrefcount(a) == r


def test_memarray_round_trip_through_itself_releases_everything(device):
    collect()
    before = stats()
    a = gpuport.MemArray((5,), "uint16", device=device)
    b = gpuport.from_dlpack(a)  # gpuport consumer of a gpuport producer
    assert b.data_ptr == a.data_ptr and a.live_exports == 1
    del a
    collect()
    b.add_index()
    np.testing.assert_array_equal(np.from_dlpack(b), np.arange(5))
    del b
    collect()
    after = stats()
    assert after["exports_live"] == before["exports_live"]
    assert after["imports_live"] == before["imports_live"]
