"""The test command itself: tests/stages.py runs every stage whatever
fails, and sums up; a double's detector fails one test, not every test
after it."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from fake_drivers import REPO, CudaDouble

STAGES = REPO / "tests" / "stages.py"


def run_plan(tmp_path: pathlib.Path, plan: list[dict],
             *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return subprocess.run(
        [sys.executable, str(STAGES), "--plan", str(tmp_path / "plan.json"),
         "--run-dir", str(tmp_path / "run"), *options],
        capture_output=True, text=True, timeout=300)


def table(out: str) -> dict[str, list[str]]:
    """stage -> its row's cells, from the summary table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    rows = {}
    for line in lines[start + 2:]:
        if line.startswith("-"):
            break
        cells = line.split()
        rows[cells[0]] = cells[1:]
    return rows


def test_a_failing_first_stage_leaves_every_later_stage_running(
        tmp_path: pathlib.Path) -> None:
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_red.py").write_text(
        "def test_red():\n    assert 1 == 2\n\ndef test_green():\n    pass\n")
    (tests / "test_green.py").write_text(
        "import pytest\n\ndef test_a():\n    pass\n\n"
        "@pytest.mark.skip(reason='shown as skipped')\ndef test_b():\n"
        "    pass\n")
    plan = [
        {"name": "first", "cmd": [str(tests / "test_red.py")], "budget": 60},
        {"name": "second", "cmd": [str(tests / "test_green.py")],
         "budget": 60},
        {"name": "needs-first", "cmd": ["true"], "kind": "cmd",
         "budget": 60, "needs": ["first"]},
        {"name": "after-first", "cmd": [sys.executable, "-c",
                                        "print('3 passed, 0 failed')"],
         "kind": "cmd", "budget": 60, "after": ["first"]},
    ]
    proc = run_plan(tmp_path, plan)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    rows = table(out)
    assert list(rows) == ["first", "second", "needs-first", "after-first"]
    assert rows["first"][:3] == ["1", "1", "0"] and "failed" in rows["first"]
    assert rows["second"][:3] == ["1", "0", "1"] and "passed" in rows["second"]
    assert "not" in rows["needs-first"] and "run" in rows["needs-first"]
    assert rows["after-first"][:3] == ["3", "0", "0"]
    assert "test_red.py::test_red" in out   # the failed stage's log tail
    assert out.rstrip().splitlines()[-1] == "total: 5 passed, 2 failed, " \
        "1 skipped"


def test_a_command_without_counts_shows_ok_or_its_exit_status(
        tmp_path: pathlib.Path) -> None:
    """A command stage that prints no test counts (a build) is not "0
    passed, 0 failed": its row says ok or its exit status, and a failed
    one counts as one failed in the total."""
    plan = [{"name": "fine", "cmd": ["true"], "kind": "cmd", "budget": 60},
            {"name": "broken", "cmd": [sys.executable, "-c",
                                       "raise SystemExit(3)"],
             "kind": "cmd", "budget": 60},
            {"name": "counted", "cmd": [sys.executable, "-c",
                                        "print('2 passed, 1 skipped')"],
             "kind": "cmd", "budget": 60}]
    proc = run_plan(tmp_path, plan)
    assert proc.returncode == 1, proc.stdout
    rows = table(proc.stdout)
    assert rows["fine"][0] == "ok" and rows["fine"][-1] == "passed", rows
    assert rows["broken"][:2] == ["exit", "3"], rows
    assert "failed" in rows["broken"], rows
    assert rows["counted"][:3] == ["2", "0", "1"], rows
    assert "passed fine in" in proc.stdout and ": ok" in proc.stdout
    assert ": exit 3 (exit status 3)" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == \
        "total: 2 passed, 1 failed, 1 skipped"


def test_a_stage_over_its_budget_fails_only_where_budgets_are_enforced(
        tmp_path: pathlib.Path) -> None:
    plan = [{"name": "slow", "cmd": [sys.executable, "-c",
                                     "import time; time.sleep(1.5)"],
             "kind": "cmd", "budget": 1}]
    proc = run_plan(tmp_path, plan)
    assert proc.returncode == 0, proc.stdout
    assert "OVER BUDGET" in proc.stdout and "(warning)" in proc.stdout
    proc = run_plan(tmp_path, plan, "--enforce-budgets")
    assert proc.returncode == 1, proc.stdout
    assert "budget: stage slow took" in proc.stdout


def test_a_hung_stage_is_stopped_and_the_run_still_sums_up(
        tmp_path: pathlib.Path) -> None:
    plan = [{"name": "hangs", "cmd": [sys.executable, "-c",
                                      "import time; time.sleep(600)"],
             "kind": "cmd", "budget": 0.5},
            {"name": "fine", "cmd": ["true"], "kind": "cmd", "budget": 60}]
    proc = run_plan(tmp_path, plan)
    assert proc.returncode == 1
    rows = table(proc.stdout)
    assert "timed" in rows["hangs"] and "passed" in rows["fine"]


