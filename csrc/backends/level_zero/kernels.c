/*
 * kernels.c - modules and kernels on Level Zero: zeModuleCreate (SPIR-V
 * or the device's native binary), zeKernelCreate, and launches appended
 * to a stream's list (or recorded into its capture, graph.c).
 *
 * Arguments.  Level Zero keeps a kernel's arguments and group size in
 * the kernel object and copies them into the list when a launch is
 * appended, so setting them and appending is done under the kernel's own
 * lock: launches of one kernel from several threads cannot mix their
 * arguments.  Lock order: the stream's lock, then the kernel's.
 *
 * Dynamic shared memory (shared_mem).  Level Zero passes local memory
 * as an argument: a __local pointer parameter is set with the size in
 * bytes and a NULL value.  Spec 1.4 tells how many parameters a kernel
 * has (numKernelArgs) but not which are local, so the rule is by count:
 * a launch that passes one argument fewer than the kernel has gives its
 * last parameter shared_mem bytes of local memory (a kernel that takes
 * dynamic local memory declares it last); a launch that passes as many
 * arguments as the kernel has takes no shared_mem.  The count of user
 * arguments is therefore not known to the core (Kernel.attributes
 * reports it as unknown) and is checked here, as is the argument size
 * Level Zero does not tell (the driver refuses a wrong one).
 *
 * Lifetime.  A graph's list holds the launches captured into it, which
 * use the kernel (and its module) at every replay, after the core may
 * have released them: a kernel counts its holders (the core and each
 * graph that launches it) and its module counts the core and its
 * kernels, and each goes when its count does.  Modules and kernels are
 * listed so that shutdown can destroy them before the contexts (Python
 * or graphs may still hold them at exit); after shutdown, letting go of
 * them only frees our structs.
 */
#include "lz.h"

#include <dlfcn.h>
#include <strings.h>

typedef struct lz_module {
    ze_module_handle_t handle;  /* NULL once shutdown destroyed it */
    int device;
    int refs;                   /* the core's, its kernels' */
    struct lz_module *next;     /* lz_kern.modules */
} lz_module;

typedef struct lz_kernel {
    ze_kernel_handle_t handle;  /* NULL once shutdown destroyed it */
    lz_module *module;
    int refs;                   /* the core's, graphs' (lz_kern.lock) */
    uint32_t nparams;           /* the driver's count, local ones too */
    uint32_t group[3];          /* the group size last set; 0: none */
    pthread_mutex_t lock;       /* arguments, group size, append */
    struct lz_kernel *next;     /* lz_kern.kernels */
    char name[];
} lz_kernel;

/* The live modules and kernels; lock is a leaf, which guards the
 * lists and the counts. */
static struct {
    pthread_mutex_t lock;
    lz_module *modules;
    lz_kernel *kernels;
} lz_kern = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Whether the build log of a failed zeModuleCreate can be read.  Loaders
 * before 1.14 ("return of logs", its changelog) do not translate the
 * handles a failing call returns: through their intercept layer (taken
 * when ZE_ENABLE_LOADER_INTERCEPT is set, or for several drivers) the
 * log is the driver's own handle, which the loader then reads as one of
 * its objects and crashes on.  Such a log is left alone (it leaks). */
static int
lz_failed_log_readable(void)
{
    acc_pfn_zelLoaderGetVersions get = NULL;
    size_t n = 0;
    *(void **)&get = dlsym(lz.lib, "zelLoaderGetVersions");
    if (get != NULL && get(&n, NULL) == ZE_RESULT_SUCCESS && n > 0
        && n < 64) {
        zel_component_version_t versions[64];
        if (get(&n, versions) == ZE_RESULT_SUCCESS) {
            for (size_t i = 0; i < n; i++) {
                zel_version_t v = versions[i].component_lib_version;
                if (strcmp(versions[i].component_name, "loader") == 0
                    && (v.major > 1 || (v.major == 1 && v.minor >= 14))) {
                    return 1;
                }
            }
        }
    }
    const char *e = getenv("ZE_ENABLE_LOADER_INTERCEPT");
    int intercept = e != NULL
                    && (strcmp(e, "1") == 0 || strcasecmp(e, "true") == 0);
    return !intercept && lz.ndrivers == 1;
}

