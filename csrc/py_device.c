/*
 * py_device.c - accelerator.device: an immutable (type, index) pair, and
 * the resolution of every "device" argument the API takes.
 */
#include "pyaccel.h"

#include <stdio.h>
#include <limits.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *type;   /* str */
    int index;        /* -1: no index */
} DeviceObject;

/* Device types we parse: every type torch parses (c10::DeviceType), so
 * that a backend added for one needs no change here. */
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
    return 0;
}

/* Parse "type" or "type:index" into a type string and index (-1 none). */
static int
parse_device_string(PyObject *text, PyObject **type, int *index)
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
        PyErr_Format(PyExc_ValueError,
                     "Expected one of " KNOWN_TYPES_TEXT " device type at "
                     "start of device string: %R", text);
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
static int
parse_index_arg(PyObject *obj, int *index)
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

static PyObject *
device_make(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"type", "index", NULL};
    PyObject *type_arg, *index_arg = NULL, *type = NULL;
    acc_state *st = acc_state_from_type(cls);
    int index = -1, explicit_index = -1;
    DeviceObject *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:device", keywords,
                                     &type_arg, &index_arg)) {
        return NULL;
    }
    if (parse_index_arg(index_arg, &explicit_index) < 0) {
        return NULL;
    }
    if (Py_IS_TYPE(type_arg, st->device_type) && index_arg == NULL) {
        return Py_NewRef(type_arg);
    }
    if (acc_is_index(type_arg)) {
        /* device(1): an index of the current accelerator, as torch. */
        if (index_arg != NULL) {
            PyErr_SetString(PyExc_TypeError,
                            "device(index) takes no second argument");
            return NULL;
        }
        if (parse_index_arg(type_arg, &index) < 0) {
            return NULL;
        }
        if (index < 0) {
            /* -1 means "no index" only next to a type, as in torch. */
            PyErr_Format(PyExc_ValueError,
                         "Device index must not be negative, got %R",
                         type_arg);
            return NULL;
        }
        acc_ensure_probed();
        if (acc_require_usable(st) < 0) {
            return NULL;
        }
        return acc_device_new(st, acc_device_type(), index);
    }
    if (!PyUnicode_Check(type_arg)) {
        PyErr_Format(PyExc_TypeError,
                     "device() expects a device string such as 'cuda:0', "
                     "a type and an index, or an int index; got %.100s",
                     acc_type_name(type_arg));
        return NULL;
    }
    if (parse_device_string(type_arg, &type, &index) < 0) {
        return NULL;
    }
    if (index_arg != NULL && index_arg != Py_None) {
        if (index != -1) {
            PyErr_Format(PyExc_ValueError,
                         "type (string) must not include an index because "
                         "index was passed explicitly: %R", type_arg);
            Py_DECREF(type);
            return NULL;
        }
        index = explicit_index;
    }
    self = (DeviceObject *)acc_alloc(cls);
    if (self == NULL) {
        Py_DECREF(type);
        return NULL;
    }
    PyUnicode_InternInPlace(&type);
    self->type = type;
    self->index = index;
    return (PyObject *)self;
}

/* Positional arguments of exact str, int or None types only: a key that
 * no other argument compares equal to (True == 1, 1.0 == 1). */
static int
cacheable_args(PyObject *args)
{
    Py_ssize_t n = PyTuple_Size(args);
    PyObject *first, *second;

    if (n < 1 || n > 2) {
        return 0;
    }
    first = PyTuple_GetItem(args, 0);
    if (!PyUnicode_CheckExact(first) && !PyLong_CheckExact(first)) {
        return 0;
    }
    if (n == 1) {
        return 1;
    }
    second = PyTuple_GetItem(args, 1);
    return second == Py_None || PyLong_CheckExact(second);
}

/* Devices are immutable values, so equal arguments may share one object:
 * device("cuda", 0) and device("cuda:0") are hot (issue #16: within 3x
 * of a no-op call), and parsing is most of their cost.  The cache is a
 * dict of the argument tuples seen, bounded. */
#define DEVICE_CACHE_MAX 256

