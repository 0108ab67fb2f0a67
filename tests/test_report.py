"""``python -m accelerator``: the text report, ``--json`` and ``--require``.

Every driver configuration runs the report in its own process (a driver
initialises once per process): no CUDA library, the toolkit's stub, and the
CUDA driver test double with 0, 1 and 2 devices.  The Level Zero loader is
pointed at a missing path so that the machine's own loader cannot change
the outcome.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import accelerator
import fake_drivers
from accelerator import _report

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
CUDA_DOUBLE = REPO_ROOT / "tests" / "drivers" / "build" / "libcuda.so.1"
CUDA_STUB = pathlib.Path("/usr/local/cuda/lib64/stubs/libcuda.so")
MISSING_LIBRARY = "/nonexistent/accelerator-tests/libmissing.so.1"
# The directory that holds the accelerator package this process imported,
# so that the child process runs the same build.
PACKAGE_PARENT = pathlib.Path(accelerator.__file__).resolve().parents[1]

GIB = 1024**3
# The double's model: a retained primary context takes 512 MiB.
CONTEXT_FOOTPRINT = 512 * 1024**2

TOP_KEYS = {
    "schema", "version", "python", "platform", "available", "backend",
    "device_type", "driver_version", "device_count", "visible_devices",
    "devices", "backends",
}
DEVICE_KEYS = {
    "index", "device", "name", "uuid", "total_memory", "free_memory",
    "compute_capability", "pci_bus_id", "multi_processor_count",
    "vendor_id", "device_id", "is_integrated", "memory_reserved",
    "memory_allocated", "error", "read", "estimates",
}
BACKEND_KEYS = {
    "name", "device_type", "library", "loaded", "available", "selected",
    "driver_version", "device_count", "reason", "counted_by", "initialized",
    "processor_label", "plugin", "origin", "refused",
}

needs_double = pytest.mark.skipif(
    not CUDA_DOUBLE.exists(),
    reason=f"the CUDA driver test double is not built ({CUDA_DOUBLE}; "
    "run make -C tests/drivers cuda)",
)
needs_stub = pytest.mark.skipif(
    not CUDA_STUB.exists(), reason=f"no CUDA toolkit stub at {CUDA_STUB}"
)


def report_env(cuda_library: str, **fake_env: str) -> dict[str, str]:
    """The environment of a report run: one CUDA library and FAKE_* env."""
    env = {
        name: value for name, value in os.environ.items()
        if not name.startswith(("ACCELERATOR_", "FAKE_CUDA_", "FAKE_ZE_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")])
    )
    env["ACCELERATOR_CUDA_LIBRARY"] = cuda_library
    env["ACCELERATOR_ZE_LIBRARY"] = MISSING_LIBRARY
    env["ACCELERATOR_HIP_LIBRARY"] = MISSING_LIBRARY
    env["ACCELERATOR_OPENCL_LIBRARY"] = MISSING_LIBRARY
    env.update(fake_env)
    return env


def run_report(
    *arguments: str, cuda_library: str, **fake_env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m accelerator`` with one CUDA library and FAKE_* env."""
    return subprocess.run(
        [sys.executable, "-m", "accelerator", *arguments],
        env=report_env(cuda_library, **fake_env),
        capture_output=True, text=True, timeout=120, check=False,
    )


