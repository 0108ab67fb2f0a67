/*
 * check_backend_slots.c - runs the dispatcher's registration check
 * (csrc/core/backend_check.c, the code the extension links) on descriptors
 * with slots left out, and prints one line per case:
 *
 *     <case>\t<why the check refuses it, or "complete">
 *
 * tests/test_backend_slots.py compiles it with backend_check.c, runs it
 * and checks every line.  Every pointer of a "complete" descriptor is a
 * non-NULL byte pattern: the check only compares slots with NULL.
 */
#include "../../csrc/core/backend_check.h"

#include <stdio.h>
#include <string.h>

#define GRAPH_SLOTS(X)                                                    \
    X(graph_capture_begin) X(graph_capture_end) X(graph_instantiate)      \
    X(graph_launch) X(graph_destroy)
#define MEMORY_SLOTS(X) X(mem_alloc) X(mem_free) X(mem_copy) X(mem_fill)
#define HOST_SLOTS(X) X(host_alloc) X(host_free)
#define FOREIGN_SLOTS(X) X(pointer_info) X(pointer_range)
#define KERNEL_SLOTS(X)                                                   \
    X(module_load) X(module_unload) X(kernel_get) X(kernel_release)       \
    X(launch)
#define IPC_SLOTS(X)                                                      \
    X(ipc_mem_export) X(ipc_mem_open) X(ipc_mem_close)                    \
    X(ipc_event_export) X(ipc_event_open)

static acc_backend complete;

static void
report(const char *name, const acc_backend *b)
{
    char why[160];
    const char *result = acc_backend_incomplete(b, why, sizeof(why));

    printf("%s\t%s\n", name, result != NULL ? result : "complete");
}

/* The complete descriptor with one slot left out. */
#define WITHOUT(slot)                                                     \
    do {                                                                  \
        acc_backend b = complete;                                         \
        b.slot = NULL;                                                    \
        report("without " #slot, &b);                                     \
    } while (0);

/* The complete descriptor without a whole group. */
#define CLEAR(slot) b.slot = NULL;

int
main(void)
{
    memset(&complete, 0xA5, sizeof(complete));
    report("complete", &complete);
    WITHOUT(probe)
    WITHOUT(processor_label)
    WITHOUT(event_synchronize)
    GRAPH_SLOTS(WITHOUT)
    MEMORY_SLOTS(WITHOUT)
    HOST_SLOTS(WITHOUT)
    FOREIGN_SLOTS(WITHOUT)
    KERNEL_SLOTS(WITHOUT)
    IPC_SLOTS(WITHOUT)
    {
        acc_backend b = complete;
        GRAPH_SLOTS(CLEAR)
        report("without graphs", &b);
    }
    {
        acc_backend b = complete;
        MEMORY_SLOTS(CLEAR)
        IPC_SLOTS(CLEAR)
        report("without device memory", &b);
    }
    {
        acc_backend b = complete;
        IPC_SLOTS(CLEAR)
        report("without interprocess", &b);
    }
    {
        acc_backend b = complete;
        MEMORY_SLOTS(CLEAR)
        report("interprocess without device memory", &b);
    }
    {
        acc_backend b = complete;
        HOST_SLOTS(CLEAR)
        report("without host memory", &b);
    }
    {
        acc_backend b = complete;
        FOREIGN_SLOTS(CLEAR)
        report("without foreign memory", &b);
    }
    {
        acc_backend b = complete;
        KERNEL_SLOTS(CLEAR)
        b.code_formats = 0;
        b.compiler_open = NULL;
        b.compile = NULL;
        b.source_formats = 0;
        report("without kernels", &b);
    }
    {
        acc_backend b = complete;
        b.compiler_open = NULL;
        b.compile = NULL;
        b.source_formats = 0;
        report("without compilers", &b);
    }
    {
        acc_backend b = complete;
        b.compile = NULL;
        report("without compile", &b);
    }
    {
        acc_backend b = complete;
        b.source_formats = 0;
        report("compilers without source_formats", &b);
    }
    {
        acc_backend b = complete;
        b.compiler_open = NULL;
        b.compile = NULL;
        report("source_formats without compilers", &b);
    }
    {
        acc_backend b = complete;
        KERNEL_SLOTS(CLEAR)
        b.code_formats = 0;
        report("compilers without kernels", &b);
    }
    {
        acc_backend b = complete;
        b.code_formats = 0;
        report("kernels without code_formats", &b);
    }
    {
        acc_backend b = complete;
        KERNEL_SLOTS(CLEAR)
        report("code_formats without kernels", &b);
    }
    {
        acc_backend b = complete;
        MEMORY_SLOTS(CLEAR)
        HOST_SLOTS(CLEAR)
        GRAPH_SLOTS(CLEAR)
        b.mem_fill = complete.mem_fill;
        report("only mem_fill", &b);
    }
    return 0;
}
