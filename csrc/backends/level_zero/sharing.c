/*
 * sharing.c - interprocess memory and events: the handles of device
 * allocations (zeMemGetIpcHandle, opened with zeMemOpenIpcHandle) and of
 * interprocess events, each the only event of an event pool of its own
 * made with ZE_EVENT_POOL_FLAG_IPC (zeEventPoolGetIpcHandle, opened with
 * zeEventPoolOpenIpcHandle).
 *
 * The descriptor.  On Linux a handle rests on a file descriptor of the
 * exporting process (Intel's driver: a dma-buf), which the driver writes
 * into the first bytes of the handle's data: a memory handle's first 8
 * bytes hold it as a uint64_t, an event pool handle's first 4 as an int
 * (the pool's event count follows).  That number means nothing in
 * another process, so export hands it to the core as h->fd (the core
 * sends the descriptor itself, SCM_RIGHTS or pidfd_getfd), and open
 * writes this process's copy, h->fd, into the same bytes before calling
 * the driver.  The core closes its copy after open: the driver has
 * imported the memory by then.
 *
 * Events.  An interprocess slot never moves (slots.c, events.c): the
 * other process opened this pool, not whichever slot a record would
 * take next.  An imported event starts armed, so waits and queries ask
 * the driver, whose state the exporter's records set.
 */
#include "lz.h"

/* A memory handle's descriptor field: the first 8 bytes, a uint64_t. */
static int
lz_ipc_mem_fd(const ze_ipc_mem_handle_t *ih)
{
    uint64_t fd = 0;
    memcpy(&fd, ih->data, sizeof(fd));
    return fd <= (uint64_t)INT32_MAX ? (int)fd : -1;
}

static void
lz_ipc_mem_set_fd(ze_ipc_mem_handle_t *ih, int fd)
{
    uint64_t wide = (uint64_t)fd;
    memcpy(ih->data, &wide, sizeof(wide));
}

acc_status
lz_ipc_mem_export(int device, uintptr_t base, acc_ipc_handle *h,
                  acc_error *err)
{
    ze_context_handle_t ctx = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_ipc_mem_handle_t ih;
    memset(&ih, 0, sizeof(ih));
    ze_result_t r = lz_fn.zeMemGetIpcHandle(ctx, (const void *)base, &ih);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemGetIpcHandle", r, lz_driver_of(device));
    }
    _Static_assert(sizeof(ih.data) == sizeof(h->bytes),
                   "a Level Zero handle fills acc_ipc_handle's bytes");
    memcpy(h->bytes, ih.data, sizeof(h->bytes));
    h->fd = lz_ipc_mem_fd(&ih);
    return ACC_OK;
}

acc_status
lz_ipc_mem_open(int device, const acc_ipc_handle *h, uintptr_t *base,
                acc_error *err)
{
    ze_context_handle_t ctx = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_ipc_mem_handle_t ih;
    memcpy(ih.data, h->bytes, sizeof(ih.data));
    if (h->fd >= 0) {
        lz_ipc_mem_set_fd(&ih, h->fd);
    }
    void *p = NULL;
    ze_result_t r = lz_fn.zeMemOpenIpcHandle(ctx, lz.devices[device].handle,
                                             ih, 0, &p);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemOpenIpcHandle", r, lz_driver_of(device));
    }
    *base = (uintptr_t)p;
    return ACC_OK;
}

void
lz_ipc_mem_close(int device, uintptr_t base)
{
    acc_error ignored;
    ze_context_handle_t ctx = NULL;
    if (lz.shut || lz_context_of(device, &ctx, &ignored) != ACC_OK) {
        return;
    }
    ze_result_t r = lz_fn.zeMemCloseIpcHandle(ctx, (const void *)base);
    if (r != ZE_RESULT_SUCCESS) {
        acc_trace("xpu: zeMemCloseIpcHandle failed (0x%x); the mapping "
                  "stays with the driver", (unsigned)r);
    }
}

