/*
 * lz.h - the Level Zero backend (device type "xpu"): what its files share.
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
 * Interprocess events (ACC_EVENT_INTERPROCESS, ipc.c) are the one event
 * of an event pool of their own (ZE_EVENT_POOL_FLAG_IPC), which another
 * process opens by the pool's handle: their slot never moves.  A record
 * reuses it as any slot is reused when it can; otherwise the stream
 * resets it in order (after our signals still to come and the waits on
 * it appended here) and signals it, then a "fence" slot of ours, which
 * tells this process's queries and waits until it has signaled, while
 * the event's slot still says the last record's state (events.c).  A
 * released interprocess slot is destroyed once nothing here uses it.
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
 * Wrapped streams have no native data (stream_wrap only checks that the
 * handle looks like one of the device's own lists, lz_stream_wrap).  A handle of one of our own lists is looked up and shares
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
 * tail; lz.foreign_lock for foreign lists), a kernel's lock (its
 * arguments, kernels.c), lz.lock (contexts, pools, slots, links,
 * bridges); kernels.c's list lock is a leaf.  One naming rule: a function whose name ends in
 * _locked expects a lock held by its caller, lz.lock unless its comment
 * names another (a stream's lock, lz.reg_lock, lz.sysman_lock).
 * No lock is held while blocking in the driver, except by shutdown while
 * it drains the lists.
 *
 * Files, one idea each, bottom first: a file calls only files above it
 * in this list (and its declarations below are in the same order), so
 * that they form no loop; where a lower file needs something of a
 * higher one, the higher one hands it down (lz.name, lz_keep):
 *   loader.c   the loader and its functions, the shared state, errors,
 *              probe and device table
 *   sysman.c   Sysman: device properties, free memory
 *   slots.c    contexts, event pools, slots, links and bridges (their
 *              lifetime)
 *   sharing.c  interprocess memory handles, interprocess events' pools
 *              (their slots' lifetime is slots.c's)
 *   lists.c    appending to a list: targets, ordering barriers, tails,
 *              markers
 *   bridge.c   waits on events of another driver (the bridge thread)
 *   graph.c    graphs: capture into a regular command list, replay on a
 *              command queue (see the comment there); what every
 *              operation asks of a capture
 *   streams.c  command lists as streams: create, wrap, query,
 *              synchronize, destroy (graveyard and reaper)
 *   events.c   events: record, wait, query, synchronize, elapsed time
 *   kernels.c  modules and kernels: load, launch (see the comment there)
 *   memory.c   allocations, copies and fills
 *   backend.c  shutdown, the child after fork, the descriptor
 */
#ifndef ACC_LEVEL_ZERO_LZ_H
#define ACC_LEVEL_ZERO_LZ_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#define ACC_BACKEND_HOST ze_host
#include <accelerator/backend.h>
#include "ze_api.h"

/* The attach slot (ze_host.c). */
void ze_attach(const acc_host *host);

/* This backend's table (named in its messages). */
extern const acc_backend acc_level_zero_backend;

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The backend's name, for messages: its descriptor's, which backend.c
 * hands down at the probe, so that the files below it need not reach up
 * to the descriptor. */
#define LZ_BACKEND (lz.name)
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
    /* An interprocess event's slot (sharing.c): the only event of a pool of
     * its own (ZE_EVENT_POOL_FLAG_IPC), made by this process (exported)
     * or opened from another's handle (imported).  Other processes name
     * it by its pool's handle, so it never moves: a record resets it in
     * place (events.c), and once released it is destroyed (retired
     * until nothing here can still use it), never pooled.  NULL for the
     * pooled slots. */
    ze_event_pool_handle_t ipc_pool;
    int ipc_imported;
    int ipc_signal;        /* a signal of ours may still be pending */
    struct lz_slot *ipc_next;  /* the driver's interprocess slots */
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
    lz_slot *ipc_slots;    /* interprocess ones, live or retired */
    int ipc_retired;       /* interprocess ones in retired: reclaim soon */
    lz_link *links;        /* waits not yet known to have run */
    size_t nlinks, caplinks;
    /* Room promised to callers between lz_reserve_link_locked and their
     * lz_link_reserved_locked: they drop lz.lock in between, so two of
     * them must not both take the last free place. */
    size_t reserved_links;
} lz_driver;

struct lz_capture;

typedef struct lz_stream {
    ze_command_list_handle_t list;
    int device;
    int is_default;
    pthread_mutex_t lock;
    struct lz_capture *capture; /* while a graph captures it (graph.c) */
    int cap_fork;          /* its fork in that capture; -1: began it */
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
    /* An interprocess event recorded again in order (events.c): a slot
     * of ours signalled right after the record's signal, which this
     * process's waits, queries and synchronize use instead of slot,
     * whose state is the last record's until the reset runs; NULL when
     * the slot tells. */
    lz_slot *fence;
    int device;
    int timing;
    /* Last recorded in a capture (graph.c; 0: not): its id, the fork
     * that recorded it (-1: the stream that began it) and that fork's
     * work so far. */
    unsigned long cap_id;
    int cap_fork;
    long cap_tip;
} lz_event;

