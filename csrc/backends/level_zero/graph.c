/*
 * graph.c - graphs on Level Zero: a capture records into a regular
 * (non-immediate) command list, a replay executes it on a command queue.
 *
 * Capture.  capture_begin makes a regular list for the stream; while
 * the stream captures (st->capture, under its lock) the copies and fills
 * this backend queues on it are appended to that list instead, each
 * behind a barrier (the list is not in order).  Operations that would
 * need the captured work to have run (synchronize, query, a pageable
 * copy) are refused and invalidate the capture, as CUDA does:
 * capture_end then fails and drops the list.  Level Zero has no stream
 * capture of its own, so these refusals are this backend's: reported as
 * the driver function the operation would have used, with
 * ZE_RESULT_ERROR_UNSUPPORTED_FEATURE (refused) or
 * ZE_RESULT_ERROR_INVALID_ARGUMENT (ending an invalidated capture, or a
 * non-relaxed one from another thread).  Work other libraries append to
 * the stream's immediate list is not captured: it runs at once.
 *
 * The recorded list is framed by two events of the graph:
 *
 *   [wait start] [reset start] [barrier] ops... [barrier] [signal done]
 *
 * Replay.  instantiate makes a command queue on the stream's device for
 * the graph.  A replay on stream S appends, in S's order:
 *
 *   [barrier waiting for the previous replay's tail]  (any stream)
 *   [reset done]        nobody can still look at it: the previous
 *                       replay's stream has passed its wait
 *   [barrier signalling start]   after S's earlier work
 *   zeCommandQueueExecuteCommandLists(queue, list)
 *   [barrier waiting for done, signalling a fresh tail]  S's later work
 *                       follows the replay; the tail is S's and the
 *                       next replay's
 *
 * so replays of one graph run one after another, whichever streams they
 * are queued on (as CUDA orders launches of one executable), and the
 * list's own events are reset each time before they signal again.  When
 * the execute succeeds and the last barrier cannot be appended, S does
 * not wait for the replay: the launch then waits on the host for done
 * before it reports the error, so that S's later work (a free) cannot
 * overtake it.
 *
 * A replay that fails after commands using the graph's events were
 * appended (done's reset; start's signal and reset, when the execution
 * is refused) leaves them to run later.  A barrier behind them becomes
 * the graph's tail, so that the next replay (on any stream) and the
 * graph's destruction come after them; and when they signal start, the
 * next replay waits on the host for them before it executes, since the
 * list waits only for start and would otherwise run early, its done
 * then reset behind it.  If even that barrier cannot be appended, the
 * graph is lost: never replayed again, its events never handed on.
 *
 * Destroying a graph must not wait: a graph whose last replay may still
 * run stays on lz.graphs, dead, and goes once its tail has signalled
 * (looked at after every synchronize and graph destroy; shutdown waits
 * a bounded time).
 */
#include "lz.h"

typedef struct lz_graph {
    ze_command_list_handle_t list;
    ze_command_queue_handle_t queue; /* made by instantiate */
    int device;
    int refs;              /* graph and executable handles */
    lz_slot *start, *done; /* the list's frame (owned) */
    lz_slot *last;         /* tail of the last replay (counted) */
    int pending;           /* the last replay's end is known only by done */
    int stale;             /* a failed replay signalled start for nobody:
                            * its commands end at last */
    int lost;              /* a failed replay left commands on a list that
                            * use start and done, with nothing marking
                            * their end: never replayed again, and its
                            * events never handed on */
    lz_keep *keeps;        /* what its launches use (their kernels):
                            * held while it lives */
    int nkeeps, capkeeps;
    struct lz_graph *next; /* lz.graphs */
} lz_graph;

/* A stream forked into a capture: its work so far, and whether the
 * stream that began the capture has waited on all of it since. */
typedef struct lz_fork {
    long tip;
    int joined;
} lz_fork;

typedef struct lz_capture {
    lz_graph *graph;       /* list, device, start and done so far */
    int mode;
    pthread_t thread;
    const char *refused;   /* the refused function: invalidated */
    int framed;            /* the end's barrier is appended */
    unsigned long id;      /* names it in events, also once it ended */
    pthread_mutex_t mu;    /* appends to the list (any stream of it),
                            * forks, ended */
    int ended;             /* forks let go of it when they see this */
    int refs;              /* the stream that began it and its forks
                            * (under lz.lock) */
    lz_fork *forks;
    int nforks, capforks;
    struct lz_capture *next; /* the active ones (under lz.lock) */
} lz_capture;