/* The slot of a new interprocess event of driver d: a pool of its own
 * (HOST_VISIBLE | IPC, one event) and its event. */
acc_status
lz_ipc_event_slot(int d, lz_slot **out, acc_error *err)
{
    ze_context_handle_t ctx = NULL;
    pthread_mutex_lock(&lz.lock);
    /* Released interprocess slots that waited for their work go now. */
    lz_reclaim_locked(d);
    acc_status status = lz_context_locked(d, &ctx, err);
    pthread_mutex_unlock(&lz.lock);
    if (status != ACC_OK) {
        return status;
    }
    /* No device list, as the pooled slots: any device of the context
     * may wait on it. */
    ze_event_pool_desc_t desc = {
        ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
        ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_IPC, 1,
    };
    ze_event_pool_handle_t pool = NULL;
    ze_result_t r = lz_fn.zeEventPoolCreate(ctx, &desc, 0, NULL, &pool);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventPoolCreate", r, d);
    }
    pthread_mutex_lock(&lz.lock);
    status = lz_ipc_slot_locked(d, pool, 0, out, err);
    pthread_mutex_unlock(&lz.lock);
    if (status != ACC_OK) {
        (void)lz_fn.zeEventPoolDestroy(pool);
    }
    return status;
}

acc_status
lz_ipc_event_export(acc_event *e, acc_ipc_handle *h, acc_error *err)
{
    lz_event *ev = e->native;
    pthread_mutex_lock(&lz.lock);
    lz_slot *slot = ev != NULL ? ev->slot : NULL;
    ze_event_pool_handle_t pool = slot != NULL ? slot->ipc_pool : NULL;
    int d = slot != NULL ? slot->driver : -1;
    pthread_mutex_unlock(&lz.lock);
    if (pool == NULL) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the %s backend shares only events made for other "
                      "processes (interprocess=True)", LZ_BACKEND);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    ze_ipc_event_pool_handle_t ih;
    memset(&ih, 0, sizeof(ih));
    ze_result_t r = lz_fn.zeEventPoolGetIpcHandle(pool, &ih);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventPoolGetIpcHandle", r, d);
    }
    _Static_assert(sizeof(ih.data) == sizeof(h->bytes),
                   "a Level Zero handle fills acc_ipc_handle's bytes");
    memcpy(h->bytes, ih.data, sizeof(h->bytes));
    int fd;
    memcpy(&fd, ih.data, sizeof(fd));
    h->fd = fd;
    return ACC_OK;
}

acc_status
lz_ipc_event_open(const acc_ipc_handle *h, acc_event *e, acc_error *err)
{
    int d = lz_driver_of(e->device);
    lz_event *ev = calloc(1, sizeof(*ev));
    if (ev == NULL) {
        return lz_no_memory(err);
    }
    ze_context_handle_t ctx = NULL;
    acc_status status = lz_context_of(e->device, &ctx, err);
    if (status != ACC_OK) {
        free(ev);
        return status;
    }
    ze_ipc_event_pool_handle_t ih;
    memcpy(ih.data, h->bytes, sizeof(ih.data));
    if (h->fd >= 0) {
        memcpy(ih.data, &h->fd, sizeof(h->fd));
    }
    ze_event_pool_handle_t pool = NULL;
    ze_result_t r = lz_fn.zeEventPoolOpenIpcHandle(ctx, ih, &pool);
    if (r != ZE_RESULT_SUCCESS) {
        free(ev);
        return lz_fail(err, "zeEventPoolOpenIpcHandle", r, d);
    }
    pthread_mutex_lock(&lz.lock);
    status = lz_ipc_slot_locked(d, pool, 1, &ev->slot, err);
    pthread_mutex_unlock(&lz.lock);
    if (status != ACC_OK) {
        (void)lz_fn.zeEventPoolCloseIpcHandle(pool);
        free(ev);
        return status;
    }
    ev->device = e->device;
    e->native = ev;
    e->handle = (uintptr_t)ev->slot->event;
    return ACC_OK;
}
