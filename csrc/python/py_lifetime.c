/*
 * py_lifetime.c - the lifetime model (docs/memory.rst, "Lifetime") of
 * the memory behind Buffer, its views and DLPack wrappers, and HostBuffer:
 * which object's books hold the memory (the root), calls that use it
 * without the GIL holding it open (enter/leave), the stream uses recorded
 * in the books, and the release once nothing uses it.
 *
 * py_buffer.c, py_hostbuffer.c and py_dlpack.c all keep these books, so
 * they live here, below the three (docs/python-layer.rst), rather than in
 * one of them that the others would call.
 */
#include "pybuffer.h"

#include <stdlib.h>

/* Buffer ----------------------------------------------------------------- */

/* A Buffer's memory is usable: it is open and so is its root. */
int
acc_buffer_check_open(BufferObject *self, const char *what)
{
    if (self->closed) {
        PyErr_Format(PyExc_ValueError, "%s on a closed Buffer", what);
        return -1;
    }
    if (self->root != NULL && self->root->closed) {
        PyErr_Format(PyExc_ValueError, "%s on a view of a closed Buffer",
                     what);
        return -1;
    }
    return 0;
}

/* The Buffer whose books hold the memory (itself unless a view or a
 * wrapper of one of this module's Buffers). */
BufferObject *
acc_buffer_root(BufferObject *self)
{
    return self->root != NULL ? self->root : self;
}

/* A foreign wrapper's hold on the producer's tensor, and the interpreter
 * whose object it is. */
typedef struct foreign_hold {
    PyObject *keep;
    PyInterpreterState *interp;
    acc_state *owner;            /* the module instance that made it */
    struct foreign_hold *next;   /* acc_foreign_settle's list */
} foreign_hold;

/* Drop the hold; GIL held, under a thread state of its interpreter.
 * This may run inside any call that allocates or frees, even one that
 * has an exception set already: the producer's deleter (Python code,
 * maybe) must not clear it. */
static void
foreign_drop(PyObject *keep)
{
    PyObject *type, *value, *traceback;

    PyErr_Fetch(&type, &value, &traceback);
    Py_DECREF(keep);
    PyErr_Restore(type, value, traceback);
}

/* The end of a foreign wrapper's hold, once the work recorded in its
 * books has completed (memory.c's deferred release calls it, on any
 * thread, never holding the GIL: every call into the core that can run
 * deferred releases is made without it).  PyGILState serves one
 * interpreter per thread (the main one, mostly): a hold of another
 * interpreter's object is dropped under a thread state of that
 * interpreter, made for the purpose, never under the main one's. */
static void
foreign_release(int device, uintptr_t ptr)
{
    foreign_hold *h = (foreign_hold *)ptr;
    PyThreadState *own = PyGILState_GetThisThreadState();
    PyThreadState *ts;

    (void)device;
    if (own != NULL && PyThreadState_GetInterpreter(own) == h->interp) {
        PyGILState_STATE gil = PyGILState_Ensure();

        foreign_drop(h->keep);
        PyGILState_Release(gil);
    }
    else if ((ts = PyThreadState_New(h->interp)) != NULL) {
        PyEval_RestoreThread(ts);
        foreign_drop(h->keep);
        PyThreadState_Clear(ts);
        (void)PyEval_SaveThread();
        PyThreadState_Delete(ts);
    }
    /* else no thread state to be had (no host memory): the producer's
     * tensor stays held rather than be let go without the GIL. */
    free(h);
}

typedef struct settle_ctx {
    acc_state *owner;
    foreign_hold *holds;
} settle_ctx;

static int
claim_hold(uintptr_t ptr, void *ctx)
{
    foreign_hold *h = (foreign_hold *)ptr;
    settle_ctx *c = ctx;

    if (h->owner != c->owner) {
        return 0;
    }
    h->next = c->holds;
    c->holds = h;
    return 1;
}

/* The module instance st is going (its interpreter may be ending, after
 * which no thread state of it can be had): wait for the work of its
 * foreign wrappers' releases still waiting and drop their holds now,
 * under this interpreter's thread state; GIL held. */
void
acc_foreign_settle(acc_state *st)
{
    settle_ctx ctx = {.owner = st, .holds = NULL};
    foreign_hold *h;

    Py_BEGIN_ALLOW_THREADS
    acc_deferred_settle(foreign_release, claim_hold, &ctx);
    Py_END_ALLOW_THREADS
    while ((h = ctx.holds) != NULL) {
        ctx.holds = h->next;
        foreign_drop(h->keep);
        free(h);
    }
}

