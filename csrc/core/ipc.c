/*
 * ipc.c - device memory and events shared with other processes of the
 * machine: the handle's envelope, exports, imports, and the limbo where
 * what was shared waits until no other process holds it.
 *
 * A handle is the driver's own bytes (backend.h's ipc slots) inside an
 * envelope that says where they come from: the machine's boot, the
 * backend, the device's UUID, the exporting process (pid and start
 * time), the whole driver allocation and the part of it shared, and the
 * producer's lease (ipc_lease.c).  Every field is checked before a slot
 * sees the driver's bytes, so a handle of another boot, backend, device
 * or exited process, or garbage, is refused with the reason.
 *
 * The producer shares whole driver allocations (a block's segment, as
 * torch does) and keeps a shared block allocated, even once its Buffer
 * is gone, until no consumer holds its lease: acc_free hands such a
 * block here (the limbo), and acc_ipc_collect frees the ones let go (at
 * each new share, at empty_cache, and by accelerator.ipc_collect()).  A
 * consumer opens each driver allocation once per process (a mapping
 * shared by its Buffers) and closes it when the last goes.  Interprocess
 * events are kept the same way.
 */
#define _GNU_SOURCE
#include "ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAGIC "accipc1"
#define VERSION 1u

enum { KIND_MEMORY = 1, KIND_EVENT = 2 };

typedef struct envelope {
    char magic[8];
    uint32_t version;
    uint32_t kind;
    char backend[16];
    unsigned char boot[16];
    unsigned char uuid[16];
    int32_t pid;
    int32_t driver_fd;          /* the driver's descriptor, in the exporter */
    uint64_t start;
    uint64_t base;              /* the driver allocation, in the exporter */
    uint64_t alloc_size;
    uint64_t offset;
    uint64_t nbytes;
    int32_t lease_fd;
    uint32_t slot;
    uint64_t lease_inode;
    uint64_t generation;
    uint64_t serial;
    unsigned char driver[ACC_IPC_HANDLE_SIZE];
    uint64_t checksum;
} envelope;

_Static_assert(sizeof(envelope) == ACC_IPC_ENVELOPE_SIZE,
               "ACC_IPC_ENVELOPE_SIZE is the envelope's size");

/* What this process shared. */
typedef struct export_rec {
    struct export_rec *next;
    int kind;
    acc_block *block;           /* memory */
    size_t bytes;
    const acc_event *event;     /* the user's event, while it lives */
    acc_event kept;             /* its copy once let go */
    acc_lease_ref lease;
    int held;                   /* let go by the user, in the limbo */
} export_rec;

/* A driver allocation of another process, opened here. */
typedef struct mapping {
    struct mapping *next;
    int pid;                    /* 0: opened from a driver's handle alone */
    unsigned long long start;
    uint64_t base;              /* in the exporter */
    unsigned char driver[ACC_IPC_HANDLE_SIZE]; /* when pid is 0 */
    int device;
    uintptr_t here;
    int refs;
} mapping;

/* A handle open in this process (a handle opens once at a time). */
typedef struct opened {
    struct opened *next;
    int pid;
    unsigned long long start;
    uint64_t serial;
} opened;

struct acc_ipc_import {
    mapping *map;
    acc_lease *lease;
    envelope v;                 /* the handle, while open (open_once) */
};

/* An event opened from another process's handle. */
typedef struct imported_event {
    struct imported_event *next;
    const acc_event *e;
    acc_lease *lease;
    envelope v;                 /* the handle, while open (open_once) */
} imported_event;

static struct {
    pthread_mutex_t lock;
    /* Held across a mapping's lookup and the driver's open or close, so
     * that two threads never open one allocation twice (the drivers
     * refuse that) nor one open while another closes it. */
    pthread_mutex_t map_lock;
    export_rec *exports;
    mapping *maps;
    opened *opened;
    imported_event *events;
    uint64_t serial;
    unsigned char boot[16];
    int boot_read;
    unsigned long long start;   /* this process's */
} I = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .map_lock = PTHREAD_MUTEX_INITIALIZER,
};

static void unadmit(const envelope *v, acc_lease *lease);

/* Facts of processes ----------------------------------------------------- */

