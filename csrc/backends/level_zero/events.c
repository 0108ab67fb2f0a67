/*
 * events.c - events: record (a barrier signalling the event's slot),
 * waits on the same driver (a barrier with a wait list), query,
 * synchronize and elapsed time.
 */
#include "lz.h"

acc_status
lz_event_create(acc_event *e, acc_error *err)
{
    lz_event *ev = calloc(1, sizeof(*ev));
    if (ev == NULL) {
        return lz_no_memory(err);
    }
    ev->device = e->device;
    /* Interprocess events never time (the core asks for none). */
    ev->timing = (e->flags & ACC_EVENT_TIMING) != 0
                 && !(e->flags & ACC_EVENT_INTERPROCESS);
    acc_status status =
        (e->flags & ACC_EVENT_INTERPROCESS)
            ? lz_ipc_event_slot(lz_driver_of(e->device), &ev->slot, err)
            : lz_acquire(lz_driver_of(e->device), ev->timing, &ev->slot,
                         err);
    if (status != ACC_OK) {
        free(ev);
        return status;
    }
    e->native = ev;
    e->handle = (uintptr_t)ev->slot->event;
    return ACC_OK;
}

void
lz_event_destroy(acc_event *e)
{
    lz_event *ev = e->native;
    if (ev == NULL) {
        return;
    }
    e->native = NULL;
    if (!lz.shut) {
        pthread_mutex_lock(&lz.lock);
        if (ev->fence != NULL) {
            lz_retire_locked(ev->fence);
        }
        lz_retire_locked(ev->slot);
        pthread_mutex_unlock(&lz.lock);
    }
    free(ev);
}

static lz_slot *lz_event_tells_locked(lz_event *ev);

/* Append on t a barrier that waits for w and signals a fresh slot, kept
 * as a link until it has run, so that w is not reset meanwhile (t's lock
 * and lz.lock held).  The caller counted itself a waiter of w: on
 * success that count passes to the link. */
static acc_status
lz_wait_linked_locked(lz_target *t, lz_slot *w, acc_error *err)
{
    lz_slot *done = NULL;
    acc_status status = lz_reserve_link_locked(t->driver, err);
    if (status != ACC_OK) {
        return status;
    }
    status = lz_acquire_locked(t->driver, 0, &done, err);
    if (status == ACC_OK) {
        ze_event_handle_t h = w->event;
        ze_result_t r = lz_fn.zeCommandListAppendBarrier(t->list,
                                                         done->event, 1, &h);
        if (r != ZE_RESULT_SUCCESS) {
            status = lz_fail(err, "zeCommandListAppendBarrier", r,
                             t->driver);
            lz_retire_locked(done);
        }
    }
    if (status == ACC_OK) {
        done->armed = 1;
        lz_link_reserved_locked(t->driver, &(lz_link){w, done});
    }
    else {
        lz_link_reserved_locked(t->driver, NULL);
    }
    return status;
}

/*
 * Record the interprocess slot again while it is armed and in use (t's
 * lock and lz.lock held): it cannot move to a fresh slot, since other
 * processes opened this one, so t resets it in order: after waiting for
 * our signals of it still to come (the last one, or the fence that
 * follows the latest) and for the waits on it appended here (the links:
 * their "done" slots), each wait a linked barrier of its own, the
 * reset; the caller appends the signal, then the event's fence (see
 * lz_event), since until the reset runs the slot still says the last
 * record's state.  What cannot be waited for here: other processes'
 * waits, host threads blocked on the slot and waits across drivers
 * (bridges) that have not yet seen the last signal wait for the next
 * one instead, as waits that run after a record do.
 */
