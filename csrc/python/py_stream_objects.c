/*
 * py_stream_objects.c - the one Python object a module instance hands
 * out for each core stream: current_stream() returns the same Stream
 * while it lives, whichever file asks (the module's functions, Buffer,
 * DLPack).  Below the type files (docs/python-layer.rst).
 *
 * The core
 * stream is process-global (a thread's current stream outlives any one
 * module), but objects belong to one module instance: after a re-import
 * or in a subinterpreter each instance must hand out its own.  The core
 * stream's back-pointer serves the instance that claimed it first (the
 * fast path); any other instance keeps its object in its stream_wrappers
 * map.  Both are borrowed: each object removes itself as it dies.
 */
#include "pyobjects.h"

static PyObject *
wrapper_key(const acc_stream *s)
{
    return PyLong_FromVoidPtr((void *)s);
}

static int
remember_wrapper(acc_state *st, acc_stream *s, StreamObject *self)
{
    PyObject *key, *value;
    int rc;

    if (s->wrapper == NULL) {
        s->wrapper = self;
        s->wrapper_owner = st->instance;
        return 0;
    }
    key = wrapper_key(s);
    value = PyLong_FromVoidPtr(self);
    rc = key != NULL && value != NULL
             ? PyDict_SetItem(st->stream_wrappers, key, value)
             : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    return rc;
}

/* This instance's object for s (borrowed), or NULL; never fails. */
static PyObject *
known_wrapper(acc_state *st, const acc_stream *s)
{
    PyObject *key, *value;

    if (s->wrapper != NULL && s->wrapper_owner == st->instance) {
        return (PyObject *)s->wrapper;
    }
    if (st->stream_wrappers == NULL
        || PyDict_Size(st->stream_wrappers) == 0) {
        return NULL;
    }
    key = wrapper_key(s);
    if (key == NULL) {
        PyErr_Clear(); /* then a new object is made, or fails likewise */
        return NULL;
    }
    value = PyDict_GetItem(st->stream_wrappers, key);
    Py_DECREF(key);
    return value != NULL ? (PyObject *)PyLong_AsVoidPtr(value) : NULL;
}

void
acc_stream_object_forget(StreamObject *self)
{
    acc_stream *s = self->s;
    acc_state *st = self->state;
    PyObject *key, *value;

    if (s->wrapper == self) {
        s->wrapper = NULL;
        return;
    }
    if (st == NULL || st->stream_wrappers == NULL
        || PyDict_Size(st->stream_wrappers) == 0) {
        return;
    }
    key = wrapper_key(s);
    if (key == NULL) {
        return;
    }
    value = PyDict_GetItem(st->stream_wrappers, key);
    if (value != NULL && PyLong_AsVoidPtr(value) == (void *)self) {
        (void)PyDict_DelItem(st->stream_wrappers, key);
    }
    Py_DECREF(key);
}

PyObject *
acc_stream_object_new(PyTypeObject *cls, acc_stream *s, PyObject *owner)
{
    StreamObject *self = (StreamObject *)acc_alloc(cls);

    if (self == NULL) {
        return NULL;
    }
    acc_stream_incref(s);
    self->s = s;
    self->owner = Py_XNewRef(owner);
    self->state = acc_state_from_type(cls);
    if (!(s->flags & ACC_STREAM_DEFAULT)
        && remember_wrapper(self->state, s, self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

PyObject *
acc_stream_object(acc_state *st, acc_stream *s)
{
    PyObject **slot, *known;

    if (s->flags & ACC_STREAM_DEFAULT) {
        /* The module keeps default stream objects for good, so every
         * current_stream() on a default stream is the same object. */
        slot = &st->default_streams[s->device];
        if (*slot == NULL) {
            *slot = acc_stream_object_new(st->stream_type, s, NULL);
        }
        return Py_XNewRef(*slot);
    }
    known = known_wrapper(st, s);
    if (known != NULL) {
        return Py_NewRef(known);
    }
    return acc_stream_object_new(st->stream_type, s, NULL);
}
