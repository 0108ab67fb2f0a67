/*
 * hip_kfd.h - counting AMD GPUs through the KFD topology, without
 * initialising the HIP runtime.
 */
#ifndef ACC_HIP_KFD_H
#define ACC_HIP_KFD_H

#include <stddef.h>

/*
 * Count the GPUs of the amdgpu kernel driver's KFD topology (the nodes
 * with a nonzero gpu_id), as ROCm's SMI tools do, without touching the
 * runtime.  Returns 1 with *count set when the topology answered, 0 when
 * it could not or must not be used (the caller then initialises the
 * runtime to count).  `how` receives, for the report, what answered or
 * why the topology was not used.
 */
int acc_hip_kfd_count(int *count, char *how, size_t size);

#endif /* ACC_HIP_KFD_H */
