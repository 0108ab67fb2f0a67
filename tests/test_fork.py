"""fork(): children of a process that used a backend, and of one that did not.

Drivers cannot be used in a child forked after they were initialised (CUDA
answers NOT_INITIALIZED forever; Level Zero's loader state is inherited
half-way), so every backend call there must raise a clear AcceleratorError
that names the 'spawn' start method, while is_available() and
device_count() still answer, from memory, without any driver call.  The
parent is unaffected, and a child forked before the first use probes for
itself and works.  On CUDA the probe counts devices through NVML without
cuInit, so a child forked after only is_available() and device_count()
initialises CUDA for itself and works too (HIP likewise, counting through
the KFD topology).  Each scenario runs in a fresh interpreter, once per
configuration of fake_drivers.configurations(): each backend's double
(the CUDA double with the NVML double beside it), and the CUDA double
alone (ACCELERATOR_NVML_LIBRARY=none: cuInit counts) and HIP without the
KFD topology (hipInit counts).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import fake_drivers
from fake_drivers import REPO

#: configuration -> the double underneath: each backend's (for OpenCL, the
#: interposer over PoCL), and, where the probe counts devices without
#: initialising the driver, the configuration where it initialises it
#: (CUDA without NVML, HIP without the KFD topology)
CONFIGS = fake_drivers.configurations()
#: configuration -> its environment
BACKENDS = {name: cls.configuration(name, 2) for name, cls in CONFIGS.items()}
#: configuration -> device type
TYPES = {name: cls.device_type for name, cls in CONFIGS.items()}
#: configuration -> the name of the double's class
DOUBLES = {name: cls.__name__ for name, cls in CONFIGS.items()}
#: configuration -> does answering is_available() initialise the driver
PROBE_INITIALISES = {name: cls.probe_initialises(name)
                     for name, cls in CONFIGS.items()}
#: the first two backends in probe order
FIRST, SECOND = list(fake_drivers.DOUBLES.values())[:2]


def backend_params() -> list:
    """Every configuration whose double (or runtime) is here."""
    return fake_drivers.params(CONFIGS)


PRELUDE = """
import gc, json, os, sys, time
sys.path.insert(0, {tests!r})
import fake_drivers
T = {backend!r}
driver = fake_drivers.{double}()

def quiesce():
    # fork() copies only the calling thread: a lock that another thread
    # (a double's stream worker, the allocator) holds at that instant stays
    # held in the child.  Let them all go idle first.
    import accelerator
    if accelerator.is_available():
        for d in range(accelerator.device_count()):
            accelerator.synchronize(d)
    time.sleep(0.05)

def wait_or_kill(pid, seconds):
    # The harness's deadline (not a timed assertion): the child's exit
    # status, or None after killing a child that has not exited.
    for _ in range(int(seconds * 100)):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None
"""


def run(backend: str, code: str) -> subprocess.CompletedProcess:
    env = fake_drivers.clean_environment()
    env.update(BACKENDS[backend])
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), env.get("PYTHONPATH")]))
    script = PRELUDE.format(tests=str(REPO / "tests"), backend=TYPES[backend],
                            double=DOUBLES[backend]) + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


# Objects made before the fork, and every backend call on them.
SETUP = """
import accelerator as a
s, s2 = a.Stream(1), a.Stream(0, priority=-1)
e, e2 = a.Event(enable_timing=True), a.Event(enable_timing=True)
e.record(s); e2.record(s); e2.synchronize()
e0 = a.Event()
e0.record()
default = a.current_stream()
with s:
    pass
a.get_device_properties(0)

def enter(cm):
    cm.__enter__()

