"""Build the accelerator._accelerator extension from csrc/.

It links nothing but libc, libdl and pthread: the drivers (libcuda.so.1,
libze_loader.so.1, libamdhip64.so.5, libOpenCL.so.1) are opened at run
time, so no GPU SDK is needed.
"""
import glob
import os

from setuptools import Extension, setup

WARNINGS = ["-Wall", "-Wextra", "-Wno-missing-field-initializers"]
if os.environ.get("ACCELERATOR_WERROR") == "1":
    WARNINGS.append("-Werror")

# The stable ABI of Python 3.11 (abi3): one wheel for 3.11 and later.  It
# measured as fast as the full API (see bench/README.md).
LIMITED_API = "0x030B0000"

extension = Extension(
    "accelerator._accelerator",
    define_macros=[("Py_LIMITED_API", LIMITED_API)],
    py_limited_api=True,
    # A backend is one file in csrc/backends/ or one folder under it.
    sources=sorted(glob.glob("csrc/*.c") + glob.glob("csrc/backends/*.c")
                   + glob.glob("csrc/backends/*/*.c")),
    depends=sorted(glob.glob("csrc/*.h") + glob.glob("csrc/backends/*.h")
                   + glob.glob("csrc/backends/*/*.h")),
    libraries=["dl", "pthread"],
    # Hidden by default: the module exports PyInit__accelerator alone (its
    # PyMODINIT_FUNC says so), not the core's acc_* symbols, which would
    # clash with other libraries' in the global namespace.
    extra_compile_args=["-std=gnu11", "-fvisibility=hidden", *WARNINGS]
    + os.environ.get("ACCELERATOR_CFLAGS", "").split(),
    extra_link_args=os.environ.get("ACCELERATOR_LDFLAGS", "").split(),
)

setup(
    ext_modules=[extension],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
