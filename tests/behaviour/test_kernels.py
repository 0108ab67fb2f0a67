"""Kernels: load device code, launch it, check the results against numpy.

The same tests for every backend: the code is the test kernels of
kernel_code.py in the format the backend under test runs (its double
class's kernel_format): OpenCL C built by PoCL, or the doubles' native
host objects, which the doubles run block by block on their stream
workers.  Results are checked byte for byte.
"""
from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import accelerator as acc
import fake_drivers
import kernel_code

SUFFIX = {"opencl-c": ".cl", "native": ".so"}


@pytest.fixture(scope="module")
def code() -> bytes:
    fmt = fake_drivers.under_test().kernel_format
    if not fmt:
        pytest.skip("the backend under test has no kernels (its double "
                    "class names no kernel_format)")
    return kernel_code.for_format(fmt)


def test_a_backend_without_kernels_says_so(
        facts: type[fake_drivers.DriverDouble],
        driver: fake_drivers.DriverDouble) -> None:
    if facts.kernel_format:
        pytest.skip("the backend has kernels")
    with pytest.raises(NotImplementedError, match="does not support "
                       "kernels"):
        acc.Module(kernel_code.OPENCL_C)


@pytest.fixture
def module(code: bytes, driver: fake_drivers.DriverDouble) -> acc.Module:
    acc.set_device_index(0)
    return acc.Module(code)


def upload(array: np.ndarray, stream: acc.Stream | None = None) -> acc.Buffer:
    buffer = acc.Buffer(array.nbytes, stream=stream)
    buffer.copy_from(array, stream=stream)
    return buffer


def download(buffer: acc.Buffer, dtype: type, count: int) -> np.ndarray:
    out = np.empty(count, dtype)
    buffer.copy_to(out)
    return out


def blocks(n: int, block: int) -> int:
    return (n + block - 1) // block


# Results ------------------------------------------------------------------


def test_saxpy_matches_numpy(module: acc.Module) -> None:
    n = 1000   # not a multiple of the block: the kernel's bounds check
    # Small integers and a = 2.5: every product and sum is exact, so a
    # device that fuses them (fma) gives numpy's very bytes.
    x = np.random.default_rng(1).integers(0, 1 << 12, n).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 1 << 12, n).astype(np.float32)
    bx, by = upload(x), upload(y)
    acc.launch(module.get_kernel("saxpy"), blocks(n, 64), 64, by, bx,
               np.float32(2.5), np.uint32(n))
    expected = np.float32(2.5) * x + y
    assert download(by, np.float32, n).tobytes() == expected.tobytes()


def test_ctypes_scalars_pass_by_value(module: acc.Module) -> None:
    n = 100
    x = np.arange(n, dtype=np.float32)
    bx, by = upload(x), upload(np.zeros(n, np.float32))
    acc.launch(module.get_kernel("saxpy"), blocks(n, 32), (32,), by, bx,
               ctypes.c_float(3.0), ctypes.c_uint32(n))
    assert np.array_equal(download(by, np.float32, n), 3 * x)


def test_reduce_sum_uses_shared_memory(module: acc.Module) -> None:
    n, block = 4000, 64
    x = np.arange(n, dtype=np.float32) % 7
    bx = upload(x)
    nblocks = blocks(n, block)
    out = acc.Buffer(4 * nblocks)
    acc.launch(module.get_kernel("reduce_sum"), nblocks, block, bx, out,
               np.uint32(n), shared_mem=block * 4)
    sums = download(out, np.float32, nblocks)
    padded = np.zeros(nblocks * block, np.float32)
    padded[:n] = x
    assert np.array_equal(sums, padded.reshape(nblocks, block).sum(axis=1))


def test_fill2d_runs_a_two_dimensional_grid(module: acc.Module) -> None:
    width, height = 50, 30
    out = acc.Buffer(4 * width * height)
    out.fill(0xFF)
    acc.launch(module.get_kernel("fill2d"),
               (blocks(width, 8), blocks(height, 4)), [8, 4], out,
               np.uint32(width), np.uint32(height))
    ys, xs = np.mgrid[0:height, 0:width]
    expected = (ys * 1000 + xs).astype(np.uint32).ravel()
    assert np.array_equal(download(out, np.uint32, width * height), expected)


def test_host_buffer_arguments_pass_their_address(module: acc.Module) -> None:
    n = 256
    host = acc.HostBuffer(4 * n)
    view = np.frombuffer(memoryview(host), dtype=np.uint32)
    view[:] = np.arange(n, dtype=np.uint32)
    acc.launch(module.get_kernel("add_one"), blocks(n, 64), 64, host,
               np.uint32(n))
    acc.current_stream(0).synchronize()
    assert np.array_equal(view, np.arange(n, dtype=np.uint32) + 1)
    del view


