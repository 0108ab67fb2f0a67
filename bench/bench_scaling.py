#!/usr/bin/env python3
"""How the per-call cost grows with work, on the CUDA driver double.

    python bench/bench_scaling.py [--quick] [--callgrind] [--markdown OUT.md]

Each configuration runs in its own process: 1, 10^3, 10^4 and 10^5 live
(recorded) events; 1, 10^2 and 10^3 live streams (the double runs a thread
per stream, so 10^4 and more are out of reach on a small machine); 1 and
64 live threads (parked on an event); 2, 8 and 64 devices.  Each times a few
hot calls on one stream and event of device 0, which should cost the same
whatever the configuration: our calls are O(1) in live objects, and so is
every double call they make (handles are looked up in hash sets).  ns per
call: the median of the repeats (each about 10 ms), net of the empty loop.
``--callgrind`` counts instructions per call of the calling thread instead
(valgrind; the same every run, so flatness shows on a noisy machine too).
See bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import timeit
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOUBLE = REPO / "tests" / "drivers" / "build" / "libcuda.so.1"
TAG = "SCALING_JSON "
CG_SIZES = (200, 1200)
CALLS = {
    "Event.record(s)": "e.record(s)",
    "Event.query()": "done.query()",
    "Stream.query()": "s.query()",
    "current_stream()": "current_stream()",
    "with s:": "with s:\n    pass",
}
CONFIGS: list[tuple[str, dict[str, str], dict[str, int]]] = [
    ("baseline (1 event, 1 stream, 1 thread, 2 devices)", {}, {}),
    ("10^3 live events", {}, {"events": 10**3}),
    ("10^4 live events", {}, {"events": 10**4}),
    ("10^5 live events", {}, {"events": 10**5}),
    ("10^2 live streams", {}, {"streams": 10**2}),
    ("10^3 live streams", {}, {"streams": 10**3}),
    ("64 live threads", {}, {"threads": 64}),
    ("8 devices", {"FAKE_CUDA_DEVICES": "8"}, {}),
    ("64 devices", {"FAKE_CUDA_DEVICES": "64"}, {}),
]


def worker(events: int, streams: int, threads: int, target: float,
           repeats: int, marker: str | None) -> dict[str, Any]:
    import accelerator as A

    s = A.Stream()
    keep_streams = [A.Stream() for _ in range(streams)]
    keep_events = []
    for _ in range(events):
        ev = A.Event()
        ev.record(s)
        keep_events.append(ev)
    done = A.Event()
    done.record(s)
    s.synchronize()
    gate = threading.Event()
    parked = [threading.Thread(target=gate.wait, daemon=True)
              for _ in range(threads)]
    for t in parked:
        t.start()
    names = dict(s=s, e=A.Event(), done=done,
                 current_stream=A.current_stream)
    setup = "; ".join(f"{n} = _n[{n!r}]" for n in names)
    loop = timeit.Timer("pass", setup, globals={"_n": names})
    out: dict[str, Any] = {"threads": threading.active_count(),
                           "devices": A.device_count()}
    if marker is not None:
        import ctypes

        mark = ctypes.CDLL(marker).cg_mark
        mark.argtypes = [ctypes.c_char_p]
        for label, stmt in {"loop": "pass", **CALLS}.items():
            timer = timeit.Timer(stmt, setup, globals={"_n": names})
            for n in CG_SIZES:
                s.synchronize()
                mark(b"pre")
                timer.timeit(n)
                mark(f"{label}:{n}".encode())
        s.synchronize()
        repeats = 0
    for label, stmt in CALLS.items() if repeats else ():
        timer = timeit.Timer(stmt, setup, globals={"_n": names})
        n = 1
        while timer.timeit(n) < target and n < 1 << 22:
            n *= 4
        samples = []
        for _ in range(repeats):
            base = loop.timeit(n) / n
            samples.append((timer.timeit(n) / n - base) * 1e9)
            s.synchronize()
        out[label] = statistics.median(samples)
    gate.set()
    for t in parked:
        t.join()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--callgrind", action="store_true",
                        help="instructions per call (valgrind) instead of ns")
    parser.add_argument("--only", help="the configurations whose label "
                        "contains this text")
    parser.add_argument("--marker", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    target, repeats = (0.002, 5) if args.quick else (0.01, 11)
    if args.worker:
        spec = json.loads(args.worker)
        print(TAG + json.dumps(worker(spec.get("events", 0),
                                      spec.get("streams", 0),
                                      spec.get("threads", 0), target,
                                      repeats, args.marker)))
        return 0
    if not DOUBLE.exists():
        print("skipped: the CUDA double is not built (make -C tests/drivers)")
        return 0
    sys.path.insert(0, str(REPO / "bench"))
    import bench_api

    tmp = Path(tempfile.mkdtemp(prefix="bench_scaling."))
    prefix: list[str] = []
    marker = None
    if args.callgrind:
        marker = bench_api.build_c(tmp, "callgrind_mark.c",
                                   "callgrind_mark.so", "-shared", "-fPIC")
        if marker is None or shutil.which("valgrind") is None:
            print("skipped: --callgrind needs valgrind and "
                  "valgrind/callgrind.h")
            return 0
    rows = []
    for number, (label, extra_env, spec) in enumerate(CONFIGS):
        if args.only and args.only not in label:
            continue
        env = dict(os.environ, ACCELERATOR_BACKEND="cuda",
                   ACCELERATOR_CUDA_LIBRARY=str(DOUBLE),
                   FAKE_CUDA_DEVICES="2")
        env.update(extra_env)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO), env.get("PYTHONPATH")]))
        cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
        if args.quick:
            cmd.append("--quick")
        if marker is not None:
            prefix = ["valgrind", "--tool=callgrind", "--dump-instr=no",
                      "--separate-threads=yes", "--max-threads=2000",
                      f"--callgrind-out-file={tmp}/c{number}.%p"]
            cmd = [*prefix, *cmd, "--marker", str(marker)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=900)
        result = next((json.loads(line[len(TAG):]) for line in
                       proc.stdout.splitlines() if line.startswith(TAG)),
                      None)
        if result is None:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            rows.append([label] + ["failed: " + " | ".join(tail)]
                        + [""] * (len(CALLS) - 1))
        elif marker is not None:
            parts = bench_api.parse_callgrind(tmp, f"c{number}")
            loop = bench_api.per_call(parts, "loop", CG_SIZES) or 0.0
            cells = []
            for c in CALLS:
                ir = bench_api.per_call(parts, c, CG_SIZES)
                cells.append("-" if ir is None else f"{ir - loop:,.0f}")
            rows.append([label, *cells])
        else:
            rows.append([label] + [f"{result[c]:,.0f}" for c in CALLS])
        print(" | ".join(rows[-1]), flush=True)
    unit = "Ir" if marker is not None else "ns"
    headers = [f"configuration ({unit} per call)", *CALLS]
    widths = [max(len(r[i]) for r in [headers, *rows])
              for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths)))
             + " |" for r in [headers, *rows]]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ("-" if i == 0 else ":")
                                   for i, w in enumerate(widths)) + "|")
    text = "\n".join(lines)
    print("\n" + text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
