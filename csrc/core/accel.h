/*
 * accel.h - the core C API that the Python layer calls.
 *
 * No Python types here: every function returns an acc_status and, on
 * failure, fills an acc_error that _accelerator.c turns into an exception.
 * The dispatcher validates arguments once and forwards to the selected
 * backend (backend.h).  What only the core's files share is in core.h,
 * which also says how the core is layered.
 */
#ifndef ACCEL_H
#define ACCEL_H

#include <accelerator/types.h>

#include "../base/base.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the report shows for one backend (registered or not). */
typedef struct acc_backend_info {
    const char *name;          /* "cuda" */
    const char *device_type;   /* "cuda" */
    const char *processor_label; /* what multi_processor_count counts:
                                  * "multiprocessors" (backend.h) */
    const char *library;       /* library opened or tried */
    int loaded;                /* the library was opened */
    int available;             /* usable: at least one device */
    int selected;              /* the backend in use */
    int driver_version;        /* backend-specific encoding, 0 if unknown */
    int device_count;
    char driver_version_text[64];
    char reason[512];          /* why not available ("" when available),
                                * or why its first use failed */
    char counted_by[1024];     /* how probe() counted the devices (it may
                                * name a library by its path) */
    int initialized;           /* the driver is initialised in this
                                * process (not deferred, or first used) */
    const char *plugin;        /* a plugin's shared object; NULL for a
                                * built-in backend */
    const char *origin;        /* "built-in", "ACCELERATOR_BACKEND_PLUGINS"
                                * or the entry point that named the
                                * plugin */
    int refused;               /* a plugin the core refused (reason: why) */
} acc_backend_info;

/* A plugin that the Python layer found (an accelerator.backends entry
 * point), offered to the core before the first probe. */
typedef struct acc_plugin_source {
    const char *path;          /* the shared object, or NULL */
    const char *origin;        /* where it was named, for the report */
    const char *label;         /* its name in the report until its table
                                * is read (the entry point's name) */
    const char *error;         /* why no path (NULL with a path) */
} acc_plugin_source;

/* Plugins (plugin.c).  Hand the core the plugins found above it, before
 * the first probe: copied.  0 when taken; 1 when a list was offered
 * already or the probe has begun (this one is dropped); -1 when out of
 * memory. */
int acc_plugins_offer(const acc_plugin_source *sources, int count);
/* Nonzero once a list was offered or the probe has begun. */
int acc_plugins_offered(void);

/* Selection and lifetime (registry.c) */

/* Probe the backends once; thread-safe; may block (call without the GIL). */
void acc_probe(void);
/* Nonzero once acc_probe() has completed; never blocks. */
int acc_probed(void);
/* Nonzero when a backend is selected and usable. Requires acc_probed(). */
int acc_is_available(void);
int acc_device_count(void);
/* The selected backend's device type ("cuda", "xpu", "opencl", ...: its
 * descriptor's name), or NULL. */
const char *acc_device_type(void);
/* How messages name it: "CUDA", "XPU", "OpenCL"; NULL before selection. */
const char *acc_display_device_type(void);
/* Another device type accepted for the selected backend's devices
 * ("cuda" on HIP), or NULL. */
const char *acc_device_type_alias(void);
/* Facts of the selected backend (0 when none is selected); caps:
 * ACC_CAP_* (accelerator/types.h). */
int acc_torch_device_type(void);
int acc_dlpack_device_type(void);
unsigned acc_backend_caps(void);
/* The report: one record per registered backend.  acc_probe_all() also
 * probes the backends that selection did not need (may block). */
void acc_probe_all(void);
/* At the interpreter's exit, before the process's exit handlers run: let
 * no probe start any more, and wait (a bounded time) for those running,
 * whose driver libraries may still be loading. */
void acc_exit_wait_for_probes(void);
int acc_backend_count(void);
const acc_backend_info *acc_backend_info_at(int i);
/* The first acc_registered_backend_count() records are the registered
 * backends (built-in, then plugins); the refused plugins follow. */
