/*
 * py_compile.c - the source compilers' two private functions, which
 * accelerator/_source.py calls for Module(code, format="cuda-c++") and
 * "hip-c++": who compiles (the compile cache's key) and the compile
 * itself.  The search for a compiler library and the cache are Python's
 * (accelerator/_source.py, accelerator/_kernel_cache.py); the core checks
 * and forwards (compile.c).
 */
#include "pyaccel.h"

#include <stdlib.h>
#include <string.h>

/* A str argument as UTF-8 text without NUL; NULL with an error. */
static const char *
plain_text(PyObject *obj, const char *what)
{
    const char *text;
    Py_ssize_t size;

    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what,
                     acc_type_name(obj));
        return NULL;
    }
    text = PyUnicode_AsUTF8AndSize(obj, &size);
    if (text != NULL && strlen(text) != (size_t)size) {
        PyErr_Format(PyExc_ValueError, "%s holds a NUL character", what);
        return NULL;
    }
    return text;
}

/* The format and device arguments: a source format's name and a device
 * index; -1 with an exception set. */
static int
parse_target(acc_state *st, PyObject *format_arg, PyObject *device_arg,
             acc_code_format *format, int *device)
{
    const char *name;
    long long index;

    name = plain_text(format_arg, "format");
    if (name == NULL) {
        return -1;
    }
    acc_ensure_probed();
    *format = acc_code_format_named(name);
    if (!acc_code_format_is_source(*format)) {
        PyErr_Format(PyExc_ValueError, "%R is not a source format, "
                     "expected 'cuda-c++' or 'hip-c++'", format_arg);
        return -1;
    }
    if (acc_resolve_device(st, device_arg, 0, &index) < 0
        || acc_require_ready(st) < 0 || acc_check_index(st, index) < 0) {
        return -1;
    }
    *device = (int)index;
    return 0;
}

/* -1 with TypeError unless nargs is n. */
static int
check_count(const char *name, Py_ssize_t nargs, Py_ssize_t n)
{
    if (nargs != n) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd positional arguments "
                     "(%zd given)", name, n, nargs);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(compiler_id_doc,
"_compiler_id($module, format, library, device, /)\n--\n\n"
"Who compiles source of format ('cuda-c++', 'hip-c++') for device with\n"
"the compiler in library (a path, or a name for dlopen): compiler,\n"
"version, target and the library's path.  KeyError (why) when library\n"
"does not open or holds no such compiler.");

static PyObject *
compiler_id(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    acc_code_format format;
    const char *library;
    char id[1024];
    int device;
    acc_error err;
    acc_status status;

    if (check_count("_compiler_id", nargs, 3) < 0
        || parse_target(st, args[0], args[2], &format, &device) < 0
        || (library = plain_text(args[1], "library")) == NULL) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_compiler_id(device, format, library, id, sizeof(id), &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    return acc_text(id, sizeof(id));
}

/* The str items of a tuple as C strings with their lengths (borrowed
 * from the items); -1 with an error. */
static int
strings_of(PyObject *tuple, const char *what, const char ***list,
           size_t **lengths, int *n)
{
    Py_ssize_t count;

    *list = NULL;
    *lengths = NULL;
    if (!PyTuple_Check(tuple)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of str, not "
                     "%.100s", what, acc_type_name(tuple));
        return -1;
    }
    count = PyTuple_Size(tuple);
    if (count > ACC_MAX_COMPILE_STRINGS) {
        PyErr_Format(PyExc_ValueError, "%zd %s, expected at most %d", count,
                     what, ACC_MAX_COMPILE_STRINGS);
        return -1;
    }
    *list = PyMem_Calloc((size_t)count + 1, sizeof(**list));
    *lengths = PyMem_Calloc((size_t)count + 1, sizeof(**lengths));
    if (*list == NULL || *lengths == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GetItem(tuple, i);
        Py_ssize_t size;

        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s must hold only str, not "
                         "%.100s (item %zd)", what, acc_type_name(item), i);
            return -1;
        }
        (*list)[i] = PyUnicode_AsUTF8AndSize(item, &size);
        if ((*list)[i] == NULL) {
            return -1;
        }
        (*lengths)[i] = (size_t)size;
    }
    *n = (int)count;
    return 0;
}

