/*
 * py_kernel.c - accelerator.Module (device code loaded on one device),
 * accelerator.Kernel (one of its entry points) and accelerator.launch()
 * (docs/kernels.rst).  The core (kernel.c) checks formats, geometry and
 * arguments and words those errors; this file turns Python objects into
 * bytes and addresses, and keeps the books of the memory a launch uses
 * (py_lifetime.c).
 */
#include "pybuffer.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    acc_module *m;            /* NULL only while being made */
    int device;
    acc_code_format source;   /* the source format compiled, or
                               * ACC_FORMAT_NONE for code loaded as is */
    PyObject *lowered;        /* name expression -> symbol (a dict), for
                               * source; NULL otherwise */
    PyObject *weakreflist;
} ModuleObject;

typedef struct {
    PyObject_HEAD
    PyObject *module;         /* the Module (keeps the kernel alive) */
    acc_kernel *k;            /* borrowed from the module's */
} KernelObject;

static acc_state *
kernel_state(PyObject *self)
{
    return acc_state_from_type(Py_TYPE(self));
}

/* Module ------------------------------------------------------------------ */

/* The entry of a dict of code for the selected backend (its device type,
 * or the alias users write for it): borrowed. */
static PyObject *
code_for_backend(PyObject *code)
{
    const char *types[2] = {acc_device_type(), acc_device_type_alias()};
    PyObject *keys;

    for (int i = 0; i < 2; i++) {
        PyObject *entry;

        if (types[i] == NULL) {
            continue;
        }
        entry = PyDict_GetItemString(code, types[i]);
        if (entry != NULL) {
            return entry;
        }
    }
    keys = PyDict_Keys(code);
    if (keys != NULL) {
        PyErr_Format(PyExc_ValueError, "Module(): the code has no entry for "
                     "device type '%s' (the selected backend); its keys are "
                     "%R", acc_device_type(), keys);
        Py_DECREF(keys);
    }
    return NULL;
}

/* The format argument: None or one of the names; -1 with an error. */
static int
parse_format(PyObject *obj, acc_code_format *format)
{
    const char *name;
    Py_ssize_t length;

    *format = ACC_FORMAT_NONE;
    if (obj == Py_None) {
        return 0;
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "Module(): format must be a str or "
                     "None, not %.100s", acc_type_name(obj));
        return -1;
    }
    name = PyUnicode_AsUTF8AndSize(obj, &length);
    if (name == NULL) {
        return -1;
    }
    *format = strlen(name) == (size_t)length ? acc_code_format_named(name)
                                             : ACC_FORMAT_NONE;
    if (*format == ACC_FORMAT_NONE) {
        PyErr_Format(PyExc_ValueError, "Module(): unknown format %R, "
                     "expected one of 'ptx', 'cubin', 'fatbin', 'spirv', "
                     "'opencl-c', 'hsaco', 'native', 'cuda-c++', "
                     "'hip-c++' or None (recognise it)",
                     obj);
        return -1;
    }
    return 0;
}

/* The options argument (None, a str, or a list or tuple of str) as one
 * space-separated str, or None; NULL with an error. */
static PyObject *
parse_options(PyObject *obj)
{
    PyObject *sep, *joined;

    if (obj == Py_None) {
        return Py_NewRef(Py_None);
    }
    if (PyUnicode_Check(obj)) {
        return Py_NewRef(obj);
    }
    if (!PyList_Check(obj) && !PyTuple_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "Module(): options must be a str, a "
                     "list or tuple of str, or None, not %.100s",
                     acc_type_name(obj));
        return NULL;
    }
    sep = PyUnicode_FromString(" ");
    if (sep == NULL) {
        return NULL;
    }
    joined = PyUnicode_Join(sep, obj);
    Py_DECREF(sep);
    if (joined == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "Module(): options must hold only "
                        "str");
    }
    return joined;
}

/* The code argument as bytes (a str is taken as UTF-8 text); NULL with an
 * error. */
static PyObject *
code_bytes(PyObject *code)
{
    if (PyUnicode_Check(code)) {
        return PyUnicode_AsUTF8String(code);
    }
    if (PyBytes_Check(code)) {
        return Py_NewRef(code);
    }
    if (PyObject_CheckBuffer(code)) {
        return PyBytes_FromObject(code);
    }
    PyErr_Format(PyExc_TypeError, "Module(): code must be bytes, a str, or "
                 "a dict from device type to code, not %.100s",
                 acc_type_name(code));
    return NULL;
}

/* Compile source (bytes) of format through accelerator._source, which
 * keeps the cache (with the backend's compiler, or for OpenCL C on a
 * backend that loads SPIR-V, an offline one): *code becomes the compiled
 * code (a new reference), *format its format and *lowered the name
 * expressions' symbols (a dict, new reference).  -1 with an exception
 * set. */
