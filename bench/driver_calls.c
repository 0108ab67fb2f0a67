/*
 * driver_calls.c - the driver part of each benchmarked API, timed from C.
 *
 * bench_api.py builds this program with cc into a temporary directory and
 * runs it on the same driver library the extension opens, so its table can
 * show our own overhead: (the Python call) - (the same driver call from C).
 * Entry points are resolved as the backend resolves them: cuGetProcAddress_v2
 * at ACC_CUDA_ABI_VERSION, dlsym of the versioned names as a fallback.
 *
 *   driver_calls [--library PATH] [--device N] [--target-ms MS]
 *                [--repeats R] [--callgrind N1,N2]
 *
 * Prints one JSON object per line: {"op": ..., "ns": median ns per call,
 * "min_ns": ..., "iters": ...}, or {"error": ...} and exit status 1.
 * With --callgrind it runs each operation N1 then N2 times between
 * CALLGRIND_DUMP_STATS_AT markers ("<op>:<N>") instead of timing it, so
 * that instructions per call = (Ir(N2) - Ir(N1)) / (N2 - N1).
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_api.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_DUMP_STATS_AT
#define CALLGRIND_DUMP_STATS_AT(name) ((void)(name))
#endif

#define MAX_REPEATS 101

#define FN_FIELD(name, symbol, version, params) acc_pfn_##name name;
static struct {
    ACC_CUDA_FUNCTIONS(FN_FIELD)
} cu;
#undef FN_FIELD

/* The objects the operations work on, made once. */
static struct {
    CUcontext ctx;
    CUstream stream;        /* non-blocking, idle */
    CUevent recorded;       /* timing disabled, recorded and complete */
    CUevent record_target;  /* timing disabled, recorded over and over */
    CUdeviceptr dev;        /* 4 KiB of device memory */
    unsigned char host[4096];  /* pageable host memory */
} obj;

static int
fail(const char *what, CUresult code)
{
    const char *name = NULL;

    if (cu.cuGetErrorName == NULL || cu.cuGetErrorName(code, &name) != 0) {
        name = "?";
    }
    printf("{\"error\": \"%s failed: %d (%s)\"}\n", what, (int)code, name);
    return -1;
}

