/*
 * nvrtc.c - CUDA C++ compiled at run time by NVRTC (nvrtc.h).
 *
 * The library is whichever the core names (accelerator/_source.py
 * searches: ACCELERATOR_NVRTC_LIBRARY, the toolkit's, the PyPI wheel's,
 * the system's); each one opened stays open for the process, with the
 * architectures it compiles for read once.  A device gets a cubin for
 * its own architecture (no JIT at load, and an NVRTC newer than the
 * driver still works) where NVRTC has it, else PTX for the newest
 * architecture below, which the driver compiles.
 */
#define _GNU_SOURCE
#define ACC_BACKEND_HOST cuda_host
#include <accelerator/backend.h>
#include <accelerator/rtc.h>
#include "nvrtc.h"
#include "nvrtc_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVRTC_MAX_ARCHS 64

struct cuda_nvrtc {
    char path[1024];          /* the file the loader opened */
    int major, minor;
    int narchs;
    int archs[NVRTC_MAX_ARCHS]; /* ascending: 75 for sm_75 */
    struct {
#define NVRTC_FIELD(name, ret, params) acc_pfn_##name name;
        ACC_NVRTC_FUNCTIONS(NVRTC_FIELD)
#undef NVRTC_FIELD
    } fn;
};

static acc_rtc_kept kept = ACC_RTC_KEPT_INIT;

/* Read the version and architectures of c (its entry points resolved). */
static acc_status
nvrtc_read(cuda_nvrtc *c, const char *library, acc_error *err)
{
    int count = 0;

    if (c->fn.nvrtcVersion(&c->major, &c->minor) != ACC_NVRTC_SUCCESS) {
        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s: nvrtcVersion() failed",
                      library);
        return ACC_ERR_NOT_FOUND;
    }
    if (c->major < 11 || (c->major == 11 && c->minor < 2)) {
        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s is NVRTC %d.%d, too old: "
                      "expected 11.2 or later", library, c->major, c->minor);
        return ACC_ERR_NOT_FOUND;
    }
    if (c->fn.nvrtcGetNumSupportedArchs(&count) != ACC_NVRTC_SUCCESS
        || count <= 0 || count > NVRTC_MAX_ARCHS
        || c->fn.nvrtcGetSupportedArchs(c->archs) != ACC_NVRTC_SUCCESS) {
        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s: NVRTC %d.%d does not "
                      "tell the architectures it compiles for (%d)",
                      library, c->major, c->minor, count);
        return ACC_ERR_NOT_FOUND;
    }
    c->narchs = count;
    return ACC_OK;
}

