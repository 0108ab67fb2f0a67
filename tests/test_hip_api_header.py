"""Our HIP declarations (csrc/backends/hip/hip_api.h) match AMD's
hip/hip_runtime_api.h (Debian's libamdhip64-dev, ROCm 5.2).

tests/drivers/check_hip_api.c includes both and asserts, with
_Static_assert, that every constant, type and function signature we
declare is AMD's; it is compiled with -Werror.  AMD's headers need
__HIP_PLATFORM_AMD__ to pick their platform.
"""
from __future__ import annotations

import pathlib

import pytest

from fake_drivers import REPO
from test_cuda_api_header import compile_check, compile_wrong

HIP_HEADER = pathlib.Path("/usr/include/hip/hip_runtime_api.h")
CHECK = REPO / "tests" / "drivers" / "check_hip_api.c"
PLATFORM = "-D__HIP_PLATFORM_AMD__"

needs_hip_h = pytest.mark.skipif(
    not HIP_HEADER.exists(),
    reason=f"no {HIP_HEADER} (apt-get install libamdhip64-dev)")


@needs_hip_h
def test_declarations_match_rocm(tmp_path: pathlib.Path) -> None:
    result = compile_check(tmp_path, CHECK, PLATFORM)
    assert result.returncode == 0, result.stderr


@needs_hip_h
def test_the_check_catches_a_wrong_signature(tmp_path: pathlib.Path) -> None:
    result = compile_wrong(
        tmp_path, CHECK, "hip_api.h",
        "X(hipStreamQuery, hipError_t, (hipStream_t stream))",
        "X(hipStreamQuery, hipError_t, (hipStream_t stream, int x))",
        PLATFORM)
    assert result.returncode != 0
    assert "hipStreamQuery signature differs" in result.stderr


@needs_hip_h
def test_the_check_catches_a_wrong_constant(tmp_path: pathlib.Path) -> None:
    result = compile_wrong(tmp_path, CHECK, "hip_api.h",
                           "X(hipErrorNotReady, 600)",
                           "X(hipErrorNotReady, 34)", PLATFORM)
    assert result.returncode != 0
    assert "hipErrorNotReady differs" in result.stderr
