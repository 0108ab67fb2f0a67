/*
 * error.c - the base's state: tracing on stderr with ACCELERATOR_DEBUG=1
 * and the error record's wording (acc_error_set), which names the
 * selected backend.  Formatting without cutting a character
 * (acc_format, acc_utf8_whole) and the driver error's wording
 * (acc_error_driver) are static inline in accelerator/types.h.
 *
 * The bottom layer: it calls nothing above it.  The probe tells it
 * whether to trace and, once a backend is selected, its name; backends
 * reach it through the host services (core/host.c), never by name.
 */
#include "base.h"

#include <stdarg.h>
#include <stdio.h>

static struct {
    int debug;                 /* ACCELERATOR_DEBUG=1 */
    const char *backend;       /* the selected backend's name, or NULL */
} E;

void
acc_trace_enable(int on)
{
    E.debug = on;
}

void
acc_error_select(const char *backend)
{
    E.backend = backend;
}

/* Tracing ---------------------------------------------------------------- */

void
acc_vtrace(const char *fmt, va_list ap)
{
    if (!E.debug) {
        return;
    }
    fputs("accelerator: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void
acc_trace(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    acc_vtrace(fmt, ap);
    va_end(ap);
}

/* Errors ----------------------------------------------------------------- */

void
acc_verror_set(acc_error *err, acc_status status, const char *fmt,
               va_list ap)
{
    err->status = status;
    err->backend = E.backend;
    err->api = NULL;
    err->code = 0;
    err->code_name = NULL;
    acc_vformat(err->message, sizeof(err->message), fmt, ap);
}

void
acc_error_set(acc_error *err, acc_status status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    acc_verror_set(err, status, fmt, ap);
    va_end(ap);
}

acc_status
acc_error_unsupported(const char *what, acc_error *err)
{
    acc_error_set(err, ACC_ERR_UNSUPPORTED, "backend %s does not support %s",
                  E.backend, what);
    return ACC_ERR_UNSUPPORTED;
}

acc_status
acc_error_host_memory(acc_error *err)
{
    acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
    return ACC_ERR_HOST_MEMORY;
}

acc_status
acc_check_stream_of_buffer(const acc_stream *s, int device, acc_error *err)
{
    if (s->device == device) {
        return ACC_OK;
    }
    acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the stream is on device "
                  "%d, expected a stream of device %d (the buffer's)",
                  s->device, device);
    return ACC_ERR_INVALID_ARGUMENT;
}
