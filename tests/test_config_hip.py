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
    assert seen["hip"]["counted_by"].startswith("KFD topology ("), seen


def test_no_device_is_unavailable_with_the_runtimes_error() -> None:
    seen = state(**hip_double(0, ACCELERATOR_KFD_TOPOLOGY="none"))
    assert seen["available"] is False
    assert seen["hip"]["loaded"] is True
    assert seen["hip"]["reason"].startswith(
        "hipInit() failed: hipErrorInvalidDevice (101) (no AMD GPU is "
        "visible"), seen


def test_no_gpu_in_the_kfd_topology_is_unavailable() -> None:
    seen = state(**hip_double(0))
    assert seen["available"] is False
    assert seen["hip"]["reason"].startswith(
        "no AMD GPU is visible: the KFD topology ("), seen


QUESTIONS = """
import json, accelerator as a, fake_drivers
d = fake_drivers.HipDouble()
answers = [a.is_available(), a.device_count(), str(a.current_accelerator())]
hip = [b for b in a.backends() if b["name"] == "hip"][0]
print(json.dumps([answers, d.initialized(), hip["counted_by"]]))
"""


def test_questions_do_not_initialise_the_runtime() -> None:
    """Every HIP call initialises ROCm (fork-unsafe): is_available() and
    device_count() count the KFD topology's GPUs instead."""
    answers, initialized, counted_by = json.loads(
        run(QUESTIONS, **hip_double(2)).stdout)
    assert answers == [True, 2, "hip"]
    assert initialized is False
    assert counted_by.startswith("KFD topology (")


@pytest.mark.parametrize("env", [
    {"ACCELERATOR_KFD_TOPOLOGY": "none"},
    {"HIP_VISIBLE_DEVICES": "0,1"},
    {"ROCR_VISIBLE_DEVICES": "0,1"},
    {"ACCELERATOR_KFD_TOPOLOGY": "/nonexistent/kfd/nodes"},
], ids=["none", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "missing"])
def test_the_runtime_counts_where_the_topology_cannot(env: dict) -> None:
    answers, initialized, counted_by = json.loads(
        run(QUESTIONS, **hip_double(2, **env)).stdout)
    assert answers == [True, 2, "hip"]
    assert initialized is True
    assert counted_by.startswith("hipGetDeviceCount ("), counted_by


def test_an_unreadable_node_makes_the_runtime_count(tmp_path) -> None:
    # A long path, as CI's per-stage temporary folders are: the reason
    # comes before it, so cutting the path keeps the reason.
    nodes = tmp_path / ("deep" * 40) / "nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0" / "gpu_id").write_text("not a number\n")
    answers, initialized, counted_by = json.loads(run(
        QUESTIONS, **hip_double(2, ACCELERATOR_KFD_TOPOLOGY=str(nodes))
    ).stdout)
    assert answers == [True, 2, "hip"] and initialized is True
    assert "gpu_id is unreadable" in counted_by, counted_by


def test_the_first_use_initialises_and_the_runtime_counts() -> None:
    """The topology counts 3 GPUs, the runtime 2: from the first use on,
    the runtime's count holds, and device 2 is the runtime's error."""
    env = hip_double(2, ACCELERATOR_KFD_TOPOLOGY=str(
        fake_drivers.kfd_topology(3)))
    out = run("""
import accelerator as a
print(a.device_count())
try:
    a.Stream(2)
except a.AcceleratorError as exc:
    print(exc.api, exc.error_name)
print(a.device_count())
""", **env).stdout.split()
    assert out == ["3", "hipSetDevice", "hipErrorInvalidDevice", "2"], out
