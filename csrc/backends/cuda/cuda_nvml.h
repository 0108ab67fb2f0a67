/*
 * cuda_nvml.h - counting CUDA devices through NVML, without cuInit.
 */
#ifndef ACC_CUDA_NVML_H
#define ACC_CUDA_NVML_H

#include <stddef.h>

/*
 * Count the devices CUDA will expose to this process without initialising
 * CUDA: NVML's devices, filtered and ordered by CUDA_VISIBLE_DEVICES as
 * the driver parses it.  Returns 1 with *count set when NVML answered, 0
 * when it could not (the caller then runs cuInit).  `how` receives, for
 * the report, what answered or why NVML was not used.
 */
int acc_cuda_nvml_count(int *count, char *how, size_t size);

#endif /* ACC_CUDA_NVML_H */