/* The start time of pid in clock ticks after boot (/proc/pid/stat field
 * 22); 0 when it has none (gone). */
static unsigned long long
start_time(int pid)
{
    char path[64], buf[1024];
    unsigned long long start = 0;
    const char *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: fields follow the
     * last ')'. */
    p = strrchr(buf, ')');
    if (p == NULL) {
        return 0;
    }
    p++;
    /* p is at the space before field 3; step to the one before 22. */
    for (int field = 3; field < 22 && p != NULL; field++) {
        p = strchr(p + 1, ' ');
    }
    if (p != NULL) {
        start = strtoull(p + 1, NULL, 10);
    }
    return start;
}

static int
hex_digit(int c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Under I.lock: this boot's id (/proc/sys/kernel/random/boot_id), which
 * tells this machine's boot from every other. */
static acc_status
boot_id(unsigned char out[16], acc_error *err)
{
    char text[64];
    ssize_t n;
    int fd, k = 0;

    if (!I.boot_read) {
        fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
        n = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
        if (fd >= 0) {
            close(fd);
        }
        for (ssize_t i = 0; i < n && k < 32; i++) {
            int d = hex_digit((unsigned char)text[i]);

            if (d >= 0) {
                I.boot[k / 2] = (unsigned char)(I.boot[k / 2] << 4 | d);
                k++;
            }
        }
        if (k != 32) {
            acc_error_set(err, ACC_ERR_STATE,
                          "cannot read this machine's boot id "
                          "(/proc/sys/kernel/random/boot_id), which handles "
                          "shared between processes carry");
            return ACC_ERR_STATE;
        }
        I.start = start_time(getpid());
        I.boot_read = 1;
    }
    memcpy(out, I.boot, 16);
    return ACC_OK;
}

static uint64_t
checksum(const envelope *v)
{
    const unsigned char *p = (const unsigned char *)v;
    uint64_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < offsetof(envelope, checksum); i++) {
        h = (h ^ p[i]) * 1099511628211ULL;
    }
    return h;
}

static acc_status
no_ipc(const acc_backend *b, acc_error *err)
{
    acc_error_set(err, ACC_ERR_UNSUPPORTED,
                  "backend %s does not support sharing memory or events "
                  "with other processes%s%s", b->device_type,
                  b->ipc_unsupported != NULL ? ": " : "",
                  b->ipc_unsupported != NULL ? b->ipc_unsupported : "");
    return ACC_ERR_UNSUPPORTED;
}

/* Exports ---------------------------------------------------------------- */

/* Under I.lock: the record of what is shared at key (a block or an
 * event), made with a live lease slot when new. */
static acc_status
export_of(int kind, const void *key, export_rec **out, acc_error *err)
{
    export_rec *r;
    acc_status st;

    for (r = I.exports; r != NULL; r = r->next) {
        if (!r->held && r->kind == kind
            && (kind == KIND_MEMORY ? (const void *)r->block
                                    : (const void *)r->event) == key) {
            *out = r;
            return ACC_OK;
        }
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return acc_error_host_memory(err);
    }
    st = acc_lease_slot_new(&r->lease, err);
    if (st != ACC_OK) {
        free(r);
        return st;
    }
    r->kind = kind;
    if (kind == KIND_MEMORY) {
        r->block = (acc_block *)key;
    }
    else {
        r->event = key;
    }
    r->next = I.exports;
    I.exports = r;
    *out = r;
    return ACC_OK;
}

/* The envelope's common part; under I.lock. */
static acc_status
seal(envelope *v, int kind, int device, const export_rec *r,
     const acc_ipc_handle *h, acc_error *err)
{
    const acc_device_properties *props;
    acc_status st = acc_get_device_properties(device, &props, err);

    if (st == ACC_OK) {
        st = boot_id(v->boot, err);
    }
    if (st != ACC_OK) {
        return st;
    }
    memcpy(v->magic, MAGIC, sizeof(v->magic));
    v->version = VERSION;
    v->kind = (uint32_t)kind;
    snprintf(v->backend, sizeof(v->backend), "%s", acc_device_type());
    memcpy(v->uuid, props->uuid, sizeof(v->uuid));
    v->pid = (int32_t)getpid();
    v->start = I.start;
    v->driver_fd = h->fd;
    memcpy(v->driver, h->bytes, sizeof(v->driver));
    v->lease_fd = r->lease.fd;
    v->slot = r->lease.slot;
    v->lease_inode = r->lease.inode;
    v->generation = r->lease.generation;
    v->serial = ++I.serial;
    v->checksum = checksum(v);
    acc_lease_pend(r->lease.slot);
    return ACC_OK;
}

