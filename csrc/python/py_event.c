/*
 * py_event.c - accelerator.Event: a marker in a stream's work, for
 * ordering and timing, as torch.Event.  The driver event is created on
 * first record, on the recording stream's device.
 */
#include "pybuffer.h"

#include <stdio.h>
#include <string.h>

static int
parse_flag(PyObject *obj, const char *name, int *value)
{
    if (obj == NULL) {
        *value = 0;
        return 0;
    }
    if (!PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "Event() argument %s must be a bool, "
                     "not %.100s", name, acc_type_name(obj));
        return -1;
    }
    *value = obj == Py_True;
    return 0;
}

static PyObject *
event_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const names[] = {"device", "enable_timing",
                                        "blocking", "interprocess", NULL};
    static const acc_params params = {"Event()", names, 0, 0, 1};
    acc_state *st = acc_state_from_type(cls);
    PyObject *values[4] = {Py_None, NULL, NULL, NULL};
    PyObject *device;
    int timing, blocking, ipc;
    long long index;
    EventObject *self;

    if (acc_parse_tuple(args, kwargs, &params, values) < 0
        || parse_flag(values[1], "enable_timing", &timing) < 0
        || parse_flag(values[2], "blocking", &blocking) < 0
        || parse_flag(values[3], "interprocess", &ipc) < 0) {
        return NULL;
    }
    device = values[0];
    if (ipc && timing) {
        /* The drivers' rule (CUDA, HIP): a shared event keeps no time. */
        PyErr_SetString(PyExc_ValueError,
                        "Event(): an interprocess event cannot measure time "
                        "(enable_timing=True with interprocess=True)");
        return NULL;
    }
    acc_ensure_probed();
    /* As torch, the device says the type only: the event takes its
     * device from the stream of its first record.  Checked all the same. */
    if (acc_require_usable(st) < 0
        || (device != Py_None
            && (acc_resolve_device(st, device, 1, &index) < 0
                || acc_check_index(st, index) < 0))) {
        return NULL;
    }
    self = (EventObject *)acc_alloc(cls);
    if (self == NULL) {
        return NULL;
    }
    acc_event_init(&self->e, (timing ? ACC_EVENT_TIMING : 0)
                             | (blocking ? ACC_EVENT_BLOCKING : 0)
                             | (ipc ? ACC_EVENT_INTERPROCESS : 0));
    return (PyObject *)self;
}

