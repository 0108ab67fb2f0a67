/*
 * pyaccel.h - what the files of the Python layer share: the module state,
 * the status -> exception mapping and device argument resolution.
 *
 * The Python layer is _accelerator.c (the module and its functions) and
 * one file per type or family: py_device.c, py_device_index.c,
 * py_stream.c, py_event.c, py_buffer.c (Buffer), py_hostbuffer.c
 * (HostBuffer), py_dlpack.c (DLPack both ways), py_graph.c,
 * py_memory.c (accelerator.memory's functions) and py_capability.c
 * (get_device_capability).  Only these files include
 * Python.h.
 */
#ifndef PYACCEL_H
#define PYACCEL_H

#define PY_SSIZE_T_CLEAN
/* The stable ABI (abi3) of Python 3.11: one build serves 3.11 and later.
 * setup.py defines it; the checks below keep the code honest either way. */
#include <Python.h>
#include <structmember.h>

#include "accel.h"

typedef struct acc_state {
    /* This module instance, unique in the process (a re-import or a
     * subinterpreter makes another): owner tag of core stream
     * back-pointers. */
    unsigned long long instance;
    /* core stream address (int) -> address (int) of this instance's
     * Stream object for it, when the core stream's back-pointer belongs
     * to another instance; each object removes its entry as it dies. */
    PyObject *stream_wrappers;
    PyTypeObject *device_type;
    PyTypeObject *stream_type;
    PyTypeObject *event_type;
    PyTypeObject *device_index_type;
    PyTypeObject *properties_type;
    PyTypeObject *buffer_type;
    PyTypeObject *host_buffer_type;
    PyTypeObject *graph_type;
    PyObject *AcceleratorError;
    PyObject *OutOfMemoryError;
    PyObject *DeviceIndexError;
    PyObject *str_type;            /* "type" */
    PyObject *str_index;           /* "index" */
    PyObject *str_cuda_stream;     /* "__cuda_stream__" */
    PyObject *accelerator;         /* device(type) of the backend, or NULL */
    PyObject *device_cache;        /* {device() arguments: device} */
    PyObject *default_streams[ACC_MAX_DEVICES]; /* wrappers, lazily */
    PyObject *properties[ACC_MAX_DEVICES];      /* DeviceProperties */
} acc_state;

extern PyModuleDef acc_module_def;

static inline acc_state *
acc_module_state(PyObject *module)
{
    return (acc_state *)PyModule_GetState(module);
}

/* The name of obj's type, for error messages (the limited API has no
 * tp_name).  Points into a small per-thread ring of buffers, so a message
 * may use up to four at once. */
const char *acc_type_name(PyObject *obj);

/* acc_type_name, where an object of the wrong type may be one of this
 * module's own types made by another instance of it (a re-import, a
 * subinterpreter): that one says so, as "Stream" alone would read as the
 * very type expected.  A per-thread buffer, one message at a time. */
const char *acc_type_name_in(acc_state *st, PyObject *obj);

/* Whether obj is an integer for the API: an int, or an object with
 * __index__ (a numpy integer), as torch takes sizes; never a bool, whose
 * True would silently mean 1.  PyLong_As*() and PyNumber_Index() take
 * such an object as it is. */
static inline int
acc_is_index(PyObject *obj)
{
    return !PyBool_Check(obj) && (PyLong_Check(obj) || PyIndex_Check(obj));
}

/* After obj.__index__() failed (acc_is_index let obj through: a numpy
 * array has __index__ that only its 0-d integer arrays honour): a
 * TypeError that names the argument, "<expected>, got <type> (<the
 * object's reason>)", in place of numpy's bare message.  Other errors
 * stay as they are.  Returns -1. */
int acc_index_failed(PyObject *obj, const char *expected);

/* Allocate and free instances of our heap types (tp_alloc and tp_free
 * are not fields in the limited API). */
static inline PyObject *
acc_alloc(PyTypeObject *cls)
{
    return PyType_GenericAlloc(cls, 0);
}

static inline void
acc_object_free(PyObject *self)
{
    freefunc free_slot = (freefunc)PyType_GetSlot(Py_TYPE(self), Py_tp_free);

    free_slot(self);
}

/* State of the module that defined type (or its base). */
acc_state *acc_state_from_type(PyTypeObject *type);

/* Probe once (GIL released while drivers load); never fails. */
static inline void
acc_ensure_probed(void)
{
    if (!acc_probed()) {
        Py_BEGIN_ALLOW_THREADS
        acc_probe();
        Py_END_ALLOW_THREADS
    }
}