static acc_status
lz_ipc_rearm_locked(lz_target *t, lz_event *ev, acc_error *err)
{
    lz_slot *slot = ev->slot;
    lz_driver *drv = &lz.drivers[slot->driver];
    lz_slot *last = ev->fence != NULL ? ev->fence
                    : slot->ipc_signal ? slot : NULL;
    size_t n = last != NULL ? 1 : 0;
    for (size_t i = 0; i < drv->nlinks; i++) {
        n += drv->links[i].waited == slot;
    }
    /* Taken first: adding links may move drv->links. */
    lz_slot *one = NULL;
    lz_slot **waits = n > 1 ? malloc(n * sizeof(*waits)) : &one;
    if (waits == NULL) {
        return lz_no_memory(err);
    }
    size_t k = 0;
    if (last != NULL) {
        waits[k++] = last;
    }
    for (size_t i = 0; i < drv->nlinks; i++) {
        if (drv->links[i].waited == slot) {
            waits[k++] = drv->links[i].done;
        }
    }
    /* Counted first: acquiring the barriers' slots may resolve links and
     * reset what they waited on, these among them. */
    for (size_t i = 0; i < n; i++) {
        waits[i]->waiters++;
    }
    acc_status status = ACC_OK;
    size_t linked = 0;
    while (linked < n && status == ACC_OK) {
        status = lz_wait_linked_locked(t, waits[linked], err);
        linked += status == ACC_OK;
    }
    for (size_t i = linked; i < n; i++) {
        waits[i]->waiters--;
    }
    if (waits != &one) {
        free(waits);
    }
    if (status != ACC_OK) {
        return status;
    }
    if (n == 0) {
        status = lz_order_locked(t, err);
        if (status != ACC_OK) {
            return status;
        }
    }
    ze_result_t r = lz_fn.zeCommandListAppendEventReset(t->list,
                                                        slot->event);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeCommandListAppendEventReset", r, t->driver);
    }
    return ACC_OK;
}

static acc_status
lz_record_target(acc_event *e, lz_target t, acc_error *err)
{
    lz_event *ev = e->native;
    acc_status status = ACC_OK;
    pthread_mutex_lock(t.lock);
    if (t.st != NULL && lz_capturing_locked(t.st)) {
        /* A node of the capture, not run (graph.c). */
        status = lz_capture_record_locked(&t, ev, err);
        pthread_mutex_unlock(t.lock);
        return status;
    }
    pthread_mutex_lock(&lz.lock);
    lz_slot *slot = ev->slot;
    lz_slot *fence = NULL;
    if (slot->ipc_pool != NULL && slot->driver != t.driver) {
        pthread_mutex_unlock(&lz.lock);
        pthread_mutex_unlock(t.lock);
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "backend %s cannot record an interprocess event of "
                      "device %d on a stream of device %d: they belong to "
                      "different Level Zero drivers", LZ_BACKEND,
                      ev->device, t.device);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    ev->cap_id = 0;
    if (slot->armed) {
        /* Reuse the slot only if its last signal has landed and nothing
         * can still wait on it; otherwise move to a fresh one.  Being
         * this stream's tail is no obstacle: it stays the tail, and the
         * stream's lock keeps query() out until it is armed again.  An
         * interprocess slot stays: the waits here that have run let go
         * of it first, and a signal of another process's (an imported
         * event) is not ours to wait for. */
        int own_tail = t.st != NULL && t.st->tail == slot;
        int ipc = slot->ipc_pool != NULL;
        if (ipc) {
            lz_reclaim_locked(slot->driver);
            (void)lz_event_tells_locked(ev); /* a signaled fence goes */
        }
        if (slot->waiters == own_tail && !(ipc && ev->fence != NULL)
            && ((ipc && !slot->ipc_signal)
                || lz_fn.zeEventQueryStatus(slot->event)
                       == ZE_RESULT_SUCCESS)
            && lz_fn.zeEventHostReset(slot->event) == ZE_RESULT_SUCCESS) {
            slot->armed = 0;
            slot->ipc_signal = 0;
        }
        else if (ipc) {
            status = lz_acquire_locked(t.driver, 0, &fence, err);
            if (status == ACC_OK) {
                status = lz_ipc_rearm_locked(&t, ev, err);
            }
            if (status != ACC_OK && fence != NULL) {
                lz_retire_locked(fence);
                fence = NULL;
            }
        }
        else {
            lz_slot *fresh;
            status = lz_acquire_locked(t.driver, ev->timing, &fresh, err);
            if (status == ACC_OK) {
                lz_retire_locked(slot);
                ev->slot = slot = fresh;
            }
        }
    }
    if (status == ACC_OK) {
        /* Claimed now, so a concurrent record cannot take it too; the
         * handle follows ev->slot under the same lock, so a concurrent
         * record on another stream cannot leave it naming a retired
         * slot. */
        slot->armed = 1;
        slot->ipc_signal = slot->ipc_pool != NULL;
        e->handle = (uintptr_t)slot->event;
    }
    pthread_mutex_unlock(&lz.lock);
    if (status == ACC_OK) {
        status = lz_append_barrier_locked(&t, slot, NULL, err);
        if (status != ACC_OK) {
            pthread_mutex_lock(&lz.lock);
            slot->armed = 0;
            slot->ipc_signal = 0;
            pthread_mutex_unlock(&lz.lock);
        }
    }
    if (fence != NULL) {
        /* After the signal: once it has signaled, so has this record. */
        if (status == ACC_OK) {
            status = lz_append_barrier_locked(&t, fence, NULL, err);
        }
        pthread_mutex_lock(&lz.lock);
        if (status == ACC_OK) {
            lz_slot *old = ev->fence;
            ev->fence = fence;
            if (old != NULL) {
                lz_retire_locked(old);
            }
        }
        else {
            lz_retire_locked(fence);
        }
        pthread_mutex_unlock(&lz.lock);
    }
    pthread_mutex_unlock(t.lock);
    return status;
}

