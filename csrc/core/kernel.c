/*
 * kernel.c - the dispatcher's half of kernels: which format device code
 * is, modules and their kernels (made once per name, released together
 * once no launch uses them), and the checks a launch passes before the
 * backend queues it (docs/kernels.rst).
 *
 * Plain C, no Python objects.  The top of the core: it uses the books of
 * uses (uses.c), the deferred release (memory.c) and the capture registry
 * (graph.c); nothing in the core calls it.
 */
#include "core.h"
#include "hsaco_table.h"
#include "native_table.h"

#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct acc_kernel {
    struct acc_kernel *next;
    acc_module *module;      /* borrowed: the module owns its kernels */
    void *native;
    acc_kernel_info info;
    char name[];
};

struct acc_module {
    _Atomic int refcount;
    const acc_backend *backend;
    int device;
    acc_code_format format;
    void *native;
    acc_native_table *table; /* a native module's parameters, read where
                              * the driver tells none (native_table.c) */
    acc_hsaco_table *hsaco;  /* an AMD code object's, from its metadata
                              * (hsaco_table.c) */
    acc_uses uses;           /* the launches that use it (uses.c) */
    pthread_mutex_t lock;    /* guards kernels */
    acc_kernel *kernels;
};

/* Formats ----------------------------------------------------------------- */

#define SOURCE_FORMATS                                                    \
    (ACC_FORMAT_BIT(ACC_FORMAT_CUDA_CXX) | ACC_FORMAT_BIT(ACC_FORMAT_HIP_CXX))

static const char *const format_names[ACC_FORMAT_COUNT] = {
    [ACC_FORMAT_PTX] = "ptx",
    [ACC_FORMAT_CUBIN] = "cubin",
    [ACC_FORMAT_FATBIN] = "fatbin",
    [ACC_FORMAT_SPIRV] = "spirv",
    [ACC_FORMAT_OPENCL_C] = "opencl-c",
    [ACC_FORMAT_HSACO] = "hsaco",
    [ACC_FORMAT_NATIVE] = "native",
    [ACC_FORMAT_CUDA_CXX] = "cuda-c++",
    [ACC_FORMAT_HIP_CXX] = "hip-c++",
};

const char *
acc_code_format_name(acc_code_format f)
{
    if (f <= ACC_FORMAT_NONE || f >= ACC_FORMAT_COUNT) {
        return NULL;
    }
    return format_names[f];
}

acc_code_format
acc_code_format_named(const char *name)
{
    for (int f = ACC_FORMAT_NONE + 1; f < ACC_FORMAT_COUNT; f++) {
        if (strcmp(format_names[f], name) == 0) {
            return (acc_code_format)f;
        }
    }
    return ACC_FORMAT_NONE;
}

int
acc_code_format_loads(acc_code_format f)
{
    const acc_backend *b = acc_selected_backend();

    return b != NULL && f > ACC_FORMAT_NONE && f < ACC_FORMAT_COUNT
           && (b->code_formats & ACC_FORMAT_BIT(f)) != 0;
}

int
acc_code_format_is_source(acc_code_format f)
{
    return f > ACC_FORMAT_NONE && f < ACC_FORMAT_COUNT
           && (SOURCE_FORMATS & ACC_FORMAT_BIT(f)) != 0;
}

/* The formats of mask, as "ptx, cubin, native". */
void
acc_code_format_list(unsigned mask, char *text, size_t size)
{
    size_t used = 0;

    text[0] = '\0';
    for (int f = ACC_FORMAT_NONE + 1; f < ACC_FORMAT_COUNT && used < size;
         f++) {
        if (mask & ACC_FORMAT_BIT(f)) {
            used += (size_t)snprintf(text + used, size - used, "%s%s",
                                     used > 0 ? ", " : "", format_names[f]);
        }
    }
}

#define SPIRV_MAGIC 0x07230203u
#define FATBIN_MAGIC 0xBA55ED50u

static unsigned
word_at(const unsigned char *p, int big_endian)
{
    if (big_endian) {
        return (unsigned)p[0] << 24 | (unsigned)p[1] << 16
               | (unsigned)p[2] << 8 | p[3];
    }
    return (unsigned)p[3] << 24 | (unsigned)p[2] << 16 | (unsigned)p[1] << 8
           | p[0];
}

static int
is_spirv(const unsigned char *p, size_t size)
{
    return size >= 20 && (size % 4) == 0
           && (word_at(p, 0) == SPIRV_MAGIC || word_at(p, 1) == SPIRV_MAGIC);
}

static int
is_elf(const unsigned char *p, size_t size)
{
    /* Through e_machine (elf_format). */
    return size >= 20 && memcmp(p, "\177ELF", 4) == 0;
}

