/*
 * pyaccel.h - what the files of the Python layer share: the module state
 * and the helpers below the type files (docs/python-layer.rst).
 *
 * The Python layer, top to bottom (each file calls only those below it):
 *
 *   _accelerator.c      the module: its functions, state, exceptions and
 *                       the registration of the types
 *   py_device.c, py_device_index.c, py_stream.c, py_event.c,
 *   py_buffer.c (Buffer), py_hostbuffer.c (HostBuffer), py_graph.c,
 *   py_memory.c (accelerator.memory's functions), py_capability.c
 *   (get_device_capability), py_kernel.c (Module, Kernel, launch)
 *                       one file per type or family of functions
 *   py_compile.c        the source compilers' two private functions,
 *                       which accelerator/_source.py calls
 *   py_dlpack.c         DLPack both ways: the methods Buffer and
 *                       HostBuffer list, and from_dlpack
 *   py_ipc.c            sharing with other processes: the methods Buffer
 *                       and Event list, pickling, ipc_collect
 *   py_lifetime.c       the lifetime of Buffer and HostBuffer memory
 *   py_stream_objects.c the one Stream object for each core stream
 *   py_args.c           the one argument parser; device, stream and size
 *                       arguments
 *   py_helpers.c        state lookup, messages, errors -> exceptions,
 *                       device checks and switching
 *   py_plugins.c        before the first probe: the plugins that the
 *                       accelerator.backends entry points name, handed
 *                       to the core
 *
 * Headers: this one (state and helpers), pyobjects.h (the device, Stream
 * and Event instances other files read) and pybuffer.h (Buffer and
 * HostBuffer).  Only these files include Python.h.
 */
#ifndef PYACCEL_H
#define PYACCEL_H

#define PY_SSIZE_T_CLEAN
/* The stable ABI (abi3) of Python 3.11: one build serves 3.11 and later.
 * setup.py defines it; the checks below keep the code honest either way. */
#include <Python.h>
#include <structmember.h>

#include "../core/accel.h"

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
    PyTypeObject *module_type;
    PyTypeObject *kernel_type;
    PyObject *AcceleratorError;
    PyObject *OutOfMemoryError;
    PyObject *BuildError;
    PyObject *DeviceIndexError;
    PyObject *str_type;            /* "type" */
    PyObject *str_index;           /* "index" */
    PyObject *str_cuda_stream;     /* "__cuda_stream__" */
    PyObject *accelerator;         /* device(type) of the backend, or NULL */
    PyObject *device_cache;        /* {device() arguments: device} */
    PyObject *default_streams[ACC_MAX_DEVICES]; /* wrappers, lazily */
    PyObject *properties[ACC_MAX_DEVICES];      /* DeviceProperties */
} acc_state;

/* The module's name; its PyModuleDef names it by this very pointer, so
 * that acc_state_from_type knows this module's types without reaching up
 * to the module file. */
extern const char acc_module_name[];

static inline acc_state *
acc_module_state(PyObject *module)
{
    return (acc_state *)PyModule_GetState(module);
}

/* Helpers (py_helpers.c, and inline) ---------------------------------- */

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

/* Before the first probe (py_plugins.c): hand the core the plugins of
 * the accelerator.backends entry points, unless it has a list or has
 * probed.  Never fails (an exception already set is kept). */
void acc_offer_plugins(void);
/* Probe once, the plugins offered first (the GIL released while drivers
 * load); never fails. */
void acc_ensure_probed(void);

/* A str from text of the C core or a driver; never fails to decode.  size
 * is the buffer the text was formatted into (0: not a fixed buffer): text
 * that fills it was cut, so a last incomplete character is dropped.  Bytes
 * that are not UTF-8 (a library path, a driver's name) show as \xNN. */
PyObject *acc_text(const char *text, size_t size);

/* acc_text(text), or None for NULL.  New reference. */
PyObject *acc_text_or_none(const char *text);

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

/* Raise BuildError for err with the driver's or compiler's log (may be
 * NULL): the message ends with it, and the exception's log is it. */
void acc_raise_build_error(acc_state *st, const acc_error *err,
                           const char *log);

