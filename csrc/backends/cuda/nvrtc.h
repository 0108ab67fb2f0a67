/*
 * nvrtc.h - CUDA C++ compiled by NVRTC (nvrtc.c), for the CUDA backend's
 * compiler slots (cuda.c), which know the device's compute capability.
 */
#ifndef ACC_CUDA_NVRTC_H
#define ACC_CUDA_NVRTC_H

#include <accelerator/types.h>

typedef struct cuda_nvrtc cuda_nvrtc;

/* NVRTC from library (a path, or a name for dlopen's search), opened
 * once per process and kept.  ACC_ERR_NOT_FOUND, with why, when it does
 * not open, lacks an entry point or is older than 11.2. */
acc_status cuda_nvrtc_open(const char *library, cuda_nvrtc **out,
                           acc_error *err);
/* Who compiles for compute capability major.minor: "nvrtc 13.0 sm_90
 * <path>" into id; ACC_ERR_NOT_FOUND when this NVRTC targets nothing
 * the device runs. */
acc_status cuda_nvrtc_describe(const cuda_nvrtc *c, int major, int minor,
                               char *id, size_t size, acc_error *err);
/* The compile slot's work (backend.h) for that compute capability: a
 * cubin for the device's own architecture where NVRTC has it, else PTX
 * for the newest one below it; an -arch among options wins.  backend
 * names the backend in errors. */
acc_status cuda_nvrtc_compile(const cuda_nvrtc *c, const char *backend,
                              int major, int minor,
                              const char *source, size_t size,
                              const char *const *options, int noptions,
                              const char *const *names, int nnames,
                              acc_compiled *out, acc_error *err);

#endif /* ACC_CUDA_NVRTC_H */
