/*
 * memory.c - device and host allocations, copies and fills on a
 * stream's list, and free memory.
 */
#include "lz.h"


/*
 * Level Zero has no stream-ordered free: zeMemFree frees at once, and
 * memory that queued work still uses must not be freed.  The allocator
 * and the host blocks (allocator.c, memory.c) call mem_free and host_free
 * only once the events recorded behind that work have signaled, so these
 * free directly.  Allocations are remembered with their sizes.  Free
 * memory comes from Sysman's memory modules where the driver offers them;
 * otherwise (the core API has no free-memory query) it is estimated as
 * the total less what this process took, and get_device_properties()
 * says so.
 */
typedef struct lz_alloc {
    void *ptr;
    size_t size;
    int device;            /* -1: host memory */
    struct lz_alloc *next;
} lz_alloc;

static struct {
    pthread_mutex_t lock;  /* a leaf: no other lock is taken under it */
    lz_alloc *head;
    unsigned long long used[ACC_MAX_DEVICES];
} lz_mem = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

acc_status
lz_memory_info(int device, size_t *free_bytes, size_t *total_bytes,
               acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    unsigned long long total = dev->total_memory, free_sum = 0, used;
    pthread_mutex_lock(&lz.sysman_lock);
    acc_status status = lz_memory_modules_locked(dev, err);
    for (uint32_t i = 0; status == ACC_OK && dev->sysman > 0
                         && i < dev->nmems; i++) {
        zes_mem_state_t state;
        memset(&state, 0, sizeof(state));
        state.stype = ZES_STRUCTURE_TYPE_MEM_STATE;
        ze_result_t r = lz_fn.zesMemoryGetState(dev->mems[i], &state);
        if (r != ZE_RESULT_SUCCESS) {
            status = lz_fail(err, "zesMemoryGetState", r, dev->driver);
        }
        free_sum += state.free;
    }
    int exact = dev->sysman > 0;
    pthread_mutex_unlock(&lz.sysman_lock);
    if (status != ACC_OK) {
        return status;
    }
    if (!exact) {
        /* The estimate: what this process has not taken. */
        pthread_mutex_lock(&lz_mem.lock);
        used = lz_mem.used[device];
        pthread_mutex_unlock(&lz_mem.lock);
        free_sum = total > used ? total - used : 0;
    }
    *total_bytes = (size_t)total;
    *free_bytes = (size_t)(free_sum < total ? free_sum : total);
    return ACC_OK;
}

/* Remember an allocation; on failure (no host memory) free it again. */
static acc_status
lz_remember(ze_context_handle_t ctx, void *ptr, size_t size, int device,
            acc_error *err)
{
    lz_alloc *a = malloc(sizeof(*a));
    if (a == NULL) {
        (void)lz_fn.zeMemFree(ctx, ptr);
        return lz_no_memory(err);
    }
    a->ptr = ptr;
    a->size = size;
    a->device = device;
    pthread_mutex_lock(&lz_mem.lock);
    a->next = lz_mem.head;
    lz_mem.head = a;
    if (device >= 0) {
        lz_mem.used[device] += size;
    }
    pthread_mutex_unlock(&lz_mem.lock);
    return ACC_OK;
}

static void
lz_forget(void *ptr)
{
    lz_alloc *a = NULL;
    pthread_mutex_lock(&lz_mem.lock);
    for (lz_alloc **p = &lz_mem.head; *p != NULL; p = &(*p)->next) {
        if ((*p)->ptr == ptr) {
            a = *p;
            *p = a->next;
            if (a->device >= 0) {
                lz_mem.used[a->device] -= a->size;
            }
            break;
        }
    }
    pthread_mutex_unlock(&lz_mem.lock);
    free(a);
}

acc_status
lz_mem_alloc(int device, size_t nbytes, uintptr_t *ptr, acc_error *err)
{
    ze_device_mem_alloc_desc_t desc = {
        ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0,
    };
    ze_context_handle_t ctx = NULL;
    void *p = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = lz_fn.zeMemAllocDevice(ctx, &desc, nbytes, 256,
                                        lz.devices[device].handle, &p);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemAllocDevice", r, lz_driver_of(device));
    }
    status = lz_remember(ctx, p, nbytes, device, err);
    if (status == ACC_OK) {
        *ptr = (uintptr_t)p;
    }
    return status;
}

