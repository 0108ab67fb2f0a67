"""The HIP backend against AMD's real runtime: Debian's libamdhip64-5
(ROCm 5.2), on a machine without an AMD GPU.

The library loads and answers without a GPU, so it checks what the HIP
double cannot: that every function the backend resolves is exported by
the real runtime under that name, and that the backend then reports
itself unavailable with the runtime's own error (its name and code, as
the runtime gives them).  Skipped, with the reason, where the package is
not installed (CI: apt-get install libamdhip64-5) or where an AMD GPU is
present (/dev/kfd), on which the backend is available instead.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import fake_drivers

REAL_RUNTIME = pathlib.Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5")

pytestmark = pytest.mark.skipif(
    not REAL_RUNTIME.exists(),
    reason=f"no {REAL_RUNTIME}: apt-get install libamdhip64-5 (Debian's "
           "ROCm 5.2 HIP runtime)")


def run(code: str, **env: str) -> dict:
    """Run code in a fresh interpreter (the runtime starts threads when it
    initialises); it prints one JSON document."""
    environment = fake_drivers.clean_environment()
    environment.update(env)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(fake_drivers.SRC), environment.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_real_runtime_exports_every_function_the_backend_resolves(
) -> None:
    # The interprocess functions among them.
    names = fake_drivers.HipDouble.driver_functions()
    assert set(fake_drivers.HipDouble.ipc_functions()) <= set(names)
    missing = run(f"""
import ctypes, json
lib = ctypes.CDLL({str(REAL_RUNTIME)!r})
print(json.dumps([n for n in {names!r} if not hasattr(lib, n)]))
""")
    assert missing == []


@pytest.mark.skipif(os.path.exists("/dev/kfd"),
                    reason="an AMD GPU driver is present: the backend is "
                           "available here")
@pytest.mark.parametrize("library", ["", str(REAL_RUNTIME)],
                         ids=["default-soname", "ACCELERATOR_HIP_LIBRARY"])
def test_without_an_amd_gpu_the_backend_says_why(library: str) -> None:
    env = {"ACCELERATOR_BACKEND": "hip"}
    if library:
        env["ACCELERATOR_HIP_LIBRARY"] = library
    seen = run(f"""
import ctypes, json
import accelerator
available = accelerator.is_available()
hip = [b for b in accelerator.backends() if b["name"] == "hip"][0]
# The runtime's own answer, asked the same way after the product.
lib = ctypes.CDLL({str(REAL_RUNTIME)!r})
lib.hipGetErrorName.restype = ctypes.c_char_p
code = lib.hipInit(0)
print(json.dumps({{"available": available, "backend": hip,
                   "code": code,
                   "name": lib.hipGetErrorName(code).decode()}}))
""", **env)
    assert seen["available"] is False
    assert seen["code"] != 0, "the runtime initialised: is there a GPU?"
    backend = seen["backend"]
    assert backend["loaded"] is True
    assert backend["device_count"] == 0
    assert (f"hipInit() failed: {seen['name']} ({seen['code']})"
            in backend["reason"]), backend
    assert "no AMD GPU is visible" in backend["reason"]
    # hipDriverGetVersion answers without a GPU: the report names ROCm.
    assert backend["driver_version"].startswith("5.")



@pytest.mark.skipif(os.path.exists("/dev/kfd"),
                    reason="an AMD GPU driver is present: modules load here")
def test_without_an_amd_gpu_loading_a_module_fails_clearly() -> None:
    """Module() names why there is no device (the runtime's hipInit
    error); the runtime itself refuses hipModuleLoadData with the same
    error, leaving no module."""
    seen = run(f"""
import ctypes, json, sys
sys.path.insert(0, {str(fake_drivers.REPO / "tests")!r})
import accelerator, kernel_code
code = kernel_code.for_format("native")
try:
    accelerator.Module(code, format="hsaco")
except accelerator.AcceleratorError as exc:
    error = str(exc)
lib = ctypes.CDLL({str(REAL_RUNTIME)!r})
lib.hipGetErrorName.restype = ctypes.c_char_p
module = ctypes.c_void_p()
rc = lib.hipModuleLoadData(ctypes.byref(module), code)
print(json.dumps({{"error": error, "code": rc,
                   "name": lib.hipGetErrorName(rc).decode(),
                   "module": module.value}}))
""", ACCELERATOR_BACKEND="hip")
    assert seen["code"] != 0, "the runtime loaded a module: is there a GPU?"
    assert seen["module"] is None
    assert "when none is available" in seen["error"], seen
    assert f"hip: hipInit() failed: {seen['name']}" in seen["error"], seen
    # ROCm 5.2 without a GPU: hipErrorInvalidDevice for both.
    assert seen["name"] == "hipErrorInvalidDevice", seen
