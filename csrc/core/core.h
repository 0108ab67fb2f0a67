/*
 * core.h - what only the core's files share: the dispatcher (error.c,
 * hooks.c, visible.c, registry.c, device.c, cache.c, event.c, stream.c,
 * restore.c) and the layers on it (uses.c, memory.c, allocator.c,
 * graph.c, kernel.c).  The Python layer includes accel.h, never this;
 * backends include backend.h.
 *
 * The core is one-way.  From the bottom: errors and tracing, the hook
 * table and the visible-devices parser; the registry (probe, selection,
 * deferred initialisation, the fork guard); devices; the cache of driver
 * streams and events; events; streams; `with` blocks; then the books of
 * uses, memory, the allocator, graphs and kernels.  A file calls only
 * files below it.  Where a lower file must let a higher one act (a stream is
 * destroyed, the child after fork), it runs the hooks that the higher
 * one registered (hooks.c), never a function by name.
 */
#ifndef ACCEL_CORE_H
#define ACCEL_CORE_H

#include <accelerator/backend.h>

#include "accel.h"
#include "backend_check.h"
#include "slot_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-thread state read on hot paths (the current device and stream)
 * sits in initial-exec TLS: a few bytes, reached without a call. */
#define ACC_TLS __thread __attribute__((tls_model("initial-exec")))

/* The built-in backends --------------------------------------------------- */

/* The registry: every built-in backend's descriptor (defined in
 * backends/<name>/), one line each, in probe order (the first usable
 * backend is selected).  Adding a backend adds its line here and nothing
 * else in the core. */
#define ACC_BACKENDS(X)                                                   \
    X(acc_cuda_backend)                                                   \
    X(acc_level_zero_backend)                                             \
    X(acc_hip_backend)                                                    \
    X(acc_opencl_backend)

#define ACC_DECLARE_BACKEND(descriptor) extern const acc_backend descriptor;
ACC_BACKENDS(ACC_DECLARE_BACKEND)
#undef ACC_DECLARE_BACKEND

/* The host services every backend gets through its attach slot, built-in
 * or plugin (host.c: base's tracing and error wording). */
extern const acc_host acc_core_host;

/* Lifecycle hooks (hooks.c) --------------------------------------------- */

/*
 * What the dispatcher does that a layer above it must hear of.  A layer
 * fills one acc_hooks (static storage; NULL for the hooks it does not
 * need) and registers it from a constructor, at load, before any thread
 * can run a hook.  The hooks of one kind run in registration order and
 * must not depend on it.
 */
typedef struct acc_hooks {
    /* The native stream of s is about to be destroyed (its handle may
     * then be given to a new stream). */
    void (*stream_destroyed)(const acc_stream *s);
    /* acc_empty_cache() is about to destroy the pooled streams and
     * events: settle what has completed (never wait). */
    void (*empty_cache)(void);
    /* At exit, the selected backend (initialised; not in a forked child)
     * is about to shut down: release what is held of its objects. */
    void (*shutdown)(void);
    /* In the child of fork(), before anything else runs there: make the
     * layer's own locks usable again. */
    void (*after_fork_child)(void);
    /* e was recorded on s; s waited for e; e (made or not) is about to
     * be reused or freed: what the register of captures needs to know
     * which streams joined a capture. */
    void (*event_recorded)(const acc_event *e, const acc_stream *s);
    void (*stream_waited)(const acc_stream *s, const acc_event *e);
    void (*event_released)(const acc_event *e);
    /* A block marked shared (acc_block_set_shared) is being freed, or an
     * interprocess event released: nonzero when the hook took it over
     * (ipc.c: other processes may hold it). */
    int (*keep_block)(acc_block *b);
    int (*keep_event)(acc_event *e);
    struct acc_hooks *next;   /* hooks.c's */
} acc_hooks;

void acc_hooks_register(acc_hooks *hooks);
void acc_hooks_stream_destroyed(const acc_stream *s);
void acc_hooks_empty_cache(void);
void acc_hooks_shutdown(void);
void acc_hooks_after_fork_child(void);
void acc_hooks_event_recorded(const acc_event *e, const acc_stream *s);
void acc_hooks_stream_waited(const acc_stream *s, const acc_event *e);
void acc_hooks_event_released(const acc_event *e);
int acc_hooks_keep_block(acc_block *b);
int acc_hooks_keep_event(acc_event *e);