def test_a_hung_test_ends_its_stage_with_every_thread_s_stack(
        tmp_path: pathlib.Path) -> None:
    """A test blocked in a wait that no signal interrupts (the GIL
    released, as in a driver's host wait) ends its stage after the test
    timeout, long before 4x the budget, and the log shows where."""
    pytest.importorskip("pytest_timeout")
    test = tmp_path / "test_stuck.py"
    test.write_text(
        "import threading\n\n"
        "def test_stuck():\n"
        "    threading.Event().wait()\n")
    plan = [{"name": "stuck", "cmd": [str(test)], "budget": 60}]
    env = {**os.environ, "ACCELERATOR_TEST_TIMEOUT": "2"}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    proc = subprocess.run(
        [sys.executable, str(STAGES), "--plan", str(tmp_path / "plan.json"),
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1
    assert "failed" in table(proc.stdout)["stuck"], proc.stdout
    log = (tmp_path / "run" / "logs" / "stuck.log").read_text()
    assert "Timeout" in log and "test_stuck" in log, log


def test_the_builtin_plan_names_every_configuration() -> None:
    proc = subprocess.run([sys.executable, str(STAGES), "--list"],
                          capture_output=True, text=True, check=True)
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    for name in ("setup", "build", "build-instrumented", "cuda", "cuda-around",
                 "cuda-direct",
                 "xpu", "xpu-intercept", "xpu-validation", "xpu-two-drivers",
                 "xpu-two-drivers-fuzz",
                 "opencl", "opencl-direct", "plain", "plain-xpu",
                 "plain-opencl", "hip", "hip-direct", "plain-hip", "stubs", "docs", "wheel",
                 "coverage"):
        assert name in names


def test_a_detector_fails_the_test_it_fired_in_and_no_other(
        tmp_path: pathlib.Path) -> None:
    missing = CudaDouble.missing()
    if missing:
        pytest.skip(missing)
    # A suite of the behaviour conftest with two tests: the first makes the
    # double see a bad access, the second checks that the count is back to
    # zero.  The conftests are linked, so they find the repository.
    behaviour = tmp_path / "tests" / "behaviour"
    behaviour.mkdir(parents=True)
    for name in ("conftest.py", "fake_drivers.py"):
        (tmp_path / "tests" / name).symlink_to(REPO / "tests" / name)
    (behaviour / "conftest.py").symlink_to(
        REPO / "tests" / "behaviour" / "conftest.py")
    (behaviour / "test_detector.py").write_text(
        "import ctypes\n\n"
        "def test_bad(driver):\n"
        "    free = driver.lib.cuMemFree_v2\n"
        "    free.argtypes = [ctypes.c_ulonglong]\n"
        "    free(0x1234)\n\n"
        "def test_after(driver):\n"
        "    assert driver.live('bad_access') == 0\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("ACCELERATOR_TEST_BACKEND", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "no:accelerator.pytest_plugin", "tests/behaviour"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert "1 failed, 1 passed" in out, out + proc.stderr
    assert "CudaDouble's detectors fired during this test's call: " \
        "{'bad_access': 1}" in out
    assert "FAILED tests/behaviour/test_detector.py::test_bad" in out


def test_the_run_deadline_stops_running_stages_and_starts_no_more(
        tmp_path: pathlib.Path) -> None:
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    plan = [{"name": "long", "cmd": sleep, "kind": "cmd", "budget": 600},
            {"name": "later", "cmd": ["true"], "kind": "cmd", "budget": 60,
             "after": ["long"]}]
    proc = run_plan(tmp_path, plan, "--deadline", "1")
    assert proc.returncode == 1
    rows = table(proc.stdout)
    assert "timed" in rows["long"] and "deadline" in " ".join(rows["long"])
    assert "not" in rows["later"]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("total: ")


def test_a_stage_that_others_wait_for_starts_before_a_longer_one_alone(
        tmp_path: pathlib.Path) -> None:
    """Longest chain first: a stage whose dependents make the longer
    chain (the wheel, then the suites under other Pythons) starts before
    a stage longer than it alone, so that the lanes end closer together."""
    plan = [
        {"name": "long", "cmd": ["true"], "kind": "cmd", "budget": 10},
        {"name": "first", "cmd": ["true"], "kind": "cmd", "budget": 6},
        {"name": "then", "cmd": ["true"], "kind": "cmd", "budget": 6,
         "needs": ["first"]},
    ]
    proc = run_plan(tmp_path, plan, "--jobs", "1")
    assert proc.returncode == 0, proc.stdout
    starts = [line.split("start ")[1] for line in proc.stdout.splitlines()
              if "] start " in line]
    assert starts == ["first", "long", "then"], proc.stdout


def test_the_wheel_is_checked_once_and_run_under_every_other_python() -> None:
    """The wheel stage checks what can differ from the in-place build and
    runs a slice, not the whole suite again; the behaviour suite runs
    against the same wheel under each other CPython >= 3.11, one stage
    each, after it."""
    sys.path.insert(0, str(REPO / "tests"))
    try:
        import stages
    finally:
        sys.path.remove(str(REPO / "tests"))
    plan = {s.name: s for s in stages.builtin_plan(REPO / "build" / "x")}
    assert plan["wheel"].cmd[:3] == ["bash", "tests/check_wheel.sh", "build"]
    for version in ("3.12", "3.13"):
        stage = plan[f"wheel-{version}"]
        assert stage.cmd[2] == "suite" and stage.cmd[-1] == version
        assert stage.needs == ["wheel"]
        assert stage.cmd[3] == plan["wheel"].cmd[3]   # the same wheel


def test_a_missing_python_is_a_skip_with_the_reason(
        tmp_path: pathlib.Path) -> None:
    proc = subprocess.run(
        ["bash", str(REPO / "tests" / "check_wheel.sh"), "suite",
         str(tmp_path), "3.99"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("0 passed, 1 skipped: no CPython 3.99 "), \
        proc.stdout
    log = tmp_path / "log"
    log.write_text(proc.stdout)
    sys.path.insert(0, str(REPO / "tests"))
    try:
        import stages
    finally:
        sys.path.remove(str(REPO / "tests"))
    assert stages.command_counts(log) == (0, 0, 1)
