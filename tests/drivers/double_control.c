/*
 * double_control.c - counters, faults, live counts and environment
 * parsing shared by the driver test doubles (see double_control.h).
 * Linked into each double by the Makefile; nothing here is exported.
 */
#define _GNU_SOURCE

#include "double_control.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int
dc_fn_index(const dc_control *ctl, const char *name)
{
    size_t len;

    if (name == NULL) {
        return -1;
    }
    for (int i = 0; i < ctl->nfns; i++) {
        if (strcmp(name, ctl->fns[i].base) == 0 ||
            (ctl->fns[i].alias != NULL &&
             strcmp(name, ctl->fns[i].alias) == 0)) {
            return i;
        }
    }
    /* Older and newer variants (cuEventElapsedTime_v2 ...) count under
     * their base name too. */
    len = strlen(name);
    if (len > 3 && strcmp(name + len - 3, "_v2") == 0) {
        for (int i = 0; i < ctl->nfns; i++) {
            if (strlen(ctl->fns[i].base) == len - 3 &&
                strncmp(name, ctl->fns[i].base, len - 3) == 0) {
                return i;
            }
        }
    }
    return -1;
}

static bool
fault_fires(dc_control *ctl, int fn, int *code)
{
    bool fired = false;
    int i = 0;

    pthread_mutex_lock(&ctl->fault_mu);
    while (i < ctl->nfaults) {
        dc_fault *f = &ctl->faults[i];

        if (f->fn != fn) {
            i++;
            continue;
        }
        if (!f->every && --f->remaining > 0) {
            i++;
            continue;
        }
        if (fired) {
            /* Due too, but this call is taken: due on the next one. */
            if (!f->every) {
                f->remaining = 1;
            }
            i++;
            continue;
        }
        fired = true;
        *code = f->code;
        if (f->every) {
            i++;
            continue;
        }
        memmove(f, f + 1, (size_t)(ctl->nfaults - i - 1) * sizeof(*f));
        ctl->nfaults--;
    }
    atomic_store(&ctl->have_faults, ctl->nfaults > 0);
    pthread_mutex_unlock(&ctl->fault_mu);
    return fired;
}

bool
dc_enter(dc_control *ctl, int fn, int *code)
{
    long long us = fn < DC_MAX_FNS
                       ? atomic_load_explicit(&ctl->delay_us[fn],
                                              memory_order_relaxed)
                       : 0;

    atomic_fetch_add_explicit(&ctl->calls[fn], 1, memory_order_relaxed);
    if (us > 0) {
        /* No lock held: only the calling thread waits here. */
        struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000)
                                                          * 1000};

        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    if (fn < DC_MAX_FNS && atomic_load(&ctl->hold_gate[fn]) != 0) {
        int gate = atomic_exchange(&ctl->hold_gate[fn], 0);

        if (gate > 0) {
            atomic_fetch_add(&ctl->held[fn], 1);
            dc_gate_wait_for(gate, atomic_load(&ctl->hold_us[fn]));
            if (!dc_gate_is_open(gate)) {
                atomic_fetch_add(&ctl->expired[fn], 1);
            }
            atomic_fetch_sub(&ctl->held[fn], 1);
        }
    }
    return atomic_load(&ctl->have_faults) && fault_fires(ctl, fn, code);
}

int
dc_hold(dc_control *ctl, const char *name, double timeout_ms)
{
    int fn = dc_fn_index(ctl, name);
    int gate;

    if (fn < 0 || fn >= DC_MAX_FNS
        || !(timeout_ms > 0.0 && timeout_ms < 1e9)) {
        return -1;
    }
    gate = dc_gate_new();
    if (gate > 0) {
        atomic_store(&ctl->hold_us[fn], (long long)(timeout_ms * 1e3));
        atomic_store(&ctl->hold_gate[fn], gate);
    }
    return gate;
}

int
dc_held(dc_control *ctl, const char *name)
{
    int fn = dc_fn_index(ctl, name);

    return fn < 0 || fn >= DC_MAX_FNS ? -1 : atomic_load(&ctl->held[fn]);
}

int
dc_hold_expired(dc_control *ctl, const char *name)
{
    int fn = dc_fn_index(ctl, name);

    return fn < 0 || fn >= DC_MAX_FNS ? -1 : atomic_load(&ctl->expired[fn]);
}

int
dc_delay(dc_control *ctl, const char *name, double ms)
{
    int fn = dc_fn_index(ctl, name);

    if (fn < 0 || fn >= DC_MAX_FNS || !(ms >= 0.0 && ms < 1e9)) {
        return -1;
    }
    atomic_store(&ctl->delay_us[fn], (long long)(ms * 1e3));
    return 0;
}

