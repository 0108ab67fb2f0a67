/*
 * cuda.c - the CUDA Driver API backend.
 *
 * libcuda.so.1 is opened at run time; every entry point comes through
 * cuGetProcAddress at ACC_CUDA_ABI_VERSION, so each base name resolves to
 * the variant whose signature cuda_api.h declares.  Old drivers without
 * cuGetProcAddress fall back to dlsym of the versioned names.
 *
 * One primary context per device (the one the CUDA runtime, PyTorch and
 * CuPy use), retained on first use and released at exit.
 *
 * The probe counts devices through NVML when it can (cuda_nvml.c) and
 * leaves cuInit to the first use (cuda_initialize), so that asking
 * is_available() never stops a process from forking CUDA workers.  The default
 * stream is the legacy default stream, handle 0, which the driver resolves
 * through the calling thread's current context; so operations on it, and
 * those that create objects, run with the device's context current
 * (pushed and popped when the thread's current context is another).
 */
#define _GNU_SOURCE
#define ACC_BACKEND_HOST cuda_host
#include <accelerator/backend.h>
#include "cuda_api.h"
#include "cuda_nvml.h"
#include "nvrtc.h"

/* This backend's table (named in its messages). */
extern const acc_backend acc_cuda_backend;

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_DEFAULT_LIBRARY "libcuda.so.1"

#define CUDA_FN_FIELD(name, symbol, version, params) acc_pfn_##name name;

static struct {
    void *library;
    struct {
        ACC_CUDA_FUNCTIONS(CUDA_FN_FIELD)
        ACC_CUDA_IPC_FUNCTIONS(CUDA_FN_FIELD)
        ACC_CUDA_OPTIONAL_FUNCTIONS(CUDA_FN_FIELD)
    } fn;
    int count;
    CUdevice devices[ACC_MAX_DEVICES];
    /* ACCELERATOR_VISIBLE_DEVICES: device i is the driver's order[i]. */
    int norder;
    int order[ACC_MAX_DEVICES];
    /* Retained primary contexts, NULL until first use. */
    _Atomic(CUcontext) contexts[ACC_MAX_DEVICES];
    /* Priority range per device, read once. */
    atomic_int have_range[ACC_MAX_DEVICES];
    int least[ACC_MAX_DEVICES], greatest[ACC_MAX_DEVICES];
    pthread_mutex_t lock;
} cu = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

#undef CUDA_FN_FIELD

/* Errors ----------------------------------------------------------------- */

static const char *
cuda_error_name(CUresult code)
{
    const char *name = NULL;

    /* Our own table first: the stub library cannot name its errors. */
    switch (code) {
#define CUDA_NAME_CASE(n, value) \
    case n:                      \
        return #n;
        ACC_CUDA_RESULTS(CUDA_NAME_CASE)
#undef CUDA_NAME_CASE
    default:
        break;
    }
    if (cu.fn.cuGetErrorName != NULL
        && cu.fn.cuGetErrorName(code, &name) == CUDA_SUCCESS) {
        return name;
    }
    return "CUDA_ERROR_UNRECOGNIZED";
}

static acc_status
cuda_fail(const char *api, CUresult code, acc_error *err)
{
    const char *text = NULL;
    acc_status st = code == CUDA_ERROR_OUT_OF_MEMORY ? ACC_ERR_OUT_OF_MEMORY
                                                     : ACC_ERR_DRIVER;
    size_t n;

    acc_error_driver(err, acc_cuda_backend.name, api, code,
                     cuda_error_name(code), st);
    if (cu.fn.cuGetErrorString != NULL
        && cu.fn.cuGetErrorString(code, &text) == CUDA_SUCCESS
        && text != NULL) {
        n = strlen(err->message);
        acc_format(err->message + n, sizeof(err->message) - n, ": %s", text);
    }
    return st;
}

static inline acc_status
cuda_check(CUresult code, const char *api, acc_error *err)
{
    return code == CUDA_SUCCESS ? ACC_OK : cuda_fail(api, code, err);
}

/* Every driver call goes through CU(name, (args)): a status, err filled. */
#define CU(name, args) cuda_check(cu.fn.name args, #name, err)

/* Probe ------------------------------------------------------------------ */

