/*
 * double_memory.h - the device memory every driver test double shares.
 *
 * Device memory is host memory behind addresses of its own: each device
 * hands out addresses from address space reserved with no access, where
 * the kernel puts mappings (0x7fxx_xxxx_xxxx on x86-64, as a real
 * driver's unified addresses: below 2**63, never a host allocation's, and
 * a device address used as a host pointer crashes at once), never reused,
 * with a gap after every allocation.  An address past the end, into a
 * freed allocation or of another device is therefore told apart from a
 * good one.  Each allocation's storage has DM_GUARD guard bytes before
 * and after, checked when it is freed and by dm_live("guard_damage").
 * Page-locked host memory is registered too (guard bytes around it; the
 * pointer is a real host pointer).
 *
 * Copies and fills are described by a dm_op that the double's stream
 * worker runs with dm_op_run(): the sides are resolved again when the
 * work runs, so a copy queued before its memory was freed is caught.
 * Every bad access (at the call or when the work runs) is counted and
 * printed on stderr; the work then does nothing.
 *
 * Live kinds (dm_live): "alloc" (device allocations), "alloc_bytes",
 * "host_alloc" (page-locked allocations), "bad_access" (so far),
 * "guard_damage" (damage found at free, plus live allocations damaged
 * now); and those of double_ipc.h ("ipc_exported", "ipc_opened",
 * "ipc_event_cells").
 *
 * An exported device allocation's storage is a memfd of its own mapped
 * MAP_SHARED, which another process can map from a handle
 * (double_ipc.h); an allocation so opened is "imported": dm_free refuses
 * it, dm_ipc_close unmaps it.
 */
#ifndef DOUBLE_MEMORY_H
#define DOUBLE_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DM_GUARD 64
#define DM_MAX_DEVICES 64

enum dm_result { DM_OK = 0, DM_BAD, DM_OUT_OF_MEMORY };

/* One side of a copy. */
enum dm_side_kind {
    DM_DEVICE,  /* device memory: an address dm_alloc handed out */
    DM_PINNED,  /* page-locked host memory (checked again when it runs) */
    DM_HOST,    /* ordinary host memory: staged, or the caller's own */
};

typedef struct dm_side {
    enum dm_side_kind kind;
    unsigned long long addr;
} dm_side;

typedef struct dm_op {
    const char *api;  /* the driver function, for reports */
    bool fill;
    dm_side dst, src;
    size_t bytes;
    unsigned char value;
    void *staging;    /* a pageable source copied at the call */
} dm_op;

#pragma GCC visibility push(hidden)

/* tag names the double on stderr; limit is the memory per device. */
void dm_configure(const char *tag, unsigned long long limit);

/* Device memory of device (host == false) or page-locked host memory.
 * *addr is the device address, or the host pointer. */
enum dm_result dm_alloc(int device, size_t bytes, bool host,
                        unsigned long long *addr);
/* Free the allocation starting at addr; DM_BAD (reported) if none. */
enum dm_result dm_free(const char *api, unsigned long long addr, bool host);
/* Device memory in use on device, in bytes. */
unsigned long long dm_used(int device);

/* At the call: [addr, addr + bytes) lies in one live allocation of
 * device (-1: of any device); else reported. */
bool dm_check_device(const char *api, unsigned long long addr, size_t bytes,
                     int device);
/* A host side: DM_PINNED when it lies in one page-locked allocation. */
dm_side dm_host_side(const void *p, size_t bytes);
/* Any pointer a driver API takes for either side (Level Zero's unified
 * addresses): DM_DEVICE in the device address range (checked when used),
 * DM_PINNED in a page-locked allocation, else DM_HOST. */
dm_side dm_classify(const void *p, size_t bytes);
/* What addr is: 0 unknown, 1 device memory (*device set), 2 page-locked
 * host memory (*device: the allocating device). */
int dm_lookup(unsigned long long addr, int *device);

/* The allocation a byte lies in (pointer attributes). */
typedef struct dm_range {
    int kind;                /* as dm_lookup: 0 none, 1 device, 2 host */
    int device;              /* the allocating device */
    unsigned long long base; /* the allocation's first byte */
    unsigned long long size; /* its bytes */
    unsigned long long id;   /* unique in the process, never reused */
} dm_range;
/* The allocation holding the byte at addr; kind 0 (the rest zero) when
 * none does (one past the end is in none). */
dm_range dm_query(unsigned long long addr);

/* Run fn(ctx, hosts) with hosts[i] the host bytes behind addrs[i] (a
 * kernel's pointer arguments): device memory of any device, page-locked
 * host memory as it is, 0 as NULL; the memory is held during the run,
 * so nothing is freed under it.  When an address is none of those it is
 * reported (api) and fn does not run: false. */
bool dm_run_resolved(const char *api, int n, const unsigned long long *addrs,
                     void **hosts, void (*fn)(void *ctx, void *const *hosts),
                     void *ctx);

/* Copy a pageable source now (so the caller may reuse it); DM_OUT_OF_
 * MEMORY when staging fails. */
enum dm_result dm_op_stage(dm_op *op);
/* Run by a stream worker: the copy or fill, or a report. */
void dm_op_run(const dm_op *op);
/* Free what the op owns. */
void dm_op_release(dm_op *op);

/* A live count (see above); -1 for a kind that is not memory. */
long long dm_live(const char *kind);
/* Zeroes "bad_access" and "guard_damage" (allocations damaged and still
 * live go on counting until freed). */
void dm_reset_detectors(void);

#pragma GCC visibility pop

/* The control function for tests (ctypes), exported by each double:
 *   int fake_<prefix>_mem_range(unsigned long long addr,
 *                               unsigned long long *base,
 *                               unsigned long long *size)
 * dm_query's answer: the kind (0 none, 1 device, 2 host), and the
 * allocation holding the byte at addr (zero when none does). */
#define DM_EXPORT_RANGE(prefix)                                          \
    __attribute__((visibility("default"))) int fake_##prefix##_mem_range( \
        unsigned long long addr, unsigned long long *base,               \
        unsigned long long *size);                                       \
    int fake_##prefix##_mem_range(unsigned long long addr,               \
                                  unsigned long long *base,              \
                                  unsigned long long *size)              \
    {                                                                    \
        dm_range r = dm_query(addr);                                     \
        *base = r.base;                                                  \
        *size = r.size;                                                  \
        return r.kind;                                                   \
    }

#endif /* DOUBLE_MEMORY_H */
