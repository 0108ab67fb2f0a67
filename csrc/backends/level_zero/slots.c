/*
 * slots.c - contexts, event pools, and the lifetime of their events
 * ("slots"): acquired, armed, waited on, retired, reset, reused; and
 * the links and bridges that keep a waited-on slot until its wait has
 * run.
 */
#include "lz.h"

#include <time.h>

acc_status
lz_context_locked(int d, ze_context_handle_t *out, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    if (drv->context == NULL) {
        ze_context_desc_t desc = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
        ze_context_handle_t ctx = NULL;
        ze_result_t r = lz_fn.zeContextCreate(drv->handle, &desc, &ctx);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeContextCreate", r, d);
        }
        drv->context = ctx;
        acc_trace("xpu: created the context of driver %d", d);
    }
    *out = drv->context;
    return ACC_OK;
}

acc_status
lz_context_of(int device, ze_context_handle_t *ctx, acc_error *err)
{
    pthread_mutex_lock(&lz.lock);
    acc_status status = lz_context_locked(lz_driver_of(device), ctx, err);
    pthread_mutex_unlock(&lz.lock);
    return status;
}

/* Destroy the interprocess slot s (nothing here uses it any more: no
 * waiter, no signal of ours pending) and its pool: 0 when done, -1 when
 * the driver refused the event's destroy (s is kept, to be tried again). */
static int
lz_ipc_slot_destroy_locked(lz_slot *s)
{
    lz_driver *drv = &lz.drivers[s->driver];
    if (s->waiters != 0
        || (s->ipc_signal
            && lz_fn.zeEventQueryStatus(s->event) != ZE_RESULT_SUCCESS)) {
        return -1;
    }
    ze_result_t r = lz_fn.zeEventDestroy(s->event);
    if (r != ZE_RESULT_SUCCESS) {
        acc_trace("xpu: zeEventDestroy of an interprocess event failed "
                  "(0x%x); trying again later", (unsigned)r);
        return -1;
    }
    const char *api = s->ipc_imported ? "zeEventPoolCloseIpcHandle"
                                      : "zeEventPoolDestroy";
    r = s->ipc_imported ? lz_fn.zeEventPoolCloseIpcHandle(s->ipc_pool)
                        : lz_fn.zeEventPoolDestroy(s->ipc_pool);
    if (r != ZE_RESULT_SUCCESS) {
        /* Its only event is gone: nothing is left to retry with. */
        acc_trace("xpu: %s failed (0x%x); leaving the pool to the driver",
                  api, (unsigned)r);
    }
    for (lz_slot **p = &drv->ipc_slots; *p != NULL; p = &(*p)->ipc_next) {
        if (*p == s) {
            *p = s->ipc_next;
            break;
        }
    }
    free(s);
    return 0;
}

/* Give up ownership of s: free now, or retired until it is safe. */
void
lz_retire_locked(lz_slot *s)
{
    lz_driver *drv = &lz.drivers[s->driver];
    if (s->ipc_pool != NULL) {
        if (lz_ipc_slot_destroy_locked(s) != 0) {
            /* Waits of ours may have run already (their links not yet
             * resolved): try again at once, then at every acquire. */
            s->next = drv->retired;
            drv->retired = s;
            drv->ipc_retired++;
            lz_reclaim_locked(s->driver);
        }
        return;
    }
    if (!s->armed && s->waiters == 0) {
        s->next = drv->free[s->timing];
        drv->free[s->timing] = s;
    }
    else {
        s->next = drv->retired;
        drv->retired = s;
    }
}

/* Signal the bridges (bridge.c) whose event has signaled (lz.lock
 * held): like links, they keep slots until their wait has run.  All of
 * them, or (full 0) the run of completed ones at the front.  Never
 * blocks.  Returns nonzero when a signal failed and must be retried. */
int
lz_pump_bridges_locked(int full)
{
    size_t keep = 0, i = 0;
    int stalled = 0;
    for (; i < lz.nbridges; i++) {
        lz_bridge *b = &lz.bridges[i];
        ze_result_t r = lz_fn.zeEventQueryStatus(b->from->event);
        if (r == ZE_RESULT_NOT_READY && !full) {
            break; /* events mostly complete in order: stop here */
        }
        if (r != ZE_RESULT_NOT_READY) {
            if (r != ZE_RESULT_SUCCESS) {
                acc_trace("xpu: an event waited on across drivers failed "
                          "(0x%x); releasing its waiters", (unsigned)r);
            }
            r = lz_fn.zeEventHostSignal(b->to->event);
            if (r == ZE_RESULT_SUCCESS) {
                b->from->waiters--;
                lz_retire_locked(b->to);
                continue;
            }
            acc_trace("xpu: zeEventHostSignal failed (0x%x); retrying",
                      (unsigned)r);
            stalled = 1;
        }
        lz.bridges[keep++] = *b;
    }
    for (; i < lz.nbridges; i++) {
        lz.bridges[keep++] = lz.bridges[i];
    }
    lz.nbridges = keep;
    return stalled;
}

