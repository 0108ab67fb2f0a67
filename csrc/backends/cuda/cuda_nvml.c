/*
 * cuda_nvml.c - count CUDA devices through NVML, so that is_available()
 * and device_count() never initialise CUDA.
 *
 * cuInit makes a process unable to fork children that use CUDA.  NVML
 * (libnvidia-ml.so.1, part of every driver install) counts the GPUs
 * without initialising CUDA, so a process that only asked questions can
 * still fork DataLoader-style workers that use the GPU; cuInit then runs
 * at the first real use (cuda.c).  torch does the same behind
 * PYTORCH_NVML_BASED_CUDA_CHECK=1; here it is the default.
 *
 * NVML ignores CUDA_VISIBLE_DEVICES, so it is applied here as the CUDA
 * driver parses it (the rules torch's _parse_visible_devices encodes):
 * the kind of the first entry decides the list's kind; indices are read
 * like strtoul (leading digits, "1gpu" is 1) and a negative or unreadable
 * entry ends the list, as does the first index beyond the device count;
 * "GPU-" entries are UUIDs or unique prefixes of one, and an unknown or
 * ambiguous one ends the list; a repeated device empties it.  MIG entries
 * are not resolved here: CUDA initialises instead.
 */
#define _GNU_SOURCE
#define ACC_BACKEND_HOST cuda_host
#include <accelerator/backend.h>
#include "cuda_nvml.h"
#include "nvml_api.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_DEFAULT_LIBRARY "libnvidia-ml.so.1"

#define NVML_FN_FIELD(name, ret, params) acc_pfn_##name name;

static struct {
    ACC_NVML_FUNCTIONS(NVML_FN_FIELD)
} nvml;

#undef NVML_FN_FIELD

/* Which library to open; NULL when NVML is switched off.  Without
 * ACCELERATOR_NVML_LIBRARY, a CUDA library given by path is paired with
 * the NVML beside it: both come from one driver install (or one set of
 * test doubles), and the system's NVML would describe another driver. */
static const char *
nvml_library(char *buf, size_t size)
{
    const char *path = getenv("ACCELERATOR_NVML_LIBRARY");
    const char *cuda = getenv("ACCELERATOR_CUDA_LIBRARY");
    const char *slash;

    if (path != NULL && path[0] != '\0') {
        return strcmp(path, "none") == 0 ? NULL : path;
    }
    if (cuda != NULL && (slash = strrchr(cuda, '/')) != NULL) {
        snprintf(buf, size, "%.*s/%s", (int)(slash - cuda), cuda,
                 NVML_DEFAULT_LIBRARY);
        return buf;
    }
    return NVML_DEFAULT_LIBRARY;
}

static const char *
nvml_error(nvmlReturn_t code)
{
    const char *text = nvml.nvmlErrorString != NULL
                           ? nvml.nvmlErrorString(code) : NULL;

    return text != NULL ? text : "unknown error";
}

/* Set `how` for a failing NVML call; returns 0 (NVML did not answer). */
static int
nvml_failed(char *how, size_t size, const char *api, nvmlReturn_t code)
{
    acc_format(how, size, "cuInit (NVML not used: %s() failed: %s (%d))", api,
               nvml_error(code), (int)code);
    return 0;
}

static int
nvml_open(const char *path, char *how, size_t size)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void *p;

    if (lib == NULL) {
        acc_format(how, size, "cuInit (NVML not used: cannot open %s)", path);
        acc_trace("cuda: NVML: %s", dlerror());
        return 0;
    }
