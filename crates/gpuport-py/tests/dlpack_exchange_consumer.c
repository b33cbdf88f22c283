/* A small consumer of DLPack 1.3's C exchange API, compiled by the tests
 * (and benches/exchange.py) with the system `cc` into a shared library that
 * Python loads with ctypes.PyDLL, so every function runs with the GIL held,
 * as the exchange API's PyObject functions require.
 *
 * The declarations below are those of dlpack/dlpack.h 1.3 (DLPackVersion,
 * DLDevice, DLDataType, DLTensor, DLManagedTensorVersioned, and the
 * "__dlpack_c_exchange_api__ fast exchange protocol definitions":
 * DLPackExchangeAPIHeader, DLPackExchangeAPI and its function types),
 * written out so that no header has to be installed. The few CPython
 * functions used are declared by hand too: they are resolved in the
 * running interpreter when the library is loaded, so no Python.h is needed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct { int32_t device_type; int32_t device_id; } DLDevice; /* DLDeviceType is a C enum */
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

typedef int (*DLPackManagedTensorAllocator)(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                                            void (*SetError)(void *error_ctx, const char *kind, const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object, DLManagedTensorVersioned **out);
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(int32_t device_type, int32_t device_id, void **out_current_stream);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor, void **out_py_object);

typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct DLPackExchangeAPI {
    DLPackExchangeAPIHeader header;
    DLPackManagedTensorAllocator managed_tensor_allocator;
    DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
    DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
    DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
    DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

/* CPython (stable ABI). */
typedef struct _object PyObject;
extern PyObject *PyExc_RuntimeError;
extern PyObject *PyExc_ValueError;
void PyErr_SetString(PyObject *type, const char *message);
PyObject *PyObject_Type(PyObject *o);
PyObject *PyObject_GetAttrString(PyObject *o, const char *name);
PyObject *PyObject_Call(PyObject *callable, PyObject *args, PyObject *kwargs);
PyObject *PyObject_CallNoArgs(PyObject *callable);
PyObject *PyTuple_New(ptrdiff_t size);
PyObject *Py_BuildValue(const char *format, ...);
void *PyCapsule_GetPointer(PyObject *capsule, const char *name);
int PyCapsule_IsValid(PyObject *capsule, const char *name);
int PyCapsule_SetName(PyObject *capsule, const char *name);
void Py_DecRef(PyObject *o);

/* The table of type(obj), as a consumer finds it: the class attribute,
 * a capsule named "dlpack_exchange_api", major version 1. The header lets a
 * consumer cache the table per type; this one remembers the last few types
 * (keeping a reference to each, so that its address cannot be reused). */
#define CACHED 4
static PyObject *cached_type[CACHED];
static const DLPackExchangeAPI *cached_api[CACHED];
static int cache_next;

static const DLPackExchangeAPI *table_of(PyObject *obj) {
    PyObject *type = PyObject_Type(obj);
    for (int i = 0; i < CACHED; i++) {
        if (cached_type[i] == type) {
            Py_DecRef(type);
            return cached_api[i];
        }
    }
    PyObject *cap = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
    if (cap == NULL) {
        Py_DecRef(type);
        return NULL;
    }
    const DLPackExchangeAPI *api = (const DLPackExchangeAPI *)PyCapsule_GetPointer(cap, "dlpack_exchange_api");
    Py_DecRef(cap); /* the table lives for the whole process */
    if (api == NULL) {
        Py_DecRef(type);
        return NULL;
    }
    if (api->header.version.major != 1) {
        Py_DecRef(type);
        PyErr_SetString(PyExc_RuntimeError, "exchange API table of an unknown major version");
        return NULL;
    }
    if (cached_type[cache_next] != NULL) Py_DecRef(cached_type[cache_next]);
    cached_type[cache_next] = type; /* the reference PyObject_Type gave */
    cached_api[cache_next] = api;
    cache_next = (cache_next + 1) % CACHED;
    return api;
}

/* The table's header version, as major * 1000 + minor, or -1. */
long xc_table_version(PyObject *obj) {
    const DLPackExchangeAPI *api = table_of(obj);
    if (api == NULL) return -1;
    return (long)api->header.version.major * 1000 + api->header.version.minor;
}

/* Which of the table's five functions are not NULL, as bits in the header's
 * order: allocator, from_py_object, to_py_object, dltensor_from_py_object,
 * current_work_stream. */
long xc_table_functions(PyObject *obj) {
    const DLPackExchangeAPI *api = table_of(obj);
    if (api == NULL) return -1;
    return (api->managed_tensor_allocator != NULL) | (api->managed_tensor_from_py_object_no_sync != NULL) << 1 |
           (api->managed_tensor_to_py_object_no_sync != NULL) << 2 |
           (api->dltensor_from_py_object_no_sync != NULL) << 3 | (api->current_work_stream != NULL) << 4;
}

/* obj -> DLManagedTensorVersioned -> an object of type(like), through the
 * two types' tables (the same table for like = obj). A new reference, or
 * NULL with a Python exception set. Both producers are asked for their
 * current work stream of the tensor's device; a consumer that cannot
 * synchronize streams (this one) refuses the exchange if they differ. */
PyObject *xc_exchange(PyObject *obj, PyObject *like) {
    const DLPackExchangeAPI *src = table_of(obj);
    if (src == NULL) return NULL;
    const DLPackExchangeAPI *dst = table_of(like);
    if (dst == NULL) return NULL;
    DLManagedTensorVersioned *t = NULL;
    if (src->managed_tensor_from_py_object_no_sync(obj, &t) != 0) return NULL;
    void *theirs = NULL, *ours = NULL;
    int32_t dt = t->dl_tensor.device.device_type, id = t->dl_tensor.device.device_id;
    if (src->current_work_stream(dt, id, &theirs) != 0 || dst->current_work_stream(dt, id, &ours) != 0) {
        t->deleter(t);
        return NULL;
    }
    if (theirs != ours) {
        t->deleter(t);
        PyErr_SetString(PyExc_RuntimeError, "the producers work on different streams; this consumer cannot order them");
        return NULL;
    }
    void *out = NULL;
    if (dst->managed_tensor_to_py_object_no_sync(t, &out) != 0) return NULL; /* t is stolen, even on failure */
    return (PyObject *)out;
}

/* The exchange a C consumer makes per tensor argument: the owning tensor
 * and the producer's stream, then (its work done) the tensor released.
 * Writes the tensor's data pointer, ndim and device to *info. */
int xc_take(PyObject *obj, int64_t *info) {
    const DLPackExchangeAPI *api = table_of(obj);
    if (api == NULL) return -1;
    DLManagedTensorVersioned *t = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &t) != 0) return -1;
    void *stream = NULL;
    if (api->current_work_stream(t->dl_tensor.device.device_type, t->dl_tensor.device.device_id, &stream) != 0) {
        t->deleter(t);
        return -1;
    }
    info[0] = (int64_t)(intptr_t)t->dl_tensor.data;
    info[1] = t->dl_tensor.ndim;
    info[2] = t->dl_tensor.device.device_type;
    info[3] = (int64_t)(intptr_t)stream;
    info[4] = t->version.major * 1000 + t->version.minor;
    if (t->dl_tensor.ndim > 0) info[5] = t->dl_tensor.shape[0];
    if (t->deleter) t->deleter(t);
    return 0;
}

