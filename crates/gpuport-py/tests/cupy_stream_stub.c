/* Stand-ins for CuPy's C function get_current_stream_ptr (a capsule named
 * "intptr_t (void)" in cupy.cuda.stream.__pyx_capi__), so tests/test_plugins.py
 * can drive gpuport's CuPy allocator functions (src/cupy_hook.rs) without
 * CuPy or a GPU. Built there with the system cc and loaded with ctypes.PyDLL,
 * inside the Python process, which provides the two Python symbols. */
#include <stdint.h>

extern void PyErr_SetString(void *type, const char *message);
extern void *PyExc_LookupError;

static intptr_t current_handle = 0;

/* What stub_current_stream returns next. */
void stub_set_stream(intptr_t handle) { current_handle = handle; }

intptr_t stub_current_stream(void) { return current_handle; }

/* Fails as a Cython `except? -1` function does: an exception set, -1 returned. */
intptr_t stub_failing_stream(void) {
    PyErr_SetString(PyExc_LookupError, "stub: no current stream");
    return -1;
}
