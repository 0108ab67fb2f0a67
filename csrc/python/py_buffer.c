/*
 * py_buffer.c - accelerator.Buffer (device memory ordered on a stream):
 * allocation, copies (with Buffers, HostBuffers and buffer-protocol
 * objects), fills, views, record_stream and close.  DLPack lives in
 * py_dlpack.c, the books of the memory in py_lifetime.c.
 *
 * A Buffer owns an acc_block (allocator.c), or is a view of a byte range
 * of another Buffer (it keeps the owner, its root, alive), or wraps
 * foreign memory (from_dlpack: it keeps the producer alive; a wrapper of
 * this module's own Buffer has that Buffer as its root).  The lifetime
 * model (docs/memory.rst): a call that uses the memory without the GIL
 * holds it open on the root (acc_buffer_enter/leave), and records its
 * stream in the books of the memory (the block's, or a foreign wrapper's own)
 * before it lets go, so a close() meanwhile, on any thread, defers the
 * release until then and never frees memory that queued work uses.
 */
#include "pybuffer.h"

#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static acc_state *
buffer_state(PyObject *self)
{
    return acc_state_from_type(Py_TYPE(self));
}

/* The Buffer around a block; steals the block (freed on failure). */
static PyObject *
buffer_of_block(acc_state *st, PyTypeObject *cls, acc_block *block,
                int device, size_t nbytes, acc_stream *s)
{
    PyObject *stream_obj = acc_stream_object(st, s);
    BufferObject *self;

    self = stream_obj == NULL ? NULL : (BufferObject *)acc_alloc(cls);
    if (self == NULL) {
        Py_XDECREF(stream_obj);
        if (acc_free_try(block) != ACC_OK) {
            Py_BEGIN_ALLOW_THREADS
            acc_free(block);
            Py_END_ALLOW_THREADS
        }
        return NULL;
    }
    self->block = block;
    self->device = device;
    self->ptr = acc_block_ptr(block);
    self->nbytes = nbytes;
    self->stream = stream_obj;
    return (PyObject *)self;
}

/* Buffer(n) served from the allocator's cache on the current device and
 * stream, with no driver call and none of the generic parsing: the
 * common call in a loop.  NULL without an error: take the generic path
 * (which validates everything and reports what is wrong). */
static PyObject *
buffer_new_cached(PyTypeObject *cls, PyObject *args)
{
    PyObject *arg;
    Py_ssize_t nbytes;
    acc_block *block;
    acc_stream *s;
    acc_error err;
    int device;

    if (PyTuple_Size(args) != 1 || !acc_probed()) {
        return NULL;
    }
    arg = PyTuple_GetItem(args, 0);
    if (!PyLong_CheckExact(arg)) {
        return NULL;
    }
    nbytes = PyLong_AsSsize_t(arg);
    if (nbytes <= 0) {
        PyErr_Clear();
        return NULL;
    }
    device = acc_current_device();
    if (acc_current_stream(device, &s, &err) != ACC_OK
        || acc_check_allocation_capture(s, &err) != ACC_OK
        || acc_malloc_try(device, (size_t)nbytes, s, &block) != ACC_OK) {
        return NULL;
    }
    return buffer_of_block(acc_state_from_type(cls), cls, block, device,
                           (size_t)nbytes, s);
}

static PyObject *
buffer_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const names[] = {"nbytes", "device", "stream", NULL};
    static const acc_params params = {"Buffer()", names, 0, 1, 2};
    acc_state *st = acc_state_from_type(cls);
    PyObject *values[3] = {NULL, Py_None, Py_None};
    PyObject *self;
    acc_stream *s;
    acc_block *block = NULL;
    long long index;
    size_t nbytes;
    acc_error err;
    acc_status status;

    if (kwargs == NULL) {
        self = buffer_new_cached(cls, args);
        if (self != NULL || PyErr_Occurred()) {
            return self;
        }
    }
    if (acc_parse_tuple(args, kwargs, &params, values) < 0
        || acc_parse_nbytes(st, values[0], "Buffer()", &nbytes) < 0) {
        return NULL;
    }
    acc_ensure_probed();
    if (acc_require_usable(st) < 0
        || acc_resolve_device(st, values[1], 1, &index) < 0
        || acc_check_index(st, index) < 0
        || acc_parse_stream(st, values[2], (int)index, "Buffer()", &s) < 0) {
        return NULL;
    }
    if (acc_check_allocation_capture(s, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    /* A cached block needs no driver call: take it with the GIL held. */
    status = acc_malloc_try((int)index, nbytes, s, &block);
    if (status != ACC_OK) {
        Py_BEGIN_ALLOW_THREADS
        status = acc_malloc((int)index, nbytes, s, &block, &err);
        Py_END_ALLOW_THREADS
    }
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    return buffer_of_block(st, cls, block, (int)index, nbytes, s);
}

static int
buffer_traverse(BufferObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->stream);
    Py_VISIT((PyObject *)self->root);
    Py_VISIT(self->owner);
    Py_VISIT(self->keep);
    return 0;
}