acc_status
acc_ipc_export_memory(acc_block *b, uintptr_t ptr, size_t nbytes,
                      unsigned char *out, acc_error *err)
{
    const acc_device_properties *props;
    const acc_backend *be;
    acc_ipc_handle h;
    envelope v;
    export_rec *r;
    uintptr_t base;
    size_t size;
    int device;
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    be = acc_selected_backend();
    if (be->ipc_mem_export == NULL) {
        return no_ipc(be, err);
    }
    acc_ipc_collect();
    device = acc_block_device(b);
    acc_block_segment(b, &base, &size);
    memset(&h, 0, sizeof(h));
    h.fd = -1;
    st = ACC_SLOT(be, ipc_mem_export, err, device, base, &h, err);
    if (st != ACC_OK) {
        return st;
    }
    /* The device's facts are read (once) before the lock is taken. */
    st = acc_get_device_properties(device, &props, err);
    if (st != ACC_OK) {
        return st;
    }
    memset(&v, 0, sizeof(v));
    v.base = base;
    v.alloc_size = size;
    v.offset = ptr - base;
    v.nbytes = nbytes;
    pthread_mutex_lock(&I.lock);
    st = export_of(KIND_MEMORY, b, &r, err);
    if (st == ACC_OK) {
        st = seal(&v, KIND_MEMORY, device, r, &h, err);
    }
    if (st == ACC_OK) {
        r->bytes = acc_block_size(b);
        acc_block_set_shared(b, 1);
    }
    pthread_mutex_unlock(&I.lock);
    if (st == ACC_OK) {
        memcpy(out, &v, sizeof(v));
    }
    return st;
}

acc_status
acc_ipc_export_event(acc_event *e, unsigned char *out, acc_error *err)
{
    const acc_device_properties *props;
    const acc_backend *be;
    acc_ipc_handle h;
    envelope v;
    export_rec *r;
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    be = acc_selected_backend();
    if (be->ipc_event_export == NULL) {
        return no_ipc(be, err);
    }
    if (!(e->flags & ACC_EVENT_INTERPROCESS)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "only an Event(interprocess=True) can be shared with "
                      "other processes");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (e->flags & ACC_EVENT_IMPORTED) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "this event was opened from another process's handle: "
                      "share the original's handle instead");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (!acc_event_made(e)) {
        acc_error_set(err, ACC_ERR_STATE,
                      "record the event before sharing it: its handle "
                      "names a driver event, made at the first record");
        return ACC_ERR_STATE;
    }
    acc_ipc_collect();
    memset(&h, 0, sizeof(h));
    h.fd = -1;
    st = ACC_SLOT(be, ipc_event_export, err, e, &h, err);
    if (st != ACC_OK) {
        return st;
    }
    st = acc_get_device_properties(e->device, &props, err);
    if (st != ACC_OK) {
        return st;
    }
    memset(&v, 0, sizeof(v));
    pthread_mutex_lock(&I.lock);
    st = export_of(KIND_EVENT, e, &r, err);
    if (st == ACC_OK) {
        st = seal(&v, KIND_EVENT, e->device, r, &h, err);
    }
    pthread_mutex_unlock(&I.lock);
    if (st == ACC_OK) {
        memcpy(out, &v, sizeof(v));
    }
    return st;
}

/* The limbo ------------------------------------------------------------- */

/* The keep_block hook: a shared block freed by its owner waits here. */
static int
hold_block(acc_block *b)
{
    int held = 0;

    pthread_mutex_lock(&I.lock);
    for (export_rec *r = I.exports; r != NULL; r = r->next) {
        if (r->kind == KIND_MEMORY && r->block == b && !r->held) {
            r->held = 1;
            held = 1;
            break;
        }
    }
    pthread_mutex_unlock(&I.lock);
    return held;
}

