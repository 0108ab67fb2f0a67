/*
 * hiprtc_api.h - the hiprtc entry points the HIP backend calls (no SDK:
 * declared here in accelerator/rtc.h's shapes, a program a pointer and
 * a result an int; hiprtcResult is a C enum).  hiprtc lives inside
 * libamdhip64.so.5 in ROCm 5 (Debian's) and in libhiprtc.so from ROCm 6.
 */
#ifndef ACC_HIPRTC_API_H
#define ACC_HIPRTC_API_H

#include <accelerator/rtc.h>

#include <stddef.h>

#define ACC_HIPRTC_SUCCESS 0

#define ACC_HIPRTC_FUNCTIONS(X)                                            \
    X(hiprtcGetErrorString, const char *, (int result))                   \
    X(hiprtcVersion, int, (int *major, int *minor))                       \
    X(hiprtcCreateProgram, int,                                           \
      (acc_rtc_program *prog, const char *source, const char *name,       \
       int nheaders, const char *const *headers,                          \
       const char *const *include_names))                                 \
    X(hiprtcDestroyProgram, int, (acc_rtc_program *prog))                 \
    X(hiprtcCompileProgram, int,                                          \
      (acc_rtc_program prog, int noptions, const char *const *options))   \
    X(hiprtcGetProgramLogSize, int, (acc_rtc_program prog, size_t *size)) \
    X(hiprtcGetProgramLog, int, (acc_rtc_program prog, char *log))        \
    X(hiprtcGetCodeSize, int, (acc_rtc_program prog, size_t *size))       \
    X(hiprtcGetCode, int, (acc_rtc_program prog, char *code))             \
    X(hiprtcAddNameExpression, int,                                       \
      (acc_rtc_program prog, const char *name_expression))                \
    X(hiprtcGetLoweredName, int,                                          \
      (acc_rtc_program prog, const char *name_expression,                 \
       const char **lowered_name))

#define ACC_HIPRTC_TYPEDEF(name, ret, params) typedef ret(*acc_pfn_##name) params;
ACC_HIPRTC_FUNCTIONS(ACC_HIPRTC_TYPEDEF)
#undef ACC_HIPRTC_TYPEDEF

#endif /* ACC_HIPRTC_API_H */
