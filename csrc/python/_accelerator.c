/*
 * _accelerator.c - the module accelerator._accelerator: its state, the
 * torch.accelerator-style functions, its exceptions and the registration
 * of the types.
 *
 * Multi-phase initialisation (PEP 489), module state (PEP 573) and heap
 * types (PEP 630): no static PyObject *.  The top of the Python layer:
 * the types live in py_*.c files, the helpers they and this file share in
 * py_helpers.c and py_args.c (pyaccel.h lists them all); none of those
 * calls into this file (docs/python-layer.rst).
 */
#include "pybuffer.h"

#include <stdio.h>
#include <string.h>

/* Module functions ------------------------------------------------------- */

PyDoc_STRVAR(is_available_doc,
"is_available($module, /)\n--\n\n"
"True when an accelerator backend with at least one device is usable.\n"
"Probes the drivers once; creates no context.");

static PyObject *
is_available(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    acc_ensure_probed();
    return PyBool_FromLong(acc_is_available());
}

PyDoc_STRVAR(device_count_doc,
"device_count($module, /)\n--\n\n"
"The number of devices of the current accelerator; 0 when none.");

static PyObject *
device_count(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    acc_ensure_probed();
    return PyLong_FromLong(acc_device_count());
}

PyDoc_STRVAR(current_accelerator_doc,
"current_accelerator($module, /, check_available=False)\n--\n\n"
"The accelerator in use as a device with index None (device('cuda')),\n"
"or None when there is none.  A backend is only selected when usable, so\n"
"check_available changes nothing; it is accepted for torch's API.");

static PyObject *
current_accelerator(PyObject *module, PyObject *const *args,
                    Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"check_available", NULL};
    static const acc_params params = {"current_accelerator()", names, 0, 0,
                                      1};
    acc_state *st = acc_module_state(module);
    PyObject *check = NULL;

    /* The call with no argument is a hot getter (issue #16: within 1.3x
     * of a no-op call): it needs no parser. */
    if ((nargs != 0 || kwnames != NULL)
        && acc_parse_args(args, nargs, kwnames, &params, &check) < 0) {
        return NULL;
    }
    /* check_available is any truth value, as torch's bool. */
    if (check != NULL && PyObject_IsTrue(check) < 0) {
        return NULL;
    }
    if (st->accelerator != NULL) {
        return Py_NewRef(st->accelerator);
    }
    acc_ensure_probed();
    if (!acc_is_available()) {
        Py_RETURN_NONE;
    }
    if (st->accelerator == NULL) {
        st->accelerator = acc_device_new(st, acc_device_type(), -1);
        if (st->accelerator == NULL) {
            return NULL;
        }
    }
    return Py_NewRef(st->accelerator);
}

PyDoc_STRVAR(current_device_index_doc,
"current_device_index($module, /)\n--\n\n"
"The calling thread's current device index (a new thread starts at 0).");

static PyObject *
current_device_index(PyObject *module, PyObject *unused)
{
    int device = acc_usable_current_device();

    (void)unused;
    if (device >= 0) {
        return PyLong_FromLong(device);   /* the hot path: one call */
    }
    acc_ensure_probed();
    if (acc_require_usable(acc_module_state(module)) < 0) {
        return NULL;
    }
    return PyLong_FromLong(acc_current_device());
}

PyDoc_STRVAR(set_device_index_doc,
"set_device_index($module, device, /)\n--\n\n"
"Make device the calling thread's current device.  device is an int, a\n"
"device string, a device or any object with .type and .index; a negative\n"
"int is a no-op, as in torch.");