/* Raise the error of acc_restore_pop: an unmatched __exit__ is a plain
 * RuntimeError (a usage error, not the driver's). */
PyObject *acc_raise_unmatched_exit(acc_state *st, const acc_error *err);

/* Raise the "no accelerator"/"forked" error if the backend is not usable;
 * return -1 then, else 0. */
int acc_require_usable(acc_state *st);

/* acc_require_usable, then initialise the driver if the probe deferred it
 * (CUDA counted through NVML), with the GIL released: the first use may
 * take seconds.  -1 with an exception set. */
int acc_require_ready(acc_state *st);

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

/* accelerator.device for (type, index); index -1 means None. */
PyObject *acc_device_new(acc_state *st, const char *type, int index);

/* Call accelerator._aio.<name>(obj): the asyncio support, written in
 * Python (Event/Stream __await__ and the *_async methods).  New reference. */
PyObject *acc_call_aio(const char *name, PyObject *obj);

/* Arguments (py_args.c) ------------------------------------------------ */

#define ACC_MAX_PARAMS 8

/* A callable's parameters, as its signature line says: names[0..positional)
 * may come by position (the first posonly only so), the others only by
 * keyword; names[0..required) must be given. */
typedef struct acc_params {
    const char *what;           /* the callable, for messages: "Buffer()" */
    const char *const *names;   /* NULL-terminated, ACC_MAX_PARAMS at most */
    int posonly;
    int required;
    int positional;
} acc_params;

/* The one argument parser: puts each argument given into values[i] (the
 * slot of names[i], borrowed) and leaves the others as the caller set
 * them (their defaults).  0, or -1 with a TypeError that says what was
 * wrong and what the callable takes.  acc_parse_args serves a vectorcall
 * (METH_FASTCALL, with or without METH_KEYWORDS: kwnames NULL),
 * acc_parse_tuple tp_new's tuple and dict. */
int acc_parse_args(PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames, const acc_params *p, PyObject **values);
int acc_parse_tuple(PyObject *args, PyObject *kwargs, const acc_params *p,
                    PyObject **values);

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
 * device when absent or None, range-checked.  what names the function
 * ("synchronize()"); -1 with an error set. */
int acc_optional_device(acc_state *st, PyObject *const *args,
                        Py_ssize_t nargs, const char *what, int *device);

/* "type" or "type:index" into a new str and an index (-1: none). */
int acc_parse_device_string(PyObject *text, PyObject **type, int *index);
/* A device index: None, or an int in [-1, INT_MAX]; -1 means None. */
int acc_parse_device_index(PyObject *obj, int *index);

/* A stream argument: None (or NULL) means the current stream of device
 * (not read otherwise). */
int acc_parse_stream(acc_state *st, PyObject *obj, int device,
                     const char *what, acc_stream **out);
/* An nbytes argument: an int >= 0 (TypeError, ValueError). */
int acc_parse_nbytes(acc_state *st, PyObject *obj, const char *what,
                     size_t *nbytes);
/* Raise the error for an int outside long long, worded by the core with
 * the value as passed: a size (what names it) or, for what NULL, a fill
 * value.  Returns -1. */
int acc_int_error(acc_state *st, PyObject *obj, int negative,
                  const char *what);

/* The allocator's statistics and controls (py_memory.c). */
extern PyMethodDef acc_memory_methods[];
/* get_device_capability (py_capability.c). */
extern PyMethodDef acc_capability_methods[];

extern PyType_Spec acc_device_spec;
extern PyType_Spec acc_stream_spec;
extern PyType_Spec acc_event_spec;
extern PyType_Spec acc_device_index_spec;
extern PyType_Spec acc_graph_spec;
/* Module, Kernel and launch() (py_kernel.c). */
extern PyType_Spec acc_module_spec;
extern PyType_Spec acc_kernel_spec;
extern PyMethodDef acc_kernel_methods[];
/* _compiler_id and _compile, for accelerator/_source.py (py_compile.c). */
extern PyMethodDef acc_compile_methods[];

#endif /* PYACCEL_H */
