"""Kernels from source: which compiler library, and the compile cache.

``Module(code, format="cuda-c++")`` (or ``"hip-c++"``) calls :func:`build`
here: it finds the compiler library (``ACCELERATOR_NVRTC_LIBRARY`` or
``ACCELERATOR_HIPRTC_LIBRARY``, else the default search), asks the backend
who compiles for the device (compiler, version, target, library), looks
the result up in the compile cache (:mod:`accelerator._kernel_cache`) and
compiles only on a miss.  The C extension compiles (``_compile``, with the
GIL released) and loads what this returns.
"""
from __future__ import annotations

import glob
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import NamedTuple

from . import _accelerator, _kernel_cache


class _Compiler(NamedTuple):
    variable: str          # the environment variable that names it
    what: str              # for messages
    install: str           # how to get one


_COMPILERS = {
    "cuda-c++": _Compiler("ACCELERATOR_NVRTC_LIBRARY", "NVRTC",
                          "install the CUDA toolkit, or `pip install "
                          "nvidia-cuda-nvrtc`"),
    "hip-c++": _Compiler("ACCELERATOR_HIPRTC_LIBRARY", "hiprtc",
                         "install ROCm's hiprtc (Debian: libamdhip64-5, "
                         "which holds it in ROCm 5)"),
}

#: What the places of the default search are called, in messages.
_TOOLKIT, _WHEEL, _SYSTEM = "the CUDA toolkit's", "the PyPI wheel's", \
    "the system's"


def _newest_first(paths: list[str]) -> list[str]:
    """Each file once (by its real path: the toolkit links its folders),
    the highest soname version first, the same order in every process."""
    def version(path: str) -> tuple[tuple[int, ...], str]:
        tail = os.path.basename(path).partition(".so")[2]
        return tuple(int(p) for p in tail.split(".") if p.isdigit()), path
    real = {os.path.realpath(p) for p in paths}
    return sorted(real, key=version, reverse=True)


def _files(folders: Sequence[str], pattern: str) -> list[str]:
    found = []
    for folder in folders:
        for path in glob.glob(os.path.join(folder, pattern)):
            name = os.path.basename(path)
            if "builtins" not in name and ".alt." not in name:
                found.append(path)
    return _newest_first(found)


def _site_folders() -> list[str]:
    folders = list(sys.path)
    try:
        folders += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:        # a virtualenv's old site.py
        pass
    return [f for f in dict.fromkeys(folders) if f and os.path.isdir(f)]


def _nvrtc_places() -> list[tuple[str, list[str]]]:
    homes = [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    homes += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    toolkit = [os.path.join(h, lib) for h in dict.fromkeys(homes) if h
               for lib in ("lib64", "lib", "targets/x86_64-linux/lib")]
    wheels = [os.path.join(s, "nvidia", sub, "lib") for s in _site_folders()
              for sub in ("cuda_nvrtc", "cu13", "cu12")]
    return [
        (_TOOLKIT, _files(toolkit, "libnvrtc.so*")),
        (_WHEEL, _files(wheels, "libnvrtc.so*")),
        (_SYSTEM, ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
                   "libnvrtc.so"]),
    ]


def _hiprtc_places() -> list[tuple[str, list[str]]]:
    rocm = [os.environ.get("ROCM_PATH", "")] + sorted(
        glob.glob("/opt/rocm*"), reverse=True)
    rocm_libs = [os.path.join(r, "lib") for r in rocm if r]
    system = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
    return [
        ("ROCm's", _files(rocm_libs, "libhiprtc.so*")
         + _files(rocm_libs, "libamdhip64.so*")),
        # ROCm 5 keeps hiprtc inside the HIP runtime: by its path, so that
        # the HIP runtime test double (the same soname) is not taken.
        (_SYSTEM, _files(system, "libhiprtc.so*")
         + _files(system, "libamdhip64.so*")
         + ["libhiprtc.so.6", "libhiprtc.so.5", "libhiprtc.so"]),
    ]


def _places(fmt: str) -> list[tuple[str, list[str]]]:
    return _nvrtc_places() if fmt == "cuda-c++" else _hiprtc_places()


#: (format, the variable's value, device) -> (library, id): the search
#: runs once per process for each (a hit then costs no file system walk)
_found: dict[tuple[str, str, int], tuple[str, str]] = {}


def _compiler_for(fmt: str, device: int) -> tuple[str, str]:
    """(library, id): the first library of the search that compiles fmt for
    device, and who it is; RuntimeError naming every place tried."""
    named = os.environ.get(_COMPILERS[fmt].variable, "")
    found = _found.get((fmt, named, device))
    if found is None:
        found = _found[fmt, named, device] = _search(fmt, named, device)
    return found


def _search(fmt: str, named: str, device: int) -> tuple[str, str]:
    compiler = _COMPILERS[fmt]
    if named:
        try:
            return named, _accelerator._compiler_id(fmt, named, device)
        except KeyError as e:
            raise RuntimeError(
                f"{compiler.variable}={named!r} names no usable "
                f"{compiler.what}: {e.args[0]}") from None
    tried: list[str] = [f"{compiler.variable} is unset"]
    for place, libraries in _places(fmt):
        reasons = []
        for library in libraries:
            try:
                return library, _accelerator._compiler_id(fmt, library,
                                                          device)
            except KeyError as e:
                reasons.append(str(e.args[0]))
        tried.append(f"{place}: " + ("; ".join(reasons) if reasons
                                     else "none installed"))
    raise RuntimeError(
        f"no {compiler.what} found to compile {fmt} source: "
        + "; ".join(tried) + f". {compiler.install[0].upper()}"
        f"{compiler.install[1:]}, or name the library in "
        f"{compiler.variable}")


