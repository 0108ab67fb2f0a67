/*
 * check_ze_ipc.c - the Level Zero backend's interprocess slots between two
 * real processes, through the real loader and the test driver, with no
 * core: compiled with every file of csrc/backends/level_zero/ and run by
 * tests/test_ipc_ze_driver.py (ZE_ENABLE_ALT_DRIVERS names the driver).
 *
 *   check_ze_ipc            the exporter: allocates, writes, exports the
 *                           memory and an interprocess event, starts
 *                           itself as the importer, and checks what it
 *                           did
 *   check_ze_ipc FD         the importer, FD its end of a socket
 *
 * Each prints "name value" lines (the importer's prefixed "child."), and
 * exits 1 at the first slot that fails, with the error.  As the core
 * does, the descriptors travel with SCM_RIGHTS and each process closes
 * its copy after ipc_mem_open / ipc_event_open.
 */
#define _GNU_SOURCE
#include "../../csrc/backends/level_zero/lz.h"

#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SIZE 65536

static const acc_backend *B = &acc_level_zero_backend;
static const char *who = "";
static long long (*live)(const char *kind);
static int (*stall)(unsigned long long list, int *gate);
static int (*open_gate)(int gate);
static int (*fail)(const char *name, int nth, int code);

#define UNKNOWN 0x7ffffffe /* ZE_RESULT_ERROR_UNKNOWN */

static void
check(acc_status st, const acc_error *err, const char *what)
{
    if (st != ACC_OK) {
        fprintf(stderr, "%s%s failed: %d %s\n", who, what, (int)st,
                err->message);
        exit(1);
    }
}

static void
say(const char *name, long long value)
{
    printf("%s%s %lld\n", who, name, value);
    fflush(stdout);
}

/* A slot failing because the driver's `api` failed: ACC_ERR_DRIVER with
 * that function and code, nothing of the driver's left behind (live
 * pools and events as before). */
static void
failed_cleanly(const char *name, acc_status st, const acc_error *err,
               const char *api, long long pools, long long events)
{
    int ok = st == ACC_ERR_DRIVER && err->api != NULL
             && strcmp(err->api, api) == 0 && err->code == UNKNOWN
             && live("pool") == pools && live("event") == events;
    if (!ok) {
        fprintf(stderr, "%s%s: status %d, api %s, code %lld, pools %lld, "
                "events %lld: %s\n", who, name, (int)st,
                err->api ? err->api : "none", err->code, live("pool"),
                live("event"), err->message);
    }
    say(name, ok);
}

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void
copy(acc_stream *s, acc_copy_kind kind, uintptr_t dst, uintptr_t src)
{
    acc_error err;
    acc_copy c = {kind, ACC_COPY_PAGEABLE, dst, src, 0, 0, SIZE};
    check(B->mem_copy(s, &c, &err), &err, "mem_copy");
}

static int
pattern_is(const unsigned char *p, int reversed)
{
    for (int i = 0; i < SIZE; i++) {
        int j = reversed ? SIZE - 1 - i : i;
        if (p[i] != (unsigned char)(j * 7)) {
            return 0;
        }
    }
    return 1;
}

static void
send_handles(int sock, const acc_ipc_handle *m, const acc_ipc_handle *e)
{
    unsigned char bytes[2 * ACC_IPC_HANDLE_SIZE];
    memcpy(bytes, m->bytes, ACC_IPC_HANDLE_SIZE);
    memcpy(bytes + ACC_IPC_HANDLE_SIZE, e->bytes, ACC_IPC_HANDLE_SIZE);
    int fds[2] = {m->fd, e->fd};
    char control[CMSG_SPACE(sizeof(fds))];
    struct iovec iov = {bytes, sizeof(bytes)};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(cm), fds, sizeof(fds));
    if (sendmsg(sock, &msg, 0) != (ssize_t)sizeof(bytes)) {
        perror("sendmsg");
        exit(1);
    }
}

static void
recv_handles(int sock, acc_ipc_handle *m, acc_ipc_handle *e)
{
    unsigned char bytes[2 * ACC_IPC_HANDLE_SIZE];
    int fds[2];
    char control[CMSG_SPACE(sizeof(fds))];
    struct iovec iov = {bytes, sizeof(bytes)};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    if (recvmsg(sock, &msg, MSG_WAITALL) != (ssize_t)sizeof(bytes)) {
        perror("recvmsg");
        exit(1);
    }
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (cm == NULL || cm->cmsg_type != SCM_RIGHTS) {
        fprintf(stderr, "no descriptors came\n");
        exit(1);
    }
    memcpy(fds, CMSG_DATA(cm), sizeof(fds));
    memcpy(m->bytes, bytes, ACC_IPC_HANDLE_SIZE);
    memcpy(e->bytes, bytes + ACC_IPC_HANDLE_SIZE, ACC_IPC_HANDLE_SIZE);
    m->fd = fds[0];
    e->fd = fds[1];
}