/* Active captures, under lz.lock; ids never repeat. */
static lz_capture *lz_captures;
static unsigned long lz_capture_ids;

static void
lz_capture_unref(lz_capture *cap)
{
    pthread_mutex_lock(&lz.lock);
    int last = --cap->refs == 0;
    pthread_mutex_unlock(&lz.lock);
    if (last) {
        pthread_mutex_destroy(&cap->mu);
        free(cap->forks);
        free(cap);
    }
}

/* Take cap off the active ones: waits on its events no longer fork. */
static void
lz_capture_deactivate(lz_capture *cap)
{
    pthread_mutex_lock(&lz.lock);
    for (lz_capture **p = &lz_captures; *p != NULL; p = &(*p)->next) {
        if (*p == cap) {
            *p = cap->next;
            break;
        }
    }
    pthread_mutex_unlock(&lz.lock);
}

int
lz_capturing_locked(lz_stream *st)
{
    lz_capture *cap = st->capture;
    if (cap == NULL) {
        return 0;
    }
    pthread_mutex_lock(&cap->mu);
    int ended = cap->ended;
    pthread_mutex_unlock(&cap->mu);
    if (ended) {
        /* A fork whose capture ended meanwhile: free again. */
        st->capture = NULL;
        lz_capture_unref(cap);
        return 0;
    }
    return 1;
}

/* A failure of this backend's capture rules, reported as the driver
 * function the operation would have used. */
static acc_status
lz_capture_error(acc_error *err, const char *api, ze_result_t r,
                 const char *why)
{
    acc_status status = lz_fail(err, api, r, -1);
    size_t used = strlen(err->message);
    acc_format(err->message + used, sizeof(err->message) - used, ": %s",
               why);
    return status;
}

acc_status
lz_capture_refuse_locked(lz_stream *st, const char *api, acc_error *err)
{
    if (st == NULL || !lz_capturing_locked(st)) {
        return ACC_OK;
    }
    st->capture->refused = api;
    return lz_capture_error(err, api, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
                            "not permitted while the stream captures a "
                            "graph (the capture is invalidated)");
}

/* A device-wide synchronize, as cuCtxSynchronize, is refused while a
 * capture that is not relaxed runs on the device (st->lock held). */
acc_status
lz_capture_refuse_sync_locked(lz_stream *st, acc_error *err)
{
    if (!lz_capturing_locked(st) || st->capture->mode == ACC_CAPTURE_RELAXED) {
        return ACC_OK;
    }
    return lz_capture_refuse_locked(st, "zeEventHostSynchronize", err);
}

/* Record op into t's capture (t->lock held).  On ACC_OK a launch's
 * keep is the graph's, released when the graph goes; on failure it
 * stays the caller's. */
