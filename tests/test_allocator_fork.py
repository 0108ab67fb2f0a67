"""fork() while other threads allocate and free device memory.

The allocator holds its locks across fork (pthread_atfork), so a child
never inherits one taken by a thread that does not exist there: it can
drop the buffers it inherited (no driver call, nothing reused) and gets
the clear 'spawn' error from every memory call, without hanging.

It runs uninstrumented only (tests/stages.py PLAIN_ONLY): GCC 12's ASan
allocator is not fork-safe, and a child forked while a thread mallocs
hangs inside it, whatever this module does.
"""
from __future__ import annotations

import json

import pytest

from test_fork import backend_params, run

BUSY_FORK = """
import threading
import accelerator as a

try:
    a.Buffer(0)
except NotImplementedError:
    print("no device memory")
    sys.exit(0)
inherited = [a.Buffer(n) for n in (100, 5 << 20, 12 << 20)]
stop = threading.Event()

def churn(i):
    stream = a.Stream(i % 2)
    sizes = [512, 4096, 1 << 20, 3 << 20, 11 << 20]
    k = 0
    while not stop.is_set():
        with a.Buffer(sizes[k % len(sizes)], i % 2, stream=stream):
            k += 1
        if k % 7 == 0:
            a.empty_cache()

threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
children = []
for _ in range(20):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        report = {}
        before = driver.calls()
        try:
            del inherited[:]
            gc.collect()
            for name, call in {
                    "Buffer": lambda: a.Buffer(4096),
                    "memory_stats": a.memory_stats,
                    "reset_peak_memory_stats": a.reset_peak_memory_stats,
                    "empty_cache": a.empty_cache}.items():
                try:
                    call()
                    report[name] = None
                except a.AcceleratorError as exc:
                    report[name] = str(exc)
        except BaseException as exc:
            report["crash"] = repr(exc)
        report["driver_calls"] = driver.calls() - before
        os.write(w, json.dumps(report).encode())
        os._exit(0)
    os.close(w)
    children.append((pid, r))
results = []
for pid, r in children:
    with os.fdopen(r) as pipe:
        results.append(json.loads(pipe.read()))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
stop.set()
for t in threads:
    t.join()
for b in inherited:
    b.close()
a.synchronize(0); a.synchronize(1)
a.empty_cache()
stats = a.memory_stats(0)
assert stats["allocated_bytes.all.current"] == 0, stats
print(json.dumps(results))
"""


@pytest.mark.parametrize("backend", backend_params())
def test_fork_while_threads_allocate(backend: str) -> None:
    last = run(backend, BUSY_FORK).stdout.splitlines()[-1]
    if last == "no device memory":
        pytest.skip(f"the {backend} backend has no device memory slots")
    results = json.loads(last)
    assert len(results) == 20
    for report in results:
        assert "crash" not in report, report
        assert report["driver_calls"] == 0, report
        for name in ("Buffer", "memory_stats", "reset_peak_memory_stats"):
            assert report[name] is not None and "'spawn'" in report[name], (
                name, report)
        # empty_cache in a forked child is a no-op, as before any use
        assert report["empty_cache"] is None, report
