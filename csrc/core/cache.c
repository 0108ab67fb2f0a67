/*
 * cache.c - driver streams and events kept for reuse when their owner
 * drops them, as torch pools streams: creating one in a loop then costs
 * no driver call.  A reused stream may still run its previous owner's
 * work (in order, as with torch's shared pool streams); a reused event is
 * unrecorded until its new owner records it.  acc_empty_cache() releases
 * them; so does exit.
 */
#include "core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define STREAM_POOL_SIZE 8   /* free streams kept per device */
#define EVENT_POOL_SIZE 32   /* free events kept per device and flags */
#define EVENT_KINDS 4        /* ACC_EVENT_TIMING | ACC_EVENT_BLOCKING */

typedef struct stream_pool {
    int n;
    struct {
        int priority;
        uintptr_t handle;
        void *native;
    } items[STREAM_POOL_SIZE];
} stream_pool;

typedef struct event_pool {
    int n;
    struct {
        uintptr_t handle;
        void *native;
    } items[EVENT_POOL_SIZE];
} event_pool;

static struct {
    pthread_mutex_t lock;
    stream_pool streams[ACC_MAX_DEVICES];
    event_pool events[ACC_MAX_DEVICES][EVENT_KINDS];
} C = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

static void
after_fork_child(void)
{
    pthread_mutex_init(&C.lock, NULL);
}

__attribute__((constructor)) static void
register_hooks(void)
{
    static acc_hooks hooks = {
        .shutdown = acc_empty_cache,
        .after_fork_child = after_fork_child,
    };

    acc_hooks_register(&hooks);
}

/* Streams ---------------------------------------------------------------- */

static void
stream_destroy(acc_stream *s)
{
    acc_hooks_stream_destroyed(s);
    if (s->backend->stream_destroy != NULL) {
        s->backend->stream_destroy(s);
    }
}

void
acc_cache_put_stream(acc_stream *s)
{
    stream_pool *pool = &C.streams[s->device];

    pthread_mutex_lock(&C.lock);
    if (pool->n < STREAM_POOL_SIZE) {
        pool->items[pool->n].priority = s->priority;
        pool->items[pool->n].handle = s->handle;
        pool->items[pool->n].native = s->native;
        pool->n++;
        pthread_mutex_unlock(&C.lock);
        return;
    }
    pthread_mutex_unlock(&C.lock);
    stream_destroy(s);
}

int
acc_cache_take_stream(acc_stream *s)
{
    stream_pool *pool = &C.streams[s->device];
    int found = 0;

    pthread_mutex_lock(&C.lock);
    for (int i = pool->n - 1; i >= 0; i--) {
        if (pool->items[i].priority == s->priority) {
            s->handle = pool->items[i].handle;
            s->native = pool->items[i].native;
            pool->items[i] = pool->items[--pool->n];
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&C.lock);
    return found;
}

/* Events ----------------------------------------------------------------- */

static event_pool *
event_pool_of(const acc_event *e)
{
    return &C.events[e->device][e->flags & (EVENT_KINDS - 1)];
}

int
acc_cache_take_event(acc_event *e)
{
    event_pool *pool = event_pool_of(e);
    int found = 0;

    if (e->flags & (ACC_EVENT_INTERPROCESS | ACC_EVENT_IMPORTED)) {
        return 0;   /* never pooled: each is a driver event of its own */
    }
    pthread_mutex_lock(&C.lock);
    if (pool->n > 0) {
        pool->n--;
        e->handle = pool->items[pool->n].handle;
        e->native = pool->items[pool->n].native;
        found = 1;
    }
    pthread_mutex_unlock(&C.lock);
    return found;
}

void
acc_cache_put_event(acc_event *e)
{
    event_pool *pool = event_pool_of(e);

    pthread_mutex_lock(&C.lock);
    if (pool->n < EVENT_POOL_SIZE
        && !(e->flags & (ACC_EVENT_INTERPROCESS | ACC_EVENT_IMPORTED))) {
        pool->items[pool->n].handle = e->handle;
        pool->items[pool->n].native = e->native;
        pool->n++;
        e->native = NULL;
    }
    pthread_mutex_unlock(&C.lock);
    if (e->native != NULL) {
        e->backend->event_destroy(e);
    }
    e->native = NULL;
}

/* Emptying --------------------------------------------------------------- */

void
acc_empty_cache(void)
{
    const acc_backend *b = acc_selected_backend();
    acc_stream s;
    acc_event e;

    if (b == NULL || acc_forked() || !acc_initialized()) {
        return;
    }
    /* Memory whose work is done first: its deferred releases hold
     * events. */
    acc_hooks_empty_cache();
    /* Take one object out under the lock, destroy it outside: destroying
     * may wait for the driver. */
    for (int d = 0; d < acc_device_count(); d++) {
        for (;;) {
            stream_pool *pool = &C.streams[d];

            pthread_mutex_lock(&C.lock);
            if (pool->n == 0) {
                pthread_mutex_unlock(&C.lock);
                break;
            }
            memset(&s, 0, sizeof(s));
            pool->n--;
            s.backend = b;
            s.device = d;
            s.priority = pool->items[pool->n].priority;
            s.handle = pool->items[pool->n].handle;
            s.native = pool->items[pool->n].native;
            pthread_mutex_unlock(&C.lock);
            stream_destroy(&s);
        }
        for (unsigned kind = 0; kind < EVENT_KINDS; kind++) {
            event_pool *pool = &C.events[d][kind];

            for (;;) {
                pthread_mutex_lock(&C.lock);
                if (pool->n == 0) {
                    pthread_mutex_unlock(&C.lock);
                    break;
                }
                memset(&e, 0, sizeof(e));
                atomic_init(&e.state, ACC_EVENT_UNMADE);
                pool->n--;
                e.backend = b;
                e.device = d;
                e.flags = kind;
                e.handle = pool->items[pool->n].handle;
                e.native = pool->items[pool->n].native;
                pthread_mutex_unlock(&C.lock);
                b->event_destroy(&e);
            }
        }
    }
}
