/*
 * backend_check.c - the check a backend passes when the dispatcher
 * registers it: every required slot filled, and each group of optional
 * slots filled all or none (backend.h), so that no call site tests a slot
 * that registration vouched for.
 *
 * Plain C, no Python objects.
 */
#include "backend_check.h"

#include <stdio.h>

/* The slots every backend fills (backend.h). */
#define REQUIRED_SLOTS(X)                                                  \
    X(name) X(device_type) X(display_type) X(processor_label) X(probe)    \
    X(device_synchronize) X(stream_default) X(stream_create)               \
    X(stream_destroy) X(stream_query)                                      \
    X(stream_synchronize) X(stream_wait_event) X(event_create)             \
    X(event_destroy) X(event_record) X(event_query) X(event_synchronize)

/* The optional groups: all of a group's slots or none (backend.h). */
#define GRAPH_SLOTS(X)                                                     \
    X(graph_capture_begin) X(graph_capture_end) X(graph_instantiate)       \
    X(graph_launch) X(graph_destroy)
#define MEMORY_SLOTS(X) X(mem_alloc) X(mem_free) X(mem_copy) X(mem_fill)
#define HOST_SLOTS(X) X(host_alloc) X(host_free)
#define FOREIGN_SLOTS(X) X(pointer_info) X(pointer_range)
#define KERNEL_SLOTS(X)                                                    \
    X(module_load) X(module_unload) X(kernel_get) X(kernel_release)        \
    X(launch)
#define COMPILER_SLOTS(X) X(compiler_open) X(compile)
#define IPC_SLOTS(X)                                                       \
    X(ipc_mem_export) X(ipc_mem_open) X(ipc_mem_close)                     \
    X(ipc_event_export) X(ipc_event_open)

#define MAX_GROUP 5

typedef struct group {
    const char *name;
    int n;
    const char *slots[MAX_GROUP];
    int filled[MAX_GROUP];
} group;

/* why, when g is filled in part; NULL when all or none. */
static const char *
group_incomplete(const group *g, char *why, size_t size)
{
    int first_null = -1, first_set = -1;

    for (int i = 0; i < g->n; i++) {
        if (g->filled[i] && first_set < 0) {
            first_set = i;
        }
        if (!g->filled[i] && first_null < 0) {
            first_null = i;
        }
    }
    if (first_null < 0 || first_set < 0) {
        return NULL;
    }
    snprintf(why, size, "its %s slots are filled in part: %s is NULL "
             "while %s is set (all or none)", g->name,
             g->slots[first_null], g->slots[first_set]);
    return why;
}

const char *
acc_backend_incomplete(const acc_backend *b, char *why, size_t size)
{
#define CHECK_SLOT(slot)                                                  \
    if (b->slot == NULL) {                                                \
        snprintf(why, size, "its required slot " #slot " is NULL");      \
        return why;                                                       \
    }
    REQUIRED_SLOTS(CHECK_SLOT)
#undef CHECK_SLOT
#define NAME(slot) #slot,
#define FILLED(slot) b->slot != NULL,
    const group groups[] = {
        {"graph", 5, {GRAPH_SLOTS(NAME)}, {GRAPH_SLOTS(FILLED)}},
        {"device memory", 4, {MEMORY_SLOTS(NAME)}, {MEMORY_SLOTS(FILLED)}},
        {"page-locked host memory", 2, {HOST_SLOTS(NAME)},
         {HOST_SLOTS(FILLED)}},
        {"foreign memory", 2, {FOREIGN_SLOTS(NAME)},
         {FOREIGN_SLOTS(FILLED)}},
        {"kernel", 5, {KERNEL_SLOTS(NAME)}, {KERNEL_SLOTS(FILLED)}},
        {"compiler", 2, {COMPILER_SLOTS(NAME)}, {COMPILER_SLOTS(FILLED)}},
        {"interprocess", 5, {IPC_SLOTS(NAME)}, {IPC_SLOTS(FILLED)}},
    };
#undef NAME
#undef FILLED
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
        if (group_incomplete(&groups[i], why, size) != NULL) {
            return why;
        }
    }
    if ((b->module_load != NULL) != (b->code_formats != 0)) {
        snprintf(why, size, "%s", b->module_load != NULL
                 ? "it has kernels but no code_formats"
                 : "it has code_formats but no kernels");
        return why;
    }
    if ((b->compile != NULL) != (b->source_formats != 0)) {
        snprintf(why, size, "%s", b->compile != NULL
                 ? "it has compiler slots but no source_formats"
                 : "it has source_formats but no compiler slots");
        return why;
    }
    if (b->compile != NULL && b->module_load == NULL) {
        snprintf(why, size, "it has compiler slots but no kernels");
        return why;
    }
    if (b->ipc_mem_export != NULL && b->mem_alloc == NULL) {
        snprintf(why, size, "it has interprocess slots but no device memory");
        return why;
    }
    return NULL;
}
