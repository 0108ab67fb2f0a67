/*
 * base.h - the base layer's state-keeping half (error.c): tracing with
 * ACCELERATOR_DEBUG and the error record's wording, which names the
 * selected backend.  Its stateless half (acc_format, acc_utf8_whole,
 * acc_error_driver) is static inline in accelerator/types.h.  No Python,
 * no driver; every layer above may use it, backends through the host
 * services (accelerator/backend.h's acc_host), never by name.
 */
#ifndef ACCEL_BASE_H
#define ACCEL_BASE_H

#include <accelerator/types.h>

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called once, by the probe: trace on stderr from now on (on != 0). */
void acc_trace_enable(int on);
/* Called once, when a backend is selected: acc_error_set names it. */
void acc_error_select(const char *backend);

/* A trace line on stderr ("accelerator: " fmt) with ACCELERATOR_DEBUG. */
void acc_trace(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
void acc_vtrace(const char *fmt, va_list ap);

/* Fill err with status and a message (the backend: the selected one). */
void acc_error_set(acc_error *err, acc_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void acc_verror_set(acc_error *err, acc_status status, const char *fmt,
                    va_list ap);

/* The errors that several core files meet, worded here once; each fills
 * err and returns its status.  ACC_ERR_UNSUPPORTED: "backend X does not
 * support <what>", X the selected backend. */
acc_status acc_error_unsupported(const char *what, acc_error *err);
/* ACC_ERR_HOST_MEMORY: malloc failed. */
acc_status acc_error_host_memory(acc_error *err);
/* ACC_ERR_INVALID_ARGUMENT unless stream s is on `device`, the device of
 * the memory it is to work on. */
acc_status acc_check_stream_of_buffer(const acc_stream *s, int device,
                                      acc_error *err);

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_BASE_H */
