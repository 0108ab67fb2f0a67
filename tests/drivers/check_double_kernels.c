/*
 * check_double_kernels.c - the doubles' shared kernel layer
 * (double_kernels.c) on its own, driven by tests/test_double_kernels.py:
 *
 *   check_double_kernels NATIVE.so PTX SPIRV
 *   check_double_kernels --cubin CUBIN
 *
 * loads the test kernels of tests/kernel_code.py in each format, reads
 * their names and parameters, runs native launches on device memory of
 * double_memory.c and checks the results, and checks the refusals and the
 * detector.  --cubin: kernel_code.CUDA_KINDS's cubin for sm_90 (nvcc or
 * NVRTC): which devices take it, its kernels, parameters and
 * attributes, then the same image
 * truncated at every length, with its tables pointed outside it, its
 * records made inconsistent and its bytes flipped at random, each copy
 * in a buffer of exactly its size (the test builds this program with
 * AddressSanitizer where it can): refused, never read out of bounds.
 * Prints one line per failed check; exit status 0 when all passed.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "double_kernels.h"
#include "double_memory.h"

static int failures;

#define CHECK(cond)                                                      \
    do {                                                                 \
        if (!(cond)) {                                                   \
            printf("FAILED line %d: %s\n", __LINE__, #cond);             \
            failures++;                                                  \
        }                                                                \
    } while (0)

static unsigned char *
read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0) {
        printf("cannot read %s\n", path);
        exit(2);
    }
    rewind(f);
    b = malloc((size_t)n + 1);
    if (b == NULL || fread(b, 1, (size_t)n, f) != (size_t)n) {
        exit(2);
    }
    b[n] = '\0';
    fclose(f);
    *size = (size_t)n;
    return b;
}

static void
copy(unsigned long long dst, bool dst_device, const void *src,
     unsigned long long src_addr, size_t bytes)
{
    dm_op op = {"check", false, {dst_device ? DM_DEVICE : DM_HOST, dst},
                {src != NULL ? DM_HOST : DM_DEVICE,
                 src != NULL ? (unsigned long long)(uintptr_t)src : src_addr},
                bytes, 0, NULL};

    if (dm_op_stage(&op) != DM_OK) {
        exit(2);
    }
    dm_op_run(&op);
    dm_op_release(&op);
}

static void
check_native(const unsigned char *image, size_t size)
{
    dk_module *m, *m0;
    const dk_kernel *saxpy, *reduce, *fill, *add;
    char log[DK_LOG_MAX];
    unsigned long long x, y, out;
    float hx[100], hy[100], hout[4];
    unsigned grid[3] = {4, 1, 1}, block[3] = {32, 1, 1};
    float a = 2.0f;
    unsigned n = 100;
    dk_launch *l;

    CHECK(dk_module_load(image, size, &m, log, sizeof(log)) == DK_OK);
    /* cuModuleLoadData gives no size: the ELF headers tell it. */
    CHECK(dk_module_load(image, 0, &m0, log, sizeof(log)) == DK_OK);
    CHECK(dk_live("module") == 2);
    CHECK(dk_module_format(m) == DK_NATIVE);
    CHECK(dk_kernel_count(m) == 4);
    CHECK(strcmp(dk_kernel_at(m, 0)->name, "saxpy") == 0);
    CHECK(dk_kernel_at(m, 4) == NULL);
    CHECK(dk_kernel_find(m, "nope") == NULL);
    saxpy = dk_kernel_find(m, "saxpy");
    reduce = dk_kernel_find(m, "reduce_sum");
    fill = dk_kernel_find(m, "fill2d");
    add = dk_kernel_find(m0, "add_one");
    CHECK(saxpy != NULL && reduce != NULL && fill != NULL && add != NULL);
    CHECK(saxpy->nparams == 4 && saxpy->params[0].size == 8
          && saxpy->params[2].kind == DK_PARAM_FLOAT
          && saxpy->params[2].offset == 16 && saxpy->params[3].offset == 20
          && dk_kernel_args_size(saxpy) == 24);
    CHECK(saxpy->max_threads == DK_MAX_THREADS);

    /* saxpy on device memory. */
    for (int i = 0; i < 100; i++) {
        hx[i] = (float)i;
        hy[i] = 1.0f;
    }
    CHECK(dm_alloc(0, sizeof(hx), false, &x) == DM_OK);
    CHECK(dm_alloc(0, sizeof(hy), false, &y) == DM_OK);
    copy(x, true, hx, 0, sizeof(hx));
    copy(y, true, hy, 0, sizeof(hy));
    {
        void *args[4] = {&y, &x, &a, &n};

        CHECK(dk_check_geometry(saxpy, grid, block, 0, DK_MAX_SHARED)
              == DK_OK);
        CHECK(dk_launch_new(saxpy, grid, block, 0, args, true, &l) == DK_OK);
        dk_launch_run(l, "check");
        dk_launch_free(l);
    }
    copy((unsigned long long)(uintptr_t)hy, false, NULL, y, sizeof(hy));
    for (int i = 0; i < 100; i++) {
        CHECK(hy[i] == 2.0f * (float)i + 1.0f);
    }

    /* reduce_sum: a block's sum through dynamic shared memory. */
    CHECK(dm_alloc(0, sizeof(hout), false, &out) == DM_OK);
    {
        void *args[3] = {&x, &out, &n};

        CHECK(dk_launch_new(reduce, grid, block, 32 * sizeof(float), args,
                            true, &l) == DK_OK);
        dk_launch_run(l, "check");
        dk_launch_free(l);
    }
    copy((unsigned long long)(uintptr_t)hout, false, NULL, out,
         sizeof(hout));
    for (int b = 0; b < 4; b++) {
        float sum = 0;

        for (int i = b * 32; i < b * 32 + 32 && i < 100; i++) {
            sum += (float)i;
        }
        CHECK(hout[b] == sum);
    }

    /* fill2d: a 2-D grid (3 x 2 blocks of 4 x 4) over 10 x 7. */
    {
        unsigned w = 10, h = 7, g2[3] = {3, 2, 1}, b2[3] = {4, 4, 1};
        unsigned host[70];
        unsigned long long dev;
        void *args[3] = {&dev, &w, &h};

        CHECK(dm_alloc(1, sizeof(host), false, &dev) == DM_OK);
        CHECK(dk_launch_new(fill, g2, b2, 0, args, true, &l) == DK_OK);
        dk_launch_run(l, "check");
        dk_launch_free(l);
        copy((unsigned long long)(uintptr_t)host, false, NULL, dev,
             sizeof(host));
        for (unsigned i = 0; i < 70; i++) {
            CHECK(host[i] == (i / 10) * 1000 + i % 10);
        }
        CHECK(dm_free("check", dev, false) == DM_OK);
    }

    /* Page-locked host memory is passed as it is. */
    {
        unsigned long long pinned;
        unsigned count = 8, *p;
        void *args[2] = {&pinned, &count};

        CHECK(dm_alloc(0, 8 * sizeof(unsigned), true, &pinned) == DM_OK);
        p = (unsigned *)(uintptr_t)pinned;
        memset(p, 0, 8 * sizeof(unsigned));
        CHECK(dk_launch_new(add, grid, block, 0, args, true, &l) == DK_OK);
        dk_launch_run(l, "check");
        dk_launch_free(l);
        CHECK(p[0] == 1 && p[7] == 1);
        CHECK(dm_free("check", pinned, true) == DM_OK);
    }

    /* A freed buffer: reported, nothing runs. */
    {
        unsigned long long gone;
        unsigned count = 1;
        void *args[2] = {&gone, &count};

        CHECK(dm_alloc(0, 64, false, &gone) == DM_OK);
        CHECK(dk_launch_new(add, grid, block, 0, args, true, &l) == DK_OK);
        CHECK(dm_free("check", gone, false) == DM_OK);
        dk_launch_run(l, "check");
        dk_launch_free(l);
        CHECK(dm_live("bad_access") == 1);
        dm_reset_detectors();
    }

    /* Geometry beyond the limits. */
    {
        unsigned zero[3] = {0, 1, 1}, big[3] = {1025, 1, 1};
        unsigned deep[3] = {1, 1, 65}, cube[3] = {32, 32, 2};

        CHECK(dk_check_geometry(saxpy, zero, block, 0, DK_MAX_SHARED)
              == DK_BAD_GEOMETRY);
        CHECK(dk_check_geometry(saxpy, grid, big, 0, DK_MAX_SHARED)
              == DK_BAD_GEOMETRY);
        CHECK(dk_check_geometry(saxpy, grid, deep, 0, DK_MAX_SHARED)
              == DK_BAD_GEOMETRY);
        CHECK(dk_check_geometry(saxpy, grid, cube, 0, DK_MAX_SHARED)
              == DK_BAD_GEOMETRY);
        CHECK(dk_check_geometry(saxpy, grid, block, DK_MAX_SHARED + 1,
                                DK_MAX_SHARED) == DK_BAD_GEOMETRY);
    }

    /* A graph's node is not queued; its replays are. */
    {
        unsigned count = 1;
        void *args[2] = {&x, &count};
        dk_launch *node, *replay;

        CHECK(dk_launch_new(add, grid, block, 0, args, false, &node)
              == DK_OK);
        dk_launch *exec = dk_launch_copy(node, false);

        CHECK(exec != NULL);
        replay = dk_launch_copy(exec, true);
        CHECK(replay != NULL);
        dk_launch_free(exec);
        /* Unloading while a replay is queued is the misuse counted. */
        CHECK(dk_live("kernel_misuse") == 0);
        dk_module_unload(m0, "check");
        CHECK(dk_live("kernel_misuse") == 1);
        /* The replay runs on: memory is held, the launch reported. */
        dk_launch_run(replay, "check");
        CHECK(dk_live("kernel_misuse") == 2);
        dk_launch_free(replay);
        dk_launch_free(node);
        dk_reset_detectors();
    }
    CHECK(dm_free("check", x, false) == DM_OK);
    CHECK(dm_free("check", y, false) == DM_OK);
    CHECK(dm_free("check", out, false) == DM_OK);
    dk_module_unload(m, "check");
    CHECK(dk_live("module") == 0);
    CHECK(dk_live("kernel_misuse") == 0);

    /* The same object for another machine, truncated, without a table. */
    {
        unsigned char *other = malloc(size);

        memcpy(other, image, size);
        other[18] = 224;   /* e_machine: EM_AMDGPU */
        other[19] = 0;
        CHECK(dk_module_load(other, size, &m, log, sizeof(log))
              == DK_OTHER_MACHINE);
        CHECK(strstr(log, "machine 224") != NULL);
        CHECK(dk_cubin_arch(other, size) == -1);
        /* Marked EM_CUDA: another machine's code, for a CUDA device too
         * (its e_flags tell sm_0). */
        other[18] = EM_CUDA;
        CHECK(dk_cubin_arch(other, size) == 0);
        CHECK(dk_module_load(other, size, &m, log, sizeof(log))
              == DK_OTHER_MACHINE);
        CHECK(strstr(log, "machine 190") != NULL);
        CHECK(dk_module_load_cuda(other, size, 90, &m, log, sizeof(log))
              == DK_OTHER_MACHINE);
        CHECK(strstr(log, "a cubin for sm_0, the device is sm_90") != NULL);
        CHECK(dk_module_load(image, 200, &m, log, sizeof(log))
              == DK_NOT_IMAGE);
        free(other);
    }
}

