/*
 * py_args.c - argument parsing for the whole Python layer: the one
 * parser of a call's arguments (acc_parse_args, acc_parse_tuple), and the
 * arguments many calls take: a device (as torch's _get_device_index), a
 * stream, a size in bytes.  Type files parse Python objects here; the C
 * core checks what the values mean and words those errors.
 *
 * Below the type files and the module file (docs/python-layer.rst).
 */
#include "pyobjects.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Parameters ------------------------------------------------------------- */

static int
param_count(const acc_params *p)
{
    int count = 0;

    while (p->names[count] != NULL) {
        count++;
    }
    return count;
}

/* What p takes by keyword, in words, for the message about a keyword it
 * does not take: "one optional argument, stream" or "the keywords a, b
 * and c". */
static void
keyword_text(const acc_params *p, char *buf, size_t size)
{
    int first = p->posonly, count = param_count(p) - p->posonly;
    size_t used;
    int n;

    if (first == 0 && count == 1 && p->required == 0) {
        snprintf(buf, size, "one optional argument, %s", p->names[first]);
        return;
    }
    n = snprintf(buf, size, "the keyword%s", count == 1 ? "" : "s");
    used = n > 0 ? (size_t)n : 0;
    for (int i = first; p->names[i] != NULL && used < size; i++) {
        n = snprintf(buf + used, size - used, "%s%s",
                     i == first ? " " : p->names[i + 1] == NULL ? " and "
                                                                : ", ",
                     p->names[i]);
        used += n > 0 ? (size_t)n : 0;
    }
}

static int
check_positional(const acc_params *p, Py_ssize_t nargs)
{
    if (nargs <= p->positional) {
        return 0;
    }
    if (p->positional == 0) {
        PyErr_Format(PyExc_TypeError, "%s takes no positional arguments "
                     "(%zd given)", p->what, nargs);
    }
    else {
        PyErr_Format(PyExc_TypeError, "%s takes at most %d %sargument%s "
                     "(%zd given)", p->what, p->positional,
                     param_count(p) > p->positional ? "positional " : "",
                     p->positional == 1 ? "" : "s", nargs);
    }
    return -1;
}

/* Put value where key names it; given[i]: names[i] has a value. */
static int
take_keyword(const acc_params *p, PyObject *key, PyObject *value,
             PyObject **values, char *given)
{
    char takes[200];
    int count;

    for (int i = p->posonly; p->names[i] != NULL; i++) {
        if (!PyUnicode_Check(key)
            || PyUnicode_CompareWithASCIIString(key, p->names[i]) != 0) {
            continue;
        }
        if (given[i]) {
            count = param_count(p);
            PyErr_Format(PyExc_TypeError, "%s got an unexpected keyword "
                         "argument %R: %s was given by position already (%s "
                         "takes at most %d argument%s)", p->what, key,
                         p->names[i], p->what, count, count == 1 ? "" : "s");
            return -1;
        }
        values[i] = value;
        given[i] = 1;
        return 0;
    }
    if (p->names[p->posonly] == NULL) {
        PyErr_Format(PyExc_TypeError, "%s takes no keyword arguments (got "
                     "%R)", p->what, key);
        return -1;
    }
    keyword_text(p, takes, sizeof(takes));
    PyErr_Format(PyExc_TypeError, "%s got an unexpected keyword argument "
                 "%R (%R is an invalid keyword: %s takes %s)", p->what, key,
                 key, p->what, takes);
    return -1;
}

static int
check_required(const acc_params *p, const char *given)
{
    for (int i = 0; i < p->required; i++) {
        if (given[i]) {
            continue;
        }
        if (i < p->posonly) {
            PyErr_Format(PyExc_TypeError, "%s missing 1 required positional "
                         "argument: '%s'", p->what, p->names[i]);
        }
        else {
            PyErr_Format(PyExc_TypeError, "%s missing required argument "
                         "'%s' (pos %d)", p->what, p->names[i], i + 1);
        }
        return -1;
    }
    return 0;
}

static int
parse_args_all(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               const acc_params *p, PyObject **values)
{
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    char given[ACC_MAX_PARAMS] = {0};

    assert(param_count(p) <= ACC_MAX_PARAMS);
    if (check_positional(p, nargs) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        values[i] = args[i];
        given[i] = 1;
    }
    for (Py_ssize_t k = 0; k < nkw; k++) {
        if (take_keyword(p, PyTuple_GetItem(kwnames, k), args[nargs + k],
                         values, given) < 0) {
            return -1;
        }
    }
    return check_required(p, given);
}

