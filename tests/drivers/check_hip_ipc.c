/*
 * check_hip_ipc.c - the HIP backend's interprocess slots, called directly
 * (no core), over the runtime that ACCELERATOR_HIP_LIBRARY names (the
 * double), between two processes: run by tests/test_ipc_hip_double.py.
 *
 * Run without arguments it is the producer: it allocates device memory
 * with mem_alloc, writes a pattern, exports the allocation
 * (ipc_mem_export) and an interprocess event (event_create with
 * ACC_EVENT_INTERPROCESS, ipc_event_export), checks that its own process
 * cannot open either (the driver's code: hipErrorInvalidContext), and
 * starts itself again as the consumer ("consumer"), which gets both
 * handles as hex on stdin.  The consumer maps the memory (ipc_mem_open),
 * checks the pattern, queues a write-back behind a gate of the double's
 * and opens and records the event (ipc_event_open, event_record); the
 * producer's stream waits on it (stream_wait_event) before reading the
 * memory back, so that the read sees the consumer's bytes only once the
 * consumer opened its gate.  Both close what they opened or exported.
 * Exit status 0 when every check held; each failure is printed.
 */
#define _GNU_SOURCE
#include <accelerator/backend.h>

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern const acc_backend acc_hip_backend;
extern char **environ;

#define SIZE 4096
#define INVALID_CONTEXT 201 /* hipErrorInvalidContext */

static const acc_backend *b = &acc_hip_backend;
static const char *role = "producer";
static int failures;

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "%s: %s:%d: check failed: %s\n", role,        \
                    __FILE__, __LINE__, #cond);                           \
            failures++;                                                   \
        }                                                                 \
    } while (0)

/* A call that must succeed; stop here when it does not. */
#define MUST(call)                                                        \
    do {                                                                  \
        acc_status must_st_ = (call);                                     \
        if (must_st_ != ACC_OK) {                                         \
            fprintf(stderr, "%s: %s:%d: %s failed (%d): %s\n", role,      \
                    __FILE__, __LINE__, #call, (int)must_st_,             \
                    err.message);                                         \
            exit(2);                                                      \
        }                                                                 \
    } while (0)

static acc_error err;

/* The double's control functions (a gate on a stream). */
static int (*enqueue_gate)(int device, unsigned long long stream, int *gate);
static int (*open_gate)(int gate);

static void
setup(void)
{
    acc_probe_result probe;
    int count = 0;
    void *lib;

    memset(&probe, 0, sizeof(probe));
    CHECK(b->ipc_mem_export != NULL && b->ipc_mem_open != NULL
          && b->ipc_mem_close != NULL && b->ipc_event_export != NULL
          && b->ipc_event_open != NULL);
    MUST(b->probe(&probe, &err));
    if (probe.deferred) {
        MUST(b->initialize(&count, &err));
    }
    lib = dlopen(getenv("ACCELERATOR_HIP_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        fprintf(stderr, "%s: the runtime is not loaded: %s\n", role,
                dlerror());
        exit(2);
    }
    *(void **)&enqueue_gate = dlsym(lib, "fake_hip_enqueue_gate");
    *(void **)&open_gate = dlsym(lib, "fake_hip_open_gate");
    if (enqueue_gate == NULL || open_gate == NULL) {
        fprintf(stderr, "%s: not the HIP double\n", role);
        exit(2);
    }
}

static void
stream_new(acc_stream *s)
{
    memset(s, 0, sizeof(*s));
    s->backend = b;
    s->device = 0;
    MUST(b->stream_create(s, &err));
}

/* A copy between device memory at dev and host memory at host (pinned:
 * queued on s, not waited for). */
static void
copy(acc_stream *s, acc_copy_kind kind, uintptr_t dev, void *host)
{
    acc_copy c = {.kind = kind, .nbytes = SIZE};

    c.dst = kind == ACC_COPY_H2D ? dev : (uintptr_t)host;
    c.src = kind == ACC_COPY_H2D ? (uintptr_t)host : dev;
    MUST(b->mem_copy(s, &c, &err));
}

static void
hex_write(FILE *f, const acc_ipc_handle *h)
{
    for (int i = 0; i < ACC_IPC_HANDLE_SIZE; i++) {
        fprintf(f, "%02x", h->bytes[i]);
    }
    fputc('\n', f);
}

static int
hex_read(FILE *f, acc_ipc_handle *h)
{
    unsigned v;

    for (int i = 0; i < ACC_IPC_HANDLE_SIZE; i++) {
        if (fscanf(f, "%2x", &v) != 1) {
            return 0;
        }
        h->bytes[i] = (unsigned char)v;
    }
    h->fd = -1;
    return 1;
}

/* One line from f; exits when the other side is gone. */
static void
expect(FILE *f, const char *word)
{
    char line[64];

    if (fscanf(f, "%63s", line) != 1 || strcmp(line, word) != 0) {
        fprintf(stderr, "%s: expected '%s' from the other side\n", role,
                word);
        exit(2);
    }
}

