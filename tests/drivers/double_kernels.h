/*
 * double_kernels.h - the device code layer every driver test double
 * shares: loading a module image, its kernels' names, parameters and
 * attributes, and running launches of native code on a stream worker.
 *
 * Images (dk_module_load):
 *   - native (tests/drivers/native_kernel.h): an ELF shared object of the
 *     host's machine exporting NATIVE_KERNEL_TABLE; written to a temporary
 *     file, dlopen()ed, the file removed at once.  The only format whose
 *     kernels run.
 *   - PTX text: its `.entry name(.param .type p, ...)` list (`.maxntid`
 *     and `.shared` declarations give attributes).
 *   - SPIR-V: OpEntryPoint Kernel names and each entry's
 *     OpFunctionParameter types (sizes and kinds).
 *   - AMD GPU code objects (hsaco), for a double whose device has an AMD
 *     architecture (dk_module_load_amdgpu): an ELF64 of machine
 *     EM_AMDGPU whose e_flags name that architecture (EF_AMDGPU_MACH,
 *     and for code object v4 and later xnack and sramecc settings the
 *     device takes); its kernels, their arguments and resources from its
 *     metadata note (csrc/core/hsaco_table.c, the reader the core uses),
 *     each kernel's descriptor (.symbol, "<name>.kd") a defined object of
 *     its symbol table.
 * A PTX, SPIR-V or hsaco kernel is known (names, parameters, attributes)
 * but dk_launch_new refuses it with DK_NO_BINARY: the doubles' device
 * runs host code only, as a device without a binary for it would refuse.
 *
 * Lifetime: a module is reference counted by its launches, so memory is
 * never pulled from under a worker; still, unloading a module while a
 * launch of it is queued, or running a launch of an unloaded module, is
 * a misuse the double reports on stderr and counts in the detector
 * "kernel_misuse" (dk_live), as the doubles' memory counts bad accesses.
 *
 * A double calls dk_live() from its live_extra hook and
 * dk_reset_detectors() from its reset_detectors hook.
 */
#ifndef DOUBLE_KERNELS_H
#define DOUBLE_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#include "native_kernel.h"

/* The device limits the doubles report and dk_check_geometry applies. */
#define DK_MAX_BLOCK_X 1024
#define DK_MAX_BLOCK_Y 1024
#define DK_MAX_BLOCK_Z 64
#define DK_MAX_THREADS NATIVE_KERNEL_MAX_THREADS
#define DK_MAX_GRID_X 2147483647u
#define DK_MAX_GRID_Y 65535u
#define DK_MAX_GRID_Z 65535u
#define DK_MAX_SHARED (48u * 1024u)          /* per block, by default */
#define DK_MAX_SHARED_OPTIN (227u * 1024u)   /* per block, opted in */
#define DK_LOG_MAX 4096
#define DK_MAX_PARAMS 256                    /* per kernel */

typedef enum dk_format {
    DK_NATIVE = 1,
    DK_PTX,
    DK_SPIRV,
    DK_HSACO,
} dk_format;

enum dk_result {
    DK_OK = 0,
    DK_NOT_IMAGE,       /* no format the doubles read (or truncated) */
    DK_OTHER_MACHINE,   /* an ELF image for another machine (an hsaco:
                         * for another AMD architecture) */
    DK_INVALID_CODE,    /* PTX or SPIR-V that does not parse (log set) */
    DK_OUT_OF_MEMORY,
    DK_NOT_FOUND,       /* no kernel of that name */
    DK_NO_BINARY,       /* a PTX or SPIR-V kernel launched */
    DK_BAD_GEOMETRY,    /* grid, block or shared memory out of limits */
};

/* What a parameter is: native_param_kind's values, and two more. */
typedef enum dk_param_kind {
    DK_PARAM_POINTER = NATIVE_PARAM_POINTER,
    DK_PARAM_INT = NATIVE_PARAM_INT,
    DK_PARAM_UINT = NATIVE_PARAM_UINT,
    DK_PARAM_FLOAT = NATIVE_PARAM_FLOAT,
    DK_PARAM_OTHER = 5,   /* by value, not a scalar (a struct, a vector) */
    DK_PARAM_LOCAL = 6,   /* SPIR-V: a pointer to work-group memory */
} dk_param_kind;

