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
#include <stdint.h>

#define ACC_HIPRTC_SUCCESS 0
#define ACC_HIPRTC_ERROR_INVALID_OPTION 5
#define ACC_HIPRTC_ERROR_COMPILATION 6

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

/*
 * Optional, from the code object manager that hiprtc links (comgr,
 * amd_comgr.h; found through hiprtc's library): whether a target ID names
 * an ISA that this ROCm compiles for.  ROCm 5.2's hiprtcCompileProgram
 * aborts the process ("munmap_chunk(): invalid pointer") on an
 * --offload-arch its LLVM does not know, so each target is asked here
 * first.  A metadata node is a struct of one uint64_t, passed as one.
 */
#define ACC_COMGR_FUNCTIONS(X)                                             \
    X(amd_comgr_get_isa_metadata, int,                                    \
      (const char *isa_name, uint64_t *metadata))                         \
    X(amd_comgr_destroy_metadata, int, (uint64_t metadata))

#define ACC_HIPRTC_TYPEDEF(name, ret, params) typedef ret(*acc_pfn_##name) params;
ACC_HIPRTC_FUNCTIONS(ACC_HIPRTC_TYPEDEF)
ACC_COMGR_FUNCTIONS(ACC_HIPRTC_TYPEDEF)
#undef ACC_HIPRTC_TYPEDEF

#endif /* ACC_HIPRTC_API_H */
