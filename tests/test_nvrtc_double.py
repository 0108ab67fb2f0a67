"""NVRTC in a process whose libcuda.so.1 is the CUDA driver double, and
the double's answers NVRTC relies on.

NVRTC 13 opens the libcuda.so.1 the process has (it dlsyms cuInit, then
cuGetExportTable on the library's own path) and asks it for a private
table; without the symbol it crashed, and the lead's source kernels
(format "cuda-c++") compile in the process the backend runs in.  So:

- saxpy compiled by NVRTC (ctypes, --gpu-architecture=sm_90, the cubin)
  in a fresh process with the double loaded as libcuda.so.1, by ctypes and
  through ``import accelerator`` with ACCELERATOR_CUDA_LIBRARY (the cubin
  then loads on the double and tells its parameters).  Skipped, with the
  reason, where no libnvrtc is found.
- The double's cuGetProcAddress for a name it lacks, or at a version
  older than the name's first variant: CUDA_ERROR_NOT_FOUND with pfn NULL
  and symbolStatus set, as the driver answers (not CUDA_SUCCESS with a
  NULL pfn, which cuda.h's comment describes and callers that check only
  the result take for a function); cuGetExportTable exported, counted,
  reachable through cuGetProcAddress, and an error for every table id.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

import fake_drivers
import kernel_code
from fake_drivers import CUDA_DOUBLE, REPO

pytestmark = pytest.mark.skipif(not CUDA_DOUBLE.exists(),
                                reason="run make -C tests/drivers")

SUCCESS, INVALID_VALUE, NOT_FOUND = 0, 1, 500
PROC_SUCCESS, PROC_SYMBOL_NOT_FOUND, PROC_VERSION_NOT_SUFFICIENT = 0, 1, 2


def nvrtc_or_skip() -> str:
    lib, where = kernel_code.find_nvrtc()
    if lib is None:
        pytest.skip(f"no libnvrtc ({where})")
    return where


def run_child(code: str, **env: str) -> dict[str, Any]:
    """code in a fresh interpreter (tests/ importable); its last line of
    output, as JSON."""
    environment = fake_drivers.clean_environment()
    environment.update(PYTHONPATH=os.pathsep.join(
        [str(REPO), str(REPO / "tests")]), **env)
    result = subprocess.run([sys.executable, "-c", code], env=environment,
                            capture_output=True, text=True, timeout=300,
                            cwd=REPO)
    assert result.returncode == 0, (
        f"exit status {result.returncode}\n{result.stdout}{result.stderr}")
    return json.loads(result.stdout.splitlines()[-1])


NVRTC_BY_CTYPES = """
import ctypes, json
double = ctypes.CDLL({double!r}, mode=ctypes.RTLD_GLOBAL)
double.fake_cuda_call_count.restype = ctypes.c_longlong
import kernel_code
lib, where = kernel_code.find_nvrtc()
cubin = kernel_code.nvrtc_compile(lib, kernel_code.CUDA_C, "sm_90", "cubin")
print(json.dumps({{"magic": cubin[:4].hex(),
                  "machine": int.from_bytes(cubin[18:20], "little"),
                  "export_table": double.fake_cuda_call_count(
                      b"cuGetExportTable")}}))
"""


def test_nvrtc_compiles_beside_the_double_loaded_by_ctypes() -> None:
    nvrtc_or_skip()
    seen = run_child(NVRTC_BY_CTYPES.format(double=str(CUDA_DOUBLE)))
    assert seen["magic"] == "7f454c46" and seen["machine"] == 190, seen
    # NVRTC asked the double (not some other libcuda) for its table.
    assert seen["export_table"] >= 1, seen


NVRTC_BESIDE_THE_BACKEND = """
import json
import numpy
import accelerator as a, kernel_code
assert a.is_available()
lib, where = kernel_code.find_nvrtc()
cubin = kernel_code.nvrtc_compile(lib, kernel_code.CUDA_C, "sm_90", "cubin")
m = a.Module(cubin, format="cubin")
saxpy = m.get_kernel("saxpy")
b = a.Buffer(64)
try:
    a.launch(saxpy, 1, 16, b, b, numpy.float32(2), numpy.uint32(16))
    error = None
except a.AcceleratorError as e:
    error = [e.api, e.code]
print(json.dumps({"args": saxpy.attributes["num_args"],
                  "add_one_args": m.get_kernel("add_one").attributes[
                      "num_args"],
                  "launch": error}))
