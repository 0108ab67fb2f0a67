/*
 * hip.c - the HIP runtime backend (AMD GPUs through ROCm).
 *
 * libamdhip64.so.5 (ROCm 5.2, Debian's libamdhip64-5) is opened at run
 * time and every entry point is resolved by name with dlsym: ROCm 5.2 has
 * no hipGetProcAddress, and exports each function of hip_api.h under its
 * plain name.
 *
 * HIP is a runtime API: there are no contexts to retain.  Each thread has
 * a current device (hipSetDevice), each device a null stream (handle 0,
 * the legacy default stream of that device), and the functions that take
 * no device or stream (hipMalloc, hipStreamCreateWithPriority, ...) act on
 * the calling thread's current device.  So operations on a device run
 * with that device current, set for the call and restored afterwards when
 * the thread's current device is another (hip_enter/hip_leave), as CUDA's
 * contexts are pushed and popped.
 *
 * The probe counts GPUs through the KFD topology when it can (hip_kfd.c)
 * and leaves hipInit to the first use (hip_initialize): every HIP call
 * initialises ROCm, and a process that did so cannot use the GPU in a
 * fork() child, so is_available() must not.
 *
 * Graphs come from stream capture (hipStreamBeginCapture, EndCapture,
 * hipGraphInstantiate, hipGraphLaunch), as the CUDA backend's.
 *
 * Kernels are code objects (hsaco; the test double's native objects are
 * handed over the same way) loaded with hipModuleLoadData and launched
 * with hipModuleLaunchKernel, captured like any work on a capturing
 * stream.
 */
#define _GNU_SOURCE
#define ACC_BACKEND_HOST hip_host
#include <accelerator/backend.h>
#include "hip_api.h"
#include "hip_kfd.h"
#include "hiprtc.h"

/* This backend's table (named in its messages). */
extern const acc_backend acc_hip_backend;

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#define HIP_DEFAULT_LIBRARY "libamdhip64.so.5"

#define HIP_FN_FIELD(name, ret, params) acc_pfn_##name name;

static struct {
    void *library;
    struct {
        ACC_HIP_FUNCTIONS(HIP_FN_FIELD)
        ACC_HIP_IPC_FUNCTIONS(HIP_FN_FIELD)
    } fn;
    int count;
    /* Device i is the runtime's device ids[i] (ACCELERATOR_VISIBLE_
     * DEVICES reorders). */
    int ids[ACC_MAX_DEVICES];
    int selected; /* select_devices ordered them */
    /* Priority range per device, read once. */
    atomic_int have_range[ACC_MAX_DEVICES];
    int least[ACC_MAX_DEVICES], greatest[ACC_MAX_DEVICES];
    /* Launch limits per device (block and grid per dimension), read
     * once. */
    atomic_int have_limits[ACC_MAX_DEVICES];
    int max_block[ACC_MAX_DEVICES][3], max_grid[ACC_MAX_DEVICES][3];
} hip;

#undef HIP_FN_FIELD

/* Errors ----------------------------------------------------------------- */

static const char *
hip_error_name(hipError_t code)
{
    const char *name;

    switch (code) {
#define HIP_NAME_CASE(n, value) \
    case n:                     \
        return #n;
        ACC_HIP_RESULTS(HIP_NAME_CASE)
#undef HIP_NAME_CASE
    default:
        break;
    }
    /* The runtime names the codes our table lacks, without a device;
     * ROCm 5.2 calls every code it does not know hipErrorUnknown. */
    name = hip.fn.hipGetErrorName != NULL ? hip.fn.hipGetErrorName(code)
                                          : NULL;
    if (name == NULL || strcmp(name, "hipErrorUnknown") == 0) {
        return "hipErrorUnrecognized";
    }
    return name;
}

static acc_status
hip_fail(const char *api, hipError_t code, acc_error *err)
{
    const char *text;
    acc_status st = code == hipErrorOutOfMemory ? ACC_ERR_OUT_OF_MEMORY
                                                : ACC_ERR_DRIVER;
    size_t n;

    acc_error_driver(err, acc_hip_backend.name, api, code,
                     hip_error_name(code), st);
    text = hip.fn.hipGetErrorString != NULL ? hip.fn.hipGetErrorString(code)
                                            : NULL;
    /* ROCm 5.2 describes a code by its name: add only a description. */
    if (text != NULL && text[0] != '\0'
        && strcmp(text, err->code_name) != 0) {
        n = strlen(err->message);
        acc_format(err->message + n, sizeof(err->message) - n, ": %s", text);
    }
    return st;
}

static inline acc_status
hip_check(hipError_t code, const char *api, acc_error *err)
{
    return code == hipSuccess ? ACC_OK : hip_fail(api, code, err);
}

/* Every runtime call goes through HIP(name, (args)): a status, err
 * filled. */
#define HIP(name, args) hip_check(hip.fn.name args, #name, err)

/* Probe ------------------------------------------------------------------ */

