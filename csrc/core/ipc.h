/*
 * ipc.h - what ipc.c (handles: their envelope, exports, imports, the
 * limbo of what was shared) and ipc_lease.c (leases across processes)
 * share.  The interface the Python layer uses is in accel.h.
 */
#ifndef ACCEL_IPC_H
#define ACCEL_IPC_H

#include <stdint.h>

#include "core.h"

/* A slot of the producer's lease file, as a handle names it. */
typedef struct acc_lease_ref {
    int fd;                      /* the lease file, in the producer */
    unsigned long long inode;
    uint32_t slot;
    uint64_t generation;
} acc_lease_ref;

/* Who shared a handle: the process (its start time tells a reused pid)
 * and its lease. */
typedef struct acc_ipc_origin {
    int pid;
    unsigned long long start;
    acc_lease_ref lease;
} acc_ipc_origin;

/* Producer: a live slot for a new share (the lease file is made at the
 * first); mark a handle made (pending until a consumer opens it); ask
 * whether the slot may go: 1 when no consumer holds it and no handle is
 * pending (then it is freed), 0 when it stays. */
acc_status acc_lease_slot_new(acc_lease_ref *out, acc_error *err);
void acc_lease_pend(uint32_t slot);
int acc_lease_slot_release(uint32_t slot);
int acc_lease_slot_pending(uint32_t slot);

/* Consumer: hold the slot a handle names (once per slot per process,
 * counted); the error says why not (the producer exited, or released
 * it).  spend counts the handle as opened (one pending handle less),
 * once its open has succeeded: a failed open leaves the handle pending,
 * and the memory held for it.  drop undoes one take. */
typedef struct acc_lease acc_lease;
acc_status acc_lease_take(const acc_ipc_origin *o, acc_lease **out,
                          acc_error *err);
void acc_lease_spend(acc_lease *l);
void acc_lease_drop(acc_lease *l);

void acc_lease_after_fork_child(void);

#endif /* ACCEL_IPC_H */
