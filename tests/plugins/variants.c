/*
 * variants.c - small backend plugins for tests/test_plugins.py, one per
 * way a plugin can be refused (and a few that load), chosen by macros at
 * compile time:
 *
 *   NAME, DEVICE_TYPE   the table's name and device type ("variant")
 *   NO_ENTRY            export no accelerator_backend_plugin
 *   NULL_TABLE          accelerator_backend_plugin() returns NULL
 *   ABI_MAJOR, ABI_MINOR  the table's ABI version (the header's)
 *   STRUCT_SIZE         the table's struct_size (sizeof(acc_backend))
 *   APPENDED_SLOT       the table is followed by one more slot, of this
 *                       value (0: NULL), and struct_size counts it: a
 *                       plugin built for a newer minor version
 *   WITHOUT_STREAM_QUERY  a required slot left NULL
 *   PARTIAL_MEMORY      mem_alloc filled without the rest of its group
 *   PROBE_FAILS         the probe fails, with a reason of its own
 *   UNDEFINED_SYMBOL    the probe calls a function nothing defines (the
 *                       file then does not load)
 *
 * The slots do the least a backend may: the tests only load, check and
 * probe these plugins (tests/test_plugins.py runs a real one, the
 * template, end to end).
 */
#include <accelerator/backend.h>

#include <stdio.h>

#ifndef NAME
#define NAME "variant"
#endif
#ifndef DEVICE_TYPE
#define DEVICE_TYPE NAME
#endif
#ifndef ABI_MAJOR
#define ABI_MAJOR ACCELERATOR_BACKEND_ABI_MAJOR
#endif
#ifndef ABI_MINOR
#define ABI_MINOR ACCELERATOR_BACKEND_ABI_MINOR
#endif
#ifndef STRUCT_SIZE
#define STRUCT_SIZE sizeof(table)
#endif

#ifdef UNDEFINED_SYMBOL
void variant_nowhere(void);
#endif

static acc_status
variant_probe(acc_probe_result *out, acc_error *err)
{
#ifdef UNDEFINED_SYMBOL
    variant_nowhere();
#endif
    out->library = "(none)";
#ifdef PROBE_FAILS
    err->status = ACC_ERR_NO_ACCELERATOR;
    snprintf(err->message, sizeof(err->message),
             "the variant's own reason: no device here");
    return ACC_ERR_NO_ACCELERATOR;
#else
    (void)err;
    out->loaded = 1;
    out->device_count = 1;
    return ACC_OK;
#endif
}

static acc_status
ok_device(int device, acc_error *err)
{
    (void)device;
    (void)err;
    return ACC_OK;
}

static acc_status
ok_stream_device(int device, acc_stream *s, acc_error *err)
{
    (void)device;
    (void)err;
    s->handle = 1;
    return ACC_OK;
}

static acc_status
ok_stream(acc_stream *s, acc_error *err)
{
    (void)s;
    (void)err;
    return ACC_OK;
}

static void
no_stream(acc_stream *s)
{
    (void)s;
}

static acc_status
ok_stream_event(acc_stream *s, acc_event *e, acc_error *err)
{
    (void)s;
    (void)e;
    (void)err;
    return ACC_OK;
}

static acc_status
ok_event(acc_event *e, acc_error *err)
{
    (void)e;
    (void)err;
    return ACC_OK;
}

static void
no_event(acc_event *e)
{
    (void)e;
}

static acc_status
ok_event_stream(acc_event *e, acc_stream *s, acc_error *err)
{
    (void)e;
    (void)s;
    (void)err;
    return ACC_OK;
}

#ifdef PARTIAL_MEMORY
static acc_status
ok_alloc(int device, size_t nbytes, uintptr_t *ptr, acc_error *err)
{
    (void)device;
    (void)nbytes;
    (void)err;
    *ptr = 256;
    return ACC_OK;
}
#endif

/* The table, and after it the slot of a newer minor version. */
static const struct {
    acc_backend backend;
#ifdef APPENDED_SLOT
    void *appended;
#endif
} table = {
    .backend = {
        .abi_major = ABI_MAJOR,
        .abi_minor = ABI_MINOR,
        .struct_size = STRUCT_SIZE,
        .name = NAME,
        .device_type = DEVICE_TYPE,
        .display_type = "Variant",
        .processor_label = "units",
        .probe = variant_probe,
        .device_synchronize = ok_device,
        .stream_default = ok_stream_device,
        .stream_create = ok_stream,
        .stream_destroy = no_stream,
#ifndef WITHOUT_STREAM_QUERY
        .stream_query = ok_stream,
#endif
        .stream_synchronize = ok_stream,
        .stream_wait_event = ok_stream_event,
        .event_create = ok_event,
        .event_destroy = no_event,
        .event_record = ok_event_stream,
        .event_query = ok_event,
        .event_synchronize = ok_event,
#ifdef PARTIAL_MEMORY
        .mem_alloc = ok_alloc,
#endif
    },
#ifdef APPENDED_SLOT
    .appended = (void *)(APPENDED_SLOT),
#endif
};

#ifndef NO_ENTRY
__attribute__((visibility("default"))) const acc_backend *
accelerator_backend_plugin(void)
{
#ifdef NULL_TABLE
    return NULL;
#else
    return &table.backend;
#endif
}
#endif