static acc_status
hip_resolve(acc_error *err)
{
    void *p;

#define HIP_RESOLVE(name, ret, params)                                     \
    p = dlsym(hip.library, #name);                                         \
    if (p == NULL) {                                                       \
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,                         \
                      "the HIP runtime lacks %s (ROCm 5.2 or newer is "    \
                      "needed)", #name);                                   \
        return ACC_ERR_NO_ACCELERATOR;                                     \
    }                                                                      \
    memcpy(&hip.fn.name, &p, sizeof(p));
    ACC_HIP_FUNCTIONS(HIP_RESOLVE)
    ACC_HIP_IPC_FUNCTIONS(HIP_RESOLVE)
#undef HIP_RESOLVE
    return ACC_OK;
}

/* hipInit and the runtime's count, with a hint for the failures users
 * meet. */
static acc_status
hip_init_runtime(int *count, acc_error *err)
{
    acc_status st = HIP(hipInit, (0));
    size_t n;

    *count = 0;
    if (st == ACC_OK) {
        st = HIP(hipGetDeviceCount, (count));
    }
    if (st != ACC_OK && (err->code == hipErrorNoDevice
                         || err->code == hipErrorInvalidDevice)) {
        /* What ROCm answers on a machine without an AMD GPU. */
        n = strlen(err->message);
        acc_format(err->message + n, sizeof(err->message) - n,
                   " (no AMD GPU is visible; check HIP_VISIBLE_DEVICES "
                   "and /dev/kfd)");
    }
    return st;
}

static acc_status
hip_probe(acc_probe_result *out, acc_error *err)
{
    const char *path = getenv("ACCELERATOR_HIP_LIBRARY");
    int version = 0, count = 0;
    acc_status st;

    if (path == NULL || path[0] == '\0') {
        path = HIP_DEFAULT_LIBRARY;
    }
    out->library = path;
    hip.library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (hip.library == NULL) {
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                      "cannot load the HIP runtime: %s", dlerror());
        return ACC_ERR_NO_ACCELERATOR;
    }
    out->loaded = 1;
    st = hip_resolve(err);
    if (st != ACC_OK) {
        return st;
    }
    if (acc_hip_kfd_count(&count, out->counted_by,
                          sizeof(out->counted_by))) {
        if (count == 0) {
            acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                          "no AMD GPU is visible: the %s lists none",
                          out->counted_by);
            return ACC_ERR_NO_ACCELERATOR;
        }
        /* hipDriverGetVersion would initialise the runtime too: the
         * version stays unknown until the first use. */
        out->device_count = count > ACC_MAX_DEVICES ? ACC_MAX_DEVICES
                                                    : count;
        out->deferred = 1;
        for (int i = 0; i < out->device_count; i++) {
            hip.ids[i] = i;
        }
        hip.count = out->device_count;
        return ACC_OK;
    }
    acc_trace("hip: counting with %s", out->counted_by);
    if (hip.fn.hipDriverGetVersion(&version) == hipSuccess) {
        /* HIP_VERSION: major * 10^7 + minor * 10^5 + patch. */
        out->driver_version = version;
        snprintf(out->driver_version_text, sizeof(out->driver_version_text),
                 "%d.%d.%d", version / 10000000, version / 100000 % 100,
                 version % 100000);
    }
    else {
        acc_trace("hip: hipDriverGetVersion failed; version unknown");
    }
    st = hip_init_runtime(&count, err);
    if (st != ACC_OK) {
        err->status = ACC_ERR_NO_ACCELERATOR;
        return ACC_ERR_NO_ACCELERATOR;
    }
    if (count > ACC_MAX_DEVICES) {
        count = ACC_MAX_DEVICES;
    }
    for (int i = 0; i < count; i++) {
        hip.ids[i] = i;
    }
    hip.count = count;
    out->device_count = count;
    return ACC_OK;
}

static acc_status
hip_initialize(int *device_count, acc_error *err)
{
    acc_status st = hip_init_runtime(device_count, err);

    /* The runtime is the authority now; the ids stay those the probe and
     * select_devices set (the dispatcher checks a visible order against
     * this count). */
    if (st == ACC_OK && !hip.selected && *device_count < hip.count) {
        hip.count = *device_count;
    }
    return st;
}

static acc_status
hip_select_devices(const int *order, int count, acc_error *err)
{
    (void)err;
    /* Probed devices are the runtime's ids 0..count-1. */
    memcpy(hip.ids, order, (size_t)count * sizeof(*order));
    hip.count = count;
    hip.selected = 1;
    return ACC_OK;
}

/* Current device --------------------------------------------------------- */

/* Make device current on this thread for one operation; *previous is the
 * runtime id to restore in hip_leave, or -1 when nothing changed. */
static acc_status
hip_enter(int device, int *previous, acc_error *err)
{
    int current = -1;
    acc_status st = HIP(hipGetDevice, (&current));

    *previous = -1;
    if (st == ACC_OK && current != hip.ids[device]) {
        st = HIP(hipSetDevice, (hip.ids[device]));
        *previous = st == ACC_OK ? current : -1;
    }
    return st;
}

static acc_status
hip_leave(int previous, acc_status st, acc_error *err)
{
    acc_error restore_error;
    acc_status restore;

    if (previous < 0) {
        return st;
    }
    /* Keep the first error: it is the one the user needs. */
    restore = hip_check(hip.fn.hipSetDevice(previous), "hipSetDevice",
                        st == ACC_OK ? err : &restore_error);
    return st == ACC_OK ? restore : st;
}

static acc_status
hip_device_activate(int device, acc_error *err)
{
    return HIP(hipSetDevice, (hip.ids[device]));
}

static acc_status
hip_device_synchronize(int device, acc_error *err)
{
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipDeviceSynchronize, ());
    }
    return hip_leave(previous, st, err);
}

