"""Streams: torch.Stream semantics, asynchronous work, interop, lifetime."""
from __future__ import annotations

import gc
import pickle
import threading
import weakref

import pytest

import accelerator as acc


def test_new_stream_attributes(accel_type: str, facts) -> None:
    stream = acc.Stream()
    assert stream.device == acc.device(accel_type, 0)
    assert stream.device_index == 0
    assert stream.device_type == facts.torch_device_type
    assert stream.priority == 0
    assert isinstance(stream.handle, int) and stream.handle != 0
    assert stream != acc.current_stream()
    assert f"{accel_type}:0" in repr(stream)
    assert acc.Stream(1).device_index == 1
    assert acc.Stream(f"{accel_type}:1").device_index == 1


def test_torch_stream_id_form_gives_the_same_stream(facts) -> None:
    for stream in (acc.Stream(), acc.Stream(1), acc.current_stream(),
                   acc.current_stream(1)):
        assert stream.stream_id == stream.handle
        same = acc.Stream(stream_id=stream.stream_id,
                          device_index=stream.device_index,
                          device_type=stream.device_type)
        assert same == stream and not (same != stream)
        assert hash(same) == hash(stream)
        assert same.device_index == stream.device_index
    # The default stream is the very object current_stream() gives.
    default = acc.current_stream()
    if default == acc.current_stream(0):
        assert acc.Stream(stream_id=default.stream_id, device_index=0,
                          device_type=facts.torch_device_type) is default


def test_torch_stream_id_form_checks_its_arguments(facts) -> None:
    s = acc.Stream()
    with pytest.raises(TypeError, match="stream_id, device_index and "
                       "device_type together"):
        acc.Stream(stream_id=s.stream_id, device_index=0)
    with pytest.raises(TypeError, match="together"):
        acc.Stream(0, stream_id=s.stream_id, device_index=0,
                   device_type=facts.torch_device_type)
    with pytest.raises(TypeError, match="three ints"):
        acc.Stream(stream_id=str(s.stream_id), device_index=0,
                   device_type=facts.torch_device_type)
    with pytest.raises(ValueError, match="not the current accelerator"):
        acc.Stream(stream_id=s.stream_id, device_index=0,
                   device_type=facts.torch_device_type + 1)
    with pytest.raises(acc.DeviceIndexError):
        acc.Stream(stream_id=s.stream_id, device_index=7,
                   device_type=facts.torch_device_type)


def test_torch_handle_names_say_what_to_use() -> None:
    s = acc.Stream()
    for name in ("cuda_stream", "native_handle"):
        with pytest.raises(AttributeError, match=f"'{name}'.*Stream.handle"):
            getattr(s, name)
        assert not hasattr(s, name)
    with pytest.raises(AttributeError) as info:
        s.no_such_attribute  # noqa: B018
    assert "Stream.handle" not in str(info.value)


def test_stream_on_the_current_device() -> None:
    acc.set_device_index(1)
    assert acc.Stream().device_index == 1


def test_priorities_map_onto_the_driver_range(driver) -> None:
    high = acc.Stream(priority=-1)
    if driver.has("priorities"):
        assert high.priority < acc.Stream().priority
    else:
        # Accepted, and every stream runs at the one priority there is.
        assert high.priority == acc.Stream().priority == 0
    clamped = acc.Stream(priority=-1000)
    assert clamped.priority <= high.priority
    assert acc.Stream(priority=-10**30).priority == clamped.priority
    with pytest.raises(ValueError, match="priority"):
        acc.Stream(priority=1)
    with pytest.raises(TypeError, match="priority"):
        acc.Stream(priority=0.5)
    with pytest.raises(TypeError, match="priority"):
        acc.Stream(priority=True)
    with pytest.raises(TypeError):
        acc.Stream(0, -1)  # type: ignore[misc]  (priority is keyword-only)