int acc_registered_backend_count(void);
/* Nonzero when a registered backend (a plugin's too) has the device type
 * (or alias) type[0..length).  Requires acc_probed(). */
int acc_backend_device_type_known(const char *type, size_t length);
/* The device's properties, read once and cached. */
acc_status acc_get_device_properties(int device,
                                     const acc_device_properties **out,
                                     acc_error *err);
/* Nonzero once probed with a backend selected, and not forked since
 * (registry.c writes it; read here so that the usual answer of
 * acc_check_usable is one load, in every file that asks). */
extern atomic_int acc_core_usable;
/* Why the core cannot be used (ACC_OK if it can after all). */
acc_status acc_unusable(acc_error *err);
/* Fail with ACC_ERR_NO_ACCELERATOR (reasons listed) or ACC_ERR_FORKED.
 * Calls no driver function: questions (the current device) use it. */
static inline acc_status
acc_check_usable(acc_error *err)
{
    if (atomic_load_explicit(&acc_core_usable, memory_order_acquire)) {
        return ACC_OK;
    }
    return acc_unusable(err);
}
/* Nonzero once the selected backend's driver is initialised for use (at
 * probe, or at the first use when the probe deferred it).  A child forked
 * before that may use the driver itself. */
int acc_initialized(void);
/* acc_check_usable, then initialise the driver if the probe deferred it
 * (may block: call without the GIL).  Every call that reaches a backend
 * slot does this first; callers may do it early to release the GIL. */
acc_status acc_ready(acc_error *err);
/* ACCELERATOR_VISIBLE_DEVICES as applied: *count backend device indices
 * in order (device i is the backend's order[i]); 0 when the variable is
 * unset or no backend is selected. */
int acc_visible_devices(const int **order, int *count);

/* Devices (device.c): per-thread current device, starting at 0. */
int acc_current_device(void);
/* The current device when probed and usable (not forked), else -1: the
 * checks and the read in one call, for the hot getters. */
int acc_usable_current_device(void);
/* Validate index against [0, count): ACC_ERR_DEVICE_INDEX otherwise. */
acc_status acc_check_device(long long index, acc_error *err);
/* The same for an index too large for long long, given as the caller
 * wrote it (decimal text): always fails, and the message shows that text. */
acc_status acc_check_device_text(const char *index, acc_error *err);
acc_status acc_set_device(int device, acc_error *err);
/* Nonzero when acc_set_device(device) needs no driver call. */
int acc_device_ready(int device);
/* Make the thread's current device ready for work (lazy context). */
acc_status acc_activate_current(acc_error *err);
acc_status acc_synchronize_device(int device, acc_error *err);

/* Streams (stream.c; `with` blocks: restore.c) */
/* The device's default stream (borrowed; immortal).  device is valid. */
acc_status acc_default_stream(int device, acc_stream **out, acc_error *err);
/* The thread's current stream (current != 0) or the default stream of a
 * valid device (borrowed) when that needs no driver call: 1 and *out
 * filled; 0 when the default stream must be made first.  Never blocks. */
int acc_stream_cached(int device, int current, acc_stream **out);
/* The thread's current stream on a valid device (borrowed). */
acc_status acc_current_stream(int device, acc_stream **out, acc_error *err);
/* Make s the thread's current stream on its device (takes a reference);
 * does not change the current device. */
acc_status acc_set_current_stream(acc_stream *s, acc_error *err);
/*
 * `with` blocks (device_index, Stream): a per-thread stack of what each
 * block restores on exit.  owner identifies the object that entered.
 * Push remembers device (-1: none) and stream (NULL: none; a reference
 * is taken).  Pop removes owner's innermost entry, which must be the
 * thread's innermost one when innermost_only (what names the type in the
 * error), and hands back its device and stream (the caller drops the
 * reference).  ACC_ERR_STATE when this thread has no such entry.
 */
acc_status acc_restore_push(const void *owner, int device, acc_stream *stream,
                            acc_error *err);