/* The slot that tells ev's state now (lz.lock held): its fence while
 * that has not signaled (the slot may still say the last record's
 * state), else its slot, which then says the latest record's of any
 * process. */
static lz_slot *
lz_event_tells_locked(lz_event *ev)
{
    if (ev->fence != NULL) {
        if (lz_fn.zeEventQueryStatus(ev->fence->event) != ZE_RESULT_SUCCESS) {
            return ev->fence;
        }
        lz_retire_locked(ev->fence);
        ev->fence = NULL;
    }
    return ev->slot;
}

/* The slot that tells e's state if it was recorded, counted as waited
 * on; NULL if not. */
static lz_slot *
lz_event_slot_wait(acc_event *e)
{
    lz_event *ev = e->native;
    lz_slot *slot = NULL;
    if (ev == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&lz.lock);
    lz_slot *tells = lz_event_tells_locked(ev);
    if (tells->armed) {
        slot = tells;
        slot->waiters++;
    }
    pthread_mutex_unlock(&lz.lock);
    return slot;
}

static acc_status
lz_wait_target(lz_target t, acc_event *e, acc_error *err)
{
    acc_status captured = ACC_OK;
    pthread_mutex_lock(t.lock);
    int handled = lz_capture_wait_locked(&t, e->native, &captured, err);
    pthread_mutex_unlock(t.lock);
    if (handled) {
        return captured;
    }
    lz_slot *slot = lz_event_slot_wait(e);
    if (slot == NULL) {
        return ACC_OK; /* never recorded: nothing to wait for */
    }
    if (lz_fn.zeEventQueryStatus(slot->event) == ZE_RESULT_SUCCESS) {
        /* Already complete (and kept so by our count): nothing to wait
         * for. */
        lz_unwait(slot);
        return ACC_OK;
    }
    if (slot->driver != t.driver) {
        return lz_wait_across(t, slot, err);
    }
    lz_slot *done = NULL;
    pthread_mutex_lock(t.lock);
    pthread_mutex_lock(&lz.lock);
    acc_status status = lz_reserve_link_locked(t.driver, err);
    int reserved = status == ACC_OK;
    if (status == ACC_OK) {
        status = lz_acquire_locked(t.driver, 0, &done, err);
    }
    pthread_mutex_unlock(&lz.lock);
    if (status == ACC_OK) {
        status = lz_append_barrier_locked(&t, done, slot, err);
    }
    pthread_mutex_lock(&lz.lock);
    if (status == ACC_OK) {
        /* Our count on slot passes to the link. */
        lz_link_reserved_locked(t.driver, &(lz_link){slot, done});
    }
    else {
        if (reserved) {
            lz_link_reserved_locked(t.driver, NULL);
        }
        slot->waiters--;
        if (done != NULL) {
            lz_retire_locked(done);
        }
    }
    pthread_mutex_unlock(&lz.lock);
    pthread_mutex_unlock(t.lock);
    return status;
}

