/*
 * double_kernels.c - device code for the driver test doubles (see
 * double_kernels.h).
 */
#define _GNU_SOURCE
#include "double_kernels.h"

#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "double_memory.h"
#include "../../csrc/core/hsaco_table.h"

#if defined(__x86_64__)
#define DK_HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define DK_HOST_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define DK_HOST_MACHINE EM_PPC64
#else
#error "the doubles' native format needs the host's ELF machine number"
#endif

/* SPIR-V: ids beyond this bound are refused (a corrupt header). */
#define DK_SPIRV_MAX_IDS (1u << 22)

struct dk_module {
    atomic_int refs;      /* 1 while loaded, + 1 per launch object */
    atomic_int queued;    /* launches on a stream, not yet freed */
    atomic_bool unloaded;
    dk_format format;
    void *dl;             /* native: the dlopen() handle */
    int nkernels;
    dk_kernel *kernels;
};

struct dk_launch {
    const dk_kernel *k;
    unsigned grid[3], block[3];
    size_t shared;
    bool queued;
    unsigned char *args;  /* dk_kernel_args_size(k) bytes */
};

static atomic_llong dk_modules, dk_misuse;

/* Building a log: text appended, cut at the buffer's size. */
typedef struct dk_log {
    char *buf;
    size_t size, used;
} dk_log;

static void
log_add(dk_log *log, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (log->buf == NULL || log->used + 1 >= log->size) {
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(log->buf + log->used, log->size - log->used, fmt, ap);
    va_end(ap);
    if (n > 0) {
        log->used += (size_t)n < log->size - log->used
                         ? (size_t)n : log->size - log->used - 1;
    }
}

static void
module_free(dk_module *m)
{
    for (int i = 0; i < m->nkernels; i++) {
        free(m->kernels[i].name);
        free(m->kernels[i].params);
    }
    free(m->kernels);
    if (m->dl != NULL) {
        dlclose(m->dl);
    }
    free(m);
}

static void
module_unref(dk_module *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1) {
        module_free(m);
    }
}

/* Offsets: each parameter aligned to its size (at most 8), as CUDA lays
 * out a kernel's parameter buffer; align 0: from the size. */
static void
lay_out(dk_kernel *k, const size_t *aligns)
{
    size_t at = 0;

    for (int i = 0; i < k->nparams; i++) {
        size_t size = k->params[i].size, align = aligns ? aligns[i] : 0;

        if (align == 0) {
            align = size >= 8 ? 8 : size >= 4 ? 4 : size >= 2 ? 2 : 1;
        }
        at = (at + align - 1) / align * align;
        k->params[i].offset = at;
        at += size;
    }
}

/* Kernel i of m (m->kernels holds room for it) named name, of format,
 * with room for nparams parameters; counted in m->nkernels at once, so
 * that module_free releases it whatever follows. */
static enum dk_result
kernel_init(dk_module *m, int i, const char *name, dk_format format,
            int nparams)
{
    dk_kernel *k = &m->kernels[i];

    k->module = m;
    k->format = format;
    k->name = strdup(name);
    k->nparams = nparams;
    k->params = calloc(nparams ? (size_t)nparams : 1, sizeof(dk_param));
    m->nkernels = i + 1;
    return k->name == NULL || k->params == NULL ? DK_OUT_OF_MEMORY : DK_OK;
}

/* Native ------------------------------------------------------------ */

/* The image's end as its headers tell it; 0 when they do not fit avail
 * bytes (avail 0: not known, trust the headers). */
static size_t
elf_extent(const unsigned char *image, size_t avail)
{
    Elf64_Ehdr eh;
    size_t end, lim = avail ? avail : SIZE_MAX;

    memcpy(&eh, image, sizeof(eh));
    if (eh.e_phentsize != sizeof(Elf64_Phdr)
        || eh.e_shentsize != sizeof(Elf64_Shdr)) {
        return 0;
    }
    end = eh.e_ehsize;
    if (eh.e_phoff > lim || eh.e_phnum * sizeof(Elf64_Phdr)
                                > lim - eh.e_phoff
        || eh.e_shoff > lim || eh.e_shnum * sizeof(Elf64_Shdr)
                                   > lim - eh.e_shoff) {
        return 0;
    }
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;

        memcpy(&ph, image + eh.e_phoff + i * sizeof(ph), sizeof(ph));
        if (ph.p_offset > lim || ph.p_filesz > lim - ph.p_offset) {
            return 0;
        }
        if (ph.p_offset + ph.p_filesz > end) {
            end = ph.p_offset + ph.p_filesz;
        }
    }
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;

        memcpy(&sh, image + eh.e_shoff + i * sizeof(sh), sizeof(sh));
        if (sh.sh_type == SHT_NOBITS) {
            continue;
        }
        if (sh.sh_offset > lim || sh.sh_size > lim - sh.sh_offset) {
            return 0;
        }
        if (sh.sh_offset + sh.sh_size > end) {
            end = sh.sh_offset + sh.sh_size;
        }
    }
    if (eh.e_phoff + eh.e_phnum * sizeof(Elf64_Phdr) > end) {
        end = eh.e_phoff + eh.e_phnum * sizeof(Elf64_Phdr);
    }
    if (eh.e_shoff + eh.e_shnum * sizeof(Elf64_Shdr) > end) {
        end = eh.e_shoff + eh.e_shnum * sizeof(Elf64_Shdr);
    }
    return end;
}

/* The shared object written to a temporary file and opened; NULL (log
 * set) when it cannot be. */