/* The keep_event hook: an exported event being released waits in the
 * limbo, an imported one is destroyed and its lease dropped.  1 when
 * done here. */
static int
release_event(acc_event *e)
{
    imported_event *gone = NULL;
    int done = 0;

    pthread_mutex_lock(&I.lock);
    for (export_rec *r = I.exports; r != NULL; r = r->next) {
        if (r->kind == KIND_EVENT && r->event == e && !r->held) {
            r->kept = *e;
            r->event = NULL;
            r->held = 1;
            done = 1;
            break;
        }
    }
    for (imported_event **p = &I.events; !done && *p != NULL;
         p = &(*p)->next) {
        if ((*p)->e == e) {
            gone = *p;
            *p = gone->next;
            done = 1;
            break;
        }
    }
    pthread_mutex_unlock(&I.lock);
    if (gone != NULL) {
        e->backend->event_destroy(e);
        unadmit(&gone->v, gone->lease);
        free(gone);
    }
    return done;
}

void
acc_ipc_collect(void)
{
    export_rec *go = NULL, *r, **p;

    if (acc_forked()) {
        return;
    }
    /* Imports closed here whose work has completed go first. */
    if (acc_initialized()) {
        (void)acc_deferred_poll(0);
    }
    pthread_mutex_lock(&I.lock);
    for (p = &I.exports; (r = *p) != NULL;) {
        int live = r->kind == KIND_MEMORY ? !r->held : r->event != NULL;

        if (!live && acc_lease_slot_release(r->lease.slot)) {
            *p = r->next;
            r->next = go;
            go = r;
        }
        else {
            p = &r->next;
        }
    }
    pthread_mutex_unlock(&I.lock);
    while ((r = go) != NULL) {
        go = r->next;
        if (r->kind == KIND_MEMORY) {
            acc_block_set_shared(r->block, 0);
            acc_free(r->block);
        }
        else {
            r->kept.backend->event_destroy(&r->kept);
        }
        free(r);
    }
}

void
acc_ipc_held(long long *blocks, long long *bytes, long long *events,
             long long *imports)
{
    *blocks = *bytes = *events = *imports = 0;
    pthread_mutex_lock(&I.lock);
    for (const export_rec *r = I.exports; r != NULL; r = r->next) {
        if (r->held && r->kind == KIND_MEMORY) {
            ++*blocks;
            *bytes += (long long)r->bytes;
        }
        else if (r->held) {
            ++*events;
        }
    }
    for (const mapping *m = I.maps; m != NULL; m = m->next) {
        ++*imports;
    }
    for (const imported_event *ie = I.events; ie != NULL; ie = ie->next) {
        ++*imports;
    }
    pthread_mutex_unlock(&I.lock);
}

/* Imports ---------------------------------------------------------------- */

static acc_status
garbage(const char *why, acc_error *err)
{
    acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                  "not a handle of accelerator's shared memory or events "
                  "(%s): pass the bytes that Buffer.ipc_handle() or "
                  "Event.ipc_handle() made, unchanged", why);
    return ACC_ERR_INVALID_ARGUMENT;
}

/* Check everything a handle says before a driver sees it: *v its fields,
 * *device the local device of its UUID. */