static acc_status
hip_device_properties(int device, acc_device_properties *p, acc_error *err)
{
    int id = hip.ids[device];
    hipUUID uuid;
    size_t total = 0;
    int domain = 0, bus = 0, slot = 0, value = 0;
    acc_status st;

    st = HIP(hipDeviceGetName, (p->name, (int)sizeof(p->name), id));
    if (st == ACC_OK) {
        st = HIP(hipDeviceGetUuid, (&uuid, id));
        memcpy(p->uuid, uuid.bytes, sizeof(p->uuid));
    }
    if (st == ACC_OK) {
        st = HIP(hipDeviceTotalMem, (&total, id));
        p->total_memory = total;
    }
#define HIP_ATTRIBUTE(attr, dest)                                 \
    if (st == ACC_OK) {                                           \
        st = HIP(hipDeviceGetAttribute, (&value, attr, id));      \
        dest = value;                                             \
    }
    /* Compute units; the "compute capability" is the gfx version
     * (gfx90a: 9.0). */
    HIP_ATTRIBUTE(hipDeviceAttributeMultiprocessorCount,
                  p->multi_processor_count)
    HIP_ATTRIBUTE(hipDeviceAttributeComputeCapabilityMajor, p->major)
    HIP_ATTRIBUTE(hipDeviceAttributeComputeCapabilityMinor, p->minor)
    HIP_ATTRIBUTE(hipDeviceAttributeIntegrated, p->integrated)
    HIP_ATTRIBUTE(hipDeviceAttributePciDomainID, domain)
    HIP_ATTRIBUTE(hipDeviceAttributePciBusId, bus)
    /* The slot in domain:bus:slot.function, not the product id, which
     * the runtime's attributes do not report (0: unknown). */
    HIP_ATTRIBUTE(hipDeviceAttributePciDeviceId, slot)
#undef HIP_ATTRIBUTE
    if (st == ACC_OK) {
        /* Every GPU ROCm supports (gfx8 and later) computes in double
         * and half; bfloat16 from gfx9, where torch built for ROCm
         * reports it. */
        p->float_types = ACC_FLOAT_64 | ACC_FLOAT_16;
        if (p->major >= 9) {
            p->float_types |= ACC_FLOAT_BF16;
        }
        p->vendor_id = 0x1002; /* AMD */
        snprintf(p->pci_bus_id, sizeof(p->pci_bus_id), "%04x:%02x:%02x.0",
                 domain, bus, slot);
    }
    return st;
}

static acc_status
hip_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
                acc_error *err)
{
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipMemGetInfo, (free_bytes, total_bytes));
    }
    return hip_leave(previous, st, err);
}

/* Memory ----------------------------------------------------------------- */

/*
 * hipMalloc/hipFree, not the stream-ordered hipMallocAsync: as for CUDA,
 * the allocator above orders frees behind events itself and keeps torch's
 * statistics of the segments it owns.
 */

static acc_status
hip_mem_alloc(int device, size_t nbytes, uintptr_t *ptr, acc_error *err)
{
    void *p = NULL;
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipMalloc, (&p, nbytes));
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        *ptr = (uintptr_t)p;
    }
    else if (p != NULL) {
        /* Made, but restoring the caller's device failed: no leak. */
        (void)hip.fn.hipFree(p);
    }
    return st;
}

static acc_status
hip_mem_free(int device, uintptr_t ptr, acc_error *err)
{
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipFree, ((void *)ptr));
    }
    return hip_leave(previous, st, err);
}

static acc_status
hip_host_alloc(int device, size_t nbytes, void **ptr, acc_error *err)
{
    void *p = NULL;
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    /* Portable: page-locked for every device. */
    if (st == ACC_OK) {
        st = HIP(hipHostMalloc, (&p, nbytes, hipHostMallocPortable));
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        *ptr = p;
    }
    else if (p != NULL) {
        (void)hip.fn.hipHostFree(p);
    }
    return st;
}

static acc_status
hip_host_free(int device, void *ptr, acc_error *err)
{
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipHostFree, (ptr));
    }
    return hip_leave(previous, st, err);
}

static inline hipStream_t
hip_stream(const acc_stream *s)
{
    return (hipStream_t)s->handle;
}

/* The null stream (handle 0) means "the current device's", so work on it
 * needs its device current; explicit streams carry their device. */
static acc_status
hip_enter_stream(const acc_stream *s, int *previous, acc_error *err)
{
    if (s->handle != 0) {
        *previous = -1;
        return ACC_OK;
    }
    return hip_enter(s->device, previous, err);
}

/*
 * ROCm promises no staging of pageable host memory in hipMemcpyAsync: wait
 * for the stream, so that the caller may reuse (or read) its host side as
 * soon as the copy call returns.  Should the wait fail, the copy may still
 * be running: poll the stream until it is idle before reporting the
 * failure (the caller frees its memory at once).  Where the runtime
 * answers neither, nothing more can be asked of it.
 */
static acc_status
hip_wait_pageable(acc_stream *s, acc_error *err)
{
    const struct timespec pause = {0, 50000};
    acc_status st = HIP(hipStreamSynchronize, (hip_stream(s)));

    if (st != ACC_OK) {
        while (hip.fn.hipStreamQuery(hip_stream(s)) == hipErrorNotReady) {
            nanosleep(&pause, NULL);
        }
    }
    return st;
}

static acc_status
hip_mem_copy(acc_stream *s, const acc_copy *c, acc_error *err)
{
    static const hipMemcpyKind kinds[] = {
        [ACC_COPY_H2D] = hipMemcpyHostToDevice,
        [ACC_COPY_D2H] = hipMemcpyDeviceToHost,
        [ACC_COPY_D2D] = hipMemcpyDeviceToDevice,
    };
    int previous;
    acc_status st = hip_enter_stream(s, &previous, err);

    if (st != ACC_OK) {
        return st;
    }
    if (c->kind == ACC_COPY_PEER) {
        st = HIP(hipMemcpyPeerAsync,
                 ((void *)c->dst, hip.ids[c->dst_device],
                  (const void *)c->src, hip.ids[c->src_device], c->nbytes,
                  hip_stream(s)));
    }
    else {
        st = HIP(hipMemcpyAsync, ((void *)c->dst, (const void *)c->src,
                                  c->nbytes, kinds[c->kind],
                                  hip_stream(s)));
    }
    if (st == ACC_OK && (c->flags & ACC_COPY_PAGEABLE)) {
        st = hip_wait_pageable(s, err);
    }
    return hip_leave(previous, st, err);
}

