#!/usr/bin/env python3
"""Per-call cost of accelerator's hot APIs, against a no-op C call.

    python bench/bench_api.py [--double] [--quick] [--check]
                              [--json OUT.json] [--markdown OUT.md]
                              [--peers] [--callgrind]

Each API is timed in a worker process next to ``_accelerator._noop()`` (a
METH_NOARGS C function that returns None) and an empty loop: per repeat,
the three run back to back in a random order, each for a calibrated number
of calls; the table shows medians over the repeats.  ``ns/call`` is net of
the empty loop; ``x no-op`` is that over the no-op's net cost.  The driver
part of each call is the same driver function timed from C
(bench/driver_calls.c, built with cc at run time), and ``overhead`` is the
difference.  On the CUDA driver double the driver calls per API call are
counted, not assumed.  ``--callgrind`` adds instructions per call under
valgrind.  ``--peers`` adds torch.accelerator, torch.cuda, cuda.core and
CuPy doing the same calls, where installed and usable.  Each row's budget
(the ``budget`` column: a multiple of the no-op, or the driver call plus
some ns) is judged in ``met?``; ``--check`` exits 1 when one is missed.
See bench/README.md.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
CUDA_DOUBLE = REPO / "tests" / "drivers" / "build" / "libcuda.so.1"
ZE_DRIVER = REPO / "tests" / "drivers" / "build" / "libze_test_driver.so"
RESULT_TAG = "BENCH_JSON "
PEERS = ("torch.accelerator", "torch.cuda", "cuda.core", "cupy")


@dataclass(frozen=True)
class Api:
    """One table row: what is called, and the budget it is held to."""

    key: str
    label: str
    # "noop<x>": at most x times the no-op; "driver<ns>": at most the
    # driver call plus ns; "report": no budget (issue #16's targets).
    budget: str = "report"


APIS = [
    Api("is_available", "is_available()", "noop1.3"),
    Api("device_count", "device_count()", "noop1.3"),
    Api("current_device_index", "current_device_index()", "noop1.3"),
    Api("current_accelerator", "current_accelerator()", "noop1.3"),
    Api("current_stream", "current_stream()", "noop1.3"),
    Api("set_stream", "set_stream(s)"),
    Api("device", "device(type, 0)", "noop3"),
    Api("device_str", "device('type:0')", "noop3"),
    Api("device_index", "with device_index(0) (same)", "noop6"),
    Api("device_index_switch", "with device_index(1) (switch)"),
    Api("with_stream", "with stream", "noop6"),
    Api("Stream()", "Stream() (+dealloc)"),
    Api("Event()", "Event() (+dealloc)"),
    Api("Event()+record", "Event().record(s) (+dealloc)"),
    Api("Stream.query", "Stream.query()", "driver50"),
    Api("Event.record", "Event.record(s)", "driver50"),
    Api("Event.record()", "Event.record() (current)"),
    Api("Event.query", "Event.query()", "driver50"),
    Api("synchronize", "synchronize() (idle)"),
    Api("Buffer(4096)", "Buffer(4096) (+free, cached)", "noop5"),
    Api("copy_from_4k", "Buffer.copy_from(4 KiB bytes)"),
    Api("Stream.synchronize", "Stream.synchronize() (idle)"),
]
#: rows compared across backends on the doubles (--double): the budget of
#: each, as a multiple of the CUDA double's figure (None: reported only)
ACROSS = {"Stream.query": None, "synchronize": 2.0,
          "Stream.synchronize": 2.0}


def budget_text(budget: str) -> str:
    if budget.startswith("noop"):
        return f"<= {budget[4:]}x no-op"
    if budget.startswith("driver"):
        return f"<= driver+{budget[6:]}ns"
    return "report"


def budget_met(budget: str, ratio: float | None, overhead: float | None
               ) -> str:
    """yes, NO with the miss, or - (no budget or nothing to judge)."""
    if budget.startswith("noop") and ratio is not None:
        limit = float(budget[4:])
        return "yes" if ratio <= limit else \
            f"NO, {ratio:.2f}x ({ratio / limit - 1:+.0%})"
    if budget.startswith("driver") and overhead is not None:
        limit = float(budget[6:])
        return "yes" if overhead <= limit else \
            f"NO, +{overhead - limit:,.0f} ns"
    return "-"


def missed_budgets(rows: list[dict[str, Any]]) -> list[str]:
    """Each row of a table whose budget was missed, as "api: NO, ..."."""
    return [f"{row['api']}: {row['met']}" for row in rows
            if str(row.get("met", "")).startswith("NO")]

# The driver allocation a cached Buffer avoids, timed from C and shown
# beside the Buffer row.
DRIVER_ALLOC = "cuMemAlloc+cuMemFree"

# The driver functions each API calls on the CUDA backend, as counted on the
# double (which the double run re-checks); used where nothing counts them.
CUDA_CALLS: dict[str, dict[str, float]] = {
    "device_index_switch": {"cuCtxSetCurrent": 2},
    # Dropped streams and events are pooled and reused: no create/destroy.
    "Stream()": {},
    "Event()+record": {"cuEventRecord": 1},
    "Stream.query": {"cuStreamQuery": 1},
    "Event.record": {"cuEventRecord": 1},
    "Event.record()": {"cuCtxGetCurrent": 1, "cuEventRecord": 1},
    "Event.query": {"cuEventQuery": 1},
    "synchronize": {"cuCtxGetCurrent": 1, "cuCtxSynchronize": 1},
    # The caching allocator reuses the block: no driver call.
    "Buffer(4096)": {},
    "copy_from_4k": {"cuCtxGetCurrent": 1, "cuMemcpyHtoDAsync": 1},
    "Stream.synchronize": {"cuStreamSynchronize": 1},
}
COUNTED = ("cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxPushCurrent",
           "cuCtxPopCurrent", "cuStreamCreateWithPriority", "cuStreamDestroy",
           "cuStreamQuery", "cuStreamSynchronize", "cuStreamWaitEvent",
           "cuEventCreate", "cuEventDestroy", "cuEventRecord", "cuEventQuery",
           "cuEventSynchronize", "cuCtxSynchronize", "cuMemAlloc",
           "cuMemFree", "cuMemcpyHtoDAsync")
# Where an API's driver call is a variant that driver_calls.c times apart.
VARIANTS = {
    "Event.record()": {"cuEventRecord": "cuEventRecord(legacy stream)"}}
PAIRS = ("cuStreamCreateWithPriority+cuStreamDestroy",
         "cuMemAlloc+cuMemFree",
         "cuEventCreate+cuEventDestroy", "cuCtxPushCurrent+cuCtxPopCurrent")


# Suites: what each library calls for each API (run in the worker) --------


@dataclass
class Suite:
    """Names bound as locals of the timed loop, the statement per API key
    (first candidate that runs wins), and a statement that restores the
    state (current stream, device) and drains queued work after a run."""

    names: dict[str, Any]
    stmts: dict[str, list[str]]
    reset: str
    info: dict[str, Any]


class Skip(Exception):
    """The suite cannot run here; the message says why."""


def noop_baseline() -> Callable[[], None]:
    from accelerator import _accelerator
    return _accelerator._noop


def suite_accelerator() -> Suite:
    import accelerator as A

    if not A.is_available():
        raise Skip("no accelerator: " + "; ".join(
            f"{b['name']}: {b['reason']}" for b in A.backends()))
    s = A.Stream()
    done = A.Event()
    done.record(s)
    s.synchronize()
    backend = next(b for b in A.backends() if b["selected"])
    names = dict(
        noop=A._accelerator._noop, is_available=A.is_available,
        device_count=A.device_count,
        current_device_index=A.current_device_index,
        current_accelerator=A.current_accelerator,
        current_stream=A.current_stream, set_stream=A.set_stream,
        set_device_index=A.set_device_index, device_index=A.device_index,
        device=A.device, T=A.current_accelerator().type,
        T0=A.current_accelerator().type + ":0",
        Stream=A.Stream, Event=A.Event, synchronize=A.synchronize,
        s=s, e=A.Event(), done=done, default=A.current_stream(0),
        Buffer=A.Buffer, buf=A.Buffer(4096), page=bytes(4096))
    stmts = {
        "is_available": ["is_available()"],
        "device_count": ["device_count()"],
        "current_device_index": ["current_device_index()"],
        "current_accelerator": ["current_accelerator()"],
        "current_stream": ["current_stream()"],
        "set_stream": ["set_stream(s)"],
        "device": ["device(T, 0)"],
        "device_str": ["device(T0)"],
        "device_index": ["with device_index(0):\n    pass"],
        "device_index_switch": ["with device_index(1):\n    pass"],
        "with_stream": ["with s:\n    pass"],
        "Stream()": ["Stream()"],
        "Event()": ["Event()"],
        "Event()+record": ["Event().record(s)"],
        "Stream.query": ["s.query()"],
        "Event.record": ["e.record(s)"],
        "Event.record()": ["e.record()"],
        "Event.query": ["done.query()"],
        "synchronize": ["synchronize()"],
        "Buffer(4096)": ["Buffer(4096)"],
        "copy_from_4k": ["buf.copy_from(page)"],
        "Stream.synchronize": ["s.synchronize()"],
    }
    info = {"library": "accelerator", "backend": backend["name"],
            "driver_version": backend["driver_version"],
            "device_name": A.get_device_name(0),
            "device_count": A.device_count(),
            "current_stream_cached":
                A.current_stream() is A.current_stream()}
    return Suite(names, stmts,
                 "set_stream(default); set_device_index(0); synchronize()",
                 info)


def torch_cuda() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise Skip(f"torch is not installed ({exc})") from None
    if not torch.cuda.is_available():
        raise Skip("torch.cuda.is_available() is False")
    return torch


def suite_torch_accelerator() -> Suite:
    torch = torch_cuda()
    T = getattr(torch, "accelerator", None)
    if T is None:
        raise Skip("this torch has no torch.accelerator")
    s = torch.Stream(device="cuda")
    done = torch.Event(device="cuda")
    done.record(s)
    s.synchronize()
    # Bound to locals, as for accelerator: attribute lookups are not timed.
    names = {"T_" + name: getattr(T, name, None) for name in (
        "is_available", "device_count", "current_device_index",
        "current_accelerator", "current_stream", "set_stream",
        "set_device_index", "device_index", "synchronize")}
    names.update(noop=noop_baseline(), S=torch.Stream, E=torch.Event, s=s,
                 e=torch.Event(device="cuda"), done=done,
                 default=T.current_stream(0), empty=torch.empty,
                 u8=torch.uint8)
    stmts = {
        "is_available": ["T_is_available()"],
        "device_count": ["T_device_count()"],
        "current_device_index": ["T_current_device_index()"],
        "current_accelerator": ["T_current_accelerator()"],
        "current_stream": ["T_current_stream()"],
        "set_stream": ["T_set_stream(s)"],
        "device_index": ["with T_device_index(0):\n    pass"],
        "device_index_switch": ["with T_device_index(1):\n    pass"],
        "with_stream": ["with s:\n    pass"],
        "Stream()": ["S(device='cuda')"],
        "Event()": ["E(device='cuda')"],
        "Event()+record": ["E(device='cuda').record(s)"],
        "Stream.query": ["s.query()"],
        "Event.record": ["e.record(s)"],
        "Event.record()": ["e.record()"],
        "Event.query": ["done.query()"],
        "synchronize": ["T_synchronize()"],
        "Stream.synchronize": ["s.synchronize()"],
        "Buffer(4096)": ["empty(4096, dtype=u8, device='cuda')"],
    }
    return Suite(names, stmts,
                 "T_set_stream(default); T_set_device_index(0); "
                 "T_synchronize()",
                 {"library": "torch.accelerator",
                  "version": torch.__version__})


def suite_torch_cuda() -> Suite:
    torch = torch_cuda()
    C = torch.cuda
    s = C.Stream()
    done = C.Event()
    done.record(s)
    s.synchronize()
    names = dict(
        noop=noop_baseline(), is_available=C.is_available,
        device_count=C.device_count, current_device=C.current_device,
        current_stream=C.current_stream, set_stream=C.set_stream,
        device=C.device, stream=C.stream, Stream=C.Stream, Event=C.Event,
        synchronize=C.synchronize, s=s, e=C.Event(), done=done,
        default=C.current_stream(0), torch_set=C.set_device,
        empty=torch.empty, u8=torch.uint8)
    stmts = {
        "is_available": ["is_available()"],
        "device_count": ["device_count()"],
        "current_device_index": ["current_device()"],
        "current_stream": ["current_stream()"],
        "set_stream": ["set_stream(s)"],
        "device_index": ["with device(0):\n    pass"],
        "device_index_switch": ["with device(1):\n    pass"],
        "with_stream": ["with stream(s):\n    pass"],
        "Stream()": ["Stream()"],
        "Event()": ["Event()"],
        "Event()+record": ["Event().record(s)"],
        "Stream.query": ["s.query()"],
        "Event.record": ["e.record(s)"],
        "Event.record()": ["e.record()"],
        "Event.query": ["done.query()"],
        "synchronize": ["synchronize()"],
        "Stream.synchronize": ["s.synchronize()"],
        "Buffer(4096)": ["empty(4096, dtype=u8, device='cuda')"],
    }
    return Suite(names, stmts,
                 "set_stream(default); torch_set(0); synchronize()",
                 {"library": "torch.cuda", "version": torch.__version__})


def suite_cuda_core() -> Suite:
    try:
        import cuda.core as core
        Device = core.Device
    except (ImportError, AttributeError):
        try:
            import cuda.core.experimental as core
            Device = core.Device
        except ImportError as exc:
            raise Skip(f"cuda.core is not installed ({exc})") from None
    dev = Device(0)
    dev.set_current()
    s = dev.create_stream()
    done = s.record()
    s.sync()
    names = dict(noop=noop_baseline(), Device=Device, dev=dev,
                 system=getattr(core, "system", None), s=s,
                 e=dev.create_event(), done=done)
    stmts = {
        "device_count": ["system.get_num_devices()", "system.num_devices"],
        "current_device_index": ["Device().device_id"],
        "current_stream": ["dev.default_stream"],
        "Stream()": ["dev.create_stream()"],
        "Event()": ["dev.create_event()"],
        "Event()+record": ["s.record()"],
        "Event.record": ["s.record(e)"],
        "Event.query": ["done.is_done"],
        "synchronize": ["dev.sync()"],
        "Stream.synchronize": ["s.sync()"],
        "Buffer(4096)": ["dev.allocate(4096)"],
    }
    return Suite(names, stmts, "s.sync(); dev.sync()",
                 {"library": "cuda.core",
                  "version": getattr(core, "__version__", "?")})


def suite_cupy() -> Suite:
    try:
        import cupy
    except ImportError as exc:
        raise Skip(f"cupy is not installed ({exc})") from None
    cuda = cupy.cuda
    if not cuda.is_available():
        raise Skip("cupy.cuda.is_available() is False")
    s = cuda.Stream(non_blocking=True)
    done = cuda.Event(disable_timing=True)
    done.record(s)
    s.synchronize()
    names = dict(
        noop=noop_baseline(), is_available=cuda.is_available,
        getDeviceCount=cuda.runtime.getDeviceCount,
        getDevice=cuda.runtime.getDevice,
        get_current_stream=cuda.get_current_stream, Device=cuda.Device,
        Stream=cuda.Stream, Event=cuda.Event,
        deviceSynchronize=cuda.runtime.deviceSynchronize, s=s,
        e=cuda.Event(disable_timing=True), done=done,
        default=cuda.Stream.null, setDevice=cuda.runtime.setDevice,
        empty=cupy.empty, u8=cupy.uint8)
    stmts = {
        "is_available": ["is_available()"],
        "device_count": ["getDeviceCount()"],
        "current_device_index": ["getDevice()"],
        "current_stream": ["get_current_stream()"],
        "set_stream": ["s.use()"],
        "device_index": ["with Device(0):\n    pass"],
        "device_index_switch": ["with Device(1):\n    pass"],
        "with_stream": ["with s:\n    pass"],
        "Stream()": ["Stream(non_blocking=True)"],
        "Event()": ["Event(disable_timing=True)"],
        "Event()+record": ["Event(disable_timing=True).record(s)"],
        "Stream.query": ["s.done"],
        "Event.record": ["e.record(s)"],
        "Event.record()": ["e.record()"],
        "Event.query": ["done.done"],
        "synchronize": ["deviceSynchronize()"],
        "Stream.synchronize": ["s.synchronize()"],
        "Buffer(4096)": ["empty(4096, dtype=u8)"],
    }
    return Suite(names, stmts,
                 "default.use(); setDevice(0); deviceSynchronize()",
                 {"library": "cupy", "version": cupy.__version__})


SUITES: dict[str, Callable[[], Suite]] = {
    "accelerator": suite_accelerator,
    "torch.accelerator": suite_torch_accelerator,
    "torch.cuda": suite_torch_cuda,
    "cuda.core": suite_cuda_core,
    "cupy": suite_cupy,
}


# The worker: times one suite in this process ------------------------------


def make_timer(suite: Suite, stmt: str) -> timeit.Timer:
    """A timer whose loop sees every suite name as a fast local."""
    setup = "; ".join(f"{name} = _names[{name!r}]" for name in suite.names)
    return timeit.Timer(stmt, setup, globals={"_names": suite.names})


def driver_counter() -> Callable[[], dict[str, int]] | None:
    """Reads the CUDA double's call counters; None on a real driver."""
    path = os.environ.get("ACCELERATOR_CUDA_LIBRARY")
    if not path:
        return None
    try:
        count = ctypes.CDLL(path).fake_cuda_call_count
    except (OSError, AttributeError):
        return None
    count.argtypes = [ctypes.c_char_p]
    count.restype = ctypes.c_longlong

    def snapshot() -> dict[str, int]:
        counts = {name: count(name.encode()) for name in COUNTED}
        counts["*"] = count(None)
        return counts

    return snapshot


