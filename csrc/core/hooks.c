/*
 * hooks.c - the table of lifecycle hooks (core.h's acc_hooks): how the
 * layers above the dispatcher hear that a stream is destroyed, that the
 * cache is emptied, that the backend shuts down, that this is the child
 * of a fork, or that an event was recorded, waited for or released,
 * without the dispatcher calling them by name.
 *
 * Registration happens in constructors, at load, on one thread, before
 * any hook can run; the list is only read afterwards, so it needs no
 * lock.
 */
#include "core.h"

#include <stddef.h>

static acc_hooks *first;
static acc_hooks **last = &first;

void
acc_hooks_register(acc_hooks *hooks)
{
    hooks->next = NULL;
    *last = hooks;
    last = &hooks->next;
}

void
acc_hooks_stream_destroyed(const acc_stream *s)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->stream_destroyed != NULL) {
            h->stream_destroyed(s);
        }
    }
}

void
acc_hooks_empty_cache(void)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->empty_cache != NULL) {
            h->empty_cache();
        }
    }
}

void
acc_hooks_shutdown(void)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->shutdown != NULL) {
            h->shutdown();
        }
    }
}

void
acc_hooks_after_fork_child(void)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->after_fork_child != NULL) {
            h->after_fork_child();
        }
    }
}

int acc_hooks_event_watchers;

void
acc_hooks_watch_events(int delta)
{
    __atomic_add_fetch(&acc_hooks_event_watchers, delta, __ATOMIC_ACQ_REL);
}

void
acc_hooks_event_recorded(const acc_event *e, const acc_stream *s)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->event_recorded != NULL) {
            h->event_recorded(e, s);
        }
    }
}

void
acc_hooks_stream_waited(const acc_stream *s, const acc_event *e)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->stream_waited != NULL) {
            h->stream_waited(s, e);
        }
    }
}

void
acc_hooks_event_released(const acc_event *e)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->event_released != NULL) {
            h->event_released(e);
        }
    }
}

int
acc_hooks_keep_block(acc_block *b)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->keep_block != NULL && h->keep_block(b)) {
            return 1;
        }
    }
    return 0;
}

int
acc_hooks_keep_event(acc_event *e)
{
    for (acc_hooks *h = first; h != NULL; h = h->next) {
        if (h->keep_event != NULL && h->keep_event(e)) {
            return 1;
        }
    }
    return 0;
}
