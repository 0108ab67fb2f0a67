/*
 * slot_status.c - the status a backend's slot returned, checked against
 * the contract (backend.h: a failing slot returns its status and fills
 * the error record), so that a backend which breaks it is reported as
 * failing, in words, and never as a status the Python layer cannot map.
 *
 * Plain C, no Python objects.
 */
#include "core.h"

#include <stddef.h>

static const char *const status_names[] = {
    [ACC_OK] = "ACC_OK",
    [ACC_NOT_READY] = "ACC_NOT_READY",
    [ACC_ERR_NO_ACCELERATOR] = "ACC_ERR_NO_ACCELERATOR",
    [ACC_ERR_INVALID_ARGUMENT] = "ACC_ERR_INVALID_ARGUMENT",
    [ACC_ERR_DEVICE_INDEX] = "ACC_ERR_DEVICE_INDEX",
    [ACC_ERR_UNSUPPORTED] = "ACC_ERR_UNSUPPORTED",
    [ACC_ERR_DRIVER] = "ACC_ERR_DRIVER",
    [ACC_ERR_OUT_OF_MEMORY] = "ACC_ERR_OUT_OF_MEMORY",
    [ACC_ERR_HOST_MEMORY] = "ACC_ERR_HOST_MEMORY",
    [ACC_ERR_STATE] = "ACC_ERR_STATE",
    [ACC_ERR_FORKED] = "ACC_ERR_FORKED",
    [ACC_ERR_BUILD] = "ACC_ERR_BUILD",
    [ACC_ERR_NOT_FOUND] = "ACC_ERR_NOT_FOUND",
};
#define N_STATUS (sizeof(status_names) / sizeof(status_names[0]))

const char *
acc_status_name(acc_status st)
{
    unsigned i = (unsigned)st;

    return i < N_STATUS ? status_names[i] : NULL;
}

static int
unwritten(const acc_error *err)
{
    return ((unsigned)err->status & ACC_SLOT_MARK_MASK) == ACC_SLOT_UNWRITTEN;
}

/* A status that reports a failure: not ACC_OK, ACC_NOT_READY or a value
 * that is no acc_status. */
static int
is_failure(acc_status st)
{
    return st != ACC_OK && st != ACC_NOT_READY && acc_status_name(st) != NULL;
}

__attribute__((cold, noinline)) static acc_status
broken(const acc_backend *b, const char *slot, int query, acc_error *err,
       acc_status st)
{
    const char *name = acc_status_name(st);

    if (!unwritten(err) && is_failure(err->status) && err->message[0]) {
        /* The record says the failure (its status picks the exception: a
         * driver's out-of-memory code, say); the status returned only
         * needs to be one. */
        return is_failure(st) ? st : err->status;
    }
    if (name == NULL) {
        acc_error_set(err, ACC_ERR_DRIVER, "backend %s's %s returned "
                      "status %d, which is no acc_status", b->name, slot,
                      (int)st);
        return ACC_ERR_DRIVER;
    }
    if (st == ACC_NOT_READY && !query) {
        acc_error_set(err, ACC_ERR_DRIVER, "backend %s's %s returned "
                      "status %d (%s), which is not a failure: only a "
                      "query answers it", b->name, slot, (int)st, name);
        return ACC_ERR_DRIVER;
    }
    if (unwritten(err) || err->message[0] == '\0') {
        /* No record: what err held is the caller's, not this failure's. */
        acc_error_set(err, st, "backend %s's %s returned %s (%d) without "
                      "an error record", b->name, slot, name, (int)st);
        return st;
    }
    err->status = st;   /* a message, under a status that is no failure */
    return st;
}

acc_status
acc_slot_status(const acc_backend *b, const char *slot, int query,
                acc_error *err, acc_status st)
{
    if (st == ACC_OK || (st == ACC_NOT_READY && query)) {
        if (unwritten(err)) {
            err->status = (acc_status)((unsigned)err->status & 0xffffu);
        }
        return st;
    }
    if (st == err->status && is_failure(st)) {
        return st;
    }
    return broken(b, slot, query, err, st);
}
