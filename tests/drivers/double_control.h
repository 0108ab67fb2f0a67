/*
 * double_control.h - the control layer that every driver test double
 * shares: call counters, fault injection, live-object counts and the
 * parsing of the doubles' environment variables.
 *
 * A double describes its functions and live-object kinds in one
 * dc_control, calls dc_enter() at the top of every driver function, and
 * exports the control API for tests with DC_EXPORT_CONTROL(prefix, ctl):
 *
 *   long long fake_<prefix>_call_count(const char *name)
 *       Calls so far of one driver function (faulted ones included), by
 *       base name or alias; a name ending in "_v2" also means its base
 *       name.  NULL: all calls.  -1 for an unknown name.
 *   void fake_<prefix>_reset_counts(void)
 *   int fake_<prefix>_fail(const char *name, int nth, int code)
 *       Makes the nth call (1-based, counted from now) of that function
 *       return `code` without doing anything; nth == 0: every call from
 *       now on.  When several faults are due on one call the earliest
 *       installed wins and the other one-shot faults are due again on the
 *       next call.  0, or -1 for an unknown name, nth < 0 or more than
 *       DC_MAX_FAULTS pending faults.
 *   void fake_<prefix>_clear_faults(void)
 *   long long fake_<prefix>_live(const char *kind)
 *       Live objects of one kind; -1 for an unknown kind.
 *   int fake_<prefix>_delay(const char *name, double ms)
 *       Makes every later call of that function sleep ms milliseconds on
 *       entry (before a fault answers it), holding no lock of the double,
 *       so that a test can keep a thread inside a driver call (races,
 *       fork); 0 removes the delay.  0, or -1 for an unknown name or a
 *       bad ms.
 *   void fake_<prefix>_reset_detectors(void)
 *       Zeroes the counts of the double's detectors ("bad_access",
 *       "guard_damage"), so that one defect fails the test during which
 *       it was found and not every test after it.
 *   int fake_<prefix>_hold(const char *name, double timeout_ms)
 *       Makes the next call of that function wait on entry (before a
 *       fault answers it, holding no lock of the double) until the test
 *       opens the returned gate with fake_<prefix>_open_gate, or
 *       timeout_ms has passed (a safety net: a test checks that it opened
 *       the gate while the call waited).  The new gate's id, or -1 for an
 *       unknown name, a bad timeout_ms or no gate left.
 *   int fake_<prefix>_held(const char *name)
 *       Calls of that function waiting in a hold now; -1 for an unknown
 *       name.
 *   int fake_<prefix>_hold_expired(const char *name)
 *       Holds of that function so far that ended by their timeout, not
 *       by their gate opening; -1 for an unknown name.
 *
 * Control functions are not counted and never affected by faults.
 */
#ifndef DOUBLE_CONTROL_H
#define DOUBLE_CONTROL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#define DC_MAX_FAULTS 64
#define DC_MAX_FNS 128      /* functions a double may describe */
#define DC_EXPORT __attribute__((visibility("default")))

/* A driver function: the unit of counting and of fault injection. */
typedef struct dc_fn {
    const char *base;  /* "cuStreamDestroy" */
    const char *alias; /* another accepted spelling ("cuStreamDestroy_v2"),
                        * or NULL */
} dc_fn;

typedef struct dc_fault {
    int fn;
    bool every;
    int remaining;
    int code;
} dc_fault;

typedef struct dc_control {
    const char *tag;        /* names the double in messages on stderr */
    int nfns;
    const dc_fn *fns;
    atomic_llong *calls;    /* nfns counters */
    int nkinds;
    const char *const *kinds;
    atomic_llong *live;     /* nkinds counters */
    /* Optional hooks: extra counters to zero with the call counts, and
     * live kinds that the double computes (return -1 for "not mine"). */
    void (*on_reset)(void);
    long long (*live_extra)(const char *kind);
    /* Zeroes the detectors' counts (fake_<prefix>_reset_detectors). */
    void (*reset_detectors)(void);
    /* Faults; the lock is taken first of all the double's locks. */
    pthread_mutex_t fault_mu;
    dc_fault faults[DC_MAX_FAULTS];
    int nfaults;
    atomic_int have_faults;
    atomic_llong delay_us[DC_MAX_FNS]; /* per function, 0: none */
    atomic_int hold_gate[DC_MAX_FNS];  /* the next call waits: 0, none */
    atomic_llong hold_us[DC_MAX_FNS];  /* for at most this long */
    atomic_int held[DC_MAX_FNS];       /* calls waiting in a hold */
    atomic_int expired[DC_MAX_FNS];    /* holds ended by their timeout */
} dc_control;

/* The fields every double sets, from its arrays of functions, call
 * counters, live-kind names and live counters. */
#define DC_ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define DC_CONTROL_INIT(tag_, fns_, calls_, kinds_, live_)              \
    .tag = (tag_), .nfns = DC_ARRAY_LEN(fns_), .fns = (fns_),           \
    .calls = (calls_), .nkinds = DC_ARRAY_LEN(kinds_), .kinds = (kinds_), \
    .live = (live_), .fault_mu = PTHREAD_MUTEX_INITIALIZER

/* Internal to each double: two doubles in one process keep their own. */
#pragma GCC visibility push(hidden)

/* Index of a function by base name, alias or base name + "_v2"; -1. */
int dc_fn_index(const dc_control *ctl, const char *name);

/* Top of every driver function: counts the call; true (and *code set)
 * when a fault answers it. */
