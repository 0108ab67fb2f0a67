/*
 * level_zero.c - the Level Zero backend (device type "xpu").
 *
 * The loader (libze_loader.so.1, or $ACCELERATOR_ZE_LIBRARY) is opened
 * with dlopen and its functions resolved once from the list in ze_api.h.
 * Devices are the GPUs of every driver, in loader order.  Each driver gets
 * one context, made on first use (probe makes none).  A stream is an
 * immediate command list; each device has one default stream shared by
 * all threads.
 *
 * Ordering.  Lists ask for ZE_COMMAND_QUEUE_FLAG_IN_ORDER only when the
 * driver reports spec 1.7 or later.  Without it a list may run commands
 * out of order, so everything this backend appends is a barrier (a
 * barrier runs after all earlier commands, and later commands run after
 * it) or follows one: records, waits (a barrier with a wait list), the
 * markers used to synchronize, copies and fills.
 *
 * Events.  Native events ("slots") come from event pools of this backend
 * (HOST_VISIBLE, plus KERNEL_TIMESTAMP for timing events), created lazily
 * and recycled.  A slot may be reset and reused only when it has signaled
 * and nothing can still wait on it (its "waiters": host threads blocking
 * on it, waits appended on lists, a stream's tail).
 *
 * Tails.  Every command this backend appends signals a slot, and the last
 * one becomes the stream's tail: the stream answers query() from it
 * without waiting and without appending anything.  Work that others append
 * through the handle after it is not seen by query() unless the driver
 * offers zeCommandListHostSynchronize (spec 1.6); synchronize() always
 * appends a marker, so it waits for that work too.
 *
 * Waits.  A wait is a barrier that waits for the event's slot and signals
 * a fresh slot; the pair is kept as a "link" of the driver until the fresh
 * slot has signaled, which proves the wait has run: then the event's slot
 * is free to be reset (links are resolved whenever slots run short, so a
 * loop that records and waits without ever synchronizing stays bounded).
 * Events cannot cross drivers (contexts): a wait on another driver's event
 * waits instead for a host-signalled slot of the stream's driver, which
 * the bridge thread signals once the event has (see lz_bridge).
 *
 * Wrapped streams (stream_wrap is NULL: the handle is enough) have no
 * native data.  A handle of one of our own lists is looked up and shares
 * that stream's state; any other list is serialised by one lock and has no
 * tail, so query() appends a marker and polls it once.  It must be an
 * immediate command list of this backend's context.
 *
 * Destroying a stream must not wait for its work, and Level Zero forbids
 * destroying a busy list: the list goes to its device's graveyard behind
 * a marker, and a reaper thread (running only while the graveyard is not
 * empty) destroys it once the marker signals.
 *
 * Locks, always taken in this order: lz.default_lock (default streams),
 * lz.reg_lock (stream registry, graveyard), a stream's lock (its list and
 * tail; lz.foreign_lock for foreign lists), lz.lock (contexts, pools,
 * slots, links, bridges).  Functions named *_locked expect lz.lock held.
 * No lock is held while blocking in the driver, except by shutdown while
 * it drains the lists.
 */
#define _POSIX_C_SOURCE 200809L

#include "../backend.h"
#include "ze_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LZ_BACKEND "xpu"
#define LZ_LIBRARY "libze_loader.so.1"
#define LZ_MAX_DRIVERS 16
/* Events per pool; pools are added as needed. */
#define LZ_POOL_EVENTS 64
/* How long destroying a stream waits for an idle list's marker, so that
 * the list goes at once rather than later on the reaper thread. */
#define LZ_DESTROY_GRACE_NS 5000000ull
/* How long shutdown waits for each list to drain before leaving the
 * driver's objects alone (destroying busy objects is undefined). */
#define LZ_SHUTDOWN_WAIT_NS 2000000000ull
/* How long the reaper thread waits at a time, so that it notices a
 * shutdown and lists whose marker could not be appended. */
#define LZ_REAPER_WAIT_NS 50000000ull
/* How long the bridge thread waits for its oldest event at a time: the
 * most a bridge whose event completes out of turn is late. */
#define LZ_BRIDGE_WAIT_NS 1000000ull

/* Types ---------------------------------------------------------------- */

typedef struct lz_slot {
    ze_event_handle_t event;
    int driver;
    int timing;
    int armed;             /* a signal was appended since the last reset */
    int waiters;           /* waits (device or host) that may still look */
    struct lz_slot *next;  /* free or retired list */
} lz_slot;

typedef struct lz_pool {
    ze_event_pool_handle_t handle;
    int timing;
    uint32_t created;      /* events made so far, in index order */
    lz_slot slots[LZ_POOL_EVENTS];
    struct lz_pool *next;
} lz_pool;

/* A wait appended on a list: `waited` is counted in use until `done`,
 * signalled by the waiting barrier, has signaled.  The link owns done. */
typedef struct lz_link {
    lz_slot *waited;
    lz_slot *done;
} lz_link;

/* A wait across drivers: the host signals `to` (the stream driver's
 * slot that the stream waits for) once `from` has signaled.  The bridge
 * owns to and counts itself a waiter of from. */
typedef struct lz_bridge {
    lz_slot *from;
    lz_slot *to;
} lz_bridge;

typedef struct lz_driver {
    ze_driver_handle_t handle;
    uint32_t api_version;
    uint32_t driver_version;
    ze_context_handle_t context;  /* made on first use */
    int in_order;          /* ask for IN_ORDER lists */
    int host_sync;         /* zeCommandListHostSynchronize works */
    int stuck;             /* shutdown found busy lists: leak, not destroy */
    lz_pool *pools;
    lz_slot *free[2];      /* by timing; reset slots */
    lz_slot *retired;      /* no owner; reset once safe */
    lz_link *links;        /* waits not yet known to have run */
    size_t nlinks, caplinks;
} lz_driver;

typedef struct lz_stream {
    ze_command_list_handle_t list;
    int device;
    int is_default;
    pthread_mutex_t lock;
    lz_slot *tail;         /* signalled by our last barrier; counted */
    int pins;              /* device_synchronize in progress */
    lz_slot *grave_marker; /* set once destroyed: idle when signaled */
    struct lz_stream *next;
} lz_stream;

typedef struct lz_device {
    ze_device_handle_t handle;
    int driver;
    uint32_t ordinal;      /* a compute command queue group */
    ze_device_properties_t props;
    double ns_per_tick;
    uint64_t ts_mask;      /* kernel timestamp valid bits */
    unsigned long long total_memory;
    lz_stream *default_stream;
    lz_stream *streams;    /* live ones, default included */
    lz_stream *graveyard;  /* destroyed, waiting to go idle */
    int sysman;            /* memory modules: 0 unknown, 1 found, -1 not
                            * offered (under sysman_lock) */
    zes_mem_handle_t *mems;  /* the modules located on the device */
    uint32_t nmems;
} lz_device;

typedef struct lz_event {
    lz_slot *slot;         /* under lz.lock */
    int device;
    int timing;
} lz_event;

static struct {
#define LZ_FIELD(name, params) acc_pfn_##name name;
#define LZ_OPTIONAL_FIELD(name, version, params) acc_pfn_##name name;
    ACC_ZE_FUNCTIONS(LZ_FIELD)
    ACC_ZE_OPTIONAL_FUNCTIONS(LZ_OPTIONAL_FIELD)
#undef LZ_OPTIONAL_FIELD
#undef LZ_FIELD
} fn;

static struct {
    void *lib;
    int opened;            /* dlopen worked (even if symbols lacked) */
    int ready;             /* probe succeeded */
    int shut;              /* shutdown ran: no more driver calls */
    char library[512];
    int ndrivers;
    lz_driver drivers[LZ_MAX_DRIVERS];
    int ndevices;
    lz_device devices[ACC_MAX_DEVICES];
    pthread_mutex_t default_lock;
    pthread_mutex_t reg_lock;
    pthread_mutex_t foreign_lock;
    pthread_mutex_t lock;
    pthread_mutex_t sysman_lock;
    int reaper_running;    /* under reg_lock */
    int reaper_stop;
    pthread_cond_t reaper_cv;
    lz_bridge *bridges;    /* under lock */
    size_t nbridges, capbridges;
    int bridge_coming;     /* bridges being added: keep running */
    int bridge_running;
    int bridge_stop;
    pthread_cond_t bridge_cv;
} lz = {
    .default_lock = PTHREAD_MUTEX_INITIALIZER,
    .reg_lock = PTHREAD_MUTEX_INITIALIZER,
    .reaper_cv = PTHREAD_COND_INITIALIZER,
    .foreign_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .sysman_lock = PTHREAD_MUTEX_INITIALIZER,
    .bridge_cv = PTHREAD_COND_INITIALIZER,
};

/* Errors --------------------------------------------------------------- */

static const char *
lz_result_name(ze_result_t r)
{
    switch (r) {
#define LZ_NAME_CASE(name, value) \
    case name:                    \
        return #name;
        ACC_ZE_RESULTS(LZ_NAME_CASE)
#undef LZ_NAME_CASE
    default:
        return NULL;
    }
}