acc_status
lz_event_query(acc_event *e, acc_error *err)
{
    lz_event *ev = e->native;
    if (ev == NULL) {
        return ACC_OK;
    }
    pthread_mutex_lock(&lz.lock);
    lz_slot *slot = lz_event_tells_locked(ev);
    ze_result_t r = slot->armed ? lz_fn.zeEventQueryStatus(slot->event)
                                : ZE_RESULT_SUCCESS;
    pthread_mutex_unlock(&lz.lock);
    if (r == ZE_RESULT_SUCCESS) {
        return ACC_OK;
    }
    if (r == ZE_RESULT_NOT_READY) {
        return ACC_NOT_READY;
    }
    return lz_fail(err, "zeEventQueryStatus", r, slot->driver);
}

acc_status
lz_event_synchronize(acc_event *e, acc_error *err)
{
    lz_slot *slot = lz_event_slot_wait(e);
    if (slot == NULL) {
        return ACC_OK;
    }
    ze_result_t r = lz_host_wait(slot, UINT64_MAX);
    lz_unwait(slot);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventHostSynchronize", r, slot->driver);
    }
    return ACC_OK;
}

/*
 * t1 - t0 in ticks of a counter that keeps only the bits of mask
 * (kernelTimestampValidBits) and so wraps every mask + 1 ticks.  Both
 * readings only say where on that cycle each event completed, so the
 * interval is taken the shorter way round: a later reading smaller by
 * less than half a cycle is a reversed pair (negative, as CUDA and torch
 * answer), by more than half a cycle it is a wrap-around.  Intervals of
 * half a cycle or more (2**31 ticks: 2.1 s at 1 ns, 112 s at 52 ns) are
 * therefore not measurable.
 */
static double
lz_ticks_between(uint64_t t0, uint64_t t1, uint64_t mask)
{
    uint64_t forward = (t1 - t0) & mask;
    uint64_t half = (mask >> 1) + 1;
    if (forward < half) {
        return (double)forward;
    }
    return -((double)(mask - forward) + 1.0);
}

acc_status
lz_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                    acc_error *err)
{
    /* The dispatcher has checked timing, records and devices. */
    lz_event *a = start->native, *b = end->native;
    ze_kernel_timestamp_result_t ts[2];
    ze_result_t r = ZE_RESULT_SUCCESS;
    int d = lz_driver_of(a->device);
    pthread_mutex_lock(&lz.lock);
    int armed = a->slot->armed && b->slot->armed;
    if (armed) {
        r = lz_fn.zeEventQueryKernelTimestamp(a->slot->event, &ts[0]);
        if (r == ZE_RESULT_SUCCESS) {
            r = lz_fn.zeEventQueryKernelTimestamp(b->slot->event, &ts[1]);
        }
    }
    pthread_mutex_unlock(&lz.lock);
    if (!armed) {
        return ACC_ERR_INVALID_ARGUMENT; /* the dispatcher words it */
    }
    if (r == ZE_RESULT_NOT_READY) {
        return ACC_NOT_READY;
    }
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventQueryKernelTimestamp", r, d);
    }
    /* A record completes when its barrier ends: measure end to end, in
     * the device's global clock. */
    const lz_device *dev = &lz.devices[a->device];
    double ticks = lz_ticks_between(ts[0].global.kernelEnd,
                                    ts[1].global.kernelEnd, dev->ts_mask);
    *ms = (float)(ticks * dev->ns_per_tick / 1e6);
    return ACC_OK;
}

acc_status
lz_event_record(acc_event *e, acc_stream *s, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = lz_record_target(e, t, err);
    lz_target_done(&t);
    return status;
}

acc_status
lz_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = lz_wait_target(t, e, err);
    lz_target_done(&t);
    return status;
}