static void
check_ptx(const char *text, size_t size)
{
    dk_module *m;
    char log[DK_LOG_MAX];
    const dk_kernel *saxpy, *add;
    dk_launch *l;
    unsigned g[3] = {1, 1, 1};
    unsigned long long p = 0;
    unsigned n = 0;
    void *args[2] = {&p, &n};

    CHECK(dk_module_load(text, 0, &m, log, sizeof(log)) == DK_OK);
    CHECK(dk_module_format(m) == DK_PTX);
    CHECK(dk_kernel_count(m) == 2);
    saxpy = dk_kernel_find(m, "saxpy");
    add = dk_kernel_find(m, "add_one");
    CHECK(saxpy != NULL && add != NULL);
    CHECK(saxpy->nparams == 4 && saxpy->params[0].size == 8
          && saxpy->params[2].size == 4
          && saxpy->params[2].kind == DK_PARAM_FLOAT
          && saxpy->params[3].offset == 20);
    CHECK(add->nparams == 2 && add->params[1].size == 4);
    CHECK(dk_launch_new(add, g, g, 0, args, true, &l) == DK_NO_BINARY);
    dk_module_unload(m, "check");
    (void)size;

    /* A .maxntid, a static .shared array, a struct parameter. */
    CHECK(dk_module_load(
              ".version 8.0\n.target sm_80\n.address_size 64\n"
              "// comment .entry fake(\n"
              ".visible .entry k(\n .param .u64 .ptr .align 8 a,\n"
              " .param .align 8 .b8 s[24],\n .param .s8 c\n)\n"
              ".maxntid 128, 2, 1\n{\n .shared .align 4 .b8 buf[512];\n"
              " ret;\n}\n.entry empty()\n{\n ret;\n}\n",
              0, &m, log, sizeof(log)) == DK_OK);
    CHECK(dk_kernel_count(m) == 2);
    add = dk_kernel_find(m, "k");
    CHECK(add != NULL && add->nparams == 3 && add->params[1].size == 24
          && add->params[1].offset == 8 && add->params[2].offset == 32
          && add->params[2].kind == DK_PARAM_INT && add->max_threads == 256
          && add->static_shared == 512);
    CHECK(dk_kernel_find(m, "empty")->nparams == 0);
    dk_module_unload(m, "check");

    /* Syntax errors ptxas would report, with a log. */
    CHECK(dk_module_load(".target sm_80\n.entry k()\n{\n}\n", 0, &m, log,
                         sizeof(log)) == DK_INVALID_CODE);
    CHECK(strstr(log, ".version") != NULL);
    CHECK(dk_module_load(".version 8.0\n.entry k(.param .u64 a,\n"
                         ".param .u32 b\n{\n}\n", 0, &m, log, sizeof(log))
          == DK_INVALID_CODE);
    CHECK(strstr(log, "unbalanced parameter list") != NULL
          && strstr(log, "line ") != NULL);
    CHECK(dk_module_load(".version 8.0\n.entry k(.param a)\n{\n}\n", 0, &m,
                         log, sizeof(log)) == DK_INVALID_CODE);
    CHECK(dk_module_load("hello world", 0, &m, log, sizeof(log))
          == DK_NOT_IMAGE);
    CHECK(dk_live("module") == 0);
}