def calibrate(timer: timeit.Timer, target: float, reset: Callable[[], None]
              ) -> int:
    """Calls per run such that one run lasts about target seconds."""
    n = 1
    while True:
        elapsed = timer.timeit(n)
        reset()
        if elapsed >= target or n >= 1 << 26:
            return n
        grow = target / elapsed if elapsed > 0 else 10.0
        n = max(n + 1, int(n * min(grow * 1.1, 10.0)))


def run_worker(name: str, target: float, repeats: int,
               callgrind: tuple[int, int] | None, marker: str | None
               ) -> dict[str, Any]:
    """Time (or count instructions of) every API of one suite."""
    try:
        suite = SUITES[name]()
    except Skip as exc:
        return {"suite": name, "skipped": str(exc)}
    except Exception as exc:  # a peer library failing to set up
        return {"suite": name, "skipped": f"{type(exc).__name__}: {exc}"}

    # Keep the parts of the reset that work here (an older library may
    # lack one of the functions it uses).
    resets = []
    for part in suite.reset.split(";"):
        try:
            exec(part.strip(), {}, suite.names)
            resets.append(compile(part.strip(), "<reset>", "exec"))
        except Exception:
            pass

    def reset() -> None:
        for code in resets:
            exec(code, {}, suite.names)

    timers = {"loop": make_timer(suite, "pass"),
              "noop": make_timer(suite, "noop()")}
    chosen: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    for key, candidates in suite.stmts.items():
        errors = []
        for stmt in candidates:
            timer = make_timer(suite, stmt)
            try:
                timer.timeit(1)
                reset()
            except Exception as exc:
                errors.append(f"{stmt!r}: {type(exc).__name__}: {exc}")
                continue
            timers[key], chosen[key] = timer, stmt
            break
        else:
            unavailable[key] = "; ".join(errors)[:300]
    result: dict[str, Any] = {"suite": name, "info": suite.info,
                              "stmts": chosen, "unavailable": unavailable}
    if callgrind is not None:
        assert marker is not None
        result["callgrind"] = count_instructions(timers, callgrind, marker,
                                                 reset)
        return result
    counts = {key: calibrate(t, target, reset) for key, t in timers.items()}
    samples: dict[str, list[tuple[float, float, float]]] = {
        key: [] for key in chosen}
    for _ in range(repeats):
        for key in random.sample(list(chosen), len(chosen)):
            trio: dict[str, float] = {}
            for which in random.sample(["loop", "noop", key], 3):
                n = counts[which]
                trio[which] = timers[which].timeit(n) / n * 1e9
                reset()
            samples[key].append((trio["loop"], trio["noop"], trio[key]))
    rows = {}
    for key, triples in samples.items():
        net = [row - loop for loop, _, row in triples]
        noop_net = [noop - loop for loop, noop, _ in triples]
        ratios = [r / b for r, b in zip(net, noop_net) if b > 0.5]
        rows[key] = {"ns": statistics.median(net),
                     "ns_gross": statistics.median(t[2] for t in triples),
                     "ratio": statistics.median(ratios) if ratios else None,
                     "loop_ns": statistics.median(t[0] for t in triples),
                     "noop_ns": statistics.median(noop_net),
                     "calls": counts[key]}
    result["rows"] = rows
    result["loop_ns"] = statistics.median(r["loop_ns"] for r in rows.values())
    result["noop_ns"] = statistics.median(r["noop_ns"] for r in rows.values())
    snapshot = (driver_counter() if suite.info.get("backend") == "cuda"
                else None)
    if snapshot is not None:
        result["driver_calls"] = count_driver_calls(timers, chosen, snapshot,
                                                    reset)
    return result


