"""Stateful fuzzing of the whole API against the driver double.

A hypothesis RuleBasedStateMachine drives the API (devices, streams,
`with stream:`, events, timing, waits, synchronisation, memory and
properties, bad input from test_bad_input's table) and keeps a model of
what torch.accelerator's semantics say the thread's current device and
streams are.  Some steps run with a fault injected at a random driver
call site (test_faults' tables): the call then either works (the fault was
not on its path) or raises that very driver error, and the model says the
state did not change.

Invariants after every step: the current device and every device's current
stream match the model; only documented exceptions were raised.  After the
run: every driver object is back (the double's live counts).

Derandomized, so CI sees the same sequence every time; at least 2,000
steps in a normal run (FUZZ_EXAMPLES / FUZZ_STEPS scale it up, and
FUZZ_RANDOM=1 explores new sequences).
"""
from __future__ import annotations

import gc
import os
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import accelerator as acc  # noqa: E402
import test_bad_input  # noqa: E402
import test_faults  # noqa: E402

BACKEND = test_faults.BACKEND
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
STEPS = int(os.environ.get("FUZZ_STEPS", "50"))
MIN_STEPS = 2000
#: FUZZ_RANDOM=1: a new random sequence each run (exploring, not CI)
DERANDOMIZE = os.environ.get("FUZZ_RANDOM", "0") in ("", "0")

#: every exception the API documents; anything else is a bug
DOCUMENTED = (TypeError, ValueError, acc.DeviceIndexError,
              NotImplementedError, acc.AcceleratorError)

# Call sites reachable in a running process.  Not cuCtxPopCurrent: a
# failed pop leaves a context pushed on this thread for the tests after
# this one (test_faults covers it in fresh processes).
# Nor the releases that a driver refuses by keeping the object (sites with
# `refused`): each fault there keeps one object by design, which
# test_faults counts exactly, and the end of this run could not.
REFUSED = {s.api for s in test_faults.SITES if s.refused}
FAULT_APIS = sorted({
    s.api for s in test_faults.SITES
    if s.how in (test_faults.RAISE, test_faults.SILENT, test_faults.FRESH)
} - {"cuCtxPopCurrent"} - REFUSED)
#: the table's sites that raise (or swallow) in a running process
#: (a free of memory that the driver refused is lost for good, so those
#: sites would leave the final counts off by the refusals; test_faults
#: counts them)
#: (and not the sites whose preparation needs devices of two drivers where
#: this process has one: their preparation skips, which would skip the
#: whole run whenever the draw picked one)
#: (nor, where devices 0 and 1 are on two drivers, the sites of a copy
#: between them, which the backend refuses there: NotImplementedError)
TWO_DRIVERS = getattr(test_faults.make_double(), "drivers", lambda: 1)() >= 2
BETWEEN_DEVICES = {"copy_from(Buffer of device 1)"}
SITES = [s for s in test_faults.SITES
         if s.how in (test_faults.RAISE, test_faults.SILENT)
         and s.api not in REFUSED
         and (TWO_DRIVERS
              or test_faults.preparer(s) is not test_faults.across_drivers)
         and not (TWO_DRIVERS and s.action in BETWEEN_DEVICES)]
FAULTY_RULES = ["set_device_index", "synchronize", "memory_and_properties",
                "stream_query", "stream_synchronize", "wait_stream",
                "record", "event_query_synchronize", "wait_event",
                "set_stream", "enter", "new_stream", "from_handle",
                "empty_cache"]


