"""accelerator.Graph: capture the work queued on a stream, replay it with
one launch (torch.accelerator.Graph)."""
from __future__ import annotations

import gc
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
from typing import Callable

import pytest

import accelerator as acc

N = 64


@pytest.fixture
def graphs(facts) -> None:
    if not facts.has("graphs"):
        pytest.skip(facts.lacks["graphs"])


def test_graph_is_refused_where_the_backend_lacks_it(facts) -> None:
    if facts.has("graphs"):
        pytest.skip("the backend supports graphs")
    g = acc.Graph()
    with acc.Stream() as s:
        with pytest.raises(NotImplementedError,
                           match="does not support graphs"):
            g.capture_begin()
        s.synchronize()


def _pipeline(stream: acc.Stream) -> tuple[acc.HostBuffer, acc.HostBuffer,
                                            list[acc.Buffer]]:
    src, dst = acc.HostBuffer(N), acc.HostBuffer(N)
    bufs = [acc.Buffer(N, stream=stream) for _ in range(3)]
    acc.synchronize()
    return src, dst, bufs


def _capture_copies(stream, src, dst, bufs) -> None:
    bufs[0].copy_from(src, stream=stream)
    bufs[1].copy_from(bufs[0], stream=stream)
    bufs[2].copy_from(bufs[1], stream=stream)
    bufs[2].copy_to(dst, stream=stream)


def _capture_fill(g: acc.Graph, stream: acc.Stream, buf: acc.Buffer,
                  dst: acc.HostBuffer, value: int) -> None:
    """Capture filling buf with value and copying it to dst."""
    with stream, g:
        buf.fill(value, stream=stream)
        buf.copy_to(dst, stream=stream)


def _replay(g: acc.Graph, stream: acc.Stream, dst: acc.HostBuffer) -> bytes:
    """Replay on stream; the bytes of dst once it ran."""
    with stream:
        g.replay()
    stream.synchronize()
    return bytes(dst)


def test_replay_runs_the_captured_copies_again_with_new_data(graphs,
                                                            driver) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    memoryview(src)[:] = b"\x01" * N
    memoryview(dst)[:] = bytes(N)
    g = acc.Graph()
    with stream, g:
        _capture_copies(stream, src, dst, bufs)
    # Captured, not run.
    stream.synchronize()
    assert bytes(dst) == bytes(N)
    for fill in (b"a", b"b", b"c"):
        memoryview(src)[:] = fill * N
        with stream:
            g.replay()
        stream.synchronize()
        assert bytes(dst) == fill * N
    assert driver.live("bad_access") == 0


def test_n_captured_copies_replay_with_one_launch(graphs, driver,
                                                  facts) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph()
    with stream:
        g.capture_begin()
        for _ in range(10):
            bufs[0].copy_from(src, stream=stream)
        bufs[0].copy_to(dst, stream=stream)
        g.capture_end()
    memoryview(src)[:] = b"z" * N
    driver.reset_counts()
    with stream:
        g.replay()
    launched = driver.calls() - sum(driver.calls(name)
                                    for name in facts.slot_functions)
    stream.synchronize()
    assert driver.calls(facts.functions["graph_launch"]) == 1
    assert launched == facts.replay_calls, "the copies are not issued again"
    assert bytes(dst) == b"z" * N


def test_fill_is_captured_and_replay_follows_stream_order(graphs,
                                                          driver) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph(keep_graph=True)
    _capture_fill(g, stream, bufs[0], dst, 7)
    g.instantiate()
    with pytest.raises(RuntimeError, match="already instantiated"):
        g.instantiate()
    # Work queued before the replay runs before it.
    driver.enqueue_sleep(stream, 30)
    assert _replay(g, stream, dst) == b"\x07" * N


def test_keep_graph_instantiates_on_first_replay(graphs) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph(keep_graph=True)
    _capture_fill(g, stream, bufs[0], dst, 3)
    assert _replay(g, stream, dst) == b"\x03" * N