acc_status acc_restore_pop(const void *owner, int innermost_only,
                           const char *what, int *device,
                           acc_stream **stream, acc_error *err);
acc_status acc_stream_create(int device, int priority, acc_stream **out,
                             acc_error *err);
acc_status acc_stream_wrap(int device, uintptr_t handle, acc_stream **out,
                           acc_error *err);
acc_status acc_stream_priority_range(int device, int *least, int *greatest,
                                     acc_error *err);
void acc_stream_incref(acc_stream *s);
/* Drop a reference; the last one destroys the native stream. */
void acc_stream_decref(acc_stream *s);
acc_status acc_stream_query(acc_stream *s, acc_error *err);
acc_status acc_stream_synchronize(acc_stream *s, acc_error *err);
acc_status acc_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err);
acc_status acc_stream_wait_stream(acc_stream *s, acc_stream *other,
                                  acc_error *err);

/* Events (event.c) */
void acc_event_init(acc_event *e, unsigned flags);
/* Nonzero once e has its native event (it was recorded). */
int acc_event_made(const acc_event *e);
acc_status acc_event_record(acc_event *e, acc_stream *s, acc_error *err);
acc_status acc_event_query(acc_event *e, acc_error *err);
acc_status acc_event_synchronize(acc_event *e, acc_error *err);
acc_status acc_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                                acc_error *err);
/* Release the native event, if any. */
void acc_event_release(acc_event *e);

/* Release the driver streams and events kept for reuse (cache.c; may
 * block). */
void acc_empty_cache(void);

/* Memory (device.c) */
acc_status acc_memory_info(int device, size_t *free_bytes,
                           size_t *total_bytes, acc_error *err);

/*
 * The books of one allocation (uses.c): the stream uses, one event per
 * (device, stream handle), dropped once their work has completed.  Views, DLPack wrappers and exports write to the
 * books of the memory they share.  Uses hold events, never streams.
 */
typedef struct acc_use {
    int device;
    uintptr_t handle;
    acc_event event;
} acc_use;

typedef struct acc_uses {
    pthread_mutex_t lock;
    int n, cap;
    acc_use *v;
} acc_uses;

void acc_uses_init(acc_uses *u);
/* Record the work queued on s so far as a use of the memory (never
 * blocks, unless no event can be recorded: then it waits for s). */
acc_status acc_uses_record(acc_uses *u, acc_stream *s, acc_error *err);
/* The uses whose work has not completed yet (completed ones dropped). */
int acc_uses_pending(acc_uses *u);
/* Wait for every use (blocking: call without the GIL). */
acc_status acc_uses_synchronize(acc_uses *u, acc_error *err);
/* Move the pending events out (the caller releases them); returns how
 * many. */
int acc_uses_take(acc_uses *u, acc_event **events);
/* Release every event; the books are empty again. */
void acc_uses_clear(acc_uses *u);

/*
 * Device memory blocks (allocator.c).  A block is one allocation handed to
 * a Buffer, ordered on a stream of its device: the caching allocator's, or
 * with ACCELERATOR_ALLOCATOR=direct one driver allocation per block.
 */
typedef struct acc_block acc_block;

/* nbytes may be 0 (a valid empty block; ptr 0).  The block is ordered on
 * stream (its device is the block's device).  Out of memory (after
 * releasing the cache and retrying once): ACC_ERR_OUT_OF_MEMORY with
 * torch's message (the size asked for, the device's free and total, what
 * this process reserved and allocated).  May block (call without the
 * GIL). */
acc_status acc_malloc(int device, size_t nbytes, acc_stream *stream,
                      acc_block **out, acc_error *err);
/* The cache only, never a driver call, for callers that hold a lock such
 * as the GIL: ACC_OK with a block, or ACC_NOT_READY when acc_malloc is
 * needed (a miss, direct mode, zero bytes, pending work to settle). */
acc_status acc_malloc_try(int device, size_t nbytes, acc_stream *stream,
                          acc_block **out);
