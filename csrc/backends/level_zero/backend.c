/*
 * backend.c - the top of the Level Zero backend: shutdown, the child
 * after fork, and the descriptor, which names the slots of every other
 * file (see lz.h for the design and the order of the files).
 */
#include "lz.h"

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
        lz_ipc_slots_shutdown_locked(d);
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
        drv->ipc_retired = 0;
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

/* The probe, handing the descriptor down to the files below. */
static acc_status
lz_probe_slot(acc_probe_result *out, acc_error *err)
{
    return lz_probe(&acc_level_zero_backend, out, err);
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
    .probe = lz_probe_slot,
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
    .ipc_mem_export = lz_ipc_mem_export,
    .ipc_mem_open = lz_ipc_mem_open,
    .ipc_mem_close = lz_ipc_mem_close,
    .ipc_event_export = lz_ipc_event_export,
    .ipc_event_open = lz_ipc_event_open,
};
