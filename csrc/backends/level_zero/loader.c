/*
 * loader.c - the bottom of the Level Zero backend: the loader and its
 * functions, the state every file shares, errors, the probe and the
 * device table (see lz.h for the design and the order of the files).
 */
#include "lz.h"

#include <dlfcn.h>
#include <stdarg.h>

lz_functions lz_fn;

lz_state lz = {
    .default_lock = PTHREAD_MUTEX_INITIALIZER,
    .reg_lock = PTHREAD_MUTEX_INITIALIZER,
    .reaper_cv = PTHREAD_COND_INITIALIZER,
    .foreign_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .sysman_lock = PTHREAD_MUTEX_INITIALIZER,
    .bridge_cv = PTHREAD_COND_INITIALIZER,
};

static const char *
lz_result_name(ze_result_t r)
{
    switch (r) {
#define LZ_NAME_CASE(name, value) \
    case name:                    \
        return #name;
        ACC_ZE_RESULTS(LZ_NAME_CASE)
#undef LZ_NAME_CASE
    default:
        return NULL;
    }
}

/* Fill err for a failing call of `api`; driver < 0 when none applies. */
acc_status
lz_fail(acc_error *err, const char *api, ze_result_t r, int driver)
{
    acc_status status = ACC_ERR_DRIVER;
    if (r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
        || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY) {
        status = ACC_ERR_OUT_OF_MEMORY;
    }
    acc_error_driver(err, LZ_BACKEND, api, (long long)r, lz_result_name(r),
                     status);
    /* Spec 1.6 drivers keep a thread-local description of the error. */
    const char *text = NULL;
    if (lz_fn.zeDriverGetLastErrorDescription != NULL && driver >= 0
        && lz.drivers[driver].api_version >= ACC_ZE_MAKE_VERSION(1, 6)
        && lz_fn.zeDriverGetLastErrorDescription(lz.drivers[driver].handle,
                                              &text) == ZE_RESULT_SUCCESS
        && text != NULL && *text != '\0') {
        size_t used = strlen(err->message);
        acc_format(err->message + used, sizeof(err->message) - used,
                   " (driver: %s)", text);
    }
    acc_trace("xpu: %s failed: %s (0x%x)", api,
              lz_result_name(r) ? lz_result_name(r) : "unknown result",
              (unsigned)r);
    return status;
}

acc_status
lz_no_memory(acc_error *err)
{
    acc_error_set(err, ACC_ERR_HOST_MEMORY,
                  "out of host memory in the %s backend", LZ_BACKEND);
    return ACC_ERR_HOST_MEMORY;
}

int
lz_driver_of(int device)
{
    return lz.devices[device].driver;
}

