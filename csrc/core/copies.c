/*
 * memory.c - the dispatcher's half of memory: copies and fills (checked
 * here, ordered across devices as torch's copy_), page-locked host
 * blocks, and the deferred release that lets memory go back to the driver
 * only after the work that uses it has completed, without blocking.
 *
 * Plain C, no Python objects.  The allocator (allocator.c) sits beside
 * this file and uses the deferred release for its direct mode.
 */
#define _GNU_SOURCE
#include "core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
acc_has_memory(void)
{
    const acc_backend *b = acc_selected_backend();

    return b != NULL && b->mem_alloc != NULL && b->mem_free != NULL
           && b->mem_copy != NULL && b->mem_fill != NULL;
}

/* The selected backend when it has memory; else a failure in err. */
static const acc_backend *
memory_backend(acc_error *err)
{
    if (acc_ready(err) != ACC_OK) {
        return NULL;
    }
    if (!acc_has_memory()) {
        acc_error_unsupported("device memory", err);
        return NULL;
    }
    return acc_selected_backend();
}

/* Copies and fills --------------------------------------------------------- */

static int
copy_device_ok(const acc_copy *c, int device)
{
    switch (c->kind) {
    case ACC_COPY_H2D:
        return device == c->dst_device;
    case ACC_COPY_D2H:
        return device == c->src_device;
    case ACC_COPY_D2D:
        return device == c->dst_device && device == c->src_device;
    case ACC_COPY_PEER:
        return device == c->dst_device || device == c->src_device;
    }
    return 0;
}

/* "device N", or "the host" for the host side (device -1). */
static void
copy_side(char *text, size_t size, int device)
{
    if (device < 0) {
        snprintf(text, size, "the host");
    }
    else {
        snprintf(text, size, "device %d", device);
    }
}

acc_status
acc_copy_check_sizes(const char *what, size_t buffer, size_t other,
                     const char *side, acc_error *err)
{
    if (buffer != other) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "%s: size mismatch: "
                      "the Buffer has %zu bytes, the %s has %zu (expected "
                      "exactly %zu)", what, buffer, side, other, buffer);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    return ACC_OK;
}

acc_status
acc_memcpy(acc_stream *s, const acc_copy *c, acc_error *err)
{
    const acc_backend *b = memory_backend(err);
    acc_stream *other = NULL;
    acc_copy copy = *c;
    acc_status st;

    if (b == NULL) {
        return err->status;
    }
    if (copy.kind == ACC_COPY_PEER && copy.dst_device == copy.src_device) {
        copy.kind = ACC_COPY_D2D;
    }
    if (copy.kind == ACC_COPY_D2D && copy.dst_device != copy.src_device) {
        copy.kind = ACC_COPY_PEER;
    }
    if (!copy_device_ok(&copy, s->device)) {
        char src[24], dst[24];

        copy_side(src, sizeof(src), copy.src_device);
        copy_side(dst, sizeof(dst), copy.dst_device);
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the stream is on device %d, but the copy is from %s "
                      "to %s; expected a stream of %s", s->device, src, dst,
                      copy.kind == ACC_COPY_PEER ? "either device"
                                                 : "the device side");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (copy.nbytes == 0
        || (copy.kind == ACC_COPY_D2D && copy.dst == copy.src)) {
        return ACC_OK;               /* nothing to move */
    }
    if (copy.kind == ACC_COPY_D2D
        && copy.dst < copy.src + copy.nbytes
        && copy.src < copy.dst + copy.nbytes) {
        /* As torch refuses a copy_ whose sides share memory: the drivers'
         * copies are undefined for overlapping ranges (cuMemcpy's may
         * run in any order of chunks). */
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the source and the destination overlap (%zu bytes, "
                      "%zu apart, in the memory of device %d); expected "
                      "separate memory: copy through another Buffer",
                      copy.nbytes,
                      (size_t)(copy.dst > copy.src ? copy.dst - copy.src
                                                   : copy.src - copy.dst),
                      copy.dst_device);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (copy.kind == ACC_COPY_PEER) {
        /* torch's copy_ between devices: a two-way barrier with the
         * other device's current stream, before and after. */
        int od = s->device == copy.dst_device ? copy.src_device
                                              : copy.dst_device;

        st = acc_current_stream(od, &other, err);
        if (st == ACC_OK) {
            st = acc_stream_wait_stream(s, other, err);
        }
        if (st != ACC_OK) {
            return st;
        }
    }
    st = ACC_SLOT(b, mem_copy, err, s, &copy, err);
    if (st == ACC_OK && other != NULL) {
        st = acc_stream_wait_stream(other, s, err);
    }
    return st;
}

acc_status
acc_check_nbytes_text(const char *nbytes, int negative, const char *what,
                      acc_error *err)
{
    if (negative) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "%s must be a size in bytes >= 0, got %s", what,
                      nbytes);
    }
    else {
        /* A size, only beyond any memory: out of memory, as for any size
         * too large, but with the size asked (no driver sees it). */
        acc_error_set(err, ACC_ERR_OUT_OF_MEMORY,
                      "%s cannot allocate %s bytes: more than 2**%zu - 1, "
                      "more than any memory", what, nbytes,
                      sizeof(size_t) * 8);
    }
    return err->status;
}

