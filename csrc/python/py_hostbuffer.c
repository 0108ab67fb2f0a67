/*
 * py_hostbuffer.c - accelerator.HostBuffer: page-locked host memory
 * (cuMemHostAlloc, zeMemAllocHost) with the writable buffer protocol, so
 * copies between it and a Buffer are asynchronous.  Freed (close, or the
 * last reference) once the copies queued with it have completed, without
 * waiting for the device.
 */
#include "pybuffer.h"

#include <stdio.h>

/* A distinct address for empty buffers: the buffer protocol wants one. */
static char empty_host_buffer[1];

static PyObject *
host_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const names[] = {"nbytes", "device", NULL};
    static const acc_params params = {"HostBuffer()", names, 0, 1, 2};
    acc_state *st = acc_state_from_type(cls);
    PyObject *values[2] = {NULL, Py_None};
    HostBufferObject *self;
    acc_host_block *h = NULL;
    long long index;
    size_t nbytes;
    acc_error err;
    acc_status status;

    if (acc_parse_tuple(args, kwargs, &params, values) < 0
        || acc_parse_nbytes(st, values[0], "HostBuffer()", &nbytes) < 0) {
        return NULL;
    }
    acc_ensure_probed();
    if (acc_require_usable(st) < 0
        || acc_resolve_device(st, values[1], 1, &index) < 0
        || acc_check_index(st, index) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_host_alloc((int)index, nbytes, &h, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    self = (HostBufferObject *)acc_alloc(cls);
    if (self == NULL) {
        Py_BEGIN_ALLOW_THREADS
        acc_host_free(h);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    self->h = h;
    self->ptr = nbytes > 0 ? acc_host_block_ptr(h) : empty_host_buffer;
    self->nbytes = (Py_ssize_t)nbytes; /* acc_host_alloc: <= PTRDIFF_MAX */
    self->device = (int)index;
    return (PyObject *)self;
}

static void
host_dealloc(HostBufferObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    self->busy = 0;
    acc_host_release(self);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Buffer protocol ------------------------------------------------------------ */

static int
host_getbuffer(HostBufferObject *self, Py_buffer *view, int flags)
{
    if (acc_host_check_open(self, "memoryview()") < 0) {
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, self->nbytes, 0,
                          flags) < 0) {
        return -1;
    }
    self->exports++;
    return 0;
}

static void
host_releasebuffer(HostBufferObject *self, Py_buffer *view)
{
    (void)view;
    self->exports--;
}

/* Attributes and methods ---------------------------------------------------- */

static PyObject *
host_get_nbytes(HostBufferObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->nbytes);
}

static PyObject *
host_get_device(HostBufferObject *self, void *closure)
{
    (void)closure;
    return acc_device_new(acc_state_from_type(Py_TYPE((PyObject *)self)),
                          acc_device_type(), self->device);
}

static PyObject *
host_get_ptr(HostBufferObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(self->nbytes > 0 ? self->ptr : NULL);
}

static PyObject *
host_get_closed(HostBufferObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->closed);
}

static Py_ssize_t
host_length(HostBufferObject *self)
{
    return self->nbytes;
}

static PyObject *
host_repr(HostBufferObject *self)
{
    char text[160];

    snprintf(text, sizeof(text),
             "accelerator.HostBuffer(nbytes=%zd, device='%s:%d'%s)",
             self->nbytes, acc_device_type() ? acc_device_type() : "?",
             self->device, self->closed ? ", closed" : "");
    return PyUnicode_FromString(text);
}

static PyObject *
host_close(HostBufferObject *self, PyObject *unused)
{
    (void)unused;
    if (self->closed) {
        Py_RETURN_NONE;
    }
    if (self->exports > 0) {
        PyErr_Format(PyExc_BufferError, "cannot close a HostBuffer while "
                     "%zd memoryview(s) or array(s) of it exist",
                     self->exports);
        return NULL;
    }
    self->closed = 1;
    acc_host_release(self);
    Py_RETURN_NONE;
}

static PyObject *
host_enter(HostBufferObject *self, PyObject *unused)
{
    (void)unused;
    if (acc_host_check_open(self, "with HostBuffer") < 0) {
        return NULL;
    }
    return Py_NewRef((PyObject *)self);
}

static PyObject *
host_exit(HostBufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    return host_close(self, NULL);
}

PyDoc_STRVAR(host_doc,
"HostBuffer(nbytes, device=None)\n--\n\n"
"nbytes bytes of page-locked host memory, which copies to and from a\n"
"Buffer move asynchronously.  It has the writable buffer protocol\n"
"(memoryview(h), numpy.frombuffer(h)) and exports to DLPack as kDLCPU\n"
"(numpy.from_dlpack(h)).  device picks the driver context used to\n"
"allocate it (default: the current device); every device can copy it.\n"
"Freed by close(), `with`, or the last reference, once the copies queued\n"
"with it have completed.");
PyDoc_STRVAR(host_close_doc,
"close($self, /)\n--\n\n"
"Free the memory once the copies queued with it have completed; never\n"
"waits.  BufferError while memoryviews of it exist.");
PyDoc_STRVAR(host_enter_doc,
"__enter__($self, /)\n--\n\nReturn the buffer itself, for `with`.");
PyDoc_STRVAR(host_exit_doc,
"__exit__($self, /, *exc_info)\n--\n\nclose() the buffer: freed once its work is done.");

static PyMethodDef host_methods[] = {
    {"close", (PyCFunction)host_close, METH_NOARGS, host_close_doc},
    {"__enter__", (PyCFunction)host_enter, METH_NOARGS, host_enter_doc},
    {"__exit__", (PyCFunction)(void (*)(void))host_exit, METH_FASTCALL,
     host_exit_doc},
    ACC_HOST_DLPACK_METHODS
    {NULL},
};

static PyGetSetDef host_getset[] = {
    {"nbytes", (getter)host_get_nbytes, NULL,
     PyDoc_STR("The size in bytes."), NULL},
    {"device", (getter)host_get_device, NULL,
     PyDoc_STR("The device whose driver context allocated it."), NULL},
    {"ptr", (getter)host_get_ptr, NULL,
     PyDoc_STR("The host address as an int (0 for an empty buffer)."),
     NULL},
    {"closed", (getter)host_get_closed, NULL,
     PyDoc_STR("True once close() was called."), NULL},
    {NULL},
};

static PyMemberDef host_members[] = {
    {"__weaklistoffset__", T_PYSSIZET,
     offsetof(HostBufferObject, weakreflist), READONLY, NULL},
    {NULL},
};

static PyType_Slot host_slots[] = {
    {Py_tp_doc, (void *)host_doc},
    {Py_tp_new, host_new},
    {Py_tp_dealloc, host_dealloc},
    {Py_tp_repr, host_repr},
    {Py_tp_methods, host_methods},
    {Py_tp_getset, host_getset},
    {Py_tp_members, host_members},
    {Py_mp_length, host_length},
    {Py_bf_getbuffer, host_getbuffer},
    {Py_bf_releasebuffer, host_releasebuffer},
    {0, NULL},
};

PyType_Spec acc_host_buffer_spec = {
    .name = "accelerator.HostBuffer",
    .basicsize = sizeof(HostBufferObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = host_slots,
};