def test_stream_rejects_bad_devices(device_count: int) -> None:
    with pytest.raises(acc.DeviceIndexError):
        acc.Stream(device_count)
    with pytest.raises(ValueError, match="doesn't match"):
        acc.Stream("cpu")
    with pytest.raises(TypeError):
        acc.Stream(object())


def test_query_and_synchronize_follow_queued_work(driver) -> None:
    stream = acc.Stream()
    assert stream.query() is True
    with driver.gate(stream) as gate:
        if driver.query_sees_foreign_work:
            assert stream.query() is False
        stream.record_event()  # our own work behind it: seen everywhere
        assert stream.query() is False
        gate.open_soon()
        stream.synchronize()
        assert gate.is_open, "synchronize returned before the work ran"
    assert stream.query() is True


def test_query_never_waits(driver) -> None:
    """query() asks without blocking (Level Zero: the event of the stream's
    last command), on a busy stream and on an idle one."""
    query = driver.functions["query"]
    blocking = driver.functions["event_synchronize"]
    stream = acc.Stream()
    driver.enqueue_sleep(stream, 300)
    stream.record_event()
    for expected in (False, True):
        if expected:
            stream.synchronize()
        asked, waited = driver.calls(query), driver.calls(blocking)
        assert stream.query() is expected
        assert driver.calls(query) > asked
        assert driver.calls(blocking) == waited, "query() waited"


def test_default_stream_work_is_seen_by_query(driver) -> None:
    acc.set_device_index(0)  # the default stream lives in the context
    default = acc.current_stream()
    with driver.gate(default) as gate:
        if driver.query_sees_foreign_work:
            assert default.query() is False
        default.record_event()
        assert default.query() is False
        gate.open()
        default.synchronize()
    assert default.query() is True


def test_wait_event_orders_work_across_streams(driver) -> None:
    producer, consumer = acc.Stream(0), acc.Stream(1)
    with driver.gate(producer) as gate:
        event = producer.record_event()
        consumer.wait_event(event)
        assert consumer.query() is False
        gate.open()
        consumer.synchronize()
    assert event.query() is True
    assert producer.query() is True


def test_wait_stream_orders_work_across_devices(driver) -> None:
    first, second = acc.Stream(0), acc.Stream(1)
    with driver.gate(first) as gate:
        second.wait_stream(first)
        assert second.query() is False
        gate.open()
        second.synchronize()
    assert first.query() is True


