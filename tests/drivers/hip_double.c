/*
 * hip_double.c - a fake HIP runtime (libamdhip64.so.5) for tests.
 *
 * The backend runs unchanged on top of it, so this file reproduces the
 * runtime's observable behaviour: error codes as hip_runtime_api.h
 * defines them, a current device per thread (device 0 until the thread
 * calls hipSetDevice), a null stream per device (handle 0, the current
 * device's) with legacy default-stream semantics, asynchronous streams
 * (double_stream.c: one worker thread per stream), events that complete
 * in stream order, and device memory with guard bytes (double_memory.c).
 *
 * Control API for tests (load the same file with ctypes.CDLL; set argtypes
 * and restype): the shared ones of double_control.h with the prefix
 * "hip" (fake_hip_call_count, _reset_counts, _fail, _clear_faults, _live,
 * _delay), and
 *   int fake_hip_enqueue_sleep(int device, unsigned long long stream,
 *                              double ms)
 *       Work that keeps the stream busy for ms milliseconds, like a
 *       kernel.  stream 0: the null stream of `device`; otherwise a
 *       hipStream_t as an integer, and device is ignored.  Returns a
 *       hipError_t (hipErrorInvalidHandle for a stream that is not live,
 *       hipErrorInvalidValue for ms < 0 or NaN, hipErrorInvalidDevice).
 *   int fake_hip_enqueue_gate(int device, unsigned long long stream,
 *                             int *gate)
 *       Work that keeps the stream busy until fake_hip_open_gate(*gate).
 *   int fake_hip_open_gate(int gate)
 *   int fake_hip_current_device(void)
 *       The calling thread's current device.
 *   int fake_hip_initialized(void)
 *       1 once any runtime function but the two string functions ran
 *       (ROCm initialises on the first call), else 0.
 *   long long fake_hip_event_sync_blocked(void)
 *       hipEventSynchronize calls on a recorded hipEventBlockingSync
 *       event (which wait blocking, not spinning).
 * Live kinds (fake_hip_live): "stream" (created, not destroyed; null
 * streams excluded), "event", "graph" (hipStreamEndCapture's, not
 * destroyed), "graph_exec", double_memory.c's ("alloc",
 * "alloc_bytes", "host_alloc", "bad_access", "guard_damage") and
 * double_kernels.c's ("module", "kernel_misuse").  fake_hip_reset_
 * detectors zeroes bad_access, guard_damage and kernel_misuse.
 *
 * Environment, read once when the library is loaded:
 *   FAKE_HIP_DEVICES         device count, 0..64 (2); 0: hipInit returns
 *                            hipErrorInvalidDevice and hipGetDeviceCount
 *                            hipErrorNoDevice, as ROCm 5.2 does on a
 *                            machine without an AMD GPU
 *   FAKE_HIP_TOTAL_MEM       bytes per device (64 GiB); hipMalloc fails
 *                            with hipErrorOutOfMemory beyond it
 *   FAKE_HIP_PRIORITY_RANGE  "least,greatest" stream priorities ("0,-1")
 *   FAKE_HIP_ARCH            the gcnArchName hipGetDeviceProperties tells
 *                            ("gfx90a:sramecc+:xnack-"), for what a
 *                            compiler is asked to target; the devices
 *                            still load gfx90a code objects only
 *   FAKE_HIP_GFX             the gfx version "major.minor" that the
 *                            compute capability attributes report ("9.0")
 *   FAKE_HIP_FAIL            faults installed at load:
 *                            "name:nth:code[,name:nth:code...]"
 * Invalid values are reported on stderr and the default is used.
 *
 * Model, where the runtime leaves a choice:
 *   - Devices are "Fake HIP Device <n>", gfx90a (compute capability 9.0;
 *     an MI200's "gfx90a:sramecc+:xnack-", the gcnArchName that
 *     hipGetDeviceProperties tells, with the name: its other fields read
 *     zero), 110 compute units, at PCI
 *     0000:<0xc1 + n>:00.0.
 *   - The null stream synchronises with the blocking streams of its
 *     device (hipStreamDefault), as the legacy default stream does:
 *     its work waits for the work already queued on them, and theirs for
 *     its.  hipStreamPerThread is not modelled: hipErrorInvalidHandle.
 *   - hipFree does not synchronise (ROCm's does), so that freeing memory
 *     that queued work still uses is caught as a use after free.
 *   - hipMemcpyAsync is asynchronous with pageable host memory too: the
 *     source is read, the destination written, when the copy runs on the
 *     stream's worker.  ROCm promises neither staging nor a wait, so the
 *     double takes the reading that catches a caller who reuses its host
 *     memory before the copy has run.
 *   - hipGetErrorName and hipGetErrorString give a code's name, as ROCm
 *     5.2 does ("hipErrorUnknown" for codes it does not know); a fault
 *     injected there makes them return NULL.
 *   - Stream capture as CUDA's: work queued on a capturing stream is
 *     recorded, not run, and every launch of an executable runs it
 *     again (after the executable's previous launch).  A stream joins a
 *     capture by waiting on an event recorded in it and must be joined
 *     back (hipErrorStreamCaptureUnjoined).  Queries, synchronizations,
 *     waits on events outside the capture, pageable copies and graph
 *     launches on a capturing stream are refused with
 *     hipErrorStreamCaptureUnsupported and invalidate the capture, as
 *     hipDeviceSynchronize does to the device's global and thread-local
 *     captures.  The null stream cannot capture.
 *   - Code objects are host shared objects (tests/drivers/
 *     native_kernel.h), loaded and run by the shared kernel layer
 *     (double_kernels.c): each launch runs every block in order on the
 *     stream's worker.  An AMD GPU code object (hsaco) for gfx90a loads
 *     as ROCm loads it: its kernels, their parameters and attributes
 *     from its metadata, found by name (hipErrorNotFound otherwise); a
 *     launch of one is hipErrorNoBinaryForGpu, as the device runs host
 *     code only.  One for another architecture (or xnack+, sramecc-),
 *     and an ELF of another machine, is hipErrorNoBinaryForGpu at load;
 *     one with damaged metadata or symbols, PTX and SPIR-V are
 *     hipErrorInvalidImage.  A launch on a capturing stream is a node of
 *     the graph: every replay runs it again.  Device limits:
 *     double_kernels.h's (DK_MAX_*); 48 KiB of shared memory per block.
 *   - After fork() in a child of an initialised parent, every function
 *     but hipGetErrorName/String and hipDriverGetVersion returns
 *     hipErrorNotInitialized: ROCm cannot be used in such a child.
 *   - Interprocess memory and events (double_ipc.h): hipIpcGetMemHandle
 *     exports the whole allocation starting at devPtr (a hipMalloc base
 *     of this process; else hipErrorInvalidDevicePointer, as ROCr
 *     refuses), hipIpcOpenMemHandle maps it in another process at a
 *     fresh address on the current device (flags must be
 *     hipIpcMemLazyEnablePeerAccess, 0; a handle whose size field, where
 *     ROCm keeps its psize, is zero is hipErrorInvalidValue; one of no
 *     live allocation, of an exporter that exited, or damaged,
 *     hipErrorInvalidDevicePointer, ROCm's answer when the attach fails;
 *     in the exporting process hipErrorInvalidContext, as ROCm's
 *     owners_process_id check answers), hipIpcCloseMemHandle unmaps it
 *     (hipErrorInvalidHandle for an address it did not map; like hipFree
 *     it does not synchronise here, so that closing memory queued work
 *     still uses is caught) and hipFree refuses an opened address.
 *     hipEventInterprocess events (only with hipEventDisableTiming) keep
 *     their state in a shared cell from their creation: a record takes
 *     the cell's next sequence number and completes it when the stream
 *     runs it, a query or synchronize looks at the latest record of
 *     either process, hipStreamWaitEvent waits for the record current at
 *     the call.  hipIpcGetEventHandle: hipErrorInvalidConfiguration for
 *     an event made without hipEventInterprocess (ROCm's answer) or
 *     opened from a handle (ROCm would hand its name out again; the
 *     double exports an event from its creator only); it needs no
 *     record.  hipIpcOpenEventHandle: an event with hipEventDisableTiming
 *     | hipEventInterprocess on the current device; hipErrorInvalidValue
 *     for a handle that names no event (ROCm: its shared file cannot be
 *     mapped) or whose creator exited (ROCm 5.2 maps the file even then,
 *     re-creating it empty where it was removed, so that every wait on it
 *     returns at once: the double refuses instead), hipErrorInvalidContext
 *     in the creating process.  An interprocess event cannot be recorded
 *     in a stream capture (hipErrorStreamCaptureUnsupported, the capture
 *     invalidated).  Live kinds: double_ipc.h's "ipc_exported",
 *     "ipc_opened" and "ipc_event_cells".
 */
#define _GNU_SOURCE

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/backends/hip/hip_api.h"
#include "double_control.h"
#include "double_ipc.h"
#include "double_kernels.h"
#include "double_memory.h"
#include "double_stream.h"

#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_MAX_DEVICES 64
#define FAKE_VERSION 50221153 /* ROCm 5.2.3's HIP_VERSION */
#define FAKE_GFX90A 0x3f      /* EF_AMDGPU_MACH_AMDGCN_GFX90A */

/* Declarations -------------------------------------------------------- */

/* Prototypes from the backend's own list, so that every definition below
 * is checked against the signature the backend calls through. */
#define FAKE_DECLARE(name, ret, params) FAKE_EXPORT ret name params;
ACC_HIP_FUNCTIONS(FAKE_DECLARE)
ACC_HIP_IPC_FUNCTIONS(FAKE_DECLARE)
#undef FAKE_DECLARE

FAKE_EXPORT int fake_hip_enqueue_sleep(int device, unsigned long long stream,
                                       double ms);
