"""The fault machinery of test_faults, for its tests and the fresh
processes they start (a FRESH site's child runs child_main): the states a
fault is injected in, the actions that reach each call site, injecting a
fault once and checking the error it raises.

Children import this module, not test_faults: it imports neither pytest nor
numpy (the few actions that need them import them when they run), which a
child on the instrumented build pays a second of CPU for.
"""
from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable
from typing import Any

import accelerator as acc
import fake_drivers
from fake_drivers import Site

#: the device type under test when a double sits underneath, else "real"
BACKEND = (fake_drivers.TEST_BACKEND
           if fake_drivers.TEST_BACKEND in fake_drivers.DOUBLES else "real")

#: live kinds of memory (a refused free of it is lost for good)
MEMORY_KINDS = ("alloc", "host_alloc")


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
        import pytest
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
    import kernel_code as kernel_code_module
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
    import numpy
    acc.launch(state["k"], 1, 64, state["b"], numpy.uint32(64),
               stream=state["s"])
    state["s"].synchronize()


def compile_source(state: State) -> None:
    """The backend's C++ source, compiled (or taken from the cache), as
    the first source of the process: the compiler search, which asks the
    driver for the device's target, runs once per process."""
    import kernel_code as kernel_code_module
    from accelerator import _source
    _source._found.clear()
    acc.Module(kernel_code_module.SOURCE_CXX)


def build_broken(state: State) -> None:
    """Code the driver fails to build: a BuildError, with or without
    its log.  Where the test kernels' format builds nothing to fail, they
    fail with the build options the driver refuses."""
    import kernel_code as kernel_code_module
    import pytest
    facts = fake_drivers.under_test()
    broken = kernel_code_module.broken(facts.kernel_format)
    with pytest.raises(acc.BuildError):
        if broken is None:
            acc.Module(kernel_code(), options=facts.failing_build_options)
        else:
            acc.Module(broken)


def unknown_kernel(state: State) -> None:
    """A KeyError, with or without the module's kernel names."""
    import pytest
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


# Sharing with other processes ---------------------------------------------


