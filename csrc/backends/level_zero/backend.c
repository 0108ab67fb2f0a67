/*
 * backend.c - the Level Zero backend: the loader, the probe, the device
 * table, shutdown and the descriptor (see lz.h for the design).
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

static acc_status
lz_probe(acc_probe_result *out, acc_error *err)
{
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
static acc_status
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

/* Wait (bounded) for st's list to go idle; 0 when it did. */
static int
lz_drain(lz_stream *st, int d)
{
    acc_error ignored;
    lz_target t = lz_target_of_stream(st);
    if (lz_host_sync_usable(d)) {
        return lz_fn.zeCommandListHostSynchronize(st->list,
                                               LZ_SHUTDOWN_WAIT_NS)
               == ZE_RESULT_SUCCESS ? 0 : -1;
    }
    lz_slot *mark = st->grave_marker;
    if (mark == NULL && lz_mark(&t, &mark, &ignored) != ACC_OK) {
        return -1;
    }
    int idle = lz_host_wait(mark, LZ_SHUTDOWN_WAIT_NS) == ZE_RESULT_SUCCESS;
    if (mark != st->grave_marker) {
        lz_unwait_retire(mark);
    }
    return idle ? 0 : -1;
}

static void
lz_free_stream_lists_locked(lz_stream **head, int keep_structs)
{
    lz_stream *st = *head;
    *head = NULL;
    while (st != NULL) {
        lz_stream *next = st->next;
        if (!lz.drivers[lz_driver_of(st->device)].stuck) {
            lz_fn.zeCommandListDestroy(st->list);
        }
        st->list = NULL;
        st->next = NULL;
        /* A stream the dispatcher still owns is freed by stream_destroy;
         * default and destroyed ones are ours. */
        if (!keep_structs || st->is_default) {
            lz_stream_free(st);
        }
        st = next;
    }
}

static void
lz_shutdown(void)
{
    if (!lz.ready || lz.shut) {
        return; /* after a failed zeInit no call is safe */
    }
    pthread_mutex_lock(&lz.reg_lock);
    lz.reaper_stop = 1;
    pthread_cond_broadcast(&lz.reaper_cv);
    while (lz.reaper_running) {
        pthread_cond_wait(&lz.reaper_cv, &lz.reg_lock);
    }
    for (int i = 0; i < lz.ndevices; i++) {
        lz_device *dev = &lz.devices[i];
        lz_stream *lists[2] = {dev->streams, dev->graveyard};
        for (int k = 0; k < 2; k++) {
            for (lz_stream *st = lists[k]; st != NULL; st = st->next) {
                if (lz_drain(st, dev->driver) != 0) {
                    acc_trace("xpu: a list of device %d is still busy at "
                              "exit; leaving driver %d's objects", i,
                              dev->driver);
                    lz.drivers[dev->driver].stuck = 1;
                }
            }
        }
    }
    /* Captures still open at exit go; graphs' queues and lists too. */
    for (int i = 0; i < lz.ndevices; i++) {
        for (lz_stream *st = lz.devices[i].streams; st != NULL;
             st = st->next) {
            pthread_mutex_lock(&st->lock);
            lz_capture_drop(st);
            pthread_mutex_unlock(&st->lock);
        }
    }
    lz_graphs_shutdown();
    lz_kernels_shutdown();
    /* The lists are drained, so no wait needs the bridge any more. */
    pthread_mutex_lock(&lz.lock);
    lz.bridge_stop = 1;
    pthread_cond_broadcast(&lz.bridge_cv);
    while (lz.bridge_running) {
        pthread_cond_wait(&lz.bridge_cv, &lz.lock);
    }
    free(lz.bridges);
    lz.bridges = NULL;
    lz.nbridges = lz.capbridges = lz.reserved_bridges = 0;
    pthread_mutex_unlock(&lz.lock);
    lz.shut = 1;
    for (int i = 0; i < lz.ndevices; i++) {
        lz_device *dev = &lz.devices[i];
        lz_free_stream_lists_locked(&dev->streams, 1);
        lz_free_stream_lists_locked(&dev->graveyard, 0);
        dev->default_stream = NULL;
        free(dev->mems);
        dev->mems = NULL;
        dev->nmems = 0;
    }
    pthread_mutex_unlock(&lz.reg_lock);

    pthread_mutex_lock(&lz.lock);
    for (int d = 0; d < lz.ndrivers; d++) {
        lz_driver *drv = &lz.drivers[d];
        lz_pool *pool = drv->pools;
        while (pool != NULL) {
            lz_pool *next = pool->next;
            if (!drv->stuck) {
                for (uint32_t i = 0; i < pool->created; i++) {
                    lz_fn.zeEventDestroy(pool->slots[i].event);
                }
                lz_fn.zeEventPoolDestroy(pool->handle);
            }
            free(pool);
            pool = next;
        }
        drv->pools = NULL;
        drv->free[0] = drv->free[1] = drv->retired = NULL;
        free(drv->links);
        drv->links = NULL;
        drv->nlinks = drv->caplinks = drv->reserved_links = 0;
        if (drv->context != NULL && !drv->stuck) {
            ze_result_t r = lz_fn.zeContextDestroy(drv->context);
            if (r != ZE_RESULT_SUCCESS) {
                acc_trace("xpu: zeContextDestroy failed (0x%x)",
                          (unsigned)r);
            }
        }
        drv->context = NULL;
    }
    pthread_mutex_unlock(&lz.lock);
    acc_trace("xpu: shut down");
}

