"""The doubles' memory model catches what it is there to catch.

Driven through the CUDA double's own ABI with ctypes, in a fresh process
(the counters are per process and never reset): a copy out of bounds, a
copy of freed memory, a free of a bad pointer, a copy queued behind timed
work whose memory is freed before it runs, and the memory limit
(FAKE_CUDA_TOTAL_MEM).  The Level Zero test driver shares the model
(tests/drivers/double_memory.c); the behaviour suites check on both that
the product never trips it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fake_drivers import CUDA_DOUBLE, HIP_DOUBLE, REPO

CHILD = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.fake_cuda_live.restype = ctypes.c_longlong
lib.fake_cuda_live.argtypes = [ctypes.c_char_p]
lib.fake_cuda_enqueue_sleep.argtypes = [ctypes.c_int, ctypes.c_ulonglong,
                                        ctypes.c_double]
u64 = ctypes.c_ulonglong
ctx = ctypes.c_void_p()
assert lib.cuInit(0) == 0
assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert lib.cuCtxSetCurrent(ctx) == 0
alloc, free = lib.cuMemAlloc_v2, lib.cuMemFree_v2
alloc.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
free.argtypes = [u64]
dtoh = lib.cuMemcpyDtoHAsync_v2
dtoh.argtypes = [ctypes.c_void_p, u64, ctypes.c_size_t, ctypes.c_void_p]
htod = lib.cuMemcpyHtoDAsync_v2
htod.argtypes = [u64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
host = ctypes.create_string_buffer(8192)
pinned = ctypes.c_void_p()
lib.cuMemHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                               ctypes.c_size_t, ctypes.c_uint]
lib.cuMemFreeHost.argtypes = [ctypes.c_void_p]
out = {}
live = lambda kind: lib.fake_cuda_live(kind.encode())
p = u64()
assert alloc(ctypes.byref(p), 4096) == 0
out["in_bounds"] = dtoh(host, p.value, 4096, None)
out["out_of_bounds"] = dtoh(host, p.value + 1, 4096, None)
out["bad_after_oob"] = live("bad_access")
assert free(p.value) == 0
out["after_free"] = dtoh(host, p.value, 16, None)
out["bad_after_uaf"] = live("bad_access")
out["double_free"] = free(p.value)
out["bad_after_double_free"] = live("bad_access")
# Queued behind 100 ms of work; the memory is freed before it runs.
q = u64()
assert alloc(ctypes.byref(q), 256) == 0
assert lib.cuMemHostAlloc(ctypes.byref(pinned), 256, 0) == 0
assert lib.fake_cuda_enqueue_sleep(0, 1, 100.0) == 0
out["queued"] = dtoh(pinned, q.value, 256, None)
assert free(q.value) == 0
assert lib.cuCtxSynchronize() == 0
out["bad_after_queued_uaf"] = live("bad_access")
# Page-locked memory freed under a queued copy.
r = u64()
assert alloc(ctypes.byref(r), 256) == 0
assert lib.fake_cuda_enqueue_sleep(0, 1, 100.0) == 0
out["queued_pinned"] = htod(r.value, pinned, 256, None)
assert lib.cuMemFreeHost(pinned) == 0
assert lib.cuCtxSynchronize() == 0
out["bad_after_pinned_uaf"] = live("bad_access")
out["guard_damage"] = live("guard_damage")
# The memory limit: FAKE_CUDA_TOTAL_MEM less the context's 512 MiB.
big = u64()
out["over_the_limit"] = alloc(ctypes.byref(big), 600 << 20)
out["within_the_limit"] = alloc(ctypes.byref(big), 400 << 20)
out["alloc"] = live("alloc")
print(json.dumps(out))
"""


@pytest.mark.skipif(not CUDA_DOUBLE.exists(),
                    reason="the CUDA double is not built")
