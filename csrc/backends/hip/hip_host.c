/*
 * hip_host.c - the HIP backend's pointer to the core's host services
 * (accelerator/backend.h), set by its attach slot; hip.c and hiprtc.c
 * trace and word errors through it.  A file of its own, so that the
 * backend's files form no loop.
 */
#define ACC_BACKEND_HOST hip_host
#include <accelerator/backend.h>

/* hip.c's table names it. */
void hip_attach(const acc_host *host);

ACC_BACKEND_HOST_DEFINE(hip_attach)
