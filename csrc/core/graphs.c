/*
 * graph.c - the dispatcher's half of graphs (torch.accelerator.Graph):
 * checks, the keep_graph life cycle, and the register of active captures
 * that makes an allocation during a capture fail with a clear error.
 *
 * Plain C, no Python objects.
 */
#include "core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CAPTURES 64

/* A stream that joined a capture, or an event recorded in one. */
typedef struct capture_mark {
    const void *key;            /* the acc_stream or the acc_event */
    const acc_graph *owner;     /* the graph whose capture it is */
} capture_mark;

typedef struct mark_list {
    capture_mark *v;
    int n, cap;
} mark_list;

/* The active captures of this process, and what joined them: a stream
 * that waits for an event recorded on a capturing (or joined) stream is
 * captured from then on, as the driver captures it, until the capture
 * ends (CUDA's cuStreamGetCaptureInfo would tell the same per stream). */
static struct {
    pthread_mutex_t lock;
    int n;
    struct {
        const acc_graph *owner; /* the graph whose capture this is */
        acc_stream *s;
        int mode;
        pthread_t thread;
    } items[MAX_CAPTURES];
    mark_list joined;           /* streams */
    mark_list recorded;         /* events */
} captures = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int
mark_find(const mark_list *l, const void *key)
{
    for (int i = 0; i < l->n; i++) {
        if (l->v[i].key == key) {
            return i;
        }
    }
    return -1;
}

/* 0, or -1 without host memory. */
static int
mark_add(mark_list *l, const void *key, const acc_graph *owner)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        capture_mark *more = realloc(l->v, (size_t)cap * sizeof(*more));

        if (more == NULL) {
            return -1;
        }
        l->v = more;
        l->cap = cap;
    }
    l->v[l->n].key = key;
    l->v[l->n].owner = owner;
    l->n++;
    return 0;
}

static void
mark_remove_at(mark_list *l, int i)
{
    l->v[i] = l->v[--l->n];
}

static void
marks_forget(mark_list *l, const acc_graph *owner)
{
    for (int i = l->n - 1; i >= 0; i--) {
        if (l->v[i].owner == owner) {
            mark_remove_at(l, i);
        }
    }
}

/* The graph whose capture s is in (it began there, or s joined it), or
 * NULL; the register's lock held. */
static const acc_graph *
capture_of(const acc_stream *s)
{
    int i;

    for (i = 0; i < captures.n; i++) {
        if (captures.items[i].s == s) {
            return captures.items[i].owner;
        }
    }
    i = mark_find(&captures.joined, s);
    return i >= 0 ? captures.joined.v[i].owner : NULL;
}

/* The hooks: an event recorded on a captured stream is the capture's; a
 * stream that waits for it joins the capture; a released event is no
 * one's. */
static void
event_recorded(const acc_event *e, const acc_stream *s)
{
    const acc_graph *owner;
    int i;

    if (__atomic_load_n(&captures.n, __ATOMIC_ACQUIRE) == 0) {
        return; /* the common case, without the lock */
    }
    pthread_mutex_lock(&captures.lock);
    owner = capture_of(s);
    i = mark_find(&captures.recorded, e);
    if (owner != NULL && i >= 0) {
        captures.recorded.v[i].owner = owner;
    }
    else if (owner != NULL) {
        if (mark_add(&captures.recorded, e, owner) < 0) {
            acc_trace("an event recorded in a capture was not noted (out "
                      "of host memory): a stream waiting for it is not "
                      "known to join the capture");
        }
    }
    else if (i >= 0) {
        mark_remove_at(&captures.recorded, i);
    }
    pthread_mutex_unlock(&captures.lock);
}

static void
stream_waited(const acc_stream *s, const acc_event *e)
{
    int i;

    if (__atomic_load_n(&captures.n, __ATOMIC_ACQUIRE) == 0) {
        return;
    }
    pthread_mutex_lock(&captures.lock);
    i = mark_find(&captures.recorded, e);
    if (i >= 0 && capture_of(s) == NULL
        && mark_add(&captures.joined, s, captures.recorded.v[i].owner)
               < 0) {
        acc_trace("a stream that joined a capture was not noted (out of "
                  "host memory): the graph does not keep the modules it "
                  "launches");
    }
    pthread_mutex_unlock(&captures.lock);
}