def test_views_pass_their_own_address(module: acc.Module) -> None:
    n = 64
    data = upload(np.zeros(2 * n, np.uint32))
    acc.launch(module.get_kernel("add_one"), 1, 64, data[4 * n:],
               np.uint32(n))
    result = download(data, np.uint32, 2 * n)
    assert not result[:n].any() and (result[n:] == 1).all()


def test_bare_numbers_take_the_size_the_driver_tells(
        module: acc.Module, facts: type[fake_drivers.DriverDouble]) -> None:
    n = 100
    kernel = module.get_kernel("saxpy")
    x = np.arange(n, dtype=np.float32)
    bx, by = upload(x), upload(np.zeros(n, np.float32))
    if not facts.kernel_param_sizes:
        with pytest.raises(TypeError, match="sized scalar"):
            acc.launch(kernel, blocks(n, 64), 64, by, bx, 2.0, n)
        return
    acc.launch(kernel, blocks(n, 64), 64, by, bx, 2.0, n)
    assert np.array_equal(download(by, np.float32, n), 2 * x)
    with pytest.raises(ValueError, match="has 8 bytes, expected 4"):
        acc.launch(kernel, 1, 64, by, bx, np.float64(2.0), np.uint32(n))
    if facts.kernel_param_kinds:
        with pytest.raises(ValueError, match="outside"):
            acc.launch(kernel, 1, 64, by, bx, 2.0, -1)
        with pytest.raises(TypeError, match="pointer"):
            acc.launch(kernel, 1, 64, by, 12345, 2.0, n)


def test_an_address_by_value_for_a_pointer_parameter(
        module: acc.Module, facts: type[fake_drivers.DriverDouble]) -> None:
    """Code written for CUDA passes raw addresses as sized scalars: where
    the backend takes them they reach the memory; where it cannot (OpenCL
    reads a pointer argument's bytes as a cl_mem handle, and PoCL followed
    it into a crash) they are refused before anything is queued."""
    n = 64
    data = upload(np.zeros(n, np.uint32))
    add_one = module.get_kernel("add_one")
    addresses = (np.uint64(data.ptr), ctypes.c_void_p(data.ptr))
    if not facts.kernel_address_args:
        for address in addresses:
            with pytest.raises(ValueError, match=r"argument 0 is 8 bytes by "
                               r"value, but parameter 0 of kernel 'add_one' "
                               r"is a pointer: pass a Buffer"):
                acc.launch(add_one, 1, 64, address, np.uint32(n))
        assert not download(data, np.uint32, n).any()
        return
    for address in addresses:
        acc.launch(add_one, 1, 64, address, np.uint32(n))
    assert (download(data, np.uint32, n) == 2).all()


def test_a_scalar_of_the_wrong_kind_is_refused(
        module: acc.Module, facts: type[fake_drivers.DriverDouble]) -> None:
    """A sized scalar of the parameter's size but not its kind (a float's
    bits read as an integer or an address, an integer's as a float) is
    refused before anything is queued, where the driver tells kinds."""
    if not facts.kernel_param_kinds:
        pytest.skip("the driver tells parameter sizes only, not kinds")
    n = 64
    data = upload(np.zeros(n, np.uint32))
    add_one = module.get_kernel("add_one")   # (uint *data, uint n)
    saxpy = module.get_kernel("saxpy")       # (float *y, *x, float a, uint n)
    for value in (np.float32(n), ctypes.c_float(n)):
        with pytest.raises(ValueError, match=r"argument 1 is a 4-byte "
                           r"floating-point number, but parameter 1 of "
                           r"kernel 'add_one' is a 4-byte unsigned integer"):
            acc.launch(add_one, 1, 64, data, value)
    for value in (np.float64(data.ptr), ctypes.c_double(data.ptr),
                  np.complex64(1)):
        with pytest.raises(ValueError, match=r"argument 0 is .*8.*, but "
                           r"parameter 0 of kernel 'add_one' is a pointer"):
            acc.launch(add_one, 1, 64, value, np.uint32(n))
    for value in (np.int32(2), np.uint32(2), ctypes.c_int(2)):
        with pytest.raises(ValueError, match=r"argument 2 is a 4-byte "
                           r"(unsigned |signed )?integer, but parameter 2 of "
                           r"kernel 'saxpy' is a 4-byte floating-point "
                           r"number"):
            acc.launch(saxpy, 1, 64, data, data, value, np.uint32(n))
    acc.synchronize(0)
    assert not download(data, np.uint32, n).any()
    # Signedness is bit-compatible: an int32 passes for a uint parameter.
    acc.launch(add_one, 1, 64, data, np.int32(n))
    assert (download(data, np.uint32, n) == 1).all()