static int
parse_tuple_all(PyObject *args, PyObject *kwargs, const acc_params *p,
                PyObject **values)
{
    Py_ssize_t nargs = PyTuple_Size(args), pos = 0;
    char given[ACC_MAX_PARAMS] = {0};
    PyObject *key, *value;

    assert(param_count(p) <= ACC_MAX_PARAMS);
    if (check_positional(p, nargs) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        values[i] = PyTuple_GetItem(args, i);
        given[i] = 1;
    }
    while (kwargs != NULL && PyDict_Next(kwargs, &pos, &key, &value)) {
        if (take_keyword(p, key, value, values, given) < 0) {
            return -1;
        }
    }
    return check_required(p, given);
}

/* The common case of both, positional arguments only, first. */
int
acc_parse_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               const acc_params *p, PyObject **values)
{
    if (kwnames == NULL && nargs >= p->required && nargs <= p->positional) {
        for (Py_ssize_t i = 0; i < nargs; i++) {
            values[i] = args[i];
        }
        return 0;
    }
    return parse_args_all(args, nargs, kwnames, p, values);
}

int
acc_parse_tuple(PyObject *args, PyObject *kwargs, const acc_params *p,
                PyObject **values)
{
    Py_ssize_t nargs = PyTuple_Size(args);

    if (kwargs == NULL && nargs >= p->required && nargs <= p->positional) {
        for (Py_ssize_t i = 0; i < nargs; i++) {
            values[i] = PyTuple_GetItem(args, i);
        }
        return 0;
    }
    return parse_tuple_all(args, kwargs, p, values);
}

/* Devices ---------------------------------------------------------------- */

/* Device types we parse: every type torch parses (c10::DeviceType), so
 * that a backend added for one needs no change here, and those of the
 * registered backends (a plugin's, known once probed). */
static const char *const known_types[] = {
    "cpu", "cuda", "xpu", "opencl", "mps", "hip", "meta", "ipu", "mkldnn",
    "opengl", "ideep", "ve", "fpga", "maia", "xla", "lazy", "vulkan", "hpu",
    "mtia", "privateuseone", NULL,
};
#define KNOWN_TYPES_TEXT                                                  \
    "cpu, cuda, xpu, opencl, mps, hip, meta, ipu, mkldnn, opengl, ideep, " \
    "ve, fpga, maia, xla, lazy, vulkan, hpu, mtia, privateuseone"

static int
is_known_type(const char *type, Py_ssize_t len)
{
    for (int i = 0; known_types[i] != NULL; i++) {
        if ((Py_ssize_t)strlen(known_types[i]) == len
            && memcmp(known_types[i], type, (size_t)len) == 0) {
            return 1;
        }
    }
    acc_ensure_probed();
    return acc_backend_device_type_known(type, (size_t)len);
}

/* ", or a plugin's: x, y" for the registered device types torch does not
 * know, or "" (a new reference). */
static PyObject *
plugin_types_text(void)
{
    PyObject *text = PyUnicode_FromString("");

    for (int i = 0; text != NULL && i < acc_registered_backend_count(); i++) {
        const char *type = acc_backend_info_at(i)->device_type;
        PyObject *more;
        int known = 0;

        for (int k = 0; known_types[k] != NULL && !known; k++) {
            known = strcmp(known_types[k], type) == 0;
        }
        if (known) {
            continue;
        }
        more = PyUnicode_FromFormat("%U%s%s", text,
                                    PyUnicode_GetLength(text) == 0
                                    ? ", or a plugin's: " : ", ", type);
        Py_DECREF(text);
        text = more;
    }
    return text;
}