/* Give the root's memory back once no call is using it; GIL held.  Owned
 * memory goes to the allocator (which waits for the recorded uses);
 * a foreign wrapper lets the producer's tensor go once its own recorded
 * uses have completed. */
void
acc_buffer_release(BufferObject *root)
{
    acc_block *block = root->block;
    acc_uses *uses = root->uses;
    foreign_hold *hold;
    PyObject *keep;

    if (root->busy > 0) {
        return;
    }
    if (uses != NULL) {
        root->uses = NULL;
        keep = root->keep;
        root->keep = NULL;
        hold = keep != NULL && !root->release_now ? malloc(sizeof(*hold))
                                                  : NULL;
        if (hold != NULL) {
            /* The reference moves to the deferred release. */
            hold->keep = keep;
            hold->interp = PyInterpreterState_Get();
            hold->owner = acc_state_from_type(Py_TYPE((PyObject *)root));
            hold->next = NULL;
            Py_BEGIN_ALLOW_THREADS
            acc_defer_release(root->device, (uintptr_t)hold,
                              foreign_release, uses);
            Py_END_ALLOW_THREADS
        }
        else if (keep != NULL) {
            /* Another process's memory (its producer waits for it), or no
             * host memory to defer with: wait for the uses here. */
            acc_error ignored;

            Py_BEGIN_ALLOW_THREADS
            (void)acc_uses_synchronize(uses, &ignored);
            Py_END_ALLOW_THREADS
            foreign_drop(keep);
        }
        acc_uses_clear(uses);
        pthread_mutex_destroy(&uses->lock);
        free(uses);
    }
    if (block == NULL) {
        return;
    }
    root->block = NULL;
    if (acc_free_try(block) == ACC_OK) {
        return;     /* back in the cache, no driver call: keep the GIL */
    }
    Py_BEGIN_ALLOW_THREADS
    acc_free(block);
    Py_END_ALLOW_THREADS
}

acc_status
acc_buffer_record(BufferObject *root, acc_stream *s, acc_error *err)
{
    if (root->block != NULL) {
        return acc_block_record_stream(root->block, s, err);
    }
    if (root->uses != NULL) {
        return acc_uses_record(root->uses, s, err);
    }
    return ACC_OK;   /* closed, or empty */
}

/* Start and end of a call that uses root's memory without the GIL. */
void
acc_buffer_enter(BufferObject *root)
{
    root->busy++;
    Py_INCREF((PyObject *)root);
}

void
acc_buffer_leave(BufferObject *root)
{
    root->busy--;
    if (root->closed && root->busy == 0) {
        acc_buffer_release(root);
    }
    Py_DECREF((PyObject *)root);
}

PyObject *
acc_buffer_new_raw(acc_state *st, int device, uintptr_t ptr, size_t nbytes,
                   PyObject *stream, BufferObject *root, PyObject *owner)
{
    BufferObject *self = (BufferObject *)acc_alloc(st->buffer_type);

    if (self == NULL) {
        return NULL;
    }
    self->device = device;
    self->ptr = ptr;
    self->nbytes = nbytes;
    self->stream = Py_NewRef(stream);
    self->root = (BufferObject *)Py_XNewRef((PyObject *)root);
    self->owner = Py_XNewRef(owner);
    return (PyObject *)self;
}

/* HostBuffer ------------------------------------------------------------- */

void *
acc_host_ptr(HostBufferObject *h)
{
    return h->ptr;
}

int
acc_host_check_open(HostBufferObject *h, const char *what)
{
    if (h->closed) {
        PyErr_Format(PyExc_ValueError, "%s on a closed HostBuffer", what);
        return -1;
    }
    return 0;
}

void
acc_host_release(HostBufferObject *self)
{
    acc_host_block *h = self->h;

    if (h == NULL || self->busy > 0) {
        return;
    }
    self->h = NULL;
    Py_BEGIN_ALLOW_THREADS
    acc_host_free(h);
    Py_END_ALLOW_THREADS
}

void
acc_host_enter(HostBufferObject *h)
{
    h->busy++;
    Py_INCREF((PyObject *)h);
}

void
acc_host_leave(HostBufferObject *h)
{
    h->busy--;
    if (h->closed && h->busy == 0) {
        acc_host_release(h);
    }
    Py_DECREF((PyObject *)h);
}
