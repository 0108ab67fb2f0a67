"""The test command's stages: run them all, two at a time, and sum up.

    python3 tests/stages.py [--jobs N] [--only NAME[,NAME...]] [--list]
                            [--enforce-budgets] [--plan FILE.json]
                            [-- extra pytest arguments]

``tests/run.sh`` and ``.ci/run`` call this; it uses the standard library
only, so it runs before anything is installed.  A stage is one command:
setting up the machine, a build, or one configuration of the suite (a
backend, a loader mode, an allocator mode, a build kind).  Stages run even
when an earlier one failed, except those that need a build that failed
(they are reported as not run, and count as failed).  The output of each
stage goes to its own log under ``build/test-runs/<time>/``; a line is
printed as each stage starts and ends, the tail of each failed stage's log
at the end, then one table (stage, passed, failed, skipped, seconds,
budget; a command without test counts shows ``ok`` or its exit status
instead of counts) and a closing line ``total: N passed, N failed, N
skipped`` (a failed stage without counts is one failed).  The
exit status is 1 when any stage failed, 0 otherwise.

Each stage has a budget, two to three times what it takes on a quiet 2-core
machine.  A stage past its budget is marked in the table; with
``--enforce-budgets`` (``.ci/run``) that fails the run, with a message
naming the stage, so that a change which doubles a stage is seen when it is
made.  A stage past four times its budget is stopped.

``--plan FILE.json`` replaces the built-in stages (tests of this script):
a list of objects with the fields of ``Stage``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

REPO = pathlib.Path(__file__).resolve().parents[1]
#: a stage that has not ended after this many times its budget is stopped
HARD_LIMIT = 4


@dataclass
class Stage:
    """One command of the test command."""

    name: str
    #: the command; a pytest stage's command is the arguments after
    #: ``python -m pytest`` (junit report, base temp folder and the extra
    #: arguments are added)
    cmd: list[str]
    #: seconds it may take on a quiet 2-core machine, two to three times its
    #: usual time
    budget: float
    #: "pytest" (counts come from its junit report) or "cmd"
    kind: str = "pytest"
    #: added to the environment
    env: dict[str, str] = field(default_factory=dict)
    #: the folder it runs in, relative to the repository
    cwd: str = "."
    #: stages that must have passed first (builds); otherwise not run
    needs: list[str] = field(default_factory=list)
    #: stages that must have ended first, passed or not
    after: list[str] = field(default_factory=list)
    #: runs alone, before every stage that is not "serial" (setup)
    serial: bool = False
    #: a folder of sanitizer logs: any file there fails the stage
    sanitizer_logs: bool = False
    #: what it checks, for --list
    doc: str = ""


@dataclass
class Result:
    stage: Stage
    #: pending, running, passed, failed, timed out, not run
    status: str = "pending"
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    note: str = ""
    log: pathlib.Path | None = None
    #: the command's exit status, once it ended
    rc: int | None = None
    #: passed, failed and skipped are test counts (a pytest stage, or a
    #: command whose log ends with pytest's closing line); a command
    #: without counts is shown by its exit status instead
    counted: bool = True

    @property
    def ok(self) -> bool:
        return self.status == "passed"

    def outcome(self) -> str:
        """The counts, or for a command without counts, "ok" or its exit
        status."""
        if self.counted:
            return f"{self.passed} passed, {self.failed} failed, " \
                f"{self.skipped} skipped"
        if self.rc == 0:
            return "ok"
        if self.rc is None:
            return "-"
        return f"signal {-self.rc}" if self.rc < 0 else f"exit {self.rc}"


# -- the built-in plan --------------------------------------------------------

INSTRUMENTED = "build/instrumented"


def instrumented_env(logs: pathlib.Path) -> dict[str, str]:
    """The environment of a stage on the instrumented build."""
    cc = os.environ.get("CC", "cc")
    runtime = subprocess.run([cc, "-print-file-name=libasan.so"],
                             capture_output=True, text=True).stdout.strip()
    preload = os.environ.get("LD_PRELOAD")
    return {
        "LD_PRELOAD": runtime + (f":{preload}" if preload else ""),
        # use_sigaltstack=0: ASan unmaps each thread's alternate signal
        # stack when the thread exits, but PoCL's LLVM (and CPython's
        # faulthandler) replace it with a malloc'd one, and the unmap then
        # fails in a process that did nothing wrong.  Every memory check
        # stays on.  Leak detection is off: CPython keeps memory until
        # exit on purpose.
        "ASAN_OPTIONS": ("detect_leaks=0:halt_on_error=1:abort_on_error=1:"
                         f"use_sigaltstack=0:log_path={logs}/asan:"
                         "log_exe_name=1"),
        "UBSAN_OPTIONS": ("halt_on_error=1:print_stacktrace=1:"
                          f"log_path={logs}/ubsan:log_exe_name=1"),
        # Python objects from malloc, so that ASan sees them.
        "PYTHONMALLOC": "malloc",
        # Instrumented code runs slower: the fuzzer gets its minimum.
        "FUZZ_EXAMPLES": "50",
    }


#: seconds one test may take before it counts as hung (the slowest takes
#: under a minute on the instrumented build of a loaded 2-core machine);
#: ACCELERATOR_TEST_TIMEOUT overrides it
TEST_TIMEOUT = 300


def hang_guard() -> list[str]:
    """pytest arguments that end a hung test's process after TEST_TIMEOUT,
    printing every thread's stack (the thread method: a test blocked in
    a driver wait holds no signal handler's attention), so that the stage
    fails at once with the place it hung instead of at 4x its budget.
    Empty where pytest-timeout is not installed (setup installs it)."""
    if importlib.util.find_spec("pytest_timeout") is None:
        return []
    seconds = os.environ.get("ACCELERATOR_TEST_TIMEOUT", str(TEST_TIMEOUT))
    return [f"--timeout={seconds}", "--timeout-method=thread"]


#: the test files that run only in the plain stage (uninstrumented):
#: instruction counts, the GPU check's dry run and the README's commands
#: from a fresh clone (they need the plain build), the installed pytest
#: plugin and its xdist support, the benchmarks' own checks (pyopencl and
#: cuda.core cannot run under the preloaded ASan runtime), the test
#: command's own tests (Python alone), and fork() while threads allocate:
#: the allocator of GCC 12's ASan runtime takes no lock across fork, so a
#: child forked while another thread is inside malloc blocks for ever on
#: the allocator's region mutex at its first malloc (3 hangs in about 400
#: runs of that test's script under the instrumented build, its child's
#: stack in __sanitizer::SizeClassAllocator64::GetFromAllocator; none in
#: 735 runs uninstrumented), which glibc's malloc does not
PLAIN_ONLY = ("test_callgrind_gate", "test_gpu_check", "test_first_command",
              "test_pytest_plugin", "test_pytest_xdist", "test_bench_check",
              "test_test_command", "test_allocator_fork")

#: the test files outside tests/behaviour that run in the hip stage, not
#: in cuda-around: the HIP double's own interprocess checks
HIP_ONLY = ("test_ipc_hip_double",)
#: the test files outside tests/behaviour that the xpu stage runs rather
#: than cuda-around: the Level Zero test driver at its own ABI between
#: two processes (both loader modes, each test in fresh processes)
XPU_ALSO = ("test_ipc_ze_driver",)

#: the CPythons besides the build's that the wheel's behaviour suite runs
#: under (tests/check_wheel.sh finds them on PATH or under pyenv)
WHEEL_PYTHONS = ("3.12", "3.13")


def builtin_plan(run_dir: pathlib.Path) -> list[Stage]:
    """Every stage of the test command, in the order they are started."""
    py = sys.executable
    stages = [
        Stage("setup", ["bash", "tests/install.sh"], 600, kind="cmd",
              serial=True,
              doc="Debian packages (one apt-get update and install of what "
                  "is missing) and the Python packages, when root"),
        Stage("build", ["bash", "tests/build.sh", "plain"], 90, kind="cmd",
              after=["setup"],
              doc="the doubles and the extension in place, warnings as "
                  "errors; an editable install of this checkout"),
        Stage("build-instrumented",
              ["bash", "tests/build.sh", "instrumented", INSTRUMENTED], 90,
              kind="cmd", after=["setup"],
              doc="a private copy built with AddressSanitizer, "
                  "UndefinedBehaviorSanitizer and coverage together"),
    ]

    def inst(name: str, doc: str, args: list[str],
             env: dict[str, str] | None = None, budget: float = 120) -> None:
        logs = run_dir / "sanitizer" / name
        stages.append(Stage(
            name, args, budget, env={**instrumented_env(logs), **(env or {})},
            cwd=INSTRUMENTED, needs=["build-instrumented"],
            sanitizer_logs=True, doc=doc))

    behaviour = ["tests/behaviour"]
    # Without caching: the memory tests, and graphs, whose caches the
    # direct allocator does not keep.
    memory = ["tests/behaviour/test_memory.py",
              "tests/behaviour/test_allocator.py",
              "tests/behaviour/test_graphs.py"]
    direct = {"ACCELERATOR_ALLOCATOR": "direct"}
    xpu = {"ACCELERATOR_TEST_BACKEND": "xpu"}
    intercept = {**xpu, "ZE_ENABLE_LOADER_INTERCEPT": "1"}
    opencl = {"ACCELERATOR_TEST_BACKEND": "opencl"}
    hip = {"ACCELERATOR_TEST_BACKEND": "hip"}
    # The CUDA double's suite in two halves, so the two lanes end closer
    # together: the behaviour suite, and the tests of configurations,
    # processes, headers and tools around it.
    # Budgets of the suites below from a fresh-clone run of issue 30
    # (quiet 2-core machine, two lanes): cuda 78 s, cuda-around 223, xpu
    # 72, opencl 71, hip 84, plain 131; the same run with other work on
    # the machine took two to three times as long (cuda 215, cuda-around
    # 473), so each budget is about three times the quiet figure.
    inst("cuda", "the behaviour suite on the CUDA double", behaviour,
         budget=240)
    # The benchmarks' checks run in the plain stage, where their peers can
    # load.  So do the pytest plugin's and its xdist support's tests (over
    # 40% of this stage: an inner pytest in a fresh process each) and the
    # kernel page's type check (mypy): Python whose C paths (probing,
    # counting, visible devices) the configuration and behaviour tests
    # here drive under the sanitizers; the plain stage runs them from the
    # installed package, as a user's pytest loads the plugin.  So do the
    # tests of the test command (tests/stages.py, Python alone: under the
    # sanitizers they cost four times as much and check nothing more).
    inst("cuda-around", "the rest of the suite on the CUDA double: "
         "configurations, fork, processes, exit, headers, the docs' "
         "examples", ["tests", "--ignore=tests/behaviour",
                      *(f"--ignore=tests/{name}.py"
                        for name in PLAIN_ONLY + HIP_ONLY + XPU_ALSO),
                      "--deselect=tests/test_docs.py::"
                      "test_kernels_page_examples_type_check"], budget=480)
    inst("xpu", "the behaviour suite on Level Zero (real loader, direct "
         "mode), and the test driver's interprocess sharing",
         [*behaviour, *(f"tests/{name}.py" for name in XPU_ALSO)], xpu,
         budget=240)
    # The loader's modes change what lies between the backend and the
    # driver, so each runs what that can change, not the suite again:
    #  - intercept: the loader wraps every handle the driver returns in an
    #    object of its own and unwraps it on the way back, answers the
    #    driver and device enumeration itself, and turns a NULL table
    #    entry into ZE_RESULT_ERROR_UNINITIALIZED (direct mode:
    #    UNSUPPORTED_FEATURE).  Every test that passes handles runs;
    #    left out are the tests whose checks happen below the loader,
    #    where both modes make the same calls: the fault injections after
    #    initialisation (test_raise, test_fresh, test_silent: the double
    #    fails a call and the loader forwards its code unchanged; the
    #    probe's faults, in zeInit and the enumeration the loader answers
    #    itself, still run, with the optional entry points), the leak
    #    loops (the double counts its live objects, the loader frees its
    #    wrapper with each), and the fuzz, which xpu-two-drivers-fuzz runs
    #    in intercept mode already (two drivers force it).
    #  - validation: the layer checks each call's parameters before the
    #    driver sees them (NULL handles and pointers, flags and enums out
    #    of range, a count without its array), so every path that makes
    #    a call runs, the fuzz's unusual states included.  Left out are
    #    the leak loops, which repeat calls the rest of the suite makes
    #    with the same parameters, and the same fault injections: the
    #    calls an error path makes differ from the normal path's only in
    #    the handles they pass, and a NULL or stale handle fails every
    #    mode already (the double looks up each handle, and its detector
    #    fails the test), while their flags are those of the normal path.
    below_the_loader = [
        "--ignore=tests/behaviour/test_leaks.py",
        *(f"--deselect=tests/behaviour/test_faults.py::{name}"
          for name in ("test_raise", "test_fresh", "test_silent"))]
    inst("xpu-intercept", "what the loader's intercept mode can change "
         "(handles wrapped, enumeration, missing entries) on Level Zero: "
         "the behaviour suite without the faults below the loader, the "
         "leak loops and the fuzz",
         [*behaviour, "--ignore=tests/behaviour/test_fuzz.py",
          *below_the_loader], intercept, budget=90)
    inst("xpu-validation", "what the loader's validation layer can change "
         "on Level Zero: the behaviour suite without the faults below the "
         "loader and the leak loops", [*behaviour, *below_the_loader],
         {**xpu, "ZE_ENABLE_VALIDATION_LAYER": "1",
          "ZE_ENABLE_PARAMETER_VALIDATION": "1"}, budget=150)
    # Events cannot cross drivers: waits between devices of two drivers go
    # through the backend's bridge.  Copies between them are not supported,
    # so the memory tests stay on one driver.
    inst("xpu-two-drivers", "streams, events and their faults with one "
         "Level Zero device on each of two drivers",
         ["tests/behaviour/test_events.py", "tests/behaviour/test_streams.py",
          "tests/behaviour/test_leaks.py", "tests/behaviour/test_faults.py",
          "-k", "across or wait or record or query or events or streams"],
         {**intercept, "FAKE_ZE_DRIVERS": "2"}, budget=90)
    inst("xpu-two-drivers-fuzz", "the stateful fuzz of the whole API with "
         "one Level Zero device on each of two drivers",
         ["tests/behaviour/test_fuzz.py"],
         {**intercept, "FAKE_ZE_DRIVERS": "2"}, budget=90)
    inst("opencl", "the behaviour suite on OpenCL (PoCL, two CPU devices)",
         behaviour, opencl, budget=240)
    inst("hip", "the behaviour suite on the HIP runtime double, and its "
         "interprocess memory and events between two processes",
         [*behaviour, *(f"tests/{name}.py" for name in HIP_ONLY)], hip,
         budget=260)
    inst("hip-direct", "the memory tests without caching on HIP", memory,
         {**hip, **direct}, budget=90)
    inst("cuda-direct", "the memory tests without caching on CUDA",
         memory, direct, budget=90)
    inst("opencl-direct", "the memory tests without caching on OpenCL",
         memory, {**opencl, **direct}, budget=90)
    timing = ["tests/behaviour/test_threads.py",
              "tests/behaviour/test_event_race.py",
              "tests/behaviour/test_asyncio.py"]
    stages += [
        Stage("plain", [
            # What is worth running uninstrumented: instruction counts,
            # the GPU check's dry run and the README's commands from a
            # fresh clone (both need the plain build), the installed
            # plugin, and the tests whose value is in real timing.
            # The processes and the docs' examples run under the
            # sanitizers in cuda-around, with the same checks.
            *(f"tests/{name}.py" for name in PLAIN_ONLY),
            "tests/test_docs.py::test_kernels_page_examples_type_check",
            # The coverage build's libgcov exports symbols of its own.
            "tests/test_isolation.py::"
            "test_the_extension_exports_only_its_init_function",
            *timing],
            450, needs=["build"],
            doc="the uninstrumented build in place on the CUDA double: "
                "timing, instruction counts, first commands, the plugin"),
        Stage("plain-xpu", timing, 90, env=xpu, needs=["build"],
              doc="the timing-sensitive behaviour tests uninstrumented on "
                  "Level Zero"),
        Stage("plain-opencl", timing, 90, env=opencl, needs=["build"],
              doc="the timing-sensitive behaviour tests uninstrumented on "
                  "OpenCL"),
        Stage("plain-hip", timing, 90, env=hip, needs=["build"],
              doc="the timing-sensitive behaviour tests uninstrumented on "
                  "HIP"),
        Stage("stubs", [py, "-m", "mypy.stubtest", "accelerator"], 90,
              kind="cmd", env={"PYTHONPATH": "."}, needs=["build"],
              doc="the type stubs match the module"),
        Stage("docs", [py, "-m", "sphinx", "-q", "-W", "-b", "html", "docs",
                       str(run_dir / "docs-html")], 90, kind="cmd",
              env={"PYTHONPATH": "."}, needs=["build"],
              doc="the Sphinx docs build with warnings as errors"),
        # The wheel, checked by what can differ from the in-place build
        # (its files, the abi3 tag, the import from site-packages, the
        # package data, the entry point, `python -m accelerator`) and a
        # slice of the suite under this Python, whose whole suite the
        # stages above run; then the behaviour suite against the same
        # wheel under every other CPython >= 3.11 (tests/check_wheel.sh),
        # each its own stage so that they share the lanes.
        Stage("wheel", ["bash", "tests/check_wheel.sh", "build",
                        str(run_dir / "wheel")], 180, kind="cmd",
              needs=["build"],
              doc="an sdist and from it one abi3 wheel, in a fresh venv: "
                  "its files, tag, import, package data, pytest entry "
                  "point, python -m accelerator, and a slice of the "
                  "suite on the CUDA double"),
        *(Stage(f"wheel-{version}", ["bash", "tests/check_wheel.sh",
                                     "suite", str(run_dir / "wheel"),
                                     version], 300, kind="cmd",
                needs=["wheel"],
                doc=f"the same wheel under CPython {version} (skipped "
                    "where it is missing): the behaviour suite on the "
                    "CUDA double, uninstrumented")
          for version in WHEEL_PYTHONS),
        # One backend's behaviour suite through a plugin built outside the
        # tree: what differs from the built-in backend is the loading
        # (entry point, ABI and slot checks, the copied table), not the
        # backend's code, which the hip stage runs instrumented.  It took
        # 97 s on a quiet 2-core machine (the suite 64 s of it), 186 s on a
        # loaded one.
        Stage("plugin", ["bash", "tests/check_wheel.sh", "plugin",
                         str(run_dir / "wheel")], 240, kind="cmd",
              needs=["wheel"],
              doc="plugins built outside the tree against the wheel's "
                  "header, pip-installed beside it in a fresh venv (the "
                  "template; the HIP backend from its folder): the "
                  "behaviour suite through plugin_hip on the HIP double, "
                  "uninstrumented"),
        Stage("coverage", ["bash", "tests/coverage_report.sh", INSTRUMENTED],
              90, kind="cmd", needs=["build-instrumented"],
              after=[s.name for s in stages if s.cwd == INSTRUMENTED],
              doc="line coverage of csrc/ over every instrumented stage"),
    ]
    return stages


# -- running ------------------------------------------------------------------

def junit_counts(path: pathlib.Path) -> tuple[int, int, int] | None:
    """(passed, failed, skipped) from a junit report, or None."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root)
    total = failed = skipped = 0
    for s in suites:
        total += int(s.get("tests", 0))
        failed += int(s.get("failures", 0)) + int(s.get("errors", 0))
        skipped += int(s.get("skipped", 0))
    return total - failed - skipped, failed, skipped


