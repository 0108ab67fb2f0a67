"""Fault injection at every driver call site.

The driver functions a backend calls are read from the backend's own
X-macro lists (its double class's symbol_lists: csrc/backends/cuda/cuda_api.h
ACC_CUDA_FUNCTIONS, ...), so a new call site without an entry in the
double class's fault_sites (tests/fake_drivers.py) fails
test_every_driver_function_has_a_site.

Each site says how the product reaches the function and what a failure
there must do:

  RAISE     an API call fails with the driver's error, in this process:
            the exception class (AcceleratorError, or OutOfMemoryError for
            an out-of-memory code), .backend, .api, .code, .error_name;
            the thread's current device and stream are unchanged; nothing
            leaked (the double's live counts are back at the baseline
            after the retry); the same call then works.
  FRESH     the same checks, in a fresh process, for call sites that run
            once per process (context retain, cached properties, the
            first event pool).  Leaks are found by comparing the live
            counts at the end with a control process that ran without
            the fault.
  SILENT    a release path (destroy, reset): the driver's error cannot be
            reported to anyone, so the product must swallow it without an
            exception or an unraisable error, and keep working.
  REPORTER  the functions that name errors (cuGetErrorName/String): when
            they fail too, the original error is still reported complete.
  PROBE     called only while probing: in a fresh process with the fault
            installed at load (FAKE_CUDA_FAIL / FAKE_ZE_FAIL),
            is_available() is False and the reason names the function.
  TOLERATED called while probing, but optional information: the backend
            stays available.
  DEFERRED  called by the driver's initialisation at the first use, when
            the probe deferred it (CUDA counted through NVML): in a fresh
            process with the fault installed at load, is_available() and
            device_count() still answer, the first use raises the
            driver's error, a second use raises it again, and the
            backend's record says the initialisation failed.
  FALLBACK  NVML, while counting: its failure makes the backend count
            with cuInit instead (available, 2 devices, counted_by names
            the failing function); a failing nvmlShutdown changes nothing.
  EXIT      called only at exit (shutdown): the process still exits 0
            with a clean stderr.
  OPTIONAL  an optional entry point the test driver cannot offer (Debian's
            loader 1.8 does not export it): checked to be missing from the
            library, and the backend works without it.
  NULLED    a function that reports failure only by returning NULL, with
            no code (clSVMAlloc): whatever code the fault names, the call
            raises the backend's out-of-memory error (driver.oom_error),
            with the RAISE checks otherwise.
  UNREACHED a function this configuration must not call (the note says
            why: calling it would crash): the action runs without it.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy
import pytest

import accelerator as acc
import fake_drivers
import kernel_code as kernel_code_module
from fake_drivers import (DEFERRED, EXIT, FALLBACK, FRESH, NULLED, OPTIONAL,
                          PROBE, RAISE, REPORTER, SILENT, TOLERATED,
                          UNREACHED, Site)

#: the device type under test when a double sits underneath, else "real"
BACKEND = (fake_drivers.TEST_BACKEND
           if fake_drivers.TEST_BACKEND in fake_drivers.DOUBLES else "real")
REPO = pathlib.Path(__file__).resolve().parents[2]

#: live kinds of memory (a refused free of it is lost for good)
MEMORY_KINDS = ("alloc", "host_alloc")


def driver_functions(backend: str) -> list[str]:
    """The functions in the backend's X-macro lists, in list order."""
    return fake_drivers.DOUBLES[backend].driver_functions()


# Actions ------------------------------------------------------------------

State = dict[str, Any]


def nothing() -> State:
    return {}


def on_device_0() -> State:
    acc.set_device_index(0)
    return {}


def device_1_ready() -> State:
    """On device 0, with device 1's context and priority range known."""
    acc.set_device_index(0)
    acc.Stream(1)
    acc.Event().record(acc.Stream(1))
    return {}


def with_stream() -> State:
    acc.set_device_index(0)
    return {"s": acc.Stream(0)}


def with_recorded_event() -> State:
    state = with_stream()
    state["e"] = acc.Event()
    state["e"].record(state["s"])
    return state


def with_pending_event() -> State:
    """An event recorded behind 50 ms of work: waits must reach the
    driver (a complete event needs no wait)."""
    state = with_stream()
    make_double().enqueue_sleep(state["s"], 50)
    state["e"] = acc.Event()
    state["e"].record(state["s"])
    state["s2"] = acc.Stream(0)
    return state


def across_drivers() -> State:
    """An event of device 0 pending behind 50 ms of work, and a stream of
    device 1 on another driver (FAKE_ZE_DRIVERS=2: see tests/run.sh)."""
    double = make_double()
    if getattr(double, "drivers", lambda: 1)() < 2:
        pytest.skip("needs devices of two drivers (FAKE_ZE_DRIVERS=2: the "
                    "two-driver run of tests/run.sh)")
    state = with_pending_event()
    state["s2"] = acc.Stream(1)
    return state


def with_timed_events() -> State:
    state = with_stream()
    state["a"] = acc.Event(enable_timing=True)
    state["b"] = acc.Event(enable_timing=True)
    state["a"].record(state["s"])
    state["b"].record(state["s"])
    state["b"].synchronize()
    return state


def with_two_streams() -> State:
    state = with_stream()
    state["t"] = acc.Stream(0)
    return state


def in_new_thread(call: Callable[[], Any], same_device: bool = True) -> None:
    """Run call in a new thread (fresh per-thread state); re-raise."""
    outcome: list[BaseException] = []

    def body() -> None:
        before = acc.current_device_index()
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            # A failed switch leaves the thread where it was.
            if same_device and acc.current_device_index() != before:
                exc = AssertionError("a failed switch changed the device")
            outcome.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the thread hangs"
    if outcome:
        raise outcome[0]


def enter_and_exit(device: int) -> None:
    stream = acc.Stream(device)
    before = acc.current_device_index(), acc.current_stream(device)
    try:
        stream.__enter__()
    except acc.AcceleratorError:
        # A failed __enter__ changes nothing.
        assert (acc.current_device_index(),
                acc.current_stream(device)) == before
        raise
    assert acc.current_stream() is stream
    stream.__exit__(None, None, None)
    assert (acc.current_device_index(), acc.current_stream(device)) == before