static acc_status
cuda_resolve(acc_error *err)
{
    acc_pfn_cuGetProcAddress get_proc;
    CUdriverProcAddressQueryResult status;
    void *p;

    get_proc = (acc_pfn_cuGetProcAddress)dlsym(cu.library,
                                               "cuGetProcAddress_v2");
    acc_trace("cuda: cuGetProcAddress_v2 %s", get_proc ? "found"
              : "missing, resolving versioned names with dlsym");
#define CUDA_RESOLVE(name, symbol, version, params)                        \
    p = NULL;                                                              \
    if (get_proc == NULL                                                   \
        || get_proc(#name, &p, ACC_CUDA_ABI_VERSION,                       \
                    CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS  \
        || p == NULL) {                                                    \
        p = dlsym(cu.library, #symbol);                                    \
    }                                                                      \
    if (p == NULL) {                                                       \
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,                         \
                      "the CUDA driver lacks %s (a driver for CUDA 11.4 "  \
                      "or newer is needed)", #symbol);                     \
        return ACC_ERR_NO_ACCELERATOR;                                     \
    }                                                                      \
    memcpy(&cu.fn.name, &p, sizeof(p));
    ACC_CUDA_FUNCTIONS(CUDA_RESOLVE)
    ACC_CUDA_IPC_FUNCTIONS(CUDA_RESOLVE)
#undef CUDA_RESOLVE
    /* Newer than our ABI: asked for at their own version, NULL where the
     * driver is older (never by dlsym where cuGetProcAddress exists: the
     * library may export a symbol its version does not offer). */
#define CUDA_RESOLVE_OPTIONAL(name, symbol, version, params)               \
    p = NULL;                                                              \
    if (get_proc == NULL) {                                                \
        p = dlsym(cu.library, #symbol);                                    \
    }                                                                      \
    else if (get_proc(#name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT,     \
                      &status) != CUDA_SUCCESS) {                          \
        p = NULL;                                                          \
    }                                                                      \
    acc_trace("cuda: %s %s", #name, p ? "found" : "missing (optional)");  \
    memcpy(&cu.fn.name, &p, sizeof(p));
    ACC_CUDA_OPTIONAL_FUNCTIONS(CUDA_RESOLVE_OPTIONAL)
#undef CUDA_RESOLVE_OPTIONAL
    return ACC_OK;
}

/* cuInit, with a hint for the failures users meet. */
static acc_status
cuda_init_driver(const char *path, acc_error *err)
{
    acc_status st = CU(cuInit, (0));
    size_t n;

    if (st == ACC_OK) {
        return ACC_OK;
    }
    n = strlen(err->message);
    if (err->code == CUDA_ERROR_STUB_LIBRARY) {
        acc_format(err->message + n, sizeof(err->message) - n,
                   " (%s is the CUDA toolkit's link-time stub, not a "
                   "driver)", path);
    }
    else if (err->code == CUDA_ERROR_NO_DEVICE) {
        acc_format(err->message + n, sizeof(err->message) - n,
                   " (no NVIDIA GPU is visible; check "
                   "CUDA_VISIBLE_DEVICES)");
    }
    return st;
}

/* The initialised driver's devices, in the visible order; *total is
 * the driver's own count. */
static acc_status
cuda_count_devices(int *total_out, acc_error *err)
{
    int total = 0, n;
    acc_status st = CU(cuDeviceGetCount, (&total));

    *total_out = total;
    if (st != ACC_OK) {
        return st;
    }
    n = cu.norder > 0 ? cu.norder : total;
    if (n > ACC_MAX_DEVICES) {
        n = ACC_MAX_DEVICES;
    }
    for (int i = 0; i < n; i++) {
        int ordinal = cu.norder > 0 ? cu.order[i] : i;

        /* The dispatcher refuses an order beyond the driver's count. */
        if (ordinal < total) {
            st = CU(cuDeviceGet, (&cu.devices[i], ordinal));
            if (st != ACC_OK) {
                return st;
            }
        }
    }
    cu.count = n;
    return ACC_OK;
}

static acc_status
cuda_probe(acc_probe_result *out, acc_error *err)
{
    const char *path = getenv("ACCELERATOR_CUDA_LIBRARY");
    int version = 0, count = 0;
    acc_status st;

    if (path == NULL || path[0] == '\0') {
        path = CUDA_DEFAULT_LIBRARY;
    }
    out->library = path;
    cu.library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (cu.library == NULL) {
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                      "cannot load the CUDA driver: %s", dlerror());
        return ACC_ERR_NO_ACCELERATOR;
    }
    out->loaded = 1;
    st = cuda_resolve(err);
    if (st != ACC_OK) {
        return st;
    }
    /* cuDriverGetVersion needs no cuInit: read it first, so the report
     * names the driver even when initialisation fails (no GPU visible). */
    if (cu.fn.cuDriverGetVersion(&version) == CUDA_SUCCESS) {
        out->driver_version = version;
        snprintf(out->driver_version_text, sizeof(out->driver_version_text),
                 "%d.%d", version / 1000, version % 1000 / 10);
    }
    else {
        acc_trace("cuda: cuDriverGetVersion failed; version unknown");
    }
    if (acc_cuda_nvml_count(&count, out->counted_by,
                            sizeof(out->counted_by))) {
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");

        if (count == 0) {
            acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                          "no NVIDIA GPU is visible: NVML counts none%s%s%s",
                          visible ? " after CUDA_VISIBLE_DEVICES='" : "",
                          visible ? visible : "", visible ? "'" : "");
            return ACC_ERR_NO_ACCELERATOR;
        }
        out->device_count = count;
        out->deferred = 1;
        return ACC_OK;
    }
    acc_trace("cuda: counting with %s", out->counted_by);
    st = cuda_init_driver(path, err);
    if (st == ACC_OK) {
        st = cuda_count_devices(&count, err);
    }
    if (st == ACC_OK) {
        out->device_count = cu.count;
    }
    return st;
}

static acc_status
cuda_initialize(int *device_count, acc_error *err)
{
    const char *path = getenv("ACCELERATOR_CUDA_LIBRARY");
    int total = 0;
    acc_status st;

    st = cuda_init_driver(path && path[0] ? path : CUDA_DEFAULT_LIBRARY,
                          err);
    if (st == ACC_OK) {
        st = cuda_count_devices(&total, err);
    }
    *device_count = total;
    return st;
}

static acc_status
cuda_select_devices(const int *order, int count, acc_error *err)
{
    CUdevice probed[ACC_MAX_DEVICES];

    (void)err;
    memcpy(cu.order, order, (size_t)count * sizeof(*order));
    cu.norder = count;
    if (cu.count > 0) {
        /* Counted by cuInit: the table exists; reorder it. */
        memcpy(probed, cu.devices, sizeof(probed));
        for (int i = 0; i < count; i++) {
            cu.devices[i] = probed[order[i]];
        }
        cu.count = count;
    }
    return ACC_OK;
}

static void
cuda_shutdown(void)
{
    acc_error scratch;
    acc_error *err = &scratch;

    for (int i = 0; i < cu.count; i++) {
        if (atomic_load(&cu.contexts[i]) != NULL) {
            (void)CU(cuDevicePrimaryCtxRelease, (cu.devices[i]));
            atomic_store(&cu.contexts[i], NULL);
        }
    }
}

static int
cuda_initialized_elsewhere(void)
{
    int count = 0;

    /* Before cuInit (by anyone) the driver answers NOT_INITIALIZED; this
     * call changes nothing either way. */
    return cu.fn.cuDeviceGetCount != NULL
           && cu.fn.cuDeviceGetCount(&count) == CUDA_SUCCESS;
}

static void
cuda_after_fork_child(void)
{
    pthread_mutex_init(&cu.lock, NULL);
}

/* Contexts --------------------------------------------------------------- */

/* The device's primary context, retained once per process. */
static acc_status
cuda_context(int device, CUcontext *ctx, acc_error *err)
{
    acc_status st = ACC_OK;

    *ctx = atomic_load_explicit(&cu.contexts[device], memory_order_acquire);
    if (*ctx != NULL) {
        return ACC_OK;
    }
    pthread_mutex_lock(&cu.lock);
    *ctx = atomic_load_explicit(&cu.contexts[device], memory_order_relaxed);
    if (*ctx == NULL) {
        st = CU(cuDevicePrimaryCtxRetain, (ctx, cu.devices[device]));
        if (st == ACC_OK) {
            atomic_store_explicit(&cu.contexts[device], *ctx,
                                  memory_order_release);
        }
    }
    pthread_mutex_unlock(&cu.lock);
    return st;
}

/* Make device's context current for one operation; *pushed says whether
 * cuda_leave must pop it.  A thread already on that context pays one
 * cuCtxGetCurrent. */
static acc_status
cuda_enter(int device, int *pushed, acc_error *err)
{
    CUcontext ctx, current = NULL;
    acc_status st = cuda_context(device, &ctx, err);

    *pushed = 0;
    if (st == ACC_OK) {
        st = CU(cuCtxGetCurrent, (&current));
    }
    if (st == ACC_OK && current != ctx) {
        st = CU(cuCtxPushCurrent, (ctx));
        *pushed = st == ACC_OK;
    }
    return st;
}

static acc_status
cuda_leave(int pushed, acc_status st, acc_error *err)
{
    acc_error pop_error;
    CUcontext popped;
    acc_status pop;

    if (!pushed) {
        return st;
    }
    /* Keep the first error: it is the one the user needs. */
    pop = cuda_check(cu.fn.cuCtxPopCurrent(&popped), "cuCtxPopCurrent",
                     st == ACC_OK ? err : &pop_error);
    return st == ACC_OK ? pop : st;
}

static acc_status
cuda_device_activate(int device, acc_error *err)
{
    CUcontext ctx;
    acc_status st = cuda_context(device, &ctx, err);

    if (st == ACC_OK) {
        st = CU(cuCtxSetCurrent, (ctx));
    }
    return st;
}

static acc_status
cuda_device_synchronize(int device, acc_error *err)
{
    unsigned flags = 0;
    int active = 0;
    int pushed;
    acc_status st;

    /* Another library (the CUDA runtime, torch, CuPy) may have queued
     * work on the device's primary context without us: wait for it when
     * that context is active.  An inactive one has no work, and is not
     * made by asking. */
    if (atomic_load_explicit(&cu.contexts[device], memory_order_acquire)
        == NULL) {
        st = CU(cuDevicePrimaryCtxGetState,
                (cu.devices[device], &flags, &active));
        if (st != ACC_OK || !active) {
            return st;
        }
    }
    st = cuda_enter(device, &pushed, err);
    if (st == ACC_OK) {
        st = CU(cuCtxSynchronize, ());
    }
    return cuda_leave(pushed, st, err);
}

static acc_status
cuda_device_properties(int device, acc_device_properties *p,
                       acc_error *err)
{
    CUdevice dev = cu.devices[device];
    CUuuid uuid;
    size_t total = 0;
    int domain = 0, bus = 0, slot = 0, value = 0;
    acc_status st;

    st = CU(cuDeviceGetName, (p->name, (int)sizeof(p->name), dev));
    if (st == ACC_OK) {
        st = CU(cuDeviceGetUuid, (&uuid, dev));
        memcpy(p->uuid, uuid.bytes, sizeof(p->uuid));
    }
    if (st == ACC_OK) {
        st = CU(cuDeviceTotalMem, (&total, dev));
        p->total_memory = total;
    }
#define CUDA_ATTRIBUTE(attr, dest)                                \
    if (st == ACC_OK) {                                           \
        st = CU(cuDeviceGetAttribute, (&value, attr, dev));       \
        dest = value;                                             \
    }
    CUDA_ATTRIBUTE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                   p->multi_processor_count)
    CUDA_ATTRIBUTE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, p->major)
    CUDA_ATTRIBUTE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, p->minor)
    CUDA_ATTRIBUTE(CU_DEVICE_ATTRIBUTE_INTEGRATED, p->integrated)
    CUDA_ATTRIBUTE(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, domain)
    CUDA_ATTRIBUTE(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, bus)
    /* "PCI device id" is the slot in domain:bus:slot.function, not the
     * product id, which the driver API does not report (0: unknown). */
    CUDA_ATTRIBUTE(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, slot)