#define CHECK(call)                          \
    do {                                     \
        CUresult rc_ = (call);               \
        if (rc_ != CUDA_SUCCESS) {           \
            return fail(#call, rc_);         \
        }                                    \
    } while (0)

static int
resolve(void *library)
{
    acc_pfn_cuGetProcAddress get_proc;
    CUdriverProcAddressQueryResult status;
    void *p = dlsym(library, "cuGetProcAddress_v2");

    memcpy(&get_proc, &p, sizeof(p));
#define RESOLVE(name, symbol, version, params)                              \
    p = NULL;                                                               \
    if (get_proc == NULL                                                    \
        || get_proc(#name, &p, ACC_CUDA_ABI_VERSION,                        \
                    CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS   \
        || p == NULL) {                                                     \
        p = dlsym(library, #symbol);                                        \
    }                                                                       \
    if (p == NULL) {                                                        \
        printf("{\"error\": \"the driver lacks %s\"}\n", #symbol);          \
        return -1;                                                          \
    }                                                                       \
    memcpy(&cu.name, &p, sizeof(p));
    ACC_CUDA_FUNCTIONS(RESOLVE)
#undef RESOLVE
    return 0;
}

static int
setup(int device)
{
    CUdevice dev;

    CHECK(cu.cuInit(0));
    CHECK(cu.cuDeviceGet(&dev, device));
    CHECK(cu.cuDevicePrimaryCtxRetain(&obj.ctx, dev));
    CHECK(cu.cuCtxSetCurrent(obj.ctx));
    CHECK(cu.cuStreamCreateWithPriority(&obj.stream, CU_STREAM_NON_BLOCKING,
                                        0));
    CHECK(cu.cuEventCreate(&obj.recorded, CU_EVENT_DISABLE_TIMING));
    CHECK(cu.cuEventCreate(&obj.record_target, CU_EVENT_DISABLE_TIMING));
    CHECK(cu.cuEventRecord(obj.recorded, obj.stream));
    CHECK(cu.cuStreamSynchronize(obj.stream));
    CHECK(cu.cuMemAlloc(&obj.dev, sizeof(obj.host)));
    return 0;
}

/* One call of each operation; the result is checked once, before timing. */

static CUresult
op_ctx_get_current(void)
{
    CUcontext ctx;

    return cu.cuCtxGetCurrent(&ctx);
}

static CUresult
op_ctx_set_current(void)
{
    return cu.cuCtxSetCurrent(obj.ctx);
}

static CUresult
op_ctx_push_pop(void)
{
    CUcontext popped;
    CUresult rc = cu.cuCtxPushCurrent(obj.ctx);

    return rc != CUDA_SUCCESS ? rc : cu.cuCtxPopCurrent(&popped);
}

static CUresult
op_stream_query(void)
{
    return cu.cuStreamQuery(obj.stream);
}

static CUresult
op_event_record(void)
{
    return cu.cuEventRecord(obj.record_target, obj.stream);
}

/* On the legacy default stream (handle 0), as Event.record() with the
 * default stream current; needs the context current, as here. */
static CUresult
op_event_record_legacy(void)
{
    return cu.cuEventRecord(obj.record_target, NULL);
}

static CUresult
op_event_query(void)
{
    return cu.cuEventQuery(obj.recorded);
}

static CUresult
op_ctx_synchronize(void)
{
    return cu.cuCtxSynchronize();
}

static CUresult
op_stream_synchronize(void)
{
    return cu.cuStreamSynchronize(obj.stream);
}

static CUresult
op_stream_create_destroy(void)
{
    CUstream s;
    CUresult rc = cu.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING,
                                                0);

    return rc != CUDA_SUCCESS ? rc : cu.cuStreamDestroy(s);
}

static CUresult
op_event_create_destroy(void)
{
    CUevent e;
    CUresult rc = cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);

    return rc != CUDA_SUCCESS ? rc : cu.cuEventDestroy(e);
}

static CUresult
op_mem_alloc_free(void)
{
    CUdeviceptr p;
    CUresult rc = cu.cuMemAlloc(&p, 4096);

    return rc != CUDA_SUCCESS ? rc : cu.cuMemFree(p);
}

/* 4 KiB from pageable memory on the legacy default stream, as
 * Buffer.copy_from(bytes) with the default stream current. */
static CUresult
op_memcpy_htod(void)
{
    return cu.cuMemcpyHtoDAsync(obj.dev, obj.host, sizeof(obj.host), NULL);
}

static const struct {
    const char *name;
    CUresult (*fn)(void);
} ops[] = {
    {"cuCtxGetCurrent", op_ctx_get_current},
    {"cuCtxSetCurrent", op_ctx_set_current},
    {"cuCtxPushCurrent+cuCtxPopCurrent", op_ctx_push_pop},
    {"cuStreamQuery", op_stream_query},
    {"cuEventRecord", op_event_record},
    {"cuEventRecord(legacy stream)", op_event_record_legacy},
    {"cuEventQuery", op_event_query},
    {"cuCtxSynchronize", op_ctx_synchronize},
    {"cuStreamSynchronize", op_stream_synchronize},
    {"cuStreamCreateWithPriority+cuStreamDestroy", op_stream_create_destroy},
    {"cuEventCreate+cuEventDestroy", op_event_create_destroy},
    {"cuMemAlloc+cuMemFree", op_mem_alloc_free},
    {"cuMemcpyHtoDAsync", op_memcpy_htod},
};

static double
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The loop the timings and the instruction counts run.  noinline keeps
 * one copy of it, so every operation pays the same loop overhead. */
static __attribute__((noinline)) double
run(CUresult (*fn)(void), long iters)
{
    double start = now_ns();

    for (long i = 0; i < iters; i++) {
        (void)fn();
    }
    return now_ns() - start;
}

/* Work queued by a loop (records) must not leak into the next one. */
static void
drain(void)
{
    (void)cu.cuStreamSynchronize(obj.stream);
    (void)cu.cuStreamSynchronize(NULL);
}

static int
compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void
time_op(int i, double target_ns, int repeats)
{
    double per_call[MAX_REPEATS];
    long iters = 1;

    /* Calibrate: double the loop until it lasts target_ns. */
    for (;;) {
        double elapsed = run(ops[i].fn, iters);

        drain();
        if (elapsed >= target_ns || iters >= (1L << 30)) {
            break;
        }
        iters *= 2;
    }
    for (int r = 0; r < repeats; r++) {
        per_call[r] = run(ops[i].fn, iters) / (double)iters;
        drain();
    }
    qsort(per_call, (size_t)repeats, sizeof(double), compare_doubles);
    printf("{\"op\": \"%s\", \"ns\": %.2f, \"min_ns\": %.2f, "
           "\"iters\": %ld}\n", ops[i].name, per_call[repeats / 2],
           per_call[0], iters);
    fflush(stdout);
}

static void
count_op(int i, long n1, long n2)
{
    char label[128];

    drain();
    CALLGRIND_DUMP_STATS_AT("pre");
    run(ops[i].fn, n1);
    snprintf(label, sizeof(label), "%s:%ld", ops[i].name, n1);
    CALLGRIND_DUMP_STATS_AT(label);
    drain();
    CALLGRIND_DUMP_STATS_AT("pre");
    run(ops[i].fn, n2);
    snprintf(label, sizeof(label), "%s:%ld", ops[i].name, n2);
    CALLGRIND_DUMP_STATS_AT(label);
    printf("{\"op\": \"%s\", \"callgrind\": [%ld, %ld]}\n", ops[i].name, n1,
           n2);
    fflush(stdout);
}

int
main(int argc, char **argv)
{
    const char *library = getenv("ACCELERATOR_CUDA_LIBRARY");
    double target_ms = 20.0;
    int device = 0, repeats = 11;
    long n1 = 0, n2 = 0;
    void *handle;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--library") == 0) {
            library = argv[i + 1];
        }
        else if (strcmp(argv[i], "--device") == 0) {
            device = atoi(argv[i + 1]);
        }
        else if (strcmp(argv[i], "--target-ms") == 0) {
            target_ms = atof(argv[i + 1]);
        }
        else if (strcmp(argv[i], "--repeats") == 0) {
            repeats = atoi(argv[i + 1]);
        }
        else if (strcmp(argv[i], "--callgrind") == 0) {
            if (sscanf(argv[i + 1], "%ld,%ld", &n1, &n2) != 2 || n1 < 1
                || n2 <= n1) {
                printf("{\"error\": \"--callgrind wants N1,N2 with "
                       "0 < N1 < N2\"}\n");
                return 1;
            }
        }
        else {
            printf("{\"error\": \"unknown option %s\"}\n", argv[i]);
            return 1;
        }
    }
    if (repeats < 1 || repeats > MAX_REPEATS) {
        repeats = repeats < 1 ? 1 : MAX_REPEATS;
    }
    if (library == NULL || library[0] == '\0') {
        library = "libcuda.so.1";
    }
    handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        printf("{\"error\": \"cannot load %s\"}\n", library);
        return 1;
    }
    if (resolve(handle) < 0 || setup(device) < 0) {
        return 1;
    }
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        CUresult rc = ops[i].fn();

        if (rc != CUDA_SUCCESS) {
            fail(ops[i].name, rc);
            return 1;
        }
        drain();
        if (n1 > 0) {
            count_op((int)i, n1, n2);
        }
        else {
            time_op((int)i, target_ms * 1e6, repeats);
        }
    }
    (void)cu.cuEventDestroy(obj.recorded);
    (void)cu.cuEventDestroy(obj.record_target);
    (void)cu.cuStreamDestroy(obj.stream);
    return 0;
}