def json_report(cuda_library: str, **fake_env: str) -> dict:
    """The --json document of one configuration (the run must succeed)."""
    result = run_report("--json", cuda_library=cuda_library, **fake_env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_schema(document: dict) -> None:
    """The document has exactly the documented keys, at every level."""
    assert set(document) == TOP_KEYS
    assert document["schema"] == 1
    assert document["version"] == accelerator.__version__
    for device in document["devices"]:
        assert set(device) == DEVICE_KEYS
    assert [b["name"] for b in document["backends"]] == list(
        fake_drivers.DOUBLES)
    for backend in document["backends"]:
        assert set(backend) == BACKEND_KEYS
        # The descriptor's word, whether the backend was probed or not.
        assert backend["processor_label"] == fake_drivers.DOUBLES[
            backend["device_type"]].processor_label


# No accelerator -----------------------------------------------------------


def test_no_library_text_gives_each_backends_reason() -> None:
    result = run_report(cuda_library=MISSING_LIBRARY)
    assert result.returncode == 0, result.stderr
    assert "No accelerator is available" in result.stdout
    assert f"library: {MISSING_LIBRARY} (not loaded)" in result.stdout
    reasons = re.findall(r"^ +reason: (.+)$", result.stdout, re.MULTILINE)
    assert len(reasons) == 4, result.stdout
    assert "cannot load the CUDA driver" in reasons[0]
    assert result.stderr == ""


def test_no_library_json() -> None:
    document = json_report(MISSING_LIBRARY)
    assert_schema(document)
    assert document["available"] is False
    assert document["backend"] is None
    assert document["driver_version"] is None
    assert document["device_count"] == 0
    assert document["devices"] == []
    cuda = document["backends"][0]
    assert cuda["library"] == MISSING_LIBRARY
    assert cuda["loaded"] is False
    assert "cannot load the CUDA driver" in cuda["reason"]
    assert all(b["reason"] for b in document["backends"])


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["text", "json"])
def test_require_without_accelerator_exits_1(output: list[str]) -> None:
    result = run_report("--require", *output, cuda_library=MISSING_LIBRARY)
    assert result.returncode == 1
    assert "no accelerator is available" in result.stderr
    assert "cannot load the CUDA driver" in result.stderr
    assert result.stdout  # the report is still printed


@needs_stub
def test_stub_library_is_loaded_but_not_available() -> None:
    document = json_report(str(CUDA_STUB))
    assert document["available"] is False
    cuda = document["backends"][0]
    assert cuda["loaded"] is True
    assert "CUDA_ERROR_STUB_LIBRARY" in cuda["reason"]
    result = run_report("--require", cuda_library=str(CUDA_STUB))
    assert result.returncode == 1
    assert "CUDA_ERROR_STUB_LIBRARY" in result.stderr


@needs_double
def test_double_without_devices() -> None:
    document = json_report(str(CUDA_DOUBLE), FAKE_CUDA_DEVICES="0")
    assert_schema(document)
    assert document["available"] is False
    assert document["devices"] == []
    cuda = document["backends"][0]
    assert cuda["loaded"] is True
    assert "NVML counts none" in cuda["reason"]
    document = json_report(str(CUDA_DOUBLE), FAKE_CUDA_DEVICES="0",
                           ACCELERATOR_NVML_LIBRARY="none")
    assert "CUDA_ERROR_NO_DEVICE" in document["backends"][0]["reason"]
    result = run_report(
        "--require", cuda_library=str(CUDA_DOUBLE), FAKE_CUDA_DEVICES="0"
    )
    assert result.returncode == 1
    assert "NVML counts none" in result.stdout
    assert "NVML counts none" in result.stderr


# The double's devices -----------------------------------------------------

DOUBLE_SETTINGS = {
    "FAKE_CUDA_NAME": "Report Test GPU",
    "FAKE_CUDA_TOTAL_MEM": str(12 * GIB + 256 * 1024**2),
    "FAKE_CUDA_CC": "8.6",
    "FAKE_CUDA_SMS": "84",
    "FAKE_CUDA_DRIVER_VERSION": "12040",
}


