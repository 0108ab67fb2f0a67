/*
 * double_stream.h - asynchronous streams for driver test doubles.
 *
 * A queue (ds_queue) is a stream's work: operations run in order on the
 * queue's own worker thread, so work completes asynchronously as on a
 * GPU.  Marks are points in a queue: a record op completes one (with a
 * time stamp), a wait op blocks its queue until one completes, and host
 * threads wait on them blocking or spinning.  Marks are reference
 * counted, so a destroyed event or stream never pulls one from under a
 * worker or a waiter.
 *
 * The double keeps its own registry of streams and their meaning (devices,
 * default-stream rules); this file only runs the work: waits, sleeps,
 * copies (double_memory.c) and launches of native kernels
 * (double_kernels.c).  The HIP double
 * runs on it (stream capture too: the graph helpers below); the CUDA
 * double has its own copy of the same engine (it predates this file).
 */
#ifndef DOUBLE_STREAM_H
#define DOUBLE_STREAM_H

#include <stdatomic.h>
#include <stdbool.h>

#include "double_kernels.h"
#include "double_memory.h"

typedef struct ds_mark {
    atomic_int refs;
    atomic_int done;
    double stamp_ms; /* when it completed (CLOCK_MONOTONIC) */
} ds_mark;

enum ds_op_kind {
    DS_SLEEP, DS_GATE, DS_RECORD, DS_WAIT, DS_MEMORY, DS_KERNEL,
    DS_SIGNAL, DS_BLOCK
};

typedef struct ds_op {
    struct ds_op *next;
    enum ds_op_kind kind;
    double ms;      /* DS_SLEEP */
    int gate;       /* DS_GATE: a double_control gate */
    ds_mark *mark;  /* DS_RECORD, DS_WAIT: one reference, the op's */
    dm_op mem;      /* DS_MEMORY: a copy or fill */
    /* DS_KERNEL: the launch (the op's): queued where the op runs, a
     * graph's node (not queued) in a graph's list; api names it in the
     * kernel layer's reports. */
    dk_launch *launch;
    const char *api;
    /* DS_SIGNAL, DS_BLOCK (ds_op_call): call(ctx) on the worker, a
     * double's own completion or wait (an interprocess event's shared
     * cell): DS_SIGNAL where a record completes its mark (it must not
     * block), DS_BLOCK as a wait does, holding the queue until it
     * returns.  drop(ctx) when the op is freed.  Never in a graph's
     * list. */
    void (*call)(void *ctx);
    void (*drop)(void *ctx);
    void *ctx;
} ds_op;

typedef struct ds_queue ds_queue;

#pragma GCC visibility push(hidden)

double ds_now_ms(void);
void ds_sleep_ms(double ms);

/* A new mark holding refs references; NULL when out of memory. */
ds_mark *ds_mark_new(int refs);
void ds_mark_unref(ds_mark *m);
bool ds_mark_done(ds_mark *m);
void ds_mark_wait_blocking(ds_mark *m);
void ds_mark_wait_spinning(ds_mark *m);

/* An op that takes over the caller's reference to mark (may be NULL);
 * NULL when out of memory. */
ds_op *ds_op_new(enum ds_op_kind kind, double ms, ds_mark *mark);
void ds_op_free(ds_op *op);
/* A DS_SIGNAL or DS_BLOCK op running call(ctx); drop (may be NULL) then
 * releases ctx when the op is freed.  NULL when out of memory, ctx then
 * dropped already. */
ds_op *ds_op_call(enum ds_op_kind kind, void (*call)(void *ctx),
                  void (*drop)(void *ctx), void *ctx);

/* Lists of ops linked by next (a captured graph's work). */
void ds_op_list_free(ds_op *list);
/* A copy of list, a graph's (marks and staging are not copied: a
 * captured copy has none; DS_SIGNAL and DS_BLOCK ops are never in one,
 * and cannot be copied: *ok false).  run: the copy is to be queued (its launches
 * queued ones); else it is another graph's list (its launches nodes).
 * NULL and *ok false when out of memory. */
ds_op *ds_op_list_copy(const ds_op *list, bool run, bool *ok);
/* Frame one launch of a graph's ops (*ops, a copy): first wait for the
 * previous launch's end (*last), last complete a new end mark, which
 * replaces *last; false when out of memory (*ops unchanged). */
bool ds_op_list_frame(ds_op **ops, ds_mark **last);

/* A queue with its worker running; NULL when out of memory or threads. */
ds_queue *ds_queue_new(void);
/* Queue op (taken over). */
void ds_queue_push(ds_queue *q, ds_op *op);
/* Ops queued and not finished, the running one included. */
long ds_queue_pending(ds_queue *q);
/* The queue dies: its worker drains it and frees it; q must not be used
 * afterwards. */
void ds_queue_retire(ds_queue *q);
/* Make waiter's next op wait for the work queued on source so far
 * (nothing when source is idle); false when out of memory. */
bool ds_queue_depend(ds_queue *waiter, ds_queue *source);
/* *out: a mark (one reference for the caller) that completes when the
 * work queued on q so far has run; false when out of memory.  The record
 * op is pushed as is: a double that orders default streams implicitly
 * queues its own record instead. */
bool ds_queue_fence(ds_queue *q, ds_mark **out);

/* fork(): the marks' lock, held across it. */
void ds_fork_prepare(void);
void ds_fork_release(void);

#pragma GCC visibility pop

#endif /* DOUBLE_STREAM_H */