/* The n-byte (1..8) unsigned field at off of an ELF image whose byte
 * order e_ident gives. */
static unsigned long long
elf_field(const unsigned char *p, size_t off, int n)
{
    unsigned long long v = 0;
    int big = p[5] == 2;   /* EI_DATA: ELFDATA2MSB */

    for (int i = 0; i < n; i++) {
        v = v << 8 | p[off + (big ? (size_t)i : (size_t)(n - 1 - i))];
    }
    return v;
}

/* Whether [off, off + len) lies within size bytes. */
static int
within(unsigned long long off, unsigned long long len, size_t size)
{
    return off <= size && len <= size - off;
}

/* Whether every part that an ELF image's headers name (the program and
 * section header tables, the segments and the sections with bytes) lies
 * within its size bytes.  The loaders of cubins and hsacos
 * (cuModuleLoadData, hipModuleLoadData) take no size and read what the
 * headers say, so a truncated or damaged image must stop here. */
static int
elf_fits(const unsigned char *p, size_t size)
{
    /* Offsets of the fields, for ELFCLASS32 [0] and ELFCLASS64 [1]: the
     * ELF header's e_phoff, e_shoff, e_phentsize (e_phnum, e_shentsize
     * and e_shnum follow it, 2 bytes each); a program header's p_offset
     * and p_filesz; a section header's sh_offset and sh_size. */
    static const size_t phoff[2] = {28, 32}, shoff[2] = {32, 40},
                        phentsize[2] = {42, 54}, p_offset[2] = {4, 8},
                        p_filesz[2] = {16, 32}, sh_offset[2] = {16, 24},
                        sh_size[2] = {20, 32};
    static const unsigned long long ehdr[2] = {52, 64}, phdr[2] = {32, 56},
                                    shdr[2] = {40, 64};
    int c = p[4] == 2;     /* EI_CLASS: ELFCLASS64 */
    int word = c ? 8 : 4;
    unsigned long long ph, sh, phent, phnum, shent, shnum;

    if (size < ehdr[c]) {
        return 0;
    }
    ph = elf_field(p, phoff[c], word);
    sh = elf_field(p, shoff[c], word);
    phent = elf_field(p, phentsize[c], 2);
    phnum = elf_field(p, phentsize[c] + 2, 2);
    shent = elf_field(p, phentsize[c] + 4, 2);
    shnum = elf_field(p, phentsize[c] + 6, 2);
    if ((phnum > 0 && (phent < phdr[c] || !within(ph, phent * phnum, size)))
        || (shnum > 0
            && (shent < shdr[c] || !within(sh, shent * shnum, size)))) {
        return 0;
    }
    for (unsigned long long i = 0; i < phnum; i++) {
        size_t at = (size_t)(ph + i * phent);

        if (!within(elf_field(p, at + p_offset[c], word),
                    elf_field(p, at + p_filesz[c], word), size)) {
            return 0;
        }
    }
    for (unsigned long long i = 0; i < shnum; i++) {
        size_t at = (size_t)(sh + i * shent);

        /* SHT_NOBITS (8) sections occupy no bytes of the image. */
        if (elf_field(p, at + 4, 4) != 8
            && !within(elf_field(p, at + sh_offset[c], word),
                       elf_field(p, at + sh_size[c], word), size)) {
            return 0;
        }
    }
    return 1;
}

/* The n-byte (1..8) little-endian unsigned field at off. */
static unsigned long long
le_field(const unsigned char *p, size_t off, int n)
{
    unsigned long long v = 0;

    for (int i = n - 1; i >= 0; i--) {
        v = v << 8 | p[off + (size_t)i];
    }
    return v;
}

static int
is_fatbin(const unsigned char *p, size_t size)
{
    return size >= 4 && word_at(p, 0) == FATBIN_MAGIC;
}

/* Why a CUDA fat binary's headers name bytes beyond its size bytes, or
 * NULL when they do not.  Its header (16 bytes, little endian) holds the
 * magic, a 2-byte version, its own 2-byte size and the 8-byte size of the
 * entries that follow it; each entry starts with a 2-byte kind, a 2-byte
 * version, the 4-byte size of its header and the 8-byte size of its
 * payload, and the next follows the payload.  The driver takes no size
 * (cuModuleLoadData) and reads what the headers say, so a truncated or
 * damaged fat binary must stop here. */