static void *
open_native(const unsigned char *image, size_t size, dk_log *log)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];
    void *dl;
    int fd;
    size_t done = 0;

    snprintf(path, sizeof(path), "%s/accelerator-native-XXXXXX",
             dir != NULL && dir[0] != '\0' ? dir : "/tmp");
    fd = mkstemp(path);
    if (fd < 0) {
        log_add(log, "cannot write the module to %s", path);
        return NULL;
    }
    while (done < size) {
        ssize_t n = write(fd, image + done, size - done);

        if (n <= 0) {
            close(fd);
            unlink(path);
            log_add(log, "cannot write the module to %s", path);
            return NULL;
        }
        done += (size_t)n;
    }
    close(fd);
    dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unlink(path);
    if (dl == NULL) {
        log_add(log, "the native module does not load: %s", dlerror());
    }
    return dl;
}

static enum dk_result
load_native(dk_module *m, const unsigned char *image, size_t size,
            dk_log *log)
{
    const native_kernel *table;
    int n = 0;

    if (size < sizeof(Elf64_Ehdr) && size != 0) {
        return DK_NOT_IMAGE;
    }
    if (image[EI_CLASS] != ELFCLASS64 || image[EI_DATA] != ELFDATA2LSB) {
        return DK_OTHER_MACHINE;
    }
    {
        Elf64_Ehdr eh;

        memcpy(&eh, image, sizeof(eh));
        if (eh.e_machine != DK_HOST_MACHINE) {
            log_add(log, "ELF image for machine %u; this device runs %u",
                    (unsigned)eh.e_machine, (unsigned)DK_HOST_MACHINE);
            return DK_OTHER_MACHINE;
        }
        if (eh.e_type != ET_DYN) {
            log_add(log, "ELF image of type %u, not a shared object",
                    (unsigned)eh.e_type);
            return DK_NOT_IMAGE;
        }
    }
    {
        size_t end = elf_extent(image, size);

        if (end == 0) {
            log_add(log, "truncated or damaged ELF image");
            return DK_NOT_IMAGE;
        }
        size = end;
    }
    m->dl = open_native(image, size, log);
    if (m->dl == NULL) {
        return DK_NOT_IMAGE;
    }
    table = dlsym(m->dl, NATIVE_KERNEL_TABLE);
    if (table == NULL) {
        log_add(log, "the shared object has no %s table",
                NATIVE_KERNEL_TABLE);
        return DK_NOT_IMAGE;
    }
    while (table[n].name != NULL) {
        if (table[n].nparams > DK_MAX_PARAMS) {
            log_add(log, "kernel %s has more than %d parameters",
                    table[n].name, DK_MAX_PARAMS);
            return DK_NOT_IMAGE;
        }
        if (table[n].nparams < 0
            || (table[n].nparams > 0 && table[n].params == NULL)) {
            log_add(log, "kernel %s has a malformed parameter table (%d "
                    "parameters%s)", table[n].name, table[n].nparams,
                    table[n].params == NULL ? ", no array of them" : "");
            return DK_NOT_IMAGE;
        }
        n++;
    }
    m->kernels = calloc(n ? (size_t)n : 1, sizeof(dk_kernel));
    if (m->kernels == NULL) {
        return DK_OUT_OF_MEMORY;
    }
    for (int i = 0; i < n; i++) {
        const native_kernel *t = &table[i];
        dk_kernel *k = &m->kernels[i];

        if (kernel_init(m, i, t->name, DK_NATIVE,
                        t->nparams > 0 ? t->nparams : 0) != DK_OK) {
            return DK_OUT_OF_MEMORY;
        }
        k->fn = t->fn;
        for (int j = 0; j < k->nparams; j++) {
            k->params[j].kind = (dk_param_kind)t->params[j].kind;
            k->params[j].size = t->params[j].size;
        }
        lay_out(k, NULL);
        k->max_threads = t->max_threads > 0
                                 && t->max_threads < DK_MAX_THREADS
                             ? t->max_threads : DK_MAX_THREADS;
        k->static_shared = t->static_shared;
    }
    return DK_OK;
}

/* PTX ---------------------------------------------------------------- */

typedef struct ptx_text {
    char *s;     /* comments blanked (newlines kept) */
    size_t len;
    size_t at;
} ptx_text;

static int
ptx_line(const ptx_text *t, size_t at)
{
    int line = 1;

    for (size_t i = 0; i < at && i < t->len; i++) {
        line += t->s[i] == '\n';
    }
    return line;
}

static void
ptx_blank_comments(char *s, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] == '/' && s[i + 1] == '/') {
            while (i < len && s[i] != '\n') {
                s[i++] = ' ';
            }
        }
        else if (s[i] == '/' && s[i + 1] == '*') {
            while (i < len && !(s[i] == '*' && i + 1 < len
                                && s[i + 1] == '/')) {
                if (s[i] != '\n') {
                    s[i] = ' ';
                }
                i++;
            }
            if (i + 1 < len) {
                s[i] = s[i + 1] = ' ';
                i++;
            }
        }
    }
}

static bool
ptx_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '%'
           || c == '.';
}

static void
ptx_skip_space(ptx_text *t)
{
    while (t->at < t->len && (t->s[t->at] == ' ' || t->s[t->at] == '\t'
                              || t->s[t->at] == '\n' || t->s[t->at] == '\r'))
    {
        t->at++;
    }
}

/* The next word (an identifier or a directive), into word; false at a
 * punctuation mark or the end. */
static bool
ptx_word(ptx_text *t, char *word, size_t size)
{
    size_t n = 0;

    ptx_skip_space(t);
    while (t->at < t->len && ptx_ident_char(t->s[t->at])) {
        if (n + 1 < size) {
            word[n++] = t->s[t->at];
        }
        t->at++;
    }
    word[n] = '\0';
    return n > 0;
}