class Model(RuleBasedStateMachine):
    """The API against a model of the thread's device and streams."""

    streams = Bundle("streams")
    events = Bundle("events")
    steps = 0
    faults_raised = 0

    def __init__(self) -> None:
        super().__init__()
        self.driver = test_faults.make_double()
        self.count = acc.device_count()
        self.fault: tuple[str, int, type] | None = None
        self.entered: list[tuple[acc.Stream, Any]] = []
        self.defaults = [acc.current_stream(d) for d in range(self.count)]
        for default in self.defaults:
            acc.set_stream(default)
        acc.set_device_index(0)
        self.device = 0
        self.current = list(self.defaults)

    # Plumbing ---------------------------------------------------------------

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """Run fn; (True, result), or (False, exc) for a documented error
        that a fault explains.  Anything else fails the run."""
        try:
            return True, fn(*args, **kwargs)
        except acc.AcceleratorError as exc:
            if self.fault is None:
                raise
            api, number, cls = self.fault
            if exc.api is None:
                raise
            assert exc.api == api, (exc.api, api, exc)
            assert exc.code == number and type(exc) is cls, exc
            assert exc.backend == BACKEND
            Model.faults_raised += 1
            return False, exc

    def device_arg(self, data: st.DataObject) -> Any:
        d = data.draw(st.integers(0, self.count - 1))
        form = data.draw(st.sampled_from(["int", "str", "device", "none"]))
        if form == "none":
            return None, self.device
        return {"int": d, "str": f"{self.type}:{d}",
                "device": acc.device(self.type, d)}[form], d

    @property
    def type(self) -> str:
        current = acc.current_accelerator()
        assert current is not None
        return current.type

    # Setup ------------------------------------------------------------------

    @initialize(target=streams)
    def the_default_streams(self) -> Any:
        from hypothesis.stateful import multiple
        return multiple(*self.defaults)

    # Devices ----------------------------------------------------------------

    @rule(data=st.data())
    def set_device_index(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(-3, self.count + 2))
        if index >= self.count:
            with pytest.raises(acc.DeviceIndexError):
                acc.set_device_index(index)
            return
        ok, _ = self.call(acc.set_device_index, index)
        if ok and index >= 0:
            self.device = index

    @rule(data=st.data())
    def device_index_context(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, self.count - 1))
        guard = acc.device_index(index)
        ok, _ = self.call(guard.__enter__)
        if not ok:
            return
        assert acc.current_device_index() == index
        self.call(lambda: guard.__exit__(None, None, None))
        if acc.current_device_index() != self.device:
            acc.set_device_index(self.device)

    @rule(data=st.data())
    def synchronize(self, data: st.DataObject) -> None:
        arg, _ = self.device_arg(data)
        self.call(acc.synchronize, arg)

    @rule(data=st.data())
    def memory_and_properties(self, data: st.DataObject) -> None:
        arg, d = self.device_arg(data)
        ok, info = self.call(acc.get_memory_info, arg)
        if ok:
            free, total = info
            assert 0 <= free <= total
        ok, props = self.call(acc.get_device_properties, arg)
        if ok:
            assert props.index == d and props.type == self.type

    @rule(case=st.sampled_from(test_bad_input.CASES))
    def bad_input(self, case: tuple) -> None:
        name, call, cls, pattern, two = case
        if two and self.count < 2:
            return
        with pytest.raises(cls, match=pattern):
            call()

    # Streams ----------------------------------------------------------------

    @rule(target=streams, data=st.data())
    def new_stream(self, data: st.DataObject) -> Any:
        arg, d = self.device_arg(data)
        priority = data.draw(st.sampled_from([0, -1, -5, -100]))
        ok, stream = self.call(acc.Stream, arg, priority=priority)
        if not ok:
            return self.defaults[d]
        assert stream.device_index == d
        return stream

    @rule(target=streams, data=st.data())
    def current_stream(self, data: st.DataObject) -> Any:
        arg, d = self.device_arg(data)
        stream = acc.current_stream(arg)
        assert stream is self.current[d]
        return stream

    @rule(target=streams, stream=streams)
    def from_handle(self, stream: acc.Stream) -> Any:
        ok, wrapped = self.call(acc.Stream.from_handle, stream.handle,
                                stream.device_index)
        if not ok:
            return stream
        assert wrapped == stream
        return wrapped

    @rule(stream=streams)
    def set_stream(self, stream: acc.Stream) -> None:
        ok, _ = self.call(acc.set_stream, stream)
        if ok:
            self.device = stream.device_index
            self.current[stream.device_index] = stream

    @precondition(lambda self: len(self.entered) < 6)
    @rule(stream=streams)
    def enter(self, stream: acc.Stream) -> None:
        d = stream.device_index
        if d == self.device and self.current[d] == stream:
            saved = None  # re-entering the current stream changes nothing
        else:
            saved = (self.device, self.current[d])
        ok, result = self.call(stream.__enter__)
        if not ok:
            return
        assert result is stream
        self.entered.append((stream, saved))
        if saved is not None:
            self.device = d
            self.current[d] = stream

    @precondition(lambda self: self.entered)
    @rule()
    def exit(self) -> None:
        stream, saved = self.entered.pop()
        ok, _ = self.call(stream.__exit__, None, None, None)
        if saved is None:
            return
        device, previous = saved
        self.current[previous.device_index] = previous
        if not ok:
            # The stream was restored; switching the device back failed.
            return
        if stream.device_index != device:
            self.device = device

    @rule(stream=streams, ms=st.sampled_from([0, 0.5, 2]))
    def stream_work(self, stream: acc.Stream, ms: float) -> None:
        if not self.driver.can_enqueue(stream):
            return
        self.driver.enqueue_sleep(stream, ms)

    @rule(stream=streams)
    def stream_query(self, stream: acc.Stream) -> None:
        ok, done = self.call(stream.query)
        if ok:
            assert done in (True, False)

    @rule(stream=streams)
    def stream_synchronize(self, stream: acc.Stream) -> None:
        self.call(stream.synchronize)

    @rule(a=streams, b=streams)
    def wait_stream(self, a: acc.Stream, b: acc.Stream) -> None:
        self.call(a.wait_stream, b)

    # Events -----------------------------------------------------------------

    @rule(target=events, timing=st.booleans(), blocking=st.booleans())
    def new_event(self, timing: bool, blocking: bool) -> Any:
        event = acc.Event(enable_timing=timing, blocking=blocking)
        assert event.device_index is None and event.handle == 0
        return event

    @rule(event=events, stream=streams)
    def record(self, event: acc.Event, stream: acc.Stream) -> None:
        before = event.device_index
        if before is not None and before != stream.device_index:
            with pytest.raises(ValueError, match="does not match"):
                event.record(stream)
            return
        ok, _ = self.call(event.record, stream)
        if ok:
            assert event.device_index == stream.device_index
            assert event.handle != 0
        else:
            assert event.device_index in (before, stream.device_index)

    @rule(event=events)
    def event_query_synchronize(self, event: acc.Event) -> None:
        ok, done = self.call(event.query)
        if ok:
            assert done in (True, False)
        ok, _ = self.call(event.synchronize)
        if ok and self.fault is None:
            assert event.query() is True

    @rule(event=events, stream=streams)
    def wait_event(self, event: acc.Event, stream: acc.Stream) -> None:
        self.call(stream.wait_event, event)

    @rule(event=events)
    def event_wait_current(self, event: acc.Event) -> None:
        self.call(event.wait)

    @rule(a=events, b=events)
    def elapsed_time(self, a: acc.Event, b: acc.Event) -> None:
        if not (a.enable_timing and b.enable_timing):
            with pytest.raises(ValueError, match="enable_timing"):
                a.elapsed_time(b)
        elif a.device_index is None or b.device_index is None:
            with pytest.raises(ValueError, match="recorded"):
                a.elapsed_time(b)
        elif a.device_index != b.device_index:
            with pytest.raises(ValueError, match="same device"):
                a.elapsed_time(b)
        else:
            try:
                ms = a.elapsed_time(b)
            except acc.AcceleratorError:
                pass  # not complete yet, or a record that failed
            else:
                assert isinstance(ms, float)

    @rule()
    def empty_cache(self) -> None:
        self.call(acc.empty_cache)

    @rule()
    def collect(self) -> None:
        gc.collect()

    # Faults -----------------------------------------------------------------

    @rule(data=st.data(), oom=st.booleans())
    def with_a_fault(self, data: st.DataObject, oom: bool) -> None:
        """A call with a fault injected: either a call site of test_faults'
        table, or one of the rules here with a fault at a random site."""
        if not FAULT_APIS:
            return
        number, _, cls = test_faults.expected(
            self.driver, "oom" if oom else "unknown")
        if data.draw(st.booleans()) and SITES:
            site = data.draw(st.sampled_from(SITES))
            state = test_faults.preparer(site)()
            self.device = acc.current_device_index()  # prepare may switch
            api, nth = site.api, site.nth

            def run() -> None:
                self.call(test_faults.ACTIONS[site.action], state)
        else:
            api = data.draw(st.sampled_from(FAULT_APIS))
            name = data.draw(st.sampled_from(FAULTY_RULES))
            nth = data.draw(st.integers(1, 2))

            def run() -> None:
                self.run_rule(name, data)
        acc.empty_cache()  # so that creating means a driver call
        self.fault = (api, number, cls)
        self.driver.fail(api, nth, number)
        try:
            run()
        finally:
            self.driver.clear_faults()
            self.fault = None

    def run_rule(self, name: str, data: st.DataObject) -> None:
        current = self.current[self.device]
        if name == "wait_stream":
            self.wait_stream(data.draw(st.sampled_from(self.defaults)),
                             current)
        elif name in ("record", "wait_event"):
            event = acc.Event(enable_timing=data.draw(st.booleans()))
            getattr(self, name)(event, current)
        elif name == "event_query_synchronize":
            event = acc.Event()
            self.record(event, current)
            self.event_query_synchronize(event)
        elif name in ("stream_query", "stream_synchronize", "set_stream",
                      "from_handle"):
            getattr(self, name)(self.new_stream(data))
        elif name == "enter":
            if len(self.entered) < 6:
                self.enter(self.new_stream(data))
        elif name in ("synchronize", "memory_and_properties",
                      "set_device_index", "new_stream"):
            getattr(self, name)(data)
        else:
            getattr(self, name)()

    # Invariants -------------------------------------------------------------

    @invariant()
    def current_state_matches_the_model(self) -> None:
        Model.steps += 1
        assert acc.current_device_index() == self.device
        for d in range(self.count):
            assert acc.current_stream(d) is self.current[d], d
        assert acc.current_stream() is self.current[self.device]

    def teardown(self) -> None:
        self.driver.clear_faults()
        while self.entered:
            stream, _ = self.entered.pop()
            stream.__exit__(None, None, None)
        for default in self.defaults:
            acc.set_stream(default)
        acc.set_device_index(0)