bool dc_enter(dc_control *ctl, int fn, int *code);

long long dc_call_count(dc_control *ctl, const char *name);
void dc_reset_counts(dc_control *ctl);
int dc_fail(dc_control *ctl, const char *name, int nth, int code);
void dc_clear_faults(dc_control *ctl);
int dc_delay(dc_control *ctl, const char *name, double ms);
int dc_hold(dc_control *ctl, const char *name, double timeout_ms);
int dc_held(dc_control *ctl, const char *name);
int dc_hold_expired(dc_control *ctl, const char *name);

/* Live objects: kind by index (the double's own enum) or by name. */
void dc_live_add(dc_control *ctl, int kind, long long delta);
long long dc_live_get(dc_control *ctl, int kind);
long long dc_live(dc_control *ctl, const char *kind);

/* A set of live handles: a double looks up every handle it is given (an
 * unknown one is compared, never dereferenced), and a list walk would
 * make each call cost O(live objects).  Open addressing on the pointer
 * value; not locked (the double's own lock guards it). */
typedef struct dc_handles {
    uintptr_t *slots;  /* 0: empty; 1: removed */
    size_t cap, used;  /* used counts removed slots too */
    size_t live;
} dc_handles;

/* false when out of memory (h unchanged). */
bool dc_handles_add(dc_handles *h, const void *p);
void dc_handles_remove(dc_handles *h, const void *p);
bool dc_handles_has(const dc_handles *h, const void *p);

/* Gates: work that a test enqueues on a stream and that does not
 * complete until the test opens it, so a test that asserts "not done
 * yet" does not race a timed sleep on a loaded machine.  Ids start at 1
 * and are never reused; DC_MAX_GATES per process. */
#define DC_MAX_GATES 65536
/* A new closed gate's id, or -1 when all are used. */
int dc_gate_new(void);
/* 0, or -1 for an id that dc_gate_new did not return. */
int dc_gate_open(int id);
bool dc_gate_is_open(int id);
/* Blocks the calling (worker) thread until the gate is open. */
void dc_gate_wait(int id);
/* The same for at most us microseconds. */
void dc_gate_wait_for(int id, long long us);

/* fork(): hold the fault lock across it, so a child finds it usable. */
void dc_fork_prepare(dc_control *ctl);
void dc_fork_release(dc_control *ctl);

/* Environment.  An invalid value is reported on stderr (with ctl->tag)
 * and the default kept.  Integers accept decimal and 0x hex. */
bool dc_env_int(const dc_control *ctl, const char *var, long long lo,
                long long hi, long long *out);
bool dc_env_ull(const dc_control *ctl, const char *var,
                unsigned long long *out);
void dc_env_warn(const dc_control *ctl, const char *var, const char *value);
/* Faults installed at load: "name:nth:code[,name:nth:code...]". */
void dc_env_faults(dc_control *ctl, const char *var);

#pragma GCC visibility pop

#define DC_EXPORT_CONTROL(prefix, ctl)                                  \
    DC_EXPORT long long fake_##prefix##_call_count(const char *name);  \
    DC_EXPORT void fake_##prefix##_reset_counts(void);                  \
    DC_EXPORT int fake_##prefix##_fail(const char *name, int nth,       \
                                       int code);                       \
    DC_EXPORT void fake_##prefix##_clear_faults(void);                  \
    DC_EXPORT long long fake_##prefix##_live(const char *kind);         \
    DC_EXPORT int fake_##prefix##_delay(const char *name, double ms);   \
    DC_EXPORT void fake_##prefix##_reset_detectors(void);               \
    DC_EXPORT int fake_##prefix##_hold(const char *name, double ms);    \
    DC_EXPORT int fake_##prefix##_held(const char *name);               \
    DC_EXPORT int fake_##prefix##_hold_expired(const char *name);       \
    long long fake_##prefix##_call_count(const char *name)              \
    {                                                                   \
        return dc_call_count(&(ctl), name);                             \
    }                                                                   \
    void fake_##prefix##_reset_counts(void)                             \
    {                                                                   \
        dc_reset_counts(&(ctl));                                        \
    }                                                                   \
    int fake_##prefix##_fail(const char *name, int nth, int code)       \
    {                                                                   \
        return dc_fail(&(ctl), name, nth, code);                        \
    }                                                                   \
    void fake_##prefix##_clear_faults(void)                             \
    {                                                                   \
        dc_clear_faults(&(ctl));                                        \
    }                                                                   \
    long long fake_##prefix##_live(const char *kind)                    \
    {                                                                   \
        return dc_live(&(ctl), kind);                                   \
    }                                                                   \
    int fake_##prefix##_delay(const char *name, double ms)              \
    {                                                                   \
        return dc_delay(&(ctl), name, ms);                              \
    }                                                                   \
    void fake_##prefix##_reset_detectors(void)                          \
    {                                                                   \
        if ((ctl).reset_detectors != NULL) {                            \
            (ctl).reset_detectors();                                    \
        }                                                               \
    }                                                                   \
    int fake_##prefix##_hold(const char *name, double ms)               \
    {                                                                   \
        return dc_hold(&(ctl), name, ms);                               \
    }                                                                   \
    int fake_##prefix##_held(const char *name)                          \
    {                                                                   \
        return dc_held(&(ctl), name);                                   \
    }                                                                   \
    int fake_##prefix##_hold_expired(const char *name)                  \
    {                                                                   \
        return dc_hold_expired(&(ctl), name);                           \
    }

#endif /* DOUBLE_CONTROL_H */