def test_record_event_returns_the_event(accel_type: str) -> None:
    stream = acc.Stream()
    event = stream.record_event()
    assert isinstance(event, acc.Event)
    assert event.device == acc.device(accel_type, 0)
    mine = acc.Event()
    assert stream.record_event(mine) is mine
    assert stream.record_event(event=mine) is mine
    assert stream.record_event(None) is not mine
    with pytest.raises(TypeError, match="Event"):
        stream.record_event(stream)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Event"):
        stream.wait_event(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Stream"):
        stream.wait_stream(None)  # type: ignore[arg-type]


def test_equality_and_hash() -> None:
    stream = acc.Stream()
    other = acc.Stream()
    alias = acc.Stream.from_handle(stream.handle, 0)
    assert stream == alias and not stream != alias
    assert hash(stream) == hash(alias)
    assert stream != other
    assert len({stream, alias, other}) == 2
    for value in (42, "hello", 3.14, None, object()):
        assert (stream == value) is False
        assert (stream != value) is True
    assert stream in [1, "a", stream]
    for compare in (lambda: stream < other, lambda: stream <= other,
                    lambda: stream > other, lambda: stream >= other):
        with pytest.raises(TypeError):
            compare()


def test_current_stream_is_the_same_object(accel_type: str) -> None:
    assert acc.current_stream() is acc.current_stream()
    assert acc.current_stream(1) is acc.current_stream(1)
    assert acc.current_stream(1) is acc.current_stream(f"{accel_type}:1")
    assert acc.current_stream(0) is not acc.current_stream(1)
    stream = acc.Stream()
    acc.set_stream(stream)
    assert acc.current_stream() is stream
    assert acc.current_stream(0) is stream


def test_current_stream_rejects_bad_devices(device_count: int) -> None:
    with pytest.raises(RuntimeError, match="out of index range"):
        acc.current_stream(device_count)
    with pytest.raises(acc.DeviceIndexError):
        acc.current_stream(-1)
    with pytest.raises(ValueError, match="doesn't match the current"):
        acc.current_stream("cpu")


def test_set_stream_switches_the_device() -> None:
    stream = acc.Stream(1)
    acc.set_stream(stream)
    assert acc.current_device_index() == 1
    assert acc.current_stream() is stream
    assert acc.current_stream(0) is not stream
    with pytest.raises(TypeError, match="Stream"):
        acc.set_stream(1)  # type: ignore[arg-type]


def test_current_stream_is_per_thread(default_streams) -> None:
    stream = acc.Stream()
    acc.set_stream(stream)
    seen = []
    thread = threading.Thread(
        target=lambda: seen.append(acc.current_stream()))
    thread.start()
    thread.join()
    assert seen[0] is default_streams[0]
    assert acc.current_stream() is stream


def test_with_stream_makes_it_current_and_restores() -> None:
    previous = acc.current_stream()
    with acc.Stream() as stream:
        assert acc.current_stream() is stream
    assert acc.current_stream() is previous


def test_with_stream_reentrance_and_nesting() -> None:
    s0, s1 = acc.Stream(), acc.Stream()
    previous = acc.current_stream()
    with s0, s0:
        assert acc.current_stream() == s0
    assert acc.current_stream() == previous
    with s0:
        assert acc.current_stream() == s0
        with s1:
            assert acc.current_stream() == s1
            with s0:
                assert acc.current_stream() == s0
            assert acc.current_stream() == s1
        assert acc.current_stream() == s0
    assert acc.current_stream() == previous


def test_with_stream_across_devices() -> None:
    default0, default1 = acc.current_stream(0), acc.current_stream(1)
    other = acc.Stream(1)
    with other:
        assert acc.current_device_index() == 1
        assert acc.current_stream() is other
        assert acc.current_stream(0) is default0
    assert acc.current_device_index() == 0
    assert acc.current_stream(1) is default1
    with pytest.raises(ZeroDivisionError):
        with other:
            1 / 0
    assert acc.current_device_index() == 0
    assert acc.current_stream(1) is default1


def test_with_stream_exit_restores_exactly_what_docs_say(
    default_streams: list[acc.Stream], two_devices: None,
) -> None:
    """docs/semantics.rst, 'with stream', as torch: the stream of s's
    device always; the device only if the enter switched it."""
    default0, default1 = default_streams[:2]
    # No device switch at the enter: the device the block chose stays.
    acc.set_device_index(0)
    with acc.Stream(0):
        acc.set_device_index(1)
    assert acc.current_device_index() == 1
    assert acc.current_stream(0) is default0
    # The same when the block moves by set_stream to another device, and
    # that device's new stream stays current.
    acc.set_device_index(0)
    other = acc.Stream(1)
    with acc.Stream(0):
        acc.set_stream(other)
    assert acc.current_device_index() == 1
    assert acc.current_stream(1) is other
    assert acc.current_stream(0) is default0
    acc.set_stream(default1)
    # A stream the block made current on s's own device is replaced by
    # the one current at the enter.
    acc.set_device_index(0)
    s, t = acc.Stream(0), acc.Stream(0)
    with s:
        acc.set_stream(t)
    assert acc.current_stream(0) is default0
    # The enter switched device: the exit switches back, whatever the
    # block did; a stream it made current on another device stays.
    acc.set_device_index(0)
    with acc.Stream(1):
        acc.set_device_index(0)
        t = acc.Stream(0)
        acc.set_stream(t)
    assert acc.current_device_index() == 0
    assert acc.current_stream(0) is t
    assert acc.current_stream(1) is default1
    acc.set_stream(default0)
    # device_index around the stream restores the device in every case.
    with acc.device_index(0), acc.Stream(0):
        acc.set_device_index(1)
    assert acc.current_device_index() == 0


def test_two_threads_entering_the_same_stream() -> None:
    shared = acc.Stream()
    barrier = threading.Barrier(2)
    errors: list[str] = []

    def body(own_device: int) -> None:
        acc.set_device_index(own_device)
        mine = acc.Stream(0)
        acc.set_stream(mine)
        acc.set_device_index(own_device)
        for _ in range(50):
            with shared:
                barrier.wait(timeout=10)
                if acc.current_stream(0) != shared:
                    errors.append("not current inside")
            if acc.current_stream(0) is not mine:
                errors.append("stream not restored")
            if acc.current_device_index() != own_device:
                errors.append("device not restored")

    threads = [threading.Thread(target=body, args=(d,)) for d in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_exit_without_enter() -> None:
    with pytest.raises(RuntimeError, match="without a matching"):
        acc.Stream().__exit__(None, None, None)


def test_cuda_stream_protocol(facts) -> None:
    stream = acc.Stream()
    if not facts.has("cuda_stream_protocol"):
        with pytest.raises(TypeError, match="only defined for CUDA streams, "
                           f"not for {facts.display_type} streams$"):
            stream.__cuda_stream__()
        return
    assert stream.__cuda_stream__() == (0, stream.handle)
    assert acc.current_stream().__cuda_stream__() == (0, 0)


class ForeignStream:
    """A stream of another library, speaking the CUDA stream protocol."""

    def __init__(self, handle: int, version: int = 0) -> None:
        self.handle, self.version = handle, version

    def __cuda_stream__(self) -> tuple[int, int]:
        return (self.version, self.handle)


def test_from_handle_wraps_without_owning(driver) -> None:
    owner = acc.Stream()
    gc.collect()  # streams left in garbage cycles by earlier tests
    live = driver.live("stream")
    wrapped = acc.Stream.from_handle(owner.handle)
    assert wrapped == owner and wrapped is not owner
    del wrapped
    gc.collect()
    assert driver.live("stream") == live
    assert owner.query() is True
    if driver.has("cuda_stream_protocol"):
        foreign = ForeignStream(owner.handle)
        wrapped = acc.Stream.from_handle(foreign)
        assert wrapped == owner
        ref = weakref.ref(foreign)
        del foreign
        gc.collect()
        assert ref() is not None, "the wrapper keeps the foreign owner alive"
        del wrapped
        gc.collect()
        assert ref() is None
        with pytest.raises(ValueError, match="protocol version"):
            acc.Stream.from_handle(ForeignStream(owner.handle, 1))


def test_from_handle_of_the_default_stream_is_the_default() -> None:
    default = acc.current_stream(1)
    assert acc.Stream.from_handle(default.handle, 1) is default


def test_from_handle_of_zero_follows_the_backend(driver) -> None:
    """0 is CUDA's legacy default stream; elsewhere a NULL handle is no
    stream at all and is refused at the call, not at first use."""
    if driver.null_stream_handle:
        wrapped = acc.Stream.from_handle(0, 0)
        assert wrapped.handle == 0
        assert wrapped.query() is True
        wrapped.synchronize()
    else:
        with pytest.raises(ValueError, match=r"handle of 0 \(NULL\) is not "
                           r"a valid \w+ stream"):
            acc.Stream.from_handle(0, 0)
        with pytest.raises(ValueError, match="not a valid"):
            acc.Stream.from_handle(0)


def test_from_handle_rejects_bad_handles() -> None:
    with pytest.raises(TypeError, match="__cuda_stream__"):
        acc.Stream.from_handle("0x1234")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        acc.Stream.from_handle(-5)
    with pytest.raises(TypeError):
        acc.Stream.from_handle(True)  # type: ignore[arg-type]


def test_dropping_a_busy_stream_is_safe(driver) -> None:
    gc.collect()  # streams left in garbage cycles by earlier tests
    acc.synchronize()
    acc.empty_cache()
    live = driver.live("stream")
    stream = acc.Stream()
    driver.enqueue_sleep(stream, 50)
    assert driver.live("stream") == live + 1
    del stream
    gc.collect()
    acc.synchronize()
    acc.empty_cache()
    assert driver.live("stream") == live


def test_a_dropped_busy_stream_whose_end_was_not_marked_is_synchronized(
        driver, facts) -> None:
    """A destroyed stream's driver stream goes once its work ends, which a
    mark appended at the destroy tells.  When that append fails, the work
    is still the device's: synchronize() waits for it, and the driver
    stream is gone when synchronize() returns."""
    api = facts.functions.get("stream_drop_mark")
    if not api:
        pytest.skip("the backend marks no end of a dropped stream's work")
    gc.collect()
    acc.synchronize()
    acc.empty_cache()
    live = driver.live("stream")
    stream = acc.Stream()
    with driver.stall(stream) as gate:
        done = acc.Event()
        done.record(stream)
        del stream
        gc.collect()
        calls = driver.calls(api)
        driver.fail(api, 1, driver.unknown_error[0])
        try:
            acc.empty_cache()  # destroys the pooled stream
        finally:
            driver.clear_faults()
        assert driver.calls(api) > calls, "the destroy marked nothing"
        assert not done.query()
        # Opened from a timer: a synchronize() that waits for it returns.
        gate.open_soon(0.2)
        acc.synchronize()
        assert done.query(), "synchronize() returned before the work of " \
            "a dropped stream ended"
    assert driver.live("stream") == live, "the dropped stream's driver " \
        "stream outlived synchronize()"


def test_a_current_stream_outlives_its_object(driver,
                                             default_streams) -> None:
    # Work left by earlier tests first: a pooled stream that is still busy
    # is destroyed by empty_cache() only once its work is done.
    acc.synchronize()
    acc.empty_cache()
    live = driver.live("stream")
    stream = acc.Stream()
    handle = stream.handle
    acc.set_stream(stream)
    del stream
    gc.collect()
    acc.empty_cache()
    assert driver.live("stream") == live + 1
    assert acc.current_stream().handle == handle
    acc.set_stream(default_streams[0])
    acc.synchronize()
    acc.empty_cache()
    assert driver.live("stream") == live


def test_dropped_streams_are_reused_without_driver_calls(driver) -> None:
    acc.empty_cache()
    stream = acc.Stream(priority=-1)
    handle = stream.handle
    del stream
    calls = driver.calls()
    again = acc.Stream(priority=-1)
    assert driver.calls() == calls, "a pooled stream was not reused"
    assert again.handle == handle
    if driver.has("priorities"):
        assert again.priority < 0
        other = acc.Stream()  # another priority: a new driver stream
        assert other.handle != handle
        assert driver.calls() > calls


def test_streams_cannot_be_pickled_but_can_be_weakly_referenced() -> None:
    stream = acc.Stream()
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(stream)
    assert weakref.ref(stream)() is stream


def test_subclasses_are_allowed() -> None:
    class Mine(acc.Stream):
        pass

    stream = Mine()
    assert isinstance(stream, acc.Stream)
    acc.set_stream(stream)
    assert acc.current_stream() is stream


def test_entering_a_stream_current_on_another_device_switches_to_it() -> None:
    other = acc.Stream(1)
    acc.set_stream(other)
    acc.set_device_index(0)
    with other:
        assert acc.current_device_index() == 1
        assert acc.current_stream() is other
    assert acc.current_device_index() == 0
    assert acc.current_stream(1) is other


def test_exits_out_of_order_are_refused() -> None:
    first, second = acc.Stream(), acc.Stream()
    previous = acc.current_stream()
    first.__enter__()
    second.__enter__()
    with pytest.raises(RuntimeError, match="innermost"):
        first.__exit__(None, None, None)
    assert acc.current_stream() is second
    second.__exit__(None, None, None)
    first.__exit__(None, None, None)
    assert acc.current_stream() is previous