/* The list an operation appends to, and how to serialise it. */
typedef struct lz_target {
    ze_command_list_handle_t list;
    lz_stream *st;         /* NULL for a list made elsewhere */
    pthread_mutex_t *lock;
    int device;
    int driver;
    int pinned;            /* st found by handle: release with _done */
} lz_target;

/* A reference that a graph holds while it lives, for what a command
 * recorded into it uses: taken by the file that records the command,
 * which says how to let go of it (kernels.c: a launch keeps its
 * kernel).  So graph.c needs nothing of the files above it. */
typedef struct lz_keep {
    void *object;
    void (*release)(void *object);
} lz_keep;

/* A command recorded into a capture's list (graph.c): a kernel launch
 * (handle set, with its group counts and keep), a copy (src set) or a
 * fill of nbytes at dst with value. */
typedef struct lz_op {
    void *dst;
    const void *src;
    unsigned char value;
    size_t nbytes;
    ze_kernel_handle_t handle;  /* the kernel's */
    const ze_group_count_t *groups;
    lz_keep keep;               /* the graph's once recorded */
} lz_op;

/* The loader's functions, resolved once (loader.c). */
typedef struct lz_functions {
#define LZ_FIELD(name, params) acc_pfn_##name name;
#define LZ_OPTIONAL_FIELD(name, version, params) acc_pfn_##name name;
    ACC_ZE_FUNCTIONS(LZ_FIELD)
    ACC_ZE_IPC_FUNCTIONS(LZ_FIELD)
    ACC_ZE_OPTIONAL_FUNCTIONS(LZ_OPTIONAL_FIELD)
#undef LZ_OPTIONAL_FIELD
#undef LZ_FIELD
} lz_functions;

/* The backend's process-global state (loader.c). */
typedef struct lz_state {
    void *lib;
    int opened;            /* dlopen worked (even if symbols lacked) */
    int ready;             /* probe succeeded */
    int shut;              /* shutdown ran: no more driver calls */
    const char *name;      /* the descriptor's (lz_probe) */
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
    size_t reserved_bridges;  /* promised, as reserved_links */
    int bridge_coming;     /* bridges being added: keep running */
    int bridge_running;
    int bridge_stop;
    pthread_cond_t bridge_cv;
    struct lz_graph *graphs;  /* under lock: live ones, then dead ones */
} lz_state;

extern lz_functions lz_fn;
extern lz_state lz;

/* loader.c */
acc_status lz_fail(acc_error *err, const char *api, ze_result_t r, int driver);
acc_status lz_no_memory(acc_error *err);
int lz_driver_of(int device);
int lz_start_thread(void *(*body)(void *));
/* The probe slot's work, for the descriptor `self` (backend.c). */
acc_status lz_probe(const acc_backend *self, acc_probe_result *out,
                    acc_error *err);
acc_status lz_select_devices(const int *order, int count, acc_error *err);

/* sysman.c */
acc_status lz_memory_modules_locked(lz_device *dev, acc_error *err);
acc_status lz_device_properties(int device, acc_device_properties *props,
                                acc_error *err);

/* slots.c */
acc_status lz_context_locked(int d, ze_context_handle_t *out, acc_error *err);
/* The context of device's driver, made on first use (takes lz.lock). */
acc_status lz_context_of(int device, ze_context_handle_t *ctx, acc_error *err);
void lz_retire_locked(lz_slot *s);
void lz_reclaim_locked(int d);
acc_status lz_ipc_slot_locked(int d, ze_event_pool_handle_t pool,
                              int imported, lz_slot **out, acc_error *err);
void lz_ipc_slots_shutdown_locked(int d);
int lz_pump_bridges_locked(int full);
acc_status lz_acquire_locked(int d, int timing, lz_slot **out, acc_error *err);
acc_status lz_reserve_link_locked(int d, acc_error *err);
void lz_link_reserved_locked(int d, const lz_link *link);
void lz_unwait_locked(lz_slot *s);
void lz_set_tail_locked(lz_stream *st, lz_slot *s);
acc_status lz_acquire(int d, int timing, lz_slot **out, acc_error *err);
void lz_unwait(lz_slot *s);
void lz_unwait_retire(lz_slot *s);
void lz_retire(lz_slot *s);
ze_result_t lz_host_wait(lz_slot *s, uint64_t timeout);
void lz_await(lz_slot *s, const char *what);

/* sharing.c */
acc_status lz_ipc_mem_export(int device, uintptr_t base, acc_ipc_handle *h,
                             acc_error *err);
acc_status lz_ipc_mem_open(int device, const acc_ipc_handle *h,
                           uintptr_t *base, acc_error *err);
