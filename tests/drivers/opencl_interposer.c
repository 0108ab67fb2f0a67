/*
 * opencl_interposer.c - libopencl_interposer.so: the OpenCL library the
 * tests give the backend (ACCELERATOR_OPENCL_LIBRARY) instead of the ICD
 * loader.  It exports every function in ACC_OPENCL_FUNCTIONS and forwards
 * each call to the real ICD loader (FAKE_OCL_LIBRARY, default
 * libOpenCL.so.1), so a real runtime (PoCL in CI) does the work: real
 * queues, real asynchronous execution, real events and profiling times.
 * On the way it counts calls, injects faults and counts live references.
 *
 * An interposer rather than an ICD stub driver: a stub would have to
 * reimplement queues, events and profiling, and the point of the OpenCL
 * runs is that the backend meets a real runtime; forwarding keeps PoCL's
 * semantics and still reaches every call site with a fault.
 *
 * Control API for tests (ctypes), from double_control.h with prefix ocl:
 *   fake_ocl_call_count, fake_ocl_reset_counts, fake_ocl_fail,
 *   fake_ocl_clear_faults, fake_ocl_live("context" | "queue" | "event"):
 *   references the backend holds (creations and retains less releases,
 *   counted when the real call succeeded); fake_ocl_live("alloc" |
 *   "host_alloc"): live SVM allocations, coarse-grain (device memory)
 *   and fine-grain (host memory); "bad_access" and "guard_damage" (see
 *   Shared virtual memory below).
 *   int fake_ocl_enqueue_sleep(unsigned long long queue, double ms)
 *   int fake_ocl_enqueue_gate(unsigned long long queue, int *gate)
 *       Work that completes when the test calls fake_ocl_open_gate(*gate).
 *   int fake_ocl_open_gate(int gate)
 *   int fake_ocl_mem_range(addr, *base, *size): the live SVM allocation
 *       holding addr (1 device, 2 host memory, 0 none), as the other
 *       doubles' fake_<prefix>_mem_range
 *       Queues a native kernel that sleeps ms milliseconds on that command
 *       queue, and flushes it: timed work, like a kernel launch.  Returns
 *       the cl_int of the real calls (CL_INVALID_VALUE for a bad ms).
 *
 * Environment, read when the library is loaded:
 *   FAKE_OCL_LIBRARY  the real ICD loader (libOpenCL.so.1)
 *   FAKE_OCL_FAIL     faults installed at load: "name:nth:code,..."
 *   FAKE_OCL_SVM_CAPS what clGetDeviceInfo(CL_DEVICE_SVM_CAPABILITIES)
 *                     reports at most (a mask: 0 is a device without SVM)
 *   FAKE_OCL_HIDE_EXTENSIONS  extensions (space-separated) that
 *                     clGetDeviceInfo(CL_DEVICE_EXTENSIONS) leaves out, as
 *                     on a device without them ("cl_khr_fp64")
 *
 * Shared virtual memory: clSVMAlloc hands out the middle of a larger
 * allocation, with OCL_GUARD guard bytes before and after, written and
 * checked by the host (sound on CPU runtimes such as PoCL, where SVM is
 * host memory).  A copy or fill that reaches a guard or a freed
 * allocation, and a clSVMFree of memory that a queued copy or fill has
 * not finished with, count as bad accesses (reported on stderr; the
 * copy or fill then does nothing).  Freed allocations stay in quarantine
 * for a while, so that their addresses are not reused while a late
 * access could still be told apart.  A faulted clSVMFree frees nothing.
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../csrc/backends/opencl/opencl_api.h"
#include "double_control.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

/* Our declarations of the exported functions, from the backend's list. */
#define FAKE_DECLARE(name, ret, params) FAKE_EXPORT ret name params;
ACC_OPENCL_FUNCTIONS(FAKE_DECLARE)
#undef FAKE_DECLARE

FAKE_EXPORT int fake_ocl_enqueue_sleep(unsigned long long queue, double ms);
FAKE_EXPORT int fake_ocl_enqueue_gate(unsigned long long queue, int *gate);
FAKE_EXPORT int fake_ocl_open_gate(int gate);
FAKE_EXPORT int fake_ocl_mem_range(unsigned long long addr,
                                   unsigned long long *base,
                                   unsigned long long *size);

#define FAKE_FN_ID(name, ret, params) FN_##name,
enum { ACC_OPENCL_FUNCTIONS(FAKE_FN_ID) FN_COUNT };
#undef FAKE_FN_ID

#define FAKE_FN_NAME(name, ret, params) {#name, NULL},
static const dc_fn fake_fns[FN_COUNT] = {ACC_OPENCL_FUNCTIONS(FAKE_FN_NAME)};
#undef FAKE_FN_NAME