CALLS = {
    "current_device_index()": a.current_device_index,
    "set_device_index(0)": lambda: a.set_device_index(0),
    "set_device_index('T:1')": lambda: a.set_device_index(T + ":1"),
    "current_stream()": a.current_stream,
    "current_stream(1)": lambda: a.current_stream(1),
    "set_stream(s)": lambda: a.set_stream(s),
    "set_stream(default)": lambda: a.set_stream(default),
    "synchronize()": a.synchronize,
    "synchronize(1)": lambda: a.synchronize(1),
    "Stream()": a.Stream,
    "Stream(1, priority=-1)": lambda: a.Stream(1, priority=-1),
    "Stream.from_handle(s.handle, 1)":
        lambda: a.Stream.from_handle(s.handle, 1),
    "Event()": a.Event,
    "get_memory_info()": a.get_memory_info,
    "get_device_properties(0)": lambda: a.get_device_properties(0),
    "get_device_name(1)": lambda: a.get_device_name(1),
    "s.query()": s.query,
    "s.synchronize()": s.synchronize,
    "s.wait_event(e)": lambda: s.wait_event(e),
    "s.wait_stream(s2)": lambda: s.wait_stream(s2),
    "s.record_event()": s.record_event,
    "default.query()": default.query,
    "default.synchronize()": default.synchronize,
    "e.record(s)": lambda: e.record(s),
    "e0.record()": e0.record,
    "e.query()": e.query,
    "e.synchronize()": e.synchronize,
    "e.wait(s)": lambda: e.wait(s),
    "e.elapsed_time(e2)": lambda: e.elapsed_time(e2),
    "with s:": lambda: enter(s),
    "device_index(1)": lambda: enter(a.device_index(1)),
}

def outcome(call):
    try:
        call()
    except a.AcceleratorError as exc:
        return {"class": type(exc).__name__, "message": str(exc),
                "backend": exc.backend, "api": exc.api}
    except BaseException as exc:
        return {"class": type(exc).__name__, "message": str(exc)}
    return {"class": None}
"""

AFTER_USE = SETUP + """
r, w = os.pipe()
quiesce()
pid = os.fork()
if pid == 0:
    report = {}
    try:
        before = driver.calls()
        report["answers"] = [a.is_available(), a.device_count(),
                             str(a.current_accelerator()),
                             [b["name"] for b in a.backends()]]
        report["query_calls"] = driver.calls() - before
        report["calls"] = {name: outcome(call) for name, call in CALLS.items()}
        del s, s2, e, e2, e0, default
        gc.collect()
        report["driver_calls"] = driver.calls() - before
    except BaseException as exc:
        report["crash"] = repr(exc)
    os.write(w, json.dumps(report).encode())
    sys.exit(0)  # a normal exit: finalisation and exit handlers run
os.close(w)
with os.fdopen(r) as pipe:
    child = json.loads(pipe.read())
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
parent = {name: outcome(call) for name, call in CALLS.items()}
a.set_device_index(0)
a.set_stream(default)
s.synchronize()
print(json.dumps({"child": child, "parent": parent}))
"""


@pytest.mark.parametrize("backend", backend_params())
def test_every_call_in_a_child_forked_after_use_names_spawn(
        backend: str) -> None:
    report = json.loads(run(backend, AFTER_USE).stdout)
    child, parent = report["child"], report["parent"]
    assert "crash" not in child, child
    # Queries answer from memory, without the driver.
    backend = TYPES[backend]
    assert child["answers"] == [True, 2, backend, list(fake_drivers.DOUBLES)]
    assert child["query_calls"] == 0
    assert len(child["calls"]) == 31
    for name, result in child["calls"].items():
        assert result["class"] == "AcceleratorError", (name, result)
        message = result["message"]
        assert "'spawn'" in message and "forked" in message, (name, message)
        assert f"the {backend} backend" in message, (name, message)
        assert result["backend"] == backend and result["api"] is None
    # Not one driver call in the child, objects released included.
    assert child["driver_calls"] == 0
    # The parent is unaffected: the same calls all work there.
    failed = {k: v for k, v in parent.items() if v["class"] is not None}
    assert failed == {}


AFTER_QUESTIONS = """
import accelerator as a
assert a.is_available() and a.device_count() == 2
assert str(a.current_accelerator()) == T
a.synchronize()                  # waits for nothing: initialises nothing
quiesce()
parent_init = driver.calls(driver.probe_call)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    report = {}
    try:
        before = driver.calls()
        s = a.Stream(1)
        e = s.record_event()
        driver.enqueue_sleep(s, 5)
        s.synchronize()
        e.synchronize()
        a.current_stream(0).synchronize()
        a.synchronize(1)
        report["worked"] = True
        report["driver_calls"] = driver.calls() - before
    except a.AcceleratorError as exc:
        report["error"] = str(exc)
        report["driver_calls"] = driver.calls() - before
    os.write(w, json.dumps(report).encode())
    os._exit(0)
