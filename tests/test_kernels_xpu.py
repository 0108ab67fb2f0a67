"""Kernels on Level Zero, one process each: what the behaviour suite does
not see through the native test kernels.

SPIR-V modules (from kernel_code.spirv(): clang-15 and llvm-spirv-15) are
read by the test driver (names, parameter counts) and refused at launch
with ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, as a device whose binaries
are host code would; a build failure carries its log; shared_mem reaches
a kernel as its last parameter (csrc/backends/level_zero/kernels.c); a
captured launch keeps the arguments it was given, and its graph keeps
the kernel; a module dropped while
its launch is queued goes only once the launch has run; modules still
held at exit are destroyed before the context.  Each runs with and
without the loader's intercept layer.
"""
from __future__ import annotations

import textwrap

import pytest

import kernel_code
from fake_drivers import ZE_DRIVER
from test_config import run
from test_config_xpu import pytestmark  # noqa: F401 (the same skips)

MODES = [pytest.param({}, id="loader"),
         pytest.param({"ZE_ENABLE_LOADER_INTERCEPT": "1"}, id="intercept")]

PRELUDE = """
import gc, threading
import numpy as np
import accelerator as acc
import kernel_code
driver = fake_drivers.ZeDouble()


def read(buffer, dtype):
    data = bytearray(buffer.nbytes)
    buffer.copy_to(data)
    return np.frombuffer(bytes(data), dtype)
"""


def xpu(code: str, mode: dict[str, str], **env: str) -> str:
    """Run code on the Level Zero double (two devices); its stdout."""
    return run(PRELUDE + textwrap.dedent(code), ZE_ENABLE_ALT_DRIVERS=str(ZE_DRIVER),
               FAKE_ZE_DEVICES="2", ACCELERATOR_BACKEND="xpu", **mode,
               **env).stdout


needs_spirv = pytest.mark.skipif(
    not (kernel_code.have("clang-15") and kernel_code.have("llvm-spirv-15")),
    reason="clang-15 and llvm-spirv-15 build the SPIR-V test kernels")


@needs_spirv
@pytest.mark.parametrize("mode", MODES)
def test_spirv_kernels_are_read_and_refused_at_launch(mode) -> None:
    out = xpu("""
    m = acc.Module(kernel_code.spirv())
    print(acc.Module(kernel_code.spirv(), format="spirv"))
    try:
        m.get_kernel("nope")
    except KeyError as e:
        print("missing:", e)
    saxpy, reduce = m.get_kernel("saxpy"), m.get_kernel("reduce_sum")
    b = acc.Buffer(256)
    for k in (saxpy, reduce):
        try:
            acc.launch(k, 1, 1, b)
        except ValueError as e:
            print("count:", e)
    try:
        acc.launch(saxpy, 1, 64, b, b, np.float32(1), np.uint32(64))
    except acc.AcceleratorError as e:
        print("launch:", e.api, e.error_name)
    acc.synchronize()
    print("live:", driver.live("module"), driver.live("kernel"))
    """, mode)
    lines = out.splitlines()
    assert lines[0] == "<accelerator.Module spirv on xpu:0>"
    assert lines[1].startswith("missing:")
    for name in ("saxpy", "reduce_sum", "fill2d", "add_one"):
        assert name in lines[1]
    # saxpy: y, x, a, n; reduce_sum: x, out, n and its __local scratch.
    assert "kernel 'saxpy' takes 4 arguments" in lines[2]
    assert "kernel 'reduce_sum' takes 4 arguments" in lines[3]
    assert lines[4] == ("launch: zeCommandListAppendLaunchKernel "
                        "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY")
    assert lines[5] == "live: 1 2"


def test_spirv_refused_for_its_length_says_so() -> None:
    """SPIR-V with its magic number but shorter than the 20-byte header,
    or not whole 32-bit words, is refused for that, not for a magic
    number it has; only code without the magic number is said to lack
    it."""
    out = xpu("""
    magic = (0x07230203).to_bytes(4, "little")
    for code in (magic + bytes(8), magic[::-1] + bytes(12),
                 magic + bytes(18), bytes(20)):
        try:
            acc.Module(code, format="spirv")
        except ValueError as e:
            print(e)
    """, {})
    assert out.splitlines() == [
        "the code is not spirv (12 bytes, shorter than SPIR-V's 20-byte "
        "header)",
        "the code is not spirv (16 bytes, shorter than SPIR-V's 20-byte "
        "header)",
        "the code is not spirv (22 bytes, not a whole number of 32-bit "
        "words)",
        "the code is not spirv (no SPIR-V magic number 0x07230203 at its "
        "start)"]


