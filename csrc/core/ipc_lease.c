/*
 * ipc_lease.c - leases: how a process that shared memory or an event
 * learns that no other process holds it any more, even one killed with
 * SIGKILL.
 *
 * A process that shares keeps one lease file: a memfd of slots, one per
 * shared allocation or event.  A slot holds its state (free, live, being
 * released), a generation (bumped each time it is freed, so a stale
 * handle is told apart from a live one) and the number of handles made
 * and not yet opened (pending: a handle in a pipe holds the memory as a
 * consumer does).  A consumer opens the file itself through
 * /proc/<pid>/fd/<n> (its own open file description) and takes an open
 * file description lock (F_OFD_SETLK, read) on the slot's byte: the
 * kernel drops that lock when the consumer closes the file, exits or is
 * killed, with nothing left to clean up.
 *
 * The producer asks whether a slot is held (F_OFD_GETLK) in three steps
 * that a consumer taking the slot at the same time cannot slip between:
 * it marks the slot releasing, looks for a lock or a pending handle,
 * then marks it live again or frees it (generation + 1).  A consumer
 * locks first and reads the slot after: it sees either the producer's
 * verdict or "releasing", and then waits for the verdict.
 */
#define _GNU_SOURCE
#include "ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LEASE_SLOTS 65536u

enum { SLOT_FREE = 0, SLOT_LIVE = 1, SLOT_RELEASING = 2 };

typedef struct lease_slot {
    _Atomic uint32_t state;
    _Atomic int32_t pending;
    _Atomic uint64_t generation;
} lease_slot;

#define LEASE_BYTES ((size_t)LEASE_SLOTS * sizeof(lease_slot))

/* A consumer's view of one producer's lease file. */
typedef struct lease_conn {
    struct lease_conn *next;
    int pid;
    unsigned long long start;
    unsigned long long inode;
    int fd;                 /* this process's own open file description */
    lease_slot *slots;
    int refs;               /* leases taken through it */
} lease_conn;

struct acc_lease {
    struct acc_lease *next;
    lease_conn *conn;
    uint32_t slot;
    uint64_t generation;
    int refs;
};

static struct {
    pthread_mutex_t lock;
    /* The producer's file. */
    int fd;
    unsigned long long inode;
    lease_slot *slots;
    uint32_t high;          /* slots handed out so far */
    uint32_t *free_slots;   /* freed slots, reused first */
    uint32_t n_free;
    /* The consumer's side. */
    lease_conn *conns;
    acc_lease *leases;
} L = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1,
};

void
acc_lease_after_fork_child(void)
{
    /* The child holds the parent's descriptions (closed at exec: all are
     * O_CLOEXEC) but shares nothing of its own. */
    pthread_mutex_init(&L.lock, NULL);
    L.fd = -1;
    L.slots = NULL;
    L.high = 0;
    L.n_free = 0;
    L.conns = NULL;
    L.leases = NULL;
}

static acc_status
os_error(acc_error *err, const char *what)
{
    acc_error_set(err, ACC_ERR_STATE, "%s: %s", what, strerror(errno));
    return ACC_ERR_STATE;
}

/* Under L.lock: the producer's lease file, made at the first share. */
static acc_status
producer_file(acc_error *err)
{
    struct stat sb;
    void *map;
    int fd;

    if (L.fd >= 0) {
        return ACC_OK;
    }
    fd = memfd_create("accelerator-ipc-leases", MFD_CLOEXEC);
    if (fd < 0) {
        return os_error(err, "cannot make the lease file of shared memory "
                        "(memfd_create)");
    }
    if (ftruncate(fd, (off_t)LEASE_BYTES) != 0 || fstat(fd, &sb) != 0) {
        close(fd);
        return os_error(err, "cannot size the lease file of shared memory");
    }
    map = mmap(NULL, LEASE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
               0);
    if (map == MAP_FAILED) {
        close(fd);
        return os_error(err, "cannot map the lease file of shared memory");
    }
    L.free_slots = malloc(LEASE_SLOTS * sizeof(uint32_t));
    if (L.free_slots == NULL) {
        munmap(map, LEASE_BYTES);
        close(fd);
        return acc_error_host_memory(err);
    }
    L.fd = fd;
    L.inode = (unsigned long long)sb.st_ino;
    L.slots = map;
    return ACC_OK;
}

