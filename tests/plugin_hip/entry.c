/*
 * entry.c - the one symbol that makes the HIP backend's folder a plugin:
 * it hands the core the backend's table, as the core's registry lists a
 * built-in backend's.
 */
#include <accelerator/backend.h>

extern const acc_backend acc_hip_backend;

__attribute__((visibility("default"))) const acc_backend *
accelerator_backend_plugin(void)
{
    return &acc_hip_backend;
}
