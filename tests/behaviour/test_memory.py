"""Device memory: Buffer, HostBuffer, copies, fills, views, close.

Runs once per backend.  Every test ends with the double's memory checks:
no bad access, guard bytes intact (and, at the end of the module, no live
allocation left).
"""
from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import numpy as np
import pytest

import accelerator as acc

SIZES = [0, 1, 511, 4096, 64 << 20]


def _memory_supported() -> bool:
    try:
        acc.Buffer(0)
    except NotImplementedError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _memory_supported(), reason="the backend has no device memory slots")


def poll_freed_memory() -> None:
    """Let the allocator settle what freed memory waits for, without
    waiting itself (empty_cache would: it synchronizes, as torch's).  An
    empty Buffer: every allocation settles the frees, and this one leaves
    no memory of its own waiting behind an event."""
    acc.Buffer(0).close()


def settle() -> None:
    gc.collect()
    for device in range(acc.device_count()):
        acc.synchronize(device)
    acc.empty_cache()


@pytest.fixture(autouse=True)
def memory_checks(request: pytest.FixtureRequest) -> Iterator[None]:
    """No bad access and no damaged guard bytes, in every test; tests
    that count allocations start with none pending from earlier tests (a
    test without the driver fixture leaves its frees deferred)."""
    double = request.getfixturevalue("driver") \
        if "driver" in request.fixturenames else None
    if double is not None:
        settle()
    yield
    if double is not None:
        settle()
        assert double.live("bad_access") == 0
        assert double.live("guard_damage") == 0


@pytest.fixture(scope="module", autouse=True)
def no_allocation_left() -> Iterator[None]:
    """At the end of the module, every allocation made in it is freed."""
    import fault_actions
    if not fault_actions.SITES:
        yield
        return
    double = fault_actions.make_double()
    settle()
    before = {kind: double.live(kind) for kind in fault_actions.MEMORY_KINDS}
    yield
    settle()
    after = {kind: double.live(kind) for kind in fault_actions.MEMORY_KINDS}
    assert after == before
    assert double.live("bad_access") == 0
    assert double.live("guard_damage") == 0


def test_live_allocations_are_counted(driver) -> None:
    settle()
    before = driver.live("alloc"), driver.live("host_alloc")
    b, h = acc.Buffer(16), acc.HostBuffer(16)
    assert (driver.live("alloc"), driver.live("host_alloc")) == (
        before[0] + 1, before[1] + 1)
    del b, h
    settle()
    assert (driver.live("alloc"), driver.live("host_alloc")) == before


# Round trips -------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_host_device_other_device_host(driver, two_devices,
                                                  size: int) -> None:
    data = os.urandom(size)
    a = acc.Buffer(size, 0)
    b = acc.Buffer(size, 1)
    a.copy_from(data)
    b.copy_from(a)
    out = bytearray(size)
    b.copy_to(out)
    assert out == data
    assert a.nbytes == b.nbytes == size


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_through_host_buffers(driver, size: int) -> None:
    data = np.frombuffer(os.urandom(size), dtype=np.uint8)
    src, dst = acc.HostBuffer(size), acc.HostBuffer(size)
    np.frombuffer(src, dtype=np.uint8)[:] = data
    buf = acc.Buffer(size)
    buf.copy_from(src)
    buf.copy_to(dst)
    buf.stream.synchronize()
    assert bytes(memoryview(dst)) == data.tobytes()


def test_done_when_1_mib_round_trips() -> None:
    """The issue's 'done when' line."""
    data = os.urandom(1 << 20)
    out = bytearray(1 << 20)
    b = acc.Buffer(1 << 20)
    b.copy_from(data)
    b.copy_to(out)
    assert out == data


def test_numpy_and_memoryview_sources() -> None:
    arr = np.arange(1000, dtype=np.int32)
    b = acc.Buffer(arr.nbytes)
    b.copy_from(arr)
    out = np.zeros_like(arr)
    b.copy_to(out)
    assert (out == arr).all()
    b.copy_from(memoryview(bytearray(b"\x05" * arr.nbytes)))
    b.copy_to(memoryview(out))
    assert set(out.view(np.uint8).tolist()) == {5}