/* Bytes and kind of a PTX fundamental type (".u32"); 0 when not one. */
static size_t
ptx_type(const char *w, dk_param_kind *kind)
{
    size_t bits;

    if (w[0] != '.' || strchr("usfb", w[1]) == NULL || w[2] == '\0') {
        return 0;
    }
    bits = strtoul(w + 2, NULL, 10);
    if (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
        return 0;
    }
    *kind = w[1] == 'f' ? DK_PARAM_FLOAT
            : w[1] == 's' ? DK_PARAM_INT : DK_PARAM_UINT;
    return bits / 8;
}

static enum dk_result
ptx_error(const ptx_text *t, dk_log *log, const char *what)
{
    log_add(log, "ptxas application ptx input, line %d; fatal   : %s\n",
            ptx_line(t, t->at), what);
    return DK_INVALID_CODE;
}

/* One ".param ..." of an entry's list, t->at after ".param". */
static enum dk_result
ptx_param(ptx_text *t, dk_param *p, size_t *align, dk_log *log)
{
    char w[256];
    size_t size = 0, count = 1;
    dk_param_kind kind = DK_PARAM_OTHER;

    *align = 0;
    while (ptx_word(t, w, sizeof(w))) {
        if (strcmp(w, ".align") == 0) {
            if (!ptx_word(t, w, sizeof(w))) {
                return ptx_error(t, log, "expected an alignment");
            }
            *align = strtoul(w, NULL, 10);
        }
        else if (w[0] != '.') {
            break;  /* the parameter's name */
        }
        else if (size == 0) {
            size = ptx_type(w, &kind);  /* else a modifier (.ptr) */
        }
    }
    if (size == 0 || w[0] == '\0' || w[0] == '.') {
        return ptx_error(t, log, "Parsing error near ')': syntax error");
    }
    ptx_skip_space(t);
    if (t->at < t->len && t->s[t->at] == '[') {
        count = strtoul(t->s + t->at + 1, NULL, 10);
        while (t->at < t->len && t->s[t->at] != ']') {
            t->at++;
        }
        if (t->at == t->len || count == 0) {
            return ptx_error(t, log, "Parsing error near '[': syntax error");
        }
        t->at++;
        kind = DK_PARAM_OTHER;
    }
    p->size = size * count;
    p->kind = kind;
    return DK_OK;
}

/* The directives between an entry's parameter list and its body, and the
 * body's static shared memory; t->at after the list. */
static enum dk_result
ptx_body(ptx_text *t, dk_kernel *k, dk_log *log)
{
    char w[256];
    int depth = 0;

    k->max_threads = DK_MAX_THREADS;
    for (;;) {
        ptx_skip_space(t);
        if (t->at == t->len) {
            return ptx_error(t, log, "Parsing error near end of file: "
                             "unbalanced '{'");
        }
        if (t->s[t->at] == '{') {
            depth++;
            t->at++;
        }
        else if (t->s[t->at] == '}') {
            t->at++;
            if (--depth <= 0) {
                return DK_OK;
            }
        }
        else if (ptx_word(t, w, sizeof(w))) {
            if (depth == 0 && (strcmp(w, ".maxntid") == 0
                               || strcmp(w, ".reqntid") == 0)) {
                long n = 1;

                for (int d = 0; d < 3; d++) {
                    char *end;
                    long v;

                    ptx_skip_space(t);
                    v = strtol(t->s + t->at, &end, 10);
                    if (end == t->s + t->at) {
                        break;
                    }
                    n *= v;
                    t->at = (size_t)(end - t->s);
                    ptx_skip_space(t);
                    if (t->at < t->len && t->s[t->at] == ',') {
                        t->at++;
                    }
                }
                if (n > 0 && n < k->max_threads) {
                    k->max_threads = (int)n;
                }
            }
            else if (depth > 0 && strcmp(w, ".shared") == 0) {
                size_t size = 0, count = 1;
                dk_param_kind kind;

                while (ptx_word(t, w, sizeof(w))) {
                    if (size == 0) {
                        size = ptx_type(w, &kind);
                    }
                }
                if (t->at < t->len && t->s[t->at] == '[') {
                    count = strtoul(t->s + t->at + 1, NULL, 10);
                }
                k->static_shared += size * count;  /* extern []: 0 */
            }
            else if (depth == 0 && strcmp(w, ".entry") == 0) {
                return ptx_error(t, log, "Parsing error near '.entry': "
                                 "syntax error");
            }
        }
        else {
            t->at++;
        }
    }
}

static enum dk_result
ptx_entry(ptx_text *t, dk_kernel *k, dk_log *log)
{
    char w[256];
    size_t aligns[DK_MAX_PARAMS];
    dk_param params[DK_MAX_PARAMS];
    enum dk_result r;

    if (!ptx_word(t, w, sizeof(w)) || w[0] == '.') {
        return ptx_error(t, log, "Parsing error near '.entry': "
                         "expected a kernel name");
    }
    k->name = strdup(w);
    if (k->name == NULL) {
        return DK_OUT_OF_MEMORY;
    }
    ptx_skip_space(t);
    if (t->at < t->len && t->s[t->at] == '(') {
        t->at++;
        for (;;) {
            ptx_skip_space(t);
            if (t->at < t->len && t->s[t->at] == ')') {
                t->at++;
                break;
            }
            if (!ptx_word(t, w, sizeof(w)) || strcmp(w, ".param") != 0) {
                return ptx_error(t, log, t->at >= t->len
                                 ? "Parsing error near end of file: "
                                   "unbalanced parameter list"
                                 : "Parsing error: expected .param");
            }
            if (k->nparams == DK_MAX_PARAMS) {
                return ptx_error(t, log, "too many parameters");
            }
            r = ptx_param(t, &params[k->nparams], &aligns[k->nparams], log);
            if (r != DK_OK) {
                return r;
            }
            k->nparams++;
            ptx_skip_space(t);
            if (t->at < t->len && t->s[t->at] == ',') {
                t->at++;
            }
            else if (t->at >= t->len || t->s[t->at] != ')') {
                return ptx_error(t, log, "Parsing error near end of file: "
                                 "unbalanced parameter list");
            }
        }
    }
    k->params = calloc(k->nparams ? (size_t)k->nparams : 1,
                       sizeof(dk_param));
    if (k->params == NULL) {
        return DK_OUT_OF_MEMORY;
    }
    memcpy(k->params, params, (size_t)k->nparams * sizeof(dk_param));
    lay_out(k, aligns);
    return ptx_body(t, k, log);
}