static void
check_spirv(const unsigned char *image, size_t size)
{
    dk_module *m;
    char log[DK_LOG_MAX];
    const dk_kernel *saxpy, *reduce;
    dk_launch *l;
    unsigned g[3] = {1, 1, 1};
    unsigned char *cut;

    CHECK(dk_module_load(image, size, &m, log, sizeof(log)) == DK_OK);
    CHECK(dk_module_format(m) == DK_SPIRV);
    CHECK(dk_kernel_count(m) == 4);
    saxpy = dk_kernel_find(m, "saxpy");
    reduce = dk_kernel_find(m, "reduce_sum");
    CHECK(saxpy != NULL && reduce != NULL && dk_kernel_find(m, "fill2d")
          && dk_kernel_find(m, "add_one"));
    CHECK(saxpy->nparams == 4 && saxpy->params[0].kind == DK_PARAM_POINTER
          && saxpy->params[0].size == 8
          && saxpy->params[2].kind == DK_PARAM_FLOAT
          && saxpy->params[2].size == 4
          && saxpy->params[3].kind == DK_PARAM_UINT
          && saxpy->params[3].size == 4);
    CHECK(reduce->nparams == 4
          && reduce->params[3].kind == DK_PARAM_LOCAL);
    {
        void *args[4] = {log, log, log, log};

        CHECK(dk_launch_new(saxpy, g, g, 0, args, true, &l)
              == DK_NO_BINARY);
    }
    dk_module_unload(m, "check");

    /* Cut in the middle of an instruction. */
    cut = malloc(size);
    memcpy(cut, image, size);
    CHECK(dk_module_load(cut, 24, &m, log, sizeof(log)) == DK_INVALID_CODE);
    CHECK(strstr(log, "past the end") != NULL);
    CHECK(dk_module_load(cut, 22, &m, log, sizeof(log)) == DK_INVALID_CODE);
    CHECK(strstr(log, "SPIR-V") != NULL);
    free(cut);
}


