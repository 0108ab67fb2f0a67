/*
 * nvrtc_shim.c - an NVRTC for the tests (build/libnvrtc_shim.so): every
 * entry point the CUDA backend calls (csrc/backends/cuda/nvrtc_api.h)
 * forwards to the real NVRTC, so it compiles for real; on demand one
 * call fails, and programs are counted so a test sees that each one made
 * was destroyed.
 *
 * Environment, read at load:
 *   NVRTC_SHIM_REAL   the real NVRTC to forward to (libnvrtc.so.13)
 *   NVRTC_SHIM_FAIL   "name:nth:code": the nth call (from 1) of name
 *                     answers code instead of calling the real one
 *   NVRTC_SHIM_COUNTS a file that receives at exit
 *                     "created <n> destroyed <m>"
 *   NVRTC_SHIM_VERSION "major.minor" that nvrtcVersion answers instead
 *                     of the real one's (an old NVRTC, for the check of
 *                     the oldest the backend takes)
 * and, through ctypes in the process that loaded it, nvrtc_shim_fail()
 * and nvrtc_shim_counts() (below).
 */
#define _GNU_SOURCE
#define ACC_BACKEND_HOST nvrtc_shim_host
#include <accelerator/backend.h>
#include "../../csrc/backends/cuda/nvrtc_api.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
#define SHIM_FIELD(name, ret, params) acc_pfn_##name name;
    ACC_NVRTC_FUNCTIONS(SHIM_FIELD)
#undef SHIM_FIELD
} real;

static char fail_name[64];
static long fail_nth;
static int fail_code;
static atomic_long calls_of_failing;
static atomic_long created, destroyed;
static const char *counts_path;

static void
write_counts(void)
{
    FILE *f = fopen(counts_path, "w");

    if (f != NULL) {
        fprintf(f, "created %ld destroyed %ld\n", atomic_load(&created),
                atomic_load(&destroyed));
        fclose(f);
    }
}

__attribute__((constructor)) static void
shim_load(void)
{
    const char *path = getenv("NVRTC_SHIM_REAL");
    const char *fail = getenv("NVRTC_SHIM_FAIL");
    void *handle = dlopen(path != NULL ? path : "libnvrtc.so.13",
                          RTLD_NOW | RTLD_LOCAL);

    if (handle == NULL) {
        fprintf(stderr, "nvrtc shim: %s\n", dlerror());
        abort();
    }
#define SHIM_RESOLVE(name, ret, params)                                    \
    real.name = (acc_pfn_##name)dlsym(handle, #name);                      \
    if (real.name == NULL) {                                               \
        fprintf(stderr, "nvrtc shim: no " #name "\n");                     \
        abort();                                                           \
    }
    ACC_NVRTC_FUNCTIONS(SHIM_RESOLVE)
#undef SHIM_RESOLVE
    if (fail != NULL
        && sscanf(fail, "%63[^:]:%ld:%d", fail_name, &fail_nth,
                  &fail_code) != 3) {
        fprintf(stderr, "nvrtc shim: NVRTC_SHIM_FAIL=%s, expected "
                "name:nth:code\n", fail);
        abort();
    }
    counts_path = getenv("NVRTC_SHIM_COUNTS");
    if (counts_path != NULL) {
        atexit(write_counts);
    }
}

/* Make the nth next call (from 1) of name answer code ("": none). */
void
nvrtc_shim_fail(const char *name, long nth, int code)
{
    snprintf(fail_name, sizeof(fail_name), "%s", name);
    fail_nth = nth;
    fail_code = code;
    atomic_store(&calls_of_failing, 0);
}

/* The programs created and destroyed so far. */
void
nvrtc_shim_counts(long *made, long *gone)
{
    *made = atomic_load(&created);
    *gone = atomic_load(&destroyed);
}

/* Whether this call of name is the one to fail. */
static int
failing(const char *name)
{
    return fail_name[0] != '\0' && strcmp(name, fail_name) == 0
           && atomic_fetch_add(&calls_of_failing, 1) + 1 == fail_nth;
}

#define SHIM_CALL(name, ...)                                               \
    (failing(#name) ? fail_code : real.name(__VA_ARGS__))

const char *
nvrtcGetErrorString(int result)
{
    return real.nvrtcGetErrorString(result);
}

int
nvrtcVersion(int *major, int *minor)
{
    const char *told = getenv("NVRTC_SHIM_VERSION");
    int rc = SHIM_CALL(nvrtcVersion, major, minor);

    if (rc == 0 && told != NULL
        && sscanf(told, "%d.%d", major, minor) != 2) {
        fprintf(stderr, "nvrtc shim: NVRTC_SHIM_VERSION=%s, expected "
                "major.minor\n", told);
        abort();
    }
    return rc;
}

int
nvrtcGetNumSupportedArchs(int *count)
{
    return SHIM_CALL(nvrtcGetNumSupportedArchs, count);
}

int
nvrtcGetSupportedArchs(int *archs)
{
    return SHIM_CALL(nvrtcGetSupportedArchs, archs);
}

int
nvrtcCreateProgram(acc_rtc_program *prog, const char *source,
                   const char *name, int nheaders,
                   const char *const *headers,
                   const char *const *include_names)
{
    int rc = SHIM_CALL(nvrtcCreateProgram, prog, source, name, nheaders,
                       headers, include_names);

    if (rc == 0) {
        atomic_fetch_add(&created, 1);
    }
    return rc;
}

int
nvrtcDestroyProgram(acc_rtc_program *prog)
{
    int rc = SHIM_CALL(nvrtcDestroyProgram, prog);

    if (rc == 0) {
        atomic_fetch_add(&destroyed, 1);
    }
    return rc;
}

int
nvrtcCompileProgram(acc_rtc_program prog, int noptions,
                    const char *const *options)
{
    return SHIM_CALL(nvrtcCompileProgram, prog, noptions, options);
}

int
nvrtcGetProgramLogSize(acc_rtc_program prog, size_t *size)
{
    return SHIM_CALL(nvrtcGetProgramLogSize, prog, size);
}

int
nvrtcGetProgramLog(acc_rtc_program prog, char *log)
{
    return SHIM_CALL(nvrtcGetProgramLog, prog, log);
}

int
nvrtcGetPTXSize(acc_rtc_program prog, size_t *size)
{
    return SHIM_CALL(nvrtcGetPTXSize, prog, size);
}

int
nvrtcGetPTX(acc_rtc_program prog, char *ptx)
{
    return SHIM_CALL(nvrtcGetPTX, prog, ptx);
}

int
nvrtcGetCUBINSize(acc_rtc_program prog, size_t *size)
{
    return SHIM_CALL(nvrtcGetCUBINSize, prog, size);
}

int
nvrtcGetCUBIN(acc_rtc_program prog, char *cubin)
{
    return SHIM_CALL(nvrtcGetCUBIN, prog, cubin);
}

int
nvrtcAddNameExpression(acc_rtc_program prog, const char *name_expression)
{
    return SHIM_CALL(nvrtcAddNameExpression, prog, name_expression);
}

int
nvrtcGetLoweredName(acc_rtc_program prog, const char *name_expression,
                    const char **lowered_name)
{
    return SHIM_CALL(nvrtcGetLoweredName, prog, name_expression,
                     lowered_name);
}