/* (code, format, lowered, log) for what the compiler made. */
static PyObject *
compiled_result(const acc_compiled *c, int nnames)
{
    PyObject *code, *lowered, *log, *result;

    code = PyBytes_FromStringAndSize(c->code, (Py_ssize_t)c->size);
    lowered = PyTuple_New(nnames);
    log = acc_text_or_none(c->log);
    if (code == NULL || lowered == NULL || log == NULL) {
        goto fail;
    }
    for (int i = 0; i < nnames; i++) {
        PyObject *name = acc_text_or_none(c->lowered[i]);

        if (name == NULL) {
            goto fail;
        }
        if (PyTuple_SetItem(lowered, i, name) < 0) {
            goto fail;
        }
    }
    result = Py_BuildValue("(NsNN)", code, acc_code_format_name(c->format),
                           lowered, log);
    return result;

fail:
    Py_XDECREF(code);
    Py_XDECREF(lowered);
    Py_XDECREF(log);
    return NULL;
}

PyDoc_STRVAR(compile_doc,
"_compile($module, format, library, device, source, options, names, /)\n"
"--\n\n"
"Compile source (bytes of text) of format for device with the compiler in\n"
"library, passing options (a tuple of str) and asking for the lowered\n"
"names of names (a tuple of name expressions).  Returns (code, format of\n"
"code, lowered names (a tuple, None where the compiler told none), log\n"
"(None when empty)).  BuildError with the compiler's log when it refuses\n"
"the source or an option.");

static PyObject *
compile_source(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    const char **options = NULL, **names = NULL;
    size_t *option_lengths = NULL, *name_lengths = NULL;
    int noptions = 0, nnames = 0, device;
    acc_code_format format;
    const char *library;
    PyObject *result = NULL;
    Py_buffer source = {0};
    acc_compiled out;
    acc_error err;
    acc_status status;

    if (check_count("_compile", nargs, 6) < 0
        || parse_target(st, args[0], args[2], &format, &device) < 0
        || (library = plain_text(args[1], "library")) == NULL) {
        return NULL;
    }
    if (!PyBytes_Check(args[3])) {
        PyErr_Format(PyExc_TypeError, "source must be bytes, not %.100s",
                     acc_type_name(args[3]));
        return NULL;
    }
    if (strings_of(args[4], "options", &options, &option_lengths,
                   &noptions) < 0
        || strings_of(args[5], "name expressions", &names, &name_lengths,
                      &nnames) < 0
        || PyObject_GetBuffer(args[3], &source, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    /* The tuples and the bytes are immutable and held by the caller: the
     * borrowed pointers stay valid with the GIL released. */
    Py_BEGIN_ALLOW_THREADS
    status = acc_compile(device, format, library, source.buf,
                         (size_t)source.len, options, option_lengths,
                         noptions, names, name_lengths, nnames, &out, &err);
    Py_END_ALLOW_THREADS
    if (status == ACC_ERR_BUILD) {
        acc_raise_build_error(st, &err, out.log);
    }
    else if (status != ACC_OK) {
        acc_raise(st, &err);
    }
    else {
        result = compiled_result(&out, nnames);
    }
    acc_compiled_free(&out, nnames);

done:
    if (source.obj != NULL) {
        PyBuffer_Release(&source);
    }
    PyMem_Free(options);
    PyMem_Free(option_lengths);
    PyMem_Free(names);
    PyMem_Free(name_lengths);
    return result;
}

PyMethodDef acc_compile_methods[] = {
    {"_compiler_id", (PyCFunction)(void (*)(void))compiler_id, METH_FASTCALL,
     compiler_id_doc},
    {"_compile", (PyCFunction)(void (*)(void))compile_source, METH_FASTCALL,
     compile_doc},
    {NULL, NULL, 0, NULL},
};