#undef CUDA_ATTRIBUTE
    if (st == ACC_OK) {
        /* Every CUDA device computes in double; half arithmetic came with
         * compute capability 5.3, bfloat16 with 8.0. */
        p->float_types = ACC_FLOAT_64;
        if (p->major > 5 || (p->major == 5 && p->minor >= 3)) {
            p->float_types |= ACC_FLOAT_16;
        }
        if (p->major >= 8) {
            p->float_types |= ACC_FLOAT_BF16;
        }
        p->vendor_id = 0x10de; /* NVIDIA */
        snprintf(p->pci_bus_id, sizeof(p->pci_bus_id), "%04x:%02x:%02x.0",
                 domain, bus, slot);
    }
    return st;
}

static acc_status
cuda_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
                 acc_error *err)
{
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuMemGetInfo, (free_bytes, total_bytes));
    }
    return cuda_leave(pushed, st, err);
}

/* Memory ----------------------------------------------------------------- */

/*
 * cuMemAlloc/cuMemFree, not the stream-ordered cuMemAllocAsync/
 * cuMemFreeAsync: the allocator above (allocator.c) orders frees behind
 * events itself and keeps torch's statistics of the segments it owns,
 * which the driver's pools do not report; memory pools are missing on
 * some platforms (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0 under
 * some vGPUs and before CUDA 11.2), and pool memory is only safe to use on
 * another stream after synchronisation.  cuMemFree may synchronise the
 * device; the caching allocator is what keeps it off the hot path.
 */

static acc_status
cuda_mem_alloc(int device, size_t nbytes, uintptr_t *ptr, acc_error *err)
{
    CUdeviceptr p = 0;
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuMemAlloc, (&p, nbytes));
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        *ptr = (uintptr_t)p;
    }
    else if (p != 0) {
        /* Made, but restoring the caller's context failed: no leak. */
        (void)cu.fn.cuMemFree(p);
    }
    return st;
}

static acc_status
cuda_mem_free(int device, uintptr_t ptr, acc_error *err)
{
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuMemFree, ((CUdeviceptr)ptr));
    }
    return cuda_leave(pushed, st, err);
}

