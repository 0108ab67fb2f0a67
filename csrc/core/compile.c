/*
 * compile.c - kernels from source: the dispatcher's half of the backends'
 * compilers (backend.h: compiler_open, compile).  Which library is tried,
 * and in what order, is the Python layer's choice (accelerator/_source.py
 * searches and keeps the compile cache); here the format is checked
 * against the selected backend, the source and options once, and each
 * call forwarded.  The backends keep what they opened; the core keeps
 * nothing.
 *
 * Plain C, no Python objects.  The top of the core, beside kernel.c
 * (whose format names it uses); nothing in the core calls it.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>


/* The selected backend when it compiles format on device; else NULL with
 * the failure in err. */
static const acc_backend *
compiler_backend(int device, acc_code_format format, acc_error *err)
{
    const acc_backend *b;
    char takes[64];

    if (acc_check_device_ready(device, err) != ACC_OK) {
        return NULL;
    }
    b = acc_selected_backend();
    if (b->module_load == NULL) {
        acc_error_unsupported("kernels", err);
        return NULL;
    }
    if (!acc_code_format_is_source(format)) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "%s is not a source "
                      "format, expected cuda-c++ or hip-c++",
                      acc_code_format_name(format) != NULL
                          ? acc_code_format_name(format) : "(none)");
        return NULL;
    }
    if (!(b->source_formats & ACC_FORMAT_BIT(format))) {
        acc_code_format_list(b->source_formats, takes, sizeof(takes));
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "backend %s does not "
                      "compile %s source (is it a kernel for another "
                      "backend?); it compiles %s", b->name,
                      acc_code_format_name(format),
                      takes[0] != '\0' ? takes : "no source");
        return NULL;
    }
    return b;
}

/* ACC_OK when the n strings of list hold no NUL in their lengths[i]
 * bytes (what a C compiler reads would end there). */
static acc_status
check_strings(const char *what, const char *const *list,
              const size_t *lengths, int n, acc_error *err)
{
    for (int i = 0; i < n; i++) {
        if (list[i] == NULL || strlen(list[i]) != lengths[i]) {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "%s %d holds a NUL "
                          "character, expected text without NUL "
                          "characters", what, i);
            return ACC_ERR_INVALID_ARGUMENT;
        }
    }
    return ACC_OK;
}

static acc_status
open_compiler(const acc_backend *b, int device, acc_code_format format,
              const char *library, void **compiler, char *id, size_t size,
              acc_error *err)
{
    if (library == NULL || library[0] == '\0') {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "no compiler library "
                      "named, expected a path or a library name");
        return ACC_ERR_INVALID_ARGUMENT;
    }
    id[0] = '\0';
    *compiler = NULL;
    if (ACC_SLOT(b, compiler_open, err, device, format, library, compiler,
                 id, size, err) != ACC_OK) {
        return err->status;
    }
    id[size - 1] = '\0';
    if (*compiler == NULL || id[0] == '\0') {
        acc_error_set(err, ACC_ERR_DRIVER, "backend %s opened the %s "
                      "compiler without %s", b->name,
                      acc_code_format_name(format),
                      *compiler == NULL ? "a compiler" : "telling who it is");
        return ACC_ERR_DRIVER;
    }
    return ACC_OK;
}

acc_status
acc_compiler_id(int device, acc_code_format format, const char *library,
                char *id, size_t size, acc_error *err)
{
    const acc_backend *b = compiler_backend(device, format, err);
    void *compiler;

    if (b == NULL) {
        return err->status;
    }
    return open_compiler(b, device, format, library, &compiler, id, size,
                         err);
}

void
acc_compiled_free(acc_compiled *c, int nnames)
{
    if (c->lowered != NULL) {
        for (int i = 0; i < nnames; i++) {
            free(c->lowered[i]);
        }
    }
    free(c->lowered);
    free(c->code);
    free(c->log);
    memset(c, 0, sizeof(*c));
}

acc_status
acc_compile(int device, acc_code_format format, const char *library,
            const char *source, size_t size, const char *const *options,
            const size_t *option_lengths, int noptions,
            const char *const *names, const size_t *name_lengths,
            int nnames, acc_compiled *out, acc_error *err)
{
    const acc_backend *b = compiler_backend(device, format, err);
    void *compiler;
    char id[512];
    acc_status st;

    memset(out, 0, sizeof(*out));
    if (b == NULL) {
        return err->status;
    }
    if (size == 0) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the source is empty, "
                      "expected %s text", acc_code_format_name(format));
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (memchr(source, '\0', size) != NULL) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "the %s source holds "
                      "a NUL byte at byte %zu, expected text without NUL "
                      "bytes", acc_code_format_name(format),
                      (size_t)((const char *)memchr(source, '\0', size)
                               - source));
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (noptions < 0 || noptions > ACC_MAX_COMPILE_STRINGS || nnames < 0
        || nnames > ACC_MAX_COMPILE_STRINGS) {
        acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "%d options and %d "
                      "name expressions, expected at most %d of each",
                      noptions, nnames, ACC_MAX_COMPILE_STRINGS);
        return ACC_ERR_INVALID_ARGUMENT;
    }
    if (check_strings("option", options, option_lengths, noptions, err)
            != ACC_OK
        || check_strings("name expression", names, name_lengths, nnames,
                         err) != ACC_OK) {
        return err->status;
    }
    for (int i = 0; i < nnames; i++) {
        if (names[i][0] == '\0') {
            acc_error_set(err, ACC_ERR_INVALID_ARGUMENT, "name expression "
                          "%d is empty, expected a kernel's C++ name "
                          "(\"saxpy<float>\")", i);
            return ACC_ERR_INVALID_ARGUMENT;
        }
    }
    if (open_compiler(b, device, format, library, &compiler, id, sizeof(id),
                      err) != ACC_OK) {
        return err->status;
    }
    st = ACC_SLOT(b, compile, err, device, compiler, source, size, options,
                  noptions, names, nnames, out, err);
    if (st == ACC_OK && (out->code == NULL || out->size == 0
                         || !(b->code_formats & ACC_FORMAT_BIT(out->format))
                         || (nnames > 0 && out->lowered == NULL))) {
        acc_error_set(err, ACC_ERR_DRIVER, "backend %s compiled %s source "
                      "to %s", b->name, acc_code_format_name(format),
                      out->code == NULL || out->size == 0
                          ? "nothing"
                      : nnames > 0 && out->lowered == NULL
                          ? "code without the lowered names asked for"
                          : "a format it does not load");
        st = ACC_ERR_DRIVER;
    }
    if (st != ACC_OK) {
        /* The log stays for a build error; the rest goes. */
        char *log = out->log;

        out->log = NULL;
        acc_compiled_free(out, nnames);
        out->log = st == ACC_ERR_BUILD ? log : NULL;
        if (st != ACC_ERR_BUILD) {
            free(log);
        }
    }
    return st;
}