/* Parse "type" or "type:index" into a type string and index (-1 none). */
int
acc_parse_device_string(PyObject *text, PyObject **type, int *index)
{
    Py_ssize_t len, type_len;
    const char *s = PyUnicode_AsUTF8AndSize(text, &len);
    const char *colon;
    long long value = 0;

    if (s == NULL) {
        return -1;
    }
    colon = memchr(s, ':', (size_t)len);
    type_len = colon ? colon - s : len;
    if (!is_known_type(s, type_len)) {
        PyObject *plugins = plugin_types_text();

        if (plugins != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "Expected one of " KNOWN_TYPES_TEXT "%U device "
                         "type at start of device string: %R", plugins,
                         text);
            Py_DECREF(plugins);
        }
        return -1;
    }
    *index = -1;
    if (colon != NULL) {
        const char *digits = colon + 1;
        Py_ssize_t n = len - type_len - 1;

        if (n == 0 || n > 9 || (n > 1 && digits[0] == '0')) {
            goto invalid;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (digits[i] < '0' || digits[i] > '9') {
                goto invalid;
            }
            value = value * 10 + (digits[i] - '0');
        }
        *index = (int)value;
    }
    *type = PyUnicode_FromStringAndSize(s, type_len);
    return *type ? 0 : -1;

invalid:
    PyErr_Format(PyExc_ValueError,
                 "Invalid device string: %R (expected 'type' or "
                 "'type:index' with a non-negative decimal index, such as "
                 "'cuda:0')", text);
    return -1;
}

/* An index argument: None, or an int in [-1, INT_MAX]; -1 means None. */
int
acc_parse_device_index(PyObject *obj, int *index)
{
    long long value;
    int overflow;

    if (obj == NULL || obj == Py_None) {
        *index = -1;
        return 0;
    }
    if (!acc_is_index(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "device index must be an int or None, not %.100s",
                     acc_type_name(obj));
        return -1;
    }
    value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow || value < -1 || value > INT_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "Device index must be -1 (no index) or a non-negative "
                     "int below 2**31, got %R", obj);
        return -1;
    }
    *index = (int)value;
    return 0;
}

/* (type, index) of any device-like object; index -1 for none. */
static int
device_parts(acc_state *st, PyObject *obj, PyObject **type, int *index)
{
    PyObject *type_attr, *index_attr;
    int rc;

    if (PyObject_TypeCheck(obj, st->device_type)) {
        *type = Py_NewRef(((DeviceObject *)obj)->type);
        *index = ((DeviceObject *)obj)->index;
        return 0;
    }
    if (PyUnicode_Check(obj)) {
        return acc_parse_device_string(obj, type, index);
    }
    /* Duck typing, so a torch.device works: .type and .index. */
    type_attr = PyObject_GetAttr(obj, st->str_type);
    if (type_attr == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "expected a device: an int index, a device string such "
                     "as 'cuda:0', an accelerator.device, or an object with "
                     ".type and .index; got %.100s", acc_type_name(obj));
        return -1;
    }
    if (!PyUnicode_Check(type_attr)) {
        PyErr_Format(PyExc_TypeError,
                     "device.type must be a str, got %.100s",
                     acc_type_name(type_attr));
        Py_DECREF(type_attr);
        return -1;
    }
    index_attr = PyObject_GetAttr(obj, st->str_index);
    if (index_attr == NULL) {
        Py_DECREF(type_attr);
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "expected a device: %.100s has .type but no "
                         ".index (an int or None)", acc_type_name(obj));
        }
        return -1;
    }
    rc = acc_parse_device_index(index_attr, index);
    Py_DECREF(index_attr);
    if (rc < 0) {
        Py_DECREF(type_attr);
        return -1;
    }
    *type = type_attr;
    return 0;
}

int
acc_resolve_device(acc_state *st, PyObject *obj, int optional,
                   long long *index)
{
    PyObject *type;
    const char *accel;
    int parsed, overflow;

    if (obj == NULL || obj == Py_None) {
        if (!optional) {
            PyErr_SetString(PyExc_ValueError,
                            "Expected a device with a specified index or an "
                            "integer, but got: None");
            return -1;
        }
        *index = acc_current_device();
        return 0;
    }
    if (PyBool_Check(obj)) {
        PyErr_SetString(PyExc_TypeError,
                        "expected a device or an int device index, got bool");
        return -1;
    }
    if (acc_is_index(obj)) {
        *index = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (*index == -1 && PyErr_Occurred()) {
            return acc_index_failed(obj, "expected a device or an int "
                                    "device index");
        }
        if (overflow) {
            /* Out of range for every call that takes a device. */
            acc_ensure_probed();
            return acc_check_huge_index(st, obj);
        }
        return 0;
    }
    if (device_parts(st, obj, &type, &parsed) < 0) {
        return -1;
    }
    acc_ensure_probed();
    accel = acc_device_type();
    if (accel == NULL) {
        Py_DECREF(type);
        return acc_require_usable(st);
    }
    if (PyUnicode_CompareWithASCIIString(type, accel) != 0
        && (acc_device_type_alias() == NULL
            || PyUnicode_CompareWithASCIIString(type,
                                                acc_device_type_alias())
                   != 0)) {
        PyErr_Format(PyExc_ValueError,
                     "%U doesn't match the current accelerator %s.", type,
                     accel);
        Py_DECREF(type);
        return -1;
    }
    Py_DECREF(type);
    if (parsed < 0) {
        if (!optional) {
            PyErr_Format(PyExc_ValueError,
                         "Expected a device with a specified index or an "
                         "integer, but got: %R", obj);
            return -1;
        }
        parsed = acc_current_device();
    }
    *index = parsed;
    return 0;
}