static void
event_released(const acc_event *e)
{
    int i;

    if (__atomic_load_n(&captures.n, __ATOMIC_ACQUIRE) == 0
        || acc_forked()) {
        return; /* a forked child must not take the register's lock */
    }
    pthread_mutex_lock(&captures.lock);
    i = mark_find(&captures.recorded, e);
    if (i >= 0) {
        mark_remove_at(&captures.recorded, i);
    }
    pthread_mutex_unlock(&captures.lock);
}

__attribute__((constructor)) static void
register_hooks(void)
{
    static acc_hooks hooks = {
        .event_recorded = event_recorded,
        .stream_waited = stream_waited,
        .event_released = event_released,
    };

    acc_hooks_register(&hooks);
}

static const char *const mode_names[] = {"global", "thread_local",
                                         "relaxed"};

static acc_status
graph_unsupported(const acc_backend *b, acc_error *err)
{
    char what[sizeof(err->message)];

    acc_format(what, sizeof(what), "graphs%s%s",
               b->graphs_unsupported != NULL ? ": " : "",
               b->graphs_unsupported != NULL ? b->graphs_unsupported : "");
    return acc_error_unsupported(what, err);
}

static acc_status
graph_state(acc_error *err, const char *message)
{
    acc_error_set(err, ACC_ERR_STATE, "%s", message);
    return ACC_ERR_STATE;
}

static acc_status
register_capture(const acc_graph *g, acc_stream *s, int mode,
                 acc_error *err)
{
    acc_status st = ACC_OK;

    pthread_mutex_lock(&captures.lock);
    if (captures.n == MAX_CAPTURES) {
        acc_error_set(err, ACC_ERR_STATE, "too many captures at once "
                      "(at most %d)", MAX_CAPTURES);
        st = ACC_ERR_STATE;
    }
    else {
        captures.items[captures.n].owner = g;
        captures.items[captures.n].s = s;
        captures.items[captures.n].mode = mode;
        captures.items[captures.n].thread = pthread_self();
        __atomic_store_n(&captures.n, captures.n + 1, __ATOMIC_RELEASE);
        acc_hooks_watch_events(1);
    }
    pthread_mutex_unlock(&captures.lock);
    return st;
}

/* Remove g's own entry: another graph's capture of the same stream (the
 * one that refused g's) keeps its entry. */
static void
unregister_capture(const acc_graph *g)
{
    pthread_mutex_lock(&captures.lock);
    for (int i = 0; i < captures.n; i++) {
        if (captures.items[i].owner == g) {
            captures.items[i] = captures.items[captures.n - 1];
            __atomic_store_n(&captures.n, captures.n - 1, __ATOMIC_RELEASE);
            acc_hooks_watch_events(-1);
            break;
        }
    }
    marks_forget(&captures.joined, g);
    marks_forget(&captures.recorded, g);
    pthread_mutex_unlock(&captures.lock);
}

acc_status
acc_check_capture_allows(acc_stream *s, const char *what,
                         const char *advice, acc_error *err)
{
    acc_status st = ACC_OK;

    if (__atomic_load_n(&captures.n, __ATOMIC_ACQUIRE) == 0) {
        return ACC_OK; /* the common case, without the lock */
    }
    pthread_mutex_lock(&captures.lock);
    for (int i = 0; i < captures.n && st == ACC_OK; i++) {
        int mode = captures.items[i].mode;

        if (captures.items[i].s == s
            || mode == ACC_CAPTURE_GLOBAL
            || (mode == ACC_CAPTURE_THREAD_LOCAL
                && pthread_equal(captures.items[i].thread,
                                 pthread_self()))) {
            acc_error_set(err, ACC_ERR_STATE,
                          "cannot %s while a graph captures "
                          "(capture_error_mode='%s'): %s", what,
                          mode_names[mode], advice);
            st = ACC_ERR_STATE;
        }
    }
    pthread_mutex_unlock(&captures.lock);
    return st;
}

int
acc_stream_captures(acc_stream *s)
{
    int captures_s;

    if (__atomic_load_n(&captures.n, __ATOMIC_ACQUIRE) == 0) {
        return 0;
    }
    pthread_mutex_lock(&captures.lock);
    captures_s = capture_of(s) != NULL;
    pthread_mutex_unlock(&captures.lock);
    return captures_s;
}

