"""Threads against a model of bytes: the lifetime model under races.

Four threads allocate, fill and copy (through views, from_dlpack()
wrappers of this module's Buffers and of foreign capsules, and
HostBuffers), read back, record streams, export and close, on random
streams of random devices, for a bounded time; one of them also closes
buffers that the others are using.  Each Buffer has a bytearray model;
every read compares the device bytes with it.  Work on one buffer is
ordered as the program wrote it (a stream waits for the buffer's last
stream before using it), so the model is exact; a buffer another thread
closed raises ValueError, and its model is dropped.  The doubles'
detectors (test_memory's memory_checks) must see no use after free and no
damaged guard byte.

CI runs one fixed seed for a few seconds.  For longer runs:
MEMORY_MODEL_SEED (an int, or "random"), MEMORY_MODEL_RUNS (runs, seeds
counting up) and MEMORY_MODEL_SECONDS (per run).
"""
from __future__ import annotations

import gc
import os
import random
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import accelerator as acc
import fake_drivers
from test_dlpack import Made
from test_memory import _memory_supported, memory_checks  # noqa: F401

pytestmark = pytest.mark.skipif(
    not _memory_supported(), reason="the backend has no device memory slots")

_SEED = os.environ.get("MEMORY_MODEL_SEED", "2112")
SEED = (int.from_bytes(os.urandom(4), "little") if _SEED == "random"
        else int(_SEED))
RUNS = int(os.environ.get("MEMORY_MODEL_RUNS", "1"))
SECONDS = float(os.environ.get("MEMORY_MODEL_SECONDS", "3"))
THREADS = 4


class Tracked:
    """A Buffer, its model, and the stream its last work ran on."""

    def __init__(self, buffer: acc.Buffer, model: bytearray,
                 last: acc.Stream) -> None:
        self.buffer = buffer
        self.model = model
        self.last = last
        self.busy = False      # taken by a thread (under World.lock)
        # Foreign capsules over its memory (another library's arrays):
        # while one is not released, the program must not close the
        # buffer without telling it of that work (record_stream).
        self.foreign: list[Made] = []

    def pinned(self) -> bool:
        return any(not m.deleted for m in self.foreign)


class World:
    def __init__(self, seed: int, driver: fake_drivers.DriverDouble) -> None:
        self.seed = seed
        self.driver = driver
        self.devices = min(acc.device_count(), 2)
        self.streams = {d: [acc.current_stream(d), acc.Stream(d),
                            acc.Stream(d)] for d in range(self.devices)}
        self.lock = threading.Lock()
        self.live: list[Tracked] = []
        self.made: list[Made] = []     # foreign producers, kept to the end
        self.errors: list[str] = []
        self.ops = 0
        self.deadline = time.monotonic() + SECONDS

    # Taking buffers: one thread at a time works on a buffer --------------

    def take(self, rng: random.Random, n: int) -> list[Tracked]:
        with self.lock:
            free = [t for t in self.live if not t.busy]
            if len(free) < n:
                return []
            got = rng.sample(free, n)
            for t in got:
                t.busy = True
            return got

    def give(self, ts: list[Tracked]) -> None:
        with self.lock:
            for t in ts:
                t.busy = False

    def foreign(self, t: Tracked, made: Made) -> bool:
        """Register made over t's memory, unless t was closed."""
        with self.lock:
            if t not in self.live or t.buffer.closed:
                return False
            t.foreign.append(made)
            self.made.append(made)
            return True

    def drop(self, t: Tracked) -> None:
        with self.lock:
            if t in self.live:
                self.live.remove(t)

    def stream(self, rng: random.Random, device: int) -> acc.Stream:
        if rng.random() < 0.1:
            return acc.Stream(device)  # a per-request stream, dropped
        s = rng.choice(self.streams[device])
        if rng.random() < 0.3:    # busy: work queued now lands later
            self.driver.enqueue_sleep(s, rng.choice((0.5, 2.0)))
        return s

    def ordered(self, s: acc.Stream, *ts: Tracked) -> None:
        """Make s run after the work queued so far on each buffer."""
        for t in ts:
            s.wait_stream(t.last)


def span(rng: random.Random, n: int, length: int | None = None
         ) -> tuple[int, int]:
    if length is None:
        length = rng.randint(0, n)
    start = rng.randint(0, n - length)
    return start, start + length


def read(t: Tracked, s: acc.Stream) -> bytes:
    out = bytearray(len(t.model))
    t.buffer.copy_to(out, stream=s)
    return bytes(out)


# The operations: each returns normally, or raises ValueError for a buffer
# another thread closed (handled by the caller) --------------------------