uintptr_t acc_block_ptr(const acc_block *b);
size_t acc_block_size(const acc_block *b);   /* bytes asked for */
int acc_block_device(const acc_block *b);
/* As torch's Tensor.record_stream: not reused until work queued on s so
 * far (when the block is freed) has completed. */
acc_status acc_block_record_stream(acc_block *b, acc_stream *s,
                                   acc_error *err);
/* The block's books (uses.c): in-flight operations and stream uses. */
acc_uses *acc_block_uses(acc_block *b);
/* Give the block back.  Never blocks on the device.  The memory is not
 * reused (cached) or returned to the driver (direct) before the work
 * queued on the block's stream, and on every recorded stream, has
 * completed. */
void acc_free(acc_block *b);
/* acc_free when it needs no driver call (a cached block used on no other
 * stream): ACC_OK, or ACC_NOT_READY and nothing done. */
acc_status acc_free_try(acc_block *b);

/* Copies and fills (memory.c).  The dispatcher checks the sizes and
 * devices; s is the stream the copy is queued on.  For a copy between two
 * devices, s is on one of them and the copy is also ordered after the work
 * queued on the other device's current stream, and later work there waits
 * for it (torch's copy_). */
acc_status acc_memcpy(acc_stream *s, const acc_copy *c, acc_error *err);
/* A copy between a Buffer of `buffer` bytes and its other side (`side`:
 * "other Buffer", "HostBuffer", "source", "destination") of `other`
 * bytes moves exactly the Buffer's size: ACC_ERR_INVALID_ARGUMENT, worded
 * for the operation `what`, when the sizes differ. */
acc_status acc_copy_check_sizes(const char *what, size_t buffer,
                                size_t other, const char *side,
                                acc_error *err);
/* acc_memset: dst is memory of `device`, which s must be on. */
acc_status acc_memset(acc_stream *s, int device, uintptr_t dst,
                      long long value, size_t nbytes, acc_error *err);
/* ACC_ERR_INVALID_ARGUMENT for a negative size (what names the size). */
acc_status acc_check_nbytes(long long nbytes, const char *what,
                            acc_error *err);
/* The same for a size that no size_t holds, given as the caller wrote it
 * (text, and whether it is negative): always fails, with
 * ACC_ERR_INVALID_ARGUMENT or, for a positive size, ACC_ERR_OUT_OF_MEMORY. */
acc_status acc_check_nbytes_text(const char *nbytes, int negative,
                                 const char *what, acc_error *err);
/* ACC_ERR_INVALID_ARGUMENT for a fill value outside long long, given as
 * the caller wrote it: always fails, as acc_memset does for one outside
 * 0..255. */
acc_status acc_check_fill_text(const char *value, acc_error *err);

/* Page-locked host memory (memory.c).  acc_host_free defers the release
 * until the work queued so far on each recorded stream has completed
 * (never blocks on the device). */
typedef struct acc_host_block acc_host_block;
acc_status acc_host_alloc(int device, size_t nbytes, acc_host_block **out,
                          acc_error *err);
void *acc_host_block_ptr(const acc_host_block *h);
acc_status acc_host_block_record_stream(acc_host_block *h, acc_stream *s,
                                        acc_error *err);
/* Wait for the work queued so far on each recorded stream (blocking). */
acc_status acc_host_block_synchronize(acc_host_block *h, acc_error *err);
void acc_host_free(acc_host_block *h);
/* Release the page-locked memory of freed blocks whose work has completed
 * (empty_host_cache); never waits. */
void acc_host_empty_cache(void);
/* The books of the page-locked block (uses.c). */
acc_uses *acc_host_block_uses(acc_host_block *h);

/* What a foreign pointer is (pointer_info slot). */
acc_status acc_pointer_info_of(uintptr_t ptr, acc_pointer_info *info,
                               acc_error *err);
/* Foreign memory of nbytes (> 0) at ptr, which acc_pointer_info_of found
 * to be device or shared memory of device: ACC_OK when its last byte lies
 * in the driver allocation that holds its first (pointer_range slot);
 * ACC_ERR_INVALID_ARGUMENT, naming the sizes, when it runs past that
 * allocation's end or the driver knows none (what names the caller:
 * "from_dlpack()"). */
