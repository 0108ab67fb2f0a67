/*
 * ze_test_driver.c - a Level Zero driver for tests, loaded by the real
 * loader: ZE_ENABLE_ALT_DRIVERS=/abs/path/libze_test_driver.so.
 *
 * It exports the DDI table getters that loader 1.8.12 requires (all the
 * non-experimental ze, zet and zes ones) and implements the part of the
 * core API that the accelerator backend uses, with the driver's own
 * semantics: asynchronous immediate command lists (one worker thread per
 * list), events with a signaled state and kernel timestamps, event pools,
 * real ze_result_t codes for bad handles and arguments, and strict
 * lifetime rules (destroying something still in use fails with
 * ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE) so that backend bugs show.
 *
 * Configuration (read when the loader opens the driver):
 *   FAKE_ZE_DRIVERS         drivers this library presents (default 1),
 *                           each with its own devices; events cannot
 *                           cross drivers (contexts)
 *   FAKE_ZE_DEVICES         GPU devices of each driver (default 2)
 *   FAKE_ZE_USED_MEM        bytes of device memory in use by others, for
 *                           Sysman's free memory (default 0)
 *   ZES_ENABLE_SYSMAN=1     as Intel's driver: Sysman (zes) calls on core
 *                           device handles work only when set at zeInit;
 *                           otherwise they fail ZE_RESULT_ERROR_UNINITIALIZED
 *   FAKE_ZE_API_VERSION     0x10004 (default) or "1.7"; >= 1.7 honours
 *                           ZE_COMMAND_QUEUE_FLAG_IN_ORDER (1 << 1)
 *   FAKE_ZE_TOTAL_MEM       bytes of device memory (default 64 GiB);
 *                           zeMemAllocDevice fails with
 *                           ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY beyond it
 *   FAKE_ZE_TIMER_RESOLUTION  ns per timestamp tick (default 1)
 *   FAKE_ZE_TIMESTAMP_BITS  kernelTimestampValidBits (default 32)
 *   FAKE_ZE_TIMESTAMP_BASE  tick value at load time, e.g. just below
 *                           2**bits to make the counter wrap soon
 *   FAKE_ZE_INTEGRATED=1    report integrated devices
 *   FAKE_ZE_MODULE_FLAGS    zeDeviceGetModuleProperties' flags (default 3:
 *                           FP16 | FP64; 1 is a device without doubles)
 *   FAKE_ZE_INIT_FAIL=1     zeInit fails
 *   FAKE_ZE_FAIL            "name:nth:code,..." faults, as fake_ze_fail
 *
 * Ordering model: a list created with IN_ORDER (driver API >= 1.7) runs
 * each command after the previous one has finished.  Any other list is
 * out of order, as the spec allows: timed work (fake_ze_enqueue_sleep)
 * starts as soon as it reaches the head and runs concurrently with what
 * follows; a barrier waits for everything before it; a wait on events
 * stalls the commands after it; a signal command does not wait for
 * earlier work, and neither does a copy or fill (they run when they reach
 * the head of the list, from double_memory.c's model, and read or write
 * ordinary host memory only then: nothing is staged).
 *
 * Regular command lists (zeCommandListCreate) record their commands and
 * run nothing; after zeCommandListClose, zeCommandQueueExecuteCommandLists
 * queues a copy of them on a command queue, which runs them on its own
 * worker with the ordering model above (a list is in use until they have
 * run: destroying or resetting it fails meanwhile, with
 * ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE; appending to a closed one fails).
 * Recorded commands hold no reference on their events until executed;
 * an event destroyed meanwhile makes the execution fail.
 * zeCommandListAppendEventReset resets an event when it reaches the head.
 *
 * Interprocess sharing (double_ipc.h): zeMemGetIpcHandle exports a
 * device allocation's memfd, zeMemOpenIpcHandle maps it in another
 * process (zeMemCloseIpcHandle unmaps; zeMemFree refuses it).  An event
 * pool made with ZE_EVENT_POOL_FLAG_IPC (of one event: more fail with
 * ZE_RESULT_ERROR_UNSUPPORTED_SIZE) keeps its event's state in a shared
 * cell: signal completes the cell's latest record, reset records anew,
 * so both processes' events of the pool read and set one state;
 * zeEventPoolGetIpcHandle exports it (a pool without the flag:
 * ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, as Intel's driver), and
 * zeEventPoolOpenIpcHandle opens it as a pool whose event of index 0 is
 * that event (created there without a reset; zeEventPoolCloseIpcHandle
 * closes it, zeEventPoolDestroy refuses it).  As Intel's driver on
 * Linux, each handle's first bytes hold the descriptor of the exporter
 * it rests on (a uint64_t for memory, an int for event pools), which the
 * open reads as a descriptor of its own process: the importer must write
 * the copy it received there (a number that is not, in the importer, a
 * descriptor of that file fails with ZE_RESULT_ERROR_INVALID_ARGUMENT,
 * as does a damaged handle, one opened in its exporting process, or one
 * whose exporter freed the allocation).  Waits on an interprocess event
 * poll it (1 ms), since another process signals it.
 *
 * Modules and kernels (double_kernels.h loads the images): SPIR-V
 * modules are read (kernel names, parameters) but their launches are
 * refused with ZE_RESULT_ERROR_INVALID_NATIVE_BINARY; malformed SPIR-V
 * or an unknown build flag fails with ZE_RESULT_ERROR_MODULE_BUILD_FAILURE
 * and a build log; native modules (tests/drivers/native_kernel.h) run on
 * the list's worker.  A native kernel has one parameter more than its
 * table lists, last: its local memory (set with a size and a NULL value,
 * as a __local pointer), which reaches it as native_block.shared.
 * Arguments and the group size are copied when a launch is appended.
 * Destroying a module that has kernels, or a context that has modules,
 * fails with ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE.
 *
 * Control functions for tests (ctypes; see the "Control" section):
 *   long long fake_ze_call_count(const char *name)  NULL: all; -1: unknown
 *   void fake_ze_reset_counts(void)
 *   int fake_ze_fail(const char *name, int nth, int code)
 *   void fake_ze_clear_faults(void)
 *   long long fake_ze_live(const char *kind)  "context", "list", "pool",
 *                                             "event", "queue", "module",
 *                                             "kernel", "build_log",
 *                                             "kernel_misuse", and the
 *                                             memory
 *                                             kinds of double_memory.h
 *                                             ("alloc", "host_alloc",
 *                                             "bad_access", ...); -1:
 *                                             unknown kind
 *   int fake_ze_drivers(void)               drivers presented
 *   int fake_ze_enqueue_sleep(unsigned long long command_list, double ms)
 *   int fake_ze_enqueue_sleep_default(int device, double ms)
 *   int fake_ze_enqueue_gate(unsigned long long command_list, int *gate)
 *   int fake_ze_enqueue_stall(unsigned long long command_list, int *gate)
 *   int fake_ze_open_gate(int gate)
 * Load this library with ctypes by the same absolute path as in
 * ZE_ENABLE_ALT_DRIVERS: dlopen then returns the instance the loader
 * opened, with the same state.
 */
#define _GNU_SOURCE
#include <level_zero/ze_api.h>
#include <level_zero/ze_ddi.h>
#include <level_zero/zes_api.h>
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "double_control.h"
#include "double_ipc.h"
#include "double_kernels.h"
#include "double_memory.h"

#define EXPORT __attribute__((visibility("default")))

#define FAKE_MAX_DEVICES 64
#define FAKE_MAX_DRIVERS 4
#define FAKE_MAGIC 0x5a45fa4eu

/* In-order lists need spec 1.7; ZE_COMMAND_QUEUE_FLAG_IN_ORDER is newer
 * than this SDK. */
#define FAKE_FLAG_IN_ORDER (1u << 1)

/* How often a wait on an interprocess event looks again: another
 * process signals it without waking this one's waiters. */
#define FAKE_IPC_POLL_NS 1000000ull

/* Objects ------------------------------------------------------------- */

enum fake_kind {
    K_CONTEXT, K_LIST, K_POOL, K_EVENT, K_QUEUE, K_MODULE, K_KERNEL,
    K_BUILD_LOG, K_KINDS
};
static const char *const kind_names[K_KINDS] = {
    "context", "list", "pool", "event", "queue", "module", "kernel",
    "build_log",
};

typedef struct fake_obj {
    unsigned magic;
    enum fake_kind kind;
    struct fake_obj *next; /* in the live list of its kind */
    struct fake_obj *prev;
} fake_obj;

typedef struct fake_context {
    fake_obj obj;
    int driver;
    int children; /* live lists, pools and modules */
} fake_context;

typedef struct fake_pool {
    fake_obj obj;
    fake_context *ctx;
    ze_event_pool_flags_t flags;
    uint32_t count;
    int events;             /* live events */
    unsigned char *used;    /* per index */
    dipc_cell *cell;        /* ZE_EVENT_POOL_FLAG_IPC: its event's state */
    int imported;           /* opened by zeEventPoolOpenIpcHandle */
} fake_pool;

typedef struct fake_event {
    fake_obj obj;
    fake_pool *pool;
    uint32_t index;
    int signaled;
    int refs;               /* pending commands that name it */
    uint64_t ts_start, ts_end;
} fake_event;

enum cmd_kind {
    CMD_SLEEP, CMD_GATE, CMD_BARRIER, CMD_SIGNAL, CMD_WAIT, CMD_MEMORY,
    CMD_RESET, CMD_KERNEL
};

typedef struct fake_cmd {
    enum cmd_kind kind;
    uint64_t ns;            /* CMD_SLEEP; CMD_GATE: the gate's id */
    uint64_t start, deadline;
    fake_event *signal;     /* CMD_RESET: the event it resets */
    uint32_t nwait;
    fake_event **wait;
    dm_op mem;              /* CMD_MEMORY: a copy or fill */
    dk_launch *launch;      /* CMD_KERNEL: owned */
    struct fake_list *from; /* the regular list it was executed from */
    struct fake_cmd *next;
} fake_cmd;

/* An immediate command list or a command queue (K_QUEUE): commands run
 * by a worker thread; or a regular command list (regular): commands are
 * recorded, run only as copies that zeCommandQueueExecuteCommandLists
 * queues on a command queue. */
typedef struct fake_list {
    fake_obj obj;
    fake_context *ctx;
    int device;
    int in_order;
    int regular;
    int closed;             /* regular: zeCommandListClose was called */
    long long executing;    /* regular: its commands queued or running */
    long long serial;       /* creation order, for _default */
    fake_cmd *head, *tail;  /* not started; regular: recorded */
    fake_cmd *running;      /* started, not finished */
    int stop;
    pthread_t worker;
} fake_list;

typedef struct fake_device {
    int index;              /* across all drivers */
    int driver;
} fake_device;

typedef struct fake_driver {
    int index;
} fake_driver;

/* A module (double_kernels.c loads its image) and its kernels.  A
 * native kernel has one parameter more than its table entry lists: its
 * dynamic local memory, last, as a kernel built from OpenCL C declares a
 * __local pointer (set with a size and a NULL value); it reaches the
 * native code as native_block.shared. */
typedef struct fake_module {
    fake_obj obj;
    fake_context *ctx;
    int device;
    dk_module *dk;
    int kernels;            /* live kernels of it */
} fake_module;

typedef struct fake_kernel {
    fake_obj obj;
    fake_module *module;
    const dk_kernel *dk;
    uint32_t nargs;         /* the parameters, the native local one too */
    uint32_t group[3];
    unsigned char *args;    /* dk_kernel_args_size() bytes */
    unsigned char *set;     /* per parameter: given a value */
    size_t local;           /* native: the local parameter's bytes */
} fake_kernel;

typedef struct fake_build_log {
    fake_obj obj;
    char text[DK_LOG_MAX];
} fake_build_log;

/* A Sysman memory module: one per device, its handle. */
typedef struct fake_mem {
    int device;
} fake_mem;

/* The functions we implement, for call counts. */
#define FAKE_FUNCTIONS(X)                                               \
    X(zeInit) X(zeDriverGet) X(zeDriverGetApiVersion)                   \
    X(zeDriverGetProperties) X(zeDeviceGet) X(zeDeviceGetProperties)    \
    X(zeDeviceGetMemoryProperties) X(zeDeviceGetModuleProperties)       \
    X(zeDeviceGetCommandQueueGroupProperties)                           \
    X(zeContextCreate) X(zeContextDestroy)                              \
    X(zeCommandListCreateImmediate) X(zeCommandListDestroy)             \
    X(zeCommandListCreate) X(zeCommandListClose) X(zeCommandListReset)  \
    X(zeCommandListAppendEventReset) X(zeCommandQueueCreate)            \
    X(zeCommandQueueDestroy) X(zeCommandQueueExecuteCommandLists)       \
    X(zeCommandListAppendBarrier) X(zeCommandListAppendSignalEvent)     \
    X(zeCommandListAppendWaitOnEvents)                                  \
    X(zeEventPoolCreate) X(zeEventPoolDestroy)                          \
    X(zeEventCreate) X(zeEventDestroy) X(zeEventHostSynchronize)        \
    X(zeEventQueryStatus) X(zeEventHostReset) X(zeEventHostSignal)      \
    X(zeEventQueryKernelTimestamp)                                      \
    X(zeMemAllocDevice) X(zeMemAllocHost) X(zeMemFree)                  \
    X(zeMemGetAllocProperties) X(zeMemGetAddressRange)                  \
    X(zeCommandListAppendMemoryCopy) X(zeCommandListAppendMemoryFill)   \
    X(zeDeviceGetComputeProperties) X(zeModuleCreate) X(zeModuleDestroy) \
    X(zeModuleBuildLogDestroy) X(zeModuleBuildLogGetString)             \
    X(zeModuleGetKernelNames) X(zeKernelCreate) X(zeKernelDestroy)      \
    X(zeKernelGetProperties) X(zeKernelSetGroupSize)                    \
    X(zeKernelSetArgumentValue) X(zeCommandListAppendLaunchKernel)      \
    X(zesDeviceEnumMemoryModules) X(zesMemoryGetProperties)             \
    X(zesMemoryGetState) X(zesDevicePciGetProperties)                   \
    X(zeMemGetIpcHandle) X(zeMemOpenIpcHandle) X(zeMemCloseIpcHandle)   \
    X(zeEventPoolGetIpcHandle) X(zeEventPoolOpenIpcHandle)              \
    X(zeEventPoolCloseIpcHandle)