def test_numpy_integers_are_sizes_fill_values_and_devices(
        two_devices) -> None:
    """As torch takes them: anything with __index__ but bool."""
    b = acc.Buffer(np.int64(64), device=np.int32(1))
    assert (b.nbytes, b.device) == (64, acc.device(b.device.type, 1))
    b.fill(np.uint8(7))
    h = acc.HostBuffer(np.uint16(64))
    b.copy_to(h)                     # asynchronous with a HostBuffer
    b.stream.synchronize()
    assert bytes(memoryview(h)) == b"\x07" * 64
    assert b[np.int64(8):np.int64(16)].nbytes == 8
    with pytest.raises(TypeError, match="nbytes must be an int, got bool"):
        acc.Buffer(np.True_)
    with pytest.raises(ValueError, match="0..255"):
        b.fill(np.uint64(2**64 - 1))
    b.close()
    h.close()


def test_fill_every_byte() -> None:
    b = acc.Buffer(777)
    b.fill(0xAB)
    out = bytearray(777)
    b.copy_to(out)
    assert out == b"\xab" * 777
    b.fill(0)
    b.copy_to(out)
    assert out == bytes(777)


def test_copy_between_buffers_on_one_device() -> None:
    a, b = acc.Buffer(4096), acc.Buffer(4096)
    a.fill(3)
    b.copy_from(a)
    out = bytearray(4096)
    b.copy_to(out)
    assert out == b"\x03" * 4096
    a.fill(9)
    a.copy_to(b)
    b.copy_to(out)
    assert out == b"\x09" * 4096


# Attributes ----------------------------------------------------------------


def test_attributes(accel_type: str) -> None:
    s = acc.Stream(0)
    b = acc.Buffer(100, 0, stream=s)
    assert b.nbytes == 100 and len(b) == 100
    assert b.device == acc.device(accel_type, 0)
    assert isinstance(b.ptr, int) and b.ptr != 0
    assert b.stream is s
    assert not b.closed and b.owner is None
    assert "Buffer(nbytes=100" in repr(b)
    empty = acc.Buffer(0)
    assert empty.nbytes == 0 and empty.ptr == 0
    assert acc.Buffer(1).stream is acc.current_stream()


def test_default_device_is_current(two_devices) -> None:
    with acc.device_index(1):
        b = acc.Buffer(16)
    assert b.device.index == 1
    assert b.stream is acc.current_stream(1)


def test_host_buffer_protocol() -> None:
    h = acc.HostBuffer(64)
    m = memoryview(h)
    assert not m.readonly and m.nbytes == 64 and len(h) == 64
    m[:4] = b"abcd"
    arr = np.frombuffer(h, dtype=np.uint8)
    assert bytes(arr[:4]) == b"abcd"
    arr[4] = 1
    assert m[4] == 1
    del m, arr
    assert h.ptr != 0 and h.nbytes == 64
    assert memoryview(acc.HostBuffer(0)).nbytes == 0


# Ordering --------------------------------------------------------------------


def test_copy_behind_slow_work_is_not_done(driver) -> None:
    s = acc.Stream(0)
    b = acc.Buffer(4096, stream=s)
    h = acc.HostBuffer(4096)
    memoryview(h)[:] = b"\x01" * 4096
    b.fill(2, stream=s)
    with driver.gate(s) as gate:
        b.copy_to(h, stream=s)
        done = s.record_event()
        # Queued behind work that cannot finish yet: not done, the host
        # side unchanged.
        assert not done.query()
        assert bytes(memoryview(h)) == b"\x01" * 4096
        gate.open()
        done.synchronize()
    assert bytes(memoryview(h)) == b"\x02" * 4096


def test_pageable_copy_to_returns_when_landed(driver) -> None:
    s = acc.Stream(0)
    b = acc.Buffer(64, stream=s)
    b.fill(4, stream=s)
    driver.enqueue_sleep(s, 100)
    out = bytearray(64)
    b.copy_to(out, stream=s)
    assert out == b"\x04" * 64


def test_pageable_copy_from_may_reuse_source_at_once(driver) -> None:
    s = acc.Stream(0)
    b = acc.Buffer(64, stream=s)
    driver.enqueue_sleep(s, 100)
    src = bytearray(b"\x06" * 64)
    b.copy_from(src, stream=s)
    src[:] = b"\x00" * 64  # reused before the copy ran
    out = bytearray(64)
    b.copy_to(out, stream=s)
    assert out == b"\x06" * 64


def pageable_copy_waits(driver) -> tuple[str, ...]:
    if not driver.pageable_copy_waits:
        pytest.skip("the driver's pageable copy call blocks by itself: "
                    "there is no separate wait to fail")
    return driver.pageable_copy_waits


