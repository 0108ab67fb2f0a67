/*
 * streams.c - immediate command lists as streams: create, wrap, query
 * (from the tail, lists.c), synchronize, and destroying a busy list
 * (the graveyard and its reaper thread).
 */
#define _GNU_SOURCE  /* mincore */
#include "lz.h"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Map an accelerator priority (0 normal, -1 high) to Level Zero's. */
static ze_command_queue_priority_t
lz_priority(int priority)
{
    if (priority < 0) {
        return ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH;
    }
    return priority > 0 ? ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_LOW
                        : ZE_COMMAND_QUEUE_PRIORITY_NORMAL;
}

static acc_status
lz_create_list(int device, int priority, ze_command_list_handle_t *out,
               acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    lz_driver *drv = &lz.drivers[dev->driver];
    ze_context_handle_t ctx = NULL;
    pthread_mutex_lock(&lz.lock);
    acc_status st = lz_context_locked(dev->driver, &ctx, err);
    int in_order = drv->in_order;
    pthread_mutex_unlock(&lz.lock);
    if (st != ACC_OK) {
        return st;
    }
    ze_command_queue_desc_t desc = {
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, dev->ordinal, 0,
        in_order ? ACC_ZE_COMMAND_QUEUE_FLAG_IN_ORDER : 0,
        ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, lz_priority(priority),
    };
    ze_result_t r = lz_fn.zeCommandListCreateImmediate(ctx, dev->handle,
                                                    &desc, out);
    if (in_order && (r == ZE_RESULT_ERROR_INVALID_ENUMERATION
                     || r == ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION)) {
        /* A driver (or a validation layer) that does not know the flag
         * after all: barriers keep the order without it. */
        acc_trace("xpu: driver %d refused IN_ORDER lists; using barriers",
                  dev->driver);
        pthread_mutex_lock(&lz.lock);
        drv->in_order = 0;
        pthread_mutex_unlock(&lz.lock);
        desc.flags = 0;
        r = lz_fn.zeCommandListCreateImmediate(ctx, dev->handle, &desc, out);
    }
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeCommandListCreateImmediate", r, dev->driver);
    }
    return ACC_OK;
}

static acc_status
lz_stream_new(int device, int priority, int is_default, lz_stream **out,
              acc_error *err)
{
    lz_stream *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return lz_no_memory(err);
    }
    acc_status status = lz_create_list(device, priority, &st->list, err);
    if (status != ACC_OK) {
        free(st);
        return status;
    }
    pthread_mutex_init(&st->lock, NULL);
    st->device = device;
    st->is_default = is_default;
    lz_device *dev = &lz.devices[device];
    pthread_mutex_lock(&lz.reg_lock);
    st->next = dev->streams;
    dev->streams = st;
    pthread_mutex_unlock(&lz.reg_lock);
    *out = st;
    return ACC_OK;
}

/* Free st (its list is gone): release its tail. */
void
lz_stream_free(lz_stream *st)
{
    if (st->tail != NULL && !lz.shut) {
        pthread_mutex_lock(&lz.lock);
        lz_unwait_locked(st->tail);
        pthread_mutex_unlock(&lz.lock);
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* Destroy the lists of destroyed streams that have gone idle
 * (lz.reg_lock held). */
static void
lz_reap_graveyard_locked(lz_device *dev)
{
    for (lz_stream **p = &dev->graveyard; *p != NULL;) {
        lz_stream *st = *p;
        if (st->pins == 0 && st->grave_marker == NULL) {
            /* Its end could not be marked when it was destroyed: mark it
             * now, so that synchronize() waits for its work and the list
             * goes once that ends, as a marked one does (the marker is
             * ours until the list is reaped, as lz_stream_destroy's). */
            lz_target t = lz_target_of_stream(st);
            acc_error ignored;
            if (lz_mark(&t, &st->grave_marker, &ignored) == ACC_OK) {
                lz_unwait(st->grave_marker);
            }
        }
        if (st->pins > 0 || (st->grave_marker != NULL
                             && lz_fn.zeEventQueryStatus(st->grave_marker->event)
                                    != ZE_RESULT_SUCCESS)) {
            p = &st->next;
            continue;
        }
        ze_result_t r = lz_fn.zeCommandListDestroy(st->list);
        if (r != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: zeCommandListDestroy failed (0x%x); retrying "
                      "later", (unsigned)r);
            p = &st->next;
            continue;
        }
        *p = st->next;
        if (st->grave_marker != NULL) {
            lz_retire(st->grave_marker);
        }
        lz_stream_free(st);
    }
}

acc_status
lz_stream_default(int device, acc_stream *s, acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    acc_status status = ACC_OK;
    pthread_mutex_lock(&lz.default_lock);
    if (dev->default_stream == NULL) {
        status = lz_stream_new(device, 0, 1, &dev->default_stream, err);
    }
    pthread_mutex_unlock(&lz.default_lock);
    if (status == ACC_OK) {
        s->native = dev->default_stream;
        s->handle = (uintptr_t)dev->default_stream->list;
    }
    return status;
}

/* Whether the two words at addr are mapped memory. */
static int
lz_words_readable(uintptr_t addr)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t last = addr + 2 * sizeof(void *) - 1;
    unsigned char vec;

    if (addr == 0 || addr % sizeof(void *) != 0 || page <= 0) {
        return 0;
    }
    for (uintptr_t p = addr & ~((uintptr_t)page - 1); p <= last; p += page) {
        if (mincore((void *)p, 1, &vec) != 0) {
            return 0;
        }
    }
    return 1;
}

