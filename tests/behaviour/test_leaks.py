"""Leaks: every API and object life cycle in a loop stays flat.

Each cycle runs a warm-up, then two equal batches.  They may not both grow
Python's memory (tracemalloc) or the C heap (glibc's mallinfo2, which sees
the extension's own allocations) by more than a few bytes per iteration
(a leak grows every batch; a cache that fills once grows one at most),
and after the loop the driver double's live objects are back at the
baseline (kinds a backend pools for reuse: at most POOLED_MAX above it).
"""
from __future__ import annotations

import ctypes
import gc
import os
import pickle
import threading
import tracemalloc
import weakref
from collections.abc import Callable, Iterator

import pytest

import accelerator as acc
import fault_actions

N = int(os.environ.get("LEAK_ITERATIONS", "2000"))
#: (fixed slack, bytes per iteration) a batch may grow: Python memory,
#: then the C heap (arenas and thread stacks make it noisier)
LIMITS = ((12 * 1024, 4), (32 * 1024, 8))
#: driver objects a backend may keep for reuse (its pools), whatever N
POOLED_MAX = 128


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]


def _c_heap() -> Callable[[], int] | None:
    """Bytes in use in the C heap, or None where it cannot be read (not
    glibc >= 2.33, or a sanitizer that replaces malloc)."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        return None
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    if fn().uordblks == 0:
        return None
    return lambda: fn().uordblks + fn().hblkhd


C_HEAP = _c_heap()


def settle() -> None:
    fault_actions.settle()
    gc.collect()


# The cycles ------------------------------------------------------------------

class Foreign:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def cycle_queries(ctx: dict) -> None:
    acc._accelerator._noop()
    acc.is_available()
    acc.device_count()
    acc.current_accelerator()
    acc.current_device_index()
    acc.backends()


def cycle_devices(ctx: dict) -> None:
    t = ctx["type"]
    for form in (f"{t}:1", acc.device(t, 1), 1):
        acc.set_device_index(form)
    acc.set_device_index(0)
    with acc.device_index(1):
        pass
    d = acc.device(f"{t}:1")
    assert pickle.loads(pickle.dumps(d)) == d
    assert acc.device(d) is d
    assert pickle.loads(pickle.dumps(acc.device(t))) == acc.device(t)
    hash(d), repr(d), str(d), d.type, d.index
    acc.device(t), acc.device(t, 0), acc.device(0)


def cycle_streams(ctx: dict) -> None:
    s = acc.Stream(1, priority=-1)
    s.query()
    s.synchronize()
    s.handle, s.device, s.device_index, s.device_type, s.priority, repr(s)
    hash(s), s == acc.current_stream(), s != s
    ref = weakref.ref(s)
    del s
    assert ref() is None


def cycle_with_and_set_stream(ctx: dict) -> None:
    s, t = acc.Stream(0), acc.Stream(1)
    with s:
        with t:
            acc.current_stream()
        with s:
            pass
    acc.set_stream(t)
    acc.current_stream(1)
    acc.set_stream(ctx["defaults"][1])
    acc.set_stream(ctx["defaults"][0])


def cycle_from_handle(ctx: dict) -> None:
    owner = ctx["owner"]
    acc.Stream.from_handle(owner.handle, 0).query()
    acc.Stream.from_handle(ctx["defaults"][1].handle, 1)
    if ctx["driver"].has("cuda_stream_protocol"):
        acc.Stream.from_handle(Foreign(owner.handle)).query()
        owner.__cuda_stream__()


def cycle_events(ctx: dict) -> None:
    s = ctx["owner"]
    start = acc.Event(enable_timing=True)
    end = acc.Event(enable_timing=True, blocking=True)
    start.record(s)
    end.record(s)
    end.synchronize()
    end.synchronize()
    start.query()
    start.elapsed_time(end)
    start.handle, start.device, start.event_id, repr(start)
    start.record(stream=s)
    ref = weakref.ref(start)
    del start
    assert ref() is None
    plain = s.record_event()
    plain.wait(ctx["defaults"][1])
    acc.Stream(1).wait_event(plain)
    acc.Event().query()


def cycle_wait_stream_and_sync(ctx: dict) -> None:
    a, b = acc.Stream(0), acc.Stream(1)
    a.wait_stream(b)
    b.wait_stream(ctx["defaults"][0])
    acc.synchronize(0)
    acc.synchronize(1)
    acc.synchronize()


def cycle_properties(ctx: dict) -> None:
    acc.get_device_properties(1)
    acc.get_device_name(0)
    acc.get_memory_info(1)


def cycle_bad_input(ctx: dict) -> None:
    for call in (lambda: acc.set_device_index(5), lambda: acc.Stream("cpu"),
                 lambda: acc.device("tpu"), lambda: acc.Event(
                     interprocess=True, enable_timing=True),
                 lambda: acc.Buffer.from_ipc_handle(b"\0" * 216),
                 lambda: acc.set_stream(None),
                 lambda: pickle.dumps(ctx["owner"]),
                 lambda: acc.set_device_index(ctx["duck"])):
        try:
            call()
        except (TypeError, ValueError, NotImplementedError):
            pass
        else:
            raise AssertionError("no error")


def cycle_driver_errors(ctx: dict) -> None:
    """Driver failures: the exception objects and their attributes."""
    driver = ctx["driver"]
    api, call = ctx["failing"]
    driver.fail(api, 1, driver.oom_error[0])
    try:
        call()
    except acc.OutOfMemoryError as exc:
        exc.api, exc.code, exc.error_name, exc.backend, str(exc)
    else:
        raise AssertionError("no error")
    finally:
        driver.clear_faults()


def cycle_threads(ctx: dict) -> None:
    """Per-thread state (current streams) is freed when a thread ends."""
    def body() -> None:
        acc.set_stream(acc.Stream(1))
        acc.set_device_index(0)
        with acc.Stream(0):
            acc.current_stream().query()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()


def cycle_pool_overflow(ctx: dict) -> None:
    """More streams and events than the dispatcher keeps for reuse: the
    rest go back to the driver at once."""
    streams = [acc.Stream(1) for _ in range(12)]
    events = [acc.Event(enable_timing=True) for _ in range(40)]
    for event in events:
        event.record(streams[0])
    events[-1].synchronize()
    del streams, events


def cycle_empty_cache(ctx: dict) -> None:
    acc.Stream(0)
    acc.Event().record(ctx["owner"])
    acc.empty_cache()


CYCLES: dict[str, tuple[Callable[[dict], None], int]] = {
    "queries": (cycle_queries, 1),
    "devices": (cycle_devices, 1),
    "streams": (cycle_streams, 1),
    "with and set_stream": (cycle_with_and_set_stream, 1),
    "from_handle": (cycle_from_handle, 1),
    "events": (cycle_events, 1),
    "wait_stream and synchronize": (cycle_wait_stream_and_sync, 1),
    "properties and memory": (cycle_properties, 1),
    "bad input": (cycle_bad_input, 1),
    "driver errors": (cycle_driver_errors, 1),
    "threads": (cycle_threads, 10),
    "pool overflow": (cycle_pool_overflow, 40),
    "empty_cache": (cycle_empty_cache, 1),
}


@pytest.fixture
def context(driver, accel_type: str, default_streams: list) -> Iterator[dict]:
    class Duck:
        type = accel_type
        index = "0"

    failing = (driver.functions["stream_create"],
               lambda: (acc.empty_cache(), acc.Stream(1)))
    yield {"driver": driver, "type": accel_type, "defaults": default_streams,
           "owner": acc.Stream(0), "duck": Duck(), "failing": failing}
    driver.clear_faults()


def measure(cycle: Callable[[dict], None], ctx: dict, n: int) -> tuple:
    for _ in range(n):
        cycle(ctx)
    settle()
    python, _ = tracemalloc.get_traced_memory()
    return python, C_HEAP() if C_HEAP else 0


@pytest.mark.parametrize("name", list(CYCLES))
def test_loops_stay_flat(name: str, context: dict, driver) -> None:
    cycle, cost = CYCLES[name]
    n = max(20, N // cost)
    for d in range(acc.device_count()):  # made once per process
        acc.set_device_index(d)
        acc.Stream(d).record_event().synchronize()
        acc.get_device_properties(d)
    acc.set_device_index(0)
    settle()
    baseline = driver.live_all()
    tracemalloc.start()
    try:
        warm = measure(cycle, context, n)
        pooled = driver.live_all()
        first = measure(cycle, context, n)
        second = measure(cycle, context, n)
    finally:
        tracemalloc.stop()
    for what, i in (("Python memory", 0), ("C heap", 1)):
        slack, per_iteration = LIMITS[i]
        growth = [first[i] - warm[i], second[i] - first[i]]
        # A leak grows both batches alike; a cache filled once, one.
        assert min(growth) <= slack + per_iteration * n, \
            f"{name}: {what} grew by {growth} bytes over {n} iterations"
    after = driver.live_all()
    for kind, count in baseline.items():
        if kind in driver.pooled_kinds:
            # Kept for reuse, but not one per iteration.
            assert max(pooled[kind], after[kind]) - count <= POOLED_MAX, \
                f"{name}: {kind} {count} -> {pooled[kind]} -> {after[kind]}"
        else:
            assert after[kind] == count, (name, kind, count, after[kind])
    assert acc.current_device_index() == 0
