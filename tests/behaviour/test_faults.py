"""Fault injection at every driver call site.

The driver functions a backend calls are read from the backend's own
X-macro lists (its double class's symbol_lists: csrc/backends/cuda/cuda_api.h
ACC_CUDA_FUNCTIONS, ...), so a new call site without an entry in the
double class's fault_sites (tests/fake_drivers.py) fails
test_every_driver_function_has_a_site.

Each site says how the product reaches the function and what a failure
there must do:

  RAISE     an API call fails with the driver's error, in this process:
            the exception class (AcceleratorError, or OutOfMemoryError for
            an out-of-memory code), .backend, .api, .code, .error_name;
            the thread's current device and stream are unchanged; nothing
            leaked (the double's live counts are back at the baseline
            after the retry); the same call then works.
  FRESH     the same checks, in a fresh process, for call sites that run
            once per process (context retain, cached properties, the
            first event pool).  Leaks are found by comparing the live
            counts at the end with a control process that ran without
            the fault.
  SILENT    a release path (destroy, reset): the driver's error cannot be
            reported to anyone, so the product must swallow it without an
            exception or an unraisable error, and keep working.
  REPORTER  the functions that name errors (cuGetErrorName/String): when
            they fail too, the original error is still reported complete.
  PROBE     called only while probing: in a fresh process with the fault
            installed at load (FAKE_CUDA_FAIL / FAKE_ZE_FAIL),
            is_available() is False and the reason names the function.
  TOLERATED called while probing, but optional information: the backend
            stays available.
  DEFERRED  called by the driver's initialisation at the first use, when
            the probe deferred it (CUDA counted through NVML): in a fresh
            process with the fault installed at load, is_available() and
            device_count() still answer, the first use raises the
            driver's error, a second use raises it again, and the
            backend's record says the initialisation failed.
  FALLBACK  NVML, while counting: its failure makes the backend count
            with cuInit instead (available, 2 devices, counted_by names
            the failing function); a failing nvmlShutdown changes nothing.
  EXIT      called only at exit (shutdown): the process still exits 0
            with a clean stderr.
  OPTIONAL  an optional entry point the test driver cannot offer (Debian's
            loader 1.8 does not export it): checked to be missing from the
            library, and the backend works without it.
  NULLED    a function that reports failure only by returning NULL, with
            no code (clSVMAlloc): whatever code the fault names, the call
            raises the backend's out-of-memory error (driver.oom_error),
            with the RAISE checks otherwise.
  UNREACHED a function this configuration must not call (the note says
            why: calling it would crash): the action runs without it.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import pathlib
import subprocess
import sys
import threading
from typing import Any

import pytest

import accelerator as acc
import fake_drivers
import fault_actions
from fake_drivers import (DEFERRED, EXIT, FALLBACK, FRESH, NULLED, OPTIONAL,
                          PROBE, RAISE, REPORTER, SILENT, TOLERATED,
                          UNREACHED, Site)
from fault_actions import (ACTIONS, BACKEND, SITES, State, check_error,
                           expected, fail_once, preparer, settle,
                           with_captured, with_recorded_event)
# test_fuzz reads these as test_faults': its Model class's source seeds
# its derandomized draws (hypothesis' function_digest), which an edit of
# its names would change.
from fault_actions import across_drivers, make_double  # noqa: F401

REPO = pathlib.Path(__file__).resolve().parents[2]


def driver_functions(backend: str) -> list[str]:
    """The functions in the backend's X-macro lists, in list order."""
    return fake_drivers.DOUBLES[backend].driver_functions()


CODES = ["unknown", "oom"]

pytestmark = pytest.mark.skipif(
    not SITES, reason="fault injection needs a driver double")


def sites(*hows: str) -> list[Site]:
    return [s for s in SITES if s.how in hows]


def site_params(*hows: str) -> list[Any]:
    found = [pytest.param(s, id=s.id) for s in sites(*hows)]
    return found or [pytest.param(None, id="none", marks=pytest.mark.skip(
        reason=f"the {BACKEND} backend has no {'/'.join(hows)} sites"))]


def test_every_driver_function_has_a_site() -> None:
    listed = driver_functions(BACKEND)
    covered = {s.api for s in SITES}
    assert set(listed) - covered == set(), \
        "driver functions called without a fault test"
    assert covered - set(listed) == set(), "sites for functions not called"
    for site in SITES:
        if site.action:
            assert site.action in ACTIONS, site
        if site.prepare:
            assert callable(getattr(fault_actions, site.prepare, None)), \
                site


