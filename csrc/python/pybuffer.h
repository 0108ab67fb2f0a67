/*
 * pybuffer.h - what py_buffer.c (Buffer), py_hostbuffer.c (HostBuffer),
 * py_dlpack.c (DLPack both ways) and py_lifetime.c (the books of their
 * memory) share.
 */
#ifndef PYBUFFER_H
#define PYBUFFER_H

#include "pyobjects.h"

typedef struct BufferObject {
    PyObject_HEAD
    acc_block *block;          /* owned memory; NULL for a view, foreign
                                * memory, or once freed */
    struct BufferObject *root; /* a view, or from_dlpack() of one of this
                                * module's Buffers: the Buffer that owns
                                * the memory (its books are the ones) */
    PyObject *owner;           /* foreign memory: what keeps it alive */
    PyObject *stream;          /* the Stream the memory is ordered on */
    uintptr_t ptr;
    size_t nbytes;
    int device;
    int closed;
    int busy;                  /* calls using the memory without the GIL
                                * (on the root) */
    acc_uses *uses;            /* foreign memory: its books (uses.c) */
    Py_ssize_t exports;        /* live DLPack exports of the memory (on
                                * the root) */
    PyObject *keep;            /* from_dlpack: holds the producer's
                                * managed tensor (its deleter runs when
                                * this goes); from_ipc_handle: the
                                * import */
    int release_now;           /* foreign memory let go at once, after
                                * waiting for its uses (another process's
                                * memory: its producer is waiting) */
    PyObject *weakreflist;
} BufferObject;

typedef struct HostBufferObject {
    PyObject_HEAD
    acc_host_block *h;         /* NULL once closed */
    void *ptr;
    Py_ssize_t nbytes;
    int device;
    int closed;
    int busy;
    Py_ssize_t exports;        /* live buffer-protocol exports */
    PyObject *weakreflist;
} HostBufferObject;

/* obj is a Buffer of this module instance. */
static inline int
acc_buffer_check(acc_state *st, PyObject *obj)
{
    return PyObject_TypeCheck(obj, st->buffer_type);
}

/* The lifetime of the memory (py_lifetime.c) -------------------------- */

/* The memory is usable (open, and its root too); ValueError if not. */
int acc_buffer_check_open(BufferObject *self, const char *what);
/* A Buffer object on memory it does not own: a view (root) or foreign
 * memory (owner), whose books are the root's or its own. */
PyObject *acc_buffer_new_raw(acc_state *st, int device, uintptr_t ptr,
                             size_t nbytes, PyObject *stream,
                             BufferObject *root, PyObject *owner);

void *acc_host_ptr(HostBufferObject *h);
int acc_host_check_open(HostBufferObject *h, const char *what);
/* Start and end of a call that uses the HostBuffer's memory without the
 * GIL; leave frees it when it was closed meanwhile. */
void acc_host_enter(HostBufferObject *h);
void acc_host_leave(HostBufferObject *h);
/* Free a closed HostBuffer's memory unless a call still uses it. */
void acc_host_release(HostBufferObject *h);

/* The lifetime model (docs/memory.rst, "Lifetime") for a Buffer, its
 * views and wrappers: root is the Buffer whose books hold the memory
 * (acc_buffer_root).  enter/leave bracket a call that uses the memory
 * without the GIL (leave releases memory closed meanwhile); record notes
 * a stream use in the books (callable without the GIL between them). */
BufferObject *acc_buffer_root(BufferObject *self);
void acc_buffer_enter(BufferObject *root);
void acc_buffer_leave(BufferObject *root);
acc_status acc_buffer_record(BufferObject *root, acc_stream *s,
                             acc_error *err);
/* Give the root's memory back once no call is using it; GIL held. */
void acc_buffer_release(BufferObject *root);
/* The instance st is going: its foreign wrappers' waiting releases are
 * waited for and run now (module_free); GIL held. */
void acc_foreign_settle(acc_state *st);

/* DLPack methods of Buffer and HostBuffer (py_dlpack.c). */
PyObject *acc_buffer_dlpack(PyObject *self, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames);
PyObject *acc_buffer_dlpack_device(PyObject *self, PyObject *unused);
PyObject *acc_host_dlpack(PyObject *self, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames);
PyObject *acc_host_dlpack_device(PyObject *self, PyObject *unused);
PyObject *acc_from_dlpack(PyObject *module, PyObject *obj);
extern const char acc_from_dlpack_doc[];

extern const char acc_dlpack_doc[];
extern const char acc_dlpack_device_doc[];
extern const char acc_host_dlpack_doc[];
extern const char acc_host_dlpack_device_doc[];

#define ACC_BUFFER_DLPACK_METHODS                                        \
    {"__dlpack__", (PyCFunction)(void (*)(void))acc_buffer_dlpack,       \
     METH_FASTCALL | METH_KEYWORDS, acc_dlpack_doc},                     \
    {"__dlpack_device__", (PyCFunction)acc_buffer_dlpack_device,         \
     METH_NOARGS, acc_dlpack_device_doc},
