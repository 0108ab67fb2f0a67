/*
 * check_double_ipc.c - the doubles' interprocess layer (double_ipc.h) with
 * two real processes: built with double_memory.c and double_ipc.c by
 * tests/test_double_ipc.py (sanitizers where the compiler has them), run,
 * and its last line must read "0 failed".
 *
 * The parent allocates, fills and exports; a forked child opens the
 * handle through /proc (the CUDA and HIP way) and again with the memfd
 * received over a Unix socket (SCM_RIGHTS, the Level Zero way), checks
 * and writes the bytes, and completes an event record the parent waits
 * for.  With the refusals: a damaged handle, the wrong kind, its own
 * process, a descriptor of another file, an exporter that exited; dm_free
 * of an import and dm_ipc_close of anything else; and the live kinds.
 */
#define _GNU_SOURCE
#include "double_ipc.h"
#include "double_memory.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static void
fill(unsigned long long addr, size_t bytes, unsigned char value)
{
    dm_op op = {"fill", true, {DM_DEVICE, addr}, {DM_HOST, 0}, bytes, value,
                NULL};

    dm_op_run(&op);
}

static void
read_back(unsigned long long addr, void *out, size_t bytes)
{
    dm_op op = {"read", false, {DM_HOST, (unsigned long long)(uintptr_t)out},
                {DM_DEVICE, addr}, bytes, 0, NULL};

    dm_op_run(&op);
}

static bool
all(const unsigned char *p, size_t n, unsigned char value)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != value) {
            return false;
        }
    }
    return true;
}

static void
send_fd(int sock, int fd)
{
    char data = 'f';
    struct iovec iov = {&data, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {0};
    struct cmsghdr *c;

    memset(&u, 0, sizeof(u));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = u.buf;
    msg.msg_controllen = sizeof(u.buf);
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    CHECK(sendmsg(sock, &msg, 0) == 1);
}

static int
receive_fd(int sock)
{
    char data;
    struct iovec iov = {&data, 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {0};
    struct cmsghdr *c;
    int fd = -1;

    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = u.buf;
    msg.msg_controllen = sizeof(u.buf);
    if (recvmsg(sock, &msg, 0) != 1) {
        return -1;
    }
    c = CMSG_FIRSTHDR(&msg);
    if (c != NULL && c->cmsg_type == SCM_RIGHTS) {
        memcpy(&fd, CMSG_DATA(c), sizeof(int));
    }
    return fd;
}

/* The importing side; its failures are its exit status. */
static int
child(const unsigned char *h, const unsigned char *eh, int sock,
      uint64_t seq)
{
    unsigned char bad[DIPC_HANDLE_BYTES], buf[1000];
    unsigned long long m, again, other, viafd;
    dipc_cell *cell, *cell2;
    int fd, wrong;
    void *map;

    memcpy(bad, h, sizeof(bad));
    bad[30] ^= 1;
    CHECK(dm_ipc_open(1, bad, -1, &m) == DIPC_BAD_HANDLE);
    CHECK(dm_ipc_open(1, eh, -1, &m) == DIPC_BAD_HANDLE); /* an event's */
    CHECK(dipc_cell_open(h, -1, &cell) == DIPC_BAD_HANDLE); /* memory's */
    /* Through /proc/<exporter>/fd/<n>. */
    CHECK(dm_ipc_open(1, h, -1, &m) == DIPC_OK);
    CHECK(dm_ipc_imported(m));
    CHECK(dm_live("ipc_opened") == 1);
    CHECK(dm_live("alloc") == 1); /* the parent's, forked: not the import */
    CHECK(dm_query(m).size == 1000 && dm_query(m).device == 1);
    /* Open again on the device: the same address; another device maps
     * anew. */
    CHECK(dm_ipc_open(1, h, -1, &again) == DIPC_OK && again == m);
    CHECK(dm_ipc_open(0, h, -1, &other) == DIPC_OK && other != m);
    CHECK(dm_live("ipc_opened") == 2);
    read_back(m, buf, sizeof(buf));
    CHECK(all(buf, sizeof(buf), 7));
    fill(m, 500, 9);
    /* With the descriptor itself, received: the handle's first bytes are
     * the exporter's number, not ours. */
    fd = receive_fd(sock);
    CHECK(fd >= 0);
    wrong = dipc_memfd("wrong", 4096, &map);
    CHECK(wrong >= 0);
    CHECK(dm_ipc_open(2, h, wrong, &viafd) == DIPC_GONE);
    CHECK(dm_ipc_open(2, h, fd, &viafd) == DIPC_OK);
    close(fd);
    close(wrong);
    munmap(map, 4096);
    read_back(viafd, buf, sizeof(buf));
    CHECK(all(buf, 500, 9) && all(buf + 500, 500, 7));
    CHECK(dm_free("dm_free", m, false) == DM_BAD);
    CHECK(dm_ipc_close("dm_ipc_close", other));
    CHECK(dm_ipc_close("dm_ipc_close", viafd));
    CHECK(dm_ipc_close("dm_ipc_close", m));
    CHECK(dm_ipc_imported(m) && dm_live("ipc_opened") == 1);
    CHECK(dm_ipc_close("dm_ipc_close", m));
    CHECK(!dm_ipc_imported(m) && dm_live("ipc_opened") == 0);
    CHECK(!dm_ipc_close("dm_ipc_close", m));
    CHECK(!dm_check_device("after close", m, 1, -1));
    CHECK(dm_live("bad_access") == 3);
    dm_reset_detectors();
    /* The event: not complete until this process completes seq. */
    CHECK(dipc_cell_open(eh, -1, &cell) == DIPC_OK);
    CHECK(dipc_cell_open(eh, -1, &cell2) == DIPC_OK);
    CHECK(dm_live("ipc_event_cells") == 3); /* and the parent's, forked */
    CHECK(dipc_cell_current(cell) == seq);
    CHECK(!dipc_cell_query(cell) && !dipc_cell_query(cell2));
    CHECK(!dipc_cell_export(cell, bad, NULL)); /* only its creator */
    usleep(100 * 1000);                        /* the parent waits */
    dipc_cell_complete(cell, seq);
    CHECK(dipc_cell_query(cell2));
    /* A record here, which the parent then sees. */
    dipc_cell_complete(cell2, dipc_cell_record(cell2));
    dipc_cell_release(cell);
    dipc_cell_release(cell2);
    CHECK(dm_live("ipc_event_cells") == 1);
    fflush(stdout); /* _exit() does not */
    return failures;
}

/* A process that exports one allocation, writes its handle and exits. */
static void
exporter_exits(unsigned char *h)
{
    int pipefd[2], status;
    pid_t pid;

    CHECK(pipe(pipefd) == 0);
    pid = fork();
    if (pid == 0) {
        unsigned long long a;
        ssize_t n;

        close(pipefd[0]);
        n = dm_alloc(0, 64, false, &a) == DM_OK
                    && dm_ipc_export(a, h, NULL) == DIPC_OK
                ? write(pipefd[1], h, DIPC_HANDLE_BYTES) : -1;
        _exit(n == DIPC_HANDLE_BYTES ? 0 : 1);
    }
    close(pipefd[1]);
    CHECK(read(pipefd[0], h, DIPC_HANDLE_BYTES) == DIPC_HANDLE_BYTES);
    close(pipefd[0]);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status)
          && WEXITSTATUS(status) == 0);
}