long long
dc_call_count(dc_control *ctl, const char *name)
{
    long long n = 0;
    int fn;

    if (name == NULL) {
        for (int i = 0; i < ctl->nfns; i++) {
            n += atomic_load(&ctl->calls[i]);
        }
        return n;
    }
    fn = dc_fn_index(ctl, name);
    return fn < 0 ? -1 : atomic_load(&ctl->calls[fn]);
}

void
dc_reset_counts(dc_control *ctl)
{
    for (int i = 0; i < ctl->nfns; i++) {
        atomic_store(&ctl->calls[i], 0);
    }
    if (ctl->on_reset != NULL) {
        ctl->on_reset();
    }
}

int
dc_fail(dc_control *ctl, const char *name, int nth, int code)
{
    int fn = dc_fn_index(ctl, name);
    int rc = 0;

    if (fn < 0 || nth < 0) {
        return -1;
    }
    pthread_mutex_lock(&ctl->fault_mu);
    if (ctl->nfaults == DC_MAX_FAULTS) {
        rc = -1;
    }
    else {
        dc_fault *f = &ctl->faults[ctl->nfaults++];

        f->fn = fn;
        f->every = nth == 0;
        f->remaining = nth;
        f->code = code;
        atomic_store(&ctl->have_faults, 1);
    }
    pthread_mutex_unlock(&ctl->fault_mu);
    return rc;
}

void
dc_clear_faults(dc_control *ctl)
{
    pthread_mutex_lock(&ctl->fault_mu);
    ctl->nfaults = 0;
    atomic_store(&ctl->have_faults, 0);
    pthread_mutex_unlock(&ctl->fault_mu);
}

void
dc_live_add(dc_control *ctl, int kind, long long delta)
{
    atomic_fetch_add(&ctl->live[kind], delta);
}

long long
dc_live_get(dc_control *ctl, int kind)
{
    return atomic_load(&ctl->live[kind]);
}

long long
dc_live(dc_control *ctl, const char *kind)
{
    if (kind == NULL) {
        return -1;
    }
    for (int i = 0; i < ctl->nkinds; i++) {
        if (strcmp(kind, ctl->kinds[i]) == 0) {
            return atomic_load(&ctl->live[i]);
        }
    }
    return ctl->live_extra != NULL ? ctl->live_extra(kind) : -1;
}

void
dc_fork_prepare(dc_control *ctl)
{
    pthread_mutex_lock(&ctl->fault_mu);
}

void
dc_fork_release(dc_control *ctl)
{
    pthread_mutex_unlock(&ctl->fault_mu);
}

void
dc_env_warn(const dc_control *ctl, const char *var, const char *value)
{
    fprintf(stderr, "%s: ignoring %s=\"%s\"\n", ctl->tag, var, value);
}

bool
dc_env_int(const dc_control *ctl, const char *var, long long lo,
           long long hi, long long *out)
{
    const char *value = getenv(var);
    char *end;
    long long v;

    if (value == NULL || *value == '\0') {
        return false;
    }
    errno = 0;
    v = strtoll(value, &end, 0);
    if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi) {
        dc_env_warn(ctl, var, value);
        return false;
    }
    *out = v;
    return true;
}

bool
dc_env_ull(const dc_control *ctl, const char *var, unsigned long long *out)
{
    const char *value = getenv(var);
    unsigned long long v;
    char *end;

    if (value == NULL || *value == '\0') {
        return false;
    }
    errno = 0;
    v = strtoull(value, &end, 0);
    if (errno != 0 || end == value || *end != '\0' || value[0] == '-') {
        dc_env_warn(ctl, var, value);
        return false;
    }
    *out = v;
    return true;
}

void
dc_env_faults(dc_control *ctl, const char *var)
{
    const char *value = getenv(var);
    char *copy, *item, *save = NULL;

    if (value == NULL || (copy = strdup(value)) == NULL) {
        return;
    }
    for (item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char *nth = strchr(item, ':');
        char *code = nth != NULL ? strchr(nth + 1, ':') : NULL;
        char *end1, *end2;
        long n;
        long long c;

        if (code == NULL) {
            dc_env_warn(ctl, var, item);
            continue;
        }
        *nth++ = '\0';
        *code++ = '\0';
        n = strtol(nth, &end1, 10);
        c = strtoll(code, &end2, 0);
        if (end1 == nth || *end1 != '\0' || end2 == code || *end2 != '\0' ||
            n < 0 || n > 1000000000L || c < -2147483648LL ||
            c > 4294967295LL || dc_fail(ctl, item, (int)n, (int)c) != 0) {
            nth[-1] = ':';
            code[-1] = ':';
            dc_env_warn(ctl, var, item);
        }
    }
    free(copy);
}