enum {
    LIVE_CONTEXT, LIVE_QUEUE, LIVE_EVENT, LIVE_ALLOC, LIVE_HOST_ALLOC,
    LIVE_BAD_ACCESS, LIVE_PROGRAM, LIVE_KERNEL, LIVE_KINDS
};
static const char *const live_kinds[LIVE_KINDS] = {
    "context", "queue", "event", "alloc", "host_alloc", "bad_access",
    "program", "kernel",
};
static long long svm_guard_damage(const char *kind);
static void svm_reset_detectors(void);
static atomic_llong g_calls[FN_COUNT];
static atomic_llong g_live[LIVE_KINDS];
static dc_control g_ctl = {
    DC_CONTROL_INIT("opencl interposer", fake_fns, g_calls, live_kinds,
                    g_live),
    .live_extra = svm_guard_damage,
    .reset_detectors = svm_reset_detectors,
};
static unsigned long long g_svm_caps_mask = ~0ULL;

DC_EXPORT_CONTROL(ocl, g_ctl)

/* The real entry points. */
#define FAKE_REAL_FIELD(name, ret, params) acc_pfn_##name name;
static struct {
    ACC_OPENCL_FUNCTIONS(FAKE_REAL_FIELD)
} real;
#undef FAKE_REAL_FIELD

typedef void (*native_fn)(void *);
typedef cl_int (*pfn_native_kernel)(cl_command_queue, native_fn, void *,
                                    size_t, cl_uint, const void *,
                                    const void **, cl_uint, const cl_event *,
                                    cl_event *);
static pfn_native_kernel real_native_kernel;
typedef cl_int (*pfn_retain_context)(cl_context);
static pfn_retain_context real_retain_context;

__attribute__((constructor)) static void
fake_ocl_load(void)
{
    const char *path = getenv("FAKE_OCL_LIBRARY");
    void *lib, *p;

    lib = dlopen(path != NULL && path[0] != '\0' ? path : "libOpenCL.so.1",
                 RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "opencl interposer: %s\n", dlerror());
        abort();
    }