@needs_spirv
def test_a_failed_build_carries_the_driver_s_log() -> None:
    out = xpu("""
    spirv = kernel_code.spirv()
    # The header, then instructions whose word counts run past the end.
    for code, options in ((spirv[:len(spirv) // 2 // 4 * 4], None),
                          (kernel_code.native(), "-no-such-option")):
        try:
            acc.Module(code, options=options)
        except acc.BuildError as e:
            print(e.api, e.error_name, bool(e.log.strip()))
            print(e.log.strip().splitlines()[-1])
    # Options the driver knows build.
    acc.Module(kernel_code.native(), options="-ze-opt-level=2")
    print("live:", driver.live("build_log"), driver.live("module"))
    """, {})
    lines = out.splitlines()
    failure = "zeModuleCreate ZE_RESULT_ERROR_MODULE_BUILD_FAILURE True"
    assert lines[0] == failure
    assert "SPIR-V" in lines[1]
    assert lines[2] == failure
    assert lines[3] == "error: unknown build option '-no-such-option'"
    assert lines[4] == "live: 0 0"


def test_a_failed_build_s_log_is_not_read_through_loader_1_8_s_intercept(
        ) -> None:
    """Loader 1.8 does not translate the log handle a failed
    zeModuleCreate returns: read through its intercept layer, it crashes
    the process.  The error says the log is lost instead."""
    out = xpu("""
    try:
        acc.Module(kernel_code.native(), options="-no-such-option")
    except acc.BuildError as e:
        print(e.api, e.error_name, e.log)
        print("lost" in str(e), driver.calls("zeModuleBuildLogGetString"))
    acc.Module(kernel_code.native())
    print(driver.live("module"))
    """, {"ZE_ENABLE_LOADER_INTERCEPT": "1"})
    assert out.splitlines() == [
        "zeModuleCreate ZE_RESULT_ERROR_MODULE_BUILD_FAILURE None",
        "True 0", "0"]


@pytest.mark.parametrize("mode", MODES)
def test_shared_mem_is_the_last_parameter(mode) -> None:
    out = xpu("""
    m = acc.Module(kernel_code.native())
    reduce, add_one = m.get_kernel("reduce_sum"), m.get_kernel("add_one")
    x = np.arange(1000, dtype=np.float32)
    bx, bo = acc.Buffer(x.nbytes), acc.Buffer(8 * 4)
    bx.copy_from(x.tobytes())
    acc.launch(reduce, 8, 128, bx, bo, np.uint32(1000), shared_mem=128 * 4)
    got = read(bo, np.float32)
    want = np.array([x[i * 128:(i + 1) * 128].sum() for i in range(8)])
    print(np.array_equal(got, want))
    try:  # the native local parameter given as an argument: none left
        acc.launch(add_one, 1, 64, bo, np.uint32(8), np.uint32(0),
                   shared_mem=64)
    except ValueError as e:
        print(e)
    print(reduce.attributes["num_args"],
          reduce.attributes["max_dynamic_shared_memory_bytes"])
    """, mode)
    lines = out.splitlines()
    assert lines[0] == "True"
    # Which parameters are local memory Level Zero 1.4 does not tell; the
    # native table gives the user's (the double's local one is not one).
    assert lines[1] == "kernel 'add_one' takes 2 arguments, got 3", lines
    assert lines[2] == "3 49152"


@pytest.mark.parametrize("mode", MODES)
def test_a_captured_launch_replays_with_its_own_arguments(mode) -> None:
    out = xpu("""
    k = acc.Module(kernel_code.native()).get_kernel("add_one")
    s = acc.Stream()
    a, b = acc.Buffer(256, stream=s), acc.Buffer(256, stream=s)
    a.fill(0, stream=s)
    b.fill(0, stream=s)
    s.synchronize()
    g = acc.Graph()
    with s, g:
        acc.launch(k, 1, 64, a, np.uint32(64), stream=s)
    # The kernel's arguments change after the capture: the graph keeps
    # the ones it recorded.
    acc.launch(k, 1, 64, b, np.uint32(32), stream=s)
    with s:
        for _ in range(3):
            g.replay()
    s.synchronize()
    ua, ub = read(a, np.uint32), read(b, np.uint32)
    print(sorted(set(ua.tolist())), ub[:32].tolist() == [1] * 32,
          ub[32:].tolist() == [0] * 32)
    """, mode)
    assert out.splitlines() == ["[3] True True"]


@pytest.mark.parametrize("mode", MODES)
def test_a_graph_keeps_the_kernels_it_launches(mode) -> None:
    """Each replay runs the captured launch again: dropping the module
    and its kernel after the capture must not unload them under it."""
    out = xpu("""
    m = acc.Module(kernel_code.native())
    k = m.get_kernel("add_one")
    s = acc.Stream()
    a = acc.Buffer(256, stream=s)
    a.fill(0, stream=s)
    s.synchronize()
    g = acc.Graph()
    with s, g:
        acc.launch(k, 1, 64, a, np.uint32(64), stream=s)
    del m, k
    gc.collect()
    acc.empty_cache()
    acc.synchronize()
    print(driver.live("module"), driver.live("kernel"))
    with s:
        g.replay()
        g.replay()
    s.synchronize()
    print(set(read(a, np.uint32).tolist()), driver.live("kernel_misuse"))
    del g
    gc.collect()
    acc.synchronize()
    print(driver.live("module"), driver.live("kernel"))
    """, mode)
    assert out.splitlines() == ["1 1", "{2} 0", "0 0"]