def test_reset_and_capture_again(graphs, driver) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph()
    _capture_fill(g, stream, bufs[0], dst, 1)
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        with stream:
            g.capture_begin()
    g.reset()
    assert "empty" in repr(g)
    with pytest.raises(RuntimeError, match="needs a captured graph"):
        g.replay()
    _capture_fill(g, stream, bufs[0], dst, 2)
    assert _replay(g, stream, dst) == b"\x02" * N


def _unpooled(driver, facts) -> dict[str, int]:
    """The double's live counts of the kinds the backend does not pool."""
    return {kind: n for kind, n in driver.live_all().items()
            if kind not in facts.pooled_kinds}


def test_graphs_leave_no_driver_objects(graphs, driver, facts) -> None:
    stream = acc.Stream()
    gc.collect()
    acc.empty_cache()  # as `with g:` does
    before = _unpooled(driver, facts)
    # The memory goes too: a live buffer's books may hold the event of a
    # completed use until they are next settled (docs/memory.rst).
    src, dst, bufs = _pipeline(stream)
    for keep in (False, True):
        g = acc.Graph(keep_graph=keep)
        with stream, g:
            bufs[0].fill(1, stream=stream)
        with stream:
            g.replay()
        del g
    stream.synchronize()
    del src, dst, bufs
    gc.collect()
    acc.empty_cache()
    assert _unpooled(driver, facts) == before


def test_capture_errors(graphs, facts) -> None:
    g = acc.Graph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        g.capture_begin()  # the current stream is the default stream
    with pytest.raises(RuntimeError, match="non-default stream"):
        with g:
            pass
    with pytest.raises(RuntimeError, match="without an active capture"):
        g.capture_end()
    with pytest.raises(RuntimeError, match="needs a captured graph"):
        g.instantiate()
    with pytest.raises(RuntimeError, match="Unknown capture_error_mode"):
        with acc.Stream():
            g.capture_begin(capture_error_mode="sloppy")
    with pytest.raises(TypeError, match="must be a str"):
        with acc.Stream():
            g.capture_begin(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keep_graph must be a bool"):
        acc.Graph(1)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="pool"):
        acc.Graph(pool=(0, 1))  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="Graph.pool\\(\\) is "
                       "not supported: there are no graph-private memory"):
        g.pool()
    with pytest.raises(TypeError, match="cannot pickle"):
        g.__reduce__()
    s = acc.Stream()
    with s:
        g.capture_begin(capture_error_mode="relaxed")
        with pytest.raises(RuntimeError, match="already capturing"):
            g.capture_begin()
        g.capture_end()
    with pytest.raises(RuntimeError, match="instantiate\\(\\) is only"):
        g.instantiate()


@pytest.fixture
def capture_events(graphs, facts) -> None:
    if not facts.has("capture_events"):
        pytest.skip(facts.lacks["capture_events"])


def test_a_stream_waiting_on_a_captured_event_joins_the_capture(
        capture_events) -> None:
    stream, side = acc.Stream(), acc.Stream()
    src, dst, bufs = _pipeline(stream)
    memoryview(dst)[:] = bytes(N)
    g = acc.Graph()
    with stream, g:
        bufs[0].copy_from(src, stream=stream)
        side.wait_event(stream.record_event())  # fork: side is captured
        bufs[1].copy_from(bufs[0], stream=side)
        stream.wait_event(side.record_event())  # join
        bufs[1].copy_to(dst, stream=stream)
    # Captured, not run, on both streams; neither captures any more.
    side.synchronize()
    stream.synchronize()
    assert bytes(dst) == bytes(N)
    for fill in (b"p", b"q"):
        memoryview(src)[:] = fill * N
        assert _replay(g, stream, dst) == fill * N


def test_a_fork_not_joined_back_fails_the_capture(capture_events,
                                                  facts) -> None:
    stream, side = acc.Stream(), acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph()
    with stream:
        g.capture_begin()
        bufs[0].fill(1, stream=stream)
        side.wait_event(stream.record_event())
        bufs[1].fill(2, stream=side)
        with pytest.raises(acc.AcceleratorError,
                           match=facts.capture_errors["unjoined"]):
            g.capture_end()
    assert "empty" in repr(g)
    side.synchronize()  # neither stream captures any more
    stream.synchronize()
    _capture_fill(g, stream, bufs[0], dst, 6)
    assert _replay(g, stream, dst) == b"\x06" * N


