/*
 * double_memory.c - device memory for the driver test doubles (see
 * double_memory.h).
 */
#define _GNU_SOURCE
#include "double_memory.h"
#include "double_ipc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <string.h>

#define DM_GUARD_BYTE 0xA5
#define DM_ALIGN 256ULL
#define DM_GAP 4096ULL
/* Device addresses come from address space reserved with no access
 * (PROT_NONE), as a real driver's unified address space: where the
 * kernel places mappings (0x7fxx_xxxx_xxxx on x86-64), below 2**63 as
 * the real ones are, never shared with host memory, and a device address
 * used as a host pointer faults.  Reserved a chunk at a time, per
 * device; 4 GiB, as much as valgrind's address space allows easily. */
#define DM_CHUNK (4ULL << 30)

typedef struct dm_chunk {
    struct dm_chunk *next;
    unsigned long long base, size, used;
    int device;
} dm_chunk;

typedef struct dm_alloc_rec {
    struct dm_alloc_rec *next;
    unsigned long long addr;
    size_t size;
    int device;
    bool host;
    unsigned long long id;  /* unique in the process */
    unsigned char *storage; /* DM_GUARD + size + DM_GUARD: malloc'd, or a
                               MAP_SHARED memfd mapping (mapped) */
    bool mapped;            /* exported (then in its memfd) or imported */
    int fd;                 /* an exported allocation's memfd; else -1
                               (an import maps what it does not own) */
    bool imported;          /* mapped from another process's handle */
    bool exported;          /* a handle of it was made */
    /* An import: what it maps (the exporter's pid and the memfd's inode)
     * and how many opens it answered (dm_ipc_open). */
    long long ipc_pid;
    unsigned long long ipc_inode;
    int opens;
} dm_alloc_rec;

static struct {
    pthread_mutex_t mu;
    const char *tag;
    unsigned long long limit;
    dm_alloc_rec *live;
    dm_alloc_rec *freed;    /* device allocations, storage gone */
    dm_chunk *chunks;       /* reserved device address space */
    dm_chunk *open[DM_MAX_DEVICES]; /* the one each device takes from */
    unsigned long long used[DM_MAX_DEVICES];
    long long allocs, host_allocs;
    long long exported, opened; /* "ipc_exported", "ipc_opened" */
    unsigned long long ids;
    atomic_llong bad_access, guard_damage;
} dm = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .tag = "driver double",
    .limit = 80ULL << 30,
};

void
dm_configure(const char *tag, unsigned long long limit)
{
    dm.tag = tag;
    dm.limit = limit;
}

static void
report(const char *api, const char *what, unsigned long long addr,
       size_t bytes)
{
    atomic_fetch_add(&dm.bad_access, 1);
    fprintf(stderr, "%s: %s: %s (address %#llx, %zu bytes)\n", dm.tag, api,
            what, addr, bytes);
}

/* Under dm.mu. */
static bool
guards_intact(const dm_alloc_rec *a)
{
    for (size_t i = 0; i < DM_GUARD; i++) {
        if (a->storage[i] != DM_GUARD_BYTE
            || a->storage[DM_GUARD + a->size + i] != DM_GUARD_BYTE) {
            return false;
        }
    }
    return true;
}

/* Under dm.mu.  The live allocation holding [addr, addr + bytes). */
static dm_alloc_rec *
find(unsigned long long addr, size_t bytes, bool host)
{
    for (dm_alloc_rec *a = dm.live; a != NULL; a = a->next) {
        if (a->host == host && addr >= a->addr && addr - a->addr <= a->size
            && bytes <= a->size - (addr - a->addr)) {
            return a;
        }
    }
    return NULL;
}

/* Under dm.mu.  Why addr is not good device memory. */
static const char *
miss(unsigned long long addr)
{
    for (dm_alloc_rec *a = dm.live; a != NULL; a = a->next) {
        if (!a->host && addr >= a->addr && addr <= a->addr + a->size) {
            return "out of bounds of a device allocation";
        }
    }
    for (dm_alloc_rec *a = dm.freed; a != NULL; a = a->next) {
        if (addr >= a->addr && addr <= a->addr + a->size) {
            return "use after free of a device allocation";
        }
    }
    return "not a device address";
}

/* Under dm.mu.  The bytes behind a device range, or NULL (reported). */
static unsigned char *
device_bytes(const char *api, unsigned long long addr, size_t bytes,
             int device)
{
    dm_alloc_rec *a = find(addr, bytes, false);

    if (a == NULL) {
        report(api, miss(addr), addr, bytes);
        return NULL;
    }
    if (device >= 0 && a->device != device) {
        report(api, "device memory of another device", addr, bytes);
        return NULL;
    }
    return a->storage + DM_GUARD + (addr - a->addr);
}