static acc_status
lz_free(int device, void *ptr, acc_error *err)
{
    ze_context_handle_t ctx = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = lz_fn.zeMemFree(ctx, ptr);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemFree", r, lz_driver_of(device));
    }
    lz_forget(ptr);
    return ACC_OK;
}

acc_status
lz_mem_free(int device, uintptr_t ptr, acc_error *err)
{
    return lz_free(device, (void *)ptr, err);
}

acc_status
lz_host_alloc(int device, size_t nbytes, void **ptr, acc_error *err)
{
    ze_host_mem_alloc_desc_t desc = {
        ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, NULL, 0,
    };
    ze_context_handle_t ctx = NULL;
    void *p = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = lz_fn.zeMemAllocHost(ctx, &desc, nbytes, 64, &p);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemAllocHost", r, lz_driver_of(device));
    }
    status = lz_remember(ctx, p, nbytes, -1, err);
    if (status == ACC_OK) {
        *ptr = p;
    }
    return status;
}

acc_status
lz_host_free(int device, void *ptr, acc_error *err)
{
    return lz_free(device, ptr, err);
}

acc_status
lz_mem_copy(acc_stream *s, const acc_copy *c, acc_error *err)
{
    if (c->kind == ACC_COPY_PEER
        && lz_driver_of(c->dst_device) != lz_driver_of(c->src_device)) {
        acc_error_set(err, ACC_ERR_UNSUPPORTED,
                      "backend %s does not support copies between devices "
                      "of different Level Zero drivers (devices %d and %d)",
                      LZ_BACKEND, c->src_device, c->dst_device);
        return ACC_ERR_UNSUPPORTED;
    }
    lz_target t = lz_target_of(s);
    lz_slot *done = NULL;
    int captured = 0, queued = 0;
    int pageable = (c->flags & ACC_COPY_PAGEABLE) != 0;
    acc_status status = lz_acquire(t.driver, 0, &done, err);
    if (status == ACC_OK) {
        pthread_mutex_lock(t.lock);
        if (t.st != NULL && lz_capturing_locked(t.st)) {
            /* A pageable copy must have run before it returns. */
            captured = 1;
            status = (c->flags & ACC_COPY_PAGEABLE)
                ? lz_capture_refuse_locked(t.st,
                                           "zeCommandListAppendMemoryCopy",
                                           err)
                : lz_capture_append_locked(
                      &t, &(lz_op){.dst = (void *)c->dst,
                                   .src = (const void *)c->src,
                                   .nbytes = c->nbytes},
                      err);
        }
        else {
            status = lz_order_locked(&t, err);
        }
        if (status == ACC_OK && !captured) {
            ze_result_t r = lz_fn.zeCommandListAppendMemoryCopy(
                t.list, (void *)c->dst, (const void *)c->src, c->nbytes,
                done->event, 0, NULL);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeCommandListAppendMemoryCopy", r,
                                 t.driver);
            }
            else {
                lz_appended_locked(&t, done);
                queued = 1;
            }
        }
        pthread_mutex_unlock(t.lock);
        if (queued && pageable) {
            /* Kept (not reset) until we know the copy has run. */
            pthread_mutex_lock(&lz.lock);
            done->waiters++;
            lz_retire_locked(done);
            pthread_mutex_unlock(&lz.lock);
        }
        else {
            lz_retire(done);
        }
    }
    /* Level Zero reads and writes ordinary host memory when the copy
     * runs (no staging): wait for it before the caller reuses it, even
     * when the wait fails (the error is still reported). */
    if (queued && pageable) {
        status = lz_synchronize_target(t, err);
        if (status != ACC_OK) {
            /* The copy still reads or writes the caller's memory, which
             * the caller frees or reuses as soon as we return. */
            lz_await(done, "a pageable copy");
        }
        lz_unwait(done);
    }
    lz_target_done(&t);
    return status;
}

