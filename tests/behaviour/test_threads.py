"""Threads: 16 threads mixing every operation, per-thread state, the GIL.

Each worker has its own device and stream and checks after every step
that they are still its own, whatever the 15 others do.  Blocking calls
must release the GIL: another Python thread takes its turns and opens
the gate that holds back the work being waited on.  Every wait is
bounded, and a watchdog dumps all stacks and fails the run if anything
deadlocks.
"""
from __future__ import annotations

import faulthandler
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import accelerator as acc

THREADS = 16
SECONDS = 2.0
WATCHDOG = 120


@pytest.fixture
def watchdog() -> Iterator[None]:
    """Dump every thread's stack and exit if the test hangs."""
    faulthandler.dump_traceback_later(WATCHDOG, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def run_threads(target: Callable[[int], None], count: int,
                timeout: float) -> None:
    errors: list[tuple[int, BaseException]] = []

    def body(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append((i, exc))

    threads = [threading.Thread(target=body, args=(i,), name=f"worker-{i}")
               for i in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"deadlock: {hung} still running after {timeout} s"
    if errors:
        i, exc = errors[0]
        raise AssertionError(f"worker {i} failed ({len(errors)} failed): "
                             f"{exc!r}") from exc


class Worker:
    """One thread's random walk over the API, checking its own state."""

    def __init__(self, i: int, driver: Any, defaults: list[acc.Stream],
                 accel_type: str) -> None:
        self.rng = random.Random(1000 + i)
        self.driver = driver
        self.defaults = defaults
        self.type = accel_type
        self.count = len(defaults)
        self.device = i % self.count
        self.other = (self.device + 1) % self.count
        self.steps = 0
        self.ops: list[Callable[[], None]] = [
            getattr(self, name) for name in dir(self)
            if name.startswith("op_")]

    def run(self, seconds: float) -> None:
        # A new thread starts on device 0 with the default streams.
        assert acc.current_device_index() == 0
        for d in range(self.count):
            assert acc.current_stream(d) is self.defaults[d]
        acc.set_device_index(self.device)
        self.stream = acc.Stream(self.device)
        acc.set_stream(self.stream)
        self.check()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.rng.choice(self.ops)()
            self.check()
            self.steps += 1
        self.stream.synchronize()

    def check(self) -> None:
        assert acc.current_device_index() == self.device
        assert acc.current_stream() is self.stream
        assert acc.current_stream(self.device) is self.stream
        if self.other != self.device:
            assert acc.current_stream(self.other) is \
                self.defaults[self.other]

    def busy(self, stream: acc.Stream, ms: float) -> None:
        if self.driver is not None:
            self.driver.enqueue_sleep(stream, ms)

    # Operations: each leaves the thread's device and stream as it found
    # them (or restores them), so check() holds after every one.

    def op_queries(self) -> None:
        assert acc.is_available() and acc.device_count() == self.count
        assert acc.current_accelerator() == acc.device(self.type)

    def op_with_other_stream(self) -> None:
        other = acc.Stream(self.other)
        with other:
            assert acc.current_device_index() == self.other
            assert acc.current_stream() is other
            self.busy(other, 1)
            other.record_event()
        assert other.query() in (True, False)

    def op_nested_with(self) -> None:
        outer, inner = acc.Stream(self.device), acc.Stream(self.other)
        with outer:
            with inner:
                assert acc.current_stream() is inner
            assert acc.current_stream() is outer
            with outer:
                assert acc.current_device_index() == self.device

    def op_set_device_and_back(self) -> None:
        acc.set_device_index(self.other)
        assert acc.current_device_index() == self.other
        assert acc.current_stream(self.device) is self.stream
        acc.set_device_index(self.device)

    def op_device_index(self) -> None:
        with acc.device_index(self.other):
            assert acc.current_device_index() == self.other
        with acc.device_index(None):
            pass

    def op_set_stream_and_back(self) -> None:
        acc.set_stream(self.defaults[self.other])
        assert acc.current_device_index() == self.other
        acc.set_stream(self.stream)

    def op_record_and_wait(self) -> None:
        event = acc.Event()
        self.busy(self.stream, self.rng.choice([0, 1, 2]))
        event.record()
        assert event.device_index == self.device
        acc.Stream(self.other).wait_event(event)
        event.wait()
        if self.rng.random() < 0.5:
            event.synchronize()
            assert event.query() is True
        else:
            event.query()

    def op_timing(self) -> None:
        start = acc.Event(enable_timing=True)
        end = acc.Event(enable_timing=True, blocking=self.rng.random() < .5)
        start.record(self.stream)
        self.busy(self.stream, 1)
        end.record(self.stream)
        end.synchronize()
        assert start.elapsed_time(end) >= 0

    def op_wait_stream(self) -> None:
        self.stream.wait_stream(acc.Stream(self.other))
        acc.Stream(self.other).wait_stream(self.stream)

    def op_stream_life(self) -> None:
        streams = [acc.Stream(self.rng.randrange(self.count),
                              priority=self.rng.choice([0, -1]))
                   for _ in range(3)]
        for s in streams:
            self.busy(s, 1)
        streams[0].synchronize()
        del streams

    def op_synchronize(self) -> None:
        self.busy(self.stream, 1)
        acc.synchronize(self.rng.randrange(self.count))
        acc.synchronize()

    def op_stream_sync_query(self) -> None:
        self.busy(self.stream, 1)
        self.stream.query()
        event = self.stream.record_event()
        self.stream.synchronize()
        assert event.query() is True
        # Not stream.query() is True: the CUDA double queues a marker on
        # every stream of the context for another thread's
        # synchronize(), which it counts as pending work for an instant.
        self.stream.query()

    def op_default_stream(self) -> None:
        default = acc.current_stream(self.other)
        assert default is self.defaults[self.other]
        default.query()

    def op_from_handle(self) -> None:
        wrapped = acc.Stream.from_handle(self.stream.handle, self.device)
        assert wrapped == self.stream
        wrapped.query()

    def op_properties(self) -> None:
        props = acc.get_device_properties(self.other)
        assert props.index == self.other
        assert acc.get_device_name() == \
            acc.get_device_properties(self.device).name
        free, total = acc.get_memory_info(self.other)
        assert 0 <= free <= total

    def op_bad_input(self) -> None:
        with pytest.raises(acc.DeviceIndexError):
            acc.set_device_index(self.count)
        with pytest.raises(ValueError):
            acc.Stream(priority=1)


@pytest.fixture
def maybe_driver(request: pytest.FixtureRequest) -> Any:
    """The double when there is one (timed work); None on a real driver."""
    try:
        return request.getfixturevalue("driver")
    except pytest.skip.Exception:
        return None


@pytest.mark.usefixtures("watchdog")
def test_sixteen_threads_keep_their_own_device_and_stream(
        maybe_driver: Any, accel_type: str,
        default_streams: list[acc.Stream]) -> None:
    driver = maybe_driver
    workers = [Worker(i, driver, default_streams, accel_type)
               for i in range(THREADS)]
    run_threads(lambda i: workers[i].run(SECONDS), THREADS,
                timeout=SECONDS + 60)
    steps = [w.steps for w in workers]
    assert min(steps) > 0, steps
    # Every operation ran somewhere.
    assert sum(steps) >= 10 * len(workers[0].ops), steps
    # The main thread was not touched by any of them.
    assert acc.current_device_index() == 0
    assert acc.current_stream() is default_streams[0]


TICKS = 20


def wait_while_python_opens(wait: Callable[[], None], gate: Any) -> int:
    """Run `wait` here while another Python thread, once this one is about
    to block, takes TICKS turns of the GIL (a 5 ms sleep each) and only
    then opens `gate`, which holds back the work `wait` waits for.

    Deterministic, whatever the load: the opener can finish only if `wait`
    lets go of the GIL.  A wait that held it would never return (the
    watchdog then dumps every stack and fails the run).  Returns the turns
    the opener had taken when `wait` returned.
    """
    entering = threading.Event()
    ticks = 0

    def opener() -> None:
        nonlocal ticks
        entering.wait(30)
        for _ in range(TICKS):
            time.sleep(0.005)
            ticks += 1
        gate.open()

    thread = threading.Thread(target=opener, name="gate-opener")
    thread.start()
    try:
        entering.set()
        wait()
        return ticks
    finally:
        gate.open()
        thread.join(30)
        assert not thread.is_alive()


BLOCKING: dict[str, Callable[[Any, acc.Stream], Callable[[], None]]] = {
    "Stream.synchronize": lambda d, s: s.synchronize,
    "Event.synchronize": lambda d, s: s.record_event().synchronize,
    "Event(blocking=True).synchronize": lambda d, s: s.record_event(
        acc.Event(blocking=True)).synchronize,
    "accelerator.synchronize": lambda d, s: lambda: acc.synchronize(
        s.device_index),
    "default Stream.synchronize": lambda d, s: s.synchronize,
}


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize("call", list(BLOCKING))
def test_blocking_calls_release_the_gil(driver, call: str) -> None:
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        stream = acc.current_stream(0) if call.startswith("default") \
            else acc.Stream(0)
        acc.set_device_index(0)
        with driver.gate(stream) as gate:
            wait = BLOCKING[call](driver, stream)  # records after the work
            ticks = wait_while_python_opens(wait, gate)
    finally:
        sys.setswitchinterval(old)
    # The wait returned only after the opener had taken every turn: it
    # waited for the work, and it let the other thread run meanwhile.
    assert ticks == TICKS, (call, ticks)


@pytest.mark.usefixtures("watchdog")
def test_a_waiting_thread_does_not_block_the_others(driver) -> None:
    """One thread in a synchronize on work that ends only when the 15
    others are done with theirs (or after 30 s, and the test fails)."""
    slow = acc.Stream(0)
    gate = driver.gate(slow)
    gate.open_soon(30)
    done = threading.Event()
    early: list[int] = []
    finished = [0]
    lock = threading.Lock()

    def target(i: int) -> None:
        if i == 0:
            slow.synchronize()
            done.set()
            return
        for _ in range(5):
            s = acc.Stream(i % acc.device_count())
            s.record_event().synchronize()
            acc.current_stream().query()
        if not done.is_set():
            early.append(i)
        with lock:
            finished[0] += 1
            if finished[0] == THREADS - 1:
                gate.open()

    run_threads(target, THREADS, timeout=60)
    assert done.is_set()
    assert len(early) == THREADS - 1, \
        "threads waited for the one in synchronize()"


def test_one_device_index_object_shared_by_two_threads(driver) -> None:
    """A module-level guard entered by two threads at once: each thread's
    exit restores what that thread's own enter saw (issue #11, item 5)."""
    on_dev1 = acc.device_index(1)
    steps = [threading.Event() for _ in range(4)]
    seen: dict[str, int] = {}

    def first(_: int) -> None:
        acc.set_device_index(0)
        on_dev1.__enter__()               # saves 0 for this thread
        steps[0].set()
        assert steps[1].wait(30)
        on_dev1.__exit__(None, None, None)  # before the other thread's exit
        seen["first"] = acc.current_device_index()
        steps[2].set()

    def second(_: int) -> None:
        assert steps[0].wait(30)
        acc.set_device_index(1)
        with on_dev1:                     # saves 1 for this thread
            with on_dev1:                 # nested in the same thread
                steps[1].set()
                assert steps[2].wait(30)
            assert acc.current_device_index() == 1
        seen["second"] = acc.current_device_index()

    run_threads(lambda i: (first, second)[i](i), 2, 60)
    assert seen == {"first": 0, "second": 1}


def test_device_index_state_stays_with_its_thread(driver) -> None:
    """An exit in a thread that never entered is refused, and leaves the
    entering thread's state intact."""
    guard = acc.device_index(1)
    errors: list[BaseException] = []
    with guard:
        def other() -> None:
            try:
                guard.__exit__(None, None, None)
            except RuntimeError as exc:
                errors.append(exc)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(30)
        assert acc.current_device_index() == 1
    assert acc.current_device_index() == 0
    assert len(errors) == 1
    assert "without a matching __enter__() in this thread" in str(errors[0])
