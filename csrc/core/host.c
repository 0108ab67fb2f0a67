/*
 * host.c - the host services table (accelerator/backend.h's acc_host)
 * that the core hands every backend, built-in or plugin, through its
 * attach slot: base's tracing and error wording, reached through
 * pointers, so that a backend links against no symbol of the core.
 */
#include "core.h"

const acc_host acc_core_host = {
    .abi_major = ACCELERATOR_BACKEND_ABI_MAJOR,
    .abi_minor = ACCELERATOR_BACKEND_ABI_MINOR,
    .struct_size = sizeof(acc_host),
    .trace = acc_vtrace,
    .error_set = acc_verror_set,
};