acc_status
acc_lease_slot_new(acc_lease_ref *out, acc_error *err)
{
    acc_status st;
    uint32_t slot;

    pthread_mutex_lock(&L.lock);
    st = producer_file(err);
    if (st == ACC_OK) {
        if (L.n_free > 0) {
            slot = L.free_slots[--L.n_free];
        }
        else if (L.high < LEASE_SLOTS) {
            slot = L.high++;
        }
        else {
            acc_error_set(err, ACC_ERR_STATE,
                          "this process shares %u allocations and events "
                          "with other processes already, the most it can; "
                          "let some go (accelerator.ipc_collect() frees "
                          "those no process holds)", LEASE_SLOTS);
            st = ACC_ERR_STATE;
        }
    }
    if (st == ACC_OK) {
        lease_slot *s = &L.slots[slot];

        atomic_store(&s->pending, 0);
        atomic_store(&s->state, SLOT_LIVE);
        out->fd = L.fd;
        out->inode = L.inode;
        out->slot = slot;
        out->generation = atomic_load(&s->generation);
    }
    pthread_mutex_unlock(&L.lock);
    return st;
}

void
acc_lease_pend(uint32_t slot)
{
    atomic_fetch_add(&L.slots[slot].pending, 1);
}

/* Whether a lock is held on slot's byte by another open file
 * description (-1: cannot tell; then it counts as held). */
static int
slot_locked(int fd, uint32_t slot)
{
    struct flock fl = {
        .l_type = F_WRLCK,
        .l_whence = SEEK_SET,
        .l_start = (off_t)slot,
        .l_len = 1,
        .l_pid = 0,
    };

    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
        return -1;
    }
    return fl.l_type != F_UNLCK;
}

int
acc_lease_slot_release(uint32_t slot)
{
    lease_slot *s;
    int freed = 0;

    pthread_mutex_lock(&L.lock);
    s = &L.slots[slot];
    atomic_store(&s->state, SLOT_RELEASING);
    if (atomic_load(&s->pending) > 0 || slot_locked(L.fd, slot) != 0) {
        atomic_store(&s->state, SLOT_LIVE);
    }
    else {
        atomic_fetch_add(&s->generation, 1);
        atomic_store(&s->state, SLOT_FREE);
        L.free_slots[L.n_free++] = slot;
        freed = 1;
    }
    pthread_mutex_unlock(&L.lock);
    return freed;
}

int
acc_lease_slot_pending(uint32_t slot)
{
    return (int)atomic_load(&L.slots[slot].pending);
}

/* Consumer side ---------------------------------------------------------- */

/* Under L.lock: this process's view of the producer's lease file. */
static acc_status
connect(const acc_ipc_origin *o, lease_conn **out, acc_error *err)
{
    char path[64];
    struct stat sb;
    lease_conn *c;
    void *map;
    int fd;

    for (c = L.conns; c != NULL; c = c->next) {
        if (c->pid == o->pid && c->start == o->start
            && c->inode == o->lease.inode) {
            *out = c;
            return ACC_OK;
        }
    }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", o->pid, o->lease.fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            acc_error_set(err, ACC_ERR_STATE,
                          "the process that shared this (pid %d) has "
                          "exited, or let go of what it shared", o->pid);
        }
        else {
            acc_error_set(err, ACC_ERR_STATE,
                          "cannot reach the sharing process's leases "
                          "(%s: %s): the consumer must run as the same "
                          "user as the producer", path, strerror(errno));
        }
        return ACC_ERR_STATE;
    }
    if (fstat(fd, &sb) != 0 || (unsigned long long)sb.st_ino != o->lease.inode
        || (size_t)sb.st_size < LEASE_BYTES) {
        close(fd);
        acc_error_set(err, ACC_ERR_STATE,
                      "the process that shared this (pid %d) has exited: "
                      "its lease file is gone", o->pid);
        return ACC_ERR_STATE;
    }
    map = mmap(NULL, LEASE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
               0);
    c = map == MAP_FAILED ? NULL : calloc(1, sizeof(*c));
    if (c == NULL) {
        if (map != MAP_FAILED) {
            munmap(map, LEASE_BYTES);
        }
        close(fd);
        return acc_error_host_memory(err);
    }
    c->pid = o->pid;
    c->start = o->start;
    c->inode = o->lease.inode;
    c->fd = fd;
    c->slots = map;
    c->next = L.conns;
    L.conns = c;
    *out = c;
    return ACC_OK;
}

