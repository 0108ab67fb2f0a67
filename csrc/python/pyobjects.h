/*
 * pyobjects.h - the instances of the types more than one file of the
 * Python layer reads: device, Stream and Event.  Each type's own file
 * makes and runs them; the others read their fields through these
 * definitions and accessors instead of calling into that file, so no two
 * type files depend on each other (docs/python-layer.rst).
 */
#ifndef PYOBJECTS_H
#define PYOBJECTS_H

#include "pyaccel.h"

typedef struct {
    PyObject_HEAD
    PyObject *type;   /* str */
    int index;        /* -1: no index */
} DeviceObject;

typedef struct {
    PyObject_HEAD
    acc_stream *s;
    PyObject *owner;        /* keeps a foreign stream's owner alive */
    PyObject *weakreflist;
    acc_state *state;       /* of the module that made it (its type's) */
} StreamObject;

typedef struct {
    PyObject_HEAD
    acc_event e;
    PyObject *weakreflist;
} EventObject;

/* The core stream of a Stream object (type already checked). */
static inline acc_stream *
acc_stream_of(PyObject *stream)
{
    return ((StreamObject *)stream)->s;
}

/* The core event of an Event object (type already checked). */
static inline acc_event *
acc_event_of(PyObject *event)
{
    return &((EventObject *)event)->e;
}

/* The Python object for a core stream: the cached default stream object,
 * the live wrapper, or a new wrapper (py_stream_objects.c).  New
 * reference. */
PyObject *acc_stream_object(acc_state *st, acc_stream *s);

/* A new Stream object of cls around s (taking a reference to s) that
 * this module instance hands out for s from now on; owner (or NULL) is
 * kept alive with it (py_stream_objects.c). */
PyObject *acc_stream_object_new(PyTypeObject *cls, acc_stream *s,
                                PyObject *owner);

/* In a Stream's dealloc: this instance no longer hands it out.  May run
 * with an exception set and leaves it alone. */
void acc_stream_object_forget(StreamObject *self);

#endif /* PYOBJECTS_H */