static acc_status
hip_mem_fill(acc_stream *s, uintptr_t dst, unsigned char value,
             size_t nbytes, acc_error *err)
{
    int previous;
    acc_status st = hip_enter_stream(s, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipMemsetD8Async,
                 ((hipDeviceptr_t)dst, value, nbytes, hip_stream(s)));
    }
    return hip_leave(previous, st, err);
}

static acc_status
hip_pointer_info(uintptr_t ptr, acc_pointer_info *info, acc_error *err)
{
    hipPointerAttribute_t attr;
    hipError_t rc;

    memset(&attr, 0, sizeof(attr));
    info->kind = ACC_POINTER_UNKNOWN;
    info->device = -1;
    rc = hip.fn.hipPointerGetAttributes(&attr, (const void *)ptr);
    if (rc == hipErrorInvalidValue) {
        /* Memory the runtime never saw: not an error here. */
        return ACC_OK;
    }
    if (rc != hipSuccess) {
        return hip_fail("hipPointerGetAttributes", rc, err);
    }
    if (attr.isManaged) {
        info->kind = ACC_POINTER_SHARED;
    }
    else if (attr.memoryType == hipMemoryTypeHost) {
        info->kind = ACC_POINTER_HOST;
        return ACC_OK;
    }
    else {
        info->kind = ACC_POINTER_DEVICE;
    }
    for (int i = 0; i < hip.count; i++) {
        if (hip.ids[i] == attr.device) {
            info->device = i;
        }
    }
    return ACC_OK;
}

/* HIP has no contexts: the runtime finds an allocation of any device. */
static acc_status
hip_pointer_range(int device, uintptr_t ptr, uintptr_t *base, size_t *size,
                  acc_error *err)
{
    hipDeviceptr_t b = NULL;
    size_t n = 0;
    hipError_t rc;

    (void)device;
    rc = hip.fn.hipMemGetAddressRange(&b, &n, (hipDeviceptr_t)ptr);
    *base = (uintptr_t)b;
    *size = n;
    if (rc == hipErrorInvalidDevicePointer || rc == hipErrorNotFound) {
        /* ROCm 5.2 says so with the first, later ROCm with the second. */
        return ACC_ERR_NOT_FOUND;
    }
    if (rc != hipSuccess) {
        return hip_fail("hipMemGetAddressRange", rc, err);
    }
    return ACC_OK;
}

/* Streams ---------------------------------------------------------------- */

/*
 * These stream and event slots have a twin in cuda.c, kept as a second
 * copy on purpose (the comment there says why): a fix to one is a fix to
 * look for in the other.
 */

static acc_status
hip_stream_default(int device, acc_stream *s, acc_error *err)
{
    (void)device;
    (void)err;
    s->handle = 0;
    s->priority = 0;
    return ACC_OK;
}

static acc_status
hip_stream_priority_range(int device, int *least, int *greatest,
                          acc_error *err)
{
    int previous;
    acc_status st = ACC_OK;

    if (!atomic_load_explicit(&hip.have_range[device],
                              memory_order_acquire)) {
        st = hip_enter(device, &previous, err);
        if (st == ACC_OK) {
            st = HIP(hipDeviceGetStreamPriorityRange,
                     (&hip.least[device], &hip.greatest[device]));
        }
        st = hip_leave(previous, st, err);
        if (st != ACC_OK) {
            return st;
        }
        atomic_store_explicit(&hip.have_range[device], 1,
                              memory_order_release);
    }
    *least = hip.least[device];
    *greatest = hip.greatest[device];
    return ACC_OK;
}

static acc_status
hip_stream_create(acc_stream *s, acc_error *err)
{
    hipStream_t handle = NULL;
    int previous;
    acc_status st = hip_enter(s->device, &previous, err);

    /* Non-blocking, as torch's pool streams: work on them does not
     * serialise with the device's null stream. */
    if (st == ACC_OK) {
        st = HIP(hipStreamCreateWithPriority,
                 (&handle, hipStreamNonBlocking, s->priority));
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        s->handle = (uintptr_t)handle;
    }
    else if (handle != NULL) {
        /* Made, but restoring the caller's device failed: no leak. */
        (void)hip.fn.hipStreamDestroy(handle);
    }
    return st;
}

static void
hip_stream_destroy(acc_stream *s)
{
    acc_error scratch;
    acc_error *err = &scratch;

    if (HIP(hipStreamDestroy, (hip_stream(s))) != ACC_OK) {
        acc_trace("hip: %s", err->message);
    }
}

static acc_status
hip_ready(const char *api, hipError_t code, acc_error *err)
{
    if (code == hipSuccess) {
        return ACC_OK;
    }
    if (code == hipErrorNotReady) {
        return ACC_NOT_READY;
    }
    return hip_fail(api, code, err);
}

static acc_status
hip_stream_query(acc_stream *s, acc_error *err)
{
    int previous;
    acc_status st;

    if (s->handle != 0) {
        /* The hot path: one runtime call. */
        return hip_ready("hipStreamQuery",
                         hip.fn.hipStreamQuery(hip_stream(s)), err);
    }
    st = hip_enter(s->device, &previous, err);
    if (st == ACC_OK) {
        st = hip_ready("hipStreamQuery", hip.fn.hipStreamQuery(NULL), err);
    }
    return hip_leave(previous, st, err);
}

static acc_status
hip_stream_synchronize(acc_stream *s, acc_error *err)
{
    int previous;
    acc_status st = hip_enter_stream(s, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipStreamSynchronize, (hip_stream(s)));
    }
    return hip_leave(previous, st, err);
}

