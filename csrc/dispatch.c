/*
 * dispatch.c - getAccelerator: the backend registry, the one-time probe,
 * the per-thread current device and stream, and validation.
 *
 * Everything here is plain C: no Python objects.  Driver state is
 * process-global (drivers are); what is per thread lives in thread-local
 * storage, released by a pthread key destructor when the thread ends.
 */
#define _GNU_SOURCE
#include "backend.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Probe order (backend.h's ACC_BACKENDS). */
#define ACC_BACKEND_ADDRESS(descriptor) &descriptor,
static const acc_backend *const registry[] = {
    ACC_BACKENDS(ACC_BACKEND_ADDRESS)
};
#undef ACC_BACKEND_ADDRESS
#define N_BACKENDS ((int)(sizeof(registry) / sizeof(registry[0])))

typedef struct default_slot {
    atomic_int ready;          /* s is filled */
    acc_stream s;
} default_slot;

/*
 * Driver streams and events are kept for reuse when their owner drops
 * them, as torch pools streams: creating one in a loop then costs no
 * driver call.  A reused stream may still run its previous owner's work
 * (in order, as with torch's shared pool streams); a reused event is
 * unrecorded until its new owner records it.  acc_empty_cache() releases
 * them; so does exit.
 */
#define STREAM_POOL_SIZE 8   /* free streams kept per device */
#define EVENT_POOL_SIZE 32   /* free events kept per device and flags */
#define EVENT_KINDS 4        /* ACC_EVENT_TIMING | ACC_EVENT_BLOCKING */

typedef struct stream_pool {
    int n;
    struct {
        int priority;
        uintptr_t handle;
        void *native;
    } items[STREAM_POOL_SIZE];
} stream_pool;

typedef struct event_pool {
    int n;
    struct {
        uintptr_t handle;
        void *native;
    } items[EVENT_POOL_SIZE];
} event_pool;

typedef struct properties_slot {
    atomic_int ready;
    acc_device_properties props;
} properties_slot;

/* ACCELERATOR_VISIBLE_DEVICES, parsed before the probe, applied to the
 * first backend that has devices. */
typedef struct visible_list {
    const char *text;          /* the variable's value, NULL when unset */
    int count;
    int order[ACC_MAX_DEVICES];
    char error[256];           /* why the value is malformed, "" if not */
} visible_list;

/*
 * Locks.  fork() copies only the calling thread, so a lock another thread
 * holds at that instant would stay held in the child for good: the child
 * handler (after_fork_in_child) re-initialises every lock below and asks
 * each backend to do the same with its own.  In a child of a process
 * that had initialised a backend (or was initialising one) no driver is
 * called again: every call is refused before it reaches a lock that
 * guards driver state.
 */
static struct {
    pthread_mutex_t probe_lock; /* the one-time probe */
    int probing;               /* under probe_lock: probe_once() runs */
    int probing_backend;       /* 1 + the backend whose probe runs, or 0 */
    atomic_int probed;         /* acc_probe() has completed */
    int forked;                /* we are a child forked after init */
    int debug;                 /* ACCELERATOR_DEBUG=1 */
    const acc_backend *selected;
    acc_backend_info *selected_info;
    int device_count;
    visible_list visible;
    /* The selected driver is initialised: at probe, or at first use when
     * the probe deferred it.  A failed deferred initialisation is kept
     * and reported by every later use. */
    atomic_int ready;
    pthread_mutex_t init_lock;
    int initializing;          /* under init_lock: initialize_selected() */
    int init_failed;
    acc_error init_error;
    int probed_backend[N_BACKENDS];
    acc_backend_info info[N_BACKENDS];
    pthread_mutex_t lock;      /* lazy slots and the full probe */
    pthread_key_t thread_key;  /* runs release_thread_state at exit */
    default_slot defaults[ACC_MAX_DEVICES];
    properties_slot properties[ACC_MAX_DEVICES];
    pthread_mutex_t pool_lock;
    stream_pool streams[ACC_MAX_DEVICES];
    event_pool events[ACC_MAX_DEVICES][EVENT_KINDS];
    /* Threads waiting for another thread's first record of an event to
     * make its native event; never held across a driver call. */
    pthread_mutex_t event_lock;
    pthread_cond_t event_made;
} g = {
    .probe_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .pool_lock = PTHREAD_MUTEX_INITIALIZER,
    .init_lock = PTHREAD_MUTEX_INITIALIZER,
    .event_lock = PTHREAD_MUTEX_INITIALIZER,
    .event_made = PTHREAD_COND_INITIALIZER,
};

/*
 * Per-thread state.  The current device is a plain int, read on every hot
 * query, so it sits in initial-exec TLS (a few bytes); the current stream
 * table is allocated on first set_stream.  A new thread starts on device
 * 0 with every device's default stream current, as in torch.
 */
#define ACC_TLS __thread __attribute__((tls_model("initial-exec")))
static ACC_TLS int tls_device;
static ACC_TLS int tls_active_plus_one;  /* device activated, + 1; 0: none */
static ACC_TLS acc_stream **tls_streams; /* [ACC_MAX_DEVICES] or NULL */

/* What each `with` block of this thread restores on exit, innermost last.
 * Per thread, so one device_index or Stream object entered by two threads
 * at once restores each thread's own state. */
typedef struct restore_entry {
    const void *owner;   /* identifies the object that entered */
    int device;          /* the device to restore, or -1 */
    acc_stream *stream;  /* the stream to restore (a reference), or NULL */
} restore_entry;
static ACC_TLS restore_entry *tls_restore;
static ACC_TLS size_t tls_restore_len, tls_restore_cap;
static int thread_key_value;  /* any non-NULL value arms the destructor */

static void release_thread_state(void *unused);

/* Tracing ---------------------------------------------------------------- */

int
acc_debug_enabled(void)
{
    return g.debug;
}