#define FAKE_ENUM(name) F_##name,
enum { FAKE_FUNCTIONS(FAKE_ENUM) F_COUNT };
#undef FAKE_ENUM
#define FAKE_NAME(name) {#name, NULL},
static const dc_fn function_names[F_COUNT] = {
    FAKE_FUNCTIONS(FAKE_NAME)
};
#undef FAKE_NAME

/* The shared layers' live kinds and detectors: memory's, then device
 * code's. */
static long long
fake_live_extra(const char *kind)
{
    long long n = dm_live(kind);
    return n >= 0 ? n : dk_live(kind);
}

static void
fake_reset_detectors(void)
{
    dm_reset_detectors();
    dk_reset_detectors();
}

/* Counters and faults: the control layer the doubles share. */
static atomic_llong g_calls[F_COUNT];
static atomic_llong g_live[K_KINDS];
static dc_control g_ctl = {
    DC_CONTROL_INIT("ze_test_driver", function_names, g_calls, kind_names,
                    g_live),
    .live_extra = fake_live_extra, /* "alloc", ..., "kernel_misuse" */
    .reset_detectors = fake_reset_detectors,
};

static struct {
    pthread_mutex_t lock;   /* guards everything below */
    pthread_cond_t cond;    /* broadcast on every state change */
    int ndrivers;
    int ndevices;           /* in all */
    int per_driver;         /* devices of each driver */
    uint32_t api_version;
    uint64_t total_mem;
    uint64_t used_mem;      /* taken by others, for Sysman's free memory */
    int sysman;             /* ZES_ENABLE_SYSMAN=1 was set at zeInit */
    fake_mem mems[FAKE_MAX_DEVICES];
    uint64_t timer_res;     /* ns per tick */
    uint32_t ts_bits;
    uint64_t ts_base;
    uint64_t t0;
    int integrated;
    uint32_t module_flags;
    int init_fail;
    fake_driver drivers[FAKE_MAX_DRIVERS];
    fake_device devices[FAKE_MAX_DEVICES];
    fake_obj *live[K_KINDS];
    /* The same objects as sets: every handle passed in is looked up, in
     * O(1) whatever the number of live objects. */
    dc_handles handles[K_KINDS];
    long long serial;
    int probe_pipe[2];      /* to test whether memory is readable */
} g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .probe_pipe = {-1, -1},
};

/* Helpers ------------------------------------------------------------- */

static uint64_t
mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t
to_ticks(uint64_t ns)
{
    uint64_t t = (ns - g.t0) / g.timer_res + g.ts_base;
    if (g.ts_bits < 64) {
        t &= (1ull << g.ts_bits) - 1;
    }
    return t;
}

/* Wait on g.cond until `deadline` (CLOCK_MONOTONIC ns; 0 = forever). */
static void
wait_until(uint64_t deadline)
{
    if (deadline == 0) {
        pthread_cond_wait(&g.cond, &g.lock);
        return;
    }
    struct timespec ts = {
        .tv_sec = (time_t)(deadline / 1000000000ull),
        .tv_nsec = (long)(deadline % 1000000000ull),
    };
    pthread_cond_timedwait(&g.cond, &g.lock, &ts);
}

/* Count a call and apply a pending fault. */
static ze_result_t
enter(int fn)
{
    int code;

    return dc_enter(&g_ctl, fn, &code) ? (ze_result_t)code
                                       : ZE_RESULT_SUCCESS;
}

#define ENTER(name)                                   \
    do {                                              \
        ze_result_t enter_r_ = enter(F_##name);       \
        if (enter_r_ != ZE_RESULT_SUCCESS) {          \
            return enter_r_;                          \
        }                                             \
    } while (0)

static void
obj_add(fake_obj *o, enum fake_kind kind)
{
    if (!dc_handles_add(&g.handles[kind], o)) {
        /* A few bytes of table; callers have already started threads. */
        fprintf(stderr, "ze_test_driver: out of memory for a handle\n");
        abort();
    }
    o->magic = FAKE_MAGIC;
    o->kind = kind;
    o->prev = NULL;
    o->next = g.live[kind];
    if (o->next != NULL) {
        o->next->prev = o;
    }
    g.live[kind] = o;
    dc_live_add(&g_ctl, kind, 1);
}

static void
obj_remove(fake_obj *o)
{
    if (!dc_handles_has(&g.handles[o->kind], o)) {
        return;
    }
    dc_handles_remove(&g.handles[o->kind], o);
    if (o->prev != NULL) {
        o->prev->next = o->next;
    }
    else {
        g.live[o->kind] = o->next;
    }
    if (o->next != NULL) {
        o->next->prev = o->prev;
    }
    dc_live_add(&g_ctl, o->kind, -1);
    o->magic = 0;
}

/* The live object `h` of `kind`, or NULL; never dereferences h unless it
 * is one of ours.  Call with g.lock held. */
static void *
obj_find(const void *h, enum fake_kind kind)
{
    return dc_handles_has(&g.handles[kind], h) ? (void *)h : NULL;
}

/* An event's state: its own, or its interprocess pool's shared cell
 * (signaled: the cell's latest record completed). */
static int
ev_signaled(const fake_event *e)
{
    return e->pool->cell != NULL ? dipc_cell_query(e->pool->cell)
                                 : e->signaled;
}

static void
ev_set_signaled(fake_event *e, int on)
{
    dipc_cell *c = e->pool->cell;
    if (c == NULL) {
        e->signaled = on;
    }
    else if (on) {
        dipc_cell_complete(c, dipc_cell_current(c));
    }
    else if (dipc_cell_query(c)) {
        (void)dipc_cell_record(c);
    }
}

/* ZE_RESULT_ERROR_INVALID_NULL_HANDLE for NULL, as the validation layer
 * says; INVALID_ARGUMENT for a handle that is not (or no longer) ours. */
static ze_result_t
bad_handle(const void *h)
{
    return h == NULL ? ZE_RESULT_ERROR_INVALID_NULL_HANDLE
                     : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

static fake_driver *
driver_of(ze_driver_handle_t h)
{
    for (int i = 0; i < g.ndrivers; i++) {
        if ((void *)&g.drivers[i] == (void *)h) {
            return &g.drivers[i];
        }
    }
    return NULL;
}

static fake_device *
device_of(ze_device_handle_t h)
{
    for (int i = 0; i < g.ndevices; i++) {
        if ((void *)&g.devices[i] == (void *)h) {
            return &g.devices[i];
        }
    }
    return NULL;
}

/* Configuration ------------------------------------------------------- */

static unsigned long long
env_ull(const char *name, unsigned long long dflt)
{
    unsigned long long v = dflt;

    dc_env_ull(&g_ctl, name, &v);
    return v;
}

static uint32_t
env_version(void)
{
    const char *s = getenv("FAKE_ZE_API_VERSION");
    if (s == NULL || *s == '\0') {
        return ZE_MAKE_VERSION(1, 4);
    }
    const char *dot = strchr(s, '.');
    if (dot != NULL) {
        unsigned major = (unsigned)strtoul(s, NULL, 10);
        unsigned minor = (unsigned)strtoul(dot + 1, NULL, 10);
        return ZE_MAKE_VERSION(major, minor);
    }
    return (uint32_t)strtoul(s, NULL, 0);
}

__attribute__((constructor)) static void
fake_configure(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g.cond, &attr);
    pthread_condattr_destroy(&attr);

    long long k = (long long)env_ull("FAKE_ZE_DRIVERS", 1);
    g.ndrivers = k < 1 ? 1 : k > FAKE_MAX_DRIVERS ? FAKE_MAX_DRIVERS
                                                  : (int)k;
    long long n = (long long)env_ull("FAKE_ZE_DEVICES", 2);
    long long most = FAKE_MAX_DEVICES / g.ndrivers;
    g.per_driver = n < 0 ? 0 : n > most ? (int)most : (int)n;
    g.ndevices = g.per_driver * g.ndrivers;
    for (int i = 0; i < FAKE_MAX_DRIVERS; i++) {
        g.drivers[i].index = i;
    }
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) {
        g.devices[i].index = i;
        g.devices[i].driver = g.per_driver ? i / g.per_driver : 0;
        g.mems[i].device = i;
    }
    g.used_mem = env_ull("FAKE_ZE_USED_MEM", 0);
    g.api_version = env_version();
    g.total_mem = env_ull("FAKE_ZE_TOTAL_MEM", 64ull << 30);
    g.timer_res = env_ull("FAKE_ZE_TIMER_RESOLUTION", 1);
    if (g.timer_res == 0) {
        g.timer_res = 1;
    }
    g.ts_bits = (uint32_t)env_ull("FAKE_ZE_TIMESTAMP_BITS", 32);
    g.ts_base = env_ull("FAKE_ZE_TIMESTAMP_BASE", 0);
    g.integrated = env_ull("FAKE_ZE_INTEGRATED", 0) != 0;
    g.module_flags = (uint32_t)env_ull("FAKE_ZE_MODULE_FLAGS",
                                       ZE_DEVICE_MODULE_FLAG_FP16
                                           | ZE_DEVICE_MODULE_FLAG_FP64);
    g.init_fail = env_ull("FAKE_ZE_INIT_FAIL", 0) != 0;
    g.t0 = mono_ns();
    dm_configure("ze_test_driver", g.total_mem);
    dc_env_faults(&g_ctl, "FAKE_ZE_FAIL");
}

/* Global, driver, device ---------------------------------------------- */