os.close(w)
with os.fdopen(r) as pipe:
    child = json.loads(pipe.read())
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
info = next(b for b in a.backends() if b["name"] == T)
child.update(parent_init=parent_init, counted_by=info["counted_by"],
             initialized=info["initialized"])
a.Stream().synchronize()         # the parent works afterwards, either way
print(json.dumps(child))
"""


@pytest.mark.parametrize("backend", backend_params())
def test_a_child_forked_after_questions_only(backend: str) -> None:
    """is_available(), device_count(), current_accelerator() and an idle
    synchronize() in the parent: where they initialise nothing (CUDA
    counting through NVML), the child creates streams and synchronizes;
    where the probe initialises the driver, the child gets the 'spawn'
    error without one driver call."""
    child = json.loads(run(backend, AFTER_QUESTIONS).stdout)
    if PROBE_INITIALISES[backend]:
        assert "'spawn'" in child["error"], child
        assert child["driver_calls"] == 0, child
        assert child["initialized"] is True
    else:
        assert child.get("worked") is True, child
        assert child["driver_calls"] > 0
        # The double's counters: the parent never initialised the driver.
        assert child["parent_init"] == 0, child
        assert child["initialized"] is False
        assert child["counted_by"].startswith(
            CONFIGS[backend].counted_without_init), child


@pytest.mark.parametrize("backend", backend_params())
def test_a_child_that_exits_normally_touches_nothing(backend: str) -> None:
    """Objects inherited from the parent are freed at the child's exit
    without driver calls or errors, and exit handlers skip shutdown."""
    result = run(backend, SETUP + textwrap.dedent("""
    quiesce()
    pid = os.fork()
    if pid == 0:
        kept = [a.Stream.__new__, s, e]  # alive until the end
        sys.exit(0)                     # a normal exit: finalisation runs
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    s.synchronize()
    e.synchronize()
    print("parent ok")
    """))
    assert result.stdout.strip().endswith("parent ok")
    assert "Exception ignored" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("backend", backend_params())
def test_a_child_forked_before_use_works(backend: str) -> None:
    run(backend, """
    import accelerator as a
    r, w = os.pipe()
    pid = os.fork()                    # before any use: no probe yet
    if pid == 0:
        code = 1
        try:
            before = driver.calls()
            assert a.is_available() and a.device_count() == 2
            s = a.Stream(1)
            start, end = a.Event(enable_timing=True), a.Event(enable_timing=True)
            with s:
                start.record()
                driver.enqueue_sleep(s, 20)
                end.record()
            end.synchronize()
            assert start.elapsed_time(end) >= 10
            a.synchronize(1)
            assert driver.calls() > before
            code = 0
        except BaseException as exc:
            os.write(w, repr(exc).encode())
        os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(r) as pipe:
        why = pipe.read()
    assert os.waitstatus_to_exitcode(status) == 0, why
    # The parent probes for itself afterwards and works too.
    a.Stream(0).record_event().synchronize()
    """)


POOL = """
import multiprocessing as mp
import time
import accelerator as a

def use(i):
    s = a.Stream(i % a.device_count())
    s.record_event().synchronize()
    return a.current_device_index(), s.query()

if __name__ == "__main__":
    a.Stream().synchronize()                   # the parent uses the backend
    a.synchronize(0)
    time.sleep(0.05)                           # its stream threads go idle
    with mp.get_context("fork").Pool(2) as pool:
        try:
            pool.map(use, range(2))
        except a.AcceleratorError as exc:      # re-raised from the worker
            assert "'spawn'" in str(exc), exc
        else:
            raise AssertionError("a forked worker used the driver")
    with mp.get_context("spawn").Pool(2) as pool:
        assert pool.map(use, range(4)) == [(0, True)] * 4
    a.synchronize()
    print("pool ok")