static PyObject *
set_device_index(PyObject *module, PyObject *device)
{
    acc_state *st = acc_module_state(module);
    long long index;

    if (acc_is_index(device)) {
        int overflow;

        index = PyLong_AsLongLongAndOverflow(device, &overflow);
        if (index == -1 && PyErr_Occurred()) {
            acc_index_failed(device, "set_device_index() expected a device "
                             "or an int device index");
            return NULL;
        }
        /* Any negative int, however large, is a no-op, as in torch. */
        if (overflow < 0 || (overflow == 0 && index < 0)) {
            Py_RETURN_NONE;
        }
    }
    if (acc_resolve_device(st, device, 0, &index) < 0) {
        return NULL;
    }
    if (index < 0) {
        Py_RETURN_NONE;
    }
    acc_ensure_probed();
    if (acc_check_index(st, index) < 0
        || acc_switch_device(st, (int)index) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(synchronize_doc,
"synchronize($module, device=None, /)\n--\n\n"
"Wait for all work on device (default: the current device).  Does not\n"
"change the current device.");

static PyObject *
synchronize(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    acc_error err;
    acc_status status;
    int device;

    if (acc_optional_device(st, args, nargs, "synchronize()", &device) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_synchronize_device(device, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(current_stream_doc,
"current_stream($module, device=None, /)\n--\n\n"
"The calling thread's current stream on device (default: the current\n"
"device).  The same object on every call for the same stream.");

static PyObject *
current_stream(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    acc_stream *s;
    acc_error err;
    int device;

    if (nargs == 0) {
        acc_ensure_probed();
        if (acc_require_ready(st) < 0) {
            return NULL;
        }
        device = acc_current_device();
    }
    else if (acc_optional_device(st, args, nargs, "current_stream()", &device)
             < 0 || acc_require_ready(st) < 0) {
        return NULL;
    }
    if (acc_stream_for(device, 1, &s, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    return acc_stream_object(st, s);
}

PyDoc_STRVAR(set_stream_doc,
"set_stream($module, stream, /)\n--\n\n"
"Make stream the calling thread's current stream on its device, and its\n"
"device the current device (as torch.accelerator.set_stream).");

static PyObject *
set_stream(PyObject *module, PyObject *stream)
{
    acc_state *st = acc_module_state(module);
    acc_stream *s;
    acc_error err;

    if (!PyObject_TypeCheck(stream, st->stream_type)) {
        PyErr_Format(PyExc_TypeError, "set_stream() expected an "
                     "accelerator.Stream, got %s",
                     acc_type_name_in(st, stream));
        return NULL;
    }
    if (acc_require_usable(st) < 0) {
        return NULL;
    }
    s = acc_stream_of(stream);
    if (s->device != acc_current_device()
        && acc_switch_device(st, s->device) < 0) {
        return NULL;
    }
    if (acc_set_current_stream(s, &err) != ACC_OK) {
        return acc_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(get_memory_info_doc,
"get_memory_info($module, device=None, /)\n--\n\n"
"(free, total) device memory in bytes, for device (default: current).");

static PyObject *
get_memory_info(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    size_t free_bytes = 0, total_bytes = 0;
    acc_error err;
    acc_status status;
    int device;

    if (acc_optional_device(st, args, nargs, "get_memory_info()", &device)
        < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_memory_info(device, &free_bytes, &total_bytes, &err);
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(st, &err);
    }
    /* Sizes are unsigned: a size_t past 2**63 stays positive. */
    return Py_BuildValue("(KK)", (unsigned long long)free_bytes,
                         (unsigned long long)total_bytes);
}

static PyStructSequence_Field properties_fields[] = {
    {"name", "the device's name"},
    {"uuid", "the device's UUID, as 8-4-4-4-12 hex digits"},
    {"total_memory", "device memory in bytes"},
    {"pci_bus_id", "domain:bus:device.function, '' if unknown"},
    {"multi_processor_count",
     "streaming multiprocessors (CUDA), execution units (Level Zero) or "
     "compute units (OpenCL)"},
    {"type", "the device type: the backend's name ('cuda', 'xpu', ...)"},
    {"index", "the device index"},
    {"major", "compute capability major (CUDA), else -1"},
    {"minor", "compute capability minor (CUDA), else -1"},
    {"vendor_id", "PCI vendor id"},
    {"device_id", "PCI device id"},
    {"is_integrated", "shares memory with the host"},
    {"estimates",
     "names of the numbers that are estimates: 'free_memory' when "
     "get_memory_info() cannot read free memory and reports the total"},
    {NULL, NULL},
};

static PyStructSequence_Desc properties_desc = {
    "accelerator.DeviceProperties",
    "Static properties of one device (get_device_properties()).",
    properties_fields,
    13,
};

static PyObject *
make_properties(acc_state *st, int device, const acc_device_properties *p)
{
    PyObject *props = PyStructSequence_New(st->properties_type);
    const unsigned char *u = p->uuid;
    char uuid[40];
    PyObject *items[13];

    if (props == NULL) {
        return NULL;
    }
    snprintf(uuid, sizeof(uuid),
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4], u[5],
             u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    items[0] = acc_text(p->name, sizeof(p->name));
    items[1] = PyUnicode_FromString(uuid);
    items[2] = PyLong_FromUnsignedLongLong(p->total_memory);
    items[3] = acc_text(p->pci_bus_id, sizeof(p->pci_bus_id));
    items[4] = PyLong_FromLong(p->multi_processor_count);
    items[5] = PyUnicode_FromString(acc_device_type());
    items[6] = PyLong_FromLong(device);
    items[7] = PyLong_FromLong(p->major);
    items[8] = PyLong_FromLong(p->minor);
    items[9] = PyLong_FromUnsignedLong(p->vendor_id);
    items[10] = PyLong_FromUnsignedLong(p->device_id);
    items[11] = PyBool_FromLong(p->integrated);
    items[12] = (p->estimates & ACC_ESTIMATE_FREE_MEMORY)
                    ? Py_BuildValue("(s)", "free_memory")
                    : PyTuple_New(0);
    for (int i = 0; i < 13; i++) {
        if (items[i] == NULL) {
            for (int j = 0; j < 13; j++) {
                Py_XDECREF(items[j]);
            }
            Py_DECREF(props);
            return NULL;
        }
    }
    /* Only once all exist: SetItem steals, so a partial fill would be
     * released twice on the error path. */
    for (int i = 0; i < 13; i++) {
        PyStructSequence_SetItem(props, i, items[i]);
    }
    return props;
}

static PyObject *
properties_of(acc_state *st, int device)
{
    const acc_device_properties *p;

    if (st->properties[device] == NULL) {
        if (acc_device_facts(st, device, &p) < 0) {
            return NULL;
        }
        st->properties[device] = make_properties(st, device, p);
        if (st->properties[device] == NULL) {
            return NULL;
        }
    }
    return Py_NewRef(st->properties[device]);
}

PyDoc_STRVAR(get_device_properties_doc,
"get_device_properties($module, device=None, /)\n--\n\n"
"The DeviceProperties of device (default: current), read once.");

static PyObject *
get_device_properties(PyObject *module, PyObject *const *args,
                      Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    int device;

    if (acc_optional_device(st, args, nargs, "get_device_properties()",
                            &device) < 0) {
        return NULL;
    }
    return properties_of(st, device);
}

PyDoc_STRVAR(get_device_name_doc,
"get_device_name($module, device=None, /)\n--\n\n"
"The name of device (default: current).");

static PyObject *
get_device_name(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    PyObject *props, *name;
    int device;

    if (acc_optional_device(st, args, nargs, "get_device_name()", &device)
        < 0) {
        return NULL;
    }
    props = properties_of(st, device);
    if (props == NULL) {
        return NULL;
    }
    name = Py_NewRef(PyStructSequence_GetItem(props, 0));
    Py_DECREF(props);
    return name;
}

PyDoc_STRVAR(backends_doc,
"backends($module, /)\n--\n\n"
"One dict per known backend, in probe order: name, device_type, library,\n"
"loaded, available, selected, driver_version, device_count, reason,\n"
"counted_by (how the devices were counted: 'cuInit', 'NVML (...)'),\n"
"initialized (the driver is initialised in this process) and\n"
"processor_label (what multi_processor_count counts on its devices:\n"
"'multiprocessors', 'execution units', 'compute units'), plugin (the\n"
"shared object of a backend plugin, None for a built-in backend) and\n"
"origin ('built-in', 'ACCELERATOR_BACKEND_PLUGINS' or the entry point\n"
"that named the plugin) and refused (a plugin the core refused: the\n"
"reason says why; refused plugins follow the backends).  Probes the\n"
"backends selection did not need; creates no context.");

static PyObject *
backends(PyObject *module, PyObject *unused)
{
    PyObject *list;

    (void)module;
    (void)unused;
    acc_offer_plugins();
    Py_BEGIN_ALLOW_THREADS
    acc_probe_all();
    Py_END_ALLOW_THREADS
    list = PyList_New(0);
    if (list == NULL) {
        return NULL;
    }
    for (int i = 0; i < acc_backend_count(); i++) {
        const acc_backend_info *b = acc_backend_info_at(i);
        /* "N" steals each text; Py_BuildValue releases them on failure
         * and fails itself when one is NULL. */
        PyObject *item = Py_BuildValue(
            "{s:N, s:N, s:N, s:O, s:O, s:O, s:N, s:i, s:N, s:N, s:O, s:N, "
            "s:N, s:N, s:O}",
            "name", acc_text(b->name, 0),
            "device_type", acc_text(b->device_type, 0),
            "library", acc_text_or_none(b->library),
            "loaded", b->loaded ? Py_True : Py_False,
            "available", b->available ? Py_True : Py_False,
            "selected", b->selected ? Py_True : Py_False,
            "driver_version", b->driver_version_text[0]
                ? acc_text(b->driver_version_text,
                           sizeof(b->driver_version_text))
                : Py_NewRef(Py_None),
            "device_count", b->device_count,
            "reason", b->reason[0]
                ? acc_text(b->reason, sizeof(b->reason))
                : Py_NewRef(Py_None),
            "counted_by", b->counted_by[0]
                ? acc_text(b->counted_by, sizeof(b->counted_by))
                : Py_NewRef(Py_None),
            "initialized", b->initialized ? Py_True : Py_False,
            "processor_label", acc_text_or_none(b->processor_label),
            "plugin", acc_text_or_none(b->plugin),
            "origin", acc_text(b->origin ? b->origin : "built-in", 0),
            "refused", b->refused ? Py_True : Py_False);

        if (item == NULL || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(item);
    }
    return list;
}

PyDoc_STRVAR(visible_devices_doc,
"_visible_devices($module, /)\n--\n\n"
"The backend's indices of the devices ACCELERATOR_VISIBLE_DEVICES made\n"
"visible, in order (device i is the backend's [i]), or None when the\n"
"variable is unset or no backend is selected.  Probes once.");

static PyObject *
visible_devices(PyObject *module, PyObject *unused)
{
    const int *order;
    PyObject *list;
    int count;

    (void)module;
    (void)unused;
    acc_ensure_probed();
    if (!acc_visible_devices(&order, &count)) {
        Py_RETURN_NONE;
    }
    list = PyList_New(count);
    for (int i = 0; list != NULL && i < count; i++) {
        PyObject *item = PyLong_FromLong(order[i]);

        if (item == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, i, item);
    }
    return list;
}

PyDoc_STRVAR(probed_doc,
"_probed($module, /)\n--\n\n"
"True once the drivers were probed in this process (never probes).");

static PyObject *
probed(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(acc_probed());
}

PyDoc_STRVAR(empty_cache_doc,
"empty_cache($module, /)\n--\n\n"
"Give back to the driver the device memory the caching allocator holds\n"
"unused (every wholly free segment, once the work queued before it was\n"
"freed has completed: this synchronizes, as torch's), and the driver\n"
"streams and events kept for reuse.  Live buffers are untouched.");

static PyObject *
empty_cache(PyObject *module, PyObject *unused)
{
    acc_error err;
    acc_status status;

    (void)unused;
    if (!acc_probed()) {
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS
    status = acc_allocator_empty_cache(&err);
    acc_empty_cache();
    Py_END_ALLOW_THREADS
    if (status != ACC_OK) {
        return acc_raise(acc_module_state(module), &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(empty_host_cache_doc,
"empty_host_cache($module, /)\n--\n\n"
"Give back to the driver the page-locked host memory held for closed\n"
"HostBuffers whose queued copies have completed.  Memory still in use by\n"
"queued work stays held (it is released once that work is done, at the\n"
"next allocation or empty_cache()); this never waits for the device.\n"
"A no-op before the first use of the accelerator, as torch's.");

static PyObject *
empty_host_cache(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (!acc_probed()) {
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS
    acc_host_empty_cache();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(noop_doc,
"_noop($module, /)\n--\n\n"
"Do nothing: the baseline C call the benchmarks compare against.");

static PyObject *
noop(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"is_available", is_available, METH_NOARGS, is_available_doc},
    {"device_count", device_count, METH_NOARGS, device_count_doc},
    {"current_accelerator", (PyCFunction)(void (*)(void))current_accelerator,
     METH_FASTCALL | METH_KEYWORDS, current_accelerator_doc},
    {"current_device_index", current_device_index, METH_NOARGS,
     current_device_index_doc},
    {"set_device_index", set_device_index, METH_O, set_device_index_doc},
    {"synchronize", (PyCFunction)(void (*)(void))synchronize, METH_FASTCALL,
     synchronize_doc},
    {"current_stream", (PyCFunction)(void (*)(void))current_stream,
     METH_FASTCALL, current_stream_doc},
    {"set_stream", set_stream, METH_O, set_stream_doc},
    {"get_memory_info", (PyCFunction)(void (*)(void))get_memory_info,
     METH_FASTCALL, get_memory_info_doc},
    {"get_device_properties",
     (PyCFunction)(void (*)(void))get_device_properties, METH_FASTCALL,
     get_device_properties_doc},
    {"get_device_name", (PyCFunction)(void (*)(void))get_device_name,
     METH_FASTCALL, get_device_name_doc},
    {"backends", backends, METH_NOARGS, backends_doc},
    {"empty_cache", empty_cache, METH_NOARGS, empty_cache_doc},
    {"empty_host_cache", empty_host_cache, METH_NOARGS,
     empty_host_cache_doc},
    {"_visible_devices", visible_devices, METH_NOARGS, visible_devices_doc},
    {"_probed", probed, METH_NOARGS, probed_doc},
    {"from_dlpack", acc_from_dlpack, METH_O, acc_from_dlpack_doc},
    {"ipc_collect", acc_ipc_collect_py, METH_NOARGS,
     PyDoc_STR("ipc_collect($module, /)\n--\n\n"
               "Free the memory and events this process shared with\n"
               "others and let go of, that no process holds any more (as\n"
               "torch.cuda.ipc_collect).  It also happens at each new\n"
               "share and at empty_cache().")},
    {"_ipc_describe", acc_ipc_describe_py, METH_O,
     PyDoc_STR("_ipc_describe($module, handle, /)\n--\n\n"
               "What a handle's bytes say of it, as a dict.")},
    {"_ipc_held", acc_ipc_held_py, METH_NOARGS,
     PyDoc_STR("_ipc_held($module, /)\n--\n\n"
               "This process's sharing books: shared blocks, bytes and\n"
               "events waiting for consumers, and imports open here.")},
    {"_noop", noop, METH_NOARGS, noop_doc},
    {NULL, NULL, 0, NULL},
};

/* Module ----------------------------------------------------------------- */

PyDoc_STRVAR(accelerator_error_doc,
"A driver or runtime failure.  Attributes: backend (the device type of\n"
"the backend that failed, as backends() names it, or None), api (the\n"
"driver function, or None), code (the driver's code, or None) and\n"
"error_name (the driver's name for code, or None).");

PyDoc_STRVAR(oom_error_doc,
"The device ran out of memory (an AcceleratorError).");

PyDoc_STRVAR(build_error_doc,
"Device code that the driver failed to build (an AcceleratorError).\n"
"log is the driver's build log (a str), or None when it gave none.");

PyDoc_STRVAR(index_error_doc,
"A device index outside [0, device_count()).  It is an IndexError, a\n"
"ValueError (a bad argument) and a RuntimeError (what torch raises).");

static int
add_type(PyObject *module, PyType_Spec *spec, PyObject *base,
         PyTypeObject **slot)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, base);

    if (type == NULL) {
        return -1;
    }
    *slot = (PyTypeObject *)type;
    return PyModule_AddType(module, *slot);
}

static PyObject *
new_error(PyObject *module, const char *name, const char *doc,
          PyObject *bases)
{
    PyObject *dict = Py_BuildValue("{s:O, s:O, s:O, s:O}", "backend",
                                   Py_None, "api", Py_None, "code", Py_None,
                                   "error_name", Py_None);
    PyObject *cls;

    if (dict == NULL) {
        return NULL;
    }
    cls = PyErr_NewExceptionWithDoc(name, doc, bases, dict);
    Py_DECREF(dict);
    if (cls != NULL && PyModule_AddObjectRef(module, name + 12, cls) < 0) {
        Py_CLEAR(cls);
    }
    return cls;
}

/* Module instances made so far in this process (not a Python object). */
static _Atomic unsigned long long instances;

static int
module_exec(PyObject *module)
{
    acc_state *st = acc_module_state(module);
    PyObject *bases;

    st->instance = ++instances;
    /* Once per process: Py_AtExit functions run at the end of the
     * interpreter's finalisation, before exit() runs the C and C++ exit
     * handlers of the loaded libraries. */
    if (st->instance == 1 && Py_AtExit(acc_exit_wait_for_probes) < 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot register the exit "
                        "handler that waits for driver probes");
        return -1;
    }
    st->stream_wrappers = PyDict_New();
    if (st->stream_wrappers == NULL) {
        return -1;
    }

    if (add_type(module, &acc_device_spec, NULL, &st->device_type) < 0
        || add_type(module, &acc_stream_spec, NULL, &st->stream_type) < 0
        || add_type(module, &acc_event_spec, NULL, &st->event_type) < 0
        || add_type(module, &acc_device_index_spec, NULL,
                    &st->device_index_type) < 0
        || add_type(module, &acc_buffer_spec, NULL, &st->buffer_type) < 0
        || add_type(module, &acc_host_buffer_spec, NULL,
                    &st->host_buffer_type) < 0
        || add_type(module, &acc_graph_spec, NULL, &st->graph_type) < 0
        || add_type(module, &acc_module_spec, NULL, &st->module_type) < 0
        || add_type(module, &acc_kernel_spec, NULL, &st->kernel_type) < 0) {
        return -1;
    }
    st->properties_type = PyStructSequence_NewType(&properties_desc);
    if (st->properties_type == NULL
        || PyModule_AddType(module, st->properties_type) < 0) {
        return -1;
    }
    st->AcceleratorError = new_error(module, "accelerator.AcceleratorError",
                                     accelerator_error_doc,
                                     PyExc_RuntimeError);
    if (st->AcceleratorError == NULL) {
        return -1;
    }
    st->OutOfMemoryError = new_error(module, "accelerator.OutOfMemoryError",
                                     oom_error_doc, st->AcceleratorError);
    if (st->OutOfMemoryError == NULL) {
        return -1;
    }
    st->BuildError = new_error(module, "accelerator.BuildError",
                               build_error_doc, st->AcceleratorError);
    if (st->BuildError == NULL
        || PyObject_SetAttrString(st->BuildError, "log", Py_None) < 0) {
        return -1;
    }
    bases = PyTuple_Pack(3, PyExc_IndexError, PyExc_ValueError,
                         PyExc_RuntimeError);
    if (bases == NULL) {
        return -1;
    }
    st->DeviceIndexError = new_error(module, "accelerator.DeviceIndexError",
                                     index_error_doc, bases);
    Py_DECREF(bases);
    if (st->DeviceIndexError == NULL) {
        return -1;
    }
    st->str_type = PyUnicode_InternFromString("type");
    st->str_index = PyUnicode_InternFromString("index");
    st->str_cuda_stream = PyUnicode_InternFromString("__cuda_stream__");
    if (st->str_type == NULL || st->str_index == NULL
        || st->str_cuda_stream == NULL) {
        return -1;
    }
    st->device_cache = PyDict_New();
    if (st->device_cache == NULL) {
        return -1;
    }
    if (PyModule_AddFunctions(module, acc_capability_methods) < 0) {
        return -1;
    }
    if (PyModule_AddFunctions(module, acc_memory_methods) < 0
        || PyModule_AddFunctions(module, acc_kernel_methods) < 0
        || PyModule_AddFunctions(module, acc_compile_methods) < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "MAX_DEVICES", ACC_MAX_DEVICES);
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    acc_state *st = acc_module_state(module);

    Py_VISIT(st->stream_wrappers);
    Py_VISIT(st->device_type);
    Py_VISIT(st->stream_type);
    Py_VISIT(st->event_type);
    Py_VISIT(st->device_index_type);
    Py_VISIT(st->properties_type);
    Py_VISIT(st->buffer_type);
    Py_VISIT(st->host_buffer_type);
    Py_VISIT(st->graph_type);
    Py_VISIT(st->AcceleratorError);
    Py_VISIT(st->OutOfMemoryError);
    Py_VISIT(st->BuildError);
    Py_VISIT(st->module_type);
    Py_VISIT(st->kernel_type);
    Py_VISIT(st->DeviceIndexError);
    Py_VISIT(st->accelerator);
    Py_VISIT(st->device_cache);
    for (int i = 0; i < ACC_MAX_DEVICES; i++) {
        Py_VISIT(st->default_streams[i]);
        Py_VISIT(st->properties[i]);
    }
    return 0;
}

static int
module_clear(PyObject *module)
{
    acc_state *st = acc_module_state(module);

    Py_CLEAR(st->stream_wrappers);
    Py_CLEAR(st->device_type);
    Py_CLEAR(st->stream_type);
    Py_CLEAR(st->event_type);
    Py_CLEAR(st->device_index_type);
    Py_CLEAR(st->properties_type);
    Py_CLEAR(st->buffer_type);
    Py_CLEAR(st->host_buffer_type);
    Py_CLEAR(st->graph_type);
    Py_CLEAR(st->AcceleratorError);
    Py_CLEAR(st->OutOfMemoryError);
    Py_CLEAR(st->BuildError);
    Py_CLEAR(st->module_type);
    Py_CLEAR(st->kernel_type);
    Py_CLEAR(st->DeviceIndexError);
    Py_CLEAR(st->str_type);
    Py_CLEAR(st->str_index);
    Py_CLEAR(st->str_cuda_stream);
    Py_CLEAR(st->accelerator);
    Py_CLEAR(st->device_cache);
    for (int i = 0; i < ACC_MAX_DEVICES; i++) {
        Py_CLEAR(st->default_streams[i]);
        Py_CLEAR(st->properties[i]);
    }
    return 0;
}

static void
module_free(void *module)
{
    /* Every Buffer of the instance is gone (each holds its type, which
     * holds the module); releases of its foreign wrappers may still
     * wait, and could not run once its interpreter has ended. */
    acc_foreign_settle(acc_module_state((PyObject *)module));
    module_clear((PyObject *)module);
}

/* Two slots are left out on purpose (and the stable ABI of 3.11 that the
 * module is built for has neither):
 *
 * - Py_mod_multiple_interpreters (3.12): its default, "supported", lets
 *   each interpreter import its own module instance (test_isolation.py),
 *   but only interpreters that share the main GIL.  A per-interpreter
 *   GIL is not safe: the core's acc_stream.wrapper is a borrowed
 *   back-pointer to a Python object that one instance sets, reads and
 *   clears under its GIL, while the streams themselves, like all driver
 *   state (contexts, the probe, the caching allocator), are process-global
 *   and shared by every instance.
 * - Py_mod_gil (3.13): its default, "used", makes a free-threaded build
 *   turn the GIL on when the module is imported.  The Python layer relies
 *   on the GIL for the same back-pointer and for its per-instance state
 *   (default streams, the device cache), which have no locks of their
 *   own. */
static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

PyDoc_STRVAR(module_doc,
"The C extension behind the accelerator package: one device-agnostic\n"
"runtime API (torch.accelerator's) over the CUDA Driver API, Level Zero,\n"
"the HIP runtime and OpenCL.");

static PyModuleDef acc_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = acc_module_name,
    .m_doc = module_doc,
    .m_size = sizeof(acc_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__accelerator(void)
{
    return PyModuleDef_Init(&acc_module_def);
}
