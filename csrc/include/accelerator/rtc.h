/*
 * accelerator/rtc.h - compiling source with a run-time compiler of
 * NVRTC's shape (NVRTC, hiprtc: create a program, add name expressions,
 * compile with options, read the log, the code and the lowered names,
 * destroy), for a backend's compile slot (backend.h).  Public, like
 * backend.h: a plugin whose vendor ships such a compiler fills an
 * acc_rtc with its entry points and calls acc_rtc_compile.
 *
 * Include accelerator/backend.h first (with ACC_BACKEND_HOST defined: the
 * errors are worded through the host services).  Static inline: no
 * symbol of the core is needed.
 *
 * The entry points are called through the types below: a program is a
 * pointer, a result an int (the compilers' nvrtcResult and hiprtcResult
 * are C enums, passed as int on every ABI that Linux runs on), 0 success.
 */
#ifndef ACCELERATOR_RTC_H
#define ACCELERATOR_RTC_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__) || defined(_GNU_SOURCE)
#include <link.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acc_rtc_program_s *acc_rtc_program;

typedef struct acc_rtc {
    const char *backend;      /* the backend's name, for errors */
    const char *compiler;     /* "NVRTC", for messages */
    const char *file_name;    /* the program's name in the log */
    /* The entry points' names, for errors: "nvrtcCreateProgram", ... */
    const char *create_name, *compile_name, *add_name_name;
    int (*create)(acc_rtc_program *prog, const char *source,
                  const char *name, int nheaders,
                  const char *const *headers,
                  const char *const *include_names);
    int (*destroy)(acc_rtc_program *prog);
    int (*compile)(acc_rtc_program prog, int noptions,
                   const char *const *options);
    int (*log_size)(acc_rtc_program prog, size_t *size);
    int (*log)(acc_rtc_program prog, char *log);
    /* The code to keep (NVRTC: the cubin or the PTX; hiprtc: the code
     * object), and its format. */
    int (*code_size)(acc_rtc_program prog, size_t *size);
    int (*code)(acc_rtc_program prog, char *code);
    const char *code_name;    /* "nvrtcGetCUBIN", for errors */
    const char *code_size_name;   /* "nvrtcGetCUBINSize" */
    acc_code_format code_format;
    /* The compile's results that mean the compiler refused the options
     * or the source (NVRTC's and hiprtc's INVALID_OPTION, 5, and
     * COMPILATION, 6): BuildError.  Any other is the compiler failing
     * (out of memory, a builtin operation): the driver error it is. */
    int refused_option, refused_source;
    int (*add_name)(acc_rtc_program prog, const char *name);
    int (*lowered)(acc_rtc_program prog, const char *name,
                   const char **lowered);
    const char *(*error_string)(int result);
} acc_rtc;

/* The designated initialisers of an acc_rtc's common entry points and
 * their names, for a compiler whose entry points are NVRTC's with
 * another prefix (hiprtcCreateProgram ...), resolved into the fields of
 * fns named as the entry points: ACC_RTC_ENTRY_POINTS(c->fn, nvrtc). */
#define ACC_RTC_ENTRY_POINTS(fns, prefix)                                 \
    .create_name = #prefix "CreateProgram",                               \
    .compile_name = #prefix "CompileProgram",                             \
    .add_name_name = #prefix "AddNameExpression",                         \
    .create = (fns).prefix##CreateProgram,                                \
    .destroy = (fns).prefix##DestroyProgram,                              \
    .compile = (fns).prefix##CompileProgram,                              \
    .log_size = (fns).prefix##GetProgramLogSize,                          \
    .log = (fns).prefix##GetProgramLog,                                   \
    .add_name = (fns).prefix##AddNameExpression,                          \
    .lowered = (fns).prefix##GetLoweredName,                              \
    .error_string = (fns).prefix##GetErrorString

/* Open a compiler's library (a path, or a name for dlopen's search),
 * never closed: path receives the file the loader opened (the name as
 * given where the loader cannot tell).  NULL with ACC_ERR_NOT_FOUND and
 * dlopen's reason in err. */
