"""PyTorch's own accelerator tests that need no tensors, ported.

From test/test_accelerator.py and the generic stream/event cases of
test/test_cuda.py, with torch.Stream/Event/device replaced by this
package's; each keeps its torch name.
"""
from __future__ import annotations

import pytest

import accelerator as acc


def test_current_accelerator(accel_type: str) -> None:
    assert acc.is_available()
    current = acc.current_accelerator()
    assert current.type == accel_type
    assert current.index is None
    with pytest.raises(ValueError,
                       match="doesn't match the current accelerator"):
        acc.set_device_index("cpu")


@pytest.mark.usefixtures("two_devices")
def test_generic_multi_device_behavior(accel_type: str) -> None:
    orig_device = acc.current_device_index()
    target_device = (orig_device + 1) % acc.device_count()
    acc.set_device_index(target_device)
    assert target_device == acc.current_device_index()
    acc.set_device_index(orig_device)
    assert orig_device == acc.current_device_index()
    s1 = acc.Stream(target_device)
    acc.set_stream(s1)
    assert target_device == acc.current_device_index()
    acc.synchronize(orig_device)
    assert target_device == acc.current_device_index()


def test_generic_stream_behavior() -> None:
    s1, s2 = acc.Stream(), acc.Stream()
    acc.set_stream(s1)
    assert acc.current_stream() == s1
    event = acc.Event()
    acc.set_stream(s2)
    assert acc.current_stream() == s2
    acc.set_stream(s1)
    assert acc.current_stream() == s1
    event.record(s2)
    event.synchronize()
    assert event.query()


def test_current_stream_query() -> None:
    s = acc.current_stream()
    assert acc.current_stream(s.device) == s
    assert acc.current_stream(s.device.index) == s
    assert acc.current_stream(str(s.device)) == s
    with pytest.raises(ValueError,
                       match="doesn't match the current accelerator"):
        acc.current_stream(acc.device("cpu"))


def test_stream_compare_with_non_stream() -> None:
    s = acc.current_stream()
    for other in (42, "hello", 3.14, None, object()):
        assert not (s == other)
        assert s != other
    assert s in [1, "a", s]
    for compare in (lambda: s < s, lambda: s <= s, lambda: s > s,
                    lambda: s >= s):
        with pytest.raises(TypeError):
            compare()
    same = acc.Stream.from_handle(s.handle, s.device_index)
    assert s == same and not (s != same)


@pytest.mark.usefixtures("two_devices")
def test_device_context_manager() -> None:
    prev_device = acc.current_device_index()
    with acc.device_index(None):
        assert acc.current_device_index() == prev_device
    assert acc.current_device_index() == prev_device
    with acc.device_index(0):
        assert acc.current_device_index() == 0
    assert acc.current_device_index() == prev_device


@pytest.mark.usefixtures("two_devices")
def test_multi_device_context_manager() -> None:
    src_device, dst_device = 0, 1
    acc.set_device_index(src_device)
    with acc.device_index(dst_device):
        assert acc.current_device_index() == dst_device
    assert acc.current_device_index() == src_device


def test_stream_context_manager() -> None:
    prev_stream = acc.current_stream()
    with acc.Stream() as s:
        assert acc.current_stream() == s
    assert acc.current_stream() == prev_stream


def test_stream_context_manager_reentrance() -> None:
    prev_stream = acc.current_stream()
    s0, s1 = acc.Stream(), acc.Stream()
    with s0, s0:
        assert acc.current_stream() == s0
    with s0:
        with s1:
            with s0:
                assert acc.current_stream() == s0
            assert acc.current_stream() == s1
        assert acc.current_stream() == s0
    assert acc.current_stream() == prev_stream


@pytest.mark.usefixtures("two_devices")
def test_multi_device_stream_context_manager() -> None:
    src_device, dst_device = 0, 1
    acc.set_device_index(src_device)
    src_prev_stream = acc.current_stream()
    dst_prev_stream = acc.current_stream(dst_device)
    with acc.Stream(dst_device) as dst_stream:
        assert acc.current_device_index() == dst_device
        assert acc.current_stream() == dst_stream
        assert acc.current_stream(src_device) == src_prev_stream
    assert acc.current_device_index() == src_device
    assert acc.current_stream() == src_prev_stream
    assert acc.current_stream(dst_device) == dst_prev_stream


def test_generic_event_behavior() -> None:
    event1, event2 = acc.Event(enable_timing=False), acc.Event()
    with pytest.raises(ValueError, match="Both events must be created with "
                       "argument 'enable_timing=True'"):
        event1.elapsed_time(event2)
    event1, event2 = acc.Event(enable_timing=True), acc.Event(
        enable_timing=True)
    with pytest.raises(ValueError, match="Both events must be recorded "
                       "before calculating elapsed time"):
        event1.elapsed_time(event2)
    event = acc.Event()
    assert event.enable_timing is False


def test_get_memory_info() -> None:
    free_bytes, total_bytes = acc.get_memory_info()
    assert free_bytes >= 0 and total_bytes >= 0


def test_stream_compatibility(device_count: int) -> None:
    s1 = acc.Stream()
    acc.set_stream(s1)
    assert acc.current_stream().handle == s1.handle
    with pytest.raises(RuntimeError,
                       match="Device index value .* is out of index range"):
        acc.current_stream(device_count)


def test_generic_stream_event(accel_type: str) -> None:
    stream = acc.Stream(accel_type)
    assert stream.device_index == acc.current_device_index()
    wrapped = acc.Stream.from_handle(stream.handle, stream.device_index)
    assert wrapped.handle == stream.handle
    assert isinstance(wrapped, acc.Stream)
    assert stream != acc.current_stream()
    event1 = acc.Event(enable_timing=True)
    event2 = acc.Event(enable_timing=True)
    assert event1.event_id == 0
    event1.record(stream)
    event2.record(stream)
    event2.synchronize()
    assert event2.query()
    assert event1.event_id != event2.event_id
    assert event1.elapsed_time(event2) >= 0


def test_events_elapsedtime(driver) -> None:
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    stream = acc.current_stream()
    acc.set_device_index(0)
    start.record()
    driver.enqueue_sleep(stream, 20)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0
