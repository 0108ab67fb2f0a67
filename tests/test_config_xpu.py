"""Level Zero configurations and backend selection, one process each.

The Level Zero test driver runs under Debian's real loader (libze1); these
tests skip with the reason when the loader or the driver is missing.
"""
from __future__ import annotations

import ctypes.util
import json

import pytest

from fake_drivers import CUDA_DOUBLE, ZE_DRIVER
from test_config import UNAVAILABLE, run

pytestmark = [
    pytest.mark.skipif(not ZE_DRIVER.exists(),
                       reason="no Level Zero test driver (needs libze-dev; "
                       "run make -C tests/drivers)"),
    pytest.mark.skipif(ctypes.util.find_library("ze_loader") is None,
                       reason="Debian's Level Zero loader (libze1) is not "
                       "installed"),
]

SUMMARY = """
import accelerator as a
print(a.is_available(), a.device_count(), a.current_accelerator())
"""


def ze(devices: int = 2, **env: str) -> dict[str, str]:
    return dict(ZE_ENABLE_ALT_DRIVERS=str(ZE_DRIVER),
                FAKE_ZE_DEVICES=str(devices), **env)


def test_the_issue_command_line() -> None:
    out = run(SUMMARY, **ze(2, ACCELERATOR_BACKEND="xpu")).stdout
    assert out == "True 2 xpu\n"


@pytest.mark.parametrize("mode", [{}, {"ZE_ENABLE_LOADER_INTERCEPT": "1"}])
@pytest.mark.parametrize("devices", [1, 3])
def test_device_counts(devices: int, mode: dict[str, str]) -> None:
    out = run(SUMMARY, **ze(devices, **mode)).stdout
    assert out.split() == ["True", str(devices), "xpu"]


def xpu_reason(result) -> str:
    backends = {b["name"]: b for b in json.loads(result.stdout)}
    assert not backends["xpu"]["available"]
    return backends["xpu"]["reason"]


def test_zeinit_failing_is_unavailable_and_safe() -> None:
    # Loader 1.8 crashes on any call after a failed zeInit: none is made.
    result = run(UNAVAILABLE, **ze(2, FAKE_ZE_INIT_FAIL="1",
                                   ACCELERATOR_BACKEND="xpu"))
    assert "zeInit" in xpu_reason(result)


def test_no_level_zero_driver() -> None:
    result = run(UNAVAILABLE, ACCELERATOR_BACKEND="xpu")
    assert "zeInit" in xpu_reason(result)


def test_no_loader_library() -> None:
    result = run(UNAVAILABLE, ACCELERATOR_BACKEND="xpu",
                 ACCELERATOR_ZE_LIBRARY="/nonexistent/libze_loader.so.1")
    assert "/nonexistent/libze_loader.so.1" in xpu_reason(result)


@pytest.mark.skipif(not CUDA_DOUBLE.exists(), reason="no CUDA double")
def test_both_present_picks_cuda_first_and_reports_both() -> None:
    both = dict(ACCELERATOR_CUDA_LIBRARY=str(CUDA_DOUBLE),
                FAKE_CUDA_DEVICES="2", **ze(3))
    result = run("""
    import accelerator as a
    print(a.current_accelerator(), a.device_count())
    print(json.dumps(a.backends()))
    """, **both, ACCELERATOR_DEBUG="1")
    first, listing = result.stdout.splitlines()
    assert first == "cuda 2"
    backends = {b["name"]: b for b in json.loads(listing)}
    assert backends["cuda"]["selected"] and not backends["xpu"]["selected"]
    assert backends["xpu"]["available"] and backends["xpu"]["device_count"] == 3
    assert "selected backend cuda" in result.stderr
    assert "backend xpu not probed: cuda was selected first" in result.stderr
    assert "backend xpu available: 3 device(s)" in result.stderr
    chosen = run(SUMMARY, **both, ACCELERATOR_BACKEND="xpu").stdout
    assert chosen.split() == ["True", "3", "xpu"]


def test_fork_after_init_refuses_clearly() -> None:
    run("""
    import accelerator as a
    a.Stream().synchronize()
    pid = os.fork()
    if pid == 0:
        try:
            a.Stream()
        except a.AcceleratorError as e:
            os._exit(0 if "'spawn'" in str(e) else 2)
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    a.Stream().synchronize()
    """, **ze(2, ACCELERATOR_BACKEND="xpu"))


ELAPSED = """
import accelerator as a
driver = fake_drivers.ZeDouble()
s = a.Stream()
start, end = a.Event(enable_timing=True), a.Event(enable_timing=True)
start.record(s)
driver.enqueue_sleep(s, 20)
end.record(s)
end.synchronize()
print(start.elapsed_time(end), end.elapsed_time(start))
"""


@pytest.mark.parametrize("bits,ns_per_tick", [(32, 1), (24, 10)])
def test_elapsed_time_across_a_timer_wrap(bits: int, ns_per_tick: int
                                          ) -> None:
    """The kernel timestamp counter keeps kernelTimestampValidBits and
    wraps: started 5 ms before the wrap, 20 ms of work still measure
    +20 ms forward and -20 ms reversed (not the rest of the cycle)."""
    base = 2**bits - 5_000_000 // ns_per_tick
    out = run(ELAPSED, **ze(1, FAKE_ZE_TIMESTAMP_BITS=str(bits),
                            FAKE_ZE_TIMESTAMP_BASE=str(base),
                            FAKE_ZE_TIMER_RESOLUTION=str(ns_per_tick))).stdout
    forward, backward = map(float, out.split())
    assert 18 <= forward < 60, out
    assert backward == -forward