def op_alloc(w: World, rng: random.Random) -> None:
    device = rng.randrange(w.devices)
    s = w.stream(rng, device)
    size = rng.choice((0, 1, 100, 4096, 70000))
    value = rng.randrange(256)
    b = acc.Buffer(size, device, stream=s)
    b.fill(value, stream=s)
    with w.lock:
        w.live.append(Tracked(b, bytearray([value]) * size, s))


def op_fill(w: World, rng: random.Random, t: Tracked) -> None:
    s = w.stream(rng, t.buffer.device.index)
    i, j = span(rng, len(t.model))
    value = rng.randrange(256)
    w.ordered(s, t)
    view = t.buffer[i:j]
    if rng.random() < 0.3:    # through a wrapper of our own export
        view = acc.from_dlpack(view)
    view.fill(value, stream=s)
    t.model[i:j] = bytes([value]) * (j - i)
    t.last = s
    if rng.random() < 0.5:
        view.close(s if rng.random() < 0.5 else None)


def op_foreign(w: World, rng: random.Random, t: Tracked) -> None:
    """A fill through a from_dlpack() wrapper of a foreign capsule over
    the buffer's memory, closed at once (the producer is released once
    the fill ran)."""
    n = len(t.model)
    if n == 0:
        return
    s = w.stream(rng, t.buffer.device.index)
    i, j = span(rng, n)
    if j == i:
        return
    made = Made(t.buffer.ptr + i, [j - i],
                device=(w.driver.dlpack_device_type,
                        t.buffer.device.index))
    if not w.foreign(t, made):
        return
    value = rng.randrange(256)
    w.ordered(s, t)
    wrapped = acc.from_dlpack(made.capsule)
    wrapped.fill(value, stream=s)
    wrapped.close()
    t.model[i:j] = bytes([value]) * (j - i)
    t.last = s


def op_copy(w: World, rng: random.Random, dst: Tracked, src: Tracked
            ) -> None:
    length = rng.randint(0, min(len(dst.model), len(src.model)))
    i, j = span(rng, len(dst.model), length)
    k, m = span(rng, len(src.model), length)
    device = rng.choice((dst.buffer.device.index, src.buffer.device.index))
    s = w.stream(rng, device)
    w.ordered(s, dst, src)
    dst.buffer[i:j].copy_from(src.buffer[k:m], stream=s)
    dst.model[i:j] = src.model[k:m]
    dst.last = src.last = s