/* A handle from the user (Stream.from_handle, a DLPack consumer's
 * stream) may be any integer: accept only mapped memory laid out as a
 * command list of this device's driver, like the device's own default
 * list (a driver's objects of one kind begin alike; the loader's
 * wrappers carry the driver's table in their second word), so that a
 * bogus value is refused before the driver sees it. */
acc_status
lz_stream_wrap(acc_stream *s, acc_error *err)
{
    const uintptr_t *theirs = (const uintptr_t *)s->handle, *ours;
    acc_stream probe;
    acc_status status;

    memset(&probe, 0, sizeof(probe));
    probe.device = s->device;
    status = lz_stream_default(s->device, &probe, err);
    if (status != ACC_OK) {
        return status;
    }
    ours = (const uintptr_t *)probe.handle;
    if (theirs == ours) {
        return ACC_OK;
    }
    if (!lz_words_readable(s->handle)
        || !((ours[0] != 0 && theirs[0] == ours[0])
             || (ours[1] != 0 && theirs[1] == ours[1]))) {
        err->status = ACC_ERR_INVALID_ARGUMENT;
        return ACC_ERR_INVALID_ARGUMENT;
    }
    return ACC_OK;
}

acc_status
lz_stream_priority_range(int device, int *least, int *greatest,
                         acc_error *err)
{
    (void)device;
    (void)err;
    *least = 0;
    *greatest = -1;
    return ACC_OK;
}

acc_status
lz_stream_create(acc_stream *s, acc_error *err)
{
    lz_stream *st;
    acc_status status = lz_stream_new(s->device, s->priority, 0, &st, err);
    if (status == ACC_OK) {
        s->native = st;
        s->handle = (uintptr_t)st->list;
    }
    return status;
}

/*
 * The reaper: a thread that runs while destroyed streams wait for their
 * work to finish, destroys each list as soon as its grave marker signals,
 * and exits when none is left (Level Zero forbids destroying a busy list;
 * Intel's driver would block in zeCommandListDestroy).
 */
