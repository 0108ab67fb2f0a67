/*
 * cuda_double.c - a fake CUDA driver (libcuda.so.1) for tests.
 *
 * The backend runs unchanged on top of it, so this file reproduces the
 * driver's observable behaviour: real error codes, asynchronous streams
 * (one worker thread per stream), events that complete in stream order,
 * a per-thread context stack, reference-counted primary contexts and the
 * fork() poisoning of a child.  It also exports the old unversioned names
 * (cuStreamDestroy ...) next to the versioned ones, like libcuda, and the
 * functions of ACC_CUDA_PEER_FUNCTIONS (cuStreamGetCtx and its _v2,
 * cuCtxGetDevice, cuMemAllocHost, cuMemcpyAsync, cuPointerGetAttributes),
 * which the backend never calls, so that NVIDIA's cuda.core runs on the
 * double beside the product (tests/test_cuda_core_peer.py); they are
 * counted and take faults like the others.
 *
 * Built twice by the Makefile: build/libcuda.so.1 exports cuGetProcAddress
 * and cuGetProcAddress_v2; build/noproc/libcuda.so.1
 * (-DFAKE_CUDA_NO_PROC_ADDRESS) exports neither, like a pre-11.3 driver.
 *
 * Control API for tests (load the same file with ctypes.CDLL; set argtypes
 * and restype, the defaults would truncate the 64-bit values).  Control
 * functions are not counted and are never affected by faults.
 *
 *   long long fake_cuda_call_count(const char *name)
 *       Calls so far of one driver function, by base name ("cuStreamDestroy"
 *       counts cuStreamDestroy and cuStreamDestroy_v2; "cuGetProcAddress"
 *       counts both of its variants); a versioned name means its base name.
 *       NULL: all driver calls.  -1 for an unknown name.  Calls that a fault
 *       answered are counted too.
 *   void fake_cuda_reset_counts(void)
 *       Zeroes the call counts and the two event-synchronize counters.
 *   int fake_cuda_fail(const char *name, int nth, int code)
 *       Makes the nth call (1-based, counted from now) of that function
 *       return `code` without doing anything; nth == 0: every call from now
 *       on.  Several faults may be pending; when more than one is due on
 *       the same call the earliest installed wins and the other one-shot
 *       faults are due again on the next call.  Returns 0, or -1 for an
 *       unknown name, nth < 0 or more than 64 pending faults.
 *   void fake_cuda_clear_faults(void)
 *   long long fake_cuda_live(const char *kind)
 *       "stream": created, not destroyed (default streams excluded);
 *       "event": created, not destroyed; "context": primary contexts with
 *       a retain count > 0; "retain": sum of the retain counts;
 *       "alloc": live cuMemAlloc allocations; "alloc_bytes": their bytes;
 *       "host_alloc": live cuMemHostAlloc allocations; "bad_access":
 *       copies, fills and frees so far that touched memory outside a live
 *       allocation (out of bounds, after free, another device's, freed
 *       page-locked memory), each also printed on stderr; "guard_damage":
 *       allocations whose guard bytes were found overwritten (at free, or
 *       live now); "module": loaded modules; "kernel_misuse": modules
 *       unloaded under a queued launch, and such launches;
 *       "ipc_exported": live allocations exported at least once;
 *       "ipc_opened": mappings cuIpcOpenMemHandle made, not closed;
 *       "ipc_event_cells": interprocess events' shared cells (created or
 *       opened, not destroyed).  -1 for an unknown kind.
 *   void fake_cuda_report_at_exit(void)
 *       Prints the live retain, stream and event counts (and the driver
 *       calls made so far, all functions) on stderr at exit,
 *       after the atexit handlers registered later than this call (so,
 *       called before the product initialises, after its shutdown).
 *   int fake_cuda_enqueue_sleep(int device, unsigned long long stream,
 *                               double ms)
 *       Enqueues work that keeps the stream busy for ms milliseconds, like a
 *       kernel launch.  stream 0 or 1: the legacy default stream of the
 *       primary context of `device` (it must be retained, else
 *       CUDA_ERROR_INVALID_CONTEXT); otherwise a CUstream as an integer and
 *       `device` is ignored.  Returns a CUresult (INVALID_HANDLE for a
 *       stream that is not live, INVALID_VALUE for ms < 0 or NaN).
 *   int fake_cuda_foreign_work(int device, double ms)
 *       What another library (the CUDA runtime, torch, CuPy) does behind
 *       the product's back: initialises the driver (as cuInit), retains
 *       the primary context of `device` for
 *       itself (the first time; it keeps that reference for good) and
 *       queues ms milliseconds of work on that context's legacy default
 *       stream.  Returns a CUresult.
 *   int fake_cuda_foreign_done(int device)
 *       1 when all the work fake_cuda_foreign_work queued on `device` has
 *       run (or none was queued), 0 when not, -1 for a bad device.
 *   int fake_cuda_enqueue_gate(int device, unsigned long long stream,
 *                              int *gate)
 *       Enqueues work that keeps the stream busy until the test calls
 *       fake_cuda_open_gate(*gate): "not done yet" without a race against
 *       the clock.  Streams as for enqueue_sleep; returns a CUresult.
 *   int fake_cuda_open_gate(int gate)
 *       Lets that work complete; 0, or -1 for an unknown gate.
 *   int fake_cuda_current_device(void)
 *       Device of the calling thread's current context, -1 if none.
 *   long long fake_cuda_event_sync_blocked(void)
 *   long long fake_cuda_event_sync_spun(void)
 *       cuEventSynchronize calls on a recorded event that waited by blocking
 *       on a condition variable (CU_EVENT_BLOCKING_SYNC events), or by
 *       spinning (the others); counted by the path taken, even when the
 *       record had already completed.
 *
 * Environment, read once when the library is loaded:
 *   FAKE_CUDA_DEVICES         device count, 0..64 (2); 0: cuInit returns
 *                             CUDA_ERROR_NO_DEVICE
 *   CUDA_VISIBLE_DEVICES      read by cuInit, as the driver does: indices
 *                             or "GPU-" UUID prefixes (the first entry
 *                             decides which); the list ends at the first
 *                             unreadable, unknown, ambiguous or out of
 *                             range entry; a repeated device empties it.
 *                             Names, UUIDs and PCI bus ids stay those of
 *                             the physical device (the NVML double's).
 *   FAKE_CUDA_DRIVER_VERSION  cuDriverGetVersion (12080)
 *   FAKE_CUDA_TOTAL_MEM       bytes per device (80 GiB); cuMemAlloc
 *                             fails with CUDA_ERROR_OUT_OF_MEMORY beyond
 *                             it (less the context's 512 MiB)
 *   FAKE_CUDA_NAME            device names are "<NAME> <ordinal>"
 *                             ("Fake CUDA Device")
 *   FAKE_CUDA_CC              compute capability "major.minor" ("9.0")
 *   FAKE_CUDA_SMS             multiprocessor count (132)
 *   FAKE_CUDA_PRIORITY_RANGE  "least,greatest" stream priorities ("0,-5")
 *   FAKE_CUDA_FAIL            faults installed at load:
 *                             "name:nth:code[,name:nth:code...]"
 * Invalid values are reported on stderr and the default is used.
 *
 * Model, where the real driver leaves a choice:
 *   - cuMemGetInfo: free = total - 512 MiB while the device's primary
 *     context is retained (a fixed, deterministic footprint).
 *   - The legacy default stream (handle 0 or 1) synchronises with the
 *     blocking streams of its context, as the real one does: its work waits
 *     for the work already queued on them, and their work waits for the
 *     work already queued on it.  CU_STREAM_PER_THREAD (2) is not modelled:
 *     INVALID_HANDLE.
 *   - Releasing a primary context to zero destroys its streams and events:
 *     their handles become invalid at once, queued work still runs.
 *   - After fork() in a child of an initialised parent, every function
 *     returns CUDA_ERROR_NOT_INITIALIZED, except the ones that never need
 *     cuInit (cuGetErrorName/String, cuDriverGetVersion, cuGetProcAddress,
 *     cuGetExportTable).
 *   - cuGetProcAddress of a name the double does not export, or at a
 *     cudaVersion older than its first variant: CUDA_ERROR_NOT_FOUND,
 *     *pfn NULL, symbolStatus SYMBOL_NOT_FOUND or VERSION_NOT_SUFFICIENT.
 *     cuda.h's comment says CUDA_SUCCESS with a NULL pfn; the driver
 *     answers the error (ZLUDA, whose table was made by querying it,
 *     does too), and callers such as NVRTC check only the result.
 *   - cuGetExportTable (the driver's private tables, by UUID; NVRTC 13
 *     looks it up with dlsym and crashes without it): the double has no
 *     tables, so CUDA_ERROR_INVALID_VALUE and *ppExportTable NULL for
 *     every id.
 *   - The unversioned cuMemGetInfo and cuDeviceTotalMem take unsigned int
 *     pointers (their real pre-3.2 ABI) and saturate at UINT_MAX;
 *     cuGetProcAddress (v1) takes four arguments, like the real one.
 *   - CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID is the PCI device (slot) number,
 *     0, as on real boards.
 *   - Device memory (tests/drivers/double_memory.h): host memory with
 *     guard bytes, behind addresses never reused, taken from address space
 *     reserved with no access (0x7fxx_xxxx_xxxx, below 2**63, as a real
 *     driver's): one unified address space, so cuMemcpyAsync and
 *     cuPointerGetAttributes tell device from host memory by the address.
 *     No memory pools: CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0.
 *   - cuPointerGetAttributes writes its boolean attributes as one byte (a
 *     C bool); for memory the driver never saw it succeeds with NULL
 *     values and device ordinal -2 (cudaInvalidDeviceId).
 *   - cuStreamGetCtx answers CU_STREAM_PER_THREAD (2) with the current
 *     context, as the driver does, though streams do not model it.
 *     Copies and fills run on the stream's worker in stream order.  A
 *     copy from pageable host memory stages the source at the call; one
 *     to pageable memory returns when it has run; page-locked memory is
 *     fully asynchronous.  cuMemFree does not synchronise (real drivers
 *     do), so that freeing memory that queued work still uses is caught.
 *   - Interprocess memory and events (tests/drivers/double_ipc.h): each
 *     allocation's storage is a memfd; cuIpcGetMemHandle (the base of a
 *     live cuMemAlloc allocation, else INVALID_VALUE) writes a handle that
 *     cuIpcOpenMemHandle(_v2) in another process maps at a fresh address
 *     of its current device (flags 0 or LAZY_ENABLE_PEER_ACCESS); opened
 *     twice in a context it answers the same address, each open closed by
 *     one cuIpcCloseMemHandle, which needs a context (INVALID_CONTEXT)
 *     and refuses anything else (INVALID_VALUE, reported); cuMemFree
 *     refuses an opened address (INVALID_VALUE, reported).  Opening a
 *     handle in the process that made it: INVALID_CONTEXT; a damaged
 *     handle, or one whose exporter exited (its memory died with it):
 *     INVALID_VALUE.  An event made with CU_EVENT_INTERPROCESS (which
 *     requires DISABLE_TIMING) keeps its state in a shared cell that
 *     either process records: a record takes the cell's next sequence
 *     and its stream completes it; query, synchronize and stream waits
 *     wait for the latest sequence at the call.  cuIpcGetEventHandle of
 *     another event: INVALID_HANDLE; an opened event answers its handle
 *     again.  Recording or waiting on one in a stream capture is refused
 *     (STREAM_CAPTURE_UNSUPPORTED, invalidating the capture).  A record
 *     that fails to queue (out of memory) completes its sequence at once.
 *   - Kernels (tests/drivers/double_kernels.h): cuModuleLoadData(Ex) takes
 *     the doubles' native format (a host ELF shared object), which runs
 *     on the stream's worker, and cubins (CUDA ELF, EM_CUDA) for the
 *     device's compute capability and PTX, whose kernels and parameters
 *     are read (cuFuncGetParamInfo: a cubin's from its EIATTR_KPARAM_INFO
 *     records) but whose launches fail with CUDA_ERROR_NO_BINARY_FOR_GPU.
 *     A cubin the device cannot run (sm_XY runs on compute capability
 *     X.Z with Z >= Y only) and an ELF for another host machine fail to
 *     load with that code; a damaged cubin (tables outside the image,
 *     records that do not add up) with CUDA_ERROR_INVALID_IMAGE and the
 *     reason in CU_JIT_ERROR_LOG_BUFFER; PTX that does not parse with
 *     CUDA_ERROR_INVALID_PTX and a ptxas-like error log; anything else
 *     (SPIR-V, fat binaries) with CUDA_ERROR_INVALID_IMAGE.  No library
 *     API (cuLibraryLoadData): modules only.
 *     Kernel attributes: the device's 1024 threads (a cubin's or PTX's
 *     bounds where they declare them) and 48 KiB of dynamic shared memory
 *     (no cuFuncSetAttribute opt-in); a cubin's registers, local memory
 *     and architecture (BINARY_VERSION), else 32 registers, none, and the
 *     device's compute capability.
 *     cuLaunchKernel takes kernelParams only (extra: NOT_SUPPORTED) and
 *     checks the geometry against the device limits (INVALID_VALUE); on a
 *     capturing stream it is a graph node that each cuGraphLaunch queues.
 *     Loading a module during a global-mode capture (or on the thread of
 *     a thread-local one) fails with STREAM_CAPTURE_UNSUPPORTED and
 *     invalidates that capture.  Live kind "module"; the detector
 *     "kernel_misuse" counts a module unloaded while a launch of it was
 *     queued (and that launch, which then does not run).
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../csrc/backends/cuda/cuda_api.h"
#include "double_control.h"
#include "double_ipc.h"
#include "double_kernels.h"
#include "double_memory.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

#define FAKE_MAX_DEVICES 64
#define FAKE_CTX_STACK 64
#define FAKE_CONTEXT_FOOTPRINT (512ULL * 1024 * 1024)
#define FAKE_LEGACY_STREAM ((CUstream)(uintptr_t)1)
#define FAKE_PROC_FLAGS 3ULL /* LEGACY_STREAM | PER_THREAD_DEFAULT_STREAM */

/* Declarations -------------------------------------------------------- */

/* Prototypes from the backend's own list, so that every definition below
 * is checked against the signature the backend calls through. */
#define FAKE_DECLARE(name, symbol, version, params) \
    FAKE_EXPORT CUresult symbol params;
ACC_CUDA_FUNCTIONS(FAKE_DECLARE)
ACC_CUDA_IPC_FUNCTIONS(FAKE_DECLARE)
ACC_CUDA_OPTIONAL_FUNCTIONS(FAKE_DECLARE)
ACC_CUDA_PEER_FUNCTIONS(FAKE_DECLARE)
#undef FAKE_DECLARE

