#!/usr/bin/env python3
"""The NVRTC step of bench/gpu_check.sh: CUDA C++ compiled at run time.

    python bench/nvrtc_check.py [--double] [--markdown OUT.md]

saxpy (tests/kernel_code.py's CUDA C++) is compiled by NVRTC (libnvrtc,
through ctypes: no Python package needed) twice, to PTX for the device's
compute capability and to a cubin for its SM, and each is loaded with
accelerator.Module, launched on 2**20 floats and checked against numpy.
One line per form; exit status 1 when a form failed.

--double (gpu_check.sh's dry run on the CUDA driver double): the double
reads PTX and cubins for its compute capability but runs only its native
code, so each NVRTC form must load, tell its 4 parameters, and be refused
at launch with CUDA_ERROR_NO_BINARY_FOR_GPU; the native saxpy then runs
through the same launch and numpy check.

libnvrtc is looked for as NVRTC_LIBRARY, then by name (libnvrtc.so.13,
.so.12, .so), then in /usr/local/cuda*/lib{64,} and in the nvidia-cuda-nvrtc
wheel (kernel_code.find_nvrtc); without one the step says so and exits 0
(nothing to check).
"""
from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The in-place build (gpu_check.sh makes it) and the test kernels.
sys.path[:0] = [str(REPO), str(REPO / "tests")]
import kernel_code  # noqa: E402
from kernel_code import NvrtcError, find_nvrtc, nvrtc_compile  # noqa: E402

N = 1 << 20
BLOCK = 256


def driver_major() -> str:
    """The CUDA major version of the selected driver ('' if unknown)."""
    import accelerator

    version = next((b["driver_version"] for b in accelerator.backends()
                    if b["selected"]), None) or ""
    return version.split(".")[0]


def nvrtc_version(lib: ctypes.CDLL) -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def compile_in_child(arch: str, output: str, major: str) -> bytes:
    """nvrtc_compile in a child process (NVRTC opens the libcuda.so.1 the
    environment gives, the double's in a dry run), so that a crash in it
    fails the form, not the check."""
    proc = subprocess.run([sys.executable, __file__, "--compile", arch,
                           output, major], capture_output=True,
                          timeout=300)
    if proc.returncode != 0:
        raise NvrtcError(proc.stderr.decode(errors="replace").strip()
                         or f"the NVRTC child exited {proc.returncode}")
    return proc.stdout


def saxpy_matches(module: Any) -> str:
    """Launch module's saxpy on N floats; '' when out == a*x + y within
    float32 rounding (the device may fuse the multiply-add), else why."""
    import numpy as np
    import accelerator

    saxpy = module.get_kernel("saxpy")
    rng = np.random.default_rng(25)
    x = rng.random(N, dtype=np.float32)
    y = rng.random(N, dtype=np.float32)
    a = np.float32(2.5)
    dx, dy = accelerator.Buffer(x.nbytes), accelerator.Buffer(y.nbytes)
    dx.copy_from(x)
    dy.copy_from(y)
    accelerator.launch(saxpy, (N + BLOCK - 1) // BLOCK, BLOCK, dy, dx, a,
                       np.uint32(N))
    out = np.empty_like(y)
    dy.copy_to(out)
    want = a.astype(np.float64) * x + y
    error = float(np.max(np.abs(out - want) / np.maximum(np.abs(want), 1e-30)))
    return "" if error <= 2 ** -23 else f"relative error {error:.3g}"


def check_form(cc: str, output: str, major: str, double: bool
               ) -> tuple[bool, str]:
    """(passed, what happened) for one NVRTC form."""
    import accelerator

    arch = ("compute_" if output == "ptx" else "sm_") + cc
    code, params = b"", None
    try:
        code = compile_in_child(arch, output, major)
        module = accelerator.Module(code, format=output)
        params = module.get_kernel("saxpy").attributes["num_args"]
        wrong = saxpy_matches(module)
    except accelerator.AcceleratorError as exc:
        # The double runs host code only: it reads PTX and a cubin for its
        # compute capability (their parameters) and refuses the launch.
        if double and exc.error_name == "CUDA_ERROR_NO_BINARY_FOR_GPU" and (
                params == 4):
            return True, (f"{arch}, {len(code):,} bytes: refused at launch, "
                          f"after loading it and telling its 4 parameters, "
                          f"as the double refuses code it cannot run "
                          f"({exc.error_name})")
        return False, f"{arch}: FAILED: {type(exc).__name__}: {exc}"
    except (NvrtcError, NotImplementedError, ValueError, TypeError) as exc:
        return False, f"{arch}: FAILED: {type(exc).__name__}: {exc}"
    if double:
        return False, f"{arch}: FAILED: the double launched {output} code"
    if wrong:
        return False, f"{arch}: FAILED: saxpy differs from numpy: {wrong}"
    return True, (f"{arch}, {len(code):,} bytes: saxpy on {N:,} floats "
                  f"matches numpy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--double", action="store_true",
                        help="the dry run on the CUDA driver double")
    parser.add_argument("--markdown", type=Path,
                        help="write the lines here too")
    parser.add_argument("--compile", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compile:   # the child of compile_in_child: code to stdout
        arch, output, major = args.compile
        lib, where = find_nvrtc(major)
        if lib is None:
            sys.exit(f"no libnvrtc ({where})")
        try:
            sys.stdout.buffer.write(nvrtc_compile(lib, kernel_code.CUDA_C,
                                                  arch, output))
        except NvrtcError as exc:
            sys.exit(str(exc))
        return 0
    import accelerator

    lines, ok = [], True
    major = driver_major() if accelerator.is_available() else ""
    lib, where = find_nvrtc(major)
    if lib is None:
        lines.append(f"- nvrtc: not run: no libnvrtc ({where})")
    elif not accelerator.is_available():
        lines.append("- nvrtc: not run: no accelerator")
    else:
        props = accelerator.get_device_properties(0)
        cc = f"{props.major}{props.minor}"
        lines.append(f"- NVRTC {nvrtc_version(lib)} ({where}), "
                     f"{props.name} (sm_{cc}, driver CUDA {major})")
        for output in ("ptx", "cubin"):
            passed, text = check_form(cc, output, major, args.double)
            ok &= passed
            lines.append(f"- nvrtc {output}: {text}")
    if args.double:
        try:
            wrong = saxpy_matches(accelerator.Module(kernel_code.native()))
        except Exception as exc:
            wrong = f"{type(exc).__name__}: {exc}"
        ok &= not wrong
        lines.append("- native saxpy on the double: " + (
            f"FAILED: {wrong}" if wrong else "matches numpy"))
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