#define FAKE_RESOLVE(name, ret, params)                                \
    p = dlsym(lib, #name);                                             \
    if (p == NULL) {                                                   \
        fprintf(stderr, "opencl interposer: no %s\n", #name);          \
        abort();                                                       \
    }                                                                  \
    memcpy(&real.name, &p, sizeof(p));
    ACC_OPENCL_FUNCTIONS(FAKE_RESOLVE)
#undef FAKE_RESOLVE
    p = dlsym(lib, "clEnqueueNativeKernel");
    memcpy(&real_native_kernel, &p, sizeof(p));
    p = dlsym(lib, "clRetainContext");
    memcpy(&real_retain_context, &p, sizeof(p));
    dc_env_faults(&g_ctl, "FAKE_OCL_FAIL");
    dc_env_ull(&g_ctl, "FAKE_OCL_SVM_CAPS", &g_svm_caps_mask);
}

/* Count the call; return the injected code from the function if due. */
#define ENTER(name)                                  \
    do {                                             \
        int enter_code_;                             \
        if (dc_enter(&g_ctl, FN_##name, &enter_code_)) { \
            return (cl_int)enter_code_;              \
        }                                            \
    } while (0)

/* The same for functions that return an object and an error code. */
#define ENTER_OBJECT(name, errcode_ret)                  \
    do {                                                 \
        int enter_code_;                                 \
        if (dc_enter(&g_ctl, FN_##name, &enter_code_)) { \
            if ((errcode_ret) != NULL) {                 \
                *(errcode_ret) = (cl_int)enter_code_;    \
            }                                            \
            return NULL;                                 \
        }                                                \
    } while (0)

static cl_int
counted(cl_int rc, int kind, long long delta)
{
    if (rc == CL_SUCCESS) {
        dc_live_add(&g_ctl, kind, delta);
    }
    return rc;
}

cl_int
clGetPlatformIDs(cl_uint num_entries, cl_platform_id *platforms,
                 cl_uint *num_platforms)
{
    ENTER(clGetPlatformIDs);
    return real.clGetPlatformIDs(num_entries, platforms, num_platforms);
}

cl_int
clGetPlatformInfo(cl_platform_id platform, cl_platform_info param_name,
                  size_t param_value_size, void *param_value,
                  size_t *param_value_size_ret)
{
    ENTER(clGetPlatformInfo);
    return real.clGetPlatformInfo(platform, param_name, param_value_size,
                                  param_value, param_value_size_ret);
}

cl_int
clGetDeviceIDs(cl_platform_id platform, cl_device_type device_type,
               cl_uint num_entries, cl_device_id *devices,
               cl_uint *num_devices)
{
    ENTER(clGetDeviceIDs);
    return real.clGetDeviceIDs(platform, device_type, num_entries, devices,
                               num_devices);
}

/* Remove each extension that FAKE_OCL_HIDE_EXTENSIONS names from the
 * space-separated list, in place. */
static void
hide_extensions(char *list, size_t size)
{
    const char *hide = getenv("FAKE_OCL_HIDE_EXTENSIONS");
    char word[128], *at;
    size_t n;
    int used;

    list[size - 1] = '\0';
    while (hide != NULL && sscanf(hide, " %127s%n", word, &used) == 1) {
        hide += used;
        n = strlen(word);
        for (at = strstr(list, word); at != NULL; at = strstr(at, word)) {
            if ((at == list || at[-1] == ' ')
                && (at[n] == '\0' || at[n] == ' ')) {
                memmove(at, at + n + (at[n] == ' '),
                        strlen(at + n + (at[n] == ' ')) + 1);
            }
            else {
                at += n;
            }
        }
    }
}

cl_int
clGetDeviceInfo(cl_device_id device, cl_device_info param_name,
                size_t param_value_size, void *param_value,
                size_t *param_value_size_ret)
{
    cl_int rc;

    ENTER(clGetDeviceInfo);
    rc = real.clGetDeviceInfo(device, param_name, param_value_size,
                              param_value, param_value_size_ret);
    if (rc == CL_SUCCESS && param_name == CL_DEVICE_SVM_CAPABILITIES
        && param_value != NULL
        && param_value_size >= sizeof(cl_device_svm_capabilities)) {
        *(cl_device_svm_capabilities *)param_value &= g_svm_caps_mask;
    }
    if (rc == CL_SUCCESS && param_name == CL_DEVICE_EXTENSIONS
        && param_value != NULL && param_value_size > 0) {
        hide_extensions(param_value, param_value_size);
    }
    return rc;
}

cl_context
clCreateContext(const cl_context_properties *properties, cl_uint num_devices,
                const cl_device_id *devices, acc_cl_context_notify pfn_notify,
                void *user_data, cl_int *errcode_ret)
{
    cl_context ctx;
    cl_int rc = CL_SUCCESS;

    ENTER_OBJECT(clCreateContext, errcode_ret);
    ctx = real.clCreateContext(properties, num_devices, devices, pfn_notify,
                               user_data, &rc);
    counted(ctx != NULL ? rc : CL_OUT_OF_RESOURCES, LIVE_CONTEXT, 1);
    if (errcode_ret != NULL) {
        *errcode_ret = rc;
    }
    return ctx;
}

cl_int
clReleaseContext(cl_context context)
{
    ENTER(clReleaseContext);
    return counted(real.clReleaseContext(context), LIVE_CONTEXT, -1);
}

cl_command_queue
clCreateCommandQueueWithProperties(cl_context context, cl_device_id device,
                                   const cl_queue_properties *properties,
                                   cl_int *errcode_ret)
{
    cl_command_queue q;
    cl_int rc = CL_SUCCESS;

    ENTER_OBJECT(clCreateCommandQueueWithProperties, errcode_ret);
    q = real.clCreateCommandQueueWithProperties(context, device, properties,
                                                &rc);
    counted(q != NULL ? rc : CL_OUT_OF_RESOURCES, LIVE_QUEUE, 1);
    if (errcode_ret != NULL) {
        *errcode_ret = rc;
    }
    return q;
}

cl_int
clGetCommandQueueInfo(cl_command_queue command_queue,
                      cl_command_queue_info param_name,
                      size_t param_value_size, void *param_value,
                      size_t *param_value_size_ret)
{
    ENTER(clGetCommandQueueInfo);
    return real.clGetCommandQueueInfo(command_queue, param_name,
                                      param_value_size, param_value,
                                      param_value_size_ret);
}

cl_int
clRetainCommandQueue(cl_command_queue command_queue)
{
    ENTER(clRetainCommandQueue);
    return counted(real.clRetainCommandQueue(command_queue), LIVE_QUEUE, 1);
}

cl_int
clReleaseCommandQueue(cl_command_queue command_queue)
{
    ENTER(clReleaseCommandQueue);
    return counted(real.clReleaseCommandQueue(command_queue), LIVE_QUEUE,
                   -1);
}

cl_int
clFlush(cl_command_queue command_queue)
{
    ENTER(clFlush);
    return real.clFlush(command_queue);
}

cl_int
clFinish(cl_command_queue command_queue)
{
    ENTER(clFinish);
    return real.clFinish(command_queue);
}

cl_int
clEnqueueMarkerWithWaitList(cl_command_queue command_queue,
                            cl_uint num_events_in_wait_list,
                            const cl_event *event_wait_list, cl_event *event)
{
    ENTER(clEnqueueMarkerWithWaitList);
    return counted(real.clEnqueueMarkerWithWaitList(
                       command_queue, num_events_in_wait_list,
                       event_wait_list, event),
                   LIVE_EVENT, event != NULL);
}

cl_int
clEnqueueBarrierWithWaitList(cl_command_queue command_queue,
                             cl_uint num_events_in_wait_list,
                             const cl_event *event_wait_list, cl_event *event)
{
    ENTER(clEnqueueBarrierWithWaitList);
    return counted(real.clEnqueueBarrierWithWaitList(
                       command_queue, num_events_in_wait_list,
                       event_wait_list, event),
                   LIVE_EVENT, event != NULL);
}

cl_int
clGetEventInfo(cl_event event, cl_event_info param_name,
               size_t param_value_size, void *param_value,
               size_t *param_value_size_ret)
{
    ENTER(clGetEventInfo);
    return real.clGetEventInfo(event, param_name, param_value_size,
                               param_value, param_value_size_ret);
}

cl_int
clGetEventProfilingInfo(cl_event event, cl_profiling_info param_name,
                        size_t param_value_size, void *param_value,
                        size_t *param_value_size_ret)
{
    ENTER(clGetEventProfilingInfo);
    return real.clGetEventProfilingInfo(event, param_name, param_value_size,
                                        param_value, param_value_size_ret);
}

cl_int
clWaitForEvents(cl_uint num_events, const cl_event *event_list)
{
    ENTER(clWaitForEvents);
    return real.clWaitForEvents(num_events, event_list);
}

cl_int
clRetainEvent(cl_event event)
{
    ENTER(clRetainEvent);
    return counted(real.clRetainEvent(event), LIVE_EVENT, 1);
}

cl_int
clReleaseEvent(cl_event event)
{
    ENTER(clReleaseEvent);
    return counted(real.clReleaseEvent(event), LIVE_EVENT, -1);
}

/* Shared virtual memory ---------------------------------------------- */

#define OCL_GUARD 256
#define GUARD_BYTE 0xA5
#define SVM_PENDING 8
#define QUARANTINE_MAX 32
#define QUARANTINE_BYTES (256ULL << 20)

typedef struct svm_alloc {
    struct svm_alloc *next;
    unsigned char *base;  /* the runtime's allocation */
    unsigned char *user;  /* what the caller got */
    size_t size, guard;   /* the caller's bytes; guard bytes each side */
    cl_context ctx;
    int fine;
    /* The latest copies and fills that touch it (our references). */
    cl_event pending[SVM_PENDING];
    int npending;
} svm_alloc;

static struct {
    pthread_mutex_t mu;  /* taken after the fault lock, before none */
    svm_alloc *live;
    svm_alloc *quarantine[QUARANTINE_MAX];  /* oldest first */
    int nquarantine;
    unsigned long long quarantine_bytes;
    long long guard_damage;  /* found at free */
} svm = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int
svm_guards_ok(const svm_alloc *a)
{
    const unsigned char *after = a->user + a->size;

    for (size_t i = 0; i < a->guard; i++) {
        if (a->base[i] != GUARD_BYTE || after[i] != GUARD_BYTE) {
            return 0;
        }
    }
    return 1;
}

static long long
svm_guard_damage(const char *kind)
{
    long long n;

    if (strcmp(kind, "guard_damage") != 0) {
        return -1;
    }
    pthread_mutex_lock(&svm.mu);
    n = svm.guard_damage;
    for (svm_alloc *a = svm.live; a != NULL; a = a->next) {
        n += !svm_guards_ok(a);
    }
    pthread_mutex_unlock(&svm.mu);
    return n;
}

static void
svm_reset_detectors(void)
{
    pthread_mutex_lock(&svm.mu);
    svm.guard_damage = 0;
    pthread_mutex_unlock(&svm.mu);
    dc_live_add(&g_ctl, LIVE_BAD_ACCESS, -dc_live_get(&g_ctl, LIVE_BAD_ACCESS));
}

static void
svm_bad(const char *api, const char *what, const void *p, size_t n)
{
    dc_live_add(&g_ctl, LIVE_BAD_ACCESS, 1);
    fprintf(stderr, "opencl interposer: bad access: %s %s %p (%zu bytes)\n",
            api, what, p, n);
}

static int
svm_overlaps(uintptr_t p, size_t n, const svm_alloc *a)
{
    uintptr_t lo = (uintptr_t)a->base;
    uintptr_t hi = (uintptr_t)a->user + a->size + a->guard;

    return p < hi && p + n > lo;
}

/* One side of a copy or fill (svm.mu held): 0 when it is host memory
 * (*found NULL) or lies inside one live allocation (*found set); -1 (a
 * bad access, reported) when it reaches a guard or a freed allocation. */
static int
svm_side(const char *api, const void *ptr, size_t n, svm_alloc **found)
{
    uintptr_t p = (uintptr_t)ptr;

    *found = NULL;
    for (svm_alloc *a = svm.live; a != NULL; a = a->next) {
        if (svm_overlaps(p, n, a)) {
            if (p >= (uintptr_t)a->user
                && p + n <= (uintptr_t)a->user + a->size) {
                *found = a;
                return 0;
            }
            svm_bad(api, "beyond an allocation at", ptr, n);
            return -1;
        }
    }
    for (int i = 0; i < svm.nquarantine; i++) {
        if (svm_overlaps(p, n, svm.quarantine[i])) {
            svm_bad(api, "into freed memory at", ptr, n);
            return -1;
        }
    }
    return 0;
}

/* Remember that event touches a (svm.mu held). */
static void
svm_track(svm_alloc *a, cl_event event)
{
    int kept = 0;

    if (a == NULL) {
        return;
    }
    for (int i = 0; i < a->npending; i++) {
        cl_int status = CL_COMPLETE;

        real.clGetEventInfo(a->pending[i], CL_EVENT_COMMAND_EXECUTION_STATUS,
                            sizeof(status), &status, NULL);
        if (status <= CL_COMPLETE) {
            real.clReleaseEvent(a->pending[i]);
        }
        else {
            a->pending[kept++] = a->pending[i];
        }
    }
    a->npending = kept;
    if (a->npending == SVM_PENDING) {
        /* The oldest goes unwatched (queues run in order: it is behind
         * the newer ones of its queue anyway). */
        real.clReleaseEvent(a->pending[0]);
        memmove(a->pending, a->pending + 1,
                (SVM_PENDING - 1) * sizeof(a->pending[0]));
        a->npending--;
    }
    if (real.clRetainEvent(event) == CL_SUCCESS) {
        a->pending[a->npending++] = event;
    }
}

void *
clSVMAlloc(cl_context context, cl_svm_mem_flags flags, size_t size,
           cl_uint alignment)
{
    size_t guard = alignment > OCL_GUARD ? alignment : OCL_GUARD;
    svm_alloc *a;
    int code;

    if (dc_enter(&g_ctl, FN_clSVMAlloc, &code)) {
        return NULL; /* clSVMAlloc has no error code: a failure is NULL */
    }
    if (size == 0 || size > SIZE_MAX / 2 - 2 * guard
        || (a = calloc(1, sizeof(*a))) == NULL) {
        return real.clSVMAlloc(context, flags, size, alignment);
    }
    a->base = real.clSVMAlloc(context, flags, size + 2 * guard, alignment);
    if (a->base == NULL) {
        free(a);
        return NULL;
    }
    a->user = a->base + guard;
    a->size = size;
    a->guard = guard;
    a->ctx = context;
    a->fine = (flags & CL_MEM_SVM_FINE_GRAIN_BUFFER) != 0;
    if (real_retain_context != NULL) {
        real_retain_context(context);
    }
    memset(a->base, GUARD_BYTE, guard);
    memset(a->user + size, GUARD_BYTE, guard);
    pthread_mutex_lock(&svm.mu);
    a->next = svm.live;
    svm.live = a;
    pthread_mutex_unlock(&svm.mu);
    dc_live_add(&g_ctl, a->fine ? LIVE_HOST_ALLOC : LIVE_ALLOC, 1);
    return a->user;
}

/* The control function the other doubles export too: the live SVM
 * allocation holding the byte at addr, as its caller asked for it
 * (1 coarse-grain device memory, 2 fine-grain host memory, 0 none). */
int
fake_ocl_mem_range(unsigned long long addr, unsigned long long *base,
                   unsigned long long *size)
{
    int kind = 0;

    *base = 0;
    *size = 0;
    pthread_mutex_lock(&svm.mu);
    for (svm_alloc *a = svm.live; a != NULL; a = a->next) {
        uintptr_t user = (uintptr_t)a->user;

        if (addr >= user && addr - user < a->size) {
            *base = user;
            *size = a->size;
            kind = a->fine ? 2 : 1;
            break;
        }
    }
    pthread_mutex_unlock(&svm.mu);
    return kind;
}

/* Really free one allocation (svm.mu held). */
static void
svm_release(svm_alloc *a)
{
    for (int i = 0; i < a->npending; i++) {
        real.clReleaseEvent(a->pending[i]);
    }
    real.clSVMFree(a->ctx, a->base);
    if (real_retain_context != NULL) {
        real.clReleaseContext(a->ctx);
    }
    free(a);
}

void
clSVMFree(cl_context context, void *svm_pointer)
{
    svm_alloc *a = NULL;
    int code, busy = 0;

    if (dc_enter(&g_ctl, FN_clSVMFree, &code)) {
        return; /* no error code either: the memory stays allocated */
    }
    if (svm_pointer == NULL) {
        return;
    }
    pthread_mutex_lock(&svm.mu);
    for (svm_alloc **p = &svm.live; *p != NULL; p = &(*p)->next) {
        if ((*p)->user == svm_pointer) {
            a = *p;
            *p = a->next;
            break;
        }
    }
    if (a == NULL) {
        pthread_mutex_unlock(&svm.mu);
        svm_bad("clSVMFree", "of memory it did not allocate:", svm_pointer,
                0);
        return;
    }
    (void)context;
    for (int i = 0; i < a->npending; i++) {
        cl_int status = CL_COMPLETE;

        real.clGetEventInfo(a->pending[i], CL_EVENT_COMMAND_EXECUTION_STATUS,
                            sizeof(status), &status, NULL);
        busy |= status > CL_COMPLETE;
    }
    if (!svm_guards_ok(a)) {
        svm.guard_damage++;
        fprintf(stderr, "opencl interposer: guard bytes of %p (%zu bytes) "
                "overwritten\n", svm_pointer, a->size);
    }
    dc_live_add(&g_ctl, a->fine ? LIVE_HOST_ALLOC : LIVE_ALLOC, -1);
    /* Quarantine: the address stays taken, and tells a late access. */
    if (svm.nquarantine == QUARANTINE_MAX
        || svm.quarantine_bytes + a->size > QUARANTINE_BYTES) {
        while (svm.nquarantine > 0
               && (svm.nquarantine == QUARANTINE_MAX
                   || svm.quarantine_bytes + a->size > QUARANTINE_BYTES)) {
            svm_alloc *old = svm.quarantine[0];

            svm.quarantine_bytes -= old->size;
            memmove(svm.quarantine, svm.quarantine + 1,
                    (size_t)(--svm.nquarantine) * sizeof(svm.quarantine[0]));
            svm_release(old);
        }
    }
    if (a->size > QUARANTINE_BYTES) {
        /* Too large to keep: wait for what uses it, then free. */
        for (int i = 0; i < a->npending; i++) {
            real.clWaitForEvents(1, &a->pending[i]);
        }
        svm_release(a);
    }
    else {
        svm.quarantine[svm.nquarantine++] = a;
        svm.quarantine_bytes += a->size;
    }
    pthread_mutex_unlock(&svm.mu);
    if (busy) {
        svm_bad("clSVMFree", "while queued work still uses", svm_pointer,
                0);
    }
}

/* A copy or fill refused as a bad access does nothing, in order. */
static cl_int
svm_nothing(cl_command_queue queue, cl_uint n, const cl_event *waits,
            cl_event *event)
{
    if (event == NULL) {
        return CL_SUCCESS;
    }
    return counted(real.clEnqueueMarkerWithWaitList(queue, n, waits, event),
                   LIVE_EVENT, 1);
}

/* After a copy or fill was queued as `mine`: watch it, hand it out. */
static cl_int
svm_queued(cl_int rc, cl_event mine, svm_alloc *a, svm_alloc *b,
           cl_bool blocking, cl_event *event)
{
    if (rc != CL_SUCCESS) {
        pthread_mutex_unlock(&svm.mu);
        return rc;
    }
    svm_track(a, mine);
    svm_track(b, mine);
    pthread_mutex_unlock(&svm.mu);
    /* Blocking calls wait outside the lock: a frees meanwhile must not
     * wait behind a gate. */
    if (blocking) {
        rc = real.clWaitForEvents(1, &mine);
    }
    if (event != NULL && rc == CL_SUCCESS) {
        *event = mine;
        dc_live_add(&g_ctl, LIVE_EVENT, 1);
    }
    else {
        real.clReleaseEvent(mine);
    }
    return rc;
}

cl_int
clEnqueueSVMMemcpy(cl_command_queue command_queue, cl_bool blocking_copy,
                   void *dst_ptr, const void *src_ptr, size_t size,
                   cl_uint num_events_in_wait_list,
                   const cl_event *event_wait_list, cl_event *event)
{
    svm_alloc *dst = NULL, *src = NULL;
    cl_event mine = NULL;
    cl_int rc;

    ENTER(clEnqueueSVMMemcpy);
    pthread_mutex_lock(&svm.mu);
    if (svm_side("clEnqueueSVMMemcpy", dst_ptr, size, &dst) != 0
        || svm_side("clEnqueueSVMMemcpy", src_ptr, size, &src) != 0) {
        pthread_mutex_unlock(&svm.mu);
        return svm_nothing(command_queue, num_events_in_wait_list,
                           event_wait_list, event);
    }
    rc = real.clEnqueueSVMMemcpy(command_queue, CL_FALSE, dst_ptr, src_ptr,
                                 size, num_events_in_wait_list,
                                 event_wait_list, &mine);
    return svm_queued(rc, mine, dst, src, blocking_copy, event);
}

cl_int
clEnqueueSVMMemFill(cl_command_queue command_queue, void *svm_ptr,
                    const void *pattern, size_t pattern_size, size_t size,
                    cl_uint num_events_in_wait_list,
                    const cl_event *event_wait_list, cl_event *event)
{
    svm_alloc *dst = NULL;
    cl_event mine = NULL;
    cl_int rc;

    ENTER(clEnqueueSVMMemFill);
    pthread_mutex_lock(&svm.mu);
    if (svm_side("clEnqueueSVMMemFill", svm_ptr, size, &dst) != 0
        || (dst == NULL
            && (svm_bad("clEnqueueSVMMemFill", "outside SVM at", svm_ptr,
                        size), 1))) {
        pthread_mutex_unlock(&svm.mu);
        return svm_nothing(command_queue, num_events_in_wait_list,
                           event_wait_list, event);
    }
    rc = real.clEnqueueSVMMemFill(command_queue, svm_ptr, pattern,
                                  pattern_size, size,
                                  num_events_in_wait_list, event_wait_list,
                                  &mine);
    return svm_queued(rc, mine, dst, NULL, CL_FALSE, event);
}

/* Control ------------------------------------------------------------- */

static void
sleep_kernel(void *args)
{
    double ms = *(const double *)args;
    struct timespec ts = {
        .tv_sec = (time_t)(ms / 1000.0),
        .tv_nsec = (long)((ms - 1000.0 * (double)(time_t)(ms / 1000.0))
                          * 1e6),
    };

    nanosleep(&ts, NULL);
}

int
fake_ocl_enqueue_sleep(unsigned long long queue, double ms)
{
    cl_command_queue q = (cl_command_queue)(uintptr_t)queue;
    cl_int rc;

    if (!(ms >= 0.0 && ms < 1e9) || real_native_kernel == NULL) {
        return CL_INVALID_VALUE;
    }
    /* The arguments are copied by the runtime at enqueue. */
    rc = real_native_kernel(q, sleep_kernel, &ms, sizeof(ms), 0, NULL, NULL,
                            0, NULL, NULL);
    if (rc == CL_SUCCESS) {
        rc = real.clFlush(q);
    }
    return rc;
}

static void
gate_kernel(void *args)
{
    dc_gate_wait(*(const int *)args);
}

int
fake_ocl_enqueue_gate(unsigned long long queue, int *gate)
{
    cl_command_queue q = (cl_command_queue)(uintptr_t)queue;
    int id = dc_gate_new();
    cl_int rc;

    if (gate == NULL || id < 0 || real_native_kernel == NULL) {
        return CL_INVALID_VALUE;
    }
    rc = real_native_kernel(q, gate_kernel, &id, sizeof(id), 0, NULL, NULL,
                            0, NULL, NULL);
    if (rc == CL_SUCCESS) {
        rc = real.clFlush(q);
    }
    if (rc != CL_SUCCESS) {
        dc_gate_open(id);
        return rc;
    }
    *gate = id;
    return CL_SUCCESS;
}

int
fake_ocl_open_gate(int gate)
{
    return dc_gate_open(gate);
}

/* Programs and kernels ------------------------------------------------- */

/* An object from real's call, counted live when made. */
#define MADE(obj, rc, kind)                                            \
    do {                                                               \
        counted((obj) != NULL ? (rc) : CL_OUT_OF_RESOURCES, (kind), 1); \
        if (errcode_ret != NULL) {                                     \
            *errcode_ret = (rc);                                       \
        }                                                              \
    } while (0)

cl_program
clCreateProgramWithSource(cl_context context, cl_uint count,
                          const char **strings, const size_t *lengths,
                          cl_int *errcode_ret)
{
    cl_program p;
    cl_int rc = CL_SUCCESS;

    ENTER_OBJECT(clCreateProgramWithSource, errcode_ret);
    p = real.clCreateProgramWithSource(context, count, strings, lengths, &rc);
    MADE(p, rc, LIVE_PROGRAM);
    return p;
}

cl_int
clBuildProgram(cl_program program, cl_uint num_devices,
               const cl_device_id *device_list, const char *options,
               acc_cl_program_notify pfn_notify, void *user_data)
{
    ENTER(clBuildProgram);
    return real.clBuildProgram(program, num_devices, device_list, options,
                               pfn_notify, user_data);
}

cl_int
clGetProgramBuildInfo(cl_program program, cl_device_id device,
                      cl_program_build_info param_name,
                      size_t param_value_size, void *param_value,
                      size_t *param_value_size_ret)
{
    ENTER(clGetProgramBuildInfo);
    return real.clGetProgramBuildInfo(program, device, param_name,
                                      param_value_size, param_value,
                                      param_value_size_ret);
}

cl_int
clGetProgramInfo(cl_program program, cl_program_info param_name,
                 size_t param_value_size, void *param_value,
                 size_t *param_value_size_ret)
{
    ENTER(clGetProgramInfo);
    return real.clGetProgramInfo(program, param_name, param_value_size,
                                 param_value, param_value_size_ret);
}

cl_int
clReleaseProgram(cl_program program)
{
    ENTER(clReleaseProgram);
    return counted(real.clReleaseProgram(program), LIVE_PROGRAM, -1);
}

cl_kernel
clCreateKernel(cl_program program, const char *kernel_name,
               cl_int *errcode_ret)
{
    cl_kernel k;
    cl_int rc = CL_SUCCESS;

    ENTER_OBJECT(clCreateKernel, errcode_ret);
    k = real.clCreateKernel(program, kernel_name, &rc);
    MADE(k, rc, LIVE_KERNEL);
    return k;
}

cl_int
clReleaseKernel(cl_kernel kernel)
{
    ENTER(clReleaseKernel);
    return counted(real.clReleaseKernel(kernel), LIVE_KERNEL, -1);
}

cl_int
clGetKernelInfo(cl_kernel kernel, cl_kernel_info param_name,
                size_t param_value_size, void *param_value,
                size_t *param_value_size_ret)
{
    ENTER(clGetKernelInfo);
    return real.clGetKernelInfo(kernel, param_name, param_value_size,
                                param_value, param_value_size_ret);
}

cl_int
clGetKernelArgInfo(cl_kernel kernel, cl_uint arg_index,
                   cl_kernel_arg_info param_name, size_t param_value_size,
                   void *param_value, size_t *param_value_size_ret)
{
    ENTER(clGetKernelArgInfo);
    return real.clGetKernelArgInfo(kernel, arg_index, param_name,
                                   param_value_size, param_value,
                                   param_value_size_ret);
}

cl_int
clGetKernelWorkGroupInfo(cl_kernel kernel, cl_device_id device,
                         cl_kernel_work_group_info param_name,
                         size_t param_value_size, void *param_value,
                         size_t *param_value_size_ret)
{
    ENTER(clGetKernelWorkGroupInfo);
    return real.clGetKernelWorkGroupInfo(kernel, device, param_name,
                                         param_value_size, param_value,
                                         param_value_size_ret);
}

cl_int
clSetKernelArg(cl_kernel kernel, cl_uint arg_index, size_t arg_size,
               const void *arg_value)
{
    ENTER(clSetKernelArg);
    return real.clSetKernelArg(kernel, arg_index, arg_size, arg_value);
}

cl_int
clSetKernelArgSVMPointer(cl_kernel kernel, cl_uint arg_index,
                         const void *arg_value)
{
    ENTER(clSetKernelArgSVMPointer);
    return real.clSetKernelArgSVMPointer(kernel, arg_index, arg_value);
}

cl_int
clEnqueueNDRangeKernel(cl_command_queue command_queue, cl_kernel kernel,
                       cl_uint work_dim, const size_t *global_work_offset,
                       const size_t *global_work_size,
                       const size_t *local_work_size,
                       cl_uint num_events_in_wait_list,
                       const cl_event *event_wait_list, cl_event *event)
{
    ENTER(clEnqueueNDRangeKernel);
    return real.clEnqueueNDRangeKernel(command_queue, kernel, work_dim,
                                       global_work_offset, global_work_size,
                                       local_work_size,
                                       num_events_in_wait_list,
                                       event_wait_list, event);
}
