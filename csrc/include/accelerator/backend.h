/*
 * accelerator/backend.h - the contract between the dispatcher and each
 * backend: a public, versioned C ABI.  In-tree backends (csrc/backends/)
 * and out-of-tree plugins (a shared object that exports
 * accelerator_backend_plugin) compile against this header, the base
 * types it includes (accelerator/types.h) and their own files alone, and
 * link against no symbol of the core or of the Python layer: what they
 * need of the core (tracing, the error record's wording) comes through
 * the host services table (acc_host) that the core hands every backend,
 * in-tree or plugin, through its attach slot before any other slot.
 * Installed with the package: accelerator.get_include() names the folder
 * above accelerator/.
 *
 * A backend fills one acc_backend: the ABI version it was built for and
 * the table's size, a name, its facts, a probe, and function pointers
 * grouped by the object they act on.  Built-in backends are listed once
 * in the dispatcher's registry (core/core.h's ACC_BACKENDS); plugins are
 * found at the probe.  The dispatcher validates
 * every argument before it forwards (device indices are in [0, count),
 * handles come from this backend, events are recorded and timed as the
 * operation needs), so backends trust their inputs, never parse user input
 * and never word an argument error: the dispatcher words each one once.
 *
 * Each slot is REQUIRED or OPTIONAL.  The dispatcher checks the required
 * ones once, when it registers the backend (before probing it): a backend
 * with a NULL required slot is reported unavailable, with the slot named.
 * An optional slot may be NULL; its comment says what NULL means (mostly:
 * the dispatcher reports "backend X does not support Y").  Optional slots
 * that work together form groups, filled all or none: the graph slots,
 * the device memory slots (mem_alloc, mem_free, mem_copy, mem_fill),
 * the page-locked host memory slots (host_alloc, host_free) and the
 * foreign memory slots (pointer_info, pointer_range), the compilers
 * (compiler_open, compile) and the interprocess slots (ipc_*).
 * Registration checks the groups too (backend_check.c), so the dispatcher
 * tests one slot of a group and calls the others.  It never calls a NULL
 * slot.
 *
 * What a backend must survive: the dispatcher pools driver objects.  A
 * stream made by stream_create and dropped by its owner is kept (handle
 * and native as they were) and handed to the next owner that asks for a
 * stream of the same device and priority, without stream_destroy or
 * stream_create in between; it may still be running its previous owner's
 * work, which the new owner's work follows in stream order.  Likewise a
 * dropped event (its handle and native) is kept per device and flags and
 * handed to a new owner, whose first call is event_record, while the
 * previous owner's record may still be pending.  The same native stream or
 * event therefore meets many acc_stream / acc_event structs in its life;
 * backends keep no pointer to those structs.  stream_destroy and
 * event_destroy run only from acc_empty_cache(), a full pool, or exit.
 *
 * Threading: every slot may be called from any thread, concurrently, and
 * without the GIL.  Backends keep their driver state process-global and
 * protect what they mutate.  On failure a slot returns a status other than
 * ACC_OK and fills err (see acc_error in accelerator/types.h): backend name, driver
 * function, driver code and the driver's error name.
 */
#ifndef ACCELERATOR_BACKEND_H
#define ACCELERATOR_BACKEND_H

