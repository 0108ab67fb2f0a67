"""The lifetime model of memory (docs/memory.rst, "Lifetime"), one test
per way it was broken (issue 21).  Runs once per backend; every test also
runs under the doubles' use-after-free detectors (test_memory's
memory_checks fixture: no bad access, no damaged guard byte).

Corruption is shown byte for byte: work held behind a gate writes into
memory after it was closed, and the test reads what the next Buffer()
holds.  Whether memory is still held is shown by torch's statistics
(active but not allocated) or the double's live allocations.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import accelerator as acc
import fake_drivers
from test_dlpack import Made
from test_memory import (_memory_supported, memory_checks,  # noqa: F401
                         poll_freed_memory)

pytestmark = pytest.mark.skipif(
    not _memory_supported(), reason="the backend has no device memory slots")

DIRECT = os.environ.get("ACCELERATOR_ALLOCATOR") == "direct"
SIZE = 64 * 1024


@pytest.fixture(autouse=True)
def clean_cache(driver: fake_drivers.DriverDouble,
                memory_checks: None) -> Iterator[None]:  # noqa: F811
    """Opens what a failing test left gated before memory_checks (set up
    first, so torn down after this) synchronizes."""
    acc.synchronize()
    acc.empty_cache()
    yield
    driver.open_gates()
    driver.clear_faults()
    for name in ("mem_fill", "event_record"):
        driver.delay(driver.functions[name], 0)
    for device in range(acc.device_count()):
        acc.synchronize(device)
    acc.empty_cache()


def held() -> int:
    """Bytes freed but still waiting for work (active, not allocated)."""
    stats = acc.memory_stats()
    return (stats["active_bytes.all.current"]
            - stats["allocated_bytes.all.current"])


def read(buffer: acc.Buffer) -> bytes:
    out = bytearray(buffer.nbytes)
    buffer.copy_to(out)
    return bytes(out)


def next_buffer_reads(value: int) -> bytes:
    """A Buffer() of SIZE on the current stream, filled with value once
    the stream is idle: what it holds after the gated work has run."""
    again = acc.Buffer(SIZE)
    again.fill(value)
    acc.current_stream().synchronize()
    return again  # type: ignore[return-value]


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list]:
    """Run fn in a thread; the list gets its result or exception."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


# 1: close() from another thread while a copy or fill is in the driver ------


def test_close_during_a_fill_in_the_driver_waits_for_its_stream(
        driver: fake_drivers.DriverDouble) -> None:
    side = acc.Stream()
    b = acc.Buffer(SIZE)
    gate = driver.gate(side)
    driver.delay(driver.functions["mem_fill"], 300)
    thread, out = in_thread(lambda: b.fill(0x5A, stream=side))
    time.sleep(0.1)          # the fill is inside the driver's call
    b.close()                # succeeds: the release waits for the fill
    thread.join()
    driver.delay(driver.functions["mem_fill"], 0)
    assert out == [None]
    assert held() == SIZE or DIRECT
    again = next_buffer_reads(0x11)
    gate.open()
    side.synchronize()
    assert read(again) == b"\x11" * SIZE  # the late fill wrote elsewhere


# 2: copies and fills through a from_dlpack() wrapper ------------------------


def test_wrapper_of_our_buffer_records_its_streams(
        driver: fake_drivers.DriverDouble) -> None:
    side = acc.Stream()
    b = acc.Buffer(SIZE)
    wrapped = acc.from_dlpack(b)
    gate = driver.gate(side)
    wrapped.fill(0x5A, stream=side)
    wrapped.close()
    b.close()                # the export is gone: close is allowed
    assert held() == SIZE or DIRECT
    again = next_buffer_reads(0x11)
    gate.open()
    side.synchronize()
    assert read(again) == b"\x11" * SIZE


def test_wrapper_of_foreign_memory_keeps_it_until_its_work_is_done(
        driver: fake_drivers.DriverDouble) -> None:
    side = acc.Stream()
    under = acc.Buffer(SIZE)
    made = Made(under.ptr, [SIZE], device=(driver.dlpack_device_type, 0))
    wrapped = acc.from_dlpack(made.capsule)
    gate = driver.gate(side)
    wrapped.fill(0x5A, stream=side)
    wrapped.close()
    del wrapped
    gc.collect()
    poll_freed_memory()      # frees are settled here: not this one yet
    assert made.deleted == 0  # the producer still owns its memory
    gate.open()
    side.synchronize()
    poll_freed_memory()
    assert made.deleted == 1
    assert read(under) == b"\x5a" * SIZE


# 3: view.close(stream) ------------------------------------------------------


