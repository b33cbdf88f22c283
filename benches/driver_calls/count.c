// Counts CUDA driver calls, by name, for `benches/driver_calls.py`.
//
//     gcc -O2 -shared -fPIC -o libcount.so benches/driver_calls/count.c -ldl
//     LD_PRELOAD=$PWD/libcount.so python3 benches/driver_calls.py
//
// Written by hand: no maintained tool does this without the CUDA profilers
// (nsys and CUPTI are not on every GPU machine). Preloaded, it stands in
// for `dlsym`: every `cu*` symbol a library looks up with `dlsym` (gpuport
// through cudarc's loader, cuda-python) or with `cuGetProcAddress` (the
// CUDA runtime, so torch) is handed back as a trampoline that bumps the
// symbol's counter and jumps to the real function (x86-64: it clobbers only
// r11, which no call passes arguments in). Calls a library makes through
// its own link to libcuda (CuPy's Cython modules) are not seen.
// `gp_count_dump(path)` appends "name count" lines of the counts so far.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_SYMBOLS 2048
#define STUB_BYTES 32

struct entry {
    char name[96];
    void *real;
    unsigned char *stub;
    uint64_t count;
};

static struct entry table[MAX_SYMBOLS];
static int used;
static unsigned char *stubs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef void *(*dlsym_fn)(void *, const char *);
typedef int (*proc_v1_fn)(const char *, void **, int, uint64_t);
typedef int (*proc_v2_fn)(const char *, void **, int, uint64_t, void *);

static dlsym_fn real_dlsym(void) {
    static dlsym_fn f;
    if (!f) f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f) f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return f;
}

static void *wrap(const char *name, void *real);

static proc_v1_fn real_proc_v1;
static proc_v2_fn real_proc_v2;

// cuGetProcAddress: hands out trampolines for what it finds.
static int proc_v1(const char *symbol, void **pfn, int version, uint64_t flags) {
    int r = real_proc_v1(symbol, pfn, version, flags);
    if (r == 0 && pfn && *pfn) *pfn = wrap(symbol, *pfn);
    return r;
}

static int proc_v2(const char *symbol, void **pfn, int version, uint64_t flags, void *status) {
    int r = real_proc_v2(symbol, pfn, version, flags, status);
    if (r == 0 && pfn && *pfn) *pfn = wrap(symbol, *pfn);
    return r;
}

// movabs r11, &count; lock inc qword [r11]; movabs r11, real; jmp r11
static void emit(unsigned char *p, uint64_t *count, void *real) {
    uint64_t c = (uint64_t)count, t = (uint64_t)real;
    p[0] = 0x49, p[1] = 0xBB;
    memcpy(p + 2, &c, 8);
    p[10] = 0xF0, p[11] = 0x49, p[12] = 0xFF, p[13] = 0x03;
    p[14] = 0x49, p[15] = 0xBB;
    memcpy(p + 16, &t, 8);
    p[24] = 0x41, p[25] = 0xFF, p[26] = 0xE3;
}

static void *wrap(const char *name, void *real) {
    if (strncmp(name, "cu", 2) != 0 || strncmp(name, "cuda", 4) == 0) return real;
    if (strncmp(name, "cuGetProcAddress", 16) == 0) {
        if (strcmp(name, "cuGetProcAddress_v2") == 0) return real_proc_v2 = (proc_v2_fn)real, (void *)proc_v2;
        return real_proc_v1 = (proc_v1_fn)real, (void *)proc_v1;
    }
    pthread_mutex_lock(&lock);
    void *out = real;
    for (int i = 0; i < used; i++) {
        if (table[i].real == real && strcmp(table[i].name, name) == 0) {
            out = table[i].stub;
            goto done;
        }
    }
    if (!stubs) {
        stubs = mmap(NULL, MAX_SYMBOLS * STUB_BYTES, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stubs == MAP_FAILED) stubs = NULL;
    }
    if (stubs && used < MAX_SYMBOLS) {
        struct entry *e = &table[used];
        snprintf(e->name, sizeof e->name, "%s", name);
        e->real = real;
        e->stub = stubs + used * STUB_BYTES;
        emit(e->stub, &e->count, real);
        used++;
        out = e->stub;
    }
done:
    pthread_mutex_unlock(&lock);
    return out;
}

void *dlsym(void *handle, const char *name) {
    void *p = real_dlsym()(handle, name);
    return p ? wrap(name, p) : p;
}

// Appends the counts so far to `path`, one "name count" line each, then a line "--".
int gp_count_dump(const char *path) {
    FILE *f = fopen(path, "a");
    if (!f) return -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < used; i++) {
        uint64_t n = __atomic_load_n(&table[i].count, __ATOMIC_RELAXED);
        if (n) fprintf(f, "%s %llu\n", table[i].name, (unsigned long long)n);
    }
    pthread_mutex_unlock(&lock);
    fprintf(f, "--\n");
    fclose(f);
    return 0;
}
