/*
 * check_hip_api.c - compiled with ROCm's hip/hip_runtime_api.h and -Werror
 * by tests/test_hip_api_header.py (and make -C tests/drivers): fails to
 * compile when one of our own declarations in csrc/backends/hip/hip_api.h
 * differs from AMD's.  The HIP headers need __HIP_PLATFORM_AMD__.
 */
#include <hip/hip_runtime_api.h>
#include <stddef.h>

#define ACC_HIP_API_CHECK
#include "../../csrc/backends/hip/hip_api.h"

#define CHECK_VALUE(name, value) \
    _Static_assert((long long)(name) == (value), #name " differs");
ACC_HIP_RESULTS(CHECK_VALUE)
ACC_HIP_ATTRIBUTES(CHECK_VALUE)
ACC_HIP_FLAGS(CHECK_VALUE)
ACC_HIP_FUNC_ATTRIBUTES(CHECK_VALUE)
ACC_HIP_MEMORY_TYPES(CHECK_VALUE)
ACC_HIP_MEMCPY_KINDS(CHECK_VALUE)
ACC_HIP_CAPTURE_MODES(CHECK_VALUE)
ACC_HIP_CAPTURE_STATUSES(CHECK_VALUE)

#define CHECK_FUNCTION(name, ret, params)                                   \
    _Static_assert(__builtin_types_compatible_p(acc_pfn_##name,             \
                                                __typeof__(&name)),         \
                   #name " signature differs");
ACC_HIP_FUNCTIONS(CHECK_FUNCTION)
ACC_HIP_IPC_FUNCTIONS(CHECK_FUNCTION)

/* The types our header defines when the HIP headers are absent,
 * restated here. */
_Static_assert(__builtin_types_compatible_p(hipDevice_t, int), "hipDevice_t");
_Static_assert(__builtin_types_compatible_p(hipDeviceptr_t, void *),
               "hipDeviceptr_t");
_Static_assert(sizeof(hipUUID) == 16 && offsetof(hipUUID, bytes) == 0,
               "hipUUID");
_Static_assert(sizeof(hipError_t) == sizeof(int), "hipError_t size");
_Static_assert(ACC_HIP_IPC_HANDLE_SIZE == HIP_IPC_HANDLE_SIZE
                   && sizeof(hipIpcMemHandle_t) == ACC_HIP_IPC_HANDLE_SIZE
                   && sizeof(hipIpcEventHandle_t) == ACC_HIP_IPC_HANDLE_SIZE
                   && sizeof(((hipIpcMemHandle_t *)0)->reserved)
                          == ACC_HIP_IPC_HANDLE_SIZE
                   && sizeof(((hipIpcEventHandle_t *)0)->reserved)
                          == ACC_HIP_IPC_HANDLE_SIZE,
               "hipIpcMemHandle_t / hipIpcEventHandle_t");
_Static_assert(sizeof(hipPointerAttribute_t) == 32
                   && offsetof(hipPointerAttribute_t, memoryType) == 0
                   && offsetof(hipPointerAttribute_t, device) == 4
                   && offsetof(hipPointerAttribute_t, devicePointer) == 8
                   && offsetof(hipPointerAttribute_t, hostPointer) == 16
                   && offsetof(hipPointerAttribute_t, isManaged) == 24
                   && offsetof(hipPointerAttribute_t, allocationFlags) == 28,
               "hipPointerAttribute_t layout");
_Static_assert(sizeof(hipDeviceProp_t) == ACC_HIP_DEVICE_PROP_SIZE
                   && offsetof(hipDeviceProp_t, gcnArchName)
                          == ACC_HIP_DEVICE_PROP_GCN_ARCH_NAME
                   && sizeof(((hipDeviceProp_t *)0)->gcnArchName)
                          == ACC_HIP_GCN_ARCH_NAME_SIZE,
               "hipDeviceProp_t layout");
_Static_assert(sizeof(enum hipMemoryType) == sizeof(int), "hipMemoryType");
_Static_assert(sizeof(hipFunction_attribute) == sizeof(int),
               "hipFunction_attribute");
_Static_assert(sizeof(hipStreamCaptureMode) == sizeof(int)
                   && sizeof(hipStreamCaptureStatus) == sizeof(int),
               "capture enums");

int acc_hip_api_check_unit;