static PyObject *
device_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    acc_state *st = acc_state_from_type(cls);
    int cacheable = kwargs == NULL && cacheable_args(args);
    PyObject *self;

    if (cacheable) {
        self = PyDict_GetItemWithError(st->device_cache, args);
        if (self != NULL) {
            return Py_NewRef(self);
        }
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    self = device_make(cls, args, kwargs);
    if (self != NULL && cacheable
        && PyDict_Size(st->device_cache) < DEVICE_CACHE_MAX
        && PyDict_SetItem(st->device_cache, args, self) < 0) {
        Py_CLEAR(self);
    }
    return self;
}

static void
device_dealloc(DeviceObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    Py_XDECREF(self->type);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
device_get_type(DeviceObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->type);
}

static PyObject *
device_get_index(DeviceObject *self, void *closure)
{
    (void)closure;
    if (self->index < 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLong(self->index);
}

static PyObject *
device_repr(DeviceObject *self)
{
    if (self->index < 0) {
        return PyUnicode_FromFormat("device(type=%R)", self->type);
    }
    return PyUnicode_FromFormat("device(type=%R, index=%d)", self->type,
                                self->index);
}

static PyObject *
device_str(DeviceObject *self)
{
    if (self->index < 0) {
        return Py_NewRef(self->type);
    }
    return PyUnicode_FromFormat("%U:%d", self->type, self->index);
}

static PyObject *
device_richcompare(PyObject *a, PyObject *b, int op)
{
    acc_state *st = acc_state_from_type(Py_TYPE(a));
    DeviceObject *x = (DeviceObject *)a, *y = (DeviceObject *)b;
    int equal;

    if (!PyObject_TypeCheck(b, st->device_type)
        || (op != Py_EQ && op != Py_NE)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    equal = x->index == y->index
            && PyUnicode_Compare(x->type, y->type) == 0;
    return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

static Py_hash_t
device_hash(DeviceObject *self)
{
    Py_hash_t h = PyObject_Hash(self->type);

    if (h == -1) {
        return -1;
    }
    h = h * 1000003 ^ (Py_hash_t)(self->index + 2);
    return h == -1 ? -2 : h;
}

static PyObject *
device_reduce(DeviceObject *self, PyObject *unused)
{
    (void)unused;
    if (self->index < 0) {
        return Py_BuildValue("O(O)", Py_TYPE((PyObject *)self), self->type);
    }
    return Py_BuildValue("O(Oi)", Py_TYPE((PyObject *)self), self->type, self->index);
}

/* Resolution ------------------------------------------------------------- */

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
        return parse_device_string(obj, type, index);
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
    rc = parse_index_arg(index_attr, index);
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

/* Type ------------------------------------------------------------------- */

PyDoc_STRVAR(device_doc,
"device(type, index=None)\n"
"--\n"
"\n"
"An accelerator device: a type ('cuda', 'xpu', ...) and an optional\n"
"index, as torch.device.  device('cuda:1'), device('cuda', 1),\n"
"device('cuda') and device(1) (an index of the current accelerator).\n"
"Immutable, hashable and comparable.");

PyDoc_STRVAR(device_reduce_doc,
"__reduce__($self, /)\n--\n\nSupport pickling: devices are plain values.");

static PyGetSetDef device_getset[] = {
    {"type", (getter)device_get_type, NULL,
     PyDoc_STR("The device type, such as 'cuda'."), NULL},
    {"index", (getter)device_get_index, NULL,
     PyDoc_STR("The device index, or None."), NULL},
    {NULL},
};

static PyMethodDef device_methods[] = {
    {"__reduce__", (PyCFunction)device_reduce, METH_NOARGS,
     device_reduce_doc},
    {NULL},
};

static PyType_Slot device_slots[] = {
    {Py_tp_doc, (void *)device_doc},
    {Py_tp_new, device_new},
    {Py_tp_dealloc, device_dealloc},
    {Py_tp_repr, device_repr},
    {Py_tp_str, device_str},
    {Py_tp_richcompare, device_richcompare},
    {Py_tp_hash, device_hash},
    {Py_tp_getset, device_getset},
    {Py_tp_methods, device_methods},
    {0, NULL},
};

PyType_Spec acc_device_spec = {
    .name = "accelerator.device",
    .basicsize = sizeof(DeviceObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = device_slots,
};