acc_status
lz_capture_append_locked(lz_target *t, const lz_op *op, acc_error *err)
{
    lz_capture *cap = t->st->capture;
    ze_command_list_handle_t list = cap->graph->list;
    const char *api = "zeCommandListAppendBarrier";
    pthread_mutex_lock(&cap->mu);
    if (cap->ended) {
        /* A fork's capture ended between the check and now. */
        pthread_mutex_unlock(&cap->mu);
        acc_error_set(err, ACC_ERR_STATE, "the capture this stream was "
                      "forked into ended meanwhile; queue the work again");
        return ACC_ERR_STATE;
    }
    lz_graph *g = cap->graph;
    if (op->handle != NULL && g->nkeeps == g->capkeeps) {
        /* Room first: a launch in the list holds its kernel. */
        int n = g->capkeeps ? 2 * g->capkeeps : 4;
        lz_keep *more = realloc(g->keeps, (size_t)n * sizeof(*more));
        if (more == NULL) {
            pthread_mutex_unlock(&cap->mu);
            return lz_no_memory(err);
        }
        g->keeps = more;
        g->capkeeps = n;
    }
    ze_result_t r = lz_fn.zeCommandListAppendBarrier(list, NULL, 0, NULL);
    if (r == ZE_RESULT_SUCCESS && op->handle != NULL) {
        /* The driver copies the kernel's arguments and group size into
         * the list now: each replay runs with these. */
        api = "zeCommandListAppendLaunchKernel";
        r = lz_fn.zeCommandListAppendLaunchKernel(list, op->handle,
                                                  op->groups, NULL, 0,
                                                  NULL);
        if (r == ZE_RESULT_SUCCESS) {
            g->keeps[g->nkeeps++] = op->keep;
        }
    }
    else if (r == ZE_RESULT_SUCCESS && op->src != NULL) {
        api = "zeCommandListAppendMemoryCopy";
        r = lz_fn.zeCommandListAppendMemoryCopy(list, op->dst, op->src,
                                                op->nbytes, NULL, 0, NULL);
    }
    else if (r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListAppendMemoryFill";
        r = lz_fn.zeCommandListAppendMemoryFill(list, op->dst, &op->value, 1,
                                                op->nbytes, NULL, 0, NULL);
    }
    if (r == ZE_RESULT_SUCCESS && t->st->cap_fork >= 0) {
        lz_fork *f = &cap->forks[t->st->cap_fork];
        f->tip++;
        f->joined = 0;
    }
    pthread_mutex_unlock(&cap->mu);
    return r == ZE_RESULT_SUCCESS ? ACC_OK : lz_fail(err, api, r, t->driver);
}

acc_status
lz_capture_record_locked(lz_target *t, lz_event *ev, acc_error *err)
{
    lz_capture *cap = t->st->capture;
    (void)err;
    pthread_mutex_lock(&cap->mu);
    ev->cap_id = cap->id;
    ev->cap_fork = t->st->cap_fork;
    ev->cap_tip = ev->cap_fork >= 0 ? cap->forks[ev->cap_fork].tip : 0;
    pthread_mutex_unlock(&cap->mu);
    return ACC_OK;
}

/* The active capture of that id, with a reference for the caller. */
static lz_capture *
lz_capture_find(unsigned long id)
{
    lz_capture *found = NULL;
    pthread_mutex_lock(&lz.lock);
    for (lz_capture *c = lz_captures; c != NULL && id != 0; c = c->next) {
        if (c->id == id) {
            found = c;
            found->refs++;
            break;
        }
    }
    pthread_mutex_unlock(&lz.lock);
    return found;
}

/* st (capturing nothing) forks into cap, keeping the caller's reference
 * (t->lock held). */
static acc_status
lz_capture_fork_locked(lz_stream *st, lz_capture *cap, acc_error *err)
{
    pthread_mutex_lock(&cap->mu);
    if (cap->nforks == cap->capforks) {
        int n = cap->capforks ? 2 * cap->capforks : 4;
        lz_fork *forks = realloc(cap->forks, (size_t)n * sizeof(*forks));
        if (forks == NULL) {
            pthread_mutex_unlock(&cap->mu);
            return lz_no_memory(err);
        }
        cap->forks = forks;
        cap->capforks = n;
    }
    st->cap_fork = cap->nforks++;
    cap->forks[st->cap_fork] = (lz_fork){0, 0};
    st->capture = cap;
    pthread_mutex_unlock(&cap->mu);
    return ACC_OK;
}

/* A wait on t for ev while captures may be involved (t->lock held): 1
 * when handled here (*status says how), 0 when it is an ordinary wait.
 * As CUDA: waiting on an event recorded in a capture forks the stream
 * into it (its work is captured too, into the same list, in the order
 * queued); the stream that began it waiting on an event recorded after
 * a fork's last work joins that fork back; a capturing stream cannot
 * wait on work outside its capture. */
