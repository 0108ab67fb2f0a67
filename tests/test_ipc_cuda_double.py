"""The CUDA double's interprocess memory and events, at its own ABI.

Two real processes drive tests/drivers/build/libcuda.so.1 with ctypes (as
tests/test_double_memory.py does): a producer allocates, writes and
exports memory and an interprocess event; a consumer it starts opens
both, checks the bytes, writes its own, and records the event behind a
gate on its stream; the producer sees the event not ready, queues a wait
for it and a copy behind the wait on its own stream, opens the gate, and
reads what the consumer wrote.  The refusals are the driver's codes:

  - CU_EVENT_INTERPROCESS without CU_EVENT_DISABLE_TIMING: INVALID_VALUE
  - cuIpcGetEventHandle of an event made without it: INVALID_HANDLE
    ("invalid resource handle", as ROCm's portable tests expect of CUDA)
  - cuIpcGetMemHandle of freed memory, or inside an allocation:
    INVALID_VALUE
  - opening a handle in the process that made it: INVALID_CONTEXT
    ("invalid device context", what UCX meets when it tries)
  - a damaged handle: INVALID_VALUE
  - the exporter exited: its memory is gone with it (the driver frees a
    process's allocations at exit); the double then answers
    INVALID_VALUE, the code the driver gives a handle naming no live
    allocation (its documented codes name no other).

Every function is counted and takes faults like the others, and the live
kinds ipc_exported, ipc_opened and ipc_event_cells come back to zero.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fake_drivers import CUDA_DOUBLE

pytestmark = pytest.mark.skipif(not CUDA_DOUBLE.exists(),
                                reason="the CUDA double is not built")

#: ctypes on the double, shared by every process below
COMMON = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
u64, vp = ctypes.c_ulonglong, ctypes.c_void_p
class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]
lib.fake_cuda_live.restype = ctypes.c_longlong
lib.fake_cuda_live.argtypes = [ctypes.c_char_p]
lib.fake_cuda_call_count.restype = ctypes.c_longlong
lib.fake_cuda_call_count.argtypes = [ctypes.c_char_p]
lib.fake_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
lib.fake_cuda_enqueue_gate.argtypes = [ctypes.c_int, u64,
                                       ctypes.POINTER(ctypes.c_int)]
lib.fake_cuda_open_gate.argtypes = [ctypes.c_int]
lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
lib.cuMemFree_v2.argtypes = [u64]
lib.cuMemcpyHtoDAsync_v2.argtypes = [u64, vp, ctypes.c_size_t, vp]
lib.cuMemcpyDtoHAsync_v2.argtypes = [vp, u64, ctypes.c_size_t, vp]
lib.cuMemHostAlloc.argtypes = [ctypes.POINTER(vp), ctypes.c_size_t,
                               ctypes.c_uint]
lib.cuMemFreeHost.argtypes = [vp]
lib.cuStreamCreateWithPriority.argtypes = [ctypes.POINTER(vp), ctypes.c_uint,
                                           ctypes.c_int]
lib.cuStreamQuery.argtypes = [vp]
lib.cuStreamSynchronize.argtypes = [vp]
lib.cuStreamWaitEvent.argtypes = [vp, vp, ctypes.c_uint]
lib.cuStreamDestroy_v2.argtypes = [vp]
lib.cuEventCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
lib.cuEventRecord.argtypes = [vp, vp]
lib.cuEventQuery.argtypes = [vp]
lib.cuEventSynchronize.argtypes = [vp]
lib.cuEventDestroy_v2.argtypes = [vp]
lib.cuEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), vp, vp]
lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(Handle), u64]
lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(u64), Handle,
                                      ctypes.c_uint]
lib.cuIpcOpenMemHandle.argtypes = [ctypes.POINTER(u64), Handle, ctypes.c_uint]
lib.cuIpcCloseMemHandle.argtypes = [u64]
lib.cuIpcGetEventHandle.argtypes = [ctypes.POINTER(Handle), vp]
lib.cuIpcOpenEventHandle.argtypes = [ctypes.POINTER(vp), Handle]
live = lambda kind: lib.fake_cuda_live(kind.encode())
INTERPROCESS, DISABLE_TIMING, BLOCKING = 4, 2, 1
LAZY = 1
ctx = vp()
assert lib.cuInit(0) == 0
assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert lib.cuCtxSetCurrent(ctx) == 0
def handle_from(text):
    h = Handle()
    ctypes.memmove(ctypes.addressof(h), bytes.fromhex(text), 64)
    return h
def hexed(h):
    return ctypes.string_at(ctypes.addressof(h), 64).hex()
def stream():
    s = vp()
    assert lib.cuStreamCreateWithPriority(ctypes.byref(s), 1, 0) == 0
    return s
"""

