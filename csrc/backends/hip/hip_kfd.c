/*
 * hip_kfd.c - count AMD GPUs through the KFD topology, so that
 * is_available() and device_count() never initialise the HIP runtime.
 *
 * Every HIP call initialises ROCm's runtime (hipGetDeviceCount included:
 * there is no count before initialisation), which opens /dev/kfd and
 * starts threads; a process that did so cannot use the GPU in a fork()
 * child.  The kernel driver publishes its topology in sysfs without any
 * of that: /sys/class/kfd/kfd/topology/nodes/<n>/gpu_id is nonzero for a
 * GPU node and 0 for a CPU node, which is how rocm-smi and rocminfo tell
 * them apart.  The runtime then initialises at the first real use
 * (hip.c's initialize).
 *
 * The runtime's own device filters (HIP_VISIBLE_DEVICES,
 * ROCR_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL) are
 * not reproduced: where one is set, the runtime counts instead.
 * ACCELERATOR_KFD_TOPOLOGY names another nodes folder (a container's
 * sysfs mounted elsewhere, a test's), or "none" to always let the runtime
 * count.
 */
#define _GNU_SOURCE
#include <accelerator/backend.h>
#include "hip_kfd.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KFD_DEFAULT_NODES "/sys/class/kfd/kfd/topology/nodes"

/* The runtime's variables that choose its devices. */
static const char *const kfd_filters[] = {
    "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
};

/* 1: the node is a GPU; 0: not (a CPU node); -1: unreadable. */
static int
kfd_node_is_gpu(const char *nodes, const char *node)
{
    char path[4096], text[64], *end;
    unsigned long long id;
    FILE *f;
    size_t n;

    if (snprintf(path, sizeof(path), "%s/%s/gpu_id", nodes, node)
        >= (int)sizeof(path)) {
        return -1;
    }
    f = fopen(path, "re");
    if (f == NULL) {
        return -1;
    }
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    errno = 0;
    id = strtoull(text, &end, 10);
    if (end == text || errno != 0 || (*end != '\0' && !isspace(*end))) {
        return -1;
    }
    return id != 0;
}

int
acc_hip_kfd_count(int *count, char *how, size_t size)
{
    const char *nodes = getenv("ACCELERATOR_KFD_TOPOLOGY");
    struct dirent *entry;
    int gpus = 0, seen = 0, gpu;
    DIR *dir;

    *count = 0;
    if (nodes != NULL && strcmp(nodes, "none") == 0) {
        acc_format(how, size, "hipGetDeviceCount "
                   "(ACCELERATOR_KFD_TOPOLOGY=none)");
        return 0;
    }
    if (nodes == NULL || nodes[0] == '\0') {
        nodes = KFD_DEFAULT_NODES;
    }
    for (size_t i = 0; i < sizeof(kfd_filters) / sizeof(*kfd_filters);
         i++) {
        if (getenv(kfd_filters[i]) != NULL) {
            acc_format(how, size, "hipGetDeviceCount (KFD topology not "
                       "used: %s is set)", kfd_filters[i]);
            return 0;
        }
    }
    dir = opendir(nodes);
    if (dir == NULL) {
        acc_format(how, size, "hipGetDeviceCount (no KFD topology at %s: "
                   "%s)", nodes, strerror(errno));
        return 0;
    }
    while ((entry = readdir(dir)) != NULL) {
        if (!isdigit((unsigned char)entry->d_name[0])) {
            continue;
        }
        gpu = kfd_node_is_gpu(nodes, entry->d_name);
        if (gpu < 0) {
            /* entry lives in dir: word the reason before closing it.
             * The reason before the path, which a long one cuts. */
            acc_format(how, size, "hipGetDeviceCount (KFD topology not "
                       "used: a node's gpu_id is unreadable: %s/%s/gpu_id)",
                       nodes, entry->d_name);
            closedir(dir);
            return 0;
        }
        seen++;
        gpus += gpu;
    }
    closedir(dir);
    if (seen == 0) {
        acc_format(how, size, "hipGetDeviceCount (the KFD topology at %s "
                   "has no nodes)", nodes);
        return 0;
    }
    *count = gpus;
    acc_format(how, size, "KFD topology (%s)", nodes);
    return 1;
}