static void
event_dealloc(EventObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    /* The driver lets an event be destroyed while work still refers to
     * it; destroying does not block. */
    acc_event_release(&self->e);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

static acc_state *
event_state(EventObject *self)
{
    return acc_state_from_type(Py_TYPE((PyObject *)self));
}

/* The stream argument of record()/wait(): None means the current stream
 * of the current device.  Borrowed core stream in *out. */
static int
stream_arg(acc_state *st, PyObject *stream, const char *what,
           acc_stream **out)
{
    if (stream != NULL && stream != Py_None) {
        return acc_parse_stream(st, stream, -1, what, out);
    }
    if (acc_require_usable(st) < 0) {
        return -1;
    }
    return acc_parse_stream(st, NULL, acc_current_device(), what, out);
}

/* The parameter of record() and wait(). */
static const char *const stream_names[] = {"stream", NULL};

static PyObject *
event_record(EventObject *self, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    static const acc_params params = {"Event.record()", stream_names, 0, 0,
                                      1};
    acc_state *st = event_state(self);
    PyObject *stream = NULL;
    acc_stream *s;
    acc_error err;
    acc_status status;

    if (acc_parse_args(args, nargs, kwnames, &params, &stream) < 0
        || stream_arg(st, stream, params.what, &s) < 0) {
        return NULL;
    }
    if (!acc_event_made(&self->e)) {
        /* The first record creates the driver event, or waits for the
         * thread creating it: may be slow. */
        Py_BEGIN_ALLOW_THREADS
        status = acc_event_record(&self->e, s, &err);
        Py_END_ALLOW_THREADS
    }
    else {
        status = acc_event_record(&self->e, s, &err);
    }
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
event_wait(EventObject *self, PyObject *const *args, Py_ssize_t nargs,
           PyObject *kwnames)
{
    static const acc_params params = {"Event.wait()", stream_names, 0, 0,
                                      1};
    acc_state *st = event_state(self);
    PyObject *stream = NULL;
    acc_stream *s;
    acc_error err;

    if (acc_parse_args(args, nargs, kwnames, &params, &stream) < 0
        || stream_arg(st, stream, params.what, &s) < 0) {
        return NULL;
    }
    if (acc_stream_wait_event(s, &self->e, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
event_query(EventObject *self, PyObject *unused)
{
    acc_error err;
    acc_status status = acc_event_query(&self->e, &err);

    (void)unused;
    if (status == ACC_OK) {
        Py_RETURN_TRUE;
    }
    if (status == ACC_NOT_READY) {
        Py_RETURN_FALSE;
    }
    return acc_raise(event_state(self), &err);
}

static PyObject *
event_synchronize(EventObject *self, PyObject *unused)
{
    acc_error err;
    acc_status status;

    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    status = acc_event_synchronize(&self->e, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(event_state(self), &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
event_elapsed_time(EventObject *self, PyObject *end)
{
    acc_state *st = event_state(self);
    acc_error err;
    float ms = 0;

    if (!PyObject_TypeCheck(end, st->event_type)) {
        PyErr_Format(PyExc_TypeError, "Event.elapsed_time() expected an "
                     "accelerator.Event, got %s", acc_type_name_in(st, end));
        return NULL;
    }
    if (acc_event_elapsed_ms(&self->e, acc_event_of(end), &ms, &err)
        != ACC_OK) {
        return acc_raise(st, &err);
    }
    return PyFloat_FromDouble(ms);
}

static PyObject *
event_await(PyObject *self)
{
    return acc_call_aio("event_await", self);
}

static PyObject *
event_wait_async(PyObject *self, PyObject *unused)
{
    (void)unused;
    return acc_call_aio("wait_event", self);
}

/* Attributes ------------------------------------------------------------- */

static PyObject *
event_get_device(EventObject *self, void *closure)
{
    (void)closure;
    return acc_device_new(event_state(self), acc_device_type(),
                          acc_event_made(&self->e) ? self->e.device : -1);
}

static PyObject *
event_get_device_index(EventObject *self, void *closure)
{
    (void)closure;
    if (!acc_event_made(&self->e)) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLong(self->e.device);
}

static PyObject *
event_get_device_type(EventObject *self, void *closure)
{
    (void)self;
    (void)closure;
    return PyLong_FromLong(acc_torch_device_type());
}

static PyObject *
event_get_handle(EventObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(
        acc_event_made(&self->e) ? self->e.handle : 0);
}

static PyObject *
event_get_enable_timing(EventObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->e.flags & ACC_EVENT_TIMING);
}

static PyObject *
event_get_blocking(EventObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->e.flags & ACC_EVENT_BLOCKING);
}

static PyObject *
event_repr(EventObject *self)
{
    char device[48], text[200];
    int made = acc_event_made(&self->e);

    /* No device index until the first record. */
    if (!made) {
        snprintf(device, sizeof(device), "%s", acc_device_type());
    }
    else {
        snprintf(device, sizeof(device), "%s:%d", acc_device_type(),
                 self->e.device);
    }
    snprintf(text, sizeof(text),
             "accelerator.Event(device='%s', enable_timing=%s, "
             "blocking=%s, handle=%#llx)", device,
             self->e.flags & ACC_EVENT_TIMING ? "True" : "False",
             self->e.flags & ACC_EVENT_BLOCKING ? "True" : "False",
             (unsigned long long)(made ? self->e.handle : 0));
    return PyUnicode_FromString(text);
}

/* Type ------------------------------------------------------------------- */

PyDoc_STRVAR(event_doc,
"Event(device=None, *, enable_timing=False, blocking=False, "
"interprocess=False)\n"
"--\n"
"\n"
"A marker in a stream's work, for ordering and timing, as torch.Event.\n"
"The driver event is made on first record(), on that stream's device;\n"
"device, as in torch, only has to be of this accelerator.\n"
"blocking=True makes synchronize() block the thread instead of spinning.\n"
"interprocess=True is not supported (NotImplementedError).");

PyDoc_STRVAR(record_doc,
"record($self, /, stream=None)\n--\n\nRecord the event on stream (default: "
"the current stream).");
PyDoc_STRVAR(wait_doc,
"wait($self, /, stream=None)\n--\n\nMake future work on stream (default: "
"the current stream) wait for this event.");
PyDoc_STRVAR(equery_doc,
"query($self, /)\n--\n\nTrue when the recorded work is done (or the event "
"was never recorded).");
PyDoc_STRVAR(esync_doc,
"synchronize($self, /)\n--\n\nWait until the recorded work is done.");
PyDoc_STRVAR(elapsed_doc,
"elapsed_time($self, end, /)\n--\n\nMilliseconds from this event to end; "
"both timing events, recorded and completed.");
PyDoc_STRVAR(wait_async_doc,
"wait_async($self, /)\n--\n\nA coroutine that completes when the recorded "
"work is done,\nwithout blocking the event loop; the same as await event.");

static PyMethodDef event_methods[] = {
    {"record", (PyCFunction)(void (*)(void))event_record,
     METH_FASTCALL | METH_KEYWORDS, record_doc},
    {"wait", (PyCFunction)(void (*)(void))event_wait,
     METH_FASTCALL | METH_KEYWORDS, wait_doc},
    {"query", (PyCFunction)event_query, METH_NOARGS, equery_doc},
    {"synchronize", (PyCFunction)event_synchronize, METH_NOARGS, esync_doc},
    {"elapsed_time", (PyCFunction)event_elapsed_time, METH_O, elapsed_doc},
    {"wait_async", (PyCFunction)event_wait_async, METH_NOARGS,
     wait_async_doc},
    ACC_EVENT_IPC_METHODS
    {NULL},
};

static PyGetSetDef event_getset[] = {
    {"device", (getter)event_get_device, NULL,
     PyDoc_STR("The device it was recorded on (index None before)."), NULL},
    {"device_index", (getter)event_get_device_index, NULL,
     PyDoc_STR("The device index, or None before the first record."), NULL},
    {"device_type", (getter)event_get_device_type, NULL,
     PyDoc_STR("The device type as torch's c10 enum (CUDA 1, OPENCL 4, "
               "XPU 12)."), NULL},
    {"handle", (getter)event_get_handle, NULL,
     PyDoc_STR("The native event as an int; 0 before the first record."),
     NULL},
    {"event_id", (getter)event_get_handle, NULL,
     PyDoc_STR("Alias of handle, as torch.Event.event_id."), NULL},
    {"enable_timing", (getter)event_get_enable_timing, NULL,
     PyDoc_STR("Whether the event can measure elapsed time."), NULL},
    {"blocking", (getter)event_get_blocking, NULL,
     PyDoc_STR("Whether synchronize() blocks rather than spins."), NULL},
    {NULL},
};

static PyMemberDef event_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(EventObject, weakreflist),
     READONLY, NULL},
    {NULL},
};

static PyType_Slot event_slots[] = {
    {Py_tp_doc, (void *)event_doc},
    {Py_tp_new, event_new},
    {Py_tp_dealloc, event_dealloc},
    {Py_tp_repr, event_repr},
    {Py_tp_methods, event_methods},
    {Py_tp_getset, event_getset},
    {Py_tp_members, event_members},
    {Py_am_await, (void *)event_await},
    {0, NULL},
};

PyType_Spec acc_event_spec = {
    .name = "accelerator.Event",
    .basicsize = sizeof(EventObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = event_slots,
};
