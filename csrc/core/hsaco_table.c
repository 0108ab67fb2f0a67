/*
 * hsaco_table.c - the kernels of an AMD GPU code object, from its
 * metadata (hsaco_table.h).
 *
 * ROCm 5.2 has no call that tells a kernel's parameters, but every code
 * object says them itself: its NT_AMDGPU_METADATA note (code object v3
 * and later) holds a MessagePack map whose "amdhsa.kernels" lists each
 * kernel's name, descriptor symbol, arguments (size, offset, value kind)
 * and resources.  The core reads it, so that a launch's arguments are
 * counted and sized on HIP as on CUDA, on the double and on a GPU alike.
 *
 * The image is untrusted: every read is checked against the bytes given
 * (the ELF headers, the notes, each MessagePack length), nesting is
 * bounded, and arrays grow as their elements are read rather than by
 * the counts they claim.
 */
#include "hsaco_table.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EM_AMDGPU 224
#define SHT_NOTE 7
#define PT_NOTE 4
#define NT_AMDGPU_METADATA 32
#define MP_MAX_DEPTH 32

struct acc_hsaco_table {
    char target[128];
    int count, capacity;
    acc_hsaco_kernel *kernels;
};

static void
say(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
say(char *why, size_t why_size, const char *fmt, ...)
{
    va_list ap;

    if (why == NULL || why_size == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(why, why_size, fmt, ap);
    va_end(ap);
}

/* ELF ---------------------------------------------------------------- */

/* Whether [off, off + len) lies within size bytes. */
static int
fits(unsigned long long off, unsigned long long len, size_t size)
{
    return off <= size && len <= size - off;
}

/* The n-byte little-endian field at p (ELFDATA2LSB: checked first). */
static unsigned long long
le(const unsigned char *p, int n)
{
    unsigned long long v = 0;

    while (n-- > 0) {
        v = v << 8 | p[n];
    }
    return v;
}

/* The description of the note owned by "AMDGPU" of type
 * NT_AMDGPU_METADATA among the notes at p (size bytes), or NULL.  Names
 * and descriptions are padded to 4 bytes (the AMDGPU ABI). */
static const unsigned char *
metadata_note(const unsigned char *p, size_t size, size_t *len)
{
    size_t at = 0;

    while (size - at >= 12) {
        unsigned long long name = le(p + at, 4), desc = le(p + at + 4, 4);
        unsigned long long type = le(p + at + 8, 4);
        unsigned long long name_pad = (name + 3) & ~3ULL;
        unsigned long long desc_pad = (desc + 3) & ~3ULL;

        at += 12;
        if (!fits(at, name_pad, size) || !fits(at + name_pad, desc, size)) {
            return NULL;
        }
        if (name == 7 && memcmp(p + at, "AMDGPU", 7) == 0
            && type == NT_AMDGPU_METADATA) {
            *len = (size_t)desc;
            return p + at + name_pad;
        }
        if (!fits(at + name_pad, desc_pad, size)) {
            return NULL;
        }
        at += (size_t)(name_pad + desc_pad);
    }
    return NULL;
}

/* The metadata of an ELF64 code object: the note in a SHT_NOTE section,
 * else (no section headers) in a PT_NOTE segment. */
static const unsigned char *
find_metadata(const unsigned char *p, size_t size, size_t *len, char *why,
              size_t why_size)
{
    /* Per table: the offset of its start, entry size and count in the
     * ELF header; in an entry, its type, offset and size. */
    static const struct {
        int start, entsize, count, min_entry, type, wanted, off, bytes;
    } tables[2] = {
        {40, 58, 60, 64, 4, SHT_NOTE, 24, 32},  /* section headers */
        {32, 54, 56, 56, 0, PT_NOTE, 8, 32},    /* program headers */
    };

    if (size < 64 || memcmp(p, "\177ELF", 4) != 0 || p[4] != 2
        || p[5] != 1) {
        say(why, why_size, "not a 64-bit little-endian ELF image");
        return NULL;
    }
    if (le(p + 18, 2) != EM_AMDGPU) {
        say(why, why_size, "an ELF image for machine %llu, not an AMD "
            "GPU's (%d)", le(p + 18, 2), EM_AMDGPU);
        return NULL;
    }
    for (int t = 0; t < 2; t++) {
        unsigned long long start = le(p + tables[t].start, 8);
        unsigned long long entsize = le(p + tables[t].entsize, 2);
        unsigned long long count = le(p + tables[t].count, 2);

        if (count == 0) {
            continue;
        }
        if (entsize < (unsigned long long)tables[t].min_entry
            || !fits(start, entsize * count, size)) {
            say(why, why_size, "its %s headers lie beyond its %zu bytes",
                t == 0 ? "section" : "program", size);
            return NULL;
        }
        for (unsigned long long i = 0; i < count; i++) {
            const unsigned char *e = p + start + i * entsize;
            unsigned long long off = le(e + tables[t].off, 8);
            unsigned long long bytes = le(e + tables[t].bytes, 8);
            const unsigned char *note;

            if (le(e + tables[t].type, 4) != (unsigned)tables[t].wanted) {
                continue;
            }
            if (!fits(off, bytes, size)) {
                say(why, why_size, "a note lies beyond its %zu bytes",
                    size);
                return NULL;
            }
            note = metadata_note(p + off, (size_t)bytes, len);
            if (note != NULL) {
                return note;
            }
        }
        if (t == 0) {
            break;   /* sections told it: no metadata */
        }
    }
    say(why, why_size, "no NT_AMDGPU_METADATA note (not code object v3 "
        "or later)");
    return NULL;
}

/* MessagePack -------------------------------------------------------- */

/* A cursor over MessagePack bytes; bad once anything did not fit. */
typedef struct mp {
    const unsigned char *p;
    size_t size, at;
    int bad;
} mp;

typedef enum mp_type {
    MP_BAD, MP_UINT, MP_NEG, MP_NIL, MP_BOOL, MP_FLOAT, MP_STR, MP_BIN,
    MP_EXT, MP_ARRAY, MP_MAP,
} mp_type;

/* The n-byte big-endian unsigned number next, consumed. */
static unsigned long long
mp_be(mp *c, unsigned n)
{
    unsigned long long v = 0;

    if (c->bad || n > c->size - c->at) {
        c->bad = 1;
        return 0;
    }
    while (n-- > 0) {
        v = v << 8 | c->p[c->at++];
    }
    return v;
}

/* The next value's header: its type, and in *n its value (integers,
 * booleans), its bytes (strings, binaries, extensions with their type
 * byte, floats) or its count (arrays, maps: of pairs). */
static mp_type
mp_head(mp *c, unsigned long long *n)
{
    unsigned b = (unsigned)mp_be(c, 1);

    *n = 0;
    if (c->bad) {
        return MP_BAD;
    }
    if (b <= 0x7f || b >= 0xe0) {   /* positive and negative fixint */
        *n = b;
        return b <= 0x7f ? MP_UINT : MP_NEG;
    }
    if (b <= 0x8f || (b >= 0x90 && b <= 0x9f)) {
        *n = b & 0x0f;
        return b <= 0x8f ? MP_MAP : MP_ARRAY;
    }
    if (b <= 0xbf) {
        *n = b & 0x1f;
        return MP_STR;
    }
    switch (b) {
    case 0xc0:
        return MP_NIL;
    case 0xc2:
    case 0xc3:
        *n = b & 1;
        return MP_BOOL;
    case 0xc4:
    case 0xc5:
    case 0xc6:
        *n = mp_be(c, 1u << (b - 0xc4));
        return c->bad ? MP_BAD : MP_BIN;
    case 0xc7:
    case 0xc8:
    case 0xc9:
        *n = mp_be(c, 1u << (b - 0xc7)) + 1;
        return c->bad ? MP_BAD : MP_EXT;
    case 0xca:
    case 0xcb:
        *n = b == 0xca ? 4 : 8;
        return MP_FLOAT;
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
        *n = mp_be(c, 1u << (b - 0xcc));
        return c->bad ? MP_BAD : MP_UINT;
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        unsigned bytes = 1u << (b - 0xd0);

        *n = mp_be(c, bytes);
        return c->bad ? MP_BAD
               : (*n >> (bytes * 8 - 1)) & 1 ? MP_NEG : MP_UINT;
    }
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
        *n = (1u << (b - 0xd4)) + 1;
        return MP_EXT;
    case 0xd9:
    case 0xda:
    case 0xdb:
        *n = mp_be(c, 1u << (b - 0xd9));
        return c->bad ? MP_BAD : MP_STR;
    case 0xdc:
    case 0xdd:
        *n = mp_be(c, b == 0xdc ? 2 : 4);
        return c->bad ? MP_BAD : MP_ARRAY;
    case 0xde:
    case 0xdf:
        *n = mp_be(c, b == 0xde ? 2 : 4);
        return c->bad ? MP_BAD : MP_MAP;
    }
    c->bad = 1;   /* 0xc1: never used */
    return MP_BAD;
}

/* n bytes consumed; their start, or NULL when they do not fit. */
static const unsigned char *
mp_bytes(mp *c, unsigned long long n)
{
    const unsigned char *at = c->p + c->at;

    if (c->bad || n > c->size - c->at) {
        c->bad = 1;
        return NULL;
    }
    c->at += (size_t)n;
    return at;
}

/* The next value skipped, with what it holds. */
static void
mp_skip(mp *c, int depth)
{
    unsigned long long n;
    mp_type type = mp_head(c, &n);

    if (depth > MP_MAX_DEPTH) {
        c->bad = 1;
        return;
    }
    switch (type) {
    case MP_FLOAT:
    case MP_STR:
    case MP_BIN:
    case MP_EXT:
        mp_bytes(c, n);
        break;
    case MP_MAP:
    case MP_ARRAY:
        /* Each value takes a byte at least: a false count ends with the
         * bytes. */
        for (unsigned long long i = 0; i < n && !c->bad; i++) {
            mp_skip(c, depth + 1);
            if (type == MP_MAP) {
                mp_skip(c, depth + 1);
            }
        }
        break;
    default:
        break;
    }
}

/* The next value as a string (not NUL-terminated), or NULL (skipped)
 * when it is none. */
static const char *
mp_str(mp *c, size_t *len)
{
    unsigned long long n;
    size_t at = c->at;

    if (mp_head(c, &n) != MP_STR) {
        c->at = at;
        mp_skip(c, 0);
        return NULL;
    }
    *len = (size_t)n;
    return (const char *)mp_bytes(c, n);
}

/* The next value as a count of type (MP_ARRAY, MP_MAP); bad otherwise. */
static unsigned long long
mp_count(mp *c, mp_type type)
{
    unsigned long long n;

    if (mp_head(c, &n) != type) {
        c->bad = 1;
        return 0;
    }
    return n;
}

/* The next value as a number up to limit; bad otherwise. */
static long long
mp_number(mp *c, long long limit)
{
    unsigned long long n;

    if (mp_head(c, &n) != MP_UINT || n > (unsigned long long)limit) {
        c->bad = 1;
        return -1;
    }
    return (long long)n;
}

static int
is_key(const char *key, size_t len, const char *word)
{
    return key != NULL && len == strlen(word) && memcmp(key, word, len) == 0;
}

/* The table ---------------------------------------------------------- */

/* A copy of a string of the metadata; NULL for one that holds a NUL. */
static char *
copy_text(const char *s, size_t len)
{
    char *out;

    if (s == NULL || memchr(s, '\0', len) != NULL) {
        return NULL;
    }
    out = malloc(len + 1);
    if (out != NULL) {
        memcpy(out, s, len);
        out[len] = '\0';
    }
    return out;
}

static void
kernel_free(acc_hsaco_kernel *k)
{
    free(k->name);
    free(k->symbol);
    free(k->params);
}

/* One map of ".args": appended to k unless it is hidden; 0 when it is
 * malformed or memory ran out (*oom). */
static int
read_arg(mp *c, acc_hsaco_kernel *k, int *capacity, int *oom)
{
    unsigned long long pairs = mp_count(c, MP_MAP);
    long long size = -1, offset = -1;
    const char *kind = NULL;
    size_t kind_len = 0;

    for (unsigned long long i = 0; i < pairs && !c->bad; i++) {
        size_t len = 0;
        const char *key = mp_str(c, &len);

        if (is_key(key, len, ".size")) {
            size = mp_number(c, 1LL << 32);
        }
        else if (is_key(key, len, ".offset")) {
            offset = mp_number(c, 1LL << 32);
        }
        else if (is_key(key, len, ".value_kind")) {
            kind = mp_str(c, &kind_len);
        }
        else {
            mp_skip(c, 1);
        }
    }
    if (c->bad || size <= 0 || offset < 0 || kind == NULL) {
        return 0;
    }
    if (kind_len >= 7 && memcmp(kind, "hidden_", 7) == 0) {
        return 1;   /* the runtime's, not the launch's */
    }
    if (k->nparams < 0) {
        return 1;   /* more than kept */
    }
    if (k->nparams == ACC_MAX_KERNEL_PARAMS) {
        k->nparams = -1;
        return 1;
    }
    if (k->nparams == *capacity) {
        int grown = *capacity ? *capacity * 2 : 8;
        acc_hsaco_arg *params = realloc(k->params,
                                        (size_t)grown * sizeof(*params));

        if (params == NULL) {
            *oom = 1;
            return 0;
        }
        k->params = params;
        *capacity = grown;
    }
    k->params[k->nparams].size = (size_t)size;
    k->params[k->nparams].offset = (size_t)offset;
    k->params[k->nparams].kind =
        is_key(kind, kind_len, "global_buffer") ? ACC_PARAM_POINTER
        : is_key(kind, kind_len, "by_value")    ? ACC_PARAM_OTHER
                                                : ACC_PARAM_UNKNOWN;
    k->nparams++;
    return 1;
}

/* One map of "amdhsa.kernels" into k; 0 when it is malformed or memory
 * ran out (*oom). */
static int
read_kernel(mp *c, acc_hsaco_kernel *k, int *oom)
{
    static const struct {
        const char *key;
        size_t field;
    } numbers[] = {
        {".kernarg_segment_size", offsetof(acc_hsaco_kernel, kernarg_bytes)},
        {".max_flat_workgroup_size",
         offsetof(acc_hsaco_kernel, max_threads)},
        {".group_segment_fixed_size",
         offsetof(acc_hsaco_kernel, group_bytes)},
        {".private_segment_fixed_size",
         offsetof(acc_hsaco_kernel, private_bytes)},
        {".sgpr_count", offsetof(acc_hsaco_kernel, sgprs)},
        {".vgpr_count", offsetof(acc_hsaco_kernel, vgprs)},
    };
    unsigned long long pairs = mp_count(c, MP_MAP);
    int capacity = 0;

    memset(k, 0, sizeof(*k));
    k->kernarg_bytes = k->max_threads = k->group_bytes = -1;
    k->private_bytes = k->sgprs = k->vgprs = -1;
    for (unsigned long long i = 0; i < pairs && !c->bad && !*oom; i++) {
        size_t len = 0, n = sizeof(numbers) / sizeof(numbers[0]), j;
        const char *key = mp_str(c, &len);

        for (j = 0; j < n && !is_key(key, len, numbers[j].key); j++) {
        }
        if (j < n) {
            *(long long *)((char *)k + numbers[j].field) =
                mp_number(c, 1LL << 40);
        }
        else if (is_key(key, len, ".name") || is_key(key, len, ".symbol")) {
            char **to = key[1] == 'n' ? &k->name : &k->symbol;
            const char *s = mp_str(c, &len);

            free(*to);
            *to = copy_text(s, len);
            if (*to == NULL) {
                *oom = s != NULL && memchr(s, '\0', len) == NULL;
                c->bad = !*oom;
            }
        }
        else if (is_key(key, len, ".args")) {
            unsigned long long args = mp_count(c, MP_ARRAY);

            for (unsigned long long a = 0; a < args && !c->bad; a++) {
                if (!read_arg(c, k, &capacity, oom)) {
                    c->bad = 1;
                }
            }
        }
        else {
            mp_skip(c, 1);
        }
    }
    if (c->bad || *oom || k->name == NULL || k->name[0] == '\0'
        || k->symbol == NULL) {
        return 0;
    }
    /* Each argument lies within the arguments the kernel takes. */
    for (int a = 0; a < k->nparams && k->kernarg_bytes >= 0; a++) {
        if (k->params[a].offset > (size_t)k->kernarg_bytes
            || k->params[a].size
                   > (size_t)k->kernarg_bytes - k->params[a].offset) {
            return 0;
        }
    }
    return 1;
}

/* "amdhsa.kernels" into t; 0 when malformed or out of memory (*oom). */
static int
read_kernels(mp *c, acc_hsaco_table *t, int *oom)
{
    unsigned long long n = mp_count(c, MP_ARRAY);

    for (unsigned long long i = 0; i < n && !c->bad; i++) {
        if (t->count == t->capacity) {
            int grown = t->capacity ? t->capacity * 2 : 8;
            acc_hsaco_kernel *kernels =
                grown > 0 ? realloc(t->kernels,
                                    (size_t)grown * sizeof(*kernels))
                          : NULL;

            if (kernels == NULL) {
                *oom = 1;
                return 0;
            }
            t->kernels = kernels;
            t->capacity = grown;
        }
        if (!read_kernel(c, &t->kernels[t->count], oom)) {
            kernel_free(&t->kernels[t->count]);
            return 0;
        }
        t->count++;
    }
    return !c->bad;
}

acc_hsaco_table *
acc_hsaco_table_read(const void *image, size_t size, char *why,
                     size_t why_size)
{
    acc_hsaco_table *t;
    unsigned long long pairs;
    int oom = 0, kernels = 0;
    mp c = {0};

    say(why, why_size, "%s", "");
    if (image == NULL) {
        say(why, why_size, "no image");
        return NULL;
    }
    c.p = find_metadata(image, size, &c.size, why, why_size);
    if (c.p == NULL) {
        return NULL;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        say(why, why_size, "out of host memory");
        return NULL;
    }
    pairs = mp_count(&c, MP_MAP);
    for (unsigned long long i = 0; i < pairs && !c.bad && !oom; i++) {
        size_t len = 0;
        const char *key = mp_str(&c, &len);

        if (is_key(key, len, "amdhsa.kernels") && !kernels) {
            kernels = 1;
            if (!read_kernels(&c, t, &oom)) {
                c.bad = 1;
            }
        }
        else if (is_key(key, len, "amdhsa.target")) {
            const char *s = mp_str(&c, &len);

            if (s == NULL || len >= sizeof(t->target)
                || memchr(s, '\0', len) != NULL) {
                c.bad = 1;
            }
            else {
                memcpy(t->target, s, len);
                t->target[len] = '\0';
            }
        }
        else {
            mp_skip(&c, 1);
        }
    }
    if (c.bad || oom || !kernels) {
        say(why, why_size, "%s", oom ? "out of host memory"
                                 : !c.bad ? "its metadata lists no "
                                            "amdhsa.kernels"
                                 : "its metadata is damaged (malformed "
                                   "MessagePack or amdhsa.kernels)");
        acc_hsaco_table_free(t);
        return NULL;
    }
    return t;
}

int
acc_hsaco_table_count(const acc_hsaco_table *t)
{
    return t != NULL ? t->count : 0;
}

const acc_hsaco_kernel *
acc_hsaco_table_at(const acc_hsaco_table *t, int i)
{
    return t != NULL && i >= 0 && i < t->count ? &t->kernels[i] : NULL;
}

const acc_hsaco_kernel *
acc_hsaco_table_find(const acc_hsaco_table *t, const char *name)
{
    for (int i = 0; t != NULL && name != NULL && i < t->count; i++) {
        if (strcmp(t->kernels[i].name, name) == 0) {
            return &t->kernels[i];
        }
    }
    return NULL;
}

const char *
acc_hsaco_table_target(const acc_hsaco_table *t)
{
    return t != NULL ? t->target : "";
}

int
acc_hsaco_table_params(const acc_hsaco_table *t, const char *name,
                       acc_kernel_info *info)
{
    const acc_hsaco_kernel *k = acc_hsaco_table_find(t, name);

    if (k == NULL || k->nparams < 0) {
        return 0;
    }
    info->nparams = k->nparams;
    for (int i = 0; i < k->nparams; i++) {
        info->params[i].size = k->params[i].size;
        info->params[i].kind = k->params[i].kind;
    }
    return 1;
}

void
acc_hsaco_table_free(acc_hsaco_table *t)
{
    if (t == NULL) {
        return;
    }
    for (int i = 0; i < t->count; i++) {
        kernel_free(&t->kernels[i]);
    }
    free(t->kernels);
    free(t);
}