acc_status
acc_check_allocation_capture(acc_stream *s, acc_error *err)
{
    return acc_check_capture_allows(s, "allocate device memory",
                                    "allocate the buffers before "
                                    "capture_begin() (there is no "
                                    "graph-private memory pool)", err);
}

acc_status
acc_graph_keep(acc_stream *s, void *obj, const acc_keeper *keeper, int *kept,
               acc_error *err)
{
    acc_kept *entry;
    acc_graph *g;
    acc_status st = ACC_OK;

    *kept = 0;
    if (__atomic_load_n(&captures.n, __ATOMIC_ACQUIRE) == 0) {
        return ACC_OK; /* the common case, without the lock */
    }
    pthread_mutex_lock(&captures.lock);
    /* The register holds the graph's address while it captures; its list
     * of kept objects changes only under the register's lock until
     * capture_end unregisters it. */
    g = (acc_graph *)capture_of(s);
    if (g != NULL) {
        entry = malloc(sizeof(*entry));
        if (entry == NULL) {
            st = acc_error_host_memory(err);
        }
        else {
            entry->obj = obj;
            entry->keeper = keeper;
            entry->next = g->kept;
            g->kept = entry;
            *kept = 1;
        }
    }
    pthread_mutex_unlock(&captures.lock);
    return st;
}

/* Let go of what g kept (release: tell the keepers; a forked child only
 * forgets). */
static void
release_kept(acc_graph *g, int tell)
{
    acc_kept *k = g->kept;

    g->kept = NULL;
    while (k != NULL) {
        acc_kept *next = k->next;

        if (tell) {
            k->keeper->release(k->obj);
        }
        free(k);
        k = next;
    }
}

void
acc_graph_init(acc_graph *g, int keep_graph)
{
    memset(g, 0, sizeof(*g));
    g->device = -1;
    g->keep_graph = keep_graph;
}

acc_status
acc_graph_capture_begin(acc_graph *g, acc_stream *s, int mode,
                        acc_error *err)
{
    const acc_backend *b = s->backend;
    acc_status st;

    /* Registration checked that the five graph slots are all or none
     * (backend_check.c): this one stands for the group. */
    if (b->graph_capture_begin == NULL) {
        return graph_unsupported(b, err);
    }
    if (mode < ACC_CAPTURE_GLOBAL || mode > ACC_CAPTURE_RELAXED) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "unknown capture mode "
                      "%d", mode);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (g->capturing != NULL) {
        return graph_state(err, "capture_begin() called while this graph "
                           "is already capturing; call capture_end() "
                           "first");
    }
    if (g->captured) {
        return graph_state(err, "This Graph instance already owns a "
                           "captured graph. To capture a new graph, call "
                           "reset() or create a new instance.");
    }
    if (s->flags & ACC_STREAM_DEFAULT) {
        return graph_state(err, "Graphs must be captured on a non-default "
                           "stream. (However, after capture, it's ok to "
                           "replay them on the default stream.)");
    }
    st = register_capture(g, s, mode, err);
    if (st != ACC_OK) {
        return st;
    }
    st = ACC_SLOT(b, graph_capture_begin, err, s, mode, err);
    if (st != ACC_OK) {
        unregister_capture(g);
        return st;
    }
    acc_stream_incref(s);
    g->backend = b;
    g->device = s->device;
    g->capturing = s;
    g->mode = mode;
    g->thread = pthread_self();
    return ACC_OK;
}

static acc_status
instantiate(acc_graph *g, acc_error *err)
{
    acc_status st = ACC_SLOT(g->backend, graph_instantiate, err, g->device,
                             g->graph, &g->exec, err);

    if (st != ACC_OK) {
        g->exec = NULL;
    }
    return st;
}

acc_status
acc_graph_capture_end(acc_graph *g, acc_error *err)
{
    acc_stream *s = g->capturing;
    void *graph = NULL;
    int still = 0;
    acc_status st;

    if (s == NULL) {
        return graph_state(err, "capture_end() called without an active "
                           "capture; call capture_begin() first");
    }
    st = ACC_SLOT(g->backend, graph_capture_end, err, s, &graph, &still, err);
    if (st != ACC_OK && still) {
        return st; /* still capturing: end it again (or reset) */
    }
    unregister_capture(g);
    g->capturing = NULL;
    acc_stream_decref(s);
    if (st != ACC_OK) {
        return st;
    }
    g->graph = graph;
    g->captured = 1;
    if (!g->keep_graph) {
        st = instantiate(g, err);
        g->backend->graph_destroy(g->device, g->graph, NULL);
        g->graph = NULL;
        if (st != ACC_OK) {
            g->captured = 0;
        }
    }
    return st;
}

