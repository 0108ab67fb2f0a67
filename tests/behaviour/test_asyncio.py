"""asyncio: ``await event`` / ``await stream`` wait for the device without
blocking the event loop (one waiter thread per process)."""
from __future__ import annotations

import asyncio
import gc
import os
import threading

import pytest

import accelerator as acc
from accelerator import _aio
from fake_drivers import Gate


async def _tick_while(awaitable: object, gate: Gate | None = None) -> int:
    """Await awaitable while a task ticks; the ticks counted meanwhile.
    The ticker opens gate (the work awaited) after a few ticks: a loop
    blocked in the wait would never tick, so the wait would never end."""
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            if gate is not None and ticks >= 3:
                gate.open()
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # let the ticker start
    ticks = 0
    await awaitable  # type: ignore[misc]
    done = True
    await task
    return ticks


def test_await_event_lets_other_tasks_run(driver) -> None:
    stream = acc.Stream()
    event = acc.Event()
    with driver.gate(stream) as gate:
        event.record(stream)
        ticks = asyncio.run(_tick_while(event, gate))
    assert event.query() is True
    # A loop blocked in the wait would give the ticker no turn at all.
    assert ticks > 1


def test_await_stream_and_the_method_spellings(driver) -> None:
    stream = acc.Stream()
    with driver.gate(stream) as gate:
        ticks = asyncio.run(_tick_while(stream, gate))
    assert stream.query() is True and ticks > 1

    with driver.gate(stream) as gate:
        ticks = asyncio.run(_tick_while(stream.synchronize_async(), gate))
    assert stream.query() is True and ticks > 1

    event = acc.Event()
    with driver.gate(stream) as gate:
        event.record(stream)
        ticks = asyncio.run(_tick_while(event.wait_async(), gate))
    assert event.query() is True and ticks > 1


def test_completed_work_needs_no_waiter(monkeypatch) -> None:
    """Awaiting an event whose work is done completes at once: it never
    goes to the waiter thread.  (Awaiting a stream records a new event,
    which the driver may not have reached yet.)"""
    submitted: list[object] = []
    submit = _aio._submit

    def counted(item) -> None:  # type: ignore[no-untyped-def]
        submitted.append(item[0])
        submit(item)    # still waited for: a wrong submit fails, not hangs

    monkeypatch.setattr(_aio, "_submit", counted)

    never = acc.Event()  # never recorded: complete
    event = acc.Event()

    async def main() -> list[bool]:
        await never
        event.record(acc.Stream())
        acc.synchronize()
        await event
        await acc.current_stream()
        return [never.query(), event.query()]

    assert asyncio.run(main()) == [True, True]
    assert not [e for e in submitted if e is never or e is event]


def test_await_without_a_running_loop_is_refused() -> None:
    with pytest.raises(RuntimeError, match="no running event loop"):
        acc.Event().__await__().send(None)
    with pytest.raises(TypeError, match="accelerator.Event"):
        asyncio.run(_aio.wait_event(acc.Stream()))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="accelerator.Stream"):
        asyncio.run(_aio.synchronize_stream(acc.Event()))  # type: ignore


def test_cancelled_await_leaves_nothing_behind(driver) -> None:
    stream = acc.Stream()

    async def cancel_round() -> None:
        # 500 ms of work, cancelled after 5: a loaded instrumented run saw
        # 50 ms finish before the cancel.  (A gate instead left one more
        # driver event live now and then under 3.13, not yet understood.)
        driver.enqueue_sleep(stream, 500)
        tasks = [asyncio.create_task(stream.synchronize_async())
                 for _ in range(5)]
        await asyncio.sleep(0.005)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with pytest.raises(asyncio.CancelledError):
                await task
        # The waiter takes items in order: once this await completes it
        # has passed (and dropped) the cancelled ones.
        await stream

    def live_after_round() -> tuple[int, int]:
        asyncio.run(cancel_round())
        gc.collect()
        waiters = [t for t in threading.enumerate()
                   if t.name == "accelerator-waiter"]
        assert waiters == [_aio.waiter_thread()]
        return driver.live("event"), threading.active_count()

    # The first round fills the event pool; later rounds must not grow
    # the driver's events or the threads.
    first = live_after_round()
    for _ in range(3):
        assert live_after_round() == first


def test_a_hundred_concurrent_awaits(driver) -> None:
    streams = [acc.Stream() for _ in range(4)]

    async def main() -> list[bool]:
        awaitables = []
        for i in range(100):
            stream = streams[i % len(streams)]
            driver.enqueue_sleep(stream, 1)
            if i % 2:
                awaitables.append(stream.synchronize_async())
            else:
                event = acc.Event()
                event.record(stream)
                awaitables.append(event.wait_async())
        await asyncio.gather(*awaitables)
        return [s.query() for s in streams]

    assert asyncio.run(main()) == [True] * len(streams)


def test_two_loops_in_two_threads(driver) -> None:
    results: dict[int, object] = {}

    def worker(n: int) -> None:
        stream = acc.Stream()
        try:
            with driver.gate(stream) as gate:
                results[n] = asyncio.run(_tick_while(stream, gate))
            assert stream.query() is True
        except BaseException as exc:  # reported by the main thread
            results[n] = exc

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert all(isinstance(results[n], int) and results[n] > 1  # type: ignore
               for n in range(2)), results


def test_driver_error_reaches_the_awaiter(driver, facts) -> None:
    name = facts.functions["event_synchronize"]
    stream = acc.Stream()
    event = acc.Event()
    driver.enqueue_sleep(stream, 50)
    event.record(stream)
    driver.fail(name, 1, facts.unknown_error[0])
    try:
        with pytest.raises(acc.AcceleratorError,
                           match=facts.unknown_error[1]):
            asyncio.run(_aio.wait_event(event))
    finally:
        driver.clear_faults()
    event.synchronize()


def test_a_forked_child_does_not_inherit_the_waiter(driver) -> None:
    stream = acc.Stream()
    driver.enqueue_sleep(stream, 20)
    asyncio.run(stream.synchronize_async())
    assert _aio.waiter_thread() is not None
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is gone, so is its state
        os._exit(0 if _aio.waiter_thread() is None and _aio._queue is None
                 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _aio.waiter_thread() is not None


@pytest.mark.parametrize("spelling", ["await stream", "synchronize_async"])
def test_awaiting_a_capturing_stream_raises_as_synchronize_does(
        driver, facts, spelling: str) -> None:
    """Stream.synchronize() on a capturing stream raises the driver's
    capture error; awaiting it returned at once (its event record was
    captured, not run) while the work queued before the capture had not
    run.  It raises the same error now (torch: synchronizing a capturing
    stream is an error)."""
    if not facts.has("graphs"):
        pytest.skip(facts.lacks["graphs"])
    stream = acc.Stream()
    g = acc.Graph()

    async def wait() -> None:
        if spelling == "await stream":
            await stream
        else:
            await stream.synchronize_async()

    with driver.gate(stream) as gate:   # work queued before the capture
        for attempt in ("synchronize", spelling):
            with stream:
                g.capture_begin()
            with pytest.raises(acc.AcceleratorError,
                               match=facts.capture_errors["refused"]):
                if attempt == "synchronize":
                    stream.synchronize()
                else:
                    asyncio.run(wait())
            with stream, pytest.raises(acc.AcceleratorError):
                g.capture_end()          # invalidated, as by synchronize
            g.reset()
        gate.open()
    stream.synchronize()
