/*
 * restore.c - `with` blocks (device_index, Stream): what each block of
 * this thread restores on exit, innermost last.  Per thread, so one
 * device_index or Stream object entered by two threads at once restores
 * each thread's own state.  The stack is released by a pthread key
 * destructor when the thread ends.
 */
#include "core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct restore_entry {
    const void *owner;   /* identifies the object that entered */
    int device;          /* the device to restore, or -1 */
    acc_stream *stream;  /* the stream to restore (a reference), or NULL */
} restore_entry;

static ACC_TLS restore_entry *tls_restore;
static ACC_TLS size_t tls_restore_len, tls_restore_cap;
static pthread_key_t thread_key;  /* runs release_thread_stack at exit */
static int thread_key_value;      /* any non-NULL value arms it */

static void
release_thread_stack(void *unused)
{
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
}

/* At load: no driver is touched. */
__attribute__((constructor)) static void
create_thread_key(void)
{
    pthread_key_create(&thread_key, release_thread_stack);
}

acc_status
acc_restore_push(const void *owner, int device, acc_stream *stream,
                 acc_error *err)
{
    restore_entry *entry;

    if (tls_restore_len == tls_restore_cap) {
        size_t cap = tls_restore_cap ? 2 * tls_restore_cap : 8;
        restore_entry *grown = realloc(tls_restore, cap * sizeof(*grown));

        if (grown == NULL) {
            return acc_error_host_memory(err);
        }
        if (tls_restore == NULL) {
            pthread_setspecific(thread_key, &thread_key_value);
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