CAPTURED_ONLY = """
import accelerator as a
s = a.Stream()
start, end = a.Event(enable_timing=True), a.Event(enable_timing=True)
g = a.Graph()
with s:
    g.capture_begin()
    start.record(s)
    end.record(s)
    g.capture_end()
try:
    start.elapsed_time(end)
except ValueError as exc:
    print(exc)
"""


def test_elapsed_time_of_records_only_captured_is_worded_by_the_core(
        ) -> None:
    """Events whose only records went into a graph capture have no
    timestamps: the backend says so without words, and the core words it
    as it does for events never recorded (one wording, event.c's)."""
    out = run(CAPTURED_ONLY, **ze(1)).stdout
    assert out == ("Both events must be recorded before calculating "
                   "elapsed time.\n")


ACROSS = """
import accelerator as a
driver = fake_drivers.ZeDouble()
assert driver.drivers() == 2 and a.device_count() == 2
producer, consumer = a.Stream(0), a.Stream(1)
driver.enqueue_sleep(producer, 1000)
event = producer.record_event()
consumer.wait_event(event)       # device 1's driver waits for device 0's
event.wait(a.Stream(1))
print(event.query(), consumer.query())
consumer.synchronize()
print(event.query(), consumer.query())
a.synchronize(0)
a.synchronize(1)
"""


@pytest.mark.parametrize("mode", [{}, {"ZE_ENABLE_LOADER_INTERCEPT": "1"}])
def test_wait_across_drivers_does_not_block_the_host(
        mode: dict[str, str]) -> None:
    """Events cannot cross drivers (contexts): the wait is bridged on a
    helper thread, so the call returns at once with the event still
    pending, and the waiting stream still runs after the event."""
    out = run(ACROSS, **ze(1, FAKE_ZE_DRIVERS="2", ACCELERATOR_BACKEND="xpu",
                           **mode)).stdout.splitlines()
    assert out == ["False False", "True True"]


ACROSS_THREADS = """
import threading
import accelerator as a
driver = fake_drivers.ZeDouble()
assert driver.drivers() == 2 and a.device_count() == 2
errors = []

def worker(i):
    try:
        producer, consumer = a.Stream(0), a.Stream(1)
        for k in range(150):
            driver.enqueue_sleep(producer, 1)
            consumer.wait_event(producer.record_event())
            producer.wait_event(consumer.record_event())  # same driver
            if k % 50 == 49:
                consumer.synchronize()
        consumer.synchronize()
    except BaseException as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
a.synchronize(0)
a.synchronize(1)
print(errors)
"""


def test_waits_across_drivers_from_many_threads() -> None:
    """Each wait reserves room for its bookkeeping, drops the backend's
    lock while it appends the barrier, then fills the room: eight threads
    waiting on their own streams at once must never take the same last
    place (the sanitizer run checks the memory; here, the results)."""
    out = run(ACROSS_THREADS, **ze(1, FAKE_ZE_DRIVERS="2",
                                   ACCELERATOR_BACKEND="xpu")).stdout
    assert out.strip() == "[]"


MEMORY = """
import accelerator as a
props = a.get_device_properties(1)
print(json.dumps([props.pci_bus_id, props.estimates, a.get_memory_info(1),
                  props.total_memory]))
"""


@pytest.mark.parametrize("mode", [{}, {"ZE_ENABLE_LOADER_INTERCEPT": "1"}])
def test_free_memory_and_pci_address_from_sysman(mode: dict[str, str]
                                                 ) -> None:
    """With Sysman enabled (Intel's driver: ZES_ENABLE_SYSMAN=1 at zeInit)
    the loader routes zes calls to the driver: free memory is read from the
    memory modules, the PCI address from the PCI properties."""
    out = run(MEMORY, **ze(2, ZES_ENABLE_SYSMAN="1",
                           FAKE_ZE_USED_MEM=str(3 << 30),
                           FAKE_ZE_TOTAL_MEM=str(16 << 30), **mode)).stdout
    bus, estimates, (free, total), total_memory = json.loads(out)
    assert bus == "0000:3b:00.0"
    assert estimates == []
    assert (free, total) == (13 << 30, 16 << 30) and total_memory == total


def test_without_sysman_free_memory_is_an_estimate() -> None:
    out = run(MEMORY, **ze(2, FAKE_ZE_USED_MEM=str(3 << 30),
                           FAKE_ZE_TOTAL_MEM=str(16 << 30))).stdout
    bus, estimates, (free, total), _ = json.loads(out)
    assert bus == ""
    assert estimates == ["free_memory"]
    assert free == total == 16 << 30


def test_a_loader_path_too_long_is_refused_not_cut() -> None:
    """A path longer than the backend keeps must not be cut short: the
    first 511 bytes here name the real loader, the whole path nothing."""
    import glob
    found = glob.glob("/usr/lib/*/libze_loader.so.1")
    if not found:
        pytest.skip("Debian's loader is not at /usr/lib/<triplet>/")
    loader = found[0].lstrip("/")
    path = "/" * (511 - len(loader)) + loader + "-not-this-one"
    result = run(UNAVAILABLE, **ze(2, ACCELERATOR_BACKEND="xpu",
                                   ACCELERATOR_ZE_LIBRARY=path))
    reason = xpu_reason(result)
    assert "ACCELERATOR_ZE_LIBRARY" in reason and "at most 511" in reason