def set_stream_checked(stream: acc.Stream) -> None:
    before = acc.current_stream(stream.device_index)
    try:
        acc.set_stream(stream)
    except acc.AcceleratorError:
        # Not half done: the stream did not become current either.
        assert acc.current_stream(stream.device_index) is before
        raise


def exit_to_device_0() -> None:
    """The third cuCtxSetCurrent of a new thread is the one that brings it
    back to device 0 when leaving `with Stream(1)`."""
    acc.set_device_index(0)
    stream = acc.Stream(1)
    stream.__enter__()
    try:
        stream.__exit__(None, None, None)
    except acc.AcceleratorError:
        # The stream was restored; the device switch is what failed.
        assert acc.current_stream(1) is not stream
        assert acc.current_device_index() == 1
        raise


def with_buffers() -> State:
    """Buffers on both devices, a HostBuffer and host bytes."""
    acc.set_device_index(0)
    state = {"b": acc.Buffer(4096), "c": acc.Buffer(4096),
             "d1": acc.Buffer(4096, 1), "h": acc.HostBuffer(4096),
             "bytes": bytes(4096), "out": bytearray(4096)}
    acc.synchronize(0)
    return state


def with_device_buffers() -> State:
    """Device buffers only: no host memory, whose free (zeMemFree on Level
    Zero) the fault could meet instead of the dropped buffer's."""
    acc.set_device_index(0)
    acc.empty_cache()
    state = {"b": acc.Buffer(4096), "c": acc.Buffer(4096)}
    acc.synchronize(0)
    return state


def drop_buffer(state: State) -> None:
    """A buffer used on a stream and dropped: the only free of the action
    (the others are freed after the fault is gone)."""
    buffer = state.pop("b")
    buffer.fill(1)
    stream = buffer.stream
    stream.synchronize()
    del buffer
    gc.collect()
    # The release waits for an event recorded on the stream (query() may
    # not see others' work there): let it run, then free.
    stream.synchronize()
    acc.empty_cache()


def drop_host_buffer(state: State) -> None:
    host = state.pop("h")
    state["b"].copy_from(host)
    state["b"].stream.synchronize()
    del host
    gc.collect()


def with_lone_host_buffer() -> State:
    """A HostBuffer and no device memory at all (the cache emptied)."""
    acc.set_device_index(0)
    acc.empty_cache()
    return {"h": acc.HostBuffer(4096), "out": bytearray(4096)}


def drop_lone_host_buffer(state: State) -> None:
    host = state.pop("h")
    memoryview(host)[:] = b"\1" * 4096
    del host
    gc.collect()


def drop(state: State) -> None:
    state.clear()
    gc.collect()


def with_graph(keep_graph: bool = False) -> State:
    """A Graph, a stream to capture on and a buffer ordered on it."""
    state = with_stream()
    state["b"] = acc.Buffer(4096, stream=state["s"])
    state["g"] = acc.Graph(keep_graph=keep_graph)
    acc.synchronize(0)
    return state


def with_capture(keep_graph: bool = False) -> State:
    """A graph capturing a fill on its stream."""
    state = with_graph(keep_graph)
    with state["s"]:
        state["g"].capture_begin()
    state["b"].fill(1, stream=state["s"])
    return state


def with_captured(keep_graph: bool = False) -> State:
    state = with_capture(keep_graph)
    state["g"].capture_end()
    return state


def with_kept_graph() -> State:
    """keep_graph=True, captured, not yet instantiated."""
    return with_captured(keep_graph=True)


def with_instantiated_kept_graph() -> State:
    state = with_captured(keep_graph=True)
    state["g"].instantiate()
    return state


def kernel_code() -> bytes:
    """The test kernels in the format of the backend under test."""
    return kernel_code_module.for_format(
        fake_drivers.under_test().kernel_format)


def with_kernel_code() -> State:
    acc.set_device_index(0)
    return {"code": kernel_code()}


def with_module() -> State:
    state = with_kernel_code()
    state["m"] = acc.Module(state["code"])
    return state


def with_kernel() -> State:
    """add_one of a module, a buffer for it and a stream."""
    state = with_module()
    state["k"] = state["m"].get_kernel("add_one")
    state["s"] = acc.Stream(0)
    state["b"] = acc.Buffer(256, stream=state["s"])
    state["b"].fill(0, stream=state["s"])
    acc.synchronize(0)
    return state


def launch_add_one(state: State) -> None:
    acc.launch(state["k"], 1, 64, state["b"], numpy.uint32(64),
               stream=state["s"])
    state["s"].synchronize()


def build_broken(state: State) -> None:
    """Code the driver fails to build: a BuildError, with or without
    its log.  Where the test kernels' format builds nothing to fail, they
    fail with the build options the driver refuses."""
    facts = fake_drivers.under_test()
    broken = kernel_code_module.broken(facts.kernel_format)
    with pytest.raises(acc.BuildError):
        if broken is None:
            acc.Module(kernel_code(), options=facts.failing_build_options)
        else:
            acc.Module(broken)


def unknown_kernel(state: State) -> None:
    """A KeyError, with or without the module's kernel names."""
    with pytest.raises(KeyError, match="no kernel named 'nope'"):
        state["m"].get_kernel("nope")


def drop_module(state: State) -> None:
    """A module launched once and dropped with its kernel: its unload
    waits for the launch, then runs at the next settling (empty_cache)."""
    launch_add_one(state)
    state.clear()
    gc.collect()
    acc.synchronize(0)
    acc.empty_cache()


def capture_begin(state: State) -> None:
    with state["s"]:
        state["g"].capture_begin()


def replay(state: State) -> None:
    with state["s"]:
        state["g"].replay()
    state["s"].synchronize()


def rerecord(state: State) -> None:
    state["e"].synchronize()
    state["e"].record(state["s"])


