/*
 * backend.c - a backend plugin for accelerator, to copy and fill in
 * (docs/plugins.rst: "Write a backend in C").
 *
 * This one runs on the host: its one device is the machine's memory and
 * every operation runs at once, in the calling thread, when it is queued
 * (so a stream is always idle and an event always complete: stream order
 * holds trivially).  Each slot says what a driver of a real device does
 * there; replace the body with the driver's call, keep the contract
 * (accelerator/backend.h documents each slot).
 *
 * It compiles against the public header alone:
 *
 *     cc -shared -fPIC -fvisibility=hidden \
 *        -I"$(python -c 'import accelerator; print(accelerator.get_include())')" \
 *        backend.c -o libaccelerator_template.so
 *
 * and loads with ACCELERATOR_BACKEND_PLUGINS=$PWD/libaccelerator_template.so,
 * or through the entry point of the package around it (setup.py).
 */
#define _GNU_SOURCE
/* The name of this backend's pointer to the host services that the core
 * lends every backend (acc_trace, acc_error_set): see attach below. */
#define ACC_BACKEND_HOST template_host
#include <accelerator/backend.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

/* The name users write (ACCELERATOR_BACKEND=template) and the device
 * type of "template:0": rename both for a backend of your own. */
#ifndef TEMPLATE_NAME
#define TEMPLATE_NAME "template"
#endif

#define ALIGNMENT 256

/* Errors --------------------------------------------------------------- */

/* The host services: the core calls template_attach (the table's attach
 * slot) before any other slot, and acc_trace and acc_error_set reach the
 * core through the pointer it sets. */
ACC_BACKEND_HOST_DEFINE(template_attach)

/* Fill err for a failed call of the C library's `api`: a real backend
 * calls acc_error_driver(err, name, api, code, code_name, status) with its
 * driver's code and the driver's name for it. */
static acc_status
template_errno(acc_error *err, const char *api)
{
    acc_error_driver(err, TEMPLATE_NAME, api, errno, strerror(errno),
                     ACC_ERR_DRIVER);
    return ACC_ERR_DRIVER;
}

/* Lifetime ------------------------------------------------------------- */

static acc_status
template_probe(acc_probe_result *out, acc_error *err)
{
    /* A real backend opens its driver library here (dlopen), resolves its
     * symbols and counts the devices, creating no context. */
    (void)err;
    acc_trace(TEMPLATE_NAME ": one device, the host");
    out->library = "(the host)";
    out->loaded = 1;
    out->device_count = 1;
    snprintf(out->driver_version_text, sizeof(out->driver_version_text),
             "1.0");
    snprintf(out->counted_by, sizeof(out->counted_by), "the template");
    return ACC_OK;
}

/* Devices -------------------------------------------------------------- */

static acc_status
template_device_synchronize(int device, acc_error *err)
{
    /* Everything ran when it was queued. */
    (void)device;
    (void)err;
    return ACC_OK;
}

static acc_status
template_device_properties(int device, acc_device_properties *props,
                           acc_error *err)
{
    struct sysinfo si;

    (void)device;
    if (sysinfo(&si) != 0) {
        return template_errno(err, "sysinfo");
    }
    memset(props, 0, sizeof(*props));
    snprintf(props->name, sizeof(props->name), "Template host device");
    props->total_memory = (unsigned long long)si.totalram * si.mem_unit;
    props->multi_processor_count = (int)sysconf(_SC_NPROCESSORS_ONLN);
    props->major = props->minor = -1;
    props->integrated = 1;
    return ACC_OK;
}

static acc_status
template_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
                     acc_error *err)
{
    struct sysinfo si;

    (void)device;
    if (sysinfo(&si) != 0) {
        return template_errno(err, "sysinfo");
    }
    *free_bytes = (size_t)si.freeram * si.mem_unit;
    *total_bytes = (size_t)si.totalram * si.mem_unit;
    return ACC_OK;
}

/* Streams -------------------------------------------------------------- */

/* A stream's native object: a real backend keeps the driver's queue. */
typedef struct template_stream {
    int device;
} template_stream;

static template_stream default_stream = {0};

static acc_status
template_stream_default(int device, acc_stream *s, acc_error *err)
{
    (void)device;
    (void)err;
    s->native = &default_stream;
    s->handle = (uintptr_t)&default_stream;
    return ACC_OK;
}

static acc_status
template_stream_create(acc_stream *s, acc_error *err)
{
    template_stream *native = calloc(1, sizeof(*native));

    if (native == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    native->device = s->device;
    s->native = native;
    s->handle = (uintptr_t)native;
    return ACC_OK;
}

static void
template_stream_destroy(acc_stream *s)
{
    free(s->native);
}

static acc_status
template_stream_query(acc_stream *s, acc_error *err)
{
    /* ACC_NOT_READY while queued work runs. */
    (void)s;
    (void)err;
    return ACC_OK;
}

static acc_status
template_stream_synchronize(acc_stream *s, acc_error *err)
{
    (void)s;
    (void)err;
    return ACC_OK;
}

static acc_status
template_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err)
{
    /* A real backend queues a wait for e on s; e completed already. */
    (void)s;
    (void)e;
    (void)err;
    return ACC_OK;
}

