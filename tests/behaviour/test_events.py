"""Events: torch.Event semantics, ordering and timing."""
from __future__ import annotations

import pickle
import sys

import pytest

import accelerator as acc


def test_new_event_defaults(accel_type: str) -> None:
    event = acc.Event()
    assert event.enable_timing is False and event.blocking is False
    assert event.handle == 0 and event.event_id == 0
    assert event.device_index is None
    assert event.device == acc.device(accel_type)
    assert "enable_timing=False" in repr(event)


def test_torch_event_forms(accel_type: str, facts) -> None:
    # torch.Event(device, enable_timing=...): only the device's type
    # matters; the event's device comes from the stream it is recorded on.
    event = acc.Event(accel_type, enable_timing=True)
    assert event.enable_timing and event.device_index is None
    assert event.device_type == facts.torch_device_type
    event.record(acc.Stream(1))
    assert event.device_index == 1
    assert acc.Event(acc.device(accel_type, 1)).device_index is None
    with pytest.raises(ValueError, match="doesn't match"):
        acc.Event("cpu")
    with pytest.raises(acc.DeviceIndexError):
        acc.Event(7)


def test_unrecorded_event_is_complete_and_waits_for_nothing() -> None:
    event = acc.Event()
    assert event.query() is True
    event.synchronize()
    event.wait()
    acc.Stream().wait_event(event)


def test_event_flags_are_checked() -> None:
    with pytest.raises(ValueError, match="interprocess event cannot"):
        acc.Event(interprocess=True, enable_timing=True)
    with pytest.raises(TypeError, match="enable_timing must be a bool"):
        acc.Event(enable_timing=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acc.Event(True)  # type: ignore[misc]  (keyword-only)


def test_record_query_synchronize(driver, accel_type: str) -> None:
    stream = acc.Stream(1)
    event = acc.Event()
    with driver.gate(stream) as gate:
        event.record(stream)
        assert event.handle != 0
        assert event.device == acc.device(accel_type, 1)
        assert event.query() is False
        gate.open_soon()
        event.synchronize()
        assert gate.is_open, "synchronize returned before the work ran"
    assert event.query() is True
    assert stream.query() is True


def test_record_defaults_to_the_current_stream(driver) -> None:
    stream = acc.Stream()
    event = acc.Event()
    with stream, driver.gate(stream) as gate:
        event.record()
        assert event.query() is False
        gate.open()
    stream.synchronize()
    assert event.query() is True


def test_wait_orders_later_work(driver) -> None:
    producer, consumer = acc.Stream(), acc.Stream()
    with driver.gate(producer) as gate:
        event = acc.Event()
        event.record(producer)
        event.wait(consumer)
        assert consumer.query() is False
        gate.open()
        consumer.synchronize()
    assert event.query() is True


def test_rerecording_on_another_device_is_an_error() -> None:
    event = acc.Event()
    event.record(acc.Stream(0))
    with pytest.raises(ValueError, match="does not match recording "
                       "stream's device index 1"):
        event.record(acc.Stream(1))
    event.record(acc.Stream(0))


def test_elapsed_time_checks_like_torch() -> None:
    plain_a, plain_b = acc.Event(), acc.Event()
    with pytest.raises(ValueError, match="Both events must be created with "
                       "argument 'enable_timing=True'"):
        plain_a.elapsed_time(plain_b)
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    with pytest.raises(ValueError, match="Both events must be recorded "
                       "before calculating elapsed time"):
        start.elapsed_time(end)
    with pytest.raises(TypeError, match="Event"):
        start.elapsed_time(None)  # type: ignore[arg-type]


def test_elapsed_time_of_unfinished_work_is_an_error(driver) -> None:
    stream = acc.Stream()
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record(stream)
    with driver.gate(stream):
        end.record(stream)
        with pytest.raises(acc.AcceleratorError, match="must be completed"):
            start.elapsed_time(end)
    end.synchronize()


def test_elapsed_time_measures_the_work(driver) -> None:
    stream = acc.Stream()
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record(stream)
    driver.enqueue_sleep(stream, 50)
    end.record(stream)
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float)
    assert 45 <= elapsed < 1000