def test_a_scalar_of_the_other_byte_order_is_refused(
        module: acc.Module) -> None:
    """A scalar in the other byte order (numpy's '>u4' on a little-endian
    host) would reach the kernel with its bytes unswapped, a silent wrong
    value: it is refused before anything is queued, on every backend."""
    n = 64
    data = upload(np.zeros(n, np.uint32))
    add_one = module.get_kernel("add_one")   # (uint *data, uint n)
    other = ">" if sys.byteorder == "little" else "<"
    swapped = np.array(n, other + "u4")      # 0-d: its bytes as they are
    with pytest.raises(ValueError, match=r"argument 1 is in the other "
                       r"byte order .*numpy\.uint32"):
        acc.launch(add_one, 1, 64, data, swapped)
    acc.synchronize(0)
    assert not download(data, np.uint32, n).any()
    # One byte has no order; the native order passes.
    acc.launch(add_one, 1, 64, data, np.array(n, "=u4"))
    assert (download(data, np.uint32, n) == 1).all()


# Streams, events, graphs ---------------------------------------------------


def test_two_streams_are_ordered_by_events(
        module: acc.Module, driver: fake_drivers.DriverDouble) -> None:
    n = 512
    add_one = module.get_kernel("add_one")
    first, second = acc.Stream(0), acc.Stream(0)
    data = upload(np.zeros(n, np.uint32))
    acc.synchronize(0)
    driver.enqueue_sleep(first, 100)
    acc.launch(add_one, blocks(n, 64), 64, data, np.uint32(n), stream=first)
    done = first.record_event()
    second.wait_event(done)
    acc.launch(add_one, blocks(n, 64), 64, data, np.uint32(n),
               stream=second)
    # Read on the second stream: both launches, in that order, then this.
    out = np.empty(n, np.uint32)
    data.copy_to(out, stream=second)
    assert (out == 2).all()


def test_events_time_a_launch(module: acc.Module) -> None:
    n = 1 << 14
    stream = acc.Stream(0)
    data = upload(np.zeros(n, np.uint32), stream)
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    start.record(stream)
    acc.launch(module.get_kernel("add_one"), blocks(n, 128), 128, data,
               np.uint32(n), stream=stream)
    end.record(stream)
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    assert (download(data, np.uint32, n) == 1).all()


def test_a_graph_replays_a_captured_launch(
        module: acc.Module, facts: type[fake_drivers.DriverDouble]) -> None:
    if not facts.has("graphs"):
        pytest.skip(facts.lacks["graphs"])
    n = 256
    stream = acc.Stream(0)
    data = upload(np.zeros(n, np.uint32), stream)
    add_one = module.get_kernel("add_one")
    stream.synchronize()
    graph = acc.Graph()
    with stream:
        graph.capture_begin()
        acc.launch(add_one, blocks(n, 64), 64, data, np.uint32(n))
        graph.capture_end()
    stream.synchronize()
    assert not download(data, np.uint32, n).any(), "captured work ran"
    with stream:
        graph.replay()
        graph.replay()
    stream.synchronize()
    assert (download(data, np.uint32, n) == 2).all()


def test_a_graph_keeps_the_modules_it_launches(
        code: bytes, facts: type[fake_drivers.DriverDouble],
        driver: fake_drivers.DriverDouble) -> None:
    if not facts.has("graphs"):
        pytest.skip(facts.lacks["graphs"])
    n = 256
    stream = acc.Stream(0)
    data = upload(np.zeros(n, np.uint32), stream)
    module = acc.Module(code)
    kernel = module.get_kernel("add_one")
    stream.synchronize()
    graph = acc.Graph()
    with stream:
        graph.capture_begin()
        acc.launch(kernel, blocks(n, 64), 64, data, np.uint32(n))
        graph.capture_end()
    module_ref = weakref.ref(module)
    del module, kernel
    assert module_ref() is None
    acc.empty_cache()   # settles deferred releases: the graph holds it
    gate = driver.stall(stream)
    with stream:
        graph.replay()
    del graph           # the replay is queued: the module must wait
    acc.Buffer(256).close()   # settles deferred releases without waiting
    gate.open()
    stream.synchronize()
    acc.empty_cache()
    assert (download(data, np.uint32, n) == 1).all()


