/*
 * backend_check.h - registration's check of a backend's table
 * (backend_check.c), for built-in backends and plugins alike.
 */
#ifndef ACCEL_BACKEND_CHECK_H
#define ACCEL_BACKEND_CHECK_H

#include <accelerator/backend.h>

#include <stddef.h>

/* NULL when every required slot is filled and each optional group is all
 * or none; otherwise why (what is missing, written into why) is
 * returned. */
const char *acc_backend_incomplete(const acc_backend *b, char *why,
                                   size_t size);

#endif /* ACCEL_BACKEND_CHECK_H */
