"""bench/bench_api.py --check: a missed budget is a nonzero exit.

The suite asserts no timing: the end-to-end test checks only that the exit
status and the list of misses agree with the table's ``met?`` column,
whatever the machine's speed.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

import fake_drivers
from test_callgrind_gate import BENCH, REPO, bench_module


def test_missed_budgets_are_the_rows_judged_no() -> None:
    bench = bench_module()
    rows = [{"api": "is_available", "met": "yes"},
            {"api": "device", "met": "NO, 7.15x (+138%)"},
            {"api": "set_stream", "met": "-"},
            {"api": "Event.record", "met": "NO, +28 ns"},
            {"api": "import"}]
    assert bench.missed_budgets(rows) == [
        "device: NO, 7.15x (+138%)", "Event.record: NO, +28 ns"]
    assert bench.missed_budgets([{"api": "x", "met": "yes"}]) == []


def test_budget_judgement() -> None:
    bench = bench_module()
    assert bench.budget_met("noop1.3", 1.2, None) == "yes"
    assert bench.budget_met("noop1.3", 2.6, None).startswith("NO, 2.60x")
    assert bench.budget_met("driver50", None, 51.0) == "NO, +1 ns"
    assert bench.budget_met("report", 9.0, 9.0) == "-"


@pytest.mark.skipif(not fake_drivers.CUDA_DOUBLE.exists(),
                    reason="the CUDA driver double is not built")
def test_check_exits_nonzero_exactly_when_a_budget_is_missed() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--double", "--quick", "--check"],
        env=fake_drivers.clean_environment(), capture_output=True,
        text=True, timeout=600, cwd=REPO)
    judged = re.findall(r"\|\s*(yes|NO, [^|]*?)\s*\|", result.stdout)
    assert judged, result.stdout + result.stderr
    misses = [j for j in judged if j.startswith("NO")]
    if misses:
        assert result.returncode == 1, result.stderr
        assert f"{len(misses)} budget(s) missed:" in result.stderr
        for miss in misses:
            assert miss in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert "every budget met" in result.stderr