static int
buffer_clear(BufferObject *self)
{
    Py_CLEAR(self->stream);
    Py_CLEAR(self->root);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->keep);
    return 0;
}

static void
buffer_dealloc(BufferObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    /* Never waits for the device: the allocator defers the free behind
     * the work queued on the block's streams. */
    self->busy = 0;
    acc_buffer_release(self);
    buffer_clear(self);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Attributes --------------------------------------------------------------- */

static PyObject *
buffer_get_nbytes(BufferObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->nbytes);
}

static PyObject *
buffer_get_device(BufferObject *self, void *closure)
{
    (void)closure;
    return acc_device_new(buffer_state((PyObject *)self), acc_device_type(),
                          self->device);
}

static PyObject *
buffer_get_ptr(BufferObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->ptr);
}

static PyObject *
buffer_get_stream(BufferObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->stream);
}

static PyObject *
buffer_get_closed(BufferObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->closed
                           || (self->root != NULL && self->root->closed));
}

static PyObject *
buffer_get_owner(BufferObject *self, void *closure)
{
    (void)closure;
    if (self->owner != NULL) {
        return Py_NewRef(self->owner);
    }
    return Py_NewRef(self->root != NULL ? (PyObject *)self->root : Py_None);
}

static PyObject *
buffer_repr(BufferObject *self)
{
    char text[200];

    snprintf(text, sizeof(text),
             "accelerator.Buffer(nbytes=%zu, device='%s:%d', ptr=%#llx%s%s)",
             self->nbytes, acc_device_type() ? acc_device_type() : "?",
             self->device, (unsigned long long)self->ptr,
             self->owner != NULL || self->keep != NULL
                 ? ", foreign" : self->root != NULL ? ", view" : "",
             self->closed || (self->root && self->root->closed)
                 ? ", closed" : "");
    return PyUnicode_FromString(text);
}

static Py_ssize_t
buffer_length(BufferObject *self)
{
    return (Py_ssize_t)self->nbytes;
}

/* Copies and fills ---------------------------------------------------------- */

/* Note that s queued work on the memory of root (record_stream, close
 * with a stream); GIL held, root not closed. */