/* Page-locked host memory cannot exceed the machine's physical memory:
 * a driver refuses more (out of memory) without trying.  Checked before
 * malloc, which under AddressSanitizer aborts on sizes past 1 TiB instead
 * of returning NULL. */
static bool
dm_host_too_large(size_t bytes)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

    return pages > 0 && page > 0
           && bytes / (size_t)page >= (size_t)pages;
}

/* Under dm.mu.  bytes (rounded, and a gap after) of device's reserved
 * address space, never handed out before; 0 when none can be reserved. */
static unsigned long long
device_range(int device, size_t bytes)
{
    unsigned long long need = (bytes + DM_ALIGN - 1) / DM_ALIGN * DM_ALIGN
                              + DM_GAP;
    dm_chunk *c = dm.open[device];
    void *base;

    if (c == NULL || c->size - c->used < need) {
        unsigned long long size = need > DM_CHUNK ? need : DM_CHUNK;

        c = calloc(1, sizeof(*c));
        if (c == NULL || size > SIZE_MAX) {
            free(c);
            return 0;
        }
        base = mmap(NULL, (size_t)size, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED) {
            free(c);
            return 0;
        }
        c->base = (unsigned long long)(uintptr_t)base;
        c->size = size;
        c->device = device;
        c->next = dm.chunks;
        dm.chunks = c;
        dm.open[device] = c;
    }
    c->used += need;
    return c->base + c->used - need;
}

/* The storage of a (host memory, a device allocation or an import). */
static void
release_storage(dm_alloc_rec *a)
{
    if (!a->mapped) {
        free(a->storage);
    }
    else if (a->storage != NULL) {
        munmap(a->storage, a->size + 2 * DM_GUARD);
    }
    if (a->fd >= 0) {
        close(a->fd);
    }
    a->storage = NULL;
    a->fd = -1;
}

/* Under dm.mu.  Whether addr lies in reserved device address space. */
static bool
device_space(unsigned long long addr)
{
    for (const dm_chunk *c = dm.chunks; c != NULL; c = c->next) {
        if (addr >= c->base && addr - c->base < c->size) {
            return true;
        }
    }
    return false;
}

enum dm_result
dm_alloc(int device, size_t bytes, bool host, unsigned long long *addr)
{
    dm_alloc_rec *a;

    if (device < 0 || device >= DM_MAX_DEVICES || bytes == 0) {
        return DM_BAD;
    }
    if (host && dm_host_too_large(bytes)) {
        return DM_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&dm.mu);
    if (!host && bytes > dm.limit - (dm.used[device] < dm.limit
                                         ? dm.used[device] : dm.limit)) {
        pthread_mutex_unlock(&dm.mu);
        return DM_OUT_OF_MEMORY;
    }
    a = calloc(1, sizeof(*a));
    if (a != NULL) {
        a->fd = -1;
    }
    /* Malloc'd: a device allocation moves to a memfd of its own when it
     * is first exported (dm_ipc_export), not before, so that the many
     * that never are cost no descriptor, mapping and page faults. */
    if (a != NULL && bytes <= SIZE_MAX - 2 * DM_GUARD) {
        a->storage = malloc(bytes + 2 * DM_GUARD);
    }
    if (a == NULL || a->storage == NULL) {
        pthread_mutex_unlock(&dm.mu);
        free(a);
        return DM_OUT_OF_MEMORY;
    }
    memset(a->storage, DM_GUARD_BYTE, DM_GUARD);
    memset(a->storage + DM_GUARD + bytes, DM_GUARD_BYTE, DM_GUARD);
    /* Fresh memory holds garbage, not zeros. */
    memset(a->storage + DM_GUARD, 0xCD, bytes);
    a->size = bytes;
    a->device = device;
    a->host = host;
    a->id = ++dm.ids;
    if (host) {
        a->addr = (unsigned long long)(uintptr_t)(a->storage + DM_GUARD);
        dm.host_allocs++;
    }
    else {
        a->addr = device_range(device, bytes);
        if (a->addr == 0) {
            pthread_mutex_unlock(&dm.mu);
            release_storage(a);
            free(a);
            return DM_OUT_OF_MEMORY;
        }
        dm.used[device] += bytes;
        dm.allocs++;
    }
    a->next = dm.live;
    dm.live = a;
    *addr = a->addr;
    pthread_mutex_unlock(&dm.mu);
    return DM_OK;
}

