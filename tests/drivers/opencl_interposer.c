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
 *   counted when the real call succeeded).
 *   int fake_ocl_enqueue_sleep(unsigned long long queue, double ms)
 *   int fake_ocl_enqueue_gate(unsigned long long queue, int *gate)
 *       Work that completes when the test calls fake_ocl_open_gate(*gate).
 *   int fake_ocl_open_gate(int gate)
 *       Queues a native kernel that sleeps ms milliseconds on that command
 *       queue, and flushes it: timed work, like a kernel launch.  Returns
 *       the cl_int of the real calls (CL_INVALID_VALUE for a bad ms).
 *
 * Environment, read when the library is loaded:
 *   FAKE_OCL_LIBRARY  the real ICD loader (libOpenCL.so.1)
 *   FAKE_OCL_FAIL     faults installed at load: "name:nth:code,..."
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../csrc/backends/opencl_api.h"
#include "double_control.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

/* Our declarations of the exported functions, from the backend's list. */
#define FAKE_DECLARE(name, ret, params) FAKE_EXPORT ret name params;
ACC_OPENCL_FUNCTIONS(FAKE_DECLARE)
#undef FAKE_DECLARE

FAKE_EXPORT int fake_ocl_enqueue_sleep(unsigned long long queue, double ms);
FAKE_EXPORT int fake_ocl_enqueue_gate(unsigned long long queue, int *gate);
FAKE_EXPORT int fake_ocl_open_gate(int gate);

#define FAKE_FN_ID(name, ret, params) FN_##name,
enum { ACC_OPENCL_FUNCTIONS(FAKE_FN_ID) FN_COUNT };
#undef FAKE_FN_ID

#define FAKE_FN_NAME(name, ret, params) {#name, NULL},
static const dc_fn fake_fns[FN_COUNT] = {ACC_OPENCL_FUNCTIONS(FAKE_FN_NAME)};
#undef FAKE_FN_NAME

enum { LIVE_CONTEXT, LIVE_QUEUE, LIVE_EVENT, LIVE_KINDS };
static const char *const live_kinds[LIVE_KINDS] = {"context", "queue",
                                                   "event"};
static atomic_llong g_calls[FN_COUNT];
static atomic_llong g_live[LIVE_KINDS];
static dc_control g_ctl = {
    DC_CONTROL_INIT("opencl interposer", fake_fns, g_calls, live_kinds,
                    g_live),
};

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
    dc_env_faults(&g_ctl, "FAKE_OCL_FAIL");
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

cl_int
clGetDeviceInfo(cl_device_id device, cl_device_info param_name,
                size_t param_value_size, void *param_value,
                size_t *param_value_size_ret)
{
    ENTER(clGetDeviceInfo);
    return real.clGetDeviceInfo(device, param_name, param_value_size,
                                param_value, param_value_size_ret);
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
