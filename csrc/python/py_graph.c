/*
 * py_graph.c - accelerator.Graph: capture the work queued on a stream
 * once and replay it with one launch, as torch.accelerator.Graph.
 */
#include "pyaccel.h"

#include <pthread.h>
#include <string.h>

/* The driver calls of a graph run without the GIL (a replay or an
 * instantiation may take long): lock serialises the calls on g instead,
 * taken only once the GIL is released. */
typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    acc_graph g;
} GraphObject;

typedef acc_status (*graph_op)(acc_graph *g, acc_error *err);

/* op on self's graph, without the GIL; None, or op's error raised.  In
 * a forked child the 'spawn' error, before the lock (which a thread of
 * the parent may have held at the fork) and without a driver call. */
static PyObject *
graph_call(GraphObject *self, graph_op op)
{
    acc_state *st = acc_state_from_type(Py_TYPE((PyObject *)self));
    acc_error err;
    acc_status status;

    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    status = op(&self->g, &err);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

static acc_state *
graph_state(GraphObject *self)
{
    return acc_state_from_type(Py_TYPE((PyObject *)self));
}

/* Both spellings of torch's graph-private memory pools. */
#define NO_POOLS                                                          \
    "%s is not supported: there are no graph-private memory pools "       \
    "(allocate buffers before capturing)"

static PyObject *
graph_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const names[] = {"keep_graph", "pool", NULL};
    static const acc_params params = {"Graph()", names, 0, 0, 1};
    acc_state *st = acc_state_from_type(cls);
    PyObject *values[2] = {Py_False, Py_None};
    PyObject *keep, *pool;
    GraphObject *self;

    if (acc_parse_tuple(args, kwargs, &params, values) < 0) {
        return NULL;
    }
    keep = values[0];
    pool = values[1];
    if (!PyBool_Check(keep)) {
        PyErr_Format(PyExc_TypeError, "Graph() argument keep_graph must be "
                     "a bool, not %.100s", acc_type_name(keep));
        return NULL;
    }
    if (pool != Py_None) {
        PyErr_Format(PyExc_NotImplementedError, NO_POOLS, "Graph(pool=...)");
        return NULL;
    }
    acc_ensure_probed();
    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    self = (GraphObject *)acc_alloc(cls);
    if (self == NULL) {
        return NULL;
    }
    pthread_mutex_init(&self->lock, NULL);
    acc_graph_init(&self->g, keep == Py_True);
    return (PyObject *)self;
}

static void
graph_dealloc(GraphObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);

    /* Nobody else holds the object: no lock needed. */
    Py_BEGIN_ALLOW_THREADS
    acc_graph_drop(&self->g);
    Py_END_ALLOW_THREADS
    pthread_mutex_destroy(&self->lock);
    acc_object_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
parse_mode(PyObject *obj, int *mode)
{
    static const char *const names[] = {"default", "global", "thread_local",
                                        "relaxed"};
    static const int modes[] = {ACC_CAPTURE_GLOBAL, ACC_CAPTURE_GLOBAL,
                                ACC_CAPTURE_THREAD_LOCAL,
                                ACC_CAPTURE_RELAXED};
    const char *text;

    if (obj == NULL) {
        *mode = ACC_CAPTURE_GLOBAL;
        return 0;
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "capture_begin() argument "
                     "capture_error_mode must be a str, not %.100s",
                     acc_type_name(obj));
        return -1;
    }
    text = PyUnicode_AsUTF8AndSize(obj, NULL);
    if (text == NULL) {
        return -1;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(text, names[i]) == 0) {
            *mode = modes[i];
            return 0;
        }
    }
    /* torch raises RuntimeError here. */
    PyErr_Format(PyExc_RuntimeError, "Unknown capture_error_mode %R: "
                 "expected 'default', 'global', 'thread_local' or "
                 "'relaxed'", obj);
    return -1;
}