enum dm_result
dm_free(const char *api, unsigned long long addr, bool host)
{
    dm_alloc_rec *a = NULL;

    pthread_mutex_lock(&dm.mu);
    for (dm_alloc_rec **p = &dm.live; *p != NULL; p = &(*p)->next) {
        if ((*p)->host == host && (*p)->addr == addr) {
            if ((*p)->imported) {
                report(api, "memory opened from an IPC handle (it is "
                       "closed, not freed)", addr, 0);
                pthread_mutex_unlock(&dm.mu);
                return DM_BAD;
            }
            a = *p;
            *p = a->next;
            break;
        }
    }
    if (a == NULL) {
        report(api, host ? "not page-locked memory of the driver"
                         : addr == 0 ? "null pointer" : miss(addr), addr, 0);
        pthread_mutex_unlock(&dm.mu);
        return DM_BAD;
    }
    if (!guards_intact(a)) {
        atomic_fetch_add(&dm.guard_damage, 1);
        fprintf(stderr, "%s: %s: guard bytes of the allocation at %#llx "
                "(%zu bytes) were overwritten\n", dm.tag, api, a->addr,
                a->size);
    }
    release_storage(a);
    if (host) {
        dm.host_allocs--;
        free(a);
    }
    else {
        dm.used[a->device] -= a->size;
        dm.allocs--;
        dm.exported -= a->exported;
        /* Remembered, so that a later use is named for what it is. */
        a->next = dm.freed;
        dm.freed = a;
    }
    pthread_mutex_unlock(&dm.mu);
    return DM_OK;
}

unsigned long long
dm_used(int device)
{
    unsigned long long n;

    pthread_mutex_lock(&dm.mu);
    n = device >= 0 && device < DM_MAX_DEVICES ? dm.used[device] : 0;
    pthread_mutex_unlock(&dm.mu);
    return n;
}

bool
dm_check_device(const char *api, unsigned long long addr, size_t bytes,
                int device)
{
    unsigned char *p;

    pthread_mutex_lock(&dm.mu);
    p = device_bytes(api, addr, bytes, device);
    pthread_mutex_unlock(&dm.mu);
    return p != NULL;
}

dm_side
dm_host_side(const void *p, size_t bytes)
{
    dm_side side = {DM_HOST, (unsigned long long)(uintptr_t)p};

    pthread_mutex_lock(&dm.mu);
    if (find(side.addr, bytes, true) != NULL) {
        side.kind = DM_PINNED;
    }
    pthread_mutex_unlock(&dm.mu);
    return side;
}

dm_side
dm_classify(const void *p, size_t bytes)
{
    dm_side side = {DM_HOST, (unsigned long long)(uintptr_t)p};

    pthread_mutex_lock(&dm.mu);
    if (device_space(side.addr)) {
        side.kind = DM_DEVICE;
    }
    else if (find(side.addr, bytes, true) != NULL) {
        side.kind = DM_PINNED;
    }
    pthread_mutex_unlock(&dm.mu);
    return side;
}

int
dm_lookup(unsigned long long addr, int *device)
{
    dm_alloc_rec *a;
    int kind = 0;

    /* The byte at addr: one past an allocation's end is in none (a
     * driver's pointer attributes know no such address). */
    pthread_mutex_lock(&dm.mu);
    a = find(addr, 1, false);
    if (a == NULL) {
        a = find(addr, 1, true);
    }
    if (a != NULL) {
        kind = a->host ? 2 : 1;
        *device = a->device;
    }
    pthread_mutex_unlock(&dm.mu);
    return kind;
}

dm_range
dm_query(unsigned long long addr)
{
    dm_range r = {0, 0, 0, 0, 0};
    dm_alloc_rec *a;

    pthread_mutex_lock(&dm.mu);
    a = find(addr, 1, false);
    if (a == NULL) {
        a = find(addr, 1, true);
    }
    if (a != NULL) {
        r.kind = a->host ? 2 : 1;
        r.device = a->device;
        r.base = a->addr;
        r.size = a->size;
        r.id = a->id;
    }
    pthread_mutex_unlock(&dm.mu);
    return r;
}