static int
compile_source(PyObject *source, acc_code_format *format,
               PyObject *options, PyObject *names, long long device,
               PyObject **code, PyObject **lowered)
{
    const char *how = *format == ACC_FORMAT_OPENCL_C ? "build_spirv"
                                                     : "build";
    PyObject *helper, *result, *name;
    const char *text;

    *code = NULL;
    *lowered = NULL;
    helper = PyImport_ImportModule("accelerator._source");
    if (helper == NULL) {
        return -1;
    }
    result = PyObject_CallMethod(helper, how, "OsOOL", source,
                                 acc_code_format_name(*format), options,
                                 names, device);
    Py_DECREF(helper);
    if (result == NULL) {
        return -1;
    }
    if (!PyTuple_Check(result) || PyTuple_Size(result) != 3
        || !PyBytes_Check(PyTuple_GetItem(result, 0))
        || !PyUnicode_Check(PyTuple_GetItem(result, 1))
        || !PyDict_Check(PyTuple_GetItem(result, 2))) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_SystemError, "accelerator._source.build() "
                        "returned no (code, format, lowered)");
        return -1;
    }
    name = PyTuple_GetItem(result, 1);
    text = PyUnicode_AsUTF8AndSize(name, NULL);
    if (text == NULL) {
        Py_DECREF(result);
        return -1;
    }
    *format = acc_code_format_named(text);
    *code = Py_NewRef(PyTuple_GetItem(result, 0));
    *lowered = Py_NewRef(PyTuple_GetItem(result, 2));
    Py_DECREF(result);
    return 0;
}

/* Load code (a Module() argument, not a dict) and wrap it. */
static PyObject *
module_make(PyTypeObject *cls, PyObject *code, PyObject *format_arg,
            PyObject *options_arg, PyObject *device_arg, PyObject *names)
{
    acc_state *st = acc_state_from_type(cls);
    acc_code_format format, source = ACC_FORMAT_NONE;
    PyObject *bytes = NULL, *options = NULL, *lowered = NULL;
    const char *options_text = NULL;
    Py_ssize_t options_size = 0;
    long long device;
    ModuleObject *self;
    acc_module *m = NULL;
    char *log = NULL;
    acc_error err;
    acc_status status;

    acc_ensure_probed();
    if (parse_format(format_arg, &format) < 0
        || acc_resolve_device(st, device_arg, 1, &device) < 0
        || acc_require_ready(st) < 0 || acc_check_index(st, device) < 0) {
        return NULL;
    }
    if (PyDict_Check(code)) {
        code = code_for_backend(code);
        if (code == NULL) {
            return NULL;
        }
    }
    bytes = code_bytes(code);
    if (bytes == NULL) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_code_format_resolve(PyBytes_AsString(bytes),
                                     (size_t)PyBytes_Size(bytes), &format,
                                     &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        acc_raise(st, &err);
        goto fail;
    }
    if (names != Py_None && !acc_code_format_is_source(format)) {
        PyErr_Format(PyExc_ValueError, "Module(): name_expressions are for "
                     "source (cuda-c++, hip-c++), which the compiler "
                     "lowers; %s code has its symbols already, expected "
                     "name_expressions=None", acc_code_format_name(format));
        goto fail;
    }
    if (acc_code_format_is_source(format)
        || (format == ACC_FORMAT_OPENCL_C && !acc_code_format_loads(format))) {
        PyObject *compiled;

        source = format;
        if (compile_source(bytes, &format, options_arg, names, device,
                           &compiled, &lowered) < 0) {
            goto fail;
        }
        Py_DECREF(bytes);
        bytes = compiled;
        options = Py_NewRef(Py_None);   /* the compiler took them */
    }
    else {
        options = parse_options(options_arg);
        if (options == NULL) {
            goto fail;
        }
    }
    if (options != Py_None) {
        options_text = PyUnicode_AsUTF8AndSize(options, &options_size);
        if (options_text == NULL) {
            goto fail;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_module_load((int)device, format, PyBytes_AsString(bytes),
                             (size_t)PyBytes_Size(bytes), options_text,
                             (size_t)options_size, &m, &log, &err);
    Py_END_ALLOW_THREADS
    if (status == ACC_ERR_BUILD) {
        acc_raise_build_error(st, &err, log);
        free(log);
        goto fail;
    }
    free(log);
    if (status != ACC_OK) {
        acc_raise(st, &err);
        goto fail;
    }
    Py_CLEAR(bytes);
    Py_CLEAR(options);
    self = (ModuleObject *)acc_alloc(cls);
    if (self == NULL) {
        Py_XDECREF(lowered);
        Py_BEGIN_ALLOW_THREADS
        acc_module_release(m);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    self->m = m;
    self->device = (int)device;
    self->source = source;
    self->lowered = lowered;
    return (PyObject *)self;

fail:
    Py_XDECREF(bytes);
    Py_XDECREF(options);
    Py_XDECREF(lowered);
    return NULL;
}

static const char *const module_names[] = {
    "code", "format", "options", "device", "name_expressions", NULL};

static PyObject *
module_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const acc_params params = {"Module()", module_names, 0, 1, 1};
    PyObject *values[5] = {NULL, Py_None, Py_None, Py_None, Py_None};

    if (acc_parse_tuple(args, kwargs, &params, values) < 0) {
        return NULL;
    }
    return module_make(cls, values[0], values[1], values[2], values[3],
                       values[4]);
}

/* The format a file's suffix names, or None. */
static PyObject *
format_of_suffix(PyObject *path)
{
    static const char *const suffixes[][2] = {
        {".ptx", "ptx"}, {".cubin", "cubin"}, {".fatbin", "fatbin"},
        {".spv", "spirv"}, {".cl", "opencl-c"}, {".hsaco", "hsaco"},
        {".cu", "cuda-c++"}, {".hip", "hip-c++"},
    };
    PyObject *text = PyOS_FSPath(path);
    const char *name;
    Py_ssize_t length;

    if (text == NULL) {
        return NULL;
    }
    if (!PyUnicode_Check(text)) {   /* bytes: no suffix we know */
        Py_DECREF(text);
        return Py_NewRef(Py_None);
    }
    name = PyUnicode_AsUTF8AndSize(text, &length);
    if (name == NULL) {
        Py_DECREF(text);
        return NULL;
    }
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t n = strlen(suffixes[i][0]);

        if ((size_t)length >= n
            && strcmp(name + length - (Py_ssize_t)n, suffixes[i][0]) == 0) {
            Py_DECREF(text);
            return PyUnicode_FromString(suffixes[i][1]);
        }
    }
    Py_DECREF(text);
    return Py_NewRef(Py_None);
}

static PyObject *
module_from_file(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {
        "path", "format", "options", "device", "name_expressions", NULL};
    static const acc_params params = {"Module.from_file()", names, 0, 1, 1};
    PyObject *values[5] = {NULL, Py_None, Py_None, Py_None, Py_None};
    PyObject *path, *io, *file, *code, *format, *module;

    if (acc_parse_args(args, nargs, kwnames, &params, values) < 0) {
        return NULL;
    }
    /* A path only: io.open would take an int as a file descriptor and
     * close it, which the caller owns. */
    path = PyOS_FSPath(values[0]);
    if (path == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "Module.from_file(): path must "
                         "be a str, bytes or os.PathLike, not %.100s (for "
                         "an open file, pass its bytes to Module())",
                         acc_type_name(values[0]));
        }
        return NULL;
    }
    format = values[1] == Py_None ? format_of_suffix(path)
                                  : Py_NewRef(values[1]);
    if (format == NULL) {
        Py_DECREF(path);
        return NULL;
    }
    io = PyImport_ImportModule("io");
    file = io != NULL ? PyObject_CallMethod(io, "open", "Os", path, "rb")
                      : NULL;
    Py_XDECREF(io);
    Py_DECREF(path);
    if (file == NULL) {
        Py_DECREF(format);
        return NULL;
    }
    code = PyObject_CallMethod(file, "read", NULL);
    Py_XDECREF(PyObject_CallMethod(file, "close", NULL));
    Py_DECREF(file);
    if (code == NULL || PyErr_Occurred()) {
        Py_XDECREF(code);
        Py_DECREF(format);
        return NULL;
    }
    module = module_make((PyTypeObject *)cls, code, format, values[2],
                         values[3], values[4]);
    Py_DECREF(code);
    Py_DECREF(format);
    return module;
}