#: a closing line of pytest (or our own 'N passed, N failed' line)
SUMMARY = re.compile(r"^(?:\w+: )?(\d+ (?:passed|failed)\b.*)$")


def command_counts(log: pathlib.Path) -> tuple[int, int, int] | None:
    """Counts from the last pytest closing line in a command's log (the
    wheel stage runs pytest inside); None where there is none."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    for line in log.read_text(errors="replace").splitlines()[::-1]:
        line = line.strip("= ")
        if SUMMARY.match(line) or re.match(r"^\d+ (passed|failed|skipped)",
                                           line):
            for n, what in re.findall(r"(\d+) (passed|failed|skipped|error)",
                                      line):
                counts[what] += int(n)
            break
    else:
        return None
    return counts["passed"], counts["failed"] + counts["error"], \
        counts["skipped"]


class Runner:
    def __init__(self, stages: list[Stage], run_dir: pathlib.Path,
                 jobs: int, pytest_args: list[str],
                 deadline: float | None = None) -> None:
        self.stages = stages
        self.deadline = deadline
        self.run_dir = run_dir
        self.jobs = jobs
        self.pytest_args = pytest_args
        self.results = {s.name: Result(s) for s in stages}
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp} +{time.monotonic() - self.started:5.0f}s] {text}",
              flush=True)

    def argv(self, stage: Stage) -> list[str]:
        if stage.kind != "pytest":
            return stage.cmd
        tmp = self.run_dir / "tmp" / stage.name
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                f"--junitxml={self.run_dir / 'junit' / stage.name}.xml",
                f"--basetemp={tmp / 'pytest'}", *hang_guard(), *stage.cmd,
                *self.pytest_args]

    def start(self, stage: Stage) -> subprocess.Popen[bytes]:
        result = self.results[stage.name]
        result.log = self.run_dir / "logs" / f"{stage.name}.log"
        tmp = self.run_dir / "tmp" / stage.name
        tmp.mkdir(parents=True, exist_ok=True)
        if stage.sanitizer_logs:
            (self.run_dir / "sanitizer" / stage.name).mkdir(parents=True,
                                                           exist_ok=True)
        env = {**os.environ, "TMPDIR": str(tmp), **stage.env}
        self.say(f"start {stage.name}")
        log = open(result.log, "wb")
        log.write(f"$ {shlex.join(self.argv(stage))}\n".encode())
        log.flush()
        proc = subprocess.Popen(self.argv(stage), cwd=REPO / stage.cwd,
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        result.seconds = time.monotonic()
        return proc

    def finish(self, stage: Stage, rc: int, timed_out: bool) -> None:
        result = self.results[stage.name]
        result.seconds = time.monotonic() - result.seconds
        assert result.log is not None
        counts = None
        if stage.kind == "pytest":
            counts = junit_counts(self.run_dir / "junit" / f"{stage.name}.xml")
        if counts is None:
            counts = command_counts(result.log)
        result.rc = rc
        result.counted = counts is not None or stage.kind == "pytest"
        result.passed, result.failed, result.skipped = counts or (0, 0, 0)
        notes = []
        if timed_out and rc == -9 and self.deadline is not None \
                and time.monotonic() - self.started > self.deadline:
            notes.append("stopped at the run's deadline")
        elif timed_out:
            notes.append(f"stopped after {HARD_LIMIT}x its budget")
        elif rc == 5 and stage.kind == "pytest":
            notes.append("pytest collected no test")
        elif rc != 0:
            notes.append(f"exit status {rc}")
        if stage.sanitizer_logs:
            reports = sorted((self.run_dir / "sanitizer" / stage.name).glob(
                "*"))
            if reports:
                notes.append(f"{len(reports)} sanitizer report(s)")
                with open(result.log, "a") as log:
                    for report in reports:
                        log.write(f"--- {report}\n{report.read_text()}\n")
        if timed_out:
            result.status = "timed out"
        elif notes:
            result.status = "failed"
        else:
            result.status = "passed"
        if result.status != "passed" and result.failed == 0:
            result.failed = 1   # a crash or a report: one red line, not none
        result.note = "; ".join(notes)
        self.say(f"{result.status} {stage.name} in {result.seconds:.0f}s: "
                 f"{result.outcome()}"
                 + (f" ({result.note})" if result.note else ""))

    def ready(self, stage: Stage) -> bool | None:
        """True to start, False to wait, None never to run."""
        for name in stage.needs:
            dep = self.results.get(name)
            if dep is None:
                continue
            if dep.status in ("failed", "timed out", "not run"):
                return None
            if dep.status != "passed":
                return False
        for name in stage.after:
            dep = self.results.get(name)
            if dep is not None and dep.status in ("pending", "running"):
                return False
        return True

    def chains(self) -> dict[str, float]:
        """Each stage's budget plus the longest chain of stages that wait
        for it (needs or after): how long the run lasts at least once it
        starts."""
        waiting: dict[str, list[Stage]] = {s.name: [] for s in self.stages}
        for s in self.stages:
            for name in {*s.needs, *s.after}:
                if name in waiting:
                    waiting[name].append(s)
        chain: dict[str, float] = {}

        def length(stage: Stage, seen: frozenset[str]) -> float:
            if stage.name not in chain:
                later = [length(w, seen | {stage.name})
                         for w in waiting[stage.name] if w.name not in seen]
                chain[stage.name] = stage.budget + max(later, default=0)
            return chain[stage.name]

        for s in self.stages:
            length(s, frozenset())
        return chain

    def run(self) -> None:
        # Setup first, then the longest chains first (a stage and what
        # waits for it: the wheel before the suites under other Pythons
        # that need it), so that the two lanes end closer together.
        chain = self.chains()
        pending = sorted(self.stages,
                         key=lambda s: (not s.serial, -chain[s.name]))
        procs: dict[str, subprocess.Popen[bytes]] = {}
        while pending or procs:
            if self.deadline is not None and \
                    time.monotonic() - self.started > self.deadline:
                self.stop(pending, procs)
                return
            serial_left = any(s.serial for s in pending)
            for stage in list(pending):
                if len(procs) >= (1 if stage.serial else self.jobs):
                    break
                if serial_left and not stage.serial:
                    break
                if stage.serial and procs:
                    break
                verdict = self.ready(stage)
                if verdict is None:
                    pending.remove(stage)
                    missing = [n for n in stage.needs
                               if not self.results[n].ok]
                    result = self.results[stage.name]
                    result.status = "not run"
                    result.note = "needs " + ", ".join(missing)
                    result.failed = 1
                    self.say(f"not run {stage.name}: {result.note}")
                    continue
                if verdict:
                    pending.remove(stage)
                    self.results[stage.name].status = "running"
                    procs[stage.name] = self.start(stage)
            time.sleep(0.2)
            for name, proc in list(procs.items()):
                stage = self.results[name].stage
                elapsed = time.monotonic() - self.results[name].seconds
                timed_out = elapsed > HARD_LIMIT * stage.budget
                if timed_out and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.poll()
                if rc is None:
                    continue
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # leftovers
                except ProcessLookupError:
                    pass
                del procs[name]
                self.finish(stage, rc, timed_out)

    def stop(self, pending: list[Stage],
             procs: dict[str, subprocess.Popen[bytes]]) -> None:
        """The whole run's deadline: stop what runs, start nothing more."""
        self.say(f"the run's deadline of {self.deadline:.0f} s has passed: "
                 "stopping")
        for name, proc in procs.items():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            self.finish(self.results[name].stage, -9, True)
        for stage in pending:
            result = self.results[stage.name]
            result.status = "not run"
            result.note = "the run's deadline passed"
            result.failed = 1

    def summary(self, enforce_budgets: bool) -> int:
        failed_stages = [r for r in self.results.values() if not r.ok]
        for r in failed_stages:
            if r.log is None or not r.log.exists():
                continue
            lines = r.log.read_text(errors="replace").splitlines()
            print(f"\n==== the end of {r.stage.name}'s log ({r.log}) ====")
            print("\n".join(lines[-60:]))
        over = [r for r in self.results.values()
                if r.status in ("passed", "failed", "timed out")
                and r.seconds > r.stage.budget]
        width = max(len(s.name) for s in self.stages)
        print(f"\n{'stage':<{width}}  {'passed':>6} {'failed':>6} "
              f"{'skipped':>7} {'seconds':>7} {'budget':>6}  status")
        print("-" * (width + 46))
        total = [0, 0, 0]
        for r in self.results.values():
            total[0] += r.passed
            total[1] += r.failed
            total[2] += r.skipped
            flag = " OVER BUDGET" if r in over else ""
            counts = f"{r.passed:>6} {r.failed:>6} {r.skipped:>7}" \
                if r.counted else f"{r.outcome():>21}"
            print(f"{r.stage.name:<{width}}  {counts} "
                  f"{r.seconds:>7.0f} {r.stage.budget:>6.0f}  "
                  f"{r.status}{flag}" + (f" ({r.note})" if r.note else ""))
        wall = time.monotonic() - self.started
        print("-" * (width + 46))
        print(f"{'wall':<{width}}  {'':>6} {'':>6} {'':>7} {wall:>7.0f}")
        print(f"logs: {self.run_dir}")
        status = 1 if failed_stages else 0
        for r in over:
            print(f"budget: stage {r.stage.name} took {r.seconds:.0f} s, over "
                  f"its budget of {r.stage.budget:.0f} s (tests/stages.py): "
                  "make it faster, or raise its budget in the same change "
                  "and say why" + ("" if enforce_budgets else " (warning)"))
            if enforce_budgets:
                status = 1
        print(f"total: {total[0]} passed, {total[1]} failed, "
              f"{total[2]} skipped")
        return status