void
acc_trace(const char *fmt, ...)
{
    va_list ap;

    if (!g.debug) {
        return;
    }
    va_start(ap, fmt);
    fputs("accelerator: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Errors ----------------------------------------------------------------- */

size_t
acc_utf8_whole(const char *text, size_t length)
{
    size_t tail = 0;
    unsigned char lead;
    size_t need;

    /* Back over the continuation bytes (10xxxxxx) to the last lead byte;
     * it says how many bytes its character has. */
    while (tail < 3 && tail < length
           && ((unsigned char)text[length - 1 - tail] & 0xC0) == 0x80) {
        tail++;
    }
    if (tail == length) {
        return length;
    }
    lead = (unsigned char)text[length - 1 - tail];
    need = lead >= 0xF8 ? 0 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3
         : lead >= 0xC0 ? 2 : 0;
    return need > tail + 1 ? length - 1 - tail : length;
}

static size_t
format_v(char *buf, size_t size, const char *fmt, va_list ap)
{
    int n = vsnprintf(buf, size, fmt, ap);
    size_t length;

    if (n < 0) {
        buf[0] = '\0';
        return 0;
    }
    if ((size_t)n < size) {
        return (size_t)n;
    }
    /* Cut: never leave half a character (a value from the environment or
     * the driver may be any text). */
    length = acc_utf8_whole(buf, size - 1);
    buf[length] = '\0';
    return length;
}

size_t
acc_format(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    size_t length;

    va_start(ap, fmt);
    length = format_v(buf, size, fmt, ap);
    va_end(ap);
    return length;
}

void
acc_error_set(acc_error *err, acc_status status, const char *fmt, ...)
{
    va_list ap;

    err->status = status;
    err->backend = g.selected ? g.selected->name : NULL;
    err->api = NULL;
    err->code = 0;
    err->code_name = NULL;
    va_start(ap, fmt);
    format_v(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
}

void
acc_error_driver(acc_error *err, const char *backend, const char *api,
                 long long code, const char *code_name, acc_status status)
{
    err->status = status;
    err->backend = backend;
    err->api = api;
    err->code = code;
    err->code_name = code_name;
    acc_format(err->message, sizeof(err->message), "%s() failed: %s (%lld)",
               api, code_name ? code_name : "unknown error", code);
}

/* Probe ------------------------------------------------------------------ */

/*
 * Probes in progress, for exit.  A probe loads driver libraries (PoCL
 * brings LLVM), and a library's static constructors that run in the
 * probing thread while another thread runs the process's exit (its
 * destructors, the C++ ones of that same library included) abort the
 * process ("inconsistency in registered CommandLine options", "pure
 * virtual method called").  So the interpreter's exit waits for the
 * probes that run, a bounded time, and lets no new one start.
 */
#define PROBE_EXIT_WAIT_S 30

static struct {
    pthread_mutex_t lock;
    pthread_cond_t idle;
    int running;               /* probe() calls in progress */
    int exiting;               /* no new probe() starts */
} probes = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .idle = PTHREAD_COND_INITIALIZER,
};

/* 1 when a probe may start (counted as running); 0 when exiting. */
static int
probe_enter(void)
{
    int ok;

    pthread_mutex_lock(&probes.lock);
    ok = !probes.exiting;
    probes.running += ok;
    pthread_mutex_unlock(&probes.lock);
    return ok;
}

static void
probe_leave(void)
{
    pthread_mutex_lock(&probes.lock);
    if (--probes.running == 0) {
        pthread_cond_broadcast(&probes.idle);
    }
    pthread_mutex_unlock(&probes.lock);
}

void
acc_exit_wait_for_probes(void)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += PROBE_EXIT_WAIT_S;
    pthread_mutex_lock(&probes.lock);
    probes.exiting = 1;
    while (probes.running > 0) {
        if (pthread_cond_timedwait(&probes.idle, &probes.lock, &until)
            == ETIMEDOUT) {
            acc_trace("exiting while a driver probe still runs after %d s",
                      PROBE_EXIT_WAIT_S);
            break;
        }
    }
    pthread_mutex_unlock(&probes.lock);
}

/* In a child of fork(): report backend i, unless its probe completed,
 * as not probed, for `why`. */
static void
not_probed_after_fork(int i, const char *why)
{
    acc_backend_info *info = &g.info[i];

    if (g.probed_backend[i]) {
        return;
    }
    memset(info, 0, sizeof(*info));
    info->name = registry[i]->name;
    info->device_type = registry[i]->device_type;
    info->processor_label = registry[i]->processor_label;
    snprintf(info->reason, sizeof(info->reason), "not probed: %s", why);
    g.probed_backend[i] = 1;
}

static void
after_fork_in_child(void)
{
    /* Only this thread runs in the child: whatever another thread of
     * the parent held, nobody will release. */
    pthread_mutex_init(&g.probe_lock, NULL);
    pthread_mutex_init(&g.init_lock, NULL);
    pthread_mutex_init(&g.lock, NULL);
    pthread_mutex_init(&g.pool_lock, NULL);
    pthread_mutex_init(&g.event_lock, NULL);
    pthread_cond_init(&g.event_made, NULL);
    pthread_mutex_init(&probes.lock, NULL);
    pthread_cond_init(&probes.idle, NULL);
    probes.running = 0;        /* the probing thread did not come along */
    acc_memory_after_fork_child();
    for (int i = 0; i < N_BACKENDS; i++) {
        if (registry[i]->after_fork_child != NULL) {
            registry[i]->after_fork_child();
        }
    }
    /* Drivers cannot be used in a child of a process that initialised
     * them (CUDA returns NOT_INITIALIZED forever; the Level Zero loader's
     * once-only state is inherited), nor of one that was initialising
     * them in another thread (half made, maybe under the driver's own
     * locks), so refuse clearly instead.  A parent that only counted
     * devices (CUDA through NVML) initialised nothing: its child
     * initialises the driver for itself at first use. */
    if (!(g.selected != NULL
          && atomic_load_explicit(&g.ready, memory_order_acquire))
        && !g.probing && !g.initializing) {
        /* Usable here, but not the backend another thread was probing
         * for the report (backends()): its driver is half initialised. */
        if (g.probing_backend > 0) {
            not_probed_after_fork(g.probing_backend - 1,
                                  "this process was forked while another "
                                  "thread was probing it, and a driver "
                                  "half initialised cannot be used here");
        }
        g.probing_backend = 0;
        return;
    }
    g.forked = 1;
    g.probing = 0;
    g.probing_backend = 0;
    g.initializing = 0;
    atomic_store_explicit(&g.probed, 1, memory_order_release);
    for (int i = 0; i < N_BACKENDS; i++) {
        /* Never probed, or probed by a thread the fork left behind. */
        not_probed_after_fork(i, "this process was forked from one that "
                              "had initialised an accelerator backend, and "
                              "drivers cannot be used in a forked child "
                              "(use the 'spawn' start method)");
    }
}

/* Registered when the library is loaded, so that a fork during the
 * first probe is covered too.  No driver is touched. */
__attribute__((constructor)) static void
register_process_handlers(void)
{
    pthread_key_create(&g.thread_key, release_thread_state);
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

static void
release_thread_state(void *unused)
{
    acc_stream **streams = tls_streams;
    restore_entry *restore = tls_restore;
    size_t n = tls_restore_len;

    (void)unused;
    tls_restore = NULL;
    tls_restore_len = tls_restore_cap = 0;
    for (size_t i = 0; i < n; i++) {
        if (restore[i].stream != NULL) {
            acc_stream_decref(restore[i].stream);
        }
    }
    free(restore);
    if (streams == NULL) {
        return;
    }
    tls_streams = NULL;
    for (int i = 0; i < ACC_MAX_DEVICES; i++) {
        if (streams[i] != NULL) {
            acc_stream_decref(streams[i]);
        }
    }
    free(streams);
}

/* "cuda, xpu or none": the values ACCELERATOR_BACKEND takes. */
static void
backend_names(char *buf, size_t size)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < N_BACKENDS && used < size; i++) {
        used += (size_t)snprintf(buf + used, size - used, "%s, ",
                                 registry[i]->name);
    }
    if (used >= 2 && used < size) {
        buf[used - 2] = '\0';
    }
    acc_format(buf + strlen(buf), size - strlen(buf), " or none");
}

