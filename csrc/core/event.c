/*
 * event.c - events: made on first record (their native event from the
 * cache, or new), recorded, queried, waited for, timed, and released
 * into the cache.
 */
#include "core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* Threads waiting for another thread's first record of an event to make
 * its native event; never held across a driver call. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t made;
} V = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .made = PTHREAD_COND_INITIALIZER,
};

static void
after_fork_child(void)
{
    pthread_mutex_init(&V.lock, NULL);
    pthread_cond_init(&V.made, NULL);
}

__attribute__((constructor)) static void
register_hooks(void)
{
    static acc_hooks hooks = {.after_fork_child = after_fork_child};

    acc_hooks_register(&hooks);
}

void
acc_event_init(acc_event *e, unsigned flags)
{
    memset(e, 0, sizeof(*e));
    atomic_init(&e->state, ACC_EVENT_UNMADE);
    e->device = -1;
    e->flags = flags;
}

int
acc_event_made(const acc_event *e)
{
    return atomic_load_explicit(&e->state, memory_order_acquire)
           == ACC_EVENT_MADE;
}

/* Give e its native event on s's device and record it there, once: of
 * threads recording e for the first time together, one makes and records
 * it (no lock held while the driver works; *recorded says it was this
 * call) and the others wait for the outcome; if the driver refuses
 * either, e is left never recorded and the next one tries. */
static acc_status
event_make(acc_event *e, acc_stream *s, int *recorded, acc_error *err)
{
    int state = atomic_load_explicit(&e->state, memory_order_acquire);
    acc_event made;
    acc_status st;

    *recorded = 0;
    for (;;) {
        if (state == ACC_EVENT_MADE) {
            return ACC_OK;
        }
        if (state == ACC_EVENT_UNMADE) {
            if (atomic_compare_exchange_weak_explicit(
                    &e->state, &state, ACC_EVENT_MAKING,
                    memory_order_acquire, memory_order_acquire)) {
                break;
            }
            continue;
        }
        pthread_mutex_lock(&V.lock);
        while ((state = atomic_load_explicit(&e->state,
                                             memory_order_acquire))
               == ACC_EVENT_MAKING) {
            pthread_cond_wait(&V.made, &V.lock);
        }
        pthread_mutex_unlock(&V.lock);
    }
    /* Made aside and published whole: readers never see a device
     * without a native event, or a backend missing. */
    acc_event_init(&made, e->flags);
    made.backend = s->backend;
    made.device = s->device;
    st = acc_cache_take_event(&made)
         ? ACC_OK : ACC_SLOT(s->backend, event_create, err, &made, err);
    if (st == ACC_OK) {
        st = ACC_SLOT(s->backend, event_record, err, &made, s, err);
        if (st != ACC_OK) {
            /* Still never recorded: the native event goes back to the
             * pool, so that query, synchronize and elapsed_time keep
             * answering for an unrecorded event (backends are only
             * asked about recorded ones). */
            atomic_store_explicit(&made.state, ACC_EVENT_MADE,
                                  memory_order_relaxed);
            acc_event_release(&made);
        }
    }
    pthread_mutex_lock(&V.lock);
    if (st == ACC_OK) {
        e->backend = made.backend;
        e->device = made.device;
        e->handle = made.handle;
        e->native = made.native;
        atomic_store_explicit(&e->state, ACC_EVENT_MADE,
                              memory_order_release);
        *recorded = 1;
    }
    else {
        atomic_store_explicit(&e->state, ACC_EVENT_UNMADE,
                              memory_order_release);
    }
    pthread_cond_broadcast(&V.made);
    pthread_mutex_unlock(&V.lock);
    return st;
}

acc_status
acc_event_record(acc_event *e, acc_stream *s, acc_error *err)
{
    int recorded;
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    st = event_make(e, s, &recorded, err);
    if (st != ACC_OK) {
        return st;
    }
    if (!recorded) {
        if (e->device != s->device) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                          "Event device index %d does not match recording "
                          "stream's device index %d.", e->device,
                          s->device);
            return ACC_ERR_INVALID_ARGUMENT;
        }
        st = ACC_SLOT(s->backend, event_record, err, e, s, err);
    }
    if (st == ACC_OK && acc_hooks_events_watched()) {
        acc_hooks_event_recorded(e, s);
    }
    return st;
}

acc_status
acc_event_query(acc_event *e, acc_error *err)
{
    acc_status st;

    if (!acc_event_made(e)) {
        return ACC_OK;
    }
    st = acc_check_usable(err);
    if (st != ACC_OK) {
        return st;
    }
    return ACC_QUERY_SLOT(e->backend, event_query, err, e, err);
}

acc_status
acc_event_synchronize(acc_event *e, acc_error *err)
{
    acc_status st;

    if (!acc_event_made(e)) {
        return ACC_OK;
    }
    st = acc_check_usable(err);
    if (st != ACC_OK) {
        return st;
    }
    return ACC_SLOT(e->backend, event_synchronize, err, e, err);
}

static acc_status
not_recorded(acc_error *err)
{
    acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                  "Both events must be recorded before calculating elapsed "
                  "time.");
    return ACC_ERR_INVALID_ARGUMENT;
}

acc_status
acc_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                     acc_error *err)
{
    acc_status st;

    if (!(start->flags & ACC_EVENT_TIMING) || !(end->flags & ACC_EVENT_TIMING)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Both events must be created with argument "
                      "'enable_timing=True'.");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (!acc_event_made(start) || !acc_event_made(end)) {
        return not_recorded(err);
    }
    if (start->device != end->device) {
        /* Device clocks (and CUDA contexts) differ: no common time. */
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Both events must be recorded on the same device to "
                      "calculate elapsed time, got devices %d and %d.",
                      start->device, end->device);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    st = acc_check_usable(err);
    if (st != ACC_OK) {
        return st;
    }
    if (start->backend->event_elapsed_ms == NULL) {
        return acc_error_unsupported("event timing", err);
    }
    st = ACC_QUERY_SLOT(start->backend, event_elapsed_ms, err, start, end, ms,
                        err);
    if (st == ACC_ERR_INVALID_ARGUMENT) {
        return not_recorded(err);
    }
    if (st == ACC_NOT_READY) {
        acc_error_set(err, ACC_ERR_STATE,
                      "Both events must be completed before calculating "
                      "elapsed time.");
        return ACC_ERR_STATE;
    }
    return st;
}

void
acc_event_release(acc_event *e)
{
    if (acc_hooks_events_watched()) {
        acc_hooks_event_released(e);
    }
    if (acc_event_made(e) && !acc_forked()
        && !((e->flags & ACC_EVENT_INTERPROCESS) && acc_hooks_keep_event(e))) {
        acc_cache_put_event(e);
    }
    e->native = NULL;
    e->handle = 0;
    e->device = -1;
    e->backend = NULL;
    atomic_store_explicit(&e->state, ACC_EVENT_UNMADE, memory_order_relaxed);
}