/* The build log of a failed build, malloc'd (NULL when it cannot be
 * read: the error still says the build failed). */
static char *
lz_build_log(ze_module_build_log_handle_t h)
{
    size_t size = 0;
    char *text = NULL;
    if (h == NULL
        || lz_fn.zeModuleBuildLogGetString(h, &size, NULL)
               != ZE_RESULT_SUCCESS
        || size == 0 || (text = malloc(size + 1)) == NULL) {
        return NULL;
    }
    if (lz_fn.zeModuleBuildLogGetString(h, &size, text)
        != ZE_RESULT_SUCCESS) {
        free(text);
        return NULL;
    }
    text[size] = '\0';
    return text;
}

acc_status
lz_module_load(int device, acc_code_format format, const void *code,
               size_t size, const char *options, void **module,
               char **log, acc_error *err)
{
    lz_device *dev = &lz.devices[device];
    ze_context_handle_t ctx = NULL;
    acc_status status = lz_context_of(device, &ctx, err);
    if (status != ACC_OK) {
        return status;
    }
    lz_module *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return lz_no_memory(err);
    }
    ze_module_desc_t desc = {
        ZE_STRUCTURE_TYPE_MODULE_DESC, NULL,
        format == ACC_FORMAT_SPIRV ? ZE_MODULE_FORMAT_IL_SPIRV
                                   : ZE_MODULE_FORMAT_NATIVE,
        size, code, options != NULL ? options : "", NULL,
    };
    ze_module_build_log_handle_t blog = NULL;
    ze_result_t r = lz_fn.zeModuleCreate(ctx, dev->handle, &desc,
                                         &m->handle, &blog);
    if (r != ZE_RESULT_SUCCESS) {
        status = lz_fail(err, "zeModuleCreate", r, dev->driver);
        if (r == ZE_RESULT_ERROR_MODULE_BUILD_FAILURE) {
            err->status = status = ACC_ERR_BUILD;
        }
        if (blog != NULL && !lz_failed_log_readable()) {
            size_t used = strlen(err->message);
            acc_format(err->message + used, sizeof(err->message) - used,
                       " (the build log is lost: this Level Zero loader "
                       "cannot return the log of a failed build through "
                       "its intercept layer; loader 1.14 can)");
            blog = NULL;
        }
        if (status == ACC_ERR_BUILD) {
            *log = lz_build_log(blog);
        }
        free(m);
    }
    if (blog != NULL
        && lz_fn.zeModuleBuildLogDestroy(blog) != ZE_RESULT_SUCCESS) {
        acc_trace("xpu: zeModuleBuildLogDestroy failed; the log leaks");
    }
    if (status != ACC_OK) {
        return status;
    }
    m->device = device;
    m->refs = 1;
    pthread_mutex_lock(&lz_kern.lock);
    m->next = lz_kern.modules;
    lz_kern.modules = m;
    pthread_mutex_unlock(&lz_kern.lock);
    *module = m;
    return ACC_OK;
}

/* Take x off the singly linked list at *head (lz_kern.lock held). */
#define LZ_UNLINK(head, x)                                            \
    do {                                                              \
        for (__typeof__(head) *p_ = &(head); *p_ != NULL;             \
             p_ = &(*p_)->next) {                                     \
            if (*p_ == (x)) {                                         \
                *p_ = (x)->next;                                      \
                break;                                                \
            }                                                         \
        }                                                             \
    } while (0)

/* Drop a reference to m; the last destroys it. */
static void
lz_module_drop(lz_module *m)
{
    pthread_mutex_lock(&lz_kern.lock);
    int last = --m->refs == 0;
    if (last) {
        LZ_UNLINK(lz_kern.modules, m);
    }
    pthread_mutex_unlock(&lz_kern.lock);
    if (!last) {
        return;
    }
    if (m->handle != NULL) {
        ze_result_t r = lz_fn.zeModuleDestroy(m->handle);
        if (r != ZE_RESULT_SUCCESS) {
            /* No launch uses it (the core waited for them): nothing to
             * retry that could succeed later; the driver keeps it. */
            acc_trace("xpu: zeModuleDestroy failed (0x%x)", (unsigned)r);
        }
    }
    free(m);
}

