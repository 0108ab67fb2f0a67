"""The doubles' shared kernel layer (tests/drivers/double_kernels.c).

The CUDA, Level Zero and HIP doubles load device code and run native
launches through one layer; here it is checked on its own, by a small C
program (tests/drivers/check_double_kernels.c) compiled with it and the
doubles' memory: the test kernels of kernel_code.py as a native shared
object (loaded with and without a size, launched on device memory,
results checked), as PTX (nvcc) and as SPIR-V (clang-15, llvm-spirv-15)
(entry names, parameter sizes, offsets and kinds read; launches refused),
the build errors a PTX assembler reports, images for another machine,
geometry limits, and the detector of a module unloaded while a launch of
it is queued.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import kernel_code
from fake_drivers import REPO

DRIVERS = REPO / "tests" / "drivers"


def _need(tool: str) -> None:
    if not kernel_code.have(tool):
        pytest.skip(f"{tool} is not installed")


def test_the_layer_loads_reads_and_runs(tmp_path: Path) -> None:
    _need(kernel_code.NVCC)
    _need("clang-15")
    _need("llvm-spirv-15")
    program = tmp_path / "check_double_kernels"
    build = kernel_code.sanitized_program(
        program, [DRIVERS / "check_double_kernels.c",
                  DRIVERS / "double_kernels.c", DRIVERS / "double_memory.c",
                  REPO / "csrc" / "core" / "hsaco_table.c"],
        ["-pthread", f"-I{REPO / 'csrc' / 'include'}"], ["-ldl"])
    assert build.returncode == 0, build.stderr
    ptx = tmp_path / "k.ptx"
    ptx.write_bytes(kernel_code.ptx())
    spirv = tmp_path / "k.spv"
    spirv.write_bytes(kernel_code.spirv())
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    run = subprocess.run(
        [str(program), str(kernel_code.native_path()), str(ptx), str(spirv)],
        capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().endswith("0 failed"), run.stdout
    # The misuses the program provokes are reported, each once.
    assert run.stderr.count("use after free of a device allocation") == 1
    assert "module unloaded while 1 launch(es) of it are queued" in run.stderr
    assert "of an unloaded module" in run.stderr