static void *
lz_reaper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lz.reg_lock);
    while (!lz.reaper_stop) {
        lz_slot *mark = NULL;
        int left = 0;
        for (int i = 0; i < lz.ndevices; i++) {
            lz_reap_graveyard_locked(&lz.devices[i]);
            for (lz_stream *st = lz.devices[i].graveyard; st != NULL;
                 st = st->next) {
                left = 1;
                if (mark == NULL && st->pins == 0) {
                    mark = st->grave_marker;
                }
            }
        }
        if (!left) {
            break;
        }
        if (mark != NULL) {
            pthread_mutex_lock(&lz.lock);
            mark->waiters++;
            pthread_mutex_unlock(&lz.lock);
            pthread_mutex_unlock(&lz.reg_lock);
            lz_host_wait(mark, LZ_REAPER_WAIT_NS);
            pthread_mutex_lock(&lz.reg_lock);
            lz_unwait(mark);
        }
        else {
            /* Pinned, or no marker: look again a little later. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&lz.reaper_cv, &lz.reg_lock, &ts);
        }
    }
    lz.reaper_running = 0;
    pthread_cond_broadcast(&lz.reaper_cv);
    pthread_mutex_unlock(&lz.reg_lock);
    return NULL;
}

/* Start the reaper unless it runs (lz.reg_lock held). */
static void
lz_wake_reaper_locked(void)
{
    if (lz.reaper_running || lz.reaper_stop) {
        return;
    }
    if (lz_start_thread(lz_reaper) == 0) {
        lz.reaper_running = 1;
    }
    else {
        /* Then the next create, destroy or synchronize reaps. */
        acc_trace("xpu: cannot start the reaper thread");
    }
}

void
lz_stream_destroy(acc_stream *s)
{
    lz_stream *st = s->native;
    if (st == NULL) {
        return;
    }
    s->native = NULL;
    pthread_mutex_lock(&st->lock);
    lz_capture_drop(st);
    pthread_mutex_unlock(&st->lock);
    if (lz.shut) {
        /* Shutdown destroyed the list already. */
        lz_stream_free(st);
        return;
    }
    lz_device *dev = &lz.devices[st->device];
    pthread_mutex_lock(&lz.reg_lock);
    for (lz_stream **p = &dev->streams; *p != NULL; p = &(*p)->next) {
        if (*p == st) {
            *p = st->next;
            break;
        }
    }
    /* Queued work must finish before the list may go: mark its end and
     * destroy the list once the mark has signaled. */
    lz_target t = lz_target_of_stream(st);
    acc_error ignored;
    lz_slot *mark = NULL;
    if (lz_mark(&t, &mark, &ignored) != ACC_OK) {
        mark = NULL;
    }
    st->grave_marker = mark;
    st->next = dev->graveyard;
    dev->graveyard = st;
    if (mark != NULL) {
        /* An idle list passes its marker at once: then it goes now, not
         * later on another thread.  A busy one costs this short wait.
         * The marker stays counted (ours) until the list is reaped. */
        st->pins++;
        pthread_mutex_unlock(&lz.reg_lock);
        lz_host_wait(mark, LZ_DESTROY_GRACE_NS);
        pthread_mutex_lock(&lz.reg_lock);
        lz_unwait(mark);
        st->pins--;
    }
    lz_reap_graveyard_locked(dev);
    if (dev->graveyard != NULL) {
        lz_wake_reaper_locked();
    }
    pthread_mutex_unlock(&lz.reg_lock);
}

static acc_status
lz_query_target(lz_target t, acc_error *err)
{
    ze_result_t r;
    const char *api;
    pthread_mutex_lock(t.lock);
    acc_status refused = lz_capture_refuse_locked(t.st, "zeEventQueryStatus",
                                                  err);
    pthread_mutex_unlock(t.lock);
    if (refused != ACC_OK) {
        return refused;
    }
    if (lz_host_sync_usable(t.driver)) {
        api = "zeCommandListHostSynchronize";
        r = lz_fn.zeCommandListHostSynchronize(t.list, 0);
    }
    else if (t.st != NULL) {
        /* The tail is counted in use, so it cannot be reset under us. */
        api = "zeEventQueryStatus";
        pthread_mutex_lock(t.lock);
        lz_slot *tail = t.st->tail;
        r = tail != NULL ? lz_fn.zeEventQueryStatus(tail->event)
                         : ZE_RESULT_SUCCESS;
        pthread_mutex_unlock(t.lock);
    }
    else {
        /* A list made elsewhere: only a marker tells, polled once. */
        lz_slot *mark;
        acc_status status = lz_mark(&t, &mark, err);
        if (status != ACC_OK) {
            return status;
        }
        api = "zeEventQueryStatus";
        r = lz_fn.zeEventQueryStatus(mark->event);
        lz_unwait_retire(mark);
    }
    if (r == ZE_RESULT_SUCCESS) {
        return ACC_OK;
    }
    if (r == ZE_RESULT_NOT_READY) {
        return ACC_NOT_READY;
    }
    return lz_fail(err, api, r, t.driver);
}

acc_status
lz_synchronize_target(lz_target t, acc_error *err)
{
    pthread_mutex_lock(t.lock);
    acc_status refused = lz_capture_refuse_locked(
        t.st, "zeEventHostSynchronize", err);
    pthread_mutex_unlock(t.lock);
    if (refused != ACC_OK) {
        return refused;
    }
    if (lz_host_sync_usable(t.driver)) {
        ze_result_t r = lz_fn.zeCommandListHostSynchronize(t.list, UINT64_MAX);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeCommandListHostSynchronize", r, t.driver);
        }
        return ACC_OK;
    }
    /* A fresh marker, not the tail: work appended by others counts. */
    lz_slot *mark;
    acc_status status = lz_mark(&t, &mark, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = lz_host_wait(mark, UINT64_MAX);
    lz_unwait_retire(mark);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventHostSynchronize", r, t.driver);
    }
    return ACC_OK;
}

acc_status
lz_stream_query(acc_stream *s, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = lz_query_target(t, err);
    lz_target_done(&t);
    return status;
}

acc_status
lz_stream_synchronize(acc_stream *s, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = lz_synchronize_target(t, err);
    lz_target_done(&t);
    /* Graphs dropped while their replays ran may go now. */
    lz_graphs_reap();
    return status;
}

typedef struct lz_sync_item {
    lz_stream *st;
    lz_slot *mark;         /* NULL: use zeCommandListHostSynchronize */
    int graveyard;
} lz_sync_item;

acc_status
lz_device_synchronize(int device, acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    int d = dev->driver;
    int host_sync = lz_host_sync_usable(d);
    acc_status status = ACC_OK;

    /* Mark the end of every list of the device, pinning the streams so
     * that they outlive the wait even if destroyed meanwhile. */
    pthread_mutex_lock(&lz.reg_lock);
    lz_reap_graveyard_locked(dev);
    size_t n = 0;
    for (lz_stream *st = dev->streams; st != NULL; st = st->next) {
        n++;
    }
    for (lz_stream *st = dev->graveyard; st != NULL; st = st->next) {
        n++;
    }
    lz_sync_item *items = calloc(n ? n : 1, sizeof(*items));
    if (items == NULL) {
        pthread_mutex_unlock(&lz.reg_lock);
        return lz_no_memory(err);
    }
    size_t k = 0;
    for (lz_stream *st = dev->streams; st != NULL && status == ACC_OK;
         st = st->next) {
        /* As cuCtxSynchronize: refused while a capture that is not
         * relaxed runs on the device. */
        pthread_mutex_lock(&st->lock);
        status = lz_capture_refuse_sync_locked(st, err);
        pthread_mutex_unlock(&st->lock);
        if (status != ACC_OK) {
            break;
        }
        lz_sync_item *it = &items[k];
        it->st = st;
        if (!host_sync) {
            lz_target t = lz_target_of_stream(st);
            status = lz_mark(&t, &it->mark, err);
            if (status != ACC_OK) {
                break;
            }
        }
        st->pins++;
        k++;
    }
    for (lz_stream *st = dev->graveyard; st != NULL && status == ACC_OK;
         st = st->next) {
        if (st->grave_marker == NULL) {
            continue;
        }
        lz_sync_item *it = &items[k++];
        it->st = st;
        it->mark = st->grave_marker;
        it->graveyard = 1;
        pthread_mutex_lock(&lz.lock);
        it->mark->waiters++;
        pthread_mutex_unlock(&lz.lock);
        st->pins++;
    }
    pthread_mutex_unlock(&lz.reg_lock);

    for (size_t i = 0; i < k && status == ACC_OK; i++) {
        lz_sync_item *it = &items[i];
        ze_result_t r;
        if (it->mark != NULL) {
            r = lz_host_wait(it->mark, UINT64_MAX);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeEventHostSynchronize", r, d);
            }
        }
        else {
            r = lz_fn.zeCommandListHostSynchronize(it->st->list, UINT64_MAX);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeCommandListHostSynchronize", r, d);
            }
        }
    }

    pthread_mutex_lock(&lz.reg_lock);
    for (size_t i = 0; i < k; i++) {
        lz_sync_item *it = &items[i];
        if (it->mark != NULL) {
            pthread_mutex_lock(&lz.lock);
            it->mark->waiters--;
            if (!it->graveyard) {
                lz_retire_locked(it->mark);
            }
            pthread_mutex_unlock(&lz.lock);
        }
        it->st->pins--;
    }
    lz_reap_graveyard_locked(dev);
    pthread_mutex_unlock(&lz.reg_lock);
    free(items);
    lz_graphs_reap();
    return status;
}