/* Cubins -------------------------------------------------------------- */

/* image (size bytes) copied to a buffer of exactly its size and loaded;
 * a module that loads is unloaded at once. */
static enum dk_result
load_exact(const unsigned char *image, size_t size, char *log)
{
    unsigned char *copy = malloc(size ? size : 1);
    dk_module *m = NULL;
    enum dk_result r;

    memcpy(copy, image, size);
    r = dk_module_load_cuda(copy, size, 90, &m, log, DK_LOG_MAX);
    if (r == DK_OK) {
        dk_module_unload(m, "check");
    }
    free(copy);
    return r;
}

static Elf64_Shdr *
shdr(unsigned char *b, int i)
{
    Elf64_Ehdr *eh = (Elf64_Ehdr *)b;

    return (Elf64_Shdr *)(b + eh->e_shoff) + i;
}

/* The index of the section called name, or -1. */
static int
section(unsigned char *b, const char *name)
{
    Elf64_Ehdr *eh = (Elf64_Ehdr *)b;
    const char *names = (const char *)b + shdr(b, eh->e_shstrndx)->sh_offset;

    for (int i = 0; i < eh->e_shnum; i++) {
        if (strcmp(names + shdr(b, i)->sh_name, name) == 0) {
            return i;
        }
    }
    return -1;
}

