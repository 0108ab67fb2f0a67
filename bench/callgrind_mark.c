/*
 * callgrind_mark.c - lets Python cut a callgrind profile into parts.
 *
 * bench_api.py --callgrind builds this into a shared library and calls it
 * through ctypes: cg_mark(label) dumps the instructions counted since the
 * previous dump into a part whose trigger is "Client Request: <label>".
 * Outside valgrind the request is a no-op and cg_running() returns 0.
 */
#include <valgrind/callgrind.h>

__attribute__((visibility("default"))) void
cg_mark(const char *label)
{
    CALLGRIND_DUMP_STATS_AT(label);
}

__attribute__((visibility("default"))) int
cg_running(void)
{
    return (int)RUNNING_ON_VALGRIND;
}
