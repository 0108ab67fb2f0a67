/*
 * check_hsaco_table.c - the core's reader of AMD code object metadata
 * (csrc/core/hsaco_table.c) on its own, for tests/test_hsaco_table.py,
 * built there with AddressSanitizer and UBSan.
 *
 *   check_hsaco_table show FILE
 *       prints the table of FILE as JSON, or {"why": ...} when it has
 *       none.
 *   check_hsaco_table fuzz FILE ROUNDS SEED
 *       reads every prefix of FILE, then ROUNDS copies with bytes of its
 *       metadata note (and, one round in eight, of its headers) changed,
 *       each from a heap block of exactly its size, so that a read past
 *       the end is caught; prints how many were read and how many
 *       refused.
 */
#define _GNU_SOURCE
#include "../../csrc/core/hsaco_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *
slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *data = NULL;
    long n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0
        || fseek(f, 0, SEEK_SET) != 0 || (data = malloc((size_t)n)) == NULL
        || fread(data, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    *size = (size_t)n;
    return data;
}

static void
json_text(const char *s)
{
    putchar('"');
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\') {
            putchar('\\');
        }
        if ((unsigned char)*s < 0x20) {
            printf("\\u%04x", (unsigned char)*s);
        }
        else {
            putchar(*s);
        }
    }
    putchar('"');
}

static int
show(const unsigned char *image, size_t size)
{
    char why[256];
    acc_hsaco_table *t = acc_hsaco_table_read(image, size, why,
                                              sizeof(why));
    acc_kernel_info *info;

    if (t == NULL) {
        printf("{\"why\": ");
        json_text(why);
        printf("}\n");
        return 0;
    }
    info = malloc(sizeof(*info));
    if (info == NULL) {
        return 1;
    }
    printf("{\"target\": ");
    json_text(acc_hsaco_table_target(t));
    printf(", \"kernels\": [");
    for (int i = 0; i < acc_hsaco_table_count(t); i++) {
        const acc_hsaco_kernel *k = acc_hsaco_table_at(t, i);

        printf("%s{\"name\": ", i ? ", " : "");
        json_text(k->name);
        printf(", \"symbol\": ");
        json_text(k->symbol);
        printf(", \"kernarg_bytes\": %lld, \"max_threads\": %lld, "
               "\"group_bytes\": %lld, \"private_bytes\": %lld, "
               "\"sgprs\": %lld, \"vgprs\": %lld, \"nparams\": %d, "
               "\"params\": [", k->kernarg_bytes, k->max_threads,
               k->group_bytes, k->private_bytes, k->sgprs, k->vgprs,
               k->nparams);
        for (int j = 0; j < k->nparams; j++) {
            printf("%s[%zu, %zu, %d]", j ? ", " : "", k->params[j].size,
                   k->params[j].offset, (int)k->params[j].kind);
        }
        /* What the core's kernel_get takes from it. */
        info->nparams = -1;
        printf("], \"info\": %d",
               acc_hsaco_table_params(t, k->name, info));
        printf(", \"info_nparams\": %d}", info->nparams);
        if (acc_hsaco_table_find(t, k->name) != k) {
            return 1;
        }
    }
    printf("], \"unknown_found\": %d}\n",
           acc_hsaco_table_find(t, "no such kernel") != NULL);
    free(info);
    acc_hsaco_table_free(t);
    return 0;
}

/* The offset and size of the image's metadata note's description, found
 * the simple way (the test's own image is well formed): the bytes after
 * "AMDGPU\0\0". */
static size_t
note_at(const unsigned char *image, size_t size, size_t *len)
{
    const unsigned char *hit = memmem(image, size, "AMDGPU\0\0", 8);
    size_t at;

    if (hit == NULL || hit - image < 12) {
        fprintf(stderr, "no metadata note\n");
        exit(2);
    }
    at = (size_t)(hit - image) + 8;
    memcpy(len, hit - 8, 4);   /* descsz, little endian */
    *len &= 0xffffffffu;
    return at;
}

static int
fuzz(const unsigned char *image, size_t size, long rounds, unsigned seed)
{
    size_t desc_len = 0, desc = note_at(image, size, &desc_len);
    long read = 0, refused = 0;

    for (size_t cut = 0; cut <= size; cut++) {
        unsigned char *copy = malloc(cut ? cut : 1);
        acc_hsaco_table *t;

        memcpy(copy, image, cut);
        t = acc_hsaco_table_read(copy, cut, NULL, 0);
        read += t != NULL;
        refused += t == NULL;
        acc_hsaco_table_free(t);
        free(copy);
    }
    srand(seed);
    for (long r = 0; r < rounds; r++) {
        unsigned char *copy = malloc(size);
        int changes = 1 + rand() % 4;
        size_t n = size;
        acc_hsaco_table *t;
        char why[128];

        memcpy(copy, image, size);
        for (int i = 0; i < changes; i++) {
            size_t at = r % 8 == 7 ? (size_t)rand() % 128
                                   : desc + (size_t)rand() % desc_len;
            int how = rand() % 3, bit = rand() % 8;

            /* Any byte, one bit flipped, or a MessagePack header byte. */
            copy[at] = how == 0   ? (unsigned char)rand()
                       : how == 1 ? (unsigned char)(copy[at] ^ (1u << bit))
                                  : (unsigned char)(0xc0 + rand() % 0x20);
        }
        /* Also cut within the metadata, one round in four (into a block
         * of the cut's size). */
        if (r % 4 == 3) {
            size_t cut = desc + (size_t)rand() % desc_len;
            unsigned char *shorter = malloc(cut);

            memcpy(shorter, copy, cut);
            free(copy);
            copy = shorter;
            n = cut;
        }
        t = acc_hsaco_table_read(copy, n, why, sizeof(why));
        read += t != NULL;
        refused += t == NULL;
        acc_hsaco_table_free(t);
        free(copy);
    }
    printf("{\"read\": %ld, \"refused\": %ld}\n", read, refused);
    return 0;
}

int
main(int argc, char **argv)
{
    size_t size;
    unsigned char *image;
    int rc;

    if (argc < 3) {
        fprintf(stderr, "usage: %s show|fuzz FILE [ROUNDS SEED]\n",
                argv[0]);
        return 2;
    }
    image = slurp(argv[2], &size);
    if (strcmp(argv[1], "show") == 0) {
        rc = show(image, size);
    }
    else if (strcmp(argv[1], "fuzz") == 0 && argc == 5) {
        rc = fuzz(image, size, atol(argv[3]), (unsigned)atol(argv[4]));
    }
    else {
        fprintf(stderr, "unknown command %s\n", argv[1]);
        rc = 2;
    }
    free(image);
    return rc;
}