#define ACC_HOST_DLPACK_METHODS                                          \
    {"__dlpack__", (PyCFunction)(void (*)(void))acc_host_dlpack,         \
     METH_FASTCALL | METH_KEYWORDS, acc_host_dlpack_doc},                \
    {"__dlpack_device__", (PyCFunction)acc_host_dlpack_device,           \
     METH_NOARGS, acc_host_dlpack_device_doc},

/* Sharing with other processes (py_ipc.c). */
PyObject *acc_buffer_ipc_handle(PyObject *self, PyObject *unused);
PyObject *acc_buffer_from_ipc_handle(PyObject *cls, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames);
PyObject *acc_buffer_from_driver_ipc_handle(PyObject *cls,
                                            PyObject *const *args,
                                            Py_ssize_t nargs,
                                            PyObject *kwnames);
PyObject *acc_buffer_reduce(PyObject *self, PyObject *unused);
PyObject *acc_event_ipc_handle(PyObject *self, PyObject *unused);
PyObject *acc_event_from_ipc_handle(PyObject *cls, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames);
PyObject *acc_event_reduce(PyObject *self, PyObject *unused);
PyObject *acc_ipc_collect_py(PyObject *module, PyObject *unused);
PyObject *acc_ipc_describe_py(PyObject *module, PyObject *handle);
PyObject *acc_ipc_held_py(PyObject *module, PyObject *unused);

#define ACC_BUFFER_IPC_METHODS                                           \
    {"ipc_handle", (PyCFunction)acc_buffer_ipc_handle, METH_NOARGS,      \
     PyDoc_STR("ipc_handle($self, /)\n--\n\n"                            \
               "A handle that another process of this machine opens\n"   \
               "with Buffer.from_ipc_handle() to use this memory, no\n"  \
               "copy (docs/processes.rst).  Order the work with an\n"    \
               "Event(interprocess=True): the handle does not wait.")},  \
    {"from_ipc_handle",                                                  \
     (PyCFunction)(void (*)(void))acc_buffer_from_ipc_handle,            \
     METH_CLASS | METH_FASTCALL | METH_KEYWORDS,                         \
     PyDoc_STR("from_ipc_handle($cls, handle, *, fd=None)\n--\n\n"        \
               "The Buffer over another process's memory that handle\n"  \
               "(an IpcHandle or its bytes) names, on the device of the\n"\
               "same UUID; fd: the driver's descriptor received with\n"  \
               "it (Level Zero), else taken from the producer.")},        \
    {"from_driver_ipc_handle",                                           \
     (PyCFunction)(void (*)(void))acc_buffer_from_driver_ipc_handle,     \
     METH_CLASS | METH_FASTCALL | METH_KEYWORDS,                         \
     PyDoc_STR("from_driver_ipc_handle($cls, handle, nbytes, offset=0, "  \
               "*, device=None, fd=None)\n--\n\n"                         \
               "The Buffer over nbytes at offset of another library's\n" \
               "allocation that the driver's own 64-byte handle names\n" \
               "(torch's or CuPy's cudaIpcMemHandle); no lease: its\n"   \
               "producer must keep the memory alive meanwhile.")},       \
    {"__reduce__", (PyCFunction)acc_buffer_reduce, METH_NOARGS,          \
     PyDoc_STR("__reduce__($self, /)\n--\n\nPickling shares the memory "\
               "with the process that unpickles it\n(after waiting for "  \
               "the work queued on the Buffer's stream).")},
#define ACC_EVENT_IPC_METHODS                                            \
    {"ipc_handle", (PyCFunction)acc_event_ipc_handle, METH_NOARGS,       \
     PyDoc_STR("ipc_handle($self, /)\n--\n\n"                            \
               "A handle that another process opens with\n"              \
               "Event.from_ipc_handle(); the event must be made with\n"  \
               "interprocess=True and recorded.")},                      \
    {"from_ipc_handle",                                                  \
     (PyCFunction)(void (*)(void))acc_event_from_ipc_handle,             \
     METH_CLASS | METH_FASTCALL | METH_KEYWORDS,                         \
     PyDoc_STR("from_ipc_handle($cls, handle, *, fd=None, "              \
               "blocking=False)\n--\n\n"                                  \
               "The Event of another process that handle names: query,\n"\
               "synchronize, wait and record work on it here.")},        \
    {"__reduce__", (PyCFunction)acc_event_reduce, METH_NOARGS,           \
     PyDoc_STR("__reduce__($self, /)\n--\n\nAn Event(interprocess=True) "\
               "pickles as its handle; others cannot be pickled.")},

extern PyType_Spec acc_buffer_spec;
extern PyType_Spec acc_host_buffer_spec;

#endif /* PYBUFFER_H */