void
lz_module_unload(int device, void *module)
{
    (void)device;
    lz_module_drop(module);
}

/* What the device allows any kernel (zeDeviceGetComputeProperties). */
static acc_status
lz_compute_limits(int device, acc_kernel_info *info, uint32_t *max_total,
                  uint32_t *max_local, acc_error *err)
{
    ze_device_compute_properties_t p;
    memset(&p, 0, sizeof(p));
    p.stype = ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES;
    ze_result_t r = lz_fn.zeDeviceGetComputeProperties(
        lz.devices[device].handle, &p);
    if (r != ZE_RESULT_SUCCESS) {
        return lz_fail(err, "zeDeviceGetComputeProperties", r,
                       lz_driver_of(device));
    }
    uint32_t block[3] = {p.maxGroupSizeX, p.maxGroupSizeY, p.maxGroupSizeZ};
    uint32_t grid[3] = {p.maxGroupCountX, p.maxGroupCountY,
                        p.maxGroupCountZ};
    for (int i = 0; i < 3; i++) {
        info->max_block[i] = block[i] > INT32_MAX ? INT32_MAX : (int)block[i];
        info->max_grid[i] = grid[i];
    }
    *max_total = p.maxTotalGroupSize;
    *max_local = p.maxSharedLocalMemory;
    return ACC_OK;
}

acc_status
lz_kernel_get(int device, void *module, const char *name, void **kernel,
              acc_kernel_info *info, acc_error *err)
{
    lz_module *m = module;
    int d = lz_driver_of(device);
    uint32_t max_total = 0, max_local = 0;
    acc_status status = lz_compute_limits(device, info, &max_total,
                                          &max_local, err);
    if (status != ACC_OK) {
        return status;
    }
    lz_kernel *k = calloc(1, sizeof(*k) + strlen(name) + 1);
    if (k == NULL) {
        return lz_no_memory(err);
    }
    ze_kernel_desc_t desc = {ZE_STRUCTURE_TYPE_KERNEL_DESC, NULL, 0, name};
    ze_result_t r = lz_fn.zeKernelCreate(m->handle, &desc, &k->handle);
    if (r == ZE_RESULT_ERROR_INVALID_KERNEL_NAME) {
        free(k);
        acc_error_set(err, ACC_ERR_NOT_FOUND, "no kernel named '%.200s'",
                      name);
        return ACC_ERR_NOT_FOUND;
    }
    if (r != ZE_RESULT_SUCCESS) {
        free(k);
        return lz_fail(err, "zeKernelCreate", r, d);
    }
    ze_kernel_properties_t p;
    memset(&p, 0, sizeof(p));
    p.stype = ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES;
    r = lz_fn.zeKernelGetProperties(k->handle, &p);
    if (r != ZE_RESULT_SUCCESS) {
        status = lz_fail(err, "zeKernelGetProperties", r, d);
        if (lz_fn.zeKernelDestroy(k->handle) != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: zeKernelDestroy failed; the kernel leaks");
        }
        free(k);
        return status;
    }
    k->module = m;
    k->refs = 1;
    memcpy(k->name, name, strlen(name) + 1);
    k->nparams = p.numKernelArgs;
    pthread_mutex_init(&k->lock, NULL);
    /* A kernel's own limit, where the compiler fixed its subgroups. */
    uint64_t own = (uint64_t)p.maxNumSubgroups * p.maxSubgroupSize;
    if (own > 0 && own < max_total) {
        max_total = (uint32_t)own;
    }
    info->max_threads_per_block = max_total > INT32_MAX ? INT32_MAX
                                                        : (int)max_total;
    info->shared_bytes = p.localMemSize;
    info->local_bytes = p.privateMemSize;
    info->max_shared_bytes = max_local > p.localMemSize
                                 ? (long long)(max_local - p.localMemSize)
                                 : 0;
    /* How many of the parameters are the user's is not told (see the
     * comment at the top): info->nparams stays unknown. */
    pthread_mutex_lock(&lz_kern.lock);
    m->refs++;
    k->next = lz_kern.kernels;
    lz_kern.kernels = k;
    pthread_mutex_unlock(&lz_kern.lock);
    *kernel = k;
    return ACC_OK;
}

