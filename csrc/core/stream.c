/*
 * stream.c - streams: each device's default stream, the per-thread
 * current stream, and streams made (from the cache when it has one),
 * wrapped, queried, waited for and ordered after events and other
 * streams.
 *
 * A new thread sees every device's default stream as current, as in
 * torch.  The current stream table is allocated on the thread's first
 * set_stream and released by a pthread key destructor when it ends.
 */
#include "core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct default_slot {
    atomic_int ready;          /* s is filled */
    acc_stream s;
} default_slot;

static struct {
    pthread_mutex_t lock;      /* filling a default slot */
    pthread_key_t thread_key;  /* runs release_thread_streams at exit */
    default_slot defaults[ACC_MAX_DEVICES];
} S = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

static ACC_TLS acc_stream **tls_streams; /* [ACC_MAX_DEVICES] or NULL */
static int thread_key_value;  /* any non-NULL value arms the destructor */

static void
release_thread_streams(void *unused)
{
    acc_stream **streams = tls_streams;

    (void)unused;
    if (streams == NULL) {
        return;
    }
    tls_streams = NULL;
    for (int i = 0; i < ACC_MAX_DEVICES; i++) {
        if (streams[i] != NULL) {
            acc_stream_decref(streams[i]);
        }
    }
    free(streams);
}

static void
after_fork_child(void)
{
    pthread_mutex_init(&S.lock, NULL);
}

/* At load: no driver is touched. */
__attribute__((constructor)) static void
register_hooks(void)
{
    static acc_hooks hooks = {.after_fork_child = after_fork_child};

    pthread_key_create(&S.thread_key, release_thread_streams);
    acc_hooks_register(&hooks);
}

/* Default and current streams -------------------------------------------- */

acc_status
acc_default_stream(int device, acc_stream **out, acc_error *err)
{
    default_slot *slot = &S.defaults[device];
    acc_status st = ACC_OK;

    if (!atomic_load_explicit(&slot->ready, memory_order_acquire)) {
        const acc_backend *b;

        st = acc_ready(err);
        if (st != ACC_OK) {
            return st;
        }
        b = acc_selected_backend();
        pthread_mutex_lock(&S.lock);
        if (!atomic_load_explicit(&slot->ready, memory_order_relaxed)) {
            memset(&slot->s, 0, sizeof(slot->s));
            slot->s.refcount = 1;
            slot->s.backend = b;
            slot->s.device = device;
            slot->s.flags = ACC_STREAM_DEFAULT;
            st = ACC_SLOT(b, stream_default, err, device, &slot->s, err);
            if (st == ACC_OK) {
                atomic_store_explicit(&slot->ready, 1, memory_order_release);
            }
        }
        pthread_mutex_unlock(&S.lock);
        if (st != ACC_OK) {
            return st;
        }
    }
    *out = &slot->s;
    return ACC_OK;
}

int
acc_stream_cached(int device, int current, acc_stream **out)
{
    default_slot *slot = &S.defaults[device];

    if (current && tls_streams != NULL && tls_streams[device] != NULL) {
        *out = tls_streams[device];
        return 1;
    }
    if (atomic_load_explicit(&slot->ready, memory_order_acquire)) {
        *out = &slot->s;
        return 1;
    }
    return 0;
}

acc_status
acc_current_stream(int device, acc_stream **out, acc_error *err)
{
    if (tls_streams != NULL && tls_streams[device] != NULL) {
        *out = tls_streams[device];
        return ACC_OK;
    }
    return acc_default_stream(device, out, err);
}

acc_status
acc_set_current_stream(acc_stream *s, acc_error *err)
{
    acc_stream *old;

    if (tls_streams == NULL) {
        acc_stream **streams = calloc(ACC_MAX_DEVICES, sizeof(*streams));

        if (streams == NULL) {
            return acc_error_host_memory(err);
        }
        tls_streams = streams;
        pthread_setspecific(S.thread_key, &thread_key_value);
    }
    old = tls_streams[s->device];
    if (s->flags & ACC_STREAM_DEFAULT) {
        tls_streams[s->device] = NULL;
    }
    else {
        acc_stream_incref(s);
        tls_streams[s->device] = s;
    }
    if (old != NULL) {
        acc_stream_decref(old);
    }
    return ACC_OK;
}

/* Life ------------------------------------------------------------------- */

void
acc_stream_incref(acc_stream *s)
{
    if (!(s->flags & ACC_STREAM_DEFAULT)) {
        atomic_fetch_add_explicit(&s->refcount, 1,
                                  memory_order_relaxed);
    }
}

