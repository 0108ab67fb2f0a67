/*
 * py_helpers.c - what every file of the Python layer uses: the module
 * state of a type, type names and driver text for messages, core errors
 * -> exceptions, the "usable" and "ready" checks, device switching, a
 * device's facts, the device objects every type hands out, and the call
 * into the asyncio support.
 *
 * It sits below the type files and the module file and calls neither
 * (docs/python-layer.rst): only the C core and the CPython API.
 */
#include "pyobjects.h"

#include <stdio.h>
#include <string.h>

const char acc_module_name[] = "accelerator._accelerator";

acc_state *
acc_state_from_type(PyTypeObject *type)
{
    PyObject *module;
    PyModuleDef *def;

    /* PyType_GetModuleByDef is in the limited API only from 3.13: walk
     * the bases (a Python subclass has no module) to the type we made. */
    while (type != NULL) {
        if (PyType_GetFlags(type) & Py_TPFLAGS_HEAPTYPE) {
            module = PyType_GetModule(type);
            def = module != NULL ? PyModule_GetDef(module) : NULL;
            if (def != NULL && def->m_name == acc_module_name) {
                return acc_module_state(module);
            }
            PyErr_Clear();
        }
        type = (PyTypeObject *)PyType_GetSlot(type, Py_tp_base);
    }
    return NULL;
}

PyObject *
acc_call_aio(const char *name, PyObject *obj)
{
    PyObject *module = PyImport_ImportModule("accelerator._aio");
    PyObject *result;

    if (module == NULL) {
        return NULL;
    }
    result = PyObject_CallMethod(module, name, "O", obj);
    Py_DECREF(module);
    return result;
}

const char *
acc_type_name(PyObject *obj)
{
    static __thread char ring[4][100];
    static __thread unsigned next;
    char *buf = ring[next++ % 4];
    PyObject *name = PyType_GetName(Py_TYPE(obj));
    const char *text = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;

    snprintf(buf, sizeof(ring[0]), "%s", text ? text : "?");
    if (text == NULL) {
        PyErr_Clear();
    }
    Py_XDECREF(name);
    return buf;
}

int
acc_index_failed(PyObject *obj, const char *expected)
{
    PyObject *type, *value, *traceback, *reason;

    if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
        return -1;
    }
    PyErr_Fetch(&type, &value, &traceback);
    reason = value != NULL ? PyObject_Str(value) : NULL;
    PyErr_Clear();
    if (reason != NULL) {
        PyErr_Format(PyExc_TypeError, "%s, got %.100s (%U)", expected,
                     acc_type_name(obj), reason);
    }
    else {
        PyErr_Format(PyExc_TypeError, "%s, got %.100s", expected,
                     acc_type_name(obj));
    }
    Py_XDECREF(reason);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return -1;
}

const char *
acc_type_name_in(acc_state *st, PyObject *obj)
{
    static __thread char buf[256];
    acc_state *owner = acc_state_from_type(Py_TYPE(obj));

    if (owner == NULL || owner == st) {
        return acc_type_name(obj);
    }
    snprintf(buf, sizeof(buf), "a %s of another instance of the "
             "accelerator module (imported again, or in another "
             "subinterpreter): each instance takes only its own objects",
             acc_type_name(obj));
    return buf;
}

PyObject *
acc_text(const char *text, size_t size)
{
    size_t length = strlen(text);

    if (size > 0 && length + 1 >= size) {
        length = acc_utf8_whole(text, length);
    }
    return PyUnicode_DecodeUTF8(text, (Py_ssize_t)length,
                                "backslashreplace");
}

PyObject *
acc_text_or_none(const char *text)
{
    return text != NULL ? acc_text(text, 0) : Py_NewRef(Py_None);
}

static PyObject *
raise_with_message(PyObject *cls, const acc_error *err)
{
    PyObject *message = acc_text(err->message, sizeof(err->message));

    if (message != NULL) {
        PyErr_SetObject(cls, message);
        Py_DECREF(message);
    }
    return NULL;
}

static PyObject *
driver_error(acc_state *st, PyObject *cls, const acc_error *err)
{
    PyObject *exc, *value;
    int rc = 0;

    value = acc_text(err->message, sizeof(err->message));
    if (value == NULL) {
        return NULL;
    }
    exc = PyObject_CallFunctionObjArgs(cls, value, NULL);
    Py_DECREF(value);
    if (exc == NULL) {
        return NULL;
    }
#define SET(name, expr)                                        \
    if (rc == 0) {                                             \
        value = (expr);                                        \
        rc = value ? PyObject_SetAttrString(exc, name, value)  \
                   : -1;                                       \
        Py_XDECREF(value);                                     \
    }
    SET("backend", acc_text_or_none(err->backend))
    SET("api", acc_text_or_none(err->api))
    SET("code", err->api ? PyLong_FromLongLong(err->code)
                         : Py_NewRef(Py_None))
    SET("error_name", acc_text_or_none(err->code_name))
#undef SET
    (void)st;
    if (rc == 0) {
        PyErr_SetObject(cls, exc);
    }
    Py_DECREF(exc);
    return NULL;
}