def test_the_site_tables_match_both_symbol_lists() -> None:
    """Every backend's table stays complete, whichever backend runs."""
    for cls in fake_drivers.DOUBLES.values():
        assert {s.api for s in cls.fault_sites} == set(
            cls.driver_functions()), cls.__name__


def test_the_interprocess_functions_are_among_the_listed() -> None:
    """One convention: a double's interprocess lists are among its
    symbol_lists, so that each of their functions needs its sites."""
    for cls in fake_drivers.DOUBLES.values():
        assert set(cls.ipc_symbol_lists) <= set(cls.symbol_lists), \
            cls.__name__
        assert cls.has("ipc") == bool(cls.ipc_symbol_lists), cls.__name__


# Checks --------------------------------------------------------------------


ROUNDS = 5


def check_counts(driver: Any, baseline: dict[str, int],
                 rounds: list[dict[str, int]]) -> None:
    """Live counts after each of ROUNDS rounds of a cycle: back at the
    baseline.  Pooled kinds are recycled once the driver is done with
    them, which is a matter of timing, so they may grow a little, but a
    leak (one per round) would grow by ROUNDS - 1."""
    for kind, before in baseline.items():
        seen = [counts[kind] for counts in rounds]
        if kind in driver.pooled_kinds:
            assert max(seen) - seen[0] <= 2, (kind, seen)
        else:
            assert seen == [before] * len(seen), (kind, before, seen)


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("site", site_params(RAISE, NULLED))
def test_raise(driver, site: Site, code: str) -> None:
    inject = expected(driver, code)[0]
    # NULL is all a NULLED function says: out of memory, whatever the code.
    number, name, cls = expected(driver, "oom" if site.how == NULLED
                                 else code)
    prepare = preparer(site)
    action = ACTIONS[site.action]
    # A first round makes what is made once (contexts, pools, defaults).
    state = prepare()
    action(state)
    del state
    settle()
    baseline = driver.live_all()

    rounds = []
    for _ in range(ROUNDS):
        state = prepare()
        fail_once(driver, site, state, number, name, cls, inject=inject)
        action(state)  # the same call works at once
        del state
        settle()
        rounds.append(driver.live_all())
    check_counts(driver, baseline, rounds)


def fill_sites() -> list[Any]:
    found = [pytest.param(s, id=s.id) for s in sites(RAISE)
             if s.action == "fill()"]
    return found or [pytest.param(None, id="none", marks=pytest.mark.skip(
        reason=f"the {BACKEND} backend has no fill sites"))]


@pytest.mark.parametrize("site", fill_sites())
def test_a_failed_fill_leaves_no_work_on_the_memory(driver, site: Site) -> None:
    """A fill that raised must not run later: the caller freed or reused
    the memory, believing nothing was queued (a runtime may have queued
    the command before a later step, such as OpenCL's flush, failed)."""
    acc.set_device_index(0)
    settle()
    b = acc.Buffer(4096)
    b.fill(0)
    s = acc.Stream(0)
    number, name, cls = expected(driver, "unknown")
    with driver.gate(s) as gate:
        # Opened from a timer: a fill that waits for its queue returns.
        gate.open_soon()
        driver.fail(site.api, site.nth, number)
        try:
            with pytest.raises(acc.AcceleratorError) as info:
                b.fill(1, stream=s)
        finally:
            driver.clear_faults()
        check_error(info.value, site.api, number, name, cls)
        del b
        c = acc.Buffer(4096)  # the cache hands the memory on at once
        c.fill(2)
        out = bytearray(4096)
        c.copy_to(out)
        gate.open()
        acc.synchronize(0)
        c.copy_to(out)
    assert out == b"\x02" * 4096, "the failed fill ran after all"
    del c
    settle()
    assert driver.live("bad_access") == 0


def completes(event: Any, seconds: float = 10.0) -> bool:
    """Whether event completes within seconds (polled: a test must not
    hang on work that never ends)."""
    import time
    deadline = time.monotonic() + seconds
    while not event.query():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def assert_captured_fill_ran(state: State) -> None:
    """The fill that with_captured's graph holds has run (its buffer is
    all ones)."""
    out = bytearray(4096)
    state["b"].copy_to(out)
    assert out == b"\x01" * 4096


