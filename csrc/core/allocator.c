/*
 * allocator.c - the caching device allocator and torch's statistics.
 *
 * Plain C and backend-agnostic: device memory comes from the selected
 * backend's raw mem_alloc/mem_free slots, work tracking from core streams
 * and events.  The design is torch's CUDACachingAllocator:
 *
 *   - sizes round up to 512 bytes;
 *   - requests up to 1 MiB come from the small pool, carved out of 2 MiB
 *     segments; larger ones from the large pool: 20 MiB segments for
 *     requests under 10 MiB, the request rounded up to 2 MiB otherwise;
 *   - a free block is found best-fit among the free blocks of the same
 *     pool *and allocation stream* (ordered by stream, size, address),
 *     split when the rest is worth keeping, and merged with its free
 *     neighbours when given back;
 *   - a block used on other streams (acc_block_record_stream, keyed by
 *     device and stream handle in the block's books, uses.c) is given
 *     back only once the events of those uses have completed; until then
 *     it is "active" but not "allocated";
 *   - a failed driver allocation (or the per-process cap) releases every
 *     wholly free cached segment and retries once, then reports
 *     out-of-memory with the figures torch gives.
 *
 * Reuse on the allocation stream needs no event: work queued on one
 * stream runs in order.  Memory goes back to the driver only after a
 * device synchronization that started after the memory was freed, as the
 * mem_free contract asks.
 *
 * ACCELERATOR_ALLOCATOR=direct turns caching off: every block is its own
 * driver allocation of exactly the bytes asked for, freed (behind events
 * when work may still use it) when the block is given back.
 *
 * Locking: one mutex per device guards its pools, pending list and
 * statistics.  No driver call is made with it held: allocations, frees,
 * event records and queries and synchronizations happen between a step
 * that takes blocks out of the shared structures and one that puts the
 * results back.
 */
#define _GNU_SOURCE
#include "core.h"

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)
#define MIN_BLOCK_SIZE ((size_t)512) /* every size rounds up to this */
#define SMALL_SIZE MIB               /* largest request of the small pool */
#define SMALL_BUFFER (2 * MIB)       /* small pool segments */
#define LARGE_BUFFER (20 * MIB)      /* segments for requests under 10 MiB */
#define MIN_LARGE_ALLOC (10 * MIB)   /* from here, round to ROUND_LARGE */
#define ROUND_LARGE (2 * MIB)

enum { POOL_SMALL, POOL_LARGE, N_POOLS };

struct acc_block {
    uintptr_t ptr;
    size_t size;             /* bytes the block spans (rounded) */
    size_t requested;        /* bytes asked for */
    int device;
    unsigned char pool;      /* POOL_SMALL or POOL_LARGE */
    unsigned char allocated; /* handed out and not given back */
    unsigned char pending;   /* given back, waiting for events */
    unsigned char needs_sync;/* pending until a device synchronization */
    unsigned char shared;    /* shared with other processes (ipc.c) */
    uintptr_t key;           /* the allocation stream's handle */
    acc_stream *stream;      /* the allocation stream, referenced while
                              * allocated (NULL for an empty block) */
    acc_block *prev, *next;  /* neighbours in the segment */
    acc_block *left, *right; /* free tree (a treap) */
    unsigned priority;
    acc_uses uses;           /* the books: uses on other streams */
    acc_event *events;       /* while pending: the uses' events */
    int n_events;
    acc_block *link;         /* pending list, spare list, local lists */
};

/*
 * The device lock: a futex mutex (Drepper, "Futexes Are Tricky", mutex
 * 2): one atomic exchange to take and one to give when nobody waits, a
 * third of what pthread_mutex_lock/unlock cost on the allocation hot
 * path; waiters sleep in the kernel, never spin.  0 free, 1 taken, 2
 * taken with waiters.
 */
typedef atomic_int device_lock;

