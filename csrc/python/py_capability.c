/*
 * py_capability.c - get_device_capability(), as torch.accelerator's: the
 * dtypes a device supports, from what its driver reports (CUDA's compute
 * capability, Level Zero's module properties, OpenCL's extensions), and
 * the backend's own facts.  Read from the driver once per device (the
 * dispatcher caches device properties).
 */
#include "pyaccel.h"

/* The dtypes every device here holds and computes in; the others come
 * with a float type flag. */
static const char *const always[] = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float32",
    "complex64",
};

static const struct {
    unsigned flag;
    const char *name;
} with_flag[] = {
    {ACC_FLOAT_16, "float16"},
    {ACC_FLOAT_BF16, "bfloat16"},
    {ACC_FLOAT_64, "float64"},
    {ACC_FLOAT_64, "complex128"},
};

static int
add_name(PyObject *set, const char *name)
{
    PyObject *text = PyUnicode_FromString(name);
    int rc = text != NULL ? PySet_Add(set, text) : -1;

    Py_XDECREF(text);
    return rc;
}

static PyObject *
capability_dict(const acc_device_properties *p)
{
    PyObject *dtypes = PySet_New(NULL), *result = NULL, *cc;
    size_t i;

    if (dtypes == NULL) {
        return NULL;
    }
    for (i = 0; i < sizeof(always) / sizeof(always[0]); i++) {
        if (add_name(dtypes, always[i]) < 0) {
            goto done;
        }
    }
    for (i = 0; i < sizeof(with_flag) / sizeof(with_flag[0]); i++) {
        if ((p->float_types & with_flag[i].flag)
            && add_name(dtypes, with_flag[i].name) < 0) {
            goto done;
        }
    }
    result = Py_BuildValue("{s:O}", "supported_dtypes", dtypes);
    if (result != NULL && p->major >= 0) {
        /* The compute capability (CUDA; HIP reports its gfx version), as
         * torch.cuda's (major, minor). */
        cc = Py_BuildValue("(ii)", p->major, p->minor);
        if (cc == NULL
            || PyDict_SetItemString(result, "compute_capability", cc) < 0) {
            Py_CLEAR(result);
        }
        Py_XDECREF(cc);
    }
done:
    Py_DECREF(dtypes);
    return result;
}

PyDoc_STRVAR(get_device_capability_doc,
"get_device_capability($module, device=None, /)\n--\n\n"
"What device (default: current) supports, as torch.accelerator's: a dict\n"
"whose 'supported_dtypes' is the set of dtype names (torch's: 'float16',\n"
"'bfloat16', 'float64' ...) the device computes in, as its driver\n"
"reports (CUDA: compute capability, half from 5.3, bfloat16 from 8.0;\n"
"Level Zero: the module properties' FP16/FP64 flags; OpenCL: the\n"
"cl_khr_fp16/cl_khr_fp64 extensions; HIP: the gfx version, half and\n"
"double always, bfloat16 from gfx9), plus 'compute_capability'\n"
"(major, minor) on CUDA and HIP (the gfx version there).  Read from the\n"
"driver once per device.");

static PyObject *
get_device_capability(PyObject *module, PyObject *const *args,
                      Py_ssize_t nargs)
{
    acc_state *st = acc_module_state(module);
    const acc_device_properties *p;
    int device;

    if (acc_optional_device(st, args, nargs, "get_device_capability()",
                            &device) < 0
        || acc_device_facts(st, device, &p) < 0) {
        return NULL;
    }
    return capability_dict(p);
}

PyMethodDef acc_capability_methods[] = {
    {"get_device_capability",
     (PyCFunction)(void (*)(void))get_device_capability, METH_FASTCALL,
     get_device_capability_doc},
    {NULL, NULL, 0, NULL},
};