CONSUMER = COMMON + r"""
mem_text, event_text = sys.argv[2], sys.argv[3]
out = {}
addr, again = u64(), u64()
bad = bytearray.fromhex(mem_text)
bad[30] ^= 1
out["open_damaged"] = lib.cuIpcOpenMemHandle_v2(
    ctypes.byref(addr), handle_from(bad.hex()), LAZY)
out["open_bad_flags"] = lib.cuIpcOpenMemHandle_v2(
    ctypes.byref(addr), handle_from(mem_text), 2)
out["open"] = lib.cuIpcOpenMemHandle_v2(ctypes.byref(addr),
                                        handle_from(mem_text), LAZY)
# Opened again in the same context: the same address, one open more.
out["open_again"] = lib.cuIpcOpenMemHandle(ctypes.byref(again),
                                           handle_from(mem_text), LAZY)
out["same_address"] = again.value == addr.value
out["opened"] = live("ipc_opened")
out["alloc"] = live("alloc")
out["free_opened"] = lib.cuMemFree_v2(addr.value)
lib.fake_cuda_reset_detectors()
host = ctypes.create_string_buffer(4096)
assert lib.cuMemcpyDtoHAsync_v2(host, addr.value, 4096, None) == 0
out["read"] = host.raw[:8].hex()
out["read_all"] = host.raw == bytes(range(256)) * 16
event = vp()
out["open_event"] = lib.cuIpcOpenEventHandle(ctypes.byref(event),
                                             handle_from(event_text))
out["event_cells"] = live("ipc_event_cells")
timing = ctypes.c_float()
out["elapsed_imported"] = lib.cuEventElapsedTime(ctypes.byref(timing),
                                                 event, event)
# Its own handle again, from the opened event: the same bytes.
h = Handle()
out["reexport"] = lib.cuIpcGetEventHandle(ctypes.byref(h), event)
out["reexport_same"] = hexed(h) == event_text
s = stream()
gate = ctypes.c_int()
pinned = vp()
assert lib.cuMemHostAlloc(ctypes.byref(pinned), 4096, 0) == 0
ctypes.memset(pinned, 0x5A, 4096)
assert lib.fake_cuda_enqueue_gate(0, s.value, ctypes.byref(gate)) == 0
assert lib.cuMemcpyHtoDAsync_v2(addr.value, pinned, 4096, s) == 0
out["record"] = lib.cuEventRecord(event, s)
out["query_here"] = lib.cuEventQuery(event)
print(json.dumps({"recorded": True}), flush=True)
assert sys.stdin.readline().strip() == "go"
assert lib.fake_cuda_open_gate(gate.value) == 0
assert lib.cuStreamSynchronize(s) == 0
assert sys.stdin.readline().strip() == "close"
out["close"] = lib.cuIpcCloseMemHandle(addr.value)
out["opened_after_one_close"] = live("ipc_opened")
out["close_again"] = lib.cuIpcCloseMemHandle(addr.value)
out["close_unopened"] = lib.cuIpcCloseMemHandle(addr.value)
out["read_after_close"] = lib.cuMemcpyDtoHAsync_v2(host, addr.value, 16, None)
out["bad_access"] = live("bad_access")
lib.fake_cuda_reset_detectors()
assert lib.cuEventDestroy_v2(event) == 0
assert lib.cuStreamDestroy_v2(s) == 0
assert lib.cuMemFreeHost(pinned) == 0
out["opened_end"] = live("ipc_opened")
out["event_cells_end"] = live("ipc_event_cells")
out["counts"] = {name: lib.fake_cuda_call_count(name.encode())
                 for name in ("cuIpcOpenMemHandle", "cuIpcCloseMemHandle",
                              "cuIpcOpenEventHandle", "cuIpcGetEventHandle")}
print(json.dumps(out), flush=True)
"""