int
main(void)
{
    unsigned char h[DIPC_HANDLE_BYTES], eh[DIPC_HANDLE_BYTES];
    unsigned char gone[DIPC_HANDLE_BYTES], buf[1000];
    unsigned long long a, b;
    struct rlimit r;
    int fd = -1, efd = -1, status, socks[2];
    long long number = 0;
    dipc_cell *cell;
    uint64_t seq;
    pid_t pid;

    dm_configure("check_double_ipc", 1ULL << 30);
    CHECK(dm_alloc(0, 1000, false, &a) == DM_OK);
    CHECK(dm_ipc_export(a + 1, h, NULL) == DIPC_NOT_BASE);
    fill(a, 1000, 7);
    /* The bytes move into a memfd, guards included. */
    CHECK(dm_ipc_export(a, h, &fd) == DIPC_OK && fd >= 0);
    CHECK(getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur == r.rlim_max);
    read_back(a, buf, sizeof(buf));
    CHECK(all(buf, sizeof(buf), 7));
    CHECK(dm_live("guard_damage") == 0);
    CHECK(dm_ipc_export(a, h, NULL) == DIPC_OK);
    CHECK(dm_live("ipc_exported") == 1);
    for (int i = 0; i < 8; i++) {
        number |= (long long)h[i] << (8 * i);
    }
    CHECK(number == fd);
    CHECK(dipc_handle_ok(h, DIPC_MEMORY) && !dipc_handle_ok(h, DIPC_EVENT));
    CHECK(dipc_handle_pid(h) == getpid());
    CHECK(dm_ipc_open(0, h, -1, &b) == DIPC_OWN_PROCESS);

    cell = dipc_cell_create();
    CHECK(cell != NULL && dipc_cell_query(cell));
    CHECK(dm_live("ipc_event_cells") == 1);
    dipc_cell_wait(cell, dipc_cell_current(cell)); /* never recorded */
    seq = dipc_cell_record(cell);
    CHECK(seq == 1 && !dipc_cell_query(cell));
    CHECK(dipc_cell_export(cell, eh, &efd) && efd >= 0);
    CHECK(dipc_cell_open(eh, -1, &cell) == DIPC_OWN_PROCESS);

    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, socks) == 0);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        close(socks[0]);
        _exit(child(h, eh, socks[1], seq));
    }
    close(socks[1]);
    send_fd(socks[0], fd);
    /* Blocks until the child completes seq (in its process). */
    dipc_cell_wait(cell, seq);
    CHECK(dipc_cell_query(cell) || dipc_cell_current(cell) > seq);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status)
          && WEXITSTATUS(status) == 0);
    close(socks[0]);
    /* The child's own record, complete. */
    CHECK(dipc_cell_current(cell) == seq + 1 && dipc_cell_query(cell));
    read_back(a, buf, sizeof(buf));
    CHECK(all(buf, 500, 9) && all(buf + 500, 500, 7));
    CHECK(dm_live("ipc_opened") == 0);

    exporter_exits(gone);
    CHECK(dm_ipc_open(0, gone, -1, &b) == DIPC_GONE);

    CHECK(dm_free("dm_free", a, false) == DM_OK);
    CHECK(dm_live("ipc_exported") == 0);
    CHECK(dm_ipc_export(a, h, NULL) == DIPC_NOT_BASE);
    dipc_cell_release(cell);
    CHECK(dm_live("ipc_event_cells") == 0);
    CHECK(dm_live("bad_access") == 0 && dm_live("guard_damage") == 0);
    printf("%d failed\n", failures);
    return failures != 0;
}
