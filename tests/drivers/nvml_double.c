/*
 * nvml_double.c - a fake NVML (libnvidia-ml.so.1) for tests.
 *
 * It describes the same machine as the CUDA double beside it: the same
 * device count (FAKE_CUDA_DEVICES) and the same UUIDs, so that the CUDA
 * backend's NVML count and the count CUDA reports after cuInit agree, as
 * they do on a real driver install.  Like real NVML it ignores
 * CUDA_VISIBLE_DEVICES, needs nvmlInit before any device query and counts
 * nested initialisations.
 *
 * Control API for tests (load the same file with ctypes.CDLL), from the
 * control layer the doubles share (double_control.h):
 *   fake_nvml_call_count(name), fake_nvml_reset_counts(),
 *   fake_nvml_fail(name, nth, code), fake_nvml_clear_faults(),
 *   fake_nvml_live("init"): nvmlInit calls not yet shut down.
 * A fault on nvmlErrorString makes it return NULL.
 *
 * Environment, read once when the library is loaded:
 *   FAKE_NVML_DEVICES   device count, 0..64 (default: FAKE_CUDA_DEVICES,
 *                       else 2), to model a machine where the two disagree
 *   FAKE_NVML_FAIL      faults installed at load:
 *                       "name:nth:code[,name:nth:code...]"
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <string.h>

#include "../../csrc/backends/cuda/nvml_api.h"
#include "double_control.h"

#define FAKE_MAX_DEVICES 64

/* Prototypes from the backend's own list: every definition below is
 * checked against the signature the backend calls through. */
#define FAKE_DECLARE(name, ret, params) DC_EXPORT ret name params;
ACC_NVML_FUNCTIONS(FAKE_DECLARE)
#undef FAKE_DECLARE
/* The unversioned entry points real NVML exports too. */
DC_EXPORT nvmlReturn_t nvmlInit(void);
DC_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
DC_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                  nvmlDevice_t *device);

#define FAKE_FN_ID(name, ret, params) FN_##name,
enum fake_fn { ACC_NVML_FUNCTIONS(FAKE_FN_ID) FN_COUNT };
#undef FAKE_FN_ID

#define FAKE_FN_NAME(name, ret, params) {#name, NULL},
static const dc_fn fake_fns[FN_COUNT] = {ACC_NVML_FUNCTIONS(FAKE_FN_NAME)};
#undef FAKE_FN_NAME

enum { LIVE_INIT, LIVE_KINDS };
static const char *const g_live_kinds[LIVE_KINDS] = {"init"};
static atomic_llong g_calls[FN_COUNT];
static atomic_llong g_live[LIVE_KINDS];
static dc_control g_ctl = {
    DC_CONTROL_INIT("fake libnvidia-ml", fake_fns, g_calls, g_live_kinds,
                    g_live),
};

/* Handles point into this table; the device is its index. */
static struct nvmlDevice_st {
    int index;
} g_devices[FAKE_MAX_DEVICES];
static int g_count = 2;

/* Top of every function: counts, faults, and the need for nvmlInit. */
static bool
fake_enter(enum fake_fn fn, bool need_init, nvmlReturn_t *rc)
{
    int code;

    if (dc_enter(&g_ctl, (int)fn, &code)) {
        *rc = (nvmlReturn_t)code;
        return true;
    }
    if (need_init && dc_live_get(&g_ctl, LIVE_INIT) <= 0) {
        *rc = NVML_ERROR_UNINITIALIZED;
        return true;
    }
    return false;
}

#define FAKE_ENTER(name, need_init)                                \
    do {                                                           \
        nvmlReturn_t fake_enter_rc_;                               \
        if (fake_enter(FN_##name, (need_init), &fake_enter_rc_)) { \
            return fake_enter_rc_;                                 \
        }                                                          \
    } while (0)

nvmlReturn_t
nvmlInit_v2(void)
{
    FAKE_ENTER(nvmlInit_v2, false);
    dc_live_add(&g_ctl, LIVE_INIT, 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) __attribute__((alias("nvmlInit_v2")));

nvmlReturn_t
nvmlShutdown(void)
{
    FAKE_ENTER(nvmlShutdown, true);
    dc_live_add(&g_ctl, LIVE_INIT, -1);
    return NVML_SUCCESS;
}

const char *
nvmlErrorString(nvmlReturn_t result)
{
    int code;

    if (dc_enter(&g_ctl, FN_nvmlErrorString, &code)) {
        return NULL;
    }
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    default:
        return "Unknown Error";
    }
}

nvmlReturn_t
nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    FAKE_ENTER(nvmlDeviceGetCount_v2, true);
    if (deviceCount == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *deviceCount = (unsigned int)g_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
    __attribute__((alias("nvmlDeviceGetCount_v2")));

nvmlReturn_t
nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    FAKE_ENTER(nvmlDeviceGetHandleByIndex_v2, true);
    if (device == NULL || index >= (unsigned int)g_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *device = &g_devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                        nvmlDevice_t *device)
    __attribute__((alias("nvmlDeviceGetHandleByIndex_v2")));

nvmlReturn_t
nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    int n;

    FAKE_ENTER(nvmlDeviceGetUUID, true);
    if (device == NULL || uuid == NULL || device < g_devices
        || device >= g_devices + g_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    /* The CUDA double's UUID of the same device (cuDeviceGetUuid). */
    n = snprintf(text, sizeof(text),
                 "GPU-fa4ecda0-0000-4000-8000-00000000%04x",
                 (unsigned)device->index & 0xffff);
    if ((unsigned int)n >= length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(uuid, text, (size_t)n + 1);
    return NVML_SUCCESS;
}

DC_EXPORT_CONTROL(nvml, g_ctl)

static void
fork_prepare(void)
{
    dc_fork_prepare(&g_ctl);
}

static void
fork_release(void)
{
    dc_fork_release(&g_ctl);
}

__attribute__((constructor)) static void
fake_nvml_load(void)
{
    long long value;

    for (int i = 0; i < FAKE_MAX_DEVICES; i++) {
        g_devices[i].index = i;
    }
    if (dc_env_int(&g_ctl, "FAKE_CUDA_DEVICES", 0, FAKE_MAX_DEVICES,
                   &value)) {
        g_count = (int)value;
    }
    if (dc_env_int(&g_ctl, "FAKE_NVML_DEVICES", 0, FAKE_MAX_DEVICES,
                   &value)) {
        g_count = (int)value;
    }
    dc_env_faults(&g_ctl, "FAKE_NVML_FAIL");
    pthread_atfork(fork_prepare, fork_release, fork_release);
}