"""


def test_nvrtc_compiles_beside_the_backend_on_the_double() -> None:
    """The backend opened the double (ACCELERATOR_CUDA_LIBRARY) and
    initialised it; NVRTC then compiles in the same process, and its cubin
    loads on the double."""
    nvrtc_or_skip()
    seen = run_child(NVRTC_BESIDE_THE_BACKEND,
                     **fake_drivers.CudaDouble.environment(1))
    assert seen == {"args": 4, "add_one_args": 2,
                    "launch": ["cuLaunchKernel", 209]}, seen


PROC_PRELUDE = """
import ctypes, json
lib = ctypes.CDLL({double!r})
c_p = ctypes.c_void_p
lib.fake_cuda_call_count.restype = ctypes.c_longlong
lib.cuGetProcAddress_v2.argtypes = [ctypes.c_char_p, ctypes.POINTER(c_p),
                                    ctypes.c_int, ctypes.c_ulonglong,
                                    ctypes.POINTER(ctypes.c_int)]
lib.cuGetProcAddress.argtypes = [ctypes.c_char_p, ctypes.POINTER(c_p),
                                 ctypes.c_int, ctypes.c_ulonglong]
SENTINEL = 0x1234

def v2(name, version):
    fn, status = c_p(SENTINEL), ctypes.c_int(-1)
    rc = lib.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), version,
                                 0, ctypes.byref(status))
    return [rc, fn.value, status.value]

def v1(name, version):
    fn = c_p(SENTINEL)
    rc = lib.cuGetProcAddress(name.encode(), ctypes.byref(fn), version, 0)
    return [rc, fn.value]

def address(name):
    return ctypes.cast(getattr(lib, name), c_p).value
"""

PROC_CHILD = PROC_PRELUDE + """
print(json.dumps({{
    "unknown": v2("cuNoSuchFunction", 12000),
    "unknown_v1": v1("cuNoSuchFunction", 12000),
    "too_old": v2("cuFuncGetParamInfo", 12030),
    "too_old_v1": v1("cuFuncGetParamInfo", 12030),
    "param_info": v2("cuFuncGetParamInfo", 12040),
    "init": v2("cuInit", 12000),
    "too_new": v2("cuInit", 99000),
    "addresses": {{n: address(n) for n in ("cuFuncGetParamInfo", "cuInit")}},
}}))
"""


def test_get_proc_address_answers_not_found_as_the_driver() -> None:
    seen = run_child(PROC_CHILD.format(double=str(CUDA_DOUBLE)))
    addresses = seen["addresses"]
    assert seen["unknown"] == [NOT_FOUND, None, PROC_SYMBOL_NOT_FOUND]
    assert seen["unknown_v1"] == [NOT_FOUND, None]
    assert seen["too_old"] == [NOT_FOUND, None, PROC_VERSION_NOT_SUFFICIENT]
    assert seen["too_old_v1"] == [NOT_FOUND, None]
    assert seen["param_info"] == [SUCCESS, addresses["cuFuncGetParamInfo"],
                                  PROC_SUCCESS]
    assert seen["init"] == [SUCCESS, addresses["cuInit"], PROC_SUCCESS]
    # Newer than the driver: the documented INVALID_VALUE.
    assert seen["too_new"][:2] == [INVALID_VALUE, None]


EXPORT_TABLE_CHILD = PROC_PRELUDE + """
lib.cuGetExportTable.argtypes = [ctypes.POINTER(c_p), ctypes.c_char_p]
table = c_p(SENTINEL)
out = {{
    "proc": v2("cuGetExportTable", 3000),
    "address": address("cuGetExportTable"),
    "table": [lib.cuGetExportTable(ctypes.byref(table), bytes(range(16))),
              table.value],
    "null": [lib.cuGetExportTable(None, bytes(16)),
             lib.cuGetExportTable(ctypes.byref(table), None)],
    "counted": lib.fake_cuda_call_count(b"cuGetExportTable"),
}}
lib.fake_cuda_fail(b"cuGetExportTable", 1, 999)
out["fault"] = lib.cuGetExportTable(ctypes.byref(table), bytes(16))
print(json.dumps(out))
"""


def test_get_export_table_knows_no_table() -> None:
    """Exported (NVRTC dlsyms it), found by cuGetProcAddress, counted and
    faulted like the others; every table id is one it lacks."""
    seen = run_child(EXPORT_TABLE_CHILD.format(double=str(CUDA_DOUBLE)))
    assert seen["proc"] == [SUCCESS, seen["address"], PROC_SUCCESS]
    assert seen["table"] == [INVALID_VALUE, None]
    assert seen["null"] == [INVALID_VALUE, INVALID_VALUE]
    assert seen["counted"] == 3
    assert seen["fault"] == 999