@pytest.mark.parametrize("nbytes", [64, 4096])
def test_pageable_copy_to_whose_wait_fails_has_landed(driver,
                                                      nbytes) -> None:
    """The wait after the copy fails: the call raises, but only once the
    copy has stopped writing the destination, which the caller may free
    at once (a bytearray written after its free corrupted the heap)."""
    for api in pageable_copy_waits(driver):
        s = acc.Stream(0)
        b = acc.Buffer(nbytes, stream=s)
        b.fill(5, stream=s)
        driver.enqueue_sleep(s, 100)
        out = bytearray(nbytes)
        driver.fail(api, 1, driver.unknown_error[0])
        try:
            with pytest.raises(acc.AcceleratorError,
                               match=driver.unknown_error[1]):
                b.copy_to(out, stream=s)
        finally:
            driver.clear_faults()
        assert out == b"\x05" * nbytes, api


def test_pageable_copy_from_whose_wait_fails_has_read(driver) -> None:
    """As above for the source: reused as soon as the call raised."""
    for api in pageable_copy_waits(driver):
        s = acc.Stream(0)
        b = acc.Buffer(64, stream=s)
        driver.enqueue_sleep(s, 100)
        src = bytearray(b"\x09" * 64)
        driver.fail(api, 1, driver.unknown_error[0])
        try:
            with pytest.raises(acc.AcceleratorError,
                               match=driver.unknown_error[1]):
                b.copy_from(src, stream=s)
        finally:
            driver.clear_faults()
        src[:] = b"\x00" * 64  # reused before the copy ran, if it had not
        out = bytearray(64)
        b.copy_to(out, stream=s)
        assert out == b"\x09" * 64, api


def test_ordering_with_events_and_wait_stream(driver) -> None:
    s1, s2 = acc.Stream(0), acc.Stream(0)
    b = acc.Buffer(4096, stream=s1)
    driver.enqueue_sleep(s1, 100)
    b.fill(7, stream=s1)
    e = s1.record_event()
    s2.wait_event(e)
    h = acc.HostBuffer(4096)
    b.copy_to(h, stream=s2)
    s2.synchronize()
    assert bytes(memoryview(h)) == b"\x07" * 4096
    driver.enqueue_sleep(s1, 100)
    b.fill(8, stream=s1)
    s2.wait_stream(s1)
    b.copy_to(h, stream=s2)
    s2.synchronize()
    assert bytes(memoryview(h)) == b"\x08" * 4096


def test_copy_across_devices_waits_for_both_current_streams(
        driver, two_devices) -> None:
    """torch's copy_: ordered after the work on both devices' current
    streams, and later work there waits for it."""
    a = acc.Buffer(4096, 0)
    b = acc.Buffer(4096, 1)
    a.fill(1)
    b.fill(2)
    acc.synchronize(0)
    acc.synchronize(1)
    # Slow work on device 1's current stream, then a write of 5 there.
    driver.enqueue_sleep(acc.current_stream(1), 150)
    b.fill(5)
    a.copy_from(b)  # queued on device 0's current stream
    # Later work on device 1 waits for the copy: this fill must not
    # overtake it.
    b.fill(6)
    out = bytearray(4096)
    a.copy_to(out)
    assert out == b"\x05" * 4096


# Views -------------------------------------------------------------------------


def test_views_share_memory_and_keep_the_parent() -> None:
    b = acc.Buffer(100)
    b.fill(0)
    v = b[10:20]
    assert v.nbytes == 10 and v.ptr == b.ptr + 10 and v.owner is b
    v.fill(1)
    w = v[2:4]
    assert w.owner is b and w.ptr == b.ptr + 12
    w.fill(2)
    out = bytearray(100)
    b.copy_to(out)
    assert out == bytes(10) + b"\1\1\2\2" + b"\1" * 6 + bytes(80)
    del b
    gc.collect()
    v.copy_from(b"x" * 10)  # the parent is still alive
    out = bytearray(10)
    v.copy_to(out)
    assert out == b"x" * 10
    assert len(v[5:]) == 5 and len(v[-3:]) == 3 and len(v[8:2]) == 0