def test_a_graph_keeps_the_modules_launched_on_a_joined_stream(
        code: bytes, facts: type[fake_drivers.DriverDouble],
        driver: fake_drivers.DriverDouble) -> None:
    """A launch on a stream that joined the capture (it waited for an
    event recorded on the capturing stream) is captured too: the graph
    keeps its module, or each replay launches a kernel of an unloaded
    module (the double's kernel_misuse detector counts it)."""
    if not facts.has("graphs"):
        pytest.skip(facts.lacks["graphs"])
    if not facts.has("capture_events"):
        pytest.skip(facts.lacks["capture_events"])
    assert "kernel_misuse" in facts.live_kinds
    n = 256
    stream, side, third = acc.Stream(0), acc.Stream(0), acc.Stream(0)
    data = upload(np.zeros(n, np.uint32), stream)
    first, second = acc.Module(code), acc.Module(code)
    stream.synchronize()
    graph = acc.Graph()
    with stream:
        graph.capture_begin()
        side.wait_event(stream.record_event())   # side joins the capture
        acc.launch(first.get_kernel("add_one"), blocks(n, 64), 64, data,
                   np.uint32(n), stream=side)
        third.wait_event(side.record_event())    # and through it, third
        acc.launch(second.get_kernel("add_one"), blocks(n, 64), 64, data,
                   np.uint32(n), stream=third)
        stream.wait_event(side.record_event())   # both joined back
        stream.wait_event(third.record_event())
        graph.capture_end()
    refs = [weakref.ref(first), weakref.ref(second)]
    del first, second
    assert [r() for r in refs] == [None, None]
    acc.empty_cache()   # settles deferred releases: the graph holds both
    for _ in range(2):
        with stream:
            graph.replay()
        stream.synchronize()
    assert driver.live("kernel_misuse") == 0
    assert (download(data, np.uint32, n) == 4).all()
    del graph
    acc.empty_cache()


def test_threads_launch_one_kernel_at_once(module: acc.Module) -> None:
    n, rounds = 256, 20
    add_one = module.get_kernel("add_one")
    errors: list[BaseException] = []
    results: list[np.ndarray] = []

    def work() -> None:
        try:
            stream = acc.Stream(0)
            data = upload(np.zeros(n, np.uint32), stream)
            for _ in range(rounds):
                acc.launch(add_one, blocks(n, 64), 64, data, np.uint32(n),
                           stream=stream)
            out = np.empty(n, np.uint32)
            data.copy_to(out, stream=stream)
            results.append(out)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4 and all((r == rounds).all() for r in results)


# Lifetime -------------------------------------------------------------------


def test_memory_closed_during_a_launch_is_not_reused_before_it_ends(
        module: acc.Module, driver: fake_drivers.DriverDouble) -> None:
    n = 1024
    stream, other = acc.Stream(0), acc.Stream(0)
    # The memory is ordered on `other`; the launch uses it on `stream`,
    # which only the launch's record of that use tells the allocator.
    used = upload(np.zeros(n, np.uint32), other)
    other.synchronize()
    gate = driver.stall(stream)
    acc.launch(module.get_kernel("add_one"), blocks(n, 64), 64, used,
               np.uint32(n), stream=stream)
    used.close()
    fresh = acc.Buffer(4 * n, stream=other)
    fresh.fill(0x11, stream=other)
    other.synchronize()
    gate.open()
    stream.synchronize()
    assert download(fresh, np.uint8, 4 * n).tobytes() == b"\x11" * (4 * n)


def test_a_module_dropped_during_its_launch_lives_until_it_ends(
        code: bytes, driver: fake_drivers.DriverDouble) -> None:
    n = 256
    stream = acc.Stream(0)
    data = upload(np.zeros(n, np.uint32), stream)
    stream.synchronize()
    module = acc.Module(code)
    kernel = module.get_kernel("add_one")
    gate = driver.stall(stream)
    acc.launch(kernel, blocks(n, 64), 64, data, np.uint32(n), stream=stream)
    module_ref = weakref.ref(module)
    del module, kernel
    assert module_ref() is None, "a Module is freed with its last reference"
    acc.Buffer(256).close()   # settles deferred releases: this one waits
    gate.open()
    stream.synchronize()
    acc.empty_cache()
    assert (download(data, np.uint32, n) == 1).all()


