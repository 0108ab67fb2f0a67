/*
 * py_stream.c - accelerator.Stream: a queue of work on one device, as
 * torch.Stream, plus the CUDA stream protocol for interop.
 *
 * A Stream object holds a reference to a core acc_stream.  The core
 * stream points back at its live Python object (borrowed), so that
 * current_stream() returns the same object every time while it lives.
 */
#include "pyobjects.h"

#include <stdio.h>
#include <stdint.h>
#include <string.h>

static int
parse_priority(PyObject *obj, int *priority)
{
    long value;
    int overflow;

    if (obj == NULL) {
        *priority = 0;
        return 0;
    }
    if (PyBool_Check(obj) || !PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "Stream priority must be an int, not %.100s",
                     acc_type_name(obj));
        return -1;
    }
    value = PyLong_AsLongAndOverflow(obj, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    /* Beyond the driver's range is clamped, as in torch; keep the
     * arithmetic in int. */
    if (overflow < 0 || value < -1000000) {
        value = -1000000;
    }
    if (overflow > 0 || value > 1000000) {
        value = 1000000;
    }
    *priority = (int)value;
    return 0;
}

static int is_int(PyObject *obj);
static PyObject *wrap_handle(PyTypeObject *cls, PyObject *obj,
                             PyObject *device);

/* torch's other form, Stream(stream_id=, device_index=, device_type=):
 * the stream those three name (as from_handle), which compares equal to
 * the stream they were read from.  Every one is required. */
static PyObject *
stream_from_id(PyTypeObject *cls, PyObject *stream_id,
               PyObject *device_index, PyObject *device_type)
{
    long type;

    if (stream_id == NULL || device_index == NULL || device_type == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "Stream() takes stream_id, device_index and "
                        "device_type together (the values of an existing "
                        "stream's attributes), without device or priority");
        return NULL;
    }
    if (!is_int(stream_id) || !is_int(device_index)
        || !is_int(device_type)) {
        PyErr_Format(PyExc_TypeError,
                     "Stream(stream_id=, device_index=, device_type=) takes "
                     "three ints, got %.100s, %.100s and %.100s",
                     acc_type_name(stream_id), acc_type_name(device_index),
                     acc_type_name(device_type));
        return NULL;
    }
    acc_ensure_probed();
    type = PyLong_AsLong(device_type);
    if (type == -1 && PyErr_Occurred()) {
        PyErr_Clear();
    }
    if (acc_require_usable(acc_state_from_type(cls)) < 0) {
        return NULL;
    }
    if (type != acc_torch_device_type()) {
        PyErr_Format(PyExc_ValueError,
                     "Stream(device_type=%R) is not the current "
                     "accelerator's device type: %s is %d",
                     device_type, acc_device_type(),
                     acc_torch_device_type());
        return NULL;
    }
    return wrap_handle(cls, stream_id, device_index);
}

static PyObject *
stream_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const names[] = {"device", "priority", "stream_id",
                                        "device_index", "device_type", NULL};
    static const acc_params params = {"Stream()", names, 0, 0, 1};
    acc_state *st = acc_state_from_type(cls);
    PyObject *values[5] = {NULL, NULL, NULL, NULL, NULL};
    PyObject *device, *priority_arg, *self;
    PyObject *stream_id, *device_index, *device_type;
    long long index;
    int priority;
    acc_stream *s = NULL;
    acc_error err;
    acc_status status;

    if (acc_parse_tuple(args, kwargs, &params, values) < 0) {
        return NULL;
    }
    device = values[0];
    priority_arg = values[1];
    /* None, as the signature's defaults say, is leaving one out. */
    stream_id = values[2] == Py_None ? NULL : values[2];
    device_index = values[3] == Py_None ? NULL : values[3];
    device_type = values[4] == Py_None ? NULL : values[4];
    if (stream_id != NULL || device_index != NULL || device_type != NULL) {
        if (device != NULL || priority_arg != NULL) {
            stream_id = NULL; /* the message says what goes together */
        }
        return stream_from_id(cls, stream_id, device_index, device_type);
    }
    if (parse_priority(priority_arg, &priority) < 0) {
        return NULL;
    }
    acc_ensure_probed();
    if (acc_require_usable(st) < 0
        || acc_resolve_device(st, device != NULL ? device : Py_None, 1,
                              &index) < 0
        || acc_check_index(st, index) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_stream_create((int)index, priority, &s, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    self = acc_stream_object_new(cls, s, NULL);
    acc_stream_decref(s);
    return self;
}

static int
stream_traverse(StreamObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->owner);
    return 0;
}