def op_host(w: World, rng: random.Random, t: Tracked) -> None:
    """Through a HostBuffer: in (closed while the copy is queued) or out
    (read back with numpy.from_dlpack)."""
    n = len(t.model)
    s = w.stream(rng, t.buffer.device.index)
    w.ordered(s, t)
    h = acc.HostBuffer(n)
    if rng.random() < 0.5:
        payload = bytes(rng.randrange(256) for _ in range(min(n, 64)))
        payload = (payload * (n // max(len(payload), 1) + 1))[:n]
        memoryview(h)[:] = payload
        t.buffer.copy_from(h, stream=s)
        h.close()             # freed once the copy has read it
        t.model[:] = payload
    else:
        t.buffer.copy_to(h, stream=s)
        got = bytes(np.from_dlpack(h)) if n else b""
        if got != bytes(t.model):
            w.errors.append(f"HostBuffer read differs from the model "
                            f"(seed {w.seed})")
        h.close()
    t.last = s


def op_check(w: World, rng: random.Random, t: Tracked) -> None:
    s = w.stream(rng, t.buffer.device.index)
    w.ordered(s, t)
    got = read(t, s)
    t.last = s
    if got != bytes(t.model):
        first = next(i for i in range(len(got)) if got[i] != t.model[i])
        w.errors.append(f"byte {first} of a {len(got)}-byte Buffer is "
                        f"{got[first]:#x}, the model says "
                        f"{t.model[first]:#x} (seed {w.seed})")


def op_record_and_close(w: World, rng: random.Random, t: Tracked) -> None:
    """Another library's write on s (a foreign wrapper's fill), made
    known by record_stream or close(s) on the buffer or a view."""
    s = w.stream(rng, t.buffer.device.index)
    w.ordered(s, t)
    if t.pinned():
        return                # unrecorded foreign work may be pending
    if len(t.model) > 0:
        made = Made(t.buffer.ptr, [len(t.model)],
                    device=(w.driver.dlpack_device_type,
                            t.buffer.device.index))
        if not w.foreign(t, made):
            return
        acc.from_dlpack(made.capsule).fill(0xEE, stream=s)
    how = rng.randrange(3)
    if how == 0:
        t.buffer.record_stream(s)
        t.buffer.close()
    elif how == 1:
        t.buffer.close(s)
    else:
        t.buffer[0:len(t.model)].close(s)
        t.buffer.close()
    w.drop(t)


def op_export(w: World, rng: random.Random, t: Tracked) -> None:
    """Export to a consumer stream and import the capsule again (a
    DLPack round trip, as another library would), then fill through it."""
    s = w.stream(rng, t.buffer.device.index)
    w.ordered(s, t)
    i, j = span(rng, len(t.model))
    value = rng.randrange(256)
    # (The protocol's name of a default stream whose handle is 0: CUDA's
    # legacy default stream is 1, ROCm's is 0.)
    stream = s.handle if s.handle else w.driver.dlpack_default_stream
    capsule = t.buffer[i:j].__dlpack__(stream=stream)
    wrapped = acc.from_dlpack(capsule)
    wrapped.fill(value, stream=s)
    t.model[i:j] = bytes([value]) * (j - i)
    t.last = s
    del wrapped


def op_close_others(w: World, rng: random.Random) -> None:
    """Close a buffer whatever thread is using it: the release must wait
    for that thread's call, and for its stream."""
    with w.lock:
        closable = [t for t in w.live if not t.pinned()]
        if not closable:
            return
        t = rng.choice(closable)
        w.live.remove(t)
    try:
        t.buffer.close()
    except BufferError:
        pass                  # a wrapper of it is alive: closed later
    else:
        return
    with w.lock:
        w.live.append(t)


ONE: list[tuple[float, Callable[[World, random.Random, Tracked], None]]] = [
    (3, op_fill), (1, op_foreign), (2, op_host), (3, op_check),
    (1, op_record_and_close), (2, op_export)]


def worker(w: World, index: int) -> None:
    rng = random.Random(w.seed * 100 + index)
    for device in range(w.devices):  # this thread's current streams
        acc.set_stream(rng.choice(w.streams[device]))
    while time.monotonic() < w.deadline and not w.errors:
        roll = rng.random()
        taken: list[Tracked] = []
        try:
            if roll < 0.15 or len(w.live) < 4:
                op_alloc(w, rng)
            elif roll < 0.2 and index == 0:
                op_close_others(w, rng)
            elif roll < 0.4:
                taken = w.take(rng, 2)
                if taken:
                    op_copy(w, rng, *taken)
            else:
                taken = w.take(rng, 1)
                if taken:
                    weights = [weight for weight, _ in ONE]
                    op = rng.choices([fn for _, fn in ONE], weights)[0]
                    op(w, rng, taken[0])
        except ValueError as exc:
            if "closed" not in str(exc):
                w.errors.append(f"{type(exc).__name__}: {exc} "
                                f"(seed {w.seed})")
            for t in taken:   # closed by another thread: model dropped
                if t.buffer.closed:
                    w.drop(t)
        except Exception as exc:  # noqa: BLE001 - reported with the seed
            w.errors.append(f"{type(exc).__name__}: {exc} (seed {w.seed})")
        finally:
            w.give(taken)
            w.ops += 1


@pytest.mark.parametrize("run", range(RUNS))
def test_threads_against_a_model_of_bytes(
        driver: fake_drivers.DriverDouble, run: int) -> None:
    w = World(SEED + run, driver)
    host_before = driver.live("host_alloc")
    # Calls stay inside the driver a while: closes land during them.
    for name in ("mem_fill", "event_record"):
        driver.delay(driver.functions[name], 0.2)
    threads = [threading.Thread(target=worker, args=(w, i))
               for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in ("mem_fill", "event_record"):
        driver.delay(driver.functions[name], 0)
    assert not w.errors, w.errors[:5]
    assert w.ops > 100 * SECONDS, f"only {w.ops} operations ran"
    print(f"seed {w.seed}: {w.ops} operations")
    for t in list(w.live):
        op_check(w, random.Random(0), t)
    assert not w.errors, w.errors[:5]
    for device in range(w.devices):
        acc.synchronize(device)
    gc.collect()
    acc.Buffer(0).close()     # settles the deferred releases
    for t in w.live:          # no foreign work left: each may close
        t.buffer.close()
    w.live.clear()
    assert all(m.deleted == 1 for m in w.made), \
        f"a foreign producer was not released (seed {w.seed})"
    assert driver.live("host_alloc") == host_before, \
        f"closed HostBuffers were not freed (seed {w.seed})"
    # memory_checks then asserts: no bad access, no damaged guard byte.