static void
lz_kernel_hold(lz_kernel *k)
{
    pthread_mutex_lock(&lz_kern.lock);
    k->refs++;
    pthread_mutex_unlock(&lz_kern.lock);
}

/* Drop a reference to k; the last destroys it and lets go of its
 * module. */
static void
lz_kernel_drop(lz_kernel *k)
{
    pthread_mutex_lock(&lz_kern.lock);
    int last = --k->refs == 0;
    if (last) {
        LZ_UNLINK(lz_kern.kernels, k);
    }
    pthread_mutex_unlock(&lz_kern.lock);
    if (!last) {
        return;
    }
    if (k->handle != NULL) {
        ze_result_t r = lz_fn.zeKernelDestroy(k->handle);
        if (r != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: zeKernelDestroy failed (0x%x)", (unsigned)r);
        }
    }
    lz_module_drop(k->module);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

void
lz_kernel_release(int device, void *kernel)
{
    (void)device;
    lz_kernel_drop(kernel);
}

/* How a graph lets go of a kernel its launches use (lz_keep). */
static void
lz_kernel_unkeep(void *kernel)
{
    lz_kernel_drop(kernel);
}

acc_status
lz_kernel_names(int device, void *module, char *names, size_t size,
                acc_error *err)
{
    lz_module *m = module;
    uint32_t n = 0;
    int d = lz_driver_of(device);
    ze_result_t r = lz_fn.zeModuleGetKernelNames(m->handle, &n, NULL);
    const char **list = NULL;
    if (r == ZE_RESULT_SUCCESS && n > 0) {
        list = calloc(n, sizeof(*list));
        if (list == NULL) {
            return lz_no_memory(err);
        }
        r = lz_fn.zeModuleGetKernelNames(m->handle, &n, list);
    }
    if (r != ZE_RESULT_SUCCESS) {
        free(list);
        return lz_fail(err, "zeModuleGetKernelNames", r, d);
    }
    size_t used = 0;
    names[0] = '\0';
    for (uint32_t i = 0; i < n && used < size; i++) {
        int w = snprintf(names + used, size - used, "%s%s",
                         i > 0 ? ", " : "", list[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    free(list);
    return ACC_OK;
}

/* The argument count, checked against the driver's (see the comment at
 * the top): *local is 1 when the last parameter takes shared_mem. */
static acc_status
lz_check_count(const lz_kernel *k, const acc_launch_config *c, int *local,
               acc_error *err)
{
    uint32_t n = k->nparams;
    *local = n > 0 && (uint32_t)c->nargs == n - 1;
    if ((uint32_t)c->nargs == n && c->shared_mem > 0) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "shared_mem is %zu "
                      "bytes, but kernel '%.200s' has no parameter left for "
                      "it: on Level Zero the last of a kernel's %u "
                      "parameters takes shared_mem when a launch passes one "
                      "argument fewer (%d given)", c->shared_mem, k->name,
                      n, c->nargs);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if ((uint32_t)c->nargs != n && !*local) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "kernel '%.200s' takes "
                      "%u argument%s on Level Zero, or %u when its last "
                      "parameter is the local memory that shared_mem sizes; "
                      "got %d", k->name, n, n == 1 ? "" : "s",
                      n > 0 ? n - 1 : 0, c->nargs);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    return ACC_OK;
}

/* Group size and arguments of one launch into k (k->lock held). */
static acc_status
lz_set_launch_locked(lz_kernel *k, const acc_launch_config *c, int local,
                     int d, acc_error *err)
{
    ze_result_t r;
    if (memcmp(k->group, c->block, sizeof(k->group)) != 0) {
        r = lz_fn.zeKernelSetGroupSize(k->handle, c->block[0], c->block[1],
                                       c->block[2]);
        if (r != ZE_RESULT_SUCCESS) {
            memset(k->group, 0, sizeof(k->group));
            return lz_fail(err, "zeKernelSetGroupSize", r, d);
        }
        memcpy(k->group, c->block, sizeof(k->group));
    }
    for (int i = 0; i < c->nargs; i++) {
        r = lz_fn.zeKernelSetArgumentValue(k->handle, (uint32_t)i,
                                           c->args[i].size,
                                           c->args[i].value);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeKernelSetArgumentValue", r, d);
        }
    }
    if (local) {
        r = lz_fn.zeKernelSetArgumentValue(k->handle, (uint32_t)c->nargs,
                                           c->shared_mem, NULL);
        if (r != ZE_RESULT_SUCCESS) {
            return lz_fail(err, "zeKernelSetArgumentValue", r, d);
        }
    }
    return ACC_OK;
}

acc_status
lz_launch(acc_stream *s, void *kernel, const acc_launch_config *c,
          acc_error *err)
{
    lz_kernel *k = kernel;
    int local = 0;
    acc_status status = lz_check_count(k, c, &local, err);
    if (status != ACC_OK) {
        return status;
    }
    ze_group_count_t groups = {c->grid[0], c->grid[1], c->grid[2]};
    lz_target t = lz_target_of(s);
    lz_slot *done = NULL;
    status = lz_acquire(t.driver, 0, &done, err);
    if (status != ACC_OK) {
        lz_target_done(&t);
        return status;
    }
    pthread_mutex_lock(t.lock);
    pthread_mutex_lock(&k->lock);
    int captured = t.st != NULL && lz_capturing_locked(t.st);
    status = lz_set_launch_locked(k, c, local, t.driver, err);
    if (status == ACC_OK && captured) {
        /* The graph's reference, taken before the launch is in its list
         * (where another thread may discard it); still ours on failure,
         * and never the last: the core holds k during the launch. */
        lz_kernel_hold(k);
        status = lz_capture_append_locked(
            &t, &(lz_op){.handle = k->handle, .groups = &groups,
                         .keep = {k, lz_kernel_unkeep}},
            err);
        if (status != ACC_OK) {
            lz_kernel_drop(k);
        }
    }
    else if (status == ACC_OK) {
        status = lz_order_locked(&t, err);
        if (status == ACC_OK) {
            ze_result_t r = lz_fn.zeCommandListAppendLaunchKernel(
                t.list, k->handle, &groups, done->event, 0, NULL);
            if (r != ZE_RESULT_SUCCESS) {
                status = lz_fail(err, "zeCommandListAppendLaunchKernel", r,
                                 t.driver);
            }
            else {
                lz_appended_locked(&t, done);
            }
        }
    }
    pthread_mutex_unlock(&k->lock);
    pthread_mutex_unlock(t.lock);
    lz_retire(done);
    lz_target_done(&t);
    return status;
}

/* At exit, before the contexts go (no launch is queued: the lists are
 * drained): destroy every kernel, then every module. */
void
lz_kernels_shutdown(void)
{
    pthread_mutex_lock(&lz_kern.lock);
    for (lz_kernel *k = lz_kern.kernels; k != NULL; k = k->next) {
        int stuck = lz.drivers[lz_driver_of(k->module->device)].stuck;
        if (!stuck && lz_fn.zeKernelDestroy(k->handle) != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: zeKernelDestroy failed at exit");
        }
        k->handle = NULL;
    }
    for (lz_module *m = lz_kern.modules; m != NULL; m = m->next) {
        int stuck = lz.drivers[lz_driver_of(m->device)].stuck;
        if (!stuck && lz_fn.zeModuleDestroy(m->handle) != ZE_RESULT_SUCCESS) {
            acc_trace("xpu: zeModuleDestroy failed at exit");
        }
        m->handle = NULL;
    }
    pthread_mutex_unlock(&lz_kern.lock);
}