def test_entering_a_graph_empties_the_caches(graphs, driver) -> None:
    """with g: synchronizes and empties the caches before capturing, as
    torch's: cached memory and the pooled streams go back to the driver."""
    stream = acc.Stream()
    acc.Buffer(N, stream=stream)  # dropped: cached once its work is done
    acc.Stream()                  # dropped: kept for reuse
    gc.collect()
    streams = driver.live("stream")
    # Cached, unless the allocator does not cache (then freed at once).
    caching = os.environ.get("ACCELERATOR_ALLOCATOR") != "direct"
    assert (acc.memory.memory_reserved() > 0) == caching
    g = acc.Graph()
    with stream, g:
        assert acc.memory.memory_reserved() == 0
    del g  # (Level Zero counts the graph's command list with the streams)
    gc.collect()
    assert driver.live("stream") < streams


def test_work_others_queue_through_the_handle_is_captured(graphs, driver,
                                                          facts) -> None:
    """A library enqueuing on the same stream handle (Stream.from_handle)
    while it captures: its work is recorded too, and replayed in order."""
    if not facts.has("foreign_capture"):
        pytest.skip(facts.lacks["foreign_capture"])
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    memoryview(dst)[:] = bytes(N)
    wrapped = acc.Stream.from_handle(stream.handle, stream.device)
    g = acc.Graph()
    with wrapped, g:
        gate = driver.gate(wrapped)  # the library's kernel
        bufs[0].fill(5, stream=wrapped)
        bufs[0].copy_to(dst, stream=wrapped)
    assert stream.query(), "the captured kernel was queued, not recorded"
    gate.open()
    with stream:
        g.replay()
    stream.synchronize()
    assert bytes(dst) == b"\x05" * N


def test_allocation_inside_a_capture_is_refused(graphs) -> None:
    stream = acc.Stream()
    g = acc.Graph()
    with stream, g:
        with pytest.raises(RuntimeError, match="cannot allocate device "
                           "memory while a graph captures"):
            acc.Buffer(16)
        with pytest.raises(RuntimeError, match="capture_error_mode='global'"):
            acc.Buffer(16, stream=acc.Stream())  # global: any stream
    acc.Buffer(16)  # fine again
    with stream:
        g.reset()
        g.capture_begin(capture_error_mode="relaxed")
        other = acc.Buffer(16, stream=acc.Stream())  # relaxed: elsewhere ok
        with pytest.raises(RuntimeError, match="'relaxed'"):
            acc.Buffer(16, stream=stream)
        g.capture_end()
    del other


def test_operations_the_driver_refuses_invalidate_the_capture(
        graphs, facts) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    outside = acc.Stream().record_event()  # not part of the capture
    outside.synchronize()
    for refused in (stream.synchronize, stream.query,
                    lambda: acc.synchronize(stream.device),
                    lambda: stream.wait_event(outside),
                    lambda: bufs[0].copy_from(b"x" * N, stream=stream)):
        g = acc.Graph()
        with stream:
            g.capture_begin()
            bufs[0].fill(1, stream=stream)
            with pytest.raises(acc.AcceleratorError,
                               match=facts.capture_errors["refused"]):
                refused()
            with pytest.raises(acc.AcceleratorError,
                               match=facts.capture_errors["invalidated"]):
                g.capture_end()
        # The stream works normally again; the graph can capture anew.
        stream.synchronize()
        assert "empty" in repr(g)
        with stream, g:
            bufs[0].fill(2, stream=stream)


def test_a_failing_body_drops_the_capture(graphs) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph()
    with pytest.raises(KeyError):
        with stream, g:
            bufs[0].fill(1, stream=stream)
            raise KeyError("body")
    assert "empty" in repr(g)
    stream.synchronize()  # not capturing any more
    acc.Buffer(16)


