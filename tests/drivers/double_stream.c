/*
 * double_stream.c - asynchronous streams for driver test doubles: one
 * worker thread per queue, marks for records and waits (see
 * double_stream.h).
 */
#define _GNU_SOURCE

#include "double_stream.h"

#include "double_control.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

struct ds_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ds_op *head, *tail;
    long pending;
    bool dying;
};

/* Every mark completes under this lock and wakes every blocking waiter:
 * waits are rare and short in tests, and one lock keeps fork simple. */
static pthread_mutex_t g_mark_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_mark_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_pin_once = PTHREAD_ONCE_INIT;

/* Time ------------------------------------------------------------------ */

double
ds_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void
ds_sleep_ms(double ms)
{
    long long ns = (long long)(ms * 1e6);
    struct timespec until;

    /* To an absolute deadline, so early wake-ups do not shorten it. */
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec += (long)(ns % 1000000000LL);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL)
           == EINTR) {
    }
}

/* Marks ----------------------------------------------------------------- */

ds_mark *
ds_mark_new(int refs)
{
    ds_mark *m = calloc(1, sizeof(*m));

    if (m != NULL) {
        atomic_init(&m->refs, refs);
        atomic_init(&m->done, 0);
    }
    return m;
}

void
ds_mark_unref(ds_mark *m)
{
    if (m != NULL && atomic_fetch_sub(&m->refs, 1) == 1) {
        free(m);
    }
}

bool
ds_mark_done(ds_mark *m)
{
    return atomic_load_explicit(&m->done, memory_order_acquire) != 0;
}

static void
mark_complete(ds_mark *m)
{
    pthread_mutex_lock(&g_mark_mu);
    m->stamp_ms = ds_now_ms();
    atomic_store_explicit(&m->done, 1, memory_order_release);
    pthread_cond_broadcast(&g_mark_cv);
    pthread_mutex_unlock(&g_mark_mu);
}

void
ds_mark_wait_blocking(ds_mark *m)
{
    pthread_mutex_lock(&g_mark_mu);
    while (!ds_mark_done(m)) {
        pthread_cond_wait(&g_mark_cv, &g_mark_mu);
    }
    pthread_mutex_unlock(&g_mark_mu);
}

void
ds_mark_wait_spinning(ds_mark *m)
{
    const struct timespec pause = {0, 50000};

    /* A spinning host thread yields; after a while it naps, so that a
     * long wait leaves the workers a small test machine's cores. */
    for (unsigned yields = 0; !ds_mark_done(m);) {
        if (yields++ < 1000) {
            sched_yield();
        }
        else {
            nanosleep(&pause, NULL);
        }
    }
}

/* Ops ------------------------------------------------------------------- */

ds_op *
ds_op_new(enum ds_op_kind kind, double ms, ds_mark *mark)
{
    ds_op *op = calloc(1, sizeof(*op));

    if (op != NULL) {
        op->kind = kind;
        op->ms = ms;
        op->mark = mark;
    }
    return op;
}

ds_op *
ds_op_call(enum ds_op_kind kind, void (*call)(void *ctx),
           void (*drop)(void *ctx), void *ctx)
{
    ds_op *op = ds_op_new(kind, 0, NULL);

    if (op == NULL) {
        if (drop != NULL) {
            drop(ctx);
        }
        return NULL;
    }
    op->call = call;
    op->drop = drop;
    op->ctx = ctx;
    return op;
}

void
ds_op_free(ds_op *op)
{
    if (op == NULL) {
        return;
    }
    if (op->drop != NULL) {
        op->drop(op->ctx);
    }
    ds_mark_unref(op->mark);
    dm_op_release(&op->mem);
    if (op->launch != NULL) {
        dk_launch_free(op->launch);
    }
    free(op);
}

void
ds_op_list_free(ds_op *list)
{
    while (list != NULL) {
        ds_op *next = list->next;

        ds_op_free(list);
        list = next;
    }
}

ds_op *
ds_op_list_copy(const ds_op *list, bool run, bool *ok)
{
    ds_op *head = NULL, **tail = &head;

    *ok = true;
    for (; list != NULL; list = list->next) {
        ds_op *op;

        if (list->kind == DS_SIGNAL || list->kind == DS_BLOCK) {
            break; /* never captured: see double_stream.h */
        }
        op = ds_op_new(list->kind, list->ms, NULL);
        if (op == NULL) {
            break;
        }
        op->gate = list->gate;
        op->mem = list->mem;
        op->mem.staging = NULL;
        op->api = list->api;
        *tail = op;
        tail = &op->next;
        if (list->launch != NULL
            && (op->launch = dk_launch_copy(list->launch, run)) == NULL) {
            break;
        }
    }
    if (list != NULL) {   /* out of memory (or an op never copied) */
        ds_op_list_free(head);
        *ok = false;
        return NULL;
    }
    return head;
}

