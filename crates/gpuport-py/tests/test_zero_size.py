"""Zero-size requests through the CuPy hook behave as CuPy's own allocators:
a null pointer, nothing allocated (CuPy's stand-ins here; no CuPy needed)."""

import sys
import types

import pytest

import gpuport.cupy


class _Memory:
    """CuPy's ``Memory``/``PinnedMemory``: ``ptr`` 0 for size 0, as CuPy's."""

    def __init__(self, size, flags=0):
        self.size = size
        self.ptr = 0 if size == 0 else 0x1000


class _Pointer:
    """CuPy's ``MemoryPointer``/``PinnedMemoryPointer``."""

    def __init__(self, mem, offset):
        self.mem = mem
        self.ptr = mem.ptr + offset


class _Allocation:
    ptr = 0x2000
    size = 1


@pytest.fixture
def fake_cupy(monkeypatch):
    runtime = types.SimpleNamespace(getDevice=lambda: 0, is_hip=False)
    cuda = types.SimpleNamespace(
        runtime=runtime,
        memory=types.SimpleNamespace(Memory=_Memory),
        MemoryPointer=_Pointer,
        PinnedMemory=_Memory,
        PinnedMemoryPointer=_Pointer,
        UnownedMemory=lambda ptr, size, owner, dev: types.SimpleNamespace(ptr=ptr, size=size),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0),
    )
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    calls = []

    def record(name):
        def f(*args):
            calls.append((name, args))
            return _Allocation()

        return f

    core = types.SimpleNamespace(mem_alloc=record("mem_alloc"), mem_alloc_pinned=record("mem_alloc_pinned"))
    monkeypatch.setattr(gpuport.cupy, "_core", core)
    return calls


def test_cupy_pinned_allocator_of_zero_bytes_is_a_null_pointer(fake_cupy):
    p = gpuport.cupy.pinned_allocator(0)
    assert (p.ptr, p.mem.size) == (0, 0), "CuPy's pinned pool returns PinnedMemoryPointer(PinnedMemory(0), 0)"
    assert fake_cupy == [], "nothing is allocated"
    assert gpuport.cupy.pinned_allocator(16).ptr == _Allocation.ptr
    assert [name for name, _ in fake_cupy] == ["mem_alloc_pinned"]


def test_cupy_allocator_of_zero_bytes_is_a_null_pointer(fake_cupy):
    p = gpuport.cupy.allocator(0)
    assert (p.ptr, p.mem.size) == (0, 0), "CuPy's pool returns MemoryPointer(Memory(0), 0)"
    assert fake_cupy == []