static PyObject *
module_get_kernel(ModuleObject *self, PyObject *name)
{
    acc_state *st = kernel_state((PyObject *)self);
    KernelObject *kernel;
    const char *text;
    Py_ssize_t length;
    acc_kernel *k;
    acc_error err;
    acc_status status;

    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "get_kernel() expected the kernel's "
                     "name as a str, got %.100s", acc_type_name(name));
        return NULL;
    }
    text = PyUnicode_AsUTF8AndSize(name, &length);
    if (text == NULL || acc_require_usable(st) < 0) {
        return NULL;
    }
    if (strlen(text) != (size_t)length) {
        PyErr_SetString(PyExc_ValueError, "get_kernel(): the name holds a "
                        "NUL character");
        return NULL;
    }
    if (self->lowered != NULL) {
        PyObject *symbol = PyDict_GetItemWithError(self->lowered, name);

        if (symbol == NULL && PyErr_Occurred()) {
            return NULL;
        }
        if (symbol != NULL) {
            text = PyUnicode_AsUTF8AndSize(symbol, NULL);
            if (text == NULL) {
                return NULL;
            }
        }
        else if (strpbrk(text, "<>:(), ") != NULL) {
            PyErr_Format(PyExc_KeyError, "get_kernel(): %R is a C++ name; "
                         "pass it in Module(..., name_expressions=[%R]) so "
                         "that the compiler tells the symbol it lowers to "
                         "(or declare the kernel extern \"C\")", name,
                         name);
            return NULL;
        }
    }
    /* The core makes each kernel once per module; the Kernel objects are
     * not cached here, so that a Module and its Kernels form no cycle
     * (the module unloads as soon as the last of them goes). */
    Py_BEGIN_ALLOW_THREADS
    status = acc_kernel_get(self->m, text, &k, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    kernel = (KernelObject *)acc_alloc(st->kernel_type);
    if (kernel == NULL) {
        return NULL;
    }
    kernel->module = Py_NewRef((PyObject *)self);
    kernel->k = k;
    return (PyObject *)kernel;
}

static PyObject *
module_get_device(ModuleObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->device);
}

static PyObject *
module_get_format(ModuleObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(acc_code_format_name(
        self->source != ACC_FORMAT_NONE ? self->source
                                        : acc_module_format(self->m)));
}

static PyObject *
module_repr(ModuleObject *self)
{
    if (self->source != ACC_FORMAT_NONE) {
        return PyUnicode_FromFormat("<accelerator.Module %s (%s) on %s:%d>",
                                    acc_code_format_name(self->source),
                                    acc_code_format_name(
                                        acc_module_format(self->m)),
                                    acc_device_type(), self->device);
    }
    return PyUnicode_FromFormat("<accelerator.Module %s on %s:%d>",
                                acc_code_format_name(
                                    acc_module_format(self->m)),
                                acc_device_type(), self->device);
}

static int
module_traverse(ModuleObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->lowered);
    return 0;
}