static void
probe_backend(int i)
{
    const acc_backend *b = registry[i];
    acc_backend_info *info = &g.info[i];
    acc_probe_result result;
    acc_error err;
    acc_status st;

    memset(&result, 0, sizeof(result));
    memset(&err, 0, sizeof(err));
    if (!probe_enter()) {
        acc_format(info->reason, sizeof(info->reason),
                   "not probed: the process is exiting");
        g.probed_backend[i] = 1;
        return;
    }
    g.probing_backend = i + 1;
    st = b->probe(&result, &err);
    g.probing_backend = 0;
    probe_leave();
    info->library = result.library;
    info->loaded = result.loaded;
    info->driver_version = result.driver_version;
    memcpy(info->driver_version_text, result.driver_version_text,
           sizeof(info->driver_version_text));
    memcpy(info->counted_by, result.counted_by, sizeof(info->counted_by));
    info->initialized = st == ACC_OK && !result.deferred;
    if (st == ACC_OK && result.device_count <= 0) {
        acc_format(err.message, sizeof(err.message),
                   "the driver reports no devices");
        st = ACC_ERR_NO_ACCELERATOR;
    }
    if (st != ACC_OK) {
        acc_format(info->reason, sizeof(info->reason), "%s", err.message);
        acc_trace("backend %s rejected: %s", b->name, info->reason);
        g.probed_backend[i] = 1;
        return;
    }
    if (result.device_count > ACC_MAX_DEVICES) {
        acc_trace("backend %s: using %d of its %d devices", b->name,
                  ACC_MAX_DEVICES, result.device_count);
        result.device_count = ACC_MAX_DEVICES;
    }
    info->available = 1;
    info->device_count = result.device_count;
    /* Last: a child forked before this point treats i as unprobed. */
    g.probed_backend[i] = 1;
    acc_trace("backend %s available: %d device(s), driver %s, library %s",
              b->name, result.device_count, info->driver_version_text,
              info->library ? info->library : "?");
}

/* Visible devices --------------------------------------------------------- */

#define VISIBLE_EXPECTED \
    "expected a comma-separated list of distinct device indices, e.g. 2,0"

/* Parse ACCELERATOR_VISIBLE_DEVICES: decimal indices, spaces around them
 * allowed; set but empty means no device. */
static void
parse_visible(visible_list *v, const char *text)
{
    const char *p = text;

    memset(v, 0, sizeof(*v));
    v->text = text;
    if (text == NULL) {
        return;
    }
    while (isspace((unsigned char)*p)) {
        p++;
    }
    if (*p == '\0') {
        return;
    }
    for (;;) {
        const char *start;
        long index = 0;

        while (isspace((unsigned char)*p)) {
            p++;
        }
        start = p;
        while (isdigit((unsigned char)*p) && index < ACC_MAX_DEVICES * 1000) {
            index = index * 10 + (*p - '0');
            p++;
        }
        while (isspace((unsigned char)*p)) {
            p++;
        }
        if (p == start || (*p != ',' && *p != '\0')) {
            const char *end = strchr(start, ',');
            int len = end ? (int)(end - start) : (int)strlen(start);

            acc_format(v->error, sizeof(v->error),
                       "ACCELERATOR_VISIBLE_DEVICES='%s': '%.*s' is not a "
                       "device index (" VISIBLE_EXPECTED ")", text, len,
                       start);
            return;
        }
        if (v->count == ACC_MAX_DEVICES) {
            acc_format(v->error, sizeof(v->error),
                       "ACCELERATOR_VISIBLE_DEVICES='%s' names more than %d "
                       "devices", text, ACC_MAX_DEVICES);
            return;
        }
        for (int i = 0; i < v->count; i++) {
            if (v->order[i] == index) {
                acc_format(v->error, sizeof(v->error),
                           "ACCELERATOR_VISIBLE_DEVICES='%s' names device %ld "
                           "twice (" VISIBLE_EXPECTED ")", text, index);
                return;
            }
        }
        v->order[v->count++] = (int)index;
        if (*p == '\0') {
            return;
        }
        p++;
    }
}

/* Restrict the backend that was found first to the visible devices;
 * ACC_OK when the variable is unset.  The message says what is wrong. */
static acc_status
check_visible(const acc_backend *b, int count, char *why, size_t size)
{
    const visible_list *v = &g.visible;

    if (v->text == NULL) {
        return ACC_OK;
    }
    if (v->error[0] != '\0') {
        acc_format(why, size, "%s", v->error);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (v->count == 0) {
        acc_format(why, size, "ACCELERATOR_VISIBLE_DEVICES is empty: no "
                   "device is visible");
        return ACC_ERR_NO_ACCELERATOR;
    }
    for (int i = 0; i < v->count; i++) {
        if (v->order[i] >= count) {
            acc_format(why, size, "ACCELERATOR_VISIBLE_DEVICES='%s' names "
                       "device %d, but the %s backend has %d device%s "
                       "(indices 0 to %d)", v->text, v->order[i], b->name,
                       count, count == 1 ? "" : "s", count - 1);
            return ACC_ERR_INVALID_ARGUMENT;
        }
    }
    if (b->select_devices == NULL) {
        acc_format(why, size, "ACCELERATOR_VISIBLE_DEVICES is set, but the "
                   "%s backend does not support restricting its devices",
                   b->name);
        return ACC_ERR_UNSUPPORTED;
    }
    return ACC_OK;
}

/* Apply the visible list to the backend just found; 0 when refused (the
 * reason is the backend's). */
static int
select_visible(int i)
{
    const acc_backend *b = registry[i];
    acc_backend_info *info = &g.info[i];
    acc_error err;

    if (g.visible.text == NULL) {
        return 1;
    }
    memset(&err, 0, sizeof(err));
    if (check_visible(b, info->device_count, info->reason,
                      sizeof(info->reason)) == ACC_OK) {
        if (b->select_devices(g.visible.order, g.visible.count, &err)
            == ACC_OK) {
            info->device_count = g.visible.count;
            acc_trace("backend %s: ACCELERATOR_VISIBLE_DEVICES=%s: %d "
                      "device(s)", b->name, g.visible.text,
                      g.visible.count);
            return 1;
        }
        acc_format(info->reason, sizeof(info->reason), "%s", err.message);
    }
    info->available = 0;
    info->device_count = 0;
    acc_trace("backend %s rejected: %s", b->name, info->reason);
    return 0;
}

int
acc_visible_devices(const int **order, int *count)
{
    if (g.selected == NULL || g.visible.text == NULL) {
        *order = NULL;
        *count = 0;
        return 0;
    }
    *order = g.visible.order;
    *count = g.visible.count;
    return 1;
}

/* Deferred initialisation ----------------------------------------------- */

int
acc_initialized(void)
{
    return atomic_load_explicit(&g.ready, memory_order_acquire);
}

static acc_status
initialize_selected(acc_error *err)
{
    const acc_backend *b = g.selected;
    acc_backend_info *info = g.selected_info;
    acc_status st;
    int count = 0;

    acc_trace("backend %s: initialising the driver at first use",
              b->name);
    memset(err, 0, sizeof(*err));
    st = b->initialize(&count, err);
    if (st == ACC_OK && g.visible.text != NULL) {
        for (int i = 0; i < g.visible.count; i++) {
            if (g.visible.order[i] >= count) {
                acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                              "ACCELERATOR_VISIBLE_DEVICES='%s' names "
                              "device %d, but the initialised %s driver has "
                              "%d device%s (%s counted %d)", g.visible.text,
                              g.visible.order[i], b->name, count,
                              count == 1 ? "" : "s", info->counted_by,
                              g.device_count);
                st = ACC_ERR_NO_ACCELERATOR;
                break;
            }
        }
        count = g.visible.count;
    }
    else if (st == ACC_OK && count <= 0) {
        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                      "the initialised %s driver reports no devices (%s "
                      "counted %d)", b->name, info->counted_by,
                      g.device_count);
        st = ACC_ERR_NO_ACCELERATOR;
    }
    if (st != ACC_OK) {
        if (err->backend == NULL) {
            err->backend = b->name;
        }
        g.init_error = *err;
        g.init_failed = 1;
        acc_format(info->reason, sizeof(info->reason),
                   "initialisation at first use failed: %.470s",
                   err->message);
        acc_trace("backend %s: %s", b->name, info->reason);
        return st;
    }
    if (count > ACC_MAX_DEVICES) {
        count = ACC_MAX_DEVICES;
    }
    if (count != g.device_count) {
        /* The initialised driver is the authority from now on. */
        acc_trace("backend %s: the driver has %d device(s); %s counted %d",
                  b->name, count, info->counted_by, g.device_count);
        g.device_count = count;
        info->device_count = count;
    }
    info->initialized = 1;
    return ACC_OK;
}