acc_status
lz_mem_fill(acc_stream *s, uintptr_t dst, unsigned char value,
            size_t nbytes, acc_error *err)
{
    lz_target t = lz_target_of(s);
    lz_slot *done = NULL;
    int captured = 0;
    acc_status status = lz_acquire(t.driver, 0, &done, err);
    if (status == ACC_OK) {
        pthread_mutex_lock(t.lock);
        if (t.st != NULL && lz_capturing_locked(t.st)) {
            captured = 1;
            status = lz_capture_append_locked(
                &t, &(lz_op){.dst = (void *)dst, .value = value,
                             .nbytes = nbytes},
                err);
        }
        else {
            status = lz_order_locked(&t, err);
        }
        if (status == ACC_OK && !captured) {
            ze_result_t r = lz_fn.zeCommandListAppendMemoryFill(
                t.list, (void *)dst, &value, 1, nbytes, done->event, 0,
                NULL);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeCommandListAppendMemoryFill", r,
                                 t.driver);
            }
            else {
                lz_appended_locked(&t, done);
            }
        }
        pthread_mutex_unlock(t.lock);
        lz_retire(done);
    }
    lz_target_done(&t);
    return status;
}

/* What a foreign pointer is: asked of each driver's context (memory of
 * a context other than ours is unknown: dpctl and torch use their own
 * contexts, so from_dlpack of their memory reports it as not the
 * driver's). */
acc_status
lz_pointer_info(uintptr_t ptr, acc_pointer_info *info, acc_error *err)
{
    info->kind = ACC_POINTER_UNKNOWN;
    info->device = -1;
    for (int d = 0; d < lz.ndrivers; d++) {
        ze_memory_allocation_properties_t props = {
            ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, NULL,
            ZE_MEMORY_TYPE_UNKNOWN, 0, 0,
        };
        ze_device_handle_t dev = NULL;
        ze_context_handle_t ctx = NULL;
        pthread_mutex_lock(&lz.lock);
        acc_status status = lz_context_locked(d, &ctx, err);
        pthread_mutex_unlock(&lz.lock);
        if (status != ACC_OK) {
            return status;
        }
        ze_result_t r = lz_fn.zeMemGetAllocProperties(ctx, (const void *)ptr,
                                                   &props, &dev);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeMemGetAllocProperties", r, d);
        }
        if (props.type == ZE_MEMORY_TYPE_UNKNOWN) {
            continue;
        }
        info->kind = props.type == ZE_MEMORY_TYPE_HOST ? ACC_POINTER_HOST
                     : props.type == ZE_MEMORY_TYPE_SHARED
                         ? ACC_POINTER_SHARED : ACC_POINTER_DEVICE;
        for (int i = 0; i < lz.ndevices; i++) {
            if (lz.devices[i].handle == dev) {
                info->device = i;
            }
        }
        return ACC_OK;
    }
    return ACC_OK;
}

/* In the context of device's driver, the one pointer_info found the
 * memory in.  The driver answers ZE_RESULT_ERROR_UNKNOWN for an address
 * it never handed out, a code that names nothing: reported as it is. */
acc_status
lz_pointer_range(int device, uintptr_t ptr, uintptr_t *base, size_t *size,
                 acc_error *err)
{
    ze_context_handle_t ctx = NULL;
    void *b = NULL;
    size_t n = 0;
    acc_status status = lz_context_of(device, &ctx, err);

    *base = 0;
    *size = 0;
    if (status != ACC_OK) {
        return status;
    }
    ze_result_t r = lz_fn.zeMemGetAddressRange(ctx, (const void *)ptr, &b,
                                               &n);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeMemGetAddressRange", r,
                       lz.devices[device].driver);
    }
    *base = (uintptr_t)b;
    *size = n;
    return ACC_OK;
}

/* The child of fork(): the registry's lock is usable again. */
void
lz_memory_after_fork_child(void)
{
    pthread_mutex_init(&lz_mem.lock, NULL);
}