static inline void *
acc_rtc_dlopen(const char *library, char *path, size_t size, acc_error *err)
{
    void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    const char *name = library;

    if (handle == NULL) {
        const char *why = dlerror();

        acc_error_set(err, ACC_ERR_NOT_FOUND, "%s does not open: %s",
                      library, why != NULL ? why : "(no reason given)");
        return NULL;
    }
#ifdef RTLD_DI_LINKMAP
    {
        struct link_map *map = NULL;

        if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != NULL
            && map->l_name != NULL && map->l_name[0] != '\0') {
            name = map->l_name;
        }
    }
#endif
    acc_format(path, size, "%s", name);
    return handle;
}

/* The compilers a backend opened, by the library name they were opened
 * from: each is made once and kept for the process (a backend's own
 * object: its entry points, its version); the table grows with the names
 * used, never with the calls. */
typedef struct acc_rtc_kept {
    pthread_mutex_t lock;
    int n, size;
    char **names;
    void **compilers;
} acc_rtc_kept;
#define ACC_RTC_KEPT_INIT {PTHREAD_MUTEX_INITIALIZER, 0, 0, NULL, NULL}

/* Room in kept for one more; 0 when out of memory. */
static inline int
acc_rtc_kept_grow(acc_rtc_kept *kept)
{
    int size = kept->size > 0 ? 2 * kept->size : 8;
    char **names;
    void **compilers;

    if (kept->n < kept->size) {
        return 1;
    }
    names = (char **)realloc(kept->names, (size_t)size * sizeof(*names));
    if (names == NULL) {
        return 0;
    }
    kept->names = names;
    compilers = (void **)realloc(kept->compilers,
                                 (size_t)size * sizeof(*compilers));
    if (compilers == NULL) {
        return 0;
    }
    kept->compilers = compilers;
    kept->size = size;
    return 1;
}

/* The compiler opened from library: kept's, else load(library, err)'s,
 * then kept.  NULL with err from load (or out of host memory, the
 * compiler then lost: it is never freed). */
static inline void *
acc_rtc_keep(acc_rtc_kept *kept, const char *library,
             void *(*load)(const char *library, acc_error *err),
             acc_error *err)
{
    void *compiler = NULL;
    char *name;

    pthread_mutex_lock(&kept->lock);
    for (int i = 0; i < kept->n && compiler == NULL; i++) {
        if (strcmp(kept->names[i], library) == 0) {
            compiler = kept->compilers[i];
        }
    }
    if (compiler == NULL) {
        compiler = load(library, err);
        name = compiler != NULL ? strdup(library) : NULL;
        if (name != NULL && acc_rtc_kept_grow(kept)) {
            kept->names[kept->n] = name;
            kept->compilers[kept->n++] = compiler;
        }
        else if (compiler != NULL) {
            free(name);
            compiler = NULL;
            acc_error_set(err, ACC_ERR_HOST_MEMORY, "out of host memory");
        }
    }
    pthread_mutex_unlock(&kept->lock);
    return compiler;
}

/* Fill err for entry point api that answered rc. */
static inline acc_status
acc_rtc_fail(const acc_rtc *rtc, const char *api, int rc, acc_status status,
             acc_error *err)
{
    const char *name = rtc->error_string != NULL ? rtc->error_string(rc)
                                                 : NULL;

    acc_error_driver(err, rtc->backend, api, rc, name, status);
    return status;
}

/* The compiler's log, malloc'd, or NULL when it has none (or on
 * failure: the log is only ever extra). */
static inline char *
acc_rtc_log(const acc_rtc *rtc, acc_rtc_program prog)
{
    size_t size = 0;
    char *log;

    if (rtc->log_size(prog, &size) != 0 || size <= 1 || size > (1u << 26)) {
        return NULL;
    }
    log = (char *)malloc(size + 1);
    if (log == NULL) {
        return NULL;
    }
    if (rtc->log(prog, log) != 0) {
        free(log);
        return NULL;
    }
    log[size] = '\0';
    return log;
}

/*
 * Compile size bytes of source (no NUL) with own[0, nown) (the target,
 * the backend's) then options[0, noptions) (the user's), asking for
 * names[0, nnames): on ACC_OK *out holds the code, its format, the log
 * and the lowered names (NULL where the compiler gave none); the
 * compiler's refusal is ACC_ERR_BUILD with its log in out->log.  On a
 * failure out may still hold what was made: the caller frees it
 * (acc_compiled's contract: the core frees it).
 */