def _raised_in_thread(call: Callable[[], object]) -> list[BaseException]:
    """Run call in another thread; what it raised (empty: nothing)."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            call()
        except BaseException as exc:  # returned to the caller
            errors.append(exc)

    t = threading.Thread(target=body)
    t.start()
    t.join(30)
    assert not t.is_alive()
    return errors


def test_synchronizing_the_device_during_a_relaxed_capture(graphs,
                                                           driver) -> None:
    """A relaxed capture lets the device be synchronized: the call waits
    for the work queued before the capture (not for the captured work,
    which never runs until replayed) and the capture goes on."""
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    memoryview(dst)[:] = bytes(N)
    g = acc.Graph()
    gate = driver.gate(stream)  # queued before the capture
    with stream:
        g.capture_begin(capture_error_mode="relaxed")
        bufs[0].fill(3, stream=stream)
        bufs[0].copy_to(dst, stream=stream)
    gate.open_soon()
    assert _raised_in_thread(lambda: acc.synchronize(stream.device)) == []
    assert bytes(dst) == bytes(N)
    with stream:
        g.capture_end()
    assert _replay(g, stream, dst) == b"\x03" * N


def test_capture_ended_from_another_thread_is_refused(graphs,
                                                      facts) -> None:
    stream = acc.Stream()
    g = acc.Graph()
    with stream:
        g.capture_begin(capture_error_mode="thread_local")
    errors = _raised_in_thread(g.capture_end)
    assert len(errors) == 1
    assert isinstance(errors[0], acc.AcceleratorError)
    assert re.search(facts.capture_errors["wrong_thread"], str(errors[0]))
    g.reset()
    stream.synchronize()


def test_replay_on_another_stream_and_the_default_stream(graphs) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph()
    _capture_fill(g, stream, bufs[0], dst, 9)
    # torch: "after capture, it's ok to replay them on the default stream"
    g.replay()  # the current stream: the default stream
    acc.synchronize()
    assert bytes(dst) == b"\x09" * N
    memoryview(dst)[:] = bytes(N)
    assert _replay(g, acc.Stream(), dst) == b"\x09" * N


def test_replays_of_one_graph_run_one_after_another(graphs,
                                                    driver) -> None:
    """As CUDA orders launches of one executable: a replay on another
    stream waits for the replay before it."""
    first, second = acc.Stream(), acc.Stream()
    src, dst, bufs = _pipeline(first)
    g = acc.Graph()
    _capture_fill(g, first, bufs[0], dst, 8)
    memoryview(dst)[:] = bytes(N)
    gate = driver.gate(first)
    with first:
        g.replay()  # behind the gate
    with second:
        g.replay()
    assert not second.query(), "the second replay did not wait"
    assert bytes(dst) == bytes(N)
    gate.open()
    second.synchronize()
    assert bytes(dst) == b"\x08" * N
    first.synchronize()


def test_the_register_of_captures_is_bounded(graphs) -> None:
    streams = [acc.Stream() for _ in range(65)]
    graphs_ = [acc.Graph() for _ in streams]
    try:
        for g, s in zip(graphs_[:64], streams):
            with s:
                g.capture_begin(capture_error_mode="relaxed")
        with pytest.raises(RuntimeError, match="too many captures"):
            with streams[64]:
                graphs_[64].capture_begin(capture_error_mode="relaxed")
    finally:
        for g in graphs_:
            g.reset()
    with streams[64], graphs_[64]:
        pass


def test_a_stream_captured_by_another_graph_is_refused(graphs) -> None:
    stream = acc.Stream()
    first, second = acc.Graph(), acc.Graph()
    with stream:
        first.capture_begin()
        with pytest.raises(RuntimeError, match="already being captured"):
            second.capture_begin()
        first.capture_end()
        second.capture_begin()  # free again
        second.capture_end()


def test_capture_begin_arguments() -> None:
    g = acc.Graph()
    with pytest.raises(TypeError, match="at most 1 argument"):
        g.capture_begin("global", "x")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'mode'"):
        g.capture_begin(mode="global")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword"):
        g.capture_begin("global",  # type: ignore[misc]
                        capture_error_mode="global")


def test_a_failed_instantiation_leaves_the_graph_usable(graphs, driver,
                                                        facts) -> None:
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    code, name = facts.unknown_error
    instantiate = facts.functions["graph_instantiate"]
    # keep_graph=False: capture_end instantiates; on failure the graph is
    # empty again and can capture anew.
    g = acc.Graph()
    driver.fail(instantiate, 1, code)
    try:
        with pytest.raises(acc.AcceleratorError, match=name):
            _capture_fill(g, stream, bufs[0], dst, 4)
    finally:
        driver.clear_faults()
    assert "empty" in repr(g)
    _capture_fill(g, stream, bufs[0], dst, 4)
    assert _replay(g, stream, dst) == b"\x04" * N
    # keep_graph=True: the first replay instantiates; a failure there
    # keeps the captured graph for the next replay.
    kept = acc.Graph(keep_graph=True)
    _capture_fill(kept, stream, bufs[0], dst, 5)
    driver.fail(instantiate, 1, code)
    try:
        with pytest.raises(acc.AcceleratorError, match=name):
            with stream:
                kept.replay()
    finally:
        driver.clear_faults()
    assert _replay(kept, stream, dst) == b"\x05" * N


EXIT_CAPTURING = """
import accelerator as acc
s, t = acc.Stream(), acc.Stream()
b, h = acc.Buffer(64, stream=s), acc.HostBuffer(64)
acc.synchronize()
g = acc.Graph()
with s, g:
    b.fill(3, stream=s)
    b.copy_to(h, stream=s)