int
lz_capture_wait_locked(lz_target *t, lz_event *ev, acc_status *status,
                       acc_error *err)
{
    int capturing = t->st != NULL && lz_capturing_locked(t->st);
    lz_capture *cap = ev != NULL ? lz_capture_find(ev->cap_id) : NULL;
    *status = ACC_OK;
    if (cap == NULL) {
        if (capturing) {
            *status = lz_capture_refuse_locked(
                t->st, "zeCommandListAppendBarrier", err);
        }
        return capturing;
    }
    if (!capturing && t->st == NULL) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED, "backend %s cannot capture "
                      "into a command list made elsewhere", LZ_BACKEND);
        *status = ACC_ERR_UNSUPPORTED;
    }
    else if (!capturing) {
        *status = lz_capture_fork_locked(t->st, cap, err);
        if (*status == ACC_OK) {
            return 1; /* the stream keeps the reference */
        }
    }
    else if (t->st->capture != cap) {
        *status = lz_capture_refuse_locked(t->st,
                                           "zeCommandListAppendBarrier", err);
    }
    else if (t->st->cap_fork < 0 && ev->cap_fork >= 0) {
        /* The list is in the order queued: the dependency holds. */
        pthread_mutex_lock(&cap->mu);
        lz_fork *f = &cap->forks[ev->cap_fork];
        if (f->tip == ev->cap_tip) {
            f->joined = 1;
        }
        pthread_mutex_unlock(&cap->mu);
    }
    lz_capture_unref(cap);
    return 1;
}

/* Give back a slot the graph owned, reset (lz.lock held). */
static void
lz_slot_release_locked(lz_slot *s)
{
    if (s == NULL) {
        return;
    }
    /* Owned by the graph, so nobody else waits on it; retired armed
     * (reset later, once signalled) if the reset fails. */
    s->armed = lz_fn.zeEventHostReset(s->event) != ZE_RESULT_SUCCESS;
    lz_retire_locked(s);
}

/* Let go of what g's launches use and free g (its list gone). */
static void
lz_graph_forget(lz_graph *g)
{
    for (int i = 0; i < g->nkeeps; i++) {
        g->keeps[i].release(g->keeps[i].object);
    }
    free(g->keeps);
    free(g);
}

/* Destroy g's driver objects and free it (lz.lock held; idle); -1 when
 * the driver refused, to be tried again later. */
static int
lz_graph_free_locked(lz_graph *g)
{
    if (g->queue != NULL) {
        if (lz_fn.zeCommandQueueDestroy(g->queue) != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: zeCommandQueueDestroy failed; retrying later");
            return -1;
        }
        g->queue = NULL;
    }
    if (g->list != NULL) {
        if (lz_fn.zeCommandListDestroy(g->list) != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: zeCommandListDestroy failed; retrying later");
            return -1;
        }
        g->list = NULL;
    }
    if (!g->lost) {
        lz_slot_release_locked(g->start);
        lz_slot_release_locked(g->done);
    }
    if (g->last != NULL) {
        g->last->waiters--;
    }
    lz_graph_forget(g);
    return 0;
}

/* Whether g's last replay has finished (lz.lock held). */
static int
lz_graph_idle_locked(const lz_graph *g)
{
    const lz_slot *last = g->pending ? g->done : g->last;
    return last == NULL
           || lz_fn.zeEventQueryStatus(last->event) == ZE_RESULT_SUCCESS;
}

static void
lz_graphs_reap_locked(void)
{
    for (lz_graph **p = &lz.graphs; *p != NULL;) {
        lz_graph *g = *p;
        if (g->refs == 0 && lz_graph_idle_locked(g)) {
            *p = g->next;
            if (lz_graph_free_locked(g) != 0) {
                g->next = *p;
                *p = g;
                p = &g->next;
            }
            continue;
        }
        p = &g->next;
    }
}

void
lz_graphs_reap(void)
{
    if (__atomic_load_n(&lz.graphs, __ATOMIC_RELAXED) == NULL) {
        return;
    }
    pthread_mutex_lock(&lz.lock);
    lz_graphs_reap_locked();
    pthread_mutex_unlock(&lz.lock);
}

/* A graph that was never made public: its list and slots go now. */
static void
lz_graph_discard(lz_graph *g)
{
    pthread_mutex_lock(&lz.lock);
    if (lz_graph_free_locked(g) != 0) {
        g->refs = 0;
        g->next = lz.graphs;
        lz.graphs = g;
    }
    pthread_mutex_unlock(&lz.lock);
}