def test_overlapping_copies_are_refused_and_disjoint_views_copy() -> None:
    """torch refuses a copy_ whose sides share memory; the drivers' copies
    are undefined there.  Disjoint views of one allocation copy; a copy
    onto itself is nothing to do."""
    b = acc.Buffer(64)
    b.copy_from(bytes(range(64)))
    for dst, src in ((b[0:32], b[16:48]), (b[16:48], b[0:32]),
                     (b[0:32], b[31:63])):
        with pytest.raises(ValueError, match="overlap"):
            dst.copy_from(src)
        with pytest.raises(ValueError, match="overlap"):
            src.copy_to(dst)
    b[0:32].copy_from(b[0:32])
    out = bytearray(64)
    b.copy_to(out)
    assert out == bytes(range(64)), "a refused copy changed the memory"
    b[0:16].copy_from(b[48:64])
    b.copy_to(out)
    assert out[:16] == bytes(range(48, 64))
    assert out[16:] == bytes(range(16, 64))


def test_closing_the_parent_closes_its_views() -> None:
    b = acc.Buffer(100)
    v = b[:50]
    b.close()
    assert v.closed
    with pytest.raises(ValueError, match="view of a closed Buffer"):
        v.fill(1)
    v.close()  # closing a view of a closed buffer is fine


def test_closing_a_view_keeps_the_parent() -> None:
    b = acc.Buffer(100)
    v = b[:50]
    v.close()
    b.fill(1)
    with pytest.raises(ValueError, match="closed Buffer"):
        v.fill(1)


# record_stream, close, with, __del__ ----------------------------------------


def test_record_stream_keeps_memory_until_the_work_is_done(driver) -> None:
    """record_stream(s) covers the work queued on s so far (torch's
    documented promise; a recorded use holds an event, not the stream)."""
    s = acc.Stream(0)
    b = acc.Buffer(4096)
    before = driver.live("alloc")
    with driver.gate(s) as gate:
        b.record_stream(s)
        b.close()
        gc.collect()
        poll_freed_memory()
        assert driver.live("alloc") == before  # still waiting on s
        gate.open()
        s.synchronize()
    acc.empty_cache()
    assert driver.live("alloc") == before - 1


def test_dropping_a_buffer_with_queued_work_is_safe(driver) -> None:
    """__del__ neither waits nor frees memory that queued work uses."""
    s = acc.Stream(0)
    h = acc.HostBuffer(1 << 20)
    b = acc.Buffer(1 << 20, stream=s)
    b.fill(3, stream=s)
    driver.enqueue_sleep(s, 150)
    b.copy_to(h, stream=s)
    del b
    gc.collect()
    s.synchronize()
    assert bytes(memoryview(h)[:4]) == b"\3\3\3\3"
    # Nothing touched freed memory (checked by memory_checks).


def test_work_on_another_stream_is_recorded(driver) -> None:
    """A copy on a stream other than the buffer's own keeps the memory
    until that copy ran, without record_stream."""
    s = acc.Stream(0)
    b = acc.Buffer(4096)  # ordered on the default stream
    h = acc.HostBuffer(4096)
    driver.enqueue_sleep(s, 150)
    b.copy_to(h, stream=s)
    b.close()
    s.synchronize()


def test_close_and_with() -> None:
    with acc.Buffer(64) as b:
        b.fill(1)
    assert b.closed
    b.close()  # twice is fine
    for call in (lambda: b.fill(1), lambda: b.copy_from(bytes(64)),
                 lambda: b.copy_to(bytearray(64)), lambda: b[1:2],
                 lambda: b.record_stream(acc.current_stream())):
        with pytest.raises(ValueError, match="closed Buffer"):
            call()
    with pytest.raises(ValueError, match="closed Buffer"):
        with b:
            pass
    assert "closed" in repr(b)


def test_close_with_a_stream(driver) -> None:
    s = acc.Stream(0)
    b = acc.Buffer(64)
    before = driver.live("alloc")
    with driver.gate(s) as gate:
        b.close(stream=s)
        poll_freed_memory()
        assert driver.live("alloc") == before
        gate.open()
        s.synchronize()
    acc.empty_cache()
    assert driver.live("alloc") == before - 1
    # By position too, as its signature (close($self, /, stream=None))
    # and the stub say: it took none.
    c = acc.Buffer(64)
    c.close(s)
    assert c.closed
    with pytest.raises(TypeError, match="accelerator.Stream"):
        acc.Buffer(64).close(1)


def test_host_buffer_close(driver) -> None:
    h = acc.HostBuffer(64)
    m = memoryview(h)
    with pytest.raises(BufferError):
        h.close()
    m.release()
    h.close()
    assert h.closed
    with pytest.raises(ValueError, match="closed HostBuffer"):
        memoryview(h)
    with pytest.raises(ValueError, match="closed HostBuffer"):
        acc.Buffer(64).copy_from(h)
    with acc.HostBuffer(8) as h2:
        pass
    assert h2.closed