acc_status
acc_graph_instantiate(acc_graph *g, acc_error *err)
{
    if (!g->captured) {
        return graph_state(err, "instantiate() needs a captured graph: "
                           "call capture_begin() and capture_end() first");
    }
    if (!g->keep_graph) {
        return graph_state(err, "instantiate() is only for graphs made "
                           "with keep_graph=True: capture_end() already "
                           "instantiated this one");
    }
    if (g->exec != NULL) {
        return graph_state(err, "the graph is already instantiated");
    }
    return instantiate(g, err);
}

acc_status
acc_graph_replay(acc_graph *g, acc_error *err)
{
    acc_stream *s;
    acc_status st;

    if (!g->captured) {
        return graph_state(err, "replay() needs a captured graph: call "
                           "capture_begin() and capture_end() first");
    }
    if (g->exec == NULL) {
        st = instantiate(g, err);
        if (st != ACC_OK) {
            return st;
        }
    }
    st = acc_current_stream(g->device, &s, err);
    if (st == ACC_OK) {
        st = ACC_SLOT(g->backend, graph_launch, err, g->exec, s, err);
    }
    for (acc_kept *k = g->kept; k != NULL && st == ACC_OK; k = k->next) {
        k->keeper->replayed(k->obj, s);
    }
    return st;
}

/* Release what g holds; ACC_OK, or the capture could not be ended and g
 * is unchanged. */
static acc_status
release(acc_graph *g, acc_error *err)
{
    if (g->capturing != NULL) {
        void *graph = NULL;
        int still = 0;
        acc_status st = ACC_SLOT(g->backend, graph_capture_end, err,
                                 g->capturing, &graph, &still, err);

        if (st != ACC_OK && still) {
            return st; /* the driver says it still captures */
        }
        if (graph != NULL) {
            g->backend->graph_destroy(g->device, graph, NULL);
        }
        unregister_capture(g);
        acc_stream_decref(g->capturing);
    }
    if (g->backend != NULL && (g->graph != NULL || g->exec != NULL)) {
        g->backend->graph_destroy(g->device, g->graph, g->exec);
    }
    release_kept(g, 1);
    acc_graph_init(g, g->keep_graph);
    return ACC_OK;
}

acc_status
acc_graph_reset(acc_graph *g, acc_error *err)
{
    /* Only the thread that began a 'global' or 'thread_local' capture
     * can end it (as CUDA): from another thread the capture must stay
     * whole, for its own thread to end. */
    if (g->capturing != NULL && g->mode != ACC_CAPTURE_RELAXED
        && !pthread_equal(g->thread, pthread_self())) {
        acc_error_set(err, ACC_ERR_STATE, "reset() called from another "
                      "thread than the one that began this graph's "
                      "capture (capture_error_mode='%s'): only that thread "
                      "can end it; call capture_end() or reset() there, or "
                      "capture with capture_error_mode='relaxed'",
                      mode_names[g->mode]);
        return ACC_ERR_STATE;
    }
    return release(g, err);
}

void
acc_graph_drop(acc_graph *g)
{
    acc_error ignored;

    if (acc_check_usable(&ignored) != ACC_OK) {
        /* A child forked from the process that made g: the driver's
         * objects are the parent's; forget them without a driver call
         * (and without the register's lock, which a thread of the
         * parent may have held at the fork). */
        if (g->capturing != NULL) {
            acc_stream_decref(g->capturing);
        }
        release_kept(g, 0);
        acc_graph_init(g, g->keep_graph);
        return;
    }
    if (release(g, &ignored) != ACC_OK) {
        /* Dropped by a thread that cannot end the capture: the stream
         * keeps capturing, so it must never be pooled for another owner;
         * its reference is left behind. */
        acc_trace("a graph dropped while its capture could not be ended: "
                  "%s", ignored.message);
        unregister_capture(g);
        release_kept(g, 1);
        acc_graph_init(g, g->keep_graph);
    }
}
