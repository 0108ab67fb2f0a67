/*
 * error.c - the error record and tracing: how the core and the backends
 * word a failure (acc_error_set, acc_error_driver), format into fixed
 * buffers without cutting a character, and trace on stderr with
 * ACCELERATOR_DEBUG=1.
 *
 * The bottom of the core: it calls no other core file.  The probe tells
 * it whether to trace and, once a backend is selected, its name.
 */
#include "../core/core.h"

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

int
acc_debug_enabled(void)
{
    return E.debug;
}

void
acc_trace(const char *fmt, ...)
{
    va_list ap;

    if (!E.debug) {
        return;
    }
    va_start(ap, fmt);
    fputs("accelerator: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Errors ----------------------------------------------------------------- */

size_t
acc_utf8_whole(const char *text, size_t length)
{
    size_t tail = 0;
    unsigned char lead;
    size_t need;

    /* Back over the continuation bytes (10xxxxxx) to the last lead byte;
     * it says how many bytes its character has. */
    while (tail < 3 && tail < length
           && ((unsigned char)text[length - 1 - tail] & 0xC0) == 0x80) {
        tail++;
    }
    if (tail == length) {
        return length;
    }
    lead = (unsigned char)text[length - 1 - tail];
    need = lead >= 0xF8 ? 0 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3
         : lead >= 0xC0 ? 2 : 0;
    return need > tail + 1 ? length - 1 - tail : length;
}

static size_t
format_v(char *buf, size_t size, const char *fmt, va_list ap)
{
    int n = vsnprintf(buf, size, fmt, ap);
    size_t length;

    if (n < 0) {
        buf[0] = '\0';
        return 0;
    }
    if ((size_t)n < size) {
        return (size_t)n;
    }
    /* Cut: never leave half a character (a value from the environment or
     * the driver may be any text). */
    length = acc_utf8_whole(buf, size - 1);
    buf[length] = '\0';
    return length;
}

size_t
acc_format(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    size_t length;

    va_start(ap, fmt);
    length = format_v(buf, size, fmt, ap);
    va_end(ap);
    return length;
}

void
acc_error_set(acc_error *err, acc_status status, const char *fmt, ...)
{
    va_list ap;

    err->status = status;
    err->backend = E.backend;
    err->api = NULL;
    err->code = 0;
    err->code_name = NULL;
    va_start(ap, fmt);
    format_v(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
}

void
acc_error_driver(acc_error *err, const char *backend, const char *api,
                 long long code, const char *code_name, acc_status status)
{
    err->status = status;
    err->backend = backend;
    err->api = api;
    err->code = code;
    err->code_name = code_name;
    acc_format(err->message, sizeof(err->message), "%s() failed: %s (%lld)",
               api, code_name ? code_name : "unknown error", code);
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
