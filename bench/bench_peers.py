#!/usr/bin/env python3
"""accelerator side by side with NVIDIA's cuda.core and raw cuda.bindings.

    python bench/bench_peers.py --double [--quick] [--markdown OUT.md]

All three run in one process on the same driver (with ``--double``, the
CUDA driver double: tests/drivers/build goes on LD_LIBRARY_PATH so that
cuda.bindings opens it as libcuda.so.1).  Per repeat, for each row, the
empty loop and each library's statement are timed in a random order, each
for a calibrated number of calls; the table shows medians over the
repeats, net of the loop, and the medians of the per-repeat ratios
ours/cuda.core and ours/cuda.bindings.

cuda.core (PyPI ``cuda-core``, with ``cuda-bindings<13``) is imported from
this interpreter when it has it; otherwise the script makes a throwaway
venv (``--venv``, default under ~/.cache, with this interpreter's site
packages visible, never installing accelerator) and installs it there.  When
that fails (no network, no pip), it says why and exits 0.  See
bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOUBLES = REPO / "tests" / "drivers" / "build"
RESULT_TAG = "PEERS_JSON "
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME",
                                   Path.home() / ".cache")) / \
    "accelerator-bench" / "peers-venv"
PEER_PACKAGES = ["cuda-core", "cuda-bindings<13"]
PEER_PROBE = "import cuda.core, cuda.bindings.driver"

# (key, label, ours, cuda.core candidates, cuda.bindings candidates); the
# first candidate that runs is timed.  Names are bound in worker_names().
ROWS: list[tuple[str, str, str, list[str], list[str]]] = [
    ("device", "device object: device('cuda', 0) / Device(0)",
     "device('cuda', 0)", ["Device(0)"], ["cuDeviceGet(0)"]),
    ("device_str", "device('cuda:0')", "device('cuda:0')", [], []),
    ("device_count", "device_count()", "device_count()",
     ["system.get_num_devices()", "system.num_devices"],
     ["cuDeviceGetCount()"]),
    ("current_device", "current device index", "current_device_index()",
     ["Device().device_id"], ["cuCtxGetCurrent()"]),
    ("current_stream", "default/current stream", "current_stream()",
     ["dev.default_stream"], []),
    ("set_device", "set current device (same)", "set_device_index(0)",
     ["dev.set_current()"], ["cuCtxSetCurrent(ctx)"]),
    ("stream_new", "stream create+drop", "Stream()",
     ["dev.create_stream()"],
     ["cuStreamDestroy(cuStreamCreateWithPriority(1, 0)[1])"]),
    ("event_new", "event create+drop", "Event()", ["dev.create_event()"],
     ["cuEventDestroy(cuEventCreate(2)[1])"]),
    ("record", "event record", "e.record(s)", ["cs.record(ce)"],
     ["cuEventRecord(ce_h, cs_h)"]),
    ("event_query", "event query (done)", "done.query()",
     ["cdone.is_done"], ["cuEventQuery(cdone_h)"]),
    ("stream_query", "stream query (idle)", "s.query()",
     ["cs.is_done", "cs.query()"], ["cuStreamQuery(cs_h)"]),
    ("stream_sync", "stream synchronize (idle)", "s.synchronize()",
     ["cs.sync()"], ["cuStreamSynchronize(cs_h)"]),
    ("device_sync", "device synchronize (idle)", "synchronize()",
     ["dev.sync()"], ["cuCtxSynchronize()"]),
    ("wait_event", "stream wait_event", "s.wait_event(done)",
     ["cs.wait(cdone)"], ["cuStreamWaitEvent(cs_h, cdone_h, 0)"]),
    ("alloc", "allocate+free 1 MiB (stream-ordered)",
     "Buffer(1 << 20, stream=s).close()",
     ["dev.allocate(1 << 20, stream=cs).close(cs)"],
     ["cuMemFreeAsync(cuMemAllocAsync(1 << 20, cs_h)[1], cs_h)",
      "cuMemFree(cuMemAlloc(1 << 20)[1])"]),
    ("copy", "copy launch 1 MiB device to device", "b2.copy_from(b1, stream=s)",
     ["cb2.copy_from(cb1, stream=cs)"],
     ["cuMemcpyDtoDAsync(raw2, raw1, 1 << 20, cs_h)"]),
    ("fill", "fill launch 1 MiB", "b1.fill(0, stream=s)",
     ["cb1.fill(0, stream=cs)"], ["cuMemsetD8Async(raw1, 0, 1 << 20, cs_h)"]),
]
LIBS = ("accelerator", "cuda.core", "cuda.bindings")


# The worker: all three libraries in this process -------------------------


def worker_names() -> tuple[dict[str, Any], dict[str, str]]:
    """Every name the statements use, and why a library's part is missing."""
    import accelerator as A

    missing: dict[str, str] = {}
    if not A.is_available():
        raise SystemExit("no accelerator: " + "; ".join(
            f"{b['name']}: {b['reason']}" for b in A.backends()))
    s = A.Stream()
    done = A.Event()
    done.record(s)
    s.synchronize()
    names: dict[str, Any] = dict(
        device=A.device, device_count=A.device_count,
        current_device_index=A.current_device_index,
        current_stream=A.current_stream,
        set_device_index=A.set_device_index, Stream=A.Stream, Event=A.Event,
        synchronize=A.synchronize, s=s, e=A.Event(), done=done)
    if hasattr(A, "Buffer"):
        names.update(Buffer=A.Buffer, b1=A.Buffer(1 << 20),
                     b2=A.Buffer(1 << 20))
    try:
        import cuda.bindings.driver as drv
    except ImportError as exc:
        missing["cuda.bindings"] = f"not importable: {exc}"
        drv = None
    try:
        from cuda.core import Device
        try:
            from cuda.core import system
        except ImportError:
            system = None
    except ImportError:
        try:
            from cuda.core.experimental import Device, system
        except ImportError as exc:
            missing["cuda.core"] = f"not importable: {exc}"
            Device = system = None
    if Device is not None:
        dev = Device(0)
        dev.set_current()
        cs = dev.create_stream()
        ce = dev.create_event()
        cdone = cs.record()
        cs.sync()
        names.update(Device=Device, system=system, dev=dev, cs=cs, ce=ce,
                     cdone=cdone)
        try:
            cb1 = dev.allocate(1 << 20, stream=cs)
            cb2 = dev.allocate(1 << 20, stream=cs)
            cs.sync()
            names.update(cb1=cb1, cb2=cb2)
        except Exception as exc:  # the double may lack the pool calls
            missing["cuda.core memory"] = f"{type(exc).__name__}: {exc}"
    if drv is not None:
        names.update({n: getattr(drv, n) for n in dir(drv)
                      if n.startswith("cu")})
        ctx = drv.cuCtxGetCurrent()[1]
        names["ctx"] = ctx
        if "cs" in names:
            names.update(cs_h=names["cs"].handle, ce_h=names["ce"].handle,
                         cdone_h=names["cdone"].handle)
        for which in ("raw1", "raw2"):
            err, ptr = drv.cuMemAlloc(1 << 20)
            if err == drv.CUresult.CUDA_SUCCESS:
                names[which] = ptr
    return names, missing