with s:
    g.replay()
    g.replay()
# The replays use h and b, which exit frees: they must have run by then
# (docs/graphs.rst: a replay does not hold the memory it uses).
s.synchronize()
open_capture = acc.Graph()
with t:
    open_capture.capture_begin()
b.fill(1, stream=t)
fork = acc.Stream()
fork.wait_event(t.record_event())
b.fill(2, stream=fork)
print("exiting")
"""


def test_exit_with_graphs_and_a_capture_open(graphs) -> None:
    """Exiting with a graph replayed, a capture still open and a stream
    forked into it: a clean exit (shutdown releases the driver's
    objects of all of them) that says nothing."""
    src = pathlib.Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", EXIT_CAPTURING],
                            env={**os.environ, "PYTHONPATH": str(src)},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "exiting\n"
    assert result.stderr == "", result.stderr


def test_a_refused_capture_begin_leaves_the_live_capture_alone(
        graphs) -> None:
    """A second graph's capture_begin on a stream that a relaxed capture
    holds is refused, and the relaxed capture's rules stay in force: not
    the refused one's 'global' mode (issue 22, item 2)."""
    stream = acc.Stream()
    live, refused = acc.Graph(), acc.Graph()
    with stream:
        live.capture_begin(capture_error_mode="relaxed")
        with pytest.raises(RuntimeError, match="already being captured"):
            refused.capture_begin()  # 'default': global
        elsewhere = acc.Buffer(16, stream=acc.Stream())  # relaxed: fine
        with pytest.raises(RuntimeError, match="'relaxed'"):
            acc.Buffer(16, stream=stream)
        live.capture_end()
    assert "captured" in repr(live) and "empty" in repr(refused)
    del elsewhere
    acc.Buffer(16, stream=stream)  # no capture registered any more