void lz_ipc_mem_close(int device, uintptr_t base);
acc_status lz_ipc_event_slot(int d, lz_slot **out, acc_error *err);
acc_status lz_ipc_event_export(acc_event *e, acc_ipc_handle *h,
                               acc_error *err);
acc_status lz_ipc_event_open(const acc_ipc_handle *h, acc_event *e,
                             acc_error *err);

/* lists.c */
lz_target lz_target_of(const acc_stream *s);
lz_target lz_target_of_stream(lz_stream *st);
void lz_target_done(lz_target *t);
int lz_host_sync_usable(int d);
acc_status lz_append_barrier_locked(lz_target *t, lz_slot *s, lz_slot *wait,
                                    acc_error *err);
acc_status lz_mark(lz_target *t, lz_slot **out, acc_error *err);
acc_status lz_order_locked(lz_target *t, acc_error *err);
void lz_appended_locked(lz_target *t, lz_slot *done);

/* bridge.c */
acc_status lz_wait_across(lz_target t, lz_slot *slot, acc_error *err);

/* graph.c */
acc_status lz_capture_refuse_locked(lz_stream *st, const char *api,
                                    acc_error *err);
acc_status lz_capture_refuse_sync_locked(lz_stream *st, acc_error *err);
int lz_capturing_locked(lz_stream *st);
acc_status lz_capture_record_locked(lz_target *t, lz_event *ev,
                                    acc_error *err);
int lz_capture_wait_locked(lz_target *t, lz_event *ev, acc_status *status,
                           acc_error *err);
acc_status lz_capture_append_locked(lz_target *t, const lz_op *op,
                                    acc_error *err);
void lz_capture_drop(lz_stream *st);
acc_status lz_graph_capture_begin(acc_stream *s, int mode, acc_error *err);
acc_status lz_graph_capture_end(acc_stream *s, void **graph, int *capturing,
                                acc_error *err);
acc_status lz_graph_instantiate(int device, void *graph, void **exec,
                                acc_error *err);
acc_status lz_graph_launch(void *exec, acc_stream *s, acc_error *err);
void lz_graph_destroy(int device, void *graph, void *exec);
void lz_graphs_reap(void);
void lz_graphs_shutdown(void);

/* streams.c */
void lz_stream_free(lz_stream *st);
acc_status lz_stream_default(int device, acc_stream *s, acc_error *err);
acc_status lz_stream_priority_range(int device, int *least, int *greatest,
                                    acc_error *err);
acc_status lz_stream_create(acc_stream *s, acc_error *err);
acc_status lz_stream_wrap(acc_stream *s, acc_error *err);
void lz_stream_destroy(acc_stream *s);
acc_status lz_synchronize_target(lz_target t, acc_error *err);
acc_status lz_stream_query(acc_stream *s, acc_error *err);
acc_status lz_stream_synchronize(acc_stream *s, acc_error *err);
acc_status lz_device_synchronize(int device, acc_error *err);

/* events.c */
acc_status lz_event_create(acc_event *e, acc_error *err);
void lz_event_destroy(acc_event *e);
acc_status lz_event_query(acc_event *e, acc_error *err);
acc_status lz_event_synchronize(acc_event *e, acc_error *err);
acc_status lz_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                               acc_error *err);
acc_status lz_event_record(acc_event *e, acc_stream *s, acc_error *err);
acc_status lz_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err);

/* kernels.c */
acc_status lz_module_load(int device, acc_code_format format,
                          const void *code, size_t size, const char *options,
                          void **module, char **log, acc_error *err);
void lz_module_unload(int device, void *module);
acc_status lz_kernel_get(int device, void *module, const char *name,
                         void **kernel, acc_kernel_info *info,
                         acc_error *err);
void lz_kernel_release(int device, void *kernel);
acc_status lz_launch(acc_stream *s, void *kernel, const acc_launch_config *c,
                     acc_error *err);
acc_status lz_kernel_names(int device, void *module, char *names,
                           size_t size, acc_error *err);
void lz_kernels_shutdown(void);

/* memory.c */
acc_status lz_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
                          acc_error *err);
acc_status lz_mem_alloc(int device, size_t nbytes, uintptr_t *ptr,
                        acc_error *err);
acc_status lz_mem_free(int device, uintptr_t ptr, acc_error *err);
acc_status lz_host_alloc(int device, size_t nbytes, void **ptr,
                         acc_error *err);
acc_status lz_host_free(int device, void *ptr, acc_error *err);
acc_status lz_mem_copy(acc_stream *s, const acc_copy *c, acc_error *err);
acc_status lz_mem_fill(acc_stream *s, uintptr_t dst, unsigned char value,
                       size_t nbytes, acc_error *err);
void lz_memory_after_fork_child(void);
acc_status lz_pointer_info(uintptr_t ptr, acc_pointer_info *info,
                           acc_error *err);
acc_status lz_pointer_range(int device, uintptr_t ptr, uintptr_t *base,
                            size_t *size, acc_error *err);

#endif /* ACC_LEVEL_ZERO_LZ_H */