def make_timer(names: dict[str, Any], stmt: str) -> timeit.Timer:
    setup = "; ".join(f"{n} = _names[{n!r}]" for n in names
                      if n.isidentifier() and n in stmt)
    return timeit.Timer(stmt, setup or "pass", globals={"_names": names})


def first_that_runs(names: dict[str, Any], candidates: list[str]
                    ) -> tuple[timeit.Timer | None, str]:
    """The timer of the first candidate that runs, or why none does."""
    errors = []
    for stmt in candidates:
        timer = make_timer(names, stmt)
        try:
            timer.timeit(2)
        except Exception as exc:
            errors.append(f"{stmt}: {type(exc).__name__}: {exc}"[:160])
            continue
        return timer, stmt
    return None, "; ".join(errors) or "no equivalent"


def calibrate(timer: timeit.Timer, target: float) -> int:
    n = 1
    while True:
        elapsed = timer.timeit(n)
        if elapsed >= target or n >= 1 << 24:
            return n
        grow = target / elapsed if elapsed > 0 else 10.0
        n = max(n + 1, int(n * min(grow * 1.1, 10.0)))


def time_rows(names: dict[str, Any],
              rows: list[tuple[str, list[list[str]]]], libs: tuple[str, ...],
              settle_stmt: str, target: float, repeats: int
              ) -> dict[str, Any]:
    """Time each row's statements, one candidate list per library (libs[0]
    is ours), interleaved in a random order per repeat, each net of the
    empty loop; with the medians of the per-repeat ratios ours/peer.
    settle_stmt runs between timings (to drain queued work)."""
    settle = make_timer(names, settle_stmt)
    loop = make_timer(names, "pass")
    loop_n = calibrate(loop, target)
    result: dict[str, Any] = {}
    plans: dict[str, dict[str, tuple[timeit.Timer, int]]] = {}
    for key, per_lib in rows:
        plan: dict[str, tuple[timeit.Timer, int]] = {}
        info: dict[str, Any] = {"stmt": {}, "why": {}}
        for lib, candidates in zip(libs, per_lib):
            timer, stmt = first_that_runs(names, candidates)
            settle.timeit(1)
            if timer is None:
                info["why"][lib] = stmt
                continue
            info["stmt"][lib] = stmt
            plan[lib] = (timer, calibrate(timer, target))
            settle.timeit(1)
        plans[key] = plan
        result[key] = info
    for key, plan in plans.items():
        samples: dict[str, list[float]] = {lib: [] for lib in plan}
        for _ in range(repeats):
            raw = {}
            for lib in random.sample(["loop", *plan], len(plan) + 1):
                timer, n = (loop, loop_n) if lib == "loop" else plan[lib]
                raw[lib] = timer.timeit(n) / n * 1e9
                settle.timeit(1)
            for lib in plan:
                samples[lib].append(raw[lib] - raw["loop"])
        result[key]["ns"] = {lib: statistics.median(v)
                             for lib, v in samples.items()}
        for peer in libs[1:]:
            if libs[0] in samples and peer in samples:
                ratios = [a / b for a, b in zip(samples[libs[0]],
                                                samples[peer]) if b > 0]
                result[key][f"ratio_{peer}"] = (statistics.median(ratios)
                                                if ratios else None)
    return result