acc_status
acc_check_nbytes(long long nbytes, const char *what, acc_error *err)
{
    char text[24];

    if (nbytes < 0) {
        snprintf(text, sizeof(text), "%lld", nbytes);
        return acc_check_nbytes_text(text, 1, what, err);
    }
    return ACC_OK;
}

acc_status
acc_check_fill_text(const char *value, acc_error *err)
{
    acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                  "fill value must be a byte value in 0..255, got %s", value);
    return ACC_ERR_INVALID_ARGUMENT;
}

acc_status
acc_memset(acc_stream *s, int device, uintptr_t dst, long long value,
           size_t nbytes, acc_error *err)
{
    const acc_backend *b = memory_backend(err);

    if (b == NULL) {
        return err->status;
    }
    if (acc_check_stream_of_buffer(s, device, err) != ACC_OK) {
        return err->status;
    }
    if (value < 0 || value > 255) {
        char text[24];

        snprintf(text, sizeof(text), "%lld", value);
        return acc_check_fill_text(text, err);
    }
    if (nbytes == 0) {
        return ACC_OK;
    }
    return ACC_SLOT(b, mem_fill, err, s, dst, (unsigned char)value, nbytes,
                    err);
}

acc_status
acc_pointer_info_of(uintptr_t ptr, acc_pointer_info *info, acc_error *err)
{
    const acc_backend *b;

    info->kind = ACC_POINTER_UNKNOWN;
    info->device = -1;
    if (acc_ready(err) != ACC_OK) {
        return err->status;
    }
    b = acc_selected_backend();
    if (b->pointer_info == NULL) {
        return acc_error_unsupported("looking up foreign memory", err);
    }
    if (ptr == 0) {
        return ACC_OK; /* no memory: some drivers fail on NULL instead */
    }
    return ACC_SLOT(b, pointer_info, err, ptr, info, err);
}

acc_status
acc_check_foreign_range(int device, uintptr_t ptr, size_t nbytes,
                        const char *what, acc_error *err)
{
    const acc_backend *b;
    uintptr_t base = 0;
    size_t size = 0, room;
    acc_status status;

    if (acc_ready(err) != ACC_OK) {
        return err->status;
    }
    b = acc_selected_backend();
    if (b->pointer_range == NULL) {
        return acc_error_unsupported("looking up foreign memory", err);
    }
    status = ACC_SLOT(b, pointer_range, err, device, ptr, &base, &size, err);
    if (status == ACC_ERR_NOT_FOUND) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "%s: %#llx lies in no "
                      "allocation the %s driver knows", what,
                      (unsigned long long)ptr, b->display_type);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (status != ACC_OK) {
        return status;
    }
    if (ptr < base || ptr - base >= size) {
        /* A driver that answered for another byte: none holds ptr. */
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "%s: %#llx lies in no "
                      "allocation the %s driver knows (it answered %zu "
                      "bytes at %#llx)", what, (unsigned long long)ptr,
                      b->display_type, size, (unsigned long long)base);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    room = size - (size_t)(ptr - base);
    if (nbytes > room) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "%s: %zu bytes at %#llx "
                      "run past the end of the driver's allocation that "
                      "holds their first byte (%zu bytes at %#llx): "
                      "expected at most %zu bytes from %#llx", what, nbytes,
                      (unsigned long long)ptr, size,
                      (unsigned long long)base, room,
                      (unsigned long long)ptr);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    return ACC_OK;
}

/* Deferred release --------------------------------------------------------- */

/*
 * Each entry waits on the events of the uses its memory had when it was
 * released (uses.c).  Entries are polled (one event query each) on every
 * allocation and free of device and page-locked memory, so the list stays
 * as short as the work in flight; beyond DEFERRED_MAX entries a release
 * waits for the oldest first, so the list never grows without bound.
 */
#define DEFERRED_MAX 1024

typedef struct deferred {
    struct deferred *next;
    int device;
    uintptr_t ptr;
    acc_release_fn release;
    int nevents;
    acc_event *events;
} deferred;

static struct {
    pthread_mutex_t lock;
    deferred *head;
    atomic_int count;
} pending = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* In the child of fork(): the lock made usable again. */
static void
after_fork_child(void)
{
    pthread_mutex_init(&pending.lock, NULL);
}

