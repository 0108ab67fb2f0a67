"""Our OpenCL declarations (csrc/backends/opencl/opencl_api.h) match Khronos' CL/cl.h.

tests/drivers/check_opencl_api.c includes both and asserts, with
_Static_assert, that every constant and function signature we declare is
the standard's; it is compiled with -Werror.
"""
from __future__ import annotations

import pathlib

import pytest

from fake_drivers import REPO
from test_cuda_api_header import compile_check

CL_INCLUDE = pathlib.Path("/usr/include")
CHECK = REPO / "tests" / "drivers" / "check_opencl_api.c"

pytestmark = pytest.mark.skipif(
    not (CL_INCLUDE / "CL" / "cl.h").exists(),
    reason="no Khronos OpenCL headers (apt-get install opencl-c-headers)")


def test_declarations_match_khronos(tmp_path: pathlib.Path) -> None:
    result = compile_check(tmp_path, CHECK)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("right, wrong, message", [
    ("X(clFinish, cl_int, (cl_command_queue command_queue))",
     "X(clFinish, cl_int, (cl_command_queue command_queue, int extra))",
     "clFinish signature differs"),
    ("X(CL_INVALID_OPERATION, -59)", "X(CL_INVALID_OPERATION, -58)",
     "CL_INVALID_OPERATION differs"),
], ids=["signature", "constant"])
def test_the_check_catches_a_wrong_declaration(
        tmp_path: pathlib.Path, right: str, wrong: str, message: str) -> None:
    header = (REPO / "csrc/backends/opencl/opencl_api.h").read_text()
    changed = header.replace(right, wrong)
    assert changed != header
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "opencl_api.h").write_text(changed)
    source = tmp_path / "sub" / "check.c"
    source.parent.mkdir()
    source.write_text(CHECK.read_text().replace(
        '"../../csrc/backends/opencl/opencl_api.h"', '"../backends/opencl_api.h"'))
    result = compile_check(tmp_path, source)
    assert result.returncode != 0
    assert message in result.stderr
