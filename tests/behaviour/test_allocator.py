"""The caching allocator under Buffer, and torch's memory statistics.

Runs once per backend.  The driver double's counters show which Buffer
allocations reach the driver; its timed work shows that a block used on
another stream waits for that work.  Each test starts from an emptied
cache and its own view of the statistics (they are process-wide).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

import accelerator as acc
import fake_drivers
from test_memory import _memory_supported

MIB = 1024 * 1024
KIB = 1024
DIRECT = os.environ.get("ACCELERATOR_ALLOCATOR") == "direct"
pytestmark = pytest.mark.skipif(
    not _memory_supported(), reason="the backend has no device memory slots")
caching_only = pytest.mark.skipif(
    DIRECT, reason="ACCELERATOR_ALLOCATOR=direct does not cache")

KEYS = ("allocated_bytes", "reserved_bytes", "active_bytes",
        "requested_bytes", "allocation", "segment", "active",
        "inactive_split", "inactive_split_bytes")
POOLS = ("all", "small_pool", "large_pool")
FIELDS = ("current", "peak", "allocated", "freed")


@pytest.fixture(autouse=True)
def clean_cache() -> Iterator[None]:
    acc.synchronize()
    acc.empty_cache()
    yield
    acc.set_per_process_memory_fraction(1.0)
    acc.synchronize()
    acc.empty_cache()


def stat(key: str, device: int | None = None) -> int:
    return acc.memory_stats(device)[key]


def counts(driver: fake_drivers.DriverDouble) -> tuple[int, int]:
    return (driver.calls(driver.functions["mem_alloc"]),
            driver.calls(driver.functions["mem_free"]))


# torch's test_memory_stats, with buffers ------------------------------------


def test_memory_stats_has_torchs_keys(accel_type: str) -> None:
    with acc.Buffer(1):
        stats = acc.memory_stats()
    for key in KEYS:
        for pool in POOLS:
            for field in FIELDS:
                assert f"{key}.{pool}.{field}" in stats
    for key in ("num_alloc_retries", "num_ooms", "num_sync_all_streams",
                "num_device_alloc", "num_device_free", "max_split_size"):
        assert key in stats
    assert list(stats) == sorted(stats)
    assert all(isinstance(v, int) for v in stats.values())


@caching_only
def test_memory_stats_ported_from_torch(accel_type: str) -> None:
    """torch's test_accelerator.py test_memory_stats, with Buffer."""
    assert acc.memory_allocated() >= 0
    assert acc.memory_reserved() >= 0
    prev_allocated = acc.memory_allocated()
    prev_reserved = acc.memory_reserved()
    prev_max_allocated = acc.max_memory_allocated()
    prev_max_reserved = acc.max_memory_reserved()
    buf = acc.Buffer(256 * 4)
    assert acc.memory_allocated() > prev_allocated
    assert acc.memory_reserved() >= prev_reserved
    assert acc.max_memory_allocated() > 0
    assert acc.max_memory_reserved() > 0
    buf.close()
    acc.empty_cache()
    acc.reset_peak_memory_stats()
    assert acc.memory_allocated() == prev_allocated
    assert acc.memory_reserved() == prev_reserved
    assert acc.max_memory_allocated() <= max(prev_max_allocated,
                                              prev_allocated)
    assert acc.max_memory_reserved() == prev_reserved

    acc.reset_accumulated_memory_stats()
    prev_active_current = stat("active_bytes.all.current")
    buf = acc.Buffer(256 * 4)       # 256 floats of 4 bytes
    assert stat("active_bytes.all.current") - prev_active_current == 1024
    assert stat("allocated_bytes.all.current") - prev_allocated == 1024
    assert stat("active_bytes.all.freed") == 0
    assert stat("requested_bytes.all.current") == 1024
    buf.close()
    assert stat("active_bytes.all.current") == prev_active_current
    assert stat("active_bytes.all.freed") == 1024
    assert stat("allocated_bytes.all.freed") == 1024
    assert stat("requested_bytes.all.freed") == 1024
    assert stat("allocation.all.allocated") == 1
    assert stat("allocation.all.freed") == 1
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == prev_allocated
    acc.empty_cache()
    assert acc.memory_reserved() == prev_reserved