/* The child of fork(): the dispatcher never calls a backend there once
 * one was initialised, so only the global locks need to be usable again;
 * the reaper and bridge threads were not copied. */
static void
lz_after_fork_child(void)
{
    pthread_mutex_init(&lz.default_lock, NULL);
    pthread_mutex_init(&lz.reg_lock, NULL);
    pthread_mutex_init(&lz.foreign_lock, NULL);
    pthread_mutex_init(&lz.lock, NULL);
    pthread_mutex_init(&lz.sysman_lock, NULL);
    lz_memory_after_fork_child();
    pthread_cond_init(&lz.reaper_cv, NULL);
    pthread_cond_init(&lz.bridge_cv, NULL);
    lz.reaper_running = 0;
    lz.bridge_running = 0;
}

const acc_backend acc_level_zero_backend = {
    ACC_BACKEND_ABI,
    .attach = ze_attach,
    .name = "xpu",
    .device_type = "xpu",
    .display_type = "XPU",
    .processor_label = "execution units",
    .torch_device_type = 12,  /* c10::DeviceType::XPU */
    .dlpack_device_type = 14, /* kDLOneAPI */
    .caps = ACC_CAP_PARTIAL_QUERY,
    .code_formats = ACC_FORMAT_BIT(ACC_FORMAT_SPIRV)
                    | ACC_FORMAT_BIT(ACC_FORMAT_NATIVE),
    .probe = lz_probe,
    .select_devices = lz_select_devices,
    .shutdown = lz_shutdown,
    .after_fork_child = lz_after_fork_child,
    .device_activate = NULL, /* Level Zero has no current device */
    .device_synchronize = lz_device_synchronize,
    .device_properties = lz_device_properties,
    .stream_default = lz_stream_default,
    .stream_priority_range = lz_stream_priority_range,
    .stream_create = lz_stream_create,
    .stream_wrap = lz_stream_wrap,
    .stream_destroy = lz_stream_destroy,
    .stream_query = lz_stream_query,
    .stream_synchronize = lz_stream_synchronize,
    .stream_wait_event = lz_stream_wait_event,
    .event_create = lz_event_create,
    .event_destroy = lz_event_destroy,
    .event_record = lz_event_record,
    .event_query = lz_event_query,
    .event_synchronize = lz_event_synchronize,
    .event_elapsed_ms = lz_event_elapsed_ms,
    .memory_info = lz_memory_info,
    .mem_alloc = lz_mem_alloc,
    .mem_free = lz_mem_free,
    .host_alloc = lz_host_alloc,
    .host_free = lz_host_free,
    .mem_copy = lz_mem_copy,
    .mem_fill = lz_mem_fill,
    .pointer_info = lz_pointer_info,
    .pointer_range = lz_pointer_range,
    .graph_capture_begin = lz_graph_capture_begin,
    .graph_capture_end = lz_graph_capture_end,
    .graph_instantiate = lz_graph_instantiate,
    .graph_launch = lz_graph_launch,
    .graph_destroy = lz_graph_destroy,
    .module_load = lz_module_load,
    .module_unload = lz_module_unload,
    .kernel_get = lz_kernel_get,
    .kernel_release = lz_kernel_release,
    .launch = lz_launch,
    .kernel_names = lz_kernel_names,
};
