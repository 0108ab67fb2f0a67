/*
 * py_dlpack.c - DLPack both ways: Buffer.__dlpack__ (a 1-D uint8 tensor
 * on the backend's DLPack device), HostBuffer.__dlpack__ (kDLCPU, so
 * numpy.from_dlpack works) and accelerator.from_dlpack (another library's
 * contiguous device array as a Buffer that does not own it).
 *
 * The ABI comes from our own declarations (dlpack_abi.h).  Versioned
 * capsules (DLPack 1.x) when the consumer passes max_version >= (1, 0),
 * the legacy capsule otherwise.  An export keeps the exporting object
 * alive until the consumer calls the deleter; while any is alive the
 * memory refuses close() (BufferError), as a HostBuffer does with
 * memoryviews.
 */
#include "pybuffer.h"
#include "dlpack_abi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Device ids -------------------------------------------------------------- */

/* DLPack's device_id of device: the driver's ordinal, the number other
 * libraries in the process (torch, CuPy, cuda.core) use, not this
 * module's index under ACCELERATOR_VISIBLE_DEVICES. */
static int
acc_dlpack_ordinal(int device)
{
    const int *order;
    int count;

    if (acc_visible_devices(&order, &count) && device >= 0
        && device < count) {
        return order[device];
    }
    return device;
}

/* This module's index of a DLPack device_id (a driver ordinal); -1 with
 * BufferError when ACCELERATOR_VISIBLE_DEVICES hides it, or with
 * DeviceIndexError when there is no such device. */
static int
dlpack_index(acc_state *st, long long ordinal, const char *what)
{
    const int *order;
    int count;

    if (acc_visible_devices(&order, &count)) {
        for (int i = 0; i < count; i++) {
            if (order[i] == ordinal) {
                return i;
            }
        }
        PyErr_Format(PyExc_BufferError, "%s: DLPack device %lld is hidden "
                     "by ACCELERATOR_VISIBLE_DEVICES (DLPack's device_id is "
                     "the driver's ordinal)", what, ordinal);
        return -1;
    }
    if (acc_check_index(st, ordinal) < 0) {
        return -1;
    }
    return (int)ordinal;
}

/* Export ------------------------------------------------------------------- */

typedef struct dl_export {
    acc_dl_managed_tensor_versioned versioned;
    acc_dl_managed_tensor legacy;
    int64_t shape[1], strides[1];
    PyObject *owner;        /* the exported object (a reference) */
    Py_ssize_t *exports;    /* its export counter (lives with owner) */
    int in_subinterpreter;  /* made outside the main interpreter */
} dl_export;

/* The export's end, with the GIL held by this thread. */
static void
dl_export_release(dl_export *x)
{
    (*x->exports)--;
    Py_DECREF(x->owner);
    free(x);
}

/* The deleter a consumer calls, on any thread, with or without the GIL.
 * PyGILState serves the main interpreter only: in a subinterpreter the
 * consumer holds the GIL through a thread state PyGILState does not know
 * (numpy dropping an array there), and Ensure would wait for ever for the
 * GIL this thread has; a subinterpreter's consumer must call it with the
 * GIL held, which CPython's own rules leave as the only way there. */
static void
dl_export_free(dl_export *x)
{
    PyGILState_STATE gil;

    if (x->in_subinterpreter) {
        dl_export_release(x);
        return;
    }
    gil = PyGILState_Ensure();
    dl_export_release(x);
    PyGILState_Release(gil);
}

static void
dl_delete_versioned(acc_dl_managed_tensor_versioned *self)
{
    dl_export_free(self->manager_ctx);
}

static void
dl_delete_legacy(acc_dl_managed_tensor *self)
{
    dl_export_free(self->manager_ctx);
}

/* Run a tensor's deleter where this thread holds the GIL (a capsule's or
 * a holder's destructor).  Ours skips PyGILState_Ensure: in a
 * subinterpreter the GIL is held through a thread state PyGILState does
 * not know, and Ensure would wait for ever for the GIL this thread has. */
static void
dl_delete_held_versioned(acc_dl_managed_tensor_versioned *m)
{
    if (m->deleter == dl_delete_versioned) {
        dl_export_release(m->manager_ctx);
    }
    else if (m->deleter != NULL) {
        m->deleter(m);
    }
}

