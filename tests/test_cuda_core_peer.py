"""NVIDIA's cuda.core runs unchanged on the CUDA driver double, beside
accelerator, on the same streams and memory.

Two parts, each in a fresh process (the double's counters are per
process):

- The driver functions the double offers only for peers (cuStreamGetCtx,
  cuCtxGetDevice, cuMemAllocHost, cuMemcpyAsync, cuPointerGetAttributes,
  the memory-pool device attributes) and its device addresses, through
  the double's own ABI with ctypes: the driver's semantics and error
  codes, counting and fault injection.  Runs everywhere the double is
  built.
- cuda.core (PyPI ``cuda-core`` with ``cuda-bindings`` 12) with
  LD_LIBRARY_PATH=tests/drivers/build, so that cuda.bindings opens the
  double as libcuda.so.1, the very library instance accelerator uses:
  streams, events, memory (allocate, pinned host memory, fill,
  copy_to/copy_from) and DLPack both ways, each result checked byte for
  byte.  Skipped, with the reason, where cuda.core cannot be imported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from fake_drivers import CUDA_DOUBLE, DRIVERS, REPO, SRC, CudaDouble

pytestmark = pytest.mark.skipif(not CUDA_DOUBLE.exists(),
                                reason="the CUDA double is not built")

SUCCESS, INVALID_VALUE, INVALID_CONTEXT, INVALID_HANDLE = 0, 1, 201, 400
UNKNOWN = 999


def run_child(code: str, env: dict[str, str]) -> dict[str, Any]:
    environment = {**os.environ, **env}
    environment.pop("PYTEST_CURRENT_TEST", None)
    result = subprocess.run([sys.executable, "-c", code], env=environment,
                            capture_output=True, text=True, timeout=120,
                            cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


# The double's own ABI --------------------------------------------------

DRIVER_CHILD = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
c_u64, c_p = ctypes.c_ulonglong, ctypes.c_void_p
lib.fake_cuda_call_count.restype = ctypes.c_longlong
lib.fake_cuda_call_count.argtypes = [ctypes.c_char_p]
lib.fake_cuda_live.restype = ctypes.c_longlong
lib.fake_cuda_live.argtypes = [ctypes.c_char_p]
lib.fake_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(c_u64), ctypes.c_size_t]
lib.cuMemFree_v2.argtypes = [c_u64]
lib.cuMemHostAlloc.argtypes = [ctypes.POINTER(c_p), ctypes.c_size_t,
                               ctypes.c_uint]
lib.cuMemAllocHost_v2.argtypes = [ctypes.POINTER(c_p), ctypes.c_size_t]
lib.cuMemFreeHost.argtypes = [c_p]
lib.cuMemcpyAsync.argtypes = [c_u64, c_u64, ctypes.c_size_t, c_p]
lib.cuStreamGetCtx.argtypes = [c_p, ctypes.POINTER(c_p)]
lib.cuStreamGetCtx_v2.argtypes = [c_p, ctypes.POINTER(c_p),
                                  ctypes.POINTER(c_p)]
lib.cuPointerGetAttributes.argtypes = [
    ctypes.c_uint, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(c_p), c_u64]
lib.cuGetProcAddress_v2.argtypes = [ctypes.c_char_p, ctypes.POINTER(c_p),
                                    ctypes.c_int, c_u64, c_p]
out = {}
calls = lambda name: lib.fake_cuda_call_count(name.encode())

# Before any context: the special stream handles have no context.
assert lib.cuInit(0) == 0
ctx = [c_p(), c_p()]
got = c_p()
out["get_ctx_no_context"] = lib.cuStreamGetCtx(None, ctypes.byref(got))
for d in (0, 1):
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx[d]), d) == 0
assert lib.cuCtxSetCurrent(ctx[1]) == 0
dev = ctypes.c_int(-1)
out["ctx_get_device"] = [lib.cuCtxGetDevice(ctypes.byref(dev)), dev.value]
out["ctx_get_device_null"] = lib.cuCtxGetDevice(None)
assert lib.cuCtxSetCurrent(ctx[0]) == 0

attr = ctypes.c_int(-1)
out["attributes"] = {}
for number in (41, 115, 119, 142, 144):
    assert lib.cuDeviceGetAttribute(ctypes.byref(attr), number, 0) == 0
    out["attributes"][number] = attr.value

# cuStreamGetCtx: a stream's own context, whatever is current.
stream = c_p()
assert lib.cuCtxSetCurrent(ctx[1]) == 0
assert lib.cuStreamCreateWithPriority(ctypes.byref(stream), 1, 0) == 0
assert lib.cuCtxSetCurrent(ctx[0]) == 0
out["get_ctx"] = [lib.cuStreamGetCtx(stream, ctypes.byref(got)),
                  got.value == ctx[1].value]
green = c_p(1)
out["get_ctx_v2"] = [lib.cuStreamGetCtx_v2(stream, ctypes.byref(got),
                                           ctypes.byref(green)),
                     got.value == ctx[1].value, green.value]
out["get_ctx_v2_null_green"] = lib.cuStreamGetCtx_v2(
    stream, ctypes.byref(got), None)
out["get_ctx_special"] = []
for handle in (0, 1, 2):
    got.value = None
    rc = lib.cuStreamGetCtx(c_p(handle), ctypes.byref(got))
    out["get_ctx_special"].append([rc, got.value == ctx[0].value])
out["get_ctx_null"] = lib.cuStreamGetCtx(stream, None)
gone = c_p()
assert lib.cuStreamCreateWithPriority(ctypes.byref(gone), 1, 0) == 0
assert lib.cuStreamDestroy_v2(gone) == 0
out["get_ctx_destroyed"] = lib.cuStreamGetCtx(gone, ctypes.byref(got))

# Device addresses: below 2**63, in address space no host memory gets.
a, b, peer = c_u64(), c_u64(), c_u64()
assert lib.cuMemAlloc_v2(ctypes.byref(a), 4096) == 0
assert lib.cuMemAlloc_v2(ctypes.byref(b), 4096) == 0
assert lib.cuCtxSetCurrent(ctx[1]) == 0
assert lib.cuMemAlloc_v2(ctypes.byref(peer), 4096) == 0
assert lib.cuCtxSetCurrent(ctx[0]) == 0
out["addresses"] = [a.value, b.value, peer.value]
maps = []
with open("/proc/self/maps") as f:
    for line in f:
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        maps.append((lo, hi, perms))
out["mapping_perms"] = [next((p for lo, hi, p in maps if lo <= x < hi), None)
                        for x in out["addresses"]]

# cuMemcpyAsync: each side by its address (unified addressing).
pattern = bytes(range(256)) * 16
src = ctypes.create_string_buffer(pattern, 4096)
back = ctypes.create_string_buffer(4096)
pinned = c_p()
assert lib.cuMemHostAlloc(ctypes.byref(pinned), 4096, 0) == 0
host_page = c_p()
live_host = lib.fake_cuda_live(b"host_alloc")
out["alloc_host"] = [lib.cuMemAllocHost_v2(ctypes.byref(host_page), 64),
                     lib.fake_cuda_live(b"host_alloc") - live_host,
                     lib.cuMemAllocHost_v2(None, 64),
                     lib.cuMemAllocHost_v2(ctypes.byref(c_p()), 0)]
before = calls("cuMemcpyAsync")
host = lambda buf: ctypes.addressof(buf)
out["memcpy"] = [
    lib.cuMemcpyAsync(a.value, host(src), 4096, stream),         # H2D
    lib.cuMemcpyAsync(b.value, a.value, 4096, stream),           # D2D
    lib.cuMemcpyAsync(peer.value, b.value, 4096, stream),        # peer
    lib.cuMemcpyAsync(pinned.value, peer.value, 4096, stream),   # D2pinned
    lib.cuMemcpyAsync(host(back), pinned.value, 4096, stream),   # pinned2H
]
assert lib.cuStreamSynchronize(stream) == 0
out["memcpy_roundtrip"] = back.raw == pattern
out["memcpy_calls"] = calls("cuMemcpyAsync") - before
out["memcpy_null"] = lib.cuMemcpyAsync(0, a.value, 16, stream)
out["memcpy_out_of_bounds"] = lib.cuMemcpyAsync(a.value + 4000, b.value,
                                                 4096, stream)
out["bad_access"] = lib.fake_cuda_live(b"bad_access")
out["memcpy_bad_stream"] = lib.cuMemcpyAsync(a.value, b.value, 16, gone)
lib.fake_cuda_fail(b"cuMemcpyAsync", 1, 999)
out["memcpy_fault"] = [lib.cuMemcpyAsync(a.value, b.value, 16, stream),
                       lib.cuMemcpyAsync(a.value, b.value, 16, stream)]

# cuPointerGetAttributes.
CONTEXT, MEMORY_TYPE, DEVICE_POINTER, HOST_POINTER = 1, 2, 3, 4
BUFFER_ID, IS_MANAGED, DEVICE_ORDINAL = 7, 8, 9
RANGE_START, RANGE_SIZE, MAPPED = 11, 12, 13
def attributes(ptr):
    names = [CONTEXT, MEMORY_TYPE, DEVICE_POINTER, HOST_POINTER, BUFFER_ID,
             IS_MANAGED, DEVICE_ORDINAL, RANGE_START, RANGE_SIZE, MAPPED]
    values = [c_p(7), ctypes.c_uint(7), c_u64(7), c_p(7), c_u64(7),
              ctypes.c_bool(True), ctypes.c_int(7), c_u64(7),
              ctypes.c_size_t(7), ctypes.c_bool(False)]
    kinds = (ctypes.c_int * len(names))(*names)
    data = (c_p * len(names))(*[ctypes.cast(ctypes.byref(v), c_p)
                                for v in values])
    rc = lib.cuPointerGetAttributes(len(names), kinds, data, ptr)
    return rc, {name: v.value for name, v in zip(names, values)}
def ctx_name(value):
    for i, c in enumerate(ctx):
        if c.value == value:
            return i
    return value
rc, got = attributes(peer.value + 100)
got[CONTEXT] = ctx_name(got[CONTEXT])
out["attr_device"] = [rc, got]
rc, got = attributes(pinned.value)
got[CONTEXT] = ctx_name(got[CONTEXT])
out["attr_pinned"] = [rc, got, pinned.value]
out["attr_unknown"] = list(attributes(host(src)))
out["attr_one_past_end"] = list(attributes(a.value + 4096))
rc, got = attributes(host_page.value)
out["attr_alloc_host"] = [rc, got[MEMORY_TYPE], got[HOST_POINTER] ==
                          host_page.value, got[RANGE_SIZE]]
out["free_alloc_host"] = lib.cuMemFreeHost(host_page)
rc_a, got_a = attributes(a.value)
rc_b, got_b = attributes(b.value)
out["buffer_ids"] = [got_a[BUFFER_ID], got_b[BUFFER_ID]]
kind = (ctypes.c_int * 1)(5)  # CU_POINTER_ATTRIBUTE_P2P_TOKENS
slot = (c_p * 1)(ctypes.cast(ctypes.byref(c_u64()), c_p))
out["attr_unsupported"] = lib.cuPointerGetAttributes(1, kind, slot, a.value)
out["attr_none"] = lib.cuPointerGetAttributes(0, kind, slot, a.value)
out["attr_null_slot"] = lib.cuPointerGetAttributes(
    1, (ctypes.c_int * 1)(2), (c_p * 1)(None), a.value)
lib.fake_cuda_fail(b"cuPointerGetAttributes", 1, 999)
out["attr_fault"] = [attributes(a.value)[0], attributes(a.value)[0]]

# Counted by base name; found through cuGetProcAddress at their versions.
out["counts"] = {n: calls(n) for n in ("cuStreamGetCtx", "cuCtxGetDevice",
                                        "cuPointerGetAttributes",
                                        "cuMemAllocHost")}
fn = c_p()
resolved = {}
for name, version in (("cuStreamGetCtx", 9020), ("cuStreamGetCtx", 12050),
                      ("cuMemcpyAsync", 4000), ("cuCtxGetDevice", 2000),
                      ("cuPointerGetAttributes", 7000),
                      ("cuMemAllocHost", 3020)):
    rc = lib.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), version,
                                 0, None)
    resolved[f"{name}@{version}"] = [rc, fn.value]
out["proc"] = resolved
out["symbols"] = {n: ctypes.cast(getattr(lib, n), c_p).value
                  for n in ("cuStreamGetCtx", "cuStreamGetCtx_v2",
                            "cuMemcpyAsync", "cuCtxGetDevice",
                            "cuPointerGetAttributes", "cuMemAllocHost_v2")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def driver_facts() -> dict[str, Any]:
    return run_child(DRIVER_CHILD.replace("sys.argv[1]",
                                          repr(str(CUDA_DOUBLE))),
                     {"FAKE_CUDA_DEVICES": "2"})


def test_device_addresses_are_below_2_63_in_reserved_space(
        driver_facts: dict[str, Any]) -> None:
    """As a real driver's: positive as a signed 64-bit integer (cuda.core
    reads them so), in address space reserved with no access (a device
    address used as a host pointer faults), and never a host mapping."""
    for address in driver_facts["addresses"]:
        assert 0 < address < 2 ** 63, hex(address)
    assert driver_facts["mapping_perms"] == ["---p"] * 3


def test_stream_get_ctx(driver_facts: dict[str, Any]) -> None:
    assert driver_facts["get_ctx_no_context"] == INVALID_CONTEXT
    assert driver_facts["get_ctx"] == [SUCCESS, True]
    assert driver_facts["get_ctx_v2"] == [SUCCESS, True, None]
    assert driver_facts["get_ctx_v2_null_green"] == INVALID_VALUE
    assert driver_facts["get_ctx_special"] == [[SUCCESS, True]] * 3
    assert driver_facts["get_ctx_null"] == INVALID_VALUE
    assert driver_facts["get_ctx_destroyed"] == INVALID_HANDLE
    assert driver_facts["ctx_get_device"] == [SUCCESS, 1]
    assert driver_facts["ctx_get_device_null"] == INVALID_VALUE


def test_memory_pool_attributes(driver_facts: dict[str, Any]) -> None:
    """Unified addressing, and no cuMemPool family: peers allocate with
    cuMemAlloc."""
    assert driver_facts["attributes"] == {"41": 1, "115": 0, "119": 0,
                                          "142": 0, "144": 0}


def test_memcpy_async(driver_facts: dict[str, Any]) -> None:
    """Host to device, device to device, between devices, to and from
    page-locked memory: each side by its address."""
    assert driver_facts["memcpy"] == [SUCCESS] * 5
    assert driver_facts["memcpy_roundtrip"] is True
    assert driver_facts["memcpy_calls"] == 5
    assert driver_facts["memcpy_null"] == INVALID_VALUE
    assert driver_facts["memcpy_out_of_bounds"] == INVALID_VALUE
    assert driver_facts["bad_access"] == 1  # reported, like every copy
    assert driver_facts["memcpy_bad_stream"] == INVALID_HANDLE
    assert driver_facts["memcpy_fault"] == [UNKNOWN, SUCCESS]


def test_pointer_get_attributes(driver_facts: dict[str, Any]) -> None:
    a, b, peer = driver_facts["addresses"]
    rc, got = driver_facts["attr_device"]
    assert rc == SUCCESS
    assert got == {"1": 1, "2": 2, "3": peer + 100, "4": None,
                   "7": got["7"], "8": False, "9": 1, "11": peer,
                   "12": 4096, "13": True}
    rc, got, pinned = driver_facts["attr_pinned"]
    assert rc == SUCCESS
    assert got == {"1": 0, "2": 1, "3": pinned, "4": pinned, "7": got["7"],
                   "8": False, "9": 0, "11": pinned, "12": 4096, "13": True}
    # Memory the driver never saw, and one past an allocation's end: no
    # error, NULL values.
    for key in ("attr_unknown", "attr_one_past_end"):
        rc, got = driver_facts[key]
        assert rc == SUCCESS
        assert got == {"1": None, "2": 0, "3": 0, "4": None, "7": 0,
                       "8": False, "9": -2, "11": 0, "12": 0, "13": False}
    ids = driver_facts["buffer_ids"]
    assert len(set(ids)) == 2 and 0 not in ids
    assert driver_facts["attr_unsupported"] == INVALID_VALUE
    assert driver_facts["attr_none"] == INVALID_VALUE
    assert driver_facts["attr_null_slot"] == INVALID_VALUE
    assert driver_facts["attr_fault"] == [UNKNOWN, SUCCESS]


def test_peer_functions_are_listed_and_counted(
        driver_facts: dict[str, Any]) -> None:
    """Counted by base name (cuStreamGetCtx_v2 as cuStreamGetCtx), and
    cuGetProcAddress resolves each at its version."""
    counts = driver_facts["counts"]
    assert counts["cuStreamGetCtx"] == 9  # 7 of v1, 2 of v2
    assert counts["cuCtxGetDevice"] == 2
    assert counts["cuPointerGetAttributes"] == 12
    assert counts["cuMemAllocHost"] == 3
    symbols, proc = driver_facts["symbols"], driver_facts["proc"]
    assert proc["cuStreamGetCtx@9020"] == [SUCCESS,
                                           symbols["cuStreamGetCtx"]]
    assert proc["cuStreamGetCtx@12050"] == [SUCCESS,
                                            symbols["cuStreamGetCtx_v2"]]
    for name, version in (("cuMemcpyAsync", 4000), ("cuCtxGetDevice", 2000),
                          ("cuPointerGetAttributes", 7000)):
        assert proc[f"{name}@{version}"] == [SUCCESS, symbols[name]]
    assert proc["cuMemAllocHost@3020"] == [SUCCESS,
                                           symbols["cuMemAllocHost_v2"]]


def test_mem_alloc_host(driver_facts: dict[str, Any]) -> None:
    """cuMemAllocHost: page-locked memory, as cuMemHostAlloc without
    flags."""
    assert driver_facts["alloc_host"] == [SUCCESS, 1, INVALID_VALUE,
                                          INVALID_VALUE]
    assert driver_facts["attr_alloc_host"] == [SUCCESS, 1, True, 64]
    assert driver_facts["free_alloc_host"] == SUCCESS


# cuda.core beside accelerator ------------------------------------------

PEER_CHILD = r"""
import ctypes, json, sys, warnings
try:
    import cuda.core
    from cuda.core import (Buffer, Device, EventOptions,
                           LegacyPinnedMemoryResource, Stream)
    from cuda.core.utils import StridedMemoryView
    import cuda.bindings.driver