@caching_only
def test_pools_segments_and_rounding(accel_type: str) -> None:
    base = acc.memory_reserved()
    small = acc.Buffer(1000)        # rounds to 1024, 2 MiB small segment
    assert stat("allocated_bytes.small_pool.current") == 1024
    assert stat("requested_bytes.small_pool.current") == 1000
    assert stat("reserved_bytes.small_pool.current") == 2 * MIB
    big = acc.Buffer(11 * MIB + 1)  # its own segment, rounded to 2 MiB
    assert stat("reserved_bytes.large_pool.current") == 12 * MIB
    # the rest (under 1 MiB) is not worth a block of the large pool
    assert stat("allocated_bytes.large_pool.current") == 12 * MIB
    middle = acc.Buffer(3 * MIB)    # 20 MiB large segment
    assert stat("reserved_bytes.large_pool.current") == 20 * MIB + 12 * MIB
    assert stat("requested_bytes.all.current") == 1000 + 11 * MIB + 1 + 3 * MIB
    assert stat("segment.all.current") == 3
    assert acc.memory_reserved() == base + 34 * MIB
    # the rest of each split segment is inactive split memory
    assert stat("inactive_split.all.current") == 2
    assert stat("inactive_split_bytes.all.current") == (
        2 * MIB - 1024 + 17 * MIB)
    neighbour = acc.Buffer(512)
    assert neighbour.ptr == small.ptr + 1024
    for b in (small, middle, big, neighbour):
        b.close()
    assert stat("inactive_split.all.current") == 0
    assert stat("allocated_bytes.all.current") == 0
    assert acc.memory_reserved() == base + 34 * MIB
    acc.empty_cache()
    assert acc.memory_reserved() == base
    assert stat("segment.all.current") == 0


def test_empty_buffer_allocates_nothing(
        driver: fake_drivers.DriverDouble) -> None:
    acc.Buffer(1).close()
    before = counts(driver), stat("allocation.all.allocated")
    with acc.Buffer(0) as b:
        assert b.nbytes == 0
    assert (counts(driver), stat("allocation.all.allocated")) == before


# Reuse -----------------------------------------------------------------------


@caching_only
def test_reuse_on_the_same_stream_makes_no_driver_call(
        driver: fake_drivers.DriverDouble) -> None:
    first = acc.Buffer(4096)
    ptr = first.ptr
    first.close()
    before = counts(driver)
    live = driver.live("alloc")
    for _ in range(100):
        with acc.Buffer(4096) as b:
            assert b.ptr == ptr
    with acc.Buffer(100 * KIB), acc.Buffer(3 * MIB):
        pass
    assert counts(driver) == (before[0] + 1, before[1])  # the 3 MiB segment
    assert driver.live("alloc") == live + 1


@caching_only
def test_reuse_on_a_busy_stream_is_stream_ordered(
        driver: fake_drivers.DriverDouble) -> None:
    s = acc.Stream()
    with driver.gate(s) as gate:
        first = acc.Buffer(8192, stream=s)
        first.fill(7, stream=s)
        ptr = first.ptr
        first.close()
        before = counts(driver)
        with acc.Buffer(8192, stream=s) as again:
            assert again.ptr == ptr  # no wait: the stream orders the work
        assert counts(driver) == before
        assert not s.query()
        gate.open()
    s.synchronize()


@caching_only
def test_cross_stream_use_waits_for_the_work(
        driver: fake_drivers.DriverDouble) -> None:
    other = acc.Stream()
    used = acc.Buffer(64 * KIB)
    ptr = used.ptr
    with driver.gate(other) as gate:
        used.record_stream(other)
        used.close()
        assert stat("active_bytes.all.current") == 64 * KIB
        assert stat("allocated_bytes.all.current") == 0
        meanwhile = acc.Buffer(64 * KIB)
        assert meanwhile.ptr != ptr  # the block waits for `other`
        assert not other.query()
        gate.open()
    other.synchronize()
    reused = acc.Buffer(64 * KIB)
    assert reused.ptr == ptr
    assert stat("active_bytes.all.current") == 128 * KIB
    meanwhile.close()
    reused.close()


@caching_only
def test_blocks_are_not_shared_between_streams(accel_type: str) -> None:
    s1, s2 = acc.Stream(), acc.Stream()
    a = acc.Buffer(4096, stream=s1)
    ptr = a.ptr
    a.close()
    with acc.Buffer(4096, stream=s2) as b:
        assert b.ptr != ptr
    with acc.Buffer(4096, stream=s1) as c:
        assert c.ptr == ptr


@caching_only
def test_free_blocks_merge(accel_type: str) -> None:
    parts = [acc.Buffer(256 * KIB) for _ in range(4)]
    base = parts[0].ptr
    assert [p.ptr - base for p in parts] == [i * 256 * KIB for i in range(4)]
    parts[1].close()
    parts[2].close()
    assert stat("inactive_split.all.current") == 2  # [1+2] and the tail
    with acc.Buffer(512 * KIB) as merged:
        assert merged.ptr == base + 256 * KIB
    parts[0].close()
    parts[3].close()
    assert stat("inactive_split.all.current") == 0
    assert stat("inactive_split_bytes.all.current") == 0
    with acc.Buffer(MIB) as whole:      # the largest small request
        assert whole.ptr == base


