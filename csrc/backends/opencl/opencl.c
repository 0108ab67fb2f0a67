/*
 * opencl.c - the OpenCL backend (device type "opencl").
 *
 * The ICD loader (libOpenCL.so.1, or ACCELERATOR_OPENCL_LIBRARY) is opened
 * at run time and every entry point resolved with dlsym.  The devices are
 * those of every platform, in platform order, whose type is in
 * ACCELERATOR_OPENCL_DEVICE_TYPE (default "gpu,accelerator": a CPU is
 * not an accelerator unless asked for with "cpu" or "all").
 *
 * One context per platform, made on first use (probing creates none).  A
 * stream is an in-order command queue with profiling enabled; each device
 * has a default queue, made on first use.  An event is a marker
 * (clEnqueueMarkerWithWaitList) whose completion time comes from its
 * profiling information; re-recording replaces the marker.  Waits are
 * barriers on the marker; device synchronization finishes every live queue
 * of the device.  Every command we enqueue is flushed at once, so that
 * work another queue waits for is never left unsubmitted.
 *
 * OpenCL cannot ask a queue whether it is idle: stream_query enqueues a
 * marker and looks at it.  A runtime may take a moment to complete even a
 * marker on an idle queue, so the look is repeated: for up to
 * OCL_QUERY_QUEUED_NS while the marker is still queued (behind work: the
 * queue is busy), for up to OCL_QUERY_SUBMITTED_NS once it was submitted
 * (PoCL submits a command only when the commands before it are done, so
 * it is about to complete; a runtime that submits earlier makes a query of
 * a busy queue take that long).
 *
 * Memory is shared virtual memory (OpenCL 2.0 SVM), so that a buffer has
 * an address (the allocator carves segments, DLPack exports pointers):
 * device memory is a coarse-grain SVM buffer of the device's context
 * (clSVMAlloc), HostBuffer a fine-grain one (host-visible without maps,
 * and copied asynchronously by clEnqueueSVMMemcpy); copies and fills are
 * clEnqueueSVMMemcpy and clEnqueueSVMMemFill.  A device without the
 * capability (CL_DEVICE_SVM_CAPABILITIES) refuses memory, naming it.
 *
 * Not supported: stream priorities (every stream has priority 0), the CUDA
 * stream protocol, blocking-synchronization events (waits are the
 * runtime's), free device memory (see ocl_memory_info), copies between
 * devices of two platforms (two contexts cannot share SVM), foreign
 * memory (OpenCL cannot look up a pointer it did not hand us).
 */
#define _GNU_SOURCE
#define ACC_BACKEND_HOST opencl_host
#include <accelerator/backend.h>
#include "opencl_api.h"

/* This backend's table (named in its messages). */
extern const acc_backend acc_opencl_backend;

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define OCL_DEFAULT_LIBRARY "libOpenCL.so.1"
#define OCL_MAX_PLATFORMS 16
#define OCL_DEFAULT_TYPES (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)
/* How long stream_query watches its marker (see ocl_stream_query). */
#define OCL_QUERY_QUEUED_NS 1000000LL
#define OCL_QUERY_SUBMITTED_NS 50000000LL

/* A command queue we made: linked into its device's list, so that device
 * synchronization reaches every live one. */
typedef struct ocl_queue {
    struct ocl_queue *prev, *next;
    cl_command_queue queue;
    int device;
} ocl_queue;

/* An event: the marker of its latest record (NULL before the first). */
typedef struct ocl_event {
    cl_event marker;
} ocl_event;

#define OCL_FN_FIELD(name, ret, params) acc_pfn_##name name;

static struct {
    void *library;
    struct {
        ACC_OPENCL_FUNCTIONS(OCL_FN_FIELD)
    } fn;
    int count;
    cl_device_id devices[ACC_MAX_DEVICES];
    int platform_of[ACC_MAX_DEVICES];
    int nplatforms;
    cl_platform_id platforms[OCL_MAX_PLATFORMS];
    cl_context contexts[OCL_MAX_PLATFORMS]; /* under lock; NULL until used */
    ocl_queue *queues[ACC_MAX_DEVICES];     /* live queues, under lock */
    /* Each device's CL_DEVICE_SVM_CAPABILITIES, read on first use (under
     * lock; svm_known says which are read). */
    cl_device_svm_capabilities svm[ACC_MAX_DEVICES];
    unsigned char svm_known[ACC_MAX_DEVICES];
    pthread_mutex_t lock;
} ocl = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Our allocations (device and host), by address: the context a free
 * needs, pointer_info's answers and the memory taken per device. */
typedef struct ocl_alloc {
    struct ocl_alloc *next;
    uintptr_t ptr;   /* as handed out: aligned to OCL_ALIGN */
    void *base;      /* as clSVMAlloc returned it */
    size_t size;
    int device;   /* the device it was made for */
    int host;     /* a HostBuffer's fine-grain buffer */
} ocl_alloc;

#define OCL_ALLOC_BUCKETS 1024
/* What mem_alloc promises.  Runtimes refuse clSVMAlloc alignments beyond
 * their largest data type (PoCL: 128 bytes), so we allocate OCL_ALIGN - 1
 * bytes more at the runtime's alignment and round up. */
#define OCL_ALIGN 256

static struct {
    pthread_mutex_t lock; /* a leaf: no other lock is taken under it */
    ocl_alloc *buckets[OCL_ALLOC_BUCKETS];
    unsigned long long used[ACC_MAX_DEVICES];
} ocl_mem = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

#undef OCL_FN_FIELD

/* Errors ----------------------------------------------------------------- */

static const char *
ocl_error_name(cl_int code)
{
    switch (code) {
#define OCL_NAME_CASE(n, value) \
    case value:                 \
        return #n;
        ACC_OPENCL_ERRORS(OCL_NAME_CASE)
#undef OCL_NAME_CASE
    default:
        return "CL_UNKNOWN_ERROR";
    }
}

static acc_status
ocl_fail(const char *api, cl_int code, acc_error *err)
{
    acc_status st = code == CL_MEM_OBJECT_ALLOCATION_FAILURE
                        ? ACC_ERR_OUT_OF_MEMORY
                        : ACC_ERR_DRIVER;

    acc_error_driver(err, acc_opencl_backend.name, api, code,
                     ocl_error_name(code), st);
    return st;
}

static inline acc_status
ocl_check(cl_int code, const char *api, acc_error *err)
{
    return code == CL_SUCCESS ? ACC_OK : ocl_fail(api, code, err);
}

/* Every driver call that returns a cl_int goes through CL(name, (args)). */
#define CL(name, args) ocl_check(ocl.fn.name args, #name, err)

/* Release paths: nobody to tell, so only trace a failure. */
static void
ocl_quiet(cl_int code, const char *api)
{
    if (code != CL_SUCCESS) {
        acc_trace("opencl: %s() failed: %s (%d)", api, ocl_error_name(code),
                  (int)code);
    }
}

/* Probe ------------------------------------------------------------------ */

/* ACCELERATOR_OPENCL_DEVICE_TYPE: "all", or a comma list of gpu, cpu and
 * accelerator.  0 (and err filled) for a bad value. */
static cl_device_type
ocl_device_types(acc_error *err)
{
    static const struct {
        const char *name;
        cl_device_type bits;
    } names[] = {
        {"all", CL_DEVICE_TYPE_ALL},
        {"gpu", CL_DEVICE_TYPE_GPU},
        {"cpu", CL_DEVICE_TYPE_CPU},
        {"accelerator", CL_DEVICE_TYPE_ACCELERATOR},
    };
    const char *value = getenv("ACCELERATOR_OPENCL_DEVICE_TYPE");
    cl_device_type types = 0;
    const char *p;

    if (value == NULL || value[0] == '\0') {
        return OCL_DEFAULT_TYPES;
    }
    for (p = value;;) {
        size_t len = strcspn(p, ",");
        size_t i;

        for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            if (strlen(names[i].name) == len
                && strncmp(p, names[i].name, len) == 0) {
                types |= names[i].bits;
                break;
            }
        }
        if (i == sizeof(names) / sizeof(names[0])) {
            size_t shown = acc_utf8_whole(value, strnlen(value, 64));

            acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                          "ACCELERATOR_OPENCL_DEVICE_TYPE=%.*s%s names no "
                          "OpenCL device type (expected all, or a comma "
                          "list of gpu, cpu and accelerator)",
                          (int)shown, value, value[shown] ? "..." : "");
            return 0;
        }
        if (p[len] == '\0') {
            return types;
        }
        p += len + 1;
    }
}