def test_view_close_with_a_stream_records_it(
        driver: fake_drivers.DriverDouble) -> None:
    side = acc.Stream()
    b = acc.Buffer(SIZE)
    view = b[0:SIZE]
    gate = driver.gate(side)  # another library's work on the memory
    view.close(side)
    b.close()
    assert held() == SIZE
    gate.open()
    acc.synchronize()         # the side stream, and the buffer's own
    poll_freed_memory()
    assert held() == 0


# 4: deferred frees of page-locked memory ------------------------------------


def test_closed_host_buffers_are_freed_at_the_next_allocation(
        driver: fake_drivers.DriverDouble) -> None:
    b = acc.Buffer(4096)
    b.fill(7)
    before = driver.live("host_alloc")
    for _ in range(50):
        h = acc.HostBuffer(4096)
        b.copy_to(h)          # asynchronous: the close is deferred
        h.close()
    acc.synchronize()
    acc.HostBuffer(16).close()
    assert driver.live("host_alloc") <= before + 1


# 5: the same handle on two devices ------------------------------------------


def test_a_use_on_another_devices_default_stream_is_recorded(
        driver: fake_drivers.DriverDouble, two_devices: None) -> None:
    """CUDA's legacy default stream is handle 0 on every device."""
    source = acc.Buffer(SIZE, 0)
    source.fill(0x5A)
    acc.synchronize(0)
    other = acc.Stream(0)
    acc.set_stream(other)     # the peer copy's barrier is with `other`
    on1 = acc.current_stream(1)
    dst = acc.Buffer(SIZE, 1, stream=on1)
    gate = driver.gate(on1)
    dst.copy_from(source, stream=on1)
    acc.set_stream(source.stream)  # device 0's default stream again
    source.close()
    assert held() == SIZE or DIRECT
    again = next_buffer_reads(0x11)
    gate.open()
    on1.synchronize()
    assert read(dst) == b"\x5a" * SIZE
    assert read(again) == b"\x11" * SIZE


# 6: DLPack's device_id under ACCELERATOR_VISIBLE_DEVICES --------------------

VISIBLE_CHILD = """
import json
import accelerator as a
b = a.Buffer(8, device=0)
got = [list(b.__dlpack_device__()), a.from_dlpack(b).device.index]
try:
    a.from_dlpack(a.Buffer(8, device=0).__dlpack__())
    got.append("ok")
except BufferError as exc:
    got.append(str(exc))
print(json.dumps(got))
"""


def test_dlpack_device_id_is_the_drivers_ordinal(
        facts: type[fake_drivers.DriverDouble], two_devices: None) -> None:
    env = {**os.environ, "ACCELERATOR_VISIBLE_DEVICES": "1,0",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, "-c", VISIBLE_CHILD], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    device_id, index, imported = json.loads(result.stdout.splitlines()[-1])
    assert device_id == [facts.dlpack_device_type, 1]  # the driver's 1
    assert index == 0 and imported == "ok"             # mapped back


# 7: empty tensors with any strides ------------------------------------------


@pytest.mark.parametrize("shape, strides", [
    ([4, 0], [1, 1]), ([0, 0], [0, 0]), ([0, 3], [7, 9])])
def test_from_dlpack_takes_empty_tensors_with_any_strides(
        driver: fake_drivers.DriverDouble, shape: list[int],
        strides: list[int]) -> None:
    made = Made(0, shape, device=(driver.dlpack_device_type, 0),
                strides=strides)
    wrapped = acc.from_dlpack(made.capsule)
    assert wrapped.nbytes == 0
    wrapped.close()
    assert made.deleted == 1


# 8: direct mode frees behind foreign work on the allocation stream ---------


@pytest.mark.skipif(not DIRECT, reason="needs ACCELERATOR_ALLOCATOR=direct "
                                       "(tests/run.sh)")
def test_direct_free_waits_for_foreign_work_on_its_stream(
        driver: fake_drivers.DriverDouble) -> None:
    s = acc.Stream()
    b = acc.Buffer(SIZE, stream=s)
    before = driver.live("alloc")
    gate = driver.gate(s)     # queued through the handle, by others
    b.close()
    poll_freed_memory()
    assert driver.live("alloc") == before  # not freed under that work
    gate.open()
    s.synchronize()
    poll_freed_memory()
    assert driver.live("alloc") == before - 1


# 10: recorded uses hold events, not streams ---------------------------------


@pytest.mark.parametrize("host", [False, True])
def test_recorded_uses_do_not_keep_streams_alive(
        driver: fake_drivers.DriverDouble, host: bool) -> None:
    b = acc.Buffer(4096)
    h = acc.HostBuffer(4096)
    b.fill(1)
    gc.collect()
    before = driver.live("stream")
    for _ in range(40):       # per-request streams, dropped after use
        s = acc.Stream()
        if host:
            b.copy_to(h, stream=s)
        else:
            b.fill(2, stream=s)
        s.synchronize()
        del s
    gc.collect()
    b.fill(3)                 # a later use drops the completed ones
    b.copy_to(h)
    assert driver.live("stream") < before + 12  # the pool's, not 40
    acc.synchronize()
    assert bytes(memoryview(h)[:4]) == b"\3\3\3\3"


