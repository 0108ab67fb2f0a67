#!/usr/bin/env python3
"""Compile-and-load time of a kernel from source: accelerator beside
cuda.core and CuPy.

    python bench/bench_source.py [--double] [--quick] [--no-install]
                                 [--markdown OUT.md] [--json OUT.json]

The kernel is saxpy of tests/kernel_code.py's CUDA C++, compiled by NVRTC
for one target and loaded, then its function taken, by each library in
one worker process per target (PTX for compute_XY, a cubin for sm_XY,
XY the device's compute capability), interleaved in a random order per
repeat:

- accelerator, cold: ``Module(code, format="cuda-c++",
  options=["-arch=..."]).get_kernel("saxpy")`` with an empty compile
  cache (``ACCELERATOR_KERNEL_CACHE_DIR``, a fresh folder each time),
  once with the NVRTC of the default search and once with each NVRTC a
  peer loaded (``ACCELERATOR_NVRTC_LIBRARY``), so that each ratio compares
  the same compiler;
- accelerator, from the cache: the same call again, the entry on disk;
- cuda.core: ``Program(code, "c++", ProgramOptions(arch=...))
  .compile(target).get_kernel("saxpy")``, and from its
  ``FileStreamProgramCache`` (``compile(target, cache=...)``);
- CuPy: ``RawModule(code=code).get_function("saxpy")`` (its disk cache
  in a folder of the run: ``CUPY_CACHE_DIR``), cold and as a hit.

A cold compile gets source that no cache has seen (a comment with a
counter at its end).  Where a library's call fails (on the CUDA driver
double: cuda.core loads through cuLibraryLoadData, which the double
lacks; CuPy starts the CUDA runtime, which the double cannot serve) the
next candidate statement is timed, the compile alone, and the table says
which statement ran and why the first did not.  Figures are ms per call,
medians over the repeats; ratios are medians of per-repeat ratios.  No
budget: the two goals (ours cold at most each peer's time on the same
NVRTC; ours from the cache at least 10x faster than ours cold) are
judged in the lines under each table.  See bench/README.md.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_peers
from bench_peers import DOUBLES, REPO, RESULT_TAG, fmt, markdown_table

TARGETS = {"ptx": "compute", "cubin": "sm"}
PACKAGES = [*bench_peers.PEER_PACKAGES, "cupy-cuda12x",
            "nvidia-cuda-nvrtc-cu12"]
PROBE = "import cupy, cuda.core"
#: the goal for ours from the cache, as a speed-up over ours cold
HIT_SPEEDUP = 10.0


def kernel_source() -> str:
    sys.path.insert(0, str(REPO / "tests"))
    import kernel_code
    return kernel_code.CUDA_C


# The worker: every library in one process, one target ---------------------


def nvrtc_files() -> set[str]:
    """The libnvrtc files this process has mapped (real paths)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/libnvrtc" in line}
    return {os.path.realpath(p) for p in paths
            if p.startswith("/") and "builtins" not in p}


def nvrtc_version(path: str) -> str:
    lib = ctypes.CDLL(path)
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


class Cell:
    """One library's statement: candidates (text, make) where make()
    returns the callable that is timed once per repeat; the first that
    runs (a warm-up call) is the one timed."""

    def __init__(self, key: str, library: str, kind: str,
                 candidates: list[tuple[str, Callable[[], Callable[[], Any]]]],
                 calls: int = 1) -> None:
        self.key, self.library, self.kind = key, library, kind
        self.candidates, self.calls = candidates, calls
        self.stmt: str | None = None
        self.make: Callable[[], Callable[[], Any]] | None = None
        self.why: list[str] = []
        self.nvrtc: str | None = None

    def warm_up(self) -> None:
        for stmt, make in self.candidates:
            try:
                make()()
            except Exception as exc:
                self.why.append(f"{stmt}: {type(exc).__name__}: "
                                f"{str(exc).strip()}"[:240])
                continue
            self.stmt, self.make = stmt, make
            return

    def time_once(self) -> float:
        """ms per call of one timing (calls calls, each prepared first)."""
        assert self.make is not None
        total = 0.0
        for _ in range(self.calls):
            run = self.make()
            start = time.perf_counter()
            run()
            total += time.perf_counter() - start
        return total / self.calls * 1e3