class Peer:
    """The other process of a sharing site: tests/behaviour/ipc_peer.py,
    which makes memory and events and keeps them while it runs.  Owned by
    the state it serves: dropping the last reference ends it (its pipes
    closed, its exit waited for: no ResourceWarning), after what the
    state opened of it, which the state drops first (see peer_state)."""

    def __init__(self) -> None:
        import os
        import pathlib
        import subprocess
        import sys
        env = {**os.environ, "PYTHONPATH": str(fake_drivers.SRC)}
        self.proc: Any = subprocess.Popen(
            [sys.executable,
             str(pathlib.Path(__file__).with_name("ipc_peer.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            text=True, bufsize=1)

    def call(self, op: str, **args: Any) -> Any:
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        line = self.proc.stdout.readline()
        assert line, f"the peer died (rc {self.proc.wait(30)})"
        answer = json.loads(line)
        assert "error" not in answer, answer["error"]
        return answer["ok"]

    def close(self) -> None:
        """End the peer (idempotent): exit, or EOF on its stdin."""
        proc = self.proc
        if proc.stdin.closed:
            return
        try:
            if proc.poll() is None:
                self.call("exit")
        finally:
            proc.stdin.close()
            proc.stdout.close()
            assert proc.wait(60) == 0, proc.returncode

    def __del__(self) -> None:
        self.close()


class PeerState(dict):
    """A State whose peer goes last: what was opened of the peer's is
    dropped before the peer exits, whatever the order of insertion."""

    def __del__(self) -> None:
        peer = self.pop("peer", None)
        self.clear()
        gc.collect()
        if peer is not None:
            peer.close()

    def clear(self) -> None:
        peer = self.pop("peer", None)
        super().clear()
        if peer is not None:
            gc.collect()
            peer.close()


def with_peer_buffer() -> State:
    """A 4096-byte buffer of another process (filled with 5) and its
    handle."""
    acc.set_device_index(0)
    state = PeerState(peer=Peer())
    state["handle"] = bytes.fromhex(state["peer"].call(
        "make", name="b", nbytes=4096, value=5))
    return state


def with_peer_event() -> State:
    """An interprocess event of another process, recorded, and its
    handle."""
    acc.set_device_index(0)
    state = PeerState(peer=Peer())
    state["handle"] = bytes.fromhex(state["peer"].call("make_event",
                                                       name="e"))
    return state


def with_opened_peer_buffer() -> State:
    state = with_peer_buffer()
    state["opened"] = acc.Buffer.from_ipc_handle(state["handle"])
    return state


def with_opened_peer_event() -> State:
    state = with_peer_event()
    state["opened"] = acc.Event.from_ipc_handle(state["handle"])
    state["opened"].synchronize()
    return state


def check_peer_bytes(buffer: acc.Buffer) -> None:
    out = bytearray(buffer.nbytes)
    buffer.copy_to(out)
    assert out == b"\5" * buffer.nbytes, "the other process's bytes"


def open_peer_buffer(state: State) -> None:
    """Open the other process's memory, read it and let it go."""
    opened = acc.Buffer.from_ipc_handle(state["handle"])
    check_peer_bytes(opened)
    del opened
    gc.collect()


def open_peer_driver_handle(state: State) -> None:
    """The same by the driver's own handle (as another library's)."""
    handle = acc.IpcHandle(state["handle"])
    opened = acc.Buffer.from_driver_ipc_handle(
        handle.driver_handle, handle.nbytes, handle.offset)
    check_peer_bytes(opened)
    del opened
    gc.collect()


def open_peer_event(state: State) -> None:
    opened = acc.Event.from_ipc_handle(state["handle"])
    opened.synchronize()
    stream = acc.Stream(0)
    stream.wait_event(opened)
    stream.synchronize()
    del opened
    gc.collect()


def drop_opened(state: State) -> None:
    """Drop what was opened of the other process: its close runs once
    the work queued on it here has completed (at the settling)."""
    del state["opened"]
    gc.collect()
    acc.synchronize(0)
    acc.empty_cache()


def with_shared_buffer() -> State:
    """A buffer of this process (filled with 3) and another process to
    open what it shares: a handle made and never opened would hold the
    memory for as long as this process lives."""
    acc.set_device_index(0)
    state = PeerState(peer=Peer(), b=acc.Buffer(4096))
    state["b"].fill(3)
    state["b"].stream.synchronize()
    return state


def with_shared_event() -> State:
    """A recorded interprocess event and another process to open it."""
    acc.set_device_index(0)
    state = PeerState(peer=Peer(), e=acc.Event(interprocess=True))
    state["e"].record()
    state["e"].synchronize()
    return state


def share_buffer(state: State) -> None:
    """Buffer.ipc_handle(), opened by the other process, which reads the
    bytes (nothing of the buffer was lost) and closes it."""
    handle = state["b"].ipc_handle()
    assert handle.kind == "memory", handle
    peer = state["peer"]
    assert peer.call("open", name="b", handle=handle.data.hex()) == 4096
    assert peer.call("read", name="b") == "03" * 4096
    peer.call("close", name="b")


def share_event(state: State) -> None:
    handle = state["e"].ipc_handle()
    assert handle.kind == "event", handle
    peer = state["peer"]
    peer.call("open_event", name="e", handle=handle.data.hex())
    peer.call("drop", name="e")
    assert state["e"].query()


class GatedState(dict):
    """A State holding a closed gate on its stream ("gate"), which opens
    when the state goes (before the settling waits for the stream)."""

    def __del__(self) -> None:
        self.pop("gate").open()

    def clear(self) -> None:
        gate = self.pop("gate", None)
        if gate is not None:
            gate.open()
        super().clear()


def with_pending_interprocess_event() -> State:
    """An interprocess event whose record waits behind a closed gate: a
    record again cannot reuse its driver event at once (other processes
    opened that one), so the backend may reset it in stream order."""
    state = with_stream()
    gate = make_double().stall(state["s"])
    state = GatedState(state, gate=gate)
    state["e"] = acc.Event(interprocess=True)
    state["e"].record(state["s"])
    return state


def rerecord_pending(state: State) -> None:
    """The event answers for this record: pending behind the gate."""
    state["e"].record(state["s"])
    assert not state["e"].query(), "a record behind a closed gate is done"


def first_interprocess_record(state: State) -> None:
    event = acc.Event(interprocess=True)
    event.record(state["s"])
    event.synchronize()


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
    "Module(source)": compile_source,
    "get_kernel(unknown name)": unknown_kernel,
    "Buffer.ipc_handle()": share_buffer,
    "Event.ipc_handle()": share_event,
    "first interprocess event.record()": first_interprocess_record,
    "interprocess event.record() again while pending": rerecord_pending,
    "Buffer.from_ipc_handle() of another process": open_peer_buffer,
    "Buffer.from_driver_ipc_handle() of another process":
        open_peer_driver_handle,
    "Event.from_ipc_handle() of another process": open_peer_event,
    "drop a buffer of another process": drop_opened,
    "drop an event of another process": drop_opened,
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
    "Module(source)": on_device_0,
    "get_kernel(unknown name)": with_module,
    "Buffer.ipc_handle()": with_shared_buffer,
    "Event.ipc_handle()": with_shared_event,
    "first interprocess event.record()": with_stream,
    "interprocess event.record() again while pending":
        with_pending_interprocess_event,
    "Buffer.from_ipc_handle() of another process": with_peer_buffer,
    "Buffer.from_driver_ipc_handle() of another process": with_peer_buffer,
    "Event.from_ipc_handle() of another process": with_peer_event,
    "drop a buffer of another process": with_opened_peer_buffer,
    "drop an event of another process": with_opened_peer_event,
}


#: the sites of the backend under test (its double class's), none on a
#: real driver
SITES: tuple[Site, ...] = (fake_drivers.DOUBLES[BACKEND].fault_sites
                           if BACKEND in fake_drivers.DOUBLES else ())


def preparer(site: Site,
             default: Callable[[], State] = nothing) -> Callable[[], State]:
    """What makes the state a site's fault is injected in."""
    if site.prepare:
        return globals()[site.prepare]
    return PREPARE.get(site.action, default)



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
    error: acc.AcceleratorError | None = None
    try:
        action(state)
    except acc.AcceleratorError as exc:
        error = exc
    finally:
        driver.clear_faults()
    if error is None:
        raise AssertionError(f"{site.action} did not raise AcceleratorError "
                             f"with {site.api} failing (site {site.id})")
    assert driver.calls(site.api) > calls
    check_error(error, site.api, number, name, cls)
    assert where(streams) == before, "a failed call changed the thread's " \
        "current device or stream"



# Fresh processes -----------------------------------------------------------

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


