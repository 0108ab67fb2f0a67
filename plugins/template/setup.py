"""Build backend.c into accelerator_template/_backend (a plain shared
object: it exports accelerator_backend_plugin, and no Python symbol),
against the header of the installed accelerator."""
import accelerator
from setuptools import Extension, setup

setup(
    ext_modules=[Extension(
        "accelerator_template._backend",
        sources=["backend.c"],
        include_dirs=[accelerator.get_include()],
        extra_compile_args=["-std=gnu11", "-fvisibility=hidden", "-Wall",
                            "-Wextra"],
        # Nothing of Python is used: one wheel serves every CPython.
        py_limited_api=True,
    )],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
