/*
 * nvml_api.h - our own minimal declarations of NVML (libnvidia-ml.so.1).
 *
 * The CUDA backend counts devices through NVML, which every NVIDIA driver
 * installs and which never initialises CUDA (see cuda_nvml.c).  Only what
 * that needs is declared here, so building needs no SDK;
 * tests/test_cuda_api_header.py compiles this header with NVIDIA's nvml.h
 * (ACC_NVML_API_CHECK) and -Werror, so every declaration provably matches.
 */
#ifndef ACC_NVML_API_H
#define ACC_NVML_API_H

/* Result codes: name, value. */
#define ACC_NVML_RESULTS(X)                      \
    X(NVML_SUCCESS, 0)                           \
    X(NVML_ERROR_UNINITIALIZED, 1)               \
    X(NVML_ERROR_INVALID_ARGUMENT, 2)            \
    X(NVML_ERROR_NOT_SUPPORTED, 3)               \
    X(NVML_ERROR_NO_PERMISSION, 4)               \
    X(NVML_ERROR_NOT_FOUND, 6)                   \
    X(NVML_ERROR_INSUFFICIENT_SIZE, 7)           \
    X(NVML_ERROR_DRIVER_NOT_LOADED, 9)           \
    X(NVML_ERROR_LIBRARY_NOT_FOUND, 12)          \
    X(NVML_ERROR_GPU_IS_LOST, 15)                \
    X(NVML_ERROR_UNKNOWN, 999)

/* Sizes (macros in nvml.h too). */
#define ACC_NVML_SIZES(X) X(NVML_DEVICE_UUID_V2_BUFFER_SIZE, 96)

#ifndef ACC_NVML_API_CHECK

#define ACC_NVML_ENUM_ENTRY(name, value) name = value,
typedef enum nvmlReturn_enum {
    ACC_NVML_RESULTS(ACC_NVML_ENUM_ENTRY)
} nvmlReturn_t;
enum {
    ACC_NVML_SIZES(ACC_NVML_ENUM_ENTRY)
};
#undef ACC_NVML_ENUM_ENTRY

typedef struct nvmlDevice_st *nvmlDevice_t;

#endif /* ACC_NVML_API_CHECK */

/*
 * Every NVML function we call, once: X(name, return type, parameters).
 * The names are the exported symbols (dlsym): NVML versions by name.
 */
#define ACC_NVML_FUNCTIONS(X)                                              \
    X(nvmlInit_v2, nvmlReturn_t, (void))                                   \
    X(nvmlShutdown, nvmlReturn_t, (void))                                  \
    X(nvmlErrorString, const char *, (nvmlReturn_t result))                \
    X(nvmlDeviceGetCount_v2, nvmlReturn_t, (unsigned int *deviceCount))    \
    X(nvmlDeviceGetHandleByIndex_v2, nvmlReturn_t,                         \
      (unsigned int index, nvmlDevice_t *device))                          \
    X(nvmlDeviceGetUUID, nvmlReturn_t,                                     \
      (nvmlDevice_t device, char *uuid, unsigned int length))

/* Function pointer types: acc_pfn_<name>. */
#define ACC_NVML_PFN_TYPEDEF(name, ret, params) \
    typedef ret (*acc_pfn_##name) params;
ACC_NVML_FUNCTIONS(ACC_NVML_PFN_TYPEDEF)
#undef ACC_NVML_PFN_TYPEDEF

#endif /* ACC_NVML_API_H */