# Dropping a Module at the bound of deferred releases waits for the oldest
# one: with the GIL released (the drop waits for the device).  The child
# fills the bound (1024 releases of page-locked memory whose copies wait
# behind a gate), then drops a Module whose launch is queued behind it;
# another thread opens the gate once the drop waits in the driver.  With
# the GIL held there, that thread never runs and the child hangs: the
# parent's timeout says so.
DROP_AT_THE_BOUND = """
import sys, threading, time
import numpy as np
import accelerator as acc
import fake_drivers
facts = fake_drivers.under_test()
driver = facts()
code = open(sys.argv[1], "rb").read()
side = acc.Stream(0)
data = acc.Buffer(4, stream=side)
side.synchronize()
gate = driver.stall(side)
for _ in range(1024):                # the bound: no wait yet
    h = acc.HostBuffer(4)
    data.copy_from(h, stream=side)
    h.close()
module = acc.Module(code)
acc.launch(module.get_kernel("add_one"), 1, 1, data, np.uint32(1),
           stream=side)
sync = facts.functions["event_synchronize"]
hold = driver.hold(sync, timeout=20)
seen = []

def opener():
    while driver.held(sync) == 0:    # the drop waits in the driver
        time.sleep(0.01)
    seen.append(1)
    hold.open()
    gate.open()

thread = threading.Thread(target=opener)
thread.start()
del module                           # 1025 releases: waits for the oldest
thread.join()
side.synchronize()
assert seen == [1] and driver.hold_expired(sync) == 0
print("ok")
"""


def test_a_module_dropped_at_the_bound_of_releases_lets_threads_run(
        code: bytes, tmp_path: Path) -> None:
    path = tmp_path / "code.bin"
    path.write_bytes(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(DROP_AT_THE_BOUND),
             str(path)], env=env, capture_output=True, text=True,
            timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("dropping a Module at the bound of deferred releases "
                    "hung: it waited for the device with the GIL held")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"


# The objects -----------------------------------------------------------------


def test_module_and_kernel_describe_themselves(
        module: acc.Module, facts: type[fake_drivers.DriverDouble]) -> None:
    assert module.device == 0
    assert module.format == facts.kernel_format
    assert facts.kernel_format in repr(module)
    kernel = module.get_kernel("saxpy")
    assert kernel.name == "saxpy" and "saxpy" in repr(kernel)
    assert kernel.module is module
    again = module.get_kernel("saxpy")
    assert again == kernel and hash(again) == hash(kernel)
    assert kernel != module.get_kernel("add_one") and kernel != "saxpy"
    attributes = kernel.attributes
    assert set(attributes) == {
        "max_threads_per_block", "shared_memory_bytes", "local_memory_bytes",
        "registers", "max_dynamic_shared_memory_bytes", "num_args"}
    assert attributes["num_args"] in (None, 4)
    assert attributes["max_threads_per_block"] is None or (
        attributes["max_threads_per_block"] >= 64)
    with pytest.raises(TypeError, match="cannot create 'accelerator.Kernel' "
                       "instances"):
        acc.Kernel()


def test_code_dict_takes_the_backend_entry(
        code: bytes, accel_type: str, driver: fake_drivers.DriverDouble
) -> None:
    module = acc.Module({"elsewhere": b"junk", accel_type: code})
    assert module.get_kernel("add_one").name == "add_one"
    with pytest.raises(ValueError, match="no entry for device type"):
        acc.Module({"elsewhere": code})


def test_from_file_reads_code(
        code: bytes, tmp_path: Path,
        facts: type[fake_drivers.DriverDouble]) -> None:
    path = tmp_path / ("kernels" + SUFFIX[facts.kernel_format])
    path.write_bytes(code)
    module = acc.Module.from_file(path, device=1)
    assert module.device == 1 and module.format == facts.kernel_format
    with pytest.raises(FileNotFoundError):
        acc.Module.from_file(tmp_path / "missing.cl")


def test_build_options_reach_the_driver(
        module: acc.Module, code: bytes) -> None:
    assert acc.Module(code, options=[]).format == module.format
    with pytest.raises(TypeError, match="options"):
        acc.Module(code, options=3)
    with pytest.raises(TypeError, match="only str"):
        acc.Module(code, options=["-O2", 3])


@pytest.mark.parametrize("options, index", [
    ("\0-O3", 0),                 # not "no options" where none are taken
    ("-DN=1\0-O3", 5),            # not truncated to "-DN=1"
    (["-DÄ=1", "\0"], 6),         # joined; counted in characters
])
def test_a_nul_in_the_options_is_refused_saying_where(
        code: bytes, driver: fake_drivers.DriverDouble, options: object,
        index: int) -> None:
    with pytest.raises(ValueError, match=f"build options hold a NUL "
                       f"character at index {index},"):
        acc.Module(code, options=options)


