/*
 * nvrtc_api.h - the NVRTC entry points the CUDA backend calls (no SDK:
 * declared here, checked against the toolkit's nvrtc.h by
 * tests/drivers/check_nvrtc_api.c).  A program is a pointer and a result
 * an int (nvrtcResult is a C enum): accelerator/rtc.h's shapes.
 *
 * X(name, return type, parameters): every one is required; NVRTC 11.2
 * (nvrtcGetSupportedArchs) is the oldest the backend takes.
 */
#ifndef ACC_NVRTC_API_H
#define ACC_NVRTC_API_H

#include <accelerator/rtc.h>

#include <stddef.h>

#define ACC_NVRTC_SUCCESS 0
#define ACC_NVRTC_ERROR_INVALID_OPTION 5
#define ACC_NVRTC_ERROR_COMPILATION 6

#define ACC_NVRTC_FUNCTIONS(X)                                             \
    X(nvrtcGetErrorString, const char *, (int result))                    \
    X(nvrtcVersion, int, (int *major, int *minor))                        \
    X(nvrtcGetNumSupportedArchs, int, (int *count))                       \
    X(nvrtcGetSupportedArchs, int, (int *archs))                          \
    X(nvrtcCreateProgram, int,                                            \
      (acc_rtc_program *prog, const char *source, const char *name,       \
       int nheaders, const char *const *headers,                          \
       const char *const *include_names))                                 \
    X(nvrtcDestroyProgram, int, (acc_rtc_program *prog))                  \
    X(nvrtcCompileProgram, int,                                           \
      (acc_rtc_program prog, int noptions, const char *const *options))   \
    X(nvrtcGetProgramLogSize, int, (acc_rtc_program prog, size_t *size))  \
    X(nvrtcGetProgramLog, int, (acc_rtc_program prog, char *log))         \
    X(nvrtcGetPTXSize, int, (acc_rtc_program prog, size_t *size))         \
    X(nvrtcGetPTX, int, (acc_rtc_program prog, char *ptx))                \
    X(nvrtcGetCUBINSize, int, (acc_rtc_program prog, size_t *size))       \
    X(nvrtcGetCUBIN, int, (acc_rtc_program prog, char *cubin))            \
    X(nvrtcAddNameExpression, int,                                        \
      (acc_rtc_program prog, const char *name_expression))                \
    X(nvrtcGetLoweredName, int,                                           \
      (acc_rtc_program prog, const char *name_expression,                 \
       const char **lowered_name))

#define ACC_NVRTC_TYPEDEF(name, ret, params) typedef ret(*acc_pfn_##name) params;
ACC_NVRTC_FUNCTIONS(ACC_NVRTC_TYPEDEF)
#undef ACC_NVRTC_TYPEDEF

#endif /* ACC_NVRTC_API_H */