typedef struct dk_param {
    dk_param_kind kind;
    size_t size;          /* bytes of the value passed */
    size_t offset;        /* in the argument buffer, aligned to its size */
} dk_param;

typedef struct dk_module dk_module;

/* A kernel of a module: read-only, valid while the module is loaded. */
typedef struct dk_kernel {
    dk_module *module;
    char *name;
    dk_format format;
    int nparams;
    dk_param *params;
    int max_threads;      /* threads per block it allows */
    size_t static_shared; /* static shared memory it declares */
    size_t private_bytes; /* hsaco: private memory per thread */
    int registers;        /* hsaco: vector registers per thread */
    native_kernel_fn fn;  /* native only */
} dk_kernel;

typedef struct dk_launch dk_launch;

#pragma GCC visibility push(hidden)

/* Load image.  size 0: not known (cuModuleLoadData), read from the
 * image (ELF headers, the text's end).  *log (log_size bytes, may be
 * NULL or 0) receives what a build would print: empty on success. */
enum dk_result dk_module_load(const void *image, size_t size,
                              dk_module **out, char *log, size_t log_size);
/* dk_module_load for a device of AMD architecture mach (an
 * EF_AMDGPU_MACH value, 0x3f: gfx90a) with xnack off and sramecc on (as
 * an MI200's "gfx90a:sramecc+:xnack-"): an AMD GPU code object for it
 * is loaded too (DK_HSACO), one for another is DK_OTHER_MACHINE, one
 * whose metadata or symbols are damaged DK_NOT_IMAGE (log set).  size
 * 0: read as far as the ELF headers say. */
enum dk_result dk_module_load_amdgpu(const void *image, size_t size,
                                     unsigned mach, dk_module **out,
                                     char *log, size_t log_size);
/* Unload (api names the call in reports): a misuse (reported, counted)
 * while a launch of it is queued; the memory goes when its last launch
 * does. */
void dk_module_unload(dk_module *m, const char *api);
dk_format dk_module_format(const dk_module *m);
int dk_kernel_count(const dk_module *m);
/* The i-th kernel, in the image's order; NULL out of range. */
const dk_kernel *dk_kernel_at(const dk_module *m, int i);
/* The kernel called name, or NULL. */
const dk_kernel *dk_kernel_find(const dk_module *m, const char *name);
/* Bytes of the argument buffer (the last parameter's end). */
size_t dk_kernel_args_size(const dk_kernel *k);

/* Whether a launch's geometry fits the device limits above and the
 * kernel's own: DK_OK or DK_BAD_GEOMETRY.  max_shared: the dynamic
 * shared memory the kernel may use (DK_MAX_SHARED unless opted in). */
enum dk_result dk_check_geometry(const dk_kernel *k, const unsigned grid[3],
                                 const unsigned block[3], size_t shared,
                                 size_t max_shared);

/* A launch of k (checked with dk_check_geometry by the caller): args[i]
 * points at argument i's bytes (k->params[i].size of them; copied now).
 * queued: the launch is work on a stream (counted against unloading);
 * false for a graph's node, whose copies (dk_launch_copy) a replay
 * queues.  DK_NO_BINARY for a kernel that is not native. */
enum dk_result dk_launch_new(const dk_kernel *k, const unsigned grid[3],
                             const unsigned block[3], size_t shared,
                             void *const *args, bool queued,
                             dk_launch **out);
/* A copy of l: a graph's node instantiated (queued false) or replayed
 * (queued true); NULL when out of memory. */
dk_launch *dk_launch_copy(const dk_launch *l, bool queued);
/* Run by the stream worker: every block in order (z, y, x), device
 * addresses in pointer arguments resolved to the memory behind them (a
 * bad one reported as a bad access, and nothing runs), dynamic shared
 * memory allocated for the launch.  api names the launch in reports. */
void dk_launch_run(const dk_launch *l, const char *api);
void dk_launch_free(dk_launch *l);

/* "module" (loaded, not unloaded), "kernel_misuse" (the detector);
 * -1 for other kinds. */
long long dk_live(const char *kind);
void dk_reset_detectors(void);

#pragma GCC visibility pop

#endif /* DOUBLE_KERNELS_H */