static acc_status
hip_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err)
{
    int previous;
    acc_status st = hip_enter_stream(s, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipStreamWaitEvent,
                 (hip_stream(s), (hipEvent_t)e->native, 0));
    }
    return hip_leave(previous, st, err);
}

/* Events ----------------------------------------------------------------- */

static acc_status
hip_event_create(acc_event *e, acc_error *err)
{
    hipEvent_t event = NULL;
    unsigned flags = hipEventDefault;
    int previous;
    acc_status st;

    if (!(e->flags & ACC_EVENT_TIMING)) {
        flags |= hipEventDisableTiming;
    }
    /* An event other processes can open: the runtime refuses timing on
     * one (the core never asks for it). */
    if (e->flags & ACC_EVENT_INTERPROCESS) {
        flags |= hipEventInterprocess | hipEventDisableTiming;
    }
    if (e->flags & ACC_EVENT_BLOCKING) {
        flags |= hipEventBlockingSync;
    }
    st = hip_enter(e->device, &previous, err);
    if (st == ACC_OK) {
        st = HIP(hipEventCreateWithFlags, (&event, flags));
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        e->native = event;
        e->handle = (uintptr_t)event;
    }
    else if (event != NULL) {
        /* Made, but restoring the caller's device failed: no leak. */
        (void)hip.fn.hipEventDestroy(event);
    }
    return st;
}

static void
hip_event_destroy(acc_event *e)
{
    acc_error scratch;
    acc_error *err = &scratch;

    if (HIP(hipEventDestroy, ((hipEvent_t)e->native)) != ACC_OK) {
        acc_trace("hip: %s", err->message);
    }
}

static acc_status
hip_event_record(acc_event *e, acc_stream *s, acc_error *err)
{
    int previous;
    acc_status st = hip_enter_stream(s, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipEventRecord, ((hipEvent_t)e->native, hip_stream(s)));
    }
    return hip_leave(previous, st, err);
}

static acc_status
hip_event_query(acc_event *e, acc_error *err)
{
    return hip_ready("hipEventQuery",
                     hip.fn.hipEventQuery((hipEvent_t)e->native), err);
}

static acc_status
hip_event_synchronize(acc_event *e, acc_error *err)
{
    return HIP(hipEventSynchronize, ((hipEvent_t)e->native));
}

static acc_status
hip_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                     acc_error *err)
{
    return hip_ready("hipEventElapsedTime",
                     hip.fn.hipEventElapsedTime(ms,
                                                (hipEvent_t)start->native,
                                                (hipEvent_t)end->native),
                     err);
}

/* Interprocess memory and events ---------------------------------------- */

/*
 * The runtime's own 64-byte handles, which need no descriptor (h->fd -1):
 * ROCm names the KFD's shared buffer in a memory handle and a shared
 * memory file of its signals in an event handle.  Each call acts on the
 * calling thread's current device (the exporting allocation's, the
 * device to map on), so it runs with the slot's device current.  The
 * core checks a handle's origin before a slot sees it, opens each once
 * per process and closes it before the exporter frees the memory.
 */

static acc_status
hip_ipc_mem_export(int device, uintptr_t base, acc_ipc_handle *h,
                   acc_error *err)
{
    hipIpcMemHandle_t handle;
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    memset(&handle, 0, sizeof(handle));
    if (st == ACC_OK) {
        st = HIP(hipIpcGetMemHandle, (&handle, (void *)base));
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        _Static_assert(sizeof(handle) == sizeof(h->bytes),
                       "a HIP handle fills acc_ipc_handle's bytes");
        memcpy(h->bytes, &handle, sizeof(h->bytes));
        h->fd = -1;
    }
    return st;
}

static acc_status
hip_ipc_mem_open(int device, const acc_ipc_handle *h, uintptr_t *base,
                 acc_error *err)
{
    hipIpcMemHandle_t handle;
    void *p = NULL;
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    memcpy(&handle, h->bytes, sizeof(handle));
    /* The only flag ROCm takes (peer access where the memory is another
     * device's). */
    if (st == ACC_OK) {
        st = HIP(hipIpcOpenMemHandle,
                 (&p, handle, hipIpcMemLazyEnablePeerAccess));
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        *base = (uintptr_t)p;
    }
    else if (p != NULL) {
        /* Mapped, but restoring the caller's device failed: no leak. */
        (void)hip.fn.hipIpcCloseMemHandle(p);
    }
    return st;
}

static void
hip_ipc_mem_close(int device, uintptr_t base)
{
    acc_error scratch;
    acc_error *err = &scratch;
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipIpcCloseMemHandle, ((void *)base));
    }
    if (hip_leave(previous, st, err) != ACC_OK) {
        acc_trace("hip: %s", err->message);
    }
}

static acc_status
hip_ipc_event_export(acc_event *e, acc_ipc_handle *h, acc_error *err)
{
    hipIpcEventHandle_t handle;
    acc_status st;

    memset(&handle, 0, sizeof(handle));
    st = HIP(hipIpcGetEventHandle, (&handle, (hipEvent_t)e->native));
    if (st == ACC_OK) {
        _Static_assert(sizeof(handle) == sizeof(h->bytes),
                       "a HIP handle fills acc_ipc_handle's bytes");
        memcpy(h->bytes, &handle, sizeof(h->bytes));
        h->fd = -1;
    }
    return st;
}