static ze_result_t
fake_zeInit(ze_init_flags_t flags)
{
    ENTER(zeInit);
    if (g.init_fail) {
        return ZE_RESULT_ERROR_UNINITIALIZED;
    }
    if (flags != 0 && !(flags & ZE_INIT_FLAG_GPU_ONLY)) {
        /* Only GPUs here: a VPU-only init finds nothing. */
        return ZE_RESULT_ERROR_UNINITIALIZED;
    }
    const char *sysman = getenv("ZES_ENABLE_SYSMAN");
    pthread_mutex_lock(&g.lock);
    g.sysman = sysman != NULL && strcmp(sysman, "1") == 0;
    pthread_mutex_unlock(&g.lock);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeDriverGet(uint32_t *pCount, ze_driver_handle_t *phDrivers)
{
    ENTER(zeDriverGet);
    if (pCount == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    uint32_t n = (uint32_t)g.ndrivers;
    if (*pCount == 0 || phDrivers == NULL) {
        *pCount = n;
        return ZE_RESULT_SUCCESS;
    }
    if (*pCount > n) {
        *pCount = n;
    }
    for (uint32_t i = 0; i < *pCount; i++) {
        phDrivers[i] = (ze_driver_handle_t)&g.drivers[i];
    }
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeDriverGetApiVersion(ze_driver_handle_t h, ze_api_version_t *version)
{
    ENTER(zeDriverGetApiVersion);
    if (driver_of(h) == NULL) {
        return bad_handle(h);
    }
    if (version == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    *version = (ze_api_version_t)g.api_version;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeDriverGetProperties(ze_driver_handle_t h, ze_driver_properties_t *p)
{
    ENTER(zeDriverGetProperties);
    if (driver_of(h) == NULL) {
        return bad_handle(h);
    }
    if (p == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    memset(p->uuid.id, 0, sizeof(p->uuid.id));
    memcpy(p->uuid.id, "fake-ze-driver", 14);
    p->uuid.id[15] = (uint8_t)driver_of(h)->index;
    p->driverVersion = 0x01000001u;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeDeviceGet(ze_driver_handle_t h, uint32_t *pCount,
                 ze_device_handle_t *phDevices)
{
    ENTER(zeDeviceGet);
    if (driver_of(h) == NULL) {
        return bad_handle(h);
    }
    if (pCount == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    uint32_t n = (uint32_t)g.per_driver;
    int first = driver_of(h)->index * g.per_driver;
    if (*pCount == 0 || phDevices == NULL) {
        *pCount = n;
        return ZE_RESULT_SUCCESS;
    }
    if (*pCount > n) {
        *pCount = n;
    }
    for (uint32_t i = 0; i < *pCount; i++) {
        phDevices[i] = (ze_device_handle_t)&g.devices[first + (int)i];
    }
    return ZE_RESULT_SUCCESS;
}

/* The checks and clearing of a device query's output struct (its stype
 * and pNext kept, as the caller set them). */
static ze_result_t
device_output(ze_device_handle_t h, void *out, size_t size)
{
    if (device_of(h) == NULL) {
        return bad_handle(h);
    }
    if (out == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    ze_base_properties_t head;
    memcpy(&head, out, sizeof(head));
    memset(out, 0, size);
    memcpy(out, &head, sizeof(head));
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeDeviceGetModuleProperties(ze_device_handle_t h,
                                 ze_device_module_properties_t *p)
{
    ENTER(zeDeviceGetModuleProperties);
    ze_result_t r = device_output(h, p, sizeof(*p));
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    p->spirvVersionSupported = (1u << 16) | 2u; /* 1.2 */
    p->flags = g.module_flags;
    p->fp16flags = (g.module_flags & ZE_DEVICE_MODULE_FLAG_FP16)
                       ? ZE_DEVICE_FP_FLAG_ROUND_TO_NEAREST : 0;
    p->fp32flags = ZE_DEVICE_FP_FLAG_ROUND_TO_NEAREST;
    p->fp64flags = (g.module_flags & ZE_DEVICE_MODULE_FLAG_FP64)
                       ? ZE_DEVICE_FP_FLAG_ROUND_TO_NEAREST : 0;
    p->maxArgumentsSize = 2048;
    p->printfBufferSize = 4u << 20;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeDeviceGetProperties(ze_device_handle_t h, ze_device_properties_t *p)
{
    ENTER(zeDeviceGetProperties);
    ze_result_t r = device_output(h, p, sizeof(*p));
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    fake_device *d = device_of(h);
    ze_structure_type_t stype = p->stype;
    p->type = ZE_DEVICE_TYPE_GPU;
    p->vendorId = 0x8086;
    p->deviceId = 0x0bd0 + (uint32_t)d->index;
    p->flags = g.integrated ? ZE_DEVICE_PROPERTY_FLAG_INTEGRATED : 0;
    p->coreClockRate = 1600;
    p->maxMemAllocSize = g.total_mem;
    p->maxHardwareContexts = 64;
    p->maxCommandQueuePriority = 2;
    p->numThreadsPerEU = 8;
    p->physicalEUSimdWidth = 16;
    p->numEUsPerSubslice = 8;
    p->numSubslicesPerSlice = 4;
    p->numSlices = 2;
    /* The plain stype means ns per tick; the 1.2 one means ticks/s. */
    p->timerResolution = stype == ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2
                             ? 1000000000ull / g.timer_res
                             : g.timer_res;
    p->timestampValidBits = 64;
    p->kernelTimestampValidBits = g.ts_bits;
    memcpy(p->uuid.id, "fake-ze-device", 14);
    p->uuid.id[15] = (uint8_t)d->index;
    snprintf(p->name, sizeof(p->name), "Fake XPU Device %d", d->index);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeDeviceGetMemoryProperties(ze_device_handle_t h, uint32_t *pCount,
                                 ze_device_memory_properties_t *p)
{
    ENTER(zeDeviceGetMemoryProperties);
    if (device_of(h) == NULL) {
        return bad_handle(h);
    }
    if (pCount == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (*pCount == 0 || p == NULL) {
        *pCount = 1;
        return ZE_RESULT_SUCCESS;
    }
    *pCount = 1;
    p->flags = 0;
    p->maxClockRate = 3200;
    p->maxBusWidth = 4096;
    p->totalSize = g.total_mem;
    snprintf(p->name, sizeof(p->name), "HBM");
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeDeviceGetCommandQueueGroupProperties(
    ze_device_handle_t h, uint32_t *pCount,
    ze_command_queue_group_properties_t *p)
{
    ENTER(zeDeviceGetCommandQueueGroupProperties);
    if (device_of(h) == NULL) {
        return bad_handle(h);
    }
    if (pCount == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (*pCount == 0 || p == NULL) {
        *pCount = 1;
        return ZE_RESULT_SUCCESS;
    }
    *pCount = 1;
    p->flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE
               | ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
    p->maxMemoryFillPatternSize = 128;
    p->numQueues = 4;
    return ZE_RESULT_SUCCESS;
}

/* Context ------------------------------------------------------------- */

static ze_result_t
fake_zeContextCreate(ze_driver_handle_t h, const ze_context_desc_t *desc,
                     ze_context_handle_t *out)
{
    ENTER(zeContextCreate);
    if (driver_of(h) == NULL) {
        return bad_handle(h);
    }
    if (desc == NULL || out == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    fake_context *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    c->driver = driver_of(h)->index;
    pthread_mutex_lock(&g.lock);
    obj_add(&c->obj, K_CONTEXT);
    pthread_mutex_unlock(&g.lock);
    *out = (ze_context_handle_t)c;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeContextDestroy(ze_context_handle_t h)
{
    ENTER(zeContextDestroy);
    pthread_mutex_lock(&g.lock);
    fake_context *c = obj_find(h, K_CONTEXT);
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (c == NULL) {
        r = bad_handle(h);
    }
    else if (c->children > 0) {
        r = ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    }
    else {
        obj_remove(&c->obj);
    }
    pthread_mutex_unlock(&g.lock);
    if (r == ZE_RESULT_SUCCESS) {
        free(c);
    }
    return r;
}

/* Command lists ------------------------------------------------------- */

static int
waits_done(const fake_cmd *c)
{
    for (uint32_t i = 0; i < c->nwait; i++) {
        if (!ev_signaled(c->wait[i])) {
            return 0;
        }
    }
    return 1;
}

/* Whether c waits on an interprocess event that has not signaled:
 * another process may signal it, waking no one here. */
static int
waits_on_ipc(const fake_cmd *c)
{
    for (uint32_t i = 0; i < c->nwait; i++) {
        if (c->wait[i]->pool->cell != NULL && !ev_signaled(c->wait[i])) {
            return 1;
        }
    }
    return 0;
}

static void
cmd_finish(fake_cmd *c, uint64_t now)
{
    if (c->kind == CMD_RESET) {
        ev_set_signaled(c->signal, 0);
        c->signal->ts_start = c->signal->ts_end = 0;
        c->signal->refs--;
    }
    else if (c->signal != NULL) {
        ev_set_signaled(c->signal, 1);
        c->signal->ts_start = to_ticks(c->start);
        c->signal->ts_end = to_ticks(now);
        c->signal->refs--;
    }
    for (uint32_t i = 0; i < c->nwait; i++) {
        c->wait[i]->refs--;
    }
    if (c->from != NULL) {
        c->from->executing--;
    }
    dm_op_release(&c->mem);
    if (c->launch != NULL) {
        dk_launch_free(c->launch);
    }
    free(c->wait);
    free(c);
    pthread_cond_broadcast(&g.cond);
}

/* Free commands that never ran (a regular list's record). */
static void
cmds_free(fake_cmd *c)
{
    while (c != NULL) {
        fake_cmd *next = c->next;
        dm_op_release(&c->mem);
        if (c->launch != NULL) {
            dk_launch_free(c->launch);
        }
        free(c->wait);
        free(c);
        c = next;
    }
}

static void *
list_worker(void *arg)
{
    fake_list *l = arg;
    pthread_mutex_lock(&g.lock);
    for (;;) {
        uint64_t now = mono_ns();
        uint64_t next = 0;
        for (fake_cmd **p = &l->running; *p != NULL;) {
            fake_cmd *c = *p;
            int finished = c->kind == CMD_GATE ? dc_gate_is_open((int)c->ns)
                                               : c->deadline <= now;
            if (finished) {
                *p = c->next;
                cmd_finish(c, now);
                continue;
            }
            if (c->kind != CMD_GATE && (next == 0 || c->deadline < next)) {
                next = c->deadline;
            }
            p = &c->next;
        }
        fake_cmd *c = l->head;
        if (c != NULL) {
            int after_all = l->in_order || c->kind == CMD_BARRIER;
            if ((!after_all || l->running == NULL) && waits_done(c)) {
                l->head = c->next;
                if (l->head == NULL) {
                    l->tail = NULL;
                }
                c->start = now;
                if (c->kind == CMD_MEMORY) {
                    dm_op_run(&c->mem);
                }
                else if (c->kind == CMD_KERNEL) {
                    /* Short test kernels: run under the lock, as copies. */
                    dk_launch_run(c->launch,
                                  "zeCommandListAppendLaunchKernel");
                }
                if ((c->kind == CMD_SLEEP && c->ns > 0)
                    || c->kind == CMD_GATE) {
                    c->deadline = now + c->ns;
                    c->next = l->running;
                    l->running = c;
                }
                else {
                    cmd_finish(c, now);
                }
                continue;
            }
            if (waits_on_ipc(c)
                && (next == 0 || now + FAKE_IPC_POLL_NS < next)) {
                next = now + FAKE_IPC_POLL_NS;
            }
        }
        else if (l->stop && l->running == NULL) {
            break;
        }
        wait_until(next);
    }
    pthread_mutex_unlock(&g.lock);
    return NULL;
}

static ze_result_t list_create(ze_context_handle_t hc, ze_device_handle_t hd,
                               uint32_t ordinal, int in_order, int regular,
                               enum fake_kind kind, void **out);

static ze_result_t
queue_desc_check(const ze_command_queue_desc_t *desc)
{
    if (desc->index >= 4) {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    if (desc->mode > ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS
        || desc->priority > ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH) {
        return ZE_RESULT_ERROR_INVALID_ENUMERATION;
    }
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeCommandListCreateImmediate(ze_context_handle_t hc,
                                  ze_device_handle_t hd,
                                  const ze_command_queue_desc_t *desc,
                                  ze_command_list_handle_t *out)
{
    ENTER(zeCommandListCreateImmediate);
    if (desc == NULL || out == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    ze_result_t r = queue_desc_check(desc);
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    return list_create(hc, hd, desc->ordinal,
                       (desc->flags & FAKE_FLAG_IN_ORDER) != 0, 0, K_LIST,
                       (void **)out);
}

/* Forget l (idle; g.lock held, released here) and free it. */
static ze_result_t
list_release_locked(fake_list *l)
{
    obj_remove(&l->obj);
    l->ctx->children--;
    l->stop = 1;
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.lock);
    if (l->regular) {
        cmds_free(l->head);
    }
    else {
        pthread_join(l->worker, NULL);
    }
    free(l);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeCommandListDestroy(ze_command_list_handle_t h)
{
    ENTER(zeCommandListDestroy);
    pthread_mutex_lock(&g.lock);
    fake_list *l = obj_find(h, K_LIST);
    if (l == NULL) {
        pthread_mutex_unlock(&g.lock);
        return bad_handle(h);
    }
    if (l->regular ? l->executing > 0
                   : l->head != NULL || l->running != NULL) {
        /* The spec leaves this undefined; failing shows the bug. */
        pthread_mutex_unlock(&g.lock);
        return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    }
    return list_release_locked(l);
}

/* Queue a command on l.  Call with g.lock held; validates the events. */
static ze_result_t
append_locked_op(fake_list *l, enum cmd_kind kind, uint64_t ns,
                 const dm_op *mem, ze_event_handle_t signal, uint32_t nwait,
                 ze_event_handle_t *wait)
{
    fake_event *sev = NULL;
    if (l->regular && l->closed) {
        /* Closed for execution: reset it before appending again. */
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    if (signal != NULL) {
        sev = obj_find(signal, K_EVENT);
        if (sev == NULL || sev->pool->ctx != l->ctx) {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
    }
    if (nwait > 0 && wait == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    for (uint32_t i = 0; i < nwait; i++) {
        fake_event *w = obj_find(wait[i], K_EVENT);
        if (w == NULL || w->pool->ctx != l->ctx) {
            return bad_handle(wait[i]);
        }
    }
    fake_cmd *c = calloc(1, sizeof(*c));
    fake_event **ws = nwait > 0 ? calloc(nwait, sizeof(*ws)) : NULL;
    if (c == NULL || (nwait > 0 && ws == NULL)) {
        free(c);
        free(ws);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    c->kind = kind;
    c->ns = ns;
    if (mem != NULL) {
        c->mem = *mem;
    }
    c->signal = sev;
    /* A recorded command uses its events only when executed. */
    if (sev != NULL && !l->regular) {
        sev->refs++;
    }
    c->nwait = nwait;
    c->wait = ws;
    for (uint32_t i = 0; i < nwait; i++) {
        ws[i] = obj_find(wait[i], K_EVENT);
        if (!l->regular) {
            ws[i]->refs++;
        }
    }
    if (l->tail != NULL) {
        l->tail->next = c;
    }
    else {
        l->head = c;
    }
    l->tail = c;
    pthread_cond_broadcast(&g.cond);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
append_locked(fake_list *l, enum cmd_kind kind, uint64_t ns,
              ze_event_handle_t signal, uint32_t nwait,
              ze_event_handle_t *wait)
{
    return append_locked_op(l, kind, ns, NULL, signal, nwait, wait);
}

static ze_result_t
append(ze_command_list_handle_t h, enum cmd_kind kind,
       ze_event_handle_t signal, uint32_t nwait, ze_event_handle_t *wait)
{
    pthread_mutex_lock(&g.lock);
    fake_list *l = obj_find(h, K_LIST);
    ze_result_t r = l == NULL ? bad_handle(h)
                              : append_locked(l, kind, 0, signal, nwait,
                                              wait);
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeCommandListAppendBarrier(ze_command_list_handle_t h,
                                ze_event_handle_t signal, uint32_t nwait,
                                ze_event_handle_t *wait)
{
    ENTER(zeCommandListAppendBarrier);
    return append(h, CMD_BARRIER, signal, nwait, wait);
}

static ze_result_t
fake_zeCommandListAppendSignalEvent(ze_command_list_handle_t h,
                                    ze_event_handle_t ev)
{
    ENTER(zeCommandListAppendSignalEvent);
    if (ev == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    }
    return append(h, CMD_SIGNAL, ev, 0, NULL);
}

static ze_result_t
fake_zeCommandListAppendWaitOnEvents(ze_command_list_handle_t h,
                                     uint32_t n, ze_event_handle_t *evs)
{
    ENTER(zeCommandListAppendWaitOnEvents);
    if (evs == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    return append(h, CMD_WAIT, NULL, n, evs);
}

static ze_result_t
fake_zeCommandListAppendEventReset(ze_command_list_handle_t h,
                                   ze_event_handle_t ev)
{
    ENTER(zeCommandListAppendEventReset);
    if (ev == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    }
    return append(h, CMD_RESET, ev, 0, NULL);
}

/* Regular command lists and command queues ----------------------------- */

/* A new list (immediate, queue or regular) on device hd of context hc,
 * for queue group `ordinal`; a worker thread unless regular. */
static ze_result_t
list_create(ze_context_handle_t hc, ze_device_handle_t hd, uint32_t ordinal,
            int in_order, int regular, enum fake_kind kind, void **out)
{
    fake_list *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    pthread_mutex_lock(&g.lock);
    fake_context *c = obj_find(hc, K_CONTEXT);
    fake_device *d = device_of(hd);
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (c == NULL) {
        r = bad_handle(hc);
    }
    else if (d == NULL) {
        r = bad_handle(hd);
    }
    else if (d->driver != c->driver || ordinal != 0) {
        r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    if (r == ZE_RESULT_SUCCESS) {
        l->ctx = c;
        l->device = d->index;
        /* Before 1.7 the flag means nothing (see CreateImmediate). */
        l->in_order = g.api_version >= ZE_MAKE_VERSION(1, 7) && in_order;
        l->regular = regular;
        l->serial = ++g.serial;
        if (!regular
            && pthread_create(&l->worker, NULL, list_worker, l) != 0) {
            r = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
    }
    if (r == ZE_RESULT_SUCCESS) {
        obj_add(&l->obj, kind);
        c->children++;
        *out = l;
    }
    pthread_mutex_unlock(&g.lock);
    if (r != ZE_RESULT_SUCCESS) {
        free(l);
    }
    return r;
}

static ze_result_t
fake_zeCommandListCreate(ze_context_handle_t hc, ze_device_handle_t hd,
                         const ze_command_list_desc_t *desc,
                         ze_command_list_handle_t *out)
{
    ENTER(zeCommandListCreate);
    if (desc == NULL || out == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (desc->flags > 0xf) {
        return ZE_RESULT_ERROR_INVALID_ENUMERATION;
    }
    /* ZE_COMMAND_LIST_FLAG_IN_ORDER is 1 << 3 (spec 1.7). */
    return list_create(hc, hd, desc->commandQueueGroupOrdinal,
                       (desc->flags & (1u << 3)) != 0, 1, K_LIST,
                       (void **)out);
}

static ze_result_t
fake_zeCommandListClose(ze_command_list_handle_t h)
{
    ENTER(zeCommandListClose);
    pthread_mutex_lock(&g.lock);
    fake_list *l = obj_find(h, K_LIST);
    ze_result_t r = l == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
    if (l != NULL && !l->regular) {
        /* An immediate list runs as it goes: nothing to close. */
        r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    else if (l != NULL) {
        l->closed = 1;
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeCommandListReset(ze_command_list_handle_t h)
{
    ENTER(zeCommandListReset);
    pthread_mutex_lock(&g.lock);
    fake_list *l = obj_find(h, K_LIST);
    fake_cmd *old = NULL;
    ze_result_t r = l == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
    if (l != NULL && (!l->regular || l->executing > 0)) {
        /* The spec forbids resetting a list the device still runs. */
        r = l->regular ? ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE
                       : ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    else if (l != NULL) {
        old = l->head;
        l->head = l->tail = NULL;
        l->closed = 0;
    }
    pthread_mutex_unlock(&g.lock);
    cmds_free(old);
    return r;
}

static ze_result_t
fake_zeCommandQueueCreate(ze_context_handle_t hc, ze_device_handle_t hd,
                          const ze_command_queue_desc_t *desc,
                          ze_command_queue_handle_t *out)
{
    ENTER(zeCommandQueueCreate);
    if (desc == NULL || out == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    ze_result_t r = queue_desc_check(desc);
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    return list_create(hc, hd, desc->ordinal,
                       (desc->flags & FAKE_FLAG_IN_ORDER) != 0, 0, K_QUEUE,
                       (void **)out);
}

static ze_result_t
fake_zeCommandQueueDestroy(ze_command_queue_handle_t h)
{
    ENTER(zeCommandQueueDestroy);
    pthread_mutex_lock(&g.lock);
    fake_list *q = obj_find(h, K_QUEUE);
    if (q == NULL) {
        pthread_mutex_unlock(&g.lock);
        return bad_handle(h);
    }
    if (q->head != NULL || q->running != NULL) {
        pthread_mutex_unlock(&g.lock);
        return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    }
    return list_release_locked(q);
}

/* Whether every event l's record names is still alive (g.lock held). */
static int
record_events_live(const fake_list *l)
{
    for (const fake_cmd *c = l->head; c != NULL; c = c->next) {
        if (c->signal != NULL && obj_find(c->signal, K_EVENT) == NULL) {
            return 0;
        }
        for (uint32_t i = 0; i < c->nwait; i++) {
            if (obj_find(c->wait[i], K_EVENT) == NULL) {
                return 0;
            }
        }
    }
    return 1;
}

/* Queue a copy of each command of regular list l on queue q (g.lock
 * held; checked already). */
static ze_result_t
execute_locked(fake_list *q, fake_list *l)
{
    for (const fake_cmd *c = l->head; c != NULL; c = c->next) {
        fake_event *sig = c->signal;
        ze_event_handle_t waits[c->nwait > 0 ? c->nwait : 1];
        for (uint32_t i = 0; i < c->nwait; i++) {
            waits[i] = (ze_event_handle_t)c->wait[i];
        }
        dk_launch *launch = NULL;
        if (c->launch != NULL
            && (launch = dk_launch_copy(c->launch, true)) == NULL) {
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
        ze_result_t r = append_locked_op(
            q, c->kind, c->ns,
            c->kind == CMD_MEMORY ? &c->mem : NULL,
            (ze_event_handle_t)sig, c->nwait, waits);
        if (r != ZE_RESULT_SUCCESS) {
            if (launch != NULL) {
                dk_launch_free(launch);
            }
            return r;
        }
        /* The appended copy is q's tail. */
        q->tail->from = l;
        q->tail->launch = launch;
        l->executing++;
    }
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeCommandQueueExecuteCommandLists(ze_command_queue_handle_t h,
                                       uint32_t n,
                                       ze_command_list_handle_t *lists,
                                       ze_fence_handle_t fence)
{
    ENTER(zeCommandQueueExecuteCommandLists);
    if (lists == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (n == 0) {
        return ZE_RESULT_ERROR_INVALID_SIZE;
    }
    if (fence != NULL) {
        /* This driver makes no fences: not one of ours. */
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&g.lock);
    fake_list *q = obj_find(h, K_QUEUE);
    ze_result_t r = q == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
    /* Check them all first: a refused call executes nothing. */
    for (uint32_t i = 0; i < n && r == ZE_RESULT_SUCCESS; i++) {
        fake_list *l = obj_find(lists[i], K_LIST);
        if (l == NULL) {
            r = bad_handle(lists[i]);
        }
        else if (!l->regular) {
            r = ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE;
        }
        else if (!l->closed || l->ctx != q->ctx || l->device != q->device
                 || !record_events_live(l)) {
            r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
    }
    for (uint32_t i = 0; i < n && r == ZE_RESULT_SUCCESS; i++) {
        r = execute_locked(q, obj_find(lists[i], K_LIST));
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

/* Event pools and events ---------------------------------------------- */

static ze_result_t
fake_zeEventPoolCreate(ze_context_handle_t hc,
                       const ze_event_pool_desc_t *desc, uint32_t ndev,
                       ze_device_handle_t *devs, ze_event_pool_handle_t *out)
{
    ENTER(zeEventPoolCreate);
    if (desc == NULL || out == NULL || (ndev > 0 && devs == NULL)) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (desc->count == 0) {
        return ZE_RESULT_ERROR_INVALID_SIZE;
    }
    if (desc->flags > 0x7) {
        return ZE_RESULT_ERROR_INVALID_ENUMERATION;
    }
    int ipc = (desc->flags & ZE_EVENT_POOL_FLAG_IPC) != 0;
    if (ipc && desc->count != 1) {
        /* One shared cell per pool: this double's limit. */
        return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    }
    fake_pool *p = calloc(1, sizeof(*p));
    unsigned char *used = calloc(desc->count, 1);
    dipc_cell *cell = ipc ? dipc_cell_create() : NULL;
    if (p == NULL || used == NULL || (ipc && cell == NULL)) {
        free(p);
        free(used);
        if (cell != NULL) {
            dipc_cell_release(cell);
        }
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    pthread_mutex_lock(&g.lock);
    fake_context *c = obj_find(hc, K_CONTEXT);
    ze_result_t r = c == NULL ? bad_handle(hc) : ZE_RESULT_SUCCESS;
    for (uint32_t i = 0; r == ZE_RESULT_SUCCESS && i < ndev; i++) {
        fake_device *d = device_of(devs[i]);
        if (d == NULL) {
            r = bad_handle(devs[i]);
        }
        else if (d->driver != c->driver) {
            r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
    }
    if (r == ZE_RESULT_SUCCESS) {
        p->ctx = c;
        p->flags = desc->flags;
        p->count = desc->count;
        p->used = used;
        p->cell = cell;
        obj_add(&p->obj, K_POOL);
        c->children++;
        *out = (ze_event_pool_handle_t)p;
    }
    pthread_mutex_unlock(&g.lock);
    if (r != ZE_RESULT_SUCCESS) {
        free(p);
        free(used);
        if (cell != NULL) {
            dipc_cell_release(cell);
        }
    }
    return r;
}

/* Forget pool p (no live events; g.lock held) and free it after the
 * caller unlocks. */
static void
pool_remove_locked(fake_pool *p)
{
    obj_remove(&p->obj);
    p->ctx->children--;
}

static void
pool_free(fake_pool *p)
{
    if (p->cell != NULL) {
        dipc_cell_release(p->cell);
    }
    free(p->used);
    free(p);
}

static ze_result_t
fake_zeEventPoolDestroy(ze_event_pool_handle_t h)
{
    ENTER(zeEventPoolDestroy);
    pthread_mutex_lock(&g.lock);
    fake_pool *p = obj_find(h, K_POOL);
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (p == NULL) {
        r = bad_handle(h);
    }
    else if (p->imported) {
        /* The spec: closed with zeEventPoolCloseIpcHandle instead. */
        r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    else if (p->events > 0) {
        r = ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    }
    else {
        pool_remove_locked(p);
    }
    pthread_mutex_unlock(&g.lock);
    if (r == ZE_RESULT_SUCCESS) {
        pool_free(p);
    }
    return r;
}

/* The interprocess handle of pool h: its cell's (double_ipc.h), whose
 * first bytes hold the cell's descriptor here, as an int (Intel's
 * driver: the event pool's dma-buf). */
static ze_result_t
fake_zeEventPoolGetIpcHandle(ze_event_pool_handle_t h,
                             ze_ipc_event_pool_handle_t *phIpc)
{
    ENTER(zeEventPoolGetIpcHandle);
    if (phIpc == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    fake_pool *p = obj_find(h, K_POOL);
    ze_result_t r = ZE_RESULT_SUCCESS;
    unsigned char out[DIPC_HANDLE_BYTES];
    int fd = -1;
    if (p == NULL) {
        r = bad_handle(h);
    }
    else if (p->cell == NULL || p->imported
             || !dipc_cell_export(p->cell, out, &fd)) {
        /* Intel's driver: a pool made without ZE_EVENT_POOL_FLAG_IPC. */
        r = ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    }
    pthread_mutex_unlock(&g.lock);
    if (r == ZE_RESULT_SUCCESS) {
        _Static_assert(sizeof(phIpc->data) == DIPC_HANDLE_BYTES,
                       "Level Zero's handle holds the double's");
        memcpy(phIpc->data, out, sizeof(phIpc->data));
        memcpy(phIpc->data, &fd, sizeof(fd));
    }
    return r;
}

static ze_result_t
ipc_result(enum dipc_result r)
{
    return r == DIPC_OK ? ZE_RESULT_SUCCESS
           : r == DIPC_NO_MEMORY ? ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
                                 : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

/* The descriptor an event pool handle holds: an int in its first bytes,
 * a descriptor of this process (the importer wrote its copy there). */
static int
handle_fd_int(const char *data)
{
    int fd;
    memcpy(&fd, data, sizeof(fd));
    return fd < 0 ? INT32_MAX : fd;
}

static ze_result_t
fake_zeEventPoolOpenIpcHandle(ze_context_handle_t hc,
                              ze_ipc_event_pool_handle_t hIpc,
                              ze_event_pool_handle_t *phEventPool)
{
    ENTER(zeEventPoolOpenIpcHandle);
    if (phEventPool == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    int known = obj_find(hc, K_CONTEXT) != NULL;
    pthread_mutex_unlock(&g.lock);
    if (!known) {
        return bad_handle(hc);
    }
    dipc_cell *cell = NULL;
    ze_result_t r = ipc_result(dipc_cell_open(
        (const unsigned char *)hIpc.data, handle_fd_int(hIpc.data), &cell));
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    fake_pool *p = calloc(1, sizeof(*p));
    unsigned char *used = calloc(1, 1);
    if (p == NULL || used == NULL) {
        free(p);
        free(used);
        dipc_cell_release(cell);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    pthread_mutex_lock(&g.lock);
    fake_context *c = obj_find(hc, K_CONTEXT);
    if (c == NULL) {
        r = bad_handle(hc);
    }
    else {
        p->ctx = c;
        p->flags = ZE_EVENT_POOL_FLAG_IPC | ZE_EVENT_POOL_FLAG_HOST_VISIBLE;
        p->count = 1;
        p->used = used;
        p->cell = cell;
        p->imported = 1;
        obj_add(&p->obj, K_POOL);
        c->children++;
        *phEventPool = (ze_event_pool_handle_t)p;
    }
    pthread_mutex_unlock(&g.lock);
    if (r != ZE_RESULT_SUCCESS) {
        p->cell = cell;
        pool_free(p);
    }
    return r;
}

static ze_result_t
fake_zeEventPoolCloseIpcHandle(ze_event_pool_handle_t h)
{
    ENTER(zeEventPoolCloseIpcHandle);
    pthread_mutex_lock(&g.lock);
    fake_pool *p = obj_find(h, K_POOL);
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (p == NULL) {
        r = bad_handle(h);
    }
    else if (!p->imported) {
        /* Not opened from a handle: zeEventPoolDestroy's. */
        r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    else if (p->events > 0) {
        r = ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    }
    else {
        pool_remove_locked(p);
    }
    pthread_mutex_unlock(&g.lock);
    if (r == ZE_RESULT_SUCCESS) {
        pool_free(p);
    }
    return r;
}

static ze_result_t
fake_zeEventCreate(ze_event_pool_handle_t h, const ze_event_desc_t *desc,
                   ze_event_handle_t *out)
{
    ENTER(zeEventCreate);
    if (desc == NULL || out == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    fake_event *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    pthread_mutex_lock(&g.lock);
    fake_pool *p = obj_find(h, K_POOL);
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (p == NULL) {
        r = bad_handle(h);
    }
    else if (desc->index >= p->count || p->used[desc->index]) {
        r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    if (r == ZE_RESULT_SUCCESS) {
        e->pool = p;
        e->index = desc->index;
        p->used[desc->index] = 1;
        p->events++;
        obj_add(&e->obj, K_EVENT);
        *out = (ze_event_handle_t)e;
        /* A new event is reset; one of an opened pool is the exporter's
         * and keeps its state. */
        if (!p->imported) {
            ev_set_signaled(e, 0);
        }
    }
    pthread_mutex_unlock(&g.lock);
    if (r != ZE_RESULT_SUCCESS) {
        free(e);
    }
    return r;
}

static ze_result_t
fake_zeEventDestroy(ze_event_handle_t h)
{
    ENTER(zeEventDestroy);
    pthread_mutex_lock(&g.lock);
    fake_event *e = obj_find(h, K_EVENT);
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (e == NULL) {
        r = bad_handle(h);
    }
    else if (e->refs > 0) {
        r = ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    }
    else {
        obj_remove(&e->obj);
        e->pool->used[e->index] = 0;
        e->pool->events--;
    }
    pthread_mutex_unlock(&g.lock);
    if (r == ZE_RESULT_SUCCESS) {
        free(e);
    }
    return r;
}

static ze_result_t
fake_zeEventHostSynchronize(ze_event_handle_t h, uint64_t timeout)
{
    ENTER(zeEventHostSynchronize);
    uint64_t deadline = 0;
    if (timeout != UINT64_MAX) {
        deadline = mono_ns() + timeout;
    }
    pthread_mutex_lock(&g.lock);
    ze_result_t r;
    for (;;) {
        fake_event *e = obj_find(h, K_EVENT);
        if (e == NULL) {
            r = bad_handle(h);
            break;
        }
        if (ev_signaled(e)) {
            r = ZE_RESULT_SUCCESS;
            break;
        }
        uint64_t now = mono_ns();
        if (deadline != 0 && now >= deadline) {
            r = ZE_RESULT_NOT_READY;
            break;
        }
        uint64_t until = deadline;
        if (e->pool->cell != NULL
            && (until == 0 || now + FAKE_IPC_POLL_NS < until)) {
            until = now + FAKE_IPC_POLL_NS;
        }
        wait_until(until);
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeEventQueryStatus(ze_event_handle_t h)
{
    ENTER(zeEventQueryStatus);
    pthread_mutex_lock(&g.lock);
    fake_event *e = obj_find(h, K_EVENT);
    ze_result_t r = e == NULL ? bad_handle(h)
                    : ev_signaled(e) ? ZE_RESULT_SUCCESS
                                  : ZE_RESULT_NOT_READY;
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeEventHostReset(ze_event_handle_t h)
{
    ENTER(zeEventHostReset);
    pthread_mutex_lock(&g.lock);
    fake_event *e = obj_find(h, K_EVENT);
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (e == NULL) {
        r = bad_handle(h);
    }
    else if (e->refs > 0) {
        /* A pending signal would set it again, a pending wait would miss
         * it: the spec forbids resetting an event the device uses. */
        r = ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
    }
    else {
        ev_set_signaled(e, 0);
        e->ts_start = e->ts_end = 0;
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeEventHostSignal(ze_event_handle_t h)
{
    ENTER(zeEventHostSignal);
    pthread_mutex_lock(&g.lock);
    fake_event *e = obj_find(h, K_EVENT);
    ze_result_t r = e == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
    if (e != NULL) {
        uint64_t now = mono_ns();
        ev_set_signaled(e, 1);
        e->ts_start = e->ts_end = to_ticks(now);
        pthread_cond_broadcast(&g.cond);
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeEventQueryKernelTimestamp(ze_event_handle_t h,
                                 ze_kernel_timestamp_result_t *dst)
{
    ENTER(zeEventQueryKernelTimestamp);
    if (dst == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    fake_event *e = obj_find(h, K_EVENT);
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (e == NULL) {
        r = bad_handle(h);
    }
    else if (!(e->pool->flags & ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP)) {
        r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    else if (!ev_signaled(e)) {
        r = ZE_RESULT_NOT_READY;
    }
    else {
        dst->global.kernelStart = e->ts_start;
        dst->global.kernelEnd = e->ts_end;
        dst->context = dst->global;
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

/* Memory --------------------------------------------------------------- */

/* Device and host memory are double_memory.c's (shared with the CUDA
 * double).  As in Level Zero, a copy reads and writes ordinary host
 * memory when it runs, not when it is appended (nothing is staged), and
 * zeMemFree frees at once whatever still uses the memory. */

static ze_result_t
mem_result(enum dm_result r)
{
    return r == DM_OK ? ZE_RESULT_SUCCESS
           : r == DM_OUT_OF_MEMORY ? ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
                                   : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

static ze_result_t
check_alloc(ze_context_handle_t hc, const void *desc, size_t size,
            size_t alignment, void **pptr)
{
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (desc == NULL || pptr == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (size == 0) {
        return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    }
    if (alignment & (alignment - 1)) {
        return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
    }
    pthread_mutex_lock(&g.lock);
    if (obj_find(hc, K_CONTEXT) == NULL) {
        r = bad_handle(hc);
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeMemAllocDevice(ze_context_handle_t hc,
                      const ze_device_mem_alloc_desc_t *desc, size_t size,
                      size_t alignment, ze_device_handle_t hd, void **pptr)
{
    ENTER(zeMemAllocDevice);
    ze_result_t r = check_alloc(hc, desc, size, alignment, pptr);
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    if (desc->stype != ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC) {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&g.lock);
    fake_device *d = device_of(hd);
    pthread_mutex_unlock(&g.lock);
    if (d == NULL) {
        return bad_handle(hd);
    }
    unsigned long long addr;
    r = mem_result(dm_alloc(d->index, size, false, &addr));
    if (r == ZE_RESULT_SUCCESS) {
        *pptr = (void *)(uintptr_t)addr;
    }
    return r;
}

static ze_result_t
fake_zeMemAllocHost(ze_context_handle_t hc,
                    const ze_host_mem_alloc_desc_t *desc, size_t size,
                    size_t alignment, void **pptr)
{
    ENTER(zeMemAllocHost);
    ze_result_t r = check_alloc(hc, desc, size, alignment, pptr);
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    if (desc->stype != ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC) {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    unsigned long long addr;
    r = dm_alloc(0, size, true, &addr) == DM_OK
            ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    if (r == ZE_RESULT_SUCCESS) {
        *pptr = (void *)(uintptr_t)addr;
    }
    return r;
}

static ze_result_t
fake_zeMemFree(ze_context_handle_t hc, void *ptr)
{
    ENTER(zeMemFree);
    if (ptr == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    int known = obj_find(hc, K_CONTEXT) != NULL;
    pthread_mutex_unlock(&g.lock);
    if (!known) {
        return bad_handle(hc);
    }
    int device;
    int host = dm_lookup((uintptr_t)ptr, &device) == 2;
    return mem_result(dm_free("zeMemFree", (uintptr_t)ptr, host));
}

static ze_result_t
fake_zeMemGetAllocProperties(ze_context_handle_t hc, const void *ptr,
                             ze_memory_allocation_properties_t *props,
                             ze_device_handle_t *phDevice)
{
    ENTER(zeMemGetAllocProperties);
    if (ptr == NULL || props == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    int known = obj_find(hc, K_CONTEXT) != NULL;
    pthread_mutex_unlock(&g.lock);
    if (!known) {
        return bad_handle(hc);
    }
    int device = -1;
    int kind = dm_lookup((uintptr_t)ptr, &device);
    props->type = kind == 1 ? ZE_MEMORY_TYPE_DEVICE
                  : kind == 2 ? ZE_MEMORY_TYPE_HOST : ZE_MEMORY_TYPE_UNKNOWN;
    props->id = (uint64_t)(uintptr_t)ptr;
    props->pageSize = 4096;
    if (phDevice != NULL) {
        *phDevice = kind == 1 ? (ze_device_handle_t)&g.devices[device]
                              : NULL;
    }
    return ZE_RESULT_SUCCESS;
}

/* Intel's driver (compute-runtime): the allocation holding ptr among the
 * context's driver's (its unified shared memory manager is per driver),
 * ZE_RESULT_ERROR_UNKNOWN for an address in none; either output may be
 * NULL. */
static ze_result_t
fake_zeMemGetAddressRange(ze_context_handle_t hc, const void *ptr,
                          void **pBase, size_t *pSize)
{
    ENTER(zeMemGetAddressRange);
    pthread_mutex_lock(&g.lock);
    fake_context *c = obj_find(hc, K_CONTEXT);
    int driver = c != NULL ? c->driver : -1;
    pthread_mutex_unlock(&g.lock);
    if (c == NULL) {
        return bad_handle(hc);
    }
    if (ptr == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    dm_range r = dm_query((uintptr_t)ptr);
    if (r.kind == 0 || (r.kind == 1 && g.devices[r.device].driver != driver)) {
        return ZE_RESULT_ERROR_UNKNOWN;
    }
    if (pBase != NULL) {
        *pBase = (void *)(uintptr_t)r.base;
    }
    if (pSize != NULL) {
        *pSize = (size_t)r.size;
    }
    return ZE_RESULT_SUCCESS;
}

/* The driver of live context hc, or -1. */
static int
context_driver(ze_context_handle_t hc)
{
    pthread_mutex_lock(&g.lock);
    fake_context *c = obj_find(hc, K_CONTEXT);
    int driver = c != NULL ? c->driver : -1;
    pthread_mutex_unlock(&g.lock);
    return driver;
}

/* The handle of the device allocation at ptr (its base): the double's
 * (double_ipc.h), whose first 8 bytes hold the allocation's descriptor
 * here as a uint64_t, where Intel's driver puts its dma-buf's. */
static ze_result_t
fake_zeMemGetIpcHandle(ze_context_handle_t hc, const void *ptr,
                       ze_ipc_mem_handle_t *pIpcHandle)
{
    ENTER(zeMemGetIpcHandle);
    int driver = context_driver(hc);
    if (driver < 0) {
        return bad_handle(hc);
    }
    if (ptr == NULL || pIpcHandle == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    dm_range range = dm_query((uintptr_t)ptr);
    if (range.kind != 1 || g.devices[range.device].driver != driver) {
        /* Intel's driver: memory its context does not know. */
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    unsigned char out[DIPC_HANDLE_BYTES];
    int fd = -1;
    ze_result_t r = ipc_result(dm_ipc_export((uintptr_t)ptr, out, &fd));
    if (r == ZE_RESULT_SUCCESS) {
        _Static_assert(sizeof(pIpcHandle->data) == DIPC_HANDLE_BYTES,
                       "Level Zero's handle holds the double's");
        uint64_t wide = (uint64_t)fd;
        memcpy(pIpcHandle->data, out, sizeof(pIpcHandle->data));
        memcpy(pIpcHandle->data, &wide, sizeof(wide));
    }
    return r;
}

static ze_result_t
fake_zeMemOpenIpcHandle(ze_context_handle_t hc, ze_device_handle_t hd,
                        ze_ipc_mem_handle_t handle,
                        ze_ipc_memory_flags_t flags, void **pptr)
{
    ENTER(zeMemOpenIpcHandle);
    int driver = context_driver(hc);
    if (driver < 0) {
        return bad_handle(hc);
    }
    fake_device *d = device_of(hd);
    if (d == NULL) {
        return bad_handle(hd);
    }
    if (flags > (ZE_IPC_MEMORY_FLAG_BIAS_CACHED
                 | ZE_IPC_MEMORY_FLAG_BIAS_UNCACHED)) {
        return ZE_RESULT_ERROR_INVALID_ENUMERATION;
    }
    if (pptr == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (d->driver != driver) {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    /* The descriptor is read as one of this process. */
    uint64_t wide;
    memcpy(&wide, handle.data, sizeof(wide));
    int fd = wide <= (uint64_t)INT32_MAX ? (int)wide : INT32_MAX;
    unsigned long long addr = 0;
    ze_result_t r = ipc_result(dm_ipc_open(
        d->index, (const unsigned char *)handle.data, fd, &addr));
    if (r == ZE_RESULT_SUCCESS) {
        *pptr = (void *)(uintptr_t)addr;
    }
    return r;
}

static ze_result_t
fake_zeMemCloseIpcHandle(ze_context_handle_t hc, const void *ptr)
{
    ENTER(zeMemCloseIpcHandle);
    if (context_driver(hc) < 0) {
        return bad_handle(hc);
    }
    if (ptr == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    return dm_ipc_close("zeMemCloseIpcHandle", (uintptr_t)ptr)
               ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

/* Queue a copy or fill on list h (after checking its device sides). */
static ze_result_t
append_memory(const char *api, ze_command_list_handle_t h, dm_op *op,
              ze_event_handle_t signal, uint32_t nwait,
              ze_event_handle_t *wait)
{
    if ((op->dst.kind == DM_DEVICE
         && !dm_check_device(api, op->dst.addr, op->bytes, -1))
        || (!op->fill && op->src.kind == DM_DEVICE
            && !dm_check_device(api, op->src.addr, op->bytes, -1))) {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&g.lock);
    fake_list *l = obj_find(h, K_LIST);
    ze_result_t r = l == NULL ? bad_handle(h)
                              : append_locked_op(l, CMD_MEMORY, 0, op,
                                                 signal, nwait, wait);
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeCommandListAppendMemoryCopy(ze_command_list_handle_t h, void *dst,
                                   const void *src, size_t size,
                                   ze_event_handle_t signal, uint32_t nwait,
                                   ze_event_handle_t *wait)
{
    ENTER(zeCommandListAppendMemoryCopy);
    if (dst == NULL || src == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    dm_op op = {.api = "zeCommandListAppendMemoryCopy",
                .dst = dm_classify(dst, size), .src = dm_classify(src, size),
                .bytes = size};
    return append_memory(op.api, h, &op, signal, nwait, wait);
}

static ze_result_t
fake_zeCommandListAppendMemoryFill(ze_command_list_handle_t h, void *ptr,
                                   const void *pattern, size_t pattern_size,
                                   size_t size, ze_event_handle_t signal,
                                   uint32_t nwait, ze_event_handle_t *wait)
{
    ENTER(zeCommandListAppendMemoryFill);
    if (ptr == NULL || pattern == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    /* Real drivers take patterns up to maxMemoryFillPatternSize; the
     * backend uses one byte. */
    if (pattern_size != 1) {
        return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    }
    dm_op op = {.api = "zeCommandListAppendMemoryFill", .fill = true,
                .dst = dm_classify(ptr, size), .bytes = size,
                .value = *(const unsigned char *)pattern};
    return append_memory(op.api, h, &op, signal, nwait, wait);
}

/* Modules and kernels ------------------------------------------------------ */

static ze_result_t
fake_zeDeviceGetComputeProperties(ze_device_handle_t h,
                                  ze_device_compute_properties_t *p)
{
    ENTER(zeDeviceGetComputeProperties);
    ze_result_t r = device_output(h, p, sizeof(*p));
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    p->maxTotalGroupSize = DK_MAX_THREADS;
    p->maxGroupSizeX = DK_MAX_BLOCK_X;
    p->maxGroupSizeY = DK_MAX_BLOCK_Y;
    p->maxGroupSizeZ = DK_MAX_BLOCK_Z;
    p->maxGroupCountX = DK_MAX_GRID_X;
    p->maxGroupCountY = DK_MAX_GRID_Y;
    p->maxGroupCountZ = DK_MAX_GRID_Z;
    p->maxSharedLocalMemory = DK_MAX_SHARED;
    p->numSubGroupSizes = 2;
    p->subGroupSizes[0] = 16;
    p->subGroupSizes[1] = 32;
    return ZE_RESULT_SUCCESS;
}

/* Build flags the double knows (Intel's documented ones); any other
 * fails the build, with the log naming it. */
static int
build_flags_known(const char *flags, char *log, size_t size)
{
    static const char *const known[] = {
        "-ze-opt-disable", "-ze-opt-level=0", "-ze-opt-level=1",
        "-ze-opt-level=2", "-ze-opt-greater-than-4GB-buffer-required",
        "-ze-opt-large-register-file", NULL,
    };
    const char *p = flags != NULL ? flags : "";
    while (*p != '\0') {
        size_t n = strcspn(p, " \t");
        int found = n == 0;
        for (int i = 0; known[i] != NULL && !found; i++) {
            found = strlen(known[i]) == n && strncmp(known[i], p, n) == 0;
        }
        if (!found) {
            snprintf(log, size, "error: unknown build option '%.*s'",
                     (int)(n > 200 ? 200 : n), p);
            return 0;
        }
        p += n;
        p += strspn(p, " \t");
    }
    return 1;
}

/* Load desc's image as the format it claims: the result and the log. */
static ze_result_t
module_build(const ze_module_desc_t *desc, dk_module **out, char *log,
             size_t size)
{
    int spirv = desc->format == ZE_MODULE_FORMAT_IL_SPIRV;
    if (!build_flags_known(desc->pBuildFlags, log, size)) {
        return ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
    }
    enum dk_result d = dk_module_load(desc->pInputModule, desc->inputSize,
                                      out, log, size);
    if (d == DK_OK
        && dk_module_format(*out) != (spirv ? DK_SPIRV : DK_NATIVE)) {
        dk_module_unload(*out, "zeModuleCreate");
        *out = NULL;
        d = DK_NOT_IMAGE;
    }
    switch (d) {
    case DK_OK:
        return ZE_RESULT_SUCCESS;
    case DK_OUT_OF_MEMORY:
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    case DK_NOT_IMAGE:
    case DK_INVALID_CODE:
        if (spirv) {
            if (log[0] == '\0') {
                snprintf(log, size, "error: the input is not a valid "
                         "SPIR-V module");
            }
            return ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
        }
        return ZE_RESULT_ERROR_INVALID_NATIVE_BINARY;
    default:
        /* An ELF image of another machine: not this device's binary. */
        return ZE_RESULT_ERROR_INVALID_NATIVE_BINARY;
    }
}

static ze_result_t
fake_zeModuleCreate(ze_context_handle_t hc, ze_device_handle_t hd,
                    const ze_module_desc_t *desc, ze_module_handle_t *out,
                    ze_module_build_log_handle_t *log_out)
{
    ENTER(zeModuleCreate);
    if (log_out != NULL) {
        *log_out = NULL;
    }
    if (desc == NULL || out == NULL || desc->pInputModule == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (desc->format > ZE_MODULE_FORMAT_NATIVE) {
        return ZE_RESULT_ERROR_INVALID_ENUMERATION;
    }
    if (desc->inputSize == 0) {
        return ZE_RESULT_ERROR_INVALID_SIZE;
    }
    pthread_mutex_lock(&g.lock);
    fake_context *c = obj_find(hc, K_CONTEXT);
    fake_device *d = device_of(hd);
    ze_result_t r = c == NULL ? bad_handle(hc)
                    : d == NULL ? bad_handle(hd)
                    : d->driver != c->driver ? ZE_RESULT_ERROR_INVALID_ARGUMENT
                                             : ZE_RESULT_SUCCESS;
    pthread_mutex_unlock(&g.lock);
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    fake_build_log *bl = calloc(1, sizeof(*bl));
    fake_module *m = calloc(1, sizeof(*m));
    if (bl == NULL || m == NULL) {
        free(bl);
        free(m);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    r = module_build(desc, &m->dk, bl->text, sizeof(bl->text));
    pthread_mutex_lock(&g.lock);
    if (r == ZE_RESULT_SUCCESS && obj_find(hc, K_CONTEXT) != c) {
        r = ZE_RESULT_ERROR_INVALID_ARGUMENT; /* destroyed meanwhile */
    }
    if (r == ZE_RESULT_SUCCESS) {
        m->ctx = c;
        m->device = d->index;
        c->children++;
        obj_add(&m->obj, K_MODULE);
        *out = (ze_module_handle_t)m;
    }
    /* A build that ran has a log, successful or not. */
    int logged = log_out != NULL
                 && (r == ZE_RESULT_SUCCESS
                     || r == ZE_RESULT_ERROR_MODULE_BUILD_FAILURE);
    if (logged) {
        obj_add(&bl->obj, K_BUILD_LOG);
        *log_out = (ze_module_build_log_handle_t)bl;
    }
    pthread_mutex_unlock(&g.lock);
    if (!logged) {
        free(bl);
    }
    if (r != ZE_RESULT_SUCCESS) {
        if (m->dk != NULL) {
            dk_module_unload(m->dk, "zeModuleCreate");
        }
        free(m);
    }
    return r;
}

static ze_result_t
fake_zeModuleDestroy(ze_module_handle_t h)
{
    ENTER(zeModuleDestroy);
    pthread_mutex_lock(&g.lock);
    fake_module *m = obj_find(h, K_MODULE);
    ze_result_t r = m == NULL ? bad_handle(h)
                    : m->kernels > 0 ? ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE
                                     : ZE_RESULT_SUCCESS;
    if (r == ZE_RESULT_SUCCESS) {
        obj_remove(&m->obj);
        m->ctx->children--;
    }
    pthread_mutex_unlock(&g.lock);
    if (r == ZE_RESULT_SUCCESS) {
        /* A launch of it still queued is the backend's bug: reported. */
        dk_module_unload(m->dk, "zeModuleDestroy");
        free(m);
    }
    return r;
}

static ze_result_t
fake_zeModuleBuildLogDestroy(ze_module_build_log_handle_t h)
{
    ENTER(zeModuleBuildLogDestroy);
    pthread_mutex_lock(&g.lock);
    fake_build_log *bl = obj_find(h, K_BUILD_LOG);
    if (bl != NULL) {
        obj_remove(&bl->obj);
    }
    pthread_mutex_unlock(&g.lock);
    if (bl == NULL) {
        return bad_handle(h);
    }
    free(bl);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeModuleBuildLogGetString(ze_module_build_log_handle_t h,
                               size_t *pSize, char *pBuildLog)
{
    ENTER(zeModuleBuildLogGetString);
    if (pSize == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    fake_build_log *bl = obj_find(h, K_BUILD_LOG);
    ze_result_t r = bl == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
    if (bl != NULL) {
        /* The size counts the terminating NUL, as Intel's driver. */
        size_t need = strlen(bl->text) + 1;
        if (pBuildLog == NULL || *pSize == 0) {
            *pSize = need;
        }
        else {
            size_t n = *pSize < need ? *pSize : need;
            memcpy(pBuildLog, bl->text, n - 1);
            pBuildLog[n - 1] = '\0';
            *pSize = n;
        }
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeModuleGetKernelNames(ze_module_handle_t h, uint32_t *pCount,
                            const char **pNames)
{
    ENTER(zeModuleGetKernelNames);
    if (pCount == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    fake_module *m = obj_find(h, K_MODULE);
    ze_result_t r = m == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
    if (m != NULL) {
        uint32_t n = (uint32_t)dk_kernel_count(m->dk);
        if (*pCount == 0 || pNames == NULL) {
            *pCount = n;
        }
        else {
            if (*pCount > n) {
                *pCount = n;
            }
            for (uint32_t i = 0; i < *pCount; i++) {
                pNames[i] = dk_kernel_at(m->dk, (int)i)->name;
            }
        }
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeKernelCreate(ze_module_handle_t h, const ze_kernel_desc_t *desc,
                    ze_kernel_handle_t *out)
{
    ENTER(zeKernelCreate);
    if (desc == NULL || out == NULL || desc->pKernelName == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    fake_kernel *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    pthread_mutex_lock(&g.lock);
    fake_module *m = obj_find(h, K_MODULE);
    const dk_kernel *dk = m != NULL ? dk_kernel_find(m->dk, desc->pKernelName)
                                    : NULL;
    ze_result_t r = m == NULL ? bad_handle(h)
                    : dk == NULL ? ZE_RESULT_ERROR_INVALID_KERNEL_NAME
                                 : ZE_RESULT_SUCCESS;
    if (r == ZE_RESULT_SUCCESS) {
        k->module = m;
        k->dk = dk;
        k->nargs = (uint32_t)dk->nparams + (dk->format == DK_NATIVE);
        k->group[0] = k->group[1] = k->group[2] = 1;
        k->args = calloc(1, dk_kernel_args_size(dk) + 1);
        k->set = calloc(k->nargs + 1, 1);
        if (k->args == NULL || k->set == NULL) {
            r = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
    }
    if (r == ZE_RESULT_SUCCESS) {
        m->kernels++;
        obj_add(&k->obj, K_KERNEL);
        *out = (ze_kernel_handle_t)k;
    }
    pthread_mutex_unlock(&g.lock);
    if (r != ZE_RESULT_SUCCESS) {
        free(k->args);
        free(k->set);
        free(k);
    }
    return r;
}

static ze_result_t
fake_zeKernelDestroy(ze_kernel_handle_t h)
{
    ENTER(zeKernelDestroy);
    pthread_mutex_lock(&g.lock);
    fake_kernel *k = obj_find(h, K_KERNEL);
    if (k != NULL) {
        obj_remove(&k->obj);
        k->module->kernels--;
    }
    pthread_mutex_unlock(&g.lock);
    if (k == NULL) {
        return bad_handle(h);
    }
    /* Launches copied its arguments when appended: nothing to wait. */
    free(k->args);
    free(k->set);
    free(k);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeKernelGetProperties(ze_kernel_handle_t h, ze_kernel_properties_t *p)
{
    ENTER(zeKernelGetProperties);
    if (p == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    fake_kernel *k = obj_find(h, K_KERNEL);
    if (k != NULL) {
        ze_base_properties_t head;
        memcpy(&head, p, sizeof(head));
        memset(p, 0, sizeof(*p));
        memcpy(p, &head, sizeof(head));
        p->numKernelArgs = k->nargs;
        /* Subgroups whose product is exactly the kernel's limit. */
        p->maxSubgroupSize = k->dk->max_threads % 32 == 0 ? 32 : 1;
        p->maxNumSubgroups = (uint32_t)k->dk->max_threads
                             / p->maxSubgroupSize;
        p->localMemSize = (uint32_t)k->dk->static_shared;
        memcpy(p->uuid.kid, k->dk->name,
               strnlen(k->dk->name, sizeof(p->uuid.kid)));
    }
    pthread_mutex_unlock(&g.lock);
    return k == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zeKernelSetGroupSize(ze_kernel_handle_t h, uint32_t x, uint32_t y,
                          uint32_t z)
{
    ENTER(zeKernelSetGroupSize);
    pthread_mutex_lock(&g.lock);
    fake_kernel *k = obj_find(h, K_KERNEL);
    ze_result_t r = k == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
    if (k != NULL
        && (x == 0 || y == 0 || z == 0 || x > DK_MAX_BLOCK_X
            || y > DK_MAX_BLOCK_Y || z > DK_MAX_BLOCK_Z
            || (uint64_t)x * y * z > (uint64_t)k->dk->max_threads)) {
        r = ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION;
    }
    else if (k != NULL) {
        k->group[0] = x;
        k->group[1] = y;
        k->group[2] = z;
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeKernelSetArgumentValue(ze_kernel_handle_t h, uint32_t index,
                              size_t size, const void *value)
{
    ENTER(zeKernelSetArgumentValue);
    pthread_mutex_lock(&g.lock);
    fake_kernel *k = obj_find(h, K_KERNEL);
    ze_result_t r = k == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
    if (k != NULL && index >= k->nargs) {
        r = ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX;
    }
    else if (k != NULL && (int)index == k->dk->nparams) {
        /* The native kernel's local memory: a size, no value. */
        if (value != NULL) {
            r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        else {
            k->local = size;
            k->set[index] = 1;
        }
    }
    else if (k != NULL) {
        const dk_param *p = &k->dk->params[index];
        if (p->kind == DK_PARAM_LOCAL ? value != NULL || size == 0
                                      : size != p->size) {
            r = ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE;
        }
        else if (p->kind != DK_PARAM_LOCAL) {
            /* NULL for a pointer parameter: a null pointer. */
            if (value != NULL) {
                memcpy(k->args + p->offset, value, size);
            }
            else {
                memset(k->args + p->offset, 0, size);
            }
        }
        if (r == ZE_RESULT_SUCCESS) {
            k->set[index] = 1;
        }
    }
    pthread_mutex_unlock(&g.lock);
    return r;
}

static ze_result_t
fake_zeCommandListAppendLaunchKernel(ze_command_list_handle_t h,
                                     ze_kernel_handle_t hk,
                                     const ze_group_count_t *groups,
                                     ze_event_handle_t signal,
                                     uint32_t nwait, ze_event_handle_t *wait)
{
    ENTER(zeCommandListAppendLaunchKernel);
    if (groups == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    pthread_mutex_lock(&g.lock);
    fake_list *l = obj_find(h, K_LIST);
    fake_kernel *k = obj_find(hk, K_KERNEL);
    ze_result_t r = l == NULL ? bad_handle(h)
                    : k == NULL ? bad_handle(hk)
                    : k->module->ctx != l->ctx || k->module->device != l->device
                        ? ZE_RESULT_ERROR_INVALID_ARGUMENT
                        : ZE_RESULT_SUCCESS;
    for (uint32_t i = 0; r == ZE_RESULT_SUCCESS && i < k->nargs; i++) {
        if (!k->set[i]) {
            r = ZE_RESULT_ERROR_INVALID_ARGUMENT; /* an argument unset */
        }
    }
    dk_launch *launch = NULL;
    if (r == ZE_RESULT_SUCCESS) {
        unsigned grid[3] = {groups->groupCountX, groups->groupCountY,
                            groups->groupCountZ};
        void *args[DK_MAX_PARAMS];
        for (int i = 0; i < k->dk->nparams; i++) {
            args[i] = k->args + k->dk->params[i].offset;
        }
        /* The device's native code is host code: a SPIR-V kernel has no
         * binary for it, which the spec's INVALID_NATIVE_BINARY ("native
         * binary is not supported by the device") says. */
        enum dk_result d = dk_launch_new(k->dk, grid, k->group, k->local,
                                         args, !l->regular, &launch);
        if (d == DK_OK) {
            d = dk_check_geometry(k->dk, grid, k->group, k->local,
                                  DK_MAX_SHARED);
        }
        r = d == DK_OK ? ZE_RESULT_SUCCESS
            : d == DK_NO_BINARY ? ZE_RESULT_ERROR_INVALID_NATIVE_BINARY
            : d == DK_OUT_OF_MEMORY ? ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
            : d == DK_BAD_GEOMETRY && k->local > DK_MAX_SHARED
                ? ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE
                : ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    if (r == ZE_RESULT_SUCCESS) {
        r = append_locked_op(l, CMD_KERNEL, 0, NULL, signal, nwait, wait);
    }
    if (r == ZE_RESULT_SUCCESS) {
        l->tail->launch = launch;
        launch = NULL;
    }
    pthread_mutex_unlock(&g.lock);
    if (launch != NULL) {
        dk_launch_free(launch);
    }
    return r;
}

/* Sysman ------------------------------------------------------------------ */

/* The device of a Sysman call, or the error: Sysman is off unless
 * ZES_ENABLE_SYSMAN=1 was set at zeInit, as in Intel's driver. */
static ze_result_t
sysman_device(zes_device_handle_t h, fake_device **out)
{
    pthread_mutex_lock(&g.lock);
    int on = g.sysman;
    pthread_mutex_unlock(&g.lock);
    if (!on) {
        return ZE_RESULT_ERROR_UNINITIALIZED;
    }
    *out = device_of(h);
    return *out == NULL ? bad_handle(h) : ZE_RESULT_SUCCESS;
}

static fake_mem *
mem_of(zes_mem_handle_t h)
{
    for (int i = 0; i < g.ndevices; i++) {
        if ((void *)&g.mems[i] == (void *)h) {
            return &g.mems[i];
        }
    }
    return NULL;
}

static ze_result_t
fake_zesDeviceEnumMemoryModules(zes_device_handle_t h, uint32_t *pCount,
                                zes_mem_handle_t *phMemory)
{
    ENTER(zesDeviceEnumMemoryModules);
    fake_device *d;
    ze_result_t r = sysman_device(h, &d);
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    if (pCount == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if (*pCount == 0 || phMemory == NULL) {
        *pCount = 1;
        return ZE_RESULT_SUCCESS;
    }
    *pCount = 1;
    phMemory[0] = (zes_mem_handle_t)&g.mems[d->index];
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zesMemoryGetProperties(zes_mem_handle_t h, zes_mem_properties_t *p)
{
    ENTER(zesMemoryGetProperties);
    if (mem_of(h) == NULL) {
        return bad_handle(h);
    }
    if (p == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    p->type = ZES_MEM_TYPE_HBM;
    p->onSubdevice = 0;
    p->subdeviceId = 0;
    p->location = ZES_MEM_LOC_DEVICE;
    p->physicalSize = g.total_mem;
    p->busWidth = 4096;
    p->numChannels = -1;
    return ZE_RESULT_SUCCESS;
}

/* Free: the total less what others use (FAKE_ZE_USED_MEM) and what this
 * process allocated on the device. */
static ze_result_t
fake_zesMemoryGetState(zes_mem_handle_t h, zes_mem_state_t *state)
{
    ENTER(zesMemoryGetState);
    fake_mem *m = mem_of(h);
    if (m == NULL) {
        return bad_handle(h);
    }
    if (state == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    uint64_t used = g.used_mem + dm_used(m->device);
    state->health = ZES_MEM_HEALTH_OK;
    state->size = g.total_mem;
    state->free = used < g.total_mem ? g.total_mem - used : 0;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t
fake_zesDevicePciGetProperties(zes_device_handle_t h,
                               zes_pci_properties_t *p)
{
    ENTER(zesDevicePciGetProperties);
    fake_device *d;
    ze_result_t r = sysman_device(h, &d);
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    if (p == NULL) {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    p->address.domain = 0;
    p->address.bus = 0x3a + (uint32_t)d->index;
    p->address.device = 0;
    p->address.function = 0;
    p->maxSpeed.gen = 4;
    p->maxSpeed.width = 16;
    p->maxSpeed.maxBandwidth = -1;
    p->haveBandwidthCounters = 0;
    p->havePacketCounters = 0;
    p->haveReplayCounters = 0;
    return ZE_RESULT_SUCCESS;
}

/* DDI table getters ---------------------------------------------------- */

/* Tables only grow by appending, so any 1.x table holds the 1.0 fields
 * written below: accept every major-1 version and write nothing newer. */
static ze_result_t
check_table(ze_api_version_t version, const void *table)
{
    if (ZE_MAJOR_VERSION(version) != 1) {
        return ZE_RESULT_ERROR_UNSUPPORTED_VERSION;
    }
    return table == NULL ? ZE_RESULT_ERROR_INVALID_NULL_POINTER
                         : ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t
zeGetGlobalProcAddrTable(ze_api_version_t version, ze_global_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnInit = fake_zeInit;
    }
    return r;
}

EXPORT ze_result_t
zeGetDriverProcAddrTable(ze_api_version_t version, ze_driver_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnGet = fake_zeDriverGet;
        t->pfnGetApiVersion = fake_zeDriverGetApiVersion;
        t->pfnGetProperties = fake_zeDriverGetProperties;
    }
    return r;
}

EXPORT ze_result_t
zeGetDeviceProcAddrTable(ze_api_version_t version, ze_device_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnGet = fake_zeDeviceGet;
        t->pfnGetProperties = fake_zeDeviceGetProperties;
        t->pfnGetModuleProperties = fake_zeDeviceGetModuleProperties;
        t->pfnGetMemoryProperties = fake_zeDeviceGetMemoryProperties;
        t->pfnGetComputeProperties = fake_zeDeviceGetComputeProperties;
        t->pfnGetCommandQueueGroupProperties =
            fake_zeDeviceGetCommandQueueGroupProperties;
    }
    return r;
}

EXPORT ze_result_t
zeGetContextProcAddrTable(ze_api_version_t version, ze_context_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnCreate = fake_zeContextCreate;
        t->pfnDestroy = fake_zeContextDestroy;
    }
    return r;
}

EXPORT ze_result_t
zeGetCommandListProcAddrTable(ze_api_version_t version,
                              ze_command_list_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnCreateImmediate = fake_zeCommandListCreateImmediate;
        t->pfnDestroy = fake_zeCommandListDestroy;
        t->pfnAppendBarrier = fake_zeCommandListAppendBarrier;
        t->pfnAppendSignalEvent = fake_zeCommandListAppendSignalEvent;
        t->pfnAppendWaitOnEvents = fake_zeCommandListAppendWaitOnEvents;
        t->pfnAppendMemoryCopy = fake_zeCommandListAppendMemoryCopy;
        t->pfnAppendMemoryFill = fake_zeCommandListAppendMemoryFill;
        t->pfnCreate = fake_zeCommandListCreate;
        t->pfnClose = fake_zeCommandListClose;
        t->pfnReset = fake_zeCommandListReset;
        t->pfnAppendEventReset = fake_zeCommandListAppendEventReset;
        t->pfnAppendLaunchKernel = fake_zeCommandListAppendLaunchKernel;
    }
    return r;
}

EXPORT ze_result_t
zeGetEventPoolProcAddrTable(ze_api_version_t version,
                            ze_event_pool_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnCreate = fake_zeEventPoolCreate;
        t->pfnDestroy = fake_zeEventPoolDestroy;
        t->pfnGetIpcHandle = fake_zeEventPoolGetIpcHandle;
        t->pfnOpenIpcHandle = fake_zeEventPoolOpenIpcHandle;
        t->pfnCloseIpcHandle = fake_zeEventPoolCloseIpcHandle;
    }
    return r;
}

EXPORT ze_result_t
zeGetEventProcAddrTable(ze_api_version_t version, ze_event_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnCreate = fake_zeEventCreate;
        t->pfnDestroy = fake_zeEventDestroy;
        t->pfnHostSignal = fake_zeEventHostSignal;
        t->pfnHostSynchronize = fake_zeEventHostSynchronize;
        t->pfnQueryStatus = fake_zeEventQueryStatus;
        t->pfnHostReset = fake_zeEventHostReset;
        t->pfnQueryKernelTimestamp = fake_zeEventQueryKernelTimestamp;
    }
    return r;
}

EXPORT ze_result_t
zeGetMemProcAddrTable(ze_api_version_t version, ze_mem_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnAllocDevice = fake_zeMemAllocDevice;
        t->pfnAllocHost = fake_zeMemAllocHost;
        t->pfnFree = fake_zeMemFree;
        t->pfnGetAllocProperties = fake_zeMemGetAllocProperties;
        t->pfnGetAddressRange = fake_zeMemGetAddressRange;
        t->pfnGetIpcHandle = fake_zeMemGetIpcHandle;
        t->pfnOpenIpcHandle = fake_zeMemOpenIpcHandle;
        t->pfnCloseIpcHandle = fake_zeMemCloseIpcHandle;
    }
    return r;
}

EXPORT ze_result_t
zesGetDeviceProcAddrTable(ze_api_version_t version, zes_device_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnEnumMemoryModules = fake_zesDeviceEnumMemoryModules;
        t->pfnPciGetProperties = fake_zesDevicePciGetProperties;
    }
    return r;
}

EXPORT ze_result_t
zesGetMemoryProcAddrTable(ze_api_version_t version, zes_memory_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnGetProperties = fake_zesMemoryGetProperties;
        t->pfnGetState = fake_zesMemoryGetState;
    }
    return r;
}

/* The loader refuses a driver that lacks any of these, even though it
 * never calls them here: left empty (a NULL entry makes the loader answer
 * ZE_RESULT_ERROR_UNSUPPORTED_FEATURE). */
#define EMPTY_GETTER(name, table_t)                                  \
    EXPORT ze_result_t name(ze_api_version_t version, table_t *t)    \
    {                                                                \
        return check_table(version, t);                              \
    }

EXPORT ze_result_t
zeGetCommandQueueProcAddrTable(ze_api_version_t version,
                               ze_command_queue_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnCreate = fake_zeCommandQueueCreate;
        t->pfnDestroy = fake_zeCommandQueueDestroy;
        t->pfnExecuteCommandLists = fake_zeCommandQueueExecuteCommandLists;
    }
    return r;
}

EMPTY_GETTER(zeGetImageProcAddrTable, ze_image_dditable_t)
EMPTY_GETTER(zeGetFenceProcAddrTable, ze_fence_dditable_t)
EXPORT ze_result_t
zeGetModuleProcAddrTable(ze_api_version_t version, ze_module_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnCreate = fake_zeModuleCreate;
        t->pfnDestroy = fake_zeModuleDestroy;
        t->pfnGetKernelNames = fake_zeModuleGetKernelNames;
    }
    return r;
}

EXPORT ze_result_t
zeGetModuleBuildLogProcAddrTable(ze_api_version_t version,
                                 ze_module_build_log_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnDestroy = fake_zeModuleBuildLogDestroy;
        t->pfnGetString = fake_zeModuleBuildLogGetString;
    }
    return r;
}

EXPORT ze_result_t
zeGetKernelProcAddrTable(ze_api_version_t version, ze_kernel_dditable_t *t)
{
    ze_result_t r = check_table(version, t);
    if (r == ZE_RESULT_SUCCESS) {
        t->pfnCreate = fake_zeKernelCreate;
        t->pfnDestroy = fake_zeKernelDestroy;
        t->pfnSetGroupSize = fake_zeKernelSetGroupSize;
        t->pfnSetArgumentValue = fake_zeKernelSetArgumentValue;
        t->pfnGetProperties = fake_zeKernelGetProperties;
    }
    return r;
}

EMPTY_GETTER(zeGetSamplerProcAddrTable, ze_sampler_dditable_t)
EMPTY_GETTER(zeGetPhysicalMemProcAddrTable, ze_physical_mem_dditable_t)
EMPTY_GETTER(zeGetVirtualMemProcAddrTable, ze_virtual_mem_dditable_t)

EMPTY_GETTER(zetGetDeviceProcAddrTable, zet_device_dditable_t)
EMPTY_GETTER(zetGetContextProcAddrTable, zet_context_dditable_t)
EMPTY_GETTER(zetGetCommandListProcAddrTable, zet_command_list_dditable_t)
EMPTY_GETTER(zetGetModuleProcAddrTable, zet_module_dditable_t)
EMPTY_GETTER(zetGetKernelProcAddrTable, zet_kernel_dditable_t)
EMPTY_GETTER(zetGetMetricGroupProcAddrTable, zet_metric_group_dditable_t)
EMPTY_GETTER(zetGetMetricProcAddrTable, zet_metric_dditable_t)
EMPTY_GETTER(zetGetMetricStreamerProcAddrTable,
             zet_metric_streamer_dditable_t)
EMPTY_GETTER(zetGetMetricQueryPoolProcAddrTable,
             zet_metric_query_pool_dditable_t)
EMPTY_GETTER(zetGetMetricQueryProcAddrTable, zet_metric_query_dditable_t)
EMPTY_GETTER(zetGetDebugProcAddrTable, zet_debug_dditable_t)
EMPTY_GETTER(zetGetTracerExpProcAddrTable, zet_tracer_exp_dditable_t)

EMPTY_GETTER(zesGetDriverProcAddrTable, zes_driver_dditable_t)
EMPTY_GETTER(zesGetSchedulerProcAddrTable, zes_scheduler_dditable_t)
EMPTY_GETTER(zesGetPerformanceFactorProcAddrTable,
             zes_performance_factor_dditable_t)
EMPTY_GETTER(zesGetPowerProcAddrTable, zes_power_dditable_t)
EMPTY_GETTER(zesGetFrequencyProcAddrTable, zes_frequency_dditable_t)
EMPTY_GETTER(zesGetEngineProcAddrTable, zes_engine_dditable_t)
EMPTY_GETTER(zesGetStandbyProcAddrTable, zes_standby_dditable_t)
EMPTY_GETTER(zesGetFirmwareProcAddrTable, zes_firmware_dditable_t)
EMPTY_GETTER(zesGetFabricPortProcAddrTable, zes_fabric_port_dditable_t)
EMPTY_GETTER(zesGetTemperatureProcAddrTable, zes_temperature_dditable_t)
EMPTY_GETTER(zesGetPsuProcAddrTable, zes_psu_dditable_t)
EMPTY_GETTER(zesGetFanProcAddrTable, zes_fan_dditable_t)
EMPTY_GETTER(zesGetLedProcAddrTable, zes_led_dditable_t)
EMPTY_GETTER(zesGetRasProcAddrTable, zes_ras_dditable_t)
EMPTY_GETTER(zesGetDiagnosticsProcAddrTable, zes_diagnostics_dditable_t)

/* Control (for tests, through ctypes) --------------------------------- */

/* fake_ze_call_count, _reset_counts, _fail, _clear_faults and _live
 * ("context", "list", "pool", "event"): see double_control.h. */
DC_EXPORT_CONTROL(ze, g_ctl)
DM_EXPORT_RANGE(ze)

/* How many drivers this library presents (FAKE_ZE_DRIVERS). */
EXPORT int
fake_ze_drivers(void)
{
    return g.ndrivers;
}

/* Copy 8 bytes from `addr` if they are mapped and readable: write(2)
 * reports EFAULT instead of crashing on a bad address. */
static int
read_word(uintptr_t addr, uintptr_t *out)
{
    if (g.probe_pipe[0] < 0 && pipe(g.probe_pipe) != 0) {
        return -1;
    }
    if (write(g.probe_pipe[1], (const void *)addr, sizeof(*out))
        != (ssize_t)sizeof(*out)) {
        return -1;
    }
    return read(g.probe_pipe[0], out, sizeof(*out)) == (ssize_t)sizeof(*out)
               ? 0 : -1;
}

/*
 * The list a test names.  In the loader's direct mode (one driver) the
 * backend's handles are ours.  In intercept mode
 * (ZE_ENABLE_LOADER_INTERCEPT=1, or several drivers) the backend sees
 * loader objects whose first word is our handle (loader 1.8's object_t
 * layout), so that word is tried next, read safely.
 */
static fake_list *
resolve_list(unsigned long long h)
{
    fake_list *l = obj_find((void *)(uintptr_t)h, K_LIST);
    uintptr_t inner;
    if (l == NULL && h != 0 && h % sizeof(void *) == 0
        && read_word((uintptr_t)h, &inner) == 0) {
        l = obj_find((void *)inner, K_LIST);
    }
    return l;
}

static int
enqueue_sleep(fake_list *l, double ms)
{
    if (l == NULL) {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    if (!(ms >= 0.0 && ms < 1e9)) {
        return ZE_RESULT_ERROR_INVALID_SIZE;
    }
    return append_locked(l, CMD_SLEEP, (uint64_t)(ms * 1e6), NULL, 0, NULL);
}

/*
 * Queue `ms` milliseconds of work on a command list, given as the handle
 * the backend reports (stream.handle, in direct or intercept mode).
 * Returns a ze_result_t (0: queued).
 */
EXPORT int
fake_ze_enqueue_sleep(unsigned long long command_list, double ms)
{
    pthread_mutex_lock(&g.lock);
    int r = enqueue_sleep(resolve_list(command_list), ms);
    pthread_mutex_unlock(&g.lock);
    return r;
}

/*
 * Queue work on a command list (as for fake_ze_enqueue_sleep) that does
 * not complete until the test calls fake_ze_open_gate(*gate).  Returns a
 * ze_result_t.
 */
EXPORT int
fake_ze_enqueue_gate(unsigned long long command_list, int *gate)
{
    int id = dc_gate_new();
    if (gate == NULL || id < 0) {
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&g.lock);
    fake_list *l = resolve_list(command_list);
    int r = l != NULL ? (int)append_locked(l, CMD_GATE, (uint64_t)id, NULL,
                                           0, NULL)
                      : ZE_RESULT_ERROR_INVALID_ARGUMENT;
    pthread_mutex_unlock(&g.lock);
    if (r != ZE_RESULT_SUCCESS) {
        dc_gate_open(id);
        return r;
    }
    *gate = id;
    return ZE_RESULT_SUCCESS;
}

/*
 * As fake_ze_enqueue_gate, then a barrier: on a list that is not in
 * order, a gate (timed work) lets the commands behind it that are not
 * barriers run at once; the barrier keeps every later command behind the
 * gate, as on an in-order list.  Returns a ze_result_t.
 */
EXPORT int
fake_ze_enqueue_stall(unsigned long long command_list, int *gate)
{
    int r = fake_ze_enqueue_gate(command_list, gate);
    if (r != ZE_RESULT_SUCCESS) {
        return r;
    }
    pthread_mutex_lock(&g.lock);
    fake_list *l = resolve_list(command_list);
    r = l != NULL ? (int)append_locked(l, CMD_BARRIER, 0, NULL, 0, NULL)
                  : ZE_RESULT_ERROR_INVALID_ARGUMENT;
    pthread_mutex_unlock(&g.lock);
    if (r != ZE_RESULT_SUCCESS) {
        dc_gate_open(*gate);
    }
    return r;
}

/* Lets a gate's work complete: 0, or -1 for an unknown gate. */
EXPORT int
fake_ze_open_gate(int gate)
{
    pthread_mutex_lock(&g.lock);
    int r = dc_gate_open(gate);
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.lock);
    return r;
}

/* The same on the live list most recently created on device `device`
 * (after the default stream is made: that stream's list). */
EXPORT int
fake_ze_enqueue_sleep_default(int device, double ms)
{
    pthread_mutex_lock(&g.lock);
    fake_list *best = NULL;
    for (fake_obj *o = g.live[K_LIST]; o != NULL; o = o->next) {
        fake_list *l = (fake_list *)o;
        if (l->device == device
            && (best == NULL || l->serial > best->serial)) {
            best = l;
        }
    }
    int r = enqueue_sleep(best, ms);
    pthread_mutex_unlock(&g.lock);
    return r;
}