/* Under L.lock: drop a connection no lease uses. */
static void
disconnect(lease_conn *c)
{
    if (c->refs > 0) {
        return;
    }
    for (lease_conn **p = &L.conns; *p != NULL; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    munmap(c->slots, LEASE_BYTES);
    close(c->fd);   /* drops every lock this description holds */
    free(c);
}

static int
lock_slot(int fd, uint32_t slot, short type)
{
    struct flock fl = {
        .l_type = type,
        .l_whence = SEEK_SET,
        .l_start = (off_t)slot,
        .l_len = 1,
        .l_pid = 0,
    };

    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Spend one pending handle of s (never below zero: a handle opened
 * twice, or one of another process, spends none). */
static void
spend(lease_slot *s)
{
    int32_t n = atomic_load(&s->pending);

    while (n > 0 && !atomic_compare_exchange_weak(&s->pending, &n, n - 1)) {
    }
}

acc_status
acc_lease_take(const acc_ipc_origin *o, acc_lease **out, acc_error *err)
{
    lease_conn *c = NULL;
    acc_lease *l;
    lease_slot *s;
    acc_status st;
    uint32_t state;

    if (o->lease.slot >= LEASE_SLOTS) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the handle's lease slot %u is out of range",
                      o->lease.slot);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&L.lock);
    st = connect(o, &c, err);
    if (st != ACC_OK) {
        pthread_mutex_unlock(&L.lock);
        return st;
    }
    s = &c->slots[o->lease.slot];
    for (l = L.leases; l != NULL; l = l->next) {
        if (l->conn == c && l->slot == o->lease.slot
            && l->generation == o->lease.generation) {
            break;
        }
    }
    if (l == NULL) {
        l = calloc(1, sizeof(*l));
        if (l == NULL) {
            disconnect(c);
            pthread_mutex_unlock(&L.lock);
            return acc_error_host_memory(err);
        }
        if (lock_slot(c->fd, o->lease.slot, F_RDLCK) != 0) {
            free(l);
            disconnect(c);
            pthread_mutex_unlock(&L.lock);
            return os_error(err, "cannot take the lease of shared memory "
                            "(F_OFD_SETLK)");
        }
        /* Locked: the producer now sees us, or has already decided. */
        for (int spins = 0;
             (state = atomic_load(&s->state)) == SLOT_RELEASING
             && spins < 100000; spins++) {
            struct timespec pause = {0, 10000};

            nanosleep(&pause, NULL);
        }
        if (state != SLOT_LIVE
            || atomic_load(&s->generation) != o->lease.generation) {
            (void)lock_slot(c->fd, o->lease.slot, F_UNLCK);
            free(l);
            disconnect(c);
            pthread_mutex_unlock(&L.lock);
            acc_error_set(err, ACC_ERR_STATE,
                          "the process that shared this (pid %d) has "
                          "released it: its memory or event may be reused "
                          "(a handle is good while the producer keeps "
                          "what it shared, or a consumer holds it open)",
                          o->pid);
            return ACC_ERR_STATE;
        }
        l->conn = c;
        l->slot = o->lease.slot;
        l->generation = o->lease.generation;
        l->next = L.leases;
        L.leases = l;
        c->refs++;
    }
    l->refs++;
    pthread_mutex_unlock(&L.lock);
    *out = l;
    return ACC_OK;
}

void
acc_lease_spend(acc_lease *l)
{
    pthread_mutex_lock(&L.lock);
    spend(&l->conn->slots[l->slot]);
    pthread_mutex_unlock(&L.lock);
}

void
acc_lease_drop(acc_lease *l)
{
    lease_conn *c;

    if (l == NULL) {
        return;
    }
    pthread_mutex_lock(&L.lock);
    if (--l->refs == 0) {
        c = l->conn;
        (void)lock_slot(c->fd, l->slot, F_UNLCK);
        for (acc_lease **p = &L.leases; *p != NULL; p = &(*p)->next) {
            if (*p == l) {
                *p = l->next;
                break;
            }
        }
        free(l);
        c->refs--;
        disconnect(c);
    }
    pthread_mutex_unlock(&L.lock);
}