static int
stream_clear(StreamObject *self)
{
    Py_CLEAR(self->owner);
    return 0;
}

static void
stream_dealloc(StreamObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    if (self->s != NULL) {
        if (!(self->s->flags & ACC_STREAM_DEFAULT)) {
            acc_stream_object_forget(self);
        }
        /* Destroying a stream with queued work is fine: the driver lets
         * the work finish and does not block. */
        acc_stream_decref(self->s);
        self->s = NULL;
    }
    Py_CLEAR(self->owner);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Attributes ------------------------------------------------------------- */

static PyObject *
stream_get_device(StreamObject *self, void *closure)
{
    (void)closure;
    return acc_device_new(acc_state_from_type(Py_TYPE((PyObject *)self)),
                          acc_device_type(), self->s->device);
}

static PyObject *
stream_get_device_index(StreamObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->s->device);
}

static PyObject *
stream_get_device_type(StreamObject *self, void *closure)
{
    (void)self;
    (void)closure;
    return PyLong_FromLong(acc_torch_device_type());
}

static PyObject *
stream_get_priority(StreamObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->s->priority);
}

static PyObject *
stream_get_handle(StreamObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->s->handle);
}

/* torch's names for the native handle, which this Stream spells
 * otherwise: getters that raise the AttributeError saying what to use
 * (descriptors, not a tp_getattro, which would slow every method call). */
static PyObject *
stream_torch_handle_name(StreamObject *self, void *closure)
{
    PyErr_Format(PyExc_AttributeError,
                 "'%.100s' object has no attribute '%s': the native stream "
                 "(CUstream, ze command list, cl_command_queue) is "
                 "Stream.handle (also Stream.stream_id), and CUDA libraries "
                 "take the stream itself through __cuda_stream__()",
                 acc_type_name((PyObject *)self), (const char *)closure);
    return NULL;
}

static PyObject *
stream_repr(StreamObject *self)
{
    char text[160];

    snprintf(text, sizeof(text),
             "accelerator.Stream(device='%s:%d', handle=%#llx, "
             "priority=%d%s)", acc_device_type(),
             self->s->device, (unsigned long long)self->s->handle,
             self->s->priority,
             self->s->flags & ACC_STREAM_DEFAULT ? ", default" : "");
    return PyUnicode_FromString(text);
}

static int
same_stream(const acc_stream *a, const acc_stream *b)
{
    return a == b || (a->backend == b->backend && a->device == b->device
                      && a->handle == b->handle);
}