static const char *
fatbin_damage(const unsigned char *p, size_t size)
{
    unsigned long long header, entries, at, end;

    if (size < 16) {
        return "it is shorter than its 16-byte header";
    }
    header = le_field(p, 6, 2);
    entries = le_field(p, 8, 8);
    if (header < 16) {
        return "its header names a header shorter than 16 bytes";
    }
    if (!within(header, entries, size)) {
        return "its header names more bytes than it has";
    }
    end = header + entries;
    for (at = header; at < end;) {
        unsigned long long entry, payload;

        if (end - at < 16) {
            return "an entry's header runs past the entries' end";
        }
        entry = le_field(p, (size_t)at + 4, 4);
        payload = le_field(p, (size_t)at + 8, 8);
        if (entry < 16 || entry > end - at || payload > end - at - entry) {
            return "an entry runs past the entries' end";
        }
        at += entry + payload;
    }
    return NULL;
}

/* Text: no NUL before the end (a final one is allowed). */
static int
is_text(const unsigned char *p, size_t size)
{
    const void *nul = memchr(p, '\0', size);

    return nul == NULL || (const unsigned char *)nul == p + size - 1;
}

/* The offset of the first byte at or after at that is neither white
 * space nor in a comment (// to the end of the line, or between slash
 * star and star slash), the comments of PTX and of C. */
static size_t
skip_blank(const unsigned char *p, size_t size, size_t at)
{
    while (at < size) {
        if (p[at] == ' ' || p[at] == '\t' || p[at] == '\n' || p[at] == '\r'
            || p[at] == '\f' || p[at] == '\v') {
            at++;
        }
        else if (at + 1 < size && p[at] == '/' && p[at + 1] == '/') {
            while (at < size && p[at] != '\n') {
                at++;
            }
        }
        else if (at + 1 < size && p[at] == '/' && p[at + 1] == '*') {
            at += 2;
            while (at + 1 < size && !(p[at] == '*' && p[at + 1] == '/')) {
                at++;
            }
            at += 2;
        }
        else {
            break;
        }
    }
    return at < size ? at : size;
}

/* Whether the directive word (".version") is at p + at, followed by
 * white space; *after is the offset past it. */
static int
directive_at(const unsigned char *p, size_t size, size_t at,
             const char *word, size_t *after)
{
    size_t n = strlen(word);

    if (size - at <= n || memcmp(p + at, word, n) != 0
        || (p[at + n] != ' ' && p[at + n] != '\t')) {
        return 0;
    }
    *after = at + n;
    return 1;
}

/* PTX, by its grammar: after white space and comments a module starts
 * with ".version <major>.<minor>", followed (after white space and
 * comments) by its ".target" (the PTX ISA: "each PTX module must begin
 * with a .version directive", "immediately followed by a .target
 * directive"; ".address_size" may come next).  Words anywhere else do
 * not count: OpenCL C may mention .version, and a PTX module may hold
 * any amount of data before its first .entry. */
static int
looks_like_ptx(const unsigned char *p, size_t size)
{
    size_t at = skip_blank(p, size, 0), digits;

    if (!directive_at(p, size, at, ".version", &at)) {
        return 0;
    }
    while (at < size && (p[at] == ' ' || p[at] == '\t')) {
        at++;
    }
    for (digits = 0; at < size && p[at] >= '0' && p[at] <= '9'; at++) {
        digits++;
    }
    if (digits == 0 || at >= size || p[at] != '.') {
        return 0;
    }
    for (digits = 0, at++; at < size && p[at] >= '0' && p[at] <= '9'; at++) {
        digits++;
    }
    return digits > 0
           && directive_at(p, size, skip_blank(p, size, at), ".target",
                           &at);
}

#define EM_CUDA 190
#define EM_AMDGPU 224

/* An ELF image's format, by its machine: a cubin is for EM_CUDA, an
 * hsaco for EM_AMDGPU; any other machine's is a device's own binary
 * (a Level Zero device's, the doubles' host objects). */
static acc_code_format
elf_format(const unsigned char *p)
{
    /* e_machine, in the byte order EI_DATA names (2: big endian). */
    unsigned machine = p[5] == 2 ? (unsigned)p[18] << 8 | p[19]
                                 : (unsigned)p[19] << 8 | p[18];

    return machine == EM_CUDA ? ACC_FORMAT_CUBIN
           : machine == EM_AMDGPU ? ACC_FORMAT_HSACO
                                  : ACC_FORMAT_NATIVE;
}

/* What the bytes are. */
static int
ident_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '_';
}

/* Nonzero when text holds the word __global__: a CUDA or HIP C++ kernel
 * (OpenCL C reserves the name; its kernels are __kernel). */
static int
declares_global(const unsigned char *p, size_t size)
{
    static const char word[] = "__global__";
    const size_t n = sizeof(word) - 1;

    for (size_t at = 0; at + n <= size; at++) {
        if (memcmp(p + at, word, n) == 0
            && (at == 0 || !ident_char(p[at - 1]))
            && (at + n == size || !ident_char(p[at + n]))) {
            return 1;
        }
    }
    return 0;
}

