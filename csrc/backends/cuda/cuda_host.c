/*
 * cuda_host.c - the CUDA backend's pointer to the core's host services
 * (accelerator/backend.h), set by its attach slot; cuda.c and
 * cuda_nvml.c trace and word errors through it.  A file of its own, so
 * that the backend's files form no loop.
 */
#define ACC_BACKEND_HOST cuda_host
#include <accelerator/backend.h>

/* cuda.c's table names it. */
void cuda_attach(const acc_host *host);

ACC_BACKEND_HOST_DEFINE(cuda_attach)