static acc_status
ocl_resolve(acc_error *err)
{
    void *p;

#define OCL_RESOLVE(name, ret, params)                                      \
    p = dlsym(ocl.library, #name);                                         \
    if (p == NULL) {                                                       \
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,                         \
                      "the OpenCL library lacks %s (an OpenCL 2.0 ICD "    \
                      "loader is needed)", #name);                         \
        return ACC_ERR_NO_ACCELERATOR;                                     \
    }                                                                      \
    memcpy(&ocl.fn.name, &p, sizeof(p));
    ACC_OPENCL_FUNCTIONS(OCL_RESOLVE)
#undef OCL_RESOLVE
    return ACC_OK;
}

/* The devices of one platform that we use, appended to ocl.devices. */
static acc_status
ocl_platform_devices(int platform, cl_device_type types, acc_error *err)
{
    cl_platform_id id = ocl.platforms[platform];
    cl_device_id found[ACC_MAX_DEVICES];
    cl_uint n = 0;
    cl_int rc;

    rc = ocl.fn.clGetDeviceIDs(id, types, ACC_MAX_DEVICES, found, &n);
    if (rc == CL_DEVICE_NOT_FOUND) {
        return ACC_OK;
    }
    if (rc != CL_SUCCESS) {
        return ocl_fail("clGetDeviceIDs", rc, err);
    }
    for (cl_uint i = 0; i < n && i < ACC_MAX_DEVICES
                        && ocl.count < ACC_MAX_DEVICES; i++) {
        ocl.devices[ocl.count] = found[i];
        ocl.platform_of[ocl.count] = platform;
        ocl.count++;
    }
    return ACC_OK;
}

static acc_status
ocl_probe(acc_probe_result *out, acc_error *err)
{
    const char *path = getenv("ACCELERATOR_OPENCL_LIBRARY");
    cl_device_type types;
    cl_uint n = 0;
    cl_int rc;
    acc_status st;

    if (path == NULL || path[0] == '\0') {
        path = OCL_DEFAULT_LIBRARY;
    }
    out->library = path;
    types = ocl_device_types(err);
    if (types == 0) {
        return ACC_ERR_NO_ACCELERATOR;
    }
    ocl.library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (ocl.library == NULL) {
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                      "cannot load the OpenCL ICD loader: %s", dlerror());
        return ACC_ERR_NO_ACCELERATOR;
    }
    out->loaded = 1;
    st = ocl_resolve(err);
    if (st != ACC_OK) {
        return st;
    }
    rc = ocl.fn.clGetPlatformIDs(OCL_MAX_PLATFORMS, ocl.platforms, &n);
    if (rc == CL_PLATFORM_NOT_FOUND_KHR || (rc == CL_SUCCESS && n == 0)) {
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                      "no OpenCL platform is installed (the ICD loader "
                      "found no vendor in /etc/OpenCL/vendors or "
                      "OCL_ICD_VENDORS)");
        return ACC_ERR_NO_ACCELERATOR;
    }
    if (rc != CL_SUCCESS) {
        return ocl_fail("clGetPlatformIDs", rc, err);
    }
    ocl.nplatforms = n < OCL_MAX_PLATFORMS ? (int)n : OCL_MAX_PLATFORMS;
    for (int p = 0; p < ocl.nplatforms; p++) {
        st = ocl_platform_devices(p, types, err);
        if (st != ACC_OK) {
            return st;
        }
    }
    if (ocl.count == 0) {
        /* The hint names only what the asked types leave out. */
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                      "no OpenCL device of the types asked for (%s%s)",
                      getenv("ACCELERATOR_OPENCL_DEVICE_TYPE")
                          ? getenv("ACCELERATOR_OPENCL_DEVICE_TYPE")
                          : "gpu,accelerator",
                      types == CL_DEVICE_TYPE_ALL
                          ? ": the platforms list no device at all"
                      : (types & CL_DEVICE_TYPE_CPU)
                          ? "; set ACCELERATOR_OPENCL_DEVICE_TYPE=all to "
                            "include every type"
                          : "; set ACCELERATOR_OPENCL_DEVICE_TYPE=all to "
                            "include CPUs");
        return ACC_ERR_NO_ACCELERATOR;
    }
    /* The first device's platform version ("OpenCL 3.0 PoCL 3.1+debian",
     * up to the details after two spaces) names the driver; only the
     * report loses it when this fails. */
    {
        char version[1024] = "";
        char *details;

        rc = ocl.fn.clGetPlatformInfo(ocl.platforms[ocl.platform_of[0]],
                                      CL_PLATFORM_VERSION, sizeof(version),
                                      version, NULL);
        ocl_quiet(rc, "clGetPlatformInfo");
        version[sizeof(version) - 1] = '\0';
        details = strstr(version, "  ");
        if (rc != CL_SUCCESS) {
            version[0] = '\0';
        }
        else if (details != NULL) {
            *details = '\0';
        }
        acc_format(out->driver_version_text,
                   sizeof(out->driver_version_text), "%s", version);
    }
    out->device_count = ocl.count;
    return ACC_OK;
}

static void
ocl_shutdown(void)
{
    for (int d = 0; d < ocl.count; d++) {
        while (ocl.queues[d] != NULL) {
            ocl_queue *q = ocl.queues[d];

            ocl.queues[d] = q->next;
            ocl_quiet(ocl.fn.clReleaseCommandQueue(q->queue),
                      "clReleaseCommandQueue");
            free(q);
        }
    }
    for (int p = 0; p < ocl.nplatforms; p++) {
        if (ocl.contexts[p] != NULL) {
            ocl_quiet(ocl.fn.clReleaseContext(ocl.contexts[p]),
                      "clReleaseContext");
            ocl.contexts[p] = NULL;
        }
    }
}

/* Keep only the devices order[0..count), in that order (right after the
 * probe: no context or queue exists yet). */
static acc_status
ocl_select_devices(const int *order, int count, acc_error *err)
{
    cl_device_id devices[ACC_MAX_DEVICES];
    int platform_of[ACC_MAX_DEVICES];

    (void)err;
    memcpy(devices, ocl.devices, sizeof(devices));
    memcpy(platform_of, ocl.platform_of, sizeof(platform_of));
    for (int i = 0; i < count; i++) {
        ocl.devices[i] = devices[order[i]];
        ocl.platform_of[i] = platform_of[order[i]];
    }
    ocl.count = count;
    return ACC_OK;
}

/* Contexts and queues ---------------------------------------------------- */

/* The context of device's platform, made on first use.  Under lock. */
static acc_status
ocl_context_locked(int device, cl_context *out, acc_error *err)
{
    int p = ocl.platform_of[device];
    cl_device_id members[ACC_MAX_DEVICES];
    cl_uint n = 0;
    cl_int rc = CL_SUCCESS;

    if (ocl.contexts[p] == NULL) {
        cl_context_properties props[] = {
            CL_CONTEXT_PLATFORM, (cl_context_properties)ocl.platforms[p], 0,
        };

        for (int d = 0; d < ocl.count; d++) {
            if (ocl.platform_of[d] == p) {
                members[n++] = ocl.devices[d];
            }
        }
        ocl.contexts[p] = ocl.fn.clCreateContext(props, n, members, NULL,
                                                 NULL, &rc);
        if (rc != CL_SUCCESS || ocl.contexts[p] == NULL) {
            ocl.contexts[p] = NULL;
            return ocl_fail("clCreateContext",
                            rc != CL_SUCCESS ? rc : CL_OUT_OF_RESOURCES, err);
        }
    }
    *out = ocl.contexts[p];
    return ACC_OK;
}

