/*
 * device.c - devices: the per-thread current device, index checks, the
 * device made current in the driver's sense, synchronisation, and the
 * device's properties and memory information.
 *
 * A new thread starts on device 0, as in torch.
 */
#include "core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

typedef struct properties_slot {
    atomic_int ready;
    acc_device_properties props;
} properties_slot;

static struct {
    pthread_mutex_t lock;      /* filling a properties slot */
    properties_slot properties[ACC_MAX_DEVICES];
} D = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* The current device is a plain int, read on every hot query, so it sits
 * in initial-exec TLS (a few bytes). */
static ACC_TLS int tls_device;
static ACC_TLS int tls_active_plus_one;  /* device activated, + 1; 0: none */

static void
after_fork_child(void)
{
    pthread_mutex_init(&D.lock, NULL);
}

__attribute__((constructor)) static void
register_hooks(void)
{
    static acc_hooks hooks = {.after_fork_child = after_fork_child};

    acc_hooks_register(&hooks);
}

int
acc_current_device(void)
{
    return tls_device;
}

int
acc_usable_current_device(void)
{
    return acc_usable() ? tls_device : -1;
}

static acc_status
device_index_error(const char *index, acc_error *err)
{
    acc_error_set(err, ACC_ERR_DEVICE_INDEX,
                  "Device index value %s is out of index range [0, %d) of "
                  "the %s backend", index, acc_device_count(),
                  acc_selected_backend()->name);
    return ACC_ERR_DEVICE_INDEX;
}

acc_status
acc_check_device(long long index, acc_error *err)
{
    acc_status st = acc_check_usable(err);

    if (st != ACC_OK) {
        return st;
    }
    if (index < 0 || index >= acc_device_count()) {
        char text[24];

        snprintf(text, sizeof(text), "%lld", index);
        return device_index_error(text, err);
    }
    return ACC_OK;
}

acc_status
acc_check_device_text(const char *index, acc_error *err)
{
    acc_status st = acc_check_usable(err);

    return st != ACC_OK ? st : device_index_error(index, err);
}

acc_status
acc_check_device_ready(int device, acc_error *err)
{
    acc_status st = acc_check_device(device, err);

    return st != ACC_OK ? st : acc_ready(err);
}

static acc_status
activate(int device, acc_error *err)
{
    const acc_backend *b;
    acc_status st;

    if (tls_active_plus_one == device + 1) {
        return ACC_OK;
    }
    st = acc_ready(err);
    if (st != ACC_OK) {
        return st;
    }
    b = acc_selected_backend();
    if (b->device_activate != NULL) {
        st = ACC_SLOT(b, device_activate, err, device, err);
        if (st != ACC_OK) {
            return st;
        }
    }
    tls_active_plus_one = device + 1;
    return ACC_OK;
}

int
acc_device_ready(int device)
{
    return tls_active_plus_one == device + 1;
}

acc_status
acc_set_device(int device, acc_error *err)
{
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    st = activate(device, err);
    if (st == ACC_OK) {
        tls_device = device;
    }
    return st;
}

acc_status
acc_activate_current(acc_error *err)
{
    acc_status st = acc_check_usable(err);

    if (st != ACC_OK) {
        return st;
    }
    return activate(tls_device, err);
}

acc_status
acc_synchronize_device(int device, acc_error *err)
{
    const acc_backend *b;
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    b = acc_selected_backend();
    if (!acc_initialized()) {
        /* Nothing can be queued on a driver nobody initialised (and
         * waiting must not initialise it: fork stays safe).  But another
         * library of this process (CuPy, torch) may have: then its work
         * is waited for, and initialising costs nothing more. */
        if (b->initialized_elsewhere == NULL || !b->initialized_elsewhere()) {
            return ACC_OK;
        }
        st = acc_ready(err);
        if (st != ACC_OK) {
            return st;
        }
    }
    return ACC_SLOT(b, device_synchronize, err, device, err);
}

acc_status
acc_get_device_properties(int device, const acc_device_properties **out,
                          acc_error *err)
{
    properties_slot *slot;
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    slot = &D.properties[device];
    if (!atomic_load_explicit(&slot->ready, memory_order_acquire)) {
        const acc_backend *b = acc_selected_backend();

        if (b->device_properties == NULL) {
            return acc_error_unsupported("device properties", err);
        }
        st = acc_ready(err);
        if (st != ACC_OK) {
            return st;
        }
        pthread_mutex_lock(&D.lock);
        if (!atomic_load_explicit(&slot->ready, memory_order_relaxed)) {
            memset(&slot->props, 0, sizeof(slot->props));
            st = ACC_SLOT(b, device_properties, err, device, &slot->props,
                          err);
            if (st == ACC_OK) {
                atomic_store_explicit(&slot->ready, 1, memory_order_release);
            }
        }
        pthread_mutex_unlock(&D.lock);
        if (st != ACC_OK) {
            return st;
        }
    }
    *out = &slot->props;
    return ACC_OK;
}

acc_status
acc_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
                acc_error *err)
{
    const acc_backend *b;
    acc_status st = acc_check_device(device, err);

    if (st != ACC_OK) {
        return st;
    }
    b = acc_selected_backend();
    if (b->memory_info == NULL) {
        return acc_error_unsupported("memory information", err);
    }
    st = acc_ready(err);
    if (st != ACC_OK) {
        return st;
    }
    return ACC_SLOT(b, memory_info, err, device, free_bytes, total_bytes, err);
}
