"""OpenCL configurations and backend selection, one process each.

These run the backend on the real ICD loader and PoCL (two CPU devices with
POCL_DEVICES="pthread pthread"), without the interposer, and skip with the
reason where PoCL is not installed.
"""
from __future__ import annotations

import json

import pytest

import fake_drivers
from test_config import UNAVAILABLE, run, with_double

pytestmark = pytest.mark.skipif(
    fake_drivers.opencl_runtime() is not None,
    reason=fake_drivers.opencl_runtime() or "")

SUMMARY = """
import accelerator as a
print(a.is_available(), a.device_count(), a.current_accelerator())
"""

BACKENDS = """
import json
import accelerator as a
print(json.dumps(a.backends()))
"""

BAD_TYPE = ("names no OpenCL device type (expected all, or a comma list of "
            "gpu, cpu and accelerator)")


def pocl(devices: int = 2, **env: str) -> dict[str, str]:
    return dict(POCL_DEVICES=" ".join(["pthread"] * devices), **env)


def opencl_reason(**env: str) -> str:
    result = run(UNAVAILABLE + BACKENDS, **env)
    backends = {b["name"]: b for b in json.loads(
        result.stdout.splitlines()[-1])}
    assert not backends["opencl"]["available"]
    return backends["opencl"]["reason"]


def test_the_issue_command_line() -> None:
    out = run(SUMMARY, **pocl(2, ACCELERATOR_BACKEND="opencl",
                              ACCELERATOR_OPENCL_DEVICE_TYPE="all")).stdout
    assert out == "True 2 opencl\n"


@pytest.mark.parametrize("types", ["all", "cpu", "gpu,cpu",
                                   "cpu,accelerator,gpu", "all,gpu"])
def test_device_types_that_include_cpus(types: str) -> None:
    out = run(SUMMARY, **pocl(3, ACCELERATOR_BACKEND="opencl",
                              ACCELERATOR_OPENCL_DEVICE_TYPE=types)).stdout
    assert out.split() == ["True", "3", "opencl"]


@pytest.mark.parametrize("types", [None, "", "gpu", "accelerator",
                                   "gpu,accelerator"])
def test_a_cpu_runtime_is_no_accelerator_unless_asked(types: str | None
                                                      ) -> None:
    env = pocl(2, ACCELERATOR_BACKEND="opencl")
    if types is not None:
        env["ACCELERATOR_OPENCL_DEVICE_TYPE"] = types
    reason = opencl_reason(**env)
    assert "no OpenCL device of the types asked for" in reason
    assert "ACCELERATOR_OPENCL_DEVICE_TYPE=all" in reason


@pytest.mark.parametrize("types", ["GPU", "gpu,", ",cpu", "cpu gpu", "npu",
                                   "all;cpu", "é" * 40])
def test_a_bad_device_type_is_a_clear_reason(types: str) -> None:
    reason = opencl_reason(**pocl(2, ACCELERATOR_BACKEND="opencl",
                                  ACCELERATOR_OPENCL_DEVICE_TYPE=types))
    assert reason.startswith("ACCELERATOR_OPENCL_DEVICE_TYPE=")
    assert BAD_TYPE in reason


def test_a_missing_library() -> None:
    reason = opencl_reason(**pocl(
        2, ACCELERATOR_BACKEND="opencl",
        ACCELERATOR_OPENCL_LIBRARY="/nonexistent/libOpenCL.so.1",
        ACCELERATOR_OPENCL_DEVICE_TYPE="all"))
    assert reason.startswith("cannot load the OpenCL ICD loader")


def test_no_platform(tmp_path) -> None:
    reason = opencl_reason(**pocl(
        2, ACCELERATOR_BACKEND="opencl", ACCELERATOR_OPENCL_DEVICE_TYPE="all",
        OCL_ICD_VENDORS=str(tmp_path)))
    assert "no OpenCL platform is installed" in reason


def test_probe_order_prefers_cuda_and_reports_opencl() -> None:
    env = with_double(2, ACCELERATOR_OPENCL_DEVICE_TYPE="all", **pocl(3))
    assert run(SUMMARY, **env).stdout.split() == ["True", "2", "cuda"]
    result = run(BACKENDS, **env)
    backends = {b["name"]: b for b in json.loads(result.stdout)}
    assert backends["cuda"]["selected"]
    assert backends["opencl"]["available"] and not backends["opencl"][
        "selected"]
    assert backends["opencl"]["device_count"] == 3
    assert backends["opencl"]["driver_version"].startswith("OpenCL ")
    chosen = run(SUMMARY, **env, ACCELERATOR_BACKEND="opencl").stdout
    assert chosen.split() == ["True", "3", "opencl"]


