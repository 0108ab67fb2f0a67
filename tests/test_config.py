"""Driver configurations, each in its own process (drivers init once).

Device counts, a missing library, the toolkit's stub library, cuInit
failing, ACCELERATOR_BACKEND, the cuGetProcAddress fallback, debug tracing
and "no driver call" guarantees read from the double's counters.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import fake_drivers
from fake_drivers import CUDA_DOUBLE, CUDA_DOUBLE_NOPROC, REPO

TOOLKIT_STUB = pathlib.Path(
    os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64/stubs/libcuda.so"

pytestmark = pytest.mark.skipif(
    not CUDA_DOUBLE.exists(), reason="run make -C tests/drivers first")

PRELUDE = """
import ctypes, json, os, sys
sys.path.insert(0, {tests!r})
import fake_drivers
"""


def run(code: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter with only the given configuration."""
    environment = fake_drivers.clean_environment()
    environment.update(env)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), environment.get("PYTHONPATH")]))
    script = PRELUDE.format(tests=str(REPO / "tests")) + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], env=environment,
                            capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def with_double(devices: int | str, **env: str) -> dict[str, str]:
    return dict(ACCELERATOR_CUDA_LIBRARY=str(CUDA_DOUBLE),
                FAKE_CUDA_DEVICES=str(devices), **env)


SUMMARY = """
import accelerator as a
print(a.is_available(), a.device_count(), a.current_accelerator())
"""


@pytest.mark.parametrize("devices", [1, 2, 8])
def test_device_counts(devices: int) -> None:
    out = run(SUMMARY, **with_double(devices)).stdout
    assert out.split() == ["True", str(devices), "cuda"]


def test_the_issue_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import accelerator as a; print(a.is_available(),"
         " a.device_count(), a.current_accelerator())"],
        env={**fake_drivers.clean_environment(), "PYTHONPATH": str(REPO),
             **with_double(2)}, capture_output=True, text=True, timeout=60)
    assert result.stdout == "True 2 cuda\n"


UNAVAILABLE = """
import accelerator as a
assert a.is_available() is False and a.device_count() == 0
assert a.current_accelerator() is None
for call in (a.current_device_index, a.current_stream, a.synchronize,
             a.Stream, a.Event, lambda: a.set_device_index(0),
             lambda: a.get_memory_info()):
    try:
        call()
    except a.AcceleratorError as e:
        assert "Cannot access accelerator device when none is available" \
            in str(e), e
    else:
        raise AssertionError(f"{call} did not raise")
a.set_device_index(-1)  # a no-op even without an accelerator, as torch
with a.device_index(None):
    pass
print(json.dumps(a.backends()))
"""


def cuda_reason(result: subprocess.CompletedProcess) -> str:
    backends = json.loads(result.stdout)
    assert backends[0]["name"] == "cuda" and not backends[0]["available"]
    return backends[0]["reason"]


def test_zero_devices() -> None:
    reason = cuda_reason(run(UNAVAILABLE, **with_double(0)))
    assert "no NVIDIA GPU is visible: NVML counts none" in reason
    reason = cuda_reason(run(UNAVAILABLE, **with_double(
        0, ACCELERATOR_NVML_LIBRARY="none")))
    assert "CUDA_ERROR_NO_DEVICE" in reason