int
acc_optional_device(acc_state *st, PyObject *const *args, Py_ssize_t nargs,
                    const char *what, int *device)
{
    static const char *const names[] = {"device", NULL};
    const acc_params params = {what, names, 1, 0, 1};
    PyObject *arg = Py_None;
    long long index;

    if (acc_parse_args(args, nargs, NULL, &params, &arg) < 0) {
        return -1;
    }
    acc_ensure_probed();
    if (acc_require_usable(st) < 0
        || acc_resolve_device(st, arg, 1, &index) < 0
        || acc_check_index(st, index) < 0) {
        return -1;
    }
    *device = (int)index;
    return 0;
}

/* Streams and sizes ------------------------------------------------------ */

int
acc_parse_stream(acc_state *st, PyObject *obj, int device, const char *what,
                 acc_stream **out)
{
    acc_error err;

    if (obj == NULL || obj == Py_None) {
        if (acc_stream_for(device, 1, out, &err) != ACC_OK) {
            acc_raise(st, &err);
            return -1;
        }
        return 0;
    }
    if (!PyObject_TypeCheck(obj, st->stream_type)) {
        PyErr_Format(PyExc_TypeError, "%s expected an accelerator.Stream "
                     "or None, got %s", what,
                     acc_type_name_in(st, obj));
        return -1;
    }
    *out = acc_stream_of(obj);
    return 0;
}

/* Raise the error for an int outside long long, worded by memory.c with
 * the value as passed: a size (what names it) or, for what NULL, a fill
 * value.  Returns -1. */
int
acc_int_error(acc_state *st, PyObject *obj, int negative, const char *what)
{
    PyObject *text = acc_int_text(obj);
    const char *utf8 = text != NULL ? PyUnicode_AsUTF8AndSize(text, NULL)
                                    : NULL;
    acc_error err;

    if (utf8 != NULL) {
        if (what != NULL) {
            (void)acc_check_nbytes_text(utf8, negative, what, &err);
        }
        else {
            (void)acc_check_fill_text(utf8, &err);
        }
        acc_raise(st, &err);
    }
    Py_XDECREF(text);
    return -1;
}

/* acc_parse_nbytes for an exact int. */
static int
nbytes_of_int(acc_state *st, PyObject *obj, const char *what,
              size_t *nbytes)
{
    long long value;
    int overflow;
    acc_error err;

    value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow > 0) {
        /* Beyond any device, but a size: the driver reports out of
         * memory for the size asked. */
        unsigned long long big = PyLong_AsUnsignedLongLong(obj);

        if (!(big == (unsigned long long)-1 && PyErr_Occurred())
            && big <= SIZE_MAX) {
            *nbytes = (size_t)big;
            return 0;
        }
        PyErr_Clear();
    }
    if (overflow) {
        return acc_int_error(st, obj, overflow < 0, what);
    }
    if (acc_check_nbytes(value, what, &err) != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    *nbytes = (size_t)value;
    return 0;
}

int
acc_parse_nbytes(acc_state *st, PyObject *obj, const char *what,
                 size_t *nbytes)
{
    PyObject *num;
    int rc;

    if (!acc_is_index(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: nbytes must be an int, got "
                     "%.100s", what, acc_type_name(obj));
        return -1;
    }
    num = PyNumber_Index(obj);
    if (num == NULL) {
        char expected[120];

        snprintf(expected, sizeof(expected), "%s: nbytes must be an int",
                 what);
        return acc_index_failed(obj, expected);
    }
    rc = nbytes_of_int(st, num, what, nbytes);
    Py_DECREF(num);
    return rc;
}