acc_status
acc_ready(acc_error *err)
{
    acc_status st = acc_check_usable(err);

    if (st != ACC_OK
        || atomic_load_explicit(&g.ready, memory_order_acquire)) {
        return st;
    }
    pthread_mutex_lock(&g.init_lock);
    if (!atomic_load_explicit(&g.ready, memory_order_relaxed)) {
        if (g.init_failed) {
            *err = g.init_error;
            st = err->status;
        }
        else {
            g.initializing = 1;
            st = initialize_selected(err);
            g.initializing = 0;
            if (st == ACC_OK) {
                atomic_store_explicit(&g.ready, 1, memory_order_release);
            }
        }
    }
    pthread_mutex_unlock(&g.init_lock);
    return st;
}

static void
shutdown_selected(void)
{
    if (g.selected == NULL || g.forked
        || !atomic_load_explicit(&g.ready, memory_order_acquire)) {
        return;
    }
    acc_empty_cache();
    if (g.selected->shutdown != NULL) {
        g.selected->shutdown();
    }
}

static void
probe_once(void)
{
    const char *debug = getenv("ACCELERATOR_DEBUG");
    const char *only = getenv("ACCELERATOR_BACKEND");
    const char *found_first = NULL;
    int known = 0;

    g.debug = debug != NULL && strcmp(debug, "0") != 0 && debug[0] != '\0';
    parse_visible(&g.visible, getenv("ACCELERATOR_VISIBLE_DEVICES"));
    if (only != NULL && only[0] == '\0') {
        only = NULL;
    }
    for (int i = 0; i < N_BACKENDS; i++) {
        g.info[i].name = registry[i]->name ? registry[i]->name : "?";
        g.info[i].device_type =
            registry[i]->device_type ? registry[i]->device_type : "?";
        g.info[i].processor_label = registry[i]->processor_label;
        if (only != NULL && strcmp(only, g.info[i].name) == 0) {
            known = 1;
        }
    }
    if (only != NULL && strcmp(only, "none") == 0) {
        known = 1;
    }
    for (int i = 0; i < N_BACKENDS; i++) {
        acc_backend_info *info = &g.info[i];
        char why[160];

        /* Checked once, here, so that no call site tests the slots. */
        if (acc_backend_incomplete(registry[i], why, sizeof(why)) != NULL) {
            acc_format(info->reason, sizeof(info->reason),
                       "incomplete backend: %s", why);
            g.probed_backend[i] = 1;
            acc_trace("backend %s rejected: %s", info->name, info->reason);
            continue;
        }
        if (only != NULL && strcmp(only, registry[i]->name) != 0) {
            if (known) {
                acc_format(info->reason, sizeof(info->reason),
                           "not probed: ACCELERATOR_BACKEND=%s", only);
            }
            else {
                /* Quote at most 64 bytes (whole characters) of a wrong
                 * value, so that what was expected is always said. */
                size_t shown = acc_utf8_whole(only, strnlen(only, 64));
                char names[128];

                backend_names(names, sizeof(names));
                acc_format(info->reason, sizeof(info->reason),
                           "not probed: ACCELERATOR_BACKEND=%.*s%s names no "
                           "backend (expected %s)",
                           (int)shown, only, only[shown] ? "..." : "", names);
            }
            g.probed_backend[i] = 1;
            acc_trace("backend %s rejected: %s", registry[i]->name,
                      info->reason);
            continue;
        }
        if (found_first != NULL) {
            /* Probed later, for the report only (acc_probe_all). */
            acc_trace("backend %s not probed: %s was %s first",
                      registry[i]->name, found_first,
                      g.selected != NULL ? "selected" : "found");
            continue;
        }
        probe_backend(i);
        if (!info->available) {
            continue;
        }
        /* The visible list applies to the first backend with devices;
         * when it refuses them, no other backend stands in. */
        found_first = registry[i]->name;
        if (select_visible(i)) {
            g.selected = registry[i];
            g.selected_info = info;
            g.device_count = info->device_count;
            info->selected = 1;
            atomic_store_explicit(&g.ready, info->initialized
                                  || registry[i]->initialize == NULL,
                                  memory_order_release);
            acc_trace("selected backend %s%s", registry[i]->name,
                      acc_initialized() ? ""
                      : " (driver initialisation deferred to first use)");
        }
    }
    if (g.selected == NULL) {
        acc_trace("no accelerator available");
    }
    else {
        atexit(shutdown_selected);
    }
    atomic_store_explicit(&g.probed, 1, memory_order_release);
}

