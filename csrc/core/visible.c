/*
 * visible.c - ACCELERATOR_VISIBLE_DEVICES: the parser of its value and
 * the check that a backend can take it.  The registry applies it to the
 * first backend that has devices.
 */
#include "core.h"

#include <ctype.h>
#include <string.h>

#define VISIBLE_EXPECTED \
    "expected a comma-separated list of distinct device indices, e.g. 2,0"

void
acc_visible_parse(acc_visible *v, const char *text)
{
    const char *p = text;

    memset(v, 0, sizeof(*v));
    v->text = text;
    if (text == NULL) {
        return;
    }
    while (isspace((unsigned char)*p)) {
        p++;
    }
    if (*p == '\0') {
        return;
    }
    for (;;) {
        const char *start;
        long index = 0;

        while (isspace((unsigned char)*p)) {
            p++;
        }
        start = p;
        while (isdigit((unsigned char)*p) && index < ACC_MAX_DEVICES * 1000) {
            index = index * 10 + (*p - '0');
            p++;
        }
        while (isspace((unsigned char)*p)) {
            p++;
        }
        if (p == start || (*p != ',' && *p != '\0')) {
            const char *end = strchr(start, ',');
            int len = end ? (int)(end - start) : (int)strlen(start);

            acc_format(v->error, sizeof(v->error),
                       "ACCELERATOR_VISIBLE_DEVICES='%s': '%.*s' is not a "
                       "device index (" VISIBLE_EXPECTED ")", text, len,
                       start);
            return;
        }
        if (v->count == ACC_MAX_DEVICES) {
            acc_format(v->error, sizeof(v->error),
                       "ACCELERATOR_VISIBLE_DEVICES='%s' names more than %d "
                       "devices", text, ACC_MAX_DEVICES);
            return;
        }
        for (int i = 0; i < v->count; i++) {
            if (v->order[i] == index) {
                acc_format(v->error, sizeof(v->error),
                           "ACCELERATOR_VISIBLE_DEVICES='%s' names device %ld "
                           "twice (" VISIBLE_EXPECTED ")", text, index);
                return;
            }
        }
        v->order[v->count++] = (int)index;
        if (*p == '\0') {
            return;
        }
        p++;
    }
}

acc_status
acc_visible_check(const acc_visible *v, const acc_backend *b, int count,
                  char *why, size_t size)
{
    if (v->text == NULL) {
        return ACC_OK;
    }
    if (v->error[0] != '\0') {
        acc_format(why, size, "%s", v->error);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (v->count == 0) {
        acc_format(why, size, "ACCELERATOR_VISIBLE_DEVICES is empty: no "
                   "device is visible");
        return ACC_ERR_NO_ACCELERATOR;
    }
    for (int i = 0; i < v->count; i++) {
        if (v->order[i] >= count) {
            acc_format(why, size, "ACCELERATOR_VISIBLE_DEVICES='%s' names "
                       "device %d, but the %s backend has %d device%s "
                       "(indices 0 to %d)", v->text, v->order[i], b->name,
                       count, count == 1 ? "" : "s", count - 1);
            return ACC_ERR_INVALID_ARGUMENT;
        }
    }
    if (b->select_devices == NULL) {
        acc_format(why, size, "ACCELERATOR_VISIBLE_DEVICES is set, but the "
                   "%s backend does not support restricting its devices",
                   b->name);
        return ACC_ERR_UNSUPPORTED;
    }
    return ACC_OK;
}