void
lz_capture_drop(lz_stream *st)
{
    lz_capture *cap = st->capture;
    if (cap == NULL) {
        return;
    }
    st->capture = NULL;
    if (st->cap_fork < 0) {
        /* The stream that began it: the capture ends unfinished. */
        lz_capture_deactivate(cap);
        pthread_mutex_lock(&cap->mu);
        cap->ended = 1;
        lz_graph_discard(cap->graph);
        cap->graph = NULL;
        pthread_mutex_unlock(&cap->mu);
    }
    lz_capture_unref(cap);
}

/* A new graph for device: its regular list, framed at the start. */
static acc_status
lz_graph_new(int device, lz_graph **out, acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    int d = dev->driver;
    ze_context_handle_t ctx = NULL;
    lz_graph *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        return lz_no_memory(err);
    }
    g->device = device;
    pthread_mutex_lock(&lz.lock);
    acc_status status = lz_context_locked(d, &ctx, err);
    if (status == ACC_OK) {
        status = lz_acquire_locked(d, 0, &g->start, err);
    }
    if (status == ACC_OK) {
        status = lz_acquire_locked(d, 0, &g->done, err);
    }
    pthread_mutex_unlock(&lz.lock);
    ze_command_list_desc_t desc = {
        ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC, NULL, dev->ordinal, 0,
    };
    const char *api = "zeCommandListCreate";
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (status == ACC_OK) {
        r = lz_fn.zeCommandListCreate(ctx, dev->handle, &desc, &g->list);
    }
    if (status == ACC_OK && r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListAppendBarrier";
        r = lz_fn.zeCommandListAppendBarrier(g->list, NULL, 1,
                                             &g->start->event);
    }
    if (status == ACC_OK && r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListAppendEventReset";
        r = lz_fn.zeCommandListAppendEventReset(g->list, g->start->event);
    }
    if (status == ACC_OK && r != ZE_RESULT_SUCCESS) {
        status = lz_fail(err, api, r, d);
    }
    if (status != ACC_OK) {
        lz_graph_discard(g);
        return status;
    }
    *out = g;
    return ACC_OK;
}

acc_status
lz_graph_capture_begin(acc_stream *s, int mode, acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = ACC_OK;
    if (t.st == NULL) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED, "backend %s cannot "
                      "capture a command list made elsewhere (its work "
                      "is not seen by this backend)", LZ_BACKEND);
        return ACC_ERR_UNSUPPORTED;
    }
    lz_capture *cap = calloc(1, sizeof(*cap));
    if (cap == NULL) {
        lz_target_done(&t);
        return lz_no_memory(err);
    }
    pthread_mutex_lock(t.lock);
    if (status == ACC_OK && lz_capturing_locked(t.st)) {
        acc_error_set(err, ACC_ERR_STATE, "the stream is already being "
                      "captured (by another graph)");
        status = ACC_ERR_STATE;
    }
    if (status == ACC_OK) {
        status = lz_graph_new(t.device, &cap->graph, err);
    }
    if (status == ACC_OK) {
        cap->mode = mode;
        cap->thread = pthread_self();
        cap->refs = 1;
        pthread_mutex_init(&cap->mu, NULL);
        pthread_mutex_lock(&lz.lock);
        cap->id = ++lz_capture_ids;
        cap->next = lz_captures;
        lz_captures = cap;
        pthread_mutex_unlock(&lz.lock);
        t.st->capture = cap;
        t.st->cap_fork = -1;
    }
    pthread_mutex_unlock(t.lock);
    if (status != ACC_OK) {
        free(cap);
    }
    lz_target_done(&t);
    return status;
}

/* Frame the end of the capture's list (once) and close it. */
static acc_status
lz_capture_close(lz_capture *cap, int d, acc_error *err)
{
    lz_graph *g = cap->graph;
    const char *api = "zeCommandListAppendBarrier";
    ze_result_t r = ZE_RESULT_SUCCESS;
    if (!cap->framed) {
        r = lz_fn.zeCommandListAppendBarrier(g->list, g->done->event, 0,
                                             NULL);
        cap->framed = r == ZE_RESULT_SUCCESS;
    }
    if (r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListClose";
        r = lz_fn.zeCommandListClose(g->list);
    }
    return r == ZE_RESULT_SUCCESS ? ACC_OK : lz_fail(err, api, r, d);
}