static PyObject *
graph_capture_begin(GraphObject *self, PyObject *const *args,
                    Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"capture_error_mode", NULL};
    static const acc_params params = {"Graph.capture_begin()", names, 0, 0,
                                      1};
    acc_state *st = graph_state(self);
    PyObject *mode_arg = NULL;
    acc_stream *s;
    acc_error err;
    acc_status status;
    int mode;

    if (acc_parse_args(args, nargs, kwnames, &params, &mode_arg) < 0
        || parse_mode(mode_arg, &mode) < 0 || acc_require_usable(st) < 0) {
        return NULL;
    }
    if (acc_current_stream(acc_current_device(), &s, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    status = acc_graph_capture_begin(&self->g, s, mode, &err);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
graph_capture_end(GraphObject *self, PyObject *unused)
{
    (void)unused;
    return graph_call(self, acc_graph_capture_end);
}

static PyObject *
graph_instantiate(GraphObject *self, PyObject *unused)
{
    (void)unused;
    return graph_call(self, acc_graph_instantiate);
}

static PyObject *
graph_replay(GraphObject *self, PyObject *unused)
{
    (void)unused;
    return graph_call(self, acc_graph_replay);
}

static PyObject *
graph_reset(GraphObject *self, PyObject *unused)
{
    (void)unused;
    return graph_call(self, acc_graph_reset);
}

static PyObject *
graph_enter(GraphObject *self, PyObject *unused)
{
    acc_state *st = graph_state(self);
    acc_error err;
    acc_status status;
    int device;

    (void)unused;
    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    device = acc_current_device();
    /* As torch's: synchronize, then empty the caches (memory, and the
     * streams and events kept for reuse), then capture. */
    Py_BEGIN_ALLOW_THREADS
    status = acc_synchronize_device(device, &err);
    if (status == ACC_OK) {
        status = acc_allocator_empty_cache(&err);
    }
    if (status == ACC_OK) {
        acc_empty_cache();
    }
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    return graph_capture_begin(self, NULL, 0, NULL);
}

static PyObject *
graph_pool(GraphObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyErr_Format(PyExc_NotImplementedError, NO_POOLS, "Graph.pool()");
    return NULL;
}

static PyObject *
graph_exit(GraphObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs > 0 && args[0] != Py_None) {
        /* The body failed: drop the capture, let its exception through. */
        return graph_reset(self, NULL);
    }
    return graph_capture_end(self, NULL);
}

static PyObject *
graph_repr(GraphObject *self)
{
    const char *state = self->g.capturing != NULL ? "capturing"
                        : self->g.captured        ? "captured"
                                                  : "empty";

    return PyUnicode_FromFormat("accelerator.Graph(keep_graph=%s, %s)",
                                self->g.keep_graph ? "True" : "False",
                                state);
}

static PyObject *
graph_reduce(GraphObject *self, PyObject *unused)
{
    (void)unused;
    PyErr_Format(PyExc_TypeError, "cannot pickle %.100s objects: a graph "
                 "belongs to this process's driver",
                 acc_type_name((PyObject *)self));
    return NULL;
}

PyDoc_STRVAR(graph_doc,
"Graph(keep_graph=False, *, pool=None)\n"
"--\n"
"\n"
"Work captured from a stream once and replayed with one launch, as\n"
"torch.accelerator.Graph.  Allocations are refused while capturing\n"
"(pool must be None).  With keep_graph=False capture_end() instantiates\n"
"the graph and drops it; with True, instantiate() (or the first\n"
"replay()) does.");
PyDoc_STRVAR(capture_begin_doc,
"capture_begin($self, /, capture_error_mode='default')\n--\n\n"
"Begin capturing the work queued on the current stream (not a default\n"
"stream).  capture_error_mode: 'default' (= 'global'), 'global',\n"
"'thread_local' or 'relaxed', as CUDA's stream capture modes.");
PyDoc_STRVAR(capture_end_doc,
"capture_end($self, /)\n--\n\nEnd the capture (and instantiate it "
"unless keep_graph).");
PyDoc_STRVAR(instantiate_doc,
"instantiate($self, /)\n--\n\nMake the executable graph (keep_graph=True "
"only).");
PyDoc_STRVAR(replay_doc,
"replay($self, /)\n--\n\nQueue the captured work again on the current "
"stream, with one launch.");
PyDoc_STRVAR(reset_doc,
"reset($self, /)\n--\n\nRelease the captured graph; the Graph can capture "
"again.  Refused\nfrom another thread than the one that began a 'global' or "
"'thread_local'\ncapture.");
PyDoc_STRVAR(genter_doc,
"__enter__($self, /)\n--\n\nSynchronize the current device, empty the "
"caches (as empty_cache()),\nthen begin capturing on the current stream.");
PyDoc_STRVAR(pool_doc,
"pool($self, /)\n--\n\nRaise NotImplementedError: torch's graph-private "
"memory pools do not\nexist here (allocate buffers before capturing).");
PyDoc_STRVAR(gexit_doc,
"__exit__($self, /, *exc_info)\n--\n\nEnd the capture (drop it when the "
"body raised).");
PyDoc_STRVAR(greduce_doc,
"__reduce__($self, /)\n--\n\nGraphs cannot be pickled.");

static PyMethodDef graph_methods[] = {
    {"capture_begin", (PyCFunction)(void (*)(void))graph_capture_begin,
     METH_FASTCALL | METH_KEYWORDS, capture_begin_doc},
    {"capture_end", (PyCFunction)graph_capture_end, METH_NOARGS,
     capture_end_doc},
    {"instantiate", (PyCFunction)graph_instantiate, METH_NOARGS,
     instantiate_doc},
    {"replay", (PyCFunction)graph_replay, METH_NOARGS, replay_doc},
    {"reset", (PyCFunction)graph_reset, METH_NOARGS, reset_doc},
    {"pool", (PyCFunction)graph_pool, METH_NOARGS, pool_doc},
    {"__enter__", (PyCFunction)graph_enter, METH_NOARGS, genter_doc},
    {"__exit__", (PyCFunction)(void (*)(void))graph_exit, METH_FASTCALL,
     gexit_doc},
    {"__reduce__", (PyCFunction)graph_reduce, METH_NOARGS, greduce_doc},
    {NULL},
};

static PyType_Slot graph_slots[] = {
    {Py_tp_doc, (void *)graph_doc},
    {Py_tp_new, graph_new},
    {Py_tp_dealloc, graph_dealloc},
    {Py_tp_repr, graph_repr},
    {Py_tp_methods, graph_methods},
    {0, NULL},
};

PyType_Spec acc_graph_spec = {
    .name = "accelerator.Graph",
    .basicsize = sizeof(GraphObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = graph_slots,
};