static acc_status
unseal(const unsigned char *data, size_t size, int kind, envelope *v,
       int *device, acc_error *err)
{
    unsigned char boot[16];
    const acc_device_properties *props;
    unsigned long long start;
    acc_status st;

    if (size != sizeof(*v)) {
        char why[64];

        snprintf(why, sizeof(why), "%zu bytes, a handle has %zu", size,
                 sizeof(*v));
        return garbage(why, err);
    }
    memcpy(v, data, sizeof(*v));
    if (memcmp(v->magic, MAGIC, sizeof(v->magic)) != 0) {
        return garbage("it does not start with the handles' mark", err);
    }
    if (v->version != VERSION) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the handle is of version %u of the format; this "
                      "accelerator reads version %u: both processes must "
                      "run the same accelerator", v->version, VERSION);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (v->checksum != checksum(v)) {
        return garbage("its checksum does not match: it was changed", err);
    }
    if (v->kind != (uint32_t)kind) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "this is the handle of %s: open it with %s",
                      v->kind == KIND_EVENT ? "an event" : "memory",
                      v->kind == KIND_EVENT ? "Event.from_ipc_handle()"
                                            : "Buffer.from_ipc_handle()");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    v->backend[sizeof(v->backend) - 1] = '\0';
    if (strcmp(v->backend, acc_device_type()) != 0) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the handle is of backend %s, this process runs %s: "
                      "select the same backend in both processes "
                      "(ACCELERATOR_BACKEND)", v->backend,
                      acc_device_type());
        return ACC_ERR_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&I.lock);
    st = boot_id(boot, err);
    pthread_mutex_unlock(&I.lock);
    if (st != ACC_OK) {
        return st;
    }
    if (memcmp(boot, v->boot, sizeof(boot)) != 0) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the handle comes from another machine, or from "
                      "another boot of this one: memory is shared only "
                      "between processes of one machine while it runs");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (v->pid == (int32_t)getpid() && v->start == I.start) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the handle was made in this very process: use the "
                      "%s itself (a handle opens in other processes only)",
                      kind == KIND_EVENT ? "Event" : "Buffer");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    start = v->pid > 0 ? start_time(v->pid) : 0;
    if (start == 0 || start != v->start) {
        acc_error_set(err, ACC_ERR_STATE,
                      "the process that shared this (pid %d) has exited: "
                      "a handle opens only while its producer runs",
                      (int)v->pid);
        return ACC_ERR_STATE;
    }
    for (int d = 0; d < acc_device_count(); d++) {
        if (acc_get_device_properties(d, &props, err) == ACC_OK
            && memcmp(props->uuid, v->uuid, sizeof(v->uuid)) == 0) {
            *device = d;
            return acc_check_device_ready(d, err);
        }
    }
    acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                  "no device of this process has the UUID of the handle's "
                  "device (%02x%02x%02x%02x-...): the device is hidden here "
                  "(a *_VISIBLE_DEVICES variable?) or belongs to another "
                  "backend", v->uuid[0], v->uuid[1], v->uuid[2], v->uuid[3]);
    return ACC_ERR_INVALID_ARGUMENT;
}

static void
origin_of(const envelope *v, acc_ipc_origin *o)
{
    o->pid = v->pid;
    o->start = v->start;
    o->lease.fd = v->lease_fd;
    o->lease.inode = v->lease_inode;
    o->lease.slot = v->slot;
    o->lease.generation = v->generation;
}

/* Under I.lock: refuse a handle open here already; else remember it
 * until forget(). */
static acc_status
open_once(const envelope *v, acc_error *err)
{
    opened *o;

    for (o = I.opened; o != NULL; o = o->next) {
        if (o->pid == v->pid && o->start == v->start
            && o->serial == v->serial) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                          "this handle is open in this process already: a "
                          "handle opens once at a time (use the Buffer or "
                          "Event it gave, or ask the producer for another)");
            return ACC_ERR_INVALID_ARGUMENT;
        }
    }
    o = calloc(1, sizeof(*o));
    if (o == NULL) {
        return acc_error_host_memory(err);
    }
    o->pid = v->pid;
    o->start = v->start;
    o->serial = v->serial;
    o->next = I.opened;
    I.opened = o;
    return ACC_OK;
}

/* Under I.lock: forget a handle whose open failed or was closed. */
static void
forget(const envelope *v)
{
    for (opened **p = &I.opened; *p != NULL; p = &(*p)->next) {
        opened *o = *p;

        if (o->pid == v->pid && o->start == v->start
            && o->serial == v->serial) {
            *p = o->next;
            free(o);
            return;
        }
    }
}

/* This process's descriptor of the driver's: fd (the caller's, which
 * stays theirs: a copy), else taken from the exporter (pidfd_getfd,
 * Linux 5.6, or its /proc fd entry); -1 when the handle needs none. */
static acc_status
driver_fd(const envelope *v, int fd, int *out, acc_error *err)
{
    char path[64];

    *out = -1;
    if (v->driver_fd < 0) {
        return ACC_OK;
    }
    if (fd >= 0) {
        *out = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (*out < 0) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                          "the descriptor %d passed with the handle is not "
                          "open here: %s", fd, strerror(errno));
            return ACC_ERR_INVALID_ARGUMENT;
        }
        return ACC_OK;
    }
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
    {
        int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)v->pid, 0);

        if (pidfd >= 0) {
            *out = (int)syscall(SYS_pidfd_getfd, pidfd, v->driver_fd, 0);
            close(pidfd);
            if (*out >= 0) {
                return ACC_OK;
            }
        }
    }