ACTIONS: dict[str, Callable[[State], Any]] = {
    "Stream()": lambda st: acc.Stream(0),
    "Stream(1) from device 0": lambda st: acc.Stream(1),
    "set_device_index(1) in a new thread":
        lambda st: in_new_thread(lambda: acc.set_device_index(1)),
    "set_stream(Stream(1)) in a new thread": lambda st: in_new_thread(
        lambda: set_stream_checked(acc.Stream(1))),
    "device_index(1) in a new thread": lambda st: in_new_thread(
        lambda: acc.device_index(1).__enter__()),
    "with Stream(1) in a new thread": lambda st: in_new_thread(
        lambda: enter_and_exit(1)),
    "exit from device 1 in a new thread": lambda st: in_new_thread(
        exit_to_device_0, same_device=False),
    "synchronize(0)": lambda st: acc.synchronize(0),
    "synchronize(1)": lambda st: acc.synchronize(1),
    "get_memory_info(0)": lambda st: acc.get_memory_info(0),
    "get_memory_info(1) from device 0": lambda st: acc.get_memory_info(1),
    "get_device_properties(0)": lambda st: acc.get_device_properties(0),
    "get_device_capability(0)": lambda st: acc.get_device_capability(0),
    "stream.query()": lambda st: st["s"].query(),
    "default stream query()": lambda st: acc.current_stream(0).query(),
    "stream.synchronize()": lambda st: st["s"].synchronize(),
    "wrapped stream.query()": lambda st: acc.Stream.from_handle(
        st["s"].handle, 0).query(),
    "wrapped stream.synchronize()": lambda st: acc.Stream.from_handle(
        st["s"].handle, 0).synchronize(),
    "default stream synchronize()":
        lambda st: acc.current_stream(0).synchronize(),
    "stream.wait_event()": lambda st: st["s2"].wait_event(st["e"]),
    "event.wait(stream)": lambda st: st["e"].wait(st["s2"]),
    "stream.wait_event() across drivers": lambda st: (
        st["s2"].wait_event(st["e"]), st["s2"].synchronize()),
    "stream.wait_stream()": lambda st: st["t"].wait_stream(st["s"]),
    "first event.record()": lambda st: acc.Event().record(st["s"]),
    "first event.record() on device 1":
        lambda st: acc.Event().record(acc.current_stream(1)),
    "stream.record_event()": lambda st: st["s"].record_event(),
    "event.record() again": lambda st: st["e"].record(st["s"]),
    "event.record() after completion": rerecord,
    "event.query()": lambda st: st["e"].query(),
    "event.synchronize()": lambda st: st["e"].synchronize(),
    "elapsed_time()": lambda st: st["a"].elapsed_time(st["b"]),
    "drop the objects": drop,
    "Buffer()": lambda st: acc.Buffer(4096),
    "Buffer(1) from device 0": lambda st: acc.Buffer(4096, 1),
    "HostBuffer()": lambda st: acc.HostBuffer(4096),
    "copy_from(bytes)": lambda st: st["b"].copy_from(st["bytes"]),
    "copy_from(HostBuffer)": lambda st: st["b"].copy_from(st["h"]),
    "copy_to(bytearray)": lambda st: st["b"].copy_to(st["out"]),
    "copy_to(HostBuffer)": lambda st: st["b"].copy_to(st["h"]),
    "copy_from(Buffer)": lambda st: st["b"].copy_from(st["c"]),
    "copy_from(Buffer of device 1)": lambda st: st["b"].copy_from(st["d1"]),
    "fill()": lambda st: st["b"].fill(7),
    "drop a buffer": drop_buffer,
    "drop a host buffer": drop_host_buffer,
    "drop a lone host buffer": drop_lone_host_buffer,
    "from_dlpack(capsule)":
        lambda st: acc.from_dlpack(st["b"].__dlpack__(max_version=(1, 0))),
    "Graph.capture_begin()": capture_begin,
    "Graph.capture_end()": lambda st: st["g"].capture_end(),
    "Graph.instantiate()": lambda st: st["g"].instantiate(),
    "Graph.replay()": replay,
    "drop a graph": drop,
    "Module()": lambda st: acc.Module(st["code"]),
    "get_kernel()": lambda st: st["m"].get_kernel("add_one"),
    "launch()": launch_add_one,
    "drop a module": drop_module,
    "Module(broken code)": build_broken,
    "get_kernel(unknown name)": unknown_kernel,
}

#: the state each action needs
PREPARE: dict[str, Callable[[], State]] = {
    "Stream()": on_device_0,
    "Stream(1) from device 0": on_device_0,
    "get_memory_info(1) from device 0": on_device_0,
    "stream.wait_stream()": with_two_streams,
    "first event.record()": with_stream,
    "stream.record_event()": with_stream,
    "stream.query()": with_stream,
    "stream.synchronize()": with_stream,
    "wrapped stream.query()": with_stream,
    "wrapped stream.synchronize()": with_stream,
    "stream.wait_event()": with_pending_event,
    "event.wait(stream)": with_pending_event,
    "stream.wait_event() across drivers": across_drivers,
    "event.record() again": with_recorded_event,
    "event.record() after completion": with_recorded_event,
    "event.query()": with_recorded_event,
    "event.synchronize()": with_recorded_event,
    "elapsed_time()": with_timed_events,
    "Buffer()": on_device_0,
    "Buffer(1) from device 0": on_device_0,
    "HostBuffer()": on_device_0,
    "copy_from(bytes)": with_buffers,
    "copy_from(HostBuffer)": with_buffers,
    "copy_to(bytearray)": with_buffers,
    "copy_to(HostBuffer)": with_buffers,
    "copy_from(Buffer)": with_buffers,
    "copy_from(Buffer of device 1)": with_buffers,
    "fill()": with_buffers,
    "drop a buffer": with_device_buffers,
    "drop a host buffer": with_buffers,
    "drop a lone host buffer": with_lone_host_buffer,
    "from_dlpack(capsule)": with_buffers,
    "Graph.capture_begin()": with_graph,
    "Graph.capture_end()": with_capture,
    "Graph.instantiate()": with_kept_graph,
    "Graph.replay()": with_captured,
    "drop a graph": with_instantiated_kept_graph,
    "Module()": with_kernel_code,
    "get_kernel()": with_module,
    "get_kernel() of a missing name": with_module,
    "launch()": with_kernel,
    "drop a module": with_kernel,
    "Module(broken code)": on_device_0,
    "get_kernel(unknown name)": with_module,
}


#: the sites of the backend under test (its double class's), none on a
#: real driver
SITES: tuple[Site, ...] = (fake_drivers.DOUBLES[BACKEND].fault_sites
                           if BACKEND in fake_drivers.DOUBLES else ())
CODES = ["unknown", "oom"]