static void
dl_delete_held_legacy(acc_dl_managed_tensor *m)
{
    if (m->deleter == dl_delete_legacy) {
        dl_export_release(m->manager_ctx);
    }
    else if (m->deleter != NULL) {
        m->deleter(m);
    }
}

/* A capsule nobody consumed frees its tensor. */
static void
dl_capsule_destructor(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, ACC_DLPACK_VERSIONED_CAPSULE)) {
        dl_delete_held_versioned(PyCapsule_GetPointer(
            capsule, ACC_DLPACK_VERSIONED_CAPSULE));
    }
    else if (PyCapsule_IsValid(capsule, ACC_DLPACK_CAPSULE)) {
        dl_delete_held_legacy(PyCapsule_GetPointer(capsule,
                                                   ACC_DLPACK_CAPSULE));
    }
    /* Consumed (renamed): the consumer owns the tensor now.  IsValid sets
     * no error, so an exception in flight survives this destructor. */
}

static PyObject *
dl_export_new(PyObject *owner, Py_ssize_t *exports, uintptr_t data,
              size_t nbytes, int device_type, int device_id, int versioned,
              int copied)
{
    dl_export *x = calloc(1, sizeof(*x));
    acc_dl_tensor *t;
    PyObject *capsule;

    if (x == NULL) {
        return PyErr_NoMemory();
    }
    t = versioned ? &x->versioned.dl_tensor : &x->legacy.dl_tensor;
    t->data = (void *)data;
    t->device.device_type = device_type;
    t->device.device_id = device_id;
    t->ndim = 1;
    t->dtype.code = ACC_kDLUInt;
    t->dtype.bits = 8;
    t->dtype.lanes = 1;
    x->shape[0] = (int64_t)nbytes;
    x->strides[0] = 1;
    t->shape = x->shape;
    t->strides = x->strides;
    x->owner = Py_NewRef(owner);
    x->exports = exports;
    x->in_subinterpreter = PyInterpreterState_GetID(
                               PyInterpreterState_Get()) != 0;
    if (versioned) {
        x->versioned.version.major = ACC_DLPACK_MAJOR_VERSION;
        x->versioned.version.minor = ACC_DLPACK_MINOR_VERSION;
        x->versioned.manager_ctx = x;
        x->versioned.deleter = dl_delete_versioned;
        x->versioned.flags = copied ? ACC_DLPACK_FLAG_BITMASK_IS_COPIED : 0;
        capsule = PyCapsule_New(&x->versioned, ACC_DLPACK_VERSIONED_CAPSULE,
                                dl_capsule_destructor);
    }
    else {
        x->legacy.manager_ctx = x;
        x->legacy.deleter = dl_delete_legacy;
        capsule = PyCapsule_New(&x->legacy, ACC_DLPACK_CAPSULE,
                                dl_capsule_destructor);
    }
    if (capsule == NULL) {
        Py_DECREF(owner);
        free(x);
        return NULL;
    }
    (*exports)++;
    return capsule;
}

/* An int argument (not a bool; a numpy integer too) that fits in 64
 * bits: a stream handle, a device or a version.  -1 with TypeError, or
 * ValueError beyond 64 bits (a clamped value would name a stream or a
 * device nobody passed). */
static int
int_arg(PyObject *obj, const char *what, long long *value)
{
    int overflow;

    if (!acc_is_index(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", what,
                     acc_type_name(obj));
        return -1;
    }
    *value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (*value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        PyErr_Format(PyExc_ValueError, "%s must be an int in [-2**63, "
                     "2**63), got %S", what, obj);
        return -1;
    }
    return 0;
}

/* A pair of ints (max_version, dl_device, __dlpack_device__). */
static int
int_pair(PyObject *obj, const char *what, long long *a, long long *b)
{
    if (!PyTuple_Check(obj) || PyTuple_Size(obj) != 2) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of two ints, got "
                     "%.100s", what, acc_type_name(obj));
        return -1;
    }
    return int_arg(PyTuple_GetItem(obj, 0), what, a) < 0
                   || int_arg(PyTuple_GetItem(obj, 1), what, b) < 0
               ? -1 : 0;
}

/* The arguments every __dlpack__ takes. */
typedef struct dl_args {
    PyObject *stream;
    int versioned;
    int copy;               /* -1 None, 0 False, 1 True */
} dl_args;