/* A new in-order queue with profiling on device, linked into its list. */
static acc_status
ocl_queue_new(int device, acc_stream *s, acc_error *err)
{
    cl_queue_properties props[] = {
        CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0,
    };
    ocl_queue *q = calloc(1, sizeof(*q));
    cl_context ctx;
    cl_int rc = CL_SUCCESS;
    acc_status st;

    if (q == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    pthread_mutex_lock(&ocl.lock);
    st = ocl_context_locked(device, &ctx, err);
    if (st == ACC_OK) {
        q->queue = ocl.fn.clCreateCommandQueueWithProperties(
            ctx, ocl.devices[device], props, &rc);
        if (rc != CL_SUCCESS || q->queue == NULL) {
            st = ocl_fail("clCreateCommandQueueWithProperties",
                          rc != CL_SUCCESS ? rc : CL_OUT_OF_RESOURCES, err);
        }
    }
    if (st == ACC_OK) {
        q->device = device;
        q->next = ocl.queues[device];
        if (q->next != NULL) {
            q->next->prev = q;
        }
        ocl.queues[device] = q;
    }
    pthread_mutex_unlock(&ocl.lock);
    if (st != ACC_OK) {
        free(q);
        return st;
    }
    s->handle = (uintptr_t)q->queue;
    s->native = q;
    return ACC_OK;
}

static inline cl_command_queue
ocl_queue_of(const acc_stream *s)
{
    return (cl_command_queue)s->handle;
}

/* Devices ---------------------------------------------------------------- */

static acc_status
ocl_device_synchronize(int device, acc_error *err)
{
    cl_command_queue *held;
    acc_status st = ACC_OK;
    int n = 0, size = 0;

    /* Finish every live queue: hold a reference to each (so that a
     * concurrent destroy cannot free it) and wait outside the lock. */
    pthread_mutex_lock(&ocl.lock);
    for (ocl_queue *q = ocl.queues[device]; q != NULL; q = q->next) {
        size++;
    }
    held = malloc((size_t)(size > 0 ? size : 1) * sizeof(*held));
    for (ocl_queue *q = ocl.queues[device]; held != NULL && q != NULL;
         q = q->next) {
        st = CL(clRetainCommandQueue, (q->queue));
        if (st != ACC_OK) {
            break;
        }
        held[n++] = q->queue;
    }
    pthread_mutex_unlock(&ocl.lock);
    if (held == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    for (int i = 0; i < n; i++) {
        if (st == ACC_OK) {
            st = CL(clFinish, (held[i]));
        }
        ocl_quiet(ocl.fn.clReleaseCommandQueue(held[i]),
                  "clReleaseCommandQueue");
    }
    free(held);
    return st;
}

/* Whether the space-separated list names the extension (a whole word). */
static int
has_extension(const char *list, const char *name)
{
    size_t n = strlen(name);

    for (const char *at = strstr(list, name); at != NULL;
         at = strstr(at + n, name)) {
        if ((at == list || at[-1] == ' ')
            && (at[n] == '\0' || at[n] == ' ')) {
            return 1;
        }
    }
    return 0;
}

/* The floating-point types the device's extensions announce. */
static acc_status
ocl_float_types(cl_device_id dev, unsigned *types, acc_error *err)
{
    size_t size = 0;
    char *list;
    acc_status st;

    st = CL(clGetDeviceInfo, (dev, CL_DEVICE_EXTENSIONS, 0, NULL, &size));
    if (st != ACC_OK) {
        return st;
    }
    list = calloc(1, size + 1);
    if (list == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    st = CL(clGetDeviceInfo, (dev, CL_DEVICE_EXTENSIONS, size, list, NULL));
    if (st == ACC_OK) {
        *types = (has_extension(list, "cl_khr_fp16") ? ACC_FLOAT_16 : 0)
                 | (has_extension(list, "cl_khr_fp64") ? ACC_FLOAT_64 : 0);
    }
    free(list);
    return st;
}

static acc_status
ocl_device_properties(int device, acc_device_properties *p, acc_error *err)
{
    cl_device_id dev = ocl.devices[device];
    cl_ulong total = 0;
    cl_uint units = 0, vendor = 0;
    cl_bool unified = 0;
    acc_status st;

    st = CL(clGetDeviceInfo, (dev, CL_DEVICE_NAME, sizeof(p->name), p->name,
                              NULL));
    p->name[sizeof(p->name) - 1] = '\0';
    if (st == ACC_OK) {
        st = CL(clGetDeviceInfo, (dev, CL_DEVICE_GLOBAL_MEM_SIZE,
                                  sizeof(total), &total, NULL));
    }
    if (st == ACC_OK) {
        st = CL(clGetDeviceInfo, (dev, CL_DEVICE_MAX_COMPUTE_UNITS,
                                  sizeof(units), &units, NULL));
    }
    if (st == ACC_OK) {
        st = CL(clGetDeviceInfo, (dev, CL_DEVICE_VENDOR_ID, sizeof(vendor),
                                  &vendor, NULL));
    }
    if (st == ACC_OK) {
        st = CL(clGetDeviceInfo, (dev, CL_DEVICE_HOST_UNIFIED_MEMORY,
                                  sizeof(unified), &unified, NULL));
    }
    if (st == ACC_OK) {
        st = ocl_float_types(dev, &p->float_types, err);
    }
    if (st == ACC_OK) {
        p->total_memory = total;
        p->multi_processor_count = (int)units;
        p->vendor_id = vendor;
        p->integrated = unified != 0;
        /* No compute capability, UUID or PCI address in core OpenCL. */
        p->major = p->minor = -1;
        /* ocl_memory_info cannot read free memory: it reports the total
         * less what this process allocated. */
        p->estimates |= ACC_ESTIMATE_FREE_MEMORY;
    }
    return st;
}

/* Streams ---------------------------------------------------------------- */

static acc_status
ocl_stream_default(int device, acc_stream *s, acc_error *err)
{
    s->priority = 0;
    return ocl_queue_new(device, s, err);
}

static acc_status
ocl_stream_create(acc_stream *s, acc_error *err)
{
    return ocl_queue_new(s->device, s, err);
}

/* Nonzero when the 8 bytes at addr can be read without a fault. */
static int
ocl_readable(uintptr_t addr)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned char vec;

    if (addr == 0 || addr % sizeof(void *) != 0 || page <= 0) {
        return 0;
    }
    return mincore((void *)(addr & ~((uintptr_t)page - 1)), 1, &vec) == 0;
}

/* The native of a wrapped queue of another context (our own queues have
 * their ocl_queue, wrapped ones of our context NULL): our memory cannot
 * be used on it (see ocl_memory_queue). */
static char ocl_foreign_context;

/* A handle made elsewhere: a command queue of this runtime (every ICD
 * object begins with its vendor's dispatch table) on this device. */
static acc_status
ocl_stream_wrap(acc_stream *s, acc_error *err)
{
    cl_device_id dev = NULL;
    cl_context ctx = NULL, ours;
    acc_status st;

    if (!ocl_readable(s->handle)
        || *(void *const *)s->handle != *(void *const *)ocl.devices[s->device]) {
        err->status = ACC_ERR_INVALID_ARGUMENT;
        return ACC_ERR_INVALID_ARGUMENT;
    }
    st = CL(clGetCommandQueueInfo, (ocl_queue_of(s), CL_QUEUE_DEVICE,
                                    sizeof(dev), &dev, NULL));
    if (st == ACC_OK && dev != ocl.devices[s->device]) {
        err->status = ACC_ERR_INVALID_ARGUMENT;
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (st == ACC_OK) {
        st = CL(clGetCommandQueueInfo, (ocl_queue_of(s), CL_QUEUE_CONTEXT,
                                        sizeof(ctx), &ctx, NULL));
    }
    if (st == ACC_OK) {
        pthread_mutex_lock(&ocl.lock);
        ours = ocl.contexts[ocl.platform_of[s->device]];
        pthread_mutex_unlock(&ocl.lock);
        s->native = ctx == ours ? NULL : &ocl_foreign_context;
    }
    return st;
}

static void
ocl_stream_destroy(acc_stream *s)
{
    ocl_queue *q = s->native;

    pthread_mutex_lock(&ocl.lock);
    if (q->prev != NULL) {
        q->prev->next = q->next;
    }
    else {
        ocl.queues[q->device] = q->next;
    }
    if (q->next != NULL) {
        q->next->prev = q->prev;
    }
    pthread_mutex_unlock(&ocl.lock);
    /* Releasing flushes; queued work still completes. */
    ocl_quiet(ocl.fn.clReleaseCommandQueue(q->queue),
              "clReleaseCommandQueue");
    free(q);
}

/* A marker after the work queued on queue so far, submitted. */
static acc_status
ocl_marker(cl_command_queue queue, cl_event *out, acc_error *err)
{
    acc_status st = CL(clEnqueueMarkerWithWaitList, (queue, 0, NULL, out));

    if (st == ACC_OK) {
        st = CL(clFlush, (queue));
        if (st != ACC_OK) {
            ocl_quiet(ocl.fn.clReleaseEvent(*out), "clReleaseEvent");
            *out = NULL;
        }
    }
    return st;
}

/* ACC_OK when event completed, ACC_NOT_READY when not; a failed command
 * reports its (negative) status as an error of clGetEventInfo. */
static acc_status
ocl_event_status(cl_event event, acc_error *err)
{
    cl_int status = CL_COMPLETE;
    acc_status st = CL(clGetEventInfo, (event,
                                        CL_EVENT_COMMAND_EXECUTION_STATUS,
                                        sizeof(status), &status, NULL));

    if (st != ACC_OK) {
        return st;
    }
    if (status < 0) {
        return ocl_fail("clGetEventInfo", status, err);
    }
    return status == CL_COMPLETE ? ACC_OK : ACC_NOT_READY;
}

static long long
ocl_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static acc_status
ocl_stream_query(acc_stream *s, acc_error *err)
{
    cl_event marker = NULL;
    cl_int status = CL_COMPLETE;
    acc_status st = ocl_marker(ocl_queue_of(s), &marker, err);
    long long start = ocl_now_ns(), waited;

    while (st == ACC_OK) {
        st = CL(clGetEventInfo, (marker, CL_EVENT_COMMAND_EXECUTION_STATUS,
                                 sizeof(status), &status, NULL));
        if (st != ACC_OK || status <= CL_COMPLETE) {
            break;
        }
        /* Still queued behind other work: busy.  Submitted or running:
         * nothing is ahead of the marker on runtimes that submit in
         * dependency order (PoCL), so give it time to complete. */
        waited = ocl_now_ns() - start;
        if (waited >= OCL_QUERY_SUBMITTED_NS
            || (status == CL_QUEUED && waited >= OCL_QUERY_QUEUED_NS)) {
            st = ACC_NOT_READY;
            break;
        }
        sched_yield();
    }
    if (st == ACC_OK && status < 0) {
        st = ocl_fail("clGetEventInfo", status, err);
    }
    if (marker != NULL) {
        ocl_quiet(ocl.fn.clReleaseEvent(marker), "clReleaseEvent");
    }
    return st;
}

static acc_status
ocl_stream_synchronize(acc_stream *s, acc_error *err)
{
    return CL(clFinish, (ocl_queue_of(s)));
}

/* The marker of e's latest record, with a reference the caller drops. */
static acc_status
ocl_marker_of(acc_event *e, cl_event *out, acc_error *err)
{
    ocl_event *ev = e->native;
    acc_status st = ACC_OK;

    pthread_mutex_lock(&ocl.lock);
    *out = ev->marker;
    if (*out != NULL) {
        st = CL(clRetainEvent, (*out));
        if (st != ACC_OK) {
            *out = NULL;
        }
    }
    pthread_mutex_unlock(&ocl.lock);
    return st;
}

static acc_status
ocl_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err)
{
    cl_command_queue queue = ocl_queue_of(s);
    cl_event marker;
    acc_status st = ocl_marker_of(e, &marker, err);

    if (st != ACC_OK || marker == NULL) {
        return st;
    }
    if (ocl.platform_of[e->device] != ocl.platform_of[s->device]) {
        /* Events of another platform's context cannot be waited on by
         * this queue: wait on the host instead. */
        st = CL(clWaitForEvents, (1, &marker));
    }
    else {
        st = CL(clEnqueueBarrierWithWaitList, (queue, 1, &marker, NULL));
        if (st == ACC_OK) {
            st = CL(clFlush, (queue));
        }
    }
    ocl_quiet(ocl.fn.clReleaseEvent(marker), "clReleaseEvent");
    return st;
}

/* Events ----------------------------------------------------------------- */

static acc_status
ocl_event_create(acc_event *e, acc_error *err)
{
    ocl_event *ev = calloc(1, sizeof(*ev));

    if (ev == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    e->native = ev;
    e->handle = (uintptr_t)ev;
    return ACC_OK;
}

static void
ocl_event_destroy(acc_event *e)
{
    ocl_event *ev = e->native;

    if (ev->marker != NULL) {
        ocl_quiet(ocl.fn.clReleaseEvent(ev->marker), "clReleaseEvent");
    }
    free(ev);
}

static acc_status
ocl_event_record(acc_event *e, acc_stream *s, acc_error *err)
{
    ocl_event *ev = e->native;
    cl_event marker = NULL, old;
    acc_status st = ocl_marker(ocl_queue_of(s), &marker, err);

    if (st != ACC_OK) {
        return st;
    }
    pthread_mutex_lock(&ocl.lock);
    old = ev->marker;
    ev->marker = marker;
    pthread_mutex_unlock(&ocl.lock);
    if (old != NULL) {
        ocl_quiet(ocl.fn.clReleaseEvent(old), "clReleaseEvent");
    }
    return ACC_OK;
}

static acc_status
ocl_event_query(acc_event *e, acc_error *err)
{
    cl_event marker;
    acc_status st = ocl_marker_of(e, &marker, err);

    if (st != ACC_OK || marker == NULL) {
        return st;
    }
    st = ocl_event_status(marker, err);
    ocl_quiet(ocl.fn.clReleaseEvent(marker), "clReleaseEvent");
    return st;
}

static acc_status
ocl_event_synchronize(acc_event *e, acc_error *err)
{
    cl_event marker;
    acc_status st = ocl_marker_of(e, &marker, err);

    if (st != ACC_OK || marker == NULL) {
        return st;
    }
    st = CL(clWaitForEvents, (1, &marker));
    ocl_quiet(ocl.fn.clReleaseEvent(marker), "clReleaseEvent");
    return st;
}

/* When the marker completed, in the device's nanoseconds. */
static acc_status
ocl_event_end(cl_event marker, cl_ulong *ns, acc_error *err)
{
    acc_status st = ocl_event_status(marker, err);

    if (st == ACC_OK) {
        st = CL(clGetEventProfilingInfo, (marker, CL_PROFILING_COMMAND_END,
                                          sizeof(*ns), ns, NULL));
    }
    return st;
}

static acc_status
ocl_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                     acc_error *err)
{
    cl_event a = NULL, b = NULL;
    cl_ulong t0 = 0, t1 = 0;
    acc_status st = ocl_marker_of(start, &a, err);

    if (st == ACC_OK) {
        st = ocl_marker_of(end, &b, err);
    }
    if (st == ACC_OK && (a == NULL || b == NULL)) {
        st = ACC_NOT_READY; /* not reached: the dispatcher checked */
    }
    if (st == ACC_OK) {
        st = ocl_event_end(a, &t0, err);
    }
    if (st == ACC_OK) {
        st = ocl_event_end(b, &t1, err);
    }
    if (st == ACC_OK) {
        *ms = (float)(((double)t1 - (double)t0) / 1e6);
    }
    if (a != NULL) {
        ocl_quiet(ocl.fn.clReleaseEvent(a), "clReleaseEvent");
    }
    if (b != NULL) {
        ocl_quiet(ocl.fn.clReleaseEvent(b), "clReleaseEvent");
    }
    return st;
}

/* Memory ----------------------------------------------------------------- */

static size_t
ocl_bucket(uintptr_t ptr)
{
    return (size_t)(((uint64_t)ptr * 0x9E3779B97F4A7C15ULL) >> 54)
           % OCL_ALLOC_BUCKETS;
}

/* Remember an allocation (ACC_ERR_HOST_MEMORY when no record can be
 * made: the caller frees it again). */
static acc_status
ocl_remember(void *ptr, void *base, size_t size, int device, int host,
             acc_error *err)
{
    ocl_alloc *a = malloc(sizeof(*a));
    size_t b = ocl_bucket((uintptr_t)ptr);

    if (a == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    a->ptr = (uintptr_t)ptr;
    a->base = base;
    a->size = size;
    a->device = device;
    a->host = host;
    pthread_mutex_lock(&ocl_mem.lock);
    a->next = ocl_mem.buckets[b];
    ocl_mem.buckets[b] = a;
    if (!host) {
        ocl_mem.used[device] += size;
    }
    pthread_mutex_unlock(&ocl_mem.lock);
    return ACC_OK;
}

/* Forget the allocation handed out at ptr: its device (-1 when it is not
 * ours) and *base, what clSVMAlloc returned (ptr when not ours). */
static int
ocl_forget(void *ptr, void **base)
{
    size_t b = ocl_bucket((uintptr_t)ptr);
    ocl_alloc *a = NULL;
    int device = -1;

    *base = ptr;
    pthread_mutex_lock(&ocl_mem.lock);
    for (ocl_alloc **p = &ocl_mem.buckets[b]; *p != NULL; p = &(*p)->next) {
        if ((*p)->ptr == (uintptr_t)ptr) {
            a = *p;
            *p = a->next;
            device = a->device;
            *base = a->base;
            if (!a->host) {
                ocl_mem.used[device] -= a->size;
            }
            break;
        }
    }
    pthread_mutex_unlock(&ocl_mem.lock);
    free(a);
    return device;
}

/* The device's SVM capabilities, read once (a device before OpenCL 2.0
 * does not know the query: none). */
static acc_status
ocl_svm_capabilities(int device, cl_device_svm_capabilities *caps,
                     acc_error *err)
{
    acc_status st = ACC_OK;

    pthread_mutex_lock(&ocl.lock);
    if (!ocl.svm_known[device]) {
        cl_device_svm_capabilities c = 0;
        cl_int rc = ocl.fn.clGetDeviceInfo(ocl.devices[device],
                                           CL_DEVICE_SVM_CAPABILITIES,
                                           sizeof(c), &c, NULL);

        if (rc == CL_INVALID_VALUE) {
            c = 0;
            rc = CL_SUCCESS;
        }
        if (rc == CL_SUCCESS) {
            ocl.svm[device] = c;
            ocl.svm_known[device] = 1;
        }
        else {
            st = ocl_fail("clGetDeviceInfo", rc, err);
        }
    }
    *caps = ocl.svm[device];
    pthread_mutex_unlock(&ocl.lock);
    return st;
}

/* The context to allocate SVM of kind `need` in for device, or
 * ACC_ERR_UNSUPPORTED naming what the device lacks. */
static acc_status
ocl_svm_context(int device, cl_device_svm_capabilities need,
                const char *what, cl_context *ctx, acc_error *err)
{
    cl_device_svm_capabilities caps = 0;
    acc_status st = ocl_svm_capabilities(device, &caps, err);
    int fine = need == CL_DEVICE_SVM_FINE_GRAIN_BUFFER;

    if (st != ACC_OK) {
        return st;
    }
    if ((caps & need) == 0) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED,
                      "backend %s does not support %s on device %d: "
                      "the device has no %s shared virtual memory "
                      "(CL_DEVICE_SVM_CAPABILITIES lacks %s; the backend "
                      "needs OpenCL 2.0 SVM for memory)",
                      acc_opencl_backend.name, what, device,
                      fine ? "fine-grain" : "coarse-grain",
                      fine ? "CL_DEVICE_SVM_FINE_GRAIN_BUFFER"
                           : "CL_DEVICE_SVM_COARSE_GRAIN_BUFFER");
        return ACC_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(&ocl.lock);
    st = ocl_context_locked(device, ctx, err);
    pthread_mutex_unlock(&ocl.lock);
    return st;
}

static acc_status
ocl_svm_alloc(int device, size_t nbytes, int host, void **out,
              acc_error *err)
{
    cl_context ctx = NULL;
    void *base, *p;
    acc_status st = ocl_svm_context(
        device, host ? CL_DEVICE_SVM_FINE_GRAIN_BUFFER
                     : CL_DEVICE_SVM_COARSE_GRAIN_BUFFER,
        host ? "page-locked host memory" : "device memory", &ctx, err);

    if (st != ACC_OK) {
        return st;
    }
    base = nbytes > SIZE_MAX - (OCL_ALIGN - 1)
               ? NULL
               : ocl.fn.clSVMAlloc(ctx,
                                   CL_MEM_READ_WRITE
                                       | (host ? CL_MEM_SVM_FINE_GRAIN_BUFFER
                                               : 0),
                                   nbytes + (OCL_ALIGN - 1), 0);
    if (base == NULL) {
        /* clSVMAlloc has no error code: NULL is its allocation failure,
         * reported with OpenCL's code for one. */
        acc_error_driver(err, acc_opencl_backend.name, "clSVMAlloc",
                         CL_MEM_OBJECT_ALLOCATION_FAILURE,
                         ocl_error_name(CL_MEM_OBJECT_ALLOCATION_FAILURE),
                         ACC_ERR_OUT_OF_MEMORY);
        acc_format(err->message, sizeof(err->message),
                   "clSVMAlloc() failed: CL_MEM_OBJECT_ALLOCATION_FAILURE "
                   "(-4): it returned NULL (out of memory, or larger than "
                   "the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE)");
        return ACC_ERR_OUT_OF_MEMORY;
    }
    p = (void *)(((uintptr_t)base + (OCL_ALIGN - 1))
                 & ~(uintptr_t)(OCL_ALIGN - 1));
    st = ocl_remember(p, base, nbytes, device, host, err);
    if (st != ACC_OK) {
        ocl.fn.clSVMFree(ctx, base);
        return st;
    }
    *out = p;
    return ACC_OK;
}

/* The caller guarantees that no queued work still uses ptr (the slot
 * contract), so clSVMFree, which does not wait, frees at once. */
static acc_status
ocl_svm_free(int device, void *ptr, acc_error *err)
{
    void *base;
    int owner = ocl_forget(ptr, &base);
    cl_context ctx = NULL;
    acc_status st;

    pthread_mutex_lock(&ocl.lock);
    st = ocl_context_locked(owner >= 0 ? owner : device, &ctx, err);
    pthread_mutex_unlock(&ocl.lock);
    if (st == ACC_OK) {
        ocl.fn.clSVMFree(ctx, base);
    }
    return st;
}

static acc_status
ocl_mem_alloc(int device, size_t nbytes, uintptr_t *ptr, acc_error *err)
{
    void *p = NULL;
    acc_status st = ocl_svm_alloc(device, nbytes, 0, &p, err);

    if (st == ACC_OK) {
        *ptr = (uintptr_t)p;
    }
    return st;
}

static acc_status
ocl_mem_free(int device, uintptr_t ptr, acc_error *err)
{
    return ocl_svm_free(device, (void *)ptr, err);
}

static acc_status
ocl_host_alloc(int device, size_t nbytes, void **ptr, acc_error *err)
{
    return ocl_svm_alloc(device, nbytes, 1, ptr, err);
}

static acc_status
ocl_host_free(int device, void *ptr, acc_error *err)
{
    return ocl_svm_free(device, ptr, err);
}

/* The queue of s for a copy or fill of our memory: a queue wrapped with
 * Stream.from_handle may belong to another context, where our SVM
 * pointers mean nothing; that is refused. */
static acc_status
ocl_memory_queue(acc_stream *s, cl_command_queue *queue, acc_error *err)
{
    *queue = ocl_queue_of(s);
    if (s->native == &ocl_foreign_context) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED,
                      "backend %s does not support copies or fills on "
                      "a command queue of another OpenCL context (a stream "
                      "wrapped with Stream.from_handle): this module's "
                      "memory belongs to its own context; use a stream of "
                      "this module", acc_opencl_backend.name);
        return ACC_ERR_UNSUPPORTED;
    }
    return ACC_OK;
}