def leftover_sites() -> list[Any]:
    found = [pytest.param(s, id=s.id) for s in sites(RAISE)
             if s.action == "Graph.replay()" and s.leaves_work is not None]
    return found or [pytest.param(None, id="none", marks=pytest.mark.skip(
        reason=f"no failed replay of the {BACKEND} backend leaves work"))]


@pytest.mark.parametrize("site", leftover_sites())
def test_a_failed_replay_s_leftover_work_comes_before_what_follows(
        driver, site: Site) -> None:
    """A replay that raised after queueing commands that use the graph's
    events (their reset, a signal) leaves them to run later.  The next
    replay, on any stream, must come after them (else they reset its
    events behind it, and whoever waits for its end waits for ever), and
    dropping the graph meanwhile must not hand its events to later work."""
    acc.set_device_index(0)
    settle()
    state = with_captured()
    s1, s2 = state["s"], acc.Stream(0)
    others = [acc.Stream(0), acc.Stream(0)]
    number, name, cls = expected(driver, "unknown")
    with driver.stall(s1) as gate:
        driver.fail(site.api, site.nth, number)
        try:
            with pytest.raises(acc.AcceleratorError) as info:
                with s1:
                    state["g"].replay()
        finally:
            driver.clear_faults()
        check_error(info.value, site.api, number, name, cls)
        leftovers_ran = s1.record_event()
        # Opened from a timer: a replay that waits for them returns.
        gate.open_soon(0.5)
        with s2:
            state["g"].replay()
        replayed = s2.record_event()
        # Asked in this order: the replay's end first, so that the gate
        # opening between the two questions cannot fail the check.
        replay_ended = replayed.query()
        assert leftovers_ran.query() or not replay_ended, "the replay " \
            "ran before the failed one's queued commands"
        del state["g"]
        gc.collect()
        # Later work takes the driver's events: it must complete.
        events = [other.record_event() for other in others
                  for _ in range(32)]
    assert completes(replayed) and completes(leftovers_ran)
    stuck = [i for i, e in enumerate(events) if not completes(e)]
    assert not stuck, f"events {stuck} never completed: a failed " \
        "replay's queued commands reset them after their work signalled"
    assert_captured_fill_ran(state)


@pytest.mark.parametrize("site", leftover_sites())
def test_a_retry_on_the_same_stream_waits_for_the_failed_replay_s_leftovers(
        driver, site: Site) -> None:
    """The failed call is held while the stream's worker is stopped right
    behind the commands already queued, so that they run only after the
    retry was submitted (as a loaded machine may schedule them): the
    retry must still end, and the stream with it."""
    acc.set_device_index(0)
    settle()
    state = with_captured()
    s = state["s"]
    number, name, cls = expected(driver, "unknown")
    hold = driver.hold(site.api)
    driver.fail(site.api, site.nth, number)
    failed: list[BaseException] = []

    def replay_once() -> None:
        try:
            with s:
                state["g"].replay()
        except acc.AcceleratorError as exc:
            failed.append(exc)

    thread = threading.Thread(target=replay_once)
    try:
        thread.start()
        while driver.held(site.api) == 0 and thread.is_alive():
            threading.Event().wait(0.001)
        gate = driver.stall(s)  # between what was queued and what follows
        hold.open()
        thread.join(30)
    finally:
        hold.open()
        driver.clear_faults()
    assert not thread.is_alive() and len(failed) == 1, failed
    check_error(failed[0], site.api, number, name, cls)
    # The retry returns once the failed replay's commands have run.
    gate.open_soon(0.2)
    with s:
        state["g"].replay()
    assert completes(s.record_event()), "the stream never finished: the " \
        "failed replay's queued commands reset the retry's events"
    assert_captured_fill_ran(state)