acc_status
lz_graph_capture_end(acc_stream *s, void **graph, int *capturing,
                     acc_error *err)
{
    lz_target t = lz_target_of(s);
    acc_status status = ACC_OK;
    lz_capture *cap = NULL;
    *graph = NULL;
    *capturing = 0;
    pthread_mutex_lock(t.lock);
    if (t.st == NULL || !lz_capturing_locked(t.st) || t.st->cap_fork >= 0) {
        acc_error_set(err, ACC_ERR_STATE, "the stream is not capturing (or "
                      "only forked into a capture another stream began)");
        status = ACC_ERR_STATE;
    }
    else if (t.st->capture->mode != ACC_CAPTURE_RELAXED
             && !pthread_equal(t.st->capture->thread, pthread_self())) {
        *capturing = 1;
        status = lz_capture_error(err, "zeCommandListClose",
                                  ZE_RESULT_ERROR_INVALID_ARGUMENT,
                                  "a capture in mode 'global' or "
                                  "'thread_local' can only be ended by the "
                                  "thread that began it, not from another "
                                  "thread");
    }
    else {
        cap = t.st->capture;
    }
    int unjoined = 0;
    if (cap != NULL) {
        pthread_mutex_lock(&cap->mu);
        for (int i = 0; i < cap->nforks; i++) {
            unjoined |= !cap->forks[i].joined;
        }
    }
    if (cap != NULL && cap->refused != NULL) {
        char why[160];
        acc_format(why, sizeof(why), "the capture was invalidated by an "
                   "operation refused during it (%s)", cap->refused);
        status = lz_capture_error(err, "zeCommandListClose",
                                  ZE_RESULT_ERROR_INVALID_ARGUMENT, why);
    }
    else if (cap != NULL && unjoined) {
        status = lz_capture_error(err, "zeCommandListClose",
                                  ZE_RESULT_ERROR_INVALID_ARGUMENT,
                                  "a stream forked into the capture was not "
                                  "joined back (the stream that began it "
                                  "must wait on an event recorded after the "
                                  "fork's last work)");
    }
    else if (cap != NULL) {
        status = lz_capture_close(cap, t.driver, err);
        if (status != ACC_OK) {
            /* As cuStreamEndCapture's failures: still capturing, so
             * that ending it again (or reset) works. */
            pthread_mutex_unlock(&cap->mu);
            cap = NULL;
            *capturing = 1;
        }
    }
    if (cap != NULL) {
        /* Ended: the forks let go of it as they notice. */
        cap->ended = 1;
        pthread_mutex_unlock(&cap->mu);
        t.st->capture = NULL;
        lz_capture_deactivate(cap);
    }
    pthread_mutex_unlock(t.lock);
    if (cap != NULL) {
        if (status == ACC_OK) {
            lz_graph *g = cap->graph;
            g->refs = 1;
            pthread_mutex_lock(&lz.lock);
            g->next = lz.graphs;
            lz.graphs = g;
            pthread_mutex_unlock(&lz.lock);
            *graph = g;
        }
        else {
            lz_graph_discard(cap->graph);
        }
        cap->graph = NULL;
        lz_capture_unref(cap);
    }
    lz_target_done(&t);
    return status;
}

acc_status
lz_graph_instantiate(int device, void *graph, void **exec, acc_error *err)
{
    lz_graph *g = graph;
    lz_device *dev = &lz.devices[device];
    if (g->queue == NULL) {
        ze_context_handle_t ctx = NULL;
        acc_status status = lz_context_of(device, &ctx, err);
        if (status != ACC_OK) {
            return status;
        }
        ze_command_queue_desc_t desc = {
            ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, dev->ordinal, 0, 0,
            ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
            ZE_COMMAND_QUEUE_PRIORITY_NORMAL,
        };
        ze_result_t r = lz_fn.zeCommandQueueCreate(ctx, dev->handle, &desc,
                                                   &g->queue);
        if (r != ZE_RESULT_SUCCESS) {
            g->queue = NULL;
            return lz_fail(err, "zeCommandQueueCreate", r, dev->driver);
        }
    }
    pthread_mutex_lock(&lz.lock);
    g->refs++;
    pthread_mutex_unlock(&lz.lock);
    *exec = g;
    return ACC_OK;
}