/* Fill err for a failing call of `api`; driver < 0 when none applies. */
static acc_status
lz_fail(acc_error *err, const char *api, ze_result_t r, int driver)
{
    acc_status status = ACC_ERR_DRIVER;
    if (r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
        || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY) {
        status = ACC_ERR_OUT_OF_MEMORY;
    }
    acc_error_driver(err, LZ_BACKEND, api, (long long)r, lz_result_name(r),
                     status);
    /* Spec 1.6 drivers keep a thread-local description of the error. */
    const char *text = NULL;
    if (fn.zeDriverGetLastErrorDescription != NULL && driver >= 0
        && lz.drivers[driver].api_version >= ACC_ZE_MAKE_VERSION(1, 6)
        && fn.zeDriverGetLastErrorDescription(lz.drivers[driver].handle,
                                              &text) == ZE_RESULT_SUCCESS
        && text != NULL && *text != '\0') {
        size_t used = strlen(err->message);
        acc_format(err->message + used, sizeof(err->message) - used,
                   " (driver: %s)", text);
    }
    acc_trace("xpu: %s failed: %s (0x%x)", api,
              lz_result_name(r) ? lz_result_name(r) : "unknown result",
              (unsigned)r);
    return status;
}

static acc_status
lz_no_memory(acc_error *err)
{
    acc_error_set(err, ACC_ERR_HOST_MEMORY,
                  "out of host memory in the xpu backend");
    return ACC_ERR_HOST_MEMORY;
}

static int
lz_driver_of(int device)
{
    return lz.devices[device].driver;
}

/* Contexts and slots (lz.lock held) ------------------------------------ */

static acc_status
lz_context_locked(int d, ze_context_handle_t *out, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    if (drv->context == NULL) {
        ze_context_desc_t desc = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
        ze_context_handle_t ctx = NULL;
        ze_result_t r = fn.zeContextCreate(drv->handle, &desc, &ctx);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeContextCreate", r, d);
        }
        drv->context = ctx;
        acc_trace("xpu: created the context of driver %d", d);
    }
    *out = drv->context;
    return ACC_OK;
}

/* Give up ownership of s: free now, or retired until it is safe. */
static void
lz_retire_locked(lz_slot *s)
{
    lz_driver *drv = &lz.drivers[s->driver];
    if (!s->armed && s->waiters == 0) {
        s->next = drv->free[s->timing];
        drv->free[s->timing] = s;
    }
    else {
        s->next = drv->retired;
        drv->retired = s;
    }
}

static int lz_pump_bridges_locked(int full);

/* Resolve the links of driver d whose wait has run, then reset the
 * retired slots that nothing can still use.  Never blocks. */
static void
lz_reclaim_locked(int d)
{
    lz_driver *drv = &lz.drivers[d];
    size_t keep = 0;
    /* Waits across drivers hold slots too: move them on first. */
    lz_pump_bridges_locked(1);
    for (size_t i = 0; i < drv->nlinks; i++) {
        lz_link *k = &drv->links[i];
        if (fn.zeEventQueryStatus(k->done->event) == ZE_RESULT_SUCCESS) {
            k->waited->waiters--;
            lz_retire_locked(k->done);
        }
        else {
            drv->links[keep++] = *k;
        }
    }
    drv->nlinks = keep;
    for (lz_slot **p = &drv->retired; *p != NULL;) {
        lz_slot *s = *p;
        if (s->waiters == 0
            && fn.zeEventQueryStatus(s->event) == ZE_RESULT_SUCCESS
            && fn.zeEventHostReset(s->event) == ZE_RESULT_SUCCESS) {
            *p = s->next;
            s->armed = 0;
            s->next = drv->free[s->timing];
            drv->free[s->timing] = s;
            continue;
        }
        p = &s->next;
    }
}

static acc_status
lz_acquire_locked(int d, int timing, lz_slot **out, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    if (drv->free[timing] == NULL) {
        lz_reclaim_locked(d);
    }
    lz_slot *s = drv->free[timing];
    if (s != NULL) {
        drv->free[timing] = s->next;
        s->next = NULL;
        *out = s;
        return ACC_OK;
    }
    lz_pool *pool = drv->pools;
    while (pool != NULL
           && (pool->timing != timing || pool->created == LZ_POOL_EVENTS)) {
        pool = pool->next;
    }
    if (pool == NULL) {
        ze_context_handle_t ctx;
        acc_status st = lz_context_locked(d, &ctx, err);
        if (st != ACC_OK) {
            return st;
        }
        pool = calloc(1, sizeof(*pool));
        if (pool == NULL) {
            return lz_no_memory(err);
        }
        /* No device list: the pool is visible to every device of the
         * context, so a stream can wait on another device's event. */
        ze_event_pool_desc_t desc = {
            ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
            ZE_EVENT_POOL_FLAG_HOST_VISIBLE
                | (timing ? ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP : 0),
            LZ_POOL_EVENTS,
        };
        ze_result_t r = fn.zeEventPoolCreate(ctx, &desc, 0, NULL,
                                             &pool->handle);
        if (r != ZE_RESULT_SUCCESS) {
            free(pool);
            return lz_fail(err, "zeEventPoolCreate", r, d);
        }
        pool->timing = timing;
        pool->next = drv->pools;
        drv->pools = pool;
    }
    s = &pool->slots[pool->created];
    ze_event_desc_t desc = {
        ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, pool->created,
        ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST,
    };
    ze_result_t r = fn.zeEventCreate(pool->handle, &desc, &s->event);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventCreate", r, d);
    }
    pool->created++;
    s->driver = d;
    s->timing = timing;
    *out = s;
    return ACC_OK;
}

/* Room for one more link of driver d, so that adding it cannot fail
 * after the wait it stands for was appended. */
static acc_status
lz_reserve_link_locked(int d, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    if (drv->nlinks == drv->caplinks) {
        size_t cap = drv->caplinks ? 2 * drv->caplinks : 16;
        lz_link *links = realloc(drv->links, cap * sizeof(*links));
        if (links == NULL) {
            return lz_no_memory(err);
        }
        drv->links = links;
        drv->caplinks = cap;
    }
    return ACC_OK;
}

/* Make s (just appended on st's list) st's tail (st->lock held). */
static void
lz_set_tail_locked(lz_stream *st, lz_slot *s)
{
    if (st == NULL) {
        return;
    }
    s->waiters++;
    if (st->tail != NULL) {
        st->tail->waiters--;
    }
    st->tail = s;
}

static acc_status
lz_acquire(int d, int timing, lz_slot **out, acc_error *err)
{
    pthread_mutex_lock(&lz.lock);
    acc_status st = lz_acquire_locked(d, timing, out, err);
    pthread_mutex_unlock(&lz.lock);
    return st;
}

static void
lz_unwait(lz_slot *s)
{
    pthread_mutex_lock(&lz.lock);
    s->waiters--;
    pthread_mutex_unlock(&lz.lock);
}

static void
lz_unwait_retire(lz_slot *s)
{
    pthread_mutex_lock(&lz.lock);
    s->waiters--;
    lz_retire_locked(s);
    pthread_mutex_unlock(&lz.lock);
}

static void
lz_retire(lz_slot *s)
{
    pthread_mutex_lock(&lz.lock);
    lz_retire_locked(s);
    pthread_mutex_unlock(&lz.lock);
}

/* Streams --------------------------------------------------------------- */

/* The list an operation appends to, and how to serialise it. */
typedef struct lz_target {
    ze_command_list_handle_t list;
    lz_stream *st;         /* NULL for a list made elsewhere */
    pthread_mutex_t *lock;
    int device;
    int driver;
    int pinned;            /* st found by handle: release with _done */
} lz_target;

static lz_target
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

static lz_target
lz_target_of_stream(lz_stream *st)
{
    lz_target t = {st->list, st, &st->lock, st->device,
                   lz_driver_of(st->device), 0};
    return t;
}

static void
lz_target_done(lz_target *t)
{
    if (t->pinned) {
        pthread_mutex_lock(&lz.reg_lock);
        t->st->pins--;
        pthread_mutex_unlock(&lz.reg_lock);
    }
}

static int
lz_host_sync_usable(int d)
{
    return fn.zeCommandListHostSynchronize != NULL
           && lz.drivers[d].host_sync;
}

/* Append a barrier on t that waits for `nwait` slots and signals s, which
 * becomes the tail (t->lock held; s acquired, not yet armed). */