/* Submit the copy or fill just queued on queue.  Should the flush fail,
 * the command is still queued and would touch memory that the caller,
 * told the call failed, may free or reuse: wait for the queue first. */
static acc_status
ocl_submit(cl_command_queue queue, acc_error *err)
{
    acc_status st = CL(clFlush, (queue));

    if (st != ACC_OK) {
        ocl_quiet(ocl.fn.clFinish(queue), "clFinish");
    }
    return st;
}

/* SVM pointers of one context are valid on each of its devices, so one
 * clEnqueueSVMMemcpy serves every kind of copy within a platform; the
 * host side of a pageable copy is ordinary memory, which the runtime
 * reads or writes when the copy runs: a blocking copy returns when it
 * has. */
static acc_status
ocl_mem_copy(acc_stream *s, const acc_copy *c, acc_error *err)
{
    cl_command_queue queue = NULL;
    cl_bool blocking = (c->flags & ACC_COPY_PAGEABLE) ? CL_TRUE : CL_FALSE;
    acc_status st;

    if (c->kind == ACC_COPY_PEER
        && ocl.platform_of[c->dst_device] != ocl.platform_of[c->src_device]) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED,
                      "backend %s does not support copies between "
                      "devices of different OpenCL platforms (devices %d "
                      "and %d: their contexts share no memory)",
                      acc_opencl_backend.name, c->src_device, c->dst_device);
        return ACC_ERR_UNSUPPORTED;
    }
    st = ocl_memory_queue(s, &queue, err);
    if (st != ACC_OK) {
        return st;
    }
    st = CL(clEnqueueSVMMemcpy, (queue, blocking, (void *)c->dst,
                                 (const void *)c->src, c->nbytes, 0, NULL,
                                 NULL));
    if (st == ACC_OK && !blocking) {
        st = ocl_submit(queue, err);
    }
    return st;
}

