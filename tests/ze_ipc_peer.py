"""A Level Zero program in ctypes, for tests/test_ipc_ze_driver.py: the
calls a process makes to share device memory and an event with another
process through the real loader (libze1) and the test driver, which
ZE_ENABLE_ALT_DRIVERS names.  No accelerator module: the driver alone.

Every call is checked: ``Ze.call`` raises ``ZeError`` with the result's
value, and ``Ze.code`` returns it for the calls that are meant to fail.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, Structure, byref, c_size_t, c_uint32, c_uint64, \
    c_void_p

SUCCESS = 0
NOT_READY = 1
UNSUPPORTED_FEATURE = 0x78000003
INVALID_ARGUMENT = 0x78000004
INVALID_NULL_POINTER = 0x78000007
UNSUPPORTED_SIZE = 0x78000009
INVALID_ENUMERATION = 0x7800000C
UNKNOWN = 0x7FFFFFFE

POOL_HOST_VISIBLE, POOL_IPC = 1, 2
SCOPE_HOST = 4
SECOND = 1_000_000_000


class Handle(Structure):
    """ze_ipc_mem_handle_t and ze_ipc_event_pool_handle_t."""
    _fields_ = [("data", ctypes.c_ubyte * 64)]

    @classmethod
    def of(cls, raw: bytes) -> "Handle":
        h = cls()
        ctypes.memmove(h.data, raw, 64)
        return h

    def raw(self) -> bytes:
        return bytes(self.data)


class ContextDesc(Structure):
    _fields_ = [("stype", c_uint32), ("pNext", c_void_p), ("flags", c_uint32)]


class QueueDesc(Structure):
    _fields_ = [("stype", c_uint32), ("pNext", c_void_p),
                ("ordinal", c_uint32), ("index", c_uint32),
                ("flags", c_uint32), ("mode", c_uint32),
                ("priority", c_uint32)]


class PoolDesc(Structure):
    _fields_ = [("stype", c_uint32), ("pNext", c_void_p),
                ("flags", c_uint32), ("count", c_uint32)]


class EventDesc(Structure):
    _fields_ = [("stype", c_uint32), ("pNext", c_void_p),
                ("index", c_uint32), ("signal", c_uint32),
                ("wait", c_uint32)]


class AllocDesc(Structure):
    _fields_ = [("stype", c_uint32), ("pNext", c_void_p),
                ("flags", c_uint32), ("ordinal", c_uint32)]


P = c_void_p
SIGNATURES = {
    "zeInit": [c_uint32],
    "zeDriverGet": [POINTER(c_uint32), POINTER(c_void_p)],
    "zeDeviceGet": [P, POINTER(c_uint32), POINTER(c_void_p)],
    "zeContextCreate": [P, POINTER(ContextDesc), POINTER(c_void_p)],
    "zeContextDestroy": [P],
    "zeCommandListCreateImmediate": [P, P, POINTER(QueueDesc),
                                     POINTER(c_void_p)],
    "zeCommandListDestroy": [P],
    "zeCommandListAppendBarrier": [P, P, c_uint32, POINTER(c_void_p)],
    "zeCommandListAppendMemoryCopy": [P, P, P, c_size_t, P, c_uint32,
                                      POINTER(c_void_p)],
    "zeEventPoolCreate": [P, POINTER(PoolDesc), c_uint32, POINTER(c_void_p),
                          POINTER(c_void_p)],
    "zeEventPoolDestroy": [P],
    "zeEventCreate": [P, POINTER(EventDesc), POINTER(c_void_p)],
    "zeEventDestroy": [P],
    "zeEventHostSynchronize": [P, c_uint64],
    "zeEventQueryStatus": [P],
    "zeEventHostReset": [P],
    "zeEventHostSignal": [P],
    "zeMemAllocDevice": [P, POINTER(AllocDesc), c_size_t, c_size_t, P,
                         POINTER(c_void_p)],
    "zeMemFree": [P, P],
    "zeMemGetIpcHandle": [P, P, POINTER(Handle)],
    "zeMemOpenIpcHandle": [P, P, Handle, c_uint32, POINTER(c_void_p)],
    "zeMemCloseIpcHandle": [P, P],
    "zeEventPoolGetIpcHandle": [P, POINTER(Handle)],
    "zeEventPoolOpenIpcHandle": [P, Handle, POINTER(c_void_p)],
    "zeEventPoolCloseIpcHandle": [P],
}


class ZeError(Exception):
    def __init__(self, api: str, code: int) -> None:
        super().__init__(f"{api} failed: 0x{code:x}")
        self.api, self.code = api, code


class Ze:
    """One process's driver, context, first device, an immediate list and
    a pool of ordinary events for its copies."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libze_loader.so.1")
        for name, args in SIGNATURES.items():
            f = getattr(self.lib, name)
            f.argtypes, f.restype = args, c_uint32
        # The instance the loader opened (same path): its counters.
        self.driver = ctypes.CDLL(os.environ["ZE_ENABLE_ALT_DRIVERS"])
        self.driver.fake_ze_live.restype = ctypes.c_longlong
        self.driver.fake_ze_call_count.restype = ctypes.c_longlong
        self.call("zeInit", 1)
        n = c_uint32(1)
        drv = c_void_p()
        self.call("zeDriverGet", byref(n), byref(drv))
        n = c_uint32(1)
        self.device = c_void_p()
        self.call("zeDeviceGet", drv, byref(n), byref(self.device))
        self.context = c_void_p()
        self.call("zeContextCreate", drv, byref(ContextDesc(0xD, None, 0)),
                  byref(self.context))
        self.list = c_void_p()
        self.call("zeCommandListCreateImmediate", self.context, self.device,
                  byref(QueueDesc(0xE, None, 0, 0, 0, 0, 0)),
                  byref(self.list))
        self.pool = self.make_pool(POOL_HOST_VISIBLE, 8)
        self.events = [self.make_event(self.pool, i) for i in range(8)]
        self.used = 0

    def code(self, api: str, *args: object) -> int:
        return getattr(self.lib, api)(*args)

    def call(self, api: str, *args: object) -> None:
        r = self.code(api, *args)
        if r != SUCCESS:
            raise ZeError(api, r)

    def live(self, kind: str) -> int:
        return self.driver.fake_ze_live(kind.encode())

    def calls(self, name: str) -> int:
        return self.driver.fake_ze_call_count(name.encode())

    def fail(self, name: str, code: int, nth: int = 1) -> None:
        assert self.driver.fake_ze_fail(name.encode(), nth, code) == 0

    def make_pool(self, flags: int, count: int) -> c_void_p:
        pool = c_void_p()
        self.call("zeEventPoolCreate", self.context,
                  byref(PoolDesc(0x10, None, flags, count)), 0, None,
                  byref(pool))
        return pool

    def make_event(self, pool: c_void_p, index: int = 0) -> c_void_p:
        ev = c_void_p()
        self.call("zeEventCreate", pool,
                  byref(EventDesc(0x11, None, index, SCOPE_HOST, SCOPE_HOST)),
                  byref(ev))
        return ev

    def _done_event(self) -> c_void_p:
        ev = self.events[self.used % len(self.events)]
        self.used += 1
        self.call("zeEventHostReset", ev)
        return ev

    def alloc(self, size: int) -> int:
        p = c_void_p()
        self.call("zeMemAllocDevice", self.context,
                  byref(AllocDesc(0x15, None, 0, 0)), size, 256, self.device,
                  byref(p))
        return p.value

    def copy(self, dst: int, src: int, size: int,
             waits: list[c_void_p] = ()) -> None:
        """A copy on the list after waits (a barrier), waited for."""
        if waits:
            array = (c_void_p * len(waits))(*[w.value for w in waits])
            self.call("zeCommandListAppendBarrier", self.list, None,
                      len(waits), array)
        done = self._done_event()
        self.call("zeCommandListAppendMemoryCopy", self.list, dst, src, size,
                  done, 0, None)
        self.call("zeEventHostSynchronize", done, 10 * SECOND)

    def write(self, dst: int, data: bytes) -> None:
        host = ctypes.create_string_buffer(data, len(data))
        self.copy(dst, ctypes.addressof(host), len(data))

    def read(self, src: int, size: int, waits: list[c_void_p] = ()) -> bytes:
        host = ctypes.create_string_buffer(size)
        self.copy(ctypes.addressof(host), src, size, waits)
        return host.raw

    def signal_after(self, ev: c_void_p, waits: list[c_void_p] = ()) -> None:
        """Append a barrier that signals ev (after waits)."""
        array = (c_void_p * len(waits))(*[w.value for w in waits]) \
            if waits else None
        self.call("zeCommandListAppendBarrier", self.list, ev, len(waits),
                  array)

    # Interprocess ------------------------------------------------------

    def mem_handle(self, ptr: int) -> tuple[bytes, int]:
        """The handle's bytes and the exporter's descriptor in them (a
        uint64_t in the first 8 bytes, as Intel's driver)."""
        h = Handle()
        self.call("zeMemGetIpcHandle", self.context, ptr, byref(h))
        return h.raw(), int.from_bytes(h.raw()[:8], "little")

    def open_mem_code(self, raw: bytes, fd: int | None) -> tuple[int, int]:
        """zeMemOpenIpcHandle with this process's descriptor fd written
        into the handle (None: the bytes as they came)."""
        if fd is not None:
            raw = fd.to_bytes(8, "little") + raw[8:]
        p = c_void_p()
        r = self.code("zeMemOpenIpcHandle", self.context, self.device,
                      Handle.of(raw), 0, byref(p))
        return r, p.value or 0

    def open_mem(self, raw: bytes, fd: int | None) -> int:
        r, p = self.open_mem_code(raw, fd)
        if r != SUCCESS:
            raise ZeError("zeMemOpenIpcHandle", r)
        return p

    def pool_handle(self, pool: c_void_p) -> tuple[bytes, int]:
        """The event pool handle and the descriptor in it (an int in the
        first 4 bytes, as Intel's driver)."""
        h = Handle()
        self.call("zeEventPoolGetIpcHandle", pool, byref(h))
        return h.raw(), int.from_bytes(h.raw()[:4], "little", signed=True)

    def open_pool_code(self, raw: bytes,
                       fd: int | None) -> tuple[int, c_void_p]:
        if fd is not None:
            raw = fd.to_bytes(4, "little", signed=True) + raw[4:]
        pool = c_void_p()
        r = self.code("zeEventPoolOpenIpcHandle", self.context,
                      Handle.of(raw), byref(pool))
        return r, pool

    def open_pool(self, raw: bytes, fd: int | None) -> c_void_p:
        r, pool = self.open_pool_code(raw, fd)
        if r != SUCCESS:
            raise ZeError("zeEventPoolOpenIpcHandle", r)
        return pool