static acc_status
lz_append_barrier(lz_target *t, lz_slot *s, lz_slot *wait, acc_error *err)
{
    ze_event_handle_t h = wait != NULL ? wait->event : NULL;
    ze_result_t r = fn.zeCommandListAppendBarrier(
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
static acc_status
lz_mark(lz_target *t, lz_slot **out, acc_error *err)
{
    lz_slot *mark = NULL;
    acc_status status = lz_acquire(t->driver, 0, &mark, err);
    if (status != ACC_OK) {
        return status;
    }
    pthread_mutex_lock(t->lock);
    status = lz_append_barrier(t, mark, NULL, err);
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

/* Map an accelerator priority (0 normal, -1 high) to Level Zero's. */
static ze_command_queue_priority_t
lz_priority(int priority)
{
    if (priority < 0) {
        return ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH;
    }
    return priority > 0 ? ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_LOW
                        : ZE_COMMAND_QUEUE_PRIORITY_NORMAL;
}

static acc_status
lz_create_list(int device, int priority, ze_command_list_handle_t *out,
               acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    lz_driver *drv = &lz.drivers[dev->driver];
    ze_context_handle_t ctx = NULL;
    pthread_mutex_lock(&lz.lock);
    acc_status st = lz_context_locked(dev->driver, &ctx, err);
    int in_order = drv->in_order;
    pthread_mutex_unlock(&lz.lock);
    if (st != ACC_OK) {
        return st;
    }
    ze_command_queue_desc_t desc = {
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, dev->ordinal, 0,
        in_order ? ACC_ZE_COMMAND_QUEUE_FLAG_IN_ORDER : 0,
        ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, lz_priority(priority),
    };
    ze_result_t r = fn.zeCommandListCreateImmediate(ctx, dev->handle,
                                                    &desc, out);
    if (in_order && (r == ZE_RESULT_ERROR_INVALID_ENUMERATION
                     || r == ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION)) {
        /* A driver (or a validation layer) that does not know the flag
         * after all: barriers keep the order without it. */
        acc_trace("xpu: driver %d refused IN_ORDER lists; using barriers",
                  dev->driver);
        pthread_mutex_lock(&lz.lock);
        drv->in_order = 0;
        pthread_mutex_unlock(&lz.lock);
        desc.flags = 0;
        r = fn.zeCommandListCreateImmediate(ctx, dev->handle, &desc, out);
    }
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeCommandListCreateImmediate", r, dev->driver);
    }
    return ACC_OK;
}

static acc_status
lz_stream_new(int device, int priority, int is_default, lz_stream **out,
              acc_error *err)
{
    lz_stream *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return lz_no_memory(err);
    }
    acc_status status = lz_create_list(device, priority, &st->list, err);
    if (status != ACC_OK) {
        free(st);
        return status;
    }
    pthread_mutex_init(&st->lock, NULL);
    st->device = device;
    st->is_default = is_default;
    lz_device *dev = &lz.devices[device];
    pthread_mutex_lock(&lz.reg_lock);
    st->next = dev->streams;
    dev->streams = st;
    pthread_mutex_unlock(&lz.reg_lock);
    *out = st;
    return ACC_OK;
}

/* Free st (its list is gone): release its tail. */
static void
lz_stream_free(lz_stream *st)
{
    if (st->tail != NULL && !lz.shut) {
        pthread_mutex_lock(&lz.lock);
        st->tail->waiters--;
        pthread_mutex_unlock(&lz.lock);
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* Destroy the lists of destroyed streams that have gone idle
 * (lz.reg_lock held). */
static void
lz_reap_graveyard(lz_device *dev)
{
    for (lz_stream **p = &dev->graveyard; *p != NULL;) {
        lz_stream *st = *p;
        if (st->pins > 0 || (st->grave_marker != NULL
                             && fn.zeEventQueryStatus(st->grave_marker->event)
                                    != ZE_RESULT_SUCCESS)) {
            p = &st->next;
            continue;
        }
        ze_result_t r = fn.zeCommandListDestroy(st->list);
        if (r != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: zeCommandListDestroy failed (0x%x); retrying "
                      "later", (unsigned)r);
            p = &st->next;
            continue;
        }
        *p = st->next;
        if (st->grave_marker != NULL) {
            lz_retire(st->grave_marker);
        }
        lz_stream_free(st);
    }
}

static acc_status
lz_stream_default(int device, acc_stream *s, acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    acc_status status = ACC_OK;
    pthread_mutex_lock(&lz.default_lock);
    if (dev->default_stream == NULL) {
        status = lz_stream_new(device, 0, 1, &dev->default_stream, err);
    }
    pthread_mutex_unlock(&lz.default_lock);
    if (status == ACC_OK) {
        s->native = dev->default_stream;
        s->handle = (uintptr_t)dev->default_stream->list;
    }
    return status;
}

static acc_status
lz_stream_priority_range(int device, int *least, int *greatest,
                         acc_error *err)
{
    (void)device;
    (void)err;
    *least = 0;
    *greatest = -1;
    return ACC_OK;
}

static acc_status
lz_stream_create(acc_stream *s, acc_error *err)
{
    lz_stream *st;
    acc_status status = lz_stream_new(s->device, s->priority, 0, &st, err);
    if (status == ACC_OK) {
        s->native = st;
        s->handle = (uintptr_t)st->list;
    }
    return status;
}

/* Block until s signals or `timeout` ns pass.  The caller counts itself
 * in s->waiters first, so that nobody resets s meanwhile. */
static ze_result_t
lz_host_wait(lz_slot *s, uint64_t timeout)
{
    return fn.zeEventHostSynchronize(s->event, timeout);
}

/* Start a detached helper thread; 0 when it runs. */
static int
lz_start_thread(void *(*body)(void *))
{
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, body, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

/*
 * The reaper: a thread that runs while destroyed streams wait for their
 * work to finish, destroys each list as soon as its grave marker signals,
 * and exits when none is left (Level Zero forbids destroying a busy list;
 * Intel's driver would block in zeCommandListDestroy).
 */
static void *
lz_reaper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lz.reg_lock);
    while (!lz.reaper_stop) {
        lz_slot *mark = NULL;
        int left = 0;
        for (int i = 0; i < lz.ndevices; i++) {
            lz_reap_graveyard(&lz.devices[i]);
            for (lz_stream *st = lz.devices[i].graveyard; st != NULL;
                 st = st->next) {
                left = 1;
                if (mark == NULL && st->pins == 0) {
                    mark = st->grave_marker;
                }
            }
        }
        if (!left) {
            break;
        }
        if (mark != NULL) {
            pthread_mutex_lock(&lz.lock);
            mark->waiters++;
            pthread_mutex_unlock(&lz.lock);
            pthread_mutex_unlock(&lz.reg_lock);
            lz_host_wait(mark, LZ_REAPER_WAIT_NS);
            pthread_mutex_lock(&lz.reg_lock);
            lz_unwait(mark);
        }
        else {
            /* Pinned, or no marker: look again a little later. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&lz.reaper_cv, &lz.reg_lock, &ts);
        }
    }
    lz.reaper_running = 0;
    pthread_cond_broadcast(&lz.reaper_cv);
    pthread_mutex_unlock(&lz.reg_lock);
    return NULL;
}

/* Start the reaper unless it runs (lz.reg_lock held). */
static void
lz_wake_reaper(void)
{
    if (lz.reaper_running || lz.reaper_stop) {
        return;
    }
    if (lz_start_thread(lz_reaper) == 0) {
        lz.reaper_running = 1;
    }
    else {
        /* Then the next create, destroy or synchronize reaps. */
        acc_trace("xpu: cannot start the reaper thread");
    }
}

static void
lz_stream_destroy(acc_stream *s)
{
    lz_stream *st = s->native;
    if (st == NULL) {
        return;
    }
    s->native = NULL;
    if (lz.shut) {
        /* Shutdown destroyed the list already. */
        lz_stream_free(st);
        return;
    }
    lz_device *dev = &lz.devices[st->device];
    pthread_mutex_lock(&lz.reg_lock);
    for (lz_stream **p = &dev->streams; *p != NULL; p = &(*p)->next) {
        if (*p == st) {
            *p = st->next;
            break;
        }
    }
    /* Queued work must finish before the list may go: mark its end and
     * destroy the list once the mark has signaled. */
    lz_target t = lz_target_of_stream(st);
    acc_error ignored;
    lz_slot *mark = NULL;
    if (lz_mark(&t, &mark, &ignored) != ACC_OK) {
        mark = NULL;
    }
    st->grave_marker = mark;
    st->next = dev->graveyard;
    dev->graveyard = st;
    if (mark != NULL) {
        /* An idle list passes its marker at once: then it goes now, not
         * later on another thread.  A busy one costs this short wait.
         * The marker stays counted (ours) until the list is reaped. */
        st->pins++;
        pthread_mutex_unlock(&lz.reg_lock);
        lz_host_wait(mark, LZ_DESTROY_GRACE_NS);
        pthread_mutex_lock(&lz.reg_lock);
        lz_unwait(mark);
        st->pins--;
    }
    lz_reap_graveyard(dev);
    if (dev->graveyard != NULL) {
        lz_wake_reaper();
    }
    pthread_mutex_unlock(&lz.reg_lock);
}

static acc_status
lz_query_target(lz_target t, acc_error *err)
{
    ze_result_t r;
    const char *api;
    if (lz_host_sync_usable(t.driver)) {
        api = "zeCommandListHostSynchronize";
        r = fn.zeCommandListHostSynchronize(t.list, 0);
    }
    else if (t.st != NULL) {
        /* The tail is counted in use, so it cannot be reset under us. */
        api = "zeEventQueryStatus";
        pthread_mutex_lock(t.lock);
        lz_slot *tail = t.st->tail;
        r = tail != NULL ? fn.zeEventQueryStatus(tail->event)
                         : ZE_RESULT_SUCCESS;
        pthread_mutex_unlock(t.lock);
    }
    else {
        /* A list made elsewhere: only a marker tells, polled once. */
        lz_slot *mark;
        acc_status status = lz_mark(&t, &mark, err);
        if (status != ACC_OK) {
            return status;
        }
        api = "zeEventQueryStatus";
        r = fn.zeEventQueryStatus(mark->event);
        lz_unwait_retire(mark);
    }
    if (r == ZE_RESULT_SUCCESS) {
        return ACC_OK;
    }
    if (r == ZE_RESULT_NOT_READY) {
        return ACC_NOT_READY;
    }
    return lz_fail(err, api, r, t.driver);
}

static acc_status
lz_synchronize_target(lz_target t, acc_error *err)
{
    if (lz_host_sync_usable(t.driver)) {
        ze_result_t r = fn.zeCommandListHostSynchronize(t.list, UINT64_MAX);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeCommandListHostSynchronize", r, t.driver);
        }
        return ACC_OK;
    }
    /* A fresh marker, not the tail: work appended by others counts. */
    lz_slot *mark;
    acc_status status = lz_mark(&t, &mark, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = lz_host_wait(mark, UINT64_MAX);
    lz_unwait_retire(mark);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventHostSynchronize", r, t.driver);
    }
    return ACC_OK;
}

/* Events ----------------------------------------------------------------- */

static acc_status
lz_event_create(acc_event *e, acc_error *err)
{
    lz_event *ev = calloc(1, sizeof(*ev));
    if (ev == NULL) {
        return lz_no_memory(err);
    }
    ev->device = e->device;
    ev->timing = (e->flags & ACC_EVENT_TIMING) != 0;
    acc_status status = lz_acquire(lz_driver_of(e->device), ev->timing,
                                   &ev->slot, err);
    if (status != ACC_OK) {
        free(ev);
        return status;
    }
    e->native = ev;
    e->handle = (uintptr_t)ev->slot->event;
    return ACC_OK;
}

static void
lz_event_destroy(acc_event *e)
{
    lz_event *ev = e->native;
    if (ev == NULL) {
        return;
    }
    e->native = NULL;
    if (!lz.shut) {
        lz_retire(ev->slot);
    }
    free(ev);
}

static acc_status
lz_record_target(acc_event *e, lz_target t, acc_error *err)
{
    lz_event *ev = e->native;
    acc_status status = ACC_OK;
    pthread_mutex_lock(t.lock);
    pthread_mutex_lock(&lz.lock);
    lz_slot *slot = ev->slot;
    if (slot->armed) {
        /* Reuse the slot only if its last signal has landed and nothing
         * can still wait on it; otherwise move to a fresh one.  Being
         * this stream's tail is no obstacle: it stays the tail, and the
         * stream's lock keeps query() out until it is armed again. */
        int own_tail = t.st != NULL && t.st->tail == slot;
        if (slot->waiters == own_tail
            && fn.zeEventQueryStatus(slot->event) == ZE_RESULT_SUCCESS
            && fn.zeEventHostReset(slot->event) == ZE_RESULT_SUCCESS) {
            slot->armed = 0;
        }
        else {
            lz_slot *fresh;
            status = lz_acquire_locked(t.driver, ev->timing, &fresh, err);
            if (status == ACC_OK) {
                lz_retire_locked(slot);
                ev->slot = slot = fresh;
            }
        }
    }
    if (status == ACC_OK) {
        /* Claimed now, so a concurrent record cannot take it too; the
         * handle follows ev->slot under the same lock, so a concurrent
         * record on another stream cannot leave it naming a retired
         * slot. */
        slot->armed = 1;
        e->handle = (uintptr_t)slot->event;
    }
    pthread_mutex_unlock(&lz.lock);
    if (status == ACC_OK) {
        status = lz_append_barrier(&t, slot, NULL, err);
        if (status != ACC_OK) {
            pthread_mutex_lock(&lz.lock);
            slot->armed = 0;
            pthread_mutex_unlock(&lz.lock);
        }
    }
    pthread_mutex_unlock(t.lock);
    return status;
}

/* The slot of e if it was recorded, counted as waited on; NULL if not. */
static lz_slot *
lz_event_slot_wait(acc_event *e)
{
    lz_event *ev = e->native;
    lz_slot *slot = NULL;
    if (ev == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&lz.lock);
    if (ev->slot->armed) {
        slot = ev->slot;
        slot->waiters++;
    }
    pthread_mutex_unlock(&lz.lock);
    return slot;
}

/*
 * The bridge: a thread that runs while waits across drivers are pending.
 * For each it signals the stream driver's slot from the host once the
 * other driver's event has signaled, and exits when none is left.  It
 * blocks on the oldest event for at most LZ_BRIDGE_WAIT_NS at a time:
 * when that event signals it bridges the run of completed ones behind it,
 * when the wait times out it looks at all of them, so a later event that
 * completes first is bridged that much later at most.  An event that fails (device lost) is
 * bridged too: the waiting stream must not hang on it.  A failing
 * zeEventHostSignal is retried.
 */
/* Signal the bridges whose event has signaled (lz.lock held): all of
 * them, or (full 0) the run of completed ones at the front.  Never
 * blocks.  Returns nonzero when a signal failed and must be retried. */
static int
lz_pump_bridges_locked(int full)
{
    size_t keep = 0, i = 0;
    int stalled = 0;
    for (; i < lz.nbridges; i++) {
        lz_bridge *b = &lz.bridges[i];
        ze_result_t r = fn.zeEventQueryStatus(b->from->event);
        if (r == ZE_RESULT_NOT_READY && !full) {
            break; /* events mostly complete in order: stop here */
        }
        if (r != ZE_RESULT_NOT_READY) {
            if (r != ZE_RESULT_SUCCESS) {
                acc_trace("xpu: an event waited on across drivers failed "
                          "(0x%x); releasing its waiters", (unsigned)r);
            }
            r = fn.zeEventHostSignal(b->to->event);
            if (r == ZE_RESULT_SUCCESS) {
                b->from->waiters--;
                lz_retire_locked(b->to);
                continue;
            }
            acc_trace("xpu: zeEventHostSignal failed (0x%x); retrying",
                      (unsigned)r);
            stalled = 1;
        }
        lz.bridges[keep++] = *b;
    }
    for (; i < lz.nbridges; i++) {
        lz.bridges[keep++] = lz.bridges[i];
    }
    lz.nbridges = keep;
    return stalled;
}

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
static acc_status
lz_wait_across(lz_target t, lz_slot *slot, acc_error *err)
{
    lz_slot *to = NULL, *done = NULL;
    int coming = 0;
    acc_status status;
    pthread_mutex_lock(t.lock);
    pthread_mutex_lock(&lz.lock);
    status = lz_reserve_link_locked(t.driver, err);
    if (status == ACC_OK && lz.nbridges == lz.capbridges) {
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
            acc_error_set(err, ACC_ERR_HOST_MEMORY, "cannot start the xpu "
                          "backend's thread for waits across drivers");
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
        status = lz_append_barrier(&t, done, to, err);
    }
    pthread_mutex_lock(&lz.lock);
    if (coming) {
        lz.bridge_coming--;
        pthread_cond_broadcast(&lz.bridge_cv);
    }
    if (status == ACC_OK) {
        to->waiters++;
        lz.drivers[t.driver].links[lz.drivers[t.driver].nlinks++] =
            (lz_link){to, done};
        lz.bridges[lz.nbridges++] = (lz_bridge){slot, to};
        pthread_cond_broadcast(&lz.bridge_cv);
    }
    else {
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

static acc_status
lz_wait_target(lz_target t, acc_event *e, acc_error *err)
{
    lz_slot *slot = lz_event_slot_wait(e);
    if (slot == NULL) {
        return ACC_OK; /* never recorded: nothing to wait for */
    }
    if (fn.zeEventQueryStatus(slot->event) == ZE_RESULT_SUCCESS) {
        /* Already complete (and kept so by our count): nothing to wait
         * for. */
        lz_unwait(slot);
        return ACC_OK;
    }
    if (slot->driver != t.driver) {
        return lz_wait_across(t, slot, err);
    }
    lz_slot *done = NULL;
    pthread_mutex_lock(t.lock);
    pthread_mutex_lock(&lz.lock);
    acc_status status = lz_reserve_link_locked(t.driver, err);
    if (status == ACC_OK) {
        status = lz_acquire_locked(t.driver, 0, &done, err);
    }
    pthread_mutex_unlock(&lz.lock);
    if (status == ACC_OK) {
        status = lz_append_barrier(&t, done, slot, err);
    }
    pthread_mutex_lock(&lz.lock);
    if (status == ACC_OK) {
        /* Our count on slot passes to the link. */
        lz.drivers[t.driver].links[lz.drivers[t.driver].nlinks++] =
            (lz_link){slot, done};
    }
    else {
        slot->waiters--;
        if (done != NULL) {
            lz_retire_locked(done);
        }
    }
    pthread_mutex_unlock(&lz.lock);
    pthread_mutex_unlock(t.lock);
    return status;
}

static acc_status
lz_event_query(acc_event *e, acc_error *err)
{
    lz_event *ev = e->native;
    if (ev == NULL) {
        return ACC_OK;
    }
    pthread_mutex_lock(&lz.lock);
    lz_slot *slot = ev->slot;
    ze_result_t r = slot->armed ? fn.zeEventQueryStatus(slot->event)
                                : ZE_RESULT_SUCCESS;
    pthread_mutex_unlock(&lz.lock);
    if (r == ZE_RESULT_SUCCESS) {
        return ACC_OK;
    }
    if (r == ZE_RESULT_NOT_READY) {
        return ACC_NOT_READY;
    }
    return lz_fail(err, "zeEventQueryStatus", r, slot->driver);
}

static acc_status
lz_event_synchronize(acc_event *e, acc_error *err)
{
    lz_slot *slot = lz_event_slot_wait(e);
    if (slot == NULL) {
        return ACC_OK;
    }
    ze_result_t r = lz_host_wait(slot, UINT64_MAX);
    lz_unwait(slot);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventHostSynchronize", r, slot->driver);
    }
    return ACC_OK;
}

/*
 * t1 - t0 in ticks of a counter that keeps only the bits of mask
 * (kernelTimestampValidBits) and so wraps every mask + 1 ticks.  Both
 * readings only say where on that cycle each event completed, so the
 * interval is taken the shorter way round: a later reading smaller by
 * less than half a cycle is a reversed pair (negative, as CUDA and torch
 * answer), by more than half a cycle it is a wrap-around.  Intervals of
 * half a cycle or more (2**31 ticks: 2.1 s at 1 ns, 112 s at 52 ns) are
 * therefore not measurable.
 */
static double
lz_ticks_between(uint64_t t0, uint64_t t1, uint64_t mask)
{
    uint64_t forward = (t1 - t0) & mask;
    uint64_t half = (mask >> 1) + 1;
    if (forward < half) {
        return (double)forward;
    }
    return -((double)(mask - forward) + 1.0);
}

static acc_status
lz_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                    acc_error *err)
{
    /* The dispatcher has checked timing, records and devices. */
    lz_event *a = start->native, *b = end->native;
    ze_kernel_timestamp_result_t ts[2];
    ze_result_t r = ZE_RESULT_SUCCESS;
    int d = lz_driver_of(a->device);
    pthread_mutex_lock(&lz.lock);
    int armed = a->slot->armed && b->slot->armed;
    if (armed) {
        r = fn.zeEventQueryKernelTimestamp(a->slot->event, &ts[0]);
        if (r == ZE_RESULT_SUCCESS) {
            r = fn.zeEventQueryKernelTimestamp(b->slot->event, &ts[1]);
        }
    }
    pthread_mutex_unlock(&lz.lock);
    if (!armed) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "both events must be recorded before measuring the "
                      "time between them");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (r == ZE_RESULT_NOT_READY) {
        return ACC_NOT_READY;
    }
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeEventQueryKernelTimestamp", r, d);
    }
    /* A record completes when its barrier ends: measure end to end, in
     * the device's global clock. */
    const lz_device *dev = &lz.devices[a->device];
    double ticks = lz_ticks_between(ts[0].global.kernelEnd,
                                    ts[1].global.kernelEnd, dev->ts_mask);
    *ms = (float)(ticks * dev->ns_per_tick / 1e6);
    return ACC_OK;
}

static acc_status
lz_stream_query(acc_stream *s, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = lz_query_target(t, err);
    lz_target_done(&t);
    return status;
}

static acc_status
lz_stream_synchronize(acc_stream *s, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = lz_synchronize_target(t, err);
    lz_target_done(&t);
    return status;
}

static acc_status
lz_event_record(acc_event *e, acc_stream *s, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = lz_record_target(e, t, err);
    lz_target_done(&t);
    return status;
}

static acc_status
lz_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = lz_wait_target(t, e, err);
    lz_target_done(&t);
    return status;
}