static inline acc_status
acc_rtc_compile(const acc_rtc *rtc, const char *source, size_t size, const char *const *own,
                int nown, const char *const *options, int noptions,
                const char *const *names, int nnames, acc_compiled *out,
                acc_error *err)
{
    acc_rtc_program prog = NULL;
    const char **all = NULL;
    char *text = NULL;
    size_t code_size = 0;
    acc_status st = ACC_OK;
    int rc;

    memset(out, 0, sizeof(*out));
    text = (char *)malloc(size + 1);
    all = (const char **)calloc((size_t)(nown + noptions) + 1, sizeof(*all));
    if (nnames > 0) {
        out->lowered = (char **)calloc((size_t)nnames, sizeof(char *));
    }
    if (text == NULL || all == NULL || (nnames > 0 && out->lowered == NULL)) {
        st = ACC_ERR_HOST_MEMORY;
        acc_error_set(err, st, "out of host memory");
        goto done;
    }
    memcpy(text, source, size);
    text[size] = '\0';
    for (int i = 0; i < nown; i++) {
        all[i] = own[i];
    }
    for (int i = 0; i < noptions; i++) {
        all[nown + i] = options[i];
    }
    rc = rtc->create(&prog, text, rtc->file_name, 0, NULL, NULL);
    if (rc != 0 || prog == NULL) {
        st = acc_rtc_fail(rtc, rtc->create_name, rc, ACC_ERR_DRIVER, err);
        prog = NULL;
        goto done;
    }
    for (int i = 0; i < nnames; i++) {
        rc = rtc->add_name(prog, names[i]);
        if (rc != 0) {
            st = acc_rtc_fail(rtc, rtc->add_name_name, rc,
                              ACC_ERR_INVALID_ARGUMENT, err);
            acc_format(err->message, sizeof(err->message), "%s refused "
                       "the name expression '%.200s': %s", rtc->compiler,
                       names[i], err->code_name ? err->code_name : "");
            goto done;
        }
    }
    rc = rtc->compile(prog, nown + noptions, all);
    out->log = acc_rtc_log(rtc, prog);
    if (rc != 0) {
        st = acc_rtc_fail(rtc, rtc->compile_name, rc,
                          rc == rtc->refused_option
                              || rc == rtc->refused_source
                              ? ACC_ERR_BUILD : ACC_ERR_DRIVER, err);
        goto done;
    }
    rc = rtc->code_size(prog, &code_size);
    if (rc != 0) {
        st = acc_rtc_fail(rtc, rtc->code_size_name, rc, ACC_ERR_DRIVER, err);
        goto done;
    }
    if (code_size > 0) {
        out->code = malloc(code_size);
        if (out->code == NULL) {
            st = ACC_ERR_HOST_MEMORY;
            acc_error_set(err, st, "out of host memory");
            goto done;
        }
        rc = rtc->code(prog, (char *)out->code);
    }
    if (rc != 0 || code_size == 0) {
        st = acc_rtc_fail(rtc, rtc->code_name, rc, ACC_ERR_DRIVER, err);
        if (rc == 0) {
            acc_format(err->message, sizeof(err->message), "%s() gave no "
                       "code (does an option ask for another output, such "
                       "as NVRTC's -dlto, or is the target an architecture "
                       "this %s does not compile to that format?)",
                       rtc->code_name, rtc->compiler);
        }
        goto done;
    }
    out->size = code_size;
    out->format = rtc->code_format;
    if (rtc->code_format == ACC_FORMAT_PTX) {
        /* PTX comes with its NUL: the text is what precedes it. */
        while (out->size > 0 && ((char *)out->code)[out->size - 1] == '\0') {
            out->size--;
        }
    }
    for (int i = 0; i < nnames; i++) {
        const char *lowered = NULL;

        if (rtc->lowered(prog, names[i], &lowered) == 0 && lowered != NULL) {
            out->lowered[i] = strdup(lowered);
            if (out->lowered[i] == NULL) {
                st = ACC_ERR_HOST_MEMORY;
                acc_error_set(err, st, "out of host memory");
                goto done;
            }
        }
    }

done:
    if (prog != NULL) {
        (void)rtc->destroy(&prog);   /* nothing to do if it fails */
    }
    free(text);
    free(all);
    return st;
}

#ifdef __cplusplus
}
#endif

#endif /* ACCELERATOR_RTC_H */