static int
buffer_note_stream(acc_state *st, BufferObject *root, acc_stream *s)
{
    acc_error err;
    acc_status status;

    acc_buffer_enter(root);
    Py_BEGIN_ALLOW_THREADS
    status = acc_buffer_record(root, s, &err);
    Py_END_ALLOW_THREADS
    acc_buffer_leave(root);
    if (status != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}


/* The core words the size check (acc_copy_check_sizes). */
static int
check_size(acc_state *st, size_t have, size_t other, const char *what,
           const char *side)
{
    acc_error err;

    if (acc_copy_check_sizes(what, have, other, side, &err) != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

/* Queue c on s, with the memory of the Buffers (and HostBuffer)
 * involved held open, and s recorded in their books before they let go;
 * GIL released around the driver. */
static int
run_copy(acc_state *st, acc_stream *s, const acc_copy *c, BufferObject *a,
         BufferObject *b, HostBufferObject *host)
{
    acc_uses *host_uses = host != NULL ? acc_host_block_uses(host->h) : NULL;
    acc_error err;
    acc_status status;

    acc_buffer_enter(a);
    if (b != NULL) {
        acc_buffer_enter(b);
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_memcpy(s, c, &err);
    if (status == ACC_OK && c->nbytes > 0) {   /* empty: nothing used */
        status = acc_buffer_record(a, s, &err);
    }
    if (status == ACC_OK && b != NULL && c->nbytes > 0) {
        status = acc_buffer_record(b, s, &err);
    }
    if (status == ACC_OK && host_uses != NULL && c->nbytes > 0) {
        status = acc_uses_record(host_uses, s, &err);
    }
    Py_END_ALLOW_THREADS
    if (b != NULL) {
        acc_buffer_leave(b);
    }
    acc_buffer_leave(a);
    if (status != ACC_OK) {
        acc_raise(st, &err);
        return -1;
    }
    return 0;
}

/* copy_from (to_device) and copy_to: self and another Buffer. */
static int
copy_buffers(acc_state *st, BufferObject *self, BufferObject *other,
             int to_self, acc_stream *s, const char *what)
{
    BufferObject *dst = to_self ? self : other, *src = to_self ? other : self;
    acc_copy c = {
        .kind = ACC_COPY_D2D,
        .dst = dst->ptr, .src = src->ptr,
        .dst_device = dst->device, .src_device = src->device,
        .nbytes = self->nbytes,
    };

    if (acc_buffer_check_open(other, what) < 0
        || check_size(st, self->nbytes, other->nbytes, what, "other Buffer") < 0
        || run_copy(st, s, &c, acc_buffer_root(self), acc_buffer_root(other),
                    NULL) < 0) {
        return -1;
    }
    return 0;
}

static int
copy_host_buffer(acc_state *st, BufferObject *self, HostBufferObject *host,
                 int to_self, acc_stream *s, const char *what)
{
    acc_copy c = {
        .kind = to_self ? ACC_COPY_H2D : ACC_COPY_D2H,
        .dst = to_self ? self->ptr : (uintptr_t)acc_host_ptr(host),
        .src = to_self ? (uintptr_t)acc_host_ptr(host) : self->ptr,
        .dst_device = to_self ? self->device : -1,
        .src_device = to_self ? -1 : self->device,
        .nbytes = self->nbytes,
    };
    int rc;

    if (acc_host_check_open(host, what) < 0
        || check_size(st, self->nbytes, (size_t)host->nbytes, what,
                      "HostBuffer") < 0) {
        return -1;
    }
    acc_host_enter(host);
    rc = run_copy(st, s, &c, acc_buffer_root(self), NULL, host);
    acc_host_leave(host);
    return rc;
}

/* Any C-contiguous object with the buffer protocol (pageable memory: the
 * call returns when the host side may be reused). */
static int
copy_object(acc_state *st, BufferObject *self, PyObject *obj, int to_self,
            acc_stream *s, const char *what)
{
    int flags = PyBUF_STRIDES | (to_self ? 0 : PyBUF_WRITABLE);
    Py_buffer view;
    acc_copy c;
    int rc;

    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "%s expected a Buffer, a HostBuffer "
                     "or an object with the buffer protocol (bytes, "
                     "bytearray, memoryview, numpy array), got %.200s",
                     what, acc_type_name_in(st, obj));
        return -1;
    }
    if (PyObject_GetBuffer(obj, &view, flags) < 0) {
        if (!to_self && PyErr_ExceptionMatches(PyExc_BufferError)
            && PyObject_GetBuffer(obj, &view, PyBUF_STRIDES) == 0) {
            PyBuffer_Release(&view);
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: the destination %.100s is "
                         "read-only; expected a writable buffer", what,
                         acc_type_name(obj));
        }
        else if (PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: the %.100s is not "
                         "C-contiguous; expected contiguous memory", what,
                         acc_type_name(obj));
        }
        return -1;
    }
    if (!PyBuffer_IsContiguous(&view, 'C')) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "%s: the %.100s is not C-contiguous; "
                     "expected contiguous memory", what, acc_type_name(obj));
        return -1;
    }
    if (check_size(st, self->nbytes, (size_t)view.len, what,
                   to_self ? "source" : "destination") < 0) {
        PyBuffer_Release(&view);
        return -1;
    }
    c = (acc_copy){
        .kind = to_self ? ACC_COPY_H2D : ACC_COPY_D2H,
        .flags = ACC_COPY_PAGEABLE,
        .dst = to_self ? self->ptr : (uintptr_t)view.buf,
        .src = to_self ? (uintptr_t)view.buf : self->ptr,
        .dst_device = to_self ? self->device : -1,
        .src_device = to_self ? -1 : self->device,
        .nbytes = self->nbytes,
    };
    rc = run_copy(st, s, &c, acc_buffer_root(self), NULL, NULL);
    PyBuffer_Release(&view);
    return rc;
}

