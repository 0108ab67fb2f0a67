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
 * list's own events are reset each time before they signal again.
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
    struct lz_graph *next; /* lz.graphs */
} lz_graph;

typedef struct lz_capture {
    lz_graph *graph;       /* list, device, start and done so far */
    int mode;
    pthread_t thread;
    const char *refused;   /* the refused function: invalidated */
    int framed;            /* the end's barrier is appended */
} lz_capture;

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
    if (st == NULL || st->capture == NULL) {
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
    if (st->capture == NULL || st->capture->mode == ACC_CAPTURE_RELAXED) {
        return ACC_OK;
    }
    return lz_capture_refuse_locked(st, "zeEventHostSynchronize", err);
}

acc_status
lz_capture_append_locked(lz_target *t, void *dst, const void *src,
                         unsigned char value, size_t nbytes, acc_error *err)
{
    ze_command_list_handle_t list = t->st->capture->graph->list;
    const char *api = "zeCommandListAppendBarrier";
    ze_result_t r = lz_fn.zeCommandListAppendBarrier(list, NULL, 0, NULL);
    if (r == ZE_RESULT_SUCCESS && src != NULL) {
        api = "zeCommandListAppendMemoryCopy";
        r = lz_fn.zeCommandListAppendMemoryCopy(list, dst, src, nbytes, NULL,
                                                0, NULL);
    }
    else if (r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListAppendMemoryFill";
        r = lz_fn.zeCommandListAppendMemoryFill(list, dst, &value, 1, nbytes,
                                                NULL, 0, NULL);
    }
    return r == ZE_RESULT_SUCCESS ? ACC_OK : lz_fail(err, api, r, t->driver);
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
    lz_slot_release_locked(g->start);
    lz_slot_release_locked(g->done);
    if (g->last != NULL) {
        g->last->waiters--;
    }
    free(g);
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
    if (cap != NULL) {
        st->capture = NULL;
        lz_graph_discard(cap->graph);
        free(cap);
    }
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
        acc_error_set(err, ACC_ERR_UNSUPPORTED, "backend xpu cannot "
                      "capture a command list made elsewhere (its work "
                      "is not seen by this backend)");
        return ACC_ERR_UNSUPPORTED;
    }
    lz_capture *cap = calloc(1, sizeof(*cap));
    if (cap == NULL) {
        status = lz_no_memory(err);
    }
    pthread_mutex_lock(t.lock);
    if (status == ACC_OK && t.st->capture != NULL) {
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
        t.st->capture = cap;
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
    if (t.st == NULL || t.st->capture == NULL) {
        acc_error_set(err, ACC_ERR_STATE, "the stream is not capturing");
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
        t.st->capture = NULL;
    }
    if (cap != NULL && cap->refused != NULL) {
        char why[160];
        acc_format(why, sizeof(why), "the capture was invalidated by an "
                   "operation refused during it (%s)", cap->refused);
        status = lz_capture_error(err, "zeCommandListClose",
                                  ZE_RESULT_ERROR_INVALID_ARGUMENT, why);
    }
    else if (cap != NULL) {
        status = lz_capture_close(cap, t.driver, err);
        if (status != ACC_OK) {
            /* As cuStreamEndCapture's failures: still capturing, so
             * that ending it again (or reset) works. */
            t.st->capture = cap;
            cap = NULL;
            *capturing = 1;
        }
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
        free(cap);
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
        pthread_mutex_lock(&lz.lock);
        acc_status status = lz_context_locked(dev->driver, &ctx, err);
        pthread_mutex_unlock(&lz.lock);
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
 * previous replay, reset done, signal start. */
static acc_status
lz_replay_begin_locked(lz_target *t, lz_graph *g, acc_error *err)
{
    lz_slot *prev = g->pending ? g->done : g->last;
    const char *api = "zeCommandListAppendBarrier";
    ze_result_t r = lz_fn.zeCommandListAppendBarrier(
        t->list, NULL, prev != NULL, prev != NULL ? &prev->event : NULL);
    if (r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListAppendEventReset";
        r = lz_fn.zeCommandListAppendEventReset(t->list, g->done->event);
    }
    if (r == ZE_RESULT_SUCCESS) {
        api = "zeCommandListAppendBarrier";
        r = lz_fn.zeCommandListAppendBarrier(t->list, g->start->event, 0,
                                             NULL);
    }
    return r == ZE_RESULT_SUCCESS ? ACC_OK : lz_fail(err, api, r, t->driver);
}

acc_status
lz_graph_launch(void *exec, acc_stream *s, acc_error *err)
{
    lz_graph *g = exec;
    lz_target t = lz_target_of(s);
    lz_slot *tail = NULL;
    acc_status status = lz_acquire(t.driver, 0, &tail, err);
    if (status != ACC_OK) {
        lz_target_done(&t);
        return status;
    }
    if (t.driver != lz_driver_of(g->device)) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED, "backend xpu cannot replay "
                      "a graph of device %d on a stream of another Level "
                      "Zero driver", g->device);
        status = ACC_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(t.lock);
    if (status == ACC_OK) {
        status = lz_capture_refuse_locked(t.st,
                                          "zeCommandQueueExecuteCommandLists",
                                          err);
    }
    if (status == ACC_OK) {
        status = lz_replay_begin_locked(&t, g, err);
    }
    if (status == ACC_OK) {
        ze_result_t r = lz_fn.zeCommandQueueExecuteCommandLists(
            g->queue, 1, &g->list, NULL);
        if (r != ZE_RESULT_SUCCESS) {
            status = lz_fail(err, "zeCommandQueueExecuteCommandLists", r,
                             t.driver);
            /* start was signalled for nobody: reset it behind that. */
            if (lz_fn.zeCommandListAppendEventReset(t.list, g->start->event)
                != ZE_RESULT_SUCCESS) {
                acc_trace("xpu: a graph's start event could not be reset");
            }
        }
        else {
            ze_result_t w = lz_fn.zeCommandListAppendBarrier(
                t.list, tail->event, 1, &g->done->event);
            pthread_mutex_lock(&lz.lock);
            if (g->last != NULL) {
                g->last->waiters--;
                g->last = NULL;
            }
            if (w == ZE_RESULT_SUCCESS) {
                tail->armed = 1;
                lz_set_tail_locked(t.st, tail);
                tail->waiters++;
                g->last = tail;
                g->pending = 0;
            }
            else {
                /* The replay runs, but S does not wait for it: the next
                 * replay waits for done instead. */
                g->pending = 1;
                status = lz_fail(err, "zeCommandListAppendBarrier", w,
                                 t.driver);
            }
            pthread_mutex_unlock(&lz.lock);
        }
    }
    pthread_mutex_unlock(t.lock);
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
            free(g);
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