def test_host_buffer_freed_after_its_copies(driver) -> None:
    s = acc.Stream(0)
    b = acc.Buffer(4096, stream=s)
    b.fill(5, stream=s)
    before = driver.live("host_alloc")
    h = acc.HostBuffer(4096)
    with driver.gate(s) as gate:
        b.copy_to(h, stream=s)
        del h
        gc.collect()
        poll_freed_memory()
        assert driver.live("host_alloc") == before + 1
        gate.open()
        s.synchronize()
    acc.empty_cache()
    assert driver.live("host_alloc") == before


def test_empty_host_cache_releases_only_what_no_work_uses(driver) -> None:
    s = acc.Stream(0)
    b = acc.Buffer(4096, stream=s)
    before = driver.live("host_alloc")
    busy, done = acc.HostBuffer(4096), acc.HostBuffer(4096)
    b.copy_to(done, stream=s)
    done.close()  # its release waits for the copy (an event on s)
    s.synchronize()
    with driver.gate(s) as gate:
        b.copy_to(busy, stream=s)
        busy.close()
        # The free settled the idle one (deferred frees are settled on
        # every allocation and free, as torch's host allocator does); the
        # one a queued copy uses is held.
        assert driver.live("host_alloc") == before + 1
        acc.memory.empty_host_cache()
        # Not the one a queued copy uses.
        assert driver.live("host_alloc") == before + 1
        gate.open()
        s.synchronize()
    assert driver.live("host_alloc") == before + 1
    acc.empty_host_cache()
    assert driver.live("host_alloc") == before
    # Device memory is not its business: the buffer's block stays cached.
    b.close()
    reserved = acc.memory_reserved(0)
    acc.empty_host_cache()
    assert acc.memory_reserved(0) == reserved


# Errors ---------------------------------------------------------------------------


def test_out_of_memory_says_size_free_and_total(driver) -> None:
    free, total = acc.get_memory_info(0)
    with pytest.raises(acc.OutOfMemoryError) as info:
        acc.Buffer(total * 2)
    text = str(info.value)
    assert f"{total * 2} bytes" in text
    assert "total capacity" in text and "free" in text
    assert info.value.error_name == driver.oom_error[1]
    with pytest.raises(acc.OutOfMemoryError):
        acc.Buffer(1 << 200)  # larger than any device can ever serve


@pytest.mark.parametrize("size", [2**62, 2**63, 2**64 - 1, 2**64, 2**200],
                         ids=["2**62", "2**63", "2**64-1", "2**64", "2**200"])
def test_host_buffer_too_large_says_so(size: int) -> None:
    """Every size no process can address: OutOfMemoryError with the size
    asked (2**63 to 2**64 - 1 gave a bare MemoryError() before; sizes the
    driver refused gave its words alone, without the size)."""
    with pytest.raises(acc.OutOfMemoryError, match=f"{size} bytes"):
        acc.HostBuffer(size)


def test_memory_info_counts_buffers(driver) -> None:
    settle()
    free0, total = acc.get_memory_info(0)
    reserved0 = acc.memory_reserved(0)
    b = acc.Buffer(1 << 20)
    free1, _ = acc.get_memory_info(0)
    # what the allocator took from the driver (a 2 MiB segment when it
    # caches, the buffer itself with ACCELERATOR_ALLOCATOR=direct)
    assert free0 - free1 == acc.memory_reserved(0) - reserved0 >= 1 << 20
    del b
    settle()
    assert acc.get_memory_info(0)[0] == free0


BAD_SIZES = [(-1, ValueError, ">= 0"), (True, TypeError, "int"),
             (1.0, TypeError, "int"), ("8", TypeError, "int"),
             (None, TypeError, "int")]


@pytest.mark.parametrize("size,exc,text", BAD_SIZES)
def test_bad_sizes(size, exc, text) -> None:
    with pytest.raises(exc, match=text):
        acc.Buffer(size)
    with pytest.raises(exc, match=text):
        acc.HostBuffer(size)