/* Start a detached helper thread; 0 when it runs. */
int
lz_start_thread(void *(*body)(void *))
{
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, body, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

static acc_status
lz_unavailable(acc_error *err, acc_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static acc_status
lz_unavailable(acc_error *err, acc_status status, const char *fmt, ...)
{
    char text[sizeof(err->message)];
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(text, sizeof(text), fmt, ap) >= (int)sizeof(text)) {
        /* Cut: never leave half a character. */
        text[acc_utf8_whole(text, sizeof(text) - 1)] = '\0';
    }
    va_end(ap);
    acc_error_set(err, status, "%s", text);
    acc_trace("xpu: rejected: %s", text);
    return status;
}

static acc_status
lz_load(acc_error *err)
{
    const char *path = getenv("ACCELERATOR_ZE_LIBRARY");
    if (path == NULL || *path == '\0') {
        path = LZ_LIBRARY;
    }
    if (strlen(path) >= sizeof(lz.library)) {
        /* Cut short, it would name another file: refuse it instead. */
        snprintf(lz.library, sizeof(lz.library), "(a path too long)");
        return lz_unavailable(err, ACC_ERR_NO_ACCELERATOR,
                              "ACCELERATOR_ZE_LIBRARY is %zu bytes long; "
                              "expected a path of at most %zu bytes",
                              strlen(path), sizeof(lz.library) - 1);
    }
    snprintf(lz.library, sizeof(lz.library), "%s", path);
    lz.lib = dlopen(lz.library, RTLD_NOW | RTLD_LOCAL);
    if (lz.lib == NULL) {
        const char *why = dlerror();
        return lz_unavailable(err, ACC_ERR_NO_ACCELERATOR,
                              "cannot open the Level Zero loader %s: %s",
                              lz.library, why ? why : "unknown error");
    }
    lz.opened = 1;
    acc_trace("xpu: opened %s", lz.library);
#define LZ_RESOLVE(name, params)                                          \
    *(void **)&lz_fn.name = dlsym(lz.lib, #name);                            \
    if (lz_fn.name == NULL) {                                                \
        dlclose(lz.lib);                                                  \
        lz.lib = NULL;                                                    \
        return lz_unavailable(err, ACC_ERR_NO_ACCELERATOR,                \
                              "the Level Zero loader %s lacks %s",       \
                              lz.library, #name);                         \
    }
    ACC_ZE_FUNCTIONS(LZ_RESOLVE)
    ACC_ZE_IPC_FUNCTIONS(LZ_RESOLVE)
#undef LZ_RESOLVE
#define LZ_RESOLVE_OPTIONAL(name, version, params)                        \
    *(void **)&lz_fn.name = dlsym(lz.lib, #name);                            \
    acc_trace("xpu: optional %s: %s", #name,                              \
              lz_fn.name != NULL ? "found" : "absent");
    ACC_ZE_OPTIONAL_FUNCTIONS(LZ_RESOLVE_OPTIONAL)
#undef LZ_RESOLVE_OPTIONAL
    return ACC_OK;
}

/* The first command queue group that can run compute work. */
static uint32_t
lz_compute_ordinal(ze_device_handle_t h)
{
    uint32_t n = 0;
    if (lz_fn.zeDeviceGetCommandQueueGroupProperties(h, &n, NULL)
            != ZE_RESULT_SUCCESS || n == 0) {
        return 0;
    }
    ze_command_queue_group_properties_t *groups =
        calloc(n, sizeof(*groups));
    if (groups == NULL) {
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        groups[i].stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
    }
    uint32_t ordinal = 0;
    if (lz_fn.zeDeviceGetCommandQueueGroupProperties(h, &n, groups)
            == ZE_RESULT_SUCCESS) {
        for (uint32_t i = 0; i < n; i++) {
            if (groups[i].flags
                & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) {
                ordinal = i;
                break;
            }
        }
    }
    free(groups);
    return ordinal;
}

static acc_status
lz_add_device(int d, ze_device_handle_t h, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    ze_device_properties_t p;
    memset(&p, 0, sizeof(p));
    p.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    ze_result_t r = lz_fn.zeDeviceGetProperties(h, &p);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeDeviceGetProperties", r, d);
    }
    if (p.type != ZE_DEVICE_TYPE_GPU) {
        acc_trace("xpu: skipping a device of type %d", (int)p.type);
        return ACC_OK;
    }
    if (lz.ndevices == ACC_MAX_DEVICES) {
        acc_trace("xpu: more than %d devices; ignoring '%s'",
                  ACC_MAX_DEVICES, p.name);
        return ACC_OK;
    }
    lz_device *dev = &lz.devices[lz.ndevices];
    dev->handle = h;
    dev->driver = d;
    dev->props = p;
    /* With the plain stype timerResolution is ns per tick; spec 1.2
     * drivers give ticks per second with the 1_2 stype, which keeps the
     * fraction of a 19.2 MHz clock (52.083 ns) that ns would round. */
    dev->ns_per_tick = p.timerResolution ? (double)p.timerResolution : 1.0;
    if (drv->api_version >= ACC_ZE_MAKE_VERSION(1, 2)) {
        ze_device_properties_t hz;
        memset(&hz, 0, sizeof(hz));
        hz.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2;
        if (lz_fn.zeDeviceGetProperties(h, &hz) == ZE_RESULT_SUCCESS
            && hz.timerResolution != 0) {
            dev->ns_per_tick = 1e9 / (double)hz.timerResolution;
        }
    }
    uint32_t bits = p.kernelTimestampValidBits;
    dev->ts_mask = bits == 0 || bits >= 64 ? UINT64_MAX
                                           : (1ull << bits) - 1;
    uint32_t nmem = 0;
    r = lz_fn.zeDeviceGetMemoryProperties(h, &nmem, NULL);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeDeviceGetMemoryProperties", r, d);
    }
    if (nmem > 0) {
        ze_device_memory_properties_t *mem = calloc(nmem, sizeof(*mem));
        if (mem == NULL) {
            return lz_no_memory(err);
        }
        for (uint32_t i = 0; i < nmem; i++) {
            mem[i].stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
        }
        r = lz_fn.zeDeviceGetMemoryProperties(h, &nmem, mem);
        if (r != ZE_RESULT_SUCCESS) {
            free(mem);
            return lz_fail(err, "zeDeviceGetMemoryProperties", r, d);
        }
        for (uint32_t i = 0; i < nmem; i++) {
            dev->total_memory += mem[i].totalSize;
        }
        free(mem);
    }
    dev->ordinal = lz_compute_ordinal(h);
    acc_trace("xpu: device %d: '%s' (driver %d, %llu bytes)", lz.ndevices,
              p.name, d, dev->total_memory);
    lz.ndevices++;
    return ACC_OK;
}

static acc_status
lz_enumerate(acc_error *err)
{
    uint32_t n = 0;
    ze_result_t r = lz_fn.zeDriverGet(&n, NULL);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeDriverGet", r, -1);
    }
    if (n > LZ_MAX_DRIVERS) {
        acc_trace("xpu: using the first %d of %u drivers", LZ_MAX_DRIVERS,
                  n);
        n = LZ_MAX_DRIVERS;
    }
    ze_driver_handle_t drivers[LZ_MAX_DRIVERS];
    if (n > 0) {
        r = lz_fn.zeDriverGet(&n, drivers);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeDriverGet", r, -1);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        int d = lz.ndrivers;
        lz_driver *drv = &lz.drivers[d];
        drv->handle = drivers[i];
        ze_api_version_t version = 0;
        r = lz_fn.zeDriverGetApiVersion(drivers[i], &version);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeDriverGetApiVersion", r, -1);
        }
        drv->api_version = (uint32_t)version;
        ze_driver_properties_t props;
        memset(&props, 0, sizeof(props));
        props.stype = ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES;
        r = lz_fn.zeDriverGetProperties(drivers[i], &props);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeDriverGetProperties", r, -1);
        }
        drv->driver_version = props.driverVersion;
        drv->in_order = drv->api_version >= ACC_ZE_MAKE_VERSION(1, 7);
        drv->host_sync = drv->api_version >= ACC_ZE_MAKE_VERSION(1, 6);
        lz.ndrivers++;
        acc_trace("xpu: driver %d: API %u.%u, version 0x%x, %s lists", d,
                  ACC_ZE_MAJOR_VERSION(drv->api_version),
                  ACC_ZE_MINOR_VERSION(drv->api_version),
                  drv->driver_version,
                  drv->in_order ? "in-order" : "barrier-ordered");

        uint32_t ndev = 0;
        r = lz_fn.zeDeviceGet(drivers[i], &ndev, NULL);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeDeviceGet", r, d);
        }
        if (ndev == 0) {
            continue;
        }
        ze_device_handle_t *devs = calloc(ndev, sizeof(*devs));
        if (devs == NULL) {
            return lz_no_memory(err);
        }
        r = lz_fn.zeDeviceGet(drivers[i], &ndev, devs);
        acc_status status = r == ZE_RESULT_SUCCESS
                                ? ACC_OK
                                : lz_fail(err, "zeDeviceGet", r, d);
        for (uint32_t j = 0; j < ndev && status == ACC_OK; j++) {
            status = lz_add_device(d, devs[j], err);
        }
        free(devs);
        if (status != ACC_OK) {
            return status;
        }
    }
    return ACC_OK;
}