void
acc_probe(void)
{
    if (acc_probed()) {
        return;
    }
    /* A plain lock rather than pthread_once: the child handler can reset
     * it when the fork caught another thread probing. */
    pthread_mutex_lock(&g.probe_lock);
    if (!atomic_load_explicit(&g.probed, memory_order_acquire)) {
        g.probing = 1;
        probe_once();
        g.probing = 0;
    }
    pthread_mutex_unlock(&g.probe_lock);
}

int
acc_probed(void)
{
    return atomic_load_explicit(&g.probed, memory_order_acquire);
}

void
acc_probe_all(void)
{
    acc_probe();
    /* A child of an initialised parent must not touch any driver. */
    if (g.forked) {
        return;
    }
    pthread_mutex_lock(&g.lock);
    for (int i = 0; i < N_BACKENDS; i++) {
        if (!g.probed_backend[i]) {
            probe_backend(i);
        }
    }
    pthread_mutex_unlock(&g.lock);
}

const acc_backend *
acc_selected_backend(void)
{
    return g.selected;
}

int
acc_is_available(void)
{
    return g.selected != NULL;
}

int
acc_device_count(void)
{
    return g.device_count;
}

const char *
acc_device_type(void)
{
    return g.selected ? g.selected->device_type : NULL;
}

const char *
acc_display_device_type(void)
{
    return g.selected ? g.selected->display_type : NULL;
}

const char *
acc_device_type_alias(void)
{
    return g.selected ? g.selected->device_type_alias : NULL;
}

int
acc_torch_device_type(void)
{
    return g.selected ? g.selected->torch_device_type : 0;
}

int
acc_dlpack_device_type(void)
{
    return g.selected ? g.selected->dlpack_device_type : 0;
}

unsigned
acc_backend_caps(void)
{
    return g.selected ? g.selected->caps : 0;
}

int
acc_backend_count(void)
{
    return N_BACKENDS;
}

const acc_backend_info *
acc_backend_info_at(int i)
{
    if (i < 0 || i >= N_BACKENDS) {
        return NULL;
    }
    return &g.info[i];
}

acc_status
acc_check_usable(acc_error *err)
{
    if (g.forked) {
        if (g.selected != NULL) {
            acc_error_set(err, ACC_ERR_FORKED,
                          "Cannot use the %s backend in a process forked "
                          "after it was initialised: the driver cannot be "
                          "re-initialised in a forked child. To use an "
                          "accelerator in subprocesses, use the 'spawn' "
                          "start method "
                          "(multiprocessing.set_start_method('spawn'))",
                          g.selected->name);
        }
        else {
            acc_error_set(err, ACC_ERR_FORKED,
                          "Cannot use an accelerator in a process forked "
                          "while another thread was initialising the "
                          "drivers: they cannot be re-initialised in a "
                          "forked child. To use an accelerator in "
                          "subprocesses, use the 'spawn' start method "
                          "(multiprocessing.set_start_method('spawn'))");
        }
        return ACC_ERR_FORKED;
    }
    if (g.selected == NULL) {
        size_t n;

        acc_error_set(err, ACC_ERR_NO_ACCELERATOR,
                      "Cannot access accelerator device when none is "
                      "available.");
        /* Each reason once, after the backends that share it (a wrong
         * ACCELERATOR_BACKEND is every backend's reason), so that they
         * fit the message. */
        for (int i = 0; i < N_BACKENDS; i++) {
            const char *reason = g.info[i].reason;
            int seen = 0;

            for (int j = 0; j < i && !seen; j++) {
                seen = strcmp(g.info[j].reason, reason) == 0;
            }
            if (reason[0] == '\0' || seen) {
                continue;
            }
            n = strlen(err->message);
            acc_format(err->message + n, sizeof(err->message) - n, " [%s",
                       g.info[i].name);
            for (int j = i + 1; j < N_BACKENDS; j++) {
                if (strcmp(g.info[j].reason, reason) == 0) {
                    n = strlen(err->message);
                    acc_format(err->message + n, sizeof(err->message) - n,
                               ", %s", g.info[j].name);
                }
            }
            n = strlen(err->message);
            acc_format(err->message + n, sizeof(err->message) - n,
                       ": %s]", reason);
        }
        return ACC_ERR_NO_ACCELERATOR;
    }
    return ACC_OK;
}

/* Devices ---------------------------------------------------------------- */

int
acc_current_device(void)
{
    return tls_device;
}

int
acc_usable_current_device(void)
{
    if (!atomic_load_explicit(&g.probed, memory_order_acquire)
        || g.selected == NULL || g.forked) {
        return -1;
    }
    return tls_device;
}

static acc_status
device_index_error(const char *index, acc_error *err)
{
    acc_error_set(err, ACC_ERR_DEVICE_INDEX,
                  "Device index value %s is out of index range [0, %d) of "
                  "the %s backend", index, g.device_count, g.selected->name);
    return ACC_ERR_DEVICE_INDEX;
}

acc_status
acc_check_device(long long index, acc_error *err)
{
    acc_status st = acc_check_usable(err);

    if (st != ACC_OK) {
        return st;
    }
    if (index < 0 || index >= g.device_count) {
        char text[24];

        snprintf(text, sizeof(text), "%lld", index);
        return device_index_error(text, err);
    }
    return ACC_OK;
}

acc_status
acc_check_device_text(const char *index, acc_error *err)
{
    acc_status st = acc_check_usable(err);

    return st != ACC_OK ? st : device_index_error(index, err);
}

static acc_status
activate(int device, acc_error *err)
{
    acc_status st;

    if (tls_active_plus_one == device + 1) {
        return ACC_OK;
    }
    st = acc_ready(err);
    if (st != ACC_OK) {
        return st;
    }
    if (g.selected->device_activate != NULL) {
        st = g.selected->device_activate(device, err);
        if (st != ACC_OK) {
            return st;
        }
    }
    tls_active_plus_one = device + 1;
    return ACC_OK;
}

int
acc_device_ready(int device)
{
    return tls_active_plus_one == device + 1;
}

acc_status
acc_set_device(int device, acc_error *err)
{
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    st = activate(device, err);
    if (st == ACC_OK) {
        tls_device = device;
    }
    return st;
}

acc_status
acc_activate_current(acc_error *err)
{
    acc_status st = acc_check_usable(err);

    if (st != ACC_OK) {
        return st;
    }
    return activate(tls_device, err);
}

static acc_status
unsupported(const char *what, acc_error *err)
{
    acc_error_set(err, ACC_ERR_UNSUPPORTED, "backend %s does not support %s",
                  g.selected->name, what);
    return ACC_ERR_UNSUPPORTED;
}

acc_status
acc_synchronize_device(int device, acc_error *err)
{
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    if (!acc_initialized()) {
        /* Nothing can be queued on a driver nobody initialised (and
         * waiting must not initialise it: fork stays safe).  But another
         * library of this process (CuPy, torch) may have: then its work
         * is waited for, and initialising costs nothing more. */
        if (g.selected->initialized_elsewhere == NULL
            || !g.selected->initialized_elsewhere()) {
            return ACC_OK;
        }
        st = acc_ready(err);
        if (st != ACC_OK) {
            return st;
        }
    }
    return g.selected->device_synchronize(device, err);
}