static acc_status
hip_ipc_event_open(const acc_ipc_handle *h, acc_event *e, acc_error *err)
{
    hipIpcEventHandle_t handle;
    hipEvent_t event = NULL;
    int previous;
    /* The event is made on the current device, as hipEventCreate's. */
    acc_status st = hip_enter(e->device, &previous, err);

    memcpy(&handle, h->bytes, sizeof(handle));
    if (st == ACC_OK) {
        st = HIP(hipIpcOpenEventHandle, (&event, handle));
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        e->native = event;
        e->handle = (uintptr_t)event;
    }
    else if (event != NULL) {
        /* Opened, but restoring the caller's device failed (or ROCm
         * handed out an event with its refusal): no leak. */
        (void)hip.fn.hipEventDestroy(event);
    }
    return st;
}

/* Kernels ---------------------------------------------------------------- */

/*
 * A code object is loaded as it is: nothing is compiled, so there is no
 * build log, and ROCm 5.2's hipModuleLoadDataEx ignores its JIT options
 * ("Options are not used"), so build options are refused rather than
 * dropped.  The module is the runtime's hipModule_t and a kernel its
 * hipFunction_t, which the module owns (nothing to release).  HIP 5.2 has
 * no call that tells a kernel's parameters: nparams stays unknown here,
 * and the core reads them from the code object's metadata (hsaco_table.c)
 * or the doubles' native table instead.
 */

static acc_status
hip_module_load(int device, acc_code_format format, const void *code,
                size_t size, const char *options, void **module, char **log,
                acc_error *err)
{
    hipModule_t m = NULL;
    int previous;
    acc_status st;

    /* The runtime reads the code object as far as its ELF headers say;
     * the dispatcher checked that they stay within size. */
    (void)size;
    *log = NULL;
    (void)options;   /* none: the descriptor's no_build_options */
    (void)format;    /* hsaco or native: one code object either way */
    /* A module is loaded for the calling thread's current device. */
    st = hip_enter(device, &previous, err);
    if (st == ACC_OK) {
        st = HIP(hipModuleLoadData, (&m, code));
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        *module = m;
    }
    else if (m != NULL) {
        /* Loaded, but restoring the caller's device failed: no leak. */
        (void)hip.fn.hipModuleUnload(m);
    }
    return st;
}

static void
hip_module_unload(int device, void *module)
{
    acc_error scratch;
    acc_error *err = &scratch;

    (void)device;
    if (HIP(hipModuleUnload, ((hipModule_t)module)) != ACC_OK) {
        acc_trace("hip: %s", err->message);
    }
}

/* device's block and grid limits per dimension, read once. */
static acc_status
hip_launch_limits(int device, acc_error *err)
{
    static const hipDeviceAttribute_t block[3] = {
        hipDeviceAttributeMaxBlockDimX, hipDeviceAttributeMaxBlockDimY,
        hipDeviceAttributeMaxBlockDimZ};
    static const hipDeviceAttribute_t grid[3] = {
        hipDeviceAttributeMaxGridDimX, hipDeviceAttributeMaxGridDimY,
        hipDeviceAttributeMaxGridDimZ};
    int id = hip.ids[device];
    acc_status st = ACC_OK;

    if (atomic_load_explicit(&hip.have_limits[device],
                             memory_order_acquire)) {
        return ACC_OK;
    }
    for (int i = 0; i < 3 && st == ACC_OK; i++) {
        st = HIP(hipDeviceGetAttribute,
                 (&hip.max_block[device][i], block[i], id));
        if (st == ACC_OK) {
            st = HIP(hipDeviceGetAttribute,
                     (&hip.max_grid[device][i], grid[i], id));
        }
    }
    if (st == ACC_OK) {
        atomic_store_explicit(&hip.have_limits[device], 1,
                              memory_order_release);
    }
    return st;
}

/* What the runtime tells of f (a kernel of device) into info. */
static acc_status
hip_function_info(int device, hipFunction_t f, acc_kernel_info *info,
                  acc_error *err)
{
    int threads = 0, shared = 0, local = 0, registers = 0, dynamic = 0;
    acc_status st = hip_launch_limits(device, err);

#define HIP_FUNC_ATTRIBUTE(attr, dest)                      \
    if (st == ACC_OK) {                                     \
        st = HIP(hipFuncGetAttribute, (&dest, attr, f));    \
    }
    HIP_FUNC_ATTRIBUTE(HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, threads)
    HIP_FUNC_ATTRIBUTE(HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, shared)
    HIP_FUNC_ATTRIBUTE(HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, local)
    HIP_FUNC_ATTRIBUTE(HIP_FUNC_ATTRIBUTE_NUM_REGS, registers)
    /* What a launch may ask for on top of the static shared memory. */
    HIP_FUNC_ATTRIBUTE(HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                       dynamic)
#undef HIP_FUNC_ATTRIBUTE
    if (st != ACC_OK) {
        return st;
    }
    info->max_threads_per_block = threads;
    info->shared_bytes = shared;
    info->local_bytes = local;
    info->registers = registers;
    info->max_shared_bytes = dynamic;
    for (int i = 0; i < 3; i++) {
        info->max_block[i] = hip.max_block[device][i];
        info->max_grid[i] = hip.max_grid[device][i];
    }
    return ACC_OK;
}

static acc_status
hip_kernel_get(int device, void *module, const char *name, void **kernel,
               acc_kernel_info *info, acc_error *err)
{
    hipFunction_t f = NULL;
    hipError_t rc;
    int previous;
    /* The function of the module for the current device. */
    acc_status st = hip_enter(device, &previous, err);

    if (st == ACC_OK) {
        rc = hip.fn.hipModuleGetFunction(&f, (hipModule_t)module, name);
        /* No such kernel: the dispatcher words it. */
        st = rc == hipErrorNotFound
                 ? ACC_ERR_NOT_FOUND
                 : hip_check(rc, "hipModuleGetFunction", err);
    }
    if (st == ACC_OK) {
        st = hip_function_info(device, f, info, err);
    }
    st = hip_leave(previous, st, err);
    if (st == ACC_OK) {
        *kernel = f;
    }
    return st;
}