static void
module_dealloc(ModuleObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    Py_CLEAR(self->lowered);
    if (self->m != NULL) {
        /* The last reference defers the unload behind the module's
         * queued launches, which may wait for the oldest deferred
         * release (memory.c's bound) and runs the releases that are
         * ready: never with the GIL held. */
        Py_BEGIN_ALLOW_THREADS
        acc_module_release(self->m);
        Py_END_ALLOW_THREADS
    }
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

PyDoc_STRVAR(module_doc,
"Module(code, *, format=None, options=None, device=None,\n"
"       name_expressions=None)\n--\n\n"
"Device code loaded on one device of the selected backend.\n\n"
"code is bytes or a str, or a dict from device type to code (its entry\n"
"for the selected backend is loaded).  format is 'ptx', 'cubin',\n"
"'fatbin', 'spirv', 'opencl-c', 'hsaco', 'native', the source formats\n"
"'cuda-c++' (NVRTC) and 'hip-c++' (hiprtc), or None to recognise it\n"
"(SPIR-V by its magic number; an ELF image is a cubin for machine\n"
"EM_CUDA, an hsaco for EM_AMDGPU, else native; PTX text; else OpenCL C\n"
"source, or the source a backend without OpenCL C compiles).  options\n"
"are the driver's build options, or the compiler's for source (a str,\n"
"split at white space for a compiler, or a list of str).  device\n"
"defaults to the current device.  name_expressions (source only): C++\n"
"names ('saxpy<float>') that get_kernel() then finds.  Code that the\n"
"driver or compiler fails to build raises BuildError with its log;\n"
"compiled source is cached on disk (ACCELERATOR_KERNEL_CACHE_DIR).");

PyDoc_STRVAR(from_file_doc,
"from_file($type, path, *, format=None, options=None, device=None,\n"
"          name_expressions=None)\n--\n\n"
"Module(code) with code read from path (a str, bytes or os.PathLike;\n"
"a file descriptor is refused, so that none is closed); format=None\n"
"takes the format from the suffix (.ptx, .cubin, .fatbin, .spv, .cl,\n"
".hsaco, .cu, .hip) or else recognises it.");

PyDoc_STRVAR(get_kernel_doc,
"get_kernel($self, name, /)\n--\n\n"
"The Kernel called name (KeyError, naming the module's kernels where\n"
"the driver tells them, when the module has none).");

static PyMethodDef module_methods[] = {
    {"from_file", (PyCFunction)(void (*)(void))module_from_file,
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS, from_file_doc},
    {"get_kernel", (PyCFunction)module_get_kernel, METH_O, get_kernel_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef module_getset[] = {
    {"device", (getter)module_get_device, NULL,
     "The index of the device the code is loaded on.", NULL},
    {"format", (getter)module_get_format, NULL,
     "The code's format ('ptx', 'opencl-c', ...).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef module_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ModuleObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot module_slots[] = {
    {Py_tp_members, module_members},
    {Py_tp_new, module_new},
    {Py_tp_dealloc, module_dealloc},
    {Py_tp_traverse, module_traverse},
    {Py_tp_repr, module_repr},
    {Py_tp_methods, module_methods},
    {Py_tp_getset, module_getset},
    {Py_tp_doc, (void *)module_doc},
    {0, NULL},
};

PyType_Spec acc_module_spec = {
    .name = "accelerator.Module",
    .basicsize = sizeof(ModuleObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = module_slots,
};

/* Kernel ------------------------------------------------------------------ */

static PyObject *
kernel_get_name(KernelObject *self, void *closure)
{
    (void)closure;
    return acc_text(acc_kernel_name(self->k), 0);
}

static PyObject *
kernel_get_module(KernelObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->module);
}

/* n, or None when it is negative (unknown). */
static PyObject *
known(long long n)
{
    return n < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(n);
}

static PyObject *
kernel_get_attributes(KernelObject *self, void *closure)
{
    const acc_kernel_info *info = acc_kernel_info_of(self->k);
    int max_threads = info->max_threads_per_block;

    (void)closure;
    return Py_BuildValue(
        "{s:N, s:N, s:N, s:N, s:N, s:N}",
        "max_threads_per_block", known(max_threads > 0 ? max_threads : -1),
        "shared_memory_bytes", known(info->shared_bytes),
        "local_memory_bytes", known(info->local_bytes),
        "registers", known(info->registers),
        "max_dynamic_shared_memory_bytes", known(info->max_shared_bytes),
        "num_args", known(info->nparams));
}

/* Two Kernel objects of one kernel (get_kernel twice) are equal. */
static PyObject *
kernel_richcompare(PyObject *a, PyObject *b, int op)
{
    acc_state *st = kernel_state(a);
    int same;

    if ((op != Py_EQ && op != Py_NE)
        || !PyObject_TypeCheck(b, st->kernel_type)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    same = ((KernelObject *)a)->k == ((KernelObject *)b)->k;
    return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static Py_hash_t
kernel_hash(KernelObject *self)
{
    Py_hash_t h = (Py_hash_t)((uintptr_t)self->k >> 4);

    return h == -1 ? -2 : h;
}

static PyObject *
kernel_repr(KernelObject *self)
{
    return PyUnicode_FromFormat("<accelerator.Kernel '%s'>",
                                acc_kernel_name(self->k));
}

static int
kernel_traverse(KernelObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->module);
    return 0;
}

static int
kernel_clear(KernelObject *self)
{
    Py_CLEAR(self->module);
    return 0;
}

static void
kernel_dealloc(KernelObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    PyObject_GC_UnTrack(self);
    kernel_clear(self);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyGetSetDef kernel_getset[] = {
    {"name", (getter)kernel_get_name, NULL, "The kernel's name.", NULL},
    {"module", (getter)kernel_get_module, NULL,
     "The Module the kernel belongs to.", NULL},
    {"attributes", (getter)kernel_get_attributes, NULL,
     "What the driver tells of the kernel on its device, a dict:\n"
     "max_threads_per_block, shared_memory_bytes (static),\n"
     "local_memory_bytes (per thread), registers,\n"
     "max_dynamic_shared_memory_bytes and num_args; None where the\n"
     "driver cannot tell.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(kernel_doc,
"Kernel()\n--\n\n"
"One entry point of a Module, from Module.get_kernel(name); launch it\n"
"with accelerator.launch().  Not made directly.");

static PyType_Slot kernel_slots[] = {
    {Py_tp_dealloc, kernel_dealloc},
    {Py_tp_traverse, kernel_traverse},
    {Py_tp_clear, kernel_clear},
    {Py_tp_repr, kernel_repr},
    {Py_tp_richcompare, kernel_richcompare},
    {Py_tp_hash, kernel_hash},
    {Py_tp_getset, kernel_getset},
    {Py_tp_doc, (void *)kernel_doc},
    {0, NULL},
};

PyType_Spec acc_kernel_spec = {
    .name = "accelerator.Kernel",
    .basicsize = sizeof(KernelObject),
    /* Made by Module.get_kernel() only. */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = kernel_slots,
};

/* launch() ---------------------------------------------------------------- */

/* Raise the core's error for a launch value beyond 64 bits, worded with
 * the int as given: dimension i of the grid or block (what), or
 * shared_mem (i < 0).  Returns -1. */
static int
too_large(acc_state *st, const acc_kernel *k, const char *what, int i,
          PyObject *item, int below)
{
    PyObject *text = acc_int_text(item);
    const char *utf8 = text != NULL ? PyUnicode_AsUTF8AndSize(text, NULL)
                                    : NULL;
    acc_error err;

    if (utf8 != NULL) {
        if (i < 0) {
            (void)acc_launch_shared_mem_error(k, utf8, &err);
        }
        else {
            (void)acc_launch_dim_error(k, strcmp(what, "block") == 0, i,
                                       utf8, below, &err);
        }
        acc_raise(st, &err);
    }
    Py_XDECREF(text);
    return -1;
}

/* A grid or block: an int or a sequence of one to three ints, padded with
 * 1.  The core checks the values; one beyond 64 bits is refused here
 * with the core's words and the value as given. */
static int
parse_dims(acc_state *st, const acc_kernel *k, PyObject *obj,
           const char *what, long long dims[3])
{
    PyObject *seq;
    Py_ssize_t n;

    dims[0] = dims[1] = dims[2] = 1;
    if (acc_is_index(obj)) {
        seq = PyTuple_Pack(1, obj);
    }
    else if (PyTuple_Check(obj) || PyList_Check(obj)) {
        seq = PySequence_Tuple(obj);
    }
    else {
        PyErr_Format(PyExc_TypeError, "launch(): %s must be an int or a "
                     "tuple of 1 to 3 ints, not %.100s", what,
                     acc_type_name(obj));
        return -1;
    }
    if (seq == NULL) {
        return -1;
    }
    n = PyTuple_Size(seq);
    if (n < 1 || n > 3) {
        PyErr_Format(PyExc_ValueError, "launch(): %s has %zd dimensions, "
                     "expected 1 to 3", what, n);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GetItem(seq, i);
        int overflow;

        if (!acc_is_index(item)) {
            PyErr_Format(PyExc_TypeError, "launch(): %s[%zd] must be an "
                         "int, not %.100s", what, i, acc_type_name(item));
            Py_DECREF(seq);
            return -1;
        }
        dims[i] = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (dims[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return acc_index_failed(item, "launch(): expected an int");
        }
        if (overflow) {
            Py_INCREF(item);
            Py_DECREF(seq);
            (void)too_large(st, k, what, (int)i, item, overflow < 0);
            Py_DECREF(item);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

/* shared_mem: a size in bytes; one beyond 64 bits is worded by the core
 * as the launch's limit, as any other too large. */
static int
parse_shared_mem(acc_state *st, const acc_kernel *k, PyObject *obj,
                 size_t *out)
{
    PyObject *num = acc_is_index(obj) ? PyNumber_Index(obj) : NULL;
    int overflow = 0;

    if (num != NULL) {
        (void)PyLong_AsLongLongAndOverflow(num, &overflow);
        if (overflow > 0) {
            unsigned long long big = PyLong_AsUnsignedLongLong(num);

            if (big == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                (void)too_large(st, k, "shared_mem", -1, num, 0);
                Py_DECREF(num);
                return -1;
            }
        }
        Py_DECREF(num);
    }
    PyErr_Clear();   /* acc_parse_nbytes words what __index__ refused */
    return acc_parse_nbytes(st, obj, "launch() shared_mem", out);
}

/* By-value bytes of one argument; larger than inline ones are malloc'd. */
typedef struct arg_store {
    unsigned char inline_bytes[16];
    unsigned char *heap;
    uintptr_t address;
} arg_store;

/* A bare int or float packed as parameter i, whose size the driver told:
 * the Python type says integer or floating point (a float parameter, where
 * the driver says so, takes an int too). */
static int
pack_number(PyObject *obj, const acc_kernel_info *info, int i,
            acc_kernel_arg *a, arg_store *store)
{
    const acc_param *p = i < info->nparams ? &info->params[i] : NULL;
    unsigned char *out = store->inline_bytes;
    int is_float = PyFloat_Check(obj);

    if (p != NULL && p->kind == ACC_PARAM_POINTER) {
        PyErr_Format(PyExc_TypeError, "launch(): argument %d is a bare "
                     "Python %.20s, but parameter %d is a pointer: pass a "
                     "Buffer or a HostBuffer", i, acc_type_name(obj), i);
        return -1;
    }
    if (p == NULL || p->size == 0) {
        PyErr_Format(PyExc_TypeError, "launch(): argument %d is a bare "
                     "Python %.20s, but the driver does not tell the "
                     "parameter's size; pass a sized scalar such as "
                     "numpy.int32(...), numpy.float32(...) or "
                     "ctypes.c_int64(...)", i, acc_type_name(obj));
        return -1;
    }
    a->size = p->size;
    a->value = out;
    if (is_float && (p->kind == ACC_PARAM_INT || p->kind == ACC_PARAM_UINT)) {
        PyErr_Format(PyExc_TypeError, "launch(): argument %d is a float, "
                     "but parameter %d is an integer", i, i);
        return -1;
    }
    if (is_float || p->kind == ACC_PARAM_FLOAT) {
        double value = PyFloat_AsDouble(obj);

        if (value == -1.0 && PyErr_Occurred()) {
            return -1;
        }
        if (p->size == 4) {
            float f = (float)value;

            memcpy(out, &f, 4);
            return 0;
        }
        if (p->size == 8) {
            memcpy(out, &value, 8);
            return 0;
        }
        PyErr_Format(PyExc_TypeError, "launch(): argument %d is a float, "
                     "but parameter %d has %zu bytes (floats have 4 or 8); "
                     "pass a sized scalar", i, i, p->size);
        return -1;
    }
    if (p->size > 8 || (p->size & (p->size - 1)) != 0) {
        PyErr_Format(PyExc_TypeError, "launch(): argument %d is an int, but "
                     "parameter %d has %zu bytes; pass a sized scalar", i, i,
                     p->size);
        return -1;
    }
    {
        int bits_n = (int)p->size * 8;
        int overflow;
        long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
        unsigned long long bits = (unsigned long long)value;
        int fits;

        if (value == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow > 0) {   /* beyond long long: only a uint64 holds it */
            bits = PyLong_AsUnsignedLongLong(obj);
            if (bits == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                fits = 0;
            }
            else {
                fits = bits_n == 64 && p->kind != ACC_PARAM_INT;
            }
        }
        else if (overflow < 0) {
            fits = 0;
        }
        else if (value < 0) {
            fits = p->kind != ACC_PARAM_UINT
                   && (bits_n == 64 || value >= -(1LL << (bits_n - 1)));
        }
        else {
            fits = bits_n == 64
                   || (unsigned long long)value
                          <= (p->kind == ACC_PARAM_INT
                                  ? (1ULL << (bits_n - 1)) - 1
                                  : (1ULL << bits_n) - 1);
        }
        if (!fits) {
            PyErr_Format(PyExc_ValueError, "launch(): argument %d is %R, "
                         "outside what parameter %d holds (a %d-byte %s)",
                         i, obj, i, (int)p->size,
                         p->kind == ACC_PARAM_INT    ? "signed integer"
                         : p->kind == ACC_PARAM_UINT ? "unsigned integer"
                                                     : "integer");
            return -1;
        }
        memcpy(out, &bits, p->size);   /* little-endian hosts */
    }
    return 0;
}

/* What a 0-dimensional buffer's one item holds, from its struct-module
 * format (numpy: "f", ctypes: "<f", a ctypes pointer: "&<i"), for the
 * core's check against the parameter's kind.  ACC_PARAM_UNKNOWN where the
 * format does not say (a struct, text) or names an item of another size
 * than the buffer's (a ctypes Union says "B"). */
/* Whether a buffer format's byte-order prefix names the order that is
 * not the host's ('!' is network order, big-endian). */
static int
other_byte_order(char prefix)
{
#if PY_BIG_ENDIAN
    return prefix == '<';
#else
    return prefix == '>' || prefix == '!';
#endif
}

static acc_param_kind
scalar_kind(const Py_buffer *view)
{
    const char *f = view->format;
    acc_param_kind kind;
    size_t size;

    if (f == NULL) {
        return ACC_PARAM_UNKNOWN;
    }
    if (*f != '\0' && strchr("@=<>!", *f) != NULL) {
        f++;
    }
    if (f[0] == '&') {
        return view->itemsize == (Py_ssize_t)sizeof(void *)
                   ? ACC_PARAM_POINTER : ACC_PARAM_UNKNOWN;
    }
    if (f[0] == 'Z' && f[1] != '\0' && strchr("efdg", f[1]) != NULL
        && f[2] == '\0') {
        return ACC_PARAM_COMPLEX;   /* numpy's complex64 is "Zf" */
    }
    if (f[0] == '\0' || f[1] != '\0') {
        return ACC_PARAM_UNKNOWN;
    }
    switch (f[0]) {
    case 'b': kind = ACC_PARAM_INT; size = 1; break;
    case 'h': kind = ACC_PARAM_INT; size = 2; break;
    case 'i': kind = ACC_PARAM_INT; size = 4; break;
    case 'l': kind = ACC_PARAM_INT; size = sizeof(long); break;
    case 'q': kind = ACC_PARAM_INT; size = 8; break;
    case 'n': kind = ACC_PARAM_INT; size = sizeof(Py_ssize_t); break;
    case 'B': case 'c': case '?':
        kind = ACC_PARAM_UINT; size = 1; break;
    case 'H': kind = ACC_PARAM_UINT; size = 2; break;
    case 'I': kind = ACC_PARAM_UINT; size = 4; break;
    case 'L': kind = ACC_PARAM_UINT; size = sizeof(long); break;
    case 'Q': kind = ACC_PARAM_UINT; size = 8; break;
    case 'N': kind = ACC_PARAM_UINT; size = sizeof(size_t); break;
    case 'e': kind = ACC_PARAM_FLOAT; size = 2; break;
    case 'f': kind = ACC_PARAM_FLOAT; size = 4; break;
    case 'd': kind = ACC_PARAM_FLOAT; size = 8; break;
    case 'g': kind = ACC_PARAM_FLOAT; size = sizeof(long double); break;
    case 'P': case 'z':
        kind = ACC_PARAM_POINTER; size = sizeof(void *); break;
    default:
        return ACC_PARAM_UNKNOWN;
    }
    /* "<l" is 4 bytes in the struct module's standard sizes, 8 natively:
     * the buffer's own item size decides. */
    if (f[0] == 'l' || f[0] == 'L') {
        return view->itemsize == 4 || view->itemsize == 8
                   ? kind : ACC_PARAM_UNKNOWN;
    }
    return (size_t)view->itemsize == size ? kind : ACC_PARAM_UNKNOWN;
}

/* One argument into a (bytes or an address) and, for memory, the object
 * whose books get the launch's use.  -1 with an error. */
static int
parse_arg(acc_state *st, PyObject *obj, const acc_kernel_info *info, int i,
          acc_kernel_arg *a, arg_store *store)
{
    Py_buffer view;

    a->device = -1;
    a->flags = 0;
    a->kind = ACC_PARAM_UNKNOWN;
    if (acc_buffer_check(st, obj)) {
        BufferObject *b = (BufferObject *)obj;

        if (acc_buffer_check_open(b, "launch()") < 0) {
            return -1;
        }
        store->address = b->ptr;
        a->value = &store->address;
        a->size = sizeof(uintptr_t);
        a->device = b->device;
        a->flags = ACC_ARG_MEMORY;
        return 0;
    }
    if (PyObject_TypeCheck(obj, st->host_buffer_type)) {
        HostBufferObject *h = (HostBufferObject *)obj;

        if (acc_host_check_open(h, "launch()") < 0) {
            return -1;
        }
        /* What its ptr says: 0 for an empty one (whose memory is a
         * placeholder no kernel may touch). */
        store->address = h->nbytes > 0 ? (uintptr_t)acc_host_ptr(h) : 0;
        a->value = &store->address;
        a->size = sizeof(uintptr_t);
        a->flags = ACC_ARG_MEMORY | ACC_ARG_HOST;
        return 0;
    }
    if (PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "launch(): argument %d is a bool; "
                     "pass numpy.bool_(...) or ctypes.c_bool(...) for a "
                     "1-byte flag", i);
        return -1;
    }
    /* Exactly int and float: numpy.float64 is a float too, but sized,
     * so it passes its own bytes below. */
    if (PyLong_CheckExact(obj) || PyFloat_CheckExact(obj)) {
        return pack_number(obj, info, i, a, store);
    }
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "launch(): argument %d: expected a "
                     "Buffer, a HostBuffer or a sized scalar "
                     "(numpy.float32(...), ctypes.c_int(...)), got %.300s",
                     i, acc_type_name_in(st, obj));
        return -1;
    }
    if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0) {
        return -1;
    }
    if (view.ndim != 0) {
        PyErr_Format(PyExc_TypeError, "launch(): argument %d is a %.100s "
                     "of %d dimension%s (host memory); copy arrays into a "
                     "Buffer, and pass scalars by value as "
                     "numpy.float32(...) or ctypes.c_int(...)", i,
                     acc_type_name(obj), view.ndim,
                     view.ndim == 1 ? "" : "s");
        PyBuffer_Release(&view);
        return -1;
    }
    if (view.itemsize > 1 && view.format != NULL
        && other_byte_order(view.format[0])) {
        PyErr_Format(PyExc_ValueError, "launch(): argument %d is in the "
                     "other byte order (format '%.20s'): a kernel reads "
                     "its bytes unswapped; pass the value in the host's "
                     "order, e.g. numpy.uint32(value) or "
                     "value.astype(value.dtype.newbyteorder('='))", i,
                     view.format);
        PyBuffer_Release(&view);
        return -1;
    }
    a->size = (size_t)view.len;
    a->kind = scalar_kind(&view);
    if (a->size <= sizeof(store->inline_bytes)) {
        memcpy(store->inline_bytes, view.buf, a->size);
        a->value = store->inline_bytes;
    }
    else {
        store->heap = malloc(a->size);
        if (store->heap == NULL) {
            PyBuffer_Release(&view);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(store->heap, view.buf, a->size);
        a->value = store->heap;
    }
    PyBuffer_Release(&view);
    return 0;
}

/* Enter (leave: !enter) every memory argument's lifetime. */
static void
hold_memory(acc_state *st, PyObject *const *objs, int n, int enter)
{
    for (int i = 0; i < n; i++) {
        if (acc_buffer_check(st, objs[i])) {
            BufferObject *root = acc_buffer_root((BufferObject *)objs[i]);

            if (enter) {
                acc_buffer_enter(root);
            }
            else {
                acc_buffer_leave(root);
            }
        }
        else if (PyObject_TypeCheck(objs[i], st->host_buffer_type)) {
            if (enter) {
                acc_host_enter((HostBufferObject *)objs[i]);
            }
            else {
                acc_host_leave((HostBufferObject *)objs[i]);
            }
        }
    }
}

/* What a launch's memory arguments need recorded, resolved with the GIL
 * (roots and books), recorded without it. */
typedef struct memory_use {
    BufferObject *root;       /* or NULL */
    acc_uses *host;           /* or NULL */
} memory_use;

static PyObject *
launch(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
       PyObject *kwnames)
{
    static const char *const names[] = {"shared_mem", "stream", NULL};
    static const acc_params params = {"launch()", names, 0, 0, 0};
    acc_state *st = acc_module_state(module);
    PyObject *values[2] = {NULL, Py_None};
    long long grid[3], block[3];
    size_t shared_mem = 0;
    KernelObject *kernel;
    const acc_kernel_info *info;
    int n, device;
    acc_kernel_arg *kargs = NULL;
    arg_store *stores = NULL;
    memory_use *uses = NULL;
    acc_stream *s;
    acc_error err;
    acc_status status;
    PyObject *result = NULL;

    if (nargs < 3) {
        PyErr_Format(PyExc_TypeError, "launch() takes at least 3 positional "
                     "arguments (kernel, grid, block), got %zd", nargs);
        return NULL;
    }
    if (kwnames != NULL
        && acc_parse_args(args + nargs, 0, kwnames, &params, values) < 0) {
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], st->kernel_type)) {
        PyErr_Format(PyExc_TypeError, "launch() expected an "
                     "accelerator.Kernel first, got %.100s",
                     acc_type_name_in(st, args[0]));
        return NULL;
    }
    kernel = (KernelObject *)args[0];
    info = acc_kernel_info_of(kernel->k);
    device = ((ModuleObject *)kernel->module)->device;
    if (parse_dims(st, kernel->k, args[1], "grid", grid) < 0
        || parse_dims(st, kernel->k, args[2], "block", block) < 0
        || (values[0] != NULL
            && parse_shared_mem(st, kernel->k, values[0], &shared_mem) < 0)
        || acc_require_usable(st) < 0
        || acc_parse_stream(st, values[1], device, "launch()", &s) < 0) {
        return NULL;
    }
    if (nargs - 3 > ACC_MAX_KERNEL_PARAMS) {
        PyErr_Format(PyExc_ValueError, "launch(): %zd arguments, beyond the "
                     "%d a kernel may take", nargs - 3,
                     ACC_MAX_KERNEL_PARAMS);
        return NULL;
    }
    n = (int)(nargs - 3);
    kargs = PyMem_Calloc((size_t)n + 1, sizeof(*kargs));
    stores = PyMem_Calloc((size_t)n + 1, sizeof(*stores));
    uses = PyMem_Calloc((size_t)n + 1, sizeof(*uses));
    if (kargs == NULL || stores == NULL || uses == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < n; i++) {
        PyObject *obj = args[3 + i];

        if (parse_arg(st, obj, info, i, &kargs[i], &stores[i]) < 0) {
            goto done;
        }
        if (acc_buffer_check(st, obj)) {
            uses[i].root = acc_buffer_root((BufferObject *)obj);
        }
        else if (kargs[i].flags & ACC_ARG_HOST) {
            uses[i].host = acc_host_block_uses(((HostBufferObject *)obj)->h);
        }
    }
    hold_memory(st, args + 3, n, 1);
    Py_BEGIN_ALLOW_THREADS
    status = acc_launch(kernel->k, grid, block, shared_mem, kargs, n, s,
                        &err);
    for (int i = 0; i < n && status == ACC_OK; i++) {
        if (uses[i].root != NULL) {
            status = acc_buffer_record(uses[i].root, s, &err);
        }
        else if (uses[i].host != NULL) {
            status = acc_uses_record(uses[i].host, s, &err);
        }
    }
    Py_END_ALLOW_THREADS
    hold_memory(st, args + 3, n, 0);
    if (status != ACC_OK) {
        acc_raise(st, &err);
        goto done;
    }
    result = Py_NewRef(Py_None);

done:
    if (stores != NULL) {
        for (int i = 0; i < n; i++) {
            free(stores[i].heap);
        }
    }
    PyMem_Free(kargs);
    PyMem_Free(stores);
    PyMem_Free(uses);
    return result;
}

PyDoc_STRVAR(launch_doc,
"launch(kernel, grid, block, /, *args, shared_mem=0, stream=None)\n--\n\n"
"Queue one launch of kernel on stream (default: the current stream of\n"
"the kernel's device): grid blocks (work-groups) of block threads\n"
"(work-items), each an int or a tuple of 1 to 3 ints.  A Buffer or\n"
"HostBuffer (or a view) passes its address (an empty one: 0, its ptr),\n"
"and the launch is recorded as a use of its memory; numpy and ctypes\n"
"scalars pass their bytes by value (a float for an integer or pointer\n"
"parameter, or an integer for a float one, is refused where the driver\n"
"tells kinds); a bare int or float only where the driver tells the\n"
"parameter's type.  shared_mem bytes of dynamic shared (local) memory\n"
"go to each block.  Captured into a Graph like any work.");

PyMethodDef acc_kernel_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launch,
     METH_FASTCALL | METH_KEYWORDS, launch_doc},
    {NULL, NULL, 0, NULL},
};
