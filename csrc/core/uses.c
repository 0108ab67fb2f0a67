/*
 * uses.c - the books of one allocation: which streams queued work on
 * it, each as an event keyed by (device, stream handle).  (The operations
 * in flight are counted on the Python object that owns the memory, under
 * the GIL: py_buffer.c's acc_buffer_enter and acc_buffer_leave.)
 *
 * Every memory object keeps its books here (allocator.c's blocks,
 * memory.c's page-locked blocks, py_buffer.c's wrappers of foreign
 * memory); views, wrappers and exports write to the books of the memory
 * they share.  A use holds an event, never the stream: a dropped stream
 * is destroyed even while memory it wrote lives on.  A later use on the
 * same (device, handle) re-records the one event (a stream runs in
 * order); events whose work has completed are dropped at the next use.
 *
 * Plain C, no Python objects.  The lock guards the list; event records
 * and queries are made under it (they do not block), waits are not.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

void
acc_uses_init(acc_uses *u)
{
    memset(u, 0, sizeof(*u));
    pthread_mutex_init(&u->lock, NULL);
}

/* Drop the uses whose work has completed (a failed query too: nothing
 * can wait for it).  Lock held. */
static void
prune(acc_uses *u)
{
    acc_error err;
    int kept = 0;

    for (int i = 0; i < u->n; i++) {
        if (acc_event_query(&u->v[i].event, &err) == ACC_NOT_READY) {
            u->v[kept++] = u->v[i];
        }
        else {
            acc_event_release(&u->v[i].event);
        }
    }
    u->n = kept;
}

acc_status
acc_uses_record(acc_uses *u, acc_stream *s, acc_error *err)
{
    acc_use *slot = NULL;
    acc_status st;

    pthread_mutex_lock(&u->lock);
    prune(u);
    for (int i = 0; i < u->n && slot == NULL; i++) {
        if (u->v[i].device == s->device && u->v[i].handle == s->handle) {
            slot = &u->v[i];
        }
    }
    if (slot == NULL) {
        if (u->n == u->cap) {
            int cap = u->cap ? 2 * u->cap : 2;
            acc_use *more = realloc(u->v, (size_t)cap * sizeof(*more));

            if (more == NULL) {
                pthread_mutex_unlock(&u->lock);
                acc_error_host_memory(err);
                /* No record: make the use complete before going on. */
                return acc_stream_synchronize(s, err) == ACC_OK
                           ? ACC_OK : err->status;
            }
            u->v = more;
            u->cap = cap;
        }
        slot = &u->v[u->n];
        slot->device = s->device;
        slot->handle = s->handle;
        acc_event_init(&slot->event, 0);
        u->n++;
    }
    st = acc_event_record(&slot->event, s, err);
    pthread_mutex_unlock(&u->lock);
    if (st != ACC_OK) {
        /* An event that cannot be recorded cannot be waited for later:
         * wait for the stream now rather than free under its work. */
        acc_trace("recording a use of memory: %s; synchronizing instead",
                  err->message);
        st = acc_stream_synchronize(s, err);
    }
    return st;
}

int
acc_uses_pending(acc_uses *u)
{
    int n;

    pthread_mutex_lock(&u->lock);
    prune(u);
    n = u->n;
    pthread_mutex_unlock(&u->lock);
    return n;
}

acc_status
acc_uses_synchronize(acc_uses *u, acc_error *err)
{
    acc_event *events;
    acc_status st = ACC_OK;
    int n, i;

    /* Waited for outside the lock (others keep recording meanwhile):
     * the events leave the books, and those not waited for return. */
    n = acc_uses_take(u, &events);
    for (i = 0; i < n && st == ACC_OK; i++) {
        st = acc_event_synchronize(&events[i], err);
        if (st == ACC_OK) {
            acc_event_release(&events[i]);
        }
    }
    if (st != ACC_OK) {
        i--;                     /* the one that failed goes back too */
        pthread_mutex_lock(&u->lock);
        for (; i < n; i++) {
            if (u->n == u->cap) {
                int cap = u->cap ? 2 * u->cap : 2;
                acc_use *more = realloc(u->v, (size_t)cap * sizeof(*more));

                if (more == NULL) {
                    break;
                }
                u->v = more;
                u->cap = cap;
            }
            u->v[u->n].device = events[i].device;
            u->v[u->n].handle = UINTPTR_MAX;  /* no stream has it */
            u->v[u->n].event = events[i];
            u->n++;
        }
        for (; i < n; i++) {
            acc_event_release(&events[i]);  /* no room: cannot keep */
        }
        pthread_mutex_unlock(&u->lock);
    }
    free(events);
    return st;
}

int
acc_uses_take(acc_uses *u, acc_event **events)
{
    int n;

    pthread_mutex_lock(&u->lock);
    prune(u);
    n = u->n;
    *events = NULL;
    if (n > 0) {
        *events = malloc((size_t)n * sizeof(**events));
        if (*events == NULL) {
            /* Nowhere to keep them: wait for them now. */
            acc_error err;

            for (int i = 0; i < n; i++) {
                (void)acc_event_synchronize(&u->v[i].event, &err);
            }
            prune(u);
            n = 0;
        }
        else {
            for (int i = 0; i < n; i++) {
                (*events)[i] = u->v[i].event;
            }
            u->n = 0;
        }
    }
    pthread_mutex_unlock(&u->lock);
    return n;
}

void
acc_uses_clear(acc_uses *u)
{
    pthread_mutex_lock(&u->lock);
    for (int i = 0; i < u->n; i++) {
        acc_event_release(&u->v[i].event);
    }
    free(u->v);
    u->v = NULL;
    u->n = u->cap = 0;
    pthread_mutex_unlock(&u->lock);
}