@needs_double
@pytest.mark.parametrize("device_count", [1, 2])
def test_json_agrees_with_the_double(device_count: int) -> None:
    document = json_report(
        str(CUDA_DOUBLE), FAKE_CUDA_DEVICES=str(device_count),
        **DOUBLE_SETTINGS,
    )
    assert_schema(document)
    assert document["available"] is True
    assert document["backend"] == document["device_type"] == "cuda"
    assert document["driver_version"] == "12.4"
    assert document["device_count"] == device_count
    total = int(DOUBLE_SETTINGS["FAKE_CUDA_TOTAL_MEM"])
    assert len(document["devices"]) == device_count
    for index, device in enumerate(document["devices"]):
        assert device["error"] is None
        assert device["index"] == index
        assert device["device"] == f"cuda:{index}"
        assert device["name"] == f"Report Test GPU {index}"
        assert device["total_memory"] == total
        assert device["free_memory"] == total - CONTEXT_FOOTPRINT
        assert device["compute_capability"] == [8, 6]
        # a fresh process has not allocated device memory
        assert device["memory_reserved"] is device["memory_allocated"] is None
        assert device["multi_processor_count"] == 84
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]",
                            device["pci_bus_id"])
    assert len({d["pci_bus_id"] for d in document["devices"]}) == device_count
    cuda, *others = document["backends"]
    assert cuda["selected"] is cuda["available"] is cuda["loaded"] is True
    assert cuda["library"] == str(CUDA_DOUBLE)
    assert cuda["driver_version"] == "12.4"
    assert cuda["device_count"] == device_count
    assert cuda["reason"] is None
    for other in others:
        assert other["selected"] is other["available"] is False
        assert other["reason"]


@needs_double
def test_text_agrees_with_the_double() -> None:
    result = run_report(
        "--require", cuda_library=str(CUDA_DOUBLE), FAKE_CUDA_DEVICES="2",
        **DOUBLE_SETTINGS,
    )
    assert result.returncode == 0
    assert result.stderr == ""
    text = result.stdout
    assert "Accelerator: cuda (driver 12.4), 2 devices" in text
    for index in range(2):
        assert f"cuda:{index}  Report Test GPU {index}\n" in text
    assert text.count("memory: 12.25 GiB total, 11.75 GiB free") == 2
    assert text.count("compute capability: 8.6") == 2
    label = fake_drivers.CudaDouble.processor_label
    assert text.count(f"{label}: 84") == 2
    assert len(re.findall(r"PCI bus id: [0-9a-f]{4}:", text)) == 2
    assert "cuda: selected" in text
    assert "No accelerator" not in text


UNWRITABLE = {
    "full": "No space left on device",
    "closed": "stdout is closed",
    "broken-pipe": "Broken pipe",
}


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("sink", sorted(UNWRITABLE))
def test_an_unwritable_stdout_is_one_line_and_status_1(
    sink: str, output: list[str]
) -> None:
    command = [sys.executable, "-m", "accelerator", *output]
    env = report_env(MISSING_LIBRARY)
    if sink == "closed":
        # The child starts with no file descriptor 1 at all.
        result = subprocess.run(
            ["sh", "-c", 'exec "$@" >&-', "sh", *command], env=env,
            stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    elif sink == "full":
        with open("/dev/full", "wb") as full:
            result = subprocess.run(command, env=env, stdout=full,
                                    stderr=subprocess.PIPE, text=True,
                                    timeout=120, check=False)
    else:
        read_end, write_end = os.pipe()
        os.close(read_end)  # nobody reads: writing fails with EPIPE
        try:
            result = subprocess.run(command, env=env, stdout=write_end,
                                    stderr=subprocess.PIPE, text=True,
                                    timeout=120, check=False)
        finally:
            os.close(write_end)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        "python -m accelerator: cannot write the report: "
        f"{UNWRITABLE[sink]}\n"
    )


def test_bad_option_is_a_usage_error() -> None:
    result = run_report("--no-such-option", cuda_library=MISSING_LIBRARY)
    assert result.returncode == 2
    assert "usage: python -m accelerator" in result.stderr


# Formatting (no driver) ---------------------------------------------------


#: the word an xpu device's record is printed with
XPU_LABEL = fake_drivers.ZeDouble.processor_label


def make_device(**changes: object) -> _report.DeviceReport:
    """A device record as the report builds it, with some fields changed."""
    device = _report.DeviceReport(
        index=0, device="xpu:0", name="Some GPU", uuid=None,
        total_memory=8 * GIB, free_memory=None, compute_capability=None,
        pci_bus_id=None, multi_processor_count=448, vendor_id=0x8086,
        device_id=0x56A0, is_integrated=False, memory_reserved=None,
        memory_allocated=None, error=None, read=True, estimates=[],
    )
    device.update(changes)  # type: ignore[typeddict-item]
    return device