#endif
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)v->pid,
             (int)v->driver_fd);
    *out = open(path, O_RDWR | O_CLOEXEC);
    if (*out >= 0) {
        return ACC_OK;
    }
    acc_error_set(err, ACC_ERR_STATE,
                  "the handle rests on a file descriptor of the producer "
                  "(pid %d, descriptor %d) that this process cannot take "
                  "(pidfd_getfd and /proc: %s): send the descriptor with "
                  "the handle (socket.send_fds, or multiprocessing, which "
                  "does it) and pass it as fd=", (int)v->pid,
             (int)v->driver_fd, strerror(errno));
    return ACC_ERR_STATE;
}

/* Everything an open does before the driver: the backend can open (slot
 * present), the handle's checks (unseal), once per process, and the
 * producer's lease taken.  On failure nothing is left behind. */
static acc_status
admit(const unsigned char *data, size_t size, int kind, int has_slot,
      envelope *v, int *device, acc_lease **lease, acc_error *err)
{
    acc_ipc_origin origin;
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    if (!has_slot) {
        return no_ipc(acc_selected_backend(), err);
    }
    st = unseal(data, size, kind, v, device, err);
    if (st == ACC_OK && kind == KIND_MEMORY
        && (v->offset > v->alloc_size
            || v->nbytes > v->alloc_size - v->offset)) {
        st = garbage("its range lies outside its allocation", err);
    }
    if (st != ACC_OK) {
        return st;
    }
    pthread_mutex_lock(&I.lock);
    st = open_once(v, err);
    pthread_mutex_unlock(&I.lock);
    if (st != ACC_OK) {
        return st;
    }
    origin_of(v, &origin);
    st = acc_lease_take(&origin, lease, err);
    if (st != ACC_OK) {
        pthread_mutex_lock(&I.lock);
        forget(v);
        pthread_mutex_unlock(&I.lock);
    }
    return st;
}

/* Undo admit() after a later failure: the handle may be tried again. */
static void
unadmit(const envelope *v, acc_lease *lease)
{
    acc_lease_drop(lease);
    pthread_mutex_lock(&I.lock);
    forget(v);
    pthread_mutex_unlock(&I.lock);
}

acc_status
acc_ipc_open_memory(const unsigned char *data, size_t size, int fd,
                    int *device, uintptr_t *ptr, size_t *nbytes,
                    acc_ipc_import **out, acc_error *err)
{
    const acc_backend *be = acc_selected_backend();
    acc_ipc_import *imp;
    acc_ipc_handle h;
    mapping *m;
    envelope v;
    acc_status st;

    imp = calloc(1, sizeof(*imp));
    if (imp == NULL) {
        return acc_error_host_memory(err);
    }
    st = admit(data, size, KIND_MEMORY,
               be != NULL && be->ipc_mem_open != NULL, &v, device,
               &imp->lease, err);
    if (st != ACC_OK) {
        free(imp);
        return st;
    }
    pthread_mutex_lock(&I.map_lock);
    pthread_mutex_lock(&I.lock);
    for (m = I.maps; m != NULL; m = m->next) {
        if (m->pid == v.pid && m->pid != 0 && m->start == v.start
            && m->base == v.base) {
            m->refs++;
            break;
        }
    }
    pthread_mutex_unlock(&I.lock);
    if (m == NULL) {
        m = calloc(1, sizeof(*m));
        if (m == NULL) {
            pthread_mutex_unlock(&I.map_lock);
            st = acc_error_host_memory(err);
            goto fail;
        }
        memcpy(h.bytes, v.driver, sizeof(h.bytes));
        st = driver_fd(&v, fd, &h.fd, err);
        if (st == ACC_OK) {
            st = ACC_SLOT(be, ipc_mem_open, err, *device, &h, &m->here, err);
        }
        if (h.fd >= 0) {
            close(h.fd);
        }
        if (st != ACC_OK) {
            pthread_mutex_unlock(&I.map_lock);
            free(m);
            goto fail;
        }
        m->pid = v.pid;
        m->start = v.start;
        m->base = v.base;
        m->device = *device;
        m->refs = 1;
        pthread_mutex_lock(&I.lock);
        m->next = I.maps;
        I.maps = m;
        pthread_mutex_unlock(&I.lock);
    }
    pthread_mutex_unlock(&I.map_lock);
    imp->map = m;
    imp->v = v;
    *ptr = m->here + (uintptr_t)v.offset;
    *nbytes = (size_t)v.nbytes;
    *out = imp;
    return ACC_OK;
fail:
    unadmit(&v, imp->lease);
    free(imp);
    return st;
}

