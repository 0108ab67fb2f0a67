"""The Level Zero test driver's interprocess memory and events, between two
real processes through the real loader (libze1), in its direct and its
intercept mode: no accelerator module, the driver alone at its ABI
(tests/ze_ipc_peer.py makes the calls with ctypes), then the backend's
interprocess slots on it with no core (tests/drivers/check_ze_ipc.c).

What Intel's driver does on Linux and the test driver does too: a
handle's first bytes hold the exporter's descriptor (a uint64_t for
memory, an int for an event pool), a number that names nothing in
another process, so the importer receives the descriptor itself
(SCM_RIGHTS here) and writes its own number there before opening; an
event pool made with ZE_EVENT_POOL_FLAG_IPC shares its event's state
with the pools opened from its handle; zeEventPoolGetIpcHandle refuses a
pool without the flag (ZE_RESULT_ERROR_UNSUPPORTED_FEATURE); a failed
open is ZE_RESULT_ERROR_INVALID_ARGUMENT.  When the exporter exits first,
the memory stays with the importer: its descriptor (and, once opened, its
mapping) keeps the storage, as a dma-buf keeps Intel's, so an open after
the exit works and an open mapping keeps its bytes.
"""
from __future__ import annotations

import ctypes.util
import json
import shutil
import subprocess
import sys
import textwrap

import pytest

import fake_drivers
from fake_drivers import REPO, ZE_DRIVER

pytestmark = [
    pytest.mark.skipif(not ZE_DRIVER.exists(),
                       reason="no Level Zero test driver (needs libze-dev; "
                       "run make -C tests/drivers)"),
    pytest.mark.skipif(ctypes.util.find_library("ze_loader") is None,
                       reason="Debian's Level Zero loader (libze1) is not "
                       "installed"),
]

MODES = [pytest.param({}, id="loader"),
         pytest.param({"ZE_ENABLE_LOADER_INTERCEPT": "1"}, id="intercept")]

PRELUDE = f"""
import json, os, socket, subprocess, sys, time
from ctypes import byref, c_void_p
sys.path.insert(0, {str(REPO / "tests")!r})
from ze_ipc_peer import *
"""

SIZE = 1 << 16

# The importer: argv[1] is its end of the socket.  It opens the memory and
# the event the exporter sends, checks and writes back, signals the event,
# then waits on the host for the exporter's next signal.
IMPORTER = PRELUDE + f"""
SIZE = {SIZE}
sock = socket.socket(fileno=int(sys.argv[1]))
ze = Ze()
out = {{}}
base = {{k: ze.live(k) for k in ("pool", "event", "ipc_opened",
                                 "ipc_event_cells")}}
# The handles alone first: the exporter's numbers name nothing here.
raw = b""
while len(raw) < 128:
    raw += sock.recv(128 - len(raw))
mraw, eraw = raw[:64], raw[64:]
out["mem_as_sent"] = ze.open_mem_code(mraw, None)[0]
out["pool_as_sent"] = ze.open_pool_code(eraw, None)[0]
sock.sendall(b"k")
_, fds, _, _ = socket.recv_fds(sock, 1, 2)
mfd, efd = fds
# Counted and failable like the driver's other functions.
before = ze.calls("zeMemOpenIpcHandle")
ze.fail("zeMemOpenIpcHandle", UNKNOWN)
out["faulted"] = ze.open_mem_code(mraw, mfd)[0]
ptr = ze.open_mem(mraw, mfd)
out["open_calls"] = ze.calls("zeMemOpenIpcHandle") - before
out["flags_out_of_range"] = ze.code(
    "zeMemOpenIpcHandle", ze.context, ze.device, Handle.of(mraw), 4,
    byref(c_void_p()))
pool = ze.open_pool(eraw, efd)
os.close(mfd)
os.close(efd)  # the mappings keep what they need
ev = ze.make_event(pool)
out["opened"] = ze.live("ipc_opened") - base["ipc_opened"]
expect = bytes((i * 7) & 0xff for i in range(SIZE))
out["read_exporters"] = ze.read(ptr, SIZE) == expect
# The exporter signalled before sending: an opened event keeps its state.
out["event_signaled"] = ze.code("zeEventQueryStatus", ev)
ze.call("zeEventHostReset", ev)
sock.sendall(b"z")
time.sleep(0.05)
ze.write(ptr, expect[::-1])
ze.signal_after(ev)
# The exporter resets it again, then signals it after new bytes: wait.
assert sock.recv(1) == b"r"
start = time.monotonic()
out["host_wait"] = ze.code("zeEventHostSynchronize", ev, 10 * SECOND)
out["waited_ms"] = (time.monotonic() - start) * 1000
out["read_second"] = ze.read(ptr, 16) == b"second write...."
# Release: an opened pool is closed, not destroyed; an opened mapping is
# closed, not freed.
ze.call("zeEventDestroy", ev)
out["pool_destroy"] = ze.code("zeEventPoolDestroy", pool)
ze.call("zeEventPoolCloseIpcHandle", pool)
out["mem_free"] = ze.code("zeMemFree", ze.context, c_void_p(ptr))
ze.call("zeMemCloseIpcHandle", ze.context, c_void_p(ptr))
out["close_again"] = ze.code("zeMemCloseIpcHandle", ze.context,
                             c_void_p(ptr))
out["left"] = {{k: ze.live(k) - v for k, v in base.items()}}
print(json.dumps(out))
sys.stdout.flush()
sock.sendall(b"d")
"""

