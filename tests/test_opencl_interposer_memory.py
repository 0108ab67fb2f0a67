"""The OpenCL interposer's memory checks catch what they are there to catch.

Driven through the interposer's own ABI with ctypes, over PoCL, in a fresh
process (the counters are per process): a fill beyond an allocation, a
copy into freed memory, a free of memory that a queued copy still uses,
guard bytes overwritten, the live allocation counts, and the SVM
capability mask (FAKE_OCL_SVM_CAPS).  The behaviour suite on OpenCL checks
that the product never trips them.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import fake_drivers
from fake_drivers import OPENCL_INTERPOSER

pytestmark = pytest.mark.skipif(
    fake_drivers.OpenCLDouble.missing() is not None,
    reason=fake_drivers.OpenCLDouble.missing() or "")

CHILD = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.fake_ocl_live.restype = ctypes.c_longlong
lib.fake_ocl_live.argtypes = [ctypes.c_char_p]
lib.fake_ocl_enqueue_gate.argtypes = [ctypes.c_ulonglong,
                                      ctypes.POINTER(ctypes.c_int)]
vp, u64, sz = ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_size_t
live = lambda kind: lib.fake_ocl_live(kind.encode())
platform, device = vp(), vp()
assert lib.clGetPlatformIDs(1, ctypes.byref(platform), None) == 0
assert lib.clGetDeviceIDs(platform, 0xFFFFFFFF, 1, ctypes.byref(device),
                          None) == 0
caps = u64()
assert lib.clGetDeviceInfo(device, 0x1053, 8, ctypes.byref(caps), None) == 0
rc = ctypes.c_int()
lib.clCreateContext.restype = vp
lib.clCreateContext.argtypes = [vp, ctypes.c_uint, ctypes.POINTER(vp), vp,
                                vp, ctypes.POINTER(ctypes.c_int)]
ctx = lib.clCreateContext(None, 1, ctypes.byref(device), None, None,
                          ctypes.byref(rc))
assert rc.value == 0
lib.clCreateCommandQueueWithProperties.restype = vp
lib.clCreateCommandQueueWithProperties.argtypes = [vp, vp, vp,
                                                   ctypes.POINTER(ctypes.c_int)]
queue = lib.clCreateCommandQueueWithProperties(ctx, device, None,
                                               ctypes.byref(rc))
assert rc.value == 0
lib.clSVMAlloc.restype = vp
lib.clSVMAlloc.argtypes = [vp, u64, sz, ctypes.c_uint]
lib.clSVMFree.argtypes = [vp, vp]
lib.clSVMFree.restype = None
copy = lib.clEnqueueSVMMemcpy
copy.argtypes = [vp, ctypes.c_uint, vp, vp, sz, ctypes.c_uint, vp, vp]
fill = lib.clEnqueueSVMMemFill
fill.argtypes = [vp, vp, vp, sz, sz, ctypes.c_uint, vp, vp]
lib.clFinish.argtypes = [vp]
byte = ctypes.c_ubyte(7)
host = ctypes.create_string_buffer(8192)
out = {"caps": caps.value}
a = lib.clSVMAlloc(ctx, 1, 4096, 0)
h = lib.clSVMAlloc(ctx, 1 | (1 << 10), 4096, 0)
out["live"] = [live("alloc"), live("host_alloc")]
assert fill(queue, a, ctypes.byref(byte), 1, 4096, 0, None, None) == 0
assert copy(queue, 1, host, a, 4096, 0, None, None) == 0
out["good"] = [live("bad_access"), host.raw[:4096] == b"\x07" * 4096]
assert fill(queue, a + 4000, ctypes.byref(byte), 1, 200, 0, None, None) == 0
out["beyond"] = live("bad_access")
assert fill(queue, host, ctypes.byref(byte), 1, 16, 0, None, None) == 0
out["fill_host"] = live("bad_access")
b = lib.clSVMAlloc(ctx, 1, 4096, 0)
gate = ctypes.c_int()
assert lib.fake_ocl_enqueue_gate(queue, ctypes.byref(gate)) == 0
assert copy(queue, 0, b, host, 4096, 0, None, None) == 0
lib.clSVMFree(ctx, b)
out["busy_free"] = live("bad_access")
lib.fake_ocl_open_gate(gate)
assert lib.clFinish(queue) == 0
assert copy(queue, 1, b, host, 64, 0, None, None) == 0
out["freed"] = live("bad_access")
ctypes.memset(h + 4096, 0, 1)
out["damage"] = live("guard_damage")
lib.clSVMFree(ctx, h)
lib.clSVMFree(ctx, a)
out["after"] = [live("alloc"), live("host_alloc"), live("guard_damage")]
print(json.dumps(out))
"""


def run_child(**env: str) -> dict:
    environment = fake_drivers.clean_environment()
    environment.update(POCL_DEVICES="pthread", **env)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(OPENCL_INTERPOSER)],
        env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_interposer_catches_bad_svm_use() -> None:
    out = run_child()
    assert out["caps"] & 3 == 3, "PoCL offers coarse- and fine-grain SVM"
    assert out["live"] == [1, 1]
    assert out["good"] == [0, True]
    assert out["beyond"] == 1
    assert out["fill_host"] == 2
    assert out["busy_free"] == 3, "a free under a queued copy is caught"
    assert out["freed"] == 4, "a copy into freed memory is caught"
    assert out["damage"] == 1
    assert out["after"] == [0, 0, 1]


def test_the_svm_capabilities_can_be_masked() -> None:
    assert run_child(FAKE_OCL_SVM_CAPS="1")["caps"] == 1