void
acc_ipc_import_close(acc_ipc_import *imp)
{
    mapping *m = imp->map, *gone = NULL;

    pthread_mutex_lock(&I.map_lock);
    pthread_mutex_lock(&I.lock);
    if (--m->refs == 0) {
        for (mapping **p = &I.maps; *p != NULL; p = &(*p)->next) {
            if (*p == m) {
                *p = m->next;
                gone = m;
                break;
            }
        }
    }
    pthread_mutex_unlock(&I.lock);
    if (gone != NULL && !acc_forked()) {
        acc_selected_backend()->ipc_mem_close(gone->device, gone->here);
    }
    pthread_mutex_unlock(&I.map_lock);
    free(gone);
    if (imp->lease != NULL) {
        unadmit(&imp->v, imp->lease);   /* the handle may open again */
    }
    free(imp);
}

acc_status
acc_ipc_open_driver_memory(int device, const unsigned char *driver,
                           size_t size, size_t offset, size_t nbytes, int fd,
                           uintptr_t *ptr, acc_ipc_import **out,
                           acc_error *err)
{
    const acc_backend *be;
    acc_ipc_import *imp;
    acc_ipc_handle h;
    mapping *m;
    acc_status st = acc_check_device_ready(device, err);

    if (st != ACC_OK) {
        return st;
    }
    be = acc_selected_backend();
    if (be->ipc_mem_open == NULL) {
        return no_ipc(be, err);
    }
    if (size != ACC_IPC_HANDLE_SIZE) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "a driver's interprocess memory handle has %d bytes, "
                      "not %zu", ACC_IPC_HANDLE_SIZE, size);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (nbytes == 0 || offset > SIZE_MAX - nbytes) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "nbytes must be positive and offset + nbytes must "
                      "fit in the address space (got offset %zu, nbytes "
                      "%zu)", offset, nbytes);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    imp = calloc(1, sizeof(*imp));
    if (imp == NULL) {
        return acc_error_host_memory(err);
    }
    pthread_mutex_lock(&I.map_lock);
    pthread_mutex_lock(&I.lock);
    for (m = I.maps; m != NULL; m = m->next) {
        if (m->pid == 0 && m->device == device
            && memcmp(m->driver, driver, sizeof(m->driver)) == 0) {
            m->refs++;
            break;
        }
    }
    pthread_mutex_unlock(&I.lock);
    if (m == NULL) {
        m = calloc(1, sizeof(*m));
        if (m == NULL) {
            pthread_mutex_unlock(&I.map_lock);
            free(imp);
            return acc_error_host_memory(err);
        }
        memcpy(h.bytes, driver, sizeof(h.bytes));
        h.fd = -1;
        if (fd >= 0 && (h.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                          "the descriptor %d passed with the handle is not "
                          "open here: %s", fd, strerror(errno));
            st = ACC_ERR_INVALID_ARGUMENT;
        }
        else {
            st = ACC_SLOT(be, ipc_mem_open, err, device, &h, &m->here, err);
            if (h.fd >= 0) {
                close(h.fd);
            }
        }
        if (st != ACC_OK) {
            pthread_mutex_unlock(&I.map_lock);
            free(m);
            free(imp);
            return st;
        }
        memcpy(m->driver, driver, sizeof(m->driver));
        m->device = device;
        m->refs = 1;
        pthread_mutex_lock(&I.lock);
        m->next = I.maps;
        I.maps = m;
        pthread_mutex_unlock(&I.lock);
    }
    pthread_mutex_unlock(&I.map_lock);
    imp->map = m;
    st = acc_check_foreign_range(device, m->here + offset, nbytes,
                                 "Buffer.from_driver_ipc_handle()", err);
    if (st != ACC_OK) {
        acc_ipc_import_close(imp);
        return st;
    }
    *ptr = m->here + offset;
    *out = imp;
    return ACC_OK;
}