acc_status acc_check_foreign_range(int device, uintptr_t ptr, size_t nbytes,
                                   const char *what, acc_error *err);

/*
 * Deferred release (memory.c): call release(device, ptr) once the pending
 * uses in the books (moved out of them; NULL: none) have completed,
 * without blocking.  Settled on every allocation and free of device and
 * page-locked memory; beyond 1024 waiting releases a release waits for
 * the oldest.  Every call that can run releases (these two, and the
 * allocations and frees) is made without the GIL: release may take it
 * itself, under a thread state of the interpreter it needs.
 */
typedef void (*acc_release_fn)(int device, uintptr_t ptr);
void acc_defer_release(int device, uintptr_t ptr, acc_release_fn release,
                       acc_uses *uses);
/* Settle now the waiting releases made with `release` that `claim`
 * takes (called with each entry's ptr and ctx, under the list's lock;
 * it must only look and record): they leave the list, their work is
 * waited for, and their release is NOT called: the caller, which
 * recorded them, ends them itself (for an owner about to go, such as
 * an interpreter ending, whose releases could not run later).  Blocks:
 * call without the GIL. */
typedef int (*acc_deferred_claim)(uintptr_t ptr, void *ctx);
void acc_deferred_settle(acc_release_fn release, acc_deferred_claim claim,
                         void *ctx);

/* torch's allocator statistics: one Stat per kind and pool. */
typedef struct acc_stat {
    long long current, peak, allocated, freed;
} acc_stat;

enum {
    ACC_STAT_ALL,
    ACC_STAT_SMALL_POOL,
    ACC_STAT_LARGE_POOL,
    ACC_STAT_TYPES,
};

typedef struct acc_mem_stats {
    acc_stat allocation[ACC_STAT_TYPES];      /* live blocks */
    acc_stat segment[ACC_STAT_TYPES];         /* driver allocations */
    acc_stat active[ACC_STAT_TYPES];          /* live or awaiting events */
    acc_stat inactive_split[ACC_STAT_TYPES];  /* free parts of segments */
    acc_stat allocated_bytes[ACC_STAT_TYPES];
    acc_stat reserved_bytes[ACC_STAT_TYPES];
    acc_stat active_bytes[ACC_STAT_TYPES];
    acc_stat inactive_split_bytes[ACC_STAT_TYPES];
    acc_stat requested_bytes[ACC_STAT_TYPES]; /* as asked, unrounded */
    long long num_alloc_retries;   /* cache released after a failure */
    long long num_ooms;            /* out-of-memory errors reported */
    long long num_sync_all_streams;/* device synchronizations to release */
    long long num_device_alloc;    /* successful driver allocations */
    long long num_device_free;     /* successful driver frees */
} acc_mem_stats;

/* Nonzero once anything was allocated (torch's memory_stats is empty
 * before). */
int acc_allocator_used(void);
/* Nonzero with ACCELERATOR_ALLOCATOR=direct. */
int acc_allocator_direct(void);
acc_status acc_memory_stats(int device, acc_mem_stats *out,
                            acc_error *err);
acc_status acc_reset_peak_memory_stats(int device, acc_error *err);
acc_status acc_reset_accumulated_memory_stats(int device, acc_error *err);
/* Cap what this process may reserve on device at fraction (0..1) of its
 * memory; beyond it, allocations fail with ACC_ERR_OUT_OF_MEMORY. */
acc_status acc_set_memory_fraction(int device, double fraction,
                                   acc_error *err);
/* Give every wholly free cached segment back to the driver (may block:
 * synchronizes the devices that have any). */
acc_status acc_allocator_empty_cache(acc_error *err);

/* Graphs (graph.c) ------------------------------------------------------ */

/* What a graph keeps alive for the work it captured (graph.c's callers
 * above it: a captured launch's module).  replayed: the graph's work was
 * queued again on s; release: the graph lets go. */