static enum dk_result
load_ptx(dk_module *m, const char *image, size_t size, dk_log *log)
{
    ptx_text t = {0};
    char w[256];
    bool version = false;
    enum dk_result r = DK_OK;
    int cap = 0;

    t.len = size ? strnlen(image, size) : strlen(image);
    t.s = malloc(t.len + 1);
    if (t.s == NULL) {
        return DK_OUT_OF_MEMORY;
    }
    memcpy(t.s, image, t.len);
    t.s[t.len] = '\0';
    ptx_blank_comments(t.s, t.len);
    while (r == DK_OK && t.at < t.len) {
        if (!ptx_word(&t, w, sizeof(w))) {
            t.at++;
            continue;
        }
        if (!version) {
            if (strcmp(w, ".version") != 0) {
                r = ptx_error(&t, log, "Missing .version directive at "
                              "start of file");
                break;
            }
            version = true;
        }
        if (strcmp(w, ".entry") != 0) {
            continue;
        }
        if (m->nkernels == cap) {
            int ncap = cap ? cap * 2 : 8;
            dk_kernel *more = realloc(m->kernels,
                                      (size_t)ncap * sizeof(dk_kernel));

            if (more == NULL) {
                r = DK_OUT_OF_MEMORY;
                break;
            }
            m->kernels = more;
            cap = ncap;
        }
        memset(&m->kernels[m->nkernels], 0, sizeof(dk_kernel));
        m->kernels[m->nkernels].module = m;
        m->kernels[m->nkernels].format = DK_PTX;
        r = ptx_entry(&t, &m->kernels[m->nkernels++], log);
    }
    if (r == DK_OK && !version) {
        r = ptx_error(&t, log, "Missing .version directive at start of "
                      "file");
    }
    free(t.s);
    return r;
}

/* SPIR-V ------------------------------------------------------------- */

enum {
    SPV_MAGIC = 0x07230203,
    SPV_OP_MEMORY_MODEL = 14,
    SPV_OP_ENTRY_POINT = 15,
    SPV_OP_EXECUTION_MODE = 16,
    SPV_OP_TYPE_BOOL = 20,
    SPV_OP_TYPE_INT = 21,
    SPV_OP_TYPE_FLOAT = 22,
    SPV_OP_TYPE_VECTOR = 23,
    SPV_OP_TYPE_STRUCT = 30,
    SPV_OP_TYPE_POINTER = 32,
    SPV_OP_FUNCTION = 54,
    SPV_OP_FUNCTION_PARAMETER = 55,
    SPV_MODEL_KERNEL = 6,
    SPV_MODE_LOCAL_SIZE = 17,
    SPV_ADDRESSING_PHYSICAL32 = 1,
    SPV_STORAGE_WORKGROUP = 4,
};

typedef struct spv_type {
    size_t size;          /* 0: not a type we size */
    dk_param_kind kind;
} spv_type;

typedef struct spv_entry {
    uint32_t fn;
    dk_kernel *k;
} spv_entry;

static enum dk_result
spv_error(dk_log *log, size_t word, const char *what)
{
    log_add(log, "invalid SPIR-V module: %s (word %zu)\n", what, word);
    return DK_INVALID_CODE;
}

/* Under the first pass: the module's entry points become kernels. */
static enum dk_result
spv_entry_point(dk_module *m, const uint32_t *ins, uint32_t n, size_t at,
                int *cap, dk_log *log)
{
    const char *name = (const char *)(ins + 3);
    dk_kernel *k;

    if (n < 4 || strnlen(name, (n - 3) * 4) == (n - 3) * 4) {
        return spv_error(log, at, "OpEntryPoint without a name");
    }
    if (ins[1] != SPV_MODEL_KERNEL) {
        return DK_OK;
    }
    if (m->nkernels == *cap) {
        int ncap = *cap ? *cap * 2 : 8;
        dk_kernel *more = realloc(m->kernels,
                                  (size_t)ncap * sizeof(dk_kernel));

        if (more == NULL) {
            return DK_OUT_OF_MEMORY;
        }
        m->kernels = more;
        *cap = ncap;
    }
    k = &m->kernels[m->nkernels++];
    memset(k, 0, sizeof(*k));
    k->module = m;
    k->format = DK_SPIRV;
    k->max_threads = DK_MAX_THREADS;
    /* The function's id, until the second pass resolves it. */
    k->nparams = -(int)ins[2];
    k->name = strdup(name);
    return k->name == NULL ? DK_OUT_OF_MEMORY : DK_OK;
}

static dk_kernel *
spv_kernel_of(dk_module *m, uint32_t fn)
{
    for (int i = 0; i < m->nkernels; i++) {
        if (m->kernels[i].nparams == -(int)fn) {
            return &m->kernels[i];
        }
    }
    return NULL;
}

