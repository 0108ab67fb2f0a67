"""Random allocate/free sequences against a model of the allocator's pools.

The model is the design written out in Python (torch's caching
allocator): rounding, the two pools and their segment sizes, best fit
among the free blocks of the same pool and stream (smallest, then lowest
address), split rules, merging with free neighbours, empty_cache
releasing wholly free segments.  After every step the buffer addresses
must be where the model puts them and every statistic must equal the
model's; besides, the model's own sums are checked (allocated bytes are
the live blocks' sizes, reserved bytes the segments').
"""
from __future__ import annotations

import dataclasses
import os
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accelerator as acc
from test_memory import _memory_supported

pytestmark = [
    pytest.mark.skipif(not _memory_supported(),
                       reason="the backend has no device memory slots"),
    pytest.mark.skipif(os.environ.get("ACCELERATOR_ALLOCATOR") == "direct",
                       reason="models the caching allocator"),
]

KIB = 1024
MIB = 1024 * KIB
SMALL_SIZE = MIB
STAT_ARRAYS = ("allocation", "segment", "active", "inactive_split",
               "allocated_bytes", "reserved_bytes", "active_bytes",
               "inactive_split_bytes", "requested_bytes")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_device_alloc",
            "num_device_free")


def round_size(n: int) -> int:
    return 512 if n < 512 else (n + 511) // 512 * 512


def segment_size(size: int) -> int:
    if size <= SMALL_SIZE:
        return 2 * MIB
    if size < 10 * MIB:
        return 20 * MIB
    return (size + 2 * MIB - 1) // (2 * MIB) * (2 * MIB)


def should_split(pool: str, remaining: int) -> bool:
    return remaining >= 512 if pool == "small_pool" else remaining > SMALL_SIZE


@dataclasses.dataclass
class Block:
    ptr: int
    size: int
    pool: str
    stream: int
    segment: int
    allocated: bool = False
    requested: int = 0