/* Devices ---------------------------------------------------------------- */

typedef struct lz_sync_item {
    lz_stream *st;
    lz_slot *mark;         /* NULL: use zeCommandListHostSynchronize */
    int graveyard;
} lz_sync_item;

static acc_status
lz_device_synchronize(int device, acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    int d = dev->driver;
    int host_sync = lz_host_sync_usable(d);
    acc_status status = ACC_OK;

    /* Mark the end of every list of the device, pinning the streams so
     * that they outlive the wait even if destroyed meanwhile. */
    pthread_mutex_lock(&lz.reg_lock);
    lz_reap_graveyard(dev);
    size_t n = 0;
    for (lz_stream *st = dev->streams; st != NULL; st = st->next) {
        n++;
    }
    for (lz_stream *st = dev->graveyard; st != NULL; st = st->next) {
        n++;
    }
    lz_sync_item *items = calloc(n ? n : 1, sizeof(*items));
    if (items == NULL) {
        pthread_mutex_unlock(&lz.reg_lock);
        return lz_no_memory(err);
    }
    size_t k = 0;
    for (lz_stream *st = dev->streams; st != NULL && status == ACC_OK;
         st = st->next) {
        lz_sync_item *it = &items[k];
        it->st = st;
        if (!host_sync) {
            lz_target t = lz_target_of_stream(st);
            status = lz_mark(&t, &it->mark, err);
            if (status != ACC_OK) {
                break;
            }
        }
        st->pins++;
        k++;
    }
    for (lz_stream *st = dev->graveyard; st != NULL && status == ACC_OK;
         st = st->next) {
        if (st->grave_marker == NULL) {
            continue;
        }
        lz_sync_item *it = &items[k++];
        it->st = st;
        it->mark = st->grave_marker;
        it->graveyard = 1;
        pthread_mutex_lock(&lz.lock);
        it->mark->waiters++;
        pthread_mutex_unlock(&lz.lock);
        st->pins++;
    }
    pthread_mutex_unlock(&lz.reg_lock);

    for (size_t i = 0; i < k && status == ACC_OK; i++) {
        lz_sync_item *it = &items[i];
        ze_result_t r;
        if (it->mark != NULL) {
            r = lz_host_wait(it->mark, UINT64_MAX);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeEventHostSynchronize", r, d);
            }
        }
        else {
            r = fn.zeCommandListHostSynchronize(it->st->list, UINT64_MAX);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeCommandListHostSynchronize", r, d);
            }
        }
    }

    pthread_mutex_lock(&lz.reg_lock);
    for (size_t i = 0; i < k; i++) {
        lz_sync_item *it = &items[i];
        if (it->mark != NULL) {
            pthread_mutex_lock(&lz.lock);
            it->mark->waiters--;
            if (!it->graveyard) {
                lz_retire_locked(it->mark);
            }
            pthread_mutex_unlock(&lz.lock);
        }
        it->st->pins--;
    }
    lz_reap_graveyard(dev);
    pthread_mutex_unlock(&lz.reg_lock);
    free(items);
    return status;
}

