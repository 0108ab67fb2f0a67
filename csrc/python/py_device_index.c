/*
 * py_device_index.c - accelerator.device_index: the context manager that
 * makes a device current for a block, as torch.accelerator.device_index.
 *
 * What to restore lives on the core's per-thread stack of `with` blocks
 * (acc_restore_push), not in the object: one object, such as a module
 * level ON_DEV1 = device_index(1), may be entered by several threads at
 * once, and nested in one thread, and each exit restores what its own
 * thread's matching enter saw.
 */
#include "pyaccel.h"

#include <limits.h>

typedef struct {
    PyObject_HEAD
    PyObject *idx;    /* the index as passed (an exact int), or None */
    long long index;  /* its value; -1 for None */
    int huge;         /* the value does not fit in a long long */
} DeviceIndexObject;

static PyObject *
device_index_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const names[] = {"device", NULL};
    static const acc_params params = {"device_index()", names, 1, 1, 1};
    DeviceIndexObject *self;
    PyObject *idx = NULL;
    long long value = -1;
    int overflow = 0;

    if (acc_parse_tuple(args, kwargs, &params, &idx) < 0) {
        return NULL;
    }
    /* Checked here rather than at enter: the object then holds only an
     * exact int or None, which cannot form a cycle (no GC needed). */
    if (idx == Py_None) {
        idx = Py_NewRef(idx);
    }
    else if (!acc_is_index(idx)) {
        PyErr_Format(PyExc_TypeError, "device_index() expects an int device "
                     "index or None, got %.100s", acc_type_name(idx));
        return NULL;
    }
    else {
        idx = PyNumber_Index(idx);   /* exact int */
        if (idx == NULL) {
            return NULL;
        }
        value = PyLong_AsLongLongAndOverflow(idx, &overflow);
        if (value == -1 && PyErr_Occurred()) {
            Py_DECREF(idx);
            return NULL;
        }
    }
    self = (DeviceIndexObject *)acc_alloc(cls);
    if (self == NULL) {
        Py_DECREF(idx);
        return NULL;
    }
    self->idx = idx;
    self->index = value;
    self->huge = overflow != 0;
    return (PyObject *)self;
}

static void
device_index_dealloc(DeviceIndexObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    Py_DECREF(self->idx);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
device_index_enter(DeviceIndexObject *self, PyObject *unused)
{
    acc_state *st;
    int previous = acc_current_device(), ignored;
    acc_stream *none;
    acc_error err;

    (void)unused;
    if (self->idx == Py_None) {
        Py_RETURN_NONE;
    }
    acc_ensure_probed();
    if (self->huge) {
        /* Out of range, worded with the value as passed. */
        acc_check_huge_index(acc_state_from_type(Py_TYPE((PyObject *)self)),
                             self->idx);
        return NULL;
    }
    /* The module state is only looked up when needed: this is hot. */
    if (acc_check_device(self->index, &err) != ACC_OK
        || acc_restore_push(self, previous, NULL, &err) != ACC_OK) {
        st = acc_state_from_type(Py_TYPE((PyObject *)self));
        return acc_raise(st, &err);
    }
    if (self->index != previous) {
        st = acc_state_from_type(Py_TYPE((PyObject *)self));
        if (acc_switch_device(st, (int)self->index) < 0) {
            acc_restore_pop(self, 1, "device_index", &ignored, &none, &err);
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
device_index_exit(DeviceIndexObject *self, PyObject *const *args,
                  Py_ssize_t nargs)
{
    acc_state *st;
    acc_stream *none;
    acc_error err;
    int previous;

    (void)args;
    (void)nargs;
    if (self->idx == Py_None) {
        Py_RETURN_NONE;
    }
    /* Like torch, whose each object restores what its own enter saw, an
     * exit need not be the innermost one: this thread's innermost entry of
     * this object is the one that matches. */
    if (acc_restore_pop(self, 0, "device_index", &previous, &none, &err)
        != ACC_OK) {
        st = acc_state_from_type(Py_TYPE((PyObject *)self));
        return acc_raise_unmatched_exit(st, &err);
    }
    if (previous != acc_current_device()) {
        st = acc_state_from_type(Py_TYPE((PyObject *)self));
        if (acc_switch_device(st, previous) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
device_index_repr(DeviceIndexObject *self)
{
    return PyUnicode_FromFormat("device_index(%R)", self->idx);
}

PyDoc_STRVAR(device_index_doc,
"device_index(device, /)\n"
"--\n"
"\n"
"Context manager that makes device (an int index, or None for a no-op)\n"
"the calling thread's current device, and restores the previous one on\n"
"exit.  Re-entrant and thread-safe: what to restore is kept per thread,\n"
"so one object may be entered again while active, and by several threads\n"
"at once.");

PyDoc_STRVAR(enter_doc,
"__enter__($self, /)\n--\n\nMake the index current, remembering the "
"previous one\nfor this thread.");

PyDoc_STRVAR(exit_doc,
"__exit__($self, /, *exc_info)\n--\n\nRestore the device that was current "
"at this thread's\nmatching enter.");

static PyMethodDef device_index_methods[] = {
    {"__enter__", (PyCFunction)device_index_enter, METH_NOARGS, enter_doc},
    {"__exit__", (PyCFunction)(void (*)(void))device_index_exit,
     METH_FASTCALL, exit_doc},
    {NULL},
};

static PyMemberDef device_index_members[] = {
    {"idx", T_OBJECT, offsetof(DeviceIndexObject, idx), READONLY,
     PyDoc_STR("The device index entered (an int), or None.")},
    {NULL},
};

static PyType_Slot device_index_slots[] = {
    {Py_tp_doc, (void *)device_index_doc},
    {Py_tp_new, device_index_new},
    {Py_tp_dealloc, device_index_dealloc},
    {Py_tp_repr, device_index_repr},
    {Py_tp_methods, device_index_methods},
    {Py_tp_members, device_index_members},
    {0, NULL},
};

PyType_Spec acc_device_index_spec = {
    .name = "accelerator.device_index",
    .basicsize = sizeof(DeviceIndexObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = device_index_slots,
};
