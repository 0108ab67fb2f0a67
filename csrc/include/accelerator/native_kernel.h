/*
 * accelerator/native_kernel.h - the "native" code format of the driver
 * test doubles (docs/kernels.rst), shipped with the package: include it
 * with -I "$(python -c 'import accelerator; print(accelerator.get_include())')".
 * The doubles' device is the host, so a module of
 * native code is a host shared object, built by the tests with the system
 * compiler.  The CUDA, Level Zero and HIP doubles all load it (passed as
 * an ELF image, the way a cubin, a native Level Zero binary or an hsaco
 * is passed) and run its kernels on the stream's worker thread, in stream
 * order, once per block.
 *
 * The object exports one table, NATIVE_KERNEL_TABLE, of native_kernel
 * entries ended by one whose name is NULL.  Each kernel is called once per
 * block with the launch's geometry and the block's index, and runs that
 * block's threads itself (a loop over block[]); args[i] points at the
 * bytes of argument i (for a pointer parameter: at the address).
 */
#ifndef NATIVE_KERNEL_H
#define NATIVE_KERNEL_H

#include <stddef.h>

#define NATIVE_KERNEL_TABLE "accelerator_native_kernels"
#define NATIVE_KERNEL_MAX_THREADS 1024

typedef struct native_block {
    unsigned grid[3];      /* blocks per dimension */
    unsigned block[3];     /* threads per block, per dimension */
    unsigned index[3];     /* this block's index in the grid */
    void *shared;          /* the launch's dynamic shared memory for this
                            * block (shared_bytes; NULL when 0) */
    size_t shared_bytes;
} native_block;

typedef enum native_param_kind {
    NATIVE_PARAM_POINTER = 1, /* a device address (8 bytes) */
    NATIVE_PARAM_INT = 2,
    NATIVE_PARAM_UINT = 3,
    NATIVE_PARAM_FLOAT = 4,
} native_param_kind;

typedef struct native_param {
    native_param_kind kind;
    size_t size;
} native_param;

typedef void (*native_kernel_fn)(const native_block *b, void *const *args);

typedef struct native_kernel {
    const char *name;          /* NULL ends the table */
    native_kernel_fn fn;
    int nparams;
    const native_param *params;
    int max_threads;           /* threads per block it allows (0: the
                                * device's limit, NATIVE_KERNEL_MAX_THREADS) */
    size_t static_shared;      /* static shared memory it declares */
} native_kernel;

#endif /* NATIVE_KERNEL_H */