/* The first three commands of a replay on t (t->lock held): after the
 * previous replay, reset done, signal start.  *touched: commands that
 * use g's events were appended. */
static acc_status
lz_replay_begin_locked(lz_target *t, lz_graph *g, int *touched,
                       acc_error *err)
{
    lz_slot *prev = g->pending ? g->done : g->last;
    const char *api = "zeCommandListAppendBarrier";
    ze_result_t r = lz_fn.zeCommandListAppendBarrier(
        t->list, NULL, prev != NULL, prev != NULL ? &prev->event : NULL);
    if (r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListAppendEventReset";
        r = lz_fn.zeCommandListAppendEventReset(t->list, g->done->event);
        *touched = r == ZE_RESULT_SUCCESS;
    }
    if (r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListAppendBarrier";
        r = lz_fn.zeCommandListAppendBarrier(t->list, g->start->event, 0,
                                             NULL);
    }
    return r == ZE_RESULT_SUCCESS ? ACC_OK : lz_fail(err, api, r, t->driver);
}

/* tail (appended on t's list, signalling after the replay) becomes
 * the end of g's last replay and of t's stream (both lz.lock and
 * t->lock held). */
static void
lz_replay_ends_at_locked(lz_target *t, lz_graph *g, lz_slot *tail)
{
    if (g->last != NULL) {
        g->last->waiters--;
    }
    tail->armed = 1;
    lz_set_tail_locked(t->st, tail);
    tail->waiters++;
    g->last = tail;
    g->pending = 0;
}

/* A replay failed after commands that use g's events (done's reset,
 * start's signal and reset) were appended to t's list (t->lock held).
 * They run later: the next replay (on any stream) must come after them,
 * or they reset its events behind it, and so must the graph's
 * destruction, which hands its events on.  A barrier signalling tail
 * marks their end as a replay's would; if it cannot be appended, the
 * graph is lost (see lz_graph.lost). */
static void
lz_replay_leftovers_locked(lz_target *t, lz_graph *g, lz_slot *tail)
{
    ze_result_t r = lz_fn.zeCommandListAppendBarrier(t->list, tail->event,
                                                     0, NULL);
    pthread_mutex_lock(&lz.lock);
    if (r == ZE_RESULT_SUCCESS) {
        lz_replay_ends_at_locked(t, g, tail);
    }
    else {
        g->lost = 1;
        acc_trace("xpu: a failed replay's commands cannot be followed "
                  "(0x%x); the graph cannot be replayed again", (unsigned)r);
    }
    pthread_mutex_unlock(&lz.lock);
}

/* Before a replay executes: the commands a failed one left (see
 * lz_graph.stale) have run.  The list waits only for start, so a start
 * that they signal (and reset) after this replay's execution would let
 * the list run early, and the reset of done behind it would leave this
 * replay's end unsignalled for ever.  Only after a failure. */
static void
lz_replay_await_leftovers(lz_graph *g)
{
    if (!g->stale) {
        return;
    }
    /* g->last stays: replays of one graph are serialised by the caller,
     * and a live graph is not freed. */
    lz_await(g->last, "a failed replay's queued commands");
    g->stale = 0;
}

