"""The doubles' interprocess layer (tests/drivers/double_ipc.h), shared by
the CUDA, HIP and Level Zero doubles, with two real processes.

tests/drivers/check_double_ipc.c is built with the layer and the memory
(with AddressSanitizer and UBSan where the compiler has them) and run: a
parent exports an allocation and an event cell, a forked child opens the
allocation through /proc and with the descriptor received over a Unix
socket (Level Zero's way), reads and writes it, and completes the record
the parent blocks on; plus the refusals and the live kinds (its own
CHECKs; its last line reads "0 failed").
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import kernel_code
from fake_drivers import REPO

DRIVERS = REPO / "tests" / "drivers"


@pytest.fixture(scope="module")
def check_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    program = tmp_path_factory.mktemp("check") / "check_double_ipc"
    build = kernel_code.sanitized_program(
        program, [DRIVERS / "check_double_ipc.c",
                  DRIVERS / "double_memory.c", DRIVERS / "double_ipc.c"],
        ["-pthread", f"-I{REPO / 'csrc' / 'include'}"], [])
    assert build.returncode == 0, build.stderr
    return program


def test_two_processes_share_memory_and_an_event_cell(
        check_program: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    run = subprocess.run([str(check_program)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "0 failed", run.stdout
    # The child's three misuses, each reported once.
    reports = run.stderr.splitlines()
    assert len(reports) == 3, run.stderr
    assert "memory opened from an IPC handle" in reports[0]
    assert "not the base of memory opened from an IPC handle" in reports[1]
    assert "use after free of a device allocation" in reports[2]