def run_worker(target: float, repeats: int) -> dict[str, Any]:
    names, missing = worker_names()
    rows = time_rows(names, [(key, [[ours], core, raw])
                             for key, _label, ours, core, raw in ROWS],
                     LIBS, "synchronize()", target, repeats)
    import cuda.core
    return {"rows": rows, "missing": missing,
            "versions": {"cuda.core": getattr(cuda.core, "__version__", "?"),
                         "python": sys.version.split()[0]}}


# The orchestrator ---------------------------------------------------------


def imports(python: str, probe: str) -> bool:
    return subprocess.run([python, "-c", probe], capture_output=True
                          ).returncode == 0


def peer_python(venv: Path, install: bool, packages: list[str] = PEER_PACKAGES,
                probe: str = PEER_PROBE) -> tuple[str | None, str]:
    """An interpreter where probe (the peers' imports) runs, or None and
    why not: this one, else the venv, else the venv after pip installs
    packages into it."""
    what = probe.replace("import ", "")
    if imports(sys.executable, probe):
        return sys.executable, "this interpreter"
    python = venv / "bin" / "python"
    if python.exists() and imports(str(python), probe):
        return str(python), f"the venv {venv}"
    if not install:
        return None, f"{what} is not installed and --no-install was given"
    print(f"installing {' '.join(packages)} into a throwaway venv "
          f"({venv}) ...", flush=True)
    steps = [[sys.executable, "-m", "venv", "--system-site-packages",
              str(venv)],
             [str(python), "-m", "pip", "install", "-q",
              "--disable-pip-version-check", *packages]]
    for step in steps:
        try:
            proc = subprocess.run(step, capture_output=True, text=True,
                                  timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{' '.join(step[:4])} failed: {exc}"
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
            return None, (f"{' '.join(step[:4])} failed: "
                          + " | ".join(tail))
    if not imports(str(python), probe):
        return None, f"{what} installed but does not import"
    return str(python), f"the venv {venv} (just made)"


def child_env(double: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if double:
        env.update(ACCELERATOR_BACKEND="cuda", FAKE_CUDA_DEVICES="2",
                   ACCELERATOR_CUDA_LIBRARY=str(DOUBLES / "libcuda.so.1"))
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(DOUBLES), env.get("LD_LIBRARY_PATH")]))
    return env


