/*
 * check_opencl_api.c - compiled with Khronos' <CL/cl.h> and -Werror (the
 * `opencl` target of this folder's Makefile builds it): fails to compile
 * when one of our own declarations in csrc/backends/opencl/opencl_api.h differs
 * from the standard's.
 *
 *   cc -std=c11 -Wall -Wextra -Werror -c check_opencl_api.c -o /dev/null
 */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <CL/cl_ext.h>

#define ACC_OPENCL_API_CHECK
#include "../../csrc/backends/opencl/opencl_api.h"

#define CHECK_VALUE(name, value) \
    _Static_assert((long long)(name) == (long long)(value), #name " differs");
ACC_OPENCL_ERRORS(CHECK_VALUE)
ACC_OPENCL_CONSTANTS(CHECK_VALUE)

_Static_assert(__builtin_types_compatible_p(
                   acc_cl_context_notify,
                   void (CL_CALLBACK *)(const char *, const void *, size_t,
                                        void *)),
               "the context notify callback differs");
_Static_assert(__builtin_types_compatible_p(
                   acc_cl_program_notify,
                   void (CL_CALLBACK *)(cl_program, void *)),
               "the program notify callback differs");

/* Each function: our pointer type is the type of a pointer to Khronos'
 * declaration. */
#define CHECK_FUNCTION(name, ret, params)                              \
    _Static_assert(__builtin_types_compatible_p(acc_pfn_##name,        \
                                                __typeof__(&name)),    \
                   #name " signature differs");
ACC_OPENCL_FUNCTIONS(CHECK_FUNCTION)
