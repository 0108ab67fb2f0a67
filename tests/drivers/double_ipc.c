/*
 * double_ipc.c - handles, memfds and shared event cells for the driver
 * test doubles (see double_ipc.h).
 */
#define _GNU_SOURCE
#include "double_ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CELL_BYTES 4096

static pthread_once_t g_limit_once = PTHREAD_ONCE_INIT;
static atomic_llong g_cells;

/* One descriptor per device allocation: the soft limit (often 1024) is
 * raised to the hard one, as far as it goes. */
static void
raise_nofile(void)
{
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &r);
    }
}

int
dipc_memfd(const char *name, size_t bytes, void **map)
{
    int fd;
    void *p;

    pthread_once(&g_limit_once, raise_nofile);
    if (bytes == 0 || bytes > (size_t)LLONG_MAX) {
        errno = EINVAL;
        return -1;
    }
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;

        close(fd);
        errno = e;
        return -1;
    }
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;

        close(fd);
        errno = e;
        return -1;
    }
    *map = p;
    return fd;
}

static void
put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint64_t
get64(const unsigned char *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

static void
put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint32_t
get32(const unsigned char *p)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        v |= (uint32_t)p[i] << (8 * i);
    }
    return v;
}

/* FNV-1a of bytes [8, 56). */
static uint64_t
checksum(const unsigned char *h)
{
    uint64_t x = 0xcbf29ce484222325ULL;

    for (int i = 8; i < 56; i++) {
        x = (x ^ h[i]) * 0x100000001b3ULL;
    }
    return x;
}

bool
dipc_write_handle(unsigned char out[DIPC_HANDLE_BYTES], unsigned kind,
                  int fd, int device, unsigned long long id)
{
    struct stat st;

    if (fstat(fd, &st) != 0) {
        return false;
    }
    memset(out, 0, DIPC_HANDLE_BYTES);
    put64(out, (uint64_t)(int64_t)fd);
    put32(out + 8, DIPC_MAGIC);
    put32(out + 12, kind);
    put32(out + 16, (uint32_t)getpid());
    put32(out + 20, (uint32_t)device);
    put64(out + 24, (uint64_t)st.st_ino);
    put64(out + 32, (uint64_t)st.st_size);
    put64(out + 40, id);
    put64(out + 56, checksum(out));
    return true;
}

bool
dipc_handle_ok(const unsigned char h[DIPC_HANDLE_BYTES], unsigned kind)
{
    return get32(h + 8) == DIPC_MAGIC && get32(h + 12) == kind
           && get64(h + 56) == checksum(h);
}

long long
dipc_handle_pid(const unsigned char h[DIPC_HANDLE_BYTES])
{
    return (long long)(int32_t)get32(h + 16);
}

unsigned long long
dipc_handle_inode(const unsigned char h[DIPC_HANDLE_BYTES])
{
    return get64(h + 24);
}

enum dipc_result
dipc_map_handle(const unsigned char h[DIPC_HANDLE_BYTES], unsigned kind,
                int fd, void **map, size_t *bytes)
{
    uint64_t size = get64(h + 32);
    pid_t pid = (pid_t)get32(h + 16);
    struct stat st;
    int own = -1;
    void *p;

    if (!dipc_handle_ok(h, kind) || size == 0 || size > SIZE_MAX
        || pid <= 0) {
        return DIPC_BAD_HANDLE;
    }
    if (pid == getpid()) {
        return DIPC_OWN_PROCESS;
    }
    if (fd < 0) {
        char path[64];
        int64_t n = (int64_t)get64(h);

        if (n < 0 || n > INT_MAX) {
            return DIPC_BAD_HANDLE;
        }
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)n);
        own = open(path, O_RDWR | O_CLOEXEC);
        if (own < 0) {
            return errno == EMFILE || errno == ENFILE || errno == ENOMEM
                       ? DIPC_NO_MEMORY : DIPC_GONE;
        }
        fd = own;
    }
    /* A descriptor number reused by the exporter, or a pid reused by
     * another process, names another file. */
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != get64(h + 24)
        || (uint64_t)st.st_size != size) {
        if (own >= 0) {
            close(own);
        }
        return DIPC_GONE;
    }
    p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (own >= 0) {
        close(own);
    }
    if (p == MAP_FAILED) {
        return DIPC_NO_MEMORY;
    }
    *map = p;
    *bytes = (size_t)size;
    return DIPC_OK;
}

