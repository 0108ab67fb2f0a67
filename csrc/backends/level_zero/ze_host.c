/*
 * ze_host.c - the Level Zero backend's pointer to the core's host
 * services (accelerator/backend.h), set by its attach slot; every file of
 * the backend traces and words errors through it (lz.h).  A file of its
 * own, calling no other, so that it adds no loop.
 */
#include "lz.h"

ACC_BACKEND_HOST_DEFINE(ze_attach)
