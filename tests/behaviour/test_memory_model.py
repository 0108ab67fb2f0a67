"""Hypothesis: sequences of alloc/copy/fill/free against a model of bytes.

Every Buffer has a bytearray model.  Fills, copies from host bytes,
copies between byte ranges of buffers (views, on one device or across
two), round trips through HostBuffers, stream switches (the new stream
waits for the old one, so the program order is the device order), closes
and drops run in random order; every read compares the device bytes with
the model.  At the end the double has seen no bad access, no damaged
guard byte, and every allocation is back.  Derandomized for CI.
"""
from __future__ import annotations

import gc
import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, consumes,
                                 invariant, rule, run_state_machine_as_test)

import accelerator as acc

from test_memory import _memory_supported, settle

pytestmark = pytest.mark.skipif(
    not _memory_supported(), reason="the backend has no device memory slots")

EXAMPLES = int(os.environ.get("MEMORY_MODEL_EXAMPLES", "25"))
STEPS = int(os.environ.get("MEMORY_MODEL_STEPS", "30"))


class Tracked:
    def __init__(self, buffer: acc.Buffer, model: bytearray) -> None:
        self.buffer = buffer
        self.model = model


class MemoryModel(RuleBasedStateMachine):
    buffers = Bundle("buffers")
    driver: object = None

    def __init__(self) -> None:
        super().__init__()
        self.devices = acc.device_count()
        self.live: list[Tracked] = []
        self.streams = {d: acc.current_stream(d) for d in range(self.devices)}

    @rule(target=buffers, size=st.integers(0, 3000),
          device=st.integers(0, 1), value=st.integers(0, 255))
    def alloc(self, size: int, device: int, value: int) -> Tracked:
        device %= self.devices
        buffer = acc.Buffer(size, device)
        buffer.fill(value)
        tracked = Tracked(buffer, bytearray([value]) * size)
        self.live.append(tracked)
        return tracked

    def span(self, data: st.DataObject, t: Tracked,
             length: int | None = None) -> tuple[int, int]:
        n = len(t.model)
        if length is None:
            length = data.draw(st.integers(0, n))
        start = data.draw(st.integers(0, n - length))
        return start, start + length

    @rule(t=buffers, data=st.data(), value=st.integers(0, 255))
    def fill_view(self, t: Tracked, data: st.DataObject, value: int) -> None:
        i, j = self.span(data, t)
        t.buffer[i:j].fill(value)
        t.model[i:j] = bytes([value]) * (j - i)

    @rule(t=buffers, data=st.data())
    def copy_from_host(self, t: Tracked, data: st.DataObject) -> None:
        i, j = self.span(data, t)
        payload = data.draw(st.binary(min_size=j - i, max_size=j - i))
        t.buffer[i:j].copy_from(payload)
        t.model[i:j] = payload

    @rule(dst=buffers, src=buffers, data=st.data())
    def copy_between(self, dst: Tracked, src: Tracked,
                     data: st.DataObject) -> None:
        length = data.draw(st.integers(0, min(len(dst.model),
                                              len(src.model))))
        i, j = self.span(data, dst, length)
        k, m = self.span(data, src, length)
        if dst is src and max(i, k) < min(j, m):
            return  # overlapping ranges of one buffer: undefined
        dst.buffer[i:j].copy_from(src.buffer[k:m])
        dst.model[i:j] = src.model[k:m]

    @rule(t=buffers, data=st.data())
    def read_back(self, t: Tracked, data: st.DataObject) -> None:
        i, j = self.span(data, t)
        out = bytearray(j - i)
        t.buffer[i:j].copy_to(out)
        assert out == t.model[i:j]

    @rule(t=buffers)
    def through_host_buffer(self, t: Tracked) -> None:
        host = acc.HostBuffer(len(t.model))
        t.buffer.copy_to(host)
        t.buffer.copy_from(host)
        acc.current_stream(t.buffer.device.index).synchronize()
        assert bytes(memoryview(host)) == t.model

    @rule(device=st.integers(0, 1))
    def switch_stream(self, device: int) -> None:
        device %= self.devices
        new = acc.Stream(device)
        new.wait_stream(acc.current_stream(device))
        acc.set_stream(new)
        acc.set_device_index(0)

    @rule(device=st.integers(0, 1), ms=st.sampled_from([1, 5, 20]))
    def slow_work(self, device: int, ms: int) -> None:
        """Timed work on a current stream: what follows on that stream
        runs later, so a missing order shows as wrong bytes."""
        self.driver.enqueue_sleep(acc.current_stream(device % self.devices),
                                  ms)

    @rule(t=buffers, device=st.integers(0, 1))
    def record_stream(self, t: Tracked, device: int) -> None:
        t.buffer.record_stream(acc.current_stream(device % self.devices))

    @rule(t=consumes(buffers), close=st.booleans())
    def free(self, t: Tracked, close: bool) -> None:
        out = bytearray(len(t.model))
        t.buffer.copy_to(out)
        assert out == t.model
        if close:
            t.buffer.close()
        self.live.remove(t)

    @invariant()
    def sizes(self) -> None:
        for t in self.live:
            assert t.buffer.nbytes == len(t.model)

    def teardown(self) -> None:
        for t in self.live:
            out = bytearray(len(t.model))
            t.buffer.copy_to(out)
            assert out == t.model
        self.live.clear()
        for stream in self.streams.values():
            acc.set_stream(stream)
        acc.set_device_index(0)


def test_memory_against_a_model_of_the_bytes(driver) -> None:
    settle()
    MemoryModel.driver = driver
    before = {kind: driver.live(kind) for kind in ("alloc", "host_alloc")}
    run_state_machine_as_test(MemoryModel, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        derandomize=True, database=None,
        suppress_health_check=list(HealthCheck)))
    settle()
    assert {kind: driver.live(kind) for kind in before} == before
    assert driver.live("bad_access") == 0
    assert driver.live("guard_damage") == 0