def fmt(value: float | None, digits: int = 0, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{suffix}"


def markdown_table(headers: list[str], lines: list[list[str]]) -> str:
    """A Markdown table: the first column left-aligned, the rest right."""
    widths = [max(len(str(r[i])) for r in [headers, *lines])
              for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    sep = "|" + "|".join("-" * (w + 1) + ("-" if i == 0 else ":")
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in lines)])


def render(result: dict[str, Any]) -> str:
    headers = ["row", "accelerator ns", "cuda.core ns", "cuda.bindings ns",
               "ours/core", "ours/bindings", "<= 1.0x core?"]
    lines = []
    notes = []
    for key, label, *_ in ROWS:
        row = result["rows"][key]
        ns = row.get("ns", {})
        core = row.get("ratio_cuda.core")
        if core is None:
            verdict = "no peer"
        elif core <= 1.0:
            verdict = "yes"
        else:
            verdict = f"NO, {core - 1:+.0%} over"
        lines.append([label, fmt(ns.get("accelerator")),
                      fmt(ns.get("cuda.core")), fmt(ns.get("cuda.bindings")),
                      fmt(core, 2, "x"),
                      fmt(row.get("ratio_cuda.bindings"), 2, "x"), verdict])
        for lib, why in row["why"].items():
            notes.append(f"- {label}, {lib}: {why}")
    text = markdown_table(headers, lines)
    if notes:
        text += "\n\nNot measured (the statement tried, and why):\n" + \
            "\n".join(notes)
    return text


def show(args: argparse.Namespace, text: str, data: Any) -> None:
    """Print text, and write it to --markdown and data to --json."""
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n")


def parse_options(parser: argparse.ArgumentParser, peers: str,
                  **worker: Any) -> tuple[argparse.Namespace, float, int]:
    """The side-by-side scripts' options (parser may hold more), and the
    time per timing (s) and repeats they ask for.  worker: add_argument's
    keywords for --worker (the option that makes a process a worker)."""
    parser.add_argument("--double", action="store_true",
                        help="run on the CUDA driver double "
                        "(tests/drivers/build)")
    parser.add_argument("--quick", action="store_true",
                        help="2 ms per timing, 5 repeats")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                        help=f"where to install {peers} when missing")
    parser.add_argument("--no-install", action="store_true",
                        help=f"never install; skip when {peers} is missing")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    parser.add_argument("--json", type=Path, help="write all data here")
    parser.add_argument("--worker", help=argparse.SUPPRESS, **worker)
    parser.add_argument("--target-ms", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    target = args.target_ms or (2.0 if args.quick else 10.0)
    return args, target, args.repeats or (5 if args.quick else 15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args, target, repeats = parse_options(parser, "cuda.core",
                                          action="store_true")
    if args.worker:
        print(RESULT_TAG + json.dumps(run_worker(target / 1e3, repeats)))
        return 0
    if args.double and not (DOUBLES / "libcuda.so.1").exists():
        print("skipped: the CUDA double is not built (make -C tests/drivers)")
        return 0
    python, where = peer_python(args.venv, not args.no_install)
    if python is None:
        print(f"skipped: cuda.core is not available: {where}")
        return 0
    cmd = [python, str(Path(__file__).resolve()), "--worker",
           "--target-ms", str(target), "--repeats", str(repeats)]
    proc = subprocess.run(cmd, env=child_env(args.double), capture_output=True,
                          text=True, timeout=1800)
    result = None
    for out_line in reversed(proc.stdout.splitlines()):
        if out_line.startswith(RESULT_TAG):
            result = json.loads(out_line[len(RESULT_TAG):])
            break
    if result is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
        print("the worker failed:\n  " + "\n  ".join(tail))
        return 1
    head = (f"accelerator vs cuda.core {result['versions']['cuda.core']} vs "
            f"cuda.bindings, one process, interleaved (Python "
            f"{result['versions']['python']}, {os.cpu_count()} CPUs, "
            f"{'CUDA driver double' if args.double else 'real driver'}; "
            f"cuda.core from {where}); ns per call net of the empty loop, "
            f"medians of {repeats} repeats; ratios: medians of per-repeat "
            f"ratios")
    text = head + "\n\n" + render(result)
    if result["missing"]:
        text += "\n" + "\n".join(f"- {k}: {v}"
                                 for k, v in result["missing"].items())
    show(args, text, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