acc_status
lz_graph_launch(void *exec, acc_stream *s, acc_error *err)
{
    lz_graph *g = exec;
    lz_target t = lz_target_of(s);
    lz_slot *tail = NULL;
    int unordered = 0; /* launched, but s's later work does not wait */
    int touched = 0;   /* commands that use g's events were appended */
    lz_replay_await_leftovers(g);
    acc_status status = lz_acquire(t.driver, 0, &tail, err);
    if (status != ACC_OK) {
        lz_target_done(&t);
        return status;
    }
    if (t.driver != lz_driver_of(g->device)) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED, "backend %s cannot replay "
                      "a graph of device %d on a stream of another Level "
                      "Zero driver", LZ_BACKEND, g->device);
        status = ACC_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(t.lock);
    if (status == ACC_OK && g->lost) {
        acc_error_set(err, ACC_ERR_STATE, "this graph cannot be replayed: "
                      "an earlier replay failed and left work queued that "
                      "could not be followed (capture it again)");
        status = ACC_ERR_STATE;
    }
    if (status == ACC_OK) {
        status = lz_capture_refuse_locked(t.st,
                                          "zeCommandQueueExecuteCommandLists",
                                          err);
    }
    if (status == ACC_OK) {
        status = lz_replay_begin_locked(&t, g, &touched, err);
        if (status != ACC_OK && touched) {
            lz_replay_leftovers_locked(&t, g, tail);
        }
    }
    if (status == ACC_OK) {
        ze_result_t r = lz_fn.zeCommandQueueExecuteCommandLists(
            g->queue, 1, &g->list, NULL);
        if (r != ZE_RESULT_SUCCESS) {
            status = lz_fail(err, "zeCommandQueueExecuteCommandLists", r,
                             t.driver);
            /* start was signalled for nobody: reset it behind that, and
             * the next replay executes only once both have run. */
            if (lz_fn.zeCommandListAppendEventReset(t.list, g->start->event)
                != ZE_RESULT_SUCCESS) {
                acc_trace("xpu: a graph's start event could not be reset");
                g->lost = 1;
            }
            lz_replay_leftovers_locked(&t, g, tail);
            g->stale = !g->lost;
        }
        else {
            ze_result_t w = lz_fn.zeCommandListAppendBarrier(
                t.list, tail->event, 1, &g->done->event);
            pthread_mutex_lock(&lz.lock);
            if (w == ZE_RESULT_SUCCESS) {
                lz_replay_ends_at_locked(&t, g, tail);
            }
            else {
                /* The replay runs, but S does not wait for it: the next
                 * replay waits for done instead, and this one returns
                 * only once done has signalled (below). */
                if (g->last != NULL) {
                    g->last->waiters--;
                    g->last = NULL;
                }
                g->pending = 1;
                unordered = 1;
                status = lz_fail(err, "zeCommandListAppendBarrier", w,
                                 t.driver);
            }
            pthread_mutex_unlock(&lz.lock);
        }
    }
    pthread_mutex_unlock(t.lock);
    if (unordered) {
        /* Memory the replay writes would be freed (or read) by S's later
         * work while it still runs: wait for it before reporting. */
        lz_await(g->done, "a graph's replay");
    }
    lz_retire(tail);
    lz_target_done(&t);
    return status;
}

/* After shutdown (which destroyed the driver's objects): free the
 * structs of the graphs nobody owns any more (lz.lock held). */
static void
lz_graphs_forget_locked(void)
{
    for (lz_graph **p = &lz.graphs; *p != NULL;) {
        lz_graph *g = *p;
        if (g->refs == 0) {
            *p = g->next;
            lz_graph_forget(g);
            continue;
        }
        p = &g->next;
    }
}

void
lz_graph_destroy(int device, void *graph, void *exec)
{
    (void)device;
    lz_graph *gs[2] = {graph, exec};
    pthread_mutex_lock(&lz.lock);
    for (int i = 0; i < 2; i++) {
        if (gs[i] != NULL) {
            gs[i]->refs--;
        }
    }
    if (!lz.shut) {
        lz_graphs_reap_locked();
    }
    else {
        lz_graphs_forget_locked();
    }
    pthread_mutex_unlock(&lz.lock);
}

/* At exit, before the contexts go: wait (bounded) for each graph's last
 * replay, then destroy its queue and list; the structs stay for
 * graph_destroy. */
void
lz_graphs_shutdown(void)
{
    pthread_mutex_lock(&lz.lock);
    for (lz_graph *g = lz.graphs; g != NULL; g = g->next) {
        lz_slot *last = g->pending ? g->done : g->last;
        int stuck = lz.drivers[lz_driver_of(g->device)].stuck;
        if (!stuck && last != NULL
            && lz_host_wait(last, LZ_SHUTDOWN_WAIT_NS) != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: a graph still runs at exit; leaving driver "
                      "%d's objects", lz_driver_of(g->device));
            lz.drivers[lz_driver_of(g->device)].stuck = stuck = 1;
        }
        if (!stuck) {
            if (g->queue != NULL) {
                lz_fn.zeCommandQueueDestroy(g->queue);
            }
            lz_fn.zeCommandListDestroy(g->list);
        }
        g->queue = NULL;
        g->list = NULL;
    }
    lz_graphs_forget_locked();
    pthread_mutex_unlock(&lz.lock);
}
