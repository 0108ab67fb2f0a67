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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hip_hiprtc {
    char path[1024];          /* the file the loader opened */
    int major, minor;
    struct {
#define HIPRTC_FIELD(name, ret, params) acc_pfn_##name name;
        ACC_HIPRTC_FUNCTIONS(HIPRTC_FIELD)
#undef HIPRTC_FIELD
    } fn;
};

static acc_rtc_kept kept = ACC_RTC_KEPT_INIT;

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

void
hip_hiprtc_describe(const hip_hiprtc *c, const char *arch, char *id,
                    size_t size)
{
    snprintf(id, size, "hiprtc %d.%d %s %s", c->major, c->minor, arch,
             c->path);
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
    const char *own[1] = {target};
    int chosen = 0;
    acc_rtc rtc = {
        .backend = backend,
        .compiler = "hiprtc",
        .file_name = "kernel.cpp",
        .code_size = c->fn.hiprtcGetCodeSize,
        .code = c->fn.hiprtcGetCode,
        .code_name = "hiprtcGetCode",
        .code_format = ACC_FORMAT_HSACO,
        ACC_RTC_ENTRY_POINTS(c->fn, hiprtc),
    };

    for (int i = 0; i < noptions; i++) {
        chosen |= strncmp(options[i], "--offload-arch", 14) == 0;
    }
    snprintf(target, sizeof(target), "--offload-arch=%s", arch);
    return acc_rtc_compile(&rtc, source, size, own, chosen ? 0 : 1, options,
                           noptions, names, nnames, out, err);
}
