/*
 * registry.c - getAccelerator: the backend registry, the probe order and
 * its environment overrides, the one-time probe, ACCELERATOR_VISIBLE_DEVICES
 * applied, the driver's deferred initialisation, and the fork guard.
 *
 * Everything here is plain C: no Python objects.  Driver state is
 * process-global (drivers are).
 */
#define _GNU_SOURCE
#include "core.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Probe order (backend.h's ACC_BACKENDS), then the plugins that the
 * probe loads (plugin.c): the first usable backend is selected. */
#define ACC_BACKEND_ONE(descriptor) +1
#define N_BUILTIN (0 ACC_BACKENDS(ACC_BACKEND_ONE))
#define MAX_BACKENDS (N_BUILTIN + ACC_MAX_PLUGINS)
#define ACC_BACKEND_ADDRESS(descriptor) &descriptor,
static const acc_backend *registry[MAX_BACKENDS] = {
    ACC_BACKENDS(ACC_BACKEND_ADDRESS)
};
#undef ACC_BACKEND_ADDRESS
/* The built-in backends, then the accepted plugins once the probe has
 * loaded them. */
static int n_backends = N_BUILTIN;

/*
 * Locks.  fork() copies only the calling thread, so a lock another thread
 * holds at that instant would stay held in the child for good: the child
 * handler (after_fork_in_child) re-initialises every lock below, runs the
 * after_fork_child hooks of the files above (hooks.c) and asks each
 * backend to do the same with its own.  In a child of a process that had
 * initialised a backend (or was initialising one) no driver is called
 * again: every call is refused before it reaches a lock that guards
 * driver state.
 */
