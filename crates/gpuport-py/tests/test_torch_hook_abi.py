"""The PyTorch hook's failure is a C++ exception that code built against
libstdc++, as PyTorch is, can catch (``csrc/torch_hook.cpp``, ``build.rs``).

A C++ caller built here with g++ stands in for PyTorch: it calls
``gpuport_torch_malloc`` for more memory than exists and catches
``std::exception``. A hook linked with another C++ runtime (zig's libc++,
the default of ``maturin --zig``) aborts the process instead."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

import gpuport

CALLER = r"""
#include <cstring>
#include <exception>
#include <sys/types.h>

typedef void* (*malloc_fn)(ssize_t size, int device, void* stream);

// 1: caught as std::exception (its message in `what`), 0: no exception, 2: another one.
extern "C" int catch_failed_malloc(malloc_fn hook, ssize_t size, char* what, size_t capacity) {
    try {
        hook(size, -1, nullptr);
        return 0;
    } catch (const std::exception& e) {
        std::strncpy(what, e.what(), capacity - 1);
        return 1;
    } catch (...) {
        return 2;
    }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the C++ caller")
def test_a_failed_allocation_is_a_std_exception_a_libstdcxx_caller_catches(tmp_path: Path) -> None:
    source = tmp_path / "caller.cpp"
    source.write_text(CALLER)
    library = tmp_path / "libcaller.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    caller = ctypes.CDLL(str(library))
    caller.catch_failed_malloc.restype = ctypes.c_int
    caller.catch_failed_malloc.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_char_p, ctypes.c_size_t]
    hook = ctypes.cast(ctypes.CDLL(gpuport._core.__file__).gpuport_torch_malloc, ctypes.c_void_p)
    what = ctypes.create_string_buffer(1024)
    # 2**60 bytes on the host backend (device -1): more than any machine has.
    assert caller.catch_failed_malloc(hook, 1 << 60, what, len(what)) == 1
    assert what.value.startswith(b"gpuport could not allocate 1152921504606846976 bytes"), what.value