/* Resolve the links of driver d whose wait has run, then reset the
 * retired slots that nothing can still use (and destroy the
 * interprocess ones).  Never blocks. */
void
lz_reclaim_locked(int d)
{
    lz_driver *drv = &lz.drivers[d];
    size_t keep = 0;
    /* Waits across drivers hold slots too: move them on first. */
    lz_pump_bridges_locked(1);
    for (size_t i = 0; i < drv->nlinks; i++) {
        lz_link *k = &drv->links[i];
        if (lz_fn.zeEventQueryStatus(k->done->event) == ZE_RESULT_SUCCESS) {
            k->waited->waiters--;
            lz_retire_locked(k->done);
        }
        else {
            drv->links[keep++] = *k;
        }
    }
    drv->nlinks = keep;
    for (lz_slot **p = &drv->retired; *p != NULL;) {
        lz_slot *s = *p;
        if (s->ipc_pool != NULL) {
            lz_slot *next = s->next;
            if (lz_ipc_slot_destroy_locked(s) == 0) {
                *p = next;
                drv->ipc_retired--;
                continue;
            }
        }
        else if (s->waiters == 0
                 && lz_fn.zeEventQueryStatus(s->event) == ZE_RESULT_SUCCESS
                 && lz_fn.zeEventHostReset(s->event)
                        == ZE_RESULT_SUCCESS) {
            *p = s->next;
            s->armed = 0;
            s->next = drv->free[s->timing];
            drv->free[s->timing] = s;
            continue;
        }
        p = &s->next;
    }
}

acc_status
lz_acquire_locked(int d, int timing, lz_slot **out, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    if (drv->free[timing] == NULL || drv->ipc_retired > 0) {
        lz_reclaim_locked(d);
    }
    lz_slot *s = drv->free[timing];
    if (s != NULL) {
        drv->free[timing] = s->next;
        s->next = NULL;
        *out = s;
        return ACC_OK;
    }
    lz_pool *pool = drv->pools;
    while (pool != NULL
           && (pool->timing != timing || pool->created == LZ_POOL_EVENTS)) {
        pool = pool->next;
    }
    if (pool == NULL) {
        ze_context_handle_t ctx;
        acc_status st = lz_context_locked(d, &ctx, err);
        if (st != ACC_OK) {
            return st;
        }
        pool = calloc(1, sizeof(*pool));
        if (pool == NULL) {
            return lz_no_memory(err);
        }
        /* No device list: the pool is visible to every device of the
         * context, so a stream can wait on another device's event. */
        ze_event_pool_desc_t desc = {
            ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
            ZE_EVENT_POOL_FLAG_HOST_VISIBLE
                | (timing ? ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP : 0),
            LZ_POOL_EVENTS,
        };
        ze_result_t r = lz_fn.zeEventPoolCreate(ctx, &desc, 0, NULL,
                                             &pool->handle);
        if (r != ZE_RESULT_SUCCESS) {
            free(pool);
            return lz_fail(err, "zeEventPoolCreate", r, d);
        }
        pool->timing = timing;
        pool->next = drv->pools;
        drv->pools = pool;
    }
    s = &pool->slots[pool->created];
    ze_event_desc_t desc = {
        ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, pool->created,
        ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST,
    };
    ze_result_t r = lz_fn.zeEventCreate(pool->handle, &desc, &s->event);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventCreate", r, d);
    }
    pool->created++;
    s->driver = d;
    s->timing = timing;
    *out = s;
    return ACC_OK;
}

/* The slot of an interprocess event of driver d: the event of index 0
 * of pool, a pool of its own that the caller made with
 * ZE_EVENT_POOL_FLAG_IPC (imported 0) or opened from another process's
 * handle (imported 1).  On failure the caller still owns pool. */
acc_status
lz_ipc_slot_locked(int d, ze_event_pool_handle_t pool, int imported,
                   lz_slot **out, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    lz_slot *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return lz_no_memory(err);
    }
    ze_event_desc_t desc = {
        ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, 0,
        ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST,
    };
    ze_result_t r = lz_fn.zeEventCreate(pool, &desc, &s->event);
    if (r != ZE_RESULT_SUCCESS) {
        free(s);
        return lz_fail(err, "zeEventCreate", r, d);
    }
    s->driver = d;
    s->ipc_pool = pool;
    s->ipc_imported = imported;
    /* Another process's event: treated as recorded, so that waits,
     * queries and synchronize ask the driver for its state. */
    s->armed = imported;
    s->ipc_next = drv->ipc_slots;
    drv->ipc_slots = s;
    *out = s;
    return ACC_OK;
}