static PyObject *
stream_richcompare(PyObject *a, PyObject *b, int op)
{
    acc_state *st = acc_state_from_type(Py_TYPE(a));
    int equal;

    /* Anything but a Stream: NotImplemented, so == is False, != True
     * and ordering raises TypeError (torch's fixed behaviour). */
    if (!PyObject_TypeCheck(b, st->stream_type)
        || (op != Py_EQ && op != Py_NE)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    equal = same_stream(acc_stream_of(a), acc_stream_of(b));
    return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

static Py_hash_t
stream_hash(StreamObject *self)
{
    Py_uhash_t h = (Py_uhash_t)self->s->handle;

    h = (h ^ (h >> 17)) * 1000003u + (Py_uhash_t)self->s->device;
    return h == (Py_uhash_t)-1 ? -2 : (Py_hash_t)h;
}

/* Methods ---------------------------------------------------------------- */

static PyObject *
stream_query(StreamObject *self, PyObject *unused)
{
    acc_error err;
    acc_status status = acc_stream_query(self->s, &err);

    (void)unused;
    if (status == ACC_OK) {
        Py_RETURN_TRUE;
    }
    if (status == ACC_NOT_READY) {
        Py_RETURN_FALSE;
    }
    return acc_raise(acc_state_from_type(Py_TYPE((PyObject *)self)), &err);
}

/* An await of a capturing stream: its event record would be captured,
 * not run, and the await end at once before the work queued earlier ran.
 * It asks the driver as Stream.synchronize() does, which refuses at once
 * with its capture error (and invalidates the capture, as that call
 * does): -1 with that error; 0 otherwise. */
static int
refuse_capturing(PyObject *self)
{
    acc_stream *s = ((StreamObject *)self)->s;
    acc_error err;
    acc_status status;

    if (!acc_stream_captures(s)) {
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_stream_synchronize(s, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        acc_raise(acc_state_from_type(Py_TYPE(self)), &err);
        return -1;
    }
    return 0;
}

static PyObject *
stream_await(PyObject *self)
{
    if (refuse_capturing(self) < 0) {
        return NULL;
    }
    return acc_call_aio("stream_await", self);
}

static PyObject *
stream_synchronize_async(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (refuse_capturing(self) < 0) {
        return NULL;
    }
    return acc_call_aio("synchronize_stream", self);
}

static PyObject *
stream_synchronize(StreamObject *self, PyObject *unused)
{
    acc_error err;
    acc_status status;

    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    status = acc_stream_synchronize(self->s, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(acc_state_from_type(Py_TYPE((PyObject *)self)), &err);
    }
    Py_RETURN_NONE;
}

static int
check_type(PyObject *obj, PyTypeObject *type, const char *expected,
           const char *what)
{
    if (!PyObject_TypeCheck(obj, type)) {
        PyErr_Format(PyExc_TypeError, "%s expected an %s, got %s", what,
                     expected,
                     acc_type_name_in(acc_state_from_type(type), obj));
        return -1;
    }
    return 0;
}

static PyObject *
stream_wait_event(StreamObject *self, PyObject *event)
{
    acc_state *st = acc_state_from_type(Py_TYPE((PyObject *)self));
    acc_error err;

    if (check_type(event, st->event_type, "accelerator.Event",
                   "Stream.wait_event()") < 0) {
        return NULL;
    }
    if (acc_stream_wait_event(self->s, acc_event_of(event), &err)
        != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
stream_wait_stream(StreamObject *self, PyObject *other)
{
    acc_state *st = acc_state_from_type(Py_TYPE((PyObject *)self));
    acc_error err;
    acc_status status;

    if (check_type(other, st->stream_type, "accelerator.Stream",
                   "Stream.wait_stream()") < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_stream_wait_stream(self->s, acc_stream_of(other), &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
stream_record_event(StreamObject *self, PyObject *const *args,
                    Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"event", NULL};
    static const acc_params params = {"Stream.record_event()", names, 0, 0,
                                      1};
    acc_state *st = acc_state_from_type(Py_TYPE((PyObject *)self));
    PyObject *event = NULL;
    acc_event *e;
    acc_error err;
    acc_status status;

    if (acc_parse_args(args, nargs, kwnames, &params, &event) < 0) {
        return NULL;
    }
    if (event == NULL || event == Py_None) {
        event = PyObject_CallNoArgs((PyObject *)st->event_type);
        if (event == NULL) {
            return NULL;
        }
    }
    else if (check_type(event, st->event_type, "accelerator.Event",
                          "Stream.record_event()") < 0) {
        return NULL;
    }
    else {
        Py_INCREF(event);
    }
    e = acc_event_of(event);
    if (!acc_event_made(e)) {
        /* The first record creates the driver event, or waits for the
         * thread creating it: may be slow. */
        Py_BEGIN_ALLOW_THREADS
        status = acc_event_record(e, self->s, &err);
        Py_END_ALLOW_THREADS
    }
    else {
        status = acc_event_record(e, self->s, &err);
    }
    if (status != ACC_OK) {
        Py_DECREF(event);
        return acc_raise(st, &err);
    }
    return event;
}

/* `with stream:` keeps what to restore on the core's per-thread stack of
 * `with` blocks (acc_restore_push): torch's semantics, but safe when two
 * threads enter the same stream.  No Python object is made on this path. */
static PyObject *
stream_enter(StreamObject *self, PyObject *unused)
{
    acc_state *st;
    int device = acc_current_device();
    acc_stream *current;
    acc_error err;

    (void)unused;
    /* The module state is only looked up when needed: this is hot. */
    if (acc_check_usable(&err) != ACC_OK
        || acc_stream_for(self->s->device, 1, &current, &err) != ACC_OK) {
        goto fail;
    }
    if (self->s->device == device && same_stream(current, self->s)) {
        /* Re-entering the current stream changes nothing, as in torch;
         * a stream current on another device still switches to it. */
        if (acc_restore_push(self->s, -1, NULL, &err) != ACC_OK) {
            goto fail;
        }
        return Py_NewRef((PyObject *)self);
    }
    if (acc_restore_push(self->s, device, current, &err) != ACC_OK) {
        goto fail;
    }
    st = acc_state_from_type(Py_TYPE((PyObject *)self));
    if ((self->s->device != device
         && acc_switch_device(st, self->s->device) < 0)
        || acc_set_current_stream(self->s, &err) != ACC_OK) {
        acc_stream *saved;

        if (!PyErr_Occurred()) {
            acc_raise(st, &err);
        }
        /* Nothing changed that the entry would restore. */
        acc_restore_pop(self->s, 1, "Stream", &device, &saved, &err);
        acc_stream_decref(saved);
        return NULL;
    }
    return Py_NewRef((PyObject *)self);

fail:
    return acc_raise(acc_state_from_type(Py_TYPE((PyObject *)self)), &err);
}

static PyObject *
stream_exit(StreamObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    acc_state *st;
    acc_stream *previous;
    acc_status status;
    int device;
    acc_error err;

    (void)args;
    (void)nargs;
    if (acc_restore_pop(self->s, 1, "Stream", &device, &previous, &err)
        != ACC_OK) {
        st = acc_state_from_type(Py_TYPE((PyObject *)self));
        return acc_raise_unmatched_exit(st, &err);
    }
    if (previous == NULL) {
        Py_RETURN_NONE;
    }
    /* Restore the stream first, then the device, as torch does. */
    status = acc_set_current_stream(previous, &err);
    acc_stream_decref(previous);
    if (status != ACC_OK || self->s->device != device) {
        st = acc_state_from_type(Py_TYPE((PyObject *)self));
        if (status != ACC_OK) {
            return acc_raise(st, &err);
        }
        if (acc_switch_device(st, device) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
stream_cuda_stream(StreamObject *self, PyObject *unused)
{
    (void)unused;
    if (!(acc_backend_caps() & ACC_CAP_CUDA_STREAM_PROTOCOL)) {
        PyErr_Format(PyExc_TypeError,
                     "__cuda_stream__ is only defined for CUDA streams, not "
                     "for %s streams", acc_display_device_type());
        return NULL;
    }
    return Py_BuildValue("(iK)", 0, (unsigned long long)self->s->handle);
}

/* An int that is not a bool: True is not handle 1 nor version 1. */
static int
is_int(PyObject *obj)
{
    return PyLong_Check(obj) && !PyBool_Check(obj);
}

/* The native handle in obj: an int, or an object with __cuda_stream__. */
static int
foreign_handle(acc_state *st, PyObject *obj, uintptr_t *handle,
               PyObject **owner)
{
    PyObject *method, *result, *version;
    unsigned long long value;
    int overflow;
    int rc = -1;

    *owner = NULL;
    if (is_int(obj)) {
        value = PyLong_AsUnsignedLongLong(obj);
        if (value == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError,
                         "a stream handle must be a non-negative int that "
                         "fits in a pointer, got %R", obj);
            return -1;
        }
        *handle = (uintptr_t)value;
        return 0;
    }
    method = PyObject_GetAttr(obj, st->str_cuda_stream);
    if (method == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Format(PyExc_TypeError,
                         "Stream.from_handle() expects an int handle or an "
                         "object with __cuda_stream__(), got %.100s",
                         acc_type_name(obj));
        }
        return -1;
    }
    if (!(acc_backend_caps() & ACC_CAP_CUDA_STREAM_PROTOCOL)) {
        PyErr_Format(PyExc_TypeError,
                     "an object with __cuda_stream__ is a CUDA stream; the "
                     "current accelerator is %s", acc_device_type());
        Py_DECREF(method);
        return -1;
    }
    result = PyObject_CallNoArgs(method);
    Py_DECREF(method);
    if (result == NULL) {
        return -1;
    }
    if (!PyTuple_Check(result) || PyTuple_Size(result) != 2
        || !is_int(PyTuple_GetItem(result, 0))
        || !is_int(PyTuple_GetItem(result, 1))) {
        PyErr_Format(PyExc_TypeError,
                     "__cuda_stream__() must return a tuple (version, "
                     "handle) of two ints (not bools), got %R", result);
        goto done;
    }
    version = PyTuple_GetItem(result, 0);
    if (PyLong_AsLongAndOverflow(version, &overflow) != 0 || overflow) {
        PyErr_Format(PyExc_ValueError,
                     "unsupported __cuda_stream__ protocol version %R "
                     "(expected 0)", version);
        goto done;
    }
    value = PyLong_AsUnsignedLongLong(PyTuple_GetItem(result, 1));
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError,
                     "__cuda_stream__() returned the handle %R: a stream "
                     "handle must be a non-negative int that fits in a "
                     "pointer", PyTuple_GetItem(result, 1));
        goto done;
    }
    *handle = (uintptr_t)value;
    *owner = Py_NewRef(obj);
    rc = 0;
done:
    Py_DECREF(result);
    return rc;
}

/* The stream of the native handle in obj on device (None: current). */
static PyObject *
wrap_handle(PyTypeObject *cls, PyObject *obj, PyObject *device)
{
    acc_state *st = acc_state_from_type(cls);
    PyObject *owner, *self;
    acc_stream *s, *default_stream;
    uintptr_t handle;
    long long index;
    acc_error err;

    acc_ensure_probed();
    if (acc_require_usable(st) < 0
        || acc_resolve_device(st, device, 1, &index) < 0
        || acc_check_index(st, index) < 0
        || foreign_handle(st, obj, &handle, &owner) < 0) {
        return NULL;
    }
    if (acc_stream_for((int)index, 0, &default_stream, &err) != ACC_OK) {
        Py_XDECREF(owner);
        return acc_raise(st, &err);
    }
    if (default_stream->handle == handle) {
        Py_XDECREF(owner);
        return acc_stream_object(st, default_stream);
    }
    if (acc_stream_wrap((int)index, handle, &s, &err) != ACC_OK) {
        Py_XDECREF(owner);
        return acc_raise(st, &err);
    }
    self = acc_stream_object_new(cls, s, owner);
    acc_stream_decref(s);
    Py_XDECREF(owner);
    return self;
}

static PyObject *
stream_from_handle(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const names[] = {"handle", "device", NULL};
    static const acc_params params = {"Stream.from_handle()", names, 0, 1,
                                      2};
    PyObject *values[2] = {NULL, Py_None};

    if (acc_parse_tuple(args, kwargs, &params, values) < 0) {
        return NULL;
    }
    return wrap_handle(cls, values[0], values[1]);
}

static PyObject *
stream_reduce(StreamObject *self, PyObject *unused)
{
    (void)unused;
    PyErr_Format(PyExc_TypeError,
                 "cannot pickle %.100s objects: a stream belongs to this "
                 "process's driver", acc_type_name((PyObject *)self));
    return NULL;
}

/* Type ------------------------------------------------------------------- */

PyDoc_STRVAR(stream_doc,
"Stream(device=None, *, priority=0, stream_id=None, device_index=None,\n"
"       device_type=None)\n"
"--\n"
"\n"
"A new stream (an in-order queue of work) on device, by default the\n"
"current device.  priority 0 is normal; negative values are higher\n"
"priority, clamped to what the driver offers.  As torch.Stream.\n"
"\n"
"With stream_id, device_index and device_type instead (an existing stream's\n"
"attributes), the stream they name, equal to that stream: as\n"
"from_handle(stream_id, device_index), for this accelerator's\n"
"device_type only.");

PyDoc_STRVAR(query_doc,
"query($self, /)\n--\n\nTrue when all work queued on the stream is done.");
PyDoc_STRVAR(synchronize_doc,
"synchronize($self, /)\n--\n\nWait until all work queued on the stream is "
"done.");
PyDoc_STRVAR(synchronize_async_doc,
"synchronize_async($self, /)\n--\n\nA coroutine that completes when all "
"work queued on the stream so\nfar is done, without blocking the event "
"loop; the same as await stream.");
PyDoc_STRVAR(wait_event_doc,
"wait_event($self, event, /)\n--\n\nMake future work on this stream wait "
"for event.");
PyDoc_STRVAR(wait_stream_doc,
"wait_stream($self, stream, /)\n--\n\nMake future work on this stream "
"wait for the work queued on stream so far.");
PyDoc_STRVAR(record_event_doc,
"record_event($self, /, event=None)\n--\n\nRecord event (a new Event when "
"None) on this stream and return it.");
PyDoc_STRVAR(enter_doc,
"__enter__($self, /)\n--\n\nMake this stream and its device current.");
PyDoc_STRVAR(exit_doc,
"__exit__($self, /, *exc_info)\n--\n\nRestore the previous stream, then "
"the previous device.");
PyDoc_STRVAR(cuda_stream_doc,
"__cuda_stream__($self, /)\n--\n\nThe CUDA stream protocol: (0, handle).");
PyDoc_STRVAR(from_handle_doc,
"from_handle($type, /, handle, device=None)\n--\n\n"
"Wrap a stream made by another library, without owning it: an int\n"
"handle or an object with __cuda_stream__() (kept alive by the wrapper).\n"
"device is the stream's device (default: the current device).  The\n"
"handle of a device's default stream gives that default stream.");
PyDoc_STRVAR(reduce_doc,
"__reduce__($self, /)\n--\n\nStreams cannot be pickled.");

static PyMethodDef stream_methods[] = {
    {"query", (PyCFunction)stream_query, METH_NOARGS, query_doc},
    {"synchronize", (PyCFunction)stream_synchronize, METH_NOARGS,
     synchronize_doc},
    {"synchronize_async", (PyCFunction)stream_synchronize_async,
     METH_NOARGS, synchronize_async_doc},
    {"wait_event", (PyCFunction)stream_wait_event, METH_O, wait_event_doc},
    {"wait_stream", (PyCFunction)stream_wait_stream, METH_O,
     wait_stream_doc},
    {"record_event", (PyCFunction)(void (*)(void))stream_record_event,
     METH_FASTCALL | METH_KEYWORDS, record_event_doc},
    {"__enter__", (PyCFunction)stream_enter, METH_NOARGS, enter_doc},
    {"__exit__", (PyCFunction)(void (*)(void))stream_exit, METH_FASTCALL,
     exit_doc},
    {"__cuda_stream__", (PyCFunction)stream_cuda_stream, METH_NOARGS,
     cuda_stream_doc},
    {"from_handle", (PyCFunction)(void (*)(void))stream_from_handle,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, from_handle_doc},
    {"__reduce__", (PyCFunction)stream_reduce, METH_NOARGS, reduce_doc},
    {NULL},
};

static PyGetSetDef stream_getset[] = {
    {"device", (getter)stream_get_device, NULL,
     PyDoc_STR("The stream's device."), NULL},
    {"device_index", (getter)stream_get_device_index, NULL,
     PyDoc_STR("The stream's device index."), NULL},
    {"device_type", (getter)stream_get_device_type, NULL,
     PyDoc_STR("The device type as torch's c10 enum (CUDA 1, XPU 12)."),
     NULL},
    {"priority", (getter)stream_get_priority, NULL,
     PyDoc_STR("The driver's priority of the stream (lower is higher)."),
     NULL},
    {"handle", (getter)stream_get_handle, NULL,
     PyDoc_STR("The native handle as an int (CUstream, ze command list, "
               "cl_command_queue)."),
     NULL},
    {"cuda_stream", (getter)stream_torch_handle_name, NULL,
     PyDoc_STR("Not here: raises AttributeError naming Stream.handle."),
     "cuda_stream"},
    {"native_handle", (getter)stream_torch_handle_name, NULL,
     PyDoc_STR("Not here: raises AttributeError naming Stream.handle."),
     "native_handle"},
    {"stream_id", (getter)stream_get_handle, NULL,
     PyDoc_STR("torch's name for the stream: here its native handle, so "
               "Stream(stream_id=, device_index=, device_type=) gives "
               "this stream."),
     NULL},
    {NULL},
};

static PyMemberDef stream_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(StreamObject, weakreflist),
     READONLY, NULL},
    {NULL},
};

static PyType_Slot stream_slots[] = {
    {Py_tp_doc, (void *)stream_doc},
    {Py_tp_new, stream_new},
    {Py_tp_dealloc, stream_dealloc},
    {Py_tp_traverse, stream_traverse},
    {Py_tp_clear, stream_clear},
    {Py_tp_repr, stream_repr},
    {Py_tp_richcompare, stream_richcompare},
    {Py_tp_hash, stream_hash},
    {Py_tp_methods, stream_methods},
    {Py_tp_getset, stream_getset},
    {Py_tp_members, stream_members},
    {Py_am_await, (void *)stream_await},
    {0, NULL},
};

PyType_Spec acc_stream_spec = {
    .name = "accelerator.Stream",
    .basicsize = sizeof(StreamObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = stream_slots,
};