/* The first record of attribute attr in section i (its header), or
 * NULL. */
static unsigned char *
record(unsigned char *b, int i, unsigned attr)
{
    Elf64_Shdr *s = shdr(b, i);
    unsigned char *p = b + s->sh_offset;
    size_t at = 0;

    while (at + 4 <= s->sh_size) {
        uint16_t len;

        memcpy(&len, p + at + 2, 2);
        if (p[at + 1] == attr) {
            return p + at;
        }
        at += 4 + (p[at] == 4 ? len : 0);
    }
    return NULL;
}

/* A damaged copy of image: refused as an invalid image, the log saying
 * so (says, when not NULL). */
#define DAMAGED(what, says)                                               \
    do {                                                                  \
        unsigned char *d_ = malloc(size);                                 \
        char log_[DK_LOG_MAX];                                            \
                                                                          \
        memcpy(d_, image, size);                                          \
        what;                                                             \
        CHECK(load_exact(d_, size, log_) == DK_NOT_IMAGE);                \
        CHECK(strstr(log_, "invalid cubin: ") != NULL);                   \
        if ((says) != NULL && strstr(log_, (says) ? (says) : "") == NULL) {\
            printf("FAILED line %d: log %s", __LINE__, log_);             \
            failures++;                                                   \
        }                                                                 \
        free(d_);                                                         \
    } while (0)