acc_status
acc_ipc_open_event(const unsigned char *data, size_t size, int fd,
                   acc_event *e, acc_error *err)
{
    const acc_backend *be = acc_selected_backend();
    imported_event *ie;
    acc_ipc_handle h;
    acc_event made;
    envelope v;
    int device;
    acc_status st;

    ie = calloc(1, sizeof(*ie));
    if (ie == NULL) {
        return acc_error_host_memory(err);
    }
    st = admit(data, size, KIND_EVENT,
               be != NULL && be->ipc_event_open != NULL, &v, &device,
               &ie->lease, err);
    if (st != ACC_OK) {
        free(ie);
        return st;
    }
    memcpy(h.bytes, v.driver, sizeof(h.bytes));
    st = driver_fd(&v, fd, &h.fd, err);
    if (st == ACC_OK) {
        acc_event_init(&made, ACC_EVENT_INTERPROCESS | ACC_EVENT_IMPORTED
                              | (e->flags & ACC_EVENT_BLOCKING));
        made.backend = be;
        made.device = device;
        st = ACC_SLOT(be, ipc_event_open, err, &h, &made, err);
        if (h.fd >= 0) {
            close(h.fd);
        }
    }
    if (st != ACC_OK) {
        unadmit(&v, ie->lease);
        free(ie);
        return st;
    }
    e->backend = made.backend;
    e->device = made.device;
    e->flags = made.flags;
    e->handle = made.handle;
    e->native = made.native;
    atomic_store_explicit(&e->state, ACC_EVENT_MADE, memory_order_release);
    ie->e = e;
    ie->v = v;
    pthread_mutex_lock(&I.lock);
    ie->next = I.events;
    I.events = ie;
    pthread_mutex_unlock(&I.lock);
    return ACC_OK;
}

acc_status
acc_ipc_describe(const unsigned char *data, size_t size,
                 acc_ipc_description *out, acc_error *err)
{
    envelope v;

    if (size != sizeof(v)) {
        char why[64];

        snprintf(why, sizeof(why), "%zu bytes, a handle has %zu", size,
                 sizeof(v));
        return garbage(why, err);
    }
    memcpy(&v, data, sizeof(v));
    if (memcmp(v.magic, MAGIC, sizeof(v.magic)) != 0
        || v.checksum != checksum(&v)) {
        return garbage("its mark or checksum does not match", err);
    }
    memset(out, 0, sizeof(*out));
    out->event = v.kind == KIND_EVENT;
    memcpy(out->backend, v.backend, sizeof(v.backend));
    out->backend[sizeof(v.backend) - 1] = '\0';
    memcpy(out->uuid, v.uuid, sizeof(out->uuid));
    out->pid = v.pid;
    out->driver_fd = v.driver_fd;
    out->alloc_size = v.alloc_size;
    out->offset = v.offset;
    out->nbytes = v.nbytes;
    out->serial = v.serial;
    memcpy(out->driver, v.driver, sizeof(out->driver));
    return ACC_OK;
}

/* Fork and exit ---------------------------------------------------------- */

static void
after_fork_child(void)
{
    /* What the parent shared is the parent's: the child neither frees
     * nor closes it (the allocator leaves the parent's memory alone). */
    pthread_mutex_init(&I.lock, NULL);
    pthread_mutex_init(&I.map_lock, NULL);
    I.exports = NULL;
    I.maps = NULL;
    I.opened = NULL;
    I.events = NULL;
    I.boot_read = 0;
    acc_lease_after_fork_child();
}

static void
empty_cache(void)
{
    acc_ipc_collect();
}

__attribute__((constructor)) static void
register_hooks(void)
{
    static acc_hooks hooks = {
        .after_fork_child = after_fork_child,
        .empty_cache = empty_cache,
        .keep_block = hold_block,
        .keep_event = release_event,
    };

    acc_hooks_register(&hooks);
}