/*
 * Sysman (zes) reads what the core API cannot: free memory and the PCI
 * address.  Intel's driver answers only when Sysman was enabled before
 * zeInit (ZES_ENABLE_SYSMAN=1, which a library must not set for its
 * process); otherwise, as where the loader has no entry, the calls fail
 * with these codes and the numbers are estimates instead.
 */
static int
lz_sysman_absent(ze_result_t r)
{
    return r == ZE_RESULT_ERROR_UNINITIALIZED
           || r == ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
}

/* Find the memory modules located on the device, once (lz.sysman_lock
 * held).  A driver error is reported and tried again next time. */
static acc_status
lz_memory_modules_locked(lz_device *dev, acc_error *err)
{
    if (dev->sysman != 0) {
        return ACC_OK;
    }
    uint32_t n = 0;
    ze_result_t r = fn.zesDeviceEnumMemoryModules(dev->handle, &n, NULL);
    if (lz_sysman_absent(r)) {
        acc_trace("xpu: no Sysman memory modules (0x%x): free memory is "
                  "an estimate", (unsigned)r);
        dev->sysman = -1;
        return ACC_OK;
    }
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zesDeviceEnumMemoryModules", r, dev->driver);
    }
    zes_mem_handle_t *mems = calloc(n ? n : 1, sizeof(*mems));
    if (mems == NULL) {
        return lz_no_memory(err);
    }
    if (n > 0) {
        r = fn.zesDeviceEnumMemoryModules(dev->handle, &n, mems);
        if (r != ZE_RESULT_SUCCESS) {
            free(mems);
            return lz_fail(err, "zesDeviceEnumMemoryModules", r,
                           dev->driver);
        }
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        zes_mem_properties_t p;
        memset(&p, 0, sizeof(p));
        p.stype = ZES_STRUCTURE_TYPE_MEM_PROPERTIES;
        r = fn.zesMemoryGetProperties(mems[i], &p);
        if (r != ZE_RESULT_SUCCESS) {
            free(mems);
            return lz_fail(err, "zesMemoryGetProperties", r, dev->driver);
        }
        if (p.location == ZES_MEM_LOC_DEVICE) {
            mems[k++] = mems[i];
        }
    }
    if (k == 0) {
        acc_trace("xpu: Sysman lists no device memory: free memory is an "
                  "estimate");
        free(mems);
        dev->sysman = -1;
        return ACC_OK;
    }
    dev->mems = mems;
    dev->nmems = k;
    dev->sysman = 1;
    return ACC_OK;
}

static acc_status
lz_device_properties(int device, acc_device_properties *props,
                     acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    const ze_device_properties_t *p = &dev->props;
    memset(props, 0, sizeof(*props));
    /* The driver's name need not end in NUL within its 256 bytes. */
    memcpy(props->name, p->name, sizeof(props->name) - 1);
    memcpy(props->uuid, p->uuid.id, sizeof(props->uuid));
    props->total_memory = dev->total_memory;
    props->multi_processor_count =
        (int)(p->numSlices * p->numSubslicesPerSlice * p->numEUsPerSubslice);
    props->major = -1;
    props->minor = -1;
    props->vendor_id = p->vendorId;
    props->device_id = p->deviceId;
    props->integrated = (p->flags & ZE_DEVICE_PROPERTY_FLAG_INTEGRATED) != 0;

    zes_pci_properties_t pci;
    memset(&pci, 0, sizeof(pci));
    pci.stype = ZES_STRUCTURE_TYPE_PCI_PROPERTIES;
    ze_result_t r = fn.zesDevicePciGetProperties(dev->handle, &pci);
    if (r == ZE_RESULT_SUCCESS) {
        snprintf(props->pci_bus_id, sizeof(props->pci_bus_id),
                 "%04x:%02x:%02x.%x", pci.address.domain & 0xffffu,
                 pci.address.bus & 0xffu, pci.address.device & 0x1fu,
                 pci.address.function & 0x7u);
    }
    else if (!lz_sysman_absent(r)) {
        return lz_fail(err, "zesDevicePciGetProperties", r, dev->driver);
    }
    pthread_mutex_lock(&lz.sysman_lock);
    acc_status status = lz_memory_modules_locked(dev, err);
    if (status == ACC_OK && dev->sysman < 0) {
        props->estimates |= ACC_ESTIMATE_FREE_MEMORY;
    }
    pthread_mutex_unlock(&lz.sysman_lock);
    return status;
}

/* Memory ------------------------------------------------------------------ */

/*
 * Level Zero has no stream-ordered free: zeMemFree frees at once, and
 * memory that queued work still uses must not be freed.  The allocator
 * and the host blocks (allocator.c, memory.c) call mem_free and host_free
 * only once the events recorded behind that work have signaled, so these
 * free directly.  Allocations are remembered with their sizes.  Free
 * memory comes from Sysman's memory modules where the driver offers them;
 * otherwise (the core API has no free-memory query) it is estimated as
 * the total less what this process took, and get_device_properties()
 * says so.
 */