def count_driver_calls(timers: dict[str, timeit.Timer],
                       chosen: dict[str, str],
                       snapshot: Callable[[], dict[str, int]],
                       reset: Callable[[], None]
                       ) -> dict[str, dict[str, float]]:
    """Driver calls per API call, from the double's counters."""
    n = 200
    calls = {}
    for key in chosen:
        before = snapshot()
        timers[key].timeit(n)
        after = snapshot()
        reset()
        delta = {f: (after[f] - before[f]) / n for f in after}
        other = delta.pop("*") - sum(delta.values())
        per_call = {f: round(v, 2) for f, v in delta.items() if v}
        if other:
            per_call["other"] = round(other, 2)
        calls[key] = per_call
    return calls


def count_instructions(timers: dict[str, timeit.Timer], sizes: tuple[int, int],
                       marker: str, reset: Callable[[], None]
                       ) -> dict[str, list[int]]:
    """Run each API n1 then n2 times between callgrind dump markers."""
    lib = ctypes.CDLL(marker)
    lib.cg_mark.argtypes = [ctypes.c_char_p]
    lib.cg_mark.restype = None
    for key, timer in timers.items():
        for n in sizes:
            reset()
            lib.cg_mark(b"pre")
            timer.timeit(n)
            lib.cg_mark(f"{key}:{n}".encode())
    reset()
    return {key: list(sizes) for key in timers}


