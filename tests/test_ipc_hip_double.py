"""The HIP double's interprocess memory and events, at its ABI, between two
real processes.

Each side is a fresh interpreter that loads the double with ctypes (a
child forked from an initialised runtime could not use it, as ROCm's
cannot) and runs what the test sends it: a producer that allocates,
writes, exports memory and an interprocess event, and a consumer that
opens both, checks the bytes, writes back behind a gate and records the
event, on which the producer's stream waits.  Then the refusals, with
ROCm's codes (tests/drivers/hip_double.c says where the double chooses):
the exporting process opening its own handles, damaged handles, wrong
flags, a close of what was not opened, and an exporter that exits first.
Every interprocess function is counted and failable like the others.
The backend's slots run the same exchange over the double
(tests/drivers/check_hip_ipc.c).

Runs in the hip stage (tests/stages.py); a process of its own per side
keeps the suite's double untouched.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import traceback
from typing import Any

import pytest

import fake_drivers

# hipError_t codes (hip_runtime_api.h).
SUCCESS = 0
INVALID_VALUE = 1
INVALID_CONFIGURATION = 9
INVALID_DEVICE_POINTER = 17
INVALID_CONTEXT = 201
INVALID_HANDLE = 400
NOT_READY = 600
UNKNOWN = 999

EVENT_DISABLE_TIMING = 2
EVENT_INTERPROCESS = 4
STREAM_NON_BLOCKING = 1
H2D, D2H = 1, 2

IPC_FUNCTIONS = fake_drivers.HipDouble.ipc_functions()

pytestmark = pytest.mark.skipif(fake_drivers.HipDouble.missing() is not None,
                                reason=str(fake_drivers.HipDouble.missing()))


# The child side ----------------------------------------------------------


class Handle(ctypes.Structure):
    """hipIpcMemHandle_t / hipIpcEventHandle_t: 64 bytes, by value."""

    _fields_ = [("reserved", ctypes.c_char * 64)]


class HipError(Exception):
    pass


class Hip:
    """The double's runtime functions with their C types; the helpers
    raise HipError on a failure, the raw functions (lib) return codes."""

    def __init__(self, path: str) -> None:
        lib = self.lib = ctypes.CDLL(path)
        p, pp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        size, uint = ctypes.c_size_t, ctypes.c_uint
        types = {
            "hipSetDevice": [ctypes.c_int],
            "hipMalloc": [pp, size], "hipFree": [p],
            "hipMemcpyAsync": [p, p, size, ctypes.c_int, p],
            "hipStreamCreateWithPriority": [pp, uint, ctypes.c_int],
            "hipStreamSynchronize": [p], "hipStreamQuery": [p],
            "hipStreamDestroy": [p], "hipStreamWaitEvent": [p, p, uint],
            "hipEventCreateWithFlags": [pp, uint],
            "hipEventRecord": [p, p], "hipEventQuery": [p],
            "hipEventSynchronize": [p], "hipEventDestroy": [p],
            "hipIpcGetMemHandle": [ctypes.POINTER(Handle), p],
            "hipIpcOpenMemHandle": [pp, Handle, uint],
            "hipIpcCloseMemHandle": [p],
            "hipIpcGetEventHandle": [ctypes.POINTER(Handle), p],
            "hipIpcOpenEventHandle": [pp, Handle],
            "fake_hip_enqueue_gate": [ctypes.c_int, ctypes.c_ulonglong,
                                      ctypes.POINTER(ctypes.c_int)],
            "fake_hip_open_gate": [ctypes.c_int],
            "fake_hip_fail": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
            "fake_hip_clear_faults": [],
        }
        for name, argtypes in types.items():
            getattr(lib, name).argtypes = argtypes
        for name in ("fake_hip_live", "fake_hip_call_count"):
            getattr(lib, name).argtypes = [ctypes.c_char_p]
            getattr(lib, name).restype = ctypes.c_longlong
        self.keep: list[Any] = []   # host bytes of copies still queued

    def check(self, rc: int, what: str) -> None:
        if rc != SUCCESS:
            raise HipError(f"{what}: {rc}")

    def out(self, fn: str, *args: Any) -> int:
        """fn(&out, *args) for a pointer-sized out; out as an int."""
        value = ctypes.c_void_p()
        self.check(getattr(self.lib, fn)(ctypes.byref(value), *args), fn)
        return value.value or 0

    def malloc(self, n: int) -> int:
        return self.out("hipMalloc", n)

    def stream(self) -> int:
        return self.out("hipStreamCreateWithPriority", STREAM_NON_BLOCKING, 0)

    def event(self, flags: int) -> int:
        return self.out("hipEventCreateWithFlags", flags)

    def write(self, ptr: int, data: bytes, stream: int = 0) -> None:
        """Queue a copy of data to device memory; without a stream, wait
        for it."""
        src = ctypes.create_string_buffer(data, len(data))
        self.keep.append(src)
        self.check(self.lib.hipMemcpyAsync(ptr, src, len(data), H2D, stream),
                   "hipMemcpyAsync")
        if not stream:
            self.sync(0)

    def read(self, ptr: int, n: int, stream: int = 0) -> ctypes.Array:
        """Queue a copy of n bytes of device memory to a host buffer;
        without a stream, wait for it."""
        dst = ctypes.create_string_buffer(n)
        self.check(self.lib.hipMemcpyAsync(dst, ptr, n, D2H, stream),
                   "hipMemcpyAsync")
        if not stream:
            self.sync(0)
        return dst

    def sync(self, stream: int) -> None:
        self.check(self.lib.hipStreamSynchronize(stream),
                   "hipStreamSynchronize")

    def mem_handle(self, ptr: int) -> str:
        h = Handle()
        self.check(self.lib.hipIpcGetMemHandle(ctypes.byref(h), ptr),
                   "hipIpcGetMemHandle")
        return bytes(h).hex()

    def event_handle(self, event: int) -> str:
        h = Handle()
        self.check(self.lib.hipIpcGetEventHandle(ctypes.byref(h), event),
                   "hipIpcGetEventHandle")
        return bytes(h).hex()

    def open_mem(self, handle: str, flags: int = 0) -> tuple[int, int]:
        """(code, address) of hipIpcOpenMemHandle."""
        ptr = ctypes.c_void_p()
        rc = self.lib.hipIpcOpenMemHandle(ctypes.byref(ptr), as_handle(handle),
                                          flags)
        return rc, ptr.value or 0

    def open_event(self, handle: str) -> tuple[int, int]:
        """(code, event) of hipIpcOpenEventHandle."""
        event = ctypes.c_void_p()
        rc = self.lib.hipIpcOpenEventHandle(ctypes.byref(event),
                                            as_handle(handle))
        return rc, event.value or 0

    def gate(self, stream: int) -> int:
        gate = ctypes.c_int()
        self.check(self.lib.fake_hip_enqueue_gate(0, stream,
                                                  ctypes.byref(gate)),
                   "fake_hip_enqueue_gate")
        return gate.value

    def live(self, kind: str) -> int:
        n = self.lib.fake_hip_live(kind.encode())
        assert n >= 0, kind
        return n

    def calls(self, name: str) -> int:
        n = self.lib.fake_hip_call_count(name.encode())
        assert n >= 0, name
        return n


def as_handle(text: str) -> Handle:
    return Handle.from_buffer_copy(bytes.fromhex(text))


def child_main() -> None:
    """Run each line of stdin (a JSON string of Python code) with hip, the
    double, in one namespace; answer each with the namespace's `out` (or
    the error) as a JSON line on stdout."""
    hip = Hip(os.environ["HIP_DOUBLE"])
    ns: dict[str, Any] = {"hip": hip, "lib": hip.lib, "ctypes": ctypes,
                          "Handle": Handle}
    reply = sys.stdout
    sys.stdout = sys.stderr  # a stray print cannot break the protocol
    for line in sys.stdin:
        ns.pop("out", None)
        try:
            exec(json.loads(line), ns)
            answer = {"out": ns.get("out")}
        except Exception:
            answer = {"error": traceback.format_exc()}
        reply.write(json.dumps(answer) + "\n")
        reply.flush()


# The test side -----------------------------------------------------------


class Side:
    """A fresh process with the double loaded, running what it is sent."""

    def __init__(self, name: str) -> None:
        env = fake_drivers.clean_environment()
        env.update(HIP_DOUBLE=str(fake_drivers.HIP_DOUBLE),
                   FAKE_HIP_DEVICES="2")
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "child"], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def __call__(self, code: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(code) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the {self.name} died: {self.proc.wait()}"
        answer = json.loads(line)
        assert "error" not in answer, f"{self.name}:\n{answer['error']}"
        return answer["out"]

    def exit(self) -> int:
        """End the process (stdin closed): its exit status."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)

    def close(self) -> None:
        """Kill the process if it still runs; close the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def sides():
    made: list[Side] = []

    def make(name: str) -> Side:
        made.append(Side(name))
        return made[-1]

    yield make
    for side in made:
        side.close()


PATTERN = bytes(range(256)) * 16
BACK = b"\xa5" * len(PATTERN)


def producer_with_memory_and_event(make) -> tuple[Side, str, str]:
    """A producer with PATTERN in an exported allocation (ptr) and an
    exported interprocess event (e): the side and both handles."""
    producer = make("producer")
    mem, event = producer(f"""