@pytest.mark.parametrize("site", leftover_sites())
def test_a_failed_replay_whose_leftovers_cannot_be_followed_is_refused(
        driver, site: Site) -> None:
    """When the command marking the end of a failed replay's leftovers
    cannot be appended either, nothing can order a later replay after
    them: the graph refuses to replay (rather than hang), its stream
    still synchronizes, and dropping it frees what it may."""
    acc.set_device_index(0)
    settle()
    state = with_captured()
    number, name, cls = expected(driver, "unknown")
    assert site.leaves_work is not None
    driver.fail(site.api, site.nth, number)
    driver.fail(*site.leaves_work, number)
    try:
        with pytest.raises(acc.AcceleratorError) as info:
            with state["s"]:
                state["g"].replay()
    finally:
        driver.clear_faults()
    check_error(info.value, site.api, number, name, cls)
    with pytest.raises(RuntimeError, match="cannot be replayed: an earlier "
                       "replay failed"):
        with state["s"]:
            state["g"].replay()
    state["s"].synchronize()
    del state
    settle()


@pytest.mark.parametrize("site", site_params(SILENT))
def test_silent(driver, site: Site) -> None:
    prepare = preparer(site, with_recorded_event)
    action = ACTIONS[site.action]
    state = prepare()
    action(state)
    del state
    settle()
    baseline = driver.live_all()
    refused = dict(site.refused)

    rounds = []
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        for i in range(ROUNDS):
            state = prepare()
            acc.empty_cache()
            calls = driver.calls(site.api)
            driver.fail(site.api, 1, driver.unknown_error[0])
            action(state)
            del state
            settle()
            assert driver.calls(site.api) > calls, "the site was not reached"
            driver.clear_faults()
            settle()
            rounds.append({k: v - (i + 1) * refused.get(k, 0)
                           for k, v in driver.live_all().items()})
    finally:
        sys.unraisablehook = hook
        driver.clear_faults()
    assert unraisable == []
    check_counts(driver, baseline, rounds)
    # And it works without the fault.
    state = prepare()
    action(state)


@pytest.mark.parametrize("site", site_params(UNREACHED))
def test_unreached(driver, site: Site) -> None:
    state = preparer(site)()
    calls = driver.calls(site.api)
    driver.fail(site.api, 1, driver.unknown_error[0])
    try:
        ACTIONS[site.action](state)
    finally:
        driver.clear_faults()
    assert driver.calls(site.api) == calls, site.note


@pytest.mark.parametrize("site", site_params(REPORTER))
def test_reporter(driver, site: Site) -> None:
    """The error-naming functions fail too: the error stays complete."""
    state = preparer(site)()
    action = ACTIONS[site.action]
    first = site.note
    if site.api == driver.error_name_function:
        # Codes the backend knows are named without asking the driver.
        number, name = driver.unnamed_error
    else:
        number, name = driver.unknown_error
    for reporter_fails in (False, True):
        calls = driver.calls(site.api)
        driver.fail(first, 1, number)
        if reporter_fails:
            driver.fail(site.api, 1, driver.unknown_error[0])
        try:
            with pytest.raises(acc.AcceleratorError) as info:
                action(state)
        finally:
            driver.clear_faults()
        assert driver.calls(site.api) == calls + 1
        check_error(info.value, first, number, name, acc.AcceleratorError)
        text = f"{first}() failed: {name} ({number})"
        if site.api == "cuGetErrorString":
            # The driver's description is appended only when it has one.
            assert (str(info.value) == text) == reporter_fails, \
                str(info.value)
    action(state)


@pytest.mark.parametrize("site", site_params(OPTIONAL))
def test_optional(driver, site: Site) -> None:
    """The library the backend opened does not export the optional entry
    point (site.note says why): the backend works without it."""
    library = next(b["library"] for b in acc.backends()
                   if b["device_type"] == driver.device_type)
    assert not hasattr(ctypes.CDLL(library), site.api), \
        f"{library} exports {site.api}: make it a fault site of its own"
    stream = acc.Stream(0)
    b = acc.Buffer(4096)
    b.fill(7, stream=stream)
    event = acc.Event()
    event.record(stream)
    event.synchronize()
    stream.synchronize()
    acc.synchronize(0)
    out = bytearray(4096)
    b.copy_to(out)
    assert out == b"\x07" * 4096
    assert driver.live("bad_access") == 0


# Fresh processes -----------------------------------------------------------

CHILD = """
import sys
sys.path[:0] = [{tests!r}, {behaviour!r}]
import fault_actions
fault_actions.child_main({args!r})
"""