EXPORTER = PRELUDE + f"""
SIZE = {SIZE}
ze = Ze()
out = {{}}
buf = ze.alloc(SIZE)
ze.write(buf, bytes((i * 7) & 0xff for i in range(SIZE)))
mraw, mfd = ze.mem_handle(buf)
out["mem_fd_is_the_memory"] = (
    os.readlink(f"/proc/self/fd/{{mfd}}").startswith("/memfd:"))
out["exported"] = ze.live("ipc_exported")
out["own_process"] = ze.open_mem_code(mraw, None)[0]
damaged = bytearray(mraw)
damaged[30] ^= 1
out["damaged"] = ze.open_mem_code(bytes(damaged), None)[0]
out["not_base"] = ze.code("zeMemGetIpcHandle", ze.context,
                          c_void_p(buf + 256), byref(Handle()))
out["plain_pool"] = ze.code("zeEventPoolGetIpcHandle", ze.pool,
                            byref(Handle()))
out["ipc_pool_of_two"] = ze.code(
    "zeEventPoolCreate", ze.context, byref(PoolDesc(0x10, None, 3, 2)), 0,
    None, byref(c_void_p()))
ipool = ze.make_pool(POOL_IPC | POOL_HOST_VISIBLE, 1)
iev = ze.make_event(ipool)
out["fresh_event"] = ze.code("zeEventQueryStatus", iev)
ze.call("zeEventHostSignal", iev)
eraw, efd = ze.pool_handle(ipool)
out["pool_fd_is_ours"] = os.path.exists(f"/proc/self/fd/{{efd}}")
out["cells"] = ze.live("ipc_event_cells")
a, b = socket.socketpair()
child = subprocess.Popen([sys.executable, "-c", sys.argv[1],
                          str(b.fileno())], pass_fds=[b.fileno()],
                         stdout=subprocess.PIPE, text=True)
b.close()
a.sendall(mraw + eraw)
assert a.recv(1) == b"k"
socket.send_fds(a, [b"f"], [mfd, efd])
# The importer resets the event (seen here), writes the memory back and
# signals the event: this list waits for that before reading.
assert a.recv(1) == b"z"
out["reset_seen"] = ze.code("zeEventQueryStatus", iev)
back = ze.read(buf, SIZE, waits=[iev])
out["read_back"] = back == bytes((i * 7) & 0xff
                                 for i in range(SIZE))[::-1]
ze.call("zeEventHostReset", iev)
a.sendall(b"r")
time.sleep(0.1)
ze.write(buf, b"second write....")
ze.signal_after(iev)
assert a.recv(1) == b"d"
out["child"] = json.loads(child.communicate(timeout=60)[0])
out["child_rc"] = child.returncode
ze.call("zeEventDestroy", iev)
ze.call("zeEventPoolDestroy", ipool)
ze.call("zeMemFree", ze.context, c_void_p(buf))
out["after"] = {{k: ze.live(k) for k in ("ipc_exported", "ipc_event_cells",
                                         "alloc")}}
print(json.dumps(out))
"""


def run(code: str, *args: str, **env: str) -> dict:
    environment = fake_drivers.clean_environment()
    environment.update(ZE_ENABLE_ALT_DRIVERS=str(ZE_DRIVER),
                       FAKE_ZE_DEVICES="2", **env)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code),
                             *args], env=environment, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("mode", MODES)