static void
lock(device_lock *l)
{
    int c = 0;

    if (atomic_compare_exchange_strong_explicit(l, &c, 1,
                                                memory_order_acquire,
                                                memory_order_relaxed)) {
        return;
    }
    if (c != 2) {
        c = atomic_exchange_explicit(l, 2, memory_order_acquire);
    }
    while (c != 0) {
        syscall(SYS_futex, l, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
        c = atomic_exchange_explicit(l, 2, memory_order_acquire);
    }
}

static void
unlock(device_lock *l)
{
    if (atomic_exchange_explicit(l, 0, memory_order_release) == 2) {
        syscall(SYS_futex, l, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

typedef struct device_state {
    device_lock lock;
    acc_block *free_tree[N_POOLS];
    acc_block *pending;      /* freed, waiting for events */
    atomic_int n_pending;    /* read without the lock on the hot path */
    acc_block *spare;        /* block records kept for reuse */
    int n_spare;
    size_t reserving;        /* bytes being obtained from the driver */
    size_t limit;            /* set_per_process_memory_fraction cap */
    int capped;
    unsigned seed;           /* treap priorities */
    acc_mem_stats stats;
} device_state;

#define SPARE_MAX 64

static struct {
    pthread_once_t once;
    int direct;                     /* ACCELERATOR_ALLOCATOR=direct */
    atomic_int used;                /* something was allocated */
    int forked;                     /* child of a fork: no driver calls */
    atomic_int ready;               /* init_once has run */
    atomic_uintptr_t orphan_key;    /* keys of destroyed streams */
    device_state dev[ACC_MAX_DEVICES];
} A = {
    .once = PTHREAD_ONCE_INIT,
};

/* Statistics ------------------------------------------------------------- */

static void
stat_add(acc_stat *s, long long delta)
{
    if (delta >= 0) {
        s->current += delta;
        s->allocated += delta;
        if (s->current > s->peak) {
            s->peak = s->current;
        }
    }
    else {
        s->current += delta;
        s->freed -= delta;
    }
}

/* Add delta to the "all" entry and to the pool's entry. */
static void
stat_pool(acc_stat *array, int pool, long long delta)
{
    stat_add(&array[ACC_STAT_ALL], delta);
    stat_add(&array[pool == POOL_SMALL ? ACC_STAT_SMALL_POOL
                                       : ACC_STAT_LARGE_POOL], delta);
}

/* Lifetime --------------------------------------------------------------- */

static void
lock_all(void)
{
    for (int i = 0; i < ACC_MAX_DEVICES; i++) {
        lock(&A.dev[i].lock);
    }
}

static void
unlock_all(void)
{
    for (int i = ACC_MAX_DEVICES - 1; i >= 0; i--) {
        unlock(&A.dev[i].lock);
    }
}

static void
after_fork_in_child(void)
{
    /* After the parent allocated, the driver cannot be used here: blocks
     * inherited from the parent are never touched again (their memory
     * belongs to the parent).  A child of a parent that allocated nothing
     * may initialise the driver itself and start afresh. */
    A.forked = atomic_load_explicit(&A.used, memory_order_relaxed);
    for (int i = 0; i < ACC_MAX_DEVICES; i++) {
        atomic_store_explicit(&A.dev[i].lock, 0, memory_order_relaxed);
    }
}

static void
init_once(void)
{
    const char *mode = getenv("ACCELERATOR_ALLOCATOR");

    A.direct = (mode != NULL && strcmp(mode, "direct") == 0)
               || (acc_backend_caps() & ACC_CAP_MEMORY_HANDLES) != 0;
    atomic_init(&A.orphan_key, UINTPTR_MAX);
    for (int i = 0; i < ACC_MAX_DEVICES; i++) {
        A.dev[i].seed = 2463534242u + (unsigned)i;
    }
    /* Hold every lock across fork so that the child never inherits one
     * taken by a thread that does not exist there. */
    pthread_atfork(lock_all, unlock_all, after_fork_in_child);
    acc_trace("allocator: %s", A.direct ? "direct (no caching)" : "caching");
    atomic_store(&A.ready, 1);
}

static void
ensure_init(void)
{
    pthread_once(&A.once, init_once);
}

/* Block records ---------------------------------------------------------- */

static acc_block *
block_new(device_state *d)
{
    acc_block *b = d->spare;

    if (b != NULL) {
        d->spare = b->link;
        d->n_spare--;
        memset(b, 0, sizeof(*b));
    }
    else {
        b = calloc(1, sizeof(*b));
    }
    if (b != NULL) {
        acc_uses_init(&b->uses);
    }
    return b;
}

/* Keep a record for reuse (under the lock); uses/events already freed. */
static void
block_drop(device_state *d, acc_block *b)
{
    if (d->n_spare < SPARE_MAX) {
        b->link = d->spare;
        d->spare = b;
        d->n_spare++;
        return;
    }
    free(b);
}

/* Free tree: a treap ordered by (stream key, size, address) -------------- */

static int
before(const acc_block *a, uintptr_t key, size_t size, uintptr_t ptr)
{
    if (a->key != key) {
        return a->key < key;
    }
    if (a->size != size) {
        return a->size < size;
    }
    return a->ptr < ptr;
}

/* Split t into the nodes before n (*l) and the others (*r). */
static void
treap_split(acc_block *t, const acc_block *n, acc_block **l, acc_block **r)
{
    while (t != NULL) {
        if (before(t, n->key, n->size, n->ptr)) {
            *l = t;
            l = &t->right;
            t = t->right;
        }
        else {
            *r = t;
            r = &t->left;
            t = t->left;
        }
    }
    *l = NULL;
    *r = NULL;
}

static acc_block *
treap_merge(acc_block *l, acc_block *r)
{
    acc_block *root = NULL, **link = &root;

    while (l != NULL && r != NULL) {
        if (l->priority > r->priority) {
            *link = l;
            link = &l->right;
            l = l->right;
        }
        else {
            *link = r;
            link = &r->left;
            r = r->left;
        }
    }
    *link = l != NULL ? l : r;
    return root;
}

static void
tree_insert(device_state *d, acc_block *b)
{
    acc_block **link = &d->free_tree[b->pool];

    d->seed ^= d->seed << 13;
    d->seed ^= d->seed >> 17;
    d->seed ^= d->seed << 5;
    b->priority = d->seed;
    while (*link != NULL && (*link)->priority >= b->priority) {
        link = before(b, (*link)->key, (*link)->size, (*link)->ptr)
                   ? &(*link)->left : &(*link)->right;
    }
    treap_split(*link, b, &b->left, &b->right);
    *link = b;
}

static void
tree_erase(device_state *d, acc_block *b)
{
    acc_block **link = &d->free_tree[b->pool];

    while (*link != b) {
        link = before(b, (*link)->key, (*link)->size, (*link)->ptr)
                   ? &(*link)->left : &(*link)->right;
    }
    *link = treap_merge(b->left, b->right);
    b->left = b->right = NULL;
}

/* The first free block at or after (key, size, 0). */
static acc_block *
tree_lower_bound(acc_block *t, uintptr_t key, size_t size)
{
    acc_block *best = NULL;

    while (t != NULL) {
        if (before(t, key, size, 0)) {
            t = t->right;
        }
        else {
            best = t;
            t = t->left;
        }
    }
    return best;
}

static int
in_tree(const acc_block *b)
{
    return !b->allocated && !b->pending;
}

/* Put a block that must wait (events, a synchronization, a retried
 * driver free) on the pending list. */
static void
push_pending(device_state *d, acc_block *b)
{
    b->pending = 1;
    b->link = d->pending;
    d->pending = b;
    atomic_fetch_add_explicit(&d->n_pending, 1, memory_order_relaxed);
}

/* Sizes ------------------------------------------------------------------ */

static size_t
round_size(size_t nbytes)
{
    if (nbytes < MIN_BLOCK_SIZE) {
        return MIN_BLOCK_SIZE;
    }
    return (nbytes + MIN_BLOCK_SIZE - 1) / MIN_BLOCK_SIZE * MIN_BLOCK_SIZE;
}

static size_t
segment_size(size_t size)
{
    if (size <= SMALL_SIZE) {
        return SMALL_BUFFER;
    }
    if (size < MIN_LARGE_ALLOC) {
        return LARGE_BUFFER;
    }
    return (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

static int
should_split(int pool, size_t remaining)
{
    if (pool == POOL_SMALL) {
        return remaining >= MIN_BLOCK_SIZE;
    }
    return remaining > SMALL_SIZE;
}

/* Pool operations (under the device lock) -------------------------------- */

/* Hand out size bytes of b (taken out of the tree, or a new segment).
 * Returns the allocated block, or NULL when no record could be made (b is
 * then back where it was: the caller reinserts it). */
static acc_block *
take_block(device_state *d, acc_block *b, size_t size, size_t requested,
           acc_stream *stream)
{
    int already_split = b->prev != NULL || b->next != NULL;
    acc_mem_stats *st = &d->stats;
    acc_block *rest;

    if (should_split(b->pool, b->size - size)) {
        rest = b;
        b = block_new(d);
        if (b == NULL) {
            return NULL;
        }
        b->ptr = rest->ptr;
        b->size = size;
        b->device = rest->device;
        b->pool = rest->pool;
        b->key = rest->key;
        b->prev = rest->prev;
        if (b->prev != NULL) {
            b->prev->next = b;
        }
        b->next = rest;
        rest->prev = b;
        rest->ptr += size;
        rest->size -= size;
        tree_insert(d, rest);
        if (already_split) {
            /* A free split block shrank by size bytes. */
            stat_pool(st->inactive_split_bytes, b->pool, -(long long)size);
        }
        else {
            /* A new free split block of rest->size bytes. */
            stat_pool(st->inactive_split_bytes, b->pool,
                      (long long)rest->size);
            stat_pool(st->inactive_split, b->pool, 1);
        }
    }
    else if (already_split) {
        /* A free split block becomes active whole. */
        stat_pool(st->inactive_split_bytes, b->pool, -(long long)b->size);
        stat_pool(st->inactive_split, b->pool, -1);
    }
    b->allocated = 1;
    b->requested = requested;
    b->stream = stream;
    stat_pool(st->allocation, b->pool, 1);
    stat_pool(st->allocated_bytes, b->pool, (long long)b->size);
    stat_pool(st->active, b->pool, 1);
    stat_pool(st->active_bytes, b->pool, (long long)b->size);
    stat_pool(st->requested_bytes, b->pool, (long long)requested);
    return b;
}

/* Merge src, a neighbour of b, into b when src is free; returns the
 * bytes merged (0: not merged). */
static size_t
try_merge(device_state *d, acc_block *b, acc_block *src)
{
    size_t size;

    if (src == NULL || !in_tree(src)) {
        return 0;
    }
    tree_erase(d, src);
    if (b->prev == src) {
        b->ptr = src->ptr;
        b->prev = src->prev;
        if (b->prev != NULL) {
            b->prev->next = b;
        }
    }
    else {
        b->next = src->next;
        if (b->next != NULL) {
            b->next->prev = b;
        }
    }
    size = src->size;
    b->size += size;
    block_drop(d, src);
    return size;
}

/* Return an inactive block (no longer allocated, no events) to its pool. */
static void
free_block(device_state *d, acc_block *b)
{
    acc_mem_stats *st = &d->stats;
    size_t original = b->size;
    long long net_blocks = 0, net_bytes = 0;
    acc_block *neighbours[2] = {b->prev, b->next};
    size_t merged;

    b->pending = 0;
    b->needs_sync = 0;
    for (int i = 0; i < 2; i++) {
        merged = try_merge(d, b, neighbours[i]);
        if (merged > 0) {
            net_blocks -= 1;
            net_bytes -= (long long)merged;
        }
    }
    tree_insert(d, b);
    if (b->prev != NULL || b->next != NULL) {
        net_blocks += 1;
        net_bytes += (long long)b->size;
    }
    if (net_blocks != 0) {
        stat_pool(st->inactive_split, b->pool, net_blocks);
    }
    if (net_bytes != 0) {
        stat_pool(st->inactive_split_bytes, b->pool, net_bytes);
    }
    stat_pool(st->active, b->pool, -1);
    stat_pool(st->active_bytes, b->pool, -(long long)original);
    stat_pool(st->requested_bytes, b->pool, -(long long)b->requested);
    b->requested = 0;
}

/* Account a segment obtained from the driver. */
static void
segment_added(device_state *d, int pool, size_t size)
{
    stat_pool(d->stats.segment, pool, 1);
    stat_pool(d->stats.reserved_bytes, pool, (long long)size);
    d->stats.num_device_alloc++;
}

static void
segment_removed(device_state *d, int pool, size_t size)
{
    stat_pool(d->stats.segment, pool, -1);
    stat_pool(d->stats.reserved_bytes, pool, -(long long)size);
    d->stats.num_device_free++;
}

/* Driver side ------------------------------------------------------------ */

static const acc_backend *
backend(void)
{
    return acc_selected_backend();
}

static acc_status
driver_alloc(int device, size_t nbytes, uintptr_t *ptr, acc_error *err)
{
    return ACC_SLOT(backend(), mem_alloc, err, device, nbytes, ptr, err);
}

static acc_status
driver_free(int device, uintptr_t ptr)
{
    acc_error err = {.status = ACC_OK};

    return ACC_SLOT(backend(), mem_free, &err, device, ptr, &err);
}

/* Release what the block holds of events (no lock held). */
static void
release_uses(acc_block *b)
{
    for (int i = 0; i < b->n_events; i++) {
        acc_event_release(&b->events[i]);
    }
    free(b->events);
    b->events = NULL;
    b->n_events = 0;
    acc_uses_clear(&b->uses);
}

/* Nonzero when every event of b has completed (a failing query counts as
 * not yet: a later device synchronization settles it). */
static int
events_done(acc_block *b)
{
    acc_error err;

    if (b->needs_sync) {
        return 0;
    }
    for (int i = 0; i < b->n_events; i++) {
        if (acc_event_query(&b->events[i], &err) != ACC_OK) {
            return 0;
        }
    }
    return 1;
}

/* Give a direct allocation that nothing uses any more back to the driver
 * and account it; on failure it stays reserved and waits on the pending
 * list for the next release. */
static void
direct_release(device_state *d, acc_block *b)
{
    int pool = b->pool;
    size_t size = b->size;

    if (driver_free(b->device, b->ptr) != ACC_OK) {
        lock(&d->lock);
        b->needs_sync = 1;
        push_pending(d, b);
        unlock(&d->lock);
        return;
    }
    lock(&d->lock);
    /* The block was active until now. */
    stat_pool(d->stats.active, pool, -1);
    stat_pool(d->stats.active_bytes, pool, -(long long)size);
    stat_pool(d->stats.requested_bytes, pool, -(long long)b->requested);
    segment_removed(d, pool, size);
    block_drop(d, b);
    unlock(&d->lock);
}

/* Settle the blocks of list whose work is done (all of them when synced):
 * cached blocks go back to their pool, direct ones to the driver.  The
 * others go back on the pending list. */
static void
settle(device_state *d, acc_block *list, int synced)
{
    acc_block *done = NULL, *wait = NULL, *b, *next;

    for (b = list; b != NULL; b = next) {
        next = b->link;
        if (synced || events_done(b)) {
            release_uses(b);
            b->link = done;
            done = b;
        }
        else {
            b->link = wait;
            wait = b;
        }
    }
    lock(&d->lock);
    while (wait != NULL) {
        b = wait;
        wait = b->link;
        push_pending(d, b);
    }
    if (!A.direct) {
        for (b = done; b != NULL; b = next) {
            next = b->link;
            b->link = NULL;
            free_block(d, b);
        }
        done = NULL;
    }
    unlock(&d->lock);
    for (b = done; b != NULL; b = next) {
        next = b->link;
        b->link = NULL;
        b->pending = 0;
        b->needs_sync = 0;
        direct_release(d, b);
    }
}

static acc_block *
take_pending(device_state *d)
{
    acc_block *list;

    lock(&d->lock);
    list = d->pending;
    d->pending = NULL;
    atomic_store_explicit(&d->n_pending, 0, memory_order_relaxed);
    unlock(&d->lock);
    return list;
}

static void
process_pending(device_state *d)
{
    acc_block *list = take_pending(d);

    if (list != NULL) {
        settle(d, list, 0);
    }
}

/* Link every wholly free segment of tree t onto *list (the treap's depth
 * is logarithmic in expectation). */
static void
collect_segments(acc_block *t, acc_block **list)
{
    while (t != NULL) {
        collect_segments(t->left, list);
        if (t->prev == NULL && t->next == NULL) {
            t->link = *list;
            *list = t;
        }
        t = t->right;
    }
}

static acc_status
synchronize(int device, acc_error *err)
{
    acc_status st = acc_synchronize_device(device, err);

    if (st == ACC_OK) {
        lock(&A.dev[device].lock);
        A.dev[device].stats.num_sync_all_streams++;
        unlock(&A.dev[device].lock);
    }
    return st;
}

/* Give every wholly free cached segment of device back to the driver,
 * and settle the pending blocks.  Each step synchronizes the device after
 * taking its blocks, so that work queued before they were freed is done
 * before the driver sees them. */
static acc_status
release_cached(int device, acc_error *err)
{
    device_state *d = &A.dev[device];
    acc_block *list, *b, *next, *segments = NULL;
    acc_status st;

    list = take_pending(d);
    if (list != NULL) {
        st = synchronize(device, err);
        settle(d, list, st == ACC_OK);
        if (st != ACC_OK) {
            return st;
        }
    }
    if (A.direct) {
        return ACC_OK;
    }
    lock(&d->lock);
    for (int pool = 0; pool < N_POOLS; pool++) {
        collect_segments(d->free_tree[pool], &segments);
    }
    /* Erase after collecting: erasing reshapes the tree. */
    for (b = segments; b != NULL; b = b->link) {
        tree_erase(d, b);
        b->pending = 1;   /* out of the tree, not allocated */
    }
    unlock(&d->lock);
    if (segments == NULL) {
        return ACC_OK;
    }
    st = synchronize(device, err);
    if (st != ACC_OK) {
        lock(&d->lock);
        for (b = segments; b != NULL; b = next) {
            next = b->link;
            b->link = NULL;
            b->pending = 0;
            tree_insert(d, b);
        }
        unlock(&d->lock);
        return st;
    }
    for (b = segments; b != NULL; b = next) {
        next = b->link;
        b->link = NULL;
        b->pending = 0;
        if (driver_free(device, b->ptr) == ACC_OK) {
            lock(&d->lock);
            segment_removed(d, b->pool, b->size);
            block_drop(d, b);
            unlock(&d->lock);
        }
        else {
            /* Still reserved: keep it usable. */
            lock(&d->lock);
            tree_insert(d, b);
            unlock(&d->lock);
        }
    }
    return ACC_OK;
}

/* Out of memory ---------------------------------------------------------- */

static void
format_size(char *buf, size_t n, unsigned long long size)
{
    if (size < 1024) {
        snprintf(buf, n, "%llu bytes", size);
    }
    else if (size < 1024ULL * 1024) {
        snprintf(buf, n, "%.2f KiB", size / 1024.0);
    }
    else if (size < 1024ULL * 1024 * 1024) {
        snprintf(buf, n, "%.2f MiB", size / 1048576.0);
    }
    else {
        snprintf(buf, n, "%.2f GiB", size / 1073741824.0);
    }
}

/* Turn err (the driver's failure, or a blank one for the cap) into the
 * out-of-memory error torch raises, with this process's figures. */
static acc_status
out_of_memory(int device, size_t nbytes, int by_cap, acc_error *err)
{
    device_state *d = &A.dev[device];
    const char *type = acc_display_device_type();
    size_t free_bytes = 0, total_bytes = 0;
    char asked[32], free_text[32], total_text[32], cap[64], alloc[32];
    char unused[32], exact[48], driver[200];
    long long reserved, allocated;
    acc_error info_err;
    int have_info;

    have_info = acc_memory_info(device, &free_bytes, &total_bytes,
                                &info_err) == ACC_OK;
    lock(&d->lock);
    d->stats.num_ooms++;
    reserved = d->stats.reserved_bytes[ACC_STAT_ALL].current;
    allocated = d->stats.allocated_bytes[ACC_STAT_ALL].current;
    cap[0] = '\0';
    if (d->capped) {
        char limit[32];

        format_size(limit, sizeof(limit), d->limit);
        snprintf(cap, sizeof(cap), "%s allowed; ", limit);
    }
    unlock(&d->lock);
    format_size(asked, sizeof(asked), nbytes);
    exact[0] = '\0';
    if (nbytes >= 1024) {
        snprintf(exact, sizeof(exact), " (%zu bytes)", nbytes);
    }
    format_size(alloc, sizeof(alloc), (unsigned long long)allocated);
    format_size(unused, sizeof(unused),
                (unsigned long long)(reserved - allocated));
    if (have_info) {
        format_size(free_text, sizeof(free_text), free_bytes);
        format_size(total_text, sizeof(total_text), total_bytes);
    }
    else {
        snprintf(free_text, sizeof(free_text), "an unknown amount");
        snprintf(total_text, sizeof(total_text), "unknown size");
    }
    driver[0] = '\0';
    if (by_cap) {
        acc_error_set(err, ACC_ERR_OUT_OF_MEMORY, "%s", "");
    }
    else {
        snprintf(driver, sizeof(driver), " [%.190s]", err->message);
    }
    err->status = ACC_ERR_OUT_OF_MEMORY;
    acc_format(err->message, sizeof(err->message),
             "%s out of memory. Tried to allocate %s%s. Device %d has a "
             "total capacity of %s of which %s is free. %sOf the memory "
             "this process reserved, %s is allocated and %s is reserved but "
             "unallocated.%s%s",
             type != NULL ? type : "device", asked, exact, device, total_text, free_text, cap, alloc,
             unused,
             by_cap ? " The allocation would exceed the limit set by "
                      "set_per_process_memory_fraction()." : "", driver);
    return ACC_ERR_OUT_OF_MEMORY;
}

/* Obtain a segment of nbytes from the driver for device, within the
 * cap; on failure release the cache and retry once, then report that
 * `asked` bytes could not be allocated. */
static acc_status
reserve(int device, int pool, size_t nbytes, size_t asked, uintptr_t *ptr,
        acc_error *err)
{
    device_state *d = &A.dev[device];
    acc_status st = ACC_OK;
    acc_error ignored;
    int by_cap = 0;

    for (int attempt = 0; attempt < 2; attempt++) {
        lock(&d->lock);
        by_cap = d->capped
                 && (nbytes > d->limit
                     || (size_t)d->stats.reserved_bytes[ACC_STAT_ALL].current
                            + d->reserving > d->limit - nbytes);
        if (!by_cap) {
            d->reserving += nbytes;
        }
        unlock(&d->lock);
        if (!by_cap) {
            st = driver_alloc(device, nbytes, ptr, err);
            lock(&d->lock);
            d->reserving -= nbytes;
            if (st == ACC_OK) {
                segment_added(d, pool, nbytes);
            }
            unlock(&d->lock);
            if (st == ACC_OK) {
                return ACC_OK;
            }
            if (st != ACC_ERR_OUT_OF_MEMORY) {
                return st;
            }
        }
        if (attempt == 0) {
            lock(&d->lock);
            d->stats.num_alloc_retries++;
            unlock(&d->lock);
            if (release_cached(device, &ignored) != ACC_OK) {
                break;
            }
        }
    }
    return out_of_memory(device, asked, by_cap, err);
}

/* The core API ----------------------------------------------------------- */

/* Carve a block of size bytes (nbytes asked) out of the segment of seg
 * bytes at ptr that the driver just gave, for stream. */
static acc_status
carve_segment(int device, int pool, uintptr_t ptr, size_t seg, size_t size,
              size_t nbytes, acc_stream *stream, acc_block **out,
              acc_error *err)
{
    device_state *d = &A.dev[device];
    acc_block *b, *got = NULL;

    lock(&d->lock);
    b = block_new(d);
    if (b != NULL) {
        b->ptr = ptr;
        b->size = seg;
        b->device = device;
        b->pool = (unsigned char)pool;
        b->key = stream->handle;
        got = take_block(d, b, size, nbytes, stream);
        if (got == NULL) {
            block_drop(d, b);
        }
    }
    if (got == NULL) {
        segment_removed(d, pool, seg);
    }
    unlock(&d->lock);
    if (got == NULL) {
        driver_free(device, ptr);
        return acc_error_host_memory(err);
    }
    acc_stream_incref(stream);
    *out = got;
    return ACC_OK;
}

static acc_status
malloc_direct(int device, size_t nbytes, acc_stream *stream,
              acc_block **out, acc_error *err)
{
    device_state *d = &A.dev[device];
    int pool = nbytes <= SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
    uintptr_t ptr;
    acc_status st;

    if (atomic_load_explicit(&d->n_pending, memory_order_relaxed) > 0) {
        process_pending(d);
    }
    (void)acc_deferred_poll(0);  /* memory.c's (page-locked memory) */
    st = reserve(device, pool, nbytes, nbytes, &ptr, err);
    if (st != ACC_OK) {
        return st;
    }
    return carve_segment(device, pool, ptr, nbytes, nbytes, nbytes, stream,
                         out, err);
}

/* Look in the cache only: the block, or NULL on a miss. */
static acc_block *
malloc_cached(device_state *d, int pool, size_t size, size_t nbytes,
              acc_stream *stream)
{
    acc_block *b, *got = NULL;

    lock(&d->lock);
    b = tree_lower_bound(d->free_tree[pool], stream->handle, size);
    if (b != NULL && b->key == stream->handle) {
        tree_erase(d, b);
        got = take_block(d, b, size, nbytes, stream);
        if (got == NULL) {
            tree_insert(d, b);
        }
    }
    unlock(&d->lock);
    if (got != NULL) {
        acc_stream_incref(stream);
    }
    return got;
}

static acc_status
empty_block(int device, acc_block **out, acc_error *err)
{
    acc_block *b = calloc(1, sizeof(*b));

    if (b == NULL) {
        return acc_error_host_memory(err);
    }
    b->device = device;
    *out = b;
    return ACC_OK;
}

acc_status
acc_malloc_try(int device, size_t nbytes, acc_stream *stream,
               acc_block **out)
{
    device_state *d = &A.dev[device & (ACC_MAX_DEVICES - 1)];
    size_t size;
    int pool;

    /* Anything unusual, including bad arguments, goes to acc_malloc
     * (which also runs init_once, after the probe). */
    if (!atomic_load_explicit(&A.ready, memory_order_acquire) || A.direct || A.forked || nbytes == 0 || nbytes > SMALL_BUFFER * 8
        || device < 0 || device >= acc_device_count()
        || stream->device != device
        || atomic_load_explicit(&d->n_pending, memory_order_relaxed) > 0
        || acc_deferred_count() > 0) {
        return ACC_NOT_READY;
    }
    size = round_size(nbytes);
    pool = size <= SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
    *out = malloc_cached(d, pool, size, nbytes, stream);
    return *out != NULL ? ACC_OK : ACC_NOT_READY;
}

acc_status
acc_malloc(int device, size_t nbytes, acc_stream *stream, acc_block **out,
           acc_error *err)
{
    device_state *d = &A.dev[device];
    size_t size, seg;
    uintptr_t ptr;
    acc_block *got;
    acc_status st;
    int pool;

    st = acc_check_device_ready(device, err);
    if (st != ACC_OK) {
        return st;
    }
    ensure_init();   /* after the probe: the backend's facts are known */
    if (!acc_has_memory()) {
        return acc_error_unsupported("device memory", err);
    }
    st = acc_check_stream_of_buffer(stream, device, err);
    if (st != ACC_OK) {
        return st;
    }
    if (nbytes == 0) {
        /* Every allocation settles the frees, an empty one too. */
        if (atomic_load_explicit(&d->n_pending, memory_order_relaxed) > 0) {
            process_pending(d);
        }
        (void)acc_deferred_poll(0);
        return empty_block(device, out, err);
    }
    if (nbytes > SIZE_MAX - ROUND_LARGE) {
        acc_error_set(err, ACC_ERR_OUT_OF_MEMORY,
                      "no device can hold %zu bytes", nbytes);
        return out_of_memory(device, nbytes, 0, err);
    }
    if (!atomic_load_explicit(&A.used, memory_order_relaxed)) {
        atomic_store_explicit(&A.used, 1, memory_order_relaxed);
    }
    if (A.direct) {
        return malloc_direct(device, nbytes, stream, out, err);
    }
    size = round_size(nbytes);
    pool = size <= SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
    if (atomic_load_explicit(&d->n_pending, memory_order_relaxed) > 0) {
        process_pending(d);
    }
    (void)acc_deferred_poll(0);  /* memory.c's: every allocation settles */
    got = malloc_cached(d, pool, size, nbytes, stream);
    if (got != NULL) {
        *out = got;
        return ACC_OK;
    }
    seg = segment_size(size);
    st = reserve(device, pool, seg, nbytes, &ptr, err);
    if (st != ACC_OK) {
        return st;
    }
    return carve_segment(device, pool, ptr, seg, size, nbytes, stream, out,
                         err);
}

uintptr_t
acc_block_ptr(const acc_block *b)
{
    return b->ptr;
}

size_t
acc_block_size(const acc_block *b)
{
    return b->requested;
}

int
acc_block_device(const acc_block *b)
{
    return b->device;
}

void
acc_block_set_shared(acc_block *b, int shared)
{
    b->shared = (unsigned char)shared;
}

/* The driver allocation holding b: its segment (the block's neighbours
 * are linked under the device lock), or the block itself when direct. */
void
acc_block_segment(acc_block *b, uintptr_t *base, size_t *size)
{
    device_state *d = &A.dev[b->device];
    const acc_block *first = b;

    lock(&d->lock);
    while (first->prev != NULL) {
        first = first->prev;
    }
    *base = first->ptr;
    *size = 0;
    for (const acc_block *x = first; x != NULL; x = x->next) {
        *size += x->size;
    }
    unlock(&d->lock);
}

acc_status
acc_block_record_stream(acc_block *b, acc_stream *s, acc_error *err)
{
    if (b->stream == NULL) {
        return ACC_OK;   /* empty */
    }
    if (!A.direct && s->device == b->device && s->handle == b->key) {
        /* The allocation stream: the cache reuses the block only for
         * work on that stream, which runs after this use. */
        return ACC_OK;
    }
    return acc_uses_record(&b->uses, s, err);
}

acc_uses *
acc_block_uses(acc_block *b)
{
    return &b->uses;
}

/* The block is no longer allocated (under the lock); it stays active
 * until free_block or its release. */
static void
unallocate(device_state *d, acc_block *b)
{
    b->allocated = 0;
    b->stream = NULL;
    stat_pool(d->stats.allocation, b->pool, -1);
    stat_pool(d->stats.allocated_bytes, b->pool, -(long long)b->size);
}

acc_status
acc_free_try(acc_block *b)
{
    device_state *d;
    acc_stream *stream = b->stream;

    if (stream == NULL || A.direct || A.forked || b->uses.n > 0
        || b->shared) {
        return ACC_NOT_READY;
    }
    d = &A.dev[b->device];
    lock(&d->lock);
    unallocate(d, b);
    free_block(d, b);
    unlock(&d->lock);
    acc_stream_decref(stream);
    return ACC_OK;
}

void
acc_free(acc_block *b)
{
    device_state *d;
    acc_stream *stream = b->stream;
    acc_error err;

    if (stream == NULL) {
        free(b);          /* an empty block */
        (void)acc_deferred_poll(0);
        return;
    }
    if (A.forked) {
        return;           /* the parent's memory: leave it alone */
    }
    if (b->shared && acc_hooks_keep_block(b)) {
        return;           /* another process may hold it: in the limbo */
    }
    d = &A.dev[b->device];
    if (A.direct
        && ((acc_backend_caps() & ACC_CAP_PARTIAL_QUERY) != 0
            || acc_stream_query(stream, &err) != ACC_OK)) {
        /* The driver gets the memory back: wait for the allocation
         * stream too, by an event even where the query says it is idle
         * when the backend's query may not see work others queued
         * through the handle (backend.h). */
        (void)acc_uses_record(&b->uses, stream, &err);
    }
    b->n_events = acc_uses_take(&b->uses, &b->events);
    lock(&d->lock);
    unallocate(d, b);
    if (b->n_events > 0 || b->needs_sync) {
        push_pending(d, b);
        b = NULL;
    }
    else if (!A.direct) {
        free_block(d, b);
        b = NULL;
    }
    unlock(&d->lock);
    if (b != NULL) {
        release_uses(b);
        direct_release(d, b);
    }
    acc_stream_decref(stream);
    /* Every free settles the frees whose work has completed. */
    if (atomic_load_explicit(&d->n_pending, memory_order_relaxed) > 0) {
        process_pending(d);
    }
    (void)acc_deferred_poll(0);
}

/* Statistics and control ------------------------------------------------- */

int
acc_allocator_used(void)
{
    return atomic_load_explicit(&A.used, memory_order_relaxed);
}

int
acc_allocator_direct(void)
{
    ensure_init();
    return A.direct;
}

acc_status
acc_memory_stats(int device, acc_mem_stats *out, acc_error *err)
{
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    ensure_init();
    lock(&A.dev[device].lock);
    *out = A.dev[device].stats;
    unlock(&A.dev[device].lock);
    return ACC_OK;
}

/* Every acc_stat array of s, for the resets. */
static void
each_stat(acc_mem_stats *s, void (*fn)(acc_stat *))
{
    acc_stat *arrays[] = {
        s->allocation, s->segment, s->active, s->inactive_split,
        s->allocated_bytes, s->reserved_bytes, s->active_bytes,
        s->inactive_split_bytes, s->requested_bytes,
    };

    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) {
        for (int t = 0; t < ACC_STAT_TYPES; t++) {
            fn(&arrays[i][t]);
        }
    }
}

static void
reset_peak(acc_stat *s)
{
    s->peak = s->current;
}

static void
reset_accumulated(acc_stat *s)
{
    s->allocated = 0;
    s->freed = 0;
}

acc_status
acc_reset_peak_memory_stats(int device, acc_error *err)
{
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    ensure_init();
    lock(&A.dev[device].lock);
    each_stat(&A.dev[device].stats, reset_peak);
    unlock(&A.dev[device].lock);
    return ACC_OK;
}

acc_status
acc_reset_accumulated_memory_stats(int device, acc_error *err)
{
    acc_mem_stats *s;
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    ensure_init();
    lock(&A.dev[device].lock);
    s = &A.dev[device].stats;
    each_stat(s, reset_accumulated);
    s->num_alloc_retries = 0;
    s->num_ooms = 0;
    s->num_sync_all_streams = 0;
    s->num_device_alloc = 0;
    s->num_device_free = 0;
    unlock(&A.dev[device].lock);
    return ACC_OK;
}

acc_status
acc_set_memory_fraction(int device, double fraction, acc_error *err)
{
    size_t free_bytes, total_bytes;
    acc_status st;

    if (!(fraction >= 0.0 && fraction <= 1.0)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Invalid fraction value: %g. Allowed range: 0~1",
                      fraction);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    st = acc_memory_info(device, &free_bytes, &total_bytes, err);
    if (st != ACC_OK) {
        return st;
    }
    ensure_init();
    lock(&A.dev[device].lock);
    A.dev[device].limit = (size_t)(fraction * (double)total_bytes);
    /* 1.0 lets the device itself say no, with the driver's error. */
    A.dev[device].capped = fraction < 1.0;
    unlock(&A.dev[device].lock);
    return ACC_OK;
}

/* The empty_cache hook: settle the freed blocks whose work has completed
 * (direct mode: return them to the driver); never waits for the device. */
static void
allocator_release(void)
{
    if (A.forked) {
        return;
    }
    (void)acc_deferred_poll(0);  /* memory.c's (page-locked host memory) */
    if (!acc_allocator_used()) {
        return;
    }
    for (int device = 0; device < acc_device_count(); device++) {
        if (atomic_load_explicit(&A.dev[device].n_pending,
                                 memory_order_relaxed) > 0) {
            process_pending(&A.dev[device]);
        }
    }
}

acc_status
acc_allocator_empty_cache(acc_error *err)
{
    acc_status st, first = ACC_OK;
    acc_error one;

    if (!acc_allocator_used() || A.forked) {
        return ACC_OK;
    }
    for (int device = 0; device < acc_device_count(); device++) {
        st = release_cached(device, &one);
        if (st != ACC_OK && first == ACC_OK) {
            first = st;
            *err = one;
        }
    }
    return first;
}

/* The stream_destroyed hook. */
static void
stream_destroyed(const acc_stream *s)
{
    device_state *d;
    uintptr_t orphan;
    acc_block *b;

    if (!atomic_load(&A.ready) || A.forked) {
        return;
    }
    /* A new stream may get the same handle, and its work would not be
     * ordered after this one's: the blocks cached for this stream get a
     * key no stream has, and wait for a release (which synchronizes). */
    d = &A.dev[s->device];
    orphan = atomic_fetch_sub(&A.orphan_key, 1);
    lock(&d->lock);
    for (int pool = 0; pool < N_POOLS; pool++) {
        while ((b = tree_lower_bound(d->free_tree[pool], s->handle, 0))
               != NULL && b->key == s->handle) {
            tree_erase(d, b);
            b->key = orphan;
            tree_insert(d, b);
        }
    }
    for (b = d->pending; b != NULL; b = b->link) {
        if (b->key == s->handle) {
            b->key = orphan;
        }
    }
    unlock(&d->lock);
}

/* At load, before any stream can be destroyed or the cache emptied. */
__attribute__((constructor)) static void
register_hooks(void)
{
    static acc_hooks hooks = {
        .stream_destroyed = stream_destroyed,
        .empty_cache = allocator_release,
    };

    acc_hooks_register(&hooks);
}