"""


@pytest.mark.parametrize("backend", backend_params())
def test_multiprocessing_fork_refuses_and_spawn_works(
        backend: str, tmp_path) -> None:
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    env = fake_drivers.clean_environment()
    env.update(BACKENDS[backend])
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, str(script)], env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "pool ok"


# A child forked while another thread of the parent holds a lock -----------
#
# fork() copies only the calling thread: a lock that another thread holds at
# that instant stays held in the child for good.  The double's delay
# control keeps a thread inside a driver call made under one of the
# module's locks; the main thread forks meanwhile.  The child must answer
# (the 'spawn' error or a correct result) and exit; the parent kills it
# after a generous deadline and reports it hung (a harness timeout, not a
# timed assertion).

HELD = """
import threading
import accelerator as a
held = fake_drivers.{double}()
NAME = {name!r}

def hold():
    {call}

before = held.calls(NAME)
held.delay(NAME, 1500)
thread = threading.Thread(target=hold)
thread.start()
for _ in range(30000):                 # until the thread is inside NAME
    if held.calls(NAME) > before:
        break
    time.sleep(0.001)
else:
    raise AssertionError(f"the thread never called {{NAME}}")
time.sleep(0.05)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    report = {{}}
    try:
        report["available"] = a.is_available()
        report["backends"] = [[b["name"], b["available"], b["reason"]]
                              for b in a.backends()]
        try:
            a.Stream(0).synchronize()
            report["stream"] = "ok"
        except a.AcceleratorError as exc:
            report["stream"] = str(exc)
    except BaseException as exc:
        report["crash"] = repr(exc)
    os.write(w, json.dumps(report).encode())
    os._exit(0)
os.close(w)
if wait_or_kill(pid, 60) is None:
    print(json.dumps({{"hung": True}}))
    thread.join()
    sys.exit(0)
with os.fdopen(r) as pipe:
    child = json.loads(pipe.read())