# The orchestrator --------------------------------------------------------


def child_env(use_double: bool, backend: str) -> dict[str, str] | None:
    """The environment for workers; None when that backend cannot run."""
    env = dict(os.environ)
    if any(REPO.joinpath("accelerator").glob("_accelerator*.so")):
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if use_double and backend == "cuda":
        if not CUDA_DOUBLE.exists():
            return None
        env.update(ACCELERATOR_BACKEND="cuda", FAKE_CUDA_DEVICES="2",
                   ACCELERATOR_CUDA_LIBRARY=str(CUDA_DOUBLE))
    elif use_double and backend == "xpu":
        if not ZE_DRIVER.exists():
            return None
        env.update(ACCELERATOR_BACKEND="xpu", FAKE_ZE_DEVICES="2",
                   ZE_ENABLE_ALT_DRIVERS=str(ZE_DRIVER))
    return env


def spawn_worker(suite: str, env: dict[str, str], args: argparse.Namespace,
                 prefix: Sequence[str] = (), extra: Sequence[str] = ()
                 ) -> dict[str, Any]:
    """Run one suite in a fresh process and return its result."""
    cmd = [*prefix, sys.executable, str(Path(__file__).resolve()),
           "--worker", suite, "--target-ms", str(args.target_ms),
           "--repeats", str(args.repeats), *extra]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=args.worker_timeout)
    except subprocess.TimeoutExpired:
        return {"suite": suite, "skipped": "worker timed out after "
                f"{args.worker_timeout} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"suite": suite, "skipped": f"worker failed ({proc.returncode}): "
            + " | ".join(tail)}


