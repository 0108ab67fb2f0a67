"""A producer and a consumer sharing device memory and events.

The producer writes a value into a Buffer, records an interprocess Event
and sends both to a consumer process through a multiprocessing queue; the
consumer waits on the event, checks the bytes, writes the next value
into the same memory and answers with its own event.  Ten rounds, then
both let go.  Runs on any backend that shares memory (CUDA, HIP, Level
Zero):

    python examples/share_between_processes.py
"""
from __future__ import annotations

import multiprocessing as mp
from typing import Any

import accelerator

NBYTES = 1 << 16
ROUNDS = 10


def read(buf: accelerator.Buffer) -> bytes:
    host = bytearray(buf.nbytes)
    buf.copy_to(host)
    return bytes(host)


def consumer(inbox: Any, outbox: Any) -> None:
    buf, theirs = inbox.get(), inbox.get()
    ours = accelerator.Event(interprocess=True)
    ours.record()
    outbox.put(ours)
    stream = accelerator.current_stream()
    for _ in range(ROUNDS):
        value = inbox.get()
        stream.wait_event(theirs)          # the producer's write is done
        assert read(buf) == bytes([value]) * NBYTES
        buf.fill(value + 1)
        ours.record(stream)
        outbox.put("next")
    buf.close()                            # the producer may free it now


def main() -> None:
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=consumer, args=(inbox, outbox))
    child.start()
    buf = accelerator.Buffer(NBYTES)
    buf.fill(0)
    mine = accelerator.Event(interprocess=True)
    mine.record()
    inbox.put(buf)
    inbox.put(mine)
    theirs = outbox.get(timeout=120)
    stream = accelerator.current_stream()
    for i in range(ROUNDS):
        value = 2 * i
        buf.fill(value)
        mine.record(stream)
        inbox.put(value)
        assert outbox.get(timeout=120) == "next"
        stream.wait_event(theirs)
        assert read(buf) == bytes([value + 1]) * NBYTES
    child.join(120)
    assert child.exitcode == 0, child.exitcode
    print(f"{ROUNDS} rounds between two processes on "
          f"{accelerator.current_accelerator()}: ok")


if __name__ == "__main__":
    main()