def test_memory_and_an_event_shared_between_two_processes(mode) -> None:
    out = run(EXPORTER, IMPORTER, **mode)
    child = out.pop("child")
    assert out == {
        "mem_fd_is_the_memory": True,
        "exported": 1,
        # Opened in its own process, or damaged: refused.
        "own_process": 0x78000004,
        "damaged": 0x78000004,
        # Not an allocation's base; a pool without ZE_EVENT_POOL_FLAG_IPC;
        # an interprocess pool of more than one event (the double's limit).
        "not_base": 0x78000004,
        "plain_pool": 0x78000003,
        "ipc_pool_of_two": 0x78000009,
        "fresh_event": 1,
        "pool_fd_is_ours": True,
        "cells": 1,
        "reset_seen": 1,
        "read_back": True,
        "child_rc": 0,
        "after": {"ipc_exported": 0, "ipc_event_cells": 0, "alloc": 0},
    }
    waited = child.pop("waited_ms")
    assert waited >= 50, waited
    assert child == {
        # The exporter's descriptor numbers name nothing here.
        "mem_as_sent": 0x78000004,
        "pool_as_sent": 0x78000004,
        "faulted": 0x7FFFFFFE,
        "open_calls": 2,
        "flags_out_of_range": 0x7800000C,
        "opened": 1,
        "read_exporters": True,
        "event_signaled": 0,
        "host_wait": 0,
        "read_second": True,
        "pool_destroy": 0x78000004,
        "mem_free": 0x78000004,
        "close_again": 0x78000004,
        "left": {"pool": 0, "event": 0, "ipc_opened": 0,
                 "ipc_event_cells": 0},
    }


# The exporter exits first: argv[1] is its end of the socket.  It sends
# its handle and descriptor (opened by the importer before or after it
# exits, argv[2]) and exits without freeing anything.
SHORT_LIVED = PRELUDE + """
sock = socket.socket(fileno=int(sys.argv[1]))
ze = Ze()
buf = ze.alloc(4096)
ze.write(buf, b"kept by the importer".ljust(4096, b"."))
ipool = ze.make_pool(POOL_IPC | POOL_HOST_VISIBLE, 1)
iev = ze.make_event(ipool)
ze.signal_after(iev)
ze.call("zeEventHostSynchronize", iev, 10 * SECOND)
mraw, mfd = ze.mem_handle(buf)
eraw, efd = ze.pool_handle(ipool)
socket.send_fds(sock, [mraw + eraw], [mfd, efd])
if sys.argv[2] == "before":
    assert sock.recv(1) == b"o"
os._exit(0)
"""