bool
ds_op_list_frame(ds_op **ops, ds_mark **last)
{
    ds_mark *m = ds_mark_new(2);
    ds_op *record = m != NULL ? ds_op_new(DS_RECORD, 0, m) : NULL;
    ds_op *wait = NULL, **tail = ops;

    if (record == NULL) {
        free(m);
        return false;
    }
    if (*last != NULL && !ds_mark_done(*last)) {
        wait = ds_op_new(DS_WAIT, 0, *last);
        if (wait == NULL) {
            ds_op_free(record); /* and the record's reference */
            ds_mark_unref(m);
            return false;
        }
        atomic_fetch_add(&(*last)->refs, 1);
        wait->next = *ops;
        *ops = wait;
    }
    while (*tail != NULL) {
        tail = &(*tail)->next;
    }
    *tail = record;
    record->next = NULL;
    ds_mark_unref(*last);
    *last = m;
    return true;
}

static void
op_run(ds_op *op)
{
    switch (op->kind) {
    case DS_SLEEP:
        ds_sleep_ms(op->ms);
        break;
    case DS_GATE:
        dc_gate_wait(op->gate);
        break;
    case DS_RECORD:
        mark_complete(op->mark);
        break;
    case DS_WAIT:
        ds_mark_wait_blocking(op->mark);
        break;
    case DS_MEMORY:
        dm_op_run(&op->mem);
        break;
    case DS_KERNEL:
        dk_launch_run(op->launch, op->api);
        break;
    case DS_SIGNAL:
    case DS_BLOCK:
        op->call(op->ctx);
        break;
    }
}

/* Queues ---------------------------------------------------------------- */

static void *
queue_worker(void *arg)
{
    ds_queue *q = arg;
    ds_op *op;

    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == NULL && !q->dying) {
            pthread_cond_wait(&q->cv, &q->mu);
        }
        op = q->head;
        if (op == NULL) {
            break;
        }
        /* Work runs while it stays queued (a query sees it pending); a
         * record completes its mark in the critical section that
         * dequeues it, so that a mark seen complete implies a queue seen
         * without it, and the other way round. */
        if (op->kind != DS_RECORD && op->kind != DS_SIGNAL) {
            pthread_mutex_unlock(&q->mu);
            op_run(op);
            pthread_mutex_lock(&q->mu);
        }
        q->head = op->next;
        if (q->head == NULL) {
            q->tail = NULL;
        }
        q->pending -= 1;
        if (op->kind == DS_RECORD || op->kind == DS_SIGNAL) {
            op_run(op);
        }
        ds_op_free(op);
    }
    pthread_mutex_unlock(&q->mu);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
    return NULL;
}

static void
pin_library(void)
{
    Dl_info info;

    /* Detached workers run this library's code until the process ends:
     * a dlclose() that unmapped it would crash them. */
    if (dladdr((void *)&pin_library, &info) && info.dli_fname != NULL) {
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
}

ds_queue *
ds_queue_new(void)
{
    ds_queue *q = calloc(1, sizeof(*q));
    pthread_attr_t attr;
    sigset_t every, saved;
    pthread_t worker;
    int rc;

    if (q == NULL) {
        return NULL;
    }
    pthread_once(&g_pin_once, pin_library);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    /* Signals are for the application's threads, not for workers. */
    sigfillset(&every);
    pthread_sigmask(SIG_SETMASK, &every, &saved);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&worker, &attr, queue_worker, q);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        free(q);
        return NULL;
    }
    return q;
}

void
ds_queue_push(ds_queue *q, ds_op *op)
{
    op->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail == NULL) {
        q->head = op;
    }
    else {
        q->tail->next = op;
    }
    q->tail = op;
    q->pending += 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

long
ds_queue_pending(ds_queue *q)
{
    long n;

    pthread_mutex_lock(&q->mu);
    n = q->pending;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void
ds_queue_retire(ds_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->dying = true;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* A record on source and a wait on waiter for one new mark. */
bool
ds_queue_depend(ds_queue *waiter, ds_queue *source)
{
    ds_mark *m;
    ds_op *record, *wait;

    if (ds_queue_pending(source) == 0) {
        return true;
    }
    m = ds_mark_new(2);
    record = ds_op_new(DS_RECORD, 0, m);
    wait = ds_op_new(DS_WAIT, 0, m);
    if (m == NULL || record == NULL || wait == NULL) {
        free(m);
        free(record);
        free(wait);
        return false;
    }
    ds_queue_push(source, record);
    ds_queue_push(waiter, wait);
    return true;
}

bool
ds_queue_fence(ds_queue *q, ds_mark **out)
{
    ds_mark *m = ds_mark_new(2);
    ds_op *record = ds_op_new(DS_RECORD, 0, m);

    if (m == NULL || record == NULL) {
        free(m);
        free(record);
        return false;
    }
    ds_queue_push(q, record);
    *out = m;
    return true;
}

void
ds_fork_prepare(void)
{
    pthread_mutex_lock(&g_mark_mu);
}

void
ds_fork_release(void)
{
    pthread_mutex_unlock(&g_mark_mu);
}
