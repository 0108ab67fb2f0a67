/*
 * native_table.c - the parameter table of the driver test doubles' native
 * code format (csrc/include/accelerator/native_kernel.h).
 *
 * A native module is a shared object of the host's own machine exporting
 * NATIVE_KERNEL_TABLE, whose entries give each kernel's parameters (kind
 * and size) as a driver tells them.  Where the backend's driver has no
 * call that tells a kernel's parameters (HIP 5.2; Level Zero 1.4 tells
 * only a count), the core reads them from that table instead, so that a
 * native kernel's arguments are counted and sized on every double as on
 * CUDA (docs/kernels.rst).  Only an image the driver has loaded already
 * is read, and only an ELF shared object of the host's machine: a GPU's
 * code (EM_CUDA, EM_AMDGPU, Intel's) is never one.  The object is opened
 * from a memory file with dlopen, its table copied, and closed again.
 */
#define _GNU_SOURCE

#include "core.h"
#include "native_table.h"

#include <accelerator/native_kernel.h>

#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#elif defined(__riscv) && __riscv_xlen == 64
#define HOST_MACHINE EM_RISCV
#else
#define HOST_MACHINE EM_NONE   /* no native modules read */
#endif

#define TABLE_MAX_KERNELS 4096

typedef struct table_entry {
    char *name;
    int nparams;
    acc_param *params;
} table_entry;

struct acc_native_table {
    int count;
    table_entry entries[];
};

static int
is_host_object(const void *code, size_t size)
{
    Elf64_Ehdr h;

    if (HOST_MACHINE == EM_NONE || size < sizeof(h)) {
        return 0;
    }
    memcpy(&h, code, sizeof(h));
    return memcmp(h.e_ident, ELFMAG, SELFMAG) == 0
           && h.e_ident[EI_CLASS] == ELFCLASS64 && h.e_type == ET_DYN
           && h.e_machine == HOST_MACHINE;
}

static acc_param_kind
kind_of(native_param_kind kind)
{
    switch (kind) {
    case NATIVE_PARAM_POINTER:
        return ACC_PARAM_POINTER;
    case NATIVE_PARAM_INT:
        return ACC_PARAM_INT;
    case NATIVE_PARAM_UINT:
        return ACC_PARAM_UINT;
    case NATIVE_PARAM_FLOAT:
        return ACC_PARAM_FLOAT;
    }
    return ACC_PARAM_OTHER;
}

/* The entries of table (ended by a NULL name), copied; NULL when out of
 * memory or malformed. */
static acc_native_table *
copy_table(const native_kernel *table)
{
    acc_native_table *t;
    int n = 0;

    while (n < TABLE_MAX_KERNELS && table[n].name != NULL) {
        n++;
    }
    t = calloc(1, sizeof(*t) + (size_t)n * sizeof(t->entries[0]));
    if (t == NULL) {
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const native_kernel *k = &table[i];
        table_entry *e = &t->entries[i];

        t->count = i + 1;
        e->name = strdup(k->name);
        e->nparams = k->nparams;
        if (e->name == NULL || k->nparams < 0
            || k->nparams > ACC_MAX_KERNEL_PARAMS
            || (k->nparams > 0 && k->params == NULL)) {
            acc_native_table_free(t);
            return NULL;
        }
        e->params = calloc((size_t)k->nparams + 1, sizeof(*e->params));
        if (e->params == NULL) {
            acc_native_table_free(t);
            return NULL;
        }
        for (int j = 0; j < k->nparams; j++) {
            e->params[j].size = k->params[j].size;
            e->params[j].kind = kind_of(k->params[j].kind);
        }
    }
    return t;
}

acc_native_table *
acc_native_table_read(const void *code, size_t size)
{
    acc_native_table *t = NULL;
    char path[64];
    void *handle;
    int fd;

    if (!is_host_object(code, size)) {
        return NULL;
    }
    fd = memfd_create("accelerator-native", MFD_CLOEXEC);
    if (fd < 0) {
        acc_trace("a native module's table was not read: memfd_create "
                  "failed");
        return NULL;
    }
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, (const char *)code + done, size - done);

        if (w <= 0) {
            close(fd);
            return NULL;
        }
        done += (size_t)w;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    close(fd);
    if (handle == NULL) {
        acc_trace("a native module's table was not read: %s", dlerror());
        return NULL;
    }
    {
        const native_kernel *table = dlsym(handle, NATIVE_KERNEL_TABLE);

        if (table != NULL) {
            t = copy_table(table);
        }
    }
    dlclose(handle);
    return t;
}

int
acc_native_table_params(const acc_native_table *t, const char *name,
                        acc_kernel_info *info)
{
    for (int i = 0; t != NULL && i < t->count; i++) {
        const table_entry *e = &t->entries[i];

        if (strcmp(e->name, name) == 0) {
            info->nparams = e->nparams;
            memcpy(info->params, e->params,
                   (size_t)e->nparams * sizeof(*e->params));
            return 1;
        }
    }
    return 0;
}

void
acc_native_table_free(acc_native_table *t)
{
    if (t == NULL) {
        return;
    }
    for (int i = 0; i < t->count; i++) {
        free(t->entries[i].name);
        free(t->entries[i].params);
    }
    free(t);
}
