"""Configurations of the HIP backend on the HIP double: device counts,
a machine without an AMD GPU, a missing library, the probe order and
visible devices.  Each runs in a fresh process (the runtime initialises
once per process)."""
from __future__ import annotations

import json

import pytest

import fake_drivers
from test_config import run

pytestmark = pytest.mark.skipif(
    fake_drivers.HipDouble.missing() is not None,
    reason=str(fake_drivers.HipDouble.missing()))

MISSING = "/nonexistent/accelerator-tests/libmissing.so.1"

STATE = """
import json
import accelerator as a
hip = [b for b in a.backends() if b["name"] == "hip"][0]
current = a.current_accelerator()
print(json.dumps({"available": a.is_available(), "count": a.device_count(),
                  "type": current.type if current else None,
                  "hip": hip}))
"""


def state(**env: str) -> dict:
    return json.loads(run(STATE, **env).stdout)


def hip_double(devices: int, **env: str) -> dict[str, str]:
    return {**fake_drivers.HipDouble.environment(devices), **env}


@pytest.mark.parametrize("devices", [1, 2, 8])
def test_device_counts(devices: int) -> None:
    seen = state(**hip_double(devices))
    assert (seen["available"], seen["count"], seen["type"]) == (
        True, devices, "hip")
    assert seen["hip"]["counted_by"] == "hipGetDeviceCount"


def test_no_device_is_unavailable_with_the_runtimes_error() -> None:
    seen = state(**hip_double(0))
    assert seen["available"] is False
    assert seen["hip"]["loaded"] is True
    assert seen["hip"]["reason"].startswith(
        "hipInit() failed: hipErrorInvalidDevice (101) (no AMD GPU is "
        "visible"), seen


def test_a_missing_library_is_unavailable() -> None:
    seen = state(ACCELERATOR_BACKEND="hip", ACCELERATOR_HIP_LIBRARY=MISSING)
    assert seen["available"] is False
    assert seen["hip"]["loaded"] is False
    assert seen["hip"]["reason"].startswith("cannot load the HIP runtime")


def test_hip_is_probed_after_xpu_and_before_opencl() -> None:
    """Without CUDA and Level Zero, HIP is selected ahead of OpenCL (whose
    PoCL would otherwise be found)."""
    env = hip_double(2, ACCELERATOR_CUDA_LIBRARY=MISSING,
                     ACCELERATOR_ZE_LIBRARY=MISSING)
    del env["ACCELERATOR_BACKEND"]
    seen = state(**env)
    assert (seen["available"], seen["type"]) == (True, "hip")
    names = json.loads(run("import json, accelerator as a; print(json.dumps("
                           "[b['name'] for b in a.backends()]))",
                           **env).stdout)
    assert names == ["cuda", "xpu", "hip", "opencl"]


def test_visible_devices_reorder_the_runtimes_devices() -> None:
    out = run("""
import accelerator as a
print(a.device_count(), a.get_device_properties(0).name,
      a.get_device_properties(1).name)
""", **hip_double(3, ACCELERATOR_VISIBLE_DEVICES="2,0")).stdout.split()
    assert out == ["2", "Fake", "HIP", "Device", "2", "Fake", "HIP",
                   "Device", "0"]


def test_visible_devices_reach_the_runtime_on_every_call() -> None:
    """Work for device 0 runs on the runtime's device 2: a buffer made on
    device 0 is the runtime's device 2 memory, and the runtime's current
    device is 2 after set_device_index(0)."""
    out = run("""
import ctypes, accelerator as a, fake_drivers
d = fake_drivers.HipDouble()
a.set_device_index(0)
b = a.Buffer(256)
print(d.current_device(), b.__dlpack_device__())
""", **hip_double(3, ACCELERATOR_VISIBLE_DEVICES="2,0")).stdout.split()
    assert out[0] == "2"
    assert " ".join(out[1:]) == "(10, 0)"


def test_facts_of_the_device_type() -> None:
    """torch's DeviceType::HIP 6, kDLROCM 10, the null stream's handle 0;
    page-locked memory is host memory to DLPack (kDLCPU), as on CUDA."""
    out = run("""
import accelerator as a
s = a.current_stream()
h = a.HostBuffer(64)
print(s.device_type, s.handle, a.Buffer(64).__dlpack_device__(),
      h.__dlpack_device__())
""", **hip_double(2)).stdout
    assert out.split() == ["6", "0", "(10,", "0)", "(1,", "0)"]
