"""asyncio support: ``await event``, ``await stream``.

One waiter thread per process takes (event, loop, future) items from a
queue in order, blocks in ``Event.synchronize()`` (which releases the GIL
while the driver waits) and completes the future on its own loop with
``loop.call_soon_threadsafe``.  Items whose future was cancelled are
dropped without waiting; an item holds the only extra references to its
event, so a cancelled await leaves no driver event behind once the waiter
has passed it.  The thread starts on the first await that must wait; a
forked child starts its own (threads do not survive fork).
"""
from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Generator
from typing import Any

from ._accelerator import Event, Stream

_Item = tuple[Event, asyncio.AbstractEventLoop, "asyncio.Future[None]"]

_lock = threading.Lock()
_queue: queue.SimpleQueue[_Item] | None = None
_thread: threading.Thread | None = None


def _settle(future: asyncio.Future[None],
            error: BaseException | None) -> None:
    """On the future's loop: complete it unless it was cancelled."""
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _run(items: queue.SimpleQueue[_Item]) -> None:
    """The waiter thread's body."""
    while True:
        event, loop, future = items.get()
        if future.cancelled():
            del event, loop, future
            continue
        error: BaseException | None = None
        try:
            event.synchronize()
        except Exception as exc:  # the driver's error goes to the awaiter
            error = exc
        try:
            loop.call_soon_threadsafe(_settle, future, error)
        except RuntimeError:
            pass  # the loop was closed meanwhile: nobody is waiting
        del event, loop, future, error


def _submit(item: _Item) -> None:
    global _queue, _thread
    with _lock:
        if _thread is None:
            _queue = queue.SimpleQueue()
            _thread = threading.Thread(target=_run, args=(_queue,),
                                       name="accelerator-waiter",
                                       daemon=True)
            _thread.start()
        assert _queue is not None
        _queue.put(item)


def _after_fork_in_child() -> None:
    global _lock, _queue, _thread
    _lock = threading.Lock()
    _queue = None
    _thread = None


os.register_at_fork(after_in_child=_after_fork_in_child)


async def wait_event(event: Event) -> None:
    """Complete when the work recorded by event is done."""
    if not isinstance(event, Event):
        raise TypeError("wait_event() expected an accelerator.Event, got "
                        f"{type(event).__name__}")
    loop = asyncio.get_running_loop()
    if event.query():
        return
    future: asyncio.Future[None] = loop.create_future()
    _submit((event, loop, future))
    await future


async def synchronize_stream(stream: Stream) -> None:
    """Complete when all work queued on stream so far is done."""
    if not isinstance(stream, Stream):
        raise TypeError("synchronize_stream() expected an accelerator."
                        f"Stream, got {type(stream).__name__}")
    asyncio.get_running_loop()  # refuse before recording anything
    event = Event(blocking=True)
    event.record(stream)
    await wait_event(event)


def event_await(event: Event) -> Generator[Any, None, None]:
    """Event.__await__."""
    return wait_event(event).__await__()


def stream_await(stream: Stream) -> Generator[Any, None, None]:
    """Stream.__await__."""
    return synchronize_stream(stream).__await__()


def waiter_thread() -> threading.Thread | None:
    """The waiter thread, or None before the first await (for tests)."""
    return _thread
