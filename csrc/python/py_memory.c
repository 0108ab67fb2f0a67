/*
 * py_memory.c - the allocator's statistics and controls, for
 * accelerator.memory (torch.accelerator.memory's family).  The public
 * functions are Python (accelerator/memory.py); these are the private
 * primitives they call.
 */
#include "pyaccel.h"

#include <stdio.h>

static const char *const stat_types[ACC_STAT_TYPES] = {
    "all", "small_pool", "large_pool",
};

static int
put(PyObject *dict, const char *key, long long value)
{
    PyObject *item = PyLong_FromLongLong(value);
    int rc;

    if (item == NULL) {
        return -1;
    }
    rc = PyDict_SetItemString(dict, key, item);
    Py_DECREF(item);
    return rc;
}

/* name.{all,small_pool,large_pool}.{current,peak,allocated,freed} */
static int
put_array(PyObject *dict, const char *name, const acc_stat *array)
{
    char key[96];

    for (int t = 0; t < ACC_STAT_TYPES; t++) {
        const acc_stat *s = &array[t];
        const char *field[4] = {"current", "peak", "allocated", "freed"};
        long long value[4] = {s->current, s->peak, s->allocated, s->freed};

        for (int f = 0; f < 4; f++) {
            snprintf(key, sizeof(key), "%s.%s.%s", name, stat_types[t],
                     field[f]);
            if (put(dict, key, value[f]) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* name.{current,peak,allocated,freed}, all zero (see below). */
static int
put_zero_stat(PyObject *dict, const char *name)
{
    const char *field[4] = {"current", "peak", "allocated", "freed"};
    char key[96];

    for (int f = 0; f < 4; f++) {
        snprintf(key, sizeof(key), "%s.%s", name, field[f]);
        if (put(dict, key, 0) < 0) {
            return -1;
        }
    }
    return 0;
}

static PyObject *
stats_dict(const acc_mem_stats *s)
{
    PyObject *dict = PyDict_New();

    if (dict == NULL) {
        return NULL;
    }
    if (put_array(dict, "allocation", s->allocation) < 0
        || put_array(dict, "segment", s->segment) < 0
        || put_array(dict, "active", s->active) < 0
        || put_array(dict, "inactive_split", s->inactive_split) < 0
        || put_array(dict, "allocated_bytes", s->allocated_bytes) < 0
        || put_array(dict, "reserved_bytes", s->reserved_bytes) < 0
        || put_array(dict, "active_bytes", s->active_bytes) < 0
        || put_array(dict, "inactive_split_bytes",
                     s->inactive_split_bytes) < 0
        || put_array(dict, "requested_bytes", s->requested_bytes) < 0
        || put(dict, "num_alloc_retries", s->num_alloc_retries) < 0
        || put(dict, "num_ooms", s->num_ooms) < 0
        || put(dict, "num_sync_all_streams", s->num_sync_all_streams) < 0
        || put(dict, "num_device_alloc", s->num_device_alloc) < 0
        || put(dict, "num_device_free", s->num_device_free) < 0
        /* torch's max_split_size option is not offered: no block is
         * "oversize", and the size limit is unset (-1), as torch shows
         * when the option is not given. */
        || put(dict, "max_split_size", -1) < 0
        || put_zero_stat(dict, "oversize_allocations") < 0
        || put_zero_stat(dict, "oversize_segments") < 0) {
        Py_DECREF(dict);
        return NULL;
    }
    return dict;
}

PyDoc_STRVAR(memory_stats_doc,
"_memory_stats($module, device=None, /)\n--\n\n"
"The allocator's statistics for device as a flat dict with torch's keys\n"
"(unsorted); empty before this process allocated any device memory.");

static PyObject *
memory_stats(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    acc_mem_stats stats;
    acc_error err;
    int device;

    if (acc_optional_device(st, args, nargs, "memory_stats()", &device) < 0) {
        return NULL;
    }
    if (!acc_allocator_used()) {
        return PyDict_New();
    }
    if (acc_memory_stats(device, &stats, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    return stats_dict(&stats);
}

typedef acc_status (*device_action)(int device, acc_error *err);

static PyObject *
on_device(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
          const char *name, device_action action)
{
    acc_state *st = acc_module_state(module);
    acc_error err;
    int device;

    if (acc_optional_device(st, args, nargs, name, &device) < 0) {
        return NULL;
    }
    if (action(device, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(reset_peak_doc,
"_reset_peak_memory_stats($module, device=None, /)\n--\n\n"
"Set every peak statistic of device to its current value.");

static PyObject *
reset_peak(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return on_device(module, args, nargs, "reset_peak_memory_stats()",
                     acc_reset_peak_memory_stats);
}

PyDoc_STRVAR(reset_accumulated_doc,
"_reset_accumulated_memory_stats($module, device=None, /)\n--\n\n"
"Zero the allocated/freed totals and the event counters of device.");

static PyObject *
reset_accumulated(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return on_device(module, args, nargs, "reset_accumulated_memory_stats()",
                     acc_reset_accumulated_memory_stats);
}

PyDoc_STRVAR(set_fraction_doc,
"_set_per_process_memory_fraction($module, fraction, device=None, /)\n"
"--\n\n"
"Cap what this process may reserve on device at fraction of its memory.");

static PyObject *
set_fraction(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *const names[] = {"fraction", "device", NULL};
    static const acc_params params = {"set_per_process_memory_fraction()",
                                      names, 2, 1, 2};
    PyObject *values[2] = {NULL, Py_None};
    acc_state *st = acc_module_state(module);
    acc_error err;
    acc_status status;
    double fraction;
    int device;

    if (acc_parse_args(args, nargs, NULL, &params, values) < 0) {
        return NULL;
    }
    if (!PyFloat_Check(values[0])) {
        PyErr_Format(PyExc_TypeError, "Invalid type for fraction argument, "
                     "must be `float`, got %.100s", acc_type_name(values[0]));
        return NULL;
    }
    fraction = PyFloat_AsDouble(values[0]);
    if (acc_optional_device(st, values + 1, 1,
                            "set_per_process_memory_fraction()", &device)
        < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_set_memory_fraction(device, fraction, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(device_index_of_doc,
"_device_index_of($module, device=None, /)\n--\n\n"
"The index a device argument names (None: the current device).");

static PyObject *
device_index_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int device;

    if (acc_optional_device(acc_module_state(module), args, nargs,
                            "_device_index_of()", &device) < 0) {
        return NULL;
    }
    return PyLong_FromLong(device);
}

PyDoc_STRVAR(allocator_doc,
"_allocator($module, /)\n--\n\n"
"'caching', or 'direct' with ACCELERATOR_ALLOCATOR=direct.");

static PyObject *
allocator(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    acc_ensure_probed();
    return PyUnicode_FromString(acc_allocator_direct() ? "direct"
                                                       : "caching");
}

PyMethodDef acc_memory_methods[] = {
    {"_memory_stats", (PyCFunction)(void (*)(void))memory_stats,
     METH_FASTCALL, memory_stats_doc},
    {"_reset_peak_memory_stats", (PyCFunction)(void (*)(void))reset_peak,
     METH_FASTCALL, reset_peak_doc},
    {"_reset_accumulated_memory_stats",
     (PyCFunction)(void (*)(void))reset_accumulated, METH_FASTCALL,
     reset_accumulated_doc},
    {"_set_per_process_memory_fraction",
     (PyCFunction)(void (*)(void))set_fraction, METH_FASTCALL,
     set_fraction_doc},
    {"_allocator", allocator, METH_NOARGS, allocator_doc},
    {"_device_index_of", (PyCFunction)(void (*)(void))device_index_of,
     METH_FASTCALL, device_index_of_doc},
    {NULL, NULL, 0, NULL},
};