static enum dk_result
load_spirv(dk_module *m, const unsigned char *image, size_t size,
           dk_log *log)
{
    uint32_t *w;
    size_t nw = size / 4, pointer = 8;
    uint32_t bound;
    spv_type *types = NULL;
    enum dk_result r = DK_OK;
    int cap = 0;
    dk_kernel *cur = NULL;
    dk_param *params = NULL;
    int nparams = 0;

    if (size % 4 != 0 || nw < 5) {
        log_add(log, "invalid SPIR-V module: %zu bytes\n", size);
        return DK_INVALID_CODE;
    }
    w = malloc(size);
    if (w == NULL) {
        return DK_OUT_OF_MEMORY;
    }
    memcpy(w, image, size);
    bound = w[3];
    if (bound == 0 || bound > DK_SPIRV_MAX_IDS) {
        free(w);
        return spv_error(log, 3, "id bound out of range");
    }
    types = calloc(bound, sizeof(spv_type));
    params = calloc(DK_MAX_PARAMS, sizeof(dk_param));
    if (types == NULL || params == NULL) {
        r = DK_OUT_OF_MEMORY;
    }
    /* Pass 1: entry points (they come first; checks every length). */
    for (size_t at = 5; r == DK_OK && at < nw;) {
        uint32_t n = w[at] >> 16, op = w[at] & 0xffff;

        if (n == 0 || n > nw - at) {
            r = spv_error(log, at, "instruction runs past the end");
            break;
        }
        if (op == SPV_OP_ENTRY_POINT) {
            r = spv_entry_point(m, w + at, n, at, &cap, log);
        }
        else if (op == SPV_OP_MEMORY_MODEL && n >= 2
                 && w[at + 1] == SPV_ADDRESSING_PHYSICAL32) {
            pointer = 4;
        }
        at += n;
    }
    /* Pass 2: types, execution modes and the entries' parameters. */
    for (size_t at = 5; r == DK_OK && at < nw; at += w[at] >> 16) {
        uint32_t n = w[at] >> 16, op = w[at] & 0xffff;
        const uint32_t *ins = w + at;
        spv_type *t = n >= 2 && ins[1] < bound ? &types[ins[1]] : NULL;

        switch (op) {
        case SPV_OP_TYPE_BOOL:
            if (t != NULL) {
                *t = (spv_type){1, DK_PARAM_UINT};
            }
            break;
        case SPV_OP_TYPE_INT:
            if (t != NULL && n >= 4) {
                *t = (spv_type){ins[2] / 8, ins[3] ? DK_PARAM_INT
                                                   : DK_PARAM_UINT};
            }
            break;
        case SPV_OP_TYPE_FLOAT:
            if (t != NULL && n >= 3) {
                *t = (spv_type){ins[2] / 8, DK_PARAM_FLOAT};
            }
            break;
        case SPV_OP_TYPE_VECTOR:
            if (t != NULL && n >= 4 && ins[2] < bound) {
                /* A 3-vector takes the room of a 4-vector. */
                uint32_t count = ins[3] == 3 ? 4 : ins[3];

                *t = (spv_type){types[ins[2]].size * count, DK_PARAM_OTHER};
            }
            break;
        case SPV_OP_TYPE_STRUCT:
            if (t != NULL) {
                size_t sum = 0;

                for (uint32_t i = 2; i < n; i++) {
                    sum += ins[i] < bound ? types[ins[i]].size : 0;
                }
                *t = (spv_type){sum, DK_PARAM_OTHER};
            }
            break;
        case SPV_OP_TYPE_POINTER:
            if (t != NULL && n >= 3) {
                *t = (spv_type){pointer, ins[2] == SPV_STORAGE_WORKGROUP
                                             ? DK_PARAM_LOCAL
                                             : DK_PARAM_POINTER};
            }
            break;
        case SPV_OP_EXECUTION_MODE:
            if (n >= 6 && ins[2] == SPV_MODE_LOCAL_SIZE) {
                dk_kernel *k = spv_kernel_of(m, ins[1]);

                if (k != NULL) {
                    k->max_threads = (int)(ins[3] * ins[4] * ins[5]);
                }
            }
            break;
        case SPV_OP_FUNCTION:
            cur = n >= 3 ? spv_kernel_of(m, ins[2]) : NULL;
            nparams = 0;
            break;
        case SPV_OP_FUNCTION_PARAMETER:
            if (cur != NULL && n >= 2) {
                if (nparams == DK_MAX_PARAMS) {
                    r = spv_error(log, at, "too many parameters");
                    break;
                }
                params[nparams].size = ins[1] < bound ? types[ins[1]].size
                                                      : 0;
                params[nparams].kind = ins[1] < bound ? types[ins[1]].kind
                                                      : DK_PARAM_OTHER;
                nparams++;
            }
            break;
        case 56: /* OpFunctionEnd */
            if (cur != NULL) {
                cur->params = calloc(nparams ? (size_t)nparams : 1,
                                     sizeof(dk_param));
                if (cur->params == NULL) {
                    r = DK_OUT_OF_MEMORY;
                    break;
                }
                memcpy(cur->params, params,
                       (size_t)nparams * sizeof(dk_param));
                cur->nparams = nparams;
                lay_out(cur, NULL);
                cur = NULL;
            }
            break;
        default:
            break;
        }
    }
    for (int i = 0; r == DK_OK && i < m->nkernels; i++) {
        if (m->kernels[i].nparams < 0) {
            r = spv_error(log, 0, "an entry point without its function");
        }
    }
    for (int i = 0; r != DK_OK && i < m->nkernels; i++) {
        if (m->kernels[i].nparams < 0) {
            m->kernels[i].nparams = 0;  /* so module_free is right */
        }
    }
    free(params);
    free(types);
    free(w);
    return r;
}