def build_c(tmp: Path, source: str, output: str, *flags: str) -> Path | None:
    """Compile one of bench/*.c with cc; None (and why, on stderr) if not."""
    cc = os.environ.get("CC", "cc")
    out = tmp / output
    cmd = [cc, "-std=gnu11", "-O2", "-Wall", "-Wextra",
           f"-I{REPO / 'csrc' / 'backends' / 'cuda'}", *flags, "-o", str(out),
           str(BENCH / source), "-ldl"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        print(f"note: cannot build {source}: {exc}", file=sys.stderr)
        return None
    if proc.returncode != 0:
        print(f"note: cannot build {source}:\n{proc.stderr}", file=sys.stderr)
        return None
    return out


def run_driver_calls(program: Path, env: dict[str, str],
                     args: argparse.Namespace) -> dict[str, Any]:
    """Driver function -> median ns per call, timed from C."""
    try:
        proc = subprocess.run(
            [str(program), "--target-ms", str(args.target_ms), "--repeats",
             str(args.repeats)], env=env, capture_output=True, text=True,
            timeout=args.worker_timeout)
    except subprocess.TimeoutExpired:
        return {"error": "driver_calls timed out"}
    ns: dict[str, Any] = {}
    for line in proc.stdout.splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            return {"error": f"driver_calls printed {line!r}"}
        if "error" in item:
            return {"error": item["error"]}
        ns[item["op"]] = item["ns"]
    return ns


IMPORT_PROBE = """
import json, os, time, ctypes
def rss_kib():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
rss_before = rss_kib()
t = time.perf_counter()
import accelerator
import_s = time.perf_counter() - t
rss_after = rss_kib()
maps = open('/proc/self/maps').read().split('\\n')
drivers = sorted({l.split()[-1] for l in maps if l.strip() and
                  os.path.basename(l.split()[-1]).startswith(
                      ('libcuda.', 'libze_', 'libnvidia-ml'))})
calls = None
path = os.environ.get('ACCELERATOR_CUDA_LIBRARY')
if path:
    try:
        f = ctypes.CDLL(path).fake_cuda_call_count
        f.argtypes, f.restype = [ctypes.c_char_p], ctypes.c_longlong
        calls = f(None)
    except (OSError, AttributeError):
        pass
t = time.perf_counter()
accelerator.is_available()
probe_s = time.perf_counter() - t
print(json.dumps({'import_ms': import_s * 1e3, 'drivers_loaded': drivers,
                  'driver_calls': calls, 'first_call_ms': probe_s * 1e3,
                  'rss_kib': rss_after,
                  'rss_import_kib': rss_after - rss_before}))
"""


def measure_import(env: dict[str, str], repeats: int) -> dict[str, Any]:
    """Extra wall time of `python -c 'import accelerator'` over `-c pass`,
    interleaved, plus what the import loaded and called (one more run).
    Start-up noise only ever adds time, so the headline is best of N minus
    best of N; the median of the paired differences is kept too."""
    commands = {"pass": [sys.executable, "-c", "pass"],
                "import": [sys.executable, "-c", "import accelerator"]}
    times: dict[str, list[float]] = {"pass": [], "import": []}
    for _ in range(repeats):
        for which in random.sample(list(commands), 2):
            start = time.perf_counter()
            subprocess.run(commands[which], env=env, check=True)
            times[which].append((time.perf_counter() - start) * 1e3)
    probe = subprocess.run([sys.executable, "-c", IMPORT_PROBE], env=env,
                           capture_output=True, text=True, check=True)
    result = json.loads(probe.stdout.strip().splitlines()[-1])
    result.update(
        python_ms=min(times["pass"]),
        extra_ms=min(times["import"]) - min(times["pass"]),
        extra_median_ms=statistics.median(
            i - p for i, p in zip(times["import"], times["pass"])),
        runs=repeats)
    return result


BANDWIDTH_PROBE = r'''
import json, sys
import accelerator as A
n, repeats = int(sys.argv[1]), int(sys.argv[2])
h, d, d2 = A.HostBuffer(n), A.Buffer(n, 0), A.Buffer(n, 0)
page = bytearray(n)
s = A.current_stream(0)
copies = {
    "host to device (HostBuffer)": lambda: d.copy_from(h),
    "device to host (HostBuffer)": lambda: d.copy_to(h),
    "host to device (pageable bytearray)": lambda: d.copy_from(page),
    "device to host (pageable bytearray)": lambda: d.copy_to(page),
    "device to device": lambda: d2.copy_from(d),
}
if A.device_count() > 1:
    other = A.Buffer(n, 1)
    copies["device 0 to device 1"] = lambda: other.copy_from(d, stream=s)
out = {}
for name, copy in copies.items():
    copy()
    A.synchronize(0)
    best = None
    for _ in range(repeats):
        start, end = A.Event(enable_timing=True), A.Event(enable_timing=True)
        start.record(s)
        copy()
        end.record(s)
        end.synchronize()
        ms = start.elapsed_time(end)
        best = ms if best is None or ms < best else best
    out[name] = {"ms": best, "gb_per_s": n / (best / 1e3) / 1e9}
print(json.dumps(out))
'''


PEER_BANDWIDTH_PROBE = r'''
import json, sys
n, repeats, library = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if library == "torch":
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("torch: no CUDA device")
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d = torch.empty(n, dtype=torch.uint8, device="cuda:0")
    d2 = torch.empty_like(d)
    Event = lambda: torch.cuda.Event(enable_timing=True)
    copies = {
        "host to device (pinned)": lambda: d.copy_(pinned, non_blocking=True),
        "device to host (pinned)": lambda: pinned.copy_(d, non_blocking=True),
        "device to device": lambda: d2.copy_(d),
    }
    elapsed = lambda a, b: a.elapsed_time(b)
else:
    import cupy, numpy
    pinned = numpy.frombuffer(cupy.cuda.alloc_pinned_memory(n), numpy.uint8,
                              n)
    d = cupy.empty(n, dtype=cupy.uint8)
    d2 = cupy.empty_like(d)
    Event = lambda: cupy.cuda.Event()
    copies = {
        "host to device (pinned)": lambda: d.set(pinned),
        "device to host (pinned)": lambda: d.get(out=pinned),
        "device to device": lambda: d2.__setitem__(slice(None), d),
    }
    elapsed = lambda a, b: cupy.cuda.get_elapsed_time(a, b)
out = {}
for name, copy in copies.items():
    copy()
    best = None
    for _ in range(repeats):
        a, b = Event(), Event()
        a.record()
        copy()
        b.record()
        b.synchronize()
        ms = elapsed(a, b)
        best = ms if best is None or ms < best else best
    out[name] = {"ms": best, "gb_per_s": n / (best / 1e3) / 1e9}
print(json.dumps(out))
'''


def measure_peer_bandwidth(env: dict[str, str], quick: bool
                           ) -> dict[str, Any]:
    """The same copies with torch and CuPy, where they are installed and
    have a GPU (on a real driver only)."""
    size = (16 if quick else 64) << 20
    found: dict[str, Any] = {}
    for library in ("torch", "cupy"):
        proc = subprocess.run(
            [sys.executable, "-c", PEER_BANDWIDTH_PROBE, str(size),
             "5" if quick else "10", library], env=env, capture_output=True,
            text=True, timeout=600)
        if proc.returncode == 0:
            found[library] = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            tail = (proc.stderr.strip().splitlines() or ["failed"])[-1]
            found[library] = {"skipped": tail}
    return found


def measure_bandwidth(env: dict[str, str], quick: bool) -> dict[str, Any]:
    """GB/s per copy direction, timed with events on the copy's stream
    (the best of the repeats), in a fresh process."""
    size = (16 if quick else 64) << 20
    proc = subprocess.run(
        [sys.executable, "-c", BANDWIDTH_PROBE, str(size),
         "5" if quick else "10"], env=env, capture_output=True, text=True,
        timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    return {"bytes": size,
            "copies": json.loads(proc.stdout.strip().splitlines()[-1])}


def bandwidth_table(bw: dict[str, Any]) -> str:
    if "error" in bw:
        return f"bandwidth: failed: {bw['error']}"
    rows = [[name, fmt(v["ms"], 3), fmt(v["gb_per_s"], 2)]
            for name, v in bw["copies"].items()]
    return (f"Copy bandwidth, {bw['bytes'] >> 20} MiB, timed with events "
            "(best of the repeats)\n\n"
            + table(["copy", "ms", "GB/s"], rows))


GRAPH_ASYNC_PROBE = r'''
import asyncio, json, sys, time
import accelerator as A
iters, copies, n = int(sys.argv[1]), 10, 4096
s = A.Stream(0)
bufs = [A.Buffer(n, 0, stream=s) for _ in range(copies + 1)]
A.synchronize(0)
def issue():
    for i in range(copies):
        bufs[i + 1].copy_from(bufs[i], stream=s)
def per_iter_us(body):
    body(); s.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        body()
    s.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6
out = {"issue 10 copies (us per sequence)": per_iter_us(issue)}
try:
    g = A.Graph()
    with s, g:
        issue()
    def replay():
        with s:
            g.replay()
    out["replay a 10-copy graph (us per sequence)"] = per_iter_us(replay)
except NotImplementedError as exc:
    out["replay a 10-copy graph (us per sequence)"] = str(exc)
def sync_us():
    t = 0.0
    for _ in range(iters):
        bufs[1].copy_from(bufs[0], stream=s)
        e = s.record_event(A.Event(blocking=True))
        t0 = time.perf_counter(); e.synchronize(); t += time.perf_counter() - t0
    return t / iters * 1e6
async def await_us():
    t = 0.0
    for _ in range(iters):
        bufs[1].copy_from(bufs[0], stream=s)
        e = s.record_event(A.Event(blocking=True))
        t0 = time.perf_counter(); await e; t += time.perf_counter() - t0
    return t / iters * 1e6
out["event.synchronize() after a copy (us)"] = sync_us()
out["await event after a copy (us)"] = asyncio.run(await_us())
print(json.dumps(out))
'''


def measure_graph_async(env: dict[str, str], quick: bool) -> dict[str, Any]:
    """Graph replay against issuing the same 10 copies, and the latency of
    `await event` beside event.synchronize(), in a fresh process (host
    wall-clock per iteration: on a double it is the API and driver cost)."""
    proc = subprocess.run(
        [sys.executable, "-c", GRAPH_ASYNC_PROBE, "200" if quick else "2000"],
        env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def graph_async_table(rows: dict[str, Any]) -> str:
    if "error" in rows:
        return f"graphs and asyncio: failed: {rows['error']}"
    return ("Graphs and asyncio (host wall-clock per iteration)\n\n"
            + table(["what", "us"],
                    [[k, fmt(v, 2) if isinstance(v, float) else v]
                     for k, v in rows.items()]))


def driver_ns(key: str, calls: dict[str, float], c_ns: dict[str, Any]
              ) -> float | None:
    """The driver time of one API call: its driver calls at C cost."""
    rename = VARIANTS.get(key, {})
    left = {rename.get(f, f): k for f, k in calls.items()}
    total = 0.0
    for pair in PAIRS:
        a, b = pair.split("+")
        k = min(left.get(a, 0), left.get(b, 0))
        if k and pair in c_ns:
            total += k * c_ns[pair]
            left[a] -= k
            left[b] -= k
    for function, k in left.items():
        if k <= 0:
            continue
        if function not in c_ns:
            return None
        total += k * c_ns[function]
    return total


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table, padded so it reads as plain text too."""
    widths = [max(len(str(r[i])) for r in [headers, *rows])
              for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))
                                 ) + " |"

    sep = "|" + "|".join("-" * (w + 1) + ("-" if i == 0 else ":")
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def main_table(result: dict[str, Any], c_ns: dict[str, Any],
               imports: dict[str, Any] | None) -> tuple[str, list[dict]]:
    """The per-API table of one backend, and its rows as data."""
    counted = result.get("driver_calls")
    is_cuda = result["info"].get("backend") == "cuda"
    rows, data = [], []
    for api in APIS:
        r = result["rows"].get(api.key)
        if r is None:
            continue
        calls = None
        if counted is not None:
            calls = counted.get(api.key, {})
        elif is_cuda:
            calls = CUDA_CALLS.get(api.key, {})
        drv = (driver_ns(api.key, calls, c_ns)
               if calls is not None and c_ns else None)
        overhead = r["ns"] - drv if drv is not None else None
        met = budget_met(api.budget, r["ratio"], overhead)
        if (api.key == "current_stream"
                and not result["info"]["current_stream_cached"]):
            met = "NO, not cached"
        budget = budget_text(api.budget)
        if api.key == "current_stream":
            budget += ", cached"
        call_text = "-" if calls is None else " ".join(
            f if v == 1 else f"{f}*{v:g}" for f, v in calls.items()) or "none"
        rows.append([api.label, fmt(r["ns"]), fmt(r["ratio"], 2), fmt(drv),
                     fmt(overhead), budget, met]
                    + ([call_text] if counted is not None else []))
        data.append({"api": api.key, "ns": r["ns"], "ratio": r["ratio"],
                     "driver_ns": drv, "overhead_ns": overhead,
                     "budget": budget, "met": met, "driver_calls": calls})
        if api.key == "Buffer(4096)" and DRIVER_ALLOC in c_ns:
            # Beside it: what one driver allocation and free cost, from C.
            alloc_ns = c_ns[DRIVER_ALLOC]
            noop_ns = result["noop_ns"]
            rows.append([f"  (driver: {DRIVER_ALLOC}, 4096 B, from C)",
                         fmt(alloc_ns),
                         fmt(alloc_ns / noop_ns if noop_ns > 0.5 else None,
                             2), fmt(alloc_ns), "-", "report", "-"]
                        + (["-"] if counted is not None else []))
            data.append({"api": DRIVER_ALLOC, "ns": alloc_ns,
                         "driver_ns": alloc_ns})
    if imports is not None:
        ok = (imports["extra_ms"] < 2.0 and not imports["drivers_loaded"]
              and imports["driver_calls"] in (0, None))
        calls = imports["driver_calls"]
        met = "yes" if ok else f"NO, {imports['extra_ms'] - 2.0:+.2f} ms over"
        rows.append(["import accelerator (extra ms)",
                     f"{imports['extra_ms']:.2f} ms", "-",
                     "-" if calls is None else f"{calls} calls", "-",
                     "< 2 ms, no driver", met]
                    + ([f"{calls} calls"] if counted is not None else []))
        data.append({"api": "import", "extra_ms": imports["extra_ms"],
                     "met": met, **imports})
    headers = ["api", "ns/call", "x no-op", "driver ns", "overhead ns",
               "budget", "met?"] + (["driver calls/call (counted)"]
                                    if counted is not None else [])
    return table(headers, rows), data


def across_table(backends: dict[str, Any]) -> tuple[str, list[dict]]:
    """The rows of ACROSS on each backend's double, side by side: Level
    Zero's cost as a multiple of CUDA's, against its budget."""
    rows, data = [], []
    cuda = backends.get("cuda", {}).get("worker", {}).get("rows", {})
    xpu = backends.get("xpu", {}).get("worker", {}).get("rows", {})
    for api in APIS:
        if api.key not in ACROSS or api.key not in cuda \
                or api.key not in xpu:
            continue
        c, x = cuda[api.key]["ns"], xpu[api.key]["ns"]
        ratio = x / c if c > 0 else None
        limit = ACROSS[api.key]
        met = "-" if limit is None or ratio is None else (
            "yes" if ratio <= limit else
            f"NO, {ratio / limit - 1:+.0%} over")
        budget = "report" if limit is None else f"<= {limit:g}x cuda"
        rows.append([api.label, fmt(c), fmt(x), fmt(ratio, 2), budget, met])
        data.append({"api": api.key, "cuda_ns": c, "xpu_ns": x,
                     "ratio": ratio, "budget": budget, "met": met})
    return table(["api", "cuda ns", "xpu ns", "xpu / cuda", "budget",
                  "met?"], rows), data


def peers_table(results: dict[str, dict[str, Any]]) -> str:
    """ns/call (x no-op) of each API in each library, side by side."""
    names = [n for n in results if "rows" in results[n]]
    rows = []
    for api in APIS:
        cells = []
        for n in names:
            r = results[n]["rows"].get(api.key)
            cells.append("n/a" if r is None else
                         f"{r['ns']:,.0f} ({fmt(r['ratio'], 1)}x)")
        if any(c != "n/a" for c in cells):
            rows.append([api.label, *cells])
    return table(["api: ns/call (x no-op)", *names], rows)


TRIGGER = "desc: Trigger: Client Request: "


def parse_callgrind(directory: Path, prefix: str) -> dict[str, int]:
    """Instructions of each dumped part, by its client-request label.  Only
    the main thread's (-01): work a driver hands to its own threads is the
    device's job, and it lands in whichever part it happens to run."""
    parts: dict[str, int] = {}
    for path in directory.glob(prefix + ".*-01"):
        label = total = None
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(TRIGGER):
                label = line[len(TRIGGER):]
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
            if label is not None and total is not None:
                break
        if label is not None and total is not None and label != "pre":
            parts[label] = total
    return parts


def per_call(parts: dict[str, int], key: str, sizes: tuple[int, int]
             ) -> float | None:
    a, b = parts.get(f"{key}:{sizes[0]}"), parts.get(f"{key}:{sizes[1]}")
    if a is None or b is None:
        return None
    return (b - a) / (sizes[1] - sizes[0])


def run_callgrind(env: dict[str, str], tmp: Path, program: Path | None,
                  counted: dict[str, dict[str, float]] | None,
                  args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Instructions per call of each API, and of its driver part, from
    callgrind profiles split by client-request dumps (see README)."""
    valgrind = shutil.which("valgrind")
    marker = build_c(tmp, "callgrind_mark.c", "callgrind_mark.so", "-shared",
                     "-fPIC")
    if valgrind is None or marker is None:
        return "callgrind: needs valgrind and valgrind/callgrind.h", {}
    sizes = (100, 300) if args.quick else (300, 1300)
    size_arg = f"{sizes[0]},{sizes[1]}"
    out = Path(tempfile.mkdtemp(prefix="callgrind.", dir=tmp))  # per run
    prefix = [valgrind, "--tool=callgrind", "--dump-instr=no",
              "--separate-threads=yes", f"--callgrind-out-file={out}/py.%p"]
    args.worker_timeout = max(args.worker_timeout, 900)
    worker = spawn_worker("accelerator", env, args, prefix,
                          ["--callgrind-sizes", size_arg, "--marker",
                           str(marker)])
    if "skipped" in worker:
        return f"callgrind: skipped ({worker['skipped']})", {}
    py = parse_callgrind(out, "py")
    c_ir: dict[str, float] = {}
    if program is not None and worker["info"].get("backend") == "cuda":
        subprocess.run([*prefix[:-1], f"--callgrind-out-file={out}/c.%p",
                        str(program),
                        "--callgrind", size_arg], env=env, capture_output=True,
                       timeout=args.worker_timeout)
        c_parts = parse_callgrind(out, "c")
        for op in {label.rsplit(":", 1)[0] for label in c_parts}:
            value = per_call(c_parts, op, sizes)
            if value is not None:
                c_ir[op] = value
    loop = per_call(py, "loop", sizes) or 0.0
    noop = (per_call(py, "noop", sizes) or 0.0) - loop
    rows, data = [], {"loop_ir": loop, "noop_ir": noop, "rows": {}}
    for api in APIS:
        total = per_call(py, api.key, sizes)
        if total is None:
            continue
        net = total - loop
        calls = None
        if c_ir:
            calls = (counted or CUDA_CALLS).get(api.key, {})
        drv = driver_ns(api.key, calls, c_ir) if calls is not None else None
        rows.append([api.label, fmt(net, 0),
                     fmt(net / noop if noop > 0 else None, 2), fmt(drv, 0),
                     fmt(net - drv if drv is not None else None, 0)])
        data["rows"][api.key] = {"ir": net, "driver_ir": drv}
    text = (f"Instructions per call under callgrind (N={sizes[0]} vs "
            f"{sizes[1]}; loop {loop:.0f} Ir subtracted; no-op {noop:.0f} Ir)"
            "\n\n" + table(["api", "Ir/call", "x no-op", "driver Ir",
                            "overhead Ir"], rows))
    return text, data


# The callgrind gate: per-call instructions against a committed baseline --

BASELINE = BENCH / "callgrind_baseline.json"
GATE_SIZES = (200, 1200)
GATE_TOLERANCE = 0.10  # a row fails when it grows more than this
GATE_RECOUNTS = 2      # counts again of a run with a row over the line


def callgrind_rows(env: dict[str, str], tmp: Path,
                   args: argparse.Namespace) -> dict[str, float] | str:
    """Instructions per call of each API on the CUDA double, net of the
    empty loop; or why they cannot be counted here."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return "valgrind is not installed"
    marker = build_c(tmp, "callgrind_mark.c", "callgrind_mark.so", "-shared",
                     "-fPIC")
    if marker is None:
        return "cannot build bench/callgrind_mark.c (valgrind/callgrind.h?)"
    out = Path(tempfile.mkdtemp(prefix="callgrind.", dir=tmp))
    prefix = [valgrind, "--tool=callgrind", "--dump-instr=no",
              "--separate-threads=yes", f"--callgrind-out-file={out}/py.%p"]
    args.worker_timeout = max(args.worker_timeout, 900)
    worker = spawn_worker("accelerator", env, args, prefix, [
        "--callgrind-sizes", ",".join(map(str, GATE_SIZES)),
        "--marker", str(marker)])
    if "skipped" in worker:
        return f"the worker did not run: {worker['skipped']}"
    parts = parse_callgrind(out, "py")
    loop = per_call(parts, "loop", GATE_SIZES) or 0.0
    rows = {}
    for key in ["noop", *(api.key for api in APIS)]:
        total = per_call(parts, key, GATE_SIZES)
        if total is not None:
            rows[key] = round(total - loop, 1)
    return rows


def gate_context() -> dict[str, str]:
    """What instruction counts depend on besides our code: a baseline
    taken under another interpreter says nothing about this one."""
    return {"python": f"{platform.python_implementation()} "
                      f"{platform.python_version()}",
            "machine": platform.machine()}


def callgrind_baseline(mode: str, args: argparse.Namespace) -> int:
    """--callgrind-baseline write|check (see bench/README.md).  check exits
    0 when no row grew more than GATE_TOLERANCE, 1 when one did, 2 when it
    cannot measure (the reason is printed)."""
    env = child_env(True, "cuda")
    if env is None:
        print("cannot measure: the CUDA double is not built "
              "(make -C tests/drivers)")
        return 2
    with tempfile.TemporaryDirectory(prefix="bench_api.") as tmpdir:
        rows = callgrind_rows(env, Path(tmpdir), args)
    if isinstance(rows, str):
        print(f"cannot measure: {rows}")
        return 2
    if mode == "write":
        BASELINE.write_text(json.dumps(
            {"about": "instructions per call under callgrind on the CUDA "
                      "double, net of the empty loop; written by "
                      "bench/bench_api.py --callgrind-baseline write",
             "sizes": list(GATE_SIZES), **gate_context(), "rows": rows},
            indent=1) + "\n")
        print(f"wrote {BASELINE.relative_to(REPO)} ({len(rows)} rows)")
        return 0
    base = json.loads(BASELINE.read_text())
    context = gate_context()
    if any(base.get(k) != v for k, v in context.items()):
        print(f"cannot compare: the baseline was taken on {base['python']} "
              f"{base['machine']}, this is {context['python']} "
              f"{context['machine']}")
        return 2
    text, failed = compare_to_baseline(base["rows"], rows)
    # A row that waits for a driver thread (synchronize) counts the spins
    # of that wait, which the machine's load moves by a few percent: a row
    # over the line is counted again, up to GATE_RECOUNTS times, keeping
    # each row's least count.  A real growth is in every count.
    recounts = 0
    while failed and recounts < GATE_RECOUNTS:
        recounts += 1
        with tempfile.TemporaryDirectory(prefix="bench_api.") as tmpdir:
            again = callgrind_rows(env, Path(tmpdir), args)
        if isinstance(again, str):
            break
        rows = {k: min(v, again.get(k, v)) for k, v in rows.items()}
        text, failed = compare_to_baseline(base["rows"], rows)
    if recounts:
        text += (f"\n(counted {recounts + 1} times, the least count of each "
                 "row kept)")
    print(text)
    return 1 if failed else 0


def compare_to_baseline(base: dict[str, float], rows: dict[str, float]
                        ) -> tuple[str, list[str]]:
    """The comparison table, and the rows that grew more than the
    tolerance (or are no longer measured)."""
    failed, table_rows = [], []
    for key, before in base.items():
        now = rows.get(key)
        if now is None:
            failed.append(f"{key}: no longer measured")
            continue
        change = (now - before) / before if before > 0 else 0.0
        bad = change > GATE_TOLERANCE
        if bad:
            failed.append(f"{key}: {before:,.0f} -> {now:,.0f} Ir/call "
                          f"({change:+.1%})")
        table_rows.append([key, fmt(before, 0), fmt(now, 0),
                           f"{change:+.1%}", "GREW" if bad else "ok"])
    text = table(["api", "baseline Ir", "now Ir", "change", ""], table_rows)
    if failed:
        text += (f"\n\nmore than {GATE_TOLERANCE:.0%} over the baseline:\n  "
                 + "\n  ".join(failed) + "\n(if on purpose: "
                 "bench/bench_api.py --callgrind-baseline write, and commit "
                 "the file)")
    return text, failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--double", action="store_true",
                        help="run on the driver test doubles "
                        "(tests/drivers/build), 2 devices")
    parser.add_argument("--quick", action="store_true",
                        help="short runs: 2 ms per timing, 5 repeats")
    parser.add_argument("--json", type=Path, help="write all data here")
    parser.add_argument("--markdown", type=Path,
                        help="write the tables here, with date and device")
    parser.add_argument("--peers", action="store_true",
                        help="also time torch.accelerator, torch.cuda, "
                        "cuda.core and CuPy (real GPU only)")
    parser.add_argument("--summary", type=Path,
                        help="write the last (shortest) table here")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a row misses its budget (listed "
                        "on stderr)")
    parser.add_argument("--callgrind", action="store_true",
                        help="also count instructions per call (valgrind)")
    parser.add_argument("--callgrind-baseline", choices=("check", "write"),
                        help="instructions per call on the CUDA double "
                        "against bench/callgrind_baseline.json: check "
                        "(exit 1 when a row grew > 10%%) or write it anew")
    parser.add_argument("--target-ms", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--marker", help=argparse.SUPPRESS)
    parser.add_argument("--callgrind-sizes", dest="sizes",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.target_ms = args.target_ms or (2.0 if args.quick else 10.0)
    args.repeats = args.repeats or (5 if args.quick else 15)
    args.worker_timeout = 60 if args.quick else 300

    if args.worker:
        sizes = None
        if args.sizes:
            n1, n2 = (int(x) for x in args.sizes.split(","))
            sizes = (n1, n2)
        result = run_worker(args.worker, args.target_ms / 1e3, args.repeats,
                            sizes, args.marker)
        print(RESULT_TAG + json.dumps(result))
        return 0
    if args.callgrind_baseline:
        return callgrind_baseline(args.callgrind_baseline, args)
    return orchestrate(args)


def orchestrate(args: argparse.Namespace) -> int:
    """Run every backend (and peer) in its own process; print and save."""
    started = datetime.datetime.now().astimezone()
    report: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "quick": args.quick, "backends": {}}
    text: list[str] = []
    summary = ""
    with tempfile.TemporaryDirectory(prefix="bench_api.") as tmpdir:
        tmp = Path(tmpdir)
        program = build_c(tmp, "driver_calls.c", "driver_calls")
        measured = 0
        missed: list[str] = []
        for backend in ("cuda", "xpu"):
            env = child_env(args.double, backend)
            if env is None:
                print(f"{backend}: skipped (its driver double is not built: "
                      "make -C tests/drivers)")
                continue
            if not args.double and backend == "xpu":
                break  # without --double the environment picks one backend
            result = spawn_worker("accelerator", env, args)
            if "skipped" in result:
                label = backend if args.double else "accelerator"
                print(f"{label}: skipped ({result['skipped']})")
                report["backends"][backend] = result
                continue
            chosen = result["info"]["backend"]
            c_ns: dict[str, Any] = {}
            if chosen == "cuda" and program is not None:
                c_ns = run_driver_calls(program, env, args)
                if "error" in c_ns:
                    print(f"note: driver_calls: {c_ns['error']}")
                    c_ns = {}
            imports = measure_import(env, 20 if args.quick else 40)
            body, rows = main_table(result, c_ns, imports)
            missed += [f"{chosen}: {miss}" for miss in missed_budgets(rows)]
            check = check_counts(result)
            head = header(result, args, imports)
            summary = body
            text.append(f"{head}\n\n{body}" + (f"\n\n{check}" if check
                                                 else ""))
            print(text[-1] + "\n", flush=True)
            bandwidth = measure_bandwidth(env, args.quick)
            text.append(bandwidth_table(bandwidth))
            print(text[-1] + "\n", flush=True)
            graph_async = measure_graph_async(env, args.quick)
            text.append(graph_async_table(graph_async))
            print(text[-1] + "\n", flush=True)
            if args.peers and not args.double and chosen == "cuda":
                bandwidth["peers"] = measure_peer_bandwidth(env, args.quick)
                for library, rows in bandwidth["peers"].items():
                    if "skipped" in rows:
                        print(f"{library} bandwidth: skipped "
                              f"({rows['skipped']})")
                        continue
                    text.append(f"{library}: " + bandwidth_table(
                        {"bytes": bandwidth.get("bytes", 0),
                         "copies": rows}))
                    print(text[-1] + "\n", flush=True)
            report["backends"][chosen] = {
                "worker": result, "driver_c_ns": c_ns, "table": rows,
                "bandwidth": bandwidth, "graph_async": graph_async}
            measured += 1
            if args.callgrind:
                cg_text, cg_data = run_callgrind(
                    env, tmp, program, result.get("driver_calls"), args)
                text.append(cg_text)
                print(cg_text + "\n", flush=True)
                report["backends"][chosen]["callgrind"] = cg_data
            if not args.double:
                break
        if args.double and {"cuda", "xpu"} <= {
                b for b, r in report["backends"].items() if "worker" in r}:
            body, rows = across_table(report["backends"])
            missed += [f"xpu/cuda: {miss}" for miss in missed_budgets(rows)]
            report["across"] = rows
            text.append("Level Zero against CUDA, both on their doubles "
                        "(ns/call net of the loop)\n\n" + body)
            print(text[-1] + "\n", flush=True)
        if measured == 0:
            print("no accelerator to measure; on a machine without a GPU "
                  "run: make -C tests/drivers cuda && python "
                  "bench/bench_api.py --double", file=sys.stderr)
            return 1
        if args.peers:
            env = child_env(False, "cuda") or dict(os.environ)
            peers = {"accelerator": report["backends"].get(
                "cuda", {}).get("worker", {})}
            for name in PEERS:
                peers[name] = spawn_worker(name, env, args)
                if "skipped" in peers[name]:
                    print(f"{name}: skipped ({peers[name]['skipped']})")
                elif peers[name]["unavailable"]:
                    print(f"{name}: no equivalent or failed: "
                          f"{', '.join(peers[name]['unavailable'])} "
                          "(reasons in the JSON)")
            report["peers"] = peers
            if any("rows" in p for n, p in peers.items()
                   if n != "accelerator"):
                summary = peers_table(peers)
                text.append("Side by side, each library in its own process "
                            "(ns/call net of the loop; x its own no-op "
                            "call)\n\n" + summary)
                print(text[-1] + "\n", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(summary + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text("\n\n".join(text) + "\n")
    if args.check:
        if missed:
            print(f"{len(missed)} budget(s) missed:\n  "
                  + "\n  ".join(missed), file=sys.stderr)
            return 1
        print("every budget met", file=sys.stderr)
    return 0


def header(result: dict[str, Any], args: argparse.Namespace,
           imports: dict[str, Any]) -> str:
    """What was measured where, and the baselines, as a markdown list."""
    info = result["info"]
    return "\n".join([
        f"### accelerator on {info['backend']}: {info['device_name']} "
        f"x{info['device_count']}, driver {info['driver_version']}"
        f"{' (test double)' if args.double else ''}",
        "",
        f"- {datetime.date.today().isoformat()}, Python "
        f"{platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs",
        f"- baseline: `_accelerator._noop()` (METH_NOARGS, returns None) "
        f"{result['noop_ns']:.1f} ns net; empty loop "
        f"{result['loop_ns']:.1f} ns/iteration, subtracted from every row",
        f"- medians of {args.repeats} interleaved repeats (loop, no-op, "
        f"API in random order) of ~{args.target_ms:g} ms each",
        f"- import: `python -c pass` {imports['python_ms']:.1f} ms (best of "
        f"{imports['runs']}); `import accelerator` adds "
        f"{imports['extra_ms']:.2f} ms (median of the paired differences "
        f"{imports['extra_median_ms']:.2f} ms); the import itself "
        f"{imports['import_ms']:.2f} ms in-process; first "
        f"is_available() (the probe) {imports['first_call_ms']:.2f} ms; "
        f"resident memory after import {imports['rss_kib']:,} KiB, of "
        f"which the import added {imports['rss_import_kib']:,} KiB; "
        f"driver libraries mapped after import: "
        f"{', '.join(imports['drivers_loaded']) or 'none'}",
    ])


def check_counts(result: dict[str, Any]) -> str:
    """Where the counted driver calls differ from CUDA_CALLS, say so."""
    counted = result.get("driver_calls")
    if counted is None or result["info"].get("backend") != "cuda":
        return ""
    diffs = [f"{key}: counted {calls}, CUDA_CALLS says "
             f"{CUDA_CALLS.get(key, {})}" for key, calls in counted.items()
             if calls != CUDA_CALLS.get(key, {})]
    return ("note: update CUDA_CALLS in bench_api.py (used on real drivers):"
            "\n  " + "\n  ".join(diffs)) if diffs else ""


if __name__ == "__main__":
    sys.exit(main())