acc_status
acc_get_device_properties(int device, const acc_device_properties **out,
                          acc_error *err)
{
    properties_slot *slot;
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    slot = &g.properties[device];
    if (!atomic_load_explicit(&slot->ready, memory_order_acquire)) {
        if (g.selected->device_properties == NULL) {
            return unsupported("device properties", err);
        }
        st = acc_ready(err);
        if (st != ACC_OK) {
            return st;
        }
        pthread_mutex_lock(&g.lock);
        if (!atomic_load_explicit(&slot->ready, memory_order_relaxed)) {
            memset(&slot->props, 0, sizeof(slot->props));
            st = g.selected->device_properties(device, &slot->props, err);
            if (st == ACC_OK) {
                atomic_store_explicit(&slot->ready, 1, memory_order_release);
            }
        }
        pthread_mutex_unlock(&g.lock);
        if (st != ACC_OK) {
            return st;
        }
    }
    *out = &slot->props;
    return ACC_OK;
}

acc_status
acc_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
                acc_error *err)
{
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    if (g.selected->memory_info == NULL) {
        return unsupported("memory information", err);
    }
    st = acc_ready(err);
    if (st != ACC_OK) {
        return st;
    }
    return g.selected->memory_info(device, free_bytes, total_bytes, err);
}

/* Streams ---------------------------------------------------------------- */

acc_status
acc_default_stream(int device, acc_stream **out, acc_error *err)
{
    default_slot *slot = &g.defaults[device];
    acc_status st = ACC_OK;

    if (!atomic_load_explicit(&slot->ready, memory_order_acquire)) {
        st = acc_ready(err);
        if (st != ACC_OK) {
            return st;
        }
        pthread_mutex_lock(&g.lock);
        if (!atomic_load_explicit(&slot->ready, memory_order_relaxed)) {
            memset(&slot->s, 0, sizeof(slot->s));
            slot->s.refcount = 1;
            slot->s.backend = g.selected;
            slot->s.device = device;
            slot->s.flags = ACC_STREAM_DEFAULT;
            st = g.selected->stream_default(device, &slot->s, err);
            if (st == ACC_OK) {
                atomic_store_explicit(&slot->ready, 1, memory_order_release);
            }
        }
        pthread_mutex_unlock(&g.lock);
        if (st != ACC_OK) {
            return st;
        }
    }
    *out = &slot->s;
    return ACC_OK;
}

int
acc_stream_cached(int device, int current, acc_stream **out)
{
    default_slot *slot = &g.defaults[device];

    if (current && tls_streams != NULL && tls_streams[device] != NULL) {
        *out = tls_streams[device];
        return 1;
    }
    if (atomic_load_explicit(&slot->ready, memory_order_acquire)) {
        *out = &slot->s;
        return 1;
    }
    return 0;
}

acc_status
acc_current_stream(int device, acc_stream **out, acc_error *err)
{
    if (tls_streams != NULL && tls_streams[device] != NULL) {
        *out = tls_streams[device];
        return ACC_OK;
    }
    return acc_default_stream(device, out, err);
}

acc_status
acc_set_current_stream(acc_stream *s, acc_error *err)
{
    acc_stream *old;

    if (tls_streams == NULL) {
        acc_stream **streams = calloc(ACC_MAX_DEVICES, sizeof(*streams));

        if (streams == NULL) {
            acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
            return ACC_ERR_HOST_MEMORY;
        }
        tls_streams = streams;
        pthread_setspecific(g.thread_key, &thread_key_value);
    }
    old = tls_streams[s->device];
    if (s->flags & ACC_STREAM_DEFAULT) {
        tls_streams[s->device] = NULL;
    }
    else {
        acc_stream_incref(s);
        tls_streams[s->device] = s;
    }
    if (old != NULL) {
        acc_stream_decref(old);
    }
    return ACC_OK;
}

/* `with` blocks ----------------------------------------------------------- */

acc_status
acc_restore_push(const void *owner, int device, acc_stream *stream,
                 acc_error *err)
{
    restore_entry *entry;

    if (tls_restore_len == tls_restore_cap) {
        size_t cap = tls_restore_cap ? 2 * tls_restore_cap : 8;
        restore_entry *grown = realloc(tls_restore, cap * sizeof(*grown));

        if (grown == NULL) {
            acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
            return ACC_ERR_HOST_MEMORY;
        }
        if (tls_restore == NULL) {
            pthread_setspecific(g.thread_key, &thread_key_value);
        }
        tls_restore = grown;
        tls_restore_cap = cap;
    }
    entry = &tls_restore[tls_restore_len++];
    entry->owner = owner;
    entry->device = device;
    entry->stream = stream;
    if (stream != NULL) {
        acc_stream_incref(stream);
    }
    return ACC_OK;
}

acc_status
acc_restore_pop(const void *owner, int innermost_only, const char *what,
                int *device, acc_stream **stream, acc_error *err)
{
    size_t i = tls_restore_len;

    if (i > 0 && tls_restore[i - 1].owner == owner) {
        /* The usual case, LIFO: nothing to move. */
        *device = tls_restore[i - 1].device;
        *stream = tls_restore[i - 1].stream;
        tls_restore_len--;
        return ACC_OK;
    }
    while (i > 0 && tls_restore[i - 1].owner != owner && !innermost_only) {
        i--;
    }
    if (i == 0) {
        acc_error_set(err, ACC_ERR_STATE, "%s.__exit__() without a matching "
                      "__enter__() in this thread", what);
        return ACC_ERR_STATE;
    }
    if (tls_restore[i - 1].owner != owner) {
        /* Restoring what another object saved would corrupt both. */
        acc_error_set(err, ACC_ERR_STATE, "%s.__exit__() of a %s that is "
                      "not the innermost one entered in this thread (exit "
                      "them in the reverse order of entering them)", what,
                      what);
        return ACC_ERR_STATE;
    }
    *device = tls_restore[i - 1].device;
    *stream = tls_restore[i - 1].stream;
    memmove(&tls_restore[i - 1], &tls_restore[i],
            (tls_restore_len - i) * sizeof(*tls_restore));
    tls_restore_len--;
    return ACC_OK;
}

/* Keep the native stream of s for reuse, or destroy it when the pool of
 * its device is full. */
static void
stream_recycle(acc_stream *s)
{
    stream_pool *pool = &g.streams[s->device];

    pthread_mutex_lock(&g.pool_lock);
    if (pool->n < STREAM_POOL_SIZE) {
        pool->items[pool->n].priority = s->priority;
        pool->items[pool->n].handle = s->handle;
        pool->items[pool->n].native = s->native;
        pool->n++;
        pthread_mutex_unlock(&g.pool_lock);
        return;
    }
    pthread_mutex_unlock(&g.pool_lock);
    acc_allocator_stream_destroyed(s);
    if (s->backend->stream_destroy != NULL) {
        s->backend->stream_destroy(s);
    }
}