except Exception as exc:
    print(json.dumps({"skip": f"cuda.core cannot be imported: "
                              f"{type(exc).__name__}: {exc}"}))
    raise SystemExit(0)
import accelerator as acc

out = {"versions": [cuda.core.__version__]}
double = ctypes.CDLL("libcuda.so.1")  # the instance cuda.bindings opened
double.fake_cuda_call_count.restype = ctypes.c_longlong
double.fake_cuda_call_count.argtypes = [ctypes.c_char_p]
calls = lambda name: double.fake_cuda_call_count(name.encode())
N = 1 << 16
pattern = bytes((i * 7 + 3) % 251 for i in range(N))

dev = Device(0)
dev.set_current()
cs = dev.create_stream()
# Streams: ours wraps theirs, theirs wraps ours.
ours = acc.Stream.from_handle(int(cs.handle))
out["ours_wraps_theirs"] = [ours.handle == int(cs.handle),
                            ours.device_index]
mine = acc.Stream(0)
theirs = dev.create_stream(mine)  # through __cuda_stream__
out["theirs_wraps_ours"] = int(theirs.handle) == mine.handle
out["contexts"] = [int(cs.context.handle) == int(theirs.context.handle),
                   calls("cuStreamGetCtx") > 0]

# Memory: theirs filled and copied on their stream, read through ours.
cb = dev.allocate(N, stream=cs)
out["their_address_positive"] = 0 < int(cb.handle) < 2 ** 63
cb.fill(0x5A, stream=cs)
seen = bytearray(N)
acc.from_dlpack(cb).copy_to(seen, stream=ours)   # DLPack: theirs to ours
ours.synchronize()
out["their_fill"] = seen == b"\x5a" * N