FAKE_EXPORT int fake_hip_enqueue_gate(int device, unsigned long long stream,
                                      int *gate);
FAKE_EXPORT int fake_hip_open_gate(int gate);
FAKE_EXPORT int fake_hip_current_device(void);
FAKE_EXPORT long long fake_hip_event_sync_blocked(void);
FAKE_EXPORT int fake_hip_initialized(void);

/* Functions: the unit of counting and of fault injection. */
#define FAKE_FN_ID(name, ret, params) FN_##name,
enum fake_fn {
    ACC_HIP_FUNCTIONS(FAKE_FN_ID) ACC_HIP_IPC_FUNCTIONS(FAKE_FN_ID) FN_COUNT
};
#undef FAKE_FN_ID

#define FAKE_FN_NAME(name, ret, params) {#name, NULL},
static const dc_fn fake_fns[FN_COUNT] = {
    ACC_HIP_FUNCTIONS(FAKE_FN_NAME) ACC_HIP_IPC_FUNCTIONS(FAKE_FN_NAME)};
#undef FAKE_FN_NAME

/* State --------------------------------------------------------------- */

struct ihipStream_t {
    struct ihipStream_t *prev, *next; /* registry, under g_mu */
    int device;
    unsigned int flags;
    int priority;
    bool null;     /* a device's null stream */
    ds_queue *queue;
    /* Stream capture, under g_mu: work queued while capturing is
     * recorded, not run (hipStreamCaptureStatus*). */
    int capture;
    int capture_mode;
    pthread_t capture_thread;
    /* The stream that began the capture this one takes part in (itself
     * when it began it), whose list gets the ops of every stream of the
     * capture in the order queued (a valid order of the graph: a wait
     * only sees earlier records).  A stream forks in by waiting on an
     * event recorded in the capture and is joined back once the origin
     * waits on an event recorded after its last op (cap_tip counts
     * them); hipStreamEndCapture refuses a capture with a fork not
     * joined back. */
    struct ihipStream_t *cap_origin;
    ds_op *cap_head, *cap_tail;
    unsigned long cap_id;
    long cap_tip;
    bool cap_joined;
};

/* An interprocess event's shared cell (double_ipc.h), referenced by the
 * event and by each op queued for it: a destroyed event never pulls the
 * cell from under a stream. */
struct fake_cell {
    atomic_int refs;
    dipc_cell *cell;
};

struct ihipEvent_t {
    int device;
    unsigned int flags;
    ds_mark *last; /* latest record, NULL if never recorded */
    /* hipEventInterprocess: the shared cell (records, queries and waits
     * go through it, never through last); imported: opened from another
     * process's handle. */
    struct fake_cell *ipc;
    bool imported;
    /* Latest record made in a capture (a node of the graph, not run):
     * the capture's origin and id, the recording stream and its tip. */
    struct ihipStream_t *cap_origin, *cap_stream;
    unsigned long cap_id;
    long cap_tip;
};

/* A loaded module (the shared kernel layer's) and the functions
 * hipModuleGetFunction handed out, freed with it. */
struct ihipModule_t {
    dk_module *dk;
    struct ihipModuleSymbol_t *functions;
};

struct ihipModuleSymbol_t {
    struct ihipModuleSymbol_t *next;
    struct ihipModule_t *module;
    const dk_kernel *kernel;
};

/* A captured graph and its executable: the recorded ops, run again (as
 * copies) by every launch. */
struct ihipGraph {
    ds_op *head;
};

struct hipGraphExec {
    ds_op *head;
    /* Completes when the last launch has run: each launch waits for the
     * one before, on whatever stream (launches of one executable never
     * overlap). */
    ds_mark *last;
};

static struct {
    int devices;
    unsigned long long total_mem;
    int prio_least, prio_greatest;
    int gfx_major, gfx_minor;
    char arch[64];            /* gcnArchName */
} cfg = {
    .arch = "gfx90a:sramecc+:xnack-",
    .devices = 2,
    .gfx_major = 9,
    .total_mem = 64ULL << 30,
    .prio_least = 0,
    .prio_greatest = -1,
};

/* Lock order: g_ctl's fault lock, g_mu, a queue's lock, the marks'. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ihipStream_t *g_streams;          /* created ones */
static struct ihipStream_t *g_null[FAKE_MAX_DEVICES]; /* made on first use */
/* The same objects as sets: unknown handles are compared, never
 * dereferenced, in O(1). */
static dc_handles g_stream_set, g_event_set, g_graph_set, g_exec_set;
static dc_handles g_module_set, g_function_set;
/* Ids of captures, so that an event names one even after it ended. */
static unsigned long g_capture_ids;

static atomic_int g_initialized;
static atomic_int g_poisoned;
static atomic_llong g_sync_blocked;
static _Thread_local int t_device;

enum { LIVE_STREAM, LIVE_EVENT, LIVE_GRAPH, LIVE_GRAPH_EXEC, LIVE_KINDS };
static const char *const g_live_kinds[LIVE_KINDS] = {"stream", "event",
                                                     "graph", "graph_exec"};
static atomic_llong g_calls[FN_COUNT];
static atomic_llong g_live[LIVE_KINDS];
static long long live_extra(const char *kind);
static void reset_sync_counter(void);
static void reset_detectors(void);
static dc_control g_ctl = {
    DC_CONTROL_INIT("fake libamdhip64", fake_fns, g_calls, g_live_kinds,
                    g_live),
    .on_reset = reset_sync_counter,
    .live_extra = live_extra,
    .reset_detectors = reset_detectors,
};

DC_EXPORT_CONTROL(hip, g_ctl)
DM_EXPORT_RANGE(hip)

/* Entry: counting, faults, initialisation ------------------------------ */

/* Top of every runtime function: true when it must return *rc at once.
 * Like ROCm, the first call of any function initialises the runtime. */
static bool
fake_enter(enum fake_fn fn, bool need_init, hipError_t *rc)
{
    int code;

    if (dc_enter(&g_ctl, (int)fn, &code)) {
        *rc = (hipError_t)code;
        return true;
    }
    if (!need_init) {
        return false;
    }
    if (atomic_load(&g_poisoned)) {
        *rc = hipErrorNotInitialized;
        return true;
    }
    atomic_store(&g_initialized, 1);
    if (cfg.devices == 0) {
        *rc = hipErrorNoDevice;
        return true;
    }
    return false;
}

#define FAKE_ENTER(name, need_init)                                  \
    do {                                                             \
        hipError_t fake_enter_rc_;                                   \
        if (fake_enter(FN_##name, (need_init), &fake_enter_rc_)) {   \
            return fake_enter_rc_;                                   \
        }                                                            \
    } while (0)

static bool
bad_device(int device)
{
    return device < 0 || device >= cfg.devices;
}

/* Streams ------------------------------------------------------------- */

/* Under g_mu. */
static hipError_t
stream_new(int device, unsigned int flags, int priority, bool null,
           struct ihipStream_t **out)
{
    struct ihipStream_t *s = calloc(1, sizeof(*s));

    if (s == NULL || (!null && !dc_handles_add(&g_stream_set, s))) {
        free(s);
        return hipErrorOutOfMemory;
    }
    s->queue = ds_queue_new();
    if (s->queue == NULL) {
        if (!null) {
            dc_handles_remove(&g_stream_set, s);
        }
        free(s);
        return hipErrorOutOfMemory;
    }
    s->device = device;
    s->flags = flags;
    s->priority = priority;
    s->null = null;
    if (!null) {
        s->next = g_streams;
        if (g_streams != NULL) {
            g_streams->prev = s;
        }
        g_streams = s;
        dc_live_add(&g_ctl, LIVE_STREAM, 1);
    }
    *out = s;
    return hipSuccess;
}

/* Under g_mu: device's null stream, made on first use. */
static hipError_t
null_stream(int device, struct ihipStream_t **out)
{
    hipError_t rc = hipSuccess;

    if (g_null[device] == NULL) {
        rc = stream_new(device, hipStreamDefault, 0, true, &g_null[device]);
    }
    *out = g_null[device];
    return rc;
}

/* Under g_mu.  Handle 0 is the calling thread's current device's null
 * stream. */
static hipError_t
stream_resolve(hipStream_t h, struct ihipStream_t **out)
{
    if (h == NULL) {
        return null_stream(t_device, out);
    }
    if (!dc_handles_has(&g_stream_set, h)) {
        return hipErrorInvalidHandle;
    }
    *out = h;
    return hipSuccess;
}

/* Under g_mu.  Queues op (taken over, also on failure) with the null
 * stream's implicit synchronisation. */
static hipError_t
stream_enqueue(struct ihipStream_t *s, ds_op *op)
{
    bool ok = true;

    if (op == NULL) {
        return hipErrorOutOfMemory;
    }
    if (s->capture != hipStreamCaptureStatusNone
        && (s->capture == hipStreamCaptureStatusInvalidated
            || s->cap_origin->capture
                   == hipStreamCaptureStatusInvalidated)) {
        ds_op_free(op);
        return hipErrorStreamCaptureInvalidated;
    }
    if (s->capture == hipStreamCaptureStatusActive) {
        /* Recorded into the capture's list, not run. */
        struct ihipStream_t *o = s->cap_origin;

        op->next = NULL;
        if (o->cap_tail != NULL) {
            o->cap_tail->next = op;
        }
        else {
            o->cap_head = op;
        }
        o->cap_tail = op;
        s->cap_tip++;
        s->cap_joined = false;
        return hipSuccess;
    }
    if (s->null) {
        for (struct ihipStream_t *t = g_streams; t != NULL && ok;
             t = t->next) {
            if (t->device == s->device
                && !(t->flags & hipStreamNonBlocking)) {
                ok = ds_queue_depend(s->queue, t->queue);
            }
        }
    }
    else if (!(s->flags & hipStreamNonBlocking) && g_null[s->device]) {
        ok = ds_queue_depend(s->queue, g_null[s->device]->queue);
    }
    if (!ok) {
        ds_op_free(op);
        return hipErrorOutOfMemory;
    }
    ds_queue_push(s->queue, op);
    return hipSuccess;
}

/* Under g_mu.  *out: a mark (the caller's reference) that completes when
 * the work queued on s so far, with what the null stream's rules add,
 * has run.  On a capturing stream (a relaxed capture that
 * hipDeviceSynchronize lets be): the work queued before the capture. */
static hipError_t
stream_fence(struct ihipStream_t *s, ds_mark **out)
{
    ds_mark *m;
    ds_op *op;
    hipError_t rc;

    if (s->capture != hipStreamCaptureStatusNone) {
        return ds_queue_fence(s->queue, out) ? hipSuccess
                                             : hipErrorOutOfMemory;
    }
    m = ds_mark_new(2);
    op = ds_op_new(DS_RECORD, 0, m);
    if (m == NULL || op == NULL) {
        free(m);
        free(op);
        return hipErrorOutOfMemory;
    }
    rc = stream_enqueue(s, op);
    if (rc != hipSuccess) {
        ds_mark_unref(m); /* the op's went with the op */
        return rc;
    }
    *out = m;
    return hipSuccess;
}

static void
fence_wait(ds_mark *m)
{
    ds_mark_wait_blocking(m);
    ds_mark_unref(m);
}

/* Under g_mu.  An operation the runtime refuses on a capturing stream:
 * hipErrorStreamCaptureUnsupported, and the capture is invalidated
 * (hipStreamEndCapture then fails).  hipSuccess when s does not
 * capture. */
static hipError_t
capture_refuse(struct ihipStream_t *s)
{
    if (s->capture == hipStreamCaptureStatusNone) {
        return hipSuccess;
    }
    s->capture = hipStreamCaptureStatusInvalidated;
    s->cap_origin->capture = hipStreamCaptureStatusInvalidated;
    return hipErrorStreamCaptureUnsupported;
}

/* Under g_mu.  The capture begun on o ends: the streams forked into it
 * capture no more.  false when one of them was not joined back. */
static bool
capture_release(struct ihipStream_t *o)
{
    bool joined = true;

    for (struct ihipStream_t *t = g_streams; t != NULL; t = t->next) {
        if (t != o && t->capture != hipStreamCaptureStatusNone
            && t->cap_origin == o) {
            joined = joined && t->cap_joined;
            t->capture = hipStreamCaptureStatusNone;
            t->cap_origin = NULL;
        }
    }
    return joined;
}

/* Under g_mu.  The origin of the capture e was last recorded in, if that
 * capture is still active; else NULL. */
static struct ihipStream_t *
event_capture(const struct ihipEvent_t *e)
{
    struct ihipStream_t *o = e->cap_origin;

    if (o == NULL || !dc_handles_has(&g_stream_set, o)
        || o->cap_id != e->cap_id || o->cap_origin != o
        || o->capture == hipStreamCaptureStatusNone) {
        return NULL;
    }
    return o;
}

/* Interprocess event cells ------------------------------------------- */

static struct fake_cell *
cell_wrap(dipc_cell *cell)
{
    struct fake_cell *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        dipc_cell_release(cell);
        return NULL;
    }
    atomic_init(&c->refs, 1);
    c->cell = cell;
    return c;
}