/* ---- event cells ---- */

typedef struct cell_page {
    _Atomic uint64_t recorded;
    _Atomic uint64_t completed;
    _Atomic uint32_t wake; /* the futex word: bumped at each completion */
} cell_page;

struct dipc_cell {
    cell_page *page;
    int fd; /* -1 in an importer (the mapping is enough) */
};

_Static_assert(sizeof(cell_page) <= CELL_BYTES, "a cell fits its page");

dipc_cell *
dipc_cell_create(void)
{
    dipc_cell *c = calloc(1, sizeof(*c));
    void *map;

    if (c == NULL) {
        return NULL;
    }
    c->fd = dipc_memfd("double-event", CELL_BYTES, &map);
    if (c->fd < 0) {
        free(c);
        return NULL;
    }
    c->page = map; /* a fresh memfd reads as zeros */
    atomic_fetch_add(&g_cells, 1);
    return c;
}

void
dipc_cell_release(dipc_cell *c)
{
    if (c == NULL) {
        return;
    }
    munmap(c->page, CELL_BYTES);
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c);
    atomic_fetch_sub(&g_cells, 1);
}

uint64_t
dipc_cell_record(dipc_cell *c)
{
    return atomic_fetch_add(&c->page->recorded, 1) + 1;
}

void
dipc_cell_complete(dipc_cell *c, uint64_t seq)
{
    uint64_t now = atomic_load(&c->page->completed);

    while (now < seq
           && !atomic_compare_exchange_weak(&c->page->completed, &now, seq)) {
    }
    atomic_fetch_add(&c->page->wake, 1);
    /* Not FUTEX_PRIVATE_FLAG: the waiters may be in other processes. */
    syscall(SYS_futex, (uint32_t *)&c->page->wake, FUTEX_WAKE, INT_MAX,
            NULL, NULL, 0);
}

uint64_t
dipc_cell_current(const dipc_cell *c)
{
    return atomic_load(&c->page->recorded);
}

bool
dipc_cell_reached(const dipc_cell *c, uint64_t seq)
{
    return atomic_load(&c->page->completed) >= seq;
}

bool
dipc_cell_query(const dipc_cell *c)
{
    return dipc_cell_reached(c, dipc_cell_current(c));
}

void
dipc_cell_wait(const dipc_cell *c, uint64_t seq)
{
    for (;;) {
        uint32_t seen = atomic_load(&c->page->wake);

        if (dipc_cell_reached(c, seq)) {
            return;
        }
        /* Sleeps only while wake is still seen: a completion between the
         * check and the call changes it, and the call returns at once. */
        syscall(SYS_futex, (uint32_t *)&c->page->wake, FUTEX_WAIT, seen,
                NULL, NULL, 0);
    }
}

bool
dipc_cell_export(const dipc_cell *c, unsigned char out[DIPC_HANDLE_BYTES],
                 int *fd)
{
    if (c->fd < 0 || !dipc_write_handle(out, DIPC_EVENT, c->fd, 0, 0)) {
        return false;
    }
    if (fd != NULL) {
        *fd = c->fd;
    }
    return true;
}

enum dipc_result
dipc_cell_open(const unsigned char h[DIPC_HANDLE_BYTES], int fd,
               dipc_cell **out)
{
    dipc_cell *c = calloc(1, sizeof(*c));
    enum dipc_result r;
    void *map;
    size_t bytes;

    if (c == NULL) {
        return DIPC_NO_MEMORY;
    }
    r = dipc_map_handle(h, DIPC_EVENT, fd, &map, &bytes);
    if (r == DIPC_OK && bytes != CELL_BYTES) {
        munmap(map, bytes);
        r = DIPC_BAD_HANDLE;
    }
    if (r != DIPC_OK) {
        free(c);
        return r;
    }
    c->page = map;
    c->fd = -1;
    atomic_fetch_add(&g_cells, 1);
    *out = c;
    return DIPC_OK;
}

long long
dipc_cells_live(void)
{
    return atomic_load(&g_cells);
}
