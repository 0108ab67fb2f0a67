/*
 * double_ipc.h - interprocess sharing for the driver test doubles.
 *
 * A device allocation's storage (double_memory.c) moves into a memfd of
 * its own, mapped MAP_SHARED, when it is first exported (before that it
 * is malloc'd: most allocations never are, and a memfd costs a
 * descriptor, a mapping and page faults); the descriptor stays in the
 * allocation record until it is freed.  Every access to the bytes holds
 * the memory's lock, so they move safely.
 * Exporting writes a 64-byte handle naming the exporting process, the
 * descriptor's number there, the memfd's inode and size; opening it in
 * another process opens /proc/<pid>/fd/<n> (or uses a descriptor the
 * caller received, as Level Zero's importer does), checks the inode and
 * size, maps the file MAP_SHARED and registers it at a fresh device
 * address of the importing device, marked imported: the importer's
 * copies, fills and kernels reach the exporter's bytes.
 *
 * The handle (every driver's handle is 64 bytes; little-endian fields):
 *   [0, 8)   the exporter's descriptor number, as a 64-bit integer (where
 *            Level Zero's NEO puts the descriptor: an importer writes its
 *            own copy of the descriptor there; not covered by the checksum)
 *   [8, 12)  magic DIPC_MAGIC, [12, 16) kind (DIPC_MEMORY or DIPC_EVENT)
 *   [16, 20) the exporter's pid, [20, 24) the exporting device (memory)
 *   [24, 32) the memfd's inode, [32, 40) its size in bytes
 *   [40, 48) the allocation's id in the exporter, [48, 56) zero
 *   [56, 64) FNV-1a of bytes [8, 56)
 *
 * Shared event cells: a page in a memfd holding two 64-bit sequence
 * numbers, `recorded` and `completed`, and a futex word (waited on
 * without FUTEX_PRIVATE_FLAG, so a waiter in another process is woken).
 * A record takes the next sequence (dipc_cell_record) and the stream that
 * runs it completes it, in order (dipc_cell_complete); a query is
 * "completed >= the latest recorded"; a wait, host or stream, waits for
 * the sequence current when the wait was called (dipc_cell_current),
 * as a real event's wait waits for its latest record at the call.  Both
 * processes may record: the sequence is shared, so the last record of
 * either is the event's state.
 *
 * Live kinds (through dm_live): "ipc_exported" (live allocations of this
 * process exported at least once), "ipc_opened" (imported mappings not
 * closed), "ipc_event_cells" (cells created or opened, not released).
 */
#ifndef DOUBLE_IPC_H
#define DOUBLE_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DIPC_HANDLE_BYTES 64
#define DIPC_MAGIC 0x43504944u /* "DIPC" */
#define DIPC_MEMORY 1u
#define DIPC_EVENT 2u

enum dipc_result {
    DIPC_OK = 0,
    DIPC_BAD_HANDLE,   /* not a handle of this kind, or damaged */
    DIPC_OWN_PROCESS,  /* opened in the process that exported it */
    DIPC_GONE,         /* the exporter exited, or its descriptor is closed
                          or is another file now */
    DIPC_NOT_BASE,     /* export: not the start of a live device
                          allocation of this process (or imported) */
    DIPC_NO_MEMORY,    /* a descriptor, a mapping or a record failed */
};

#pragma GCC visibility push(hidden)

/* ---- memory (implemented in double_memory.c) ---- */

/* The handle of the whole allocation starting at addr (a base dm_alloc
 * returned on this process, not an imported one).  *fd (when fd is not
 * NULL) is the memfd itself, still owned by the allocation: valid in this
 * process only, until the allocation is freed. */
enum dipc_result dm_ipc_export(unsigned long long addr,
                               unsigned char out[DIPC_HANDLE_BYTES], int *fd);
/* Map the allocation a handle names on device, at a fresh address *addr.
 * fd: a descriptor of the memfd this process received (not taken: the
 * caller closes it), or -1 to open the exporter's through /proc.  A
 * handle already open on device answers the same address and counts one
 * open more (the drivers' rule); each open is closed once. */
enum dipc_result dm_ipc_open(int device,
                             const unsigned char h[DIPC_HANDLE_BYTES], int fd,
                             unsigned long long *addr);
/* Close one open of what dm_ipc_open mapped at addr, unmapping it with
 * the last; false (reported) when addr is not an open import.  A later
 * use of addr is a use after free.  dm_free refuses an imported
 * address. */
bool dm_ipc_close(const char *api, unsigned long long addr);
/* Whether addr is the base of an open import. */
bool dm_ipc_imported(unsigned long long addr);

/* ---- shared event cells ---- */

typedef struct dipc_cell dipc_cell;

/* A fresh cell (both numbers 0: "never recorded" reads as complete);
 * NULL when out of descriptors or memory. */
dipc_cell *dipc_cell_create(void);
/* Unmap and close (the other process's mapping stays). */
void dipc_cell_release(dipc_cell *c);
/* Take the next sequence number: what the stream later completes. */
uint64_t dipc_cell_record(dipc_cell *c);
/* The stream ran the record of seq (and so every earlier one): wakes
 * waiters of every process. */
void dipc_cell_complete(dipc_cell *c, uint64_t seq);
/* The latest sequence recorded (what a wait called now waits for). */
uint64_t dipc_cell_current(const dipc_cell *c);
/* Whether the work up to seq has completed. */
bool dipc_cell_reached(const dipc_cell *c, uint64_t seq);
/* Whether the latest record has completed (an event query). */
bool dipc_cell_query(const dipc_cell *c);
/* Block until the work up to seq completed. */
void dipc_cell_wait(const dipc_cell *c, uint64_t seq);
/* The cell's handle (kind DIPC_EVENT); *fd as for dm_ipc_export.  False
 * for a cell opened from a handle (only its creator exports it). */
bool dipc_cell_export(const dipc_cell *c,
                      unsigned char out[DIPC_HANDLE_BYTES], int *fd);
/* Map the cell a handle names; fd as for dm_ipc_open. */
enum dipc_result dipc_cell_open(const unsigned char h[DIPC_HANDLE_BYTES],
                                int fd, dipc_cell **out);

/* ---- the layer double_memory.c builds on ---- */

/* A memfd of bytes (MFD_CLOEXEC), mapped read-write MAP_SHARED at *map;
 * raises RLIMIT_NOFILE's soft limit to the hard one the first time.  The
 * descriptor, or -1 (errno set). */
int dipc_memfd(const char *name, size_t bytes, void **map);
/* Write a handle for the memfd fd (kind, device, id as in the layout). */
bool dipc_write_handle(unsigned char out[DIPC_HANDLE_BYTES], unsigned kind,
                       int fd, int device, unsigned long long id);
/* Check a handle of kind, then map its file: the given fd or the
 * exporter's through /proc; *map and *bytes are the mapping. */
enum dipc_result dipc_map_handle(const unsigned char h[DIPC_HANDLE_BYTES],
                                 unsigned kind, int fd, void **map,
                                 size_t *bytes);
/* A handle's magic, kind and checksum are right. */
bool dipc_handle_ok(const unsigned char h[DIPC_HANDLE_BYTES], unsigned kind);
/* Fields of a handle: the exporter's pid, the memfd's inode. */
long long dipc_handle_pid(const unsigned char h[DIPC_HANDLE_BYTES]);
unsigned long long dipc_handle_inode(const unsigned char h[DIPC_HANDLE_BYTES]);
/* "ipc_event_cells". */
long long dipc_cells_live(void);

#pragma GCC visibility pop

#endif /* DOUBLE_IPC_H */