pytestmark = pytest.mark.skipif(
    not SITES, reason="fault injection needs a driver double")


def preparer(site: Site,
             default: Callable[[], State] = nothing) -> Callable[[], State]:
    """What makes the state a site's fault is injected in."""
    if site.prepare:
        return globals()[site.prepare]
    return PREPARE.get(site.action, default)


def sites(*hows: str) -> list[Site]:
    return [s for s in SITES if s.how in hows]


def site_params(*hows: str) -> list[Any]:
    found = [pytest.param(s, id=s.id) for s in sites(*hows)]
    return found or [pytest.param(None, id="none", marks=pytest.mark.skip(
        reason=f"the {BACKEND} backend has no {'/'.join(hows)} sites"))]


def test_every_driver_function_has_a_site() -> None:
    listed = driver_functions(BACKEND)
    covered = {s.api for s in SITES}
    assert set(listed) - covered == set(), \
        "driver functions called without a fault test"
    assert covered - set(listed) == set(), "sites for functions not called"
    for site in SITES:
        if site.action:
            assert site.action in ACTIONS, site
        if site.prepare:
            assert callable(globals().get(site.prepare)), site


def test_the_site_tables_match_both_symbol_lists() -> None:
    """Every backend's table stays complete, whichever backend runs."""
    for cls in fake_drivers.DOUBLES.values():
        assert {s.api for s in cls.fault_sites} == set(
            cls.driver_functions()), cls.__name__


# Checks --------------------------------------------------------------------


def expected(driver: Any, code: str) -> tuple[int, str, type]:
    if code == "oom":
        return (*driver.oom_error, acc.OutOfMemoryError)
    return (*driver.unknown_error, acc.AcceleratorError)


def settle() -> None:
    """Collect garbage, give the pooled streams and events back to the
    driver and let the devices drain (lazy destroys run)."""
    gc.collect()
    acc.empty_cache()
    for device in range(acc.device_count()):
        acc.synchronize(device)
    # Drained now: freed memory that waited on its streams goes back to
    # the driver.
    acc.empty_cache()


def check_error(exc: BaseException, api: str, number: int, name: str,
                cls: type) -> None:
    assert type(exc) is cls, (type(exc), exc)
    assert exc.backend == BACKEND, vars(exc)
    assert exc.api == api, vars(exc)
    assert exc.code == number, vars(exc)
    assert exc.error_name == name, vars(exc)
    assert f"{api}() failed: {name}" in str(exc), str(exc)


def where(streams: bool) -> tuple[int, Any]:
    """The thread's current device and (when asked) its current streams;
    asking makes the default streams, which may need the driver."""
    current = [acc.current_stream(d) for d in range(acc.device_count())] \
        if streams else []
    return acc.current_device_index(), current


def fail_once(driver: Any, site: Site, state: State, number: int,
              name: str, cls: type, streams: bool = True,
              inject: int | None = None) -> None:
    """Inject the fault (code `inject`, else `number`), run the action,
    check the error and the state."""
    action = ACTIONS[site.action]
    before = where(streams)
    acc.empty_cache()  # so that creating means a driver call
    calls = driver.calls(site.api)
    driver.fail(site.api, site.nth, number if inject is None else inject)
    try:
        with pytest.raises(acc.AcceleratorError) as info:
            action(state)
    finally:
        driver.clear_faults()
    assert driver.calls(site.api) > calls
    check_error(info.value, site.api, number, name, cls)
    assert where(streams) == before, "a failed call changed the thread's " \
        "current device or stream"


ROUNDS = 5


def check_counts(driver: Any, baseline: dict[str, int],
                 rounds: list[dict[str, int]]) -> None:
    """Live counts after each of ROUNDS rounds of a cycle: back at the
    baseline.  Pooled kinds are recycled once the driver is done with
    them, which is a matter of timing, so they may grow a little, but a
    leak (one per round) would grow by ROUNDS - 1."""
    for kind, before in baseline.items():
        seen = [counts[kind] for counts in rounds]
        if kind in driver.pooled_kinds:
            assert max(seen) - seen[0] <= 2, (kind, seen)
        else:
            assert seen == [before] * len(seen), (kind, before, seen)


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("site", site_params(RAISE, NULLED))
def test_raise(driver, site: Site, code: str) -> None:
    inject = expected(driver, code)[0]
    # NULL is all a NULLED function says: out of memory, whatever the code.
    number, name, cls = expected(driver, "oom" if site.how == NULLED
                                 else code)
    prepare = preparer(site)
    action = ACTIONS[site.action]
    # A first round makes what is made once (contexts, pools, defaults).
    state = prepare()
    action(state)
    del state
    settle()
    baseline = driver.live_all()

    rounds = []
    for _ in range(ROUNDS):
        state = prepare()
        fail_once(driver, site, state, number, name, cls, inject=inject)
        action(state)  # the same call works at once
        del state
        settle()
        rounds.append(driver.live_all())
    check_counts(driver, baseline, rounds)


def fill_sites() -> list[Any]:
    found = [pytest.param(s, id=s.id) for s in sites(RAISE)
             if s.action == "fill()"]
    return found or [pytest.param(None, id="none", marks=pytest.mark.skip(
        reason=f"the {BACKEND} backend has no fill sites"))]


@pytest.mark.parametrize("site", fill_sites())
def test_a_failed_fill_leaves_no_work_on_the_memory(driver, site: Site) -> None:
    """A fill that raised must not run later: the caller freed or reused
    the memory, believing nothing was queued (a runtime may have queued
    the command before a later step, such as OpenCL's flush, failed)."""
    acc.set_device_index(0)
    settle()
    b = acc.Buffer(4096)
    b.fill(0)
    s = acc.Stream(0)
    number, name, cls = expected(driver, "unknown")
    with driver.gate(s) as gate:
        # Opened from a timer: a fill that waits for its queue returns.
        gate.open_soon()
        driver.fail(site.api, site.nth, number)
        try:
            with pytest.raises(acc.AcceleratorError) as info:
                b.fill(1, stream=s)
        finally:
            driver.clear_faults()
        check_error(info.value, site.api, number, name, cls)
        del b
        c = acc.Buffer(4096)  # the cache hands the memory on at once
        c.fill(2)
        out = bytearray(4096)
        c.copy_to(out)
        gate.open()
        acc.synchronize(0)
        c.copy_to(out)
    assert out == b"\x02" * 4096, "the failed fill ran after all"
    del c
    settle()
    assert driver.live("bad_access") == 0