typedef struct lz_alloc {
    void *ptr;
    size_t size;
    int device;            /* -1: host memory */
    struct lz_alloc *next;
} lz_alloc;

static struct {
    pthread_mutex_t lock;  /* a leaf: no other lock is taken under it */
    lz_alloc *head;
    unsigned long long used[ACC_MAX_DEVICES];
} lz_mem = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

static acc_status
lz_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
               acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    unsigned long long total = dev->total_memory, free_sum = 0, used;
    pthread_mutex_lock(&lz.sysman_lock);
    acc_status status = lz_memory_modules_locked(dev, err);
    for (uint32_t i = 0; status == ACC_OK && dev->sysman > 0
                         && i < dev->nmems; i++) {
        zes_mem_state_t state;
        memset(&state, 0, sizeof(state));
        state.stype = ZES_STRUCTURE_TYPE_MEM_STATE;
        ze_result_t r = fn.zesMemoryGetState(dev->mems[i], &state);
        if (r != ZE_RESULT_SUCCESS) {
            status = lz_fail(err, "zesMemoryGetState", r, dev->driver);
        }
        free_sum += state.free;
    }
    int exact = dev->sysman > 0;
    pthread_mutex_unlock(&lz.sysman_lock);
    if (status != ACC_OK) {
        return status;
    }
    if (!exact) {
        /* The estimate: what this process has not taken. */
        pthread_mutex_lock(&lz_mem.lock);
        used = lz_mem.used[device];
        pthread_mutex_unlock(&lz_mem.lock);
        free_sum = total > used ? total - used : 0;
    }
    *total_bytes = (size_t)total;
    *free_bytes = (size_t)(free_sum < total ? free_sum : total);
    return ACC_OK;
}

static acc_status
lz_context_of(int device, ze_context_handle_t *ctx, acc_error *err)
{
    pthread_mutex_lock(&lz.lock);
    acc_status status = lz_context_locked(lz_driver_of(device), ctx, err);
    pthread_mutex_unlock(&lz.lock);
    return status;
}

/* Remember an allocation; on failure (no host memory) free it again. */
static acc_status
lz_remember(ze_context_handle_t ctx, void *ptr, size_t size, int device,
            acc_error *err)
{
    lz_alloc *a = malloc(sizeof(*a));
    if (a == NULL) {
        (void)fn.zeMemFree(ctx, ptr);
        return lz_no_memory(err);
    }
    a->ptr = ptr;
    a->size = size;
    a->device = device;
    pthread_mutex_lock(&lz_mem.lock);
    a->next = lz_mem.head;
    lz_mem.head = a;
    if (device >= 0) {
        lz_mem.used[device] += size;
    }
    pthread_mutex_unlock(&lz_mem.lock);
    return ACC_OK;
}

static void
lz_forget(void *ptr)
{
    lz_alloc *a = NULL;
    pthread_mutex_lock(&lz_mem.lock);
    for (lz_alloc **p = &lz_mem.head; *p != NULL; p = &(*p)->next) {
        if ((*p)->ptr == ptr) {
            a = *p;
            *p = a->next;
            if (a->device >= 0) {
                lz_mem.used[a->device] -= a->size;
            }
            break;
        }
    }
    pthread_mutex_unlock(&lz_mem.lock);
    free(a);
}

static acc_status
lz_mem_alloc(int device, size_t nbytes, uintptr_t *ptr, acc_error *err)
{
    ze_device_mem_alloc_desc_t desc = {
        ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0,
    };
    ze_context_handle_t ctx = NULL;
    void *p = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = fn.zeMemAllocDevice(ctx, &desc, nbytes, 256,
                                        lz.devices[device].handle, &p);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemAllocDevice", r, lz_driver_of(device));
    }
    status = lz_remember(ctx, p, nbytes, device, err);
    if (status == ACC_OK) {
        *ptr = (uintptr_t)p;
    }
    return status;
}

static acc_status
lz_free(int device, void *ptr, acc_error *err)
{
    ze_context_handle_t ctx = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = fn.zeMemFree(ctx, ptr);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemFree", r, lz_driver_of(device));
    }
    lz_forget(ptr);
    return ACC_OK;
}

static acc_status
lz_mem_free(int device, uintptr_t ptr, acc_error *err)
{
    return lz_free(device, (void *)ptr, err);
}

static acc_status
lz_host_alloc(int device, size_t nbytes, void **ptr, acc_error *err)
{
    ze_host_mem_alloc_desc_t desc = {
        ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, NULL, 0,
    };
    ze_context_handle_t ctx = NULL;
    void *p = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = fn.zeMemAllocHost(ctx, &desc, nbytes, 64, &p);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemAllocHost", r, lz_driver_of(device));
    }
    status = lz_remember(ctx, p, nbytes, -1, err);
    if (status == ACC_OK) {
        *ptr = p;
    }
    return status;
}

static acc_status
lz_host_free(int device, void *ptr, acc_error *err)
{
    return lz_free(device, ptr, err);
}

/* Lists that are not in order run a command as soon as it is appended:
 * a barrier first makes it follow the earlier work (t->lock held). */
static acc_status
lz_order(lz_target *t, acc_error *err)
{
    if (lz.drivers[t->driver].in_order) {
        return ACC_OK;
    }
    ze_result_t r = fn.zeCommandListAppendBarrier(t->list, NULL, 0, NULL);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeCommandListAppendBarrier", r, t->driver);
    }
    return ACC_OK;
}

/* After `done` was passed as the signal event of a command appended on t
 * (t->lock held): it becomes the tail, so query() sees the command.  The
 * caller retires it once t->lock is released; the tail keeps it. */
static void
lz_appended(lz_target *t, lz_slot *done)
{
    pthread_mutex_lock(&lz.lock);
    done->armed = 1;
    lz_set_tail_locked(t->st, done);
    pthread_mutex_unlock(&lz.lock);
}

static acc_status
lz_mem_copy(acc_stream *s, const acc_copy *c, acc_error *err)
{
    if (c->kind == ACC_COPY_PEER
        && lz_driver_of(c->dst_device) != lz_driver_of(c->src_device)) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED,
                      "backend xpu does not support copies between devices "
                      "of different Level Zero drivers (devices %d and %d)",
                      c->src_device, c->dst_device);
        return ACC_ERR_UNSUPPORTED;
    }
    lz_target t = lz_target_of(s);
    lz_slot *done = NULL;
    acc_status status = lz_acquire(t.driver, 0, &done, err);
    if (status == ACC_OK) {
        pthread_mutex_lock(t.lock);
        status = lz_order(&t, err);
        if (status == ACC_OK) {
            ze_result_t r = fn.zeCommandListAppendMemoryCopy(
                t.list, (void *)c->dst, (const void *)c->src, c->nbytes,
                done->event, 0, NULL);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeCommandListAppendMemoryCopy", r,
                                 t.driver);
            }
            else {
                lz_appended(&t, done);
            }
        }
        pthread_mutex_unlock(t.lock);
        lz_retire(done);
    }
    /* Level Zero reads and writes ordinary host memory when the copy
     * runs (no staging): wait for it before the caller reuses it. */
    if (status == ACC_OK && (c->flags & ACC_COPY_PAGEABLE)) {
        status = lz_synchronize_target(t, err);
    }
    lz_target_done(&t);
    return status;
}

static acc_status
lz_mem_fill(acc_stream *s, uintptr_t dst, unsigned char value,
            size_t nbytes, acc_error *err)
{
    lz_target t = lz_target_of(s);
    lz_slot *done = NULL;
    acc_status status = lz_acquire(t.driver, 0, &done, err);
    if (status == ACC_OK) {
        pthread_mutex_lock(t.lock);
        status = lz_order(&t, err);
        if (status == ACC_OK) {
            ze_result_t r = fn.zeCommandListAppendMemoryFill(
                t.list, (void *)dst, &value, 1, nbytes, done->event, 0,
                NULL);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeCommandListAppendMemoryFill", r,
                                 t.driver);
            }
            else {
                lz_appended(&t, done);
            }
        }
        pthread_mutex_unlock(t.lock);
        lz_retire(done);
    }
    lz_target_done(&t);
    return status;
}

/* Probe ------------------------------------------------------------------ */

static acc_status
lz_unavailable(acc_error *err, acc_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static acc_status
lz_unavailable(acc_error *err, acc_status status, const char *fmt, ...)
{
    char text[sizeof(err->message)];
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(text, sizeof(text), fmt, ap) >= (int)sizeof(text)) {
        /* Cut: never leave half a character. */
        text[acc_utf8_whole(text, sizeof(text) - 1)] = '\0';
    }
    va_end(ap);
    acc_error_set(err, status, "%s", text);
    acc_trace("xpu: rejected: %s", text);
    return status;
}

