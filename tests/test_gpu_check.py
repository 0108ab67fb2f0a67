"""bench/gpu_check.sh, dry-run on the CUDA driver double before a GPU is lent.

``gpu_check.sh --double`` puts tests/drivers/build first on LD_LIBRARY_PATH,
so ``libcuda.so.1`` is the double and every step runs as on a GPU machine:
the probe, the install into a throwaway venv (with its fallback where
setuptools is older than 70.1 and ``wheel`` is missing), the behaviour
suite (here one file of it, to keep the run short), the benchmark and the
results file with its table.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_info import instrumented_extension

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_through_to_its_results_table(tmp_path: Path) -> None:
    if shutil.which("bash") is None or shutil.which("make") is None:
        pytest.skip("needs bash and make")
    if not (REPO / "accelerator").is_dir():
        pytest.skip("no source package to install: tests/check_wheel.sh "
                    "removes it to test the installed wheel")
    marks = instrumented_extension()
    if marks is not None:
        pytest.skip(f"the extension is instrumented ({marks}): the dry run "
                    "checks the script on the plain build (tests/run.sh)")
    env = dict(os.environ, GPU_CHECK_RESULTS=str(tmp_path),
               GPU_CHECK_TESTS="tests/behaviour/test_device_api.py")
    proc = subprocess.run(["bash", str(REPO / "bench" / "gpu_check.sh"),
                           "--double"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "GPU: Fake CUDA Device 0 x2" in out
    installed = next(line for line in out.splitlines()
                     if line.startswith("installed: "))
    assert "FAILED" not in installed and " True [" in installed, installed
    # The installed copy, not the source tree, answered.
    assert "/venv/" in installed, installed
    results = list(tmp_path.glob("*-fake-cuda-device-0.md"))
    assert len(results) == 1, out[-2000:]
    text = results[0].read_text()
    assert "behaviour suite (ACCELERATOR_TEST_BACKEND=real): " in text
    assert " passed" in text and "failed" not in text.split("###")[0]
    assert "| current_stream()" in text      # the benchmark's table
    # The kernel launch beside cuda.bindings, ours measured (a figure).
    assert re.search(r"^\| launch add_one \(queued, not waited for\)\s*\|"
                     r"\s*[\d,]+\s*\|", text, re.MULTILINE), text[-3000:]
    # Kernels from source: Module(code, format="cuda-c++") compiled each
    # form, and the double refused to run it as it refuses code it cannot
    # run (a cubin at load; PTX, which it loads, at launch), or there is
    # no NVRTC on this machine; the native saxpy checked against numpy.
    lines = [line for line in text.splitlines()
             if line.startswith(("- cuda-c++", "- native saxpy",
                                 "- Module(code"))]
    assert "- native saxpy on the double: matches numpy" in lines, lines
    if not any(line.startswith("- cuda-c++: not run: no NVRTC found")
               for line in lines):
        refused = "as the double refuses code it cannot run " \
            "(CUDA_ERROR_NO_BINARY_FOR_GPU)"
        at_launch = "refused at launch, after loading it and telling " \
            "its 4 parameters"
        forms = {"cold (an empty cache)": "", "from the cache": "",
                 "ptx": at_launch, "template": at_launch}
        for form, when in forms.items():
            [line] = [n for n in lines
                      if n.startswith(f"- cuda-c++ {form}: ")]
            assert "FAILED" not in line and refused in line, lines
            assert when in line, lines
        assert "name_expressions=['saxpy_t<float>']" in next(
            n for n in lines if n.startswith("- cuda-c++ template"))
    # Compile and load from source beside cuda.core and CuPy: ours cold
    # and from the cache measured as PTX, which the double loads.
    assert re.search(r"^ptx for compute_\d+: saxpy compiled from CUDA C\+\+",
                     text, re.MULTILINE), text[-3000:]
    # The benchmark's C timers build (a missing header once left the
    # driver-call overheads out with only a note on stderr).
    assert "cannot build" not in out, out[-4000:]
    assert out.rstrip().splitlines()[-1].startswith("| ")  # printed last


def test_nvrtc_check_catches_a_wrong_result() -> None:
    """The source step's numpy check fails a saxpy that computes a*x
    only (a native kernel on the CUDA double, where it runs)."""
    import fake_drivers
    import kernel_code

    if fake_drivers.CudaDouble.missing():
        pytest.skip(fake_drivers.CudaDouble.missing())
    wrong = kernel_code.native(kernel_code.NATIVE_C.replace(
        "y[i] = a * x[i] + y[i];", "y[i] = a * x[i];"))
    code = ("import sys, accelerator\n"
            "sys.path.insert(0, 'bench')\n"
            "import nvrtc_check\n"
            "print(nvrtc_check.saxpy_matches(accelerator.Module("
            "open(sys.argv[1], 'rb').read())))\n"
            "print(nvrtc_check.saxpy_matches(accelerator.Module("
            "open(sys.argv[2], 'rb').read())))\n")
    right = kernel_code.native_path()
    wrong_path = right.with_name("wrong-saxpy.so")
    wrong_path.write_bytes(wrong)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(wrong_path), str(right)], cwd=REPO,
        env={**fake_drivers.clean_environment(),
             "PYTHONPATH": str(REPO),
             **fake_drivers.CudaDouble.environment(1)},
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("relative error "), (
        proc.stdout)
    assert proc.stdout.splitlines()[1] == "", proc.stdout