typedef struct acc_keeper {
    void (*replayed)(void *obj, acc_stream *s);
    void (*release)(void *obj);
} acc_keeper;

typedef struct acc_kept {
    struct acc_kept *next;
    void *obj;
    const acc_keeper *keeper;
} acc_kept;

/* One captured sequence of work, as torch.accelerator.Graph.  Zeroed
 * (acc_graph_init) is empty.  Not thread-safe: the caller serialises the
 * calls on one graph. */
typedef struct acc_graph {
    const acc_backend *backend;
    int device;
    int keep_graph;          /* keep the graph after instantiating */
    acc_stream *capturing;   /* the stream being captured (a reference) */
    int mode;                /* the capture's ACC_CAPTURE_* */
    pthread_t thread;        /* the thread that began the capture */
    int captured;            /* capture_end succeeded, until reset */
    void *graph;             /* the backend's captured graph, or NULL */
    void *exec;              /* the backend's executable, or NULL */
    acc_kept *kept;          /* what its captured work needs alive */
} acc_graph;

void acc_graph_init(acc_graph *g, int keep_graph);
/* Begin capturing on s (not a default stream; the graph empty). */
acc_status acc_graph_capture_begin(acc_graph *g, acc_stream *s, int mode,
                                   acc_error *err);
/* End the capture; without keep_graph, instantiate and drop the graph. */
acc_status acc_graph_capture_end(acc_graph *g, acc_error *err);
/* Make the executable (keep_graph only; capture ended, not yet made). */
acc_status acc_graph_instantiate(acc_graph *g, acc_error *err);
/* Replay on the current stream of the graph's device (instantiating a
 * kept graph first when needed). */
acc_status acc_graph_replay(acc_graph *g, acc_error *err);
/* Release everything; an active capture is ended and dropped.  The graph
 * is empty again and can capture anew.  Refused (ACC_ERR_STATE, nothing
 * changed) from a thread that cannot end a 'global' or 'thread_local'
 * capture; a driver that will not end the capture leaves g unchanged. */
acc_status acc_graph_reset(acc_graph *g, acc_error *err);
/* As acc_graph_reset for a graph being freed: never fails.  A capture
 * that cannot be ended keeps its stream (never pooled again).  In a
 * forked child g is forgotten without a driver call. */
void acc_graph_drop(acc_graph *g);
/* ACC_ERR_STATE when an allocation ordered on s by this thread must be
 * refused because of an active capture (s captures; or a global-mode
 * capture is active anywhere; or this thread began a thread-local one). */
acc_status acc_check_allocation_capture(acc_stream *s, acc_error *err);
/* When s is being captured (into the graph whose capture began on s),
 * the graph keeps obj until it is released, telling keeper of each
 * replay: *kept = 1 (the graph owns the caller's reference on obj);
 * otherwise *kept = 0.  ACC_ERR_HOST_MEMORY when it cannot. */
acc_status acc_graph_keep(acc_stream *s, void *obj, const acc_keeper *keeper,
                          int *kept, acc_error *err);
/* Whether s is being captured: a capture began on it, or it joined one
 * (it waited for an event recorded in the capture). */
int acc_stream_captures(acc_stream *s);
/* The same test for any operation: ACC_ERR_STATE "cannot <what> while a
 * graph captures (...): <advice>" where it must be refused. */
acc_status acc_check_capture_allows(acc_stream *s, const char *what,
                                    const char *advice, acc_error *err);

/* Kernels (kernel.c) ----------------------------------------------------- */

/* The format's name as users write it ("ptx", "opencl-c"), or NULL. */
const char *acc_code_format_name(acc_code_format f);
/* The format named name, or ACC_FORMAT_NONE when there is none. */
acc_code_format acc_code_format_named(const char *name);
/* Nonzero when the selected backend loads code of format f as it is. */
int acc_code_format_loads(acc_code_format f);
/* Nonzero for a source format (cuda-c++, hip-c++): compiled, then loaded
 * as what the compiler made. */