static acc_code_format
recognise(const unsigned char *p, size_t size)
{
    if (is_spirv(p, size)) {
        return ACC_FORMAT_SPIRV;
    }
    if (is_elf(p, size)) {
        return elf_format(p);
    }
    if (is_fatbin(p, size)) {
        return ACC_FORMAT_FATBIN;
    }
    if (is_text(p, size)) {
        return looks_like_ptx(p, size) ? ACC_FORMAT_PTX
               : declares_global(p, size) ? ACC_FORMAT_CUDA_CXX
                                          : ACC_FORMAT_OPENCL_C;
    }
    return ACC_FORMAT_NONE;
}

/* The selected backend when it has kernels; else a failure in err. */
static const acc_backend *
kernel_backend(acc_error *err)
{
    const acc_backend *b;

    if (acc_ready(err) != ACC_OK) {
        return NULL;
    }
    b = acc_selected_backend();
    if (b->module_load == NULL) {
        acc_error_unsupported("kernels", err);
        return NULL;
    }
    return b;
}

acc_status
acc_code_format_resolve(const void *code, size_t size,
                        acc_code_format *format, acc_error *err)
{
    const acc_backend *b = kernel_backend(err);
    const unsigned char *p = code;
    acc_code_format f = *format;
    char takes[128];

    if (b == NULL) {
        return err->status;
    }
    acc_code_format_list(b->code_formats, takes, sizeof(takes));
    if (size == 0) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the code is empty, "
                      "expected device code (%s)", takes);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (f == ACC_FORMAT_NONE) {
        f = recognise(p, size);
        if (f == ACC_FORMAT_NONE) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "cannot tell the "
                          "code's format (not SPIR-V, ELF, a fat binary or "
                          "text); pass format= (backend %s loads %s)",
                          b->name, takes);
            return ACC_ERR_INVALID_ARGUMENT;
        }
    }
    if (f == ACC_FORMAT_CUDA_CXX && *format == ACC_FORMAT_NONE
        && b->source_formats != 0
        && (b->source_formats & (b->source_formats - 1)) == 0) {
        /* C++ kernel source, for a backend that compiles one kind. */
        f = (acc_code_format)__builtin_ctz(b->source_formats);
    }
    if (!((b->code_formats | b->source_formats) & ACC_FORMAT_BIT(f))
        && !(f == ACC_FORMAT_OPENCL_C
             && (b->code_formats & ACC_FORMAT_BIT(ACC_FORMAT_SPIRV)))) {
        char compiles[64];

        acc_code_format_list(b->source_formats, compiles, sizeof(compiles));
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "backend %s cannot "
                      "%s %s %s (is it %s for another backend?); it loads "
                      "%s%s%s", b->name,
                      (SOURCE_FORMATS & ACC_FORMAT_BIT(f)) ? "compile"
                                                          : "load",
                      format_names[f],
                      (SOURCE_FORMATS & ACC_FORMAT_BIT(f)) ? "source"
                                                          : "code",
                      (SOURCE_FORMATS & ACC_FORMAT_BIT(f)) ? "a kernel"
                                                          : "a module",
                      takes, compiles[0] != '\0' ? " and compiles " : "",
                      compiles);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if ((f == ACC_FORMAT_SPIRV && !is_spirv(p, size))
        || ((f == ACC_FORMAT_CUBIN || f == ACC_FORMAT_HSACO
             || f == ACC_FORMAT_NATIVE)
            && !is_elf(p, size))
        || (f == ACC_FORMAT_FATBIN && !is_fatbin(p, size))
        || ((f == ACC_FORMAT_PTX || f == ACC_FORMAT_OPENCL_C
             || (SOURCE_FORMATS & ACC_FORMAT_BIT(f)))
            && !is_text(p, size))) {
        /* SPIR-V with its magic number fails for its length. */
        int magic = f == ACC_FORMAT_SPIRV && size >= 4
                    && (word_at(p, 0) == SPIRV_MAGIC
                        || word_at(p, 1) == SPIRV_MAGIC);

        if (magic) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the code is not "
                          "spirv (%zu bytes, %s)", size, size < 20
                              ? "shorter than SPIR-V's 20-byte header"
                              : "not a whole number of 32-bit words");
            return ACC_ERR_INVALID_ARGUMENT;
        }
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the code is not %s "
                      "(%s)", format_names[f],
                      f == ACC_FORMAT_SPIRV ? "no SPIR-V magic number "
                                              "0x07230203 at its start"
                      : f == ACC_FORMAT_FATBIN
                          ? "no fat binary magic number 0xBA55ED50 at its "
                            "start"
                      : (f == ACC_FORMAT_PTX || f == ACC_FORMAT_OPENCL_C
                         || (SOURCE_FORMATS & ACC_FORMAT_BIT(f)))
                          ? "it holds a NUL byte before its end"
                          : "no ELF header at its start");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (is_elf(p, size) && !elf_fits(p, size)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the code is a "
                      "truncated or damaged ELF image: its headers name "
                      "parts beyond its %zu bytes", size);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (f == ACC_FORMAT_FATBIN && fatbin_damage(p, size) != NULL) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the code is a "
                      "truncated or damaged fat binary: %s (%zu bytes)",
                      fatbin_damage(p, size), size);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    *format = f;
    return ACC_OK;
}