/* At shutdown (the lists drained): destroy driver d's interprocess
 * slots, live or retired, unless its lists were stuck. */
void
lz_ipc_slots_shutdown_locked(int d)
{
    lz_driver *drv = &lz.drivers[d];
    while (drv->ipc_slots != NULL) {
        lz_slot *s = drv->ipc_slots;
        drv->ipc_slots = s->ipc_next;
        if (!drv->stuck) {
            lz_fn.zeEventDestroy(s->event);
            if (s->ipc_imported) {
                lz_fn.zeEventPoolCloseIpcHandle(s->ipc_pool);
            }
            else {
                lz_fn.zeEventPoolDestroy(s->ipc_pool);
            }
        }
        free(s);
    }
}

/* Room for one more link of driver d, so that adding it cannot fail
 * after the wait it stands for was appended.  On ACC_OK the caller owes
 * one lz_link_reserved_locked(d, ...), whether it adds the link or not. */
acc_status
lz_reserve_link_locked(int d, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    if (drv->nlinks + drv->reserved_links == drv->caplinks) {
        size_t cap = drv->caplinks ? 2 * drv->caplinks : 16;
        lz_link *links = realloc(drv->links, cap * sizeof(*links));
        if (links == NULL) {
            return lz_no_memory(err);
        }
        drv->links = links;
        drv->caplinks = cap;
    }
    drv->reserved_links++;
    return ACC_OK;
}

/* Settle a reservation of lz_reserve_link_locked: add link (when not
 * NULL) in the place reserved, or give the place back. */
void
lz_link_reserved_locked(int d, const lz_link *link)
{
    lz_driver *drv = &lz.drivers[d];
    drv->reserved_links--;
    if (link != NULL) {
        drv->links[drv->nlinks++] = *link;
    }
}

/* One waiter of s fewer (lz.lock held): a released interprocess slot
 * that waited for it goes now (s itself, if it was released: the caller
 * no longer looks at it). */
void
lz_unwait_locked(lz_slot *s)
{
    s->waiters--;
    if (s->ipc_pool != NULL && s->waiters == 0
        && lz.drivers[s->driver].ipc_retired > 0) {
        lz_reclaim_locked(s->driver);
    }
}

/* Make s (just appended on st's list) st's tail (st->lock held). */
void
lz_set_tail_locked(lz_stream *st, lz_slot *s)
{
    if (st == NULL) {
        return;
    }
    s->waiters++;
    lz_slot *old = st->tail;
    st->tail = s;
    if (old != NULL) {
        lz_unwait_locked(old);
    }
}

acc_status
lz_acquire(int d, int timing, lz_slot **out, acc_error *err)
{
    pthread_mutex_lock(&lz.lock);
    acc_status st = lz_acquire_locked(d, timing, out, err);
    pthread_mutex_unlock(&lz.lock);
    return st;
}

void
lz_unwait(lz_slot *s)
{
    pthread_mutex_lock(&lz.lock);
    lz_unwait_locked(s);
    pthread_mutex_unlock(&lz.lock);
}

void
lz_unwait_retire(lz_slot *s)
{
    pthread_mutex_lock(&lz.lock);
    s->waiters--;
    lz_retire_locked(s);
    pthread_mutex_unlock(&lz.lock);
}

void
lz_retire(lz_slot *s)
{
    pthread_mutex_lock(&lz.lock);
    lz_retire_locked(s);
    pthread_mutex_unlock(&lz.lock);
}

/* Block until s signals or `timeout` ns pass.  The caller counts itself
 * in s->waiters first, so that nobody resets s meanwhile. */
ze_result_t
lz_host_wait(lz_slot *s, uint64_t timeout)
{
    return lz_fn.zeEventHostSynchronize(s->event, timeout);
}

/* Work that uses memory the caller is about to release signals s, and
 * waiting for it failed: wait for s, retrying what fails, until it has
 * signalled or the driver says it never will (device lost).  `what`
 * names the work in the trace. */
void
lz_await(lz_slot *s, const char *what)
{
    const struct timespec pause = {0, 1000000}; /* 1 ms between tries */
    for (;;) {
        ze_result_t r = lz_host_wait(s, UINT64_MAX);
        if (r == ZE_RESULT_SUCCESS || r == ZE_RESULT_ERROR_DEVICE_LOST) {
            return;
        }
        r = lz_fn.zeEventQueryStatus(s->event);
        if (r == ZE_RESULT_SUCCESS || r == ZE_RESULT_ERROR_DEVICE_LOST) {
            return;
        }
        acc_trace("xpu: waiting for %s failed (0x%x); retrying: it still "
                  "uses memory the caller releases", what, (unsigned)r);
        nanosleep(&pause, NULL);
    }
}
