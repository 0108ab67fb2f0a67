"""An interprocess event re-recorded while its last record is pending.

Such an event cannot move to a fresh driver event as a plain one does (other
processes opened this one), so a backend may reset it in stream order
(Level Zero: events.c's lz_ipc_rearm_locked).  Whatever it does, the event
answers for its latest record: once the earlier record's work has run and
the later one's has not, query() is False, synchronize() waits, and a
stream that waits on it waits too.
"""
from __future__ import annotations

import threading
import time

import pytest

import accelerator


@pytest.fixture
def shares(facts) -> None:
    if not facts.has("ipc"):
        pytest.skip(facts.lacks["ipc"])


@pytest.mark.parametrize("ask", ["query", "synchronize", "wait_event"])
def test_a_re_record_behind_pending_work_is_not_complete_early(
        shares, driver, ask: str) -> None:
    stream = accelerator.Stream()
    event = accelerator.Event(interprocess=True)
    with driver.stall(stream) as first:
        event.record(stream)          # behind the first gate
        landed = accelerator.Event()
        landed.record(stream)         # after the first record's signal
        with driver.stall(stream) as second:
            event.record(stream)      # again, while the first is pending
            first.open()
            landed.synchronize()      # the first record's signal landed
            if ask == "query":
                assert not event.query(), "the event reads complete " \
                    "while its latest record waits behind a closed gate"
            elif ask == "synchronize":
                opened_at: list[float] = []

                def open_later() -> None:
                    time.sleep(0.2)
                    opened_at.append(time.monotonic())
                    second.open()

                opener = threading.Thread(target=open_later)
                opener.start()
                event.synchronize()
                returned = time.monotonic()
                opener.join(30)
                assert opened_at and returned >= opened_at[0], \
                    "synchronize() returned before the latest record's " \
                    "work ran"
            else:
                other = accelerator.Stream()
                other.wait_event(event)
                after = other.record_event()
                time.sleep(0.2)
                assert not after.query(), "work waiting on the event ran " \
                    "before the event's latest record"
    event.synchronize()
    assert event.query()
    stream.synchronize()