PyObject *
acc_raise(acc_state *st, const acc_error *err)
{
    switch (err->status) {
    case ACC_ERR_INVALID_ARGUMENT:
        return raise_with_message(PyExc_ValueError, err);
    case ACC_ERR_DEVICE_INDEX:
        return raise_with_message(st->DeviceIndexError, err);
    case ACC_ERR_UNSUPPORTED:
        return raise_with_message(PyExc_NotImplementedError, err);
    case ACC_ERR_HOST_MEMORY:
        return PyErr_NoMemory();
    case ACC_ERR_OUT_OF_MEMORY:
        return driver_error(st, st->OutOfMemoryError, err);
    case ACC_ERR_BUILD:
        return driver_error(st, st->BuildError, err);
    case ACC_ERR_NOT_FOUND:
        return raise_with_message(PyExc_KeyError, err);
    case ACC_ERR_NO_ACCELERATOR:
    case ACC_ERR_DRIVER:
    case ACC_ERR_STATE:
    case ACC_ERR_FORKED:
        return driver_error(st, st->AcceleratorError, err);
    case ACC_OK:
    case ACC_NOT_READY:
        break;
    }
    PyErr_Format(PyExc_SystemError, "accelerator: unexpected status %d",
                 (int)err->status);
    return NULL;
}

/* The driver's initialisation the probe deferred (acc_require_ready's
 * first call). */
__attribute__((cold, noinline)) static int
require_ready_first(acc_state *st)
{
    acc_error err;
    acc_status status;

    Py_BEGIN_ALLOW_THREADS
    status = acc_ready(&err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

PyObject *
acc_raise_unmatched_exit(acc_state *st, const acc_error *err)
{
    if (err->status == ACC_ERR_STATE) {
        PyErr_SetString(PyExc_RuntimeError, err->message);
        return NULL;
    }
    return acc_raise(st, err);
}

int
acc_require_usable(acc_state *st)
{
    acc_error err;

    if (acc_check_usable(&err) != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

int
acc_require_ready(acc_state *st)
{
    if (acc_initialized()) {
        return acc_require_usable(st);
    }
    return require_ready_first(st);
}

int
acc_check_index(acc_state *st, long long index)
{
    acc_error err;

    if (acc_check_device(index, &err) != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

PyObject *
acc_int_text(PyObject *value)
{
    PyObject *num = PyNumber_Index(value);   /* a numpy integer's too */
    PyObject *bits, *text;
    long count;
    int negative;

    /* As the caller wrote it, not a clamped value; past 256 bits (and the
     * int-to-str limit) its size instead. */
    if (num == NULL) {
        return NULL;
    }
    bits = PyObject_CallMethod(num, "bit_length", NULL);
    count = bits != NULL ? PyLong_AsLong(bits) : -1;
    Py_XDECREF(bits);
    if (count == -1 && PyErr_Occurred()) {
        Py_DECREF(num);
        return NULL;
    }
    if (count <= 256) {
        text = PyNumber_ToBase(num, 10);
    }
    else {
        /* PyLong_AsLongAndOverflow says the sign of a huge int. */
        (void)PyLong_AsLongAndOverflow(num, &negative);
        text = PyUnicode_FromFormat("%s<an int of %ld bits>",
                                    negative < 0 ? "-" : "", count);
    }
    Py_DECREF(num);
    return text;
}

int
acc_check_huge_index(acc_state *st, PyObject *value)
{
    PyObject *text = acc_int_text(value);
    const char *utf8 = text != NULL ? PyUnicode_AsUTF8AndSize(text, NULL)
                                    : NULL;
    acc_error err;

    if (utf8 != NULL) {
        (void)acc_check_device_text(utf8, &err);
        acc_raise(st, &err);
    }
    Py_XDECREF(text);
    return -1;
}

int
acc_switch_device(acc_state *st, int device)
{
    acc_error err;
    acc_status status;

    if (acc_device_ready(device)) {
        status = acc_set_device(device, &err);
    }
    else {
        /* The first switch to a device may create its context. */
        Py_BEGIN_ALLOW_THREADS
        status = acc_set_device(device, &err);
        Py_END_ALLOW_THREADS
    }
    if (status != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

/* The driver's facts about device, read once (the dispatcher caches
 * them); -1 with an exception set on failure. */
int
acc_device_facts(acc_state *st, int device, const acc_device_properties **p)
{
    acc_error err;
    acc_status status;

    Py_BEGIN_ALLOW_THREADS
    status = acc_get_device_properties(device, p, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

/* accelerator.device for (type, index); index -1 means None.  Here, not in
 * py_device.c: every type hands devices out. */
PyObject *
acc_device_new(acc_state *st, const char *type, int index)
{
    DeviceObject *self;

    self = PyObject_New(DeviceObject, st->device_type);
    if (self == NULL) {
        return NULL;
    }
    self->type = PyUnicode_InternFromString(type);
    self->index = index;
    if (self->type == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* Raise BuildError for err with the driver's log (may be NULL). */
void
acc_raise_build_error(acc_state *st, const acc_error *err, const char *log)
{
    acc_error full = *err;
    PyObject *type, *value, *tb, *text;

    if (log != NULL && log[0] != '\0') {
        size_t used = strlen(full.message);

        PyOS_snprintf(full.message + used, sizeof(full.message) - used,
                      "; the build log says:\n%s", log);
        full.message[sizeof(full.message) - 1] = '\0';
        full.message[acc_utf8_whole(full.message,
                                    strlen(full.message))] = '\0';
    }
    acc_raise(st, &full);
    if (log == NULL) {
        return;
    }
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    text = acc_text(log, 0);
    if (text == NULL || PyObject_SetAttrString(value, "log", text) < 0) {
        Py_XDECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    Py_DECREF(text);
    PyErr_Restore(type, value, tb);
}
