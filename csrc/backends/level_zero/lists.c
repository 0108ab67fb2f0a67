/*
 * lists.c - appending to a command list: the list an operation targets
 * (a stream's, or one made elsewhere), the barrier that orders a command
 * on a list that is not in order, the tail that follows what was
 * appended, and markers.  What every file that appends shares.
 */
#include "lz.h"

lz_target
lz_target_of(const acc_stream *s)
{
    lz_target t = {0};
    t.st = s->native;
    t.list = t.st != NULL ? t.st->list
                          : (ze_command_list_handle_t)s->handle;
    t.device = s->device;
    t.driver = lz_driver_of(s->device);
    if (t.st == NULL) {
        /* A wrapped handle may be one of our own lists: then use its
         * stream, so that both objects share one lock and one tail;
         * pinned so that it outlives this call. */
        pthread_mutex_lock(&lz.reg_lock);
        for (lz_stream *st = lz.devices[s->device].streams; st != NULL;
             st = st->next) {
            if (st->list == t.list) {
                t.st = st;
                t.pinned = 1;
                st->pins++;
                break;
            }
        }
        pthread_mutex_unlock(&lz.reg_lock);
    }
    t.lock = t.st != NULL ? &t.st->lock : &lz.foreign_lock;
    return t;
}

lz_target
lz_target_of_stream(lz_stream *st)
{
    lz_target t = {st->list, st, &st->lock, st->device,
                   lz_driver_of(st->device), 0};
    return t;
}

void
lz_target_done(lz_target *t)
{
    if (t->pinned) {
        pthread_mutex_lock(&lz.reg_lock);
        t->st->pins--;
        pthread_mutex_unlock(&lz.reg_lock);
    }
}

int
lz_host_sync_usable(int d)
{
    return lz_fn.zeCommandListHostSynchronize != NULL
           && lz.drivers[d].host_sync;
}

/* Append a barrier on t that waits for `wait` (unless NULL) and signals
 * s, which becomes the tail (t->lock held; s acquired, not yet armed). */
acc_status
lz_append_barrier_locked(lz_target *t, lz_slot *s, lz_slot *wait,
                         acc_error *err)
{
    ze_event_handle_t h = wait != NULL ? wait->event : NULL;
    ze_result_t r = lz_fn.zeCommandListAppendBarrier(
        t->list, s->event, wait != NULL ? 1 : 0, wait != NULL ? &h : NULL);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeCommandListAppendBarrier", r, t->driver);
    }
    pthread_mutex_lock(&lz.lock);
    s->armed = 1;
    lz_set_tail_locked(t->st, s);
    pthread_mutex_unlock(&lz.lock);
    return ACC_OK;
}

/* Append a marker on t and count the caller as its host waiter; the
 * caller retires it (lz_unwait_retire) once done with it. */
acc_status
lz_mark(lz_target *t, lz_slot **out, acc_error *err)
{
    lz_slot *mark = NULL;
    acc_status status = lz_acquire(t->driver, 0, &mark, err);
    if (status != ACC_OK) {
        return status;
    }
    pthread_mutex_lock(t->lock);
    status = lz_append_barrier_locked(t, mark, NULL, err);
    pthread_mutex_unlock(t->lock);
    pthread_mutex_lock(&lz.lock);
    if (status == ACC_OK) {
        mark->waiters++;
    }
    else {
        lz_retire_locked(mark);
        mark = NULL;
    }
    pthread_mutex_unlock(&lz.lock);
    *out = mark;
    return status;
}

/* Lists that are not in order run a command as soon as it is appended:
 * a barrier first makes it follow the earlier work (t->lock held). */
acc_status
lz_order_locked(lz_target *t, acc_error *err)
{
    if (lz.drivers[t->driver].in_order) {
        return ACC_OK;
    }
    ze_result_t r = lz_fn.zeCommandListAppendBarrier(t->list, NULL, 0, NULL);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeCommandListAppendBarrier", r, t->driver);
    }
    return ACC_OK;
}

/* After `done` was passed as the signal event of a command appended on t
 * (t->lock held): it becomes the tail, so query() sees the command.  The
 * caller retires it once t->lock is released; the tail keeps it. */
void
lz_appended_locked(lz_target *t, lz_slot *done)
{
    pthread_mutex_lock(&lz.lock);
    done->armed = 1;
    lz_set_tail_locked(t->st, done);
    pthread_mutex_unlock(&lz.lock);
}