/* Hsaco -------------------------------------------------------------- */

#define DK_EM_AMDGPU 224
#define DK_EF_AMDGPU_MACH 0x0ffu
/* Code object v4 and later (EI_ABIVERSION 2 and up): the settings of
 * xnack and sramecc in e_flags. */
#define DK_ABI_V4 2
#define DK_EF_XNACK 0x300u
#define DK_EF_XNACK_ON 0x300u
#define DK_EF_SRAMECC 0xc00u
#define DK_EF_SRAMECC_OFF 0x800u

/* Section i's header (the caller checked i < e_shnum; elf_extent that
 * the table lies within the image). */
static Elf64_Shdr
hsaco_section(const unsigned char *image, const Elf64_Ehdr *eh, unsigned i)
{
    Elf64_Shdr sh;

    memcpy(&sh, image + eh->e_shoff + (size_t)i * sizeof(sh), sizeof(sh));
    return sh;
}

/* Whether a symbol table of image (.symtab or .dynsym) defines name as
 * an object, as a kernel descriptor is.  elf_extent checked that every
 * section with bytes lies within the image; names are read within their
 * string table only. */
static bool
hsaco_defines(const unsigned char *image, const char *name)
{
    Elf64_Ehdr eh;
    size_t len = strlen(name);

    memcpy(&eh, image, sizeof(eh));
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh = hsaco_section(image, &eh, i), strtab;

        if ((sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)
            || sh.sh_entsize != sizeof(Elf64_Sym)
            || sh.sh_link >= eh.e_shnum) {
            continue;
        }
        strtab = hsaco_section(image, &eh, sh.sh_link);
        if (strtab.sh_type != SHT_STRTAB) {
            continue;
        }
        for (size_t j = 0; j < sh.sh_size / sizeof(Elf64_Sym); j++) {
            Elf64_Sym sym;
            const char *s;

            memcpy(&sym, image + sh.sh_offset + j * sizeof(sym),
                   sizeof(sym));
            if (sym.st_shndx == SHN_UNDEF
                || ELF64_ST_TYPE(sym.st_info) != STT_OBJECT
                || sym.st_name >= strtab.sh_size) {
                continue;
            }
            s = (const char *)image + strtab.sh_offset + sym.st_name;
            if (strnlen(s, strtab.sh_size - sym.st_name) == len
                && memcmp(s, name, len) == 0) {
                return true;
            }
        }
    }
    return false;
}

/* Whether the code object's target (its e_flags) is the device's: mach,
 * xnack off, sramecc on; "any" is either. */
static bool
hsaco_for_device(const unsigned char *image, const Elf64_Ehdr *eh,
                 unsigned mach, dk_log *log)
{
    unsigned flags = eh->e_flags;

    if ((flags & DK_EF_AMDGPU_MACH) != mach) {
        log_add(log, "code object for AMD architecture 0x%02x "
                "(EF_AMDGPU_MACH); this device is 0x%02x",
                flags & DK_EF_AMDGPU_MACH, mach);
        return false;
    }
    if (image[EI_ABIVERSION] >= DK_ABI_V4
        && ((flags & DK_EF_XNACK) == DK_EF_XNACK_ON
            || (flags & DK_EF_SRAMECC) == DK_EF_SRAMECC_OFF)) {
        log_add(log, "code object for xnack+ or sramecc-; this device "
                "runs xnack- and sramecc+");
        return false;
    }
    return true;
}

/* The kernels of the code object's metadata, each with its descriptor
 * in a symbol table. */
static enum dk_result
hsaco_kernels(dk_module *m, const unsigned char *image,
              const acc_hsaco_table *t, dk_log *log)
{
    int n = acc_hsaco_table_count(t);

    m->kernels = calloc(n ? (size_t)n : 1, sizeof(dk_kernel));
    if (m->kernels == NULL) {
        return DK_OUT_OF_MEMORY;
    }
    for (int i = 0; i < n; i++) {
        const acc_hsaco_kernel *h = acc_hsaco_table_at(t, i);
        dk_kernel *k = &m->kernels[i];

        if (!hsaco_defines(image, h->symbol)) {
            log_add(log, "kernel %s: no kernel descriptor %s in the "
                    "symbol table", h->name, h->symbol);
            return DK_NOT_IMAGE;
        }
        if (h->nparams < 0) {
            log_add(log, "kernel %s has more than %d parameters", h->name,
                    DK_MAX_PARAMS);
            return DK_NOT_IMAGE;
        }
        if (kernel_init(m, i, h->name, DK_HSACO, h->nparams) != DK_OK) {
            return DK_OUT_OF_MEMORY;
        }
        for (int j = 0; j < k->nparams; j++) {
            k->params[j].kind = h->params[j].kind == ACC_PARAM_POINTER
                                    ? DK_PARAM_POINTER : DK_PARAM_OTHER;
            k->params[j].size = h->params[j].size;
            k->params[j].offset = h->params[j].offset;
        }
        k->max_threads = h->max_threads > 0
                                 && h->max_threads < DK_MAX_THREADS
                             ? (int)h->max_threads : DK_MAX_THREADS;
        k->static_shared = h->group_bytes > 0 ? (size_t)h->group_bytes : 0;
        k->private_bytes = h->private_bytes > 0 ? (size_t)h->private_bytes
                                                : 0;
        k->registers = h->vgprs > 0 && h->vgprs < INT_MAX ? (int)h->vgprs
                                                           : 0;
    }
    return DK_OK;
}