enum dm_result
dm_op_stage(dm_op *op)
{
    if (op->fill || op->src.kind != DM_HOST || op->bytes == 0) {
        return DM_OK;
    }
    op->staging = malloc(op->bytes);
    if (op->staging == NULL) {
        return DM_OUT_OF_MEMORY;
    }
    memcpy(op->staging, (const void *)(uintptr_t)op->src.addr, op->bytes);
    return DM_OK;
}

/* Under dm.mu.  One side when the work runs. */
static unsigned char *
side_bytes(const char *api, const dm_side *side, size_t bytes, void *staging)
{
    switch (side->kind) {
    case DM_DEVICE:
        return device_bytes(api, side->addr, bytes, -1);
    case DM_PINNED:
        if (find(side->addr, bytes, true) == NULL) {
            report(api, "page-locked host memory freed before the work ran",
                   side->addr, bytes);
            return NULL;
        }
        return (unsigned char *)(uintptr_t)side->addr;
    case DM_HOST:
        return staging != NULL ? staging
                               : (unsigned char *)(uintptr_t)side->addr;
    }
    return NULL;
}

void
dm_op_run(const dm_op *op)
{
    unsigned char *dst, *src;

    if (op->bytes == 0) {
        return;
    }
    pthread_mutex_lock(&dm.mu);
    dst = side_bytes(op->api, &op->dst, op->bytes, NULL);
    if (op->fill) {
        if (dst != NULL) {
            memset(dst, op->value, op->bytes);
        }
    }
    else {
        src = side_bytes(op->api, &op->src, op->bytes, op->staging);
        if (dst != NULL && src != NULL) {
            memmove(dst, src, op->bytes);
        }
    }
    pthread_mutex_unlock(&dm.mu);
}

bool
dm_run_resolved(const char *api, int n, const unsigned long long *addrs,
                void **hosts, void (*fn)(void *ctx, void *const *hosts),
                void *ctx)
{
    bool ok = true;

    pthread_mutex_lock(&dm.mu);
    for (int i = 0; i < n && ok; i++) {
        if (addrs[i] == 0) {
            hosts[i] = NULL;
        }
        else if (find(addrs[i], 0, true) != NULL) {
            hosts[i] = (void *)(uintptr_t)addrs[i];
        }
        else {
            hosts[i] = device_bytes(api, addrs[i], 0, -1);
            ok = hosts[i] != NULL;
        }
    }
    if (ok) {
        fn(ctx, hosts);
    }
    pthread_mutex_unlock(&dm.mu);
    return ok;
}

void
dm_op_release(dm_op *op)
{
    free(op->staging);
    op->staging = NULL;
}

long long
dm_live(const char *kind)
{
    long long n = -1;

    if (kind == NULL) {
        return -1;
    }
    pthread_mutex_lock(&dm.mu);
    if (strcmp(kind, "alloc") == 0) {
        n = dm.allocs;
    }
    else if (strcmp(kind, "host_alloc") == 0) {
        n = dm.host_allocs;
    }
    else if (strcmp(kind, "alloc_bytes") == 0) {
        n = 0;
        for (int i = 0; i < DM_MAX_DEVICES; i++) {
            n += (long long)dm.used[i];
        }
    }
    else if (strcmp(kind, "ipc_exported") == 0) {
        n = dm.exported;
    }
    else if (strcmp(kind, "ipc_opened") == 0) {
        n = dm.opened;
    }
    else if (strcmp(kind, "ipc_event_cells") == 0) {
        n = dipc_cells_live();
    }
    else if (strcmp(kind, "bad_access") == 0) {
        n = atomic_load(&dm.bad_access);
    }
    else if (strcmp(kind, "guard_damage") == 0) {
        n = atomic_load(&dm.guard_damage);
        for (dm_alloc_rec *a = dm.live; a != NULL; a = a->next) {
            n += !guards_intact(a);
        }
    }
    pthread_mutex_unlock(&dm.mu);
    return n;
}

void
dm_reset_detectors(void)
{
    atomic_store(&dm.bad_access, 0);
    atomic_store(&dm.guard_damage, 0);
}

/* ---- interprocess sharing (double_ipc.h) ---- */

/* Under dm.mu (which every access to storage holds, so the bytes can
 * move).  a's storage, guards included, into a memfd of its own. */
static bool
to_memfd(dm_alloc_rec *a)
{
    size_t bytes = a->size + 2 * DM_GUARD;
    void *map;
    int fd = dipc_memfd("double-device-memory", bytes, &map);

    if (fd < 0) {
        return false;
    }
    memcpy(map, a->storage, bytes);
    free(a->storage);
    a->storage = map;
    a->mapped = true;
    a->fd = fd;
    return true;
}