static void
check_cubin(const unsigned char *image, size_t size)
{
    static const size_t mixed_sizes[9] = {1, 8, 4, 16, 2, 3, 8, 16, 8};
    static const size_t mixed_offsets[9] = {0, 8, 16, 24, 40, 42, 48, 64,
                                            80};
    unsigned char *b = malloc(size);
    char log[DK_LOG_MAX];
    const dk_kernel *k;
    dk_module *m;
    dk_launch *l;
    unsigned g[3] = {1, 1, 1};
    int info, shared, symtab;

    memcpy(b, image, size);
    CHECK(dk_cubin_arch(image, size) == 90);
    CHECK(dk_cubin_arch(image, 63) == -1);
    /* For the devices that run it: 9.0 and 9.x; not 8.9 nor 10.0, nor a
     * device that is not CUDA's. */
    CHECK(dk_module_load(b, size, &m, log, sizeof(log)) == DK_OTHER_MACHINE
          && strstr(log, "machine 190") != NULL);
    CHECK(dk_module_load_cuda(b, size, 89, &m, log, sizeof(log))
              == DK_OTHER_MACHINE
          && strstr(log, "a cubin for sm_90, the device is sm_89") != NULL);
    CHECK(dk_module_load_cuda(b, size, 100, &m, log, sizeof(log))
          == DK_OTHER_MACHINE);
    CHECK(dk_module_load_cuda(b, size, 91, &m, log, sizeof(log)) == DK_OK);
    dk_module_unload(m, "check");
    CHECK(dk_module_load_cuda(b, size, 90, &m, log, sizeof(log)) == DK_OK);
    CHECK(log[0] == '\0');
    CHECK(dk_module_format(m) == DK_CUBIN && dk_module_arch(m) == 90);
    /* The entries only: helper is a device function. */
    CHECK(dk_kernel_count(m) == 6);
    CHECK(dk_kernel_find(m, "helper") == NULL
          && dk_kernel_find(m, "_Z6helperi") == NULL);
    CHECK(dk_kernel_find(m, "empty") != NULL
          && dk_kernel_find(m, "empty")->nparams == 0);
    CHECK(dk_kernel_find(m, "_Z7mangledPi") != NULL
          && dk_kernel_find(m, "_Z7mangledPi")->nparams == 1);
    k = dk_kernel_find(m, "saxpy");
    CHECK(k != NULL && k->nparams == 4 && k->params[0].size == 8
          && k->params[1].offset == 8 && k->params[2].size == 4
          && k->params[2].offset == 16 && k->params[3].offset == 20
          && k->params[3].kind == DK_PARAM_BYTES
          && dk_kernel_args_size(k) == 24 && k->max_threads == DK_MAX_THREADS
          && k->static_shared == 0 && k->registers > 0);
    k = dk_kernel_find(m, "mixed");
    CHECK(k != NULL && k->nparams == 9);
    for (int i = 0; k != NULL && i < k->nparams && i < 9; i++) {
        CHECK(k->params[i].size == mixed_sizes[i]
              && k->params[i].offset == mixed_offsets[i]);
    }
    /* __launch_bounds__(128); 64 floats, without the reserved 1 KiB. */
    CHECK(k != NULL && k->max_threads == 128 && k->static_shared == 256
          && dk_kernel_args_size(k) == 88);
    k = dk_kernel_find(m, "spill");
    CHECK(k != NULL && k->private_bytes == 256);
    {
        void *args[2] = {log, log};

        k = dk_kernel_find(m, "calls");
        CHECK(k != NULL && dk_launch_new(k, g, g, 0, args, true, &l)
                               == DK_NO_BINARY);
    }
    dk_module_unload(m, "check");
    /* Without a size (cuModuleLoadData): the headers' extent. */
    CHECK(dk_module_load_cuda(b, 0, 90, &m, log, sizeof(log)) == DK_OK);
    CHECK(dk_kernel_count(m) == 6);
    dk_module_unload(m, "check");

    /* The architecture in both e_flags layouts. */
    b[EI_ABIVERSION] = 8;
    b[49] = 80;
    CHECK(dk_cubin_arch(b, size) == 80);
    b[EI_ABIVERSION] = 7;
    b[48] = 86;
    CHECK(dk_cubin_arch(b, size) == 86);
    memcpy(b, image, size);

    /* Cut at every length (0 means "not known"): refused, within the
     * bytes given. */
    for (size_t n = 1; n < size; n++) {
        enum dk_result r = load_exact(image, n, log);

        if (r != DK_NOT_IMAGE) {
            printf("FAILED: cut at %zu bytes of %zu: %d\n", n, size, r);
            failures++;
            break;
        }
    }

    info = section(b, ".nv.info.mixed");
    shared = section(b, ".nv.shared.mixed");
    symtab = section(b, ".symtab");
    CHECK(info > 0 && shared > 0 && symtab > 0);
    DAMAGED(((Elf64_Ehdr *)d_)->e_shoff = size - 10, "outside the image");
    DAMAGED(((Elf64_Ehdr *)d_)->e_shoff = ~(Elf64_Off)0 - 8,
            "outside the image");
    DAMAGED(((Elf64_Ehdr *)d_)->e_shnum = 0, "no section table");
    DAMAGED(((Elf64_Ehdr *)d_)->e_shstrndx =
                ((Elf64_Ehdr *)d_)->e_shnum, "no section table");
    DAMAGED(((Elf64_Ehdr *)d_)->e_type = ET_REL, "relocatable");
    DAMAGED(shdr(d_, symtab)->sh_offset = size, "outside the image");
    DAMAGED(shdr(d_, symtab)->sh_size = ~(Elf64_Xword)0,
            "outside the image");
    DAMAGED(shdr(d_, symtab)->sh_entsize = 16, "Elf64_Sym");
    DAMAGED(shdr(d_, symtab)->sh_link = 999, "name");
    DAMAGED(shdr(d_, shared)->sh_size = 1u << 30, "shared memory");
    /* A kernel's name past the string table. */
    DAMAGED({
        Elf64_Sym *sym = (Elf64_Sym *)(d_ + shdr(d_, symtab)->sh_offset);
        size_t n = shdr(d_, symtab)->sh_size / sizeof(*sym);

        for (size_t j = 0; j < n; j++) {
            if (ELF64_ST_TYPE(sym[j].st_info) == STT_FUNC
                && (sym[j].st_other & 0x10)) {
                sym[j].st_name = 0x7fffffff;
                break;
            }
        }
    }, "name");
    /* .nv.info.mixed: a record running past it, a format not known, a
     * parameter told twice, one out of range. */
    DAMAGED({
        unsigned char *r = record(d_, info, 0x17);
        r[2] = r[3] = 0xff;
    }, "runs past");
    DAMAGED(record(d_, info, 0x17)[0] = 9, "runs past");
    DAMAGED({
        unsigned char *r = record(d_, info, 0x17);
        memcpy(r + 16 + 4 + 4, r + 4 + 4, 2);   /* the next one's ordinal */
    }, "told twice");
    DAMAGED({
        uint16_t big = 300;
        memcpy(record(d_, info, 0x17) + 4 + 4, &big, 2);
    }, "256 parameters");

    /* Bytes flipped at random in what the reader reads (the headers, the
     * section table, the tables and records; not code): loaded or
     * refused, never out of bounds (AddressSanitizer), nothing left
     * behind, and some of each. */
    {
        Elf64_Ehdr *eh = (Elf64_Ehdr *)image;
        size_t from[64], len[64];
        int nranges = 0, loaded = 0, refused = 0;

        from[nranges] = 0;
        len[nranges++] = sizeof(Elf64_Ehdr);
        from[nranges] = eh->e_shoff;
        len[nranges++] = eh->e_shnum * sizeof(Elf64_Shdr);
        for (int i = 1; i < eh->e_shnum && nranges < 64; i++) {
            Elf64_Shdr *sh = shdr(b, i);
            const char *name = (const char *)b
                               + shdr(b, eh->e_shstrndx)->sh_offset
                               + sh->sh_name;

            if (sh->sh_type != SHT_NOBITS && sh->sh_size > 0
                && strncmp(name, ".text", 5) != 0) {
                from[nranges] = sh->sh_offset;
                len[nranges++] = sh->sh_size;
            }
        }
        srand(25);
        for (int i = 0; i < 4000; i++) {
            int flips = 1 + rand() % 3;

            memcpy(b, image, size);
            for (int f = 0; f < flips; f++) {
                int at = rand() % nranges;

                b[from[at] + (size_t)rand() % len[at]] ^=
                    (unsigned char)(1 + rand() % 255);
            }
            if (load_exact(b, size, log) == DK_OK) {
                loaded++;
            }
            else {
                refused++;
            }
        }
        CHECK(loaded > 100 && refused > 100);
        memcpy(b, image, size);
    }
    CHECK(dk_live("module") == 0);
    free(b);
}

int
main(int argc, char **argv)
{
    unsigned char *native, *ptx, *spirv;
    size_t native_size, ptx_size, spirv_size;

    if (argc == 3 && strcmp(argv[1], "--cubin") == 0) {
        size_t size;
        unsigned char *cubin = read_file(argv[2], &size);

        check_cubin(cubin, size);
        free(cubin);
        printf("%d failed\n", failures);
        return failures != 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s NATIVE.so PTX SPIRV | --cubin CUBIN\n",
                argv[0]);
        return 2;
    }
    native = read_file(argv[1], &native_size);
    ptx = read_file(argv[2], &ptx_size);
    spirv = read_file(argv[3], &spirv_size);
    check_native(native, native_size);
    check_ptx((const char *)ptx, ptx_size);
    check_spirv(spirv, spirv_size);
    free(native);
    free(ptx);
    free(spirv);
    printf("%d failed\n", failures);
    return failures != 0;
}
