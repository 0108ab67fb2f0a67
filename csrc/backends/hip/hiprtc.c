/*
 * hiprtc.c - HIP C++ compiled at run time by hiprtc (hiprtc.h).
 *
 * The library is whichever the core names (accelerator/_source.py
 * searches: ACCELERATOR_HIPRTC_LIBRARY, ROCm's libhiprtc, the real
 * libamdhip64.so.5 that holds hiprtc in ROCm 5); each one opened stays
 * open for the process.  hiprtc compiles to a code object for one
 * architecture ("--offload-arch=gfx90a"), which hipModuleLoadData loads.
 */
#define _GNU_SOURCE
#define ACC_BACKEND_HOST hip_host
#include <accelerator/backend.h>
#include <accelerator/rtc.h>
#include "hiprtc.h"
#include "hiprtc_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hip_hiprtc {
    char path[1024];          /* the file the loader opened */
    int major, minor;
    struct {
#define HIPRTC_FIELD(name, ret, params) acc_pfn_##name name;
        ACC_HIPRTC_FUNCTIONS(HIPRTC_FIELD)
        ACC_COMGR_FUNCTIONS(HIPRTC_FIELD)   /* NULL where not found */
#undef HIPRTC_FIELD
    } fn;
};

static acc_rtc_kept kept = ACC_RTC_KEPT_INIT;
/* ROCm 5.2's hiprtc aborts the process now and then when two threads
 * compile at once (about 1 run in 12 of four threads compiling one
 * kernel, tests/behaviour/test_source_kernels.py): one compile at a time,
 * for every hiprtc library. */
static pthread_mutex_t compiling = PTHREAD_MUTEX_INITIALIZER;

/* The comgr hiprtc uses: linked (found through its handle), else the one
 * beside it, else the loader's (ROCm 5 opens comgr when it compiles). */
static void
comgr_resolve(hip_hiprtc *c, void *handle)
{
    static const char *const names[] = {"libamd_comgr.so.2",
                                        "libamd_comgr.so.3"};
    const char *slash = strrchr(c->path, '/');
    char path[1100];

    /* 0: hiprtc's handle; then each name beside hiprtc, and bare. */
    for (size_t i = 0; i <= 2 * (sizeof(names) / sizeof(*names)); i++) {
        const char *name = i == 0 ? NULL : names[(i - 1) / 2];
        void *comgr = handle;

        if (i > 0 && i % 2 == 1) {
            if (slash == NULL) {
                continue;
            }
            snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - c->path),
                     c->path, name);
            name = path;
        }
        if (i > 0 && (comgr = dlopen(name, RTLD_NOW | RTLD_LOCAL)) == NULL) {
            continue;
        }
#define COMGR_RESOLVE(fn_name, ret, params)                                \
        c->fn.fn_name = (acc_pfn_##fn_name)dlsym(comgr, #fn_name);
        ACC_COMGR_FUNCTIONS(COMGR_RESOLVE)
#undef COMGR_RESOLVE
        if (c->fn.amd_comgr_get_isa_metadata != NULL
            && c->fn.amd_comgr_destroy_metadata != NULL) {
            return;
        }
    }
    c->fn.amd_comgr_get_isa_metadata = NULL;
    c->fn.amd_comgr_destroy_metadata = NULL;
}

