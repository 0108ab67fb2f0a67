/*
 * slot_status.h - what a backend's slot returned, checked (slot_status.c),
 * for built-in backends and plugins alike: the core calls every slot that
 * reports an error through ACC_SLOT (or ACC_QUERY_SLOT, for a slot that
 * may answer ACC_NOT_READY), so that a slot which fails without filling
 * its error record, with a record of another status, or with a status
 * that is no acc_status still reaches users as a worded error.
 */
#ifndef ACCEL_SLOT_STATUS_H
#define ACCEL_SLOT_STATUS_H

#include <accelerator/backend.h>

/* ACC_OK's "ACC_OK" and so on; NULL for what is no acc_status. */
const char *acc_status_name(acc_status st);

/* Before a slot may fill err: its status is marked unwritten, the mark
 * keeping the status err had (a success leaves err as it was: a caller
 * may hold an earlier error in it). */
#define ACC_SLOT_UNWRITTEN 0x41430000u
#define ACC_SLOT_MARK_MASK 0xffff0000u

static inline void
acc_slot_begin(acc_error *err)
{
    err->status = (acc_status)(ACC_SLOT_UNWRITTEN
                               | ((unsigned)err->status & 0xffffu));
}

/* st, the status slot `slot` of b returned, once err agrees with it:
 * ACC_OK (and ACC_NOT_READY when query) as it is, err's status restored;
 * a failure with err's status set to it, worded by the core when the slot
 * left no record; anything else ACC_ERR_DRIVER, worded. */
acc_status acc_slot_status(const acc_backend *b, const char *slot,
                           int query, acc_error *err, acc_status st);

/* b->slot(...), whose last argument is err. */
#define ACC_SLOT(b, slot, err, ...)                                       \
    acc_slot_status((b), #slot, 0, (err),                                 \
                    (acc_slot_begin(err), (b)->slot(__VA_ARGS__)))
#define ACC_QUERY_SLOT(b, slot, err, ...)                                 \
    acc_slot_status((b), #slot, 1, (err),                                 \
                    (acc_slot_begin(err), (b)->slot(__VA_ARGS__)))

#endif /* ACCEL_SLOT_STATUS_H */