/* Open library as a new cuda_nvrtc; NULL with why in err. */
static void *
nvrtc_load(const char *library, acc_error *err)
{
    cuda_nvrtc *c = calloc(1, sizeof(*c));
    void *handle;

    if (c == NULL) {
        acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        return NULL;
    }
    handle = acc_rtc_dlopen(library, c->path, sizeof(c->path), err);
    if (handle == NULL) {
        goto fail;
    }
#define NVRTC_RESOLVE(name, ret, params)                                   \
    if ((c->fn.name = (acc_pfn_##name)dlsym(handle, #name)) == NULL) {     \
        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s is not NVRTC 11.2 or "   \
                      "later: it lacks " #name, library);                  \
        goto fail;                                                         \
    }
    ACC_NVRTC_FUNCTIONS(NVRTC_RESOLVE)
#undef NVRTC_RESOLVE
    if (nvrtc_read(c, library, err) != ACC_OK) {
        goto fail;
    }
    acc_trace("cuda: NVRTC %d.%d from %s", c->major, c->minor, c->path);
    return c;

fail:
    /* The library stays open (a failed dlsym leaves nothing to undo
     * that matters; closing could unload what another caller holds). */
    free(c);
    return NULL;
}

acc_status
cuda_nvrtc_open(const char *library, cuda_nvrtc **out, acc_error *err)
{
    *out = acc_rtc_keep(&kept, library, nvrtc_load, err);
    return *out != NULL ? ACC_OK : err->status;
}

/* The target for compute capability major.minor: *arch (75) and whether
 * NVRTC makes a cubin for it; 0 when it targets nothing at or below. */
static int
nvrtc_target(const cuda_nvrtc *c, int major, int minor, int *arch,
             int *cubin)
{
    int cc = major * 10 + minor;

    *arch = 0;
    *cubin = 0;
    for (int i = 0; i < c->narchs; i++) {
        if (c->archs[i] == cc) {
            *arch = cc;
            *cubin = 1;
            return 1;
        }
        if (c->archs[i] < cc && c->archs[i] > *arch) {
            *arch = c->archs[i];
        }
    }
    return *arch != 0;
}

acc_status
cuda_nvrtc_describe(const cuda_nvrtc *c, int major, int minor, char *id,
                    size_t size, acc_error *err)
{
    int arch, cubin;

    if (!nvrtc_target(c, major, minor, &arch, &cubin)) {
        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s is NVRTC %d.%d, which "
                      "compiles for sm_%d and later; the device is sm_%d%d "
                      "(name an older NVRTC in ACCELERATOR_NVRTC_LIBRARY)",
                      c->path, c->major, c->minor, c->archs[0], major,
                      minor);
        return ACC_ERR_NOT_FOUND;
    }
    snprintf(id, size, "nvrtc %d.%d %s_%d %s", c->major, c->minor,
             cubin ? "sm" : "compute", arch, c->path);
    return ACC_OK;
}

/* The architecture an option names ("-arch=sm_90", "--gpu-architecture
 * compute_90": next is the option after it), or NULL. */
static const char *
named_arch(const char *option, const char *next)
{
    static const char *const flags[] = {"-arch", "--gpu-architecture"};

    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        size_t n = strlen(flags[i]);

        if (strncmp(option, flags[i], n) == 0) {
            if (option[n] == '=') {
                return option + n + 1;
            }
            if (option[n] == '\0') {
                return next != NULL ? next : "";
            }
        }
    }
    return NULL;
}

acc_status
cuda_nvrtc_compile(const cuda_nvrtc *c, const char *backend, int major,
                   int minor,
                   const char *source, size_t size,
                   const char *const *options, int noptions,
                   const char *const *names, int nnames, acc_compiled *out,
                   acc_error *err)
{
    const char *chosen = NULL;
    char target[64];
    const char *own[1] = {target};
    int arch, cubin;
    acc_rtc rtc = {
        .backend = backend,
        .compiler = "NVRTC",
        .file_name = "kernel.cu",
        ACC_RTC_ENTRY_POINTS(c->fn, nvrtc),
        .refused_option = ACC_NVRTC_ERROR_INVALID_OPTION,
        .refused_source = ACC_NVRTC_ERROR_COMPILATION,
    };

    for (int i = 0; i < noptions && chosen == NULL; i++) {
        chosen = named_arch(options[i], i + 1 < noptions ? options[i + 1]
                                                         : NULL);
    }
    if (chosen != NULL) {
        cubin = strncmp(chosen, "sm_", 3) == 0;
    }
    else if (cuda_nvrtc_describe(c, major, minor, target, sizeof(target),
                                 err) != ACC_OK
             || !nvrtc_target(c, major, minor, &arch, &cubin)) {
        return err->status;
    }
    else {
        snprintf(target, sizeof(target), "--gpu-architecture=%s_%d",
                 cubin ? "sm" : "compute", arch);
    }
    rtc.code_size = cubin ? c->fn.nvrtcGetCUBINSize : c->fn.nvrtcGetPTXSize;
    rtc.code = cubin ? c->fn.nvrtcGetCUBIN : c->fn.nvrtcGetPTX;
    rtc.code_name = cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX";
    rtc.code_size_name = cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize";
    rtc.code_format = cubin ? ACC_FORMAT_CUBIN : ACC_FORMAT_PTX;
    return acc_rtc_compile(&rtc, source, size, own, chosen != NULL ? 0 : 1,
                           options, noptions, names, nnames, out, err);
}