PRODUCER = COMMON + r"""
import subprocess
consumer = sys.argv[2]
out = {}
event = vp()
out["interprocess_timing"] = lib.cuEventCreate(ctypes.byref(event),
                                               INTERPROCESS)
plain = vp()
assert lib.cuEventCreate(ctypes.byref(plain), DISABLE_TIMING) == 0
h = Handle()
out["plain_event_handle"] = lib.cuIpcGetEventHandle(ctypes.byref(h), plain)
assert lib.cuEventDestroy_v2(plain) == 0
assert lib.cuEventCreate(ctypes.byref(event),
                         INTERPROCESS | DISABLE_TIMING) == 0
out["event_cells"] = live("ipc_event_cells")
event_handle = Handle()
assert lib.cuIpcGetEventHandle(ctypes.byref(event_handle), event) == 0
addr = u64()
assert lib.cuMemAlloc_v2(ctypes.byref(addr), 4096) == 0
data = ctypes.create_string_buffer(bytes(range(256)) * 16, 4096)
assert lib.cuMemcpyHtoDAsync_v2(addr.value, data, 4096, None) == 0
mem_handle = Handle()
out["interior"] = lib.cuIpcGetMemHandle(ctypes.byref(mem_handle),
                                        addr.value + 256)
assert lib.cuIpcGetMemHandle(ctypes.byref(mem_handle), addr.value) == 0
out["exported"] = live("ipc_exported")
gone = u64()
assert lib.cuMemAlloc_v2(ctypes.byref(gone), 256) == 0
assert lib.cuMemFree_v2(gone.value) == 0
out["freed"] = lib.cuIpcGetMemHandle(ctypes.byref(h), gone.value)
mine, mine_event = u64(), vp()
out["open_own"] = lib.cuIpcOpenMemHandle_v2(ctypes.byref(mine), mem_handle,
                                            LAZY)
out["open_own_event"] = lib.cuIpcOpenEventHandle(ctypes.byref(mine_event),
                                                 event_handle)
out["never_recorded"] = lib.cuEventQuery(event)
child = subprocess.Popen(
    [sys.executable, "-c", consumer, sys.argv[1], hexed(mem_handle),
     hexed(event_handle)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    text=True)
assert json.loads(child.stdout.readline()) == {"recorded": True}
# Recorded in the other process behind a closed gate: not ready here.
out["query_waiting"] = lib.cuEventQuery(event)
s = stream()
pinned = vp()
assert lib.cuMemHostAlloc(ctypes.byref(pinned), 4096, 0) == 0
ctypes.memset(pinned, 0, 4096)
out["stream_wait"] = lib.cuStreamWaitEvent(s, event, 0)
assert lib.cuMemcpyDtoHAsync_v2(pinned, addr.value, 4096, s) == 0
out["stream_behind_wait"] = lib.cuStreamQuery(s)
child.stdin.write("go\n")
child.stdin.flush()
out["synchronize"] = lib.cuEventSynchronize(event)
out["query_done"] = lib.cuEventQuery(event)
assert lib.cuStreamSynchronize(s) == 0
out["seen_after_wait"] = ctypes.string_at(pinned, 4096) == b"\x5a" * 4096
child.stdin.write("close\n")
child.stdin.flush()
out["consumer"] = json.loads(child.stdout.readline())
child.wait(timeout=60)
out["consumer_status"] = child.returncode
assert lib.cuMemFree_v2(addr.value) == 0
out["exported_end"] = live("ipc_exported")
assert lib.cuEventDestroy_v2(event) == 0
assert lib.cuStreamDestroy_v2(s) == 0
assert lib.cuMemFreeHost(pinned) == 0
out["event_cells_end"] = live("ipc_event_cells")
out["bad_access"] = live("bad_access")
print(json.dumps(out), flush=True)
"""

#: exports memory and an event, prints both handles, and exits
EXPORTER = COMMON + r"""
addr, event = u64(), vp()
assert lib.cuMemAlloc_v2(ctypes.byref(addr), 4096) == 0
assert lib.cuEventCreate(ctypes.byref(event),
                         INTERPROCESS | DISABLE_TIMING) == 0
mem_handle, event_handle = Handle(), Handle()
assert lib.cuIpcGetMemHandle(ctypes.byref(mem_handle), addr.value) == 0
assert lib.cuIpcGetEventHandle(ctypes.byref(event_handle), event) == 0
print(hexed(mem_handle), hexed(event_handle), flush=True)
"""

AFTER_EXIT = COMMON + r"""
addr, event = u64(), vp()
print(json.dumps({
    "open": lib.cuIpcOpenMemHandle_v2(ctypes.byref(addr),
                                      handle_from(sys.argv[2]), LAZY),
    "open_event": lib.cuIpcOpenEventHandle(ctypes.byref(event),
                                           handle_from(sys.argv[3])),
    "opened": live("ipc_opened"), "event_cells": live("ipc_event_cells"),
}))
"""