__attribute__((constructor)) static void
register_hooks(void)
{
    static acc_hooks hooks = {.after_fork_child = after_fork_child};

    acc_hooks_register(&hooks);
}

static void
deferred_finish(deferred *d)
{
    for (int i = 0; i < d->nevents; i++) {
        acc_event_release(&d->events[i]);
    }
    free(d->events);
    d->release(d->device, d->ptr);
    free(d);
}

/* An entry whose events have all completed (or failed: a failed query
 * means the work cannot be waited for, and waiting would not help). */
static int
deferred_ready(deferred *d, int wait)
{
    acc_error err;

    for (int i = 0; i < d->nevents; i++) {
        acc_status st = wait ? acc_event_synchronize(&d->events[i], &err)
                             : acc_event_query(&d->events[i], &err);

        if (st == ACC_NOT_READY) {
            return 0;
        }
        if (st != ACC_OK) {
            acc_trace("releasing memory: %s", err.message);
        }
    }
    return 1;
}

/* Take the oldest entry off the list (lock held), or NULL. */
static deferred *
take_oldest(void)
{
    deferred **p = &pending.head, *d;

    if (*p == NULL) {
        return NULL;
    }
    while ((*p)->next != NULL) {
        p = &(*p)->next;
    }
    d = *p;
    *p = NULL;
    atomic_fetch_sub(&pending.count, 1);
    return d;
}

void
acc_defer_release(int device, uintptr_t ptr, acc_release_fn release,
                  acc_uses *uses)
{
    acc_error err;
    deferred *d, *oldest;
    acc_event *events = NULL;
    int n = 0;

    if (acc_check_usable(&err) == ACC_ERR_FORKED) {
        /* The parent owns the memory; the child must not call the
         * driver. */
        return;
    }
    if (uses != NULL) {
        n = acc_uses_take(uses, &events);
    }
    d = n > 0 ? calloc(1, sizeof(*d)) : NULL;
    if (n > 0 && d == NULL) {
        /* No way to wait later: wait now, rather than free too early. */
        acc_trace("deferring a release: out of host memory; waiting");
        for (int i = 0; i < n; i++) {
            (void)acc_event_synchronize(&events[i], &err);
            acc_event_release(&events[i]);
        }
        free(events);
        n = 0;
    }
    if (n == 0) {
        release(device, ptr);
        (void)acc_deferred_poll(0);
        return;
    }
    d->device = device;
    d->ptr = ptr;
    d->release = release;
    d->nevents = n;
    d->events = events;
    pthread_mutex_lock(&pending.lock);
    d->next = pending.head;
    pending.head = d;
    atomic_fetch_add(&pending.count, 1);
    pthread_mutex_unlock(&pending.lock);
    (void)acc_deferred_poll(0);
    /* The bound: wait for the oldest releases beyond it. */
    while (atomic_load(&pending.count) > DEFERRED_MAX) {
        pthread_mutex_lock(&pending.lock);
        oldest = take_oldest();
        pthread_mutex_unlock(&pending.lock);
        if (oldest == NULL) {
            break;
        }
        (void)deferred_ready(oldest, 1);
        deferred_finish(oldest);
    }
}

void
acc_deferred_settle(acc_release_fn release, acc_deferred_claim claim,
                    void *ctx)
{
    deferred *mine = NULL, **p, *d;
    acc_error err;

    if (acc_check_usable(&err) == ACC_ERR_FORKED) {
        return;
    }
    pthread_mutex_lock(&pending.lock);
    p = &pending.head;
    while ((d = *p) != NULL) {
        if (d->release == release && claim(d->ptr, ctx)) {
            *p = d->next;
            d->next = mine;
            mine = d;
            atomic_fetch_sub(&pending.count, 1);
        }
        else {
            p = &d->next;
        }
    }
    pthread_mutex_unlock(&pending.lock);
    while (mine != NULL) {
        d = mine;
        mine = d->next;
        (void)deferred_ready(d, 1);
        for (int i = 0; i < d->nevents; i++) {
            acc_event_release(&d->events[i]);
        }
        free(d->events);
        free(d);
    }
}

int
acc_deferred_count(void)
{
    return atomic_load_explicit(&pending.count, memory_order_relaxed);
}