class Model:
    """The pools of one device, and the statistics they imply."""

    def __init__(self, stats: dict[str, int]) -> None:
        self.blocks: dict[int, Block] = {}    # by address, free and live
        self.segments: dict[int, int] = {}    # base -> size
        self.stats: dict[str, int] = defaultdict(int)
        self.stats.update(stats)

    def add(self, name: str, pool: str, delta: int) -> None:
        for kind in ("all", pool):
            key = f"{name}.{kind}"
            self.stats[f"{key}.current"] += delta
            if delta >= 0:
                self.stats[f"{key}.allocated"] += delta
                self.stats[f"{key}.peak"] = max(
                    self.stats[f"{key}.peak"], self.stats[f"{key}.current"])
            else:
                self.stats[f"{key}.freed"] -= delta

    def prev_of(self, b: Block) -> Block | None:
        for other in self.blocks.values():
            if other.segment == b.segment and other.ptr + other.size == b.ptr:
                return other
        return None

    def next_of(self, b: Block) -> Block | None:
        other = self.blocks.get(b.ptr + b.size)
        return other if other is not None and other.segment == b.segment \
            else None

    def is_split(self, b: Block) -> bool:
        return self.prev_of(b) is not None or self.next_of(b) is not None

    def find(self, nbytes: int, stream: int) -> Block | None:
        """The free block the allocator must use, or None (new segment)."""
        size = round_size(nbytes)
        pool = "small_pool" if size <= SMALL_SIZE else "large_pool"
        fits = [b for b in self.blocks.values()
                if not b.allocated and b.pool == pool and b.stream == stream
                and b.size >= size]
        return min(fits, key=lambda b: (b.size, b.ptr)) if fits else None

    def allocate(self, nbytes: int, stream: int, ptr: int) -> None:
        size = round_size(nbytes)
        pool = "small_pool" if size <= SMALL_SIZE else "large_pool"
        b = self.find(nbytes, stream)
        if b is None:
            seg = segment_size(size)
            for base, length in self.segments.items():
                assert not (base < ptr + seg and ptr < base + length), \
                    "a new segment overlaps a reserved one"
            self.segments[ptr] = seg
            b = Block(ptr, seg, pool, stream, segment=ptr)
            self.blocks[ptr] = b
            self.add("segment", pool, 1)
            self.add("reserved_bytes", pool, seg)
            self.stats["num_device_alloc"] += 1
        assert b.ptr == ptr, "the allocator did not pick the best fit"
        already_split = self.is_split(b)
        remaining = b.size - size
        if should_split(pool, remaining):
            rest = Block(b.ptr + size, remaining, pool, stream, b.segment)
            self.blocks[rest.ptr] = rest
            b.size = size
            if already_split:
                self.add("inactive_split_bytes", pool, -size)
            else:
                self.add("inactive_split_bytes", pool, remaining)
                self.add("inactive_split", pool, 1)
        elif already_split:
            self.add("inactive_split_bytes", pool, -b.size)
            self.add("inactive_split", pool, -1)
        b.allocated = True
        b.requested = nbytes
        self.add("allocation", pool, 1)
        self.add("allocated_bytes", pool, b.size)
        self.add("active", pool, 1)
        self.add("active_bytes", pool, b.size)
        self.add("requested_bytes", pool, nbytes)

    def free(self, ptr: int) -> None:
        b = self.blocks[ptr]
        pool = b.pool
        original = b.size
        self.add("allocation", pool, -1)
        self.add("allocated_bytes", pool, -b.size)
        b.allocated = False
        net_blocks = net_bytes = 0
        for other in (self.prev_of(b), self.next_of(b)):
            if other is None or other.allocated:
                continue
            del self.blocks[other.ptr]
            if other.ptr < b.ptr:
                del self.blocks[b.ptr]
                b.ptr = other.ptr
                self.blocks[b.ptr] = b
            b.size += other.size
            net_blocks -= 1
            net_bytes -= other.size
        if self.is_split(b):
            net_blocks += 1
            net_bytes += b.size
        self.add("inactive_split", pool, net_blocks)
        self.add("inactive_split_bytes", pool, net_bytes)
        self.add("active", pool, -1)
        self.add("active_bytes", pool, -original)
        self.add("requested_bytes", pool, -b.requested)

    def empty_cache(self) -> None:
        for b in list(self.blocks.values()):
            if not b.allocated and not self.is_split(b):
                del self.blocks[b.ptr]
                del self.segments[b.ptr]
                self.add("segment", b.pool, -1)
                self.add("reserved_bytes", b.pool, -b.size)
                self.stats["num_device_free"] += 1

    def check_sums(self) -> None:
        live = [b for b in self.blocks.values() if b.allocated]
        assert self.stats["allocated_bytes.all.current"] == sum(
            b.size for b in live)
        assert self.stats["requested_bytes.all.current"] == sum(
            b.requested for b in live)
        assert self.stats["reserved_bytes.all.current"] == sum(
            self.segments.values())
        assert sum(b.size for b in self.blocks.values()) == sum(
            self.segments.values())


def compared(stats: dict[str, int]) -> dict[str, int]:
    keys = [k for k in stats if k.split(".")[0] in STAT_ARRAYS]
    return {k: stats[k] for k in sorted(keys) + list(COUNTERS)}


SIZES = st.one_of(
    st.integers(1, 4 * KIB),
    st.integers(4 * KIB, SMALL_SIZE),
    st.integers(SMALL_SIZE + 1, 10 * MIB),
    st.integers(10 * MIB, 24 * MIB),
    st.sampled_from([512, 1024, SMALL_SIZE, 2 * MIB, 10 * MIB]),
)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), SIZES, st.integers(0, 1)),
        st.tuples(st.just("free"), st.integers(0, 10 ** 6), st.just(0)),
        st.tuples(st.just("empty_cache"), st.just(0), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_pools_follow_the_model(accel_type: str, steps: list) -> None:
    streams = [acc.current_stream(), acc.Stream()]
    acc.synchronize()
    acc.empty_cache()
    baseline = acc.memory_stats()
    model = Model(compared(baseline) if baseline else {})
    live: list[acc.Buffer] = []
    try:
        for op, value, which in steps:
            if op == "alloc":
                buf = acc.Buffer(value, stream=streams[which])
                live.append(buf)
                model.allocate(value, which, buf.ptr)
            elif op == "free" and live:
                buf = live.pop(value % len(live))
                ptr = buf.ptr
                buf.close()
                model.free(ptr)
            elif op == "empty_cache":
                acc.empty_cache()
                model.empty_cache()
            model.check_sums()
            actual = compared(acc.memory_stats())
            assert actual == {k: model.stats[k] for k in actual}
    finally:
        for buf in live:
            buf.close()
        acc.synchronize()
        acc.empty_cache()