/* The same through the Python-level protocol, as a C consumer does it
 * without the table: obj.__dlpack_device__(), then
 * obj.__dlpack__(max_version=(1, 3)) (no stream: host memory, or CUDA's
 * legacy default stream), the versioned capsule taken (renamed "used_..."),
 * the tensor released. */
int xc_take_protocol(PyObject *obj, int64_t *info) {
    PyObject *method = PyObject_GetAttrString(obj, "__dlpack_device__");
    if (method == NULL) return -1;
    PyObject *dev = PyObject_CallNoArgs(method);
    Py_DecRef(method);
    if (dev == NULL) return -1;
    Py_DecRef(dev);
    method = PyObject_GetAttrString(obj, "__dlpack__");
    if (method == NULL) return -1;
    PyObject *args = PyTuple_New(0);
    PyObject *kwargs = Py_BuildValue("{s:(ii)}", "max_version", 1, 3);
    PyObject *cap = (args && kwargs) ? PyObject_Call(method, args, kwargs) : NULL;
    Py_DecRef(method);
    if (args) Py_DecRef(args);
    if (kwargs) Py_DecRef(kwargs);
    if (cap == NULL) return -1;
    if (!PyCapsule_IsValid(cap, "dltensor_versioned")) {
        Py_DecRef(cap);
        PyErr_SetString(PyExc_RuntimeError, "__dlpack__ did not return a versioned capsule");
        return -1;
    }
    DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (t == NULL || PyCapsule_SetName(cap, "used_dltensor_versioned") != 0) {
        Py_DecRef(cap);
        return -1;
    }
    Py_DecRef(cap); /* renamed: its destructor leaves the tensor to us */
    info[0] = (int64_t)(intptr_t)t->dl_tensor.data;
    info[1] = t->dl_tensor.ndim;
    info[2] = t->dl_tensor.device.device_type;
    info[3] = 0;
    info[4] = t->version.major * 1000 + t->version.minor;
    if (t->dl_tensor.ndim > 0) info[5] = t->dl_tensor.shape[0];
    if (t->deleter) t->deleter(t);
    return 0;
}

/* The allocator of type(like)'s table, then its to_py_object: a new object
 * of that type with `shape`, dtype (code, bits) and device. A new
 * reference, or NULL with a Python exception set; what SetError reported
 * goes to `kind_out` and `message_out` (256 bytes each). */
