#!/usr/bin/env python3
"""The NVRTC step of bench/gpu_check.sh: kernels compiled from source by
accelerator.Module(code, format="cuda-c++").

    python bench/nvrtc_check.py [--double] [--markdown OUT.md]

saxpy (tests/kernel_code.py's CUDA C++) in four forms, each launched on
2**20 floats and checked against numpy (within float32 rounding: the
device may fuse the multiply-add):

- cold: ``Module(code, format="cuda-c++")`` with an empty compile cache
  (a fresh ACCELERATOR_KERNEL_CACHE_DIR): a cubin for the device's SM
  where NVRTC has one, else PTX;
- from the cache: the same call again, which must reuse the entry the
  cold compile wrote (the same file: a compile replaces it);
- PTX: ``options=["-arch=compute_XY"]``, which the driver compiles at
  load;
- a template: ``saxpy_t<float>`` of TEMPLATE, through
  ``name_expressions=["saxpy_t<float>"]`` and
  ``get_kernel("saxpy_t<float>")`` (on the double as PTX, which it
  loads, so that the lowered name is looked up there too).

One line per form; exit status 1 when a form failed.  Without NVRTC
(Module() says "no NVRTC found") the step says so and exits 0.

--double (gpu_check.sh's dry run on the CUDA driver double): the double
runs only its native code, so each form must compile, then be refused as
the double refuses code it cannot run (CUDA_ERROR_NO_BINARY_FOR_GPU: a
cubin at load, PTX at launch, after its four parameters were read); the
native saxpy then runs through the same launch and numpy check.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The in-place build (gpu_check.sh makes it) and the test kernels.
sys.path[:0] = [str(REPO), str(REPO / "tests")]
import kernel_code  # noqa: E402

N = 1 << 20
BLOCK = 256
TEMPLATE = r"""
template <typename T>
__global__ void saxpy_t(T *y, const T *x, T a, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"""
TEMPLATE_NAME = "saxpy_t<float>"


def saxpy_matches(module: Any, name: str = "saxpy") -> str:
    """Launch module's saxpy (kernel name) on N floats; '' when out ==
    a*x + y within float32 rounding, else why."""
    import numpy as np
    import accelerator

    saxpy = module.get_kernel(name)
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


def entries(folder: Path) -> dict[str, int]:
    """The compile cache's entries in folder: name -> inode."""
    return {p.name: p.stat().st_ino for p in folder.glob("*.kernel")}


class Form:
    """One way of compiling saxpy from source."""

    def __init__(self, label: str, source: str, name: str = "saxpy",
                 **kwargs: Any) -> None:
        self.label, self.source, self.name = label, source, name
        self.kwargs = kwargs

    def call(self) -> str:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f'Module(code, format="cuda-c++"{", " if kwargs else ""}' \
            f'{kwargs})'

    def check(self, double: bool, cache: Path,
              reused: dict[str, int] | None = None) -> tuple[bool, str]:
        """(passed, what happened) for this form, compiled with cache as
        the compile cache; reused: the entries it must find there."""
        import accelerator

        os.environ["ACCELERATOR_KERNEL_CACHE_DIR"] = str(cache)
        params = None
        start = time.perf_counter()
        took = None
        try:
            module = accelerator.Module(self.source, format="cuda-c++",
                                        **self.kwargs)
            took = time.perf_counter() - start
            params = module.get_kernel(self.name).attributes["num_args"]
            wrong = saxpy_matches(module, self.name)
        except accelerator.AcceleratorError as exc:
            if took is None:
                took = time.perf_counter() - start
            # The double runs host code only: it refuses a device binary
            # when loading it (as a driver refuses a cubin for another
            # SM), and PTX at launch, having read its parameters.
            if not (double and exc.error_name == "CUDA_ERROR_NO_BINARY_FOR_GPU"
                    and params in (None, 4)):
                return False, f"FAILED: {type(exc).__name__}: {exc}"
            when = ("at load" if params is None
                    else "at launch, after loading it and telling its 4 "
                         "parameters")
            wrong = ""
            outcome = (f"refused {when}, as the double refuses code it "
                       f"cannot run ({exc.error_name})")
        except (RuntimeError, ValueError, TypeError, KeyError) as exc:
            return False, f"FAILED: {type(exc).__name__}: {exc}"
        else:
            if double:
                return False, "FAILED: the double launched compiled code"
            outcome = f"saxpy on {N:,} floats matches numpy"
        if wrong:
            return False, f"FAILED: saxpy differs from numpy: {wrong}"
        found = entries(cache)
        if reused is not None and found != reused:
            return False, (f"FAILED: not from the cache: its entries were "
                           f"{sorted(reused)}, now {sorted(found)} (a "
                           "compile replaced or added one)")
        if reused is None and len(found) != 1:
            return False, (f"FAILED: the compile left {len(found)} cache "
                           "entries, expected 1")
        return True, f"{took * 1e3:.1f} ms to Module(): {outcome}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--double", action="store_true",
                        help="the dry run on the CUDA driver double")
    parser.add_argument("--markdown", type=Path,
                        help="write the lines here too")
    args = parser.parse_args()
    import accelerator
    from accelerator import _source

    lines, ok = [], True
    if not accelerator.is_available():
        lines.append("- cuda-c++: not run: no accelerator")
    else:
        props = accelerator.get_device_properties(0)
        cc = f"{props.major}{props.minor}"
        try:
            _library, ident = _source._compiler_for("cuda-c++", 0)
        except RuntimeError as exc:
            ident = None
            # No NVRTC here: nothing to check.  One that was named and
            # does not work is a failure.
            ok = str(exc).startswith("no NVRTC found")
            lines.append(f"- cuda-c++: {'not run' if ok else 'FAILED'}: "
                         f"{exc}")
        if ident is not None:
            lines.append(f"- Module(code, format=\"cuda-c++\") on "
                         f"{props.name} (sm_{cc}): {ident}")
            root = Path(tempfile.mkdtemp(prefix="nvrtc-check-"))
            checks = [
                (Form("cold (an empty cache)", kernel_code.CUDA_C),
                 root / "default", None),
                (Form("from the cache", kernel_code.CUDA_C), root / "default",
                 "default"),
                (Form("ptx", kernel_code.CUDA_C,
                      options=[f"-arch=compute_{cc}"]), root / "ptx", None),
                # On the double as PTX, which it loads: so that the
                # lowered name is looked up and its parameters told.
                (Form("template", TEMPLATE, TEMPLATE_NAME,
                      name_expressions=[TEMPLATE_NAME],
                      **({"options": [f"-arch=compute_{cc}"]}
                         if args.double else {})),
                 root / "template", None),
            ]
            for form, cache, reuse in checks:
                reused = entries(cache) if reuse else None
                passed, text = form.check(args.double, cache, reused)
                ok &= passed
                lines.append(f"- cuda-c++ {form.label}: {form.call()}"
                             f".get_kernel({form.name!r}): {text}")
            shutil.rmtree(root, ignore_errors=True)
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
