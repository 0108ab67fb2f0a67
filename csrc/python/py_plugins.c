/*
 * py_plugins.c - the probe's Python side: before the first probe, the
 * backend plugins that installed distributions declare (the
 * accelerator.backends entry points, listed by accelerator._plugins) are
 * handed to the core, which cannot call Python itself.  Import lists
 * nothing; the first call that probes does, once per process: whichever
 * thread or interpreter gets there first offers the list, and the core
 * takes the first offer only.
 */
#include "pyaccel.h"

#include <limits.h>
#include <string.h>

#define HELPER "accelerator._plugins"

/* The text of item (a str, or None: NULL), or -1 with an exception. */
static int
text_of(PyObject *item, const char **out)
{
    Py_ssize_t size;

    *out = NULL;
    if (item == Py_None) {
        return 0;
    }
    if (!PyUnicode_Check(item)) {
        PyErr_SetString(PyExc_TypeError, HELPER ".discover() gave "
                        "something other than a str or None for a text");
        return -1;
    }
    *out = PyUnicode_AsUTF8AndSize(item, &size);
    if (*out == NULL) {
        return -1;
    }
    if ((size_t)size != strlen(*out)) {
        PyErr_SetString(PyExc_ValueError, HELPER ".discover() gave a text "
                        "with a NUL character");
        return -1;
    }
    return 0;
}

/* Offer what accelerator._plugins.discover() finds; -1 with an
 * exception when it fails. */
static int
offer_found(void)
{
    acc_plugin_source *sources = NULL;
    PyObject *helper, *found;
    Py_ssize_t n;
    int rc = -1;

    helper = PyImport_ImportModule(HELPER);
    if (helper == NULL) {
        return -1;
    }
    found = PyObject_CallMethod(helper, "discover", NULL);
    Py_DECREF(helper);
    if (found == NULL) {
        return -1;
    }
    if (!PyList_Check(found)) {
        PyErr_SetString(PyExc_TypeError, HELPER ".discover() gave "
                        "something other than a list");
        goto done;
    }
    /* Every one: past the most the core loads, each is refused in its
     * turn, with that reason, rather than dropped in silence. */
    n = PyList_Size(found);
    if (n > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, HELPER ".discover() gave too "
                        "many entry points");
        goto done;
    }
    sources = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(*sources));
    if (sources == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GetItem(found, i);
        acc_plugin_source *s = &sources[i];

        if (!PyTuple_Check(item) || PyTuple_Size(item) != 4) {
            PyErr_SetString(PyExc_TypeError, HELPER ".discover() gave an "
                            "item that is not a (label, path, origin, "
                            "error) tuple");
            goto done;
        }
        if (text_of(PyTuple_GetItem(item, 0), &s->label) < 0
            || text_of(PyTuple_GetItem(item, 1), &s->path) < 0
            || text_of(PyTuple_GetItem(item, 2), &s->origin) < 0
            || text_of(PyTuple_GetItem(item, 3), &s->error) < 0) {
            goto done;
        }
        if (s->origin == NULL) {
            s->origin = "an entry point";
        }
    }
    /* The texts live in found's strings until the core copied them. */
    if (acc_plugins_offer(sources, (int)n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    rc = 0;
done:
    PyMem_Free(sources);
    Py_DECREF(found);
    return rc;
}

/* When the entry points cannot be listed at all, the report says why, as
 * a refused plugin: the probe goes on without them. */
static void
offer_failure(void)
{
    PyObject *type, *value, *traceback, *name = NULL, *text = NULL;
    acc_plugin_source source = {
        .path = NULL,
        .label = "entry points",
        .origin = "the " HELPER " module",
        .error = "the accelerator.backends entry points could not be "
                 "listed",
    };
    char why[400];

    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (type != NULL && value != NULL) {
        name = PyType_GetName((PyTypeObject *)type);
        text = name ? PyUnicode_FromFormat("%U: %S", name, value) : NULL;
    }
    if (text != NULL) {
        const char *detail = PyUnicode_AsUTF8AndSize(text, NULL);

        if (detail != NULL) {
            PyOS_snprintf(why, sizeof(why), "%s: %.300s", source.error,
                          detail);
            source.error = why;
        }
    }
    Py_XDECREF(name);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    PyErr_Clear();
    acc_plugins_offer(&source, 1);
}

void
acc_offer_plugins(void)
{
    PyObject *type, *value, *traceback;

    if (acc_plugins_offered()) {
        return;
    }
    /* A caller may probe with an exception set: keep it. */
    PyErr_Fetch(&type, &value, &traceback);
    if (offer_found() < 0) {
        offer_failure();
    }
    PyErr_Restore(type, value, traceback);
}

void
acc_ensure_probed(void)
{
    if (acc_probed()) {
        return;
    }
    acc_offer_plugins();
    Py_BEGIN_ALLOW_THREADS
    acc_probe();
    Py_END_ALLOW_THREADS
}