FAULTS = COMMON + r"""
out = {}
addr = u64()
assert lib.cuMemAlloc_v2(ctypes.byref(addr), 256) == 0
h = Handle()
names = ("cuIpcGetMemHandle", "cuIpcOpenMemHandle", "cuIpcCloseMemHandle",
         "cuIpcGetEventHandle", "cuIpcOpenEventHandle")
for name in names:
    out[name] = lib.fake_cuda_fail(name.encode(), 1, 999)
out["get"] = lib.cuIpcGetMemHandle(ctypes.byref(h), addr.value)
out["exported_after_fault"] = live("ipc_exported")
out["get_again"] = lib.cuIpcGetMemHandle(ctypes.byref(h), addr.value)
mine = u64()
out["open_v1"] = lib.cuIpcOpenMemHandle(ctypes.byref(mine), h, LAZY)
out["open_v2"] = lib.cuIpcOpenMemHandle_v2(ctypes.byref(mine), h, LAZY)
out["close"] = lib.cuIpcCloseMemHandle(addr.value)
event = vp()
out["get_event"] = lib.cuIpcGetEventHandle(ctypes.byref(h), event)
out["open_event"] = lib.cuIpcOpenEventHandle(ctypes.byref(event), h)
out["counts"] = {name: lib.fake_cuda_call_count(name.encode())
                 for name in names}
assert lib.cuMemFree_v2(addr.value) == 0
print(json.dumps(out))
"""


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    return subprocess.run([sys.executable, "-c", script, str(CUDA_DOUBLE),
                           *args], capture_output=True, text=True,
                          timeout=120, env=env)


def json_of(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_consumer_process_shares_memory_and_an_event() -> None:
    out = json_of(run(PRODUCER, CONSUMER))
    consumer = out.pop("consumer")
    assert out.pop("consumer_status") == 0
    assert out == {
        "interprocess_timing": 1,     # CUDA_ERROR_INVALID_VALUE
        "plain_event_handle": 400,    # CUDA_ERROR_INVALID_HANDLE
        "event_cells": 1,
        "interior": 1, "exported": 1, "freed": 1,
        "open_own": 201, "open_own_event": 201,  # INVALID_CONTEXT
        "never_recorded": 0,
        "query_waiting": 600,         # CUDA_ERROR_NOT_READY
        "stream_wait": 0, "stream_behind_wait": 600,
        "synchronize": 0, "query_done": 0, "seen_after_wait": True,
        "exported_end": 0, "event_cells_end": 0, "bad_access": 0,
    }
    assert consumer == {
        "open_damaged": 1, "open_bad_flags": 1,
        "open": 0, "open_again": 0, "same_address": True, "opened": 1,
        "alloc": 0,                   # an import is not an allocation
        "free_opened": 1,             # cuMemFree refuses it
        "read": "0001020304050607", "read_all": True,
        "open_event": 0, "event_cells": 1,
        "elapsed_imported": 400,      # imported events do not time
        "reexport": 0, "reexport_same": True,
        "record": 0, "query_here": 600,
        "close": 0, "opened_after_one_close": 1, "close_again": 0,
        "close_unopened": 1,
        "read_after_close": 1,        # a use after close is caught
        "bad_access": 2,              # that read and the third close
        "opened_end": 0, "event_cells_end": 0,
        "counts": {"cuIpcOpenMemHandle": 4, "cuIpcCloseMemHandle": 3,
                   "cuIpcOpenEventHandle": 1, "cuIpcGetEventHandle": 1},
    }


def test_a_handle_of_an_exporter_that_exited_is_refused() -> None:
    exporter = run(EXPORTER)
    assert exporter.returncode == 0, exporter.stderr
    mem_text, event_text = exporter.stdout.split()
    assert json_of(run(AFTER_EXIT, mem_text, event_text)) == {
        "open": 1, "open_event": 1, "opened": 0, "event_cells": 0}


def test_the_interprocess_functions_are_counted_and_take_faults() -> None:
    out = json_of(run(FAULTS))
    names = ("cuIpcGetMemHandle", "cuIpcOpenMemHandle", "cuIpcCloseMemHandle",
             "cuIpcGetEventHandle", "cuIpcOpenEventHandle")
    assert {name: out.pop(name) for name in names} == dict.fromkeys(names, 0)
    assert out == {
        "get": 999, "exported_after_fault": 0, "get_again": 0,
        # One fault for both symbols of cuIpcOpenMemHandle; then the
        # exporting process's own handle.
        "open_v1": 999, "open_v2": 201,
        "close": 999, "get_event": 999, "open_event": 999,
        "counts": {"cuIpcGetMemHandle": 2, "cuIpcOpenMemHandle": 2,
                   "cuIpcCloseMemHandle": 1, "cuIpcGetEventHandle": 1,
                   "cuIpcOpenEventHandle": 1},
    }