class Sources:
    """Source no cache has seen: the kernel with a counter at its end."""

    def __init__(self) -> None:
        self.base = kernel_source()
        self.n = 0

    def fresh(self) -> str:
        self.n += 1
        return self.base + f"\n// cold compile {os.getpid()}-{self.n}\n"


class Env:
    """Set environment variables for one call (our compiler and cache
    are read from them at each Module())."""

    @staticmethod
    def put(**values: str | None) -> None:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def our_cells(target: str, arch: str, sources: Sources, root: Path,
              libraries: list[str | None], calls: int) -> list[Cell]:
    """accelerator's cold and hit cells, one pair per NVRTC (None: the
    default search, or what ACCELERATOR_NVRTC_LIBRARY named at start)."""
    import accelerator as A

    options = [f"-arch={arch}"]
    default = os.environ.get("ACCELERATOR_NVRTC_LIBRARY")
    stmt = (f'Module(code, format="cuda-c++", options={options!r})'
            '.get_kernel("saxpy")')
    cells = []
    folders = iter(range(1 << 30))
    hit_folder = root / "ours-hit"

    for i, library in enumerate(libraries):
        nvrtc = library if library is not None else default

        def cold(nvrtc: str | None = nvrtc) -> Callable[[], Any]:
            code = sources.fresh()
            folder = root / f"ours-cold-{next(folders)}"
            Env.put(ACCELERATOR_NVRTC_LIBRARY=nvrtc,
                    ACCELERATOR_KERNEL_CACHE_DIR=str(folder))
            return lambda: A.Module(code, format="cuda-c++",
                                    options=options).get_kernel("saxpy")

        def hit(nvrtc: str | None = nvrtc, i: int = i) -> Callable[[], Any]:
            Env.put(ACCELERATOR_NVRTC_LIBRARY=nvrtc,
                    ACCELERATOR_KERNEL_CACHE_DIR=str(hit_folder / str(i)))
            return lambda: A.Module(sources.base, format="cuda-c++",
                                    options=options).get_kernel("saxpy")

        key = "ours" if library is None else f"ours@{library}"
        cells.append(Cell(key, "accelerator", "cold",
                          [(stmt + ", an empty cache", cold)]))
        cells.append(Cell(key, "accelerator", "hit",
                          [(stmt + ", from the cache", hit)], calls))
    return cells


def core_cells(target: str, arch: str, sources: Sources, root: Path,
               calls: int) -> tuple[list[Cell], str]:
    """cuda.core's cells, and its version (or why it is missing)."""
    try:
        import cuda.core
        from cuda.core import Program, ProgramOptions
    except ImportError as exc:
        return [], f"not importable: {exc}"
    cache, no_cache = None, ""
    try:
        from cuda.core.utils import FileStreamProgramCache
        cache = FileStreamProgramCache(str(root / "core-cache"))
    except ImportError as exc:
        no_cache = f"no FileStreamProgramCache: {exc}"
    options = ProgramOptions(arch=arch)
    prog = f'Program(code, "c++", ProgramOptions(arch="{arch}"))'

    def cold(load: bool) -> Callable[[], Callable[[], Any]]:
        def make() -> Callable[[], Any]:
            code = sources.fresh()
            if load:
                return lambda: Program(code, "c++", options).compile(
                    target).get_kernel("saxpy")
            return lambda: Program(code, "c++", options).compile(target)
        return make

    def hit(load: bool) -> Callable[[], Callable[[], Any]]:
        def make() -> Callable[[], Any]:
            if cache is None:
                raise RuntimeError(no_cache)
            obj = (lambda: Program(sources.base, "c++", options).compile(
                target, cache=cache))
            if load:
                return lambda: obj().get_kernel("saxpy")
            return obj
        return make

    cells = [
        Cell("cuda.core", "cuda.core", "cold", [
            (f'{prog}.compile("{target}").get_kernel("saxpy")', cold(True)),
            (f'{prog}.compile("{target}") (the compile alone)',
             cold(False))]),
        Cell("cuda.core", "cuda.core", "hit", [
            (f'{prog}.compile("{target}", cache=FileStreamProgramCache(...))'
             '.get_kernel("saxpy")', hit(True)),
            (f'{prog}.compile("{target}", cache=FileStreamProgramCache(...))'
             ' (the lookup alone)', hit(False))], calls),
    ]
    return cells, getattr(cuda.core, "__version__", "?")