static enum dk_result
load_hsaco(dk_module *m, const unsigned char *image, size_t size,
           unsigned mach, dk_log *log)
{
    Elf64_Ehdr eh;
    acc_hsaco_table *t;
    char why[160];
    enum dk_result r;
    size_t end;

    if (size < sizeof(Elf64_Ehdr) && size != 0) {
        return DK_NOT_IMAGE;
    }
    if (image[EI_CLASS] != ELFCLASS64 || image[EI_DATA] != ELFDATA2LSB) {
        log_add(log, "an AMD GPU code object is a 64-bit little-endian "
                "ELF image");
        return DK_NOT_IMAGE;
    }
    memcpy(&eh, image, sizeof(eh));
    if (!hsaco_for_device(image, &eh, mach, log)) {
        return DK_OTHER_MACHINE;
    }
    end = elf_extent(image, size);
    if (eh.e_type != ET_DYN || end == 0) {
        log_add(log, "%s", eh.e_type != ET_DYN
                               ? "the code object is not a shared object"
                               : "truncated or damaged ELF image");
        return DK_NOT_IMAGE;
    }
    t = acc_hsaco_table_read(image, end, why, sizeof(why));
    if (t == NULL) {
        log_add(log, "the code object's metadata: %s", why);
        return DK_NOT_IMAGE;
    }
    r = hsaco_kernels(m, image, t, log);
    acc_hsaco_table_free(t);
    return r;
}

/* The module --------------------------------------------------------- */

/* dk_module_load, and AMD code objects for architecture mach (0: none). */
static enum dk_result
module_load(const void *image, size_t size, unsigned mach, dk_module **out,
            char *log, size_t log_size)
{
    const unsigned char *b = image;
    dk_log lg = {log, log_size, 0};
    dk_module *m;
    enum dk_result r;
    uint32_t magic = 0;

    if (log != NULL && log_size > 0) {
        log[0] = '\0';
    }
    if (image == NULL) {
        return DK_NOT_IMAGE;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return DK_OUT_OF_MEMORY;
    }
    atomic_init(&m->refs, 1);
    if (size == 0 || size >= 4) {
        memcpy(&magic, b, 4);
    }
    if ((size == 0 || size >= sizeof(Elf64_Ehdr)) && mach != 0
        && memcmp(b, ELFMAG, SELFMAG) == 0
        && (b[EI_DATA] == ELFDATA2MSB ? b[18] << 8 | b[19]
                                      : b[19] << 8 | b[18]) == DK_EM_AMDGPU) {
        m->format = DK_HSACO;
        r = load_hsaco(m, b, size, mach, &lg);
    }
    else if ((size == 0 || size >= SELFMAG)
             && memcmp(b, ELFMAG, SELFMAG) == 0) {
        m->format = DK_NATIVE;
        r = load_native(m, b, size, &lg);
    }
    else if (magic == SPV_MAGIC && size != 0) {
        m->format = DK_SPIRV;
        r = load_spirv(m, b, size, &lg);
    }
    else if (memmem(b, size ? size : strlen(image), ".entry", 6) != NULL
             || memmem(b, size ? size : strlen(image), ".version", 8)
                    != NULL) {
        m->format = DK_PTX;
        r = load_ptx(m, image, size, &lg);
    }
    else {
        r = DK_NOT_IMAGE;
    }
    if (r != DK_OK) {
        module_free(m);
        return r;
    }
    atomic_fetch_add(&dk_modules, 1);
    *out = m;
    return DK_OK;
}

enum dk_result
dk_module_load(const void *image, size_t size, dk_module **out, char *log,
               size_t log_size)
{
    return module_load(image, size, 0, out, log, log_size);
}

enum dk_result
dk_module_load_amdgpu(const void *image, size_t size, unsigned mach,
                      dk_module **out, char *log, size_t log_size)
{
    return module_load(image, size, mach, out, log, log_size);
}

void
dk_module_unload(dk_module *m, const char *api)
{
    int queued = atomic_load(&m->queued);

    if (queued > 0) {
        atomic_fetch_add(&dk_misuse, 1);
        fprintf(stderr, "driver double: %s: module unloaded while %d "
                "launch(es) of it are queued\n", api, queued);
    }
    atomic_store(&m->unloaded, true);
    atomic_fetch_sub(&dk_modules, 1);
    module_unref(m);
}

dk_format
dk_module_format(const dk_module *m)
{
    return m->format;
}

int
dk_kernel_count(const dk_module *m)
{
    return m->nkernels;
}

const dk_kernel *
dk_kernel_at(const dk_module *m, int i)
{
    return i >= 0 && i < m->nkernels ? &m->kernels[i] : NULL;
}

const dk_kernel *
dk_kernel_find(const dk_module *m, const char *name)
{
    for (int i = 0; name != NULL && i < m->nkernels; i++) {
        if (strcmp(m->kernels[i].name, name) == 0) {
            return &m->kernels[i];
        }
    }
    return NULL;
}

size_t
dk_kernel_args_size(const dk_kernel *k)
{
    return k->nparams == 0 ? 0
                           : k->params[k->nparams - 1].offset
                                 + k->params[k->nparams - 1].size;
}

/* Launches ----------------------------------------------------------- */

enum dk_result
dk_check_geometry(const dk_kernel *k, const unsigned grid[3],
                  const unsigned block[3], size_t shared, size_t max_shared)
{
    static const unsigned max_block[3] = {DK_MAX_BLOCK_X, DK_MAX_BLOCK_Y,
                                          DK_MAX_BLOCK_Z};
    static const unsigned max_grid[3] = {DK_MAX_GRID_X, DK_MAX_GRID_Y,
                                         DK_MAX_GRID_Z};
    unsigned long long threads = 1;

    for (int d = 0; d < 3; d++) {
        if (grid[d] == 0 || grid[d] > max_grid[d] || block[d] == 0
            || block[d] > max_block[d]) {
            return DK_BAD_GEOMETRY;
        }
        threads *= block[d];
    }
    if (threads > (unsigned long long)k->max_threads
        || shared > max_shared || k->static_shared > max_shared - shared) {
        return DK_BAD_GEOMETRY;
    }
    return DK_OK;
}