static acc_status
cuda_host_alloc(int device, size_t nbytes, void **ptr, acc_error *err)
{
    void *p = NULL;
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    /* Portable: page-locked for every context, so any device copies it
     * asynchronously. */
    if (st == ACC_OK) {
        st = CU(cuMemHostAlloc, (&p, nbytes, CU_MEMHOSTALLOC_PORTABLE));
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        *ptr = p;
    }
    else if (p != NULL) {
        (void)cu.fn.cuMemFreeHost(p);
    }
    return st;
}

static acc_status
cuda_host_free(int device, void *ptr, acc_error *err)
{
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuMemFreeHost, (ptr));
    }
    return cuda_leave(pushed, st, err);
}

/* Copies and fills run with the stream's device current: the driver
 * checks pointers against the current context. */
static acc_status
cuda_mem_copy(acc_stream *s, const acc_copy *c, acc_error *err)
{
    CUstream h = (CUstream)s->handle;
    CUcontext dst_ctx, src_ctx;
    int pushed;
    acc_status st = cuda_enter(s->device, &pushed, err);

    if (st != ACC_OK) {
        return st;
    }
    /* Pageable host memory needs nothing more: the driver returns from
     * an asynchronous copy only once the host side may be reused (it
     * stages a pageable source, and waits for a pageable destination). */
    switch (c->kind) {
    case ACC_COPY_H2D:
        st = CU(cuMemcpyHtoDAsync, ((CUdeviceptr)c->dst,
                                    (const void *)c->src, c->nbytes, h));
        break;
    case ACC_COPY_D2H:
        st = CU(cuMemcpyDtoHAsync, ((void *)c->dst, (CUdeviceptr)c->src,
                                    c->nbytes, h));
        break;
    case ACC_COPY_D2D:
        st = CU(cuMemcpyDtoDAsync, ((CUdeviceptr)c->dst,
                                    (CUdeviceptr)c->src, c->nbytes, h));
        break;
    case ACC_COPY_PEER:
        st = cuda_context(c->dst_device, &dst_ctx, err);
        if (st == ACC_OK) {
            st = cuda_context(c->src_device, &src_ctx, err);
        }
        if (st == ACC_OK) {
            st = CU(cuMemcpyPeerAsync,
                    ((CUdeviceptr)c->dst, dst_ctx, (CUdeviceptr)c->src,
                     src_ctx, c->nbytes, h));
        }
        break;
    }
    return cuda_leave(pushed, st, err);
}

static acc_status
cuda_mem_fill(acc_stream *s, uintptr_t dst, unsigned char value,
              size_t nbytes, acc_error *err)
{
    int pushed;
    acc_status st = cuda_enter(s->device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuMemsetD8Async, ((CUdeviceptr)dst, value, nbytes,
                                  (CUstream)s->handle));
    }
    return cuda_leave(pushed, st, err);
}

static acc_status
cuda_pointer_info(uintptr_t ptr, acc_pointer_info *info, acc_error *err)
{
    unsigned int type = 0;
    int ordinal = -1;
    CUresult rc;

    info->kind = ACC_POINTER_UNKNOWN;
    info->device = -1;
    rc = cu.fn.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                     (CUdeviceptr)ptr);
    if (rc == CUDA_ERROR_INVALID_VALUE) {
        /* Memory the driver never saw: not an error here. */
        return ACC_OK;
    }
    if (rc != CUDA_SUCCESS) {
        return cuda_fail("cuPointerGetAttribute", rc, err);
    }
    if (type == CU_MEMORYTYPE_HOST) {
        info->kind = ACC_POINTER_HOST;
        return ACC_OK;
    }
    if (CU(cuPointerGetAttribute, (&ordinal,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   (CUdeviceptr)ptr)) != ACC_OK) {
        return ACC_ERR_DRIVER;
    }
    for (int i = 0; i < cu.count; i++) {
        if (cu.devices[i] == ordinal) {
            info->device = i;
        }
    }
    info->kind = type == CU_MEMORYTYPE_UNIFIED ? ACC_POINTER_SHARED
                                               : ACC_POINTER_DEVICE;
    return ACC_OK;
}

/* The driver finds an allocation only among the current context's (the
 * device's primary context, pushed for the call). */
static acc_status
cuda_pointer_range(int device, uintptr_t ptr, uintptr_t *base,
                   size_t *size, acc_error *err)
{
    CUdeviceptr b = 0;
    size_t n = 0;
    CUresult rc;
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        rc = cu.fn.cuMemGetAddressRange(&b, &n, (CUdeviceptr)ptr);
        if (rc == CUDA_ERROR_NOT_FOUND) {
            st = ACC_ERR_NOT_FOUND;
        }
        else if (rc != CUDA_SUCCESS) {
            st = cuda_fail("cuMemGetAddressRange", rc, err);
        }
    }
    *base = (uintptr_t)b;
    *size = n;
    return cuda_leave(pushed, st, err);
}

/* Streams ---------------------------------------------------------------- */

/*
 * These stream and event slots have a twin in hip.c that reads alike line
 * by line, since HIP copies this API.  They stay two copies on purpose:
 * a backend uses only the backend contract, the base and its own folder,
 * so one copy for both would be a template header in the public include
 * folder, filled in by some twenty-five macros per backend (handle types,
 * entry points, flags, result codes, how the device is made current) for
 * slots of five to fifteen lines that make one driver call each.  It
 * would hide the slots from this file's reader and bind plugins that
 * compile against that folder to its macros.  The copies differ where
 * the drivers do (a context pushed here, a current device there;
 * cuEventCreate, hipEventCreateWithFlags): a fix to one is a fix to look
 * for in the other.
 */

static inline CUstream
cuda_stream(const acc_stream *s)
{
    return (CUstream)s->handle;
}

/* The legacy default stream (handle 0) means "the current context's", so
 * it needs the device's context current; explicit handles do not. */
static acc_status
cuda_enter_stream(const acc_stream *s, int *pushed, acc_error *err)
{
    if (s->handle != 0) {
        *pushed = 0;
        return ACC_OK;
    }
    return cuda_enter(s->device, pushed, err);
}

static acc_status
cuda_stream_default(int device, acc_stream *s, acc_error *err)
{
    (void)device;
    (void)err;
    s->handle = 0;
    s->priority = 0;
    return ACC_OK;
}