def test_the_double_reports_bad_accesses_and_keeps_its_limit() -> None:
    env = {**os.environ, "FAKE_CUDA_TOTAL_MEM": str(1 << 30)}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(CUDA_DOUBLE)], env=env,
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    invalid, oom = 1, 2
    assert out["in_bounds"] == 0
    assert out["out_of_bounds"] == invalid and out["bad_after_oob"] == 1
    assert out["after_free"] == invalid and out["bad_after_uaf"] == 2
    assert out["double_free"] == invalid
    assert out["bad_after_double_free"] == 3
    assert out["queued"] == 0  # accepted at the call ...
    assert out["bad_after_queued_uaf"] == 4  # ... caught when it ran
    assert out["queued_pinned"] == 0
    assert out["bad_after_pinned_uaf"] == 5
    assert out["guard_damage"] == 0
    assert out["over_the_limit"] == oom and out["within_the_limit"] == 0
    assert out["alloc"] == 2  # r and the 400 MiB block
    assert "use after free of a device allocation" in result.stderr
    assert "out of bounds of a device allocation" in result.stderr
    assert "page-locked host memory freed before the work ran" \
        in result.stderr


RANGE_CHILD = r"""
import ctypes, json, sys
u64, size_t = ctypes.c_ulonglong, ctypes.c_size_t
cuda = ctypes.CDLL(sys.argv[1])
hip = ctypes.CDLL(sys.argv[2])
out = {}
# CUDA: the allocation among the current context's; NULL outputs ignored.
rng = cuda.cuMemGetAddressRange_v2
rng.argtypes = [ctypes.c_void_p, ctypes.c_void_p, u64]
base, size = u64(), size_t()
out["cuda_uninitialised"] = rng(ctypes.byref(base), ctypes.byref(size), 1)
assert cuda.cuInit(0) == 0
out["cuda_no_context"] = rng(ctypes.byref(base), ctypes.byref(size), 1)
ctx, ctx1 = ctypes.c_void_p(), ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx1), 1) == 0
assert cuda.cuCtxSetCurrent(ctx1) == 0
other = u64()
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), size_t]
assert cuda.cuMemAlloc_v2(ctypes.byref(other), 64) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
p = u64()
assert cuda.cuMemAlloc_v2(ctypes.byref(p), 1000) == 0
out["cuda_inside"] = rng(ctypes.byref(base), ctypes.byref(size), p.value + 999)
out["cuda_range"] = [base.value - p.value, size.value]
out["cuda_null_outputs"] = rng(None, None, p.value)
out["cuda_one_past"] = rng(ctypes.byref(base), ctypes.byref(size),
                           p.value + 1000)
out["cuda_unknown"] = rng(ctypes.byref(base), ctypes.byref(size), 0x1234000)
out["cuda_other_device"] = rng(ctypes.byref(base), ctypes.byref(size),
                               other.value)
# HIP (ROCm 5.2): any device's allocation; hipErrorInvalidDevicePointer
# for memory it never saw.
hrng = hip.hipMemGetAddressRange
hrng.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
hbase, hsize = ctypes.c_void_p(), size_t()
assert hip.hipInit(0) == 0
q = ctypes.c_void_p()
assert hip.hipMalloc(ctypes.byref(q), size_t(512)) == 0
out["hip_inside"] = hrng(ctypes.byref(hbase), ctypes.byref(hsize),
                         q.value + 100)
out["hip_range"] = [hbase.value - q.value, hsize.value]
out["hip_one_past"] = hrng(ctypes.byref(hbase), ctypes.byref(hsize),
                           q.value + 512)
out["hip_unknown"] = hrng(ctypes.byref(hbase), ctypes.byref(hsize),
                          0x1234000)
print(json.dumps(out))
"""


@pytest.mark.skipif(not CUDA_DOUBLE.exists() or not HIP_DOUBLE.exists(),
                    reason="the CUDA and HIP doubles are not built")
def test_the_doubles_tell_allocation_ranges_as_the_drivers_do() -> None:
    result = subprocess.run(
        [sys.executable, "-c", RANGE_CHILD, str(CUDA_DOUBLE),
         str(HIP_DOUBLE)], capture_output=True, text=True, timeout=120,
        cwd=REPO)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    not_initialized, invalid_context, not_found = 3, 201, 500
    assert out["cuda_uninitialised"] == not_initialized
    assert out["cuda_no_context"] == invalid_context
    assert out["cuda_inside"] == 0 and out["cuda_range"] == [0, 1000]
    assert out["cuda_null_outputs"] == 0
    assert out["cuda_one_past"] == not_found
    assert out["cuda_unknown"] == not_found
    assert out["cuda_other_device"] == not_found
    invalid_device_pointer = 17
    assert out["hip_inside"] == 0 and out["hip_range"] == [0, 512]
    assert out["hip_one_past"] == invalid_device_pointer
    assert out["hip_unknown"] == invalid_device_pointer