void
acc_stream_decref(acc_stream *s)
{
    if (s->flags & ACC_STREAM_DEFAULT) {
        return;
    }
    if (atomic_fetch_sub_explicit(&s->refcount, 1,
                                  memory_order_acq_rel) != 1) {
        return;
    }
    /* A stream outlives a fork only in memory: the child must not call
     * the driver, and the parent still owns the native object. */
    if (!(s->flags & ACC_STREAM_EXTERNAL) && !acc_forked()) {
        acc_cache_put_stream(s);
    }
    free(s);
}

/* A new stream of device, owned by the caller; NULL (err filled) when
 * out of host memory. */
static acc_stream *
new_stream(int device, acc_error *err)
{
    acc_stream *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        acc_error_host_memory(err);
        return NULL;
    }
    s->refcount = 1;
    s->backend = acc_selected_backend();
    s->device = device;
    return s;
}

acc_status
acc_stream_priority_range(int device, int *least, int *greatest,
                          acc_error *err)
{
    const acc_backend *b;
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    b = acc_selected_backend();
    if (b->stream_priority_range == NULL) {
        *least = *greatest = 0;
        return ACC_OK;
    }
    st = acc_ready(err);
    if (st != ACC_OK) {
        return st;
    }
    return ACC_SLOT(b, stream_priority_range, err, device, least, greatest,
                    err);
}

acc_status
acc_stream_create(int device, int priority, acc_stream **out,
                  acc_error *err)
{
    int least, greatest;
    long long wanted;
    acc_stream *s;
    acc_status st;

    if (priority > 0) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Stream priority must be 0 (normal) or negative "
                      "(higher priority), got %d", priority);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    st = acc_stream_priority_range(device, &least, &greatest, err);
    if (st != ACC_OK) {
        return st;
    }
    /* Torch's priorities count down from 0 (normal); the driver's range
     * is [greatest, least].  Anything beyond the range is clamped, as
     * torch and the CUDA driver do. */
    wanted = (long long)least + priority;
    if (wanted < greatest) {
        wanted = greatest;
    }
    s = new_stream(device, err);
    if (s == NULL) {
        return err->status;
    }
    s->priority = (int)wanted;
    if (acc_cache_take_stream(s)) {
        *out = s;
        return ACC_OK;
    }
    st = ACC_SLOT(s->backend, stream_create, err, s, err);
    if (st != ACC_OK) {
        free(s);
        return st;
    }
    *out = s;
    return ACC_OK;
}

acc_status
acc_stream_wrap(int device, uintptr_t handle, acc_stream **out,
                acc_error *err)
{
    const acc_backend *b;
    acc_stream *s;
    acc_status st = acc_check_device_ready(device, err);

    if (st != ACC_OK) {
        return st;
    }
    b = acc_selected_backend();
    if (handle == 0 && !(b->caps & ACC_CAP_NULL_STREAM_HANDLE)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "a stream handle of 0 (NULL) is not a valid %s "
                      "stream; expected the handle of a live stream",
                      b->device_type);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    s = new_stream(device, err);
    if (s == NULL) {
        return err->status;
    }
    s->flags = ACC_STREAM_EXTERNAL;
    s->handle = handle;
    if (b->stream_wrap != NULL) {
        st = ACC_SLOT(b, stream_wrap, err, s, err);
        if (st == ACC_ERR_INVALID_ARGUMENT) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                          "%#llx is not the handle of a live stream of "
                          "%s:%d; expected the handle of a stream of that "
                          "device", (unsigned long long)handle,
                          b->device_type, device);
        }
        if (st != ACC_OK) {
            free(s);
            return st;
        }
    }
    *out = s;
    return ACC_OK;
}

/* Work ------------------------------------------------------------------- */

acc_status
acc_stream_query(acc_stream *s, acc_error *err)
{
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    return ACC_QUERY_SLOT(s->backend, stream_query, err, s, err);
}

acc_status
acc_stream_synchronize(acc_stream *s, acc_error *err)
{
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    return ACC_SLOT(s->backend, stream_synchronize, err, s, err);
}

acc_status
acc_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err)
{
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    if (!acc_event_made(e)) {
        /* Waiting for an event that was never recorded waits for
         * nothing (torch and the CUDA driver agree). */
        return ACC_OK;
    }
    st = ACC_SLOT(s->backend, stream_wait_event, err, s, e, err);
    if (st == ACC_OK && acc_hooks_events_watched()) {
        acc_hooks_stream_waited(s, e);
    }
    return st;
}

acc_status
acc_stream_wait_stream(acc_stream *s, acc_stream *other, acc_error *err)
{
    acc_event e;
    acc_status st;

    /* As torch does: record a timing-free event on other, wait on it. */
    acc_event_init(&e, 0);
    st = acc_event_record(&e, other, err);
    if (st == ACC_OK) {
        st = acc_stream_wait_event(s, &e, err);
    }
    acc_event_release(&e);
    return st;
}