int
acc_deferred_poll(int wait)
{
    deferred *ready = NULL, **p, *d;
    acc_error err;
    int left;

    if (atomic_load_explicit(&pending.count, memory_order_relaxed) == 0) {
        return 0;
    }
    if (acc_check_usable(&err) != ACC_OK) {
        return 0;
    }
    pthread_mutex_lock(&pending.lock);
    if (!wait) {
        /* Queries never block: done under the lock. */
        p = &pending.head;
        while ((d = *p) != NULL) {
            if (deferred_ready(d, 0)) {
                *p = d->next;
                d->next = ready;
                ready = d;
                atomic_fetch_sub(&pending.count, 1);
            }
            else {
                p = &d->next;
            }
        }
    }
    else {
        ready = pending.head;
        pending.head = NULL;
        atomic_store(&pending.count, 0);
    }
    left = atomic_load(&pending.count);
    pthread_mutex_unlock(&pending.lock);
    while (ready != NULL) {
        d = ready;
        ready = d->next;
        if (wait) {
            (void)deferred_ready(d, 1);
        }
        deferred_finish(d);
    }
    return left;
}

/* Page-locked host blocks ---------------------------------------------------- */

struct acc_host_block {
    int device;
    void *ptr;
    acc_uses uses;           /* the books: copies queued with it */
};

static void
host_release(int device, uintptr_t ptr)
{
    const acc_backend *b = acc_selected_backend();
    acc_error err = {.status = ACC_OK};

    if (ACC_SLOT(b, host_free, &err, device, (void *)ptr, &err) != ACC_OK) {
        acc_trace("freeing page-locked memory: %s", err.message);
    }
}

acc_status
acc_host_alloc(int device, size_t nbytes, acc_host_block **out,
               acc_error *err)
{
    const acc_backend *b;
    acc_host_block *h;
    acc_status st = acc_check_device_ready(device, err);

    if (st != ACC_OK) {
        return st;
    }
    b = acc_selected_backend();
    if (b->host_alloc == NULL || b->host_free == NULL) {
        return acc_error_unsupported("page-locked host memory", err);
    }
    if (nbytes > (size_t)PTRDIFF_MAX) {
        /* No process can address it (nor a Python buffer expose it): out
         * of memory with the size asked, as for a size beyond size_t. */
        acc_error_set(err, ACC_ERR_OUT_OF_MEMORY,
                      "cannot allocate %zu bytes of page-locked host memory: "
                      "more than 2**%zu - 1, more than a process can address",
                      nbytes, sizeof(size_t) * 8 - 1);
        return ACC_ERR_OUT_OF_MEMORY;
    }
    (void)acc_deferred_poll(0);  /* every allocation settles the frees */
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return acc_error_host_memory(err);
    }
    acc_uses_init(&h->uses);
    h->device = device;
    if (nbytes > 0) {
        st = ACC_SLOT(b, host_alloc, err, device, nbytes, &h->ptr, err);
        if (st != ACC_OK) {
            acc_uses_clear(&h->uses);
            pthread_mutex_destroy(&h->uses.lock);
            free(h);
            if (st == ACC_ERR_OUT_OF_MEMORY) {
                /* The driver's words lack the size asked. */
                size_t used = strlen(err->message);

                snprintf(err->message + used, sizeof(err->message) - used,
                         " (tried to allocate %zu bytes of page-locked host "
                         "memory for device %d)", nbytes, device);
            }
            return st;
        }
    }
    *out = h;
    return ACC_OK;
}

void *
acc_host_block_ptr(const acc_host_block *h)
{
    return h->ptr;
}

acc_uses *
acc_host_block_uses(acc_host_block *h)
{
    return &h->uses;
}

acc_status
acc_host_block_record_stream(acc_host_block *h, acc_stream *s,
                             acc_error *err)
{
    return acc_uses_record(&h->uses, s, err);
}

acc_status
acc_host_block_synchronize(acc_host_block *h, acc_error *err)
{
    return acc_uses_synchronize(&h->uses, err);
}

void
acc_host_free(acc_host_block *h)
{
    if (h->ptr != NULL) {
        acc_defer_release(h->device, (uintptr_t)h->ptr, host_release,
                          &h->uses);
    }
    else {
        (void)acc_deferred_poll(0);
    }
    acc_uses_clear(&h->uses);
    pthread_mutex_destroy(&h->uses.lock);
    free(h);
}

/* Page-locked memory held for freed host blocks, waiting on the work
 * queued with them, is the host cache: release the entries whose work has
 * completed, without waiting for the others (torch's empty_host_cache). */
void
acc_host_empty_cache(void)
{
    deferred *ready = NULL, **p, *d;
    acc_error err;

    if (acc_check_usable(&err) != ACC_OK) {
        return;
    }
    pthread_mutex_lock(&pending.lock);
    p = &pending.head;
    while ((d = *p) != NULL) {
        if (d->release == host_release && deferred_ready(d, 0)) {
            *p = d->next;
            d->next = ready;
            ready = d;
            pending.count--;
        }
        else {
            p = &d->next;
        }
    }
    pthread_mutex_unlock(&pending.lock);
    while ((d = ready) != NULL) {
        ready = d->next;
        deferred_finish(d);
    }
}