static void
hip_kernel_release(int device, void *kernel)
{
    /* A hipFunction_t belongs to its module: hipModuleUnload frees it. */
    (void)device;
    (void)kernel;
}

static acc_status
hip_launch(acc_stream *s, void *kernel, const acc_launch_config *c,
           acc_error *err)
{
    /* kernelParams: a pointer to each argument's bytes, which the runtime
     * copies before it returns, for as many parameters as the kernel has.
     * ROCm 5.2 tells no parameter count, and where the core could not
     * read one from the code object a launch may pass fewer arguments
     * than the kernel takes: the rest read zero bytes (as many as a
     * kernel's arguments may fill, 4 KiB), never stale stack. */
    static const unsigned char zeros[4096];
    void *params[ACC_MAX_KERNEL_PARAMS];
    int previous;
    acc_status st;

    for (int i = 0; i < ACC_MAX_KERNEL_PARAMS; i++) {
        params[i] = (void *)(i < c->nargs ? c->args[i].value : zeros);
    }
    st = hip_enter_stream(s, &previous, err);
    /* shared_mem fits: the dispatcher held it to max_shared_bytes, an
     * int the runtime gave. */
    if (st == ACC_OK) {
        st = HIP(hipModuleLaunchKernel,
                 ((hipFunction_t)kernel, c->grid[0], c->grid[1], c->grid[2],
                  c->block[0], c->block[1], c->block[2],
                  (unsigned int)c->shared_mem, hip_stream(s),
                  c->nargs > 0 ? params : NULL, NULL));
    }
    return hip_leave(previous, st, err);
}

/* Graphs ----------------------------------------------------------------- */

/*
 * Stream capture, as the CUDA backend does it: work queued on a capturing
 * stream is recorded into a hipGraph_t, instantiated into a
 * hipGraphExec_t and replayed with one hipGraphLaunch.  The dispatcher
 * never captures on a null stream, so capturing streams carry their
 * device and need no hip_enter.
 */

static acc_status
hip_graph_capture_begin(acc_stream *s, int mode, acc_error *err)
{
    static const hipStreamCaptureMode modes[] = {
        hipStreamCaptureModeGlobal, hipStreamCaptureModeThreadLocal,
        hipStreamCaptureModeRelaxed};
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;

    /* Another library may be capturing on this stream already. */
    if (HIP(hipStreamIsCapturing, (hip_stream(s), &status)) != ACC_OK) {
        return ACC_ERR_DRIVER;
    }
    if (status != hipStreamCaptureStatusNone) {
        acc_error_set(err, ACC_ERR_STATE, "the stream is already being "
                      "captured (by another graph or library)");
        return ACC_ERR_STATE;
    }
    return HIP(hipStreamBeginCapture, (hip_stream(s), modes[mode]));
}

static acc_status
hip_graph_capture_end(acc_stream *s, void **graph, int *capturing,
                      acc_error *err)
{
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    hipGraph_t g = NULL;
    acc_status st = HIP(hipStreamEndCapture, (hip_stream(s), &g));

    *graph = st == ACC_OK ? g : NULL;
    *capturing = 0;
    if (st != ACC_OK
        && hip.fn.hipStreamIsCapturing(hip_stream(s), &status)
               == hipSuccess) {
        /* An invalidated capture is ended; a refused end is not. */
        *capturing = status != hipStreamCaptureStatusNone;
    }
    return st;
}

static acc_status
hip_graph_instantiate(int device, void *graph, void **exec, acc_error *err)
{
    hipGraphExec_t e = NULL;
    int previous;
    acc_status st = hip_enter(device, &previous, err);

    /* ROCm 5.2's signature; the error node and the log are optional. */
    if (st == ACC_OK) {
        st = HIP(hipGraphInstantiate, (&e, (hipGraph_t)graph, NULL, NULL,
                                       0));
    }
    st = hip_leave(previous, st, err);
    if (st != ACC_OK && e != NULL) {
        (void)hip.fn.hipGraphExecDestroy(e);
        e = NULL;
    }
    *exec = e;
    return st;
}

static acc_status
hip_graph_launch(void *exec, acc_stream *s, acc_error *err)
{
    int previous;
    acc_status st = hip_enter_stream(s, &previous, err);

    if (st == ACC_OK) {
        st = HIP(hipGraphLaunch, ((hipGraphExec_t)exec, hip_stream(s)));
    }
    return hip_leave(previous, st, err);
}

static void
hip_graph_destroy(int device, void *graph, void *exec)
{
    acc_error scratch;
    acc_error *err = &scratch;

    (void)device;
    if (exec != NULL
        && HIP(hipGraphExecDestroy, ((hipGraphExec_t)exec)) != ACC_OK) {
        acc_trace("hip: %s", err->message);
    }
    if (graph != NULL && HIP(hipGraphDestroy, ((hipGraph_t)graph))
                             != ACC_OK) {
        acc_trace("hip: %s", err->message);
    }
}

/* Kernels from source ------------------------------------------------- */

/*
 * HIP C++ goes to hiprtc (hiprtc.c) for the device's architecture as the
 * runtime names it in hipDeviceProp_t's gcnArchName
 * ("gfx90a:sramecc+:xnack-": the features too, so that the code object
 * matches the device's settings), read as bytes at ROCm 5's offset
 * (hip_api.h); ROCm 5.2 tells it by no attribute.
 */