def test_facts_and_properties() -> None:
    out = run("""
        import json
        import accelerator as a
        s = a.Stream(1)
        p = a.get_device_properties(1)
        free, total = a.get_memory_info(1)
        print(json.dumps([s.device_type, str(s.device), p.major, p.minor,
                          p.multi_processor_count > 0, total == free > 0,
                          p.total_memory == total]))
        """, **pocl(2, ACCELERATOR_BACKEND="opencl",
                    ACCELERATOR_OPENCL_DEVICE_TYPE="all")).stdout
    assert json.loads(out) == [4, "opencl:1", -1, -1, True, True, True]


NO_SVM = """
import accelerator as a
for make in (lambda: a.Buffer(64), lambda: a.HostBuffer(64)):
    try:
        make()
    except NotImplementedError as e:
        print(e)
    else:
        print("allocated")
s = a.Stream()
s.record_event().synchronize()
"""


@pytest.mark.skipif(fake_drivers.OpenCLDouble.missing() is not None,
                    reason=fake_drivers.OpenCLDouble.missing() or "")
@pytest.mark.parametrize("caps, refused", [
    ("0", ["COARSE_GRAIN", "FINE_GRAIN"]),
    ("1", [None, "FINE_GRAIN"]),
], ids=["no SVM", "coarse-grain only"])
def test_memory_is_refused_where_the_device_lacks_svm(
        caps: str, refused: list[str | None]) -> None:
    env = fake_drivers.OpenCLDouble.environment(2)
    lines = run(NO_SVM, FAKE_OCL_SVM_CAPS=caps, **env).stdout.splitlines()
    for line, lack in zip(lines, refused):
        if lack is None:
            assert line == "allocated"
        else:
            assert line.startswith("backend opencl does not support "), line
            assert f"lacks CL_DEVICE_SVM_{lack}_BUFFER" in line, line


FOREIGN_QUEUE = """
import ctypes
import accelerator as a
import fake_drivers
lib = ctypes.CDLL(str(fake_drivers.OPENCL_INTERPOSER))
vp = ctypes.c_void_p
rc = ctypes.c_int()
queue = vp(a.current_stream(0).handle)
device = vp()
lib.clGetCommandQueueInfo.argtypes = [vp, ctypes.c_uint, ctypes.c_size_t,
                                      vp, vp]
assert lib.clGetCommandQueueInfo(queue, 0x1091, 8, ctypes.byref(device),
                                 None) == 0
lib.clCreateContext.restype = vp
lib.clCreateContext.argtypes = [vp, ctypes.c_uint, ctypes.POINTER(vp), vp,
                                vp, ctypes.POINTER(ctypes.c_int)]
ctx = lib.clCreateContext(None, 1, ctypes.byref(device), None, None,
                          ctypes.byref(rc))
lib.clCreateCommandQueueWithProperties.restype = vp
lib.clCreateCommandQueueWithProperties.argtypes = [
    vp, vp, vp, ctypes.POINTER(ctypes.c_int)]
foreign = lib.clCreateCommandQueueWithProperties(ctx, device, None,
                                                 ctypes.byref(rc))
b = a.Buffer(64)
ours = a.Stream.from_handle(queue.value)
b.fill(5, stream=ours)
out = bytearray(64)
b.copy_to(out, stream=ours)
print(out == b"\\x05" * 64)
theirs = a.Stream.from_handle(foreign)
for call in (lambda: b.fill(1, stream=theirs),
             lambda: b.copy_to(out, stream=theirs)):
    try:
        call()
    except NotImplementedError as e:
        print(e)
"""


@pytest.mark.skipif(fake_drivers.OpenCLDouble.missing() is not None,
                    reason=fake_drivers.OpenCLDouble.missing() or "")
def test_memory_on_a_queue_of_another_context_is_refused() -> None:
    """Our SVM pointers mean nothing in another context: a wrapped queue
    of ours works, one of another context is refused, naming why."""
    env = fake_drivers.OpenCLDouble.environment(2)
    lines = run(FOREIGN_QUEUE, **env).stdout.splitlines()
    assert lines[0] == "True"
    assert len(lines) == 3, lines
    for line in lines[1:]:
        assert "command queue of another OpenCL context" in line, line


OPENCL_1 = """
import accelerator as a
import fake_drivers
d = fake_drivers.OpenCLDouble()
a.current_stream(0)
# A device before OpenCL 2.0 does not know the SVM query.
d.fail("clGetDeviceInfo", 1, -30)
try:
    a.Buffer(64)
except NotImplementedError as e:
    print(e)
d.clear_faults()
a.Buffer(64, 1)
"""


@pytest.mark.skipif(fake_drivers.OpenCLDouble.missing() is not None,
                    reason=fake_drivers.OpenCLDouble.missing() or "")
def test_a_device_that_does_not_know_svm_refuses_memory() -> None:
    env = fake_drivers.OpenCLDouble.environment(2)
    out = run(OPENCL_1, **env).stdout
    assert "device 0: the device has no coarse-grain shared virtual " \
           "memory (CL_DEVICE_SVM_CAPABILITIES lacks " \
           "CL_DEVICE_SVM_COARSE_GRAIN_BUFFER" in out, out