#define NVML_RESOLVE(name, ret, params)                                   \
    p = dlsym(lib, #name);                                                \
    if (p == NULL) {                                                      \
        acc_format(how, size, "cuInit (NVML not used: %s lacks %s)", path,  \
                   #name);                                                  \
        return 0;                                                         \
    }                                                                     \
    memcpy(&nvml.name, &p, sizeof(p));
    ACC_NVML_FUNCTIONS(NVML_RESOLVE)
#undef NVML_RESOLVE
    return 1;
}

/* strtoul's reading of one index entry: -1 when it is not one. */
static long
visible_index(const char *entry)
{
    long value = 0;
    int digits = 0;

    while (isspace((unsigned char)*entry)) {
        entry++;
    }
    if (*entry == '+') {
        entry++;
    }
    while (isdigit((unsigned char)*entry) && value < 1000000) {
        value = value * 10 + (*entry++ - '0');
        digits++;
    }
    return digits > 0 ? value : -1;
}

/* The device whose UUID starts with `prefix`; -1 if none or several. */
static int
visible_uuid(const char *prefix, size_t len,
             char (*uuids)[NVML_DEVICE_UUID_V2_BUFFER_SIZE], int n)
{
    int found = -1;

    for (int i = 0; i < n; i++) {
        if (strncmp(uuids[i], prefix, len) == 0) {
            if (found >= 0) {
                return -1;
            }
            found = i;
        }
    }
    return found;
}

/* Apply CUDA_VISIBLE_DEVICES to the n devices NVML sees. */
static int
visible_count(const char *list, int n,
              char (*uuids)[NVML_DEVICE_UUID_V2_BUFFER_SIZE])
{
    int chosen[ACC_MAX_DEVICES];
    int count = 0, by_uuid = strncmp(list, "GPU-", 4) == 0;
    const char *entry = list;

    while (entry != NULL && count < ACC_MAX_DEVICES) {
        const char *end = strchr(entry, ',');
        size_t len = end ? (size_t)(end - entry) : strlen(entry);
        long device;

        if (by_uuid) {
            device = len > 4 && strncmp(entry, "GPU-", 4) == 0
                         ? visible_uuid(entry, len, uuids, n) : -1;
        }
        else {
            device = visible_index(entry);
            if (device >= n) {
                device = -1;
            }
        }
        if (device < 0) {
            break;
        }
        for (int i = 0; i < count; i++) {
            if (chosen[i] == device) {
                return 0;
            }
        }
        chosen[count++] = (int)device;
        entry = end ? end + 1 : NULL;
    }
    return count;
}

int
acc_cuda_nvml_count(int *count, char *how, size_t size)
{
    static char uuids[ACC_MAX_DEVICES][NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    char buf[4096];
    const char *path = nvml_library(buf, sizeof(buf));
    unsigned int raw = 0;
    nvmlReturn_t rc;
    int n;

    if (path == NULL) {
        acc_format(how, size, "cuInit (NVML not used: "
                   "ACCELERATOR_NVML_LIBRARY=none)");
        return 0;
    }
    if (visible != NULL && strncmp(visible, "MIG-", 4) == 0) {
        acc_format(how, size, "cuInit (NVML not used: CUDA_VISIBLE_DEVICES "
                   "names MIG devices)");
        return 0;
    }
    if (!nvml_open(path, how, size)) {
        return 0;
    }
    rc = nvml.nvmlInit_v2();
    if (rc != NVML_SUCCESS) {
        return nvml_failed(how, size, "nvmlInit_v2", rc);
    }
    rc = nvml.nvmlDeviceGetCount_v2(&raw);
    n = raw > ACC_MAX_DEVICES ? ACC_MAX_DEVICES : (int)raw;
    if (rc == NVML_SUCCESS && visible != NULL
        && strncmp(visible, "GPU-", 4) == 0) {
        for (int i = 0; i < n && rc == NVML_SUCCESS; i++) {
            nvmlDevice_t device = NULL;

            rc = nvml.nvmlDeviceGetHandleByIndex_v2((unsigned)i, &device);
            if (rc != NVML_SUCCESS) {
                nvml_failed(how, size, "nvmlDeviceGetHandleByIndex_v2", rc);
                break;
            }
            rc = nvml.nvmlDeviceGetUUID(device, uuids[i], sizeof(uuids[i]));
            if (rc != NVML_SUCCESS) {
                nvml_failed(how, size, "nvmlDeviceGetUUID", rc);
            }
            uuids[i][sizeof(uuids[i]) - 1] = '\0';
        }
    }
    else if (rc != NVML_SUCCESS) {
        nvml_failed(how, size, "nvmlDeviceGetCount_v2", rc);
    }
    /* Nothing of NVML stays initialised: a forked child starts clean. */
    if (nvml.nvmlShutdown() != NVML_SUCCESS) {
        acc_trace("cuda: nvmlShutdown failed (ignored)");
    }
    if (rc != NVML_SUCCESS) {
        return 0;
    }
    *count = visible != NULL ? visible_count(visible, n, uuids) : n;
    acc_format(how, size, "NVML (%s), without initialising CUDA",
               path);
    acc_trace("cuda: NVML sees %u device(s); %d visible to CUDA", raw,
              *count);
    return 1;
}
