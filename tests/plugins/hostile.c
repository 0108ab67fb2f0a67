/*
 * hostile.c - one backend plugin for the hostile tests of plugin loading
 * (tests/test_plugins_hostile.py), configured when it is loaded by
 * environment variables, so that one build serves every case:
 *
 *   HOSTILE_NAME, HOSTILE_TYPE, HOSTILE_ALIAS  the table's name, device
 *        type and device_type_alias (hex "x:6869" for raw bytes)
 *   HOSTILE_NULL          a required slot or text to leave NULL
 *   HOSTILE_PROBE         "fail" (an error, its reason unfilled),
 *                         "zero" (ACC_OK with no devices), "minus"
 *                         (ACC_OK with -3 devices), "many" (ACC_OK with
 *                         1000000), "nolib" (out->library left NULL)
 *   HOSTILE_FAIL          every slot after the probe fails: "good" (an
 *                         error record as acc_error_set fills it),
 *                         "nofill" (the status returned, err untouched),
 *                         "status:N" (status N, err filled with N),
 *                         "mismatch" (returns ACC_ERR_DRIVER, err->status
 *                         left ACC_OK)
 *
 * Everything else is the template's backend (plugins/template/backend.c),
 * which it includes.
 */
#define accelerator_backend_plugin template_entry_unused
#define TEMPLATE_NAME "hostile"
#include "../../plugins/template/backend.c"
#undef accelerator_backend_plugin

static acc_backend hostile_table;

/* A text from the environment: "x:HEX" gives raw bytes. */
static const char *
text_from(const char *variable, const char *fallback)
{
    static char storage[4][256];
    static int used;
    const char *v = getenv(variable);
    char *out;
    size_t n;

    if (v == NULL) {
        return fallback;
    }
    if (strncmp(v, "x:", 2) != 0 || used == 4) {
        return v;
    }
    out = storage[used++];
    v += 2;
    for (n = 0; v[0] && v[1] && n < sizeof(storage[0]) - 1; v += 2) {
        unsigned byte;

        sscanf(v, "%2x", &byte);
        out[n++] = (char)byte;
    }
    out[n] = '\0';
    return out;
}

static int
mode(const char *variable, const char *value)
{
    const char *v = getenv(variable);

    return v != NULL && strcmp(v, value) == 0;
}

static acc_status
hostile_fail(acc_error *err)
{
    const char *how = getenv("HOSTILE_FAIL");

    if (strcmp(how, "nofill") == 0) {
        return ACC_ERR_DRIVER;
    }
    if (strcmp(how, "mismatch") == 0) {
        acc_error_set(err, ACC_ERR_DRIVER, "hostile: mismatched");
        err->status = ACC_OK;
        return ACC_ERR_DRIVER;
    }
    if (strncmp(how, "status:", 7) == 0) {
        acc_status st = (acc_status)atoi(how + 7);

        acc_error_set(err, st, "hostile: status %d", (int)st);
        return st;
    }
    acc_error_driver(err, "hostile", "hostileCall", 77, "HOSTILE_ERROR",
                     ACC_ERR_DRIVER);
    return ACC_ERR_DRIVER;
}

static acc_status
hostile_probe(acc_probe_result *out, acc_error *err)
{
    acc_status st = template_probe(out, err);

    if (mode("HOSTILE_PROBE", "fail")) {
        return ACC_ERR_DRIVER;
    }
    if (mode("HOSTILE_PROBE", "zero")) {
        out->device_count = 0;
    }
    if (mode("HOSTILE_PROBE", "minus")) {
        out->device_count = -3;
    }
    if (mode("HOSTILE_PROBE", "many")) {
        out->device_count = 1000000;
    }
    if (mode("HOSTILE_PROBE", "nolib")) {
        out->library = NULL;
    }
    return st;
}

/* Each slot, failing when HOSTILE_FAIL says so. */
#define FAILING(slot, params, args)                                       \
    static acc_status hostile_##slot params                              \
    {                                                                     \
        if (getenv("HOSTILE_FAIL") != NULL) {                             \
            return hostile_fail(err);                                     \
        }                                                                 \
        return template_##slot args;                                      \
    }
FAILING(device_synchronize, (int d, acc_error *err), (d, err))
FAILING(device_properties, (int d, acc_device_properties *p,
                            acc_error *err), (d, p, err))
FAILING(memory_info, (int d, size_t *f, size_t *t, acc_error *err),
        (d, f, t, err))
FAILING(stream_default, (int d, acc_stream *s, acc_error *err), (d, s, err))
FAILING(stream_create, (acc_stream *s, acc_error *err), (s, err))
FAILING(stream_query, (acc_stream *s, acc_error *err), (s, err))
FAILING(stream_synchronize, (acc_stream *s, acc_error *err), (s, err))
FAILING(stream_wait_event, (acc_stream *s, acc_event *e, acc_error *err),
        (s, e, err))
FAILING(event_create, (acc_event *e, acc_error *err), (e, err))
FAILING(event_record, (acc_event *e, acc_stream *s, acc_error *err),
        (e, s, err))
FAILING(event_query, (acc_event *e, acc_error *err), (e, err))
FAILING(event_synchronize, (acc_event *e, acc_error *err), (e, err))
FAILING(event_elapsed_ms, (acc_event *a, acc_event *b, float *ms,
                           acc_error *err), (a, b, ms, err))
FAILING(mem_alloc, (int d, size_t n, uintptr_t *p, acc_error *err),
        (d, n, p, err))
FAILING(mem_free, (int d, uintptr_t p, acc_error *err), (d, p, err))
FAILING(host_alloc, (int d, size_t n, void **p, acc_error *err),
        (d, n, p, err))
FAILING(host_free, (int d, void *p, acc_error *err), (d, p, err))
FAILING(mem_copy, (acc_stream *s, const acc_copy *c, acc_error *err),
        (s, c, err))
FAILING(mem_fill, (acc_stream *s, uintptr_t dst, unsigned char v,
                   size_t n, acc_error *err), (s, dst, v, n, err))
#undef FAILING

__attribute__((visibility("default"))) const acc_backend *
accelerator_backend_plugin(void)
{
    const char *null = getenv("HOSTILE_NULL");

    hostile_table = template_backend;
#define SLOT(slot) hostile_table.slot = hostile_##slot;
    SLOT(probe) SLOT(device_synchronize) SLOT(device_properties)
    SLOT(memory_info) SLOT(stream_default) SLOT(stream_create)
    SLOT(stream_query) SLOT(stream_synchronize) SLOT(stream_wait_event)
    SLOT(event_create) SLOT(event_record) SLOT(event_query)
    SLOT(event_synchronize) SLOT(event_elapsed_ms) SLOT(mem_alloc)
    SLOT(mem_free) SLOT(host_alloc) SLOT(host_free) SLOT(mem_copy)
    SLOT(mem_fill)
#undef SLOT
    hostile_table.name = text_from("HOSTILE_NAME", "hostile");
    hostile_table.device_type = text_from("HOSTILE_TYPE",
                                          hostile_table.name);
    hostile_table.device_type_alias = text_from("HOSTILE_ALIAS", NULL);
    if (null != NULL) {
#define CLEAR(field)                                                      \
        if (strcmp(null, #field) == 0) {                                  \
            hostile_table.field = NULL;                                   \
        }
        CLEAR(name) CLEAR(device_type) CLEAR(display_type)
        CLEAR(processor_label) CLEAR(probe) CLEAR(event_query)
        CLEAR(attach) CLEAR(mem_fill) CLEAR(host_free)
#undef CLEAR
    }
    return &hostile_table;
}