def completes(event: Any, seconds: float = 10.0) -> bool:
    """Whether event completes within seconds (polled: a test must not
    hang on work that never ends)."""
    import time
    deadline = time.monotonic() + seconds
    while not event.query():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def assert_captured_fill_ran(state: State) -> None:
    """The fill that with_captured's graph holds has run (its buffer is
    all ones)."""
    out = bytearray(4096)
    state["b"].copy_to(out)
    assert out == b"\x01" * 4096


def leftover_sites() -> list[Any]:
    found = [pytest.param(s, id=s.id) for s in sites(RAISE)
             if s.action == "Graph.replay()" and s.leaves_work is not None]
    return found or [pytest.param(None, id="none", marks=pytest.mark.skip(
        reason=f"no failed replay of the {BACKEND} backend leaves work"))]


@pytest.mark.parametrize("site", leftover_sites())
def test_a_failed_replay_s_leftover_work_comes_before_what_follows(
        driver, site: Site) -> None:
    """A replay that raised after queueing commands that use the graph's
    events (their reset, a signal) leaves them to run later.  The next
    replay, on any stream, must come after them (else they reset its
    events behind it, and whoever waits for its end waits for ever), and
    dropping the graph meanwhile must not hand its events to later work."""
    acc.set_device_index(0)
    settle()
    state = with_captured()
    s1, s2 = state["s"], acc.Stream(0)
    others = [acc.Stream(0), acc.Stream(0)]
    number, name, cls = expected(driver, "unknown")
    with driver.stall(s1) as gate:
        driver.fail(site.api, site.nth, number)
        try:
            with pytest.raises(acc.AcceleratorError) as info:
                with s1:
                    state["g"].replay()
        finally:
            driver.clear_faults()
        check_error(info.value, site.api, number, name, cls)
        leftovers_ran = s1.record_event()
        # Opened from a timer: a replay that waits for them returns.
        gate.open_soon(0.5)
        with s2:
            state["g"].replay()
        replayed = s2.record_event()
        # Asked in this order: the replay's end first, so that the gate
        # opening between the two questions cannot fail the check.
        replay_ended = replayed.query()
        assert leftovers_ran.query() or not replay_ended, "the replay " \
            "ran before the failed one's queued commands"
        del state["g"]
        gc.collect()
        # Later work takes the driver's events: it must complete.
        events = [other.record_event() for other in others
                  for _ in range(32)]
    assert completes(replayed) and completes(leftovers_ran)
    stuck = [i for i, e in enumerate(events) if not completes(e)]
    assert not stuck, f"events {stuck} never completed: a failed " \
        "replay's queued commands reset them after their work signalled"
    assert_captured_fill_ran(state)


@pytest.mark.parametrize("site", leftover_sites())
def test_a_retry_on_the_same_stream_waits_for_the_failed_replay_s_leftovers(
        driver, site: Site) -> None:
    """The failed call is held while the stream's worker is stopped right
    behind the commands already queued, so that they run only after the
    retry was submitted (as a loaded machine may schedule them): the
    retry must still end, and the stream with it."""
    acc.set_device_index(0)
    settle()
    state = with_captured()
    s = state["s"]
    number, name, cls = expected(driver, "unknown")
    hold = driver.hold(site.api)
    driver.fail(site.api, site.nth, number)
    failed: list[BaseException] = []

    def replay_once() -> None:
        try:
            with s:
                state["g"].replay()
        except acc.AcceleratorError as exc:
            failed.append(exc)

    thread = threading.Thread(target=replay_once)
    try:
        thread.start()
        while driver.held(site.api) == 0 and thread.is_alive():
            threading.Event().wait(0.001)
        gate = driver.stall(s)  # between what was queued and what follows
        hold.open()
        thread.join(30)
    finally:
        hold.open()
        driver.clear_faults()
    assert not thread.is_alive() and len(failed) == 1, failed
    check_error(failed[0], site.api, number, name, cls)
    # The retry returns once the failed replay's commands have run.
    gate.open_soon(0.2)
    with s:
        state["g"].replay()
    assert completes(s.record_event()), "the stream never finished: the " \
        "failed replay's queued commands reset the retry's events"
    assert_captured_fill_ran(state)


@pytest.mark.parametrize("site", leftover_sites())
def test_a_failed_replay_whose_leftovers_cannot_be_followed_is_refused(
        driver, site: Site) -> None:
    """When the command marking the end of a failed replay's leftovers
    cannot be appended either, nothing can order a later replay after
    them: the graph refuses to replay (rather than hang), its stream
    still synchronizes, and dropping it frees what it may."""
    acc.set_device_index(0)
    settle()
    state = with_captured()
    number, name, cls = expected(driver, "unknown")
    assert site.leaves_work is not None
    driver.fail(site.api, site.nth, number)
    driver.fail(*site.leaves_work, number)
    try:
        with pytest.raises(acc.AcceleratorError) as info:
            with state["s"]:
                state["g"].replay()
    finally:
        driver.clear_faults()
    check_error(info.value, site.api, number, name, cls)
    with pytest.raises(RuntimeError, match="cannot be replayed: an earlier "
                       "replay failed"):
        with state["s"]:
            state["g"].replay()
    state["s"].synchronize()
    del state
    settle()


@pytest.mark.parametrize("site", site_params(SILENT))
def test_silent(driver, site: Site) -> None:
    prepare = preparer(site, with_recorded_event)
    action = ACTIONS[site.action]
    state = prepare()
    action(state)
    del state
    settle()
    baseline = driver.live_all()
    refused = dict(site.refused)

    rounds = []
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        for i in range(ROUNDS):
            state = prepare()
            acc.empty_cache()
            calls = driver.calls(site.api)
            driver.fail(site.api, 1, driver.unknown_error[0])
            action(state)
            del state
            settle()
            assert driver.calls(site.api) > calls, "the site was not reached"
            driver.clear_faults()
            settle()
            rounds.append({k: v - (i + 1) * refused.get(k, 0)
                           for k, v in driver.live_all().items()})
    finally:
        sys.unraisablehook = hook
        driver.clear_faults()
    assert unraisable == []
    check_counts(driver, baseline, rounds)
    # And it works without the fault.
    state = prepare()
    action(state)


