/*
 * allocator.c - device memory blocks for Buffer (the acc_malloc family
 * of accel.h) on the backends' raw mem_alloc/mem_free slots.
 *
 * This is the direct allocator: every block is one driver allocation,
 * and acc_free hands the memory back to the driver only once the work
 * queued on the block's stream and on every recorded stream has
 * completed (memory.c's deferred release: an event per busy stream,
 * polled, never waited for).  The caching allocator (issue #13) replaces
 * the inside of this file and keeps this mode as ACCELERATOR_ALLOCATOR=
 * direct.
 */
#define _GNU_SOURCE
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct acc_block {
    int device;
    size_t size;             /* bytes asked for */
    uintptr_t ptr;           /* 0 for an empty block */
    acc_stream *stream;      /* the stream it is ordered on (a reference) */
    int nrecorded, cap;
    acc_stream **recorded;   /* record_stream()'s streams (references) */
};

/* "1.50 GiB" for a byte count. */
static void
format_size(char *buf, size_t len, unsigned long long bytes)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB",
                                        "PiB", "EiB"};
    double value = (double)bytes;
    int unit = 0;

    if (bytes < 1024) {
        snprintf(buf, len, "%llu bytes", bytes);
        return;
    }
    while (value >= 1024.0 && unit < 6) {
        value /= 1024.0;
        unit++;
    }
    snprintf(buf, len, "%.2f %s", value, units[unit]);
}

/* torch's message: the size asked for, the device's free and total. */
static void
out_of_memory(const acc_backend *b, int device, size_t nbytes,
              acc_error *err)
{
    char asked[32], free_text[32], total_text[32], driver[sizeof(err->message)];
    size_t free_bytes = 0, total_bytes = 0;
    acc_error info_err;

    snprintf(driver, sizeof(driver), "%s", err->message);
    format_size(asked, sizeof(asked), nbytes);
    if (b->memory_info != NULL
        && b->memory_info(device, &free_bytes, &total_bytes, &info_err)
           == ACC_OK) {
        format_size(free_text, sizeof(free_text), free_bytes);
        format_size(total_text, sizeof(total_text), total_bytes);
        snprintf(err->message, sizeof(err->message),
                 "%s out of memory. Tried to allocate %s (%zu bytes). "
                 "Device %d has a total capacity of %s of which %s (%zu "
                 "bytes) is free. [%.200s]", b->name, asked, nbytes, device,
                 total_text, free_text, free_bytes, driver);
    }
    else {
        snprintf(err->message, sizeof(err->message),
                 "%s out of memory. Tried to allocate %s (%zu bytes) on "
                 "device %d. [%.200s]", b->name, asked, nbytes, device, driver);
    }
    err->status = ACC_ERR_OUT_OF_MEMORY;
}

acc_status
acc_malloc(int device, size_t nbytes, acc_stream *stream, acc_block **out,
           acc_error *err)
{
    const acc_backend *b;
    acc_block *blk;
    acc_status st = acc_check_device(device, err);

    if (st == ACC_OK) {
        st = acc_ready(err);
    }
    if (st != ACC_OK) {
        return st;
    }
    b = acc_selected_backend();
    if (!acc_has_memory()) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED,
                      "backend %s does not support device memory", b->name);
        return ACC_ERR_UNSUPPORTED;
    }
    if (stream->device != device) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT,
                      "the stream is on device %d, expected a stream of "
                      "device %d (the buffer's)", stream->device, device);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    blk = calloc(1, sizeof(*blk));
    if (blk == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return ACC_ERR_HOST_MEMORY;
    }
    if (nbytes > 0) {
        /* Memory whose work is done goes back first. */
        (void)acc_deferred_poll(0);
        st = b->mem_alloc(device, nbytes, &blk->ptr, err);
        if (st == ACC_ERR_OUT_OF_MEMORY && acc_deferred_poll(0) > 0) {
            /* Freed blocks still waiting on their streams hold memory:
             * wait for them and try once more, as torch frees its cache
             * before giving up. */
            (void)acc_deferred_poll(1);
            st = b->mem_alloc(device, nbytes, &blk->ptr, err);
        }
        if (st != ACC_OK) {
            if (st == ACC_ERR_OUT_OF_MEMORY) {
                out_of_memory(b, device, nbytes, err);
            }
            free(blk);
            return st;
        }
    }
    blk->device = device;
    blk->size = nbytes;
    acc_stream_incref(stream);
    blk->stream = stream;
    *out = blk;
    return ACC_OK;
}

uintptr_t
acc_block_ptr(const acc_block *b)
{
    return b->ptr;
}

size_t
acc_block_size(const acc_block *b)
{
    return b->size;
}

int
acc_block_device(const acc_block *b)
{
    return b->device;
}

acc_status
acc_block_record_stream(acc_block *b, acc_stream *s, acc_error *err)
{
    if (s == b->stream) {
        return ACC_OK;
    }
    return acc_stream_list_add(&b->recorded, &b->nrecorded, &b->cap, s, err);
}

static void
device_release(int device, uintptr_t ptr)
{
    const acc_backend *b = acc_selected_backend();
    acc_error err;

    if (b->mem_free(device, ptr, &err) != ACC_OK) {
        acc_trace("freeing device memory: %s", err.message);
    }
}

void
acc_free(acc_block *b)
{
    acc_stream *one[1];

    if (b == NULL) {
        return;
    }
    if (b->ptr != 0) {
        if (b->nrecorded == 0) {
            one[0] = b->stream;
            acc_defer_release(b->device, b->ptr, device_release, one, 1);
        }
        else {
            /* The block's own stream joins the recorded ones. */
            acc_error err;

            if (acc_stream_list_add(&b->recorded, &b->nrecorded, &b->cap,
                                    b->stream, &err) != ACC_OK) {
                (void)acc_stream_synchronize(b->stream, &err);
            }
            acc_defer_release(b->device, b->ptr, device_release,
                              b->recorded, b->nrecorded);
        }
    }
    for (int i = 0; i < b->nrecorded; i++) {
        acc_stream_decref(b->recorded[i]);
    }
    free(b->recorded);
    acc_stream_decref(b->stream);
    free(b);
}

void
acc_allocator_release(void)
{
    (void)acc_deferred_poll(0);
}
