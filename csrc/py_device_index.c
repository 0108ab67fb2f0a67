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


typedef struct {
    PyObject_HEAD
    PyObject *idx;    /* the int index as passed, or None */
} DeviceIndexObject;

static PyObject *
device_index_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    DeviceIndexObject *self;
    PyObject *idx;

    if (kwargs != NULL && PyDict_Size(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "device_index() takes no keyword arguments");
        return NULL;
    }
    if (PyTuple_Size(args) != 1) {
        PyErr_Format(PyExc_TypeError, PyTuple_Size(args) == 0
                     ? "device_index() missing 1 required positional "
                       "argument: 'device' (an int device index or None)"
                     : "device_index() takes 1 positional argument (an int "
                       "device index or None) but %zd were given",
                     PyTuple_Size(args));
        return NULL;
    }
    idx = PyTuple_GetItem(args, 0);
    self = (DeviceIndexObject *)acc_alloc(cls);
    if (self == NULL) {
        return NULL;
    }
    self->idx = Py_NewRef(idx);
    return (PyObject *)self;
}

static int
device_index_traverse(DeviceIndexObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->idx);
    Py_VISIT(Py_TYPE((PyObject *)self));
    return 0;
}

static int
device_index_clear(DeviceIndexObject *self)
{
    Py_CLEAR(self->idx);
    return 0;
}

static void
device_index_dealloc(DeviceIndexObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    PyObject_GC_UnTrack((PyObject *)self);
    device_index_clear(self);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

/* The index to enter, range-checked, or -1 for None (a no-op). */
static int
entered_index(acc_state *st, PyObject *idx, int *index)
{
    long long value;
    int overflow;

    if (idx == Py_None) {
        *index = -1;
        return 0;
    }
    if (PyBool_Check(idx) || !PyLong_Check(idx)) {
        PyErr_Format(PyExc_TypeError, "device_index() expects an int device "
                     "index or None, got %.100s", acc_type_name(idx));
        return -1;
    }
    value = PyLong_AsLongLongAndOverflow(idx, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    acc_ensure_probed();
    if (overflow) {
        acc_check_huge_index(st, idx);
        return -1;
    }
    if (acc_check_index(st, value) < 0) {
        return -1;
    }
    *index = (int)value;
    return 0;
}

static PyObject *
device_index_enter(DeviceIndexObject *self, PyObject *unused)
{
    acc_state *st = acc_state_from_type(Py_TYPE((PyObject *)self));
    int index, previous = acc_current_device(), ignored;
    acc_stream *none;
    acc_error err;

    (void)unused;
    if (entered_index(st, self->idx, &index) < 0) {
        return NULL;
    }
    if (index < 0) {
        Py_RETURN_NONE;
    }
    if (acc_restore_push(self, previous, NULL, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    if (index != previous && acc_switch_device(st, index) < 0) {
        acc_restore_pop(self, 1, "device_index", &ignored, &none, &err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
device_index_exit(DeviceIndexObject *self, PyObject *const *args,
                  Py_ssize_t nargs)
{
    acc_state *st = acc_state_from_type(Py_TYPE((PyObject *)self));
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
        return acc_raise_unmatched_exit(st, &err);
    }
    if (previous != acc_current_device()
        && acc_switch_device(st, previous) < 0) {
        return NULL;
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
    {Py_tp_traverse, device_index_traverse},
    {Py_tp_clear, device_index_clear},
    {Py_tp_repr, device_index_repr},
    {Py_tp_methods, device_index_methods},
    {Py_tp_members, device_index_members},
    {0, NULL},
};

PyType_Spec acc_device_index_spec = {
    .name = "accelerator.device_index",
    .basicsize = sizeof(DeviceIndexObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_HAVE_GC,
    .slots = device_index_slots,
};