#include <accelerator/types.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The ABI version.  MAJOR changes when a change breaks existing backends
 * (a slot's meaning or signature, a field moved): the core refuses a
 * table of another major version.  MINOR grows when slots or fields are
 * appended at the end of acc_backend (or of acc_host): a backend built
 * for an older minor version loads in a newer core, which treats every
 * slot past the table's struct_size as NULL; a core never reads past a
 * table's struct_size.  New slots are appended, never inserted.
 */
#define ACCELERATOR_BACKEND_ABI_MAJOR 1
#define ACCELERATOR_BACKEND_ABI_MINOR 2

/*
 * The host services: what the core lends every backend, the same for a
 * built-in backend and a plugin.  The core passes it to the attach slot
 * once, before any other slot; it lives as long as the process.  Its
 * first three fields are the core's ABI version and sizeof(acc_host) as
 * the core was built: a backend built for a newer minor version checks
 * struct_size before it uses a field appended after its own version's.
 * A backend does not call these pointers itself: it defines
 * ACC_BACKEND_HOST (below) and calls acc_trace and acc_error_set.
 */
typedef struct acc_host {
    uint32_t abi_major;           /* ACCELERATOR_BACKEND_ABI_MAJOR */
    uint32_t abi_minor;           /* ACCELERATOR_BACKEND_ABI_MINOR */
    size_t struct_size;           /* sizeof(acc_host) */
    /* A trace line on stderr ("accelerator: " fmt) when ACCELERATOR_DEBUG
     * is set; nothing otherwise. */
    void (*trace)(const char *fmt, va_list ap);
    /* Fill err with status and a message; err->backend names the
     * selected backend (NULL before selection), err->api, code and
     * code_name are cleared. */
    void (*error_set)(acc_error *err, acc_status status, const char *fmt,
                      va_list ap);
} acc_host;

/* What probe() learns about the driver. */
typedef struct acc_probe_result {
    const char *library;          /* library path or soname tried */
    int loaded;                   /* the library was opened */
    int device_count;             /* usable devices (0 when unavailable) */
    int driver_version;           /* as the driver encodes it, 0 if unknown */
    char driver_version_text[64]; /* e.g. "12.4" */
    int deferred;                 /* devices counted without initialising
                                   * the driver: initialize() runs at first
                                   * use */
    char counted_by[1024];        /* how the devices were counted, for the
                                   * report: "cuInit", "NVML (...)" */
} acc_probe_result;

struct acc_backend {
    /* REQUIRED, first, in this order: the ABI version the backend was
     * built for and sizeof(acc_backend) as it was built (ACC_BACKEND_ABI
     * fills the three).  The core checks them before it reads any other
     * field: another major version is refused, and so is a struct_size
     * smaller than this version's first minor release had; slots past
     * struct_size count as NULL. */
    uint32_t abi_major;
    uint32_t abi_minor;
    size_t struct_size;

    /* REQUIRED.  The backend's name (ACCELERATOR_BACKEND, the report,
     * errors) and the device type users write: "cuda", "xpu", "opencl". */
    const char *name;
    const char *device_type;
    /* REQUIRED.  How messages name the device type, as torch words its
     * own: "CUDA", "XPU", "OpenCL" ("CUDA out of memory."). */
    const char *display_type;
    /* REQUIRED.  What the report calls the units that
     * multi_processor_count counts on this backend's devices:
     * "multiprocessors" (CUDA's SMs), "execution units", "compute units". */
    const char *processor_label;

    /* Facts the Python layer and the tests read instead of branching on
     * the name. */
    int torch_device_type;   /* c10::DeviceType: CUDA 1, OPENCL 4, XPU 12 */
    int dlpack_device_type;  /* DLDeviceType: kDLCUDA 2, kDLOpenCL 4,
                              * kDLOneAPI 14 */
    unsigned caps;           /* ACC_CAP_* (accelerator/types.h) */
    /* ACC_FORMAT_BIT()s of the code formats module_load takes (0 without
     * kernels).  Recognising code (format=None), an ELF image is a
     * cubin for machine EM_CUDA, an hsaco for EM_AMDGPU and native code
     * for any other, and text that is not PTX is OpenCL C. */
    unsigned code_formats;
    /* OPTIONAL.  Why module_load takes no build options (Module(options=)
     * is then refused, with this reason); NULL where they reach the
     * driver's compiler. */
    const char *no_build_options;
    /* OPTIONAL.  Why a pointer parameter (ACC_PARAM_POINTER, where the
     * driver tells kinds) takes only memory arguments (a Buffer, a
     * HostBuffer), never an address passed as bytes by value: the
     * dispatcher then refuses such an argument, with this reason, before
     * launch is called.  NULL where an address's bytes pass as a pointer
     * (CUDA, HIP, Level Zero take a device address by value). */
    const char *pointer_params_take_memory;
    /* OPTIONAL.  Why a backend without the graph slots has no graphs:
     * accelerator.Graph's error says it after "does not support graphs: ".
     * NULL where the backend has graphs. */
    const char *graphs_unsupported;
    /* OPTIONAL.  Another device type that names this backend's devices
     * where users pass a device ("cuda" for HIP: torch built for ROCm
     * calls AMD GPUs cuda devices); NULL where there is none.  A
     * plugin's is checked as its device type is, but may be a built-in
     * backend's device type. */
    const char *device_type_alias;

    /* Lifetime ----------------------------------------------------------- */

    /* OPTIONAL (NULL: the backend uses no host service).  Called once,
     * before any other slot (before probe), with the core's host
     * services, which live as long as the process.  Must not call the
     * driver.  ACC_BACKEND_HOST_DEFINE writes the function. */
    void (*attach)(const acc_host *host);

    /* REQUIRED.  Open the driver library, resolve its symbols, initialise
     * the driver (or only count the devices, out->deferred: see
     * initialize) and count devices.  Called at most once per process, under the
     * dispatcher's probe lock.  Must not create contexts or allocate
     * device memory.  Returns ACC_OK with out->device_count > 0 when the
     * backend is usable; otherwise a failure status and a reason in err
     * (err->message is shown to users as "why not"). */
    acc_status (*probe)(acc_probe_result *out, acc_error *err);

    /* OPTIONAL (NULL: probe() never defers).  Initialise the driver for
     * use when probe() only counted the devices (out->deferred), so that
     * a process that asked nothing but questions (is_available,
     * device_count) can still fork children that use the driver.  Called
     * at most once, under the dispatcher's lock, before the first slot
     * that uses a device (and after select_devices); may block.  Sets
     * *device_count to the count the initialised driver reports. */
    acc_status (*initialize)(int *device_count, acc_error *err);

    /* OPTIONAL (NULL: only initialize() could have initialised the
     * driver).  Asked while initialize() has not run: nonzero when
     * another library of this process initialised the driver already,
     * so that its work may be queued on a device (and initialising costs
     * no fork safety any more).  Must not initialise the driver or
     * block. */
    int (*initialized_elsewhere)(void);

    /* OPTIONAL (NULL: the backend cannot restrict its devices, and the
     * dispatcher refuses ACCELERATOR_VISIBLE_DEVICES for it).  Expose only
     * the probed devices order[0..count), in that order: device i becomes
     * the probed device order[i].  The indices are distinct and below the
     * probed count.  Called at most once, right after a successful probe,
     * before any other slot; must not block. */
    acc_status (*select_devices)(const int *order, int count,
                                 acc_error *err);

    /* OPTIONAL (NULL: nothing to release).  Release what the backend
     * holds (contexts, pools).  Called at exit from the thread that
     * probed; never after fork in the child. */
    void (*shutdown)(void);

    /* OPTIONAL (NULL: no locks of its own).  In the child of fork(),
     * before anything else runs there: make the backend's own locks
     * usable again (another thread of the parent may have held one at
     * the fork).  Only locks the child could take while it is refused
     * every driver call need it. */
    void (*after_fork_child)(void);

    /* Devices ------------------------------------------------------------ */

    /* OPTIONAL (NULL: the driver has no per-thread notion of a current
     * device).  Make `device` the calling thread's current device in the
     * driver's own sense (CUDA: retain the primary context once per
     * process, then make it current on this thread). */
    acc_status (*device_activate)(int device, acc_error *err);

    /* REQUIRED.  Wait until all work queued on `device` by anyone (every
     * stream of the device, pooled ones included) has finished.
     * Blocking.  Does not change the calling thread's current device. */
    acc_status (*device_synchronize)(int device, acc_error *err);

    /* OPTIONAL (NULL: "does not support device properties").  Fill
     * *props.  May be slow; the caller caches. */
    acc_status (*device_properties)(int device, acc_device_properties *props,
                                    acc_error *err);

    /* Streams ------------------------------------------------------------ */

    /* REQUIRED.  Fill *s for the default stream of `device`: handle and
     * native.  Called once per device, lazily; must not block.  The
     * default stream is never destroyed before shutdown. */
    acc_status (*stream_default)(int device, acc_stream *s, acc_error *err);

    /* OPTIONAL (NULL: no priorities; every stream gets priority 0).
     * Driver priority range of `device`: *greatest <= *least, lower is
     * more urgent. */
    acc_status (*stream_priority_range)(int device, int *least,
                                        int *greatest, acc_error *err);

    /* REQUIRED.  Create a new stream on s->device with driver priority
     * s->priority (already clamped to the range).  Fill s->handle and
     * s->native. */
    acc_status (*stream_create)(acc_stream *s, acc_error *err);

    /* OPTIONAL (NULL: the handle alone is enough for every other slot).
     * Adopt a native handle made elsewhere (s->handle is set, s->device
     * validated).  Fill s->native; must not take ownership.
     * ACC_ERR_INVALID_ARGUMENT (no message needed: the dispatcher words
     * it) when the handle is not a stream of that device. */
    acc_status (*stream_wrap)(acc_stream *s, acc_error *err);

    /* REQUIRED.  Destroy a stream made by stream_create (never a default
     * or wrapped one).  Work still queued completes; must not block on
     * it.  Cannot fail visibly: a driver error here is swallowed. */
    void (*stream_destroy)(acc_stream *s);

    /* REQUIRED.  ACC_OK when all queued work is done, ACC_NOT_READY when
     * not.  Never blocks.  Work that others queued through the handle may
     * go unseen where the driver cannot tell without waiting (Level Zero
     * before spec 1.6); stream_synchronize always waits for it. */
    acc_status (*stream_query)(acc_stream *s, acc_error *err);

    /* REQUIRED.  Block until all queued work is done. */
    acc_status (*stream_synchronize)(acc_stream *s, acc_error *err);

    /* REQUIRED.  Make future work on s wait until e (recorded, maybe on
     * another device) completes; does not block the host. */
    acc_status (*stream_wait_event)(acc_stream *s, acc_event *e,
                                    acc_error *err);

    /* Events ------------------------------------------------------------- */

    /* REQUIRED.  Create the native event of e on e->device (set by the
     * caller) with e->flags; fill e->handle and e->native. */
    acc_status (*event_create)(acc_event *e, acc_error *err);

    /* REQUIRED.  Destroy e's native event.  Pending work may still refer
     * to it.  Cannot fail visibly. */
    void (*event_destroy)(acc_event *e);

    /* REQUIRED.  Capture the work queued on s so far: e completes when it
     * has run.  s and e are on the same device.  e may hold an earlier
     * record (its own, or a previous owner's, still pending). */
    acc_status (*event_record)(acc_event *e, acc_stream *s, acc_error *err);

    /* REQUIRED.  ACC_OK when complete, ACC_NOT_READY when not.  e has
     * been recorded (the dispatcher answers for unrecorded events). */
    acc_status (*event_query)(acc_event *e, acc_error *err);

    /* REQUIRED.  Block until e completes (spinning or blocking as
     * e->flags say).  e has been recorded. */
    acc_status (*event_synchronize)(acc_event *e, acc_error *err);

    /* OPTIONAL (NULL: "does not support event timing").  Milliseconds
     * between two recorded timing events of one device (negative when end
     * completed first).  ACC_NOT_READY when either has not completed;
     * ACC_ERR_INVALID_ARGUMENT (no message needed: the dispatcher words
     * it) when either has no record the device will run (its records
     * went into a graph capture). */
    acc_status (*event_elapsed_ms)(acc_event *start, acc_event *end,
                                   float *ms, acc_error *err);

    /* Memory ------------------------------------------------------------- */

    /* OPTIONAL (NULL: "does not support memory information").  Free and
     * total device memory in bytes, without changing the calling thread's
     * current device. */
    acc_status (*memory_info)(int device, size_t *free_bytes,
                              size_t *total_bytes, acc_error *err);

    /* OPTIONAL, as a group with mem_free, mem_copy and mem_fill: all four
     * or none (NULL: Buffer() reports "does not support device memory").
     * Raw device allocation of nbytes (> 0) on device,
     * aligned to at least 256 bytes; *ptr is the device address (where a
     * driver has no addresses, its native handle cast to uintptr_t, never
     * 0).  ACC_ERR_OUT_OF_MEMORY when the device cannot serve it (the
     * dispatcher adds the size and the free/total memory to the message).
     * The allocator (allocator.c) calls this; nothing else.  May block
     * briefly; does not change the calling thread's current device. */
    acc_status (*mem_alloc)(int device, size_t nbytes, uintptr_t *ptr,
                            acc_error *err);

    /* OPTIONAL, with mem_alloc.  Return a raw allocation.  The caller
     * guarantees that no work that the caller queued on any stream still
     * uses it (the allocator waits for events first); the backend may
     * still defer internally.  Must not block for long. */
    acc_status (*mem_free)(int device, uintptr_t ptr, acc_error *err);

    /* OPTIONAL, as a pair with host_free (NULL: HostBuffer() reports "does
     * not support page-locked host memory").  Page-locked host memory of nbytes
     * (> 0) that every device of the backend can copy to and from
     * asynchronously; device says which device's context to use where
     * the driver needs one. */
    acc_status (*host_alloc)(int device, size_t nbytes, void **ptr,
                             acc_error *err);

    /* OPTIONAL, with host_alloc.  The same guarantee as mem_free: no
     * queued work still uses ptr. */
    acc_status (*host_free)(int device, void *ptr, acc_error *err);

    /* OPTIONAL, with mem_alloc.  Queue one copy of c->nbytes (> 0) on s, in
     * stream order: it starts after the work queued on s before it, and
     * work queued on s later starts after it.  c->kind says which sides
     * are device memory (addresses from mem_alloc, possibly offset, or
     * foreign device memory of the backend).  s->device is c->dst_device
     * or c->src_device (for ACC_COPY_PEER, either); the dispatcher has
     * already ordered the copy against the other device's current stream.
     * With ACC_COPY_PAGEABLE the host side is ordinary memory the caller
     * reuses as soon as this returns: return only when the host side is
     * no longer needed (a host-to-device copy may be in flight from a
     * staging buffer; a device-to-host copy has completed).  Without it
     * the host side is host_alloc memory and the call does not wait. */
    acc_status (*mem_copy)(acc_stream *s, const acc_copy *c,
                           acc_error *err);

    /* OPTIONAL, with mem_alloc.  Queue setting nbytes (> 0) bytes at device
     * address dst (on s->device) to value, in stream order on s. */
    acc_status (*mem_fill)(acc_stream *s, uintptr_t dst,
                           unsigned char value, size_t nbytes,
                           acc_error *err);

    /* OPTIONAL (NULL: from_dlpack() reports "does not support looking up
     * foreign memory").  What ptr
     * is: device memory of this backend (which device), host memory the
     * driver knows, or unknown (ACC_POINTER_UNKNOWN, not an error).  Must
     * not change the calling thread's current device. */
    acc_status (*pointer_info)(uintptr_t ptr, acc_pointer_info *info,
                               acc_error *err);

    /* OPTIONAL, as a pair with pointer_info (both or none).  The driver
     * allocation holding the byte at ptr, which pointer_info found to be
     * device or shared memory of device: *base its first byte, *size its
     * bytes, as the driver tells them (another library's suballocation
     * lies inside the driver allocation it was carved from: that range).
     * ACC_ERR_NOT_FOUND (no message needed: the dispatcher words it)
     * where the driver says no allocation holds ptr.  Must not change the
     * calling thread's current device. */
    acc_status (*pointer_range)(int device, uintptr_t ptr, uintptr_t *base,
                                size_t *size, acc_error *err);

    /* Kernels ------------------------------------------------------------ */

    /* OPTIONAL, as a group: module_load, module_unload, kernel_get,
     * kernel_release and launch, all five or none (NULL: Module() reports
     * "backend X does not support kernels").  code_formats (above) lists
     * the formats module_load takes; the dispatcher passes no other.
     *
     * Load code (size bytes) of format on device, built with the driver's
     * options (NULL: none); *module is the backend's own object.  When the
     * driver refuses to build it: ACC_ERR_BUILD, with the driver's build
     * log in *log (malloc'd; NULL when it has none) and the driver's code
     * in err.  Code the driver cannot read (not of the format): the
     * driver's error as ACC_ERR_DRIVER.  May block while the driver
     * compiles. */
    acc_status (*module_load)(int device, acc_code_format format,
                              const void *code, size_t size,
                              const char *options, void **module,
                              char **log, acc_error *err);

    /* Release module (kernel_release has run for each of its kernels).
     * No launch that uses it is still queued.  Cannot fail visibly. */
    void (*module_unload)(int device, void *module);

    /* The kernel `name` of module: *kernel is the backend's object, *info
     * what the driver tells of it (the dispatcher set every field to
     * "unknown" first).  ACC_ERR_NOT_FOUND (no message needed) when the
     * module has no such kernel. */
    acc_status (*kernel_get)(int device, void *module, const char *name,
                             void **kernel, acc_kernel_info *info,
                             acc_error *err);

    /* Release a kernel of kernel_get.  No launch of it is still queued.
     * Cannot fail visibly. */
    void (*kernel_release)(int device, void *kernel);

    /* Queue one launch of kernel on s (of the kernel's device) in stream
     * order, with c checked against the kernel's info: dimensions within
     * the limits it gave, nargs equal to nparams and each argument's size
     * equal to its parameter's where those are known.  Memory arguments
     * are addresses of this backend's memory (mem_alloc, host_alloc).
     * The same kernel may be launched from several threads at once; the
     * backend serialises what the driver keeps per kernel (its arguments).
     * Captured like any work when s captures. */
    acc_status (*launch)(acc_stream *s, void *kernel,
                         const acc_launch_config *c, acc_error *err);

    /* OPTIONAL (NULL: the error for a missing kernel names none).  The
     * names of module's kernels, separated by ", ", into names (cut at
     * size). */
    acc_status (*kernel_names)(int device, void *module, char *names,
                               size_t size, acc_error *err);

    /* Graphs ------------------------------------------------------------- */

    /* OPTIONAL, as a group: graph_capture_begin, graph_capture_end,
     * graph_instantiate, graph_launch and graph_destroy, all five or none
     * (NULL: accelerator.Graph reports "backend X does not support
     * graphs").  graph and exec are the backend's own opaque objects.
     *
     * Begin capturing on s (never a default stream: the dispatcher refuses
     * those) in mode ACC_CAPTURE_* (accel.h): work queued on s from now on
     * is recorded into a graph, not run.  Work queued before still runs.
     * Fails (ACC_ERR_DRIVER or ACC_ERR_STATE) when s already captures. */
    acc_status (*graph_capture_begin)(acc_stream *s, int mode,
                                      acc_error *err);

    /* End the capture on s; *graph receives the work recorded since
     * graph_capture_begin.  When the capture was invalidated (an
     * operation the driver refuses during capture), the recorded work is
     * dropped, *graph stays NULL and the driver's error is returned.
     * *capturing says whether s still captures afterwards (a failure
     * that did not end it, such as ending from the wrong thread). */
    acc_status (*graph_capture_end)(acc_stream *s, void **graph,
                                    int *capturing, acc_error *err);

    /* An executable of graph (from graph_capture_end) for device; the
     * graph itself stays valid and owned by the caller. */
    acc_status (*graph_instantiate)(int device, void *graph, void **exec,
                                    acc_error *err);

    /* Queue one replay of exec on s (of exec's device), in stream order:
     * the recorded work runs again, in the order recorded, reading its
     * sources when it runs. */
    acc_status (*graph_launch)(void *exec, acc_stream *s, acc_error *err);

    /* Release graph and/or exec (either may be NULL).  Replays still
     * queued complete.  Cannot fail visibly. */
    void (*graph_destroy)(int device, void *graph, void *exec);

    /* Compilers (ABI 1.1) ------------------------------------------------ */

    /* OPTIONAL, as a group with compiler_open and compile (a backend
     * with kernels only): the source formats this backend compiles
     * (ACC_FORMAT_BIT of ACC_FORMAT_CUDA_CXX, ...).  0: none; Module()
     * then refuses source with "backend X does not compile ...". */
    unsigned source_formats;

    /* Open the compiler of source format `format` (one of
     * source_formats) from `library`: a path, or a name for dlopen's
     * search, that the core chose (ACCELERATOR_NVRTC_LIBRARY, the
     * toolkit's, the PyPI wheel's, the system's).  *compiler is the
     * backend's own object; it lives as long as the process (the same
     * library opened again may give the same one).  id receives who
     * compiles for `device`, cut at size: the compiler, its version,
     * the target it compiles for on that device and the library's path
     * ("nvrtc 13.0 sm_90 /usr/local/cuda/lib64/libnvrtc.so.13"): the
     * key of the compile cache, so everything that changes the result
     * besides the source and the options belongs in it.  A library that
     * does not open, is not that compiler, or is too old:
     * ACC_ERR_NOT_FOUND with why in err (the core tries the next
     * place).  Must not block on device work. */
    acc_status (*compiler_open)(int device, acc_code_format format,
                                const char *library, void **compiler,
                                char *id, size_t size, acc_error *err);

    /* Compile source (size bytes of text, no NUL) with compiler for
     * `device`, as compiler_open described it: options[0, noptions)
     * are passed to the compiler one by one, after the backend's own
     * (the target); names[0, nnames) are name expressions
     * ("saxpy<float>") whose lowered names *out receives.  The compiler
     * refuses the source or an option: ACC_ERR_BUILD with its log in
     * out->log and its code in err.  On success out holds code of a
     * format module_load takes.  Whatever the status, the core frees
     * what out holds (free()).  Runs on the CPU and may take seconds;
     * called with no lock held, from any thread, several at once. */
    acc_status (*compile)(int device, void *compiler, const char *source,
                          size_t size, const char *const *options,
                          int noptions, const char *const *names,
                          int nnames, acc_compiled *out, acc_error *err);

    /* Interprocess memory and events (ABI 1.2) --------------------------- */

    /* OPTIONAL.  Why the backend cannot share memory or events with other
     * processes (without the ipc slots: Buffer.ipc_handle() says "backend
     * X does not support sharing memory with other processes: " and
     * this).  NULL where it can, or where it has no reason to give. */
    const char *ipc_unsupported;

    /* OPTIONAL, as a group: the five ipc slots, all or none (a backend
     * with device memory only).  The core shares whole driver
     * allocations (a block's segment, with the block's offset beside the
     * handle), keeps an exported allocation alive while other processes
     * have it open, and checks every handle it is given (its machine,
     * boot, backend, device and exporting process) before a slot sees it.
     *
     * The handle of the allocation that mem_alloc returned at base, on
     * device.  *h's fd: a descriptor of this process the handle needs
     * (owned by the backend or driver, valid while the allocation lives,
     * never closed by the core), or -1.  Must not block on device work. */
    acc_status (*ipc_mem_export)(int device, uintptr_t base,
                                 acc_ipc_handle *h, acc_error *err);

    /* Map the allocation of another process's handle on device (the
     * device whose UUID the exporter's device has): *base its first byte
     * here.  h->fd is a descriptor of this process (received from the
     * exporter) where ipc_mem_export gave one, else -1; the core closes
     * it after the call.  The driver's refusal (a handle of no live
     * allocation, of another device): ACC_ERR_DRIVER with its code.  Each
     * success is undone by one ipc_mem_close; the core opens a handle
     * once per process and shares the mapping. */
    acc_status (*ipc_mem_open)(int device, const acc_ipc_handle *h,
                               uintptr_t *base, acc_error *err);

    /* Unmap what ipc_mem_open mapped at base (no queued work of this
     * process still uses it: the core waited).  Cannot fail visibly. */
    void (*ipc_mem_close)(int device, uintptr_t base);

    /* The handle of e (made by event_create with ACC_EVENT_INTERPROCESS,
     * recorded at least once), fd as for ipc_mem_export. */
    acc_status (*ipc_event_export)(acc_event *e, acc_ipc_handle *h,
                                   acc_error *err);

    /* Open another process's event handle on e->device: fill e->handle
     * and e->native (e->flags: ACC_EVENT_INTERPROCESS |
     * ACC_EVENT_IMPORTED).  The event then works as one of event_create
     * made without timing: record, query, synchronize, stream_wait_event;
     * event_destroy releases it (it is never pooled).  h->fd as for
     * ipc_mem_open. */
    acc_status (*ipc_event_open)(const acc_ipc_handle *h, acc_event *e,
                                 acc_error *err);
};

/* Fills the version fields that open every table:
 *     const acc_backend my_backend = { ACC_BACKEND_ABI, .name = "my", ... };
 */
#define ACC_BACKEND_ABI                                                   \
    .abi_major = ACCELERATOR_BACKEND_ABI_MAJOR,                           \
    .abi_minor = ACCELERATOR_BACKEND_ABI_MINOR,                           \
    .struct_size = sizeof(acc_backend)

/*
 * A plugin: a shared object that exports one function of this name and
 * type, which returns the plugin's table (static storage, never freed).
 * The core opens the object at the probe (never at import), checks the
 * table's version fields and slots as a built-in backend's, then calls
 * attach and probe as for any backend.  Built with
 * -I"$(python -c 'import accelerator; print(accelerator.get_include())')".
 */
#define ACCELERATOR_BACKEND_PLUGIN_SYMBOL "accelerator_backend_plugin"
typedef const acc_backend *(*acc_backend_plugin_fn)(void);

/*
 * The host services, as a backend calls them.  Each file of a backend
 * that traces or words an error defines ACC_BACKEND_HOST, the name of
 * the backend's pointer to the host services, before it includes this
 * header; exactly one of its files (one that calls no other file of the
 * backend, so that the backend's files form no loop) writes
 * ACC_BACKEND_HOST_DEFINE(fn), which defines that pointer and the attach
 * function fn that sets it.  acc_trace and acc_error_set then forward to
 * the core; before attach (or with no core) they trace nothing and word
 * the error without a backend name.  Files that only format
 * (acc_format, accelerator/types.h) need none of it.
 */
#define ACC_BACKEND_HOST_DEFINE(fn)                                       \
    const acc_host *ACC_BACKEND_HOST;                                     \
    void fn(const acc_host *host) { ACC_BACKEND_HOST = host; }

#ifdef ACC_BACKEND_HOST
extern const acc_host *ACC_BACKEND_HOST;

/* A trace line on stderr with ACCELERATOR_DEBUG set. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static inline void
acc_trace(const char *fmt, ...)
{
    va_list ap;

    if (ACC_BACKEND_HOST == NULL) {
        return;
    }
    va_start(ap, fmt);
    ACC_BACKEND_HOST->trace(fmt, ap);
    va_end(ap);
}

/* Fill err with status and a message (the backend: the selected one). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline void
acc_error_set(acc_error *err, acc_status status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (ACC_BACKEND_HOST != NULL) {
        ACC_BACKEND_HOST->error_set(err, status, fmt, ap);
    }
    else {
        err->status = status;
        err->backend = NULL;
        err->api = NULL;
        err->code = 0;
        err->code_name = NULL;
        acc_vformat(err->message, sizeof(err->message), fmt, ap);
    }
    va_end(ap);
}
#endif /* ACC_BACKEND_HOST */

#ifdef __cplusplus
}
#endif

#endif /* ACCELERATOR_BACKEND_H */