static acc_status
lz_load(acc_error *err)
{
    const char *path = getenv("ACCELERATOR_ZE_LIBRARY");
    if (path == NULL || *path == '\0') {
        path = LZ_LIBRARY;
    }
    if (strlen(path) >= sizeof(lz.library)) {
        /* Cut short, it would name another file: refuse it instead. */
        snprintf(lz.library, sizeof(lz.library), "(a path too long)");
        return lz_unavailable(err, ACC_ERR_NO_ACCELERATOR,
                              "ACCELERATOR_ZE_LIBRARY is %zu bytes long; "
                              "expected a path of at most %zu bytes",
                              strlen(path), sizeof(lz.library) - 1);
    }
    snprintf(lz.library, sizeof(lz.library), "%s", path);
    lz.lib = dlopen(lz.library, RTLD_NOW | RTLD_LOCAL);
    if (lz.lib == NULL) {
        const char *why = dlerror();
        return lz_unavailable(err, ACC_ERR_NO_ACCELERATOR,
                              "cannot open the Level Zero loader %s: %s",
                              lz.library, why ? why : "unknown error");
    }
    lz.opened = 1;
    acc_trace("xpu: opened %s", lz.library);
#define LZ_RESOLVE(name, params)                                          \
    *(void **)&fn.name = dlsym(lz.lib, #name);                            \
    if (fn.name == NULL) {                                                \
        dlclose(lz.lib);                                                  \
        lz.lib = NULL;                                                    \
        return lz_unavailable(err, ACC_ERR_NO_ACCELERATOR,                \
                              "the Level Zero loader %s lacks %s",       \
                              lz.library, #name);                         \
    }
    ACC_ZE_FUNCTIONS(LZ_RESOLVE)
#undef LZ_RESOLVE
#define LZ_RESOLVE_OPTIONAL(name, version, params)                        \
    *(void **)&fn.name = dlsym(lz.lib, #name);                            \
    acc_trace("xpu: optional %s: %s", #name,                              \
              fn.name != NULL ? "found" : "absent");
    ACC_ZE_OPTIONAL_FUNCTIONS(LZ_RESOLVE_OPTIONAL)
#undef LZ_RESOLVE_OPTIONAL
    return ACC_OK;
}

/* The first command queue group that can run compute work. */
static uint32_t
lz_compute_ordinal(ze_device_handle_t h)
{
    uint32_t n = 0;
    if (fn.zeDeviceGetCommandQueueGroupProperties(h, &n, NULL)
            != ZE_RESULT_SUCCESS || n == 0) {
        return 0;
    }
    ze_command_queue_group_properties_t *groups =
        calloc(n, sizeof(*groups));
    if (groups == NULL) {
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        groups[i].stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
    }
    uint32_t ordinal = 0;
    if (fn.zeDeviceGetCommandQueueGroupProperties(h, &n, groups)
            == ZE_RESULT_SUCCESS) {
        for (uint32_t i = 0; i < n; i++) {
            if (groups[i].flags
                & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) {
                ordinal = i;
                break;
            }
        }
    }
    free(groups);
    return ordinal;
}

static acc_status
lz_add_device(int d, ze_device_handle_t h, acc_error *err)
{
    lz_driver *drv = &lz.drivers[d];
    ze_device_properties_t p;
    memset(&p, 0, sizeof(p));
    p.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    ze_result_t r = fn.zeDeviceGetProperties(h, &p);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeDeviceGetProperties", r, d);
    }
    if (p.type != ZE_DEVICE_TYPE_GPU) {
        acc_trace("xpu: skipping a device of type %d", (int)p.type);
        return ACC_OK;
    }
    if (lz.ndevices == ACC_MAX_DEVICES) {
        acc_trace("xpu: more than %d devices; ignoring '%s'",
                  ACC_MAX_DEVICES, p.name);
        return ACC_OK;
    }
    lz_device *dev = &lz.devices[lz.ndevices];
    dev->handle = h;
    dev->driver = d;
    dev->props = p;
    /* With the plain stype timerResolution is ns per tick; spec 1.2
     * drivers give ticks per second with the 1_2 stype, which keeps the
     * fraction of a 19.2 MHz clock (52.083 ns) that ns would round. */
    dev->ns_per_tick = p.timerResolution ? (double)p.timerResolution : 1.0;
    if (drv->api_version >= ACC_ZE_MAKE_VERSION(1, 2)) {
        ze_device_properties_t hz;
        memset(&hz, 0, sizeof(hz));
        hz.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2;
        if (fn.zeDeviceGetProperties(h, &hz) == ZE_RESULT_SUCCESS
            && hz.timerResolution != 0) {
            dev->ns_per_tick = 1e9 / (double)hz.timerResolution;
        }
    }
    uint32_t bits = p.kernelTimestampValidBits;
    dev->ts_mask = bits == 0 || bits >= 64 ? UINT64_MAX
                                           : (1ull << bits) - 1;
    uint32_t nmem = 0;
    r = fn.zeDeviceGetMemoryProperties(h, &nmem, NULL);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeDeviceGetMemoryProperties", r, d);
    }
    if (nmem > 0) {
        ze_device_memory_properties_t *mem = calloc(nmem, sizeof(*mem));
        if (mem == NULL) {
            return lz_no_memory(err);
        }
        for (uint32_t i = 0; i < nmem; i++) {
            mem[i].stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
        }
        r = fn.zeDeviceGetMemoryProperties(h, &nmem, mem);
        if (r != ZE_RESULT_SUCCESS) {
            free(mem);
            return lz_fail(err, "zeDeviceGetMemoryProperties", r, d);
        }
        for (uint32_t i = 0; i < nmem; i++) {
            dev->total_memory += mem[i].totalSize;
        }
        free(mem);
    }
    dev->ordinal = lz_compute_ordinal(h);
    acc_trace("xpu: device %d: '%s' (driver %d, %llu bytes)", lz.ndevices,
              p.name, d, dev->total_memory);
    lz.ndevices++;
    return ACC_OK;
}

static acc_status
lz_enumerate(acc_error *err)
{
    uint32_t n = 0;
    ze_result_t r = fn.zeDriverGet(&n, NULL);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeDriverGet", r, -1);
    }
    if (n > LZ_MAX_DRIVERS) {
        acc_trace("xpu: using the first %d of %u drivers", LZ_MAX_DRIVERS,
                  n);
        n = LZ_MAX_DRIVERS;
    }
    ze_driver_handle_t drivers[LZ_MAX_DRIVERS];
    if (n > 0) {
        r = fn.zeDriverGet(&n, drivers);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeDriverGet", r, -1);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        int d = lz.ndrivers;
        lz_driver *drv = &lz.drivers[d];
        drv->handle = drivers[i];
        ze_api_version_t version = 0;
        r = fn.zeDriverGetApiVersion(drivers[i], &version);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeDriverGetApiVersion", r, -1);
        }
        drv->api_version = (uint32_t)version;
        ze_driver_properties_t props;
        memset(&props, 0, sizeof(props));
        props.stype = ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES;
        r = fn.zeDriverGetProperties(drivers[i], &props);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeDriverGetProperties", r, -1);
        }
        drv->driver_version = props.driverVersion;
        drv->in_order = drv->api_version >= ACC_ZE_MAKE_VERSION(1, 7);
        drv->host_sync = drv->api_version >= ACC_ZE_MAKE_VERSION(1, 6);
        lz.ndrivers++;
        acc_trace("xpu: driver %d: API %u.%u, version 0x%x, %s lists", d,
                  ACC_ZE_MAJOR_VERSION(drv->api_version),
                  ACC_ZE_MINOR_VERSION(drv->api_version),
                  drv->driver_version,
                  drv->in_order ? "in-order" : "barrier-ordered");

        uint32_t ndev = 0;
        r = fn.zeDeviceGet(drivers[i], &ndev, NULL);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeDeviceGet", r, d);
        }
        if (ndev == 0) {
            continue;
        }
        ze_device_handle_t *devs = calloc(ndev, sizeof(*devs));
        if (devs == NULL) {
            return lz_no_memory(err);
        }
        r = fn.zeDeviceGet(drivers[i], &ndev, devs);
        acc_status status = r == ZE_RESULT_SUCCESS
                                ? ACC_OK
                                : lz_fail(err, "zeDeviceGet", r, d);
        for (uint32_t j = 0; j < ndev && status == ACC_OK; j++) {
            status = lz_add_device(d, devs[j], err);
        }
        free(devs);
        if (status != ACC_OK) {
            return status;
        }
    }
    return ACC_OK;
}

static acc_status
lz_probe(acc_probe_result *out, acc_error *err)
{
    acc_status status = lz_load(err);
    out->library = lz.library;
    out->loaded = lz.opened;
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = fn.zeInit(ZE_INIT_FLAG_GPU_ONLY);
    if (r != ZE_RESULT_SUCCESS) {
        /* Loader 1.8 has unloaded the failing driver but still points
         * into it: any further call would crash.  Never call again (and
         * keep the loader loaded: its destructors share that state). */
        lz_fail(err, "zeInit", r, -1);
        snprintf(err->message, sizeof(err->message),
                 "zeInit failed with %s (0x%x): no usable Level Zero GPU "
                 "driver (is one installed, or ZE_ENABLE_ALT_DRIVERS set?)",
                 lz_result_name(r) ? lz_result_name(r) : "an unknown code",
                 (unsigned)r);
        acc_trace("xpu: rejected: %s", err->message);
        return err->status;
    }
    status = lz_enumerate(err);
    if (status != ACC_OK) {
        acc_trace("xpu: rejected: %s", err->message);
        return status;
    }
    if (lz.ndrivers > 0) {
        const lz_driver *drv = &lz.drivers[0];
        out->driver_version = (int)drv->driver_version;
        /* driverVersion is the driver's own encoding; Intel's is
         * major << 24 | minor << 16 | build. */
        unsigned v = drv->driver_version;
        snprintf(out->driver_version_text,
                 sizeof(out->driver_version_text),
                 "%u.%u.%u (Level Zero API %u.%u)", v >> 24, (v >> 16) & 0xff,
                 v & 0xffff, ACC_ZE_MAJOR_VERSION(drv->api_version),
                 ACC_ZE_MINOR_VERSION(drv->api_version));
    }
    if (lz.ndevices == 0) {
        return lz_unavailable(err, ACC_ERR_NO_ACCELERATOR,
                              "Level Zero found %d driver(s) but no GPU "
                              "device", lz.ndrivers);
    }
    out->device_count = lz.ndevices;
    lz.ready = 1;
    acc_trace("xpu: accepted: %d device(s)", lz.ndevices);
    return ACC_OK;
}