static void
cell_unref(struct fake_cell *c)
{
    if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1) {
        dipc_cell_release(c->cell);
        free(c);
    }
}

/* What an op queued for a cell does: complete seq, or wait for it. */
struct cell_op {
    struct fake_cell *c;
    uint64_t seq;
};

static void
cell_op_complete(void *ctx)
{
    struct cell_op *o = ctx;

    dipc_cell_complete(o->c->cell, o->seq);
}

static void
cell_op_wait(void *ctx)
{
    struct cell_op *o = ctx;

    dipc_cell_wait(o->c->cell, o->seq);
}

static void
cell_op_drop(void *ctx)
{
    struct cell_op *o = ctx;

    cell_unref(o->c);
    free(o);
}

/* An op (DS_SIGNAL: complete, DS_BLOCK: wait) for seq of c, holding a
 * reference to c; NULL when out of memory. */
static ds_op *
cell_op(enum ds_op_kind kind, struct fake_cell *c, uint64_t seq)
{
    struct cell_op *o = malloc(sizeof(*o));

    if (o == NULL) {
        return NULL;
    }
    atomic_fetch_add(&c->refs, 1);
    o->c = c;
    o->seq = seq;
    return ds_op_call(kind, kind == DS_SIGNAL ? cell_op_complete
                                              : cell_op_wait,
                      cell_op_drop, o);
}

/* Under g_mu: the live event's cell with a reference for the caller, or
 * NULL (*rc hipErrorInvalidHandle when the event is not live). */
static struct fake_cell *
event_cell(hipEvent_t event, hipError_t *rc)
{
    *rc = hipSuccess;
    if (!dc_handles_has(&g_event_set, event)) {
        *rc = hipErrorInvalidHandle;
        return NULL;
    }
    if (event->ipc != NULL) {
        atomic_fetch_add(&event->ipc->refs, 1);
    }
    return event->ipc;
}

/* Runtime API: initialisation and errors ------------------------------ */

hipError_t
hipInit(unsigned int flags)
{
    FAKE_ENTER(hipInit, false);
    if (flags != 0) {
        return hipErrorInvalidValue;
    }
    if (atomic_load(&g_poisoned)) {
        return hipErrorNotInitialized;
    }
    atomic_store(&g_initialized, 1);
    /* What ROCm 5.2 answers without an AMD GPU. */
    return cfg.devices == 0 ? hipErrorInvalidDevice : hipSuccess;
}

hipError_t
hipDriverGetVersion(int *driverVersion)
{
    FAKE_ENTER(hipDriverGetVersion, false);
    /* ROCm's initialises the runtime too, GPU or not. */
    if (!atomic_load(&g_poisoned)) {
        atomic_store(&g_initialized, 1);
    }
    if (driverVersion == NULL) {
        return hipErrorInvalidValue;
    }
    *driverVersion = FAKE_VERSION;
    return hipSuccess;
}

/* The name of a code, as ROCm 5.2 gives it ("hipErrorUnknown" for codes
 * it does not know). */
static const char *
error_name(hipError_t code)
{
    switch (code) {
#define FAKE_NAME_CASE(name, value) \
    case name:                      \
        return #name;
        ACC_HIP_RESULTS(FAKE_NAME_CASE)
#undef FAKE_NAME_CASE
    default:
        return "hipErrorUnknown";
    }
}

/* The string functions cannot report a failure: a fault makes them
 * answer NULL, the worst a caller must survive. */
const char *
hipGetErrorName(hipError_t hip_error)
{
    int code;

    return dc_enter(&g_ctl, FN_hipGetErrorName, &code)
               ? NULL : error_name(hip_error);
}

/* ROCm 5.2 describes each code by its name. */
const char *
hipGetErrorString(hipError_t hipError)
{
    int code;

    return dc_enter(&g_ctl, FN_hipGetErrorString, &code)
               ? NULL : error_name(hipError);
}

/* Runtime API: devices ------------------------------------------------ */

hipError_t
hipGetDeviceCount(int *count)
{
    FAKE_ENTER(hipGetDeviceCount, true);
    if (count == NULL) {
        return hipErrorInvalidValue;
    }
    *count = cfg.devices;
    return hipSuccess;
}

hipError_t
hipSetDevice(int deviceId)
{
    FAKE_ENTER(hipSetDevice, true);
    if (bad_device(deviceId)) {
        return hipErrorInvalidDevice;
    }
    t_device = deviceId;
    return hipSuccess;
}

hipError_t
hipGetDevice(int *deviceId)
{
    FAKE_ENTER(hipGetDevice, true);
    if (deviceId == NULL) {
        return hipErrorInvalidValue;
    }
    *deviceId = t_device;
    return hipSuccess;
}

hipError_t
hipDeviceGetName(char *name, int len, hipDevice_t device)
{
    FAKE_ENTER(hipDeviceGetName, true);
    if (name == NULL || len <= 0) {
        return hipErrorInvalidValue;
    }
    if (bad_device(device)) {
        return hipErrorInvalidDevice;
    }
    snprintf(name, (size_t)len, "Fake HIP Device %d", device);
    return hipSuccess;
}

/* ROCm 5's hipDeviceProp_t, as bytes (hip_api.h): the name and the
 * gcnArchName are told; every other field reads zero. */
hipError_t
hipGetDeviceProperties(hipDeviceProp_t *prop, int device)
{
    unsigned char *bytes = (unsigned char *)prop;

    FAKE_ENTER(hipGetDeviceProperties, true);
    if (prop == NULL) {
        return hipErrorInvalidValue;
    }
    if (bad_device(device)) {
        return hipErrorInvalidDevice;
    }
    memset(bytes, 0, ACC_HIP_DEVICE_PROP_SIZE);
    snprintf((char *)bytes, 256, "Fake HIP Device %d", device);
    snprintf((char *)bytes + ACC_HIP_DEVICE_PROP_GCN_ARCH_NAME,
             ACC_HIP_GCN_ARCH_NAME_SIZE, "%s", cfg.arch);
    return hipSuccess;
}

hipError_t
hipDeviceGetUuid(hipUUID *uuid, hipDevice_t device)
{
    FAKE_ENTER(hipDeviceGetUuid, true);
    if (uuid == NULL) {
        return hipErrorInvalidValue;
    }
    if (bad_device(device)) {
        return hipErrorInvalidDevice;
    }
    memset(uuid->bytes, 0, sizeof(uuid->bytes));
    memcpy(uuid->bytes, "fakehip", 7);
    uuid->bytes[15] = (char)device;
    return hipSuccess;
}

