"""Build the accelerator._accelerator extension from csrc/.

It links nothing but libc, libdl and pthread: the drivers (libcuda.so.1,
libze_loader.so.1, libamdhip64.so.5, libOpenCL.so.1) are opened at run
time, so no GPU SDK is needed.
"""
import glob
import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

WARNINGS = ["-Wall", "-Wextra", "-Wno-missing-field-initializers"]
if os.environ.get("ACCELERATOR_WERROR") == "1":
    WARNINGS.append("-Werror")

# The stable ABI of Python 3.11 (abi3): one wheel for 3.11 and later.  It
# measured as fast as the full API (see bench/README.md).
LIMITED_API = "0x030B0000"

# The folders of csrc/ are the layers (docs/internals.rst), from the bottom:
# a backend is one folder under csrc/backends/.
LAYERS = ["base", "backends/*", "core", "python"]

# The public headers (accelerator.get_include()): written once, here, and
# copied into the package at build time (accelerator/include/, ignored by git).
PUBLIC_INCLUDE = "csrc/include"
PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "accelerator")


def copy_headers(package: str) -> None:
    """Copy csrc/include/accelerator/*.h into package/include/accelerator/."""
    target = os.path.join(package, "include", "accelerator")
    os.makedirs(target, exist_ok=True)
    for header in sorted(glob.glob(f"{PUBLIC_INCLUDE}/accelerator/*.h")):
        shutil.copyfile(header, os.path.join(target,
                                             os.path.basename(header)))


class BuildPy(build_py):
    """The package's files, with the public headers."""

    def run(self) -> None:
        copy_headers(PACKAGE)
        super().run()
        copy_headers(os.path.join(self.build_lib, "accelerator"))


class BuildExt(build_ext):
    """Every build also places the extension and the headers beside the
    package's sources, as build_ext --inplace does: `pip install .` in a
    checkout leaves a root copy that imports, the same code as the
    installed one (python -m accelerator works from the root and from
    anywhere else)."""

    def run(self) -> None:
        super().run()
        if not self.inplace:
            self.copy_extensions_to_source()
        copy_headers(PACKAGE)


extension = Extension(
    "accelerator._accelerator",
    define_macros=[("Py_LIMITED_API", LIMITED_API)],
    py_limited_api=True,
    sources=[source for layer in LAYERS
             for source in sorted(glob.glob(f"csrc/{layer}/*.c"))],
    depends=sorted(glob.glob("csrc/**/*.h", recursive=True)),
    include_dirs=[PUBLIC_INCLUDE],
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
    cmdclass={"build_py": BuildPy, "build_ext": BuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