static acc_status
ocl_mem_fill(acc_stream *s, uintptr_t dst, unsigned char value,
             size_t nbytes, acc_error *err)
{
    cl_command_queue queue = NULL;
    acc_status st = ocl_memory_queue(s, &queue, err);

    if (st == ACC_OK) {
        st = CL(clEnqueueSVMMemFill, (queue, (void *)dst, &value, 1, nbytes,
                                      0, NULL, NULL));
    }
    if (st == ACC_OK) {
        st = ocl_submit(queue, err);
    }
    return st;
}

/* OpenCL cannot look up a pointer: what this backend allocated is known
 * (by range: the allocator hands out addresses inside its segments),
 * anything else is unknown. */
static acc_status
ocl_pointer_info(uintptr_t ptr, acc_pointer_info *info, acc_error *err)
{
    (void)err;
    info->kind = ACC_POINTER_UNKNOWN;
    info->device = -1;
    pthread_mutex_lock(&ocl_mem.lock);
    for (size_t b = 0; b < OCL_ALLOC_BUCKETS; b++) {
        for (ocl_alloc *a = ocl_mem.buckets[b]; a != NULL; a = a->next) {
            if (ptr >= a->ptr && ptr - a->ptr < a->size) {
                info->kind = a->host ? ACC_POINTER_HOST : ACC_POINTER_DEVICE;
                info->device = a->host ? -1 : a->device;
                break;
            }
        }
    }
    pthread_mutex_unlock(&ocl_mem.lock);
    return ACC_OK;
}

