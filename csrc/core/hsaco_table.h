/*
 * hsaco_table.h - the kernels an AMD GPU code object (hsaco) describes in
 * its metadata note, read by the core where the driver tells no
 * parameters (hsaco_table.c), and by the HIP test double, which loads
 * code objects as ROCm does.
 *
 * Plain C on libc and accelerator/types.h alone, so that the double and
 * a sanitized check program compile it as it is.
 */
#ifndef ACC_HSACO_TABLE_H
#define ACC_HSACO_TABLE_H

#include <accelerator/types.h>

#include <stddef.h>

#pragma GCC visibility push(hidden)

/* One parameter a launch passes (the hidden_* arguments the runtime
 * fills are left out). */
typedef struct acc_hsaco_arg {
    size_t size;              /* .size */
    size_t offset;            /* .offset in the kernel's arguments */
    acc_param_kind kind;      /* global_buffer: ACC_PARAM_POINTER;
                               * by_value: ACC_PARAM_OTHER (the metadata
                               * says passed by value, not whether it is
                               * an integer, a float or a struct); the
                               * rest (images, samplers, pipes, queues,
                               * dynamic shared pointers): unknown */
} acc_hsaco_arg;

typedef struct acc_hsaco_kernel {
    char *name;               /* .name: what hipModuleGetFunction takes */
    char *symbol;             /* .symbol: its kernel descriptor, the
                               * symbol "<name>.kd" */
    int nparams;              /* -1: more than ACC_MAX_KERNEL_PARAMS */
    acc_hsaco_arg *params;    /* [0, nparams) */
    /* -1 where the metadata leaves it out: */
    long long kernarg_bytes;  /* .kernarg_segment_size */
    long long max_threads;    /* .max_flat_workgroup_size */
    long long group_bytes;    /* .group_segment_fixed_size (static
                               * shared memory) */
    long long private_bytes;  /* .private_segment_fixed_size (per
                               * thread) */
    long long sgprs;          /* .sgpr_count */
    long long vgprs;          /* .vgpr_count */
} acc_hsaco_kernel;

typedef struct acc_hsaco_table acc_hsaco_table;

/* The metadata of image (size bytes: an ELF64 of machine EM_AMDGPU whose
 * NT_AMDGPU_METADATA note, owner "AMDGPU", type 32, holds a MessagePack
 * map with "amdhsa.kernels"), copied.  NULL when it is none, is damaged
 * or memory runs out; then why (why_size bytes, may be NULL) says
 * which.  Reads nothing outside [image, image + size). */
acc_hsaco_table *acc_hsaco_table_read(const void *image, size_t size,
                                      char *why, size_t why_size);
int acc_hsaco_table_count(const acc_hsaco_table *t);
/* The i-th kernel, in the metadata's order; NULL out of range. */
const acc_hsaco_kernel *acc_hsaco_table_at(const acc_hsaco_table *t, int i);
/* The kernel whose .name is name, or NULL (t may be NULL). */
const acc_hsaco_kernel *acc_hsaco_table_find(const acc_hsaco_table *t,
                                             const char *name);
/* "amdhsa.target" ("amdgcn-amd-amdhsa--gfx90a"), "" where absent. */
const char *acc_hsaco_table_target(const acc_hsaco_table *t);
/* Kernel name's parameters into info->nparams and info->params: 1 when
 * the table has them, else 0 (info untouched).  t may be NULL. */
int acc_hsaco_table_params(const acc_hsaco_table *t, const char *name,
                           acc_kernel_info *info);
void acc_hsaco_table_free(acc_hsaco_table *t);

#pragma GCC visibility pop

#endif /* ACC_HSACO_TABLE_H */