int acc_code_format_is_source(acc_code_format f);
/* The formats of mask (ACC_FORMAT_BIT), as "ptx, cubin, native", cut at
 * size; "" for none. */
void acc_code_format_list(unsigned mask, char *text, size_t size);

/* Loaded device code on one device, reference counted; its kernels
 * belong to it and live as long as it does. */
typedef struct acc_module acc_module;
typedef struct acc_kernel acc_kernel;

/* The format of code (format ACC_FORMAT_NONE: recognised from its
 * bytes), checked against what the selected backend loads or compiles
 * (text with a __global__ function is the C++ source of a backend that
 * compiles one; other text, not PTX, is OpenCL C, which a backend that
 * loads SPIR-V but not OpenCL C gets through an offline compiler: the
 * caller's, acc_code_format_loads). */
acc_status acc_code_format_resolve(const void *code, size_t size,
                                   acc_code_format *format, acc_error *err);
/* Load code of format (already resolved) on device with the driver's
 * build options, options_size bytes of text (NULL: none; a NUL among
 * them is refused).  On ACC_ERR_BUILD *log holds the driver's build log
 * (malloc'd; the caller frees), else NULL.  May block (the driver
 * compiles): call without the GIL. */
acc_status acc_module_load(int device, acc_code_format format,
                           const void *code, size_t size,
                           const char *options, size_t options_size,
                           acc_module **out, char **log, acc_error *err);
int acc_module_device(const acc_module *m);
acc_code_format acc_module_format(const acc_module *m);
void acc_module_incref(acc_module *m);
/* Drop a reference; the last one unloads the module and its kernels once
 * the launches that use them have completed (never blocks). */
void acc_module_release(acc_module *m);
/* The kernel `name` of m (borrowed: it lives as long as m), made on
 * first request.  ACC_ERR_NOT_FOUND, naming the module's kernels where
 * the driver tells them, when m has none of that name.  May block. */
acc_status acc_kernel_get(acc_module *m, const char *name, acc_kernel **out,
                          acc_error *err);
const char *acc_kernel_name(const acc_kernel *k);
const acc_kernel_info *acc_kernel_info_of(const acc_kernel *k);
/* Queue one launch of k on s (a stream of the kernel's device): grid[i]
 * blocks of block[i] threads per dimension, checked here (positive,
 * within the kernel's and the device's limits), as are the arguments
 * against what the driver tells of the parameters.  Records the launch
 * as a use of the module; the caller records the uses of memory
 * arguments.  May block briefly. */
acc_status acc_launch(acc_kernel *k, const long long grid[3],
                      const long long block[3], size_t shared_mem,
                      const acc_kernel_arg *args, int nargs, acc_stream *s,
                      acc_error *err);
/* The errors acc_launch words for a value the caller could not pass it
 * (an int beyond 64 bits, as text): dimension i of the grid (block: of
 * the block), not positive when below, else too large; shared_mem bytes
 * too large.  Return ACC_ERR_INVALID_ARGUMENT. */
acc_status acc_launch_dim_error(const acc_kernel *k, int block, int i,
                                const char *value, int below,
                                acc_error *err);
acc_status acc_launch_shared_mem_error(const acc_kernel *k,
                                       const char *value, acc_error *err);

/* Kernels from source (compile.c) ---------------------------------------- */

/* The most options, and the most name expressions, one compile takes. */
#define ACC_MAX_COMPILE_STRINGS 1024

/* Who compiles format (a source format the selected backend compiles) on
 * device from library (a path or a name for dlopen): the backend's id
 * (backend.h: compiler_open), the compile cache's key.  ACC_ERR_NOT_FOUND
 * when library does not open or is not that compiler (why in err).  May
 * open the library: call without the GIL. */
acc_status acc_compiler_id(int device, acc_code_format format,
                           const char *library, char *id, size_t size,
                           acc_error *err);