static struct {
    pthread_mutex_t probe_lock; /* the one-time probe */
    int probing;               /* under probe_lock: probe_once() runs */
    int probing_backend;       /* 1 + the backend whose probe runs, or 0 */
    atomic_int probed;         /* acc_probe() has completed */
    int forked;                /* we are a child forked after init */
    const acc_backend *selected;
    acc_backend_info *selected_info;
    int device_count;
    acc_visible visible;
    /* The selected driver is initialised: at probe, or at first use when
     * the probe deferred it.  A failed deferred initialisation is kept
     * and reported by every later use. */
    atomic_int ready;
    pthread_mutex_t init_lock;
    int initializing;          /* under init_lock: initialize_selected() */
    int init_failed;
    acc_error init_error;
    int probed_backend[MAX_BACKENDS];
    acc_backend_info info[MAX_BACKENDS];
    pthread_mutex_t lock;      /* the full probe */
} g = {
    .probe_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .init_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Probes in progress ------------------------------------------------------ */

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

/* Fork ------------------------------------------------------------------- */

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
    pthread_mutex_init(&probes.lock, NULL);
    pthread_cond_init(&probes.idle, NULL);
    probes.running = 0;        /* the probing thread did not come along */
    acc_hooks_after_fork_child();
    for (int i = 0; i < n_backends; i++) {
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
    atomic_store_explicit(&acc_core_usable, 0, memory_order_relaxed);
    g.probing = 0;
    g.probing_backend = 0;
    g.initializing = 0;
    atomic_store_explicit(&g.probed, 1, memory_order_release);
    for (int i = 0; i < n_backends; i++) {
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
register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

int
acc_forked(void)
{
    return g.forked;
}

/* Probe ------------------------------------------------------------------ */

/* "cuda, xpu, hip, opencl or none": the values ACCELERATOR_BACKEND
 * takes. */
static void
backend_names(char *buf, size_t size)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < n_backends && used < size; i++) {
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
    if (st != ACC_OK && err.message[0] == '\0') {
        const char *name = acc_status_name(st);

        if (name != NULL) {
            acc_format(err.message, sizeof(err.message), "its probe failed "
                       "(%s) without saying why", name);
        }
        else {
            acc_format(err.message, sizeof(err.message), "its probe failed "
                       "(status %d) without saying why", (int)st);
        }
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

/* Apply the visible list to the backend just found; 0 when refused (the
 * reason is the backend's). */
static int
select_visible(int i)
{
    const acc_backend *b = registry[i];
    acc_backend_info *info = &g.info[i];
    acc_error err = {.status = ACC_OK};

    if (g.visible.text == NULL) {
        return 1;
    }
    memset(&err, 0, sizeof(err));
    if (acc_visible_check(&g.visible, b, info->device_count, info->reason,
                          sizeof(info->reason)) == ACC_OK) {
        if (ACC_SLOT(b, select_devices, &err, g.visible.order,
                     g.visible.count, &err) == ACC_OK) {
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
    st = ACC_SLOT(b, initialize, err, &count, err);
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

/* acc_ready when the driver may still need initialising, or the core
 * cannot be used. */
__attribute__((cold, noinline)) static acc_status
initialize_once(acc_error *err)
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

acc_status
acc_ready(acc_error *err)
{
    /* Only a selected backend is ever ready. */
    if (atomic_load_explicit(&g.ready, memory_order_acquire) && !g.forked) {
        return ACC_OK;
    }
    return initialize_once(err);
}

static void
shutdown_selected(void)
{
    if (g.selected == NULL || g.forked
        || !atomic_load_explicit(&g.ready, memory_order_acquire)) {
        return;
    }
    acc_hooks_shutdown();
    if (g.selected->shutdown != NULL) {
        g.selected->shutdown();
    }
}

/* Selection --------------------------------------------------------------- */

static void
probe_once(void)
{
    const char *debug = getenv("ACCELERATOR_DEBUG");
    const char *only = getenv("ACCELERATOR_BACKEND");
    const char *found_first = NULL;
    int known = 0;

    acc_trace_enable(debug != NULL && strcmp(debug, "0") != 0
                     && debug[0] != '\0');
    acc_visible_parse(&g.visible, getenv("ACCELERATOR_VISIBLE_DEVICES"));
    if (only != NULL && only[0] == '\0') {
        only = NULL;
    }
    /* Plugins load here, never at import: after the built-in backends,
     * and (their constructors run) as a probe does. */
    if (probe_enter()) {
        n_backends = acc_plugins_load(registry, N_BUILTIN, MAX_BACKENDS);
        probe_leave();
    }
    for (int i = 0; i < n_backends; i++) {
        g.info[i].name = registry[i]->name ? registry[i]->name : "?";
        g.info[i].device_type =
            registry[i]->device_type ? registry[i]->device_type : "?";
        g.info[i].processor_label = registry[i]->processor_label;
        g.info[i].plugin = acc_plugin_path(registry[i]);
        g.info[i].origin = g.info[i].plugin != NULL
                           ? acc_plugin_origin(registry[i]) : "built-in";
        if (only != NULL && strcmp(only, g.info[i].name) == 0) {
            known = 1;
        }
    }
    for (int i = 0; i < acc_plugins_refused_count(); i++) {
        /* Its own entry says why it was refused. */
        if (only != NULL
            && strcmp(only, acc_plugins_refused_at(i)->name) == 0) {
            known = 1;
        }
    }
    if (only != NULL && strcmp(only, "none") == 0) {
        known = 1;
    }
    for (int i = 0; i < n_backends; i++) {
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
        /* Before any other slot, even for a backend not probed now:
         * acc_probe_all may probe it later. */
        if (registry[i]->attach != NULL) {
            registry[i]->attach(&acc_core_host);
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
                char names[256];

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
            acc_error_select(registry[i]->name);
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
        atomic_store_explicit(&acc_core_usable, 1, memory_order_release);
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
    for (int i = 0; i < n_backends; i++) {
        if (!g.probed_backend[i]) {
            probe_backend(i);
        }
    }
    pthread_mutex_unlock(&g.lock);
}

/* The selected backend's facts -------------------------------------------- */

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
    return n_backends + acc_plugins_refused_count();
}

int
acc_registered_backend_count(void)
{
    return n_backends;
}

const acc_backend_info *
acc_backend_info_at(int i)
{
    if (i < 0 || i >= acc_backend_count()) {
        return NULL;
    }
    return i < n_backends ? &g.info[i]
                          : acc_plugins_refused_at(i - n_backends);
}

int
acc_backend_device_type_known(const char *type, size_t length)
{
    for (int i = 0; i < n_backends; i++) {
        const char *known[2] = {registry[i]->device_type,
                                registry[i]->device_type_alias};

        for (int k = 0; k < 2; k++) {
            if (known[k] != NULL && strlen(known[k]) == length
                && memcmp(known[k], type, length) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

/* Usable ------------------------------------------------------------------ */

int
acc_usable(void)
{
    return atomic_load_explicit(&acc_core_usable, memory_order_acquire);
}

atomic_int acc_core_usable;

/* Why the core cannot be used: acc_check_usable's message, apart so that
 * its usual answer stays a few instructions. */
__attribute__((cold, noinline)) acc_status
acc_unusable(acc_error *err)
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
        for (int i = 0; i < acc_backend_count(); i++) {
            const acc_backend_info *info = acc_backend_info_at(i);
            const char *reason = info->reason;
            int seen = 0;

            for (int j = 0; j < i && !seen; j++) {
                seen = strcmp(acc_backend_info_at(j)->reason, reason) == 0;
            }
            if (reason[0] == '\0' || seen) {
                continue;
            }
            n = strlen(err->message);
            acc_format(err->message + n, sizeof(err->message) - n, " [%s",
                       info->name);
            for (int j = i + 1; j < acc_backend_count(); j++) {
                if (strcmp(acc_backend_info_at(j)->reason, reason) == 0) {
                    n = strlen(err->message);
                    acc_format(err->message + n, sizeof(err->message) - n,
                               ", %s", acc_backend_info_at(j)->name);
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