def test_elapsed_time_of_a_reversed_pair_is_negative(driver) -> None:
    """end.elapsed_time(start) is minus start.elapsed_time(end), as in
    torch and CUDA; also for two streams whose records complete in the
    reverse of the order they were made."""
    stream = acc.Stream()
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record(stream)
    driver.enqueue_sleep(stream, 30)
    end.record(stream)
    end.synchronize()
    forward = start.elapsed_time(end)
    assert 25 <= forward < 1000
    assert end.elapsed_time(start) == -forward

    busy, idle = acc.Stream(), acc.Stream()
    first, second = acc.Event(enable_timing=True), acc.Event(
        enable_timing=True)
    # 200 ms of work: the host may be descheduled for a while between
    # queueing it and recording `second` (a loaded machine took 16 ms)
    # and the pair must still come out reversed by well over 25 ms.
    driver.enqueue_sleep(busy, 200)
    first.record(busy)   # completes after the 200 ms of work
    second.record(idle)  # completes at once
    first.synchronize()
    second.synchronize()
    assert -5000 < first.elapsed_time(second) <= -25
    assert second.elapsed_time(first) == -first.elapsed_time(second)


def test_blocking_events_block(driver) -> None:
    if not driver.has("blocking_sync"):
        pytest.skip(driver.lacks["blocking_sync"])
    stream = acc.Stream()
    event = acc.Event(blocking=True)
    assert event.blocking is True
    before = driver.blocking_syncs()
    driver.enqueue_sleep(stream, 20)
    event.record(stream)
    event.synchronize()
    assert driver.blocking_syncs() == before + 1
    spinning = acc.Event()
    spinning.record(stream)
    spinning.synchronize()
    assert driver.blocking_syncs() == before + 1


def test_record_rejects_non_streams() -> None:
    with pytest.raises(TypeError, match="Stream"):
        acc.Event().record(0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Stream"):
        acc.Event().wait("stream")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acc.Event().record(acc.Stream(), acc.Stream())  # type: ignore


def test_events_are_released(driver) -> None:
    def one_round() -> None:
        events = [acc.Event() for _ in range(5)]
        for event in events:
            event.record()
        del events, event
        acc.synchronize()
        acc.empty_cache()

    acc.synchronize()
    acc.empty_cache()
    before = driver.live("event")
    one_round()
    # A backend may keep signalled events in its own pools for reuse
    # (pooled_kinds): the count must stay flat, and otherwise go back.
    settled = driver.live("event")
    for _ in range(5):
        one_round()
        assert driver.live("event") <= settled
    if "event" not in driver.pooled_kinds:
        assert settled == before


def test_dropped_events_are_reused(driver) -> None:
    if not driver.has("driver_events"):
        pytest.skip(driver.lacks["driver_events"])
    create = driver.functions["event_create"]
    stream = acc.Stream()
    first = acc.Event()
    first.record(stream)
    del first
    calls = driver.calls(create)
    second = acc.Event()
    second.record(stream)
    assert driver.calls(create) == calls, "a pooled event was not reused"
    second.synchronize()
    assert second.query() is True


def test_a_failed_first_record_leaves_the_event_unrecorded(driver) -> None:
    """Backends are only asked about recorded events: after a first
    record that failed, the dispatcher still answers for the event."""
    stream = acc.Stream()
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    end.record(stream)
    end.synchronize()
    driver.fail(driver.functions["event_record"], 1,
                driver.unknown_error[0])
    with pytest.raises(acc.AcceleratorError):
        start.record(stream)
    assert start.query() is True
    start.synchronize()
    with pytest.raises(ValueError, match="must be recorded"):
        start.elapsed_time(end)
    start.record(stream)
    start.synchronize()
    assert isinstance(end.elapsed_time(start), float)


def test_dropping_a_pending_event_is_safe(driver) -> None:
    """An event dropped while its record is still queued raises nothing
    (not even unraisably), leaves the stream's work running and ordered,
    and is given back once the stream drains: no event leaks, however
    many are dropped."""
    stream = acc.Stream()

    def one_round() -> None:
        with driver.gate(stream) as gate:
            acc.Event().record(stream)  # dropped at once, still pending
            assert stream.query() is False, "the drop waited for the stream"
            later = acc.Event()
            later.record(stream)
            gate.open()
            later.synchronize()
        assert stream.query() is True

    unraisable: list[object] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        one_round()
        acc.empty_cache()
        settled = driver.live("event")
        for _ in range(5):
            one_round()
            acc.empty_cache()
            assert driver.live("event") <= settled, "a dropped event leaked"
    finally:
        sys.unraisablehook = hook
    assert unraisable == []
    assert driver.live("bad_access") == 0


def test_events_cannot_be_pickled() -> None:
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(acc.Event())
