/*
 * check_cuda_api.c - compiled with the toolkit's cuda.h and -Werror by
 * tests/test_cuda_api_header.py: fails to compile when one of our own
 * declarations in csrc/backends/cuda/cuda_api.h differs from NVIDIA's.
 */
#include <cuda.h>
#include <stddef.h>

#define ACC_CUDA_API_CHECK
#include "../../csrc/backends/cuda/cuda_api.h"

#define CHECK_VALUE(name, value) \
    _Static_assert((long long)(name) == (value), #name " differs");
ACC_CUDA_RESULTS(CHECK_VALUE)
ACC_CUDA_ATTRIBUTES(CHECK_VALUE)
ACC_CUDA_PEER_ATTRIBUTES(CHECK_VALUE)
ACC_CUDA_FUNC_ATTRIBUTES(CHECK_VALUE)
ACC_CUDA_JIT_OPTIONS(CHECK_VALUE)
ACC_CUDA_PROC_STATUS(CHECK_VALUE)
ACC_CUDA_FLAGS(CHECK_VALUE)
ACC_CUDA_POINTER_ATTRIBUTES(CHECK_VALUE)
ACC_CUDA_PEER_POINTER_ATTRIBUTES(CHECK_VALUE)
ACC_CUDA_MEMORY_TYPES(CHECK_VALUE)
ACC_CUDA_CAPTURE_MODES(CHECK_VALUE)
ACC_CUDA_CAPTURE_STATUS(CHECK_VALUE)

/* The base name, through cuda.h's own version macros, is what
 * cuGetProcAddress returns at ACC_CUDA_ABI_VERSION; its type must match. */
#define CHECK_FUNCTION(name, symbol, version, params)                       \
    _Static_assert(__builtin_types_compatible_p(acc_pfn_##name,             \
                                                __typeof__(&name)),         \
                   #name " signature differs");                             \
    _Static_assert((version) <= ACC_CUDA_ABI_VERSION,                       \
                   #name " needs a newer ABI than we declare");
ACC_CUDA_FUNCTIONS(CHECK_FUNCTION)
ACC_CUDA_IPC_FUNCTIONS(CHECK_FUNCTION)

/* The optional ones are asked for at their own version: the base name's
 * type at cuda.h's version, and a version cuda.h has. */
#define CHECK_OPTIONAL_FUNCTION(name, symbol, version, params)              \
    _Static_assert(__builtin_types_compatible_p(acc_pfn_##name,             \
                                                __typeof__(&name)),         \
                   #name " signature differs");                             \
    _Static_assert((version) > ACC_CUDA_ABI_VERSION                         \
                   && (version) <= CUDA_VERSION,                            \
                   #name " is not optional at our ABI, or newer than cuda.h");
ACC_CUDA_OPTIONAL_FUNCTIONS(CHECK_OPTIONAL_FUNCTION)

/* The double's extra functions: each variant's own symbol. */
#define CHECK_PEER_FUNCTION(name, symbol, version, params)                  \
    _Static_assert(__builtin_types_compatible_p(CUresult(*) params,         \
                                                __typeof__(&symbol)),       \
                   #symbol " signature differs");                           \
    _Static_assert((version) <= CUDA_VERSION, #symbol " is newer than cuda.h");
ACC_CUDA_PEER_FUNCTIONS(CHECK_PEER_FUNCTION)

_Static_assert(__builtin_types_compatible_p(acc_pfn_cuGetProcAddress,
                                            __typeof__(&cuGetProcAddress)),
               "cuGetProcAddress signature differs");

/* The types our header defines when cuda.h is absent, restated here. */
_Static_assert(__builtin_types_compatible_p(CUdevice, int), "CUdevice");
_Static_assert(__builtin_types_compatible_p(cuuint64_t, uint64_t),
               "cuuint64_t");
_Static_assert(sizeof(CUuuid) == 16 && offsetof(CUuuid, bytes) == 0,
               "CUuuid");
_Static_assert(__builtin_types_compatible_p(CUdeviceptr, unsigned long long),
               "CUdeviceptr");
_Static_assert(sizeof(CUipcMemHandle) == 64
               && offsetof(CUipcMemHandle, reserved) == 0, "CUipcMemHandle");
_Static_assert(sizeof(CUipcEventHandle) == 64
               && offsetof(CUipcEventHandle, reserved) == 0,
               "CUipcEventHandle");
_Static_assert(sizeof(CUresult) == sizeof(int), "CUresult size");
_Static_assert(sizeof(CUjit_option) == sizeof(int), "CUjit_option size");
_Static_assert(sizeof(CUfunction_attribute) == sizeof(int),
               "CUfunction_attribute size");

int acc_cuda_api_check_unit;