def test_fuzz_the_api_against_the_model(driver) -> None:
    # What is made once per process (contexts) is made before the count.
    for d in range(acc.device_count()):
        acc.Stream(d).record_event().synchronize()
        acc.set_device_index(d)
        acc.get_memory_info(d)
    acc.set_device_index(0)
    test_faults.settle()
    baseline = driver.live_all()
    Model.steps = Model.faults_raised = 0
    run_state_machine_as_test(Model, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        derandomize=DERANDOMIZE, database=None, print_blob=True,
        suppress_health_check=list(HealthCheck)))
    assert Model.steps >= min(MIN_STEPS, EXAMPLES * STEPS // 2), Model.steps
    print(f"fuzz: {Model.steps} steps in {EXAMPLES} examples, "
          f"{Model.faults_raised} injected faults raised")
    assert Model.faults_raised >= 10, "the faults missed every call"
    # Every driver object the run made is given back.
    gc.collect()
    test_faults.settle()
    after = driver.live_all()
    for kind, count in baseline.items():
        if kind in driver.pooled_kinds:
            # Kept for reuse by the backend (test_leaks checks they are
            # reused); bounded, not one per step.
            assert after[kind] <= count + 256, (kind, count, after[kind])
        else:
            assert after[kind] == count, (kind, count, after[kind])