/* Compile size bytes of source with the compiler in library, with
 * options[0, noptions) and name expressions names[0, nnames) (each of
 * the given lengths; a NUL within is refused).  On ACC_OK *out holds the
 * code (free with acc_compiled_free); on ACC_ERR_BUILD out->log holds
 * the compiler's log, or NULL.  Takes seconds: call without the GIL. */
acc_status acc_compile(int device, acc_code_format format,
                       const char *library, const char *source, size_t size,
                       const char *const *options,
                       const size_t *option_lengths, int noptions,
                       const char *const *names, const size_t *name_lengths,
                       int nnames, acc_compiled *out, acc_error *err);
/* Free what *c holds (nnames: the name expressions it was asked for). */
void acc_compiled_free(acc_compiled *c, int nnames);

/*
 * Sharing device memory and events with other processes of the machine
 * (ipc.c; docs/processes.rst).  A handle is ACC_IPC_ENVELOPE_SIZE bytes:
 * the driver's handle inside an envelope that names its machine boot,
 * backend, device UUID, exporting process and lease.  What was shared
 * stays allocated (alive) in the exporter until no other process holds
 * it, even once its owner let it go.  All of these may make driver
 * calls: call without the GIL.
 */
#define ACC_IPC_ENVELOPE_SIZE 216

/* The handle of [ptr, ptr + nbytes) of block b (a Buffer or a view of
 * it); out has ACC_IPC_ENVELOPE_SIZE bytes. */
acc_status acc_ipc_export_memory(acc_block *b, uintptr_t ptr, size_t nbytes,
                                 unsigned char *out, acc_error *err);
/* The handle of an interprocess event, recorded at least once. */
acc_status acc_ipc_export_event(acc_event *e, unsigned char *out,
                                acc_error *err);

/* Another process's memory, opened here: *ptr and *nbytes on *device
 * until acc_ipc_import_close (after the work queued on it here has
 * completed).  fd: the driver's descriptor received with the handle, or
 * -1 (then taken from the exporter where the handle needs one); the
 * caller's stays open. */
typedef struct acc_ipc_import acc_ipc_import;
acc_status acc_ipc_open_memory(const unsigned char *data, size_t size,
                               int fd, int *device, uintptr_t *ptr,
                               size_t *nbytes, acc_ipc_import **out,
                               acc_error *err);
void acc_ipc_import_close(acc_ipc_import *imp);
/* Another library's memory by the driver's own handle alone (size bytes:
 * ACC_IPC_HANDLE_SIZE), [offset, offset + nbytes) of the allocation it
 * names, on device; the driver's range is checked (pointer_range).  No
 * envelope and no lease: the producer keeps the memory alive. */
acc_status acc_ipc_open_driver_memory(int device, const unsigned char *driver,
                                      size_t size, size_t offset,
                                      size_t nbytes, int fd, uintptr_t *ptr,
                                      acc_ipc_import **out, acc_error *err);
/* Another process's event, opened into e (initialised; its
 * ACC_EVENT_BLOCKING flag kept); acc_event_release closes it. */
acc_status acc_ipc_open_event(const unsigned char *data, size_t size,
                              int fd, acc_event *e, acc_error *err);

/* What a handle says of itself (no check of its origin). */
typedef struct acc_ipc_description {
    int event;                  /* 1 an event, 0 memory */
    char backend[16];
    unsigned char uuid[16];
    int pid;
    int driver_fd;              /* in the exporter; -1 when none */
    unsigned long long alloc_size, offset, nbytes, serial;
    unsigned char driver[ACC_IPC_HANDLE_SIZE]; /* the driver's handle */
} acc_ipc_description;
acc_status acc_ipc_describe(const unsigned char *data, size_t size,
                            acc_ipc_description *out, acc_error *err);

/* Free what was shared and let go of, now that no process holds it. */
void acc_ipc_collect(void);
/* This process's books: shared blocks and events waiting for consumers
 * (the limbo), and allocations and events of others opened here. */
void acc_ipc_held(long long *blocks, long long *bytes, long long *events,
                  long long *imports);

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_H */