thread.join()
held.delay(NAME, 0)
a.Stream(0).synchronize()              # the parent is unaffected
print(json.dumps(child))
"""


def run_held(backend: str, name: str, call: str, double: str = "",
             **env: str | None) -> dict:
    """Hold a thread inside the driver function name (of the double
    named, by default this configuration's) while it runs call; fork."""
    script = HELD.format(double=double or DOUBLES[backend], name=name,
                         call=call)
    saved = dict(BACKENDS[backend])
    try:
        BACKENDS[backend].update(env)
        for key in [k for k, v in BACKENDS[backend].items() if v is None]:
            del BACKENDS[backend][key]
        result = run(backend, script)
    finally:
        BACKENDS[backend].clear()
        BACKENDS[backend].update(saved)
    child = json.loads(result.stdout.strip().splitlines()[-1])
    assert "hung" not in child, f"the child hangs: {result.stderr}"
    assert "crash" not in child, child
    return child


def spawn_refused(message: str) -> bool:
    return "'spawn'" in message and "forked" in message


@pytest.mark.skipif(FIRST.missing() is not None
                    or SECOND.missing() is not None,
                    reason="needs the first two backends' doubles built")
@pytest.mark.parametrize("backend", FIRST.configurations())
def test_a_child_forked_while_backends_probes_does_not_hang(
        backend: str) -> None:
    """backends() probes, under the dispatcher's lock, the backends that
    selection skipped: here the first backend (CUDA) is selected and the
    second (Level Zero) is probed while the process forks.  The child
    cannot trust the half-probed backend; the first works there when the
    parent had not initialised it."""
    child = run_held(
        backend, SECOND.probe_call, "a.backends()", double=SECOND.__name__,
        **{**SECOND.environment(2), "ACCELERATOR_BACKEND": None})
    assert child["available"] is True
    first, second = child["backends"][:2]
    assert first[:2] == [FIRST.device_type, True]
    assert second[:2] == [SECOND.device_type, False]
    assert second[2].startswith("not probed: ") and "forked" in second[2], \
        second
    if PROBE_INITIALISES[backend]:
        assert spawn_refused(child["stream"]), child
    else:
        assert child["stream"] == "ok", child


@pytest.mark.parametrize("backend", backend_params())
def test_a_child_forked_while_a_device_is_first_used_does_not_hang(
        backend: str) -> None:
    """The first use of a device fills per-device state under the
    dispatcher's lock, calling the driver."""
    name, call = getattr(fake_drivers, DOUBLES[backend]).first_use_under_lock
    child = run_held(backend, name, call)
    assert child["available"] is True
    assert [b[0] for b in child["backends"]] == list(fake_drivers.DOUBLES)
    assert spawn_refused(child["stream"]), child


@pytest.mark.parametrize("backend", backend_params())
def test_a_child_forked_while_the_driver_initialises_refuses(
        backend: str) -> None:
    """Forked while another thread initialises the driver (the first
    probe, or on CUDA with NVML the first use): the driver is half
    initialised, so the child refuses, naming 'spawn', and never hangs."""
    double = getattr(fake_drivers, DOUBLES[backend])
    if PROBE_INITIALISES[backend]:
        name, call = double.probe_call, "a.is_available()"
    else:
        name, call = double.probe_call, "a.Stream(0)"
    child = run_held(backend, name, call)
    assert spawn_refused(child["stream"]), child
    assert [b[0] for b in child["backends"]] == list(fake_drivers.DOUBLES)


# Graphs in a forked child ---------------------------------------------------
#
# Each call runs in a child of its own, forked from a parent that holds a
# replayed graph, a kept graph not yet instantiated and a capture still
# open.  The parent kills a child that has not answered by a generous
# deadline and reports it hung (a harness timeout, not a timed assertion).

GRAPHS = """
import accelerator as a
s, t = a.Stream(0), a.Stream(0)
buf, host = a.Buffer(64, stream=s), a.HostBuffer(64)
a.synchronize()
made, kept, open_, fresh = (a.Graph(), a.Graph(keep_graph=True), a.Graph(),
                            a.Graph())
for g in (made, kept):
    with s, g:
        buf.fill(3, stream=s)
        buf.copy_to(host, stream=s)
with s:
    made.replay()
with t:
    open_.capture_begin(capture_error_mode="relaxed")
buf.fill(1, stream=t)
s.synchronize()

def drop(name):
    del globals()[name]
    gc.collect()

CALLS = {
    "replay()": made.replay,
    "instantiate()": kept.instantiate,
    "capture_end()": open_.capture_end,
    "reset()": made.reset,
    "reset() of a capture": open_.reset,
    "capture_begin()": lambda: fresh.capture_begin(),
    "with graph:": lambda: fresh.__enter__(),
    "drop a replayed graph": lambda: drop("made"),
    "drop a kept graph": lambda: drop("kept"),
    "drop a capture": lambda: drop("open_"),
}
quiesce()
report = {}
for name, call in CALLS.items():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        before = driver.calls()
        try:
            call()
            out = {"class": None}
        except BaseException as exc:
            out = {"class": type(exc).__name__, "message": str(exc)}
        out["driver_calls"] = driver.calls() - before
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    status = wait_or_kill(pid, 30)
    if status is None:
        report[name] = {"hung": True}
        os.close(r)
        continue
    with os.fdopen(r) as pipe:
        report[name] = json.loads(pipe.read() or "{}")
        report[name]["status"] = os.waitstatus_to_exitcode(status)
with t:
    open_.capture_end()                # the parent is unaffected
with s:
    made.replay()
s.synchronize()
print(json.dumps(report))
"""


@pytest.mark.parametrize("backend", backend_params())
def test_graphs_in_a_forked_child_name_spawn(backend: str) -> None:
    """Every graph entry point in a child forked after use raises the
    'spawn' error, and dropping a graph there (replayed, kept or still
    capturing) is silent: no driver call, no hang (issue 22, item 4)."""
    if not CONFIGS[backend].has("graphs"):
        pytest.skip(CONFIGS[backend].lacks["graphs"])
    report = json.loads(run(backend, GRAPHS).stdout.strip().splitlines()[-1])
    for name, out in report.items():
        assert "hung" not in out, f"{name} hangs in the child"
        assert out["status"] == 0, (name, out)
        assert out["driver_calls"] == 0, (name, out)
        if name.startswith("drop"):
            assert out["class"] is None, (name, out)
        else:
            assert out["class"] == "AcceleratorError", (name, out)
            assert spawn_refused(out["message"]), (name, out)