def test_from_file_takes_paths_not_file_descriptors(
        code: bytes, tmp_path: Path,
        facts: type[fake_drivers.DriverDouble]) -> None:
    path = tmp_path / ("kernels" + SUFFIX[facts.kernel_format])
    path.write_bytes(code)
    fd = os.open(path, os.O_RDONLY)
    try:
        for fmt in (None, facts.kernel_format):
            with pytest.raises(TypeError, match="path must be a str, bytes "
                               "or os.PathLike, not int"):
                acc.Module.from_file(fd, format=fmt)
        os.fstat(fd)   # still open: the descriptor is the caller's
    finally:
        os.close(fd)
    assert acc.Module.from_file(os.fsencode(path)).format == \
        facts.kernel_format


# Bad input ------------------------------------------------------------------


def test_unknown_kernel_name_lists_the_module_s_kernels(
        module: acc.Module) -> None:
    with pytest.raises(KeyError, match="no kernel named 'nope'") as info:
        module.get_kernel("nope")
    assert "saxpy" in str(info.value) or "its kernels" not in str(info.value)
    with pytest.raises(TypeError, match="str"):
        module.get_kernel(3)


@pytest.mark.parametrize("grid, block, error, match", [
    (0, 64, ValueError, r"grid\[0\] \(x\) is 0"),
    (-1, 64, ValueError, r"grid\[0\] \(x\) is -1"),
    (1, 0, ValueError, r"block\[0\] \(x\) is 0"),
    (1, (64, -2), ValueError, r"block\[1\] \(y\) is -2"),
    ((1, 1, 1, 1), 64, ValueError, "4 dimensions"),
    ((), 64, ValueError, "0 dimensions"),
    (1, 1 << 40, ValueError, r"block\[0\] \(x\) is 1099511627776 threads, "
     r"beyond the (device's )?limit of [1-9]"),
    # Beyond 64 bits: the value as given, not one it was clamped to.
    (1 << 70, 64, ValueError, r"grid\[0\] \(x\) is 1180591620717411303424 "
     r"blocks, beyond the (device's )?limit of [1-9]"),
    (1, (1, 1 << 70), ValueError, r"block\[1\] \(y\) is "
     r"1180591620717411303424 threads, beyond"),
    ((1, -(1 << 70)), 64, ValueError, r"grid\[1\] \(y\) is "
     r"-1180591620717411303424, expected a positive"),
    (1.5, 64, TypeError, "grid must be an int"),
    (True, 64, TypeError, "grid must be an int"),
    ((1, "2"), 64, TypeError, r"grid\[1\] must be an int"),
])
def test_bad_geometry_is_refused(
        module: acc.Module, grid: object, block: object,
        error: type[Exception], match: str) -> None:
    data = upload(np.zeros(64, np.uint32))
    with pytest.raises(error, match=match):
        acc.launch(module.get_kernel("add_one"), grid, block, data,
                   np.uint32(64))
    assert not download(data, np.uint32, 64).any()


def test_blocks_beyond_the_kernel_s_limit_are_refused(
        module: acc.Module) -> None:
    kernel = module.get_kernel("add_one")
    limit = kernel.attributes["max_threads_per_block"]
    if limit is None:
        pytest.skip("the driver tells no limit on threads per block")
    data = upload(np.zeros(64, np.uint32))
    with pytest.raises(ValueError, match="beyond"):
        acc.launch(kernel, 1, (limit, 2), data, np.uint32(64))


@pytest.mark.parametrize("shared_mem", [(1 << 64) - 1, 1 << 64, 1 << 200])
def test_shared_memory_beyond_the_limit_is_refused_naming_both(
        module: acc.Module, shared_mem: int) -> None:
    kernel = module.get_kernel("add_one")
    limit = kernel.attributes["max_dynamic_shared_memory_bytes"]
    data = upload(np.zeros(64, np.uint32))
    with pytest.raises(ValueError, match=f"shared_mem is {shared_mem} "
                       "bytes, beyond") as info:
        acc.launch(kernel, 1, 64, data, np.uint32(64), shared_mem=shared_mem)
    if limit is not None:
        assert f"beyond the {limit} " in str(info.value), info.value
    assert not download(data, np.uint32, 64).any()


def test_wrong_argument_count_is_refused(module: acc.Module) -> None:
    kernel = module.get_kernel("add_one")
    if kernel.attributes["num_args"] is None:
        pytest.skip("the driver does not tell the argument count")
    data = upload(np.zeros(64, np.uint32))
    with pytest.raises(ValueError, match="takes 2 arguments, got 1"):
        acc.launch(kernel, 1, 64, data)
    with pytest.raises(ValueError, match="takes 2 arguments, got 3"):
        acc.launch(kernel, 1, 64, data, np.uint32(64), np.uint32(1))


