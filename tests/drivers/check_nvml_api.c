/*
 * check_nvml_api.c - compiled with NVIDIA's nvml.h and -Werror by
 * tests/test_cuda_api_header.py: fails to compile when one of our own
 * declarations in csrc/backends/cuda/nvml_api.h differs from NVIDIA's.
 */
#include <nvml.h>

#define ACC_NVML_API_CHECK
#include "../../csrc/backends/cuda/nvml_api.h"

#define CHECK_VALUE(name, value) \
    _Static_assert((long long)(name) == (value), #name " differs");
ACC_NVML_RESULTS(CHECK_VALUE)
ACC_NVML_SIZES(CHECK_VALUE)

/* nvml.h maps some names to versioned ones with macros (nvmlInit ->
 * nvmlInit_v2); we call the versioned symbols, so compare those. */
#define CHECK_FUNCTION(name, ret, params)                                  \
    _Static_assert(__builtin_types_compatible_p(acc_pfn_##name,            \
                                                __typeof__(&name)),        \
                   #name " signature differs");
ACC_NVML_FUNCTIONS(CHECK_FUNCTION)

int acc_nvml_api_check_unit;