def test_stream_of_another_device(two_devices) -> None:
    with pytest.raises(ValueError, match="expected a stream of device 0"):
        acc.Buffer(8, 0, stream=acc.Stream(1))
    with pytest.raises(TypeError, match="accelerator.Stream"):
        acc.Buffer(8, stream=3)
    b = acc.Buffer(8, 0)
    with pytest.raises(ValueError, match="expected a stream of device 0"):
        b.fill(1, stream=acc.Stream(1))
    with pytest.raises(ValueError, match="stream of the device side"):
        b.copy_from(bytes(8), stream=acc.Stream(1))
    # The host side is named as such (it read "the host -1").
    with pytest.raises(ValueError, match="the copy is from device 0 to the "
                       "host; expected a stream of the device side"):
        b.copy_to(bytearray(8), stream=acc.Stream(1))


def test_bad_device() -> None:
    with pytest.raises(acc.DeviceIndexError):
        acc.Buffer(8, 99)
    with pytest.raises(acc.DeviceIndexError):
        acc.HostBuffer(8, 99)


@pytest.mark.parametrize("value,exc", [(256, ValueError), (-1, ValueError),
                                       (1 << 70, ValueError),
                                       ("1", TypeError), (1.0, TypeError),
                                       (True, TypeError)])
def test_bad_fill_values(value, exc) -> None:
    b = acc.Buffer(8)
    b.fill(0)
    with pytest.raises(exc, match="0..255"):
        b.fill(value)
    out = bytearray(8)
    b.copy_to(out)
    assert out == bytes(8)  # unchanged


def test_size_mismatch_changes_nothing() -> None:
    b = acc.Buffer(8)
    b.fill(1)
    for other in (bytes(7), bytearray(9), acc.HostBuffer(4), acc.Buffer(16),
                  np.zeros(3, dtype=np.uint8)):
        with pytest.raises(ValueError, match="size mismatch"):
            b.copy_from(other)
    target = bytearray(b"z" * 9)
    with pytest.raises(ValueError, match="size mismatch"):
        b.copy_to(target)
    assert target == b"z" * 9
    out = bytearray(8)
    b.copy_to(out)
    assert out == b"\1" * 8


def test_non_contiguous_and_read_only() -> None:
    b = acc.Buffer(8)
    strided = np.zeros(16, dtype=np.uint8)[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        b.copy_from(strided)
    with pytest.raises(ValueError, match="C-contiguous"):
        b.copy_to(strided)
    with pytest.raises(ValueError, match="read-only"):
        b.copy_to(bytes(8))
    ro = np.zeros(8, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        b.copy_to(ro)


@pytest.mark.parametrize("obj", [3, "abcdefgh", None, [0] * 8, object()])
def test_objects_without_the_buffer_protocol(obj) -> None:
    b = acc.Buffer(8)
    with pytest.raises(TypeError, match="buffer protocol"):
        b.copy_from(obj)
    with pytest.raises(TypeError, match="buffer protocol"):
        b.copy_to(obj)


def test_bad_arguments() -> None:
    b = acc.Buffer(8)
    with pytest.raises(TypeError):
        b.copy_from()
    with pytest.raises(TypeError, match="unexpected keyword"):
        b.copy_from(bytes(8), strem=None)
    with pytest.raises(TypeError):
        b.fill(1, 2)
    with pytest.raises(TypeError, match="slices"):
        b[1]
    with pytest.raises(ValueError, match="step 1"):
        b[::2]
    with pytest.raises(TypeError, match="accelerator.Stream"):
        b.record_stream(None)
    with pytest.raises(TypeError, match="accelerator.Stream"):
        b.close(stream=1)


def test_numpy_arrays_are_named_where_an_int_is_expected() -> None:
    """A numpy array has __index__, which only its 0-d integer arrays
    honour: the error names the argument and what it takes, not only
    numpy's 'only integer scalar arrays can be converted to a scalar
    index'."""
    array = np.array([8])
    calls = [
        (lambda: acc.Buffer(array),
         r"^Buffer\(\): nbytes must be an int, got ndarray \(only integer"),
        (lambda: acc.HostBuffer(array),
         r"^HostBuffer\(\): nbytes must be an int, got ndarray"),
        (lambda: acc.Buffer(8, array),
         r"^expected a device or an int device index, got ndarray"),
        (lambda: acc.set_device_index(array),
         r"^set_device_index\(\) expected a device or an int device index, "
         r"got ndarray"),
    ]
    for call, text in calls:
        with pytest.raises(TypeError, match=text):
            call()
    b = acc.Buffer(8)
    with pytest.raises(TypeError, match=r"^Buffer\.fill\(\): value must be "
                       r"an int in 0\.\.255, got ndarray"):
        b.fill(np.array([1, 2]))
    b.close()