static void
expect_byte(int sock, char want)
{
    char c = 0;
    if (read(sock, &c, 1) != 1 || c != want) {
        fprintf(stderr, "%sexpected '%c' from the peer\n", who, want);
        exit(1);
    }
}

static void
send_byte(int sock, char c)
{
    if (write(sock, &c, 1) != 1) {
        perror("write");
        exit(1);
    }
}

static void
start(acc_stream *s)
{
    acc_error err;
    acc_probe_result probe;
    memset(&probe, 0, sizeof(probe));
    check(B->probe(&probe, &err), &err, "probe");
    void *driver = dlopen(getenv("ZE_ENABLE_ALT_DRIVERS"), RTLD_NOW);
    if (driver == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    *(void **)&live = dlsym(driver, "fake_ze_live");
    *(void **)&stall = dlsym(driver, "fake_ze_enqueue_stall");
    *(void **)&open_gate = dlsym(driver, "fake_ze_open_gate");
    *(void **)&fail = dlsym(driver, "fake_ze_fail");
    memset(s, 0, sizeof(*s));
    s->backend = B;
    check(B->stream_create(s, &err), &err, "stream_create");
}

static int
importer(int sock)
{
    acc_error err;
    acc_stream s;
    who = "child.";
    start(&s);
    long long pools = live("pool");
    acc_ipc_handle mh, eh;
    recv_handles(sock, &mh, &eh);
    uintptr_t base = 0;
    long long events = live("event");
    fail("zeMemOpenIpcHandle", 1, UNKNOWN);
    failed_cleanly("open_mem_fails", B->ipc_mem_open(0, &mh, &base, &err),
                   &err, "zeMemOpenIpcHandle", pools, events);
    say("nothing_mapped", live("ipc_opened"));
    check(B->ipc_mem_open(0, &mh, &base, &err), &err, "ipc_mem_open");
    acc_event ev = {0};
    ev.backend = B;
    ev.device = 0;
    ev.flags = ACC_EVENT_INTERPROCESS | ACC_EVENT_IMPORTED;
    fail("zeEventPoolOpenIpcHandle", 1, UNKNOWN);
    failed_cleanly("open_pool_fails", B->ipc_event_open(&eh, &ev, &err),
                   &err, "zeEventPoolOpenIpcHandle", pools, events);
    /* The pool opened, its event refused: the pool is closed again. */
    fail("zeEventCreate", 1, UNKNOWN);
    failed_cleanly("open_event_fails", B->ipc_event_open(&eh, &ev, &err),
                   &err, "zeEventCreate", pools, events);
    say("no_cell_kept", live("ipc_event_cells"));
    check(B->ipc_event_open(&eh, &ev, &err), &err, "ipc_event_open");
    close(mh.fd); /* as the core does */
    close(eh.fd);
    say("opened", live("ipc_opened"));
    /* Imported armed: the exporter recorded it and it has completed. */
    say("query", B->event_query(&ev, &err));
    unsigned char *host = malloc(SIZE);
    copy(&s, ACC_COPY_D2H, (uintptr_t)host, base);
    say("read_exporters", pattern_is(host, 0));
    for (int i = 0; i < SIZE; i++) {
        host[i] = (unsigned char)((SIZE - 1 - i) * 7);
    }
    copy(&s, ACC_COPY_H2D, base, (uintptr_t)host);
    check(B->event_record(&ev, &s, &err), &err, "event_record");
    uintptr_t handle = ev.handle;
    send_byte(sock, 'w');
    /* The exporter records it again behind work it holds: wait for it
     * on the stream, then read. */
    expect_byte(sock, 'r');
    double t0 = now_ms();
    check(B->stream_wait_event(&s, &ev, &err), &err, "stream_wait_event");
    copy(&s, ACC_COPY_D2H, (uintptr_t)host, base);
    say("waited_at_least_80ms", now_ms() - t0 >= 80);
    say("read_second", memcmp(host, "second write", 12) == 0);
    say("same_event", ev.handle == handle);
    B->event_destroy(&ev);
    /* A refused close cannot be reported: it leaves the mapping. */
    fail("zeMemCloseIpcHandle", 1, UNKNOWN);
    B->ipc_mem_close(0, base);
    say("close_refused_kept", live("ipc_opened"));
    B->ipc_mem_close(0, base);
    say("left_opened", live("ipc_opened"));
    say("left_cells", live("ipc_event_cells"));
    say("left_pools", live("pool") - pools);
    free(host);
    B->stream_destroy(&s);
    B->shutdown();
    return 0;
}

static int
exporter(const char *self)
{
    acc_error err;
    acc_stream s, s2;
    start(&s);
    memset(&s2, 0, sizeof(s2));
    s2.backend = B;
    check(B->stream_create(&s2, &err), &err, "stream_create");
    uintptr_t base = 0;
    check(B->mem_alloc(0, SIZE, &base, &err), &err, "mem_alloc");
    unsigned char *host = malloc(SIZE);
    for (int i = 0; i < SIZE; i++) {
        host[i] = (unsigned char)(i * 7);
    }
    copy(&s, ACC_COPY_H2D, base, (uintptr_t)host);
    acc_ipc_handle mh, eh;
    check(B->ipc_mem_export(0, base, &mh, &err), &err, "ipc_mem_export");
    char path[64], target[256] = "";
    snprintf(path, sizeof(path), "/proc/self/fd/%d", mh.fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    say("mem_fd_is_a_memfd", n > 0 && strncmp(target, "/memfd:", 7) == 0);

    fail("zeMemGetIpcHandle", 1, UNKNOWN);
    acc_ipc_handle refused;
    long long pools = live("pool"), events = live("event");
    failed_cleanly("export_mem_fails",
                   B->ipc_mem_export(0, base, &refused, &err), &err,
                   "zeMemGetIpcHandle", pools, events);
    acc_event ev = {0};
    ev.backend = B;
    ev.device = 0;
    ev.flags = ACC_EVENT_INTERPROCESS;
    fail("zeEventPoolCreate", 1, UNKNOWN);
    failed_cleanly("create_pool_fails", B->event_create(&ev, &err), &err,
                   "zeEventPoolCreate", pools, events);
    fail("zeEventCreate", 1, UNKNOWN);
    failed_cleanly("create_event_fails", B->event_create(&ev, &err), &err,
                   "zeEventCreate", pools, events);
    say("no_cell_left", live("ipc_event_cells"));
    check(B->event_create(&ev, &err), &err, "event_create");
    say("own_pool", live("pool") - pools);
    say("cells", live("ipc_event_cells"));
    /* Recorded on s2 behind work, again on s while that is pending and
     * s's work is held too; s2's record then runs: it must still read as
     * pending (the slot says the first record's state until the reset
     * that s holds back has run).  Then waited on by s2 and recorded a
     * third time.  It stays the same event of the same pool throughout
     * (events.c). */
    int gate = -1, gate2 = -1;
    say("stall", stall(s.handle, &gate));
    say("stall", stall(s2.handle, &gate2));
    check(B->event_record(&ev, &s2, &err), &err, "event_record");
    uintptr_t handle = ev.handle;
    check(B->event_record(&ev, &s, &err), &err, "event_record (again)");
    open_gate(gate2);
    check(B->stream_synchronize(&s2, &err), &err, "stream_synchronize");
    say("pending", B->event_query(&ev, &err));
    check(B->stream_wait_event(&s2, &ev, &err), &err, "stream_wait_event");
    say("pending_s2", B->stream_query(&s2, &err));
    check(B->event_record(&ev, &s, &err), &err, "event_record (third)");
    say("pending_third", B->event_query(&ev, &err));
    open_gate(gate);
    check(B->event_synchronize(&ev, &err), &err, "event_synchronize");
    check(B->stream_synchronize(&s2, &err), &err, "stream_synchronize");
    say("done", B->event_query(&ev, &err));
    say("same_event_after_rerecords", ev.handle == handle);
    say("pools_after_rerecords", live("pool") - pools);
    fail("zeEventPoolGetIpcHandle", 1, UNKNOWN);
    failed_cleanly("export_event_fails",
                   B->ipc_event_export(&ev, &refused, &err), &err,
                   "zeEventPoolGetIpcHandle", live("pool"), live("event"));
    check(B->ipc_event_export(&ev, &eh, &err), &err, "ipc_event_export");
    say("event_fd", eh.fd >= 0);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        char arg[16];
        close(sv[0]);
        snprintf(arg, sizeof(arg), "%d", sv[1]);
        execl(self, self, arg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    send_handles(sv[0], &mh, &eh);
    /* The importer reads, writes the bytes back reversed and records the
     * event after that. */
    expect_byte(sv[0], 'w');
    check(B->event_synchronize(&ev, &err), &err, "event_synchronize");
    copy(&s, ACC_COPY_D2H, (uintptr_t)host, base);
    say("read_back", pattern_is(host, 1));
    memcpy(host, "second write", 12);
    copy(&s, ACC_COPY_H2D, base, (uintptr_t)host);
    say("stall", stall(s.handle, &gate));
    check(B->event_record(&ev, &s, &err), &err, "event_record");
    send_byte(sv[0], 'r');
    struct timespec pause = {0, 100000000};
    nanosleep(&pause, NULL);
    open_gate(gate);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    say("child_exit", WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
    /* Destroyed while still the tail of s: it goes once s moves on. */
    B->event_destroy(&ev);
    check(B->stream_synchronize(&s, &err), &err, "stream_synchronize");
    check(B->mem_free(0, base, &err), &err, "mem_free");
    say("left_pools", live("pool") - pools);
    say("left_cells", live("ipc_event_cells"));
    say("left_exported", live("ipc_exported"));
    free(host);
    B->stream_destroy(&s);
    B->stream_destroy(&s2);
    B->shutdown();
    return 0;
}

int
main(int argc, char **argv)
{
    return argc > 1 ? importer(atoi(argv[1])) : exporter(argv[0]);
}