# ACCELERATOR_ALLOCATOR=direct ------------------------------------------------

direct_only = pytest.mark.skipif(
    not DIRECT, reason="needs ACCELERATOR_ALLOCATOR=direct (tests/run.sh)")


@direct_only
def test_direct_every_buffer_is_a_driver_allocation(
        driver: fake_drivers.DriverDouble) -> None:
    assert acc._accelerator._allocator() == "direct"
    base = acc.memory_stats()
    before = counts(driver)
    for _ in range(5):
        with acc.Buffer(1000):
            stats = acc.memory_stats()
            # exactly the bytes asked for: memory checkers see the bounds
            assert stats["allocated_bytes.all.current"] == 1000 + base[
                "allocated_bytes.all.current"]
            assert stats["reserved_bytes.small_pool.current"] == 1000 + base[
                "reserved_bytes.small_pool.current"]
    assert counts(driver) == (before[0] + 5, before[1] + 5)
    stats = acc.memory_stats()
    assert stats["num_device_alloc"] - base["num_device_alloc"] == 5
    assert stats["num_device_free"] - base["num_device_free"] == 5
    assert stats["reserved_bytes.all.current"] == base[
        "reserved_bytes.all.current"]


@direct_only
def test_direct_free_waits_for_the_stream(
        driver: fake_drivers.DriverDouble) -> None:
    s = acc.Stream()
    live = driver.live("alloc")
    b = acc.Buffer(4096, stream=s)
    b.fill(1, stream=s)
    with driver.gate(s) as gate:
        b.close()
        acc.Buffer(1).close()  # settles what is done, without waiting
        assert driver.live("alloc") == live + 1
        assert stat("active_bytes.all.current") == 4096
        assert stat("allocated_bytes.all.current") == 0
        gate.open()
    s.synchronize()
    acc.empty_cache()
    assert driver.live("alloc") == live
    assert stat("active_bytes.all.current") == 0
    assert stat("reserved_bytes.all.current") == 0


# Out of memory and the cap ---------------------------------------------------


@caching_only
def test_oom_releases_the_cache_and_retries(
        driver: fake_drivers.DriverDouble) -> None:
    acc.Buffer(4096).close()          # a cached small segment
    acc.reset_accumulated_memory_stats()
    code, _ = driver.oom_error
    driver.fail(driver.functions["mem_alloc"], 1, code)
    with acc.Buffer(5 * MIB) as b:
        assert b.nbytes == 5 * MIB
    stats = acc.memory_stats()
    assert stats["num_alloc_retries"] == 1
    assert stats["num_ooms"] == 0
    assert stats["num_device_free"] == 1       # the cached segment went
    assert stats["num_sync_all_streams"] >= 1
    assert stats["segment.small_pool.current"] == 0


def test_oom_raises_torchs_message(
        driver: fake_drivers.DriverDouble, accel_type: str) -> None:
    keep = acc.Buffer(3 * MIB)
    code, name = driver.oom_error
    driver.fail(driver.functions["mem_alloc"], 0, code)
    before = acc.memory_stats()
    with pytest.raises(acc.OutOfMemoryError) as info:
        acc.Buffer(300 * MIB)
    driver.clear_faults()
    message = str(info.value)
    assert message.startswith(f"{driver.display_type} out of memory. ")
    assert "Tried to allocate 300.00 MiB" in message
    assert "total capacity of" in message and "is free" in message
    assert "is allocated" in message and "reserved but unallocated" in message
    assert info.value.code == code and info.value.error_name == name
    after = acc.memory_stats()
    assert after["num_ooms"] == before["num_ooms"] + 1
    assert after["num_alloc_retries"] == before["num_alloc_retries"] + 1
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current",
                "active_bytes.all.current", "allocation.all.current"):
        assert after[key] == before[key], key
    keep.close()


def test_fraction_caps_the_reservation(accel_type: str) -> None:
    free, total = acc.get_memory_info()
    keep = acc.Buffer(3 * MIB)
    reserved = acc.memory_reserved()
    acc.set_per_process_memory_fraction((reserved + 30 * MIB) / total)
    with acc.Buffer(20 * MIB):       # fits under the cap
        with pytest.raises(acc.OutOfMemoryError, match="allowed"):
            acc.Buffer(20 * MIB)
    assert stat("num_ooms") >= 1
    acc.set_per_process_memory_fraction(1.0)
    with acc.Buffer(20 * MIB), acc.Buffer(20 * MIB):
        pass
    keep.close()