@pytest.mark.parametrize("site", site_params(UNREACHED))
def test_unreached(driver, site: Site) -> None:
    state = preparer(site)()
    calls = driver.calls(site.api)
    driver.fail(site.api, 1, driver.unknown_error[0])
    try:
        ACTIONS[site.action](state)
    finally:
        driver.clear_faults()
    assert driver.calls(site.api) == calls, site.note


@pytest.mark.parametrize("site", site_params(REPORTER))
def test_reporter(driver, site: Site) -> None:
    """The error-naming functions fail too: the error stays complete."""
    state = preparer(site)()
    action = ACTIONS[site.action]
    first = site.note
    if site.api == driver.error_name_function:
        # Codes the backend knows are named without asking the driver.
        number, name = driver.unnamed_error
    else:
        number, name = driver.unknown_error
    for reporter_fails in (False, True):
        calls = driver.calls(site.api)
        driver.fail(first, 1, number)
        if reporter_fails:
            driver.fail(site.api, 1, driver.unknown_error[0])
        try:
            with pytest.raises(acc.AcceleratorError) as info:
                action(state)
        finally:
            driver.clear_faults()
        assert driver.calls(site.api) == calls + 1
        check_error(info.value, first, number, name, acc.AcceleratorError)
        text = f"{first}() failed: {name} ({number})"
        if site.api == "cuGetErrorString":
            # The driver's description is appended only when it has one.
            assert (str(info.value) == text) == reporter_fails, \
                str(info.value)
    action(state)


@pytest.mark.parametrize("site", site_params(OPTIONAL))
def test_optional(driver, site: Site) -> None:
    """The library the backend opened does not export the optional entry
    point (site.note says why): the backend works without it."""
    library = next(b["library"] for b in acc.backends()
                   if b["device_type"] == driver.device_type)
    assert not hasattr(ctypes.CDLL(library), site.api), \
        f"{library} exports {site.api}: make it a fault site of its own"
    stream = acc.Stream(0)
    b = acc.Buffer(4096)
    b.fill(7, stream=stream)
    event = acc.Event()
    event.record(stream)
    event.synchronize()
    stream.synchronize()
    acc.synchronize(0)
    out = bytearray(4096)
    b.copy_to(out)
    assert out == b"\x07" * 4096
    assert driver.live("bad_access") == 0


# Fresh processes -----------------------------------------------------------

CHILD = """
import gc, json, os, sys
sys.path[:0] = [{tests!r}, {behaviour!r}]
import fake_drivers, test_faults
test_faults.child_main({args!r})
"""


def run_child(args: dict[str, Any], **env: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ)
    environment.update(env)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), environment.get("PYTHONPATH")]))
    environment.pop("PYTEST_CURRENT_TEST", None)
    script = CHILD.format(tests=str(REPO / "tests"),
                          behaviour=str(REPO / "tests" / "behaviour"),
                          args=args)
    return subprocess.run([sys.executable, "-c", script], env=environment,
                          capture_output=True, text=True, timeout=120)


_double: list[Any] = []


def make_double() -> Any:
    """The double of this process (ctypes loads the instance the backend
    uses: the same file)."""
    if not _double:
        _double.append(fake_drivers.DOUBLES[BACKEND]())
    return _double[0]


def child_main(args: dict[str, Any]) -> None:
    """A FRESH site in this new process: args say which and whether to
    inject the fault (False: the control run).  Prints the live counts."""
    driver = make_double()
    assert acc.is_available()
    site = next(s for s in SITES if s.id == args["site"])
    state = preparer(site)()
    if args["fault"]:
        number, name, cls = expected(driver, args["code"])
        fail_once(driver, site, state, number, name, cls, streams=False)
    ACTIONS[site.action](state)
    del state
    settle()
    print(json.dumps(driver.live_all()))


#: site id -> the live counts of its control process (no fault), which
#: is the same for every code: one control per site, not one per code
_controls: dict[str, dict[str, int]] = {}


def fresh_counts(site: Site, fault: bool, code: str) -> dict[str, int]:
    result = run_child({"site": site.id, "fault": fault, "code": code})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("site", site_params(FRESH))
def test_fresh(site: Site, code: str) -> None:
    if site.id not in _controls:
        _controls[site.id] = fresh_counts(site, False, code)
    failed = fresh_counts(site, True, code)
    assert failed == _controls[site.id], "a failure leaked driver objects"


PROBE_CHILD = """
import json, sys
import accelerator as a
info = next(b for b in a.backends() if b["name"] == {backend!r})
print(json.dumps([a.is_available(), a.device_count(), info]))
if not a.is_available():
    try:
        a.current_stream()
    except a.AcceleratorError as e:
        assert "none is available" in str(e) and info["reason"] in str(e), e
    else:
        raise AssertionError("no error without an accelerator")
else:
    s = a.Stream()
    e = s.record_event()
    e.synchronize()
    a.synchronize()
"""


def probe_faults(site: Site, driver_cls: Any) -> tuple[str, list[str]]:
    """The faults to install at load, and what the reason must say."""
    number, name = driver_cls.unknown_error
    if site.api == "cuGetErrorName":
        # cuInit fails with a code only the driver could name; naming
        # fails too.
        return ("cuInit:0:12345,cuGetErrorName:0:999",
                ["cuInit() failed: CUDA_ERROR_UNRECOGNIZED (12345)"])
    if site.api == "cuGetErrorString":
        return ("cuInit:0:999,cuGetErrorString:0:999",
                ["cuInit() failed: CUDA_ERROR_UNKNOWN (999)"])
    # nth 1: every call fails; nth 2: the second (after a count).
    nth = 0 if site.nth == 1 else site.nth
    return f"{site.api}:{nth}:{number}", [site.api, name]