@pytest.mark.parametrize("arg, match", [
    ("text", "got str"),
    (np.zeros(4, np.uint32), "1 dimension"),
    (True, "bool"),
    (None, "NoneType"),
])
def test_arguments_that_cannot_pass_are_refused(
        module: acc.Module, arg: object, match: str) -> None:
    data = upload(np.zeros(64, np.uint32))
    with pytest.raises(TypeError, match=match):
        acc.launch(module.get_kernel("add_one"), 1, 64, data, arg)


def test_a_module_without_kernels_lists_none(
        code: bytes, facts: type[fake_drivers.DriverDouble]) -> None:
    # PoCL tells a 1-byte list of an empty program's kernel names and
    # writes none of it: the message showed a byte of uninitialised heap.
    empty = acc.Module(kernel_code.without_kernels(facts.kernel_format),
                       format=facts.kernel_format)
    for _ in range(4):
        with pytest.raises(KeyError) as info:
            empty.get_kernel("saxpy")
        assert info.value.args[0] == "the module has no kernel named 'saxpy'"


def test_launch_needs_a_kernel_and_known_keywords(module: acc.Module) -> None:
    data = upload(np.zeros(64, np.uint32))
    with pytest.raises(TypeError, match="at least 3"):
        acc.launch(module.get_kernel("add_one"), 1)
    with pytest.raises(TypeError, match="Kernel"):
        acc.launch("add_one", 1, 64, data, np.uint32(64))
    with pytest.raises(TypeError):
        acc.launch(module.get_kernel("add_one"), 1, 64, data, np.uint32(64),
                   grid=3)
    with pytest.raises(ValueError):
        acc.launch(module.get_kernel("add_one"), 1, 64, data, np.uint32(64),
                   shared_mem=-1)


def test_memory_of_another_device_is_refused(
        module: acc.Module, two_devices: None) -> None:
    other = acc.Buffer(256, 1)
    with pytest.raises(ValueError, match="memory of device 1, expected "
                       "memory of device 0"):
        acc.launch(module.get_kernel("add_one"), 1, 64, other,
                   np.uint32(64))
    with pytest.raises(ValueError, match="stream is on device 1"):
        acc.launch(module.get_kernel("add_one"), 1, 64,
                   upload(np.zeros(64, np.uint32)), np.uint32(64),
                   stream=acc.Stream(1))


def test_a_closed_buffer_is_refused(module: acc.Module) -> None:
    data = upload(np.zeros(64, np.uint32))
    data.close()
    with pytest.raises(ValueError, match="closed"):
        acc.launch(module.get_kernel("add_one"), 1, 64, data, np.uint32(64))


def test_code_of_another_backend_is_refused(
        code: bytes, facts: type[fake_drivers.DriverDouble],
        driver: fake_drivers.DriverDouble) -> None:
    foreign = (kernel_code.OPENCL_C if facts.kernel_format != "opencl-c"
               and not facts.opencl_c_through_spirv
               else kernel_code.PTX_SAMPLE)
    with pytest.raises(ValueError, match="another backend"):
        acc.Module(foreign)
    with pytest.raises(ValueError, match="unknown format 'cuda'"):
        acc.Module(foreign, format="cuda")
    with pytest.raises(ValueError, match="the code is not "
                       + facts.kernel_format):
        acc.Module(b"\x00\x01binary" * 8, format=facts.kernel_format)
    with pytest.raises(ValueError, match="empty"):
        acc.Module(b"")
    with pytest.raises(TypeError, match="code must be"):
        acc.Module(42)


#: PTX whose first .entry follows over 64 KiB of data, after comments
PTX_WITH_A_TABLE = (
    "//\n// a table before the first entry\n/* one of 3000 rows */\n"
    ".version 7.0\n.target sm_50\n.address_size 64\n\n"
    + "".join(f".global .u32 table{i}[4] = {{1, 2, 3, 4}};\n"
              for i in range(3000))
    + ".visible .entry empty()\n{\n    ret;\n}\n")

#: OpenCL C that mentions PTX's words (.version, .func, .entry)
OPENCL_C_WITH_PTX_WORDS = r"""
typedef struct { uint version; uint func; } tag;   /* t.version, t.func */
__kernel void tagged(__global uint *out, uint n)
{
    tag t;
    t.version = n;          /* .version 7.0 */
    t.func = n + 1;         /* .entry, .func */
    out[0] = t.version + t.func;
}
"""