static int
parse_dlpack_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  const char *what, int device_type, int device_id,
                  dl_args *out)
{
    static const char *const names[] = {"stream", "max_version",
                                        "dl_device", "copy", NULL};
    const acc_params params = {what, names, 0, 0, 0};
    PyObject *values[4] = {Py_None, Py_None, Py_None, Py_None};
    PyObject *max_version, *dl_device, *copy;
    long long a, b;

    if (acc_parse_args(args, nargs, kwnames, &params, values) < 0) {
        return -1;
    }
    out->stream = values[0];
    max_version = values[1];
    dl_device = values[2];
    copy = values[3];
    out->versioned = 0;
    if (max_version != Py_None) {
        if (int_pair(max_version, "max_version", &a, &b) < 0) {
            return -1;
        }
        out->versioned = a >= 1;
    }
    if (dl_device != Py_None) {
        if (int_pair(dl_device, "dl_device", &a, &b) < 0) {
            return -1;
        }
        if (a != device_type || b != device_id) {
            PyErr_Format(PyExc_BufferError, "%s: cannot export to DLPack "
                         "device (%lld, %lld); the memory is on (%d, %d) "
                         "(copy it with copy_to() first)", what, a, b,
                         device_type, device_id);
            return -1;
        }
    }
    if (copy != Py_None && !PyBool_Check(copy)) {
        /* With its module: numpy's bool is named "bool" too, and "must
         * be a bool, got bool" would puzzle. */
        PyObject *module = PyObject_GetAttrString((PyObject *)Py_TYPE(copy),
                                                  "__module__");

        if (module == NULL || !PyUnicode_Check(module)
            || PyUnicode_CompareWithASCIIString(module, "builtins") == 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: copy must be None or a "
                         "bool, got %.100s", what, acc_type_name(copy));
        }
        else {
            PyErr_Format(PyExc_TypeError, "%s: copy must be None or a "
                         "bool, got %.100U.%.100s", what, module,
                         acc_type_name(copy));
        }
        Py_XDECREF(module);
        return -1;
    }
    out->copy = copy == Py_None ? -1 : copy == Py_True;
    return 0;
}

/* Make the memory's work so far visible to the consumer's stream, as the
 * array API standard says for __dlpack__(stream=...), and record that
 * stream as a use in the books of root (the exported memory; NULL for
 * none). */
