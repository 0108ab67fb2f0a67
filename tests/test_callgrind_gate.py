"""The callgrind gate: no hot call grows more than 10% in instructions.

Instruction counts under callgrind do not change from run to run, so they
catch a regression that wall-clock timings on a shared machine would hide.
``bench/bench_api.py --callgrind-baseline check`` counts the instructions
of each API call on the CUDA double and compares them with the committed
``bench/callgrind_baseline.json``; ``--callgrind-baseline write`` rewrites
that file on purpose (commit it with the change that explains it).

Skipped, with the reason, where valgrind is missing (tests/run.sh installs
it), where the extension is instrumented (the ASan, UBSan and coverage
build of tests/build.sh counts other instructions), and
where the baseline was taken under another interpreter.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from build_info import instrumented_extension

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench" / "bench_api.py"


def bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_api", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_api"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_comparison_flags_growth_over_ten_percent() -> None:
    bench = bench_module()
    base = {"noop": 200.0, "current_stream": 300.0, "Event.query": 400.0}
    same = {"noop": 200.0, "current_stream": 330.0, "Event.query": 350.0}
    text, failed = bench.compare_to_baseline(base, same)
    assert failed == [], text
    grown = dict(same, current_stream=331.0)
    text, failed = bench.compare_to_baseline(base, grown)
    assert failed == ["current_stream: 300 -> 331 Ir/call (+10.3%)"], text
    assert "--callgrind-baseline write" in text
    text, failed = bench.compare_to_baseline(base, {"noop": 200.0})
    assert failed == ["current_stream: no longer measured",
                      "Event.query: no longer measured"]


def test_hot_calls_stay_within_ten_percent_of_the_baseline() -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (tests/run.sh installs it)")
    marks = instrumented_extension()
    if marks is not None:
        pytest.skip(f"the extension is instrumented ({marks}): the ASan and "
                    "coverage builds count other instructions than the "
                    "plain build the baseline was taken on")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--callgrind-baseline", "check"],
        env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode == 2:
        pytest.skip(proc.stdout.strip() or proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout + proc.stderr