@pytest.mark.parametrize("mode", MODES)
def test_a_captured_launch_the_driver_refuses_is_not_kept_by_the_graph(
        mode) -> None:
    """The graph keeps a kernel only for a launch in its list: one whose
    append failed lets go of it, so the module goes with the user's last
    reference, the graph still alive."""
    out = xpu("""
    m = acc.Module(kernel_code.native())
    k = m.get_kernel("add_one")
    s = acc.Stream()
    a = acc.Buffer(256, stream=s)
    s.synchronize()
    g = acc.Graph()
    with s:
        g.capture_begin()
        driver.fail("zeCommandListAppendLaunchKernel", 1,
                    driver.unknown_error[0])
        try:
            acc.launch(k, 1, 64, a, np.uint32(64), stream=s)
        except acc.AcceleratorError as e:
            print(e.api)
        g.capture_end()
    del m, k
    gc.collect()
    acc.empty_cache()
    acc.synchronize()
    print(driver.live("module"), driver.live("kernel"))
    del g
    gc.collect()
    acc.synchronize()
    print(driver.live("module"), driver.live("kernel"))
    """, mode)
    assert out.splitlines() == ["zeCommandListAppendLaunchKernel", "0 0",
                                "0 0"]


@pytest.mark.parametrize("mode", MODES)
def test_a_module_dropped_while_its_launch_is_queued_waits_for_it(
        mode) -> None:
    out = xpu("""
    m = acc.Module(kernel_code.native())
    k = m.get_kernel("add_one")
    s = acc.Stream()
    b = acc.Buffer(256, stream=s)
    b.fill(0, stream=s)
    gate = driver.stall(s)
    acc.launch(k, 1, 64, b, np.uint32(64), stream=s)
    del m, k
    gc.collect()
    acc.empty_cache()
    print("queued:", driver.live("module"), driver.live("kernel"))
    gate.open()
    s.synchronize()
    acc.empty_cache()
    print("ran:", driver.live("module"), driver.live("kernel"),
          driver.live("kernel_misuse"))
    print(set(read(b, np.uint32).tolist()))
    """, mode)
    assert out.splitlines() == ["queued: 1 1", "ran: 0 0 0", "{1}"]


@pytest.mark.parametrize("mode", MODES)
def test_one_kernel_launched_from_threads_keeps_each_launch_s_arguments(
        mode) -> None:
    out = xpu("""
    k = acc.Module(kernel_code.native()).get_kernel("add_one")
    bufs = [acc.Buffer(1024) for _ in range(8)]
    for b in bufs:
        b.fill(0)
    acc.synchronize()

    def work(b):
        s = acc.Stream()
        for _ in range(25):
            acc.launch(k, 4, 64, b, np.uint32(256), stream=s)
        s.synchronize()

    threads = [threading.Thread(target=work, args=(b,)) for b in bufs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print({v for b in bufs for v in read(b, np.uint32).tolist()})
    """, mode)
    assert out.splitlines() == ["{25}"]


def test_modules_still_used_at_exit_go_before_the_context() -> None:
    """A module dropped while its launch is queued is unloaded once the
    launch has run; at exit that is after the core's last look, so
    shutdown destroys it, after the lists drained and before the
    context (which the driver refuses to destroy while it has one)."""
    result = run(PRELUDE + textwrap.dedent("""
    s = acc.Stream()
    b = acc.Buffer(256, stream=s)
    # Still queued when the interpreter has finished; done while the
    # backend's shutdown drains the lists (it waits up to 2 s).
    driver.enqueue_sleep(s, 1500)
    acc.launch(acc.Module(kernel_code.native()).get_kernel("add_one"), 1,
               64, b, np.uint32(64), stream=s)
    gc.collect()
    print(driver.live("module"))
    """), ZE_ENABLE_ALT_DRIVERS=str(ZE_DRIVER), ACCELERATOR_BACKEND="xpu",
                 ACCELERATOR_DEBUG="1")
    assert result.stdout == "1\n"
    assert "zeContextDestroy failed" not in result.stderr
    assert "failed at exit" not in result.stderr
    assert "shut down" in result.stderr


def test_a_kernel_s_own_thread_limit_comes_from_its_subgroups() -> None:
    """Level Zero tells a kernel's limit as maxNumSubgroups x
    maxSubgroupSize: a launch beyond it is refused before the driver."""
    out = xpu("""
    source = kernel_code.NATIVE_C.replace(
        '{"add_one", add_one, 2, add_one_params, 0, 0}',
        '{"add_one", add_one, 2, add_one_params, 100, 0}')
    k = acc.Module(kernel_code.native(source)).get_kernel("add_one")
    print(k.attributes["max_threads_per_block"])
    b = acc.Buffer(1024)
    try:
        acc.launch(k, 1, 128, b, np.uint32(1))
    except ValueError as e:
        print(e)
    acc.launch(k, 1, 100, b, np.uint32(1))
    acc.synchronize()
    """, {})
    assert out.splitlines() == [
        "100", "the block has 128 threads, beyond the kernel's limit of 100 "
        "per block"]