ptr = hip.malloc({len(PATTERN)})
hip.write(ptr, {PATTERN!r})
e = hip.event({EVENT_INTERPROCESS | EVENT_DISABLE_TIMING})
out = [hip.mem_handle(ptr), hip.event_handle(e)]
""")
    return producer, mem, event


def test_memory_and_an_event_cross_two_processes(sides) -> None:
    producer, mem, event = producer_with_memory_and_event(sides)
    consumer = sides("consumer")
    # The consumer maps the allocation and sees the producer's bytes.
    rc, _ = consumer(f"rc, q = hip.open_mem({mem!r}); out = [rc, q]")
    assert rc == SUCCESS
    assert consumer(f"out = hip.read(q, {len(PATTERN)}).raw == {PATTERN!r}")
    assert consumer("out = hip.live('ipc_opened')") == 1
    # It writes back behind a closed gate and records the shared event
    # after the write: pending for both processes.
    rc = consumer(f"""
s = hip.stream()
g = hip.gate(s)
hip.write(q, {BACK!r}, s)
rc, ev = hip.open_event({event!r})
out = rc
""")
    assert rc == SUCCESS
    assert consumer("out = lib.hipEventRecord(ev, s)") == SUCCESS
    assert consumer("out = lib.hipEventQuery(ev)") == NOT_READY
    assert producer("out = lib.hipEventQuery(e)") == NOT_READY
    # The producer's stream waits on the consumer's record, then reads.
    producer(f"""