struct set_error_ctx { char *kind; char *message; int calls; };
static void set_error(void *ctx, const char *kind, const char *message) {
    struct set_error_ctx *c = (struct set_error_ctx *)ctx;
    snprintf(c->kind, 256, "%s", kind);
    snprintf(c->message, 256, "%s", message);
    c->calls += 1;
}

PyObject *xc_allocate(PyObject *like, int32_t ndim, int64_t *shape, int32_t code, int32_t bits, int32_t device_type,
                      int32_t device_id, char *kind_out, char *message_out) {
    const DLPackExchangeAPI *api = table_of(like);
    if (api == NULL) return NULL;
    DLTensor prototype;
    memset(&prototype, 0, sizeof prototype);
    prototype.ndim = ndim;
    prototype.shape = shape;
    prototype.dtype.code = (uint8_t)code;
    prototype.dtype.bits = (uint8_t)bits;
    prototype.dtype.lanes = 1;
    prototype.device.device_type = device_type;
    prototype.device.device_id = device_id;
    struct set_error_ctx ctx = {kind_out, message_out, 0};
    DLManagedTensorVersioned *t = NULL;
    if (api->managed_tensor_allocator(&prototype, &t, &ctx, set_error) != 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "allocator failed (SetError called %d time(s)): %s: %s", ctx.calls, kind_out,
                 message_out);
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    if (ctx.calls != 0) {
        t->deleter(t);
        PyErr_SetString(PyExc_RuntimeError, "the allocator succeeded but called SetError");
        return NULL;
    }
    void *out = NULL;
    if (api->managed_tensor_to_py_object_no_sync(t, &out) != 0) return NULL;
    return (PyObject *)out;
}

/* The allocator with no SetError (as PyTorch's own test calls it): -1 must
 * come with a Python exception instead. Returns the allocator's result. */
int xc_allocate_without_set_error(PyObject *like, int32_t code, int32_t bits) {
    const DLPackExchangeAPI *api = table_of(like);
    if (api == NULL) return -2;
    int64_t shape[1] = {4};
    DLTensor prototype;
    memset(&prototype, 0, sizeof prototype);
    prototype.ndim = 1;
    prototype.shape = shape;
    prototype.dtype.code = (uint8_t)code;
    prototype.dtype.bits = (uint8_t)bits;
    prototype.dtype.lanes = 1;
    prototype.device.device_type = 1;
    DLManagedTensorVersioned *t = NULL;
    int rc = api->managed_tensor_allocator(&prototype, &t, NULL, NULL);
    if (rc == 0 && t != NULL && t->deleter) t->deleter(t);
    return rc;
}

/* current_work_stream of type(like)'s table, as an integer (0 for NULL);
 * -1 with the producer's Python exception on failure. */
long long xc_current_work_stream(PyObject *like, int32_t device_type, int32_t device_id) {
    const DLPackExchangeAPI *api = table_of(like);
    if (api == NULL) return -1;
    void *s = NULL;
    if (api->current_work_stream(device_type, device_id, &s) != 0) return -1;
    return (long long)(intptr_t)s;
}

/* from_py_object of type(like)'s table called with another object: must
 * fail with a Python exception, leaving *out NULL. Returns 1 if it did. */
int xc_from_wrong_object(PyObject *like, PyObject *other) {
    const DLPackExchangeAPI *api = table_of(like);
    if (api == NULL) return -1;
    DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)1;
    int rc = api->managed_tensor_from_py_object_no_sync(other, &t);
    return rc == -1 && t == NULL;
}

/* A producer's current_work_stream that fails as the header says a failing
 * one does: -1 with a Python exception set (for fake producers' tables). */
int xc_failing_current_work_stream(int32_t device_type, int32_t device_id, void **out) {
    (void)device_type;
    (void)device_id;
    (void)out;
    PyErr_SetString(PyExc_RuntimeError, "fake producer: the stream of this device cannot be queried");
    return -1;
}

/* For benchmarks: `n` exchanges of `obj` in a loop (through the table, or
 * through the Python-level protocol), so that the caller's per-call cost
 * (ctypes) is paid once. Returns 0, or -1 with a Python exception. */
int xc_take_many(PyObject *obj, long n, int protocol, int64_t *info) {
    for (long i = 0; i < n; i++) {
        if ((protocol ? xc_take_protocol(obj, info) : xc_take(obj, info)) != 0) return -1;
    }
    return 0;
}

/* For benchmarks: `n` exchanges obj -> object of type(like) (xc_exchange),
 * each result released at once. Returns 0, or -1 with a Python exception. */
int xc_exchange_many(PyObject *obj, PyObject *like, long n) {
    for (long i = 0; i < n; i++) {
        PyObject *o = xc_exchange(obj, like);
        if (o == NULL) return -1;
        Py_DecRef(o);
    }
    return 0;
}