/* Keep only the devices order[0..count), in that order: called right
 * after the probe, when the table holds nothing but what it found. */
static acc_status
lz_select_devices(const int *order, int count, acc_error *err)
{
    static lz_device probed[ACC_MAX_DEVICES];

    (void)err;
    memcpy(probed, lz.devices, sizeof(probed));
    memset(lz.devices, 0, sizeof(lz.devices));
    for (int i = 0; i < count; i++) {
        lz.devices[i] = probed[order[i]];
    }
    lz.ndevices = count;
    return ACC_OK;
}

/* Shutdown ---------------------------------------------------------------- */

/* Wait (bounded) for st's list to go idle; 0 when it did. */
static int
lz_drain(lz_stream *st, int d)
{
    acc_error ignored;
    lz_target t = lz_target_of_stream(st);
    if (lz_host_sync_usable(d)) {
        return fn.zeCommandListHostSynchronize(st->list,
                                               LZ_SHUTDOWN_WAIT_NS)
               == ZE_RESULT_SUCCESS ? 0 : -1;
    }
    lz_slot *mark = st->grave_marker;
    if (mark == NULL && lz_mark(&t, &mark, &ignored) != ACC_OK) {
        return -1;
    }
    int idle = lz_host_wait(mark, LZ_SHUTDOWN_WAIT_NS) == ZE_RESULT_SUCCESS;
    if (mark != st->grave_marker) {
        lz_unwait_retire(mark);
    }
    return idle ? 0 : -1;
}

static void
lz_free_stream_lists(lz_stream **head, int keep_structs)
{
    lz_stream *st = *head;
    *head = NULL;
    while (st != NULL) {
        lz_stream *next = st->next;
        if (!lz.drivers[lz_driver_of(st->device)].stuck) {
            fn.zeCommandListDestroy(st->list);
        }
        st->list = NULL;
        st->next = NULL;
        /* A stream the dispatcher still owns is freed by stream_destroy;
         * default and destroyed ones are ours. */
        if (!keep_structs || st->is_default) {
            lz_stream_free(st);
        }
        st = next;
    }
}

static void
lz_shutdown(void)
{
    if (!lz.ready || lz.shut) {
        return; /* after a failed zeInit no call is safe */
    }
    pthread_mutex_lock(&lz.reg_lock);
    lz.reaper_stop = 1;
    pthread_cond_broadcast(&lz.reaper_cv);
    while (lz.reaper_running) {
        pthread_cond_wait(&lz.reaper_cv, &lz.reg_lock);
    }
    for (int i = 0; i < lz.ndevices; i++) {
        lz_device *dev = &lz.devices[i];
        lz_stream *lists[2] = {dev->streams, dev->graveyard};
        for (int k = 0; k < 2; k++) {
            for (lz_stream *st = lists[k]; st != NULL; st = st->next) {
                if (lz_drain(st, dev->driver) != 0) {
                    acc_trace("xpu: a list of device %d is still busy at "
                              "exit; leaving driver %d's objects", i,
                              dev->driver);
                    lz.drivers[dev->driver].stuck = 1;
                }
            }
        }
    }
    /* The lists are drained, so no wait needs the bridge any more. */
    pthread_mutex_lock(&lz.lock);
    lz.bridge_stop = 1;
    pthread_cond_broadcast(&lz.bridge_cv);
    while (lz.bridge_running) {
        pthread_cond_wait(&lz.bridge_cv, &lz.lock);
    }
    free(lz.bridges);
    lz.bridges = NULL;
    lz.nbridges = lz.capbridges = 0;
    pthread_mutex_unlock(&lz.lock);
    lz.shut = 1;
    for (int i = 0; i < lz.ndevices; i++) {
        lz_device *dev = &lz.devices[i];
        lz_free_stream_lists(&dev->streams, 1);
        lz_free_stream_lists(&dev->graveyard, 0);
        dev->default_stream = NULL;
        free(dev->mems);
        dev->mems = NULL;
        dev->nmems = 0;
    }
    pthread_mutex_unlock(&lz.reg_lock);

    pthread_mutex_lock(&lz.lock);
    for (int d = 0; d < lz.ndrivers; d++) {
        lz_driver *drv = &lz.drivers[d];
        lz_pool *pool = drv->pools;
        while (pool != NULL) {
            lz_pool *next = pool->next;
            if (!drv->stuck) {
                for (uint32_t i = 0; i < pool->created; i++) {
                    fn.zeEventDestroy(pool->slots[i].event);
                }
                fn.zeEventPoolDestroy(pool->handle);
            }
            free(pool);
            pool = next;
        }
        drv->pools = NULL;
        drv->free[0] = drv->free[1] = drv->retired = NULL;
        free(drv->links);
        drv->links = NULL;
        drv->nlinks = drv->caplinks = 0;
        if (drv->context != NULL && !drv->stuck) {
            ze_result_t r = fn.zeContextDestroy(drv->context);
            if (r != ZE_RESULT_SUCCESS) {
                acc_trace("xpu: zeContextDestroy failed (0x%x)",
                          (unsigned)r);
            }
        }
        drv->context = NULL;
    }
    pthread_mutex_unlock(&lz.lock);
    acc_trace("xpu: shut down");
}

/* What a foreign pointer is: asked of each driver's context (memory of
 * a context other than ours is unknown: dpctl and torch use their own
 * contexts, so from_dlpack of their memory reports it as not the
 * driver's). */
static acc_status
lz_pointer_info(uintptr_t ptr, acc_pointer_info *info, acc_error *err)
{
    info->kind = ACC_POINTER_UNKNOWN;
    info->device = -1;
    for (int d = 0; d < lz.ndrivers; d++) {
        ze_memory_allocation_properties_t props = {
            ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, NULL,
            ZE_MEMORY_TYPE_UNKNOWN, 0, 0,
        };
        ze_device_handle_t dev = NULL;
        ze_context_handle_t ctx = NULL;
        pthread_mutex_lock(&lz.lock);
        acc_status status = lz_context_locked(d, &ctx, err);
        pthread_mutex_unlock(&lz.lock);
        if (status != ACC_OK) {
            return status;
        }
        ze_result_t r = fn.zeMemGetAllocProperties(ctx, (const void *)ptr,
                                                   &props, &dev);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeMemGetAllocProperties", r, d);
        }
        if (props.type == ZE_MEMORY_TYPE_UNKNOWN) {
            continue;
        }
        info->kind = props.type == ZE_MEMORY_TYPE_HOST ? ACC_POINTER_HOST
                     : props.type == ZE_MEMORY_TYPE_SHARED
                         ? ACC_POINTER_SHARED : ACC_POINTER_DEVICE;
        for (int i = 0; i < lz.ndevices; i++) {
            if (lz.devices[i].handle == dev) {
                info->device = i;
            }
        }
        return ACC_OK;
    }
    return ACC_OK;
}

/* The child of fork(): the dispatcher never calls a backend there once
 * one was initialised, so only the global locks need to be usable again;
 * the reaper and bridge threads were not copied. */
static void
lz_after_fork_child(void)
{
    pthread_mutex_init(&lz.default_lock, NULL);
    pthread_mutex_init(&lz.reg_lock, NULL);
    pthread_mutex_init(&lz.foreign_lock, NULL);
    pthread_mutex_init(&lz.lock, NULL);
    pthread_mutex_init(&lz.sysman_lock, NULL);
    pthread_mutex_init(&lz_mem.lock, NULL);
    pthread_cond_init(&lz.reaper_cv, NULL);
    pthread_cond_init(&lz.bridge_cv, NULL);
    lz.reaper_running = 0;
    lz.bridge_running = 0;
}

const acc_backend acc_level_zero_backend = {
    .name = LZ_BACKEND,
    .device_type = LZ_BACKEND,
    .torch_device_type = 12,  /* c10::DeviceType::XPU */
    .dlpack_device_type = 14, /* kDLOneAPI */
    .caps = 0,
    .probe = lz_probe,
    .select_devices = lz_select_devices,
    .shutdown = lz_shutdown,
    .after_fork_child = lz_after_fork_child,
    .device_activate = NULL, /* Level Zero has no current device */
    .device_synchronize = lz_device_synchronize,
    .device_properties = lz_device_properties,
    .stream_default = lz_stream_default,
    .stream_priority_range = lz_stream_priority_range,
    .stream_create = lz_stream_create,
    .stream_wrap = NULL, /* the handle is enough; see the top */
    .stream_destroy = lz_stream_destroy,
    .stream_query = lz_stream_query,
    .stream_synchronize = lz_stream_synchronize,
    .stream_wait_event = lz_stream_wait_event,
    .event_create = lz_event_create,
    .event_destroy = lz_event_destroy,
    .event_record = lz_event_record,
    .event_query = lz_event_query,
    .event_synchronize = lz_event_synchronize,
    .event_elapsed_ms = lz_event_elapsed_ms,
    .memory_info = lz_memory_info,
    .mem_alloc = lz_mem_alloc,
    .mem_free = lz_mem_free,
    .host_alloc = lz_host_alloc,
    .host_free = lz_host_free,
    .mem_copy = lz_mem_copy,
    .mem_fill = lz_mem_fill,
    .pointer_info = lz_pointer_info,
};