def run_child(args: dict[str, Any], **env: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ)
    environment.update(env)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), environment.get("PYTHONPATH")]))
    environment.pop("PYTEST_CURRENT_TEST", None)
    script = CHILD.format(tests=str(REPO / "tests"),
                          behaviour=str(REPO / "tests" / "behaviour"),
                          args=args)
    return subprocess.run([sys.executable, "-c", script], env=environment,
                          capture_output=True, text=True, timeout=120)


#: site id -> the live counts of its control process (no fault), which
#: is the same for every code: one control per site, not one per code
_controls: dict[str, dict[str, int]] = {}


def fresh_counts(site: Site, fault: bool, code: str) -> dict[str, int]:
    result = run_child({"site": site.id, "fault": fault, "code": code})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("site", site_params(FRESH))
def test_fresh(site: Site, code: str) -> None:
    if site.id not in _controls:
        _controls[site.id] = fresh_counts(site, False, code)
    failed = fresh_counts(site, True, code)
    assert failed == _controls[site.id], "a failure leaked driver objects"


PROBE_CHILD = """
import json, sys
import accelerator as a
info = next(b for b in a.backends() if b["name"] == {backend!r})
print(json.dumps([a.is_available(), a.device_count(), info]))
if not a.is_available():
    try:
        a.current_stream()
    except a.AcceleratorError as e:
        assert "none is available" in str(e) and info["reason"] in str(e), e
    else:
        raise AssertionError("no error without an accelerator")
else:
    s = a.Stream()
    e = s.record_event()
    e.synchronize()
    a.synchronize()
"""


def probe_faults(site: Site, driver_cls: Any) -> tuple[str, list[str]]:
    """The faults to install at load, and what the reason must say."""
    number, name = driver_cls.unknown_error
    if site.api == "cuGetErrorName":
        # cuInit fails with a code only the driver could name; naming
        # fails too.
        return ("cuInit:0:12345,cuGetErrorName:0:999",
                ["cuInit() failed: CUDA_ERROR_UNRECOGNIZED (12345)"])
    if site.api == "cuGetErrorString":
        return ("cuInit:0:999,cuGetErrorString:0:999",
                ["cuInit() failed: CUDA_ERROR_UNKNOWN (999)"])
    # nth 1: every call fails; nth 2: the second (after a count).
    nth = 0 if site.nth == 1 else site.nth
    return f"{site.api}:{nth}:{number}", [site.api, name]