def cupy_cells(target: str, cc: str, sources: Sources, calls: int
               ) -> tuple[list[Cell], str]:
    """CuPy's cells, and its version (or why it is missing)."""
    try:
        import cupy
        from cupy.cuda import compiler
    except Exception as exc:   # ImportError, or a CUDA library missing
        return [], f"not importable: {type(exc).__name__}: {exc}"[:240]
    raw = 'RawModule(code=code).get_function("saxpy")'

    def module(fresh: bool) -> Callable[[], Callable[[], Any]]:
        def make() -> Callable[[], Any]:
            code = sources.fresh() if fresh else sources.base
            return lambda: cupy.RawModule(code=code).get_function("saxpy")
        return make

    def compile_only() -> Callable[[], Any]:
        # CuPy asks the CUDA runtime for the device's architecture (the
        # runtime cannot start on the double): answered here, as the
        # target of this worker, so that CuPy's own compile runs.
        compiler._get_arch_for_options_for_nvrtc = (
            lambda arch=None: (f"-arch={TARGETS[target]}_{arch}", target))
        code = sources.fresh()
        return lambda: compiler.compile_using_nvrtc(code, arch=cc)

    return [
        Cell("CuPy", "CuPy", "cold", [
            (raw + " (an empty cache)", module(True)),
            ("cupy.cuda.compiler.compile_using_nvrtc(code, arch=...) (the "
             "compile alone; its device query answered by hand)",
             compile_only)]),
        Cell("CuPy", "CuPy", "hit", [
            (raw + " (from its disk cache)", module(False))], calls),
    ], cupy.__version__


def run_worker(target: str, repeats: int, calls: int) -> dict[str, Any]:
    import accelerator as A
    from accelerator import _source

    if not A.is_available():
        raise SystemExit("no accelerator: " + "; ".join(
            f"{b['name']}: {b['reason']}" for b in A.backends()))
    props = A.get_device_properties(0)
    cc = f"{props.major}{props.minor}"
    arch = f"{TARGETS[target]}_{cc}"
    sources = Sources()
    root = Path(tempfile.mkdtemp(prefix="bench-source-"))
    env_before = {k: os.environ.get(k) for k in (
        "ACCELERATOR_NVRTC_LIBRARY", "ACCELERATOR_KERNEL_CACHE_DIR")}
    versions: dict[str, str] = {"python": sys.version.split()[0]}
    missing: dict[str, str] = {}
    # The peers first, so that the NVRTC each maps is told apart.
    peers: list[Cell] = []
    for name, (cells, version) in (
            ("cuda.core", core_cells(target, arch, sources, root, calls)),
            ("CuPy", cupy_cells(target, cc, sources, calls))):
        if not cells:
            missing[name] = version
            continue
        versions[name] = version
        before = nvrtc_files()
        for cell in cells:
            cell.warm_up()
        new = nvrtc_files() - before
        found = new or nvrtc_files()
        for cell in cells:
            cell.nvrtc = next(iter(found)) if len(found) == 1 else None
        peers += cells
    library, ident = _source._compiler_for("cuda-c++", 0)
    ours_default = os.path.realpath(library) if os.path.exists(
        library) else None          # a name the loader finds: below
    others = sorted({c.nvrtc for c in peers
                     if c.nvrtc and c.nvrtc != ours_default})
    ours = our_cells(target, arch, sources, root, [None, *others], calls)
    before = nvrtc_files()
    for cell in ours:
        cell.warm_up()
        cell.nvrtc = cell.key.partition("@")[2] or None
    if ours_default is None and len(nvrtc_files() - before) == 1:
        ours_default = next(iter(nvrtc_files() - before))
    for cell in ours:
        cell.nvrtc = cell.nvrtc or ours_default
    Env.put(**env_before)
    cells = ours + peers
    samples: dict[tuple[str, str], list[float]] = {
        (c.key, c.kind): [] for c in cells if c.make is not None}
    for _ in range(repeats):
        for cell in random.sample(cells, len(cells)):
            if cell.make is not None:
                samples[cell.key, cell.kind].append(cell.time_once())
        Env.put(**env_before)
    nvrtcs = {c.nvrtc for c in cells if c.nvrtc}
    return {
        "target": target, "arch": arch, "device": props.name,
        "ours_compiler": ident, "versions": versions, "missing": missing,
        "nvrtc": {p: nvrtc_version(p) for p in nvrtcs},
        "cells": [{"key": c.key, "library": c.library, "kind": c.kind,
                   "stmt": c.stmt, "why": c.why, "nvrtc": c.nvrtc,
                   "ms": samples.get((c.key, c.kind))} for c in cells],
    }