/* Handle sets ------------------------------------------------------------ */

#define SLOT_EMPTY ((uintptr_t)0)
#define SLOT_REMOVED ((uintptr_t)1)

static size_t
slot_of(uintptr_t key, size_t cap)
{
    /* Fibonacci hashing: heap pointers share their low bits. */
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static bool
handles_resize(dc_handles *h, size_t cap)
{
    uintptr_t *old = h->slots, *slots = calloc(cap, sizeof(*slots));
    size_t old_cap = h->cap;

    if (slots == NULL) {
        return false;
    }
    h->slots = slots;
    h->cap = cap;
    h->used = 0;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i] > SLOT_REMOVED) {
            size_t j = slot_of(old[i], cap);

            while (slots[j] != SLOT_EMPTY) {
                j = (j + 1) & (cap - 1);
            }
            slots[j] = old[i];
            h->used++;
        }
    }
    free(old);
    return true;
}

bool
dc_handles_add(dc_handles *h, const void *p)
{
    uintptr_t key = (uintptr_t)p;
    size_t j;

    /* Rehash at half full; grow only if live handles fill a quarter. */
    if (2 * (h->used + 1) > h->cap
        && !handles_resize(h, h->cap == 0 ? 64
                              : 4 * (h->live + 1) > h->cap ? 2 * h->cap
                              : h->cap)) {
        return false;
    }
    j = slot_of(key, h->cap);
    while (h->slots[j] > SLOT_REMOVED) {
        j = (j + 1) & (h->cap - 1);
    }
    if (h->slots[j] == SLOT_EMPTY) {
        h->used++;
    }
    h->slots[j] = key;
    h->live++;
    return true;
}

static size_t
handles_find(const dc_handles *h, uintptr_t key)
{
    size_t j;

    if (h->cap == 0 || key <= SLOT_REMOVED) {
        return (size_t)-1;
    }
    j = slot_of(key, h->cap);
    while (h->slots[j] != SLOT_EMPTY) {
        if (h->slots[j] == key) {
            return j;
        }
        j = (j + 1) & (h->cap - 1);
    }
    return (size_t)-1;
}

void
dc_handles_remove(dc_handles *h, const void *p)
{
    size_t j = handles_find(h, (uintptr_t)p);

    if (j != (size_t)-1) {
        h->slots[j] = SLOT_REMOVED;
        h->live--;
    }
}

bool
dc_handles_has(const dc_handles *h, const void *p)
{
    return handles_find(h, (uintptr_t)p) != (size_t)-1;
}

/* Gates -------------------------------------------------------------- */

static atomic_uchar g_gate_open[DC_MAX_GATES];
static atomic_int g_gate_next = 1;
static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;

int
dc_gate_new(void)
{
    int id = atomic_fetch_add(&g_gate_next, 1);

    if (id <= 0 || id >= DC_MAX_GATES) {
        return -1;
    }
    return id;
}

int
dc_gate_open(int id)
{
    if (id <= 0 || id >= DC_MAX_GATES || id >= atomic_load(&g_gate_next)) {
        return -1;
    }
    pthread_mutex_lock(&g_gate_mu);
    atomic_store(&g_gate_open[id], 1);
    pthread_cond_broadcast(&g_gate_cv);
    pthread_mutex_unlock(&g_gate_mu);
    return 0;
}

bool
dc_gate_is_open(int id)
{
    return id > 0 && id < DC_MAX_GATES && atomic_load(&g_gate_open[id]);
}

void
dc_gate_wait(int id)
{
    if (id <= 0 || id >= DC_MAX_GATES) {
        return;
    }
    pthread_mutex_lock(&g_gate_mu);
    while (!atomic_load(&g_gate_open[id])) {
        pthread_cond_wait(&g_gate_cv, &g_gate_mu);
    }
    pthread_mutex_unlock(&g_gate_mu);
}

void
dc_gate_wait_for(int id, long long us)
{
    struct timespec until;

    if (id <= 0 || id >= DC_MAX_GATES) {
        return;
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(us / 1000000);
    until.tv_nsec += (long)(us % 1000000) * 1000;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g_gate_mu);
    while (!atomic_load(&g_gate_open[id])
           && pthread_cond_timedwait(&g_gate_cv, &g_gate_mu, &until)
                  != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&g_gate_mu);
}