/* Modules ----------------------------------------------------------------- */

static void
info_unknown(acc_kernel_info *info)
{
    memset(info, 0, sizeof(*info));
    info->max_threads_per_block = -1;
    info->shared_bytes = -1;
    info->local_bytes = -1;
    info->registers = -1;
    info->max_shared_bytes = -1;
    info->nparams = -1;
}

/* The number of UTF-8 characters in the first n bytes of text. */
static size_t
characters(const char *text, size_t n)
{
    size_t count = 0;

    for (size_t i = 0; i < n; i++) {
        count += ((unsigned char)text[i] & 0xC0) != 0x80;
    }
    return count;
}

acc_status
acc_module_load(int device, acc_code_format format, const void *code,
                size_t size, const char *options, size_t options_size,
                acc_module **out, char **log, acc_error *err)
{
    const acc_backend *b = kernel_backend(err);
    const char *nul = options != NULL ? memchr(options, '\0', options_size)
                                      : NULL;
    acc_stream *s;
    acc_module *m;
    acc_status st;

    *log = NULL;
    if (b == NULL) {
        return err->status;
    }
    if (nul != NULL) {
        /* A driver reads options up to their first NUL: the rest would
         * be dropped without a word. */
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the build options "
                      "hold a NUL character at index %zu, expected text "
                      "without NUL characters",
                      characters(options, (size_t)(nul - options)));
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (options != NULL && options_size > 0 && b->no_build_options) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "backend %s takes no "
                      "build options (got '%.100s'): %s; expected "
                      "options=None", b->name, options, b->no_build_options);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (acc_check_device_ready(device, err) != ACC_OK
        || acc_current_stream(device, &s, err) != ACC_OK
        || acc_check_capture_allows(s, "load a module",
                                    "load modules before capture_begin()",
                                    err) != ACC_OK) {
        return err->status;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return acc_error_host_memory(err);
    }
    st = ACC_SLOT(b, module_load, err, device, format, code, size, options,
                  &m->native, log, err);
    if (st != ACC_OK) {
        free(m);
        return st;
    }
    if (format == ACC_FORMAT_NATIVE || format == ACC_FORMAT_CUBIN
        || format == ACC_FORMAT_HSACO) {   /* ELF images */
        m->table = acc_native_table_read(code, size);
    }
    if (format == ACC_FORMAT_HSACO && m->table == NULL) {
        char why[160];

        /* A host object passed as hsaco (the doubles') has a native
         * table; a GPU's code object has its metadata. */
        m->hsaco = acc_hsaco_table_read(code, size, why, sizeof(why));
        if (m->hsaco == NULL) {
            acc_trace("an hsaco's kernel parameters were not read: %s",
                      why);
        }
    }
    atomic_init(&m->refcount, 1);
    m->backend = b;
    m->device = device;
    m->format = format;
    acc_uses_init(&m->uses);
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return ACC_OK;
}

int
acc_module_device(const acc_module *m)
{
    return m->device;
}

acc_code_format
acc_module_format(const acc_module *m)
{
    return m->format;
}

void
acc_module_incref(acc_module *m)
{
    atomic_fetch_add_explicit(&m->refcount, 1, memory_order_relaxed);
}