acc_status
lz_probe(const acc_backend *self, acc_probe_result *out, acc_error *err)
{
    lz.name = self->name;  /* before any message */
    acc_status status = lz_load(err);
    out->library = lz.library;
    out->loaded = lz.opened;
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = lz_fn.zeInit(ZE_INIT_FLAG_GPU_ONLY);
    if (r != ZE_RESULT_SUCCESS) {
        /* Loader 1.8 has unloaded the failing driver but still points
         * into it: any further call would crash.  Never call again (and
         * keep the loader loaded: its destructors share that state). */
        lz_fail(err, "zeInit", r, -1);
        snprintf(err->message, sizeof(err->message),
                 "zeInit failed with %s (0x%x): no usable Level Zero GPU "
                 "driver (is one installed, or ZE_ENABLE_ALT_DRIVERS set?)",
                 lz_result_name(r) ? lz_result_name(r) : "an unknown code",
                 (unsigned)r);
        acc_trace("xpu: rejected: %s", err->message);
        return err->status;
    }
    status = lz_enumerate(err);
    if (status != ACC_OK) {
        acc_trace("xpu: rejected: %s", err->message);
        return status;
    }
    if (lz.ndrivers > 0) {
        const lz_driver *drv = &lz.drivers[0];
        out->driver_version = (int)drv->driver_version;
        /* driverVersion is the driver's own encoding; Intel's is
         * major << 24 | minor << 16 | build. */
        unsigned v = drv->driver_version;
        snprintf(out->driver_version_text,
                 sizeof(out->driver_version_text),
                 "%u.%u.%u (Level Zero API %u.%u)", v >> 24, (v >> 16) & 0xff,
                 v & 0xffff, ACC_ZE_MAJOR_VERSION(drv->api_version),
                 ACC_ZE_MINOR_VERSION(drv->api_version));
    }
    if (lz.ndevices == 0) {
        return lz_unavailable(err, ACC_ERR_NO_ACCELERATOR,
                              "Level Zero found %d driver(s) but no GPU "
                              "device", lz.ndrivers);
    }
    out->device_count = lz.ndevices;
    lz.ready = 1;
    acc_trace("xpu: accepted: %d device(s)", lz.ndevices);
    return ACC_OK;
}

/* Keep only the devices order[0..count), in that order: called right
 * after the probe, when the table holds nothing but what it found. */
acc_status
lz_select_devices(const int *order, int count, acc_error *err)
{
    static lz_device probed[ACC_MAX_DEVICES];

    (void)err;
    memcpy(probed, lz.devices, sizeof(probed));
    memset(lz.devices, 0, sizeof(lz.devices));
    for (int i = 0; i < count; i++) {
        lz.devices[i] = probed[order[i]];
    }
    lz.ndevices = count;
    return ACC_OK;
}