/* Fill s from the pool when a free stream of its priority is there. */
static int
stream_reuse(acc_stream *s)
{
    stream_pool *pool = &g.streams[s->device];
    int found = 0;

    pthread_mutex_lock(&g.pool_lock);
    for (int i = pool->n - 1; i >= 0; i--) {
        if (pool->items[i].priority == s->priority) {
            s->handle = pool->items[i].handle;
            s->native = pool->items[i].native;
            pool->items[i] = pool->items[--pool->n];
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&g.pool_lock);
    return found;
}

void
acc_stream_incref(acc_stream *s)
{
    if (!(s->flags & ACC_STREAM_DEFAULT)) {
        atomic_fetch_add_explicit(&s->refcount, 1,
                                  memory_order_relaxed);
    }
}

void
acc_stream_decref(acc_stream *s)
{
    if (s->flags & ACC_STREAM_DEFAULT) {
        return;
    }
    if (atomic_fetch_sub_explicit(&s->refcount, 1,
                                  memory_order_acq_rel) != 1) {
        return;
    }
    /* A stream outlives a fork only in memory: the child must not call
     * the driver, and the parent still owns the native object. */
    if (!(s->flags & ACC_STREAM_EXTERNAL) && !g.forked) {
        stream_recycle(s);
    }
    free(s);
}

static acc_status
new_stream(int device, acc_stream **out, acc_error *err)
{
    acc_stream *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    s->refcount = 1;
    s->backend = g.selected;
    s->device = device;
    *out = s;
    return ACC_OK;
}

acc_status
acc_stream_priority_range(int device, int *least, int *greatest,
                          acc_error *err)
{
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    if (g.selected->stream_priority_range == NULL) {
        *least = *greatest = 0;
        return ACC_OK;
    }
    st = acc_ready(err);
    if (st != ACC_OK) {
        return st;
    }
    return g.selected->stream_priority_range(device, least, greatest, err);
}

acc_status
acc_stream_create(int device, int priority, acc_stream **out,
                  acc_error *err)
{
    int least, greatest;
    long long wanted;
    acc_stream *s;
    acc_status st;

    if (priority > 0) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Stream priority must be 0 (normal) or negative "
                      "(higher priority), got %d", priority);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    st = acc_stream_priority_range(device, &least, &greatest, err);
    if (st != ACC_OK) {
        return st;
    }
    /* Torch's priorities count down from 0 (normal); the driver's range
     * is [greatest, least].  Anything beyond the range is clamped, as
     * torch and the CUDA driver do. */
    wanted = (long long)least + priority;
    if (wanted < greatest) {
        wanted = greatest;
    }
    st = new_stream(device, &s, err);
    if (st != ACC_OK) {
        return st;
    }
    s->priority = (int)wanted;
    if (stream_reuse(s)) {
        *out = s;
        return ACC_OK;
    }
    st = g.selected->stream_create(s, err);
    if (st != ACC_OK) {
        free(s);
        return st;
    }
    *out = s;
    return ACC_OK;
}

acc_status
acc_stream_wrap(int device, uintptr_t handle, acc_stream **out,
                acc_error *err)
{
    acc_stream *s;
    acc_status st = acc_check_device(device, err);

    if (st == ACC_OK) {
        st = acc_ready(err);
    }
    if (st != ACC_OK) {
        return st;
    }
    if (handle == 0 && !(g.selected->caps & ACC_CAP_NULL_STREAM_HANDLE)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "a stream handle of 0 (NULL) is not a valid %s "
                      "stream; expected the handle of a live stream",
                      g.selected->device_type);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    st = new_stream(device, &s, err);
    if (st != ACC_OK) {
        return st;
    }
    s->flags = ACC_STREAM_EXTERNAL;
    s->handle = handle;
    if (g.selected->stream_wrap != NULL) {
        st = g.selected->stream_wrap(s, err);
        if (st == ACC_ERR_INVALID_ARGUMENT) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                          "%#llx is not the handle of a live stream of "
                          "%s:%d; expected the handle of a stream of that "
                          "device", (unsigned long long)handle,
                          g.selected->device_type, device);
        }
        if (st != ACC_OK) {
            free(s);
            return st;
        }
    }
    *out = s;
    return ACC_OK;
}

acc_status
acc_stream_query(acc_stream *s, acc_error *err)
{
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    return s->backend->stream_query(s, err);
}

acc_status
acc_stream_synchronize(acc_stream *s, acc_error *err)
{
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    return s->backend->stream_synchronize(s, err);
}

acc_status
acc_stream_wait_event(acc_stream *s, acc_event *e, acc_error *err)
{
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    if (!acc_event_made(e)) {
        /* Waiting for an event that was never recorded waits for
         * nothing (torch and the CUDA driver agree). */
        return ACC_OK;
    }
    return s->backend->stream_wait_event(s, e, err);
}

acc_status
acc_stream_wait_stream(acc_stream *s, acc_stream *other, acc_error *err)
{
    acc_event e;
    acc_status st;

    /* As torch does: record a timing-free event on other, wait on it. */
    acc_event_init(&e, 0);
    st = acc_event_record(&e, other, err);
    if (st == ACC_OK) {
        st = acc_stream_wait_event(s, &e, err);
    }
    acc_event_release(&e);
    return st;
}

/* Events ----------------------------------------------------------------- */

static event_pool *
event_pool_of(const acc_event *e)
{
    return &g.events[e->device][e->flags & (EVENT_KINDS - 1)];
}

/* Give e a pooled native event of its device and flags, if there is one. */
static int
event_reuse(acc_event *e)
{
    event_pool *pool = event_pool_of(e);
    int found = 0;

    pthread_mutex_lock(&g.pool_lock);
    if (pool->n > 0) {
        pool->n--;
        e->handle = pool->items[pool->n].handle;
        e->native = pool->items[pool->n].native;
        found = 1;
    }
    pthread_mutex_unlock(&g.pool_lock);
    return found;
}

void
acc_event_init(acc_event *e, unsigned flags)
{
    memset(e, 0, sizeof(*e));
    atomic_init(&e->state, ACC_EVENT_UNMADE);
    e->device = -1;
    e->flags = flags;
}

int
acc_event_made(const acc_event *e)
{
    return atomic_load_explicit(&e->state, memory_order_acquire)
           == ACC_EVENT_MADE;
}

/* Give e its native event on s's device and record it there, once: of
 * threads recording e for the first time together, one makes and records
 * it (no lock held while the driver works; *recorded says it was this
 * call) and the others wait for the outcome; if the driver refuses
 * either, e is left never recorded and the next one tries. */