# Ours written, read by cuda.core through DLPack and pointer attributes.
b = acc.Buffer(N)
b.copy_from(pattern, stream=ours)
view = StridedMemoryView.from_dlpack(b, stream_ptr=int(cs.handle))
out["dlpack_view"] = [view.ptr == b.ptr, view.device_id,
                      view.is_device_accessible, list(view.shape)]
wrapped = Buffer.from_handle(b.ptr, N)             # pointer attributes
out["wrapped"] = [wrapped.is_device_accessible, wrapped.is_host_accessible,
                  wrapped.device_id]
before = calls("cuMemcpyAsync")
cb.copy_from(wrapped, stream=cs)                   # cuMemcpyAsync
host = acc.HostBuffer(N)
their_host = Buffer.from_handle(host.ptr, N)
out["their_host"] = [their_host.is_device_accessible,
                     their_host.is_host_accessible]
cb.copy_to(their_host, stream=cs)
pinned = LegacyPinnedMemoryResource().allocate(N)   # cuMemAllocHost
cb.copy_to(pinned, stream=cs)
cs.sync()
out["their_pinned"] = [pinned.is_host_accessible,
                       ctypes.string_at(int(pinned.handle), N) == pattern]
pinned.close()
out["memcpy_async_calls"] = calls("cuMemcpyAsync") - before
out["copy_roundtrip"] = bytes(memoryview(host)) == pattern