def test_ptx_is_recognised_by_its_leading_directives(
        driver: fake_drivers.DriverDouble) -> None:
    assert len(PTX_WITH_A_TABLE) > 65536
    try:
        module = acc.Module(PTX_WITH_A_TABLE)
    except ValueError as e:
        assert "cannot load ptx code" in str(e), e
    else:
        assert module.format == "ptx"
        assert module.get_kernel("empty").name == "empty"


def test_text_that_only_mentions_ptx_words_is_opencl_c(
        facts: type[fake_drivers.DriverDouble],
        driver: fake_drivers.DriverDouble) -> None:
    if facts.opencl_c_through_spirv:
        assert acc.Module(OPENCL_C_WITH_PTX_WORDS).format == "opencl-c"
        return
    if facts.kernel_format != "opencl-c":
        with pytest.raises(ValueError, match="cannot load opencl-c code"):
            acc.Module(OPENCL_C_WITH_PTX_WORDS)
        return
    module = acc.Module(OPENCL_C_WITH_PTX_WORDS)
    assert module.format == "opencl-c"
    out = upload(np.zeros(1, np.uint32))
    acc.launch(module.get_kernel("tagged"), 1, 1, out, np.uint32(20))
    assert download(out, np.uint32, 1)[0] == 41


#: a kernel that writes the addresses it is given, in each test format
ADDRESS_OF = {
    "opencl-c": r"""
__kernel void address_of(__global ulong *out, __global uchar *a,
                         __global uchar *b)
{
    out[0] = (ulong)a;
    out[1] = (ulong)b;
}
""",
    "native": r"""
#include <stdint.h>
#include "native_kernel.h"

static void
address_of(const native_block *b, void *const *args)
{
    uint64_t *out = *(uint64_t **)args[0];

    (void)b;
    out[0] = (uint64_t)(uintptr_t)*(void **)args[1];
    out[1] = (uint64_t)(uintptr_t)*(void **)args[2];
}

static const native_param params[] = {
    {NATIVE_PARAM_POINTER, 8}, {NATIVE_PARAM_POINTER, 8},
    {NATIVE_PARAM_POINTER, 8}};

const native_kernel accelerator_native_kernels[] = {
    {"address_of", address_of, 3, params, 0, 0},
    {0, 0, 0, 0, 0, 0},
};
""",
}


def test_an_empty_host_buffer_passes_what_its_ptr_says(
        code: bytes, facts: type[fake_drivers.DriverDouble]) -> None:
    source = ADDRESS_OF[facts.kernel_format]
    module = acc.Module(kernel_code.native(source)
                        if facts.kernel_format == "native" else source)
    empty, full = acc.HostBuffer(0), acc.HostBuffer(64)
    out = upload(np.full(2, 7, np.uint64))
    acc.launch(module.get_kernel("address_of"), 1, 1, out, empty, full)
    assert empty.ptr == 0
    assert download(out, np.uint64, 2).tolist() == [empty.ptr, full.ptr]


def test_a_build_error_carries_the_driver_s_log(
        code: bytes, facts: type[fake_drivers.DriverDouble],
        driver: fake_drivers.DriverDouble) -> None:
    broken = kernel_code.broken(facts.kernel_format)
    if broken is None:
        pytest.skip(f"{facts.kernel_format} code is not built by the driver")
    with pytest.raises(acc.BuildError) as info:
        acc.Module(broken)
    assert isinstance(info.value, acc.AcceleratorError)
    assert info.value.log and info.value.log in str(info.value)


MALFORMED_TABLE = """
#include "native_kernel.h"

static void
f(const native_block *b, void *const *args)
{
    (void)b;
    (void)args;
}

static const native_param params[] = {{NATIVE_PARAM_POINTER, 8}};

const native_kernel accelerator_native_kernels[] = {
    {"f", f, %s, %s, 0, 0},
    {0, 0, 0, 0, 0, 0},
};
"""


@pytest.mark.parametrize("nparams, params", [("-1", "params"), ("2", "0")])
def test_a_native_table_that_lies_is_not_an_image(
        code: bytes, facts: type[fake_drivers.DriverDouble], nparams: str,
        params: str) -> None:
    # A negative count loaded as a kernel of no parameters; a count with
    # no parameter array made the doubles read through NULL (a crash).
    if facts.kernel_format != "native":
        pytest.skip("the backend's kernels are not native objects")
    image = kernel_code.native(MALFORMED_TABLE % (nparams, params))
    with pytest.raises(acc.AcceleratorError, match="(?i)image|invalid"):
        acc.Module(image)