/* How many registrations want the event hooks now (graph.c: one per
 * capture in progress).  The dispatcher calls the three event hooks only
 * while it is not 0, so that recording or waiting for an event outside
 * any capture costs one load instead of a walk of the hooks. */
extern int acc_hooks_event_watchers;
void acc_hooks_watch_events(int delta);

static inline int
acc_hooks_events_watched(void)
{
    return __atomic_load_n(&acc_hooks_event_watchers, __ATOMIC_ACQUIRE) != 0;
}

/* ACCELERATOR_VISIBLE_DEVICES (visible.c) ------------------------------- */

typedef struct acc_visible {
    const char *text;          /* the variable's value, NULL when unset */
    int count;
    int order[ACC_MAX_DEVICES];
    char error[256];           /* why the value is malformed, "" if not */
} acc_visible;

/* Parse text (NULL: unset): decimal indices, spaces around them allowed;
 * set but empty means no device. */
void acc_visible_parse(acc_visible *v, const char *text);
/* Whether v can restrict backend b of count probed devices: ACC_OK when
 * unset; otherwise why not, in why. */
acc_status acc_visible_check(const acc_visible *v, const acc_backend *b,
                             int count, char *why, size_t size);

/* The registry (registry.c) --------------------------------------------- */

/* The selected backend (NULL when none), for the files that forward to
 * it. */
const acc_backend *acc_selected_backend(void);
/* Nonzero in a child forked from a process that had initialised (or was
 * initialising) a backend: no driver may be called. */
int acc_forked(void);
/* Probed, a backend selected, not forked: acc_check_usable's answer
 * without its message, for the hot getters. */
int acc_usable(void);

/* Backend plugins (plugin.c) -------------------------------------------- */

/* The most plugins a process loads. */
/* Shared blocks (allocator.c, for ipc.c).  A block marked shared goes
 * to the keep_block hook when freed (ipc.c's limbo) and is freed by
 * acc_ipc_collect once unmarked; its segment is the driver allocation
 * that holds it. */
void acc_block_set_shared(acc_block *b, int shared);
void acc_block_segment(acc_block *b, uintptr_t *base, size_t *size);

#define ACC_MAX_PLUGINS 16

/* Open and check every plugin, once, from the probe: those named by
 * ACCELERATOR_BACKEND_PLUGINS, then those the Python layer offered.  The
 * accepted tables are appended to registry[count..room) (checked against
 * the tables before them); the new count is returned.  Refused ones are
 * kept, with the reason, for the report. */
int acc_plugins_load(const acc_backend **registry, int count, int room);
/* The file and origin ("ACCELERATOR_BACKEND_PLUGINS", an entry point) of
 * the registered plugin table b; NULL for a built-in backend. */
const char *acc_plugin_path(const acc_backend *b);
const char *acc_plugin_origin(const acc_backend *b);
/* The refused plugins, in the order they were met. */
int acc_plugins_refused_count(void);
const acc_backend_info *acc_plugins_refused_at(int i);

/* Devices (device.c) ---------------------------------------------------- */

/* acc_check_device, then acc_ready: the device is valid and its driver
 * initialised (may block: call without the GIL). */
acc_status acc_check_device_ready(int device, acc_error *err);

/* The cache of driver streams and events (cache.c) ---------------------- */

/* Fill s (device and priority set) with a pooled native stream of its
 * device and priority: 1, or 0 when there is none. */
int acc_cache_take_stream(acc_stream *s);
/* Keep the native stream of s, which nobody uses any more, for reuse; or
 * destroy it when its device's pool is full. */
void acc_cache_put_stream(acc_stream *s);
/* Fill e (device and flags set) with a pooled native event: 1, or 0. */
int acc_cache_take_event(acc_event *e);
/* Keep the native event of e (made, owned by nobody) for reuse, or
 * destroy it; e->native is NULL afterwards. */
void acc_cache_put_event(acc_event *e);

/* Memory (memory.c) ------------------------------------------------------ */

/* Nonzero when the backend has device memory (the memory slots). */
int acc_has_memory(void);
/* Deferred releases: release what has become ready; with wait, wait for
 * everything first.  Returns the number still pending. */
int acc_deferred_poll(int wait);
/* Releases waiting (a lock-free read, for the allocator's fast path). */
int acc_deferred_count(void);

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_CORE_H */