ps = hip.stream()
assert lib.hipStreamWaitEvent(ps, e, 0) == 0
back = hip.read(ptr, {len(PATTERN)}, ps)
""")
    assert producer("out = lib.hipStreamQuery(ps)") == NOT_READY
    assert producer(f"out = back.raw == bytes({len(PATTERN)})")
    consumer("lib.fake_hip_open_gate(g); hip.sync(s)")
    producer("hip.sync(ps)")
    assert producer(f"out = back.raw == {BACK!r}")
    assert producer("out = [lib.hipEventSynchronize(e), "
                    "lib.hipEventQuery(e)]") == [SUCCESS, SUCCESS]
    assert consumer("out = lib.hipEventQuery(ev)") == SUCCESS
    # The producer records the event again: the consumer's copy follows.
    producer("pg = hip.gate(ps); assert lib.hipEventRecord(e, ps) == 0")
    assert consumer("out = lib.hipEventQuery(ev)") == NOT_READY
    producer("lib.fake_hip_open_gate(pg); hip.sync(ps)")
    assert consumer("out = lib.hipEventSynchronize(ev)") == SUCCESS
    # Everything opened is released, then everything exported.
    consumer("""
assert lib.hipEventDestroy(ev) == 0
assert lib.hipIpcCloseMemHandle(q) == 0
assert lib.hipStreamDestroy(s) == 0
""")
    assert consumer("out = [hip.live(k) for k in ('ipc_opened', "
                    "'ipc_event_cells', 'event')]") == [0, 0, 0]
    producer("""
assert lib.hipEventDestroy(e) == 0
assert lib.hipFree(ptr) == 0
assert lib.hipStreamDestroy(ps) == 0
""")
    assert producer("out = [hip.live(k) for k in ('ipc_exported', "
                    "'ipc_event_cells', 'event', 'alloc')]") == [0, 0, 0, 0]
    assert consumer.exit() == 0
    assert producer.exit() == 0


def test_the_exporting_process_cannot_open_its_own_handles(sides) -> None:
    """hipErrorInvalidContext, as ROCm's owners_process_id check answers
    (hip_runtime_api.h: 'within the same process ... hipErrorInvalidContext'
    for events; later ROCm documents the same code for memory)."""
    producer, mem, event = producer_with_memory_and_event(sides)
    assert producer(f"out = hip.open_mem({mem!r})[0]") == INVALID_CONTEXT
    assert producer(f"out = hip.open_event({event!r})") == [INVALID_CONTEXT,
                                                            0]
    assert producer("out = [hip.live('ipc_opened'), hip.live('event')]") \
        == [0, 1]


def test_what_cannot_be_exported(sides) -> None:
    producer, _, _ = producer_with_memory_and_event(sides)
    h = "ctypes.byref(Handle())"
    # Only the base of a live allocation (ROCr's IPC create refuses the
    # rest).
    assert producer(f"out = lib.hipIpcGetMemHandle({h}, ptr + 1)") \
        == INVALID_DEVICE_POINTER
    assert producer(f"""