static PyObject *
buffer_transfer(BufferObject *self, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames, int to_self)
{
    static const char *const from_names[] = {"src", "stream", NULL};
    static const char *const to_names[] = {"dst", "stream", NULL};
    static const acc_params from = {"Buffer.copy_from()", from_names, 1, 1,
                                    1};
    static const acc_params to = {"Buffer.copy_to()", to_names, 1, 1, 1};
    const acc_params *params = to_self ? &from : &to;
    const char *what = params->what;
    acc_state *st = buffer_state((PyObject *)self);
    PyObject *values[2] = {NULL, Py_None};
    PyObject *other;
    acc_stream *s;
    int rc;

    if (acc_parse_args(args, nargs, kwnames, params, values) < 0
        || acc_buffer_check_open(self, what) < 0
        || acc_parse_stream(st, values[1], self->device, what, &s) < 0) {
        return NULL;
    }
    other = values[0];
    if (acc_buffer_check(st, other)) {
        rc = copy_buffers(st, self, (BufferObject *)other, to_self, s, what);
    }
    else if (PyObject_TypeCheck(other, st->host_buffer_type)) {
        rc = copy_host_buffer(st, self, (HostBufferObject *)other, to_self,
                              s, what);
    }
    else {
        rc = copy_object(st, self, other, to_self, s, what);
    }
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
buffer_copy_from(BufferObject *self, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    return buffer_transfer(self, args, nargs, kwnames, 1);
}

static PyObject *
buffer_copy_to(BufferObject *self, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    return buffer_transfer(self, args, nargs, kwnames, 0);
}

static PyObject *
buffer_fill(BufferObject *self, PyObject *const *args, Py_ssize_t nargs,
            PyObject *kwnames)
{
    static const char *const names[] = {"value", "stream", NULL};
    static const acc_params params = {"Buffer.fill()", names, 1, 1, 1};
    acc_state *st = buffer_state((PyObject *)self);
    PyObject *values[2] = {NULL, Py_None};
    PyObject *value_arg, *stream_arg;
    BufferObject *root = acc_buffer_root(self);
    long long value;
    int overflow;
    acc_stream *s;
    acc_error err;
    acc_status status;

    if (acc_parse_args(args, nargs, kwnames, &params, values) < 0) {
        return NULL;
    }
    value_arg = values[0];
    stream_arg = values[1];
    if (!acc_is_index(value_arg)) {
        PyErr_Format(PyExc_TypeError, "Buffer.fill(): value must be an int "
                     "in 0..255, got %.100s", acc_type_name(value_arg));
        return NULL;
    }
    value = PyLong_AsLongLongAndOverflow(value_arg, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        acc_index_failed(value_arg, "Buffer.fill(): value must be an int "
                         "in 0..255");
        return NULL;
    }
    if (overflow) {
        acc_int_error(st, value_arg, overflow < 0, NULL);
        return NULL;
    }
    if (acc_buffer_check_open(self, "Buffer.fill()") < 0
        || acc_parse_stream(st, stream_arg, self->device, "Buffer.fill()",
                            &s) < 0) {
        return NULL;
    }
    acc_buffer_enter(root);
    Py_BEGIN_ALLOW_THREADS
    status = acc_memset(s, self->device, self->ptr, value, self->nbytes,
                        &err);
    if (status == ACC_OK && self->nbytes > 0) {
        status = acc_buffer_record(root, s, &err);
    }
    Py_END_ALLOW_THREADS
    acc_buffer_leave(root);
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
buffer_record_stream(BufferObject *self, PyObject *stream)
{
    acc_state *st = buffer_state((PyObject *)self);
    acc_stream *s;

    if (acc_buffer_check_open(self, "Buffer.record_stream()") < 0) {
        return NULL;
    }
    if (!PyObject_TypeCheck(stream, st->stream_type)) {
        PyErr_Format(PyExc_TypeError, "Buffer.record_stream() expected an "
                     "accelerator.Stream, got %s",
                     acc_type_name_in(st, stream));
        return NULL;
    }
    s = acc_stream_of(stream);
    if (buffer_note_stream(st, acc_buffer_root(self), s) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* close(), with ------------------------------------------------------------ */

static PyObject *
buffer_close(BufferObject *self, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    static const char *const names[] = {"stream", NULL};
    static const acc_params params = {"Buffer.close()", names, 0, 0, 1};
    acc_state *st = buffer_state((PyObject *)self);
    PyObject *stream_arg = Py_None;

    if (acc_parse_args(args, nargs, kwnames, &params, &stream_arg) < 0) {
        return NULL;
    }
    if (stream_arg != Py_None) {
        if (!PyObject_TypeCheck(stream_arg, st->stream_type)) {
            PyErr_Format(PyExc_TypeError, "Buffer.close(): stream must be "
                         "an accelerator.Stream or None, got %s",
                         acc_type_name_in(st, stream_arg));
            return NULL;
        }
        /* Freed after the work queued on stream too: recorded in the
         * books of the memory, which a view or wrapper shares. */
        if (!self->closed && !acc_buffer_root(self)->closed
            && buffer_note_stream(st, acc_buffer_root(self),
                                  acc_stream_of(stream_arg)) < 0) {
            return NULL;
        }
    }
    if (self->closed) {
        Py_RETURN_NONE;
    }
    if (self->root == NULL && self->exports > 0) {
        PyErr_Format(PyExc_BufferError, "cannot close a Buffer while %zd "
                     "DLPack export(s) of it are alive (another library "
                     "may still use the memory)", self->exports);
        return NULL;
    }
    self->closed = 1;
    Py_CLEAR(self->owner);
    if (self->root != NULL || self->uses == NULL) {
        /* A view, or a wrapper of one of our Buffers (whose books have
         * the uses): let go at once. */
        Py_CLEAR(self->keep);
    }
    acc_buffer_release(self);   /* deferred while a call uses the memory */
    Py_RETURN_NONE;
}

static PyObject *
buffer_enter_ctx(BufferObject *self, PyObject *unused)
{
    (void)unused;
    if (acc_buffer_check_open(self, "with Buffer") < 0) {
        return NULL;
    }
    return Py_NewRef((PyObject *)self);
}

static PyObject *
buffer_exit_ctx(BufferObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    return buffer_close(self, NULL, 0, NULL);
}

/* Views --------------------------------------------------------------------- */

static PyObject *
buffer_subscript(BufferObject *self, PyObject *key)
{
    acc_state *st = buffer_state((PyObject *)self);
    Py_ssize_t start, stop, step, length;
    BufferObject *root = acc_buffer_root(self);

    if (!PySlice_Check(key)) {
        PyErr_Format(PyExc_TypeError, "Buffer indices must be slices "
                     "(buf[i:j] is a view), not %.100s", acc_type_name(key));
        return NULL;
    }
    if (PySlice_Unpack(key, &start, &stop, &step) < 0) {
        return NULL;
    }
    if (step != 1) {
        PyErr_Format(PyExc_ValueError, "a Buffer view needs step 1 "
                     "(contiguous bytes), got step %zd", step);
        return NULL;
    }
    length = PySlice_AdjustIndices((Py_ssize_t)self->nbytes, &start, &stop,
                                   step);
    if (acc_buffer_check_open(self, "slicing") < 0) {
        return NULL;
    }
    return acc_buffer_new_raw(st, self->device,
                              self->ptr + (uintptr_t)start, (size_t)length,
                              self->stream, root, NULL);
}

/* Type ----------------------------------------------------------------------- */

PyDoc_STRVAR(buffer_doc,
"Buffer(nbytes, device=None, *, stream=None)\n--\n\n"
"nbytes bytes of device memory on device (default: the current device),\n"
"ordered on stream (default: the device's current stream; a stream of\n"
"another device is a ValueError).  copy_from(), copy_to() and fill() are\n"
"asynchronous on a stream (default: the current stream of the buffer's\n"
"device).  buf[i:j] is a view that keeps buf alive.  close() or `with`\n"
"frees the memory once the work queued on it has completed; so does\n"
"dropping the last reference, without waiting for the device.");
PyDoc_STRVAR(copy_from_doc,
"copy_from($self, src, /, *, stream=None)\n--\n\n"
"Copy src into this buffer: a Buffer (any device), a HostBuffer\n"
"(asynchronous) or a C-contiguous object with the buffer protocol of\n"
"exactly nbytes bytes (returns when src may be reused).  A copy between\n"
"devices is ordered after the work queued on both devices' current\n"
"streams, and later work there waits for it (as torch's Tensor copy does).");
PyDoc_STRVAR(copy_to_doc,
"copy_to($self, dst, /, *, stream=None)\n--\n\n"
"Copy this buffer into dst: a Buffer (any device), a HostBuffer\n"
"(asynchronous) or a writable C-contiguous object with the buffer\n"
"protocol of exactly nbytes bytes (returns once the copy has landed).");
PyDoc_STRVAR(fill_doc,
"fill($self, value, /, *, stream=None)\n--\n\n"
"Set every byte to value (0..255), asynchronously on stream.");
PyDoc_STRVAR(record_stream_doc,
"record_stream($self, stream, /)\n--\n\n"
"As torch's Tensor.record_stream: the memory is not freed or reused until\n"
"the work queued on stream so far has completed.  Copies and fills of\n"
"this module record their stream themselves; this is for work queued by\n"
"other libraries.");
PyDoc_STRVAR(close_doc,
"close($self, /, stream=None)\n--\n\n"
"Free the memory once the work queued on the buffer's streams (and on\n"
"stream, if given) has completed; never waits for the device.  A call\n"
"using the memory on another thread defers the release until it ends.\n"
"Later use raises ValueError.  Closing a view closes only the view\n"
"(stream is recorded on the memory it shares).");
PyDoc_STRVAR(enter_doc,
"__enter__($self, /)\n--\n\nReturn the buffer itself, for `with`.");
PyDoc_STRVAR(exit_doc,
"__exit__($self, /, *exc_info)\n--\n\nclose() the buffer: freed once its work is done.");

static PyMethodDef buffer_methods[] = {
    {"copy_from", (PyCFunction)(void (*)(void))buffer_copy_from,
     METH_FASTCALL | METH_KEYWORDS, copy_from_doc},
    {"copy_to", (PyCFunction)(void (*)(void))buffer_copy_to,
     METH_FASTCALL | METH_KEYWORDS, copy_to_doc},
    {"fill", (PyCFunction)(void (*)(void))buffer_fill,
     METH_FASTCALL | METH_KEYWORDS, fill_doc},
    {"record_stream", (PyCFunction)buffer_record_stream, METH_O,
     record_stream_doc},
    {"close", (PyCFunction)(void (*)(void))buffer_close,
     METH_FASTCALL | METH_KEYWORDS, close_doc},
    {"__enter__", (PyCFunction)buffer_enter_ctx, METH_NOARGS, enter_doc},
    {"__exit__", (PyCFunction)(void (*)(void))buffer_exit_ctx, METH_FASTCALL,
     exit_doc},
    ACC_BUFFER_DLPACK_METHODS
    ACC_BUFFER_IPC_METHODS
    {NULL},
};

static PyGetSetDef buffer_getset[] = {
    {"nbytes", (getter)buffer_get_nbytes, NULL,
     PyDoc_STR("The size in bytes."), NULL},
    {"device", (getter)buffer_get_device, NULL,
     PyDoc_STR("The buffer's device."), NULL},
    {"ptr", (getter)buffer_get_ptr, NULL,
     PyDoc_STR("The device address as an int (0 for an empty buffer)."),
     NULL},
    {"stream", (getter)buffer_get_stream, NULL,
     PyDoc_STR("The stream the memory is ordered on."), NULL},
    {"closed", (getter)buffer_get_closed, NULL,
     PyDoc_STR("True once close() was called (on it or on its root)."),
     NULL},
    {"owner", (getter)buffer_get_owner, NULL,
     PyDoc_STR("What keeps the memory: the Buffer a view was made from, "
               "the producer of from_dlpack(), or None."), NULL},
    {NULL},
};

static PyMemberDef buffer_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(BufferObject, weakreflist),
     READONLY, NULL},
    {NULL},
};

static PyType_Slot buffer_slots[] = {
    {Py_tp_doc, (void *)buffer_doc},
    {Py_tp_new, buffer_new},
    {Py_tp_dealloc, buffer_dealloc},
    {Py_tp_traverse, buffer_traverse},
    {Py_tp_clear, buffer_clear},
    {Py_tp_repr, buffer_repr},
    {Py_tp_methods, buffer_methods},
    {Py_tp_getset, buffer_getset},
    {Py_tp_members, buffer_members},
    {Py_mp_subscript, buffer_subscript},
    {Py_mp_length, buffer_length},
    {0, NULL},
};

PyType_Spec acc_buffer_spec = {
    .name = "accelerator.Buffer",
    .basicsize = sizeof(BufferObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = buffer_slots,
};