def test_device_without_compute_capability_prints_none() -> None:
    text = "\n".join(_report.format_device(make_device(), XPU_LABEL))
    assert "compute capability" not in text
    assert f"{XPU_LABEL}: 448" in text
    assert "memory: 8.00 GiB total, unknown free" in text
    assert "PCI bus id: unknown" in text


def test_memory_of_this_process_is_printed() -> None:
    text = "\n".join(_report.format_device(
        make_device(memory_reserved=22 * 1024**2, memory_allocated=4096),
        XPU_LABEL))
    assert "this process: 22.00 MiB reserved, 4.00 KiB allocated" in text
    assert "this process" not in "\n".join(
        _report.format_device(make_device(), XPU_LABEL))


@needs_double
def test_report_shows_memory_after_allocation() -> None:
    code = (
        "import json, accelerator\n"
        "from accelerator import _report\n"
        "b = accelerator.Buffer(4096, 1)\n"
        "print(json.dumps(_report.collect_report()))\n"
    )
    env = {
        name: value for name, value in os.environ.items()
        if not name.startswith(("ACCELERATOR_", "FAKE_CUDA_", "FAKE_ZE_"))
    }
    env.update(PYTHONPATH=str(PACKAGE_PARENT),
               ACCELERATOR_CUDA_LIBRARY=str(CUDA_DOUBLE),
               ACCELERATOR_ZE_LIBRARY=MISSING_LIBRARY, FAKE_CUDA_DEVICES="2")
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)["devices"]
    assert devices[1]["memory_allocated"] == 4096
    assert devices[1]["memory_reserved"] == 2 * 1024**2
    assert devices[0]["memory_allocated"] == 0
    assert devices[0]["memory_reserved"] == 0


def test_device_error_is_printed() -> None:
    text = "\n".join(
        _report.format_device(make_device(error="cuDeviceGet failed"),
                              XPU_LABEL)
    )
    assert "error: cuDeviceGet failed" in text


# State, unread devices and estimates (issue 22 item 14) ---------------------


@needs_double
def test_initialized_is_the_state_after_reading_the_devices() -> None:
    # The probe counts through NVML and leaves CUDA uninitialised; reading
    # the devices initialises it, and the report says so.
    document = json_report(str(CUDA_DOUBLE), FAKE_CUDA_DEVICES="1")
    cuda = document["backends"][0]
    assert cuda["counted_by"].startswith("NVML")
    assert document["devices"][0]["read"] is True
    assert cuda["initialized"] is True
    result = run_report(cuda_library=str(CUDA_DOUBLE), FAKE_CUDA_DEVICES="1")
    assert "      driver: initialised\n" in result.stdout, result.stdout


def backend_section(text: str, name: str) -> str:
    """The text report's lines of one backend."""
    match = re.search(rf"^  {name}(?: \(device type \w+\))?: .*\n(?:      .*\n)*", text, re.MULTILINE)
    assert match, text
    return match.group(0)


@needs_double
def test_the_driver_state_is_said_once_and_never_against_itself() -> None:
    # Counted through NVML, then initialised by reading the devices: the
    # counting line does not say CUDA is not initialised.
    cuda = backend_section(run_report(cuda_library=str(CUDA_DOUBLE),
                                      FAKE_CUDA_DEVICES="1").stdout, "cuda")
    assert "counted by: NVML (" in cuda and "without initialising CUDA" \
        in cuda, cuda
    assert "      driver: initialised\n" in cuda, cuda
    assert "not initialised" not in cuda, cuda
    cuda = backend_section(run_report("--no-init",
                                      cuda_library=str(CUDA_DOUBLE),
                                      FAKE_CUDA_DEVICES="1").stdout, "cuda")
    assert "      driver: not initialised (it initialises at the first " \
        "use)\n" in cuda, cuda
    # HIP without a GPU: hipInit() ran and failed, which is neither state.
    hip = fake_drivers.HipDouble
    if hip.missing():
        pytest.skip(hip.missing())
    text = run_report(cuda_library=MISSING_LIBRARY,
                      ACCELERATOR_BACKEND="hip",
                      ACCELERATOR_HIP_LIBRARY=str(fake_drivers.HIP_DOUBLE),
                      ACCELERATOR_KFD_TOPOLOGY="none",
                      FAKE_HIP_DEVICES="0").stdout
    section = backend_section(text, "hip")
    assert "reason: hipInit() failed" in section, section
    assert "initialised" not in section.replace("without initialising", ""
                                                ), section