/* Open library as a new hip_hiprtc; NULL with why in err. */
static void *
hiprtc_load(const char *library, acc_error *err)
{
    hip_hiprtc *c = calloc(1, sizeof(*c));
    void *handle;

    if (c == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return NULL;
    }
    handle = acc_rtc_dlopen(library, c->path, sizeof(c->path), err);
    if (handle == NULL) {
        free(c);
        return NULL;
    }
#define HIPRTC_RESOLVE(name, ret, params)                                  \
    if ((c->fn.name = (acc_pfn_##name)dlsym(handle, #name)) == NULL) {     \
        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s holds no hiprtc: it "    \
                      "lacks " #name, c->path);                            \
        free(c);                                                           \
        return NULL;                                                       \
    }
    ACC_HIPRTC_FUNCTIONS(HIPRTC_RESOLVE)
#undef HIPRTC_RESOLVE
    comgr_resolve(c, handle);
    if (c->fn.hiprtcVersion(&c->major, &c->minor) != ACC_HIPRTC_SUCCESS) {
        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s: hiprtcVersion() failed",
                      c->path);
        free(c);
        return NULL;
    }
    acc_trace("hip: hiprtc %d.%d from %s", c->major, c->minor, c->path);
    return c;
}

acc_status
hip_hiprtc_open(const char *library, hip_hiprtc **out, acc_error *err)
{
    *out = acc_rtc_keep(&kept, library, hiprtc_load, err);
    return *out != NULL ? ACC_OK : err->status;
}

/* Whether c compiles for target ("gfx90a:sramecc+:xnack-"): what its
 * comgr says, or yes where it has none to ask. */
static int
hiprtc_knows(const hip_hiprtc *c, const char *target)
{
    char isa[160];
    uint64_t metadata = 0;

    if (c->fn.amd_comgr_get_isa_metadata == NULL
        || c->fn.amd_comgr_destroy_metadata == NULL) {
        return 1;
    }
    if ((size_t)snprintf(isa, sizeof(isa), "amdgcn-amd-amdhsa--%s", target)
            >= sizeof(isa)
        || c->fn.amd_comgr_get_isa_metadata(isa, &metadata) != 0) {
        return 0;
    }
    (void)c->fn.amd_comgr_destroy_metadata(metadata);
    return 1;
}

acc_status
hip_hiprtc_describe(const hip_hiprtc *c, const char *arch, char *id,
                    size_t size, acc_error *err)
{
    if (!hiprtc_knows(c, arch)) {
        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s is hiprtc %d.%d, which "
                      "does not compile for '%.60s', the device's "
                      "architecture (name a newer hiprtc in "
                      "ACCELERATOR_HIPRTC_LIBRARY)", c->path, c->major,
                      c->minor, arch);
        return ACC_ERR_NOT_FOUND;
    }
    snprintf(id, size, "hiprtc %d.%d %s %s", c->major, c->minor, arch,
             c->path);
    return ACC_OK;
}

/* ACC_OK when every target of an --offload-arch= option (a comma list)
 * is one c compiles for. */
static acc_status
hiprtc_check_targets(const hip_hiprtc *c, const char *option, int index,
                     const char *arch, acc_error *err)
{
    const char *at = option + strlen("--offload-arch=");

    for (;;) {
        size_t n = strcspn(at, ",");
        char target[96];

        snprintf(target, sizeof(target), "%.*s", (int)n, at);
        if (n >= sizeof(target) || !hiprtc_knows(c, target)) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "hiprtc %d.%d "
                          "does not compile for '%.60s' (option %d, "
                          "--offload-arch): expected a gfx target it "
                          "knows, such as the device's '%s'", c->major,
                          c->minor, target, index, arch);
            return ACC_ERR_INVALID_ARGUMENT;
        }
        if (at[n] == '\0') {
            return ACC_OK;
        }
        at += n + 1;
    }
}

acc_status
hip_hiprtc_compile(const hip_hiprtc *c, const char *backend,
                   const char *arch,
                   const char *source, size_t size,
                   const char *const *options, int noptions,
                   const char *const *names, int nnames, acc_compiled *out,
                   acc_error *err)
{
    char target[96];
    acc_status st;
    const char *own[1] = {target};
    int chosen = 0;
    acc_rtc rtc = {
        .backend = backend,
        .compiler = "hiprtc",
        .file_name = "kernel.cpp",
        .code_size = c->fn.hiprtcGetCodeSize,
        .code = c->fn.hiprtcGetCode,
        .code_name = "hiprtcGetCode",
        .code_size_name = "hiprtcGetCodeSize",
        .code_format = ACC_FORMAT_HSACO,
        ACC_RTC_ENTRY_POINTS(c->fn, hiprtc),
        .refused_option = ACC_HIPRTC_ERROR_INVALID_OPTION,
        .refused_source = ACC_HIPRTC_ERROR_COMPILATION,
    };

    for (int i = 0; i < noptions; i++) {
        chosen |= strncmp(options[i], "--offload-arch", 14) == 0;
        if (strncmp(options[i], "--offload-arch=", 15) == 0
            && hiprtc_check_targets(c, options[i], i, arch, err) != ACC_OK) {
            return err->status;
        }
    }
    snprintf(target, sizeof(target), "--offload-arch=%s", arch);
    pthread_mutex_lock(&compiling);
    st = acc_rtc_compile(&rtc, source, size, own, chosen ? 0 : 1, options,
                         noptions, names, nnames, out, err);
    pthread_mutex_unlock(&compiling);
    return st;
}