static int
sync_consumer(acc_state *st, int device, PyObject *stream_arg,
              const char *what, BufferObject *root)
{
    acc_stream *producer, *consumer = NULL;
    long long value;
    acc_error err;
    acc_status status;
    int cuda = (acc_backend_caps() & ACC_CAP_CUDA_STREAM_PROTOCOL) != 0;
    int rocm = (acc_backend_caps() & ACC_CAP_ROCM_STREAM_PROTOCOL) != 0;
    int wrapped = 0;

    if (acc_current_stream(device, &producer, &err) != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    if (stream_arg == Py_None) {
        /* CUDA: the legacy default stream (1); ROCm: the default stream
         * (0).  Elsewhere the consumer has no stream we could order on:
         * wait for the work here (0). */
        value = cuda ? 1 : 0;
    }
    else if (int_arg(stream_arg, "__dlpack__(stream=...)", &value) < 0) {
        return -1;
    }
    if (value == -1) {
        return 0; /* the consumer synchronizes itself */
    }
    if (rocm && (value == 1 || value == 2 || value < -1)) {
        PyErr_Format(PyExc_ValueError, "%s: stream %lld is not a valid "
                     "consumer stream on ROCm (DLPack: 0 or None the "
                     "default stream, -1 no synchronization, or a "
                     "hipStream_t; 1 and 2 are not streams)", what, value);
        return -1;
    }
    if (!rocm && stream_arg != Py_None && (value == 0 || value < -1)) {
        PyErr_Format(PyExc_ValueError, "%s: stream %lld is not a valid "
                     "consumer stream (the array API standard disallows 0; "
                     "-1: no synchronization, %s)", what, value,
                     cuda ? "1: the legacy default stream, 2: the "
                            "per-thread default stream, or a stream handle"
                          : "or a native stream handle");
        return -1;
    }
    if (value == 0 && !rocm) {
        Py_BEGIN_ALLOW_THREADS
        status = acc_stream_synchronize(producer, &err);
        Py_END_ALLOW_THREADS
        if (status != ACC_OK) {
            acc_raise(st, &err);
            return -1;
        }
        return 0;
    }
    if ((cuda && value == 1) || (rocm && value == 0)) {
        status = acc_default_stream(device, &consumer, &err);
    }
    else {
        status = acc_stream_wrap(device, (uintptr_t)value, &consumer, &err);
        wrapped = status == ACC_OK;
    }
    if (status == ACC_OK) {
        Py_BEGIN_ALLOW_THREADS
        if (consumer->handle != producer->handle) {
            status = acc_stream_wait_stream(consumer, producer, &err);
        }
        if (status == ACC_OK && root != NULL) {
            status = acc_buffer_record(root, consumer, &err);
        }
        Py_END_ALLOW_THREADS
    }
    if (wrapped) {
        acc_stream_decref(consumer);
    }
    if (status != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

const char acc_dlpack_doc[] =
"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None,\n"
"           copy=None)\n--\n\n"
"Export the memory as a DLPack capsule: a 1-D uint8 tensor of nbytes on\n"
"the backend's DLPack device (kDLCUDA, kDLOneAPI).  A versioned capsule\n"
"when max_version >= (1, 0), else the legacy one.  stream is the\n"
"consumer's stream, as the array API standard says (CUDA: None or 1 the\n"
"legacy default stream, 2 per-thread, -1 none, else a handle; ROCm: None\n"
"or 0 the default stream, 1 and 2 refused, -1 none, else a handle): it waits\n"
"for the work queued so far on the current stream.  copy=True exports a\n"
"copy.  While an export is alive, close() raises BufferError.";

PyObject *
acc_buffer_dlpack(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames)
{
    BufferObject *self = (BufferObject *)obj;
    acc_state *st = acc_state_from_type(Py_TYPE(obj));
    BufferObject *root = self->root != NULL ? self->root : self;
    int type = acc_dlpack_device_type();
    PyObject *copy, *capsule, *done;
    dl_args a;

    if (parse_dlpack_args(args, nargs, kwnames, "Buffer.__dlpack__()", type,
                          acc_dlpack_ordinal(self->device), &a) < 0
        || acc_buffer_check_open(self, "Buffer.__dlpack__()") < 0) {
        return NULL;
    }
    if (a.copy != 1) {
        int rc;

        /* In flight: a close() meanwhile (the GIL is released while the
         * streams are ordered) defers the release, and the export is
         * refused rather than handed out over memory about to go. */
        acc_buffer_enter(root);
        rc = sync_consumer(st, self->device, a.stream,
                           "Buffer.__dlpack__()", root);
        if (rc == 0
            && acc_buffer_check_open(self, "Buffer.__dlpack__()") < 0) {
            rc = -1;
        }
        capsule = rc < 0 ? NULL
                         : dl_export_new(obj, &root->exports, self->ptr,
                                         self->nbytes, type,
                                         acc_dlpack_ordinal(self->device),
                                         a.versioned, 0);
        acc_buffer_leave(root);
        return capsule;
    }
    /* A copy on the same device, on the current stream, which the
     * consumer then waits for. */
    copy = PyObject_CallFunction((PyObject *)st->buffer_type, "ni",
                                 (Py_ssize_t)self->nbytes, self->device);
    if (copy == NULL) {
        return NULL;
    }
    done = PyObject_CallMethod(copy, "copy_from", "O", obj);
    if (done == NULL
        || sync_consumer(st, self->device, a.stream, "Buffer.__dlpack__()",
                         (BufferObject *)copy) < 0) {
        Py_XDECREF(done);
        Py_DECREF(copy);
        return NULL;
    }
    Py_DECREF(done);
    capsule = dl_export_new(copy, &((BufferObject *)copy)->exports,
                            ((BufferObject *)copy)->ptr, self->nbytes, type,
                            acc_dlpack_ordinal(self->device), a.versioned,
                            1);
    Py_DECREF(copy);
    return capsule;
}

const char acc_dlpack_device_doc[] =
"__dlpack_device__($self, /)\n--\n\n"
"(device type, device id) in DLPack's codes: kDLCUDA (2) on CUDA,\n"
"kDLOneAPI (14) on Level Zero, kDLOpenCL (4) on OpenCL; the id is the\n"
"driver's ordinal (ACCELERATOR_VISIBLE_DEVICES does not renumber it).";

PyObject *
acc_buffer_dlpack_device(PyObject *obj, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(ii)", acc_dlpack_device_type(),
                         acc_dlpack_ordinal(((BufferObject *)obj)->device));
}

const char acc_host_dlpack_doc[] =
"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None,\n"
"           copy=None)\n--\n\n"
"Export the memory as a DLPack capsule on kDLCPU (numpy.from_dlpack(h)):\n"
"a 1-D uint8 tensor, writable.  Waits first for the copies queued with\n"
"the buffer (stream must be None, or -1 to skip that).  copy=True exports\n"
"a copy.";

PyObject *
acc_host_dlpack(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    HostBufferObject *self = (HostBufferObject *)obj;
    acc_state *st = acc_state_from_type(Py_TYPE(obj));
    PyObject *copy, *capsule;
    acc_error err;
    acc_status status = ACC_OK;
    long long value = 0;
    dl_args a;

    if (parse_dlpack_args(args, nargs, kwnames, "HostBuffer.__dlpack__()",
                          ACC_kDLCPU, 0, &a) < 0
        || acc_host_check_open(self, "HostBuffer.__dlpack__()") < 0) {
        return NULL;
    }
    if (a.stream != Py_None
        && (int_arg(a.stream, "__dlpack__(stream=...)", &value) < 0
            || value != -1)) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "HostBuffer.__dlpack__(): host "
                         "memory has no stream: stream must be None or -1, "
                         "got %lld", value);
        }
        return NULL;
    }
    /* In flight while the GIL is released: a close() meanwhile defers
     * the release, and the export (or copy) is refused. */
    acc_host_enter(self);
    if (a.stream == Py_None) {
        acc_host_block *h = self->h;

        Py_BEGIN_ALLOW_THREADS
        status = acc_host_block_synchronize(h, &err);
        Py_END_ALLOW_THREADS
    }
    if (status != ACC_OK) {
        acc_host_leave(self);
        return acc_raise(st, &err);
    }
    if (acc_host_check_open(self, "HostBuffer.__dlpack__()") < 0) {
        acc_host_leave(self);
        return NULL;
    }
    if (a.copy != 1) {
        capsule = dl_export_new(obj, &self->exports, (uintptr_t)self->ptr,
                                (size_t)self->nbytes, ACC_kDLCPU, 0,
                                a.versioned, 0);
        acc_host_leave(self);
        return capsule;
    }
    copy = PyObject_CallFunction((PyObject *)st->host_buffer_type, "ni",
                                 self->nbytes, self->device);
    if (copy == NULL) {
        acc_host_leave(self);
        return NULL;
    }
    memcpy(((HostBufferObject *)copy)->ptr, self->ptr, (size_t)self->nbytes);
    acc_host_leave(self);
    capsule = dl_export_new(copy, &((HostBufferObject *)copy)->exports,
                            (uintptr_t)((HostBufferObject *)copy)->ptr,
                            (size_t)self->nbytes, ACC_kDLCPU, 0,
                            a.versioned, 1);
    Py_DECREF(copy);
    return capsule;
}