/* The allocation of this backend's table holding ptr (an SVM allocation
 * of mem_alloc, as the driver made it). */
static acc_status
ocl_pointer_range(int device, uintptr_t ptr, uintptr_t *base, size_t *size,
                  acc_error *err)
{
    acc_status status = ACC_ERR_NOT_FOUND;

    (void)device;
    (void)err;
    *base = 0;
    *size = 0;
    pthread_mutex_lock(&ocl_mem.lock);
    for (size_t b = 0; b < OCL_ALLOC_BUCKETS && status != ACC_OK; b++) {
        for (ocl_alloc *a = ocl_mem.buckets[b]; a != NULL; a = a->next) {
            if (ptr >= a->ptr && ptr - a->ptr < a->size) {
                *base = a->ptr;
                *size = a->size;
                status = ACC_OK;
                break;
            }
        }
    }
    pthread_mutex_unlock(&ocl_mem.lock);
    return status;
}

/* OpenCL cannot say how much device memory is free: total is the device's
 * global memory, free that less what this process allocated through this
 * backend. */
static acc_status
ocl_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
                acc_error *err)
{
    cl_ulong total = 0;
    unsigned long long used;
    acc_status st = CL(clGetDeviceInfo, (ocl.devices[device],
                                         CL_DEVICE_GLOBAL_MEM_SIZE,
                                         sizeof(total), &total, NULL));

    if (st == ACC_OK) {
        pthread_mutex_lock(&ocl_mem.lock);
        used = ocl_mem.used[device];
        pthread_mutex_unlock(&ocl_mem.lock);
        *total_bytes = (size_t)total;
        *free_bytes = (size_t)(total > used ? total - used : 0);
    }
    return st;
}

/* The child of fork(): only our own locks can be taken there (the
 * dispatcher calls no backend in a child of an initialised parent). */
static void
ocl_after_fork_child(void)
{
    pthread_mutex_init(&ocl.lock, NULL);
    pthread_mutex_init(&ocl_mem.lock, NULL);
}
/* Kernels ---------------------------------------------------------------- */

/* A program built for one device. */
typedef struct ocl_program {
    cl_program program;
    int device;
} ocl_program;

/* A kernel: its user parameters are the kernel's parameters less its
 * __local pointers, which receive the launch's shared_mem instead (as
 * CUDA's dynamic shared memory).  OpenCL keeps arguments on the kernel
 * object, so setting them and enqueueing is one step under lock. */
typedef struct ocl_kernel {
    cl_kernel kernel;
    int device;
    pthread_mutex_t lock;
    cl_uint nargs;          /* the kernel's parameters, __local ones too */
    int nuser;              /* the user's; -1 when arg info is missing */
    cl_uint *param_of;      /* user argument i -> its parameter index */
    unsigned char *local;   /* per parameter: a __local pointer */
} ocl_kernel;

/* The build log of program on device (malloc'd; NULL if none). */
static char *
ocl_build_log(cl_program program, int device)
{
    size_t size = 0;
    char *log;

    if (ocl.fn.clGetProgramBuildInfo(program, ocl.devices[device],
                                     CL_PROGRAM_BUILD_LOG, 0, NULL, &size)
            != CL_SUCCESS
        || size == 0) {
        return NULL;
    }
    log = malloc(size + 1);
    if (log == NULL) {
        return NULL;
    }
    if (ocl.fn.clGetProgramBuildInfo(program, ocl.devices[device],
                                     CL_PROGRAM_BUILD_LOG, size, log, NULL)
        != CL_SUCCESS) {
        free(log);
        return NULL;
    }
    log[size] = '\0';
    return log;
}

/* The options for clBuildProgram: the user's, with -cl-kernel-arg-info
 * (the parameters' types: sizes for bare numbers, __local pointers). */
static char *
ocl_build_options(const char *options)
{
    const char *info = "-cl-kernel-arg-info";
    size_t n = options != NULL ? strlen(options) : 0;
    char *text = malloc(n + strlen(info) + 2);

    if (text != NULL) {
        snprintf(text, n + strlen(info) + 2, "%s%s%s", info,
                 n > 0 ? " " : "", n > 0 ? options : "");
    }
    return text;
}