# The orchestrator -----------------------------------------------------------


def median_ratio(a: list[float] | None, b: list[float] | None
                 ) -> float | None:
    if not a or not b:
        return None
    ratios = [x / y for x, y in zip(a, b) if y > 0]
    return statistics.median(ratios) if ratios else None


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Per library and NVRTC: cold and hit medians, the hit's speed-up,
    ours over it on the same NVRTC; and the two goals judged."""
    cells = {(c["key"], c["kind"]): c for c in result["cells"]}
    keys = list(dict.fromkeys(c["key"] for c in result["cells"]))
    ours_on = {cells[k, "cold"]["nvrtc"]: k for k in keys
               if k.startswith("ours")}
    rows, goals = [], []
    for key in keys:
        cold, hit = cells[key, "cold"], cells.get((key, "hit"), {})
        row: dict[str, Any] = {
            "key": key, "library": cold["library"], "nvrtc": cold["nvrtc"],
            "cold": statistics.median(cold["ms"]) if cold["ms"] else None,
            "hit": statistics.median(hit["ms"]) if hit.get("ms") else None,
            "speedup": median_ratio(cold["ms"], hit.get("ms")),
            "cold_stmt": cold["stmt"], "hit_stmt": hit.get("stmt"),
            "why": [f"cold: {w}" for w in cold["why"]]
            + [f"from the cache: {w}" for w in hit.get("why", [])]}
        mine = ours_on.get(cold["nvrtc"], "ours")
        if not key.startswith("ours"):
            row["ours_key"] = mine
            row["ours_cold"] = median_ratio(cells[mine, "cold"]["ms"],
                                            cold["ms"])
            row["ours_hit"] = median_ratio(cells[mine, "hit"]["ms"],
                                           hit.get("ms"))
            row["same_nvrtc"] = cold["nvrtc"] is not None and (
                cells[mine, "cold"]["nvrtc"] == cold["nvrtc"])
            ratio = row["ours_cold"]
            what = ("its compile alone" if "alone" in (cold["stmt"] or "")
                    else "its compile and load")
            goals.append(
                f"ours cold (compile and load) at most {cold['library']}'s "
                f"({what}"
                + ("" if row["same_nvrtc"] else ", NOT the same NVRTC")
                + "): " + ("not measured" if ratio is None else
                           f"{ratio:.2f}x, " + ("yes" if ratio <= 1.0 else
                                                f"NO, {ratio - 1:+.0%} over")))
        elif row["speedup"] is not None or cold["ms"]:
            s = row["speedup"]
            goals.append(
                f"ours from the cache at least {HIT_SPEEDUP:.0f}x faster "
                f"than ours cold ({key_label(key, result)}): "
                + ("not measured" if s is None else
                   f"{s:.1f}x, " + ("yes" if s >= HIT_SPEEDUP else "NO")))
        rows.append(row)
    return {"rows": rows, "goals": goals}


def key_label(key: str, result: dict[str, Any]) -> str:
    nvrtc = next(c["nvrtc"] for c in result["cells"] if c["key"] == key)
    version = result["nvrtc"].get(nvrtc or "", "?")
    return f"NVRTC {version}" if nvrtc else "NVRTC ?"


def render(result: dict[str, Any], summary: dict[str, Any]) -> str:
    headers = ["library", "NVRTC", "cold ms", "from the cache ms",
               "cache speed-up", "ours/this cold", "ours/this cached"]
    lines, notes = [], []
    for row in summary["rows"]:
        lib = row["library"]
        version = result["versions"].get(lib, "")
        nvrtc = row["nvrtc"]
        where = (f"{result['nvrtc'].get(nvrtc, '?')}, "
                 f"{nvrtc.partition('site-packages/')[2] or nvrtc}"
                 if nvrtc else "? (not told apart)")
        lines.append([f"{lib} {version}".strip(), where,
                      fmt(row["cold"], 2), fmt(row["hit"], 3),
                      fmt(row["speedup"], 1, "x"),
                      "-" if row["key"].startswith("ours")
                      else fmt(row["ours_cold"], 2, "x"),
                      "-" if row["key"].startswith("ours")
                      else fmt(row["ours_hit"], 2, "x")])
        for kind, said in (("cold", "cold"), ("hit", "from the cache")):
            stmt = row[f"{kind}_stmt"]
            if stmt and row["key"] in ("ours", "cuda.core", "CuPy"):
                notes.append(f"- {lib}, {said}: timed {stmt}")
        notes += [f"- {lib}, {w}" for w in row["why"]]
    notes += [f"- {lib}: {why}" for lib, why in result["missing"].items()]
    notes = list(dict.fromkeys(notes))
    text = markdown_table(headers, lines)
    text += "\n\nGoals:\n" + "\n".join(f"- {g}" for g in summary["goals"])
    if notes:
        text += "\n\nStatements (and why a first candidate did not run):\n" \
            + "\n".join(notes)
    return text


def worker_env(double: bool, target: str, cupy_cache: str) -> dict[str, str]:
    env = bench_peers.child_env(double)
    if double:
        env["FAKE_CUDA_DEVICES"] = "1"
    env["CUPY_CACHE_DIR"] = cupy_cache
    # CuPy compiles a cubin for the device where NVRTC can, else PTX;
    # this makes it PTX, the target of the ptx worker.
    env.pop("CUPY_COMPILE_WITH_PTX", None)
    if target == "ptx":
        env["CUPY_COMPILE_WITH_PTX"] = "1"
    return env


def run_target(target: str, python: str, args: argparse.Namespace,
               repeats: int, calls: int) -> tuple[str, dict[str, Any] | None]:
    with tempfile.TemporaryDirectory(prefix="bench-source-cupy-") as cupy:
        cmd = [python, str(Path(__file__).resolve()), "--worker", target,
               "--repeats", str(repeats), "--calls", str(calls)]
        proc = subprocess.run(cmd, env=worker_env(args.double, target, cupy),
                              capture_output=True, text=True, timeout=1800)
    for out_line in reversed(proc.stdout.splitlines()):
        if out_line.startswith(RESULT_TAG):
            return "", json.loads(out_line[len(RESULT_TAG):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
    return (f"{target}: the worker failed (exit {proc.returncode}):\n  "
            + "\n  ".join(tail)), None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(TARGETS),
                        help="one target (default: both)")
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    args, _target, repeats = bench_peers.parse_options(
        parser, "cuda.core or CuPy", choices=sorted(TARGETS))
    repeats = args.repeats or (5 if args.quick else 11)
    calls = args.calls or (3 if args.quick else 5)
    if args.worker:
        print(RESULT_TAG + json.dumps(run_worker(args.worker, repeats,
                                                 calls)))
        return 0
    if args.double and not (DOUBLES / "libcuda.so.1").exists():
        print("skipped: the CUDA double is not built (make -C tests/drivers)")
        return 0
    python, where = bench_peers.peer_python(
        args.venv, not args.no_install, PACKAGES, PROBE)
    if python is None:   # the peers this interpreter has, and why not more
        python, where = sys.executable, f"this interpreter ({where})"
    texts, data, failed = [], {}, False
    for target in [args.only] if args.only else list(TARGETS):
        error, result = run_target(target, python, args, repeats, calls)
        if result is None:
            failed = True
            texts.append(error)
            continue
        summary = summarize(result)
        data[target] = {**result, "summary": summary}
        driver = "the CUDA driver double" if args.double else "the real driver"
        head = (f"{target} for {result['arch']}: saxpy compiled from CUDA C++ "
                f"and loaded on {result['device']} ({driver}); peers from "
                f"{where}; Python {result['versions']['python']}, "
                f"{os.cpu_count()} CPUs; ms per call, medians of {repeats} "
                f"repeats (from the cache: {calls} calls each); ratios: "
                "medians of per-repeat ratios, ours on the same NVRTC")
        texts.append(head + "\n\n" + render(result, summary))
    text = "\n\n".join(texts)
    bench_peers.show(args, text, data)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
