/*
 * py_device.c - accelerator.device: an immutable (type, index) pair.  The
 * resolution of every "device" argument the API takes is in py_args.c.
 */
#include "pyobjects.h"

#include <stdio.h>
#include <limits.h>
#include <string.h>

static PyObject *
device_make(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const names[] = {"type", "index", NULL};
    static const acc_params params = {"device()", names, 0, 1, 2};
    PyObject *values[2] = {NULL, NULL};
    PyObject *type_arg, *index_arg, *type = NULL;
    acc_state *st = acc_state_from_type(cls);
    int index = -1, explicit_index = -1;
    DeviceObject *self;

    if (acc_parse_tuple(args, kwargs, &params, values) < 0) {
        return NULL;
    }
    type_arg = values[0];
    index_arg = values[1];
    if (acc_parse_device_index(index_arg, &explicit_index) < 0) {
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
        if (acc_parse_device_index(type_arg, &index) < 0) {
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
    if (acc_parse_device_string(type_arg, &type, &index) < 0) {
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