static int
consumer(void)
{
    acc_ipc_handle mem, ev_handle;
    acc_event ev;
    acc_stream s;
    uintptr_t base = 0;
    unsigned char *host;
    int gate;

    role = "consumer";
    setup();
    if (!hex_read(stdin, &mem) || !hex_read(stdin, &ev_handle)) {
        fprintf(stderr, "consumer: no handles on stdin\n");
        return 2;
    }
    MUST(b->ipc_mem_open(0, &mem, &base, &err));
    CHECK(base != 0);
    stream_new(&s);
    MUST(b->host_alloc(0, SIZE, (void **)&host, &err));
    copy(&s, ACC_COPY_D2H, base, host);
    MUST(b->stream_synchronize(&s, &err));
    for (int i = 0; i < SIZE; i++) {
        CHECK(host[i] == (unsigned char)i);
        if (host[i] != (unsigned char)i) {
            break;
        }
    }
    /* The write-back waits behind the gate; the event records after it. */
    memset(host, 0xa5, SIZE);
    CHECK(enqueue_gate(0, s.handle, &gate) == 0);
    copy(&s, ACC_COPY_H2D, base, host);
    memset(&ev, 0, sizeof(ev));
    ev.backend = b;
    ev.device = 0;
    ev.flags = ACC_EVENT_INTERPROCESS | ACC_EVENT_IMPORTED;
    MUST(b->ipc_event_open(&ev_handle, &ev, &err));
    CHECK(ev.native != NULL && ev.handle != 0);
    MUST(b->event_record(&ev, &s, &err));
    CHECK(b->event_query(&ev, &err) == ACC_NOT_READY);
    printf("recorded\n");
    fflush(stdout);
    expect(stdin, "open");
    CHECK(open_gate(gate) == 0);
    MUST(b->stream_synchronize(&s, &err));
    CHECK(b->event_query(&ev, &err) == ACC_OK);
    b->event_destroy(&ev);
    b->ipc_mem_close(0, base);
    MUST(b->host_free(0, host, &err));
    b->stream_destroy(&s);
    printf("done\n");
    fflush(stdout);
    return failures != 0;
}

static int
producer(const char *self)
{
    acc_ipc_handle mem, ev_handle;
    acc_event e, own;
    acc_stream s;
    uintptr_t base = 0, mapped = 0;
    unsigned char *host;
    int to_child[2], from_child[2], status = 0;
    posix_spawn_file_actions_t actions;
    char *argv[] = {(char *)self, "consumer", NULL};
    /* Itself, wherever it was started from. */
    const char *exe = "/proc/self/exe";
    FILE *in, *out;
    pid_t pid;

    setup();
    stream_new(&s);
    MUST(b->mem_alloc(0, SIZE, &base, &err));
    MUST(b->host_alloc(0, SIZE, (void **)&host, &err));
    for (int i = 0; i < SIZE; i++) {
        host[i] = (unsigned char)i;
    }
    copy(&s, ACC_COPY_H2D, base, host);
    MUST(b->stream_synchronize(&s, &err));
    MUST(b->ipc_mem_export(0, base, &mem, &err));
    CHECK(mem.fd == -1);
    memset(&e, 0, sizeof(e));
    e.backend = b;
    e.device = 0;
    e.flags = ACC_EVENT_INTERPROCESS;
    MUST(b->event_create(&e, &err));
    MUST(b->event_record(&e, &s, &err));
    MUST(b->ipc_event_export(&e, &ev_handle, &err));
    CHECK(ev_handle.fd == -1);
    /* Not in the exporting process: the driver's refusal, its code. */
    CHECK(b->ipc_mem_open(0, &mem, &mapped, &err) == ACC_ERR_DRIVER
          && err.code == INVALID_CONTEXT
          && strcmp(err.api, "hipIpcOpenMemHandle") == 0);
    memset(&own, 0, sizeof(own));
    own.device = 0;
    own.flags = ACC_EVENT_INTERPROCESS | ACC_EVENT_IMPORTED;
    CHECK(b->ipc_event_open(&ev_handle, &own, &err) == ACC_ERR_DRIVER
          && err.code == INVALID_CONTEXT && own.native == NULL);

    if (pipe(to_child) != 0 || pipe(from_child) != 0) {
        perror("pipe");
        return 2;
    }
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    posix_spawn_file_actions_addclose(&actions, to_child[1]);
    posix_spawn_file_actions_addclose(&actions, from_child[0]);
    errno = posix_spawn(&pid, exe, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (errno != 0) {
        perror("posix_spawn");
        return 2;
    }
    close(to_child[0]);
    close(from_child[1]);
    in = fdopen(from_child[0], "r");
    out = fdopen(to_child[1], "w");
    hex_write(out, &mem);
    hex_write(out, &ev_handle);
    fflush(out);

    expect(in, "recorded");
    /* The consumer's record is this event's latest: pending. */
    CHECK(b->event_query(&e, &err) == ACC_NOT_READY);
    memset(host, 0, SIZE);
    MUST(b->stream_wait_event(&s, &e, &err));
    copy(&s, ACC_COPY_D2H, base, host);
    CHECK(b->stream_query(&s, &err) == ACC_NOT_READY);
    CHECK(host[1] == 0);
    fprintf(out, "open\n");
    fflush(out);
    MUST(b->stream_synchronize(&s, &err));
    for (int i = 0; i < SIZE; i++) {
        CHECK(host[i] == 0xa5);
        if (host[i] != 0xa5) {
            break;
        }
    }
    CHECK(b->event_query(&e, &err) == ACC_OK);
    expect(in, "done");
    fclose(out);
    fclose(in);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)
        || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "producer: the consumer failed (status %#x)\n",
                status);
        failures++;
    }
    b->event_destroy(&e);
    MUST(b->mem_free(0, base, &err));
    MUST(b->host_free(0, host, &err));
    b->stream_destroy(&s);
    return failures != 0;
}

int
main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 2 && strcmp(argv[1], "consumer") == 0) {
        return consumer();
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s (the consumer: %s consumer)\n", argv[0],
                argv[0]);
        return 2;
    }
    return producer(argv[0]);
}