hipError_t
hipDeviceTotalMem(size_t *bytes, hipDevice_t device)
{
    FAKE_ENTER(hipDeviceTotalMem, true);
    if (bytes == NULL) {
        return hipErrorInvalidValue;
    }
    if (bad_device(device)) {
        return hipErrorInvalidDevice;
    }
    *bytes = (size_t)cfg.total_mem;
    return hipSuccess;
}

hipError_t
hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int deviceId)
{
    FAKE_ENTER(hipDeviceGetAttribute, true);
    if (pi == NULL) {
        return hipErrorInvalidValue;
    }
    if (bad_device(deviceId)) {
        return hipErrorInvalidDevice;
    }
    switch (attr) {
    case hipDeviceAttributeIntegrated:
        *pi = 0;
        break;
    case hipDeviceAttributeComputeCapabilityMajor:
        *pi = cfg.gfx_major;
        break;
    case hipDeviceAttributeComputeCapabilityMinor:
        *pi = cfg.gfx_minor;
        break;
    case hipDeviceAttributeMultiprocessorCount:
        *pi = 110;
        break;
    case hipDeviceAttributePciBusId:
        *pi = 0xc1 + deviceId;
        break;
    case hipDeviceAttributePciDeviceId:
    case hipDeviceAttributePciDomainID:
        *pi = 0;
        break;
    /* The launch limits the shared kernel layer applies. */
    case hipDeviceAttributeMaxBlockDimX:
        *pi = DK_MAX_BLOCK_X;
        break;
    case hipDeviceAttributeMaxBlockDimY:
        *pi = DK_MAX_BLOCK_Y;
        break;
    case hipDeviceAttributeMaxBlockDimZ:
        *pi = DK_MAX_BLOCK_Z;
        break;
    case hipDeviceAttributeMaxGridDimX:
        *pi = (int)DK_MAX_GRID_X;
        break;
    case hipDeviceAttributeMaxGridDimY:
        *pi = (int)DK_MAX_GRID_Y;
        break;
    case hipDeviceAttributeMaxGridDimZ:
        *pi = (int)DK_MAX_GRID_Z;
        break;
    default:
        return hipErrorInvalidValue;
    }
    return hipSuccess;
}

hipError_t
hipDeviceSynchronize(void)
{
    ds_mark *marks[1 + 4096];
    int n = 0;
    hipError_t rc;
    struct ihipStream_t *s;

    FAKE_ENTER(hipDeviceSynchronize, true);
    pthread_mutex_lock(&g_mu);
    rc = hipSuccess;
    for (s = g_streams; s != NULL; s = s->next) {
        if (s->device == t_device && s->capture != hipStreamCaptureStatusNone
            && s->capture_mode != hipStreamCaptureModeRelaxed) {
            rc = capture_refuse(s);
        }
    }
    if (rc == hipSuccess) {
        rc = null_stream(t_device, &s);
    }
    if (rc == hipSuccess) {
        rc = stream_fence(s, &marks[n]);
        n += rc == hipSuccess;
    }
    for (s = g_streams; s != NULL && rc == hipSuccess; s = s->next) {
        if (s->device == t_device && n < (int)(sizeof(marks)
                                               / sizeof(marks[0]))) {
            rc = stream_fence(s, &marks[n]);
            n += rc == hipSuccess;
        }
    }
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < n; i++) {
        fence_wait(marks[i]);
    }
    return rc;
}

hipError_t
hipDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    FAKE_ENTER(hipDeviceGetStreamPriorityRange, true);
    if (leastPriority != NULL) {
        *leastPriority = cfg.prio_least;
    }
    if (greatestPriority != NULL) {
        *greatestPriority = cfg.prio_greatest;
    }
    return hipSuccess;
}

/* Runtime API: streams ------------------------------------------------ */