const char acc_host_dlpack_device_doc[] =
"__dlpack_device__($self, /)\n--\n\n"
"(kDLCPU, 0): page-locked memory is host memory to DLPack consumers.";

PyObject *
acc_host_dlpack_device(PyObject *obj, PyObject *unused)
{
    (void)obj;
    (void)unused;
    return Py_BuildValue("(ii)", ACC_kDLCPU, 0);
}

/* Import -------------------------------------------------------------------- */

#define HOLDER_NAME "accelerator.dlpack_holder"

/* Holds a consumed managed tensor; its deleter runs when the holder goes
 * (the context says which kind: versioned or not). */
static void
holder_destructor(PyObject *holder)
{
    void *m;
    int versioned;

    if (!PyCapsule_IsValid(holder, HOLDER_NAME)) {
        return;
    }
    m = PyCapsule_GetPointer(holder, HOLDER_NAME);
    versioned = PyCapsule_GetContext(holder) != NULL;
    if (versioned) {
        dl_delete_held_versioned(m);
    }
    else {
        dl_delete_held_legacy(m);
    }
}

/* Byte size of a C-contiguous tensor; -1 with BufferError. */
static int
tensor_nbytes(const acc_dl_tensor *t, size_t *out)
{
    unsigned long long count = 1, item, expected = 1;
    int empty = 0;

    /* 0 bits is no type: it would make any shape an empty tensor. */
    if (t->dtype.bits == 0 || t->dtype.lanes == 0
        || (t->dtype.bits * t->dtype.lanes) % 8 != 0) {
        PyErr_Format(PyExc_BufferError, "from_dlpack(): element type "
                     "(code %d, %d bits, %d lanes) is not a whole number of "
                     "bytes, at least one", t->dtype.code, t->dtype.bits,
                     t->dtype.lanes);
        return -1;
    }
    item = (unsigned long long)t->dtype.bits * t->dtype.lanes / 8;
    if (t->ndim < 0 || (t->ndim > 0 && t->shape == NULL)) {
        PyErr_SetString(PyExc_BufferError, "from_dlpack(): the tensor has "
                        "no valid shape");
        return -1;
    }
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) {
            PyErr_SetString(PyExc_BufferError, "from_dlpack(): negative "
                            "dimension in the tensor's shape");
            return -1;
        }
        if (t->shape[i] == 0) {
            empty = 1;  /* no element: strides mean nothing (DLPack) */
        }
    }
    for (int i = t->ndim - 1; i >= 0 && !empty; i--) {
        if (t->strides != NULL && t->shape[i] != 1
            && (unsigned long long)t->strides[i] != expected) {
            PyErr_SetString(PyExc_BufferError, "from_dlpack(): the tensor "
                            "is not C-contiguous; expected contiguous "
                            "memory");
            return -1;
        }
        if (t->shape[i] != 0
            && expected > ULLONG_MAX / (unsigned long long)t->shape[i]) {
            PyErr_SetString(PyExc_BufferError, "from_dlpack(): the tensor "
                            "is too large");
            return -1;
        }
        expected *= (unsigned long long)t->shape[i];
    }
    count = empty ? 0 : expected;
    if (item != 0 && count > SIZE_MAX / item) {
        PyErr_SetString(PyExc_BufferError, "from_dlpack(): the tensor is "
                        "too large");
        return -1;
    }
    *out = (size_t)(count * item);
    return 0;
}