def test_reset_from_another_thread_during_a_capture_is_refused(
        graphs) -> None:
    """reset() from a thread that cannot end the capture (modes 'global'
    and 'thread_local') is refused and changes nothing: the capturing
    thread still ends its capture, and the graph replays (item 3)."""
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    for mode in ("global", "thread_local"):
        g = acc.Graph()
        memoryview(dst)[:] = bytes(N)
        with stream:
            g.capture_begin(capture_error_mode=mode)
            bufs[0].fill(4, stream=stream)
            bufs[0].copy_to(dst, stream=stream)
        errors = _raised_in_thread(g.reset)
        assert len(errors) == 1, (mode, errors)
        assert isinstance(errors[0], RuntimeError)
        assert f"'{mode}'" in str(errors[0]) and "thread" in str(errors[0])
        assert "capturing" in repr(g)
        with stream:
            g.capture_end()
        assert _replay(g, stream, dst) == b"\x04" * N
    # A relaxed capture may be dropped from any thread.
    g = acc.Graph()
    with stream:
        g.capture_begin(capture_error_mode="relaxed")
    assert _raised_in_thread(g.reset) == []
    assert "empty" in repr(g)
    stream.synchronize()  # not capturing any more
    acc.Buffer(16, stream=stream)


#: a Graph method -> (the steps before it, the facts.functions key of the
#: driver call it makes)
GRAPH_STEPS: dict[str, tuple[tuple[str, ...], str]] = {
    "capture_begin": ((), "graph_capture_begin"),
    "capture_end": (("capture_begin",), "graph_capture_end"),
    "instantiate": (("capture_begin", "capture_end"), "graph_instantiate"),
    "replay": (("capture_begin", "capture_end", "instantiate"),
               "graph_launch"),
    "reset": (("capture_begin", "capture_end", "instantiate", "replay"),
              "graph_destroy"),
}


@pytest.mark.parametrize("method", list(GRAPH_STEPS))
def test_graph_driver_calls_release_the_gil(graphs, driver, facts,
                                            method: str) -> None:
    """Another Python thread runs while a graph's driver call is in
    progress (issue 22, item 1): the double holds the call until a
    Python thread opens its gate, which that thread can do only while the
    caller has let go of the GIL (otherwise the hold's safety timeout
    ends the call, and the double counts the hold as expired)."""
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph(keep_graph=True)
    steps, key = GRAPH_STEPS[method]

    def call(name: str) -> None:
        with stream:
            if name == "capture_begin":
                g.capture_begin()
                bufs[0].fill(6, stream=stream)
            else:
                getattr(g, name)()
        if name == "replay":
            stream.synchronize()  # idle: reset() destroys it at once

    for name in steps:
        call(name)
    function = facts.functions[key]
    expired = driver.hold_expired(function)
    gate = driver.hold(function, timeout=10)
    seen: list[bool] = []

    def opener() -> None:
        for _ in range(30000):
            if driver.held(function):
                seen.append(True)
                break
            time.sleep(0.001)
        gate.open()

    thread = threading.Thread(target=opener)
    thread.start()
    try:
        call(method)
    finally:
        gate.open()
        thread.join(60)
        with stream:
            g.reset()
    assert seen == [True], f"{function} was never called"
    assert driver.hold_expired(function) == expired, \
        f"{method}() kept the GIL in {function}"
    stream.synchronize()


def test_a_replay_whose_tail_fails_raises_only_once_it_ran(graphs, driver,
                                                          facts) -> None:
    """The replay is launched, then ordering the stream's later work after
    it fails: replay() raises, but only once the replay has run, so that
    memory it writes is not released (or read) under it (issue 22, item
    5)."""
    name, nth = facts.replay_tail
    if not name:
        pytest.skip("the replay is one driver call: nothing follows it")
    stream = acc.Stream()
    src, dst, bufs = _pipeline(stream)
    g = acc.Graph()
    _capture_fill(g, stream, bufs[0], dst, 7)
    memoryview(dst)[:] = bytes(N)
    code, error = facts.unknown_error
    with driver.gate(stream) as gate:  # the replay waits behind it
        driver.fail(name, nth, code)
        gate.open_soon()
        try:
            with pytest.raises(acc.AcceleratorError, match=error):
                with stream:
                    g.replay()
        finally:
            driver.clear_faults()
        assert bytes(dst) == b"\x07" * N, "replay() raised while it ran"
    memoryview(dst)[:] = bytes(N)
    assert _replay(g, stream, dst) == b"\x07" * N  # works again