static acc_status
event_make(acc_event *e, acc_stream *s, int *recorded, acc_error *err)
{
    int state = atomic_load_explicit(&e->state, memory_order_acquire);
    acc_event made;
    acc_status st;

    *recorded = 0;
    for (;;) {
        if (state == ACC_EVENT_MADE) {
            return ACC_OK;
        }
        if (state == ACC_EVENT_UNMADE) {
            if (atomic_compare_exchange_weak_explicit(
                    &e->state, &state, ACC_EVENT_MAKING,
                    memory_order_acquire, memory_order_acquire)) {
                break;
            }
            continue;
        }
        pthread_mutex_lock(&g.event_lock);
        while ((state = atomic_load_explicit(&e->state,
                                             memory_order_acquire))
               == ACC_EVENT_MAKING) {
            pthread_cond_wait(&g.event_made, &g.event_lock);
        }
        pthread_mutex_unlock(&g.event_lock);
    }
    /* Made aside and published whole: readers never see a device
     * without a native event, or a backend missing. */
    acc_event_init(&made, e->flags);
    made.backend = s->backend;
    made.device = s->device;
    st = event_reuse(&made) ? ACC_OK : s->backend->event_create(&made, err);
    if (st == ACC_OK) {
        st = s->backend->event_record(&made, s, err);
        if (st != ACC_OK) {
            /* Still never recorded: the native event goes back to the
             * pool, so that query, synchronize and elapsed_time keep
             * answering for an unrecorded event (backends are only
             * asked about recorded ones). */
            atomic_store_explicit(&made.state, ACC_EVENT_MADE,
                                  memory_order_relaxed);
            acc_event_release(&made);
        }
    }
    pthread_mutex_lock(&g.event_lock);
    if (st == ACC_OK) {
        e->backend = made.backend;
        e->device = made.device;
        e->handle = made.handle;
        e->native = made.native;
        atomic_store_explicit(&e->state, ACC_EVENT_MADE,
                              memory_order_release);
        *recorded = 1;
    }
    else {
        atomic_store_explicit(&e->state, ACC_EVENT_UNMADE,
                              memory_order_release);
    }
    pthread_cond_broadcast(&g.event_made);
    pthread_mutex_unlock(&g.event_lock);
    return st;
}

acc_status
acc_event_record(acc_event *e, acc_stream *s, acc_error *err)
{
    int recorded;
    acc_status st = acc_ready(err);

    if (st != ACC_OK) {
        return st;
    }
    st = event_make(e, s, &recorded, err);
    if (st != ACC_OK || recorded) {
        return st;
    }
    if (e->device != s->device) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Event device index %d does not match recording "
                      "stream's device index %d.", e->device, s->device);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    return s->backend->event_record(e, s, err);
}

acc_status
acc_event_query(acc_event *e, acc_error *err)
{
    acc_status st;

    if (!acc_event_made(e)) {
        return ACC_OK;
    }
    st = acc_check_usable(err);
    if (st != ACC_OK) {
        return st;
    }
    return e->backend->event_query(e, err);
}

acc_status
acc_event_synchronize(acc_event *e, acc_error *err)
{
    acc_status st;

    if (!acc_event_made(e)) {
        return ACC_OK;
    }
    st = acc_check_usable(err);
    if (st != ACC_OK) {
        return st;
    }
    return e->backend->event_synchronize(e, err);
}

acc_status
acc_event_elapsed_ms(acc_event *start, acc_event *end, float *ms,
                     acc_error *err)
{
    acc_status st;

    if (!(start->flags & ACC_EVENT_TIMING) || !(end->flags & ACC_EVENT_TIMING)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Both events must be created with argument "
                      "'enable_timing=True'.");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (!acc_event_made(start) || !acc_event_made(end)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Both events must be recorded before calculating "
                      "elapsed time.");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (start->device != end->device) {
        /* Device clocks (and CUDA contexts) differ: no common time. */
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "Both events must be recorded on the same device to "
                      "calculate elapsed time, got devices %d and %d.",
                      start->device, end->device);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    st = acc_check_usable(err);
    if (st != ACC_OK) {
        return st;
    }
    if (start->backend->event_elapsed_ms == NULL) {
        return unsupported("event timing", err);
    }
    st = start->backend->event_elapsed_ms(start, end, ms, err);
    if (st == ACC_NOT_READY) {
        acc_error_set(err, ACC_ERR_STATE,
                      "Both events must be completed before calculating "
                      "elapsed time.");
        return ACC_ERR_STATE;
    }
    return st;
}

void
acc_event_release(acc_event *e)
{
    event_pool *pool;

    if (acc_event_made(e) && !g.forked) {
        pool = event_pool_of(e);
        pthread_mutex_lock(&g.pool_lock);
        if (pool->n < EVENT_POOL_SIZE) {
            pool->items[pool->n].handle = e->handle;
            pool->items[pool->n].native = e->native;
            pool->n++;
            e->native = NULL;
        }
        pthread_mutex_unlock(&g.pool_lock);
        if (e->native != NULL) {
            e->backend->event_destroy(e);
        }
    }
    e->native = NULL;
    e->handle = 0;
    e->device = -1;
    e->backend = NULL;
    atomic_store_explicit(&e->state, ACC_EVENT_UNMADE, memory_order_relaxed);
}

/* Cache ------------------------------------------------------------------ */

void
acc_empty_cache(void)
{
    acc_stream s;
    acc_event e;

    if (g.selected == NULL || g.forked || !acc_initialized()) {
        return;
    }
    /* Memory whose work is done first: its deferred releases hold
     * events. */
    acc_allocator_release();
    /* Take one object out under the lock, destroy it outside: destroying
     * may wait for the driver. */
    for (int d = 0; d < g.device_count; d++) {
        for (;;) {
            pthread_mutex_lock(&g.pool_lock);
            if (g.streams[d].n == 0) {
                pthread_mutex_unlock(&g.pool_lock);
                break;
            }
            memset(&s, 0, sizeof(s));
            g.streams[d].n--;
            s.backend = g.selected;
            s.device = d;
            s.priority = g.streams[d].items[g.streams[d].n].priority;
            s.handle = g.streams[d].items[g.streams[d].n].handle;
            s.native = g.streams[d].items[g.streams[d].n].native;
            pthread_mutex_unlock(&g.pool_lock);
            acc_allocator_stream_destroyed(&s);
            if (g.selected->stream_destroy != NULL) {
                g.selected->stream_destroy(&s);
            }
        }
        for (unsigned kind = 0; kind < EVENT_KINDS; kind++) {
            event_pool *pool = &g.events[d][kind];

            for (;;) {
                pthread_mutex_lock(&g.pool_lock);
                if (pool->n == 0) {
                    pthread_mutex_unlock(&g.pool_lock);
                    break;
                }
                pool->n--;
                acc_event_init(&e, kind);
                e.backend = g.selected;
                e.device = d;
                e.handle = pool->items[pool->n].handle;
                e.native = pool->items[pool->n].native;
                pthread_mutex_unlock(&g.pool_lock);
                g.selected->event_destroy(&e);
            }
        }
    }
}
