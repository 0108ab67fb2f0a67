"""The pytest plugin under pytest-xdist: each worker its own devices.

Inner pytest runs with ``-n N`` on the CUDA double (each worker is a
process of its own, its double too).  Every test records, in a file, the
worker it ran on, its ACCELERATOR_VISIBLE_DEVICES and the UUID of the
device it used: the double's UUIDs end with the physical device number.
"""
from __future__ import annotations

import json
import os
import pathlib

import pytest

from test_pytest_plugin import needs_double, plugin_arguments, use_double

pytest_plugins = ["pytester"]

xdist = pytest.importorskip("xdist", reason="pytest-xdist is not installed "
                                            "(tests/requirements.txt)")

RECORDING_TESTS = """
import json, os
import pytest
import accelerator

@pytest.mark.parametrize("n", range({tests}))
def test_device(accel_device, n):
    stream = accelerator.Stream(accel_device)
    stream.record_event().synchronize()
    with open({out!r}, "a") as f:
        f.write(json.dumps(dict(
            worker=os.environ.get("PYTEST_XDIST_WORKER"),
            visible=os.environ.get("ACCELERATOR_VISIBLE_DEVICES"),
            index=accel_device.index, count=accelerator.device_count(),
            uuid=accelerator.get_device_properties(accel_device).uuid))
            + "\\n")

@pytest.mark.requires_accelerator
def test_marked():
    pass

def test_plain():
    pass
"""