@pytest.mark.skipif(fake_drivers.OpenCLDouble.missing() is not None,
                    reason=fake_drivers.OpenCLDouble.missing() or "")
def test_the_opencl_reason_suggests_only_types_not_asked_for() -> None:
    def reason(**env: str) -> str:
        text = run_report(cuda_library=MISSING_LIBRARY,
                          ACCELERATOR_BACKEND="opencl",
                          ACCELERATOR_OPENCL_LIBRARY="libOpenCL.so.1",
                          POCL_DEVICES="none", **env).stdout
        [line] = re.findall(r"reason: (no OpenCL device.*)$",
                            backend_section(text, "opencl"), re.MULTILINE)
        return line
    everything = reason(ACCELERATOR_OPENCL_DEVICE_TYPE="all")
    assert "(all: the platforms list no device at all)" in everything
    assert "set ACCELERATOR_OPENCL_DEVICE_TYPE" not in everything
    assert "set ACCELERATOR_OPENCL_DEVICE_TYPE=all to include CPUs" in \
        reason()
    assert "to include every type" in reason(
        ACCELERATOR_OPENCL_DEVICE_TYPE="cpu")


@needs_double
def test_no_init_lists_devices_unread_not_failed() -> None:
    result = run_report("--no-init", "--json", cuda_library=str(CUDA_DOUBLE),
                        FAKE_CUDA_DEVICES="2")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert_schema(document)
    assert document["backends"][0]["initialized"] is False
    for device in document["devices"]:
        assert device["read"] is False and device["error"] is None
        assert device["name"] is None and device["estimates"] == []
    text = run_report("--no-init", cuda_library=str(CUDA_DOUBLE),
                      FAKE_CUDA_DEVICES="2").stdout
    assert "error" not in text, text
    for index in range(2):
        assert (f"cuda:{index}  not read: --no-init leaves the driver "
                "uninitialised\n") in text
    assert "driver: not initialised" in text


@needs_double
def test_the_drivers_free_memory_is_no_estimate() -> None:
    document = json_report(str(CUDA_DOUBLE), FAKE_CUDA_DEVICES="1")
    assert document["devices"][0]["estimates"] == []
    text = run_report(cuda_library=str(CUDA_DOUBLE),
                      FAKE_CUDA_DEVICES="1").stdout
    assert "estimate" not in text


@pytest.mark.skipif(fake_drivers.OpenCLDouble.missing() is not None,
                    reason=str(fake_drivers.OpenCLDouble.missing()))
def test_guessed_free_memory_is_marked_an_estimate() -> None:
    env = {**report_env(MISSING_LIBRARY),
           **fake_drivers.OpenCLDouble.environment(1)}
    for arguments in (["--json"], []):
        result = subprocess.run(
            [sys.executable, "-m", "accelerator", *arguments], env=env,
            capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        if arguments:
            device = json.loads(result.stdout)["devices"][0]
            assert device["estimates"] == ["free_memory"]
            assert device["free_memory"] == device["total_memory"]
        else:
            assert re.search(r"memory: .* free \(estimate: the driver "
                             r"cannot say what is free\)\n", result.stdout)


def test_an_estimate_is_marked_in_the_text() -> None:
    text = "\n".join(_report.format_device(
        make_device(free_memory=8 * GIB, estimates=["free_memory"]),
        XPU_LABEL))
    assert ("memory: 8.00 GiB total, 8.00 GiB free (estimate: the driver "
            "cannot say what is free)") in text