static acc_status
cuda_stream_priority_range(int device, int *least, int *greatest,
                           acc_error *err)
{
    int pushed;
    acc_status st = ACC_OK;

    if (!atomic_load_explicit(&cu.have_range[device],
                              memory_order_acquire)) {
        st = cuda_enter(device, &pushed, err);
        if (st == ACC_OK) {
            st = CU(cuCtxGetStreamPriorityRange,
                    (&cu.least[device], &cu.greatest[device]));
        }
        st = cuda_leave(pushed, st, err);
        if (st != ACC_OK) {
            return st;
        }
        atomic_store_explicit(&cu.have_range[device], 1,
                              memory_order_release);
    }
    *least = cu.least[device];
    *greatest = cu.greatest[device];
    return ACC_OK;
}

static acc_status
cuda_stream_create(acc_stream *s, acc_error *err)
{
    CUstream handle = NULL;
    int pushed;
    acc_status st = cuda_enter(s->device, &pushed, err);

    /* Non-blocking, as torch's pool streams: work on them does not
     * serialise with the legacy default stream. */
    if (st == ACC_OK) {
        st = CU(cuStreamCreateWithPriority,
                (&handle, CU_STREAM_NON_BLOCKING, s->priority));
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        s->handle = (uintptr_t)handle;
    }
    else if (handle != NULL) {
        /* Made, but restoring the caller's context failed: no leak. */
        (void)cu.fn.cuStreamDestroy(handle);
    }
    return st;
}

static void
cuda_stream_destroy(acc_stream *s)
{
    acc_error scratch;
    acc_error *err = &scratch;

    if (CU(cuStreamDestroy, (cuda_stream(s))) != ACC_OK) {
        acc_trace("cuda: %s", err->message);
    }
}

static acc_status
cuda_ready(const char *api, CUresult code, acc_error *err)
{
    if (code == CUDA_SUCCESS) {
        return ACC_OK;
    }
    if (code == CUDA_ERROR_NOT_READY) {
        return ACC_NOT_READY;
    }
    return cuda_fail(api, code, err);
}

static acc_status
cuda_stream_query(acc_stream *s, acc_error *err)
{
    int pushed;
    acc_status st;

    if (s->handle != 0) {
        /* The hot path: one driver call. */
        return cuda_ready("cuStreamQuery",
                          cu.fn.cuStreamQuery(cuda_stream(s)), err);
    }
    st = cuda_enter(s->device, &pushed, err);
    if (st == ACC_OK) {
        st = cuda_ready("cuStreamQuery", cu.fn.cuStreamQuery(NULL), err);
    }
    return cuda_leave(pushed, st, err);
}

static acc_status
cuda_stream_synchronize(acc_stream *s, acc_error *err)
{
    int pushed;
    acc_status st = cuda_enter_stream(s, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuStreamSynchronize, (cuda_stream(s)));
    }
    return cuda_leave(pushed, st, err);
}

static acc_status
cuda_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err)
{
    int pushed;
    acc_status st = cuda_enter_stream(s, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuStreamWaitEvent, (cuda_stream(s), (CUevent)e->native, 0));
    }
    return cuda_leave(pushed, st, err);
}

/* Events ----------------------------------------------------------------- */

static acc_status
cuda_event_create(acc_event *e, acc_error *err)
{
    CUevent event = NULL;
    unsigned flags = CU_EVENT_DEFAULT;
    int pushed;
    acc_status st;

    if (!(e->flags & ACC_EVENT_TIMING)) {
        flags |= CU_EVENT_DISABLE_TIMING;
    }
    if (e->flags & ACC_EVENT_BLOCKING) {
        flags |= CU_EVENT_BLOCKING_SYNC;
    }
    if (e->flags & ACC_EVENT_INTERPROCESS) {
        /* The driver refuses an interprocess event that times. */
        flags |= CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    }
    st = cuda_enter(e->device, &pushed, err);
    if (st == ACC_OK) {
        st = CU(cuEventCreate, (&event, flags));
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        e->native = event;
        e->handle = (uintptr_t)event;
    }
    else if (event != NULL) {
        /* Made, but restoring the caller's context failed: no leak. */
        (void)cu.fn.cuEventDestroy(event);
    }
    return st;
}

static void
cuda_event_destroy(acc_event *e)
{
    acc_error scratch;
    acc_error *err = &scratch;

    if (CU(cuEventDestroy, ((CUevent)e->native)) != ACC_OK) {
        acc_trace("cuda: %s", err->message);
    }
}

static acc_status
cuda_event_record(acc_event *e, acc_stream *s, acc_error *err)
{
    int pushed;
    acc_status st = cuda_enter_stream(s, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuEventRecord, ((CUevent)e->native, cuda_stream(s)));
    }
    return cuda_leave(pushed, st, err);
}

static acc_status
cuda_event_query(acc_event *e, acc_error *err)
{
    return cuda_ready("cuEventQuery", cu.fn.cuEventQuery((CUevent)e->native),
                      err);
}

static acc_status
cuda_event_synchronize(acc_event *e, acc_error *err)
{
    return CU(cuEventSynchronize, ((CUevent)e->native));
}

static acc_status
cuda_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                      acc_error *err)
{
    return cuda_ready("cuEventElapsedTime",
                      cu.fn.cuEventElapsedTime(ms, (CUevent)start->native,
                                               (CUevent)end->native),
                      err);
}

/* Interprocess memory and events ----------------------------------------- */

/*
 * The driver's 64-byte handles travel as they are (no descriptor: fd -1).
 * The calls need the device's context current: cuIpcOpenMemHandle maps
 * into it, and cuIpcCloseMemHandle refuses without one.
 */

static acc_status
cuda_ipc_mem_export(int device, uintptr_t base, acc_ipc_handle *h,
                    acc_error *err)
{
    CUipcMemHandle handle;
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuIpcGetMemHandle, (&handle, (CUdeviceptr)base));
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        memcpy(h->bytes, handle.reserved, sizeof(h->bytes));
        h->fd = -1;
    }
    return st;
}