enum dk_result
dk_launch_new(const dk_kernel *k, const unsigned grid[3],
              const unsigned block[3], size_t shared, void *const *args,
              bool queued, dk_launch **out)
{
    dk_launch *l;
    size_t bytes = dk_kernel_args_size(k);

    if (k->format != DK_NATIVE || k->fn == NULL) {
        return DK_NO_BINARY;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL || (l->args = malloc(bytes ? bytes : 1)) == NULL) {
        free(l);
        return DK_OUT_OF_MEMORY;
    }
    for (int i = 0; i < k->nparams; i++) {
        memcpy(l->args + k->params[i].offset, args[i], k->params[i].size);
    }
    l->k = k;
    memcpy(l->grid, grid, sizeof(l->grid));
    memcpy(l->block, block, sizeof(l->block));
    l->shared = shared;
    l->queued = queued;
    atomic_fetch_add(&k->module->refs, 1);
    if (queued) {
        atomic_fetch_add(&k->module->queued, 1);
    }
    *out = l;
    return DK_OK;
}

dk_launch *
dk_launch_copy(const dk_launch *l, bool queued)
{
    size_t bytes = dk_kernel_args_size(l->k);
    dk_launch *c = malloc(sizeof(*c));

    if (c == NULL) {
        return NULL;
    }
    *c = *l;
    c->args = malloc(bytes ? bytes : 1);
    if (c->args == NULL) {
        free(c);
        return NULL;
    }
    memcpy(c->args, l->args, bytes);
    c->queued = queued;
    atomic_fetch_add(&l->k->module->refs, 1);
    if (queued) {
        atomic_fetch_add(&l->k->module->queued, 1);
    }
    return c;
}

typedef struct dk_run {
    const dk_launch *l;
    void **argv;
    void *shared;
} dk_run;

/* Under the memory's lock (dm_run_resolved): every block, in order. */
static void
run_blocks(void *ctx, void *const *hosts)
{
    dk_run *run = ctx;
    const dk_launch *l = run->l;
    const dk_kernel *k = l->k;
    native_block b;
    int j = 0;

    for (int i = 0; i < k->nparams; i++) {
        run->argv[i] = k->params[i].kind == DK_PARAM_POINTER
                           ? (void *)&hosts[j++]
                           : (void *)(l->args + k->params[i].offset);
    }
    memcpy(b.grid, l->grid, sizeof(b.grid));
    memcpy(b.block, l->block, sizeof(b.block));
    b.shared = run->shared;
    b.shared_bytes = l->shared;
    for (unsigned z = 0; z < l->grid[2]; z++) {
        for (unsigned y = 0; y < l->grid[1]; y++) {
            for (unsigned x = 0; x < l->grid[0]; x++) {
                b.index[0] = x;
                b.index[1] = y;
                b.index[2] = z;
                if (run->shared != NULL) {
                    /* Shared memory starts undefined in every block. */
                    memset(run->shared, 0xCD, l->shared);
                }
                k->fn(&b, (void *const *)run->argv);
            }
        }
    }
}

void
dk_launch_run(const dk_launch *l, const char *api)
{
    const dk_kernel *k = l->k;
    unsigned long long addrs[DK_MAX_PARAMS];
    void *hosts[DK_MAX_PARAMS];
    void *argv[DK_MAX_PARAMS];
    dk_run run = {l, argv, NULL};
    int n = 0;

    if (atomic_load(&k->module->unloaded)) {
        atomic_fetch_add(&dk_misuse, 1);
        fprintf(stderr, "driver double: %s: launch of kernel %s of an "
                "unloaded module\n", api, k->name);
        return;
    }
    if (k->nparams > DK_MAX_PARAMS) {
        return;
    }
    for (int i = 0; i < k->nparams; i++) {
        if (k->params[i].kind == DK_PARAM_POINTER) {
            uint64_t a64 = 0;
            uint32_t a32 = 0;

            if (k->params[i].size == 4) {
                memcpy(&a32, l->args + k->params[i].offset, 4);
                a64 = a32;
            }
            else {
                memcpy(&a64, l->args + k->params[i].offset, 8);
            }
            addrs[n++] = a64;
        }
    }
    if (l->shared > 0) {
        run.shared = malloc(l->shared);
        if (run.shared == NULL) {
            fprintf(stderr, "driver double: %s: no memory for %zu bytes of "
                    "shared memory\n", api, l->shared);
            return;
        }
    }
    dm_run_resolved(api, n, addrs, hosts, run_blocks, &run);
    free(run.shared);
}

void
dk_launch_free(dk_launch *l)
{
    if (l == NULL) {
        return;
    }
    if (l->queued) {
        atomic_fetch_sub(&l->k->module->queued, 1);
    }
    module_unref(l->k->module);
    free(l->args);
    free(l);
}

long long
dk_live(const char *kind)
{
    if (kind == NULL) {
        return -1;
    }
    if (strcmp(kind, "module") == 0) {
        return atomic_load(&dk_modules);
    }
    if (strcmp(kind, "kernel_misuse") == 0) {
        return atomic_load(&dk_misuse);
    }
    return -1;
}

void
dk_reset_detectors(void)
{
    atomic_store(&dk_misuse, 0);
}