SURVIVOR = PRELUDE + """
ze = Ze()
a, b = socket.socketpair()
when = sys.argv[2]
child = subprocess.Popen([sys.executable, "-c", sys.argv[1],
                          str(b.fileno()), when], pass_fds=[b.fileno()])
b.close()
raw, (mfd, efd), _, _ = socket.recv_fds(a, 128, 2)
out = {}
if when == "before":
    ptr = ze.open_mem(raw[:64], mfd)
    pool = ze.open_pool(raw[64:], efd)
    a.sendall(b"o")
out["exporter_rc"] = child.wait(timeout=60)
if when == "after":
    ptr = ze.open_mem(raw[:64], mfd)
    pool = ze.open_pool(raw[64:], efd)
os.close(mfd)
os.close(efd)
ev = ze.make_event(pool)
out["event"] = ze.code("zeEventQueryStatus", ev)
out["bytes"] = ze.read(ptr, 20).decode()
ze.call("zeEventDestroy", ev)
ze.call("zeEventPoolCloseIpcHandle", pool)
ze.call("zeMemCloseIpcHandle", ze.context, c_void_p(ptr))
out["left"] = [ze.live("ipc_opened"), ze.live("ipc_event_cells")]
print(json.dumps(out))
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_the_memory_outlives_an_exporter_that_exits_first(when) -> None:
    out = run(SURVIVOR, SHORT_LIVED, when)
    assert out == {"exporter_rc": 0, "event": 0,
                   "bytes": "kept by the importer", "left": [0, 0]}


def test_the_interprocess_functions_are_listed_counted_and_failable() -> None:
    """fake_drivers.ZeDouble.ipc_functions() names ze_api.h's
    ACC_ZE_IPC_FUNCTIONS, among its driver functions (so each has a
    fault site), each of which the driver counts and can fail."""
    header = fake_drivers.ZeDouble.listed_functions(
        (("csrc/backends/level_zero/ze_api.h", "ACC_ZE_IPC_FUNCTIONS"),))
    assert fake_drivers.ZeDouble.ipc_functions() == header
    assert set(header) <= set(fake_drivers.ZeDouble.driver_functions())
    out = run(PRELUDE + textwrap.dedent(f"""
    ze = Ze()
    out = {{}}
    for name in {header!r}:
        ze.fail(name, 0x70000001)  # ZE_RESULT_ERROR_DEVICE_LOST
        before = ze.calls(name)
        h = Handle()
        p = c_void_p()
        args = {{
            "zeMemGetIpcHandle": (ze.context, c_void_p(1), byref(h)),
            "zeMemOpenIpcHandle": (ze.context, ze.device, h, 0, byref(p)),
            "zeMemCloseIpcHandle": (ze.context, c_void_p(1)),
            "zeEventPoolGetIpcHandle": (ze.pool, byref(h)),
            "zeEventPoolOpenIpcHandle": (ze.context, h, byref(p)),
            "zeEventPoolCloseIpcHandle": (ze.pool,),
        }}[name]
        out[name] = [ze.code(name, *args), ze.calls(name) - before]
    print(json.dumps(out))
    """))
    assert out == {name: [0x70000001, 1] for name in header}


@pytest.fixture(scope="module")
def backend_check(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/drivers/check_ze_ipc.c built with the backend's files."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler"
    program = tmp_path_factory.mktemp("ze_ipc") / "check_ze_ipc"
    sources = sorted((REPO / "csrc/backends/level_zero").glob("*.c"))
    build = subprocess.run(
        [compiler, "-std=gnu11", "-Wall", "-Wextra", "-Werror",
         "-Wno-missing-field-initializers", "-pthread",
         f"-I{REPO / 'csrc' / 'include'}",
         str(REPO / "tests/drivers/check_ze_ipc.c"), *map(str, sources),
         "-ldl", "-o", str(program)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return str(program)


@pytest.mark.parametrize("mode", MODES)
def test_the_backend_slots_between_two_processes(backend_check,
                                                 mode) -> None:
    """Memory and an interprocess event exported by the backend in one
    process and opened in another: read, written back, the event
    recorded by either and waited for by the other (host and stream);
    re-recorded while pending and waited on, it stays one event of one
    pool; nothing is left once both let go."""
    environment = fake_drivers.clean_environment()
    environment.update(ZE_ENABLE_ALT_DRIVERS=str(ZE_DRIVER),
                       FAKE_ZE_DEVICES="2", **mode)
    result = subprocess.run([backend_check], env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    got = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
    assert got == {
        "mem_fd_is_a_memfd": "1",
        # Each driver call failing (ZE_RESULT_ERROR_UNKNOWN): the slot's
        # ACC_ERR_DRIVER names it, with its code, and leaves no pool, no
        # event, no cell, no mapping.
        "export_mem_fails": "1",
        "create_pool_fails": "1",
        "create_event_fails": "1",
        "no_cell_left": "0",
        "own_pool": "1",
        "cells": "1",
        "stall": "0",
        # Recorded on one stream behind held work, again on another whose
        # work is held too: pending even once the first record has run
        # (its reset waits behind the second's held work), as is a
        # stream that waits on it, and after a third record; then done,
        # and the same event of the same pool throughout.
        "pending": "1",
        "pending_s2": "1",
        "pending_third": "1",
        "done": "0",
        "same_event_after_rerecords": "1",
        "pools_after_rerecords": "1",
        "export_event_fails": "1",
        "event_fd": "1",
        "child.open_mem_fails": "1",
        "child.nothing_mapped": "0",
        "child.open_pool_fails": "1",
        "child.open_event_fails": "1",
        "child.no_cell_kept": "0",
        "child.opened": "1",
        # An opened event starts armed: the exporter's record completed.
        "child.query": "0",
        "child.read_exporters": "1",
        "read_back": "1",
        "child.waited_at_least_80ms": "1",
        "child.read_second": "1",
        "child.same_event": "1",
        # A refused close is silent and leaves the mapping (closed by a
        # second try here).
        "child.close_refused_kept": "1",
        "child.left_opened": "0",
        "child.left_cells": "0",
        # The pool of ordinary events its copies used; the opened one is
        # closed.
        "child.left_pools": "1",
        "child_exit": "0",
        "left_pools": "0",
        "left_cells": "0",
        "left_exported": "0",
    }
