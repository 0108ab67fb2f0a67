"""Our CUDA declarations (csrc/backends/cuda/cuda_api.h) match NVIDIA's cuda.h,
and our NVML ones (csrc/backends/cuda/nvml_api.h) NVIDIA's nvml.h.

tests/drivers/check_cuda_api.c (check_nvml_api.c) includes both and
asserts, with _Static_assert, that every constant, type and function
signature we declare is NVIDIA's; it is compiled with -Werror.  nvml.h
comes from the toolkit, or from PyPI's nvidia-nvml-dev-cu12
(tests/requirements.txt).
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from fake_drivers import REPO

CUDA_INCLUDE = pathlib.Path(
    os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
CHECK = REPO / "tests" / "drivers" / "check_cuda_api.c"
CHECK_NVML = REPO / "tests" / "drivers" / "check_nvml_api.c"


def nvml_include() -> pathlib.Path | None:
    """Where nvml.h is: the toolkit's include folder or the PyPI package."""
    if (CUDA_INCLUDE / "nvml.h").exists():
        return CUDA_INCLUDE
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        include = pathlib.Path(root) / "nvml_dev" / "include"
        if (include / "nvml.h").exists():
            return include
    return None


NVML_INCLUDE = nvml_include()
needs_nvml_h = pytest.mark.skipif(
    NVML_INCLUDE is None,
    reason="no nvml.h (pip install nvidia-nvml-dev-cu12, or a CUDA toolkit)")


def compile_check(tmp_path: pathlib.Path, source: pathlib.Path,
                  *extra: str) -> subprocess.CompletedProcess:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler"
    return subprocess.run(
        [compiler, "-std=c11", "-Wall", "-Wextra", "-Werror",
         f"-I{CUDA_INCLUDE}", *extra, "-c", str(source), "-o",
         str(tmp_path / "check.o")], capture_output=True, text=True)


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").exists(),
                    reason=f"no CUDA toolkit headers in {CUDA_INCLUDE}")
def test_declarations_match_the_toolkit(tmp_path: pathlib.Path) -> None:
    result = compile_check(tmp_path, CHECK)
    assert result.returncode == 0, result.stderr


def compile_wrong(tmp_path: pathlib.Path, check: pathlib.Path, header: str,
                  old: str, new: str,
                  *extra: str) -> subprocess.CompletedProcess:
    """Compile check against a copy of csrc/backends/<its folder>/<header>
    (the one check includes) with old replaced by new."""
    included = re.search(rf'"\.\./\.\./(csrc/backends/\w+/{re.escape(header)})"',
                         check.read_text())
    assert included, f"{check.name} does not include {header}"
    text = (REPO / included.group(1)).read_text()
    wrong = text.replace(old, new)
    assert wrong != text
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / header).write_text(wrong)
    source = tmp_path / "sub" / "check.c"
    source.parent.mkdir()
    source.write_text(check.read_text().replace(
        included.group(0), f'"../backends/{header}"'))
    return compile_check(tmp_path, source, *extra)


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").exists(),
                    reason=f"no CUDA toolkit headers in {CUDA_INCLUDE}")
def test_the_check_catches_a_wrong_declaration(tmp_path: pathlib.Path) -> None:
    result = compile_wrong(
        tmp_path, CHECK, "cuda_api.h",
        "X(cuStreamQuery, cuStreamQuery, 2000, (CUstream hStream))",
        "X(cuStreamQuery, cuStreamQuery, 2000, (CUstream hStream, int x))")
    assert result.returncode != 0
    assert "cuStreamQuery signature differs" in result.stderr


@needs_nvml_h
def test_nvml_declarations_match_nvml_h(tmp_path: pathlib.Path) -> None:
    result = compile_check(tmp_path, CHECK_NVML, f"-I{NVML_INCLUDE}")
    assert result.returncode == 0, result.stderr


@needs_nvml_h
def test_the_nvml_check_catches_a_wrong_declaration(
        tmp_path: pathlib.Path) -> None:
    result = compile_wrong(tmp_path, CHECK_NVML, "nvml_api.h",
                           "(unsigned int *deviceCount)", "(int *deviceCount)",
                           f"-I{NVML_INCLUDE}")
    assert result.returncode != 0
    assert "nvmlDeviceGetCount_v2 signature differs" in result.stderr