@pytest.mark.parametrize("site", site_params(PROBE, TOLERATED))
def test_probe(site: Site) -> None:
    driver_cls = fake_drivers.DOUBLES[BACKEND]
    faults, needles = probe_faults(site, driver_cls)
    result = subprocess.run(
        [sys.executable, "-c", PROBE_CHILD.format(backend=BACKEND)],
        env={**os.environ, driver_cls.fail_env: faults,
             **driver_cls.eager_probe_env, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    available, count, info = json.loads(result.stdout.splitlines()[0])
    if site.how == TOLERATED:
        assert available and count == 2, info
        if site.api == "cuDriverGetVersion":
            assert info["driver_version"] is None, info
        return
    assert not available and count == 0 and not info["available"], info
    for needle in needles:
        assert needle in info["reason"], info["reason"]


DEFERRED_CHILD = """
import json, sys
import accelerator as a
answers = [a.is_available(), a.device_count()]
errors = []
for attempt in range(2):
    try:
        a.Stream()
    except a.AcceleratorError as exc:
        errors.append([exc.api, exc.code, str(exc)])
info = next(b for b in a.backends() if b["name"] == {backend!r})
print(json.dumps([answers, errors, info]))
"""


@pytest.mark.parametrize("site", site_params(DEFERRED))
def test_deferred(site: Site) -> None:
    driver_cls = fake_drivers.DOUBLES[BACKEND]
    number, name = driver_cls.unknown_error
    result = subprocess.run(
        [sys.executable, "-c", DEFERRED_CHILD.format(backend=BACKEND)],
        env={**os.environ, driver_cls.fail_env: f"{site.api}:0:{number}",
             "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    answers, errors, info = json.loads(result.stdout.splitlines()[0])
    assert answers == [True, 2], answers
    assert len(errors) == 2 and errors[0] == errors[1], errors
    api, code, message = errors[0]
    assert (api, code) == (site.api, number), errors
    assert f"{site.api}() failed: {name}" in message, message
    assert info["available"] and not info["initialized"], info
    assert info["reason"].startswith("initialisation at first use failed: "
                                     f"{site.api}() failed"), info


FALLBACK_CHILD = """
import json
import accelerator as a
info = next(b for b in a.backends() if b["name"] == {backend!r})
print(json.dumps([a.is_available(), a.device_count(), info]))
s = a.Stream(a.device_count() - 1)
s.record_event().synchronize()
"""


@pytest.mark.parametrize("site", site_params(FALLBACK))
def test_fallback(site: Site) -> None:
    number = fake_drivers.NvmlDouble.unknown_error[0]
    faults = f"{site.api}:0:{number}"
    if site.api == "nvmlErrorString":
        faults += f",nvmlInit_v2:0:{number}"
    env = {**os.environ, fake_drivers.NvmlDouble.fail_env: faults,
           "PYTHONPATH": str(REPO)}
    if "GPU-" in site.note:
        # Only a UUID list makes the backend read the UUIDs: device 1's.
        env["CUDA_VISIBLE_DEVICES"] = ("GPU-fa4ecda0-0000-4000-8000-"
                                       "000000000001")
    result = subprocess.run(
        [sys.executable, "-c", FALLBACK_CHILD.format(backend=BACKEND)],
        env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    available, count, info = json.loads(result.stdout.splitlines()[0])
    if site.api == "nvmlShutdown":
        assert info["counted_by"].startswith("NVML ("), info
        assert (available, count) == (True, 2), info
        return
    failing = "nvmlInit_v2" if site.api == "nvmlErrorString" else site.api
    assert info["counted_by"].startswith(
        f"cuInit (NVML not used: {failing}() failed: "), info
    if site.api == "nvmlErrorString":
        assert "unknown error (999)" in info["counted_by"], info
    # cuInit applies CUDA_VISIBLE_DEVICES itself.
    expected = 1 if "GPU-" in site.note else 2
    assert (available, count) == (True, expected), info
    assert info["initialized"] is True, info


EXIT_CHILD = """
import sys
sys.path[:0] = [{tests!r}]
import fake_drivers
import json
driver = fake_drivers.DOUBLES[{backend!r}]()
print(json.dumps(driver.report_at_exit()), flush=True)
import accelerator as a
s = a.Stream(1)
e = s.record_event()
a.set_device_index(1)
e.synchronize()
driver.fail({api!r}, 0, driver.unknown_error[0])
"""


@pytest.mark.parametrize("site", site_params(EXIT))
def test_exit(site: Site) -> None:
    code = EXIT_CHILD.format(tests=str(REPO / "tests"), api=site.api,
                             backend=BACKEND)
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "Sanitizer" not in result.stderr, result.stderr
    refused = json.loads(result.stdout.splitlines()[0])
    if refused is not None:
        # The driver refused the release: device 1's context stays.
        assert refused in result.stderr, result.stderr


# Host memory -----------------------------------------------------------------

NOMEMORY_CHILD = """
import sys
sys.path[:0] = [{tests!r}, {behaviour!r}]
import nomemory
nomemory.nomemory_main()
"""
def test_host_out_of_memory_never_crashes() -> None:
    """Every API call with each of its first allocations failing (the
    _testcapi allocator hooks), in a fresh process."""
    pytest.importorskip("_testcapi")
    script = NOMEMORY_CHILD.format(tests=str(REPO / "tests"),
                                   behaviour=str(REPO / "tests" / "behaviour"))
    result = subprocess.run([sys.executable, "-c", script],
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "", result.stdout


EXIT_BUSY = """
import sys, time
sys.path[:0] = [{tests!r}, {behaviour!r}]
import accelerator as a
import fault_actions
s = a.Stream(1)
e = s.record_event()
fault_actions.make_double().enqueue_sleep(s, 3000)
a.Event().record(s)
print(time.monotonic(), flush=True)
"""


def test_exit_with_work_still_queued() -> None:
    """Exiting while a stream still has 3 s of work: shutdown neither
    hangs (a bounded wait at most) nor crashes, and says nothing."""
    import time
    code = EXIT_BUSY.format(tests=str(REPO / "tests"),
                            behaviour=str(REPO / "tests" / "behaviour"))
    result = subprocess.run([sys.executable, "-c", code],
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=120)
    end = time.monotonic()
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    assert end - float(result.stdout) < 10