hipError_t
hipStreamCreateWithPriority(hipStream_t *stream, unsigned int flags,
                            int priority)
{
    struct ihipStream_t *s = NULL;
    hipError_t rc;

    FAKE_ENTER(hipStreamCreateWithPriority, true);
    if (stream == NULL || (flags & ~(unsigned)hipStreamNonBlocking) != 0) {
        return hipErrorInvalidValue;
    }
    /* Clamped into the range, as the runtime does. */
    if (priority > cfg.prio_least) {
        priority = cfg.prio_least;
    }
    if (priority < cfg.prio_greatest) {
        priority = cfg.prio_greatest;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_new(t_device, flags, priority, false, &s);
    pthread_mutex_unlock(&g_mu);
    if (rc == hipSuccess) {
        *stream = s;
    }
    return rc;
}

hipError_t
hipStreamQuery(hipStream_t stream)
{
    struct ihipStream_t *s;
    hipError_t rc;

    FAKE_ENTER(hipStreamQuery, true);
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(stream, &s);
    if (rc == hipSuccess) {
        rc = capture_refuse(s);
    }
    if (rc == hipSuccess && ds_queue_pending(s->queue) > 0) {
        rc = hipErrorNotReady;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

hipError_t
hipStreamSynchronize(hipStream_t stream)
{
    struct ihipStream_t *s;
    ds_mark *m = NULL;
    hipError_t rc;

    FAKE_ENTER(hipStreamSynchronize, true);
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(stream, &s);
    if (rc == hipSuccess) {
        rc = capture_refuse(s);
    }
    if (rc == hipSuccess) {
        rc = stream_fence(s, &m);
    }
    pthread_mutex_unlock(&g_mu);
    if (m != NULL) {
        fence_wait(m);
    }
    return rc;
}

hipError_t
hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags)
{
    struct ihipStream_t *s;
    hipError_t rc;

    FAKE_ENTER(hipStreamWaitEvent, true);
    if (flags != 0) {
        return hipErrorInvalidValue;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(stream, &s);
    if (rc == hipSuccess && !dc_handles_has(&g_event_set, event)) {
        rc = hipErrorInvalidHandle;
    }
    if (rc == hipSuccess) {
        struct ihipStream_t *o = event_capture(event);

        if (o != NULL && s->capture == hipStreamCaptureStatusNone
            && !s->null) {
            /* Fork: s joins the capture; its later ops are recorded. */
            s->capture = o->capture;
            s->capture_mode = o->capture_mode;
            s->capture_thread = o->capture_thread;
            s->cap_origin = o;
            s->cap_tip = 0;
            s->cap_joined = false;
            pthread_mutex_unlock(&g_mu);
            return hipSuccess;
        }
        if (o != NULL && s->cap_origin == o) {
            /* A dependency inside the capture: the list keeps it.  The
             * origin waiting on a fork's last op joins that fork. */
            struct ihipStream_t *f = event->cap_stream;

            if (s == o && f != o && dc_handles_has(&g_stream_set, f)
                && f->cap_origin == o && f->cap_tip == event->cap_tip) {
                f->cap_joined = true;
            }
            pthread_mutex_unlock(&g_mu);
            return hipSuccess;
        }
        /* A capturing stream cannot wait on work outside its capture. */
        rc = capture_refuse(s);
    }
    if (rc == hipSuccess && event->ipc != NULL) {
        /* The record current now, of whichever process made it. */
        uint64_t seq = dipc_cell_current(event->ipc->cell);

        if (!dipc_cell_reached(event->ipc->cell, seq)) {
            rc = stream_enqueue(s, cell_op(DS_BLOCK, event->ipc, seq));
        }
        pthread_mutex_unlock(&g_mu);
        return rc;
    }
    /* An event never recorded is complete: nothing to wait for. */
    if (rc == hipSuccess && event->last != NULL
        && !ds_mark_done(event->last)) {
        atomic_fetch_add(&event->last->refs, 1);
        rc = stream_enqueue(s, ds_op_new(DS_WAIT, 0, event->last));
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

hipError_t
hipStreamDestroy(hipStream_t stream)
{
    FAKE_ENTER(hipStreamDestroy, true);
    pthread_mutex_lock(&g_mu);
    if (stream == NULL || !dc_handles_has(&g_stream_set, stream)) {
        pthread_mutex_unlock(&g_mu);
        return hipErrorInvalidHandle;
    }
    if (stream->prev != NULL) {
        stream->prev->next = stream->next;
    }
    else {
        g_streams = stream->next;
    }
    if (stream->next != NULL) {
        stream->next->prev = stream->prev;
    }
    dc_handles_remove(&g_stream_set, stream);
    dc_live_add(&g_ctl, LIVE_STREAM, -1);
    if (stream->capture != hipStreamCaptureStatusNone
        && stream->cap_origin == stream) {
        (void)capture_release(stream);
    }
    ds_op_list_free(stream->cap_head);
    /* Queued work still runs; the worker frees the queue. */
    ds_queue_retire(stream->queue);
    free(stream);
    pthread_mutex_unlock(&g_mu);
    return hipSuccess;
}

/* Runtime API: events ------------------------------------------------- */

hipError_t
hipEventCreateWithFlags(hipEvent_t *event, unsigned flags)
{
    struct ihipEvent_t *e;

    FAKE_ENTER(hipEventCreateWithFlags, true);
    if (event == NULL
        || (flags & ~(unsigned)(hipEventBlockingSync | hipEventDisableTiming
                                | hipEventInterprocess)) != 0
        || ((flags & hipEventInterprocess)
            && !(flags & hipEventDisableTiming))) {
        return hipErrorInvalidValue;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return hipErrorOutOfMemory;
    }
    e->device = t_device;
    e->flags = flags;
    if (flags & hipEventInterprocess) {
        dipc_cell *cell = dipc_cell_create();

        e->ipc = cell != NULL ? cell_wrap(cell) : NULL;
        if (e->ipc == NULL) {
            free(e);
            return hipErrorOutOfMemory;
        }
    }
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_add(&g_event_set, e)) {
        pthread_mutex_unlock(&g_mu);
        cell_unref(e->ipc);
        free(e);
        return hipErrorOutOfMemory;
    }
    dc_live_add(&g_ctl, LIVE_EVENT, 1);
    pthread_mutex_unlock(&g_mu);
    *event = e;
    return hipSuccess;
}

hipError_t
hipEventRecord(hipEvent_t event, hipStream_t stream)
{
    struct ihipStream_t *s;
    ds_mark *m;
    hipError_t rc;

    FAKE_ENTER(hipEventRecord, true);
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(stream, &s);
    if (rc == hipSuccess && !dc_handles_has(&g_event_set, event)) {
        rc = hipErrorInvalidHandle;
    }
    if (rc == hipSuccess && s->device != event->device) {
        /* An event records only on a stream of its own device. */
        rc = hipErrorInvalidHandle;
    }
    if (rc == hipSuccess && event->ipc != NULL) {
        ds_op *op;

        /* Another process may wait on it: not a node of a graph. */
        rc = capture_refuse(s);
        op = rc == hipSuccess ? cell_op(DS_SIGNAL, event->ipc, 0) : NULL;
        if (rc == hipSuccess && op == NULL) {
            rc = hipErrorOutOfMemory;
        }
        if (rc == hipSuccess) {
            uint64_t seq = dipc_cell_record(event->ipc->cell);

            ((struct cell_op *)op->ctx)->seq = seq;
            rc = stream_enqueue(s, op);
            if (rc != hipSuccess) {
                /* Taken, never to run: complete it, so that the event
                 * does not stay pending for every process. */
                dipc_cell_complete(event->ipc->cell, seq);
            }
        }
        pthread_mutex_unlock(&g_mu);
        return rc;
    }
    if (rc == hipSuccess && s->capture != hipStreamCaptureStatusNone) {
        /* A node of the capture: later waits on the event depend on
         * it. */
        if (s->cap_origin->capture == hipStreamCaptureStatusInvalidated) {
            rc = hipErrorStreamCaptureInvalidated;
        }
        else {
            event->cap_origin = s->cap_origin;
            event->cap_id = s->cap_origin->cap_id;
            event->cap_stream = s;
            event->cap_tip = s->cap_tip;
        }
        pthread_mutex_unlock(&g_mu);
        return rc;
    }
    if (rc == hipSuccess) {
        event->cap_origin = event->cap_stream = NULL;
        m = ds_mark_new(2);
        if (m == NULL) {
            rc = hipErrorOutOfMemory;
        }
        else {
            rc = stream_enqueue(s, ds_op_new(DS_RECORD, 0, m));
            if (rc == hipSuccess) {
                ds_mark_unref(event->last);
                event->last = m;
            }
            else {
                ds_mark_unref(m);
            }
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Under g_mu: the event's latest record with a reference for the caller,
 * or NULL (never recorded); *rc for a handle that is not live. */
static ds_mark *
event_mark(hipEvent_t event, hipError_t *rc)
{
    ds_mark *m = NULL;

    *rc = hipSuccess;
    if (!dc_handles_has(&g_event_set, event)) {
        *rc = hipErrorInvalidHandle;
    }
    else if (event->last != NULL) {
        m = event->last;
        atomic_fetch_add(&m->refs, 1);
    }
    return m;
}

hipError_t
hipEventQuery(hipEvent_t event)
{
    struct fake_cell *c;
    hipError_t rc;
    ds_mark *m;

    FAKE_ENTER(hipEventQuery, true);
    pthread_mutex_lock(&g_mu);
    c = event_cell(event, &rc);
    m = c == NULL && rc == hipSuccess ? event_mark(event, &rc) : NULL;
    pthread_mutex_unlock(&g_mu);
    if (c != NULL) {
        rc = dipc_cell_query(c->cell) ? hipSuccess : hipErrorNotReady;
        cell_unref(c);
    }
    if (m != NULL) {
        rc = ds_mark_done(m) ? hipSuccess : hipErrorNotReady;
        ds_mark_unref(m);
    }
    return rc;
}

hipError_t
hipEventSynchronize(hipEvent_t event)
{
    struct fake_cell *c;
    unsigned flags = 0;
    hipError_t rc;
    ds_mark *m;

    FAKE_ENTER(hipEventSynchronize, true);
    pthread_mutex_lock(&g_mu);
    c = event_cell(event, &rc);
    m = c == NULL && rc == hipSuccess ? event_mark(event, &rc) : NULL;
    if (m != NULL || c != NULL) {
        flags = event->flags;
    }
    pthread_mutex_unlock(&g_mu);
    if (c != NULL) {
        /* The latest record at the call, of either process. */
        if (flags & hipEventBlockingSync) {
            atomic_fetch_add(&g_sync_blocked, 1);
        }
        dipc_cell_wait(c->cell, dipc_cell_current(c->cell));
        cell_unref(c);
        return hipSuccess;
    }
    if (m == NULL) {
        return rc;
    }
    if (flags & hipEventBlockingSync) {
        atomic_fetch_add(&g_sync_blocked, 1);
        ds_mark_wait_blocking(m);
    }
    else {
        ds_mark_wait_spinning(m);
    }
    ds_mark_unref(m);
    return hipSuccess;
}

hipError_t
hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop)
{
    ds_mark *a = NULL, *b = NULL;
    hipError_t rc;

    FAKE_ENTER(hipEventElapsedTime, true);
    if (ms == NULL) {
        return hipErrorInvalidValue;
    }
    pthread_mutex_lock(&g_mu);
    a = event_mark(start, &rc);
    if (rc == hipSuccess) {
        b = event_mark(stop, &rc);
    }
    if (rc == hipSuccess
        && (a == NULL || b == NULL
            || ((start->flags | stop->flags) & hipEventDisableTiming))) {
        /* Never recorded, or made without timing. */
        rc = hipErrorInvalidHandle;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc == hipSuccess) {
        if (!ds_mark_done(a) || !ds_mark_done(b)) {
            rc = hipErrorNotReady;
        }
        else {
            *ms = (float)(b->stamp_ms - a->stamp_ms);
        }
    }
    ds_mark_unref(a);
    ds_mark_unref(b);
    return rc;
}

hipError_t
hipEventDestroy(hipEvent_t event)
{
    FAKE_ENTER(hipEventDestroy, true);
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_has(&g_event_set, event)) {
        pthread_mutex_unlock(&g_mu);
        return hipErrorInvalidHandle;
    }
    dc_handles_remove(&g_event_set, event);
    dc_live_add(&g_ctl, LIVE_EVENT, -1);
    pthread_mutex_unlock(&g_mu);
    ds_mark_unref(event->last);
    cell_unref(event->ipc);
    free(event);
    return hipSuccess;
}

/* Runtime API: memory ------------------------------------------------- */

static hipError_t
mem_result(enum dm_result r)
{
    return r == DM_OK ? hipSuccess
           : r == DM_OUT_OF_MEMORY ? hipErrorOutOfMemory
                                   : hipErrorInvalidValue;
}

hipError_t
hipMemGetInfo(size_t *free, size_t *total)
{
    unsigned long long used;

    FAKE_ENTER(hipMemGetInfo, true);
    if (free == NULL || total == NULL) {
        return hipErrorInvalidValue;
    }
    used = dm_used(t_device);
    *total = (size_t)cfg.total_mem;
    *free = (size_t)(used < cfg.total_mem ? cfg.total_mem - used : 0);
    return hipSuccess;
}

hipError_t
hipMalloc(void **ptr, size_t size)
{
    unsigned long long addr;
    hipError_t rc;

    FAKE_ENTER(hipMalloc, true);
    if (ptr == NULL) {
        return hipErrorInvalidValue;
    }
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    rc = mem_result(dm_alloc(t_device, size, false, &addr));
    if (rc == hipSuccess) {
        *ptr = (void *)(uintptr_t)addr;
    }
    return rc;
}

hipError_t
hipFree(void *ptr)
{
    FAKE_ENTER(hipFree, true);
    if (ptr == NULL) {
        return hipSuccess;
    }
    return mem_result(dm_free("hipFree", (uintptr_t)ptr, false));
}

hipError_t
hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
    unsigned long long addr;
    hipError_t rc;

    FAKE_ENTER(hipHostMalloc, true);
    if (ptr == NULL || (flags & ~0xFu) != 0) {
        return hipErrorInvalidValue;
    }
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    rc = mem_result(dm_alloc(t_device, size, true, &addr));
    if (rc == hipSuccess) {
        *ptr = (void *)(uintptr_t)addr;
    }
    return rc;
}

hipError_t
hipHostFree(void *ptr)
{
    FAKE_ENTER(hipHostFree, true);
    if (ptr == NULL) {
        return hipSuccess;
    }
    return mem_result(dm_free("hipHostFree", (uintptr_t)ptr, true));
}

/* Queues a copy or fill on stream (mem copied), asynchronously even
 * where a side is pageable host memory (read or written when the work
 * runs: see "Model" above). */
static hipError_t
mem_enqueue(hipStream_t stream, const dm_op *mem)
{
    struct ihipStream_t *s;
    ds_op *op;
    hipError_t rc;

    op = ds_op_new(DS_MEMORY, 0, NULL);
    if (op == NULL) {
        return hipErrorOutOfMemory;
    }
    op->mem = *mem;
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(stream, &s);
    if (rc == hipSuccess
        && (mem->src.kind == DM_HOST || mem->dst.kind == DM_HOST)) {
        /* Pageable memory cannot be captured. */
        rc = capture_refuse(s);
    }
    if (rc != hipSuccess) {
        ds_op_free(op);
    }
    else {
        rc = stream_enqueue(s, op);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* A host or device side as kind says it is; a device side is checked
 * now (against any device: HIP's addresses are unified). */
static bool
copy_side(const char *api, const void *p, size_t bytes, bool device,
          dm_side *out)
{
    if (!device) {
        *out = dm_host_side(p, bytes);
        return true;
    }
    out->kind = DM_DEVICE;
    out->addr = (uintptr_t)p;
    return dm_check_device(api, out->addr, bytes, -1);
}

hipError_t
hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes,
               hipMemcpyKind kind, hipStream_t stream)
{
    dm_op op = {.api = "hipMemcpyAsync", .bytes = sizeBytes};
    bool dst_device, src_device;

    FAKE_ENTER(hipMemcpyAsync, true);
    if (sizeBytes == 0) {
        return hipSuccess;
    }
    if (dst == NULL || src == NULL) {
        return hipErrorInvalidValue;
    }
    switch (kind) {
    case hipMemcpyHostToHost:
        dst_device = src_device = false;
        break;
    case hipMemcpyHostToDevice:
        dst_device = true, src_device = false;
        break;
    case hipMemcpyDeviceToHost:
        dst_device = false, src_device = true;
        break;
    case hipMemcpyDeviceToDevice:
        dst_device = src_device = true;
        break;
    case hipMemcpyDefault:
        op.dst = dm_classify(dst, sizeBytes);
        op.src = dm_classify(src, sizeBytes);
        return mem_enqueue(stream, &op);
    default:
        return hipErrorInvalidValue;
    }
    if (!copy_side(op.api, dst, sizeBytes, dst_device, &op.dst)
        || !copy_side(op.api, src, sizeBytes, src_device, &op.src)) {
        return hipErrorInvalidValue;
    }
    return mem_enqueue(stream, &op);
}

hipError_t
hipMemcpyPeerAsync(void *dst, int dstDeviceId, const void *src,
                   int srcDevice, size_t sizeBytes, hipStream_t stream)
{
    dm_op op = {.api = "hipMemcpyPeerAsync", .bytes = sizeBytes,
                .dst = {DM_DEVICE, (uintptr_t)dst},
                .src = {DM_DEVICE, (uintptr_t)src}};

    FAKE_ENTER(hipMemcpyPeerAsync, true);
    if (bad_device(dstDeviceId) || bad_device(srcDevice)) {
        return hipErrorInvalidDevice;
    }
    if (sizeBytes == 0) {
        return hipSuccess;
    }
    if (!dm_check_device(op.api, op.dst.addr, sizeBytes, dstDeviceId)
        || !dm_check_device(op.api, op.src.addr, sizeBytes, srcDevice)) {
        return hipErrorInvalidValue;
    }
    return mem_enqueue(stream, &op);
}

hipError_t
hipMemsetD8Async(hipDeviceptr_t dest, unsigned char value, size_t count,
                 hipStream_t stream)
{
    dm_op op = {.api = "hipMemsetD8Async", .fill = true, .bytes = count,
                .value = value, .dst = {DM_DEVICE, (uintptr_t)dest}};

    FAKE_ENTER(hipMemsetD8Async, true);
    if (count == 0) {
        return hipSuccess;
    }
    if (!dm_check_device(op.api, op.dst.addr, count, -1)) {
        return hipErrorInvalidValue;
    }
    return mem_enqueue(stream, &op);
}

hipError_t
hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *ptr)
{
    int device = -1;

    FAKE_ENTER(hipPointerGetAttributes, true);
    if (attributes == NULL || ptr == NULL) {
        return hipErrorInvalidValue;
    }
    memset(attributes, 0, sizeof(*attributes));
    switch (dm_lookup((uintptr_t)ptr, &device)) {
    case 1:
        attributes->memoryType = hipMemoryTypeDevice;
        attributes->devicePointer = (void *)ptr;
        break;
    case 2:
        /* Page-locked host memory is mapped at the same address. */
        attributes->memoryType = hipMemoryTypeHost;
        attributes->hostPointer = (void *)ptr;
        attributes->devicePointer = (void *)ptr;
        break;
    default:
        /* ROCm 5.2: memory the runtime never saw. */
        return hipErrorInvalidValue;
    }
    attributes->device = device;
    return hipSuccess;
}

/* ROCm 5.2 (ROCclr): the memory object holding dptr, device memory or
 * page-locked host memory (both SVM), of any device: there are no
 * contexts; hipErrorInvalidDevicePointer for memory the runtime never
 * saw (later ROCm answers hipErrorNotFound).  The runtime writes both
 * outputs unchecked; NULL ones are refused here rather than crash. */
hipError_t
hipMemGetAddressRange(hipDeviceptr_t *pbase, size_t *psize,
                      hipDeviceptr_t dptr)
{
    dm_range r;

    FAKE_ENTER(hipMemGetAddressRange, true);
    if (pbase == NULL || psize == NULL) {
        return hipErrorInvalidValue;
    }
    r = dm_query((uintptr_t)dptr);
    if (r.kind == 0) {
        return hipErrorInvalidDevicePointer;
    }
    *pbase = (hipDeviceptr_t)(uintptr_t)r.base;
    *psize = (size_t)r.size;
    return hipSuccess;
}

/* Runtime API: modules and launches ---------------------------------- */

/*
 * Code objects go to the shared kernel layer (double_kernels.c), which
 * reads a host shared object (the native format) and runs its kernels,
 * and reads an hsaco for this device's gfx90a (whose kernels it knows
 * but does not run); an ELF for another machine or another AMD
 * architecture has no code this device runs: hipErrorNoBinaryForGpu,
 * what ROCm answers for a code object without one for the device's
 * ISA.  PTX and SPIR-V, which the layer reads for other doubles, are not
 * code objects: HIP refuses them as invalid images.  The runtime takes
 * no size: the image is read as far as its ELF headers say.
 */
hipError_t
hipModuleLoadData(hipModule_t *module, const void *image)
{
    struct ihipModule_t *m;
    dk_module *dk = NULL;
    hipError_t rc = hipSuccess;

    FAKE_ENTER(hipModuleLoadData, true);
    if (module == NULL || image == NULL) {
        return hipErrorInvalidValue;
    }
    switch (dk_module_load_amdgpu(image, 0, FAKE_GFX90A, &dk, NULL, 0)) {
    case DK_OK:
        break;
    case DK_OTHER_MACHINE:
        return hipErrorNoBinaryForGpu;
    case DK_OUT_OF_MEMORY:
        return hipErrorOutOfMemory;
    default:
        return hipErrorInvalidImage;
    }
    if (dk_module_format(dk) != DK_NATIVE
        && dk_module_format(dk) != DK_HSACO) {
        dk_module_unload(dk, "hipModuleLoadData");
        return hipErrorInvalidImage;
    }
    m = calloc(1, sizeof(*m));
    pthread_mutex_lock(&g_mu);
    if (m == NULL || !dc_handles_add(&g_module_set, m)) {
        rc = hipErrorOutOfMemory;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc != hipSuccess) {
        free(m);
        dk_module_unload(dk, "hipModuleLoadData");
        return rc;
    }
    m->dk = dk;
    *module = m;
    return hipSuccess;
}

hipError_t
hipModuleUnload(hipModule_t module)
{
    struct ihipModuleSymbol_t *f;

    FAKE_ENTER(hipModuleUnload, true);
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_has(&g_module_set, module)) {
        pthread_mutex_unlock(&g_mu);
        return hipErrorInvalidHandle;
    }
    dc_handles_remove(&g_module_set, module);
    while ((f = module->functions) != NULL) {
        module->functions = f->next;
        dc_handles_remove(&g_function_set, f);
        free(f);
    }
    pthread_mutex_unlock(&g_mu);
    /* A launch still queued is a misuse the kernel layer reports. */
    dk_module_unload(module->dk, "hipModuleUnload");
    free(module);
    return hipSuccess;
}

hipError_t
hipModuleGetFunction(hipFunction_t *function, hipModule_t module,
                     const char *kname)
{
    struct ihipModuleSymbol_t *f = NULL;
    const dk_kernel *k;
    hipError_t rc = hipSuccess;

    FAKE_ENTER(hipModuleGetFunction, true);
    if (function == NULL || kname == NULL) {
        return hipErrorInvalidValue;
    }
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_has(&g_module_set, module)) {
        rc = hipErrorInvalidHandle;
    }
    else if ((k = dk_kernel_find(module->dk, kname)) == NULL) {
        rc = hipErrorNotFound;
    }
    else {
        /* One function per kernel, as ROCm caches them. */
        for (f = module->functions; f != NULL && f->kernel != k;
             f = f->next) {
        }
        if (f == NULL && (f = calloc(1, sizeof(*f))) != NULL) {
            if (dc_handles_add(&g_function_set, f)) {
                f->module = module;
                f->kernel = k;
                f->next = module->functions;
                module->functions = f;
            }
            else {
                free(f);
                f = NULL;
            }
        }
        rc = f != NULL ? hipSuccess : hipErrorOutOfMemory;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc == hipSuccess) {
        *function = f;
    }
    return rc;
}

hipError_t
hipFuncGetAttribute(int *value, hipFunction_attribute attrib,
                    hipFunction_t hfunc)
{
    const dk_kernel *k = NULL;

    FAKE_ENTER(hipFuncGetAttribute, true);
    if (value == NULL) {
        return hipErrorInvalidValue;
    }
    pthread_mutex_lock(&g_mu);
    if (dc_handles_has(&g_function_set, hfunc)) {
        k = hfunc->kernel;
    }
    pthread_mutex_unlock(&g_mu);
    if (k == NULL) {
        return hipErrorInvalidHandle;
    }
    switch (attrib) {
    case HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *value = k->max_threads;
        break;
    case HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
        *value = (int)k->static_shared;
        break;
    /* An hsaco's from its metadata (ROCm: the private segment and the
     * vector registers); host code's are the host's: 0. */
    case HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
        *value = (int)k->private_bytes;
        break;
    case HIP_FUNC_ATTRIBUTE_NUM_REGS:
        *value = k->registers;
        break;
    case HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        /* As ROCm: the block's shared memory less the static part. */
        *value = (int)(DK_MAX_SHARED - k->static_shared);
        break;
    default:
        return hipErrorInvalidValue;
    }
    return hipSuccess;
}

/*
 * The launch is checked now, as ROCm checks it: a block or shared memory
 * beyond the limits is hipErrorInvalidValue (ROCm 5.2's answer for both),
 * a kernel without host code hipErrorNoBinaryForGpu.  On a capturing
 * stream it becomes a node of the graph, run again by every replay.
 * extra (arguments packed in one buffer) is not modelled.
 */
hipError_t
hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX,
                      unsigned int gridDimY, unsigned int gridDimZ,
                      unsigned int blockDimX, unsigned int blockDimY,
                      unsigned int blockDimZ, unsigned int sharedMemBytes,
                      hipStream_t stream, void **kernelParams, void **extra)
{
    const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
    const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
    const dk_kernel *k = NULL;
    struct ihipStream_t *s;
    dk_launch *launch = NULL;
    ds_op *op = NULL;
    bool capturing;
    hipError_t rc;

    FAKE_ENTER(hipModuleLaunchKernel, true);
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_has(&g_function_set, f)) {
        rc = hipErrorInvalidHandle;
    }
    else {
        k = f->kernel;
        rc = stream_resolve(stream, &s);
    }
    if (rc == hipSuccess
        && (extra != NULL || (kernelParams == NULL && k->nparams > 0))) {
        rc = hipErrorInvalidValue;
    }
    if (rc == hipSuccess
        && dk_check_geometry(k, grid, block, sharedMemBytes, DK_MAX_SHARED)
               != DK_OK) {
        rc = hipErrorInvalidValue;
    }
    if (rc == hipSuccess) {
        capturing = s->capture != hipStreamCaptureStatusNone;
        switch (dk_launch_new(k, grid, block, sharedMemBytes, kernelParams,
                              !capturing, &launch)) {
        case DK_OK:
            break;
        case DK_NO_BINARY:
            rc = hipErrorNoBinaryForGpu;
            break;
        default:
            rc = hipErrorOutOfMemory;
            break;
        }
    }
    if (rc == hipSuccess
        && (op = ds_op_new(DS_KERNEL, 0, NULL)) != NULL) {
        op->launch = launch;
        op->api = "hipModuleLaunchKernel";
    }
    else if (rc == hipSuccess) {
        dk_launch_free(launch);
    }
    if (rc == hipSuccess) {
        /* Takes op over (NULL: out of memory). */
        rc = stream_enqueue(s, op);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Runtime API: graphs (stream capture) ------------------------------ */

hipError_t
hipStreamIsCapturing(hipStream_t stream,
                     hipStreamCaptureStatus *pCaptureStatus)
{
    struct ihipStream_t *s;
    hipError_t rc;

    FAKE_ENTER(hipStreamIsCapturing, true);
    if (pCaptureStatus == NULL) {
        return hipErrorInvalidValue;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(stream, &s);
    if (rc == hipSuccess) {
        *pCaptureStatus = (hipStreamCaptureStatus)s->capture;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

hipError_t
hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode)
{
    struct ihipStream_t *s;
    hipError_t rc;

    FAKE_ENTER(hipStreamBeginCapture, true);
    if ((int)mode < hipStreamCaptureModeGlobal
        || mode > hipStreamCaptureModeRelaxed) {
        return hipErrorInvalidValue;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(stream, &s);
    if (rc == hipSuccess && s->null) {
        rc = hipErrorStreamCaptureUnsupported;
    }
    else if (rc == hipSuccess && s->capture != hipStreamCaptureStatusNone) {
        rc = hipErrorIllegalState;
    }
    if (rc == hipSuccess) {
        s->capture = hipStreamCaptureStatusActive;
        s->capture_mode = mode;
        s->capture_thread = pthread_self();
        s->cap_head = s->cap_tail = NULL;
        s->cap_origin = s;
        s->cap_id = ++g_capture_ids;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Under g_mu.  The end of the capture begun on s (which captures, from a
 * thread allowed to end it): its graph in *out, or the reason there is
 * none. */
static hipError_t
capture_finish(struct ihipStream_t *s, struct ihipGraph **out)
{
    bool joined = capture_release(s);
    struct ihipGraph *g = NULL;
    hipError_t rc = hipSuccess;

    if (s->capture == hipStreamCaptureStatusInvalidated) {
        rc = hipErrorStreamCaptureInvalidated;
    }
    else if (!joined) {
        rc = hipErrorStreamCaptureUnjoined;
    }
    else if ((g = calloc(1, sizeof(*g))) == NULL
             || !dc_handles_add(&g_graph_set, g)) {
        free(g);
        g = NULL;
        rc = hipErrorOutOfMemory;
    }
    if (g != NULL) {
        g->head = s->cap_head;
        dc_live_add(&g_ctl, LIVE_GRAPH, 1);
    }
    else {
        ds_op_list_free(s->cap_head);
    }
    s->cap_head = s->cap_tail = NULL;
    s->capture = hipStreamCaptureStatusNone;
    *out = g;
    return rc;
}

hipError_t
hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph)
{
    struct ihipStream_t *s;
    struct ihipGraph *g = NULL;
    hipError_t rc;

    FAKE_ENTER(hipStreamEndCapture, true);
    if (pGraph == NULL) {
        return hipErrorInvalidValue;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(stream, &s);
    if (rc == hipSuccess && s->capture == hipStreamCaptureStatusNone) {
        rc = hipErrorIllegalState;
    }
    else if (rc == hipSuccess && s->cap_origin != s) {
        /* Forked into another stream's capture. */
        rc = hipErrorStreamCaptureUnmatched;
    }
    else if (rc == hipSuccess
             && s->capture_mode != hipStreamCaptureModeRelaxed
             && !pthread_equal(s->capture_thread, pthread_self())) {
        rc = hipErrorStreamCaptureWrongThread;
    }
    else if (rc == hipSuccess) {
        rc = capture_finish(s, &g);
    }
    pthread_mutex_unlock(&g_mu);
    *pGraph = g;
    return rc;
}

/* ROCm 5.2's signature: the error node and log are not filled here. */
hipError_t
hipGraphInstantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph,
                    hipGraphNode_t *pErrorNode, char *pLogBuffer,
                    size_t bufferSize)
{
    struct hipGraphExec *x = NULL;
    hipError_t rc = hipSuccess;
    bool ok;

    (void)pErrorNode;
    (void)pLogBuffer;
    (void)bufferSize;
    FAKE_ENTER(hipGraphInstantiate, true);
    if (pGraphExec == NULL) {
        return hipErrorInvalidValue;
    }
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_has(&g_graph_set, graph)) {
        rc = hipErrorInvalidValue;
    }
    else if ((x = calloc(1, sizeof(*x))) == NULL) {
        rc = hipErrorOutOfMemory;
    }
    else {
        x->head = ds_op_list_copy(graph->head, false, &ok);
        if (!ok || !dc_handles_add(&g_exec_set, x)) {
            ds_op_list_free(x->head);
            free(x);
            x = NULL;
            rc = hipErrorOutOfMemory;
        }
        else {
            dc_live_add(&g_ctl, LIVE_GRAPH_EXEC, 1);
        }
    }
    pthread_mutex_unlock(&g_mu);
    *pGraphExec = x;
    return rc;
}

hipError_t
hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream)
{
    struct ihipStream_t *s;
    ds_op *ops = NULL;
    hipError_t rc;
    bool ok = true;

    FAKE_ENTER(hipGraphLaunch, true);
    pthread_mutex_lock(&g_mu);
    rc = dc_handles_has(&g_exec_set, graphExec)
             ? stream_resolve(stream, &s)
             : hipErrorInvalidValue;
    if (rc == hipSuccess) {
        /* The double does not model child graphs in a capture. */
        rc = capture_refuse(s);
    }
    if (rc == hipSuccess) {
        ops = ds_op_list_copy(graphExec->head, true, &ok);
        if (!ok || !ds_op_list_frame(&ops, &graphExec->last)) {
            rc = hipErrorOutOfMemory;
        }
    }
    /* One launch: the recorded ops, in order, on the stream's worker. */
    while (rc == hipSuccess && ops != NULL) {
        ds_op *next = ops->next;

        rc = stream_enqueue(s, ops);
        ops = next;
    }
    ds_op_list_free(ops);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

hipError_t
hipGraphExecDestroy(hipGraphExec_t graphExec)
{
    hipError_t rc = hipErrorInvalidValue;

    FAKE_ENTER(hipGraphExecDestroy, true);
    pthread_mutex_lock(&g_mu);
    if (dc_handles_has(&g_exec_set, graphExec)) {
        dc_handles_remove(&g_exec_set, graphExec);
        dc_live_add(&g_ctl, LIVE_GRAPH_EXEC, -1);
        ds_op_list_free(graphExec->head);
        ds_mark_unref(graphExec->last);
        free(graphExec);
        rc = hipSuccess;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

hipError_t
hipGraphDestroy(hipGraph_t graph)
{
    hipError_t rc = hipErrorInvalidValue;

    FAKE_ENTER(hipGraphDestroy, true);
    pthread_mutex_lock(&g_mu);
    if (dc_handles_has(&g_graph_set, graph)) {
        dc_handles_remove(&g_graph_set, graph);
        dc_live_add(&g_ctl, LIVE_GRAPH, -1);
        ds_op_list_free(graph->head);
        free(graph);
        rc = hipSuccess;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Runtime API: interprocess memory and events ------------------------- */

/* Where ROCm's ihipIpcMemHandle_t keeps the allocation's size (psize,
 * after its 32 bytes of ROCr handle), which hipIpcOpenMemHandle checks
 * first: double_ipc.h's layout has the size there too. */
#define FAKE_IPC_SIZE_AT 32

hipError_t
hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *devPtr)
{
    unsigned char bytes[DIPC_HANDLE_BYTES];

    FAKE_ENTER(hipIpcGetMemHandle, true);
    if (handle == NULL || devPtr == NULL) {
        return hipErrorInvalidValue;
    }
    _Static_assert(sizeof(handle->reserved) == DIPC_HANDLE_BYTES,
                   "a double's handle fills HIP's");
    switch (dm_ipc_export((uintptr_t)devPtr, bytes, NULL)) {
    case DIPC_OK:
        memcpy(handle->reserved, bytes, sizeof(bytes));
        return hipSuccess;
    case DIPC_NO_MEMORY:
        return hipErrorOutOfMemory;
    default:
        /* Not the base of a live hipMalloc allocation of this process
         * (an opened one included): ROCr's IPC create refuses it. */
        return hipErrorInvalidDevicePointer;
    }
}

hipError_t
hipIpcOpenMemHandle(void **devPtr, hipIpcMemHandle_t handle,
                    unsigned int flags)
{
    unsigned long long addr, size;

    FAKE_ENTER(hipIpcOpenMemHandle, true);
    if (devPtr == NULL || flags != hipIpcMemLazyEnablePeerAccess) {
        return hipErrorInvalidValue;
    }
    memcpy(&size, handle.reserved + FAKE_IPC_SIZE_AT, sizeof(size));
    if (size == 0) {
        return hipErrorInvalidValue;
    }
    switch (dm_ipc_open(t_device, (const unsigned char *)handle.reserved,
                        -1, &addr)) {
    case DIPC_OK:
        *devPtr = (void *)(uintptr_t)addr;
        return hipSuccess;
    case DIPC_OWN_PROCESS:
        return hipErrorInvalidContext;
    case DIPC_NO_MEMORY:
        return hipErrorOutOfMemory;
    default:
        /* Damaged, of no live allocation, or its exporter exited: the
         * attach fails. */
        return hipErrorInvalidDevicePointer;
    }
}

hipError_t
hipIpcCloseMemHandle(void *devPtr)
{
    FAKE_ENTER(hipIpcCloseMemHandle, true);
    if (devPtr == NULL) {
        return hipErrorInvalidValue;
    }
    if (!dm_ipc_imported((uintptr_t)devPtr)) {
        return hipErrorInvalidHandle;
    }
    return dm_ipc_close("hipIpcCloseMemHandle", (uintptr_t)devPtr)
               ? hipSuccess
               : hipErrorInvalidHandle;
}

hipError_t
hipIpcGetEventHandle(hipIpcEventHandle_t *handle, hipEvent_t event)
{
    unsigned char bytes[DIPC_HANDLE_BYTES];
    hipError_t rc = hipSuccess;

    FAKE_ENTER(hipIpcGetEventHandle, true);
    if (handle == NULL || event == NULL) {
        return hipErrorInvalidValue;
    }
    _Static_assert(sizeof(handle->reserved) == DIPC_HANDLE_BYTES,
                   "a double's handle fills HIP's");
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_has(&g_event_set, event)) {
        rc = hipErrorInvalidHandle;
    }
    else if (event->ipc == NULL || event->imported
             || !dipc_cell_export(event->ipc->cell, bytes, NULL)) {
        rc = hipErrorInvalidConfiguration;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc == hipSuccess) {
        memcpy(handle->reserved, bytes, sizeof(bytes));
    }
    return rc;
}

hipError_t
hipIpcOpenEventHandle(hipEvent_t *event, hipIpcEventHandle_t handle)
{
    struct ihipEvent_t *e;
    dipc_cell *cell = NULL;

    FAKE_ENTER(hipIpcOpenEventHandle, true);
    if (event == NULL) {
        return hipErrorInvalidValue;
    }
    switch (dipc_cell_open((const unsigned char *)handle.reserved, -1,
                           &cell)) {
    case DIPC_OK:
        break;
    case DIPC_OWN_PROCESS:
        return hipErrorInvalidContext;
    case DIPC_NO_MEMORY:
        return hipErrorOutOfMemory;
    default:
        return hipErrorInvalidValue;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        dipc_cell_release(cell);
        return hipErrorOutOfMemory;
    }
    e->ipc = cell_wrap(cell);
    if (e->ipc == NULL) {
        free(e);
        return hipErrorOutOfMemory;
    }
    /* As hipEventCreateWithFlags would make it, on the current device. */
    e->device = t_device;
    e->flags = hipEventDisableTiming | hipEventInterprocess;
    e->imported = true;
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_add(&g_event_set, e)) {
        pthread_mutex_unlock(&g_mu);
        cell_unref(e->ipc);
        free(e);
        return hipErrorOutOfMemory;
    }
    dc_live_add(&g_ctl, LIVE_EVENT, 1);
    pthread_mutex_unlock(&g_mu);
    *event = e;
    return hipSuccess;
}

/* Control API for tests ----------------------------------------------- */

static void
reset_sync_counter(void)
{
    atomic_store(&g_sync_blocked, 0);
}

static long long
live_extra(const char *kind)
{
    long long n = dm_live(kind);

    return n >= 0 ? n : dk_live(kind);
}

static void
reset_detectors(void)
{
    dm_reset_detectors();
    dk_reset_detectors();
}

/* Queues op (taken over) on a test's stream: see enqueue_sleep above. */
static int
enqueue_control_op(int device, unsigned long long stream, ds_op *op)
{
    struct ihipStream_t *s = NULL;
    hipError_t rc;

    if (atomic_load(&g_poisoned)) {
        ds_op_free(op);
        return hipErrorNotInitialized;
    }
    pthread_mutex_lock(&g_mu);
    if (stream == 0) {
        rc = bad_device(device) ? hipErrorInvalidDevice
                                : null_stream(device, &s);
    }
    else {
        rc = stream_resolve((hipStream_t)(uintptr_t)stream, &s);
    }
    if (rc == hipSuccess) {
        rc = stream_enqueue(s, op);
    }
    else {
        ds_op_free(op);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int
fake_hip_enqueue_sleep(int device, unsigned long long stream, double ms)
{
    if (!(ms >= 0.0)) {
        return hipErrorInvalidValue;
    }
    return enqueue_control_op(device, stream, ds_op_new(DS_SLEEP, ms, NULL));
}

int
fake_hip_enqueue_gate(int device, unsigned long long stream, int *gate)
{
    int id = dc_gate_new();
    ds_op *op;
    int rc;

    if (gate == NULL || id < 0) {
        return hipErrorInvalidValue;
    }
    op = ds_op_new(DS_GATE, 0.0, NULL);
    if (op != NULL) {
        op->gate = id;
    }
    rc = enqueue_control_op(device, stream, op);
    if (rc != hipSuccess) {
        dc_gate_open(id);
        return rc;
    }
    *gate = id;
    return hipSuccess;
}

int
fake_hip_open_gate(int gate)
{
    return dc_gate_open(gate);
}

int
fake_hip_initialized(void)
{
    return atomic_load(&g_initialized);
}

int
fake_hip_current_device(void)
{
    return t_device;
}

long long
fake_hip_event_sync_blocked(void)
{
    return atomic_load(&g_sync_blocked);
}

/* Loading and fork ---------------------------------------------------- */

static void
config_read(void)
{
    const char *value;
    unsigned long long mem;
    long long devices;
    int least, greatest, major, minor;
    char extra;

    if (dc_env_int(&g_ctl, "FAKE_HIP_DEVICES", 0, FAKE_MAX_DEVICES,
                   &devices)) {
        cfg.devices = (int)devices;
    }
    if (dc_env_ull(&g_ctl, "FAKE_HIP_TOTAL_MEM", &mem)) {
        cfg.total_mem = mem;
    }
    value = getenv("FAKE_HIP_ARCH");
    if (value != NULL) {
        if (value[0] != '\0' && strlen(value) < sizeof(cfg.arch)) {
            snprintf(cfg.arch, sizeof(cfg.arch), "%s", value);
        }
        else {
            dc_env_warn(&g_ctl, "FAKE_HIP_ARCH", value);
        }
    }
    value = getenv("FAKE_HIP_GFX");
    if (value != NULL) {
        if (sscanf(value, "%d.%d%c", &major, &minor, &extra) == 2
            && major >= 0 && minor >= 0) {
            cfg.gfx_major = major;
            cfg.gfx_minor = minor;
        }
        else {
            dc_env_warn(&g_ctl, "FAKE_HIP_GFX", value);
        }
    }
    value = getenv("FAKE_HIP_PRIORITY_RANGE");
    if (value != NULL) {
        /* Lower numbers are higher priorities: greatest <= least. */
        if (sscanf(value, "%d,%d%c", &least, &greatest, &extra) == 2
            && greatest <= least) {
            cfg.prio_least = least;
            cfg.prio_greatest = greatest;
        }
        else {
            dc_env_warn(&g_ctl, "FAKE_HIP_PRIORITY_RANGE", value);
        }
    }
}

/* The registry's lock is held across fork(), so that the child finds it
 * consistent (its control functions still work).  The workers' locks are
 * not: the child has no workers and never touches them. */
static void
fork_prepare(void)
{
    dc_fork_prepare(&g_ctl);
    pthread_mutex_lock(&g_mu);
    ds_fork_prepare();
}

static void
fork_parent(void)
{
    ds_fork_release();
    pthread_mutex_unlock(&g_mu);
    dc_fork_release(&g_ctl);
}

static void
fork_child(void)
{
    if (atomic_load(&g_initialized)) {
        atomic_store(&g_poisoned, 1);
    }
    ds_fork_release();
    pthread_mutex_unlock(&g_mu);
    dc_fork_release(&g_ctl);
}

__attribute__((constructor)) static void
fake_hip_load(void)
{
    config_read();
    dm_configure("fake libamdhip64", cfg.total_mem);
    dc_env_faults(&g_ctl, "FAKE_HIP_FAIL");
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