# 11: close() while an export waits with the GIL released --------------------


def test_close_during_host_export_defers_and_refuses_it(
        driver: fake_drivers.DriverDouble) -> None:
    side = acc.Stream()
    b = acc.Buffer(SIZE)
    b.fill(0x5A)
    h = acc.HostBuffer(SIZE)
    before = driver.live("host_alloc")
    gate = driver.gate(side)
    b.copy_to(h, stream=side)  # the export waits for this copy
    thread, out = in_thread(lambda: np.from_dlpack(h))
    time.sleep(0.1)
    h.close()
    acc.HostBuffer(16).close()
    assert driver.live("host_alloc") == before  # not freed under the wait
    gate.open()
    thread.join()
    assert len(out) == 1 and isinstance(out[0], ValueError), out
    assert "closed HostBuffer" in str(out[0])


def test_close_during_buffer_export_defers_and_refuses_it(
        driver: fake_drivers.DriverDouble) -> None:
    """Also with a foreign producer's release due, whose deleter (Python
    code) then runs inside the refused call: the ValueError survives."""
    consumer, side = acc.Stream(), acc.Stream()
    b = acc.Buffer(SIZE)
    under = acc.Buffer(SIZE)
    made = Made(under.ptr, [SIZE], device=(driver.dlpack_device_type, 0))
    gate = driver.gate(side)
    wrapped = acc.from_dlpack(made.capsule)
    wrapped.fill(1, stream=side)
    wrapped.close()           # its release waits for the fill
    gate.open()
    side.synchronize()        # due, settled at the next free
    driver.delay(driver.functions["event_record"], 300)
    thread, out = in_thread(lambda: b.__dlpack__(stream=consumer.handle))
    time.sleep(0.1)           # ordering the streams, without the GIL
    b.close()
    thread.join()
    driver.delay(driver.functions["event_record"], 0)
    assert b.closed
    assert len(out) == 1 and isinstance(out[0], ValueError), out
    assert "closed Buffer" in str(out[0])
    assert made.deleted == 1



# 9: the consumer's stream of __dlpack__ is checked before any driver call --


def test_dlpack_refuses_a_bogus_consumer_stream(
        driver: fake_drivers.DriverDouble) -> None:
    """Where 1 is no stream of the protocol (not CUDA), it and any int
    that is no stream of the device are refused, as from_handle does."""
    if driver.has("cuda_stream_protocol"):
        pytest.skip("CUDA: 1 and 2 are the default streams, any other int "
                    "a CUstream the consumer vouches for")
    if driver.dlpack_refused_streams:
        # ROCm's protocol: 1 and 2 are no streams; any other int is a
        # hipStream_t the consumer vouches for (the runtime cannot tell).
        b = acc.Buffer(64)
        for value in driver.dlpack_refused_streams:
            with pytest.raises(ValueError, match="not a valid consumer "
                                                 "stream on ROCm"):
                b.__dlpack__(stream=value)
        b.__dlpack__(stream=0)  # the default stream
        b.__dlpack__(stream=acc.Stream().handle)
        return
    b = acc.Buffer(64)
    bogus = np.zeros(8, dtype=np.uint64)  # mapped, but no stream
    for value in (1, 3, bogus.ctypes.data):
        with pytest.raises(ValueError, match="not the handle of a live "
                                             "stream"):
            b.__dlpack__(stream=value)
        with pytest.raises(ValueError, match="not the handle of a live "
                                             "stream"):
            acc.Stream.from_handle(value)
    consumer = acc.Stream()
    b.__dlpack__(stream=consumer.handle)  # a real one is taken
    b.close()


def test_a_wait_for_the_uses_does_not_block_new_uses(
        driver: fake_drivers.DriverDouble) -> None:
    """numpy.from_dlpack(h) waits for h's copies without holding up a copy
    that another thread queues with h meanwhile."""
    side, other = acc.Stream(), acc.Stream()
    b = acc.Buffer(4096)
    b.fill(9)
    h = acc.HostBuffer(4096)
    gate = driver.gate(side)
    b.copy_to(h, stream=side)
    waiting, out = in_thread(lambda: np.from_dlpack(h))
    time.sleep(0.1)           # the export waits for the gated copy
    copying, copied = in_thread(lambda: b.copy_to(h, stream=other))
    copying.join(timeout=5)
    finished = not copying.is_alive()
    gate.open()
    waiting.join()
    copying.join()
    assert finished, "the copy waited for another thread's wait"
    assert copied == [None] and len(out) == 1
    other.synchronize()
    assert bytes(memoryview(h)[:4]) == b"\t\t\t\t"
