/*
 * bridge.c - waits on an event of another Level Zero driver: events
 * cannot cross contexts, so the stream waits for a slot of its own
 * driver that the host signals once the event has.
 */
#include "lz.h"

#include <time.h>

/*
 * The bridge: a thread that runs while waits across drivers are pending.
 * For each it signals the stream driver's slot from the host once the
 * other driver's event has signaled, and exits when none is left.  It
 * blocks on the oldest event for at most LZ_BRIDGE_WAIT_NS at a time:
 * when that event signals it bridges the run of completed ones behind it,
 * when the wait times out it looks at all of them, so a later event that
 * completes first is bridged that much later at most.  An event that
 * fails (device lost) is bridged too: the waiting stream must not hang
 * on it.  A failing zeEventHostSignal is retried.  The signalling itself
 * is slots.c's (lz_pump_bridges_locked): reclaiming slots moves the
 * bridges on too, as it resolves links.
 */
static void *
lz_bridge_main(void *arg)
{
    (void)arg;
    int full = 1;          /* look at every bridge, not just the oldest */
    pthread_mutex_lock(&lz.lock);
    while (!lz.bridge_stop && (lz.nbridges > 0 || lz.bridge_coming > 0)) {
        int stalled = lz_pump_bridges_locked(full);
        if (lz.nbridges == 0 && lz.bridge_coming == 0) {
            break;
        }
        if (stalled || lz.nbridges == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (long)LZ_BRIDGE_WAIT_NS;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&lz.bridge_cv, &lz.lock, &ts);
            full = 1;
            continue;
        }
        lz_slot *oldest = lz.bridges[0].from;
        oldest->waiters++;
        pthread_mutex_unlock(&lz.lock);
        /* Signaled: the ones behind it are likely done too; timed out:
         * look at all of them, one may have completed out of turn. */
        full = lz_host_wait(oldest, LZ_BRIDGE_WAIT_NS) != ZE_RESULT_SUCCESS;
        pthread_mutex_lock(&lz.lock);
        oldest->waiters--;
    }
    lz.bridge_running = 0;
    pthread_cond_broadcast(&lz.bridge_cv);
    pthread_mutex_unlock(&lz.lock);
    return NULL;
}

/* Make t wait for `slot` (counted as waited on by the caller) of another
 * driver: t waits for a slot of its own driver that the bridge thread
 * signals from the host.  Never blocks. */
acc_status
lz_wait_across(lz_target t, lz_slot *slot, acc_error *err)
{
    lz_slot *to = NULL, *done = NULL;
    int coming = 0, link_reserved = 0, bridge_reserved = 0;
    acc_status status;
    pthread_mutex_lock(t.lock);
    pthread_mutex_lock(&lz.lock);
    status = lz_reserve_link_locked(t.driver, err);
    link_reserved = status == ACC_OK;
    if (status == ACC_OK
        && lz.nbridges + lz.reserved_bridges == lz.capbridges) {
        size_t cap = lz.capbridges ? 2 * lz.capbridges : 8;
        lz_bridge *bridges = realloc(lz.bridges, cap * sizeof(*bridges));
        if (bridges == NULL) {
            status = lz_no_memory(err);
        }
        else {
            lz.bridges = bridges;
            lz.capbridges = cap;
        }
    }
    if (status == ACC_OK) {
        /* Another thread may add a bridge while lz.lock is dropped
         * below: the place is ours from here. */
        lz.reserved_bridges++;
        bridge_reserved = 1;
    }
    if (status == ACC_OK) {
        status = lz_acquire_locked(t.driver, 0, &to, err);
    }
    if (status == ACC_OK) {
        status = lz_acquire_locked(t.driver, 0, &done, err);
    }
    if (status == ACC_OK && !lz.bridge_running) {
        if (lz_start_thread(lz_bridge_main) == 0) {
            lz.bridge_running = 1;
        }
        else {
            acc_error_set(err, ACC_ERR_HOST_MEMORY, "cannot start the %s "
                          "backend's thread for waits across drivers",
                          LZ_BACKEND);
            status = ACC_ERR_HOST_MEMORY;
        }
    }
    if (status == ACC_OK) {
        /* The thread stays until this bridge is added or given up. */
        lz.bridge_coming++;
        coming = 1;
        /* to counts as armed: only the host signals it, and it must be
         * reset before reuse. */
        to->armed = 1;
    }
    pthread_mutex_unlock(&lz.lock);
    if (status == ACC_OK) {
        status = lz_append_barrier_locked(&t, done, to, err);
    }
    pthread_mutex_lock(&lz.lock);
    if (coming) {
        lz.bridge_coming--;
        pthread_cond_broadcast(&lz.bridge_cv);
    }
    if (bridge_reserved) {
        lz.reserved_bridges--;
    }
    if (status == ACC_OK) {
        to->waiters++;
        lz_link_reserved_locked(t.driver, &(lz_link){to, done});
        lz.bridges[lz.nbridges++] = (lz_bridge){slot, to};
        pthread_cond_broadcast(&lz.bridge_cv);
    }
    else {
        if (link_reserved) {
            lz_link_reserved_locked(t.driver, NULL);
        }
        slot->waiters--;
        if (to != NULL) {
            to->armed = 0;
            lz_retire_locked(to);
        }
        if (done != NULL) {
            lz_retire_locked(done);
        }
    }
    pthread_mutex_unlock(&lz.lock);
    pthread_mutex_unlock(t.lock);
    return status;
}