def run_xdist(pytester: pytest.Pytester, *arguments: str,
              tests: int = 12) -> tuple[pytest.RunResult, list[dict]]:
    out = pytester.path / "records.jsonl"
    pytester.makepyfile(RECORDING_TESTS.format(tests=tests, out=str(out)))
    load = ["-p", "xdist"] if os.environ.get(
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD") else []
    result = pytester.runpytest_subprocess(
        *plugin_arguments(), *load, "-rfEs", "-p", "no:cacheprovider",
        *arguments)
    records = ([json.loads(line) for line in out.read_text().splitlines()]
               if out.exists() else [])
    return result, records


@needs_double
def test_each_worker_runs_on_its_own_device(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    use_double(monkeypatch, 2)
    result, records = run_xdist(pytester, "-n", "2")
    result.assert_outcomes(passed=14)
    result.stdout.fnmatch_lines([
        "accelerator xdist: 2 cuda devices, 1 per worker (spread evenly)",
        "  gw0: cuda:0 (ACCELERATOR_VISIBLE_DEVICES=0)",
        "  gw1: cuda:1 (ACCELERATOR_VISIBLE_DEVICES=1)",
    ])
    assert len(records) == 12
    assert {r["worker"] for r in records} == {"gw0", "gw1"}
    for record in records:
        physical = record["worker"][-1]
        assert record["visible"] == physical
        assert record["index"] == 0 and record["count"] == 1
        assert record["uuid"].endswith(physical), record


@needs_double
def test_devices_per_worker(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    use_double(monkeypatch, 4)
    result, records = run_xdist(pytester, "-n", "2",
                                "--accelerator-devices-per-worker=2",
                                tests=4)
    result.assert_outcomes(passed=10)
    result.stdout.fnmatch_lines([
        "accelerator xdist: 4 cuda devices, 2 per worker "
        "(--accelerator-devices-per-worker=2)",
        "  gw0: cuda:0, cuda:1 (ACCELERATOR_VISIBLE_DEVICES=0,1)",
        "  gw1: cuda:2, cuda:3 (ACCELERATOR_VISIBLE_DEVICES=2,3)",
    ])
    for record in records:
        first = 0 if record["worker"] == "gw0" else 2
        assert record["count"] == 2
        assert record["uuid"].endswith(str(first + record["index"]))


@needs_double
def test_a_worker_without_a_device_skips_with_the_reason(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    use_double(monkeypatch, 1)
    result, records = run_xdist(pytester, "-n", "2", tests=6)
    result.stdout.fnmatch_lines([
        "  gw0: cuda:0 (ACCELERATOR_VISIBLE_DEVICES=0)",
        "  gw1: none (device tests skip)",
    ])
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] + outcomes.get("skipped", 0) == 8
    assert {r["worker"] for r in records} <= {"gw0"}
    assert all(r["uuid"].endswith("0") for r in records)
    if outcomes.get("skipped"):
        result.stdout.fnmatch_lines([
            "SKIPPED * xdist worker gw1 has no accelerator device: 1 cuda "
            "device for 2 workers, 1 per worker (spread evenly); run fewer "
            "workers (-n) to use every worker"])


@needs_double
@pytest.mark.parametrize("arguments", [
    ("-p", "no:xdist"), ("-n", "0")], ids=["no-xdist", "n0"])
def test_without_workers_nothing_changes(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        arguments: tuple[str, ...]) -> None:
    use_double(monkeypatch, 2)
    out = pytester.path / "records.jsonl"
    pytester.makepyfile(RECORDING_TESTS.format(tests=1, out=str(out)))
    result = pytester.runpytest_subprocess(*plugin_arguments(), "-rfEs",
                                           *arguments)
    result.assert_outcomes(passed=4)
    assert "accelerator xdist" not in result.stdout.str()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["uuid"][-1] for r in records) == ["0", "1"]
    assert all(r["visible"] is None for r in records)


@needs_double
def test_the_plugin_works_without_xdist_installed(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """xdist unimportable and not loaded: the plugin imports nothing of
    it and its optional hooks stay silent."""
    use_double(monkeypatch, 2)
    blocker = pytester.path / "blocker"
    blocker.mkdir()
    (blocker / "xdist.py").write_text(
        "raise ImportError('pytest-xdist is not installed (test)')\n")
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join([str(blocker), os.environ["PYTHONPATH"]]))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    out = pytester.path / "records.jsonl"
    pytester.makepyfile(RECORDING_TESTS.format(tests=1, out=str(out)))
    result = pytester.runpytest_subprocess(
        "-p", "accelerator.pytest_plugin", "-rfEs")
    result.assert_outcomes(passed=4)


@needs_double
def test_a_bad_devices_per_worker_is_a_usage_error(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    use_double(monkeypatch, 2)
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest_subprocess(
        *plugin_arguments(), "--accelerator-devices-per-worker=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--accelerator-devices-per-worker: expected a number of devices "
        ">= 1, got '0'*"])


def test_worker_ids_follow_xdist() -> None:
    from accelerator import _xdist
    assert _xdist.worker_ids(["popen"] * 3) == ["gw0", "gw1", "gw2"]
    assert _xdist.worker_ids(["2*popen", "popen"]) == ["gw0", "gw1", "gw2"]
    plan = _xdist.make_plan(["gw0", "gw1"], "cuda", 5, None, [4, 3, 2, 1, 0])
    assert [s.visible_devices for s in plan.shares] == ["4,3", "2,1"]
    assert pathlib.Path(_xdist.__file__).name == "_xdist.py"


@needs_double
def test_skip_decisions_do_not_initialise_cuda(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Markers are decided through NVML: a session whose device tests all
    skip never ran cuInit (read from the CUDA double's counters)."""
    use_double(monkeypatch, 2)
    out = pytester.path / "cuinit.txt"
    pytester.makeconftest(f"""
import sys
sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
import fake_drivers
cuda = fake_drivers.CudaDouble()

def pytest_sessionfinish(session):
    with open({str(out)!r}, "w") as f:
        f.write(str(cuda.calls("cuInit")))
""")
    pytester.makepyfile("""
import pytest

@pytest.mark.requires_devices(3)
def test_three():
    pass

@pytest.mark.requires_accelerator
def test_available():
    pass
""")
    result = pytester.runpytest_subprocess(*plugin_arguments(), "-rfEs")
    result.assert_outcomes(passed=1, skipped=1)
    assert out.read_text() == "0"


@needs_double
def test_worker_shares_compose_with_the_controllers_visible_devices(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller sees the backend's devices 2 and 0 (in that order):
    gw0 gets the backend's 2, gw1 its 0."""
    use_double(monkeypatch, 3)
    monkeypatch.setenv("ACCELERATOR_VISIBLE_DEVICES", "2,0")
    result, records = run_xdist(pytester, "-n", "2")
    result.assert_outcomes(passed=14)
    result.stdout.fnmatch_lines([
        "  gw0: cuda:0 (ACCELERATOR_VISIBLE_DEVICES=2)",
        "  gw1: cuda:1 (ACCELERATOR_VISIBLE_DEVICES=0)",
    ])
    physical = {"gw0": "2", "gw1": "0"}
    for record in records:
        assert record["uuid"].endswith(physical[record["worker"]]), record