static acc_status
hip_arch(int device, char *arch, size_t size, acc_error *err)
{
    _Alignas(max_align_t) unsigned char props[ACC_HIP_DEVICE_PROP_SIZE];
    const char *name = (const char *)props + ACC_HIP_DEVICE_PROP_GCN_ARCH_NAME;
    acc_status st;

    memset(props, 0, sizeof(props));
    st = HIP(hipGetDeviceProperties, ((hipDeviceProp_t *)props,
                                       hip.ids[device]));
    if (st != ACC_OK) {
        return st;
    }
    if (strncmp(name, "gfx", 3) != 0
        || memchr(name, '\0', ACC_HIP_GCN_ARCH_NAME_SIZE) == NULL
        || strlen(name) >= size) {
        acc_error_set(err, ACC_ERR_DRIVER, "the runtime names device %d's "
                      "architecture '%.40s': not a gfx target hiprtc can "
                      "compile for", device,
                      memchr(name, '\0', ACC_HIP_GCN_ARCH_NAME_SIZE) != NULL
                          ? name : "(not text)");
        return ACC_ERR_DRIVER;
    }
    snprintf(arch, size, "%s", name);
    return ACC_OK;
}

static acc_status
hip_compiler_open(int device, acc_code_format format, const char *library,
                  void **compiler, char *id, size_t size, acc_error *err)
{
    hip_hiprtc *c = NULL;
    char arch[ACC_HIP_GCN_ARCH_NAME_SIZE];

    (void)format;    /* hip-c++, the only one in source_formats */
    if (hip_arch(device, arch, sizeof(arch), err) != ACC_OK
        || hip_hiprtc_open(library, &c, err) != ACC_OK
        || hip_hiprtc_describe(c, arch, id, size, err) != ACC_OK) {
        return err->status;
    }
    *compiler = c;
    return ACC_OK;
}

static acc_status
hip_compile(int device, void *compiler, const char *source, size_t size,
            const char *const *options, int noptions,
            const char *const *names, int nnames, acc_compiled *out,
            acc_error *err)
{
    char arch[ACC_HIP_GCN_ARCH_NAME_SIZE];

    if (hip_arch(device, arch, sizeof(arch), err) != ACC_OK) {
        return err->status;
    }
    return hip_hiprtc_compile(compiler, acc_hip_backend.name, arch, source,
                              size, options, noptions, names, nnames, out,
                              err);
}

/* hip_host.c. */
void hip_attach(const acc_host *host);

const acc_backend acc_hip_backend = {
    ACC_BACKEND_ABI,
    .attach = hip_attach,
    /* Built from this folder as a plugin, the backend takes a name and
     * device type of its own (tests/plugin_hip: plugin_hip): no built-in
     * backend's may be taken twice. */
#ifdef ACC_HIP_NAME
    .name = ACC_HIP_NAME,
    .device_type = ACC_HIP_NAME,
#else
    .name = "hip",
    .device_type = "hip",
#endif
    .display_type = "HIP",
    .processor_label = "compute units",
    .torch_device_type = 6,   /* c10::DeviceType::HIP */
    .dlpack_device_type = 10, /* kDLROCM */
    .caps = ACC_CAP_NULL_STREAM_HANDLE | ACC_CAP_ROCM_STREAM_PROTOCOL,
    /* Code objects; an ELF is recognised as hsaco.  The test double's
     * native objects load the same way (format="native"). */
    .no_build_options = "the runtime compiles nothing when it loads a "
                        "finished code object",
    .source_formats = ACC_FORMAT_BIT(ACC_FORMAT_HIP_CXX),
    .compiler_open = hip_compiler_open,
    .compile = hip_compile,
    .code_formats = ACC_FORMAT_BIT(ACC_FORMAT_HSACO)
                    | ACC_FORMAT_BIT(ACC_FORMAT_NATIVE),
    /* As torch built for ROCm: torch.device("cuda", i) is HIP device i. */
    .device_type_alias = "cuda",
    .probe = hip_probe,
    .initialize = hip_initialize,
    .select_devices = hip_select_devices,
    .device_activate = hip_device_activate,
    .device_synchronize = hip_device_synchronize,
    .device_properties = hip_device_properties,
    .stream_default = hip_stream_default,
    .stream_priority_range = hip_stream_priority_range,
    .stream_create = hip_stream_create,
    .stream_destroy = hip_stream_destroy,
    .stream_query = hip_stream_query,
    .stream_synchronize = hip_stream_synchronize,
    .stream_wait_event = hip_stream_wait_event,
    .event_create = hip_event_create,
    .event_destroy = hip_event_destroy,
    .event_record = hip_event_record,
    .event_query = hip_event_query,
    .event_synchronize = hip_event_synchronize,
    .event_elapsed_ms = hip_event_elapsed_ms,
    .memory_info = hip_memory_info,
    .mem_alloc = hip_mem_alloc,
    .mem_free = hip_mem_free,
    .host_alloc = hip_host_alloc,
    .host_free = hip_host_free,
    .mem_copy = hip_mem_copy,
    .mem_fill = hip_mem_fill,
    .pointer_info = hip_pointer_info,
    .pointer_range = hip_pointer_range,
    .module_load = hip_module_load,
    .module_unload = hip_module_unload,
    .kernel_get = hip_kernel_get,
    .kernel_release = hip_kernel_release,
    .launch = hip_launch,
    .graph_capture_begin = hip_graph_capture_begin,
    .graph_capture_end = hip_graph_capture_end,
    .graph_instantiate = hip_graph_instantiate,
    .graph_launch = hip_graph_launch,
    .graph_destroy = hip_graph_destroy,
    .ipc_mem_export = hip_ipc_mem_export,
    .ipc_mem_open = hip_ipc_mem_open,
    .ipc_mem_close = hip_ipc_mem_close,
    .ipc_event_export = hip_ipc_event_export,
    .ipc_event_open = hip_ipc_event_open,
};