/* A str from text of the C core or a driver; never fails to decode.  size
 * is the buffer the text was formatted into (0: not a fixed buffer): text
 * that fills it was cut, so a last incomplete character is dropped.  Bytes
 * that are not UTF-8 (a library path, a driver's name) show as \xNN. */
PyObject *acc_text(const char *text, size_t size);

/* acc_current_stream (current != 0) or acc_default_stream, with the GIL
 * released the first time, when making the default stream may call the
 * driver (and hold the dispatcher's lock meanwhile). */
static inline acc_status
acc_stream_for(int device, int current, acc_stream **out, acc_error *err)
{
    acc_status status;

    if (acc_stream_cached(device, current, out)) {
        return ACC_OK;
    }
    Py_BEGIN_ALLOW_THREADS
    status = current ? acc_current_stream(device, out, err)
                     : acc_default_stream(device, out, err);
    Py_END_ALLOW_THREADS
    return status;
}

/* Raise the exception for err; returns NULL for convenience. */
PyObject *acc_raise(acc_state *st, const acc_error *err);

/* Raise the error of acc_restore_pop: an unmatched __exit__ is a plain
 * RuntimeError (a usage error, not the driver's). */
static inline PyObject *
acc_raise_unmatched_exit(acc_state *st, const acc_error *err)
{
    if (err->status == ACC_ERR_STATE) {
        PyErr_SetString(PyExc_RuntimeError, err->message);
        return NULL;
    }
    return acc_raise(st, err);
}

/* Raise the "no accelerator"/"forked" error if the backend is not usable;
 * return -1 then, else 0. */
int acc_require_usable(acc_state *st);

/* acc_require_usable, then initialise the driver if the probe deferred it
 * (CUDA counted through NVML), with the GIL released: the first use may
 * take seconds.  -1 with an exception set. */
int acc_require_ready(acc_state *st);

/*
 * Resolve a device argument to an index, as torch's _get_device_index:
 * an int, a device string, an accelerator.device or any object with
 * .type and .index.  None (and a device without index) means the current
 * device when optional, else ValueError.  Range is not checked here
 * (each API has its own rule for negative indices); -1 with an error set.
 */
int acc_resolve_device(acc_state *st, PyObject *obj, int optional,
                       long long *index);

/* A device argument of a function taking (device=None, /): the current
 * device when absent or None, range-checked; -1 with an error set. */
int acc_optional_device(acc_state *st, PyObject *const *args,
                        Py_ssize_t nargs, const char *name, int *device);

/* Check index against the device count (DeviceIndexError). */
int acc_check_index(acc_state *st, long long index);
/* The driver's facts about device (read once: the dispatcher caches
 * them), the GIL released while the driver is asked; -1 with an
 * exception set on failure. */
int acc_device_facts(acc_state *st, int device,
                     const acc_device_properties **p);

/* An int as text for a message: decimal as written, or past 256 bits
 * "<an int of N bits>" ("-<...>" when negative).  New reference. */
PyObject *acc_int_text(PyObject *value);

/* Raise the error for an int device index outside long long (no
 * accelerator, or out of range, showing the value passed); returns -1. */
int acc_check_huge_index(acc_state *st, PyObject *value);

/* Make device current, releasing the GIL when the driver has work. */
int acc_switch_device(acc_state *st, int device);

/* The Python object for a core stream: the cached default stream object,
 * the live wrapper, or a new wrapper.  New reference. */
PyObject *acc_stream_object(acc_state *st, acc_stream *s);

/* accelerator.device for (type, index); index -1 means None. */
PyObject *acc_device_new(acc_state *st, const char *type, int index);

/* The core stream of a Stream object (type already checked). */
acc_stream *acc_stream_of(PyObject *stream);
/* The core event of an Event object (type already checked). */
acc_event *acc_event_of(PyObject *event);

/* Call accelerator._aio.<name>(obj): the asyncio support, written in
 * Python (Event/Stream __await__ and the *_async methods).  New reference. */
PyObject *acc_call_aio(const char *name, PyObject *obj);

/* The allocator's statistics and controls (py_memory.c). */
extern PyMethodDef acc_memory_methods[];
/* get_device_capability (py_capability.c). */
extern PyMethodDef acc_capability_methods[];

extern PyType_Spec acc_device_spec;
extern PyType_Spec acc_stream_spec;
extern PyType_Spec acc_event_spec;
extern PyType_Spec acc_device_index_spec;
extern PyType_Spec acc_graph_spec;

#endif /* PYACCEL_H */