/* The other variants that libcuda exports. */
FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
FAKE_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
FAKE_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx);
FAKE_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx);
FAKE_EXPORT CUresult cuStreamDestroy(CUstream hStream);
FAKE_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds,
                                           CUevent hStart, CUevent hEnd);
FAKE_EXPORT CUresult cuEventDestroy(CUevent hEvent);
FAKE_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
FAKE_EXPORT CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx,
                                       CUgreenCtx *pGreenCtx);
FAKE_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr,
                                        CUipcMemHandle handle,
                                        unsigned int Flags);
FAKE_EXPORT CUresult cuGetExportTable(const void **ppExportTable,
                                      const CUuuid *pExportTableId);
#ifndef FAKE_CUDA_NO_PROC_ADDRESS
FAKE_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn,
                                      int cudaVersion, cuuint64_t flags);
FAKE_EXPORT CUresult cuGetProcAddress_v2(
    const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult *symbolStatus);
#endif

FAKE_EXPORT void fake_cuda_report_at_exit(void);
FAKE_EXPORT int fake_cuda_enqueue_sleep(int device, unsigned long long stream,
                                        double ms);
FAKE_EXPORT int fake_cuda_enqueue_gate(int device, unsigned long long stream,
                                       int *gate);
FAKE_EXPORT int fake_cuda_open_gate(int gate);
FAKE_EXPORT int fake_cuda_current_device(void);
FAKE_EXPORT int fake_cuda_foreign_work(int device, double ms);
FAKE_EXPORT int fake_cuda_foreign_done(int device);
FAKE_EXPORT long long fake_cuda_event_sync_blocked(void);
FAKE_EXPORT long long fake_cuda_event_sync_spun(void);

/* Functions by base name: the unit of counting and of fault injection. */
#define FAKE_FN_ID(name, symbol, version, params) FN_##name,
enum fake_fn {
    ACC_CUDA_FUNCTIONS(FAKE_FN_ID)
    ACC_CUDA_IPC_FUNCTIONS(FAKE_FN_ID)
    ACC_CUDA_OPTIONAL_FUNCTIONS(FAKE_FN_ID)
    ACC_CUDA_PEER_FUNCTIONS(FAKE_FN_ID)
    FN_cuGetProcAddress,
    FN_cuGetExportTable,
    FN_COUNT
};
#undef FAKE_FN_ID

#define FAKE_FN_NAME(name, symbol, version, params) {#name, #symbol},
static const dc_fn fake_fns[FN_COUNT] = {
    ACC_CUDA_FUNCTIONS(FAKE_FN_NAME)
    ACC_CUDA_IPC_FUNCTIONS(FAKE_FN_NAME)
    ACC_CUDA_OPTIONAL_FUNCTIONS(FAKE_FN_NAME)
    ACC_CUDA_PEER_FUNCTIONS(FAKE_FN_NAME)
    {"cuGetProcAddress", "cuGetProcAddress_v2"},
    {"cuGetExportTable", "cuGetExportTable"},
};
#undef FAKE_FN_NAME

/* State --------------------------------------------------------------- */

/* A point in a stream's queue: completed (and time-stamped) by the
 * stream's worker.  Event records, waits and synchronisations all refer
 * to marks, which are reference counted so that a destroyed event or
 * stream never pulls one from under a worker or a waiter. */
struct fake_mark {
    atomic_int refs;
    atomic_int done;
    double stamp_ms;
};

enum fake_op_kind {
    OP_SLEEP, OP_GATE, OP_RECORD, OP_WAIT, OP_MEMORY, OP_LAUNCH,
    OP_CELL_RECORD, /* an interprocess event's record: completes seq */
    OP_CELL_WAIT,   /* a wait for an interprocess event's seq */
};

/* An interprocess event's shared cell (double_ipc.h), reference counted:
 * held by the event and by each queued op that completes or waits on it,
 * so that destroying the event never pulls it from under a worker. */
struct fake_cell {
    atomic_int refs;
    dipc_cell *cell;
    /* An opened event's handle (it cannot export the cell again). */
    bool opened;
    unsigned char handle[DIPC_HANDLE_BYTES];
};

struct fake_op {
    struct fake_op *next;
    enum fake_op_kind kind;
    double ms;
    int gate; /* OP_GATE: a double_control gate */
    struct fake_mark *mark;
    dm_op mem; /* OP_MEMORY: a copy or fill */
    dk_launch *launch; /* OP_LAUNCH: a kernel launch */
    struct fake_cell *cell; /* OP_CELL_*: a reference, and the sequence */
    uint64_t seq;
};

struct CUctx_st {
    int device;
    int retain;
    struct CUstream_st *legacy; /* created on first use */
};

struct CUstream_st {
    struct CUstream_st *prev, *next; /* registry, under g_mu */
    struct CUctx_st *ctx;
    unsigned int flags;
    int priority;
    bool legacy;
    /* The queue, shared with the worker; the worker frees the stream once
     * it is dying and drained, so nothing else may touch a dying one. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct fake_op *head, *tail;
    long pending; /* queued ops, the running one included */
    bool dying;
    /* Stream capture, under g_mu: ops queued while capturing are recorded
     * here, not run (CU_STREAM_CAPTURE_STATUS_*). */
    int capture;
    int capture_mode;
    pthread_t capture_thread;
    struct fake_op *cap_head, *cap_tail;
    long cap_count;
    /* Cross-stream capture (fork/join): the stream that began the capture
     * this one takes part in (itself when it began it), whose list gets
     * the ops of every stream of the capture, in the order queued (a
     * valid order of the graph: a wait only sees earlier records).  A
     * stream forks in by waiting on an event recorded in the capture and
     * is joined back once the origin waits on an event recorded after
     * its last op (cap_tip counts them); cuStreamEndCapture refuses a
     * capture with a fork not joined back. */
    struct CUstream_st *cap_origin;
    unsigned long cap_id;
    long cap_tip;
    bool cap_joined;
};

/* A captured graph and its executable: the recorded ops, run again (as
 * copies) by every launch. */
struct CUgraph_st {
    struct fake_op *head;
    long count;
};

struct CUgraphExec_st {
    struct fake_op *head;
    long count;
    /* Completes when the last launch has run: each launch waits for the
     * one before, on whatever stream (launches of one executable never
     * overlap). */
    struct fake_mark *last;
};

struct CUevent_st {
    struct CUevent_st *prev, *next; /* registry, under g_mu */
    struct CUctx_st *ctx;
    unsigned int flags;
    struct fake_mark *last; /* latest record, NULL if never recorded */
    /* CU_EVENT_INTERPROCESS: the shared cell, which holds the state
     * instead of last (either process may record). */
    struct fake_cell *cell;
    /* Latest record made in a capture (a node of the graph, not run):
     * the capture's origin and id, the recording stream and its tip. */
    struct CUstream_st *cap_origin, *cap_stream;
    unsigned long cap_id;
    long cap_tip;
};

/* Ids of captures, so that an event names one even after it ended. */
static unsigned long g_capture_ids;

static struct {
    int devices;
    int driver_version;
    unsigned long long total_mem;
    char name[128];
    int cc_major, cc_minor;
    int sms;
    int prio_least, prio_greatest;
} cfg = {
    .devices = 2,
    .driver_version = 12080,
    .total_mem = 80ULL << 30,
    .name = "Fake CUDA Device",
    .cc_major = 9,
    .cc_minor = 0,
    .sms = 132,
    .prio_least = 0,
    .prio_greatest = -5,
};

/* Lock order: g_ctl's fault lock, g_mu, a stream's mu, g_mark_mu. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st g_ctx[FAKE_MAX_DEVICES];
static struct CUstream_st *g_streams;
/* Another library's reference to each primary context, and the end of
 * the work it queued there (fake_cuda_foreign_work). */
static bool g_foreign_retained[FAKE_MAX_DEVICES];
static struct fake_mark *g_foreign_end[FAKE_MAX_DEVICES];
static struct CUevent_st *g_events;
/* The same objects as sets, so that each lookup is O(1) in the number of
 * live objects (the lists serve walks by context). */
static dc_handles g_stream_set, g_event_set;

static pthread_mutex_t g_mark_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_mark_cv = PTHREAD_COND_INITIALIZER;


/* Device i (after CUDA_VISIBLE_DEVICES) is physical device g_phys[i]. */
static int g_phys[FAKE_MAX_DEVICES];

static atomic_int g_initialized;
static atomic_int g_poisoned;
static pthread_once_t g_pin_once = PTHREAD_ONCE_INIT;

static atomic_llong g_sync_blocked, g_sync_spun;

/* Counters and faults: the control layer the doubles share. */
enum {
    LIVE_STREAM, LIVE_EVENT, LIVE_GRAPH, LIVE_GRAPH_EXEC, LIVE_MODULE,
    LIVE_KINDS
};
static const char *const g_live_kinds[LIVE_KINDS] = {
    "stream", "event", "graph", "graph_exec", "module"};
static atomic_llong g_calls[FN_COUNT];
static atomic_llong g_live[LIVE_KINDS];
static void reset_sync_counters(void);
static long long live_contexts(const char *kind);
static void reset_detectors(void);
static dc_control g_ctl = {
    DC_CONTROL_INIT("fake libcuda", fake_fns, g_calls, g_live_kinds, g_live),
    .on_reset = reset_sync_counters,
    .live_extra = live_contexts,
    .reset_detectors = reset_detectors,
};

static _Thread_local struct CUctx_st *t_stack[FAKE_CTX_STACK];
static _Thread_local int t_depth;

/* Entry: counting, faults, initialisation ------------------------------ */

/* Top of every exported driver function: true when the caller must return
 * *rc at once. */
static bool
fake_enter(enum fake_fn fn, bool need_init, CUresult *rc)
{
    int code;

    if (dc_enter(&g_ctl, (int)fn, &code)) {
        *rc = (CUresult)code;
        return true;
    }
    if (need_init &&
        (atomic_load(&g_poisoned) || !atomic_load(&g_initialized))) {
        *rc = CUDA_ERROR_NOT_INITIALIZED;
        return true;
    }
    return false;
}