dead = hip.malloc(64)
assert lib.hipFree(dead) == 0
out = lib.hipIpcGetMemHandle({h}, dead)
""") == INVALID_DEVICE_POINTER
    assert producer(f"out = [lib.hipIpcGetMemHandle(None, ptr), "
                    f"lib.hipIpcGetMemHandle({h}, None)]") \
        == [INVALID_VALUE, INVALID_VALUE]
    # An event without hipEventInterprocess: ROCm's
    # hipErrorInvalidConfiguration; one with it needs DisableTiming.
    assert producer(f"""
plain = hip.event({EVENT_DISABLE_TIMING})
out = lib.hipIpcGetEventHandle({h}, plain)
""") == INVALID_CONFIGURATION
    assert producer(f"out = lib.hipEventCreateWithFlags("
                    f"ctypes.byref(ctypes.c_void_p()), "
                    f"{EVENT_INTERPROCESS})") == INVALID_VALUE
    assert producer(f"out = lib.hipIpcGetEventHandle(None, e)") \
        == INVALID_VALUE


def test_what_cannot_be_opened_or_closed(sides) -> None:
    producer, mem, event = producer_with_memory_and_event(sides)
    consumer = sides("consumer")
    raw = bytes.fromhex(mem)
    damaged = (raw[:20] + bytes([raw[20] ^ 1]) + raw[21:]).hex()
    # Flags other than hipIpcMemLazyEnablePeerAccess, and a handle whose
    # size (where ROCm keeps psize) is zero: hipErrorInvalidValue; a
    # damaged one fails to attach: hipErrorInvalidDevicePointer.
    assert consumer(f"out = hip.open_mem({mem!r}, 1)") == [INVALID_VALUE, 0]
    assert consumer(f"out = hip.open_mem({bytes(64).hex()!r})") \
        == [INVALID_VALUE, 0]
    assert consumer(f"out = hip.open_mem({damaged!r})") \
        == [INVALID_DEVICE_POINTER, 0]
    assert consumer(f"out = hip.open_mem({event!r})") \
        == [INVALID_DEVICE_POINTER, 0]
    assert consumer(f"out = hip.open_event({bytes(64).hex()!r})") \
        == [INVALID_VALUE, 0]
    assert consumer(f"out = hip.open_event({mem!r})") == [INVALID_VALUE, 0]
    assert consumer("out = [hip.live('ipc_opened'), "
                    "hip.live('ipc_event_cells'), hip.live('event')]") \
        == [0, 0, 0]
    # An opened allocation: not hipFree's (it stays mapped), not
    # exportable again; a close needs what was opened.
    consumer(f"rc, q = hip.open_mem({mem!r}); assert rc == 0")
    assert consumer("out = lib.hipFree(q)") == INVALID_VALUE
    assert consumer(f"out = hip.read(q, 16).raw == {PATTERN[:16]!r}")
    assert consumer("out = lib.hipIpcGetMemHandle(ctypes.byref(Handle()), "
                    "q)") == INVALID_DEVICE_POINTER
    assert consumer("""
own = hip.malloc(64)
out = [lib.hipIpcCloseMemHandle(own), lib.hipIpcCloseMemHandle(q + 1),
       lib.hipIpcCloseMemHandle(None)]
""") == [INVALID_HANDLE, INVALID_HANDLE, INVALID_VALUE]
    assert consumer("out = [lib.hipIpcCloseMemHandle(q), "
                    "lib.hipIpcCloseMemHandle(q)]") == [SUCCESS,
                                                         INVALID_HANDLE]
    # An opened event is not exported again (the double's choice: ROCm
    # would hand its name out once more).
    assert consumer(f"""