@pytest.mark.parametrize("site", site_params(PROBE, TOLERATED))
def test_probe(site: Site) -> None:
    driver_cls = fake_drivers.DOUBLES[BACKEND]
    faults, needles = probe_faults(site, driver_cls)
    result = subprocess.run(
        [sys.executable, "-c", PROBE_CHILD.format(backend=BACKEND)],
        env={**os.environ, driver_cls.fail_env: faults,
             **driver_cls.eager_probe_env, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    available, count, info = json.loads(result.stdout.splitlines()[0])
    if site.how == TOLERATED:
        assert available and count == 2, info
        if site.api == "cuDriverGetVersion":
            assert info["driver_version"] is None, info
        return
    assert not available and count == 0 and not info["available"], info
    for needle in needles:
        assert needle in info["reason"], info["reason"]


DEFERRED_CHILD = """
import json, sys
import accelerator as a
answers = [a.is_available(), a.device_count()]
errors = []
for attempt in range(2):
    try:
        a.Stream()
    except a.AcceleratorError as exc:
        errors.append([exc.api, exc.code, str(exc)])
info = next(b for b in a.backends() if b["name"] == {backend!r})
print(json.dumps([answers, errors, info]))
"""


@pytest.mark.parametrize("site", site_params(DEFERRED))
def test_deferred(site: Site) -> None:
    driver_cls = fake_drivers.DOUBLES[BACKEND]
    number, name = driver_cls.unknown_error
    result = subprocess.run(
        [sys.executable, "-c", DEFERRED_CHILD.format(backend=BACKEND)],
        env={**os.environ, driver_cls.fail_env: f"{site.api}:0:{number}",
             "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    answers, errors, info = json.loads(result.stdout.splitlines()[0])
    assert answers == [True, 2], answers
    assert len(errors) == 2 and errors[0] == errors[1], errors
    api, code, message = errors[0]
    assert (api, code) == (site.api, number), errors
    assert f"{site.api}() failed: {name}" in message, message
    assert info["available"] and not info["initialized"], info
    assert info["reason"].startswith("initialisation at first use failed: "
                                     f"{site.api}() failed"), info


FALLBACK_CHILD = """
import json
import accelerator as a
info = next(b for b in a.backends() if b["name"] == {backend!r})
print(json.dumps([a.is_available(), a.device_count(), info]))
s = a.Stream(a.device_count() - 1)
s.record_event().synchronize()
"""


@pytest.mark.parametrize("site", site_params(FALLBACK))
def test_fallback(site: Site) -> None:
    number = fake_drivers.NvmlDouble.unknown_error[0]
    faults = f"{site.api}:0:{number}"
    if site.api == "nvmlErrorString":
        faults += f",nvmlInit_v2:0:{number}"
    env = {**os.environ, fake_drivers.NvmlDouble.fail_env: faults,
           "PYTHONPATH": str(REPO)}
    if "GPU-" in site.note:
        # Only a UUID list makes the backend read the UUIDs: device 1's.
        env["CUDA_VISIBLE_DEVICES"] = ("GPU-fa4ecda0-0000-4000-8000-"
                                       "000000000001")
    result = subprocess.run(
        [sys.executable, "-c", FALLBACK_CHILD.format(backend=BACKEND)],
        env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    available, count, info = json.loads(result.stdout.splitlines()[0])
    if site.api == "nvmlShutdown":
        assert info["counted_by"].startswith("NVML ("), info
        assert (available, count) == (True, 2), info
        return
    failing = "nvmlInit_v2" if site.api == "nvmlErrorString" else site.api
    assert info["counted_by"].startswith(
        f"cuInit (NVML not used: {failing}() failed: "), info
    if site.api == "nvmlErrorString":
        assert "unknown error (999)" in info["counted_by"], info
    # cuInit applies CUDA_VISIBLE_DEVICES itself.
    expected = 1 if "GPU-" in site.note else 2
    assert (available, count) == (True, expected), info
    assert info["initialized"] is True, info


EXIT_CHILD = """
import sys
sys.path[:0] = [{tests!r}]
import fake_drivers
import json
driver = fake_drivers.DOUBLES[{backend!r}]()
print(json.dumps(driver.report_at_exit()), flush=True)
import accelerator as a
s = a.Stream(1)
e = s.record_event()
a.set_device_index(1)
e.synchronize()
driver.fail({api!r}, 0, driver.unknown_error[0])
"""


@pytest.mark.parametrize("site", site_params(EXIT))
def test_exit(site: Site) -> None:
    code = EXIT_CHILD.format(tests=str(REPO / "tests"), api=site.api,
                             backend=BACKEND)
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "Sanitizer" not in result.stderr, result.stderr
    refused = json.loads(result.stdout.splitlines()[0])
    if refused is not None:
        # The driver refused the release: device 1's context stays.
        assert refused in result.stderr, result.stderr


# Host memory -----------------------------------------------------------------

NOMEMORY_CHILD = """
import sys
sys.path[:0] = [{tests!r}, {behaviour!r}]
import test_faults
test_faults.nomemory_main()
"""
#: allocations made to fail, one at a time, in each call
NOMEMORY_DEPTH = 40


class _Foreign:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


class _Duck:
    def __init__(self, type: str) -> None:
        self.type, self.index = type, 1


def nomemory_calls(driver: Any) -> dict[str, tuple[Any, Any]]:
    """name -> (setup or None, call): every API, under allocation failure."""
    import pickle
    t = acc.current_accelerator().type
    s, s2 = acc.Stream(0), acc.Stream(1)
    e, e2 = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    e.record(s)
    e2.record(s)
    e2.synchronize()
    d = acc.device(t, 1)
    failing = driver.functions["query"]
    calls = {
        "is_available": acc.is_available,
        "device_count": acc.device_count,
        "current_accelerator": acc.current_accelerator,
        "current_device_index": acc.current_device_index,
        "set_device_index(1)": lambda: acc.set_device_index(1),
        "set_device_index('t:0')": lambda: acc.set_device_index(f"{t}:0"),
        "set_device_index(duck)": lambda: acc.set_device_index(_Duck(t)),
        "set_device_index(bad)": lambda: acc.set_device_index(99),
        "device_index(1)": lambda: acc.device_index(1).__enter__(),
        "synchronize(1)": lambda: acc.synchronize(1),
        "current_stream(1)": lambda: acc.current_stream(1),
        "set_stream(s2)": lambda: acc.set_stream(s2),
        "set_stream(default)": lambda: acc.set_stream(acc.current_stream(0)),
        "Stream(1)": lambda: acc.Stream(1, priority=-1),
        "Stream.from_handle": lambda: acc.Stream.from_handle(s.handle, 0),
        "with s": lambda: s.__enter__() and s.__exit__(None, None, None),
        "s.query/synchronize": lambda: (s.query(), s.synchronize()),
        "s.wait_event": lambda: s2.wait_event(e),
        "s.wait_stream": lambda: s2.wait_stream(s),
        "s.record_event": lambda: s.record_event(),
        "Event().record": lambda: acc.Event(blocking=True).record(s),
        "e.record/query/sync": lambda: (e.record(s), e.query(),
                                        e.synchronize()),
        "e.wait": lambda: e.wait(stream=s2),
        "e.elapsed_time": lambda: e.elapsed_time(e2),
        "device('t:1')": lambda: acc.device(f"{t}:1"),
        "device(t, 1)": lambda: acc.device(t, index=1),
        "device(1)": lambda: acc.device(1),
        "device str/repr/hash/pickle": lambda: (
            str(d), repr(d), hash(d), pickle.loads(pickle.dumps(d)),
            d == acc.device(t, 1)),
        "stream attributes": lambda: (repr(s), s.device, s.handle, hash(s),
                                      s.device_type, s == s2),
        "event attributes": lambda: (repr(e), e.device, e.handle,
                                     e.device_index),
        "get_memory_info": lambda: acc.get_memory_info(1),
        "get_device_properties": lambda: acc.get_device_properties(1),
        "get_device_name": lambda: acc.get_device_name(0),
        "backends": acc.backends,
        "empty_cache": acc.empty_cache,
        "bad device string": lambda: acc.device("cuda:x"),
        "pickle a stream": lambda: pickle.dumps(s),
    }
    def load_module_again() -> None:
        """A second instance of the extension module (multi-phase init):
        module_exec failing half-way must clean up."""
        import importlib.util
        spec = importlib.util.find_spec("accelerator._accelerator")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

    calls["load the module again"] = load_module_again
    if driver.has("device_memory"):
        b, h = acc.Buffer(64), acc.HostBuffer(64)
        b1 = acc.Buffer(64, 1)
        out = bytearray(64)
        calls.update({
            "Buffer(64, 1)": lambda: acc.Buffer(64, 1, stream=s2),
            "HostBuffer(64)": lambda: acc.HostBuffer(64),
            "Buffer copies": lambda: (b.copy_from(bytes(64)), b.copy_to(out),
                                      b.copy_from(h), b.copy_to(h),
                                      b.copy_from(b1), b.fill(3, stream=s)),
            "Buffer views and attributes": lambda: (
                b[1:9].fill(1), repr(b), b.device, b.stream, b.ptr, len(b),
                b.record_stream(s2)),
            "with Buffer": lambda: acc.Buffer(8).__enter__().close(),
            "Buffer.__dlpack__": lambda: (b.__dlpack__(), b.__dlpack__(
                max_version=(1, 0), stream=-1), b.__dlpack_device__()),
            "from_dlpack": lambda: acc.from_dlpack(b),
            "HostBuffer memoryview and DLPack": lambda: (
                memoryview(h).release(), h.__dlpack__(max_version=(1, 0)),
                h.__dlpack_device__()),
        })
    if driver.has("cuda_stream_protocol"):
        calls["from_handle(__cuda_stream__)"] = \
            lambda: acc.Stream.from_handle(_Foreign(s.handle))
        calls["__cuda_stream__"] = s.__cuda_stream__
    result = {name: (None, call) for name, call in calls.items()}
    number = driver.unknown_error[0]
    result["a driver error"] = (
        lambda: driver.fail(failing, 1, number),
        lambda: (s.query(), e.query(), acc.Event().record(s),
                 acc.Event().query()))
    return result


def nomemory_main() -> None:
    """Each call with its k-th Python allocation failing, k = 0, 1, ...:
    the call works or raises MemoryError (or what it raises anyway);
    never another error, never a crash.  Prints the problems, one a line."""
    import _testcapi
    driver = make_double()
    acc.set_device_index(0)
    calls = nomemory_calls(driver)
    problems = []
    for name, (setup, call) in calls.items():
        # First with failures: some results are cached once made.
        outcomes = []
        for k in range(NOMEMORY_DEPTH):
            if setup:
                setup()
            outcome: type | None = None
            _testcapi.set_nomemory(k, k + 1)
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - sorted below
                outcome = type(exc)
            finally:
                _testcapi.remove_mem_hooks()
            driver.clear_faults()
            outcomes.append(outcome)
        if setup:
            setup()
        try:
            call()
            normal: type | None = None
        except Exception as exc:  # noqa: BLE001 - what it does anyway
            normal = type(exc)
        driver.clear_faults()
        for k, outcome in enumerate(outcomes):
            if outcome not in (normal, MemoryError):
                problems.append(f"{name}: allocation {k}: {outcome} "
                                f"(without failures: {normal})")
        # Still working afterwards.
        acc.set_device_index(0)
        acc.set_stream(acc.current_stream(0))
        acc.Stream(1).record_event().synchronize()
    print("\n".join(problems))


def test_host_out_of_memory_never_crashes() -> None:
    """Every API call with each of its first allocations failing (the
    _testcapi allocator hooks), in a fresh process."""
    pytest.importorskip("_testcapi")
    script = NOMEMORY_CHILD.format(tests=str(REPO / "tests"),
                                   behaviour=str(REPO / "tests" / "behaviour"))
    result = subprocess.run([sys.executable, "-c", script],
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "", result.stdout


EXIT_BUSY = """
import sys, time
sys.path[:0] = [{tests!r}, {behaviour!r}]
import accelerator as a
import test_faults
s = a.Stream(1)
e = s.record_event()
test_faults.make_double().enqueue_sleep(s, 3000)
a.Event().record(s)
print(time.monotonic(), flush=True)
"""


def test_exit_with_work_still_queued() -> None:
    """Exiting while a stream still has 3 s of work: shutdown neither
    hangs (a bounded wait at most) nor crashes, and says nothing."""
    import time
    code = EXIT_BUSY.format(tests=str(REPO / "tests"),
                            behaviour=str(REPO / "tests" / "behaviour"))
    result = subprocess.run([sys.executable, "-c", code],
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=120)
    end = time.monotonic()
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    assert end - float(result.stdout) < 10