static acc_status
ocl_module_load(int device, acc_code_format format, const void *code,
                size_t size, const char *options, void **module, char **log,
                acc_error *err)
{
    ocl_program *p = calloc(1, sizeof(*p));
    cl_device_id dev = ocl.devices[device];
    cl_context ctx = NULL;
    cl_int rc = CL_SUCCESS;
    const char *api;
    char *flags;
    acc_status st;

    *log = NULL;
    if (p == NULL) {
        return acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory"),
               ACC_ERR_HOST_MEMORY;
    }
    pthread_mutex_lock(&ocl.lock);
    st = ocl_context_locked(device, &ctx, err);
    pthread_mutex_unlock(&ocl.lock);
    if (st != ACC_OK) {
        free(p);
        return st;
    }
    /* code_formats: OpenCL C only (see the descriptor). */
    (void)format;
    {
        const char *text = code;

        api = "clCreateProgramWithSource";
        p->program = ocl.fn.clCreateProgramWithSource(ctx, 1, &text, &size,
                                                      &rc);
    }
    if (rc != CL_SUCCESS || p->program == NULL) {
        if (p->program != NULL) {
            ocl_quiet(ocl.fn.clReleaseProgram(p->program),
                      "clReleaseProgram");
        }
        free(p);
        return ocl_fail(api, rc != CL_SUCCESS ? rc : CL_OUT_OF_RESOURCES,
                        err);
    }
    flags = ocl_build_options(options);
    if (flags == NULL) {
        ocl_quiet(ocl.fn.clReleaseProgram(p->program), "clReleaseProgram");
        free(p);
        return acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory"),
               ACC_ERR_HOST_MEMORY;
    }
    rc = ocl.fn.clBuildProgram(p->program, 1, &dev, flags, NULL, NULL);
    free(flags);
    if (rc != CL_SUCCESS) {
        st = ocl_fail("clBuildProgram", rc, err);
        if (rc == CL_BUILD_PROGRAM_FAILURE || rc == CL_INVALID_BUILD_OPTIONS
            || rc == CL_COMPILE_PROGRAM_FAILURE) {
            *log = ocl_build_log(p->program, device);
            err->status = st = ACC_ERR_BUILD;
        }
        ocl_quiet(ocl.fn.clReleaseProgram(p->program), "clReleaseProgram");
        free(p);
        return st;
    }
    p->device = device;
    *module = p;
    return ACC_OK;
}

static void
ocl_module_unload(int device, void *module)
{
    ocl_program *p = module;

    (void)device;
    ocl_quiet(ocl.fn.clReleaseProgram(p->program), "clReleaseProgram");
    free(p);
}

static acc_status
ocl_kernel_names(int device, void *module, char *names, size_t size,
                 acc_error *err)
{
    ocl_program *p = module;

    (void)device;
    char *list, *rest = NULL;
    size_t n = 0, used = 0;

    names[0] = '\0';
    if (CL(clGetProgramInfo, (p->program, CL_PROGRAM_KERNEL_NAMES, 0, NULL,
                              &n)) != ACC_OK) {
        return err->status;
    }
    /* Zeroed: PoCL tells an empty program's list as 1 byte and writes
     * none of it. */
    list = calloc(n + 1, 1);
    if (list == NULL) {
        return ACC_OK;   /* the names are only for a message */
    }
    if (CL(clGetProgramInfo, (p->program, CL_PROGRAM_KERNEL_NAMES, n, list,
                              NULL)) != ACC_OK) {
        free(list);
        return err->status;
    }
    list[n] = '\0';
    /* OpenCL separates them with ';', we with ", ". */
    for (char *name = strtok_r(list, ";", &rest);
         name != NULL && used < size; name = strtok_r(NULL, ";", &rest)) {
        used += (size_t)snprintf(names + used, size - used, "%s%s",
                                 used > 0 ? ", " : "", name);
    }
    free(list);
    return ACC_OK;
}

/* What an OpenCL C type name passes: its size and kind (size 0: a type
 * this table does not know, such as a vector or a struct). */
static void
ocl_param_of_type(const char *type, acc_param *out)
{
    static const struct {
        const char *name;
        size_t size;
        acc_param_kind kind;
    } types[] = {
        {"char", 1, ACC_PARAM_INT},    {"uchar", 1, ACC_PARAM_UINT},
        {"short", 2, ACC_PARAM_INT},   {"ushort", 2, ACC_PARAM_UINT},
        {"int", 4, ACC_PARAM_INT},     {"uint", 4, ACC_PARAM_UINT},
        {"long", 8, ACC_PARAM_INT},    {"ulong", 8, ACC_PARAM_UINT},
        {"half", 2, ACC_PARAM_FLOAT},  {"float", 4, ACC_PARAM_FLOAT},
        {"double", 8, ACC_PARAM_FLOAT}, {"size_t", 8, ACC_PARAM_UINT},
        {"unsigned char", 1, ACC_PARAM_UINT},
        {"unsigned short", 2, ACC_PARAM_UINT},
        {"unsigned int", 4, ACC_PARAM_UINT},
        {"unsigned long", 8, ACC_PARAM_UINT},
    };

    out->size = 0;
    out->kind = ACC_PARAM_UNKNOWN;
    if (strchr(type, '*') != NULL) {
        out->size = sizeof(void *);
        out->kind = ACC_PARAM_POINTER;
        return;
    }
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcmp(type, types[i].name) == 0) {
            out->size = types[i].size;
            out->kind = types[i].kind;
            return;
        }
    }
}

/* The parameters of k (its arg info, when the program kept it): which are
 * __local pointers, and the user's parameters into info. */
static acc_status
ocl_kernel_params(ocl_kernel *k, acc_kernel_info *info, acc_error *err)
{
    int nuser = 0;

    k->local = calloc(k->nargs + 1, 1);
    k->param_of = calloc(k->nargs + 1, sizeof(*k->param_of));
    if (k->local == NULL || k->param_of == NULL) {
        return acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory"),
               ACC_ERR_HOST_MEMORY;
    }
    for (cl_uint i = 0; i < k->nargs; i++) {
        cl_kernel_arg_address_qualifier q = 0;
        char type[128] = "";
        cl_int rc = ocl.fn.clGetKernelArgInfo(
            k->kernel, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof(q), &q,
            NULL);

        if (rc == CL_KERNEL_ARG_INFO_NOT_AVAILABLE) {
            k->nuser = -1;   /* a binary without it: the user knows */
            info->nparams = -1;
            for (cl_uint j = 0; j < k->nargs; j++) {
                k->param_of[j] = j;
            }
            return ACC_OK;
        }
        if (ocl_check(rc, "clGetKernelArgInfo", err) != ACC_OK
            || CL(clGetKernelArgInfo, (k->kernel, i, CL_KERNEL_ARG_TYPE_NAME,
                                       sizeof(type), type, NULL))
                   != ACC_OK) {
            return err->status;
        }
        type[sizeof(type) - 1] = '\0';
        if (q == CL_KERNEL_ARG_ADDRESS_LOCAL) {
            k->local[i] = 1;
            info->shared_params++;
            continue;
        }
        if (nuser < ACC_MAX_KERNEL_PARAMS) {
            ocl_param_of_type(type, &info->params[nuser]);
        }
        k->param_of[nuser++] = i;
    }
    k->nuser = nuser;
    info->nparams = nuser;
    return ACC_OK;
}

/* The device's and the kernel's limits into info. */
static acc_status
ocl_kernel_limits(ocl_kernel *k, acc_kernel_info *info, acc_error *err)
{
    cl_device_id dev = ocl.devices[k->device];
    size_t group = 0, sizes[3] = {0, 0, 0};
    cl_ulong local = 0, private_mem = 0, device_local = 0;
    cl_uint dims = 0;

    if (CL(clGetKernelWorkGroupInfo, (k->kernel, dev,
                                      CL_KERNEL_WORK_GROUP_SIZE,
                                      sizeof(group), &group, NULL)) != ACC_OK
        || CL(clGetKernelWorkGroupInfo, (k->kernel, dev,
                                         CL_KERNEL_LOCAL_MEM_SIZE,
                                         sizeof(local), &local, NULL))
               != ACC_OK
        || CL(clGetKernelWorkGroupInfo, (k->kernel, dev,
                                         CL_KERNEL_PRIVATE_MEM_SIZE,
                                         sizeof(private_mem), &private_mem,
                                         NULL)) != ACC_OK
        || CL(clGetDeviceInfo, (dev, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS,
                                sizeof(dims), &dims, NULL)) != ACC_OK
        || CL(clGetDeviceInfo, (dev, CL_DEVICE_MAX_WORK_ITEM_SIZES,
                                sizeof(sizes), sizes, NULL)) != ACC_OK
        || CL(clGetDeviceInfo, (dev, CL_DEVICE_LOCAL_MEM_SIZE,
                                sizeof(device_local), &device_local, NULL))
               != ACC_OK) {
        return err->status;
    }
    info->max_threads_per_block = group > INT_MAX ? INT_MAX : (int)group;
    for (int i = 0; i < 3; i++) {
        info->max_block[i] = (cl_uint)i < dims && sizes[i] <= INT_MAX
                                 ? (int)sizes[i]
                                 : 0;
    }
    info->shared_bytes = (long long)local;
    info->local_bytes = (long long)private_mem;
    info->max_shared_bytes = device_local > local
                                 ? (long long)(device_local - local)
                                 : 0;
    return ACC_OK;
}