/* The capsule of a producer: obj.__dlpack__(stream=..., max_version=...). */
static PyObject *
producer_capsule(acc_state *st, PyObject *obj, int *device)
{
    PyObject *dev, *method, *kwargs, *capsule, *args;
    long long type, index;
    acc_stream *s;
    acc_error err;
    unsigned caps = acc_backend_caps();
    int cuda = (caps & ACC_CAP_CUDA_STREAM_PROTOCOL) != 0;
    int protocol = cuda || (caps & ACC_CAP_ROCM_STREAM_PROTOCOL) != 0;

    dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (dev == NULL) {
        return NULL;
    }
    if (int_pair(dev, "__dlpack_device__()", &type, &index) < 0) {
        Py_DECREF(dev);
        return NULL;
    }
    Py_DECREF(dev);
    if (type != acc_dlpack_device_type()) {
        PyErr_Format(PyExc_BufferError, "from_dlpack() wraps device memory "
                     "of the %s backend (DLPack device type %d); the "
                     "%.100s is on DLPack device type %lld (copy host "
                     "memory with Buffer.copy_from())", acc_device_type(),
                     acc_dlpack_device_type(), acc_type_name(obj), type);
        return NULL;
    }
    *device = (int)index;       /* the ordinal, as the capsule has it */
    index = dlpack_index(st, index, "from_dlpack()");
    if (index < 0) {
        return NULL;
    }
    if (acc_current_stream((int)index, &s, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    /* Our current stream is where the memory will be used: where the
     * backend speaks a DLPack stream protocol its handle goes to the
     * producer (torch does so on CUDA and ROCm), a null handle as the
     * protocol's default stream (CUDA: 1, the legacy default stream;
     * ROCm: 0).  Elsewhere no stream value names ours: None. */
    kwargs = Py_BuildValue("{s:O, s:(ii)}", "stream", Py_None,
                           "max_version", ACC_DLPACK_MAJOR_VERSION,
                           ACC_DLPACK_MINOR_VERSION);
    if (kwargs != NULL && protocol) {
        PyObject *handle = PyLong_FromUnsignedLongLong(
            s->handle != 0 ? (unsigned long long)s->handle : cuda ? 1 : 0);

        if (handle == NULL || PyDict_SetItemString(kwargs, "stream", handle)
                                  < 0) {
            Py_CLEAR(kwargs);
        }
        Py_XDECREF(handle);
    }
    method = kwargs ? PyObject_GetAttrString(obj, "__dlpack__") : NULL;
    args = method ? PyTuple_New(0) : NULL;
    capsule = args ? PyObject_Call(method, args, kwargs) : NULL;
    if (capsule == NULL && args != NULL
        && PyErr_ExceptionMatches(PyExc_TypeError)) {
        /* A producer older than DLPack 1.0 takes no max_version. */
        PyErr_Clear();
        if (PyDict_DelItemString(kwargs, "max_version") == 0) {
            capsule = PyObject_Call(method, args, kwargs);
        }
    }
    Py_XDECREF(args);
    Py_XDECREF(method);
    Py_XDECREF(kwargs);
    return capsule;
}

/* The Buffer of this module that exported the tensor, or NULL. */
static BufferObject *
exported_buffer(acc_state *st, acc_dl_managed_tensor_versioned *v,
                acc_dl_managed_tensor *l)
{
    dl_export *x = NULL;

    if (v != NULL && v->deleter == dl_delete_versioned) {
        x = v->manager_ctx;
    }
    else if (l != NULL && l->deleter == dl_delete_legacy) {
        x = l->manager_ctx;
    }
    if (x == NULL || !acc_buffer_check(st, x->owner)) {
        return NULL;
    }
    return (BufferObject *)x->owner;
}

PyObject *
acc_from_dlpack(PyObject *module, PyObject *obj)
{
    acc_state *st = acc_module_state(module);
    PyObject *capsule, *holder = NULL, *stream_obj, *result = NULL;
    acc_dl_managed_tensor_versioned *v = NULL;
    acc_dl_managed_tensor *l = NULL;
    acc_dl_tensor *t;
    acc_pointer_info info;
    acc_stream *s;
    acc_error err;
    acc_status status;
    uintptr_t ptr;
    size_t nbytes;
    BufferObject *own;
    int device = -1;

    acc_ensure_probed();
    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    if (PyCapsule_CheckExact(obj)) {
        capsule = Py_NewRef(obj);
    }
    else {
        /* HasAttr would turn a MemoryError into "no attribute". */
        PyObject *method = PyObject_GetAttrString(obj, "__dlpack__");

        if (method == NULL) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "from_dlpack() expects an "
                             "object with __dlpack__ (torch, CuPy, dpctl "
                             "arrays ...) or a DLPack capsule, got %.100s",
                             acc_type_name(obj));
            }
            return NULL;
        }
        Py_DECREF(method);
        capsule = producer_capsule(st, obj, &device);
        if (capsule == NULL) {
            return NULL;
        }
    }
    if (PyCapsule_IsValid(capsule, ACC_DLPACK_VERSIONED_CAPSULE)) {
        v = PyCapsule_GetPointer(capsule, ACC_DLPACK_VERSIONED_CAPSULE);
        t = &v->dl_tensor;
        if (v->version.major != ACC_DLPACK_MAJOR_VERSION) {
            PyErr_Format(PyExc_BufferError, "from_dlpack(): DLPack %u.%u is "
                         "not supported (expected major version %d)",
                         v->version.major, v->version.minor,
                         ACC_DLPACK_MAJOR_VERSION);
            goto done;
        }
        if (v->flags & ACC_DLPACK_FLAG_BITMASK_READ_ONLY) {
            PyErr_SetString(PyExc_BufferError, "from_dlpack(): the tensor is "
                            "read-only; a Buffer is writable");
            goto done;
        }
    }
    else if (PyCapsule_IsValid(capsule, ACC_DLPACK_CAPSULE)) {
        l = PyCapsule_GetPointer(capsule, ACC_DLPACK_CAPSULE);
        t = &l->dl_tensor;
    }
    else {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "from_dlpack(): not an unconsumed "
                        "DLPack capsule ('dltensor' or "
                        "'dltensor_versioned'); a capsule can be consumed "
                        "once");
        goto done;
    }
    if (t->device.device_type != acc_dlpack_device_type()) {
        PyErr_Format(PyExc_BufferError, "from_dlpack() wraps device memory "
                     "of the %s backend (DLPack device type %d), got device "
                     "type %d", acc_device_type(), acc_dlpack_device_type(),
                     (int)t->device.device_type);
        goto done;
    }
    if (device >= 0 && t->device.device_id != device) {
        PyErr_Format(PyExc_BufferError, "from_dlpack(): the capsule is "
                     "on device %d, __dlpack_device__() said %d",
                     (int)t->device.device_id, device);
        goto done;
    }
    device = dlpack_index(st, t->device.device_id, "from_dlpack()");
    if (device < 0) {
        goto done;
    }
    if (tensor_nbytes(t, &nbytes) < 0) {
        goto done;
    }
    if (t->byte_offset > UINTPTR_MAX - (uintptr_t)t->data
        || (uintptr_t)t->data + t->byte_offset > UINTPTR_MAX - nbytes) {
        PyErr_Format(PyExc_ValueError, "from_dlpack(): the tensor's "
                     "byte_offset %llu and %zu bytes from data %p run past "
                     "the end of the address space; expected an offset "
                     "and a size inside the tensor's allocation",
                     (unsigned long long)t->byte_offset, nbytes, t->data);
        goto done;
    }
    ptr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    if (nbytes > 0) {
        Py_BEGIN_ALLOW_THREADS
        status = acc_pointer_info_of(ptr, &info, &err);
        Py_END_ALLOW_THREADS
        if (status != ACC_OK) {
            acc_raise(st, &err);
            goto done;
        }
        if ((info.kind != ACC_POINTER_DEVICE
             && info.kind != ACC_POINTER_SHARED)
            || info.device != device) {
            /* PyErr_Format knows no %#llx. */
            char address[24];

            snprintf(address, sizeof(address), "%#llx",
                     (unsigned long long)ptr);
            PyErr_Format(PyExc_BufferError, "from_dlpack(): %s is not "
                         "device memory of %s device %d that the driver "
                         "knows", address, acc_device_type(), device);
            goto done;
        }
        /* Every byte, not only the first: a shape or offset beyond the
         * allocation would let fills and copies write outside it. */
        Py_BEGIN_ALLOW_THREADS
        status = acc_check_foreign_range(device, ptr, nbytes,
                                         "from_dlpack()", &err);
        Py_END_ALLOW_THREADS
        if (status != ACC_OK) {
            acc_raise(st, &err);
            goto done;
        }
    }
    if (acc_current_stream(device, &s, &err) != ACC_OK) {
        acc_raise(st, &err);
        goto done;
    }
    /* No destructor until the tensor is ours: on failure before that the
     * producer's capsule still frees it. */
    holder = PyCapsule_New(v != NULL ? (void *)v : (void *)l, HOLDER_NAME,
                           NULL);
    if (holder == NULL
        || (v != NULL && PyCapsule_SetContext(holder, (void *)1) < 0)) {
        goto done;
    }
    /* Consumed: the producer's capsule no longer frees the tensor. */
    if (PyCapsule_SetName(capsule, v != NULL
                                       ? ACC_DLPACK_VERSIONED_CAPSULE_USED
                                       : ACC_DLPACK_CAPSULE_USED) < 0
        || PyCapsule_SetDestructor(holder, holder_destructor) < 0) {
        goto done;
    }
    own = exported_buffer(st, v, l);
    stream_obj = acc_stream_object(st, s);
    if (stream_obj != NULL) {
        /* A Buffer of this module: the wrapper shares its books. */
        result = acc_buffer_new_raw(st, device, ptr, nbytes, stream_obj,
                                    own != NULL ? acc_buffer_root(own) : NULL,
                                    obj);
        Py_DECREF(stream_obj);
    }
    if (result != NULL && own == NULL) {
        /* Foreign memory: books of its own, so that the producer's tensor
         * goes only once the work queued on it here has completed. */
        acc_uses *uses = malloc(sizeof(*uses));

        if (uses == NULL) {
            Py_CLEAR(result);
            PyErr_NoMemory();
        }
        else {
            acc_uses_init(uses);
            ((BufferObject *)result)->uses = uses;
        }
    }
    if (result != NULL) {
        ((BufferObject *)result)->keep = Py_NewRef(holder);
    }
done:
    Py_XDECREF(holder);
    Py_DECREF(capsule);
    return result;
}

const char acc_from_dlpack_doc[] =
"from_dlpack($module, obj, /)\n--\n\n"
"Wrap the device memory of another library's C-contiguous array (torch,\n"
"CuPy, dpctl; any object with __dlpack__, or a DLPack capsule) as a\n"
"Buffer of its bytes on the same device.  The Buffer does not own the\n"
"memory: it keeps obj alive, and copies can target it.  Every byte must\n"
"lie in the driver allocation holding the first (ValueError otherwise).\n"
"The producer is asked to make its work visible to the current stream of\n"
"that device (its handle where the backend speaks a DLPack stream\n"
"protocol: CUDA, ROCm).";
