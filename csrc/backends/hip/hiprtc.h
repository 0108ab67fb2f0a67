/*
 * hiprtc.h - HIP C++ compiled by hiprtc (hiprtc.c), for the HIP
 * backend's compiler slots (hip.c), which know the device's
 * architecture ("gfx90a").
 */
#ifndef ACC_HIP_HIPRTC_H
#define ACC_HIP_HIPRTC_H

#include <accelerator/types.h>

typedef struct hip_hiprtc hip_hiprtc;

/* hiprtc from library (a path, or a name for dlopen's search), opened
 * once per process and kept.  ACC_ERR_NOT_FOUND, with why, when it does
 * not open or lacks an entry point (the HIP runtime test double, say). */
acc_status hip_hiprtc_open(const char *library, hip_hiprtc **out,
                           acc_error *err);
/* "hiprtc 5.2 gfx90a <path>" into id. */
acc_status hip_hiprtc_describe(const hip_hiprtc *c, const char *arch,
                               char *id, size_t size, acc_error *err);
/* The compile slot's work (backend.h): a code object for arch, unless
 * an --offload-arch among options names another; backend names the
 * backend in errors. */
acc_status hip_hiprtc_compile(const hip_hiprtc *c, const char *backend,
                              const char *arch,
                              const char *source, size_t size,
                              const char *const *options, int noptions,
                              const char *const *names, int nnames,
                              acc_compiled *out, acc_error *err);

#endif /* ACC_HIP_HIPRTC_H */