def load_plan(path: pathlib.Path) -> list[Stage]:
    return [Stage(**entry) for entry in json.loads(path.read_text())]


def main(argv: list[str]) -> int:
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1:]
    else:
        pytest_args = []
    parser = argparse.ArgumentParser(
        prog="tests/run.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count()
                                                        or 1),
                        help="stages run at once (default: 2, or 1 on one "
                             "core)")
    parser.add_argument("--only", default="",
                        help="comma list of stages to run (their builds "
                             "and setup are added)")
    parser.add_argument("--list", action="store_true",
                        help="list the stages and exit")
    parser.add_argument("--enforce-budgets", action="store_true",
                        help="a stage past its budget fails the run")
    parser.add_argument("--plan", type=pathlib.Path,
                        help="a JSON list of stages instead of the built-in")
    parser.add_argument("--deadline", type=float,
                        help="seconds after which running stages are "
                             "stopped and no more start")
    parser.add_argument("--run-dir", type=pathlib.Path,
                        help="where logs go (default build/test-runs/<time>)")
    args = parser.parse_args(argv)
    run_dir = args.run_dir or (REPO / "build" / "test-runs"
                               / time.strftime("%Y%m%d-%H%M%S"))
    run_dir = run_dir.resolve()
    stages = load_plan(args.plan) if args.plan else builtin_plan(run_dir)
    if args.list:
        for s in stages:
            print(f"{s.name:<20} {s.budget:>5.0f} s  {s.doc}")
        return 0
    for sub in ("logs", "junit", "tmp"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.name for s in stages}
        if unknown:
            parser.error(f"unknown stage(s): {', '.join(sorted(unknown))}; "
                         "--list names them")
        for s in stages:
            if s.name in wanted:
                wanted |= set(s.needs)
        wanted |= {s.name for s in stages if s.serial and s.name == "setup"}
        stages = [s for s in stages if s.name in wanted]
        for s in stages:
            s.after = [a for a in s.after if a in wanted]
    runner = Runner(stages, run_dir, max(1, args.jobs), pytest_args,
                    args.deadline)
    crashed = False
    try:
        runner.run()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        crashed = True
    except Exception:  # the summary is printed whatever happens
        traceback.print_exc()
        crashed = True
    return runner.summary(args.enforce_budgets) or int(crashed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