/* Events --------------------------------------------------------------- */

typedef struct template_event {
    struct timespec at;      /* when the work recorded before it ended */
} template_event;

static acc_status
template_event_create(acc_event *e, acc_error *err)
{
    template_event *native = calloc(1, sizeof(*native));

    if (native == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    e->native = native;
    e->handle = (uintptr_t)native;
    return ACC_OK;
}

static void
template_event_destroy(acc_event *e)
{
    free(e->native);
}

static acc_status
template_event_record(acc_event *e, acc_stream *s, acc_error *err)
{
    template_event *native = e->native;

    (void)s;
    if (clock_gettime(CLOCK_MONOTONIC, &native->at) != 0) {
        return template_errno(err, "clock_gettime");
    }
    return ACC_OK;
}

static acc_status
template_event_query(acc_event *e, acc_error *err)
{
    (void)e;
    (void)err;
    return ACC_OK;
}

static acc_status
template_event_synchronize(acc_event *e, acc_error *err)
{
    (void)e;
    (void)err;
    return ACC_OK;
}

static acc_status
template_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                          acc_error *err)
{
    const template_event *a = start->native, *b = end->native;

    (void)err;
    *ms = (float)((double)(b->at.tv_sec - a->at.tv_sec) * 1e3
                  + (double)(b->at.tv_nsec - a->at.tv_nsec) / 1e6);
    return ACC_OK;
}

/* Memory --------------------------------------------------------------- */

static acc_status
template_mem_alloc(int device, size_t nbytes, uintptr_t *ptr,
                   acc_error *err)
{
    size_t rounded = (nbytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    void *p;

    (void)device;
    p = rounded >= nbytes ? aligned_alloc(ALIGNMENT, rounded) : NULL;
    if (p == NULL) {
        /* The core adds the size and the free and total memory. */
        acc_error_set(err, ACC_ERR_OUT_OF_MEMORY, "out of memory");
        return ACC_ERR_OUT_OF_MEMORY;
    }
    *ptr = (uintptr_t)p;
    return ACC_OK;
}

static acc_status
template_mem_free(int device, uintptr_t ptr, acc_error *err)
{
    (void)device;
    (void)err;
    free((void *)ptr);
    return ACC_OK;
}

static acc_status
template_host_alloc(int device, size_t nbytes, void **ptr, acc_error *err)
{
    /* A real backend asks its driver for page-locked memory. */
    (void)device;
    *ptr = malloc(nbytes);
    if (*ptr == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    return ACC_OK;
}

static acc_status
template_host_free(int device, void *ptr, acc_error *err)
{
    (void)device;
    (void)err;
    free(ptr);
    return ACC_OK;
}

static acc_status
template_mem_copy(acc_stream *s, const acc_copy *c, acc_error *err)
{
    /* Every side is host memory here; a real backend queues the copy of
     * c->kind on s. */
    (void)s;
    (void)err;
    memmove((void *)c->dst, (const void *)c->src, c->nbytes);
    return ACC_OK;
}

static acc_status
template_mem_fill(acc_stream *s, uintptr_t dst, unsigned char value,
                  size_t nbytes, acc_error *err)
{
    (void)s;
    (void)err;
    memset((void *)dst, value, nbytes);
    return ACC_OK;
}

/* The table ------------------------------------------------------------ */

static const acc_backend template_backend = {
    ACC_BACKEND_ABI,
    .name = TEMPLATE_NAME,
    .device_type = TEMPLATE_NAME,
    .display_type = "Template",
    .processor_label = "host processors",
    .torch_device_type = 20,  /* c10::DeviceType::PrivateUse1 */
    .dlpack_device_type = 12, /* kDLExtDev: reserved for extensions */
    .graphs_unsupported = "the template backend records no graphs",
    .attach = template_attach,
    .probe = template_probe,
    .device_synchronize = template_device_synchronize,
    .device_properties = template_device_properties,
    .stream_default = template_stream_default,
    .stream_create = template_stream_create,
    .stream_destroy = template_stream_destroy,
    .stream_query = template_stream_query,
    .stream_synchronize = template_stream_synchronize,
    .stream_wait_event = template_stream_wait_event,
    .event_create = template_event_create,
    .event_destroy = template_event_destroy,
    .event_record = template_event_record,
    .event_query = template_event_query,
    .event_synchronize = template_event_synchronize,
    .event_elapsed_ms = template_event_elapsed_ms,
    .memory_info = template_memory_info,
    .mem_alloc = template_mem_alloc,
    .mem_free = template_mem_free,
    .host_alloc = template_host_alloc,
    .host_free = template_host_free,
    .mem_copy = template_mem_copy,
    .mem_fill = template_mem_fill,
};

/* The one symbol the plugin exports: the core calls it once, at the
 * probe, and keeps the table. */
__attribute__((visibility("default"))) const acc_backend *
accelerator_backend_plugin(void)
{
    return &template_backend;
}