enum dipc_result
dm_ipc_export(unsigned long long addr, unsigned char out[DIPC_HANDLE_BYTES],
              int *fd)
{
    enum dipc_result r = DIPC_NOT_BASE;

    pthread_mutex_lock(&dm.mu);
    for (dm_alloc_rec *a = dm.live; a != NULL; a = a->next) {
        if (!a->host && !a->imported && a->addr == addr) {
            r = a->mapped || to_memfd(a) ? DIPC_OK : DIPC_NO_MEMORY;
            if (r == DIPC_OK
                && !dipc_write_handle(out, DIPC_MEMORY, a->fd, a->device,
                                      a->id)) {
                r = DIPC_NO_MEMORY;
            }
            if (r == DIPC_OK && !a->exported) {
                a->exported = true;
                dm.exported++;
            }
            if (r == DIPC_OK && fd != NULL) {
                *fd = a->fd;
            }
            break;
        }
    }
    pthread_mutex_unlock(&dm.mu);
    return r;
}

enum dipc_result
dm_ipc_open(int device, const unsigned char h[DIPC_HANDLE_BYTES], int fd,
            unsigned long long *addr)
{
    enum dipc_result r;
    dm_alloc_rec *a;
    void *map;
    size_t bytes;

    if (device < 0 || device >= DM_MAX_DEVICES) {
        return DIPC_BAD_HANDLE;
    }
    /* Opened on this device already: the same address, one open more. */
    if (dipc_handle_ok(h, DIPC_MEMORY)) {
        long long pid = dipc_handle_pid(h);
        unsigned long long inode = dipc_handle_inode(h);

        pthread_mutex_lock(&dm.mu);
        for (a = dm.live; a != NULL; a = a->next) {
            if (a->imported && a->device == device && a->ipc_pid == pid
                && a->ipc_inode == inode) {
                a->opens++;
                *addr = a->addr;
                pthread_mutex_unlock(&dm.mu);
                return DIPC_OK;
            }
        }
        pthread_mutex_unlock(&dm.mu);
    }
    r = dipc_map_handle(h, DIPC_MEMORY, fd, &map, &bytes);
    if (r != DIPC_OK) {
        return r;
    }
    if (bytes <= 2 * DM_GUARD) {
        munmap(map, bytes);
        return DIPC_BAD_HANDLE;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        munmap(map, bytes);
        return DIPC_NO_MEMORY;
    }
    a->storage = map;
    a->mapped = true;
    a->size = bytes - 2 * DM_GUARD;
    a->fd = -1;
    a->device = device;
    a->imported = true;
    a->ipc_pid = dipc_handle_pid(h);
    a->ipc_inode = dipc_handle_inode(h);
    a->opens = 1;
    pthread_mutex_lock(&dm.mu);
    a->addr = device_range(device, a->size);
    if (a->addr == 0) {
        pthread_mutex_unlock(&dm.mu);
        release_storage(a);
        free(a);
        return DIPC_NO_MEMORY;
    }
    a->id = ++dm.ids;
    dm.opened++;
    a->next = dm.live;
    dm.live = a;
    *addr = a->addr;
    pthread_mutex_unlock(&dm.mu);
    return DIPC_OK;
}

bool
dm_ipc_close(const char *api, unsigned long long addr)
{
    dm_alloc_rec *a = NULL;

    pthread_mutex_lock(&dm.mu);
    for (dm_alloc_rec **p = &dm.live; *p != NULL; p = &(*p)->next) {
        if ((*p)->imported && (*p)->addr == addr) {
            a = *p;
            *p = a->next;
            break;
        }
    }
    if (a == NULL) {
        report(api, "not the base of memory opened from an IPC handle", addr,
               0);
        pthread_mutex_unlock(&dm.mu);
        return false;
    }
    if (--a->opens > 0) {
        /* Still open: back in the live list. */
        a->next = dm.live;
        dm.live = a;
        pthread_mutex_unlock(&dm.mu);
        return true;
    }
    release_storage(a);
    dm.opened--;
    a->next = dm.freed;
    dm.freed = a;
    pthread_mutex_unlock(&dm.mu);
    return true;
}

bool
dm_ipc_imported(unsigned long long addr)
{
    bool found = false;

    pthread_mutex_lock(&dm.mu);
    for (dm_alloc_rec *a = dm.live; a != NULL && !found; a = a->next) {
        found = a->imported && a->addr == addr;
    }
    pthread_mutex_unlock(&dm.mu);
    return found;
}
