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
it is queued.  And cubins, built here from kernel_code.CUDA_KINDS by nvcc
and by NVRTC (each skipped, with the reason, where it is missing): their
kernels, parameters and attributes, and the same image cut, pointed
outside itself, made inconsistent and flipped at random, each in a buffer
of its exact size: refused, never read out of bounds (AddressSanitizer).
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


@pytest.fixture(scope="module")
def check_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """check_double_kernels.c built with the layer and the memory (with
    AddressSanitizer and UBSan where the compiler has them: the layer's
    parsers read untrusted images)."""
    program = tmp_path_factory.mktemp("check") / "check_double_kernels"
    build = kernel_code.sanitized_program(
        program, [DRIVERS / "check_double_kernels.c",
                  DRIVERS / "double_kernels.c", DRIVERS / "double_memory.c",
                  DRIVERS / "double_ipc.c",
                  REPO / "csrc" / "core" / "hsaco_table.c"],
        ["-pthread", f"-I{REPO / 'csrc' / 'include'}"], ["-ldl"])
    assert build.returncode == 0, build.stderr
    return program


def _check(program: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    run = subprocess.run([str(program), *args], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().endswith("0 failed"), run.stdout
    return run


def test_the_layer_loads_reads_and_runs(tmp_path: Path,
                                        check_program: Path) -> None:
    _need(kernel_code.NVCC)
    _need("clang-15")
    _need("llvm-spirv-15")
    ptx = tmp_path / "k.ptx"
    ptx.write_bytes(kernel_code.ptx())
    spirv = tmp_path / "k.spv"
    spirv.write_bytes(kernel_code.spirv())
    run = _check(check_program, str(kernel_code.native_path()), str(ptx),
                 str(spirv))
    # The misuses the program provokes are reported, each once.
    assert run.stderr.count("use after free of a device allocation") == 1
    assert "module unloaded while 1 launch(es) of it are queued" in run.stderr
    assert "of an unloaded module" in run.stderr


def _kinds_cubin(compiler: str) -> bytes:
    """kernel_code.CUDA_KINDS for sm_90, by nvcc or NVRTC."""
    if compiler == "nvcc":
        _need(kernel_code.NVCC)
        return kernel_code.cubin(kernel_code.CUDA_KINDS)
    lib, where = kernel_code.find_nvrtc()
    if lib is None:
        pytest.skip(f"no libnvrtc ({where})")
    return kernel_code.nvrtc_cubin(kernel_code.CUDA_KINDS)


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_the_layer_reads_cubins_and_refuses_damaged_ones(
        tmp_path: Path, check_program: Path, compiler: str) -> None:
    cubin = tmp_path / "kinds.cubin"
    cubin.write_bytes(_kinds_cubin(compiler))
    _check(check_program, "--cubin", str(cubin))
