/*
 * py_ipc.c - Buffer and Event shared with other processes: ipc_handle(),
 * from_ipc_handle(), pickling, ipc_collect() (the core: ipc.c).
 *
 * A handle reaches Python as accelerator.IpcHandle (accelerator/_ipc.py):
 * the envelope's bytes and, where the driver's handle rests on a file
 * descriptor (Level Zero), that descriptor in this process.  Pickling a
 * Buffer or an interprocess Event is sharing it: the pickle holds the
 * bytes only, and the receiving process takes the descriptor from the
 * producer itself (pidfd_getfd) when one is needed.
 */
#include "pybuffer.h"

#include <stdlib.h>
#include <string.h>

/* accelerator._ipc.<name>(args...). */
static PyObject *
call_ipc(const char *name, PyObject *args)
{
    PyObject *module = PyImport_ImportModule("accelerator._ipc");
    PyObject *fn, *result = NULL;

    if (module == NULL) {
        return NULL;
    }
    fn = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    if (fn != NULL) {
        result = PyObject_CallObject(fn, args);
        Py_DECREF(fn);
    }
    return result;
}

/* IpcHandle(data, fd). */
static PyObject *
handle_object(const unsigned char *data, int fd)
{
    PyObject *args = Py_BuildValue("(y#N)", (const char *)data,
                                   (Py_ssize_t)ACC_IPC_ENVELOPE_SIZE,
                                   fd >= 0 ? PyLong_FromLong(fd)
                                           : Py_NewRef(Py_None));
    PyObject *result;

    if (args == NULL) {
        return NULL;
    }
    result = call_ipc("IpcHandle", args);
    Py_DECREF(args);
    return result;
}

/* The envelope's bytes from handle (an IpcHandle, or bytes-like) into
 * data; -1 with TypeError for anything else. */
static int
handle_bytes(PyObject *handle, const char *what,
             unsigned char data[ACC_IPC_ENVELOPE_SIZE], size_t *size)
{
    PyObject *bytes = NULL;
    Py_buffer view;
    int rc = -1;

    if (PyObject_HasAttrString(handle, "data")
        && !PyObject_CheckBuffer(handle)) {
        bytes = PyObject_GetAttrString(handle, "data");
        if (bytes == NULL) {
            return -1;
        }
        handle = bytes;
    }
    if (!PyObject_CheckBuffer(handle)) {
        PyErr_Format(PyExc_TypeError, "%s: handle must be an "
                     "accelerator.IpcHandle or its bytes, not %.100s", what,
                     acc_type_name(handle));
        Py_XDECREF(bytes);
        return -1;
    }
    if (PyObject_GetBuffer(handle, &view, PyBUF_SIMPLE) == 0) {
        /* A wrong size is the core's to word; keep what fits. */
        *size = (size_t)view.len;
        memcpy(data, view.buf, view.len < ACC_IPC_ENVELOPE_SIZE
                                   ? (size_t)view.len
                                   : ACC_IPC_ENVELOPE_SIZE);
        PyBuffer_Release(&view);
        rc = 0;
    }
    Py_XDECREF(bytes);
    return rc;
}

/* The fd argument: None (-1) or an open descriptor number. */
static int
fd_arg(PyObject *obj, const char *what, int *fd)
{
    long value;

    *fd = -1;
    if (obj == NULL || obj == Py_None) {
        return 0;
    }
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: fd must be a file descriptor "
                     "(an int) or None, not %.100s", what,
                     acc_type_name(obj));
        return -1;
    }
    value = PyLong_AsLong(obj);
    if ((value == -1 && PyErr_Occurred()) || value < 0 || value > 1 << 30) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: fd must be an open file "
                     "descriptor (a non-negative int), got %R", what, obj);
        return -1;
    }
    *fd = (int)value;
    return 0;
}

/* Buffer ---------------------------------------------------------------- */

static PyObject *imported_buffer(acc_state *st, acc_ipc_import *imp,
                                 int device, uintptr_t ptr, size_t nbytes);