def test_fraction_argument_errors(accel_type: str) -> None:
    with pytest.raises(TypeError, match="must be `float`"):
        acc.set_per_process_memory_fraction(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        acc.set_per_process_memory_fraction(1.5)
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        acc.set_per_process_memory_fraction(float("nan"))
    with pytest.raises(acc.DeviceIndexError):
        acc.set_per_process_memory_fraction(0.5, 99)


# Threads -----------------------------------------------------------------------


def test_threads_stats_add_up(accel_type: str) -> None:
    acc.reset_accumulated_memory_stats()
    base = acc.memory_stats()
    sizes = [512, 4096, 100 * KIB, 1 * MIB, 3 * MIB, 12 * MIB]
    rounds = 40
    errors: list[BaseException] = []
    asked = [0] * 16

    def work(index: int) -> None:
        try:
            stream = acc.Stream() if index % 2 else acc.current_stream()
            held = []
            for r in range(rounds):
                size = sizes[(index + r) % len(sizes)]
                held.append(acc.Buffer(size, stream=stream))
                asked[index] += size
                if r % 3 == 2:
                    for b in held:
                        b.close()
                    held.clear()
            for b in held:
                b.close()
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = acc.memory_stats()
    assert stats["allocation.all.allocated"] == 16 * rounds
    assert stats["allocation.all.freed"] == 16 * rounds
    assert stats["requested_bytes.all.allocated"] == sum(asked)
    assert stats["requested_bytes.all.freed"] == sum(asked)
    for key in ("allocation", "allocated_bytes", "active", "active_bytes",
                "requested_bytes"):
        for pool in POOLS:
            assert stats[f"{key}.{pool}.current"] == base[
                f"{key}.{pool}.current"], (key, pool)
    assert (stats["allocated_bytes.all.allocated"]
            == stats["allocated_bytes.all.freed"])
    for key in KEYS:
        assert stats[f"{key}.all.current"] == (
            stats[f"{key}.small_pool.current"]
            + stats[f"{key}.large_pool.current"]), key
    assert stats["reserved_bytes.all.current"] == (
        base["reserved_bytes.all.current"]
        + stats["reserved_bytes.all.allocated"]
        - stats["reserved_bytes.all.freed"])
    acc.synchronize()
    acc.empty_cache()
    assert acc.memory_reserved() == base["reserved_bytes.all.current"]


# Memory summary, memory_info and the report --------------------------------


def test_memory_summary_is_a_table(accel_type: str) -> None:
    with acc.Buffer(1024):
        text = acc.memory_summary()
        short = acc.memory_summary(abbreviated=True)
    lines = text.splitlines()
    assert "memory summary, device 0" in lines[1]
    assert all(len(line) == len(lines[0]) for line in lines)
    assert any(line.startswith("| Allocated memory") and "1024 B" in line
               for line in lines)
    assert "from small pool" in text and "from small pool" not in short
    assert acc.memory.memory_summary is acc.memory_summary


def test_memory_functions_take_devices(accel_type: str,
                                       two_devices: None) -> None:
    with acc.Buffer(4096, 1):
        assert acc.memory_allocated(1) == 4096
        assert acc.memory_allocated(f"{accel_type}:1") == 4096
        assert acc.memory_allocated(acc.device(accel_type, 1)) == 4096
        assert acc.memory_allocated(0) == 0
    acc.reset_peak_memory_stats(1)
    acc.reset_accumulated_memory_stats(1)
    with pytest.raises(acc.DeviceIndexError):
        acc.memory_stats(5)
    with pytest.raises(ValueError):
        acc.memory_reserved("cpu")


def test_top_level_reexports() -> None:
    for name in acc.memory.__all__:
        assert getattr(acc, name) is getattr(acc.memory, name), name
        assert name in acc.__all__


def test_empty_before_the_first_allocation() -> None:
    env = fake_drivers.clean_environment()
    env.update({k: v for k, v in os.environ.items()
                if k.startswith(("ACCELERATOR_", "FAKE_", "ZE_"))})
    env["PYTHONPATH"] = str(fake_drivers.SRC)
    code = ("import accelerator as a\n"
            "assert a.memory_stats() == {}, a.memory_stats()\n"
            "assert a.memory_allocated() == 0 == a.max_memory_reserved()\n"
            "a.empty_cache()\n"
            "a.Buffer(10).close()\n"
            "s = a.memory_stats()\n"
            "assert s['allocation.all.allocated'] == 1, s\n"
            "last = a.memory_stats(a.device_count() - 1)\n"
            "assert last['allocation.all.allocated'] == "
            "(1 if a.device_count() == 1 else 0), last\n")
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
