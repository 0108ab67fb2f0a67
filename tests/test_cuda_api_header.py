"""Our CUDA declarations (csrc/backends/cuda_api.h) match NVIDIA's cuda.h.

tests/drivers/check_cuda_api.c includes both and asserts, with
_Static_assert, that every constant, type and function signature we
declare is the toolkit's; it is compiled with -Werror.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from fake_drivers import REPO

CUDA_INCLUDE = pathlib.Path(
    os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
CHECK = REPO / "tests" / "drivers" / "check_cuda_api.c"


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


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").exists(),
                    reason=f"no CUDA toolkit headers in {CUDA_INCLUDE}")
def test_the_check_catches_a_wrong_declaration(tmp_path: pathlib.Path) -> None:
    header = (REPO / "csrc/backends/cuda_api.h").read_text()
    wrong = header.replace("X(cuStreamQuery, cuStreamQuery, 2000, "
                           "(CUstream hStream))",
                           "X(cuStreamQuery, cuStreamQuery, 2000, "
                           "(CUstream hStream, int extra))")
    assert wrong != header
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "cuda_api.h").write_text(wrong)
    source = tmp_path / "sub" / "check.c"
    source.parent.mkdir()
    source.write_text(CHECK.read_text().replace(
        '"../../csrc/backends/cuda_api.h"', '"../backends/cuda_api.h"'))
    result = compile_check(tmp_path, source)
    assert result.returncode != 0
    assert "cuStreamQuery signature differs" in result.stderr