static void
ocl_kernel_free(ocl_kernel *k)
{
    if (k->kernel != NULL) {
        ocl_quiet(ocl.fn.clReleaseKernel(k->kernel), "clReleaseKernel");
    }
    pthread_mutex_destroy(&k->lock);
    free(k->param_of);
    free(k->local);
    free(k);
}

static acc_status
ocl_kernel_get(int device, void *module, const char *name, void **kernel,
               acc_kernel_info *info, acc_error *err)
{
    ocl_program *p = module;
    ocl_kernel *k = calloc(1, sizeof(*k));
    cl_int rc = CL_SUCCESS;
    acc_status st;

    if (k == NULL) {
        return acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory"),
               ACC_ERR_HOST_MEMORY;
    }
    pthread_mutex_init(&k->lock, NULL);
    k->device = device;
    k->kernel = ocl.fn.clCreateKernel(p->program, name, &rc);
    if (rc != CL_SUCCESS || k->kernel == NULL) {
        k->kernel = NULL;
        ocl_kernel_free(k);
        if (rc == CL_INVALID_KERNEL_NAME) {
            err->status = ACC_ERR_NOT_FOUND;
            return ACC_ERR_NOT_FOUND;
        }
        return ocl_fail("clCreateKernel",
                        rc != CL_SUCCESS ? rc : CL_OUT_OF_RESOURCES, err);
    }
    st = CL(clGetKernelInfo, (k->kernel, CL_KERNEL_NUM_ARGS,
                              sizeof(k->nargs), &k->nargs, NULL));
    if (st == ACC_OK) {
        st = ocl_kernel_params(k, info, err);
    }
    if (st == ACC_OK) {
        st = ocl_kernel_limits(k, info, err);
    }
    if (st != ACC_OK) {
        ocl_kernel_free(k);
        return st;
    }
    *kernel = k;
    return ACC_OK;
}

static void
ocl_kernel_release(int device, void *kernel)
{
    (void)device;
    ocl_kernel_free(kernel);
}

/* The arguments of c onto k (lock held). */
static acc_status
ocl_set_args(ocl_kernel *k, const acc_launch_config *c, acc_error *err)
{
    for (int i = 0; i < c->nargs; i++) {
        const acc_kernel_arg *a = &c->args[i];
        cl_uint param = k->nuser < 0 ? (cl_uint)i : k->param_of[i];
        acc_status st;

        if (a->flags & ACC_ARG_MEMORY) {
            uintptr_t address;

            memcpy(&address, a->value, sizeof(address));
            st = CL(clSetKernelArgSVMPointer, (k->kernel, param,
                                               (const void *)address));
        }
        else {
            st = CL(clSetKernelArg, (k->kernel, param, a->size, a->value));
        }
        if (st != ACC_OK) {
            return st;
        }
    }
    for (cl_uint i = 0; i < k->nargs; i++) {
        if (k->local[i]
            && CL(clSetKernelArg, (k->kernel, i, c->shared_mem, NULL))
                   != ACC_OK) {
            return err->status;
        }
    }
    return ACC_OK;
}

/* OpenCL's NDRange: global = grid x block work-items, local = block. */
static acc_status
ocl_launch(acc_stream *s, void *kernel, const acc_launch_config *c,
           acc_error *err)
{
    ocl_kernel *k = kernel;
    cl_command_queue queue = NULL;
    size_t global[3], local[3];
    cl_uint dims = 1;
    acc_status st = ocl_memory_queue(s, &queue, err);

    if (st != ACC_OK) {
        return st;
    }
    for (int i = 0; i < 3; i++) {
        global[i] = (size_t)c->grid[i] * c->block[i];
        local[i] = c->block[i];
        if (global[i] > 1) {
            dims = (cl_uint)i + 1;
        }
    }
    pthread_mutex_lock(&k->lock);
    st = ocl_set_args(k, c, err);
    if (st == ACC_OK) {
        st = CL(clEnqueueNDRangeKernel, (queue, k->kernel, dims, NULL, global,
                                         local, 0, NULL, NULL));
    }
    pthread_mutex_unlock(&k->lock);
    if (st == ACC_OK) {
        st = ocl_submit(queue, err);
    }
    return st;
}

ACC_BACKEND_HOST_DEFINE(opencl_attach)

const acc_backend acc_opencl_backend = {
    ACC_BACKEND_ABI,
    .attach = opencl_attach,
    .name = "opencl",
    .device_type = "opencl",
    .display_type = "OpenCL",
    .processor_label = "compute units",
    .torch_device_type = 4,  /* c10::DeviceType::OPENCL */
    .dlpack_device_type = 4, /* kDLOpenCL */
    .caps = 0,
    /* OpenCL C, built by the driver.  SPIR-V (clCreateProgramWithIL) and
     * program binaries are not taken: PoCL 3.1, the runtime this backend
     * is tested on, takes no IL and gives no binary to test with. */
    .code_formats = ACC_FORMAT_BIT(ACC_FORMAT_OPENCL_C),
    .pointer_params_take_memory =
        "OpenCL reads the bytes clSetKernelArg gives a __global pointer as "
        "a cl_mem handle, so an address passed as a number would be "
        "followed as one; this backend passes a Buffer's address with "
        "clSetKernelArgSVMPointer",
    .ipc_unsupported =
        "OpenCL has no interprocess memory or events (cl_khr_external_memory "
        "is an optional extension, which PoCL 3.1 lacks)",
    .graphs_unsupported =
        "an OpenCL graph would be a command buffer (cl_khr_command_buffer), "
        "and the versions of it that this backend is built against and "
        "PoCL 3.1 implements have no SVM copy or fill commands and no event "
        "markers, which is all this module enqueues",
    .probe = ocl_probe,
    .select_devices = ocl_select_devices,
    .shutdown = ocl_shutdown,
    .after_fork_child = ocl_after_fork_child,
    .device_activate = NULL,
    .device_synchronize = ocl_device_synchronize,
    .device_properties = ocl_device_properties,
    .stream_default = ocl_stream_default,
    .stream_priority_range = NULL,
    .stream_create = ocl_stream_create,
    .stream_wrap = ocl_stream_wrap,
    .stream_destroy = ocl_stream_destroy,
    .stream_query = ocl_stream_query,
    .stream_synchronize = ocl_stream_synchronize,
    .stream_wait_event = ocl_stream_wait_event,
    .event_create = ocl_event_create,
    .event_destroy = ocl_event_destroy,
    .event_record = ocl_event_record,
    .event_query = ocl_event_query,
    .event_synchronize = ocl_event_synchronize,
    .event_elapsed_ms = ocl_event_elapsed_ms,
    .memory_info = ocl_memory_info,
    .mem_alloc = ocl_mem_alloc,
    .mem_free = ocl_mem_free,
    .host_alloc = ocl_host_alloc,
    .host_free = ocl_host_free,
    .mem_copy = ocl_mem_copy,
    .mem_fill = ocl_mem_fill,
    .pointer_info = ocl_pointer_info,
    .pointer_range = ocl_pointer_range,
    .module_load = ocl_module_load,
    .module_unload = ocl_module_unload,
    .kernel_get = ocl_kernel_get,
    .kernel_release = ocl_kernel_release,
    .launch = ocl_launch,
    .kernel_names = ocl_kernel_names,
};
