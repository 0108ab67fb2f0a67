"""The HIP backend's folder (hip/, copied from csrc/backends/hip/) and
entry.c, built against the installed accelerator's header alone, as
accelerator_plugin_hip/_backend, the plugin named plugin_hip."""
import glob

import accelerator
from setuptools import Extension, setup

setup(
    ext_modules=[Extension(
        "accelerator_plugin_hip._backend",
        sources=sorted(glob.glob("hip/*.c")) + ["entry.c"],
        include_dirs=[accelerator.get_include(), "hip"],
        # Its own name and device type: no built-in backend has them.
        define_macros=[("ACC_HIP_NAME", '"plugin_hip"')],
        extra_compile_args=["-std=gnu11", "-fvisibility=hidden", "-Wall",
                            "-Wextra", "-Werror",
                            "-Wno-missing-field-initializers"],
        py_limited_api=True,
    )],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