static acc_status
cuda_ipc_mem_open(int device, const acc_ipc_handle *h, uintptr_t *base,
                  acc_error *err)
{
    CUipcMemHandle handle;
    CUdeviceptr p = 0;
    int pushed;
    acc_status st;

    memcpy(handle.reserved, h->bytes, sizeof(handle.reserved));
    st = cuda_enter(device, &pushed, err);
    if (st == ACC_OK) {
        st = CU(cuIpcOpenMemHandle,
                (&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        *base = (uintptr_t)p;
    }
    else if (p != 0) {
        /* Mapped, but restoring the caller's context failed: no leak. */
        (void)cu.fn.cuIpcCloseMemHandle(p);
    }
    return st;
}

static void
cuda_ipc_mem_close(int device, uintptr_t base)
{
    acc_error scratch;
    acc_error *err = &scratch;
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuIpcCloseMemHandle, ((CUdeviceptr)base));
    }
    if (cuda_leave(pushed, st, err) != ACC_OK) {
        acc_trace("cuda: %s", err->message);
    }
}

static acc_status
cuda_ipc_event_export(acc_event *e, acc_ipc_handle *h, acc_error *err)
{
    CUipcEventHandle handle;
    int pushed;
    acc_status st = cuda_enter(e->device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuIpcGetEventHandle, (&handle, (CUevent)e->native));
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        memcpy(h->bytes, handle.reserved, sizeof(h->bytes));
        h->fd = -1;
    }
    return st;
}

static acc_status
cuda_ipc_event_open(const acc_ipc_handle *h, acc_event *e, acc_error *err)
{
    CUipcEventHandle handle;
    CUevent event = NULL;
    int pushed;
    acc_status st;

    memcpy(handle.reserved, h->bytes, sizeof(handle.reserved));
    st = cuda_enter(e->device, &pushed, err);
    if (st == ACC_OK) {
        st = CU(cuIpcOpenEventHandle, (&event, handle));
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        e->native = event;
        e->handle = (uintptr_t)event;
    }
    else if (event != NULL) {
        (void)cu.fn.cuEventDestroy(event);
    }
    return st;
}

/* Kernels from source ------------------------------------------------- */

/*
 * CUDA C++ goes to NVRTC (nvrtc.c) with the device's compute capability;
 * the compiler object is the library's cuda_nvrtc, kept for the process.
 */

static acc_status
cuda_capability(int device, int *major, int *minor, acc_error *err)
{
    CUdevice dev = cu.devices[device];
    acc_status st;

    st = CU(cuDeviceGetAttribute,
            (major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    if (st == ACC_OK) {
        st = CU(cuDeviceGetAttribute,
                (minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    }
    return st;
}

static acc_status
cuda_compiler_open(int device, acc_code_format format, const char *library,
                   void **compiler, char *id, size_t size, acc_error *err)
{
    cuda_nvrtc *c = NULL;
    int major = 0, minor = 0;

    (void)format;    /* cuda-c++, the only one in source_formats */
    if (cuda_capability(device, &major, &minor, err) != ACC_OK
        || cuda_nvrtc_open(library, &c, err) != ACC_OK
        || cuda_nvrtc_describe(c, major, minor, id, size, err) != ACC_OK) {
        return err->status;
    }
    *compiler = c;
    return ACC_OK;
}

static acc_status
cuda_compile(int device, void *compiler, const char *source, size_t size,
             const char *const *options, int noptions,
             const char *const *names, int nnames, acc_compiled *out,
             acc_error *err)
{
    int major = 0, minor = 0;

    if (cuda_capability(device, &major, &minor, err) != ACC_OK) {
        return err->status;
    }
    return cuda_nvrtc_compile(compiler, acc_cuda_backend.name, major, minor,
                              source, size, options, noptions, names,
                              nnames, out, err);
}

/* Graphs ----------------------------------------------------------------- */

static acc_status
cuda_graph_capture_begin(acc_stream *s, int mode, acc_error *err)
{
    static const CUstreamCaptureMode modes[] = {
        CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CU_STREAM_CAPTURE_MODE_RELAXED};
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;

    /* Another library may be capturing on this stream already. */
    if (CU(cuStreamIsCapturing, (cuda_stream(s), &status)) != ACC_OK) {
        return ACC_ERR_DRIVER;
    }
    if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
        acc_error_set(err, ACC_ERR_STATE, "the stream is already being "
                      "captured (by another graph or library)");
        return ACC_ERR_STATE;
    }
    return CU(cuStreamBeginCapture, (cuda_stream(s), modes[mode]));
}

static acc_status
cuda_graph_capture_end(acc_stream *s, void **graph, int *capturing,
                       acc_error *err)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph g = NULL;
    acc_status st = CU(cuStreamEndCapture, (cuda_stream(s), &g));

    *graph = st == ACC_OK ? g : NULL;
    *capturing = 0;
    if (st != ACC_OK
        && cu.fn.cuStreamIsCapturing(cuda_stream(s), &status)
               == CUDA_SUCCESS) {
        /* An invalidated capture is ended; a refused end is not. */
        *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
    }
    return st;
}

static acc_status
cuda_graph_instantiate(int device, void *graph, void **exec, acc_error *err)
{
    CUgraphExec e = NULL;
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuGraphInstantiateWithFlags, (&e, (CUgraph)graph, 0));
    }
    st = cuda_leave(pushed, st, err);
    if (st != ACC_OK && e != NULL) {
        (void)cu.fn.cuGraphExecDestroy(e);
        e = NULL;
    }
    *exec = e;
    return st;
}

static acc_status
cuda_graph_launch(void *exec, acc_stream *s, acc_error *err)
{
    int pushed;
    acc_status st = cuda_enter_stream(s, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuGraphLaunch, ((CUgraphExec)exec, cuda_stream(s)));
    }
    return cuda_leave(pushed, st, err);
}

static void
cuda_graph_destroy(int device, void *graph, void *exec)
{
    acc_error scratch;
    acc_error *err = &scratch;

    (void)device;
    if (exec != NULL
        && CU(cuGraphExecDestroy, ((CUgraphExec)exec)) != ACC_OK) {
        acc_trace("cuda: %s", err->message);
    }
    if (graph != NULL && CU(cuGraphDestroy, ((CUgraph)graph)) != ACC_OK) {
        acc_trace("cuda: %s", err->message);
    }
}

/* Kernels ---------------------------------------------------------------- */