def test_no_library() -> None:
    result = run(UNAVAILABLE,
                 ACCELERATOR_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    assert "cannot load the CUDA driver" in cuda_reason(result)


@pytest.mark.skipif(not TOOLKIT_STUB.exists(),
                    reason=f"no CUDA toolkit stub at {TOOLKIT_STUB}")
def test_toolkit_stub_library() -> None:
    result = run(UNAVAILABLE, ACCELERATOR_CUDA_LIBRARY=str(TOOLKIT_STUB))
    assert "CUDA_ERROR_STUB_LIBRARY" in cuda_reason(result)
    out = run(SUMMARY, ACCELERATOR_CUDA_LIBRARY=str(TOOLKIT_STUB)).stdout
    assert out == "False 0 None\n"


def test_cuinit_failing() -> None:
    """Without NVML, cuInit counts: its failure makes CUDA unavailable."""
    result = run(UNAVAILABLE, **with_double(2, FAKE_CUDA_FAIL="cuInit:0:999",
                                            ACCELERATOR_NVML_LIBRARY="none"))
    reason = cuda_reason(result)
    assert "cuInit() failed" in reason and "CUDA_ERROR_UNKNOWN (999)" in reason


def test_cuinit_failing_at_first_use() -> None:
    """With NVML counting, cuInit runs at the first use: is_available()
    stays true, and that use (and every later one) raises the driver's
    error; the report shows it."""
    run("""
    import accelerator as a
    driver = fake_drivers.CudaDouble()
    assert a.is_available() and a.device_count() == 2
    assert a.current_device_index() == 0      # a question: no cuInit
    assert driver.calls("cuInit") == 0
    for attempt in range(2):
        try:
            a.Stream()
        except a.AcceleratorError as exc:
            assert exc.api == "cuInit" and exc.code == 999, vars(exc)
            assert "CUDA_ERROR_UNKNOWN (999)" in str(exc), str(exc)
        else:
            raise AssertionError("no error")
    assert driver.calls("cuInit") == 1        # tried once, kept
    info = a.backends()[0]
    assert info["available"] and not info["initialized"], info
    assert "initialisation at first use failed: cuInit() failed" in \
        info["reason"], info
    """, **with_double(2, FAKE_CUDA_FAIL="cuInit:0:999"))


def test_backend_none_and_unknown() -> None:
    result = run(UNAVAILABLE, **with_double(2, ACCELERATOR_BACKEND="none"))
    assert "ACCELERATOR_BACKEND=none" in cuda_reason(result)
    result = run(UNAVAILABLE, **with_double(2, ACCELERATOR_BACKEND="tpu"))
    assert "names no backend" in cuda_reason(result)


def test_backend_cuda_is_selected() -> None:
    out = run(SUMMARY, **with_double(2, ACCELERATOR_BACKEND="cuda")).stdout
    assert out.split() == ["True", "2", "cuda"]


def test_import_makes_no_driver_call() -> None:
    run("""
    driver = fake_drivers.CudaDouble()
    import accelerator, accelerator._accelerator
    assert driver.calls() == 0, driver.calls()
    """, **with_double(2))


def test_queries_create_no_context() -> None:
    run("""
    driver = fake_drivers.CudaDouble()
    import accelerator as a
    assert a.is_available() and a.device_count() == 2
    a.current_accelerator(); a.current_device_index(); a.current_stream()
    a.current_stream(1); a.backends()
    assert driver.live("context") == 0 and driver.calls("cuDevicePrimaryCtxRetain") == 0
    assert driver.calls("cuCtxSetCurrent") == 0
    a.set_device_index(1)
    assert driver.live("context") == 1 and driver.current_device() == 1
    """, **with_double(2))


def test_driver_objects_are_released_at_exit() -> None:
    result = run("""
    driver = fake_drivers.CudaDouble()
    driver.lib.fake_cuda_report_at_exit()
    import accelerator as a
    a.set_device_index(1)
    kept = [a.Stream(0), a.Stream(1)]
    event = a.Event(); event.record(kept[0])
    assert driver.live("retain") == 2
    """, **with_double(2))
    assert "fake_cuda at exit: retain=0 stream=0 event=0" in result.stderr


def test_old_driver_without_cugetprocaddress() -> None:
    run("""
    import accelerator as a
    driver = fake_drivers.CudaDouble(fake_drivers.CUDA_DOUBLE_NOPROC)
    assert a.is_available() and a.device_count() == 2
    s = a.Stream(); s.query(); e = a.Event(enable_timing=True); e.record(s)
    e.synchronize()
    assert driver.calls("cuGetProcAddress") == 0
    """, ACCELERATOR_CUDA_LIBRARY=str(CUDA_DOUBLE_NOPROC), FAKE_CUDA_DEVICES="2")


def test_debug_trace_says_why() -> None:
    result = run("import accelerator as a; a.is_available()",
                 **with_double(2, ACCELERATOR_DEBUG="1"))
    assert "backend cuda available: 2 device(s)" in result.stderr
    assert "selected backend cuda" in result.stderr
    result = run("import accelerator as a; a.is_available()",
                 ACCELERATOR_CUDA_LIBRARY="/nonexistent.so",
                 ACCELERATOR_DEBUG="1")
    assert "backend cuda rejected: cannot load" in result.stderr
    quiet = run("import accelerator as a; a.is_available()",
                **with_double(2))
    assert quiet.stderr == ""


def test_driver_errors_carry_the_driver_facts() -> None:
    run("""
    import accelerator as a
    driver = fake_drivers.CudaDouble()
    s = a.Stream()
    driver.fail("cuStreamQuery", 1, 999)
    try:
        s.query()
    except a.AcceleratorError as e:
        assert (e.backend, e.api, e.code, e.error_name) == (
            "cuda", "cuStreamQuery", 999, "CUDA_ERROR_UNKNOWN"), vars(e)
        assert "cuStreamQuery() failed: CUDA_ERROR_UNKNOWN (999)" in str(e)
    else:
        raise AssertionError("no error")
    assert s.query() is True
    driver.fail("cuStreamCreateWithPriority", 1, 2)
    try:
        a.Stream()
    except a.OutOfMemoryError as e:
        assert e.error_name == "CUDA_ERROR_OUT_OF_MEMORY" and e.code == 2
    else:
        raise AssertionError("no OOM")
    a.Stream()
    """, **with_double(2))


def test_fork_after_init_refuses_clearly() -> None:
    run("""
    import accelerator as a
    a.Stream().synchronize()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            assert a.is_available() and a.device_count() == 2
            try:
                a.Stream()
            except a.AcceleratorError as e:
                assert "'spawn'" in str(e), e
            else:
                code = 3
            try:
                a.synchronize()
            except a.AcceleratorError:
                pass
            else:
                code = 4
        except BaseException:
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    a.Stream().synchronize()  # the parent is unaffected
    """, **with_double(2))


def test_fork_before_init_works() -> None:
    run("""
    import accelerator as a
    pid = os.fork()
    if pid == 0:
        ok = a.is_available() and a.device_count() == 2
        a.Stream().synchronize()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    """, **with_double(2))