rc, ev = hip.open_event({event!r})
assert rc == 0
out = lib.hipIpcGetEventHandle(ctypes.byref(Handle()), ev)
""") == INVALID_CONFIGURATION
    assert consumer("out = [lib.hipEventDestroy(ev), hip.live('event'), "
                    "hip.live('ipc_event_cells'), hip.live('ipc_opened')]") \
        == [SUCCESS, 0, 0, 0]


def test_an_exporter_that_exits_first(sides) -> None:
    """What the consumer opened stays usable (a mapped buffer and an
    opened event keep their storage, as the driver's own references do);
    what it had not opened yet cannot be: hipErrorInvalidDevicePointer
    for memory, ROCm's answer to a failed attach, and
    hipErrorInvalidValue for the event (ROCm 5.2 would map the event's
    shared file even then, and its waits would return at once)."""
    producer, mem, event = producer_with_memory_and_event(sides)
    later = producer("other = hip.malloc(256); out = hip.mem_handle(other)")
    consumer = sides("consumer")
    consumer(f"""
rc, q = hip.open_mem({mem!r}); assert rc == 0
rc, ev = hip.open_event({event!r}); assert rc == 0
""")
    assert producer.exit() == 0
    assert consumer(f"out = hip.read(q, {len(PATTERN)}).raw == {PATTERN!r}")
    assert consumer(f"out = hip.open_mem({later!r})") \
        == [INVALID_DEVICE_POINTER, 0]
    assert consumer(f"out = hip.open_event({event!r})") == [INVALID_VALUE, 0]
    # The event still works in the consumer, alone.
    assert consumer("""
s = hip.stream()
assert lib.hipEventRecord(ev, s) == 0
hip.sync(s)
out = [lib.hipEventQuery(ev), lib.hipEventSynchronize(ev)]
""") == [SUCCESS, SUCCESS]
    consumer("""
assert lib.hipEventDestroy(ev) == 0
assert lib.hipIpcCloseMemHandle(q) == 0
""")
    assert consumer("out = [hip.live('ipc_opened'), "
                    "hip.live('ipc_event_cells')]") == [0, 0]
    assert consumer.exit() == 0


#: each function with arguments it refuses (hipErrorInvalidValue) without
#: a fault, so that a fault's code is told apart from the function's own
FAULT_CALLS = {
    "hipIpcGetMemHandle": "lib.hipIpcGetMemHandle(None, None)",
    "hipIpcOpenMemHandle": "lib.hipIpcOpenMemHandle(None, Handle(), 0)",
    "hipIpcCloseMemHandle": "lib.hipIpcCloseMemHandle(None)",
    "hipIpcGetEventHandle": "lib.hipIpcGetEventHandle(None, None)",
    "hipIpcOpenEventHandle": "lib.hipIpcOpenEventHandle(None, Handle())",
}


def test_every_interprocess_function_is_counted_and_failable(sides) -> None:
    assert sorted(FAULT_CALLS) == sorted(IPC_FUNCTIONS)
    side = sides("process")
    for name in IPC_FUNCTIONS:
        call = FAULT_CALLS[name]
        seen = side(f"""
before = hip.calls({name!r})
assert lib.fake_hip_fail({name.encode()!r}, 1, {UNKNOWN}) == 0
failed = {call}
again = {call}
out = [failed, again, hip.calls({name!r}) - before]
""")
        assert seen == [UNKNOWN, INVALID_VALUE, 2], name


CHECK_PROGRAM = fake_drivers.DRIVERS / "check_hip_ipc"


def test_the_backend_slots_share_memory_and_an_event() -> None:
    """tests/drivers/check_hip_ipc.c: the backend's five slots, called
    without the core, between a producer and the consumer it starts."""
    assert CHECK_PROGRAM.exists(), "run make -C tests/drivers"
    env = fake_drivers.clean_environment()
    env.update(ACCELERATOR_HIP_LIBRARY=str(fake_drivers.HIP_DOUBLE),
               ACCELERATOR_KFD_TOPOLOGY="none", FAKE_HIP_DEVICES="2")
    result = subprocess.run([str(CHECK_PROGRAM)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_the_double_and_the_header_list_the_same_functions() -> None:
    """The backend resolves ACC_HIP_IPC_FUNCTIONS by name: the double
    exports each (and tests/test_hip_real_library.py checks ROCm 5.2)."""
    lib = ctypes.CDLL(str(fake_drivers.HIP_DOUBLE))
    assert IPC_FUNCTIONS == ["hipIpcGetMemHandle", "hipIpcOpenMemHandle",
                             "hipIpcCloseMemHandle", "hipIpcGetEventHandle",
                             "hipIpcOpenEventHandle"]
    assert [n for n in IPC_FUNCTIONS if not hasattr(lib, n)] == []


if __name__ == "__main__" and sys.argv[1:] == ["child"]:
    child_main()