/* Bytes of each JIT log buffer cuModuleLoadDataEx fills. */
#define CUDA_LOG_BYTES 16384

/* Codes of cuModuleLoadDataEx that mean the JIT refused the code: a
 * BuildError with the error log.  Others (an image the driver cannot
 * read, or has no binary in for this device) are driver errors. */
static int
cuda_is_build_error(CUresult rc)
{
    return rc == CUDA_ERROR_INVALID_PTX
           || rc == CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
}

static acc_status
cuda_no_memory(acc_error *err)
{
    acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
    return ACC_ERR_HOST_MEMORY;
}

static acc_status
cuda_module_load(int device, acc_code_format format, const void *code,
                 size_t size, const char *options, void **module, char **log,
                 acc_error *err)
{
    /* The info log is asked for only so that the driver keeps it; the
     * error log is the build log. */
    CUjit_option keys[4] = {
        CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    char *logs = NULL, *text = NULL;
    void *values[4];
    const void *image = code;
    CUmodule m = NULL;
    CUresult rc = CUDA_SUCCESS;
    int pushed;
    acc_status st;

    *log = NULL;
    (void)options;   /* none: the descriptor's no_build_options */
    logs = calloc(2, CUDA_LOG_BYTES);
    if (logs != NULL && format == ACC_FORMAT_PTX) {
        /* The driver reads PTX up to its NUL. */
        text = malloc(size + 1);
        if (text != NULL) {
            memcpy(text, code, size);
            text[size] = '\0';
        }
        image = text;
    }
    if (logs == NULL || image == NULL) {
        free(logs);
        return cuda_no_memory(err);
    }
    values[0] = logs;
    values[1] = (void *)(uintptr_t)CUDA_LOG_BYTES;
    values[2] = logs + CUDA_LOG_BYTES;
    values[3] = (void *)(uintptr_t)CUDA_LOG_BYTES;
    st = cuda_enter(device, &pushed, err);
    if (st == ACC_OK) {
        rc = cu.fn.cuModuleLoadDataEx(&m, image, 4, keys, values);
        st = cuda_check(rc, "cuModuleLoadDataEx", err);
    }
    st = cuda_leave(pushed, st, err);
    free(text);
    if (st != ACC_OK && m != NULL) {
        /* Loaded, but restoring the caller's context failed: no leak. */
        (void)cu.fn.cuModuleUnload(m);
    }
    if (st != ACC_OK && rc != CUDA_SUCCESS && cuda_is_build_error(rc)) {
        logs[CUDA_LOG_BYTES - 1] = '\0';
        if (logs[0] != '\0') {
            *log = strdup(logs);
        }
        err->status = st = ACC_ERR_BUILD;
    }
    free(logs);
    if (st == ACC_OK) {
        *module = m;
    }
    return st;
}

static void
cuda_module_unload(int device, void *module)
{
    acc_error scratch;
    acc_error *err = &scratch;
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        st = CU(cuModuleUnload, ((CUmodule)module));
    }
    if (cuda_leave(pushed, st, err) != ACC_OK) {
        acc_trace("cuda: %s", err->message);
    }
}

/* The parameters' sizes, where the driver tells them (CUDA 12.4's
 * cuFuncGetParamInfo); nparams stays -1 (unknown) elsewhere. */
static acc_status
cuda_kernel_params(CUfunction f, acc_kernel_info *info, acc_error *err)
{
    size_t offset, size;
    CUresult rc;
    int n = 0;

    if (cu.fn.cuFuncGetParamInfo == NULL) {
        return ACC_OK;
    }
    for (;;) {
        rc = cu.fn.cuFuncGetParamInfo(f, (size_t)n, &offset, &size);
        if (rc == CUDA_ERROR_INVALID_VALUE) {
            break;  /* past the last parameter */
        }
        if (rc != CUDA_SUCCESS) {
            return cuda_fail("cuFuncGetParamInfo", rc, err);
        }
        if (n == ACC_MAX_KERNEL_PARAMS) {
            return ACC_OK;  /* more than we keep: unknown */
        }
        info->params[n].size = size;
        info->params[n].kind = ACC_PARAM_UNKNOWN;
        n++;
    }
    info->nparams = n;
    return ACC_OK;
}