/* The deferred release's callback: no launch of the module is queued. */
static void
module_unload(int device, uintptr_t ptr)
{
    acc_module *m = (acc_module *)ptr;
    acc_kernel *k = m->kernels;

    while (k != NULL) {
        acc_kernel *next = k->next;

        m->backend->kernel_release(device, k->native);
        free(k);
        k = next;
    }
    m->backend->module_unload(device, m->native);
    acc_native_table_free(m->table);
    acc_hsaco_table_free(m->hsaco);
    acc_uses_clear(&m->uses);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void
acc_module_release(acc_module *m)
{
    if (atomic_fetch_sub_explicit(&m->refcount, 1, memory_order_acq_rel)
        != 1) {
        return;
    }
    acc_defer_release(m->device, (uintptr_t)m, module_unload, &m->uses);
}

/* Kernels ----------------------------------------------------------------- */

static acc_kernel *
find_kernel(acc_module *m, const char *name)
{
    for (acc_kernel *k = m->kernels; k != NULL; k = k->next) {
        if (strcmp(k->name, name) == 0) {
            return k;
        }
    }
    return NULL;
}

static acc_status
kernel_not_found(acc_module *m, const char *name, acc_error *err)
{
    char names[256] = "";
    acc_error ignored;

    if (m->backend->kernel_names != NULL
        && m->backend->kernel_names(m->device, m->native, names,
                                    sizeof(names), &ignored) != ACC_OK) {
        names[0] = '\0';
    }
    acc_error_set(err, ACC_ERR_NOT_FOUND, "the module has no kernel named "
                  "'%.200s'%s%s%s", name,
                  names[0] != '\0' ? " (its kernels: " : "", names,
                  names[0] != '\0' ? ")" : "");
    return ACC_ERR_NOT_FOUND;
}

acc_status
acc_kernel_get(acc_module *m, const char *name, acc_kernel **out,
               acc_error *err)
{
    const acc_backend *b = m->backend;
    size_t length = strlen(name);
    acc_kernel *k, *found;
    acc_status st;

    if (acc_ready(err) != ACC_OK) {
        return err->status;
    }
    pthread_mutex_lock(&m->lock);
    found = find_kernel(m, name);
    pthread_mutex_unlock(&m->lock);
    if (found != NULL) {
        *out = found;
        return ACC_OK;
    }
    if (length == 0) {
        return kernel_not_found(m, name, err);
    }
    k = calloc(1, sizeof(*k) + length + 1);
    if (k == NULL) {
        return acc_error_host_memory(err);
    }
    memcpy(k->name, name, length + 1);
    k->module = m;
    info_unknown(&k->info);
    st = ACC_SLOT(b, kernel_get, err, m->device, m->native, name, &k->native,
                  &k->info, err);
    if (st != ACC_OK) {
        free(k);
        return st == ACC_ERR_NOT_FOUND ? kernel_not_found(m, name, err) : st;
    }
    if (k->info.nparams > ACC_MAX_KERNEL_PARAMS) {
        k->info.nparams = -1;
    }
    if (k->info.nparams < 0   /* the driver tells none */
        && !acc_native_table_params(m->table, name, &k->info)) {
        acc_hsaco_table_params(m->hsaco, name, &k->info);
    }
    pthread_mutex_lock(&m->lock);
    found = find_kernel(m, name);
    if (found == NULL) {
        k->next = m->kernels;
        m->kernels = k;
    }
    pthread_mutex_unlock(&m->lock);
    if (found != NULL) {   /* another thread made it meanwhile */
        b->kernel_release(m->device, k->native);
        free(k);
        k = found;
    }
    *out = k;
    return ACC_OK;
}

const char *
acc_kernel_name(const acc_kernel *k)
{
    return k->name;
}

const acc_kernel_info *
acc_kernel_info_of(const acc_kernel *k)
{
    return &k->info;
}

/* Launches ---------------------------------------------------------------- */

/* A graph that captured a launch keeps its module until the graph goes,
 * and each replay is a use of it, so that the module outlives every
 * replay still queued. */
static void
module_replayed(void *obj, acc_stream *s)
{
    acc_module *m = obj;
    acc_error ignored;

    if (acc_uses_record(&m->uses, s, &ignored) != ACC_OK) {
        acc_trace("a replay's use of a module was not recorded: %s",
                  ignored.message);
    }
}

static void
module_let_go(void *obj)
{
    acc_module_release(obj);
}

static const acc_keeper module_keeper = {
    .replayed = module_replayed,
    .release = module_let_go,
};

static acc_status
keep_for_capture(acc_module *m, acc_stream *s, acc_error *err)
{
    int kept = 0;
    acc_status st;

    acc_module_incref(m);
    st = acc_graph_keep(s, m, &module_keeper, &kept, err);
    if (!kept) {
        /* Not captured: the caller's reference stays the last. */
        atomic_fetch_sub_explicit(&m->refcount, 1, memory_order_relaxed);
    }
    return st;
}

static const char *const dim_names[3] = {"x", "y", "z"};

static acc_status
invalid(acc_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static acc_status
invalid(acc_error *err, const char *fmt, ...)
{
    char text[sizeof(err->message)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "%s", text);
    return ACC_ERR_INVALID_ARGUMENT;
}

/* The error for dimension i of the grid (block: of the block), whose
 * value as the user gave it is value: not positive (below), else beyond
 * the device's limit (or the 32 bits a launch takes). */
static acc_status
dim_error(const acc_kernel_info *info, int block, int i, const char *value,
          int below, acc_error *err)
{
    const char *what = block ? "block" : "grid";
    const char *unit = block ? "threads" : "blocks";
    long long limit = block ? info->max_block[i] : info->max_grid[i];

    if (below) {
        return invalid(err, "%s[%d] (%s) is %s, expected a positive number "
                       "of %s", what, i, dim_names[i], value, unit);
    }
    if (limit > 0 && limit <= UINT_MAX) {
        return invalid(err, "%s[%d] (%s) is %s %s, beyond the device's "
                       "limit of %lld", what, i, dim_names[i], value, unit,
                       limit);
    }
    return invalid(err, "%s[%d] (%s) is %s %s, beyond the limit of %u (a "
                   "launch's dimensions are 32-bit)", what, i,
                   dim_names[i], value, unit, UINT_MAX);
}

acc_status
acc_launch_dim_error(const acc_kernel *k, int block, int i,
                     const char *value, int below, acc_error *err)
{
    return dim_error(&k->info, block, i, value, below, err);
}

/* The error for shared_mem bytes, given as value, beyond what the
 * kernel may ask for (or beyond any size). */
static acc_status
shared_mem_error(const acc_kernel_info *info, const char *value,
                 acc_error *err)
{
    if (info->max_shared_bytes >= 0) {
        return invalid(err, "shared_mem is %s bytes, beyond the %lld the "
                       "kernel may ask for on its device", value,
                       info->max_shared_bytes);
    }
    return invalid(err, "shared_mem is %s bytes, beyond the largest size, "
                   "2**%zu - 1", value, sizeof(size_t) * 8);
}

acc_status
acc_launch_shared_mem_error(const acc_kernel *k, const char *value,
                            acc_error *err)
{
    return shared_mem_error(&k->info, value, err);
}

/* grid and block against the kernel's and the device's limits. */
static acc_status
check_geometry(const acc_kernel_info *info, const long long grid[3],
               const long long block[3], acc_error *err)
{
    long long threads = 1;

    for (int i = 0; i < 3; i++) {
        for (int is_block = 0; is_block < 2; is_block++) {
            long long v = is_block ? block[i] : grid[i];
            long long limit = is_block ? info->max_block[i]
                                       : info->max_grid[i];
            char text[24];

            if (v >= 1 && v <= UINT_MAX && (limit <= 0 || v <= limit)) {
                continue;
            }
            snprintf(text, sizeof(text), "%lld", v);
            return dim_error(info, is_block, i, text, v < 1, err);
        }
        /* Three 32-bit dimensions may overflow: saturate. */
        threads = threads > LLONG_MAX / block[i] ? LLONG_MAX
                                                 : threads * block[i];
    }
    if (info->max_threads_per_block > 0
        && threads > info->max_threads_per_block) {
        return invalid(err, "the block has %lld threads, beyond the "
                       "kernel's limit of %d per block", threads,
                       info->max_threads_per_block);
    }
    return ACC_OK;
}

/* Whether a scalar of kind [arg] must not pass for a parameter of kind
 * [param]: its bits would be read as another kind of number (a float's
 * as an integer or an address, an integer's as a float).  Signedness
 * differs harmlessly; unknown kinds are never refused. */
static const unsigned char kind_clash[ACC_PARAM_COMPLEX + 1]
                                     [ACC_PARAM_COMPLEX + 1] = {
    [ACC_PARAM_FLOAT] = {[ACC_PARAM_POINTER] = 1, [ACC_PARAM_INT] = 1,
                         [ACC_PARAM_UINT] = 1},
    [ACC_PARAM_INT] = {[ACC_PARAM_FLOAT] = 1},
    [ACC_PARAM_UINT] = {[ACC_PARAM_FLOAT] = 1},
    [ACC_PARAM_POINTER] = {[ACC_PARAM_FLOAT] = 1},
    [ACC_PARAM_COMPLEX] = {[ACC_PARAM_POINTER] = 1, [ACC_PARAM_INT] = 1,
                           [ACC_PARAM_UINT] = 1, [ACC_PARAM_FLOAT] = 1},
};

/* "a 4-byte unsigned integer", "a pointer" (size bytes of kind). */
static void
kind_text(acc_param_kind kind, size_t size, char *out, size_t n)
{
    const char *what = kind == ACC_PARAM_INT    ? "signed integer"
                       : kind == ACC_PARAM_UINT ? "unsigned integer"
                       : kind == ACC_PARAM_FLOAT ? "floating-point number"
                       : kind == ACC_PARAM_COMPLEX ? "complex number"
                                                   : "address";

    snprintf(out, n, "a %zu-byte %s", size, what);
}

static acc_status
kind_error(const acc_kernel *k, int i, const acc_kernel_arg *a,
           acc_error *err)
{
    const acc_param *p = &k->info.params[i];
    char given[48], wanted[48];

    kind_text(a->kind, a->size, given, sizeof(given));
    if (p->kind == ACC_PARAM_POINTER) {
        snprintf(wanted, sizeof(wanted), "a pointer");
    }
    else {
        kind_text(p->kind, p->size, wanted, sizeof(wanted));
    }
    return invalid(err, "argument %d is %s, but parameter %d of kernel "
                   "'%.200s' is %s%s", i, given, i, k->name, wanted,
                   p->kind == ACC_PARAM_POINTER
                       ? ": pass a Buffer or a HostBuffer"
                       : " (its bits would be read as another kind of "
                         "number)");
}

static acc_status
check_args(const acc_kernel *k, const acc_kernel_arg *args, int nargs,
           int device, acc_error *err)
{
    const acc_kernel_info *info = &k->info;

    if (info->nparams >= 0 && nargs != info->nparams) {
        return invalid(err, "kernel '%.200s' takes %d argument%s, got %d",
                       k->name, info->nparams,
                       info->nparams == 1 ? "" : "s", nargs);
    }
    for (int i = 0; i < nargs; i++) {
        const acc_kernel_arg *a = &args[i];
        int memory = (a->flags & ACC_ARG_MEMORY) != 0;

        if (memory && !(a->flags & ACC_ARG_HOST) && a->device != device) {
            return invalid(err, "argument %d is memory of device %d, "
                           "expected memory of device %d (the kernel's)",
                           i, a->device, device);
        }
        if (info->nparams < 0) {
            continue;
        }
        if (memory && info->params[i].kind != ACC_PARAM_UNKNOWN
            && info->params[i].kind != ACC_PARAM_POINTER) {
            return invalid(err, "argument %d is memory, but parameter %d "
                           "of kernel '%.200s' is not a pointer (it takes "
                           "%zu bytes by value)", i, i, k->name,
                           info->params[i].size);
        }
        if (kind_clash[a->kind][info->params[i].kind]) {
            return kind_error(k, i, a, err);
        }
        if (!memory && info->params[i].kind == ACC_PARAM_POINTER
            && k->module->backend->pointer_params_take_memory != NULL) {
            return invalid(err, "argument %d is %zu bytes by value, but "
                           "parameter %d of kernel '%.200s' is a pointer: "
                           "pass a Buffer or a HostBuffer (%s)", i, a->size,
                           i, k->name,
                           k->module->backend->pointer_params_take_memory);
        }
        if (info->params[i].size != 0 && a->size != info->params[i].size) {
            return invalid(err, "argument %d has %zu bytes, expected %zu "
                           "(parameter %d of kernel '%.200s')", i, a->size,
                           info->params[i].size, i, k->name);
        }
    }
    return ACC_OK;
}

acc_status
acc_launch(acc_kernel *k, const long long grid[3], const long long block[3],
           size_t shared_mem, const acc_kernel_arg *args, int nargs,
           acc_stream *s, acc_error *err)
{
    acc_module *m = k->module;
    const acc_kernel_info *info = &k->info;
    acc_launch_config c;
    acc_status st;

    if (acc_ready(err) != ACC_OK) {
        return err->status;
    }
    if (s->device != m->device) {
        return invalid(err, "the stream is on device %d, expected a stream "
                       "of device %d (the kernel's module's)", s->device,
                       m->device);
    }
    if (check_geometry(info, grid, block, err) != ACC_OK
        || check_args(k, args, nargs, m->device, err) != ACC_OK) {
        return err->status;
    }
    if (info->max_shared_bytes >= 0
        && shared_mem > (unsigned long long)info->max_shared_bytes) {
        char text[24];

        snprintf(text, sizeof(text), "%zu", shared_mem);
        return shared_mem_error(info, text, err);
    }
    if (info->shared_params > 0 && shared_mem == 0) {
        return invalid(err, "kernel '%.200s' has %d __local pointer "
                       "parameter%s, which receive shared_mem bytes each: "
                       "pass shared_mem > 0", k->name, info->shared_params,
                       info->shared_params == 1 ? "" : "s");
    }
    for (int i = 0; i < 3; i++) {
        c.grid[i] = (unsigned)grid[i];
        c.block[i] = (unsigned)block[i];
    }
    c.shared_mem = shared_mem;
    c.nargs = nargs;
    c.args = args;
    st = ACC_SLOT(m->backend, launch, err, s, k->native, &c, err);
    if (st != ACC_OK) {
        return st;
    }
    st = keep_for_capture(m, s, err);
    if (st != ACC_OK) {
        return st;
    }
    return acc_uses_record(&m->uses, s, err);
}