# Events and ordering across the two libraries: their event recorded
# after their copy; our stream waits on their stream.
cb.fill(0x11, stream=cs)
start = cs.record(options=EventOptions(timing_enabled=True))
cb.copy_from(wrapped, stream=cs)
end = cs.record(options=EventOptions(timing_enabled=True))
other = acc.Stream(0)
other.wait_stream(ours)                     # ours is their stream
seen = bytearray(N)
acc.from_dlpack(cb).copy_to(seen, stream=other)
other.synchronize()
end.sync()
out["events"] = [end.is_done, (end - start) >= 0,
                 seen == pattern]
e = acc.Event(enable_timing=True)
e.record(ours)
theirs.wait(cs)                             # cuda.core waits on theirs
e.synchronize()
out["our_event_on_their_stream"] = e.query()
wrapped.close()
their_host.close()
cb.close(cs)
cs.sync()
del b, host
acc.synchronize()
double.fake_cuda_live.restype = ctypes.c_longlong
double.fake_cuda_live.argtypes = [ctypes.c_char_p]
out["bad_access"] = double.fake_cuda_live(b"bad_access")
print(json.dumps(out))
"""


def test_cuda_core_runs_beside_accelerator_on_the_double() -> None:
    def prepend(path: object, var: str) -> str:
        return os.pathsep.join(filter(None, [str(path), os.environ.get(var)]))

    env = {**CudaDouble.environment(2),
           # cuda.bindings opens the double as libcuda.so.1
           "LD_LIBRARY_PATH": prepend(DRIVERS, "LD_LIBRARY_PATH"),
           "PYTHONPATH": prepend(SRC, "PYTHONPATH")}
    out = run_child(PEER_CHILD, env)
    if "skip" in out:
        pytest.skip(out["skip"])
    assert out["ours_wraps_theirs"] == [True, 0]
    assert out["theirs_wraps_ours"] is True
    assert out["contexts"] == [True, True]
    assert out["their_address_positive"] is True
    assert out["their_fill"] is True
    assert out["dlpack_view"] == [True, 0, True, [1 << 16]]
    assert out["wrapped"] == [True, False, 0]
    assert out["their_host"] == [True, True]
    assert out["memcpy_async_calls"] == 3
    assert out["their_pinned"] == [True, True]
    assert out["copy_roundtrip"] is True
    assert out["events"] == [True, True, True]
    assert out["our_event_on_their_stream"] is True
    assert out["bad_access"] == 0