def _strings(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split()) if what == "options" else (value,)
    if isinstance(value, (bytes, bytearray)) or not isinstance(
            value, Sequence):
        raise TypeError(f"Module(): {what} must be a str or a sequence of "
                        f"str, not {type(value).__name__}")
    items = tuple(value)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"Module(): {what} must hold only str, not "
                            f"{type(item).__name__} (item {i})")
        if "\0" in item:
            raise ValueError(f"Module(): {what} item {i} holds a NUL "
                             "character, expected text without NUL "
                             "characters")
        if not item.strip():      # the compilers word it badly
            raise ValueError(f"Module(): {what} item {i} is empty, expected "
                             + ("a kernel's C++ name ('saxpy<float>')"
                                if what == "name_expressions"
                                else "a compiler option ('-DN=4')"))
    if len(set(items)) != len(items) and what == "name_expressions":
        raise ValueError("Module(): name_expressions holds a name twice")
    return items


def build(source: bytes, fmt: str, options: object, names: object,
          device: int) -> tuple[bytes, str, dict[str, str]]:
    """(code, format of code, {name expression: symbol}) for source of fmt
    on device, from the cache or the compiler."""
    opts = _strings(options, "options")
    exprs = _strings(names, "name_expressions")
    library, ident = _compiler_for(fmt, device)
    key = _kernel_cache.key(fmt, ident, opts, exprs, source)
    hit = _kernel_cache.load(key)
    if hit is not None:
        code, code_format, lowered = hit
        if set(lowered) == set(exprs):
            return code, code_format, lowered
    code, code_format, symbols, _log = _accelerator._compile(
        fmt, library, device, source, opts, exprs)
    missing = [e for e, s in zip(exprs, symbols) if s is None]
    if missing:
        raise ValueError(f"Module(): the compiler lowered no symbol for the "
                         f"name expressions {missing} (is each a kernel's "
                         "name, with its template arguments?)")
    lowered = {e: s for e, s in zip(exprs, symbols) if s is not None}
    _kernel_cache.store(key, code, code_format, lowered)
    return code, code_format, lowered


# OpenCL C for a backend that loads SPIR-V only (Level Zero) --------------

#: clang and llvm-spirv of one LLVM version make SPIR-V from OpenCL C
#: (Debian: clang-15, llvm-spirv-15); the newest pair found is used.
_LLVM_VERSIONS = tuple(range(20, 13, -1))
_offline: dict[str, tuple[list[str], list[str], str]] = {}


def _offline_compiler() -> tuple[list[str], list[str], str]:
    """(clang command, llvm-spirv command, who they are); RuntimeError
    naming what was looked for when no pair is installed."""
    if "found" in _offline:
        return _offline["found"]
    pairs = [(f"clang-{v}", f"llvm-spirv-{v}") for v in _LLVM_VERSIONS]
    pairs.append(("clang", "llvm-spirv"))
    for clang, spirv in pairs:
        clang_path, spirv_path = shutil.which(clang), shutil.which(spirv)
        if clang_path and spirv_path:
            try:
                version = subprocess.run(
                    [clang_path, "--version"], capture_output=True,
                    text=True, timeout=60).stdout.splitlines()[:1]
            except (OSError, subprocess.SubprocessError):
                continue
            found = ([clang_path], [spirv_path],
                     f"{' '.join(version)} {clang_path} {spirv_path}")
            _offline["found"] = found
            return found
    raise RuntimeError(
        "the backend loads SPIR-V, not OpenCL C, and no offline compiler "
        "was found to make SPIR-V of it: looked for clang and llvm-spirv of "
        f"one LLVM version ({', '.join(c for c, _ in pairs)} with the "
        "llvm-spirv of the same suffix) on PATH. Install them (Debian: "
        "clang-15 llvm-spirv-15), or compile ahead with Intel's ocloc "
        "(ocloc compile -spv_only) and pass the SPIR-V with format='spirv'")


def build_spirv(source: bytes, fmt: str, options: object, names: object,
                device: int) -> tuple[bytes, str, dict[str, str]]:
    """SPIR-V for OpenCL C source, from the cache or clang then llvm-spirv;
    a BuildError with clang's log when it refuses the source."""
    from . import BuildError
    opts = _strings(options, "options")
    clang, spirv, ident = _offline_compiler()
    key = _kernel_cache.key(fmt, "offline " + ident, opts, (), source)
    hit = _kernel_cache.load(key)
    if hit is not None and hit[1] == "spirv":
        return hit[0], "spirv", {}
    with tempfile.TemporaryDirectory(prefix="accelerator-ocl-") as work:
        # Relative names: the log says kernel.cl:3:5, not a temporary path.
        cl, bc, spv = "kernel.cl", "kernel.bc", "kernel.spv"
        with open(os.path.join(work, cl), "wb") as f:
            f.write(source)
        for command, what in (
                (clang + ["-c", "-target", "spir64", "-O2", "-emit-llvm",
                          "-cl-std=CL1.2", *opts, "-o", bc, cl], "clang"),
                (spirv + [bc, "-o", spv], "llvm-spirv")):
            done = subprocess.run(command, capture_output=True, text=True,
                                  errors="replace", cwd=work, timeout=600)
            if done.returncode != 0:
                log = (done.stderr + done.stdout).strip() or None
                error = BuildError(
                    f"{what} failed to make SPIR-V of the OpenCL C source "
                    f"(exit status {done.returncode})"
                    + (f"; its log says:\n{log}" if log else ""))
                error.log = log
                error.api = what
                raise error
        with open(os.path.join(work, spv), "rb") as f:
            code = f.read()
    _kernel_cache.store(key, code, "spirv", {})
    return code, "spirv", {}