/* The handle's envelope of a Buffer (or a view) in data; -1 on error. */
static int
buffer_envelope(BufferObject *self, const char *what,
                unsigned char data[ACC_IPC_ENVELOPE_SIZE])
{
    acc_state *st = acc_state_from_type(Py_TYPE((PyObject *)self));
    BufferObject *root = acc_buffer_root(self);
    acc_error err;
    acc_status status;

    if (acc_buffer_check_open(self, what) < 0) {
        return -1;
    }
    if (root->block == NULL) {
        PyErr_Format(PyExc_ValueError, "%s: only memory this module "
                     "allocated (a Buffer or a view of one) can be shared "
                     "with other processes; this Buffer wraps %s", what,
                     root->uses != NULL ? "another library's or process's "
                     "memory" : "no memory");
        return -1;
    }
    if (self->nbytes == 0) {
        PyErr_Format(PyExc_ValueError, "%s: an empty Buffer has no memory "
                     "to share", what);
        return -1;
    }
    acc_buffer_enter(root);
    Py_BEGIN_ALLOW_THREADS
    status = acc_ipc_export_memory(root->block, self->ptr, self->nbytes,
                                   data, &err);
    Py_END_ALLOW_THREADS
    acc_buffer_leave(root);
    if (status != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

PyObject *
acc_buffer_ipc_handle(PyObject *self, PyObject *unused)
{
    unsigned char data[ACC_IPC_ENVELOPE_SIZE];
    acc_ipc_description d;
    acc_error err;

    (void)unused;
    if (buffer_envelope((BufferObject *)self, "Buffer.ipc_handle()",
                        data) < 0) {
        return NULL;
    }
    (void)acc_ipc_describe(data, sizeof(data), &d, &err);
    return handle_object(data, d.driver_fd);
}

static void
import_destructor(PyObject *capsule)
{
    acc_ipc_import *imp = PyCapsule_GetPointer(capsule, "accelerator.ipc");

    if (imp != NULL) {
        Py_BEGIN_ALLOW_THREADS
        acc_ipc_import_close(imp);
        Py_END_ALLOW_THREADS
    }
}

PyObject *
acc_buffer_from_ipc_handle(PyObject *cls, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"handle", "fd", NULL};
    static const acc_params params = {"Buffer.from_ipc_handle()", names, 0,
                                      1, 1};
    acc_state *st = acc_state_from_type((PyTypeObject *)cls);
    PyObject *values[2] = {NULL, Py_None};
    unsigned char data[ACC_IPC_ENVELOPE_SIZE];
    acc_ipc_import *imp = NULL;
    acc_error err;
    acc_status status;
    uintptr_t ptr;
    size_t size, nbytes;
    int fd, device;

    if (acc_parse_args(args, nargs, kwnames, &params, values) < 0
        || handle_bytes(values[0], "Buffer.from_ipc_handle()", data,
                        &size) < 0
        || fd_arg(values[1], "Buffer.from_ipc_handle()", &fd) < 0) {
        return NULL;
    }
    acc_ensure_probed();
    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_ipc_open_memory(data, size, fd, &device, &ptr, &nbytes,
                                 &imp, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    return imported_buffer(st, imp, device, ptr, nbytes);
}

/* The Buffer of an opened import (steals imp). */
static PyObject *
imported_buffer(acc_state *st, acc_ipc_import *imp, int device,
                uintptr_t ptr, size_t nbytes)
{
    PyObject *capsule, *stream_obj, *result;
    acc_stream *s;
    acc_uses *uses;
    acc_error err;

    capsule = PyCapsule_New(imp, "accelerator.ipc", import_destructor);
    if (capsule == NULL) {
        Py_BEGIN_ALLOW_THREADS
        acc_ipc_import_close(imp);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    if (acc_stream_for(device, 1, &s, &err) != ACC_OK) {
        Py_DECREF(capsule);
        return acc_raise(st, &err);
    }
    stream_obj = acc_stream_object(st, s);
    result = stream_obj == NULL ? NULL
             : acc_buffer_new_raw(st, device, ptr, nbytes, stream_obj, NULL,
                                  NULL);
    Py_XDECREF(stream_obj);
    uses = result == NULL ? NULL : malloc(sizeof(*uses));
    if (uses == NULL) {
        if (result != NULL) {
            PyErr_NoMemory();
        }
        Py_XDECREF(result);
        Py_DECREF(capsule);
        return NULL;
    }
    /* Books of its own: the mapping closes once the work queued on it
     * here has completed, waited for when it is let go (the producer
     * learns at once that this process is done). */
    acc_uses_init(uses);
    ((BufferObject *)result)->uses = uses;
    ((BufferObject *)result)->keep = capsule;
    ((BufferObject *)result)->release_now = 1;
    return result;
}

PyObject *
acc_buffer_from_driver_ipc_handle(PyObject *cls, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"handle", "nbytes", "offset",
                                        "device", "fd", NULL};
    static const acc_params params = {"Buffer.from_driver_ipc_handle()",
                                      names, 0, 2, 3};
    acc_state *st = acc_state_from_type((PyTypeObject *)cls);
    PyObject *values[5] = {NULL, NULL, NULL, Py_None, Py_None};
    unsigned char data[ACC_IPC_ENVELOPE_SIZE];
    acc_ipc_import *imp = NULL;
    acc_error err;
    acc_status status;
    uintptr_t ptr;
    size_t size, nbytes, offset = 0;
    long long index;
    int fd;

    if (acc_parse_args(args, nargs, kwnames, &params, values) < 0
        || handle_bytes(values[0], "Buffer.from_driver_ipc_handle()", data,
                        &size) < 0
        || fd_arg(values[4], "Buffer.from_driver_ipc_handle()", &fd) < 0) {
        return NULL;
    }
    if (!PyLong_Check(values[1]) || PyBool_Check(values[1])
        || (values[2] != NULL
            && (!PyLong_Check(values[2]) || PyBool_Check(values[2])))) {
        PyErr_SetString(PyExc_TypeError, "Buffer.from_driver_ipc_handle(): "
                        "nbytes and offset must be ints");
        return NULL;
    }
    nbytes = PyLong_AsSize_t(values[1]);
    if (nbytes == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "Buffer.from_driver_ipc_handle(): "
                     "nbytes must be a size in bytes, got %R", values[1]);
        return NULL;
    }
    if (values[2] != NULL) {
        offset = PyLong_AsSize_t(values[2]);
        if (offset == (size_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "Buffer.from_driver_ipc_handle()"
                         ": offset must be a size in bytes, got %R",
                         values[2]);
            return NULL;
        }
    }
    acc_ensure_probed();
    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    if (values[3] == Py_None) {
        index = acc_current_device();
    }
    else if (acc_resolve_device(st, values[3], 1, &index) < 0
             || acc_check_index(st, index) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_ipc_open_driver_memory((int)index, data, size, offset,
                                        nbytes, fd, &ptr, &imp, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    return imported_buffer(st, imp, (int)index, ptr, nbytes);
}

PyObject *
acc_buffer_reduce(PyObject *self, PyObject *unused)
{
    unsigned char data[ACC_IPC_ENVELOPE_SIZE];
    PyObject *args, *result;

    (void)unused;
    /* The receiver reads what the work queued so far wrote. */
    args = PyTuple_Pack(1, self);
    if (args == NULL) {
        return NULL;
    }
    result = call_ipc("_before_share", args);
    Py_DECREF(args);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    if (buffer_envelope((BufferObject *)self, "pickling a Buffer",
                        data) < 0) {
        return NULL;
    }
    args = Py_BuildValue("(sy#)", "_rebuild_buffer", (const char *)data,
                         (Py_ssize_t)sizeof(data));
    if (args == NULL) {
        return NULL;
    }
    result = call_ipc("_reduction", args);
    Py_DECREF(args);
    return result;
}

/* Event ------------------------------------------------------------------ */

PyObject *
acc_event_ipc_handle(PyObject *self, PyObject *unused)
{
    acc_state *st = acc_state_from_type(Py_TYPE(self));
    unsigned char data[ACC_IPC_ENVELOPE_SIZE];
    acc_ipc_description d;
    acc_error err;
    acc_status status;

    (void)unused;
    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_ipc_export_event(acc_event_of(self), data, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    (void)acc_ipc_describe(data, sizeof(data), &d, &err);
    return handle_object(data, d.driver_fd);
}

PyObject *
acc_event_from_ipc_handle(PyObject *cls, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"handle", "fd", "blocking", NULL};
    static const acc_params params = {"Event.from_ipc_handle()", names, 0,
                                      1, 1};
    acc_state *st = acc_state_from_type((PyTypeObject *)cls);
    PyObject *values[3] = {NULL, Py_None, Py_False};
    unsigned char data[ACC_IPC_ENVELOPE_SIZE];
    PyObject *result;
    acc_error err;
    acc_status status;
    size_t size;
    int fd;

    if (acc_parse_args(args, nargs, kwnames, &params, values) < 0
        || handle_bytes(values[0], "Event.from_ipc_handle()", data,
                        &size) < 0
        || fd_arg(values[1], "Event.from_ipc_handle()", &fd) < 0) {
        return NULL;
    }
    if (!PyBool_Check(values[2])) {
        PyErr_Format(PyExc_TypeError, "Event.from_ipc_handle(): blocking "
                     "must be a bool, not %.100s", acc_type_name(values[2]));
        return NULL;
    }
    acc_ensure_probed();
    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    result = (PyObject *)acc_alloc((PyTypeObject *)cls);
    if (result == NULL) {
        return NULL;
    }
    acc_event_init(acc_event_of(result),
                   values[2] == Py_True ? ACC_EVENT_BLOCKING : 0);
    Py_BEGIN_ALLOW_THREADS
    status = acc_ipc_open_event(data, size, fd, acc_event_of(result), &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        Py_DECREF(result);
        return acc_raise(st, &err);
    }
    return result;
}

PyObject *
acc_event_reduce(PyObject *self, PyObject *unused)
{
    acc_event *e = acc_event_of(self);
    PyObject *handle, *data, *args, *result;

    (void)unused;
    if (!(e->flags & ACC_EVENT_INTERPROCESS)) {
        PyErr_Format(PyExc_TypeError,
                     "cannot pickle %.100s objects made without "
                     "interprocess=True: such an event belongs to this "
                     "process's driver", acc_type_name(self));
        return NULL;
    }
    handle = acc_event_ipc_handle(self, NULL);
    if (handle == NULL) {
        return NULL;
    }
    data = PyObject_GetAttrString(handle, "data");
    Py_DECREF(handle);
    if (data == NULL) {
        return NULL;
    }
    args = Py_BuildValue("(sO)", "_rebuild_event", data);
    Py_DECREF(data);
    if (args == NULL) {
        return NULL;
    }
    result = call_ipc("_reduction", args);
    Py_DECREF(args);
    return result;
}

/* Module functions ------------------------------------------------------- */

PyObject *
acc_ipc_collect_py(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    acc_ensure_probed();
    Py_BEGIN_ALLOW_THREADS
    acc_ipc_collect();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyObject *
acc_ipc_describe_py(PyObject *module, PyObject *handle)
{
    acc_state *st = acc_module_state(module);
    unsigned char data[ACC_IPC_ENVELOPE_SIZE];
    acc_ipc_description d;
    acc_error err;
    size_t size;
    char uuid[33];

    if (handle_bytes(handle, "IpcHandle", data, &size) < 0) {
        return NULL;
    }
    if (acc_ipc_describe(data, size, &d, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    for (int i = 0; i < 16; i++) {
        snprintf(uuid + 2 * i, 3, "%02x", d.uuid[i]);
    }
    return Py_BuildValue("{s:s,s:s,s:s,s:i,s:K,s:K,s:K,s:y#}",
                         "kind", d.event ? "event" : "memory",
                         "backend", d.backend, "device_uuid", uuid,
                         "pid", d.pid, "allocation_size", d.alloc_size,
                         "offset", d.offset, "nbytes", d.nbytes,
                         "driver_handle", (const char *)d.driver,
                         (Py_ssize_t)sizeof(d.driver));
}

PyObject *
acc_ipc_held_py(PyObject *module, PyObject *unused)
{
    long long blocks, bytes, events, imports;

    (void)module;
    (void)unused;
    acc_ipc_held(&blocks, &bytes, &events, &imports);
    return Py_BuildValue("{s:L,s:L,s:L,s:L}", "blocks", blocks, "bytes",
                         bytes, "events", events, "imports", imports);
}