#define FAKE_ENTER(name, need_init)                           \
    do {                                                      \
        CUresult fake_enter_rc_;                              \
        if (fake_enter(FN_##name, (need_init), &fake_enter_rc_)) { \
            return fake_enter_rc_;                            \
        }                                                     \
    } while (0)

/* Time ---------------------------------------------------------------- */

static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void
sleep_ms(double ms)
{
    struct timespec ts;
    double whole;
    long long ns;

    /* An absolute deadline keeps the total right across early wake-ups. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ns = (long long)(ms * 1e6);
    whole = (double)(ns / 1000000000LL);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)(ns % 1000000000LL);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR) {
    }
}

/* Marks and operations ------------------------------------------------ */

static struct fake_mark *
mark_new(int refs)
{
    struct fake_mark *m = calloc(1, sizeof(*m));

    if (m != NULL) {
        atomic_init(&m->refs, refs);
        atomic_init(&m->done, 0);
    }
    return m;
}

static void
mark_unref(struct fake_mark *m)
{
    if (m != NULL && atomic_fetch_sub(&m->refs, 1) == 1) {
        free(m);
    }
}

static bool
mark_done(struct fake_mark *m)
{
    return atomic_load_explicit(&m->done, memory_order_acquire) != 0;
}

static void
mark_complete(struct fake_mark *m)
{
    pthread_mutex_lock(&g_mark_mu);
    m->stamp_ms = now_ms();
    atomic_store_explicit(&m->done, 1, memory_order_release);
    pthread_cond_broadcast(&g_mark_cv);
    pthread_mutex_unlock(&g_mark_mu);
}

static void
mark_wait_blocking(struct fake_mark *m)
{
    pthread_mutex_lock(&g_mark_mu);
    while (!mark_done(m)) {
        pthread_cond_wait(&g_mark_cv, &g_mark_mu);
    }
    pthread_mutex_unlock(&g_mark_mu);
}

static void
mark_wait_spinning(struct fake_mark *m)
{
    const struct timespec nap = {0, 50000};
    unsigned int spins = 0;

    /* Yield first, as a spinning host thread would; then nap, so that a
     * long wait does not starve the workers on a small test machine. */
    while (!mark_done(m)) {
        if (spins < 1000) {
            spins++;
            sched_yield();
        }
        else {
            nanosleep(&nap, NULL);
        }
    }
}

/* Takes over the caller's reference to mark. */
static struct fake_op *
op_new(enum fake_op_kind kind, double ms, struct fake_mark *mark)
{
    struct fake_op *op = calloc(1, sizeof(*op));

    if (op != NULL) {
        op->kind = kind;
        op->ms = ms;
        op->mark = mark;
    }
    return op;
}

static void
cell_unref(struct fake_cell *c)
{
    if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1) {
        dipc_cell_release(c->cell);
        free(c);
    }
}

static void
op_free(struct fake_op *op)
{
    if (op != NULL) {
        cell_unref(op->cell);
        mark_unref(op->mark);
        dm_op_release(&op->mem);
        dk_launch_free(op->launch);
        free(op);
    }
}

static void
op_run(struct fake_op *op)
{
    switch (op->kind) {
    case OP_SLEEP:
        sleep_ms(op->ms);
        break;
    case OP_GATE:
        dc_gate_wait(op->gate);
        break;
    case OP_RECORD:
        mark_complete(op->mark);
        break;
    case OP_WAIT:
        mark_wait_blocking(op->mark);
        break;
    case OP_MEMORY:
        dm_op_run(&op->mem);
        break;
    case OP_LAUNCH:
        dk_launch_run(op->launch, "cuLaunchKernel");
        break;
    case OP_CELL_RECORD:
        dipc_cell_complete(op->cell->cell, op->seq);
        break;
    case OP_CELL_WAIT:
        dipc_cell_wait(op->cell->cell, op->seq);
        break;
    }
}

/* Streams ------------------------------------------------------------- */

static void *
stream_worker(void *arg)
{
    struct CUstream_st *s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        struct fake_op *op;

        while (s->head == NULL && !s->dying) {
            pthread_cond_wait(&s->cv, &s->mu);
        }
        if (s->head == NULL) {
            break;
        }
        op = s->head;
        if (op->kind != OP_RECORD && op->kind != OP_CELL_RECORD) {
            /* The op stays queued while it runs, so queries see it. */
            pthread_mutex_unlock(&s->mu);
            op_run(op);
            pthread_mutex_lock(&s->mu);
        }
        s->head = op->next;
        if (s->head == NULL) {
            s->tail = NULL;
        }
        s->pending--;
        if (op->kind == OP_RECORD || op->kind == OP_CELL_RECORD) {
            /* In the same critical section as the dequeue: whoever sees
             * the record complete then sees the stream without it, and
             * the other way round. */
            op_run(op);
        }
        op_free(op);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
}

static long
stream_pending(struct CUstream_st *s)
{
    long n;

    pthread_mutex_lock(&s->mu);
    n = s->pending;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void
stream_push(struct CUstream_st *s, struct fake_op *op)
{
    pthread_mutex_lock(&s->mu);
    op->next = NULL;
    if (s->tail != NULL) {
        s->tail->next = op;
    }
    else {
        s->head = op;
    }
    s->tail = op;
    s->pending++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Under g_mu.  Makes waiter's next op wait for what source has queued. */
static CUresult
stream_depend(struct CUstream_st *waiter, struct CUstream_st *source)
{
    struct fake_mark *m;
    struct fake_op *record, *wait;

    if (stream_pending(source) == 0) {
        return CUDA_SUCCESS;
    }
    m = mark_new(2);
    if (m == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    record = op_new(OP_RECORD, 0, m);
    wait = op_new(OP_WAIT, 0, m);
    if (record == NULL || wait == NULL) {
        free(record);
        free(wait);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    stream_push(source, record);
    stream_push(waiter, wait);
    return CUDA_SUCCESS;
}

/* Under g_mu.  Queues op with the legacy default stream's implicit
 * synchronisation; takes over op, also on failure. */
static CUresult
stream_enqueue(struct CUstream_st *s, struct fake_op *op)
{
    CUresult rc = CUDA_SUCCESS;

    if (op == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE
        && (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED
            || s->cap_origin->capture
                   == CU_STREAM_CAPTURE_STATUS_INVALIDATED)) {
        op_free(op);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        /* Recorded into the capture's list, not run. */
        struct CUstream_st *o = s->cap_origin;

        op->next = NULL;
        if (o->cap_tail != NULL) {
            o->cap_tail->next = op;
        }
        else {
            o->cap_head = op;
        }
        o->cap_tail = op;
        o->cap_count++;
        s->cap_tip++;
        s->cap_joined = false;
        return CUDA_SUCCESS;
    }
    if (s->legacy) {
        for (struct CUstream_st *t = g_streams;
             t != NULL && rc == CUDA_SUCCESS; t = t->next) {
            if (t->ctx == s->ctx && !(t->flags & CU_STREAM_NON_BLOCKING)) {
                rc = stream_depend(s, t);
            }
        }
    }
    else if (!(s->flags & CU_STREAM_NON_BLOCKING) && s->ctx->legacy) {
        rc = stream_depend(s, s->ctx->legacy);
    }
    if (rc != CUDA_SUCCESS) {
        op_free(op);
        return rc;
    }
    stream_push(s, op);
    return CUDA_SUCCESS;
}

static void
op_list_free(struct fake_op *op)
{
    while (op != NULL) {
        struct fake_op *next = op->next;

        op_free(op);
        op = next;
    }
}

/* Under g_mu.  An operation the driver refuses on a capturing stream:
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is invalidated
 * (capture_end then fails).  CUDA_SUCCESS when s does not capture. */
static CUresult
capture_refuse(struct CUstream_st *s)
{
    if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
        return CUDA_SUCCESS;
    }
    s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    s->cap_origin->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* Under g_mu.  The capture begun on o ends: the streams forked into it
 * capture no more.  false when one of them was not joined back. */
static bool
capture_release(struct CUstream_st *o)
{
    bool joined = true;

    for (struct CUstream_st *t = g_streams; t != NULL; t = t->next) {
        if (t != o && t->capture != CU_STREAM_CAPTURE_STATUS_NONE
            && t->cap_origin == o) {
            joined = joined && t->cap_joined;
            t->capture = CU_STREAM_CAPTURE_STATUS_NONE;
            t->cap_origin = NULL;
        }
    }
    return joined;
}

/* Under g_mu.  The origin of the capture e was last recorded in, if that
 * capture is still active; else NULL. */
static struct CUstream_st *
event_capture(const struct CUevent_st *e)
{
    struct CUstream_st *o = e->cap_origin;

    if (o == NULL || !dc_handles_has(&g_stream_set, o) || o->cap_id != e->cap_id
        || o->cap_origin != o || o->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
        return NULL;
    }
    return o;
}

/* Under g_mu.  *out: a mark (one reference for the caller) that completes
 * when the work now queued on s has run. */
static CUresult
stream_fence(struct CUstream_st *s, bool implicit_sync,
             struct fake_mark **out)
{
    struct fake_mark *m = mark_new(2);
    struct fake_op *op;
    CUresult rc;

    if (m == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op = op_new(OP_RECORD, 0, m);
    if (op == NULL) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (implicit_sync) {
        rc = stream_enqueue(s, op);
        if (rc != CUDA_SUCCESS) {
            mark_unref(m); /* the op's went with the op */
            return rc;
        }
    }
    else {
        stream_push(s, op);
    }
    *out = m;
    return CUDA_SUCCESS;
}

static void
pin_library(void)
{
    Dl_info info;

    /* Detached workers run this library's code until the process ends;
     * a dlclose() that unmapped it would crash them. */
    if (dladdr((void *)&pin_library, &info) && info.dli_fname != NULL) {
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
}

/* Under g_mu. */
static CUresult
stream_create(struct CUctx_st *ctx, unsigned int flags, int priority,
              bool legacy, struct CUstream_st **out)
{
    struct CUstream_st *s = calloc(1, sizeof(*s));
    pthread_attr_t attr;
    pthread_t tid;
    sigset_t all, old;
    int err;

    if (s == NULL || (!legacy && !dc_handles_add(&g_stream_set, s))) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->legacy = legacy;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);

    /* Signals belong to the application's threads, not to ours. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    err = pthread_create(&tid, &attr, stream_worker, s);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        if (!legacy) {
            dc_handles_remove(&g_stream_set, s);
        }
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!legacy) {
        s->next = g_streams;
        if (g_streams != NULL) {
            g_streams->prev = s;
        }
        g_streams = s;
        dc_live_add(&g_ctl, LIVE_STREAM, 1);
    }
    *out = s;
    return CUDA_SUCCESS;
}

/* Under g_mu.  The handle dies now; the worker drains the queue and then
 * frees the stream, so s must not be touched afterwards. */
static void
stream_retire(struct CUstream_st *s)
{
    if (!s->legacy) {
        if (s->prev != NULL) {
            s->prev->next = s->next;
        }
        else {
            g_streams = s->next;
        }
        if (s->next != NULL) {
            s->next->prev = s->prev;
        }
        dc_handles_remove(&g_stream_set, s);
        dc_live_add(&g_ctl, LIVE_STREAM, -1);
    }
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE && s->cap_origin == s) {
        (void)capture_release(s);
    }
    op_list_free(s->cap_head);
    s->cap_head = s->cap_tail = NULL;
    s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    pthread_mutex_lock(&s->mu);
    s->dying = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Under g_mu.  Registry lookup: unknown handles are compared, never
 * dereferenced. */
static struct CUstream_st *
stream_lookup(CUstream h)
{
    return dc_handles_has(&g_stream_set, h) ? h : NULL;
}

static struct CUevent_st *event_lookup(CUevent h);

/* Under g_mu. */
static CUresult
legacy_stream(struct CUctx_st *ctx, struct CUstream_st **out)
{
    CUresult rc = CUDA_SUCCESS;

    if (ctx->legacy == NULL) {
        rc = stream_create(ctx, CU_STREAM_DEFAULT, 0, true, &ctx->legacy);
    }
    *out = ctx->legacy;
    return rc;
}

/* Contexts ------------------------------------------------------------ */

static struct CUctx_st *
current_ctx(void)
{
    return t_depth > 0 ? t_stack[t_depth - 1] : NULL;
}

/* Under g_mu. */
static struct CUctx_st *
live_current_ctx(void)
{
    struct CUctx_st *c = current_ctx();

    return c != NULL && c->retain > 0 ? c : NULL;
}

/* Under g_mu. */
static struct CUctx_st *
ctx_lookup_live(CUcontext h)
{
    for (int i = 0; i < cfg.devices; i++) {
        if (h == &g_ctx[i]) {
            return g_ctx[i].retain > 0 ? &g_ctx[i] : NULL;
        }
    }
    return NULL;
}

/* Under g_mu.  Handles 0 and 1 mean the current context's default
 * stream. */
static CUresult
stream_resolve(CUstream h, struct CUstream_st **out)
{
    struct CUctx_st *c;

    if (h == NULL || h == FAKE_LEGACY_STREAM) {
        c = live_current_ctx();
        if (c == NULL) {
            return CUDA_ERROR_INVALID_CONTEXT;
        }
        return legacy_stream(c, out);
    }
    *out = stream_lookup(h);
    return *out != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Under g_mu. */
static void
event_free(struct CUevent_st *e)
{
    if (e->prev != NULL) {
        e->prev->next = e->next;
    }
    else {
        g_events = e->next;
    }
    if (e->next != NULL) {
        e->next->prev = e->prev;
    }
    dc_handles_remove(&g_event_set, e);
    dc_live_add(&g_ctl, LIVE_EVENT, -1);
    mark_unref(e->last);
    cell_unref(e->cell);
    free(e);
}

/* Under g_mu. */
static void
ctx_teardown(struct CUctx_st *c)
{
    struct CUstream_st *s, *next_s;
    struct CUevent_st *e, *next_e;

    for (s = g_streams; s != NULL; s = next_s) {
        next_s = s->next;
        if (s->ctx == c) {
            stream_retire(s);
        }
    }
    if (c->legacy != NULL) {
        stream_retire(c->legacy);
        c->legacy = NULL;
    }
    for (e = g_events; e != NULL; e = next_e) {
        next_e = e->next;
        if (e->ctx == c) {
            event_free(e);
        }
    }
}

static bool
bad_device(CUdevice dev)
{
    return dev < 0 || dev >= cfg.devices;
}

/* Errors -------------------------------------------------------------- */

static const char *
error_name(CUresult code)
{
    /* No default: -Wswitch then flags a code added to cuda_api.h. */
    switch (code) {
#define FAKE_NAME_CASE(name, value) \
    case name:                      \
        return #name;
    ACC_CUDA_RESULTS(FAKE_NAME_CASE)
#undef FAKE_NAME_CASE
    }
    return NULL;
}

static const char *
error_string(CUresult code)
{
    switch (code) {
    case CUDA_SUCCESS:
        return "no error";
    case CUDA_ERROR_INVALID_VALUE:
        return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY:
        return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED:
        return "initialization error";
    case CUDA_ERROR_DEINITIALIZED:
        return "driver shutting down";
    case CUDA_ERROR_STUB_LIBRARY:
        return "CUDA driver is a stub library";
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
        return "CUDA-capable device(s) is/are busy or unavailable";
    case CUDA_ERROR_NO_DEVICE:
        return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE:
        return "invalid device ordinal";
    case CUDA_ERROR_INVALID_IMAGE:
        return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_CONTEXT:
        return "invalid device context";
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
        return "no kernel image is available for execution on the device";
    case CUDA_ERROR_INVALID_PTX:
        return "a PTX JIT compilation failed";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
        return "the provided PTX was compiled with an unsupported toolchain.";
    case CUDA_ERROR_INVALID_HANDLE:
        return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND:
        return "named symbol not found";
    case CUDA_ERROR_NOT_READY:
        return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS:
        return "an illegal memory access was encountered";
    case CUDA_ERROR_LAUNCH_FAILED:
        return "unspecified launch failure";
    case CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE:
        return "primary context active";
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
        return "context is destroyed";
    case CUDA_ERROR_NOT_SUPPORTED:
        return "operation not supported";
    case CUDA_ERROR_ILLEGAL_STATE:
        return "the operation cannot be performed in the present state";
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
        return "operation not permitted when stream is capturing";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
        return "operation failed due to a previous error during capture";
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
        return "the capture was not initiated in this stream";
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
        return "capture sequence contains a fork that was not joined to "
               "the primary stream";
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
        return "attempt to terminate a thread-local capture sequence from "
               "another thread";
    case CUDA_ERROR_UNKNOWN:
        return "unknown error";
    }
    return NULL;
}

/* Driver API: initialisation and errors ------------------------------- */

/* One entry of CUDA_VISIBLE_DEVICES as a physical device, -1 if invalid.
 * UUIDs are matched as text: "GPU-" and the hex digits of cuDeviceGetUuid
 * ("fa4ecda0-0000-4000-8000-00000000" and the 4-digit device). */
static int
visible_entry(const char *entry, size_t len, bool uuid, int physical)
{
    char text[64];
    int found = -1;
    char *end;
    long v;

    if (!uuid) {
        v = strtol(entry, &end, 10);
        return end == entry || v < 0 || v >= physical ? -1 : (int)v;
    }
    if (len <= 4 || strncmp(entry, "GPU-", 4) != 0) {
        return -1;
    }
    for (int p = 0; p < physical; p++) {
        snprintf(text, sizeof(text),
                 "GPU-fa4ecda0-0000-4000-8000-00000000%04x", p);
        if (len <= strlen(text) && strncmp(text, entry, len) == 0) {
            if (found >= 0) {
                return -1;
            }
            found = p;
        }
    }
    return found;
}

/* cfg.devices becomes the number of visible devices. */
static void
apply_visible_devices(void)
{
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    const char *entry = list;
    int physical = cfg.devices, n = 0;
    bool uuid = list != NULL && strncmp(list, "GPU-", 4) == 0;

    for (int i = 0; i < physical; i++) {
        g_phys[i] = i;
    }
    if (list == NULL) {
        return;
    }
    while (entry != NULL && n < physical) {
        const char *comma = strchr(entry, ',');
        size_t len = comma ? (size_t)(comma - entry) : strlen(entry);
        int p = visible_entry(entry, len, uuid, physical);

        if (p < 0) {
            break;
        }
        for (int i = 0; i < n; i++) {
            if (g_phys[i] == p) {
                cfg.devices = 0;
                return;
            }
        }
        g_phys[n++] = p;
        entry = comma ? comma + 1 : NULL;
    }
    cfg.devices = n;
}

/* cuInit's work, also done by another library (fake_cuda_foreign_work). */
static CUresult
init_driver(unsigned int Flags)
{
    static pthread_once_t visible_once = PTHREAD_ONCE_INIT;

    if (atomic_load(&g_poisoned)) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (Flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_once(&visible_once, apply_visible_devices);
    if (cfg.devices == 0) {
        return CUDA_ERROR_NO_DEVICE;
    }
    pthread_once(&g_pin_once, pin_library);
    atomic_store(&g_initialized, 1);
    return CUDA_SUCCESS;
}

CUresult
cuInit(unsigned int Flags)
{
    FAKE_ENTER(cuInit, false);
    return init_driver(Flags);
}

CUresult
cuDriverGetVersion(int *driverVersion)
{
    FAKE_ENTER(cuDriverGetVersion, false);
    if (driverVersion == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *driverVersion = cfg.driver_version;
    return CUDA_SUCCESS;
}

CUresult
cuGetErrorName(CUresult error, const char **pStr)
{
    FAKE_ENTER(cuGetErrorName, false);
    if (pStr == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = error_name(error);
    return *pStr != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult
cuGetErrorString(CUresult error, const char **pStr)
{
    FAKE_ENTER(cuGetErrorString, false);
    if (pStr == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = error_string(error);
    return *pStr != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Driver API: devices ------------------------------------------------- */

CUresult
cuDeviceGetCount(int *count)
{
    FAKE_ENTER(cuDeviceGetCount, true);
    if (count == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *count = cfg.devices;
    return CUDA_SUCCESS;
}

CUresult
cuDeviceGet(CUdevice *device, int ordinal)
{
    FAKE_ENTER(cuDeviceGet, true);
    if (device == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad_device(ordinal)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult
cuDeviceGetName(char *name, int len, CUdevice dev)
{
    FAKE_ENTER(cuDeviceGetName, true);
    if (name == NULL || len <= 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    snprintf(name, (size_t)len, "%s %d", cfg.name, g_phys[dev]);
    return CUDA_SUCCESS;
}

CUresult
cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    /* Version 4 layout, so that formatted UUIDs look like real ones. */
    unsigned char bytes[16] = {0xfa, 0x4e, 0xcd, 0xa0, 0x00, 0x00,
                               0x40, 0x00, 0x80, 0x00, 0x00, 0x00,
                               0x00, 0x00, 0x00, 0x00};

    FAKE_ENTER(cuDeviceGetUuid, true);
    if (uuid == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    bytes[14] = (unsigned char)(g_phys[dev] >> 8);
    bytes[15] = (unsigned char)g_phys[dev];
    memcpy(uuid->bytes, bytes, sizeof(uuid->bytes));
    return CUDA_SUCCESS;
}

/* Without MIG both variants report the same UUID. */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
    __attribute__((alias("cuDeviceGetUuid_v2")));

CUresult
cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    FAKE_ENTER(cuDeviceTotalMem, true);
    if (bytes == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *bytes = (size_t)cfg.total_mem;
    return CUDA_SUCCESS;
}

CUresult
cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    FAKE_ENTER(cuDeviceTotalMem, true);
    if (bytes == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *bytes = cfg.total_mem > UINT_MAX ? UINT_MAX
                                      : (unsigned int)cfg.total_mem;
    return CUDA_SUCCESS;
}

CUresult
cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    FAKE_ENTER(cuDeviceGetAttribute, true);
    if (pi == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = DK_MAX_THREADS;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
        *pi = DK_MAX_BLOCK_X;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        *pi = DK_MAX_BLOCK_Y;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        *pi = DK_MAX_BLOCK_Z;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        *pi = (int)DK_MAX_GRID_X;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
        *pi = (int)DK_MAX_GRID_Y;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        *pi = (int)DK_MAX_GRID_Z;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        *pi = (int)DK_MAX_SHARED;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        *pi = (int)DK_MAX_SHARED_OPTIN;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *pi = cfg.sms;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
        *pi = 0;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        *pi = 0x10 + g_phys[dev];
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        /* The slot in domain:bus:slot.function (hwloc builds sysfs paths
         * from it), not the product id; 0 on NVIDIA boards. */
        *pi = 0;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        *pi = 0;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *pi = cfg.cc_major;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *pi = cfg.cc_minor;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
        *pi = 1;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        /* One address space: cuMemcpyAsync and cuPointerGetAttributes
         * tell device from host memory by the address alone. */
        *pi = 1;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED:
        /* No cuMemPool family: peers allocate with cuMemAlloc. */
        *pi = 0;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Driver API: contexts ------------------------------------------------ */

CUresult
cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    FAKE_ENTER(cuDevicePrimaryCtxRetain, true);
    if (pctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    pthread_mutex_lock(&g_mu);
    g_ctx[dev].retain++;
    *pctx = &g_ctx[dev];
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

CUresult
cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    FAKE_ENTER(cuDevicePrimaryCtxGetState, true);
    if (flags == NULL || active == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bad_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    pthread_mutex_lock(&g_mu);
    *flags = 0;
    *active = g_ctx[dev].retain > 0;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

CUresult
cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = CUDA_SUCCESS;

    FAKE_ENTER(cuDevicePrimaryCtxRelease, true);
    if (bad_device(dev)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    pthread_mutex_lock(&g_mu);
    if (g_ctx[dev].retain == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    }
    else if (--g_ctx[dev].retain == 0) {
        ctx_teardown(&g_ctx[dev]);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
    __attribute__((alias("cuDevicePrimaryCtxRelease_v2")));

CUresult
cuCtxSetCurrent(CUcontext ctx)
{
    struct CUctx_st *c;

    FAKE_ENTER(cuCtxSetCurrent, true);
    if (ctx == NULL) {
        /* The documented equivalent of popping the top. */
        if (t_depth > 0) {
            t_depth--;
        }
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&g_mu);
    c = ctx_lookup_live(ctx);
    pthread_mutex_unlock(&g_mu);
    if (c == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (t_depth == 0) {
        t_depth = 1;
    }
    t_stack[t_depth - 1] = c;
    return CUDA_SUCCESS;
}

CUresult
cuCtxGetCurrent(CUcontext *pctx)
{
    FAKE_ENTER(cuCtxGetCurrent, true);
    if (pctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pctx = current_ctx();
    return CUDA_SUCCESS;
}

CUresult
cuCtxPushCurrent_v2(CUcontext ctx)
{
    struct CUctx_st *c;

    FAKE_ENTER(cuCtxPushCurrent, true);
    if (ctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    c = ctx_lookup_live(ctx);
    pthread_mutex_unlock(&g_mu);
    if (c == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (t_depth == FAKE_CTX_STACK) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    t_stack[t_depth++] = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx)
    __attribute__((alias("cuCtxPushCurrent_v2")));

CUresult
cuCtxPopCurrent_v2(CUcontext *pctx)
{
    FAKE_ENTER(cuCtxPopCurrent, true);
    if (t_depth == 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    t_depth--;
    if (pctx != NULL) {
        *pctx = t_stack[t_depth];
    }
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *pctx)
    __attribute__((alias("cuCtxPopCurrent_v2")));

CUresult
cuCtxGetDevice(CUdevice *device)
{
    struct CUctx_st *c;

    FAKE_ENTER(cuCtxGetDevice, true);
    if (device == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    c = live_current_ctx();
    pthread_mutex_unlock(&g_mu);
    if (c == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *device = c->device;
    return CUDA_SUCCESS;
}

CUresult
cuCtxSynchronize(void)
{
    struct fake_mark **marks = NULL;
    struct CUctx_st *c;
    size_t n = 0, cap = 1;
    CUresult rc = CUDA_SUCCESS;

    FAKE_ENTER(cuCtxSynchronize, true);
    pthread_mutex_lock(&g_mu);
    c = live_current_ctx();
    if (c == NULL) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    for (struct CUstream_st *s = g_streams; s != NULL; s = s->next) {
        cap += s->ctx == c;
        if (s->ctx == c && s->capture != CU_STREAM_CAPTURE_STATUS_NONE
            && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
            rc = capture_refuse(s);
        }
    }
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_unlock(&g_mu);
        return rc;
    }
    marks = calloc(cap, sizeof(*marks));
    if (marks == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (struct CUstream_st *s = g_streams;
         s != NULL && rc == CUDA_SUCCESS; s = s->next) {
        if (s->ctx == c) {
            rc = stream_fence(s, false, &marks[n]);
            n += rc == CUDA_SUCCESS;
        }
    }
    if (rc == CUDA_SUCCESS && c->legacy != NULL) {
        rc = stream_fence(c->legacy, false, &marks[n]);
        n += rc == CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_mu);
    for (size_t i = 0; i < n; i++) {
        if (rc == CUDA_SUCCESS) {
            mark_wait_blocking(marks[i]);
        }
        mark_unref(marks[i]);
    }
    free(marks);
    return rc;
}

CUresult
cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    FAKE_ENTER(cuCtxGetStreamPriorityRange, true);
    if (leastPriority != NULL) {
        *leastPriority = cfg.prio_least;
    }
    if (greatestPriority != NULL) {
        *greatestPriority = cfg.prio_greatest;
    }
    return CUDA_SUCCESS;
}

/* Driver API: streams ------------------------------------------------- */

CUresult
cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                           int priority)
{
    struct CUstream_st *s;
    struct CUctx_st *c;
    CUresult rc;

    FAKE_ENTER(cuStreamCreateWithPriority, true);
    if (phStream == NULL ||
        (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (priority < cfg.prio_greatest) {
        priority = cfg.prio_greatest;
    }
    if (priority > cfg.prio_least) {
        priority = cfg.prio_least;
    }
    pthread_mutex_lock(&g_mu);
    c = live_current_ctx();
    if (c == NULL) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    }
    else {
        rc = stream_create(c, flags, priority, false, &s);
    }
    if (rc == CUDA_SUCCESS) {
        *phStream = s;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuStreamQuery(CUstream hStream)
{
    struct CUstream_st *s;
    CUresult rc;

    FAKE_ENTER(cuStreamQuery, true);
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(hStream, &s);
    if (rc == CUDA_SUCCESS) {
        rc = capture_refuse(s);
    }
    if (rc == CUDA_SUCCESS && stream_pending(s) > 0) {
        rc = CUDA_ERROR_NOT_READY;
    }
    if (rc == CUDA_SUCCESS && s->legacy) {
        /* Idle only if an op queued now would run at once. */
        for (struct CUstream_st *t = g_streams; t != NULL; t = t->next) {
            if (t->ctx == s->ctx && !(t->flags & CU_STREAM_NON_BLOCKING) &&
                stream_pending(t) > 0) {
                rc = CUDA_ERROR_NOT_READY;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuStreamSynchronize(CUstream hStream)
{
    struct fake_mark *m = NULL;
    struct CUstream_st *s;
    CUresult rc;

    FAKE_ENTER(cuStreamSynchronize, true);
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(hStream, &s);
    if (rc == CUDA_SUCCESS) {
        rc = capture_refuse(s);
    }
    if (rc == CUDA_SUCCESS) {
        rc = stream_fence(s, s->legacy, &m);
    }
    pthread_mutex_unlock(&g_mu);
    if (rc == CUDA_SUCCESS) {
        mark_wait_blocking(m);
        mark_unref(m);
    }
    return rc;
}

CUresult
cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    struct CUstream_st *s;
    struct CUevent_st *e = NULL;
    CUresult rc;

    FAKE_ENTER(cuStreamWaitEvent, true);
    if (Flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(hStream, &s);
    if (rc == CUDA_SUCCESS) {
        e = event_lookup(hEvent);
        if (e == NULL) {
            rc = CUDA_ERROR_INVALID_HANDLE;
        }
    }
    if (rc == CUDA_SUCCESS) {
        struct CUstream_st *o = event_capture(e);

        if (o != NULL && s->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
            /* Fork: s joins the capture; its later ops are recorded. */
            s->capture = o->capture;
            s->capture_mode = o->capture_mode;
            s->capture_thread = o->capture_thread;
            s->cap_origin = o;
            s->cap_tip = 0;
            s->cap_joined = false;
            pthread_mutex_unlock(&g_mu);
            return CUDA_SUCCESS;
        }
        if (o != NULL && s->cap_origin == o) {
            /* A dependency inside the capture: the list keeps it.  The
             * origin waiting on a fork's last op joins that fork. */
            struct CUstream_st *f = e->cap_stream;

            if (s == o && f != o && dc_handles_has(&g_stream_set, f)
                && f->cap_origin == o && f->cap_tip == e->cap_tip) {
                f->cap_joined = true;
            }
            pthread_mutex_unlock(&g_mu);
            return CUDA_SUCCESS;
        }
        /* A capturing stream cannot wait on work outside its capture. */
        rc = capture_refuse(s);
    }
    /* Events of other contexts are fine: cross-device waits are legal.
     * A record that completed, or none at all, leaves nothing to wait
     * for.  An interprocess event's is its cell's latest sequence. */
    if (rc == CUDA_SUCCESS && e->cell != NULL) {
        uint64_t seq = dipc_cell_current(e->cell->cell);

        if (!dipc_cell_reached(e->cell->cell, seq)) {
            struct fake_op *op = op_new(OP_CELL_WAIT, 0, NULL);

            if (op != NULL) {
                atomic_fetch_add(&e->cell->refs, 1);
                op->cell = e->cell;
                op->seq = seq;
            }
            rc = stream_enqueue(s, op);
        }
    }
    else if (rc == CUDA_SUCCESS && e->last != NULL && !mark_done(e->last)) {
        struct fake_op *op = op_new(OP_WAIT, 0, e->last);

        if (op != NULL) {
            atomic_fetch_add(&e->last->refs, 1);
        }
        rc = stream_enqueue(s, op);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuStreamDestroy_v2(CUstream hStream)
{
    struct CUstream_st *s;

    FAKE_ENTER(cuStreamDestroy, true);
    pthread_mutex_lock(&g_mu);
    s = stream_lookup(hStream);
    if (s != NULL) {
        stream_retire(s);
    }
    pthread_mutex_unlock(&g_mu);
    return s != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuStreamDestroy(CUstream hStream)
    __attribute__((alias("cuStreamDestroy_v2")));

/* The context of a stream; the special handles (0, CU_STREAM_LEGACY,
 * CU_STREAM_PER_THREAD) mean the calling thread's current context. */
static CUresult
stream_ctx(CUstream hStream, CUcontext *pctx)
{
    struct CUstream_st *s;
    struct CUctx_st *c;
    CUresult rc;

    if (pctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    if ((uintptr_t)hStream <= 2) {
        c = live_current_ctx();
        rc = c != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    }
    else {
        s = stream_lookup(hStream);
        c = s != NULL ? s->ctx : NULL;
        rc = s != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc == CUDA_SUCCESS) {
        *pctx = c;
    }
    return rc;
}

CUresult
cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    FAKE_ENTER(cuStreamGetCtx, true);
    return stream_ctx(hStream, pctx);
}

CUresult
cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    CUresult rc;

    FAKE_ENTER(cuStreamGetCtx, true);
    if (pGreenCtx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc = stream_ctx(hStream, pCtx);
    if (rc == CUDA_SUCCESS) {
        *pGreenCtx = NULL; /* no green contexts */
    }
    return rc;
}

/* Driver API: events -------------------------------------------------- */

/* Under g_mu. */
static struct CUevent_st *
event_lookup(CUevent h)
{
    return dc_handles_has(&g_event_set, h) ? h : NULL;
}

/* Under g_mu.  A new event of the current context; takes over cell (an
 * interprocess event's) only on success. */
static CUresult
event_register(unsigned int flags, struct fake_cell *cell, CUevent *out)
{
    struct CUctx_st *c = live_current_ctx();
    struct CUevent_st *e;

    if (c == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL || !dc_handles_add(&g_event_set, e)) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->ctx = c;
    e->flags = flags;
    e->cell = cell;
    e->next = g_events;
    if (g_events != NULL) {
        g_events->prev = e;
    }
    g_events = e;
    dc_live_add(&g_ctl, LIVE_EVENT, 1);
    *out = e;
    return CUDA_SUCCESS;
}

CUresult
cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    const unsigned int known = CU_EVENT_BLOCKING_SYNC |
                               CU_EVENT_DISABLE_TIMING |
                               CU_EVENT_INTERPROCESS;
    struct fake_cell *cell = NULL;
    CUresult rc;

    FAKE_ENTER(cuEventCreate, true);
    if (phEvent == NULL || (Flags & ~known) != 0 ||
        ((Flags & CU_EVENT_INTERPROCESS) &&
         !(Flags & CU_EVENT_DISABLE_TIMING))) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (Flags & CU_EVENT_INTERPROCESS) {
        cell = calloc(1, sizeof(*cell));
        if (cell == NULL || (cell->cell = dipc_cell_create()) == NULL) {
            free(cell);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        atomic_init(&cell->refs, 1);
    }
    pthread_mutex_lock(&g_mu);
    rc = event_register(Flags, cell, phEvent);
    pthread_mutex_unlock(&g_mu);
    if (rc != CUDA_SUCCESS) {
        cell_unref(cell);
    }
    return rc;
}

/* Under g_mu.  An interprocess event's record on s: the next sequence of
 * its cell, completed when s reaches it. */
static CUresult
cell_record(struct fake_cell *cell, struct CUstream_st *s)
{
    struct fake_op *op = op_new(OP_CELL_RECORD, 0, NULL);
    uint64_t seq;
    CUresult rc;

    if (op == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&cell->refs, 1);
    op->cell = cell;
    op->seq = seq = dipc_cell_record(cell->cell);
    rc = stream_enqueue(s, op);
    if (rc != CUDA_SUCCESS) {
        /* Out of memory queueing the implicit synchronisation: the
         * sequence is taken (the other process may have seen it), so it
         * completes now rather than never. */
        dipc_cell_complete(cell->cell, seq);
    }
    return rc;
}

CUresult
cuEventRecord(CUevent hEvent, CUstream hStream)
{
    struct fake_mark *m;
    struct fake_op *op;
    struct CUevent_st *e;
    struct CUstream_st *s;
    CUresult rc;

    FAKE_ENTER(cuEventRecord, true);
    pthread_mutex_lock(&g_mu);
    e = event_lookup(hEvent);
    rc = e != NULL ? stream_resolve(hStream, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS && s->ctx != e->ctx) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    if (rc == CUDA_SUCCESS && e->cell != NULL) {
        /* Not a graph node: the other process could not follow it. */
        rc = capture_refuse(s);
        if (rc == CUDA_SUCCESS) {
            rc = cell_record(e->cell, s);
        }
        pthread_mutex_unlock(&g_mu);
        return rc;
    }
    if (rc == CUDA_SUCCESS && s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        /* A node of the capture: later waits on e depend on it. */
        if (s->cap_origin->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        }
        else {
            e->cap_origin = s->cap_origin;
            e->cap_id = s->cap_origin->cap_id;
            e->cap_stream = s;
            e->cap_tip = s->cap_tip;
        }
        pthread_mutex_unlock(&g_mu);
        return rc;
    }
    if (rc == CUDA_SUCCESS) {
        e->cap_origin = e->cap_stream = NULL;
        /* One reference for the queued op, one for the event. */
        m = mark_new(2);
        op = m != NULL ? op_new(OP_RECORD, 0, m) : NULL;
        if (op == NULL) {
            free(m);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        else if ((rc = stream_enqueue(s, op)) != CUDA_SUCCESS) {
            mark_unref(m); /* the op's went with the op */
        }
        else {
            /* The new record supersedes the old one for every later
             * query, wait and synchronize. */
            mark_unref(e->last);
            e->last = m;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuEventQuery(CUevent hEvent)
{
    struct CUevent_st *e;
    CUresult rc = CUDA_SUCCESS;

    FAKE_ENTER(cuEventQuery, true);
    pthread_mutex_lock(&g_mu);
    e = event_lookup(hEvent);
    if (e == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    else if (e->cell != NULL) {
        rc = dipc_cell_query(e->cell->cell) ? CUDA_SUCCESS
                                            : CUDA_ERROR_NOT_READY;
    }
    else if (e->last != NULL && !mark_done(e->last)) {
        rc = CUDA_ERROR_NOT_READY;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* The host waits for an interprocess event's seq, as for marks: on the
 * futex (BLOCKING_SYNC) or spinning. */
static void
cell_wait(struct fake_cell *cell, uint64_t seq, bool blocking)
{
    const struct timespec nap = {0, 50000};
    unsigned int spins = 0;

    if (seq == 0) {
        return; /* never recorded */
    }
    if (blocking) {
        atomic_fetch_add(&g_sync_blocked, 1);
        dipc_cell_wait(cell->cell, seq);
        return;
    }
    atomic_fetch_add(&g_sync_spun, 1);
    while (!dipc_cell_reached(cell->cell, seq)) {
        if (spins < 1000) {
            spins++;
            sched_yield();
        }
        else {
            nanosleep(&nap, NULL);
        }
    }
}

CUresult
cuEventSynchronize(CUevent hEvent)
{
    struct fake_mark *m = NULL;
    struct CUevent_st *e;
    bool blocking = false;

    FAKE_ENTER(cuEventSynchronize, true);
    pthread_mutex_lock(&g_mu);
    e = event_lookup(hEvent);
    if (e != NULL && e->cell != NULL) {
        struct fake_cell *cell = e->cell;
        uint64_t seq = dipc_cell_current(cell->cell);

        atomic_fetch_add(&cell->refs, 1);
        blocking = (e->flags & CU_EVENT_BLOCKING_SYNC) != 0;
        pthread_mutex_unlock(&g_mu);
        cell_wait(cell, seq, blocking);
        cell_unref(cell);
        return CUDA_SUCCESS;
    }
    if (e != NULL && e->last != NULL) {
        m = e->last;
        atomic_fetch_add(&m->refs, 1);
        blocking = (e->flags & CU_EVENT_BLOCKING_SYNC) != 0;
    }
    pthread_mutex_unlock(&g_mu);
    if (e == NULL) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (m == NULL) {
        return CUDA_SUCCESS;
    }
    if (blocking) {
        atomic_fetch_add(&g_sync_blocked, 1);
        mark_wait_blocking(m);
    }
    else {
        atomic_fetch_add(&g_sync_spun, 1);
        mark_wait_spinning(m);
    }
    mark_unref(m);
    return CUDA_SUCCESS;
}

CUresult
cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    struct CUevent_st *start, *end;
    CUresult rc = CUDA_SUCCESS;

    FAKE_ENTER(cuEventElapsedTime, true);
    if (pMilliseconds == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    start = event_lookup(hStart);
    end = event_lookup(hEnd);
    if (start == NULL || end == NULL ||
        ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) ||
        start->last == NULL || end->last == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    else if (!mark_done(start->last) || !mark_done(end->last)) {
        rc = CUDA_ERROR_NOT_READY;
    }
    else {
        *pMilliseconds =
            (float)(end->last->stamp_ms - start->last->stamp_ms);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* CUDA 12.8 changed only the documented rounding. */
CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart,
                               CUevent hEnd)
    __attribute__((alias("cuEventElapsedTime")));

CUresult
cuEventDestroy_v2(CUevent hEvent)
{
    struct CUevent_st *e;

    FAKE_ENTER(cuEventDestroy, true);
    pthread_mutex_lock(&g_mu);
    e = event_lookup(hEvent);
    if (e != NULL) {
        event_free(e);
    }
    pthread_mutex_unlock(&g_mu);
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventDestroy(CUevent hEvent)
    __attribute__((alias("cuEventDestroy_v2")));

/* Driver API: device and page-locked memory ---------------------------- */

/* The memory itself is double_memory.c's (shared with the Level Zero
 * double): guard bytes, addresses never reused, bad accesses reported. */

/* The device of the calling thread's live current context, or -1. */
static int
current_device(void)
{
    struct CUctx_st *c;

    pthread_mutex_lock(&g_mu);
    c = live_current_ctx();
    pthread_mutex_unlock(&g_mu);
    return c != NULL ? c->device : -1;
}

static CUresult
mem_result(enum dm_result r)
{
    return r == DM_OK ? CUDA_SUCCESS
           : r == DM_OUT_OF_MEMORY ? CUDA_ERROR_OUT_OF_MEMORY
                                   : CUDA_ERROR_INVALID_VALUE;
}

CUresult
cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    unsigned long long addr;
    CUresult rc;
    int dev;

    FAKE_ENTER(cuMemAlloc, true);
    if (dptr == NULL || bytesize == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    dev = current_device();
    if (dev < 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    rc = mem_result(dm_alloc(dev, bytesize, false, &addr));
    if (rc == CUDA_SUCCESS) {
        *dptr = addr;
    }
    return rc;
}

CUresult
cuMemFree_v2(CUdeviceptr dptr)
{
    /* No implicit synchronisation (real drivers wait for the device): a
     * free that comes before the queued work that uses the memory is
     * then caught as a use after free when that work runs. */
    FAKE_ENTER(cuMemFree, true);
    return mem_result(dm_free("cuMemFree", dptr, false));
}

/* Driver API: interprocess memory and events ------------------------- */

/* Device memory lives in a memfd per allocation and event state in a
 * shared cell (double_ipc.h); the handles are double_ipc.h's, whose
 * refusals take the driver's codes: */
static CUresult
ipc_result(enum dipc_result r)
{
    switch (r) {
    case DIPC_OK:
        return CUDA_SUCCESS;
    case DIPC_OWN_PROCESS:
        /* "invalid device context": opened in the exporting process. */
        return CUDA_ERROR_INVALID_CONTEXT;
    case DIPC_NO_MEMORY:
        return CUDA_ERROR_OUT_OF_MEMORY;
    case DIPC_BAD_HANDLE:
    case DIPC_GONE:
    case DIPC_NOT_BASE:
        break;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult
cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    unsigned char h[DIPC_HANDLE_BYTES];
    CUresult rc;

    FAKE_ENTER(cuIpcGetMemHandle, true);
    if (pHandle == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (current_device() < 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    /* The base of a live cuMemAlloc allocation of this process only:
     * freed memory, an interior pointer or an opened mapping is
     * INVALID_VALUE. */
    rc = ipc_result(dm_ipc_export(dptr, h, NULL));
    if (rc == CUDA_SUCCESS) {
        memcpy(pHandle->reserved, h, sizeof(h));
    }
    return rc;
}

CUresult
cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                      unsigned int Flags)
{
    unsigned char h[DIPC_HANDLE_BYTES];
    unsigned long long addr;
    CUresult rc;
    int dev;

    FAKE_ENTER(cuIpcOpenMemHandle, true);
    if (pdptr == NULL
        || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    dev = current_device();
    if (dev < 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    memcpy(h, handle.reserved, sizeof(h));
    rc = ipc_result(dm_ipc_open(dev, h, -1, &addr));
    if (rc == CUDA_SUCCESS) {
        *pdptr = addr;
    }
    return rc;
}

/* CUDA 4.1's symbol: the same function. */
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                            unsigned int Flags)
    __attribute__((alias("cuIpcOpenMemHandle_v2")));

CUresult
cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    FAKE_ENTER(cuIpcCloseMemHandle, true);
    /* The driver refuses without a context (UCX pushes one first). */
    if (current_device() < 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    return dm_ipc_close("cuIpcCloseMemHandle", dptr)
               ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult
cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    unsigned char h[DIPC_HANDLE_BYTES];
    struct CUevent_st *e;
    CUresult rc = CUDA_SUCCESS;

    FAKE_ENTER(cuIpcGetEventHandle, true);
    if (pHandle == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    e = event_lookup(event);
    /* An event made without CU_EVENT_INTERPROCESS: invalid resource
     * handle, as the runtime's tests expect. */
    if (e == NULL || e->cell == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    else if (e->cell->opened) {
        memcpy(h, e->cell->handle, sizeof(h));
    }
    else if (!dipc_cell_export(e->cell->cell, h, NULL)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc == CUDA_SUCCESS) {
        memcpy(pHandle->reserved, h, sizeof(h));
    }
    return rc;
}

CUresult
cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    struct fake_cell *cell;
    enum dipc_result r;
    CUresult rc;

    FAKE_ENTER(cuIpcOpenEventHandle, true);
    if (phEvent == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (current_device() < 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    cell = calloc(1, sizeof(*cell));
    if (cell == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(cell->handle, handle.reserved, sizeof(cell->handle));
    r = dipc_cell_open(cell->handle, -1, &cell->cell);
    if (r != DIPC_OK) {
        free(cell);
        return ipc_result(r);
    }
    atomic_init(&cell->refs, 1);
    cell->opened = true;
    /* Behaves as a local event made with DISABLE_TIMING. */
    pthread_mutex_lock(&g_mu);
    rc = event_register(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, cell,
                        phEvent);
    pthread_mutex_unlock(&g_mu);
    if (rc != CUDA_SUCCESS) {
        cell_unref(cell);
    }
    return rc;
}

/* Page-locked memory for the current context's device. */
static CUresult
host_alloc(void **pp, size_t bytesize)
{
    unsigned long long addr;
    CUresult rc;
    int dev = current_device();

    if (dev < 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    rc = mem_result(dm_alloc(dev, bytesize, true, &addr));
    if (rc == CUDA_SUCCESS) {
        *pp = (void *)(uintptr_t)addr;
    }
    return rc;
}

CUresult
cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    FAKE_ENTER(cuMemHostAlloc, true);
    if (pp == NULL || bytesize == 0 || (Flags & ~0xFu) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return host_alloc(pp, bytesize);
}

CUresult
cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    /* cuMemHostAlloc without flags, counted and faulted on its own. */
    FAKE_ENTER(cuMemAllocHost, true);
    if (pp == NULL || bytesize == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return host_alloc(pp, bytesize);
}

CUresult
cuMemFreeHost(void *p)
{
    FAKE_ENTER(cuMemFreeHost, true);
    return mem_result(dm_free("cuMemFreeHost", (uintptr_t)p, true));
}

/* The device of a stream handle (0 and 1: the current context's), or -1
 * with *rc set. */
static int
stream_device(CUstream hStream, CUresult *rc)
{
    struct CUstream_st *s;
    int device = -1;

    pthread_mutex_lock(&g_mu);
    *rc = stream_resolve(hStream, &s);
    if (*rc == CUDA_SUCCESS) {
        device = s->ctx->device;
    }
    pthread_mutex_unlock(&g_mu);
    return device;
}

/* Queues a copy or fill on hStream (taking over op); with wait, returns
 * once it ran (a copy to pageable memory, as the real driver does). */
static CUresult
mem_enqueue(CUstream hStream, const dm_op *mem, bool wait)
{
    struct fake_mark *m = NULL;
    struct CUstream_st *s;
    struct fake_op *op;
    CUresult rc;

    if (mem->bytes == 0) {
        return CUDA_SUCCESS;
    }
    op = op_new(OP_MEMORY, 0, NULL);
    if (op == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->mem = *mem;
    if (dm_op_stage(&op->mem) != DM_OK) {
        op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(hStream, &s);
    if (rc == CUDA_SUCCESS
        && (wait || mem->src.kind == DM_HOST || mem->dst.kind == DM_HOST)) {
        /* Pageable memory cannot be captured. */
        rc = capture_refuse(s);
        if (rc != CUDA_SUCCESS) {
            op_free(op);
        }
    }
    else if (rc != CUDA_SUCCESS) {
        op_free(op);
    }
    if (rc == CUDA_SUCCESS) {
        rc = stream_enqueue(s, op);
        if (rc == CUDA_SUCCESS && wait) {
            rc = stream_fence(s, false, &m);
        }
    }
    pthread_mutex_unlock(&g_mu);
    if (m != NULL) {
        mark_wait_blocking(m);
        mark_unref(m);
    }
    return rc;
}

/* A copy: each device side checked against `device` (-1: any). */
static CUresult
copy_enqueue(const char *api, CUstream hStream, dm_side dst, dm_side src,
             size_t bytes, int dst_device, int src_device)
{
    dm_op op = {.api = api, .dst = dst, .src = src, .bytes = bytes};

    if (bytes > 0
        && ((dst.kind == DM_DEVICE
             && !dm_check_device(api, dst.addr, bytes, dst_device))
            || (src.kind == DM_DEVICE
                && !dm_check_device(api, src.addr, bytes, src_device)))) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* To pageable memory the call returns once the copy is done. */
    return mem_enqueue(hStream, &op, dst.kind == DM_HOST);
}

CUresult
cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                     size_t ByteCount, CUstream hStream)
{
    dm_side dst = {DM_DEVICE, dstDevice};
    CUresult rc;
    int device;

    FAKE_ENTER(cuMemcpyHtoDAsync, true);
    if (srcHost == NULL && ByteCount > 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    device = stream_device(hStream, &rc);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    return copy_enqueue("cuMemcpyHtoDAsync", hStream, dst,
                        dm_host_side(srcHost, ByteCount), ByteCount, device,
                        -1);
}

CUresult
cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
                     size_t ByteCount, CUstream hStream)
{
    dm_side src = {DM_DEVICE, srcDevice};
    CUresult rc;
    int device;

    FAKE_ENTER(cuMemcpyDtoHAsync, true);
    if (dstHost == NULL && ByteCount > 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    device = stream_device(hStream, &rc);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    return copy_enqueue("cuMemcpyDtoHAsync", hStream,
                        dm_host_side(dstHost, ByteCount), src, ByteCount, -1,
                        device);
}

CUresult
cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                     size_t ByteCount, CUstream hStream)
{
    dm_side dst = {DM_DEVICE, dstDevice}, src = {DM_DEVICE, srcDevice};
    CUresult rc;
    int device;

    FAKE_ENTER(cuMemcpyDtoDAsync, true);
    device = stream_device(hStream, &rc);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    /* Both on the stream's device: between devices is cuMemcpyPeerAsync. */
    return copy_enqueue("cuMemcpyDtoDAsync", hStream, dst, src, ByteCount,
                        device, device);
}

CUresult
cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                  CUdeviceptr srcDevice, CUcontext srcContext,
                  size_t ByteCount, CUstream hStream)
{
    dm_side dst = {DM_DEVICE, dstDevice}, src = {DM_DEVICE, srcDevice};
    struct CUctx_st *dc, *sc;
    CUresult rc;

    FAKE_ENTER(cuMemcpyPeerAsync, true);
    pthread_mutex_lock(&g_mu);
    dc = ctx_lookup_live(dstContext);
    sc = ctx_lookup_live(srcContext);
    pthread_mutex_unlock(&g_mu);
    if (dc == NULL || sc == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    (void)stream_device(hStream, &rc);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    return copy_enqueue("cuMemcpyPeerAsync", hStream, dst, src, ByteCount,
                        dc->device, sc->device);
}

CUresult
cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                CUstream hStream)
{
    dm_op op = {.api = "cuMemsetD8Async", .fill = true,
                .dst = {DM_DEVICE, dstDevice}, .bytes = N, .value = uc};
    CUresult rc;
    int device;

    FAKE_ENTER(cuMemsetD8Async, true);
    device = stream_device(hStream, &rc);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    if (N > 0 && !dm_check_device("cuMemsetD8Async", dstDevice, N, device)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return mem_enqueue(hStream, &op, false);
}

CUresult
cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
              CUstream hStream)
{
    dm_side d, s;
    CUresult rc;

    FAKE_ENTER(cuMemcpyAsync, true);
    if ((dst == 0 || src == 0) && ByteCount > 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    (void)stream_device(hStream, &rc);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    /* Unified addressing: each side is what its address says, device
     * memory of any device (between two, a peer copy). */
    d = dm_classify((const void *)(uintptr_t)dst, ByteCount);
    s = dm_classify((const void *)(uintptr_t)src, ByteCount);
    return copy_enqueue("cuMemcpyAsync", hStream, d, s, ByteCount, -1, -1);
}

/* Graphs -------------------------------------------------------------- */

static struct fake_graph_handles {
    dc_handles graphs, execs;
} g_graph_set;

CUresult
cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    struct CUstream_st *s;
    CUresult rc;

    FAKE_ENTER(cuStreamBeginCapture, true);
    if ((int)mode < CU_STREAM_CAPTURE_MODE_GLOBAL
        || mode > CU_STREAM_CAPTURE_MODE_RELAXED) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(hStream, &s);
    if (rc == CUDA_SUCCESS && s->legacy) {
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    else if (rc == CUDA_SUCCESS
             && s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    }
    if (rc == CUDA_SUCCESS) {
        s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->capture_mode = mode;
        s->capture_thread = pthread_self();
        s->cap_head = s->cap_tail = NULL;
        s->cap_count = 0;
        s->cap_origin = s;
        s->cap_id = ++g_capture_ids;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    struct CUstream_st *s;
    struct CUgraph_st *g = NULL;
    CUresult rc;

    FAKE_ENTER(cuStreamEndCapture, true);
    if (phGraph == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(hStream, &s);
    if (rc == CUDA_SUCCESS && (s->capture == CU_STREAM_CAPTURE_STATUS_NONE
                               || s->cap_origin != s)) {
        /* Not capturing, or forked into another stream's capture. */
        rc = s->capture == CU_STREAM_CAPTURE_STATUS_NONE
                 ? CUDA_ERROR_ILLEGAL_STATE
                 : CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    }
    else if (rc == CUDA_SUCCESS
             && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED
             && !pthread_equal(s->capture_thread, pthread_self())) {
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    else if (rc == CUDA_SUCCESS) {
        bool joined = capture_release(s);

        if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        }
        else if (!joined) {
            rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
        }
        else if ((g = calloc(1, sizeof(*g))) == NULL
                 || !dc_handles_add(&g_graph_set.graphs, g)) {
            free(g);
            g = NULL;
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (g != NULL) {
            g->head = s->cap_head;
            g->count = s->cap_count;
            dc_live_add(&g_ctl, LIVE_GRAPH, 1);
        }
        else {
            op_list_free(s->cap_head);
        }
        s->cap_head = s->cap_tail = NULL;
        s->cap_count = 0;
        s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    }
    pthread_mutex_unlock(&g_mu);
    *phGraph = g;
    return rc;
}

CUresult
cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    struct CUstream_st *s;
    CUresult rc;

    FAKE_ENTER(cuStreamIsCapturing, true);
    if (captureStatus == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    rc = stream_resolve(hStream, &s);
    if (rc == CUDA_SUCCESS) {
        *captureStatus = (CUstreamCaptureStatus)s->capture;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* A copy of the ops of list (NULL and *ok false when memory ran out);
 * queued: the copies are work on a stream (a launch), not an
 * executable graph's nodes. */
static struct fake_op *
op_list_copy(const struct fake_op *list, bool queued, bool *ok)
{
    struct fake_op *head = NULL, **tail = &head;

    *ok = true;
    for (; list != NULL; list = list->next) {
        struct fake_op *op = op_new(list->kind, list->ms, NULL);

        if (op == NULL) {
            op_list_free(head);
            *ok = false;
            return NULL;
        }
        op->mem = list->mem; /* captured copies have no staging */
        op->gate = list->gate;
        if (list->launch != NULL) {
            op->launch = dk_launch_copy(list->launch, queued);
            if (op->launch == NULL) {
                op_free(op);
                op_list_free(head);
                *ok = false;
                return NULL;
            }
        }
        *tail = op;
        tail = &op->next;
    }
    return head;
}

CUresult
cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                            unsigned long long flags)
{
    struct CUgraphExec_st *x = NULL;
    CUresult rc = CUDA_SUCCESS;
    bool ok;

    FAKE_ENTER(cuGraphInstantiateWithFlags, true);
    if (phGraphExec == NULL || flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (live_current_ctx() == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_has(&g_graph_set.graphs, hGraph)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    else if ((x = calloc(1, sizeof(*x))) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    else {
        x->head = op_list_copy(hGraph->head, false, &ok);
        x->count = hGraph->count;
        if (!ok || !dc_handles_add(&g_graph_set.execs, x)) {
            op_list_free(x->head);
            free(x);
            x = NULL;
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        else {
            dc_live_add(&g_ctl, LIVE_GRAPH_EXEC, 1);
        }
    }
    pthread_mutex_unlock(&g_mu);
    *phGraphExec = x;
    return rc;
}

/* Under g_mu.  Frame a launch's ops: first wait for the executable's
 * previous launch, last mark this one's end (*ops keeps them all). */
static CUresult
launch_frame(struct CUgraphExec_st *x, struct fake_op **ops)
{
    struct fake_mark *m = mark_new(2);
    struct fake_op *record = m != NULL ? op_new(OP_RECORD, 0, m) : NULL;
    struct fake_op *wait = NULL, **tail = ops;

    if (record == NULL) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (x->last != NULL && !mark_done(x->last)) {
        wait = op_new(OP_WAIT, 0, x->last);
        if (wait == NULL) {
            op_free(record);
            mark_unref(m);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        atomic_fetch_add(&x->last->refs, 1);
        wait->next = *ops;
        *ops = wait;
    }
    while (*tail != NULL) {
        tail = &(*tail)->next;
    }
    *tail = record;
    mark_unref(x->last);
    x->last = m;
    return CUDA_SUCCESS;
}

CUresult
cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    struct CUstream_st *s;
    struct fake_op *ops = NULL;
    CUresult rc;
    bool ok = true;

    FAKE_ENTER(cuGraphLaunch, true);
    pthread_mutex_lock(&g_mu);
    rc = dc_handles_has(&g_graph_set.execs, hGraphExec)
             ? stream_resolve(hStream, &s)
             : CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        /* The double does not model child graphs in a capture. */
        rc = capture_refuse(s);
    }
    if (rc == CUDA_SUCCESS) {
        ops = op_list_copy(hGraphExec->head, true, &ok);
        rc = ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc == CUDA_SUCCESS) {
        rc = launch_frame(hGraphExec, &ops);
    }
    /* One launch: the recorded ops, in order, on the stream's worker. */
    while (rc == CUDA_SUCCESS && ops != NULL) {
        struct fake_op *next = ops->next;

        rc = stream_enqueue(s, ops);
        ops = next;
    }
    op_list_free(ops);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;

    FAKE_ENTER(cuGraphExecDestroy, true);
    pthread_mutex_lock(&g_mu);
    if (dc_handles_has(&g_graph_set.execs, hGraphExec)) {
        dc_handles_remove(&g_graph_set.execs, hGraphExec);
        dc_live_add(&g_ctl, LIVE_GRAPH_EXEC, -1);
        op_list_free(hGraphExec->head);
        mark_unref(hGraphExec->last);
        free(hGraphExec);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuGraphDestroy(CUgraph hGraph)
{
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;

    FAKE_ENTER(cuGraphDestroy, true);
    pthread_mutex_lock(&g_mu);
    if (dc_handles_has(&g_graph_set.graphs, hGraph)) {
        dc_handles_remove(&g_graph_set.graphs, hGraph);
        dc_live_add(&g_ctl, LIVE_GRAPH, -1);
        op_list_free(hGraph->head);
        free(hGraph);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Modules and kernels ------------------------------------------------- */

/* Device code is double_kernels.c's (shared with the Level Zero and HIP
 * doubles): the native format (a host shared object) runs on the stream
 * workers; cubins for this device and PTX are read (kernels, parameters)
 * but have no binary the device runs: their launches fail with
 * CUDA_ERROR_NO_BINARY_FOR_GPU, as a device the JIT cannot target
 * would. */

struct CUfunc_st {
    struct CUmod_st *mod;
    const dk_kernel *k;
};

struct CUmod_st {
    struct CUctx_st *ctx;
    dk_module *dk;
    int nfuncs;
    struct CUfunc_st *funcs;
};

/* Under g_mu. */
static dc_handles g_module_set, g_func_set;

/* Under g_mu.  A call the driver deems unsafe during a capture (it may
 * synchronise: loading a module) made where a capture forbids it: any
 * thread while a global-mode capture runs, the capturing thread of a
 * thread-local one.  That capture is invalidated and the call refused
 * with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, the driver's rule. */
static CUresult
capture_forbids_unsafe(void)
{
    CUresult rc = CUDA_SUCCESS;

    for (struct CUstream_st *t = g_streams; t != NULL; t = t->next) {
        if (t->cap_origin == t && t->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE
            && (t->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL
                || (t->capture_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                    && pthread_equal(t->capture_thread, pthread_self())))) {
            t->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return rc;
}

/* The JIT's log options of cuModuleLoadDataEx. */
struct jit_logs {
    char *info, *error;
    size_t info_size, error_size;
    int info_at, error_at; /* the size options' indices, -1: none */
};

static CUresult
jit_logs_read(unsigned int n, const CUjit_option *options, void **values,
              struct jit_logs *logs)
{
    memset(logs, 0, sizeof(*logs));
    logs->info_at = logs->error_at = -1;
    if (n > 0 && (options == NULL || values == NULL)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (unsigned int i = 0; i < n; i++) {
        switch ((int)options[i]) {
        case CU_JIT_INFO_LOG_BUFFER:
            logs->info = values[i];
            break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            logs->info_size = (size_t)(uintptr_t)values[i];
            logs->info_at = (int)i;
            break;
        case CU_JIT_ERROR_LOG_BUFFER:
            logs->error = values[i];
            break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            logs->error_size = (size_t)(uintptr_t)values[i];
            logs->error_at = (int)i;
            break;
        default:
            /* Other JIT options (optimisation level, target...) change
             * nothing here; no option is numbered this high. */
            if ((unsigned int)options[i] >= 64) {
                return CUDA_ERROR_INVALID_VALUE;
            }
            break;
        }
    }
    return CUDA_SUCCESS;
}

/* text into a log buffer (cut, NUL-terminated); the size option's value
 * becomes the bytes written, as the driver reports them. */
static void
jit_log_write(char *buf, size_t size, int at, void **values,
              const char *text)
{
    size_t n = strlen(text);

    if (buf == NULL || size == 0) {
        return;
    }
    if (n >= size) {
        n = size - 1;
    }
    memcpy(buf, text, n);
    buf[n] = '\0';
    if (at >= 0) {
        values[at] = (void *)(uintptr_t)n;
    }
}

static CUresult
module_result(enum dk_result r)
{
    switch (r) {
    case DK_OK:
        return CUDA_SUCCESS;
    case DK_OTHER_MACHINE:
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    case DK_INVALID_CODE:
        return CUDA_ERROR_INVALID_PTX;
    case DK_OUT_OF_MEMORY:
        return CUDA_ERROR_OUT_OF_MEMORY;
    default:
        return CUDA_ERROR_INVALID_IMAGE;
    }
}

static CUresult
module_load(CUmodule *module, const void *image, unsigned int n,
            CUjit_option *options, void **values)
{
    char log[DK_LOG_MAX], info[DK_LOG_MAX];
    struct jit_logs logs;
    struct CUctx_st *ctx;
    struct CUmod_st *m = NULL;
    dk_module *dk = NULL;
    enum dk_result r;
    CUresult rc;
    size_t used = 0;

    if (module == NULL || image == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc = jit_logs_read(n, options, values, &logs);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    pthread_mutex_lock(&g_mu);
    ctx = live_current_ctx();
    rc = ctx == NULL ? CUDA_ERROR_INVALID_CONTEXT : capture_forbids_unsafe();
    pthread_mutex_unlock(&g_mu);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    r = dk_module_load_cuda(image, 0, cfg.cc_major * 10 + cfg.cc_minor, &dk,
                            log, sizeof(log));
    if (r == DK_OK && dk_module_format(dk) == DK_SPIRV) {
        /* SPIR-V is not CUDA's. */
        dk_module_unload(dk, "cuModuleLoadData");
        r = DK_NOT_IMAGE;
    }
    if (r != DK_OK) {
        jit_log_write(logs.error, logs.error_size, logs.error_at, values,
                      log);
        jit_log_write(logs.info, logs.info_size, logs.info_at, values, "");
        return module_result(r);
    }
    info[0] = '\0';
    for (int i = 0; dk_module_format(dk) == DK_PTX
                    && i < dk_kernel_count(dk) && used < sizeof(info);
         i++) {
        used += (size_t)snprintf(info + used, sizeof(info) - used,
                                 "ptxas info    : Compiling entry function "
                                 "'%s' for 'sm_%d%d'\n",
                                 dk_kernel_at(dk, i)->name, cfg.cc_major,
                                 cfg.cc_minor);
    }
    jit_log_write(logs.info, logs.info_size, logs.info_at, values, info);
    jit_log_write(logs.error, logs.error_size, logs.error_at, values, "");
    m = calloc(1, sizeof(*m));
    if (m != NULL) {
        m->nfuncs = dk_kernel_count(dk);
        m->funcs = calloc(m->nfuncs ? (size_t)m->nfuncs : 1,
                          sizeof(*m->funcs));
    }
    rc = m != NULL && m->funcs != NULL ? CUDA_SUCCESS
                                       : CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_mu);
    if (rc == CUDA_SUCCESS && !dc_handles_add(&g_module_set, m)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int i = 0; rc == CUDA_SUCCESS && i < m->nfuncs; i++) {
        m->funcs[i].mod = m;
        m->funcs[i].k = dk_kernel_at(dk, i);
        if (!dc_handles_add(&g_func_set, &m->funcs[i])) {
            for (int j = 0; j < i; j++) {
                dc_handles_remove(&g_func_set, &m->funcs[j]);
            }
            dc_handles_remove(&g_module_set, m);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc == CUDA_SUCCESS) {
        m->ctx = ctx;
        m->dk = dk;
        dc_live_add(&g_ctl, LIVE_MODULE, 1);
    }
    pthread_mutex_unlock(&g_mu);
    if (rc != CUDA_SUCCESS) {
        dk_module_unload(dk, "cuModuleLoadData");
        if (m != NULL) {
            free(m->funcs);
        }
        free(m);
        m = NULL;
    }
    *module = m;
    return rc;
}

CUresult
cuModuleLoadData(CUmodule *module, const void *image)
{
    FAKE_ENTER(cuModuleLoadData, true);
    return module_load(module, image, 0, NULL, NULL);
}

CUresult
cuModuleLoadDataEx(CUmodule *module, const void *image,
                   unsigned int numOptions, CUjit_option *options,
                   void **optionValues)
{
    FAKE_ENTER(cuModuleLoadDataEx, true);
    return module_load(module, image, numOptions, options, optionValues);
}

CUresult
cuModuleUnload(CUmodule hmod)
{
    FAKE_ENTER(cuModuleUnload, true);
    pthread_mutex_lock(&g_mu);
    if (!dc_handles_has(&g_module_set, hmod)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    dc_handles_remove(&g_module_set, hmod);
    for (int i = 0; i < hmod->nfuncs; i++) {
        dc_handles_remove(&g_func_set, &hmod->funcs[i]);
    }
    dc_live_add(&g_ctl, LIVE_MODULE, -1);
    pthread_mutex_unlock(&g_mu);
    /* A launch still queued is the caller's bug: the kernel layer reports
     * and counts it ("kernel_misuse"), and keeps the code until it ran. */
    dk_module_unload(hmod->dk, "cuModuleUnload");
    free(hmod->funcs);
    free(hmod);
    return CUDA_SUCCESS;
}

CUresult
cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;

    FAKE_ENTER(cuModuleGetFunction, true);
    if (hfunc == NULL || name == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    if (dc_handles_has(&g_module_set, hmod)) {
        rc = CUDA_ERROR_NOT_FOUND;
        for (int i = 0; i < hmod->nfuncs; i++) {
            if (strcmp(hmod->funcs[i].k->name, name) == 0) {
                *hfunc = &hmod->funcs[i];
                rc = CUDA_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;

    FAKE_ENTER(cuModuleGetFunctionCount, true);
    if (count == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    if (dc_handles_has(&g_module_set, mod)) {
        *count = (unsigned int)mod->nfuncs;
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions,
                           CUmodule mod)
{
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;

    FAKE_ENTER(cuModuleEnumerateFunctions, true);
    if (functions == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    if (dc_handles_has(&g_module_set, mod)) {
        for (unsigned int i = 0; i < numFunctions
                                 && i < (unsigned int)mod->nfuncs; i++) {
            functions[i] = &mod->funcs[i];
        }
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Under g_mu.  A live function handle, or NULL. */
static struct CUfunc_st *
func_lookup(CUfunction f)
{
    return dc_handles_has(&g_func_set, f) ? f : NULL;
}

CUresult
cuFuncGetName(const char **name, CUfunction hfunc)
{
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;

    FAKE_ENTER(cuFuncGetName, true);
    if (name == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    if (func_lookup(hfunc) != NULL) {
        *name = hfunc->k->name;
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* What the double's device tells of a kernel: what a cubin says of it
 * (registers, local memory, its architecture), else a fixed figure (no
 * code is compiled); the limits are the device's. */
#define FAKE_KERNEL_REGISTERS 32

CUresult
cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    const dk_kernel *k;

    FAKE_ENTER(cuFuncGetAttribute, true);
    if (pi == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mu);
    k = func_lookup(hfunc) != NULL ? hfunc->k : NULL;
    pthread_mutex_unlock(&g_mu);
    if (k == NULL) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = k->max_threads;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
        *pi = (int)k->static_shared;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
        *pi = 0;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
        *pi = k->private_bytes <= INT_MAX ? (int)k->private_bytes : INT_MAX;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *pi = k->registers > 0 ? k->registers : FAKE_KERNEL_REGISTERS;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
        *pi = cfg.cc_major * 10 + cfg.cc_minor;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = dk_module_arch(k->module) > 0 ? dk_module_arch(k->module)
                                            : cfg.cc_major * 10 + cfg.cc_minor;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        /* The default: what the static part leaves of 48 KiB (no
         * cuFuncSetAttribute opt-in is modelled). */
        *pi = (int)(DK_MAX_SHARED - (k->static_shared < DK_MAX_SHARED
                                         ? k->static_shared
                                         : DK_MAX_SHARED));
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult
cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                   size_t *paramSize)
{
    const dk_kernel *k;

    FAKE_ENTER(cuFuncGetParamInfo, true);
    pthread_mutex_lock(&g_mu);
    k = func_lookup(func) != NULL ? func->k : NULL;
    pthread_mutex_unlock(&g_mu);
    if (k == NULL) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (paramOffset == NULL || paramSize == NULL
        || paramIndex >= (size_t)k->nparams) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *paramOffset = k->params[paramIndex].offset;
    *paramSize = k->params[paramIndex].size;
    return CUDA_SUCCESS;
}

CUresult
cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
               unsigned int gridDimZ, unsigned int blockDimX,
               unsigned int blockDimY, unsigned int blockDimZ,
               unsigned int sharedMemBytes, CUstream hStream,
               void **kernelParams, void **extra)
{
    const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
    const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
    struct CUstream_st *s;
    struct fake_op *op;
    dk_launch *l = NULL;
    const dk_kernel *k;
    CUresult rc;

    FAKE_ENTER(cuLaunchKernel, true);
    if (extra != NULL) {
        /* The packed-buffer form (CU_LAUNCH_PARAM_BUFFER_POINTER) is not
         * modelled; both forms at once the driver refuses too. */
        return kernelParams != NULL ? CUDA_ERROR_INVALID_VALUE
                                    : CUDA_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&g_mu);
    k = func_lookup(f) != NULL ? f->k : NULL;
    rc = k == NULL ? CUDA_ERROR_INVALID_HANDLE
                   : stream_resolve(hStream, &s);
    if (rc == CUDA_SUCCESS && s->ctx != f->mod->ctx) {
        /* A kernel runs in its module's context only. */
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    if (rc == CUDA_SUCCESS && kernelParams == NULL && k->nparams > 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS
        && dk_check_geometry(k, grid, block, sharedMemBytes, DK_MAX_SHARED)
               != DK_OK) {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS) {
        /* Captured, it is a graph's node: queued only by its replays. */
        enum dk_result r = dk_launch_new(
            k, grid, block, sharedMemBytes, kernelParams,
            s->capture == CU_STREAM_CAPTURE_STATUS_NONE, &l);

        rc = r == DK_OK ? CUDA_SUCCESS
             : r == DK_NO_BINARY ? CUDA_ERROR_NO_BINARY_FOR_GPU
                                 : CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc == CUDA_SUCCESS) {
        op = op_new(OP_LAUNCH, 0, NULL);
        if (op == NULL) {
            dk_launch_free(l);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        else {
            op->launch = l;
            rc = stream_enqueue(s, op);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult
cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                      CUdeviceptr ptr)
{
    int device = -1, kind;

    FAKE_ENTER(cuPointerGetAttribute, true);
    if (data == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    kind = dm_lookup(ptr, &device);
    if (kind == 0) {
        return CUDA_ERROR_INVALID_VALUE; /* memory the driver never saw */
    }
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = kind == 2 ? CU_MEMORYTYPE_HOST
                                          : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = device;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = &g_ctx[device];
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* One attribute of cuPointerGetAttributes; r->kind 0 (memory the driver
 * never saw) answers the "NULL values" the driver gives. */
static CUresult
pointer_attribute(void *data, CUpointer_attribute attribute,
                  CUdeviceptr ptr, const dm_range *r)
{
    bool known = r->kind != 0;

    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = known ? &g_ctx[r->device] : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = !known ? 0
                                : r->kind == 2 ? CU_MEMORYTYPE_HOST
                                               : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        /* One address space: the same address, on the device too. */
        *(CUdeviceptr *)data = known ? ptr : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        /* Device memory is not mapped into the host. */
        *(void **)data = r->kind == 2 ? (void *)(uintptr_t)ptr : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = r->id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        /* -2 (cudaInvalidDeviceId) for memory of no device. */
        *(int *)data = known ? r->device : -2;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = r->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = (size_t)r->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = NULL; /* not from a pool */
        return CUDA_SUCCESS;
    /* Booleans, written as one byte (a C bool, as cuda.bindings reads
     * them). */
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(bool *)data = known;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(bool *)data = r->kind == 1; /* cuMemAlloc memory */
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(bool *)data = false;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult
cuPointerGetAttributes(unsigned int numAttributes,
                       CUpointer_attribute *attributes, void **data,
                       CUdeviceptr ptr)
{
    dm_range r;

    FAKE_ENTER(cuPointerGetAttributes, true);
    if (numAttributes == 0 || attributes == NULL || data == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (unsigned int i = 0; i < numAttributes; i++) {
        if (data[i] == NULL) {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    /* Unlike cuPointerGetAttribute, memory the driver never saw is no
     * error: its attributes are NULL values. */
    r = dm_query(ptr);
    for (unsigned int i = 0; i < numAttributes; i++) {
        CUresult rc = pointer_attribute(data[i], attributes[i], ptr, &r);

        if (rc != CUDA_SUCCESS) {
            return rc;
        }
    }
    return CUDA_SUCCESS;
}

/* Driver API: memory -------------------------------------------------- */

/* The cuMemAlloc allocation holding dptr among the current context's:
 * CUDA_ERROR_INVALID_CONTEXT without one, CUDA_ERROR_NOT_FOUND for an
 * address in none (memory of another device's context, page-locked host
 * memory, or memory the driver never saw).  Either output may be NULL. */
CUresult
cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct CUctx_st *c;
    dm_range r;
    int device;

    FAKE_ENTER(cuMemGetAddressRange, true);
    pthread_mutex_lock(&g_mu);
    c = live_current_ctx();
    device = c != NULL ? c->device : -1;
    pthread_mutex_unlock(&g_mu);
    if (c == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    r = dm_query(dptr);
    if (r.kind != 1 || r.device != device) {
        return CUDA_ERROR_NOT_FOUND;
    }
    if (pbase != NULL) {
        *pbase = r.base;
    }
    if (psize != NULL) {
        *psize = (size_t)r.size;
    }
    return CUDA_SUCCESS;
}

static CUresult
mem_info(unsigned long long *free_bytes, unsigned long long *total_bytes)
{
    struct CUctx_st *c;
    unsigned long long used;

    pthread_mutex_lock(&g_mu);
    c = live_current_ctx();
    pthread_mutex_unlock(&g_mu);
    if (c == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    used = FAKE_CONTEXT_FOOTPRINT + dm_used(c->device);
    *total_bytes = cfg.total_mem;
    *free_bytes = cfg.total_mem > used ? cfg.total_mem - used : 0;
    return CUDA_SUCCESS;
}

CUresult
cuMemGetInfo_v2(size_t *free, size_t *total)
{
    unsigned long long f, t;
    CUresult rc;

    FAKE_ENTER(cuMemGetInfo, true);
    if (free == NULL || total == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc = mem_info(&f, &t);
    if (rc == CUDA_SUCCESS) {
        *free = (size_t)f;
        *total = (size_t)t;
    }
    return rc;
}

CUresult
cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    unsigned long long f, t;
    CUresult rc;

    FAKE_ENTER(cuMemGetInfo, true);
    if (free == NULL || total == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc = mem_info(&f, &t);
    if (rc == CUDA_SUCCESS) {
        *free = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
        *total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    }
    return rc;
}

/* Driver API: entry points -------------------------------------------- */

/* The driver's private tables, asked for by UUID (the CUDA runtime's,
 * NVRTC's, the tools'): the double has none, so every id is one it does
 * not know.  Libraries look this up with dlsym and treat an error as "no
 * such table"; a missing symbol crashes NVRTC 13. */
CUresult
cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    FAKE_ENTER(cuGetExportTable, false);
    if (ppExportTable == NULL || pExportTableId == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *ppExportTable = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

#ifndef FAKE_CUDA_NO_PROC_ADDRESS

/* Every variant with the version that introduced it; a request gets the
 * newest variant not newer than its cudaVersion. */
struct fake_proc {
    const char *name;
    int version;
    void *fn;
};

#define FAKE_PROC(name, symbol, version, params) \
    {#name, version, (void *)symbol},
static const struct fake_proc fake_procs[] = {
    ACC_CUDA_FUNCTIONS(FAKE_PROC)
    ACC_CUDA_IPC_FUNCTIONS(FAKE_PROC)
    ACC_CUDA_OPTIONAL_FUNCTIONS(FAKE_PROC)
    ACC_CUDA_PEER_FUNCTIONS(FAKE_PROC)
    {"cuStreamGetCtx", 12050, (void *)cuStreamGetCtx_v2},
    {"cuIpcOpenMemHandle", 4010, (void *)cuIpcOpenMemHandle},
    {"cuDeviceGetUuid", 9020, (void *)cuDeviceGetUuid},
    {"cuDeviceTotalMem", 2000, (void *)cuDeviceTotalMem},
    {"cuDevicePrimaryCtxRelease", 7000, (void *)cuDevicePrimaryCtxRelease},
    {"cuCtxPushCurrent", 2000, (void *)cuCtxPushCurrent},
    {"cuCtxPopCurrent", 2000, (void *)cuCtxPopCurrent},
    {"cuStreamDestroy", 2000, (void *)cuStreamDestroy},
    {"cuEventElapsedTime", 12080, (void *)cuEventElapsedTime_v2},
    {"cuEventDestroy", 2000, (void *)cuEventDestroy},
    {"cuMemGetInfo", 2000, (void *)cuMemGetInfo},
    {"cuGetExportTable", 3000, (void *)cuGetExportTable},
    {"cuGetProcAddress", 11030, (void *)cuGetProcAddress},
    {"cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2},
};
#undef FAKE_PROC

static CUresult
get_proc_address(const char *symbol, void **pfn, int cudaVersion,
                 cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    const struct fake_proc *best = NULL;
    bool known = false;

    if (pfn == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pfn = NULL;
    if (symbol == NULL || cudaVersion > cfg.driver_version ||
        (flags & ~FAKE_PROC_FLAGS) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < sizeof(fake_procs) / sizeof(fake_procs[0]);
         i++) {
        const struct fake_proc *p = &fake_procs[i];

        if (strcmp(p->name, symbol) != 0) {
            continue;
        }
        known = true;
        if (p->version <= cudaVersion &&
            (best == NULL || p->version > best->version)) {
            best = p;
        }
    }
    if (best == NULL) {
        /* Not CUDA_SUCCESS with a NULL pfn, as cuda.h's comment has
         * it: the driver's answer (see the header). */
        if (status != NULL) {
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        }
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = best->fn;
    if (status != NULL) {
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    }
    return CUDA_SUCCESS;
}

CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                    cuuint64_t flags,
                    CUdriverProcAddressQueryResult *symbolStatus)
{
    FAKE_ENTER(cuGetProcAddress, false);
    return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult
cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                 cuuint64_t flags)
{
    FAKE_ENTER(cuGetProcAddress, false);
    return get_proc_address(symbol, pfn, cudaVersion, flags, NULL);
}

#endif /* FAKE_CUDA_NO_PROC_ADDRESS */

/* Control API for tests ----------------------------------------------- */

DC_EXPORT_CONTROL(cuda, g_ctl)
DM_EXPORT_RANGE(cuda)

static void
reset_sync_counters(void)
{
    atomic_store(&g_sync_blocked, 0);
    atomic_store(&g_sync_spun, 0);
}

/* "context": primary contexts with a retain count > 0; "retain": the sum
 * of the retain counts; the memory kinds of double_memory.h and the
 * kernel detector of double_kernels.h. */
static long long
live_contexts(const char *kind)
{
    long long n = 0;
    bool contexts = strcmp(kind, "context") == 0;

    if (!contexts && strcmp(kind, "retain") != 0) {
        n = dm_live(kind); /* memory kinds, or -1 */
        return n >= 0 ? n : dk_live(kind);
    }
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < cfg.devices; i++) {
        n += contexts ? g_ctx[i].retain > 0 : g_ctx[i].retain;
    }
    pthread_mutex_unlock(&g_mu);
    return n;
}

static void
reset_detectors(void)
{
    dm_reset_detectors();
    dk_reset_detectors();
}

static void
report_live_objects(void)
{
    fprintf(stderr, "fake_cuda at exit: retain=%lld stream=%lld event=%lld "
            "alloc=%lld host_alloc=%lld calls=%lld\n",
            fake_cuda_live("retain"), fake_cuda_live("stream"),
            fake_cuda_live("event"), fake_cuda_live("alloc"),
            fake_cuda_live("host_alloc"), fake_cuda_call_count(NULL));
}

void
fake_cuda_report_at_exit(void)
{
    /* C atexit handlers run in reverse order of registration: calling
     * this before the product probes reports after its shutdown. */
    atexit(report_live_objects);
}

/* Queues op (taken over) on a test's stream: see enqueue_sleep above. */
static int
enqueue_control_op(int device, unsigned long long stream, struct fake_op *op)
{
    struct CUstream_st *s = NULL;
    CUresult rc;

    if (atomic_load(&g_poisoned) || !atomic_load(&g_initialized)) {
        op_free(op);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    pthread_mutex_lock(&g_mu);
    if (stream == 0 || stream == 1) {
        if (bad_device(device)) {
            rc = CUDA_ERROR_INVALID_DEVICE;
        }
        else if (g_ctx[device].retain == 0) {
            rc = CUDA_ERROR_INVALID_CONTEXT;
        }
        else {
            rc = legacy_stream(&g_ctx[device], &s);
        }
    }
    else {
        s = stream_lookup((CUstream)(uintptr_t)stream);
        rc = s != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    if (rc == CUDA_SUCCESS) {
        rc = stream_enqueue(s, op);
    }
    else {
        op_free(op);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int
fake_cuda_foreign_work(int device, double ms)
{
    struct CUstream_st *s = NULL;
    struct fake_mark *m;
    struct fake_op *record;
    CUresult rc;

    /* The other library initialises the driver for itself. */
    rc = init_driver(0);
    if (rc != CUDA_SUCCESS) {
        return rc;
    }
    if (bad_device(device)) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    if (!(ms >= 0.0)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    m = mark_new(2);
    record = m != NULL ? op_new(OP_RECORD, 0, m) : NULL;
    if (record == NULL) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&g_mu);
    if (!g_foreign_retained[device]) {
        g_foreign_retained[device] = true;
        g_ctx[device].retain++;
    }
    rc = legacy_stream(&g_ctx[device], &s);
    if (rc == CUDA_SUCCESS) {
        rc = stream_enqueue(s, op_new(OP_SLEEP, ms, NULL));
    }
    if (rc == CUDA_SUCCESS) {
        rc = stream_enqueue(s, record);
        record = NULL;
    }
    if (rc == CUDA_SUCCESS) {
        mark_unref(g_foreign_end[device]);
        g_foreign_end[device] = m;
    }
    else {
        if (record != NULL) {
            op_free(record); /* the op's reference */
        }
        mark_unref(m);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int
fake_cuda_foreign_done(int device)
{
    int done;

    if (bad_device(device)) {
        return -1;
    }
    pthread_mutex_lock(&g_mu);
    done = g_foreign_end[device] == NULL || mark_done(g_foreign_end[device]);
    pthread_mutex_unlock(&g_mu);
    return done;
}

int
fake_cuda_enqueue_sleep(int device, unsigned long long stream, double ms)
{
    if (!(ms >= 0.0)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return enqueue_control_op(device, stream, op_new(OP_SLEEP, ms, NULL));
}

int
fake_cuda_enqueue_gate(int device, unsigned long long stream, int *gate)
{
    struct fake_op *op;
    int id = dc_gate_new();
    int rc;

    if (gate == NULL || id < 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    op = op_new(OP_GATE, 0.0, NULL);
    if (op != NULL) {
        op->gate = id;
    }
    rc = enqueue_control_op(device, stream, op);
    if (rc != CUDA_SUCCESS) {
        dc_gate_open(id);
        return rc;
    }
    *gate = id;
    return CUDA_SUCCESS;
}

int
fake_cuda_open_gate(int gate)
{
    return dc_gate_open(gate);
}

int
fake_cuda_current_device(void)
{
    struct CUctx_st *c = current_ctx();

    return c != NULL ? c->device : -1;
}

long long
fake_cuda_event_sync_blocked(void)
{
    return atomic_load(&g_sync_blocked);
}

long long
fake_cuda_event_sync_spun(void)
{
    return atomic_load(&g_sync_spun);
}

/* Loading and fork ---------------------------------------------------- */

static void
config_int(const char *var, int *out, long lo, long hi)
{
    long long v;

    if (dc_env_int(&g_ctl, var, lo, hi, &v)) {
        *out = (int)v;
    }
}

static void
config_read(void)
{
    const char *value;
    unsigned long long mem;
    int a, b;
    char extra;

    config_int("FAKE_CUDA_DEVICES", &cfg.devices, 0, FAKE_MAX_DEVICES);
    config_int("FAKE_CUDA_DRIVER_VERSION", &cfg.driver_version, 0,
               INT_MAX);
    config_int("FAKE_CUDA_SMS", &cfg.sms, 0, INT_MAX);
    if (dc_env_ull(&g_ctl, "FAKE_CUDA_TOTAL_MEM", &mem)) {
        cfg.total_mem = mem;
    }
    value = getenv("FAKE_CUDA_NAME");
    if (value != NULL) {
        snprintf(cfg.name, sizeof(cfg.name), "%s", value);
    }
    value = getenv("FAKE_CUDA_CC");
    if (value != NULL) {
        if (sscanf(value, "%d.%d%c", &a, &b, &extra) == 2 && a >= 0 &&
            b >= 0) {
            cfg.cc_major = a;
            cfg.cc_minor = b;
        }
        else {
            dc_env_warn(&g_ctl, "FAKE_CUDA_CC", value);
        }
    }
    value = getenv("FAKE_CUDA_PRIORITY_RANGE");
    if (value != NULL) {
        /* Lower numbers are higher priorities: greatest <= least. */
        if (sscanf(value, "%d,%d%c", &a, &b, &extra) == 2 && b <= a) {
            cfg.prio_least = a;
            cfg.prio_greatest = b;
        }
        else {
            dc_env_warn(&g_ctl, "FAKE_CUDA_PRIORITY_RANGE", value);
        }
    }
}

/* The registries' mutexes are held across fork(), so the child finds them
 * consistent (its control functions still work).  The workers' mutexes
 * are not: the child has no workers and never touches them. */
static void
fork_prepare(void)
{
    dc_fork_prepare(&g_ctl);
    pthread_mutex_lock(&g_mu);
    pthread_mutex_lock(&g_mark_mu);
}

static void
fork_parent(void)
{
    pthread_mutex_unlock(&g_mark_mu);
    pthread_mutex_unlock(&g_mu);
    dc_fork_release(&g_ctl);
}

static void
fork_child(void)
{
    /* Like the real driver: a child of an initialised parent cannot use
     * CUDA at all, not even by calling cuInit again. */
    if (atomic_load(&g_initialized)) {
        atomic_store(&g_poisoned, 1);
    }
    pthread_mutex_unlock(&g_mark_mu);
    pthread_mutex_unlock(&g_mu);
    dc_fork_release(&g_ctl);
}

__attribute__((constructor)) static void
fake_cuda_load(void)
{
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) {
        g_ctx[i].device = i;
    }
    config_read();
    dm_configure("fake libcuda", cfg.total_mem > FAKE_CONTEXT_FOOTPRINT
                                     ? cfg.total_mem - FAKE_CONTEXT_FOOTPRINT
                                     : 0);
    dc_env_faults(&g_ctl, "FAKE_CUDA_FAIL");
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