/* What the driver tells of f and of its device's launch limits. */
static acc_status
cuda_kernel_info(int device, CUfunction f, acc_kernel_info *info,
                 acc_error *err)
{
    static const CUdevice_attribute block[3] = {
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
    static const CUdevice_attribute grid[3] = {
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
    CUdevice dev = cu.devices[device];
    int value = 0;
    acc_status st = ACC_OK;

#define CUDA_FUNC_ATTRIBUTE(attr, dest)                           \
    if (st == ACC_OK) {                                           \
        st = CU(cuFuncGetAttribute, (&value, attr, f));           \
        dest = value;                                             \
    }
    CUDA_FUNC_ATTRIBUTE(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                        info->max_threads_per_block)
    CUDA_FUNC_ATTRIBUTE(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                        info->shared_bytes)
    CUDA_FUNC_ATTRIBUTE(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                        info->local_bytes)
    CUDA_FUNC_ATTRIBUTE(CU_FUNC_ATTRIBUTE_NUM_REGS, info->registers)
    CUDA_FUNC_ATTRIBUTE(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        info->max_shared_bytes)
#undef CUDA_FUNC_ATTRIBUTE
    for (int i = 0; i < 3 && st == ACC_OK; i++) {
        st = CU(cuDeviceGetAttribute, (&value, block[i], dev));
        info->max_block[i] = value;
        if (st == ACC_OK) {
            st = CU(cuDeviceGetAttribute, (&value, grid[i], dev));
            info->max_grid[i] = value;
        }
    }
    return st == ACC_OK ? cuda_kernel_params(f, info, err) : st;
}

static acc_status
cuda_kernel_get(int device, void *module, const char *name, void **kernel,
                acc_kernel_info *info, acc_error *err)
{
    CUfunction f = NULL;
    CUresult rc;
    int pushed;
    acc_status st = cuda_enter(device, &pushed, err);

    if (st == ACC_OK) {
        rc = cu.fn.cuModuleGetFunction(&f, (CUmodule)module, name);
        st = rc == CUDA_ERROR_NOT_FOUND
                 ? ACC_ERR_NOT_FOUND
                 : cuda_check(rc, "cuModuleGetFunction", err);
    }
    if (st == ACC_OK) {
        st = cuda_kernel_info(device, f, info, err);
    }
    st = cuda_leave(pushed, st, err);
    if (st == ACC_OK) {
        *kernel = f;
    }
    return st;
}

static void
cuda_kernel_release(int device, void *kernel)
{
    /* A function belongs to its module: unloading it releases both. */
    (void)device;
    (void)kernel;
}

/* The names of a module's kernels, where the driver lists them (CUDA
 * 12.4: cuModuleEnumerateFunctions, cuFuncGetName). */
static acc_status
cuda_kernel_names(int device, void *module, char *names, size_t size,
                  acc_error *err)
{
    CUfunction *fs;
    unsigned int count = 0;
    size_t used = 0;
    acc_status st;

    (void)device;
    names[0] = '\0';
    if (cu.fn.cuModuleGetFunctionCount == NULL
        || cu.fn.cuModuleEnumerateFunctions == NULL
        || cu.fn.cuFuncGetName == NULL) {
        return ACC_OK;
    }
    st = CU(cuModuleGetFunctionCount, (&count, (CUmodule)module));
    if (st != ACC_OK || count == 0) {
        return st;
    }
    fs = calloc(count, sizeof(*fs));
    if (fs == NULL) {
        return cuda_no_memory(err);
    }
    st = CU(cuModuleEnumerateFunctions, (fs, count, (CUmodule)module));
    for (unsigned int i = 0; st == ACC_OK && i < count && used < size;
         i++) {
        const char *name = NULL;

        st = CU(cuFuncGetName, (&name, fs[i]));
        if (st == ACC_OK && name != NULL) {
            used += (size_t)snprintf(names + used, size - used, "%s%s",
                                     used > 0 ? ", " : "", name);
        }
    }
    free(fs);
    return st;
}

static acc_status
cuda_launch(acc_stream *s, void *kernel, const acc_launch_config *c,
            acc_error *err)
{
    void *stack[32];
    void **params = stack;
    int pushed;
    acc_status st;

    if (c->shared_mem > UINT_MAX) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "shared_mem is %zu "
                      "bytes, beyond what CUDA launches take (%u)",
                      c->shared_mem, UINT_MAX);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (c->nargs > (int)(sizeof(stack) / sizeof(stack[0]))) {
        params = malloc((size_t)c->nargs * sizeof(*params));
        if (params == NULL) {
            return cuda_no_memory(err);
        }
    }
    /* The driver copies each argument's bytes at the call. */
    for (int i = 0; i < c->nargs; i++) {
        params[i] = (void *)c->args[i].value;
    }
    st = cuda_enter_stream(s, &pushed, err);
    if (st == ACC_OK) {
        st = CU(cuLaunchKernel,
                ((CUfunction)kernel, c->grid[0], c->grid[1], c->grid[2],
                 c->block[0], c->block[1], c->block[2],
                 (unsigned int)c->shared_mem, cuda_stream(s),
                 c->nargs > 0 ? params : NULL, NULL));
    }
    if (params != stack) {
        free(params);
    }
    return cuda_leave(pushed, st, err);
}

/* cuda_host.c */
void cuda_attach(const acc_host *host);

const acc_backend acc_cuda_backend = {
    ACC_BACKEND_ABI,
    .attach = cuda_attach,
    .name = "cuda",
    .device_type = "cuda",
    .display_type = "CUDA",
    .processor_label = "multiprocessors",
    .torch_device_type = 1,  /* c10::DeviceType::CUDA */
    .dlpack_device_type = 2, /* kDLCUDA */
    .caps = ACC_CAP_CUDA_STREAM_PROTOCOL | ACC_CAP_NULL_STREAM_HANDLE,
    .probe = cuda_probe,
    .initialize = cuda_initialize,
    .initialized_elsewhere = cuda_initialized_elsewhere,
    .select_devices = cuda_select_devices,
    .shutdown = cuda_shutdown,
    .after_fork_child = cuda_after_fork_child,
    .device_activate = cuda_device_activate,
    .device_synchronize = cuda_device_synchronize,
    .device_properties = cuda_device_properties,
    .stream_default = cuda_stream_default,
    .stream_priority_range = cuda_stream_priority_range,
    .stream_create = cuda_stream_create,
    .stream_wrap = NULL,
    .stream_destroy = cuda_stream_destroy,
    .stream_query = cuda_stream_query,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_wait_event = cuda_stream_wait_event,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .memory_info = cuda_memory_info,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .mem_copy = cuda_mem_copy,
    .mem_fill = cuda_mem_fill,
    .pointer_info = cuda_pointer_info,
    .pointer_range = cuda_pointer_range,
    .graph_capture_begin = cuda_graph_capture_begin,
    .graph_capture_end = cuda_graph_capture_end,
    .graph_instantiate = cuda_graph_instantiate,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    /* cuModuleLoadDataEx's JIT options are not build flags. */
    .no_build_options = "it loads PTX and binaries already compiled; pass "
                        "options to NVRTC or nvcc instead",
    .code_formats = ACC_FORMAT_BIT(ACC_FORMAT_PTX)
                    | ACC_FORMAT_BIT(ACC_FORMAT_CUBIN)
                    | ACC_FORMAT_BIT(ACC_FORMAT_FATBIN)
                    | ACC_FORMAT_BIT(ACC_FORMAT_NATIVE),
    .module_load = cuda_module_load,
    .module_unload = cuda_module_unload,
    .kernel_get = cuda_kernel_get,
    .kernel_release = cuda_kernel_release,
    .launch = cuda_launch,
    .kernel_names = cuda_kernel_names,
    .source_formats = ACC_FORMAT_BIT(ACC_FORMAT_CUDA_CXX),
    .compiler_open = cuda_compiler_open,
    .compile = cuda_compile,
    .ipc_mem_export = cuda_ipc_mem_export,
    .ipc_mem_open = cuda_ipc_mem_open,
    .ipc_mem_close = cuda_ipc_mem_close,
    .ipc_event_export = cuda_ipc_event_export,
    .ipc_event_open = cuda_ipc_event_open,
};
