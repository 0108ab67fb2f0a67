"""Two threads recording one never-recorded Event at the same time.

The first record of an Event makes its native event.  When two threads do
it at once, exactly one native event must be made (the other thread
records on it), and when the driver refuses the creation the Event must
stay cleanly unrecorded for the failing thread while the other one may
still make it: never an Event that looks recorded with no backend, never a
crash on the next query.

Each scenario runs in a fresh interpreter with this run's backend, so that
every first record reaches the driver (no native event kept for reuse yet)
and the double's counters show each creation.  The double's delay control
holds one thread inside the creation while the other arrives, so the race
happens on every delayed round; the undelayed rounds race as it comes.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

PRELUDE = """
import json, sys, threading
sys.path.insert(0, {tests!r})
import accelerator as acc
import fake_drivers
driver = fake_drivers.{double}()
CREATE = driver.functions["event_create"]
assert acc.is_available()
acc.set_device_index(0)
# Thread 0 records on the default stream, thread 1 on a stream of its own.
streams = [acc.current_stream(0), acc.Stream(0)]

def race(events, on_error):
    barrier = threading.Barrier(2)

    def body(i):
        for k, event in enumerate(events):
            barrier.wait(60)
            try:
                event.record(streams[i])
            except acc.AcceleratorError as exc:
                on_error(k, i, exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a recording thread hangs"
"""


def run_fresh(driver, code: str) -> dict:
    """Run code after PRELUDE in a new interpreter with this backend; it
    prints one JSON line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("PYTEST_CURRENT_TEST", None)
    script = PRELUDE.format(tests=str(REPO / "tests"),
                            double=type(driver).__name__) \
        + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, \
        f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


RACE = """
errors = []
events = [acc.Event() for _ in range({rounds})]
live, calls = driver.live("event"), driver.calls(CREATE)
driver.delay(CREATE, {delay_ms})
race(events[:{delayed}], lambda k, i, exc: errors.append(str(exc)))
driver.delay(CREATE, 0)
race(events[{delayed}:], lambda k, i, exc: errors.append(str(exc)))
report = dict(
    errors=errors,
    created=driver.calls(CREATE) - calls,
    live=driver.live("event") - live,
    devices=sorted({{e.device_index for e in events}}),
    handles=len({{e.handle for e in events}}),
)
for e in events:
    e.synchronize()
    assert e.query() is True
for s in streams:
    s.synchronize()
# Every native event the driver made must be reusable once the Events
# are gone: as many new Events, each recorded once, need no new one
# when the backend recycles native events.
made = driver.live("event")
del events, e
acc.empty_cache()
calls = driver.calls(CREATE)
again = [acc.Event() for _ in range(made)]
for k, e in enumerate(again):
    e.record(streams[k % 2])
report["created_again"] = driver.calls(CREATE) - calls
report["made"] = made
print(json.dumps(report))
"""


def test_a_first_record_from_two_threads_makes_one_native_event(
        driver) -> None:
    if not driver.has("driver_events"):
        pytest.skip(driver.lacks["driver_events"])
    rounds, delayed = 2000, 30
    report = run_fresh(driver, RACE.format(rounds=rounds, delayed=delayed,
                                           delay_ms=5))
    assert report["errors"] == []
    assert report["devices"] == [0]
    assert report["handles"] == rounds
    if "event" in driver.pooled_kinds:
        # A re-record may move an event to a fresh native event while the
        # old one is still pending; the old one is reused later.  None may
        # be lost: all of them serve new Events.
        assert report["created"] >= rounds
        assert report["created_again"] == 0, report
    else:
        # One native event per Event: no more were made, none left over.
        assert report["created"] == rounds
        assert report["live"] == rounds
        assert report["created_again"] == report["made"]


FAULT = """
outcomes = []
kept = []  # no native event comes back for reuse: each first record creates
live, calls = driver.live("event"), driver.calls(CREATE)
for k in range({rounds}):
    event = acc.Event()
    errors = []
    # The first creation is refused; both threads are inside it or
    # waiting for it when it fails.
    driver.delay(CREATE, 20)
    driver.fail(CREATE, 1, driver.unknown_error[0])
    race([event], lambda k, i, exc: errors.append(exc.api))
    driver.clear_faults()
    driver.delay(CREATE, 0)
    # The thread whose creation failed raised; the other one made the
    # native event and recorded: a whole, usable Event.
    outcomes.append(dict(errors=errors, device=event.device_index,
                         query=event.query(), repr=repr(event)))
    event.synchronize()
    event.record(streams[0])
    event.synchronize()
    kept.append(event)
lonely = acc.Event()
driver.fail(CREATE, 0, driver.unknown_error[0])
try:
    lonely.record(streams[0])
except acc.AcceleratorError:
    pass
driver.clear_faults()
# An Event whose only creation failed is unrecorded, and stays usable.
lonely_state = [lonely.device_index, lonely.handle, lonely.query()]
lonely.synchronize()
lonely.wait(streams[1])
lonely.record(streams[1])
lonely.synchronize()
lonely_state.append(lonely.query())
del lonely, kept
print(json.dumps(dict(outcomes=outcomes, lonely=lonely_state,
                      created=driver.calls(CREATE) - calls)))
"""


def test_a_refused_first_record_leaves_the_event_whole(driver) -> None:
    if not driver.has("driver_events"):
        pytest.skip(driver.lacks["driver_events"])
    rounds = 10
    report = run_fresh(driver, FAULT.format(rounds=rounds))
    for outcome in report["outcomes"]:
        assert outcome["errors"] == [driver.functions["event_create"]], \
            outcome
        assert outcome["device"] == 0, outcome
        assert outcome["query"] in (True, False), outcome
        assert ":0'" in outcome["repr"], outcome
    assert report["lonely"] == [None, 0, True, True]
