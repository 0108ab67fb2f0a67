"""PyTorch's own accelerator tests, adapted to this package.

Source: pytorch/pytorch test/test_accelerator.py at commit 006a1148 (the
newest stored version), every test in its order and with its name, then the
generic stream/event cases of test/test_cuda.py.

Adaptation rules (the only changes made):

1. ``torch.accelerator.X``, ``torch.Stream``, ``torch.Event`` and
   ``torch.device`` become ``accelerator.X``, ``accelerator.Stream``,
   ``accelerator.Event`` and ``accelerator.device``.
2. A device tensor becomes a ``Buffer`` of the same number of bytes, a host
   tensor a numpy array (``HostBuffer`` where torch pins memory); a copy
   (``.to(...)``, ``.cpu()``) becomes ``copy_from``/``copy_to`` on the same
   stream with the same blocking.  This package runs no kernels, so
   arithmetic torch does on the device is done on the host, on the bytes
   copied back.
3. A dtype becomes its name (``torch.float16`` is ``"float16"``).
4. unittest's assertions become ``assert`` and ``pytest.raises`` with the
   same exception types and message patterns; ``skipIf(not
   TEST_MULTIACCELERATOR)`` becomes the ``two_devices`` fixture and the
   device type of ``instantiate_device_type_tests`` the ``accel_type``
   fixture.
5. A test that needs what only torch has is left out, not kept as an
   empty skipped test; these six, with the reason:

   - ``test_device_index_fullgraph``: torch.compile(fullgraph=True) over
     ``device_index``; there is no compiler here.
   - ``test_pin_memory_on_non_blocking_copy``: ``Tensor.to('cpu',
     non_blocking=True)`` picks pinned memory itself; here the caller
     picks a ``HostBuffer``, so nothing chooses for it.
   - ``test_custom_pin_memory_device_argument``,
     ``test_custom_pin_memory_device_varargs``,
     ``test_custom_pin_memory_legacy_no_argument`` and
     ``test_custom_pin_memory_unrelated_optional_argument``:
     torch.utils.data's ``pin_memory`` helper, a DataLoader detail.
"""
from __future__ import annotations

import gc
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import accelerator as acc

SRC = pathlib.Path(__file__).resolve().parents[2]
#: every dtype name torch has (``dir(torch)``'s dtypes), for rule 3
TORCH_DTYPES = frozenset({
    "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
    "int64", "float16", "bfloat16", "float32", "float64", "complex32",
    "complex64", "complex128", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4", "bits1x8",
    "bits2x4", "bits4x2", "bits8", "bits16", "int1", "int2", "int3", "int4",
    "int5", "int6", "int7", "uint1", "uint2", "uint3", "uint4", "uint5",
    "uint6", "uint7",
})


# test/test_accelerator.py ---------------------------------------------------


def test_current_accelerator(accel_type: str) -> None:
    assert acc.is_available()
    assert acc.current_accelerator().type == accel_type
    assert acc.current_accelerator().index is None
    with pytest.raises(ValueError,
                       match="doesn't match the current accelerator"):
        acc.set_device_index("cpu")


@pytest.mark.usefixtures("two_devices")
def test_generic_multi_device_behavior() -> None:
    orig_device = acc.current_device_index()
    target_device = (orig_device + 1) % acc.device_count()
    acc.set_device_index(target_device)
    assert target_device == acc.current_device_index()
    acc.set_device_index(orig_device)
    assert orig_device == acc.current_device_index()
    s1 = acc.Stream(target_device)
    acc.set_stream(s1)
    assert target_device == acc.current_device_index()
    acc.synchronize(orig_device)
    assert target_device == acc.current_device_index()


def test_generic_stream_behavior() -> None:
    s1 = acc.Stream()
    s2 = acc.Stream()
    acc.set_stream(s1)
    assert acc.current_stream() == s1
    event = acc.Event()
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1000, dtype=np.float32)
    b = rng.standard_normal(1000, dtype=np.float32)
    c = a + b
    acc.set_stream(s2)
    assert acc.current_stream() == s2
    # a.to(device, non_blocking=True): from pinned memory, on s2.
    a_host, b_host = acc.HostBuffer(a.nbytes), acc.HostBuffer(b.nbytes)
    np.frombuffer(a_host, np.float32)[:] = a
    np.frombuffer(b_host, np.float32)[:] = b
    a_acc, b_acc = acc.Buffer(a.nbytes), acc.Buffer(b.nbytes)
    a_acc.copy_from(a_host)
    b_acc.copy_from(b_host)
    acc.set_stream(s1)
    assert acc.current_stream() == s1
    event.record(s2)
    event.synchronize()
    # c_acc = a_acc + b_acc, on the host (rule 2).
    a_back, b_back = np.empty_like(a), np.empty_like(b)
    a_acc.copy_to(a_back, stream=s2)
    b_acc.copy_to(b_back, stream=s2)
    c_acc = a_back + b_back
    event.record(s2)
    acc.synchronize()
    assert event.query()
    assert np.array_equal(c_acc, c)


def test_current_stream_query() -> None:
    s = acc.current_stream()
    assert acc.current_stream(s.device) == s
    assert acc.current_stream(s.device.index) == s
    assert acc.current_stream(str(s.device)) == s
    other_device = acc.device("cpu")
    with pytest.raises(ValueError,
                       match="doesn't match the current accelerator"):
        acc.current_stream(other_device)


def test_stream_compare_with_non_stream() -> None:
    s1 = acc.Stream()
    for other in (42, "hello", 3.14, None, object()):
        assert not (s1 == other)
        assert s1 != other
    assert s1 in [1, "a", s1]
    s2 = acc.Stream()
    for compare in (lambda: s1 < s2, lambda: s1 <= s2, lambda: s1 > s2,
                    lambda: s1 >= s2):
        with pytest.raises(TypeError):
            compare()
    sid, di, dt = s1.stream_id, s1.device_index, s1.device_type
    same = acc.Stream(stream_id=sid, device_index=di, device_type=dt)
    assert s1 == same
    assert not (s1 != same)


def test_device_context_manager() -> None:
    prev_device = acc.current_device_index()
    with acc.device_index(None):
        assert acc.current_device_index() == prev_device
    assert acc.current_device_index() == prev_device
    with acc.device_index(0):
        assert acc.current_device_index() == 0
    assert acc.current_device_index() == prev_device


@pytest.mark.usefixtures("two_devices")
def test_multi_device_context_manager() -> None:
    src_device, dst_device = 0, 1
    acc.set_device_index(src_device)
    with acc.device_index(dst_device):
        assert acc.current_device_index() == dst_device
    assert acc.current_device_index() == src_device


def test_stream_context_manager() -> None:
    prev_stream = acc.current_stream()
    with acc.Stream() as s:
        assert acc.current_stream() == s
    assert acc.current_stream() == prev_stream


def test_stream_context_manager_reentrance() -> None:
    prev_stream = acc.current_stream()
    s0 = acc.Stream()
    with s0, s0:
        assert acc.current_stream() == s0
    assert acc.current_stream() == prev_stream
    s1 = acc.Stream()
    with s0:
        assert acc.current_stream() == s0
        with s1:
            assert acc.current_stream() == s1
            with s0:
                assert acc.current_stream() == s0
    assert acc.current_stream() == prev_stream


@pytest.mark.usefixtures("two_devices")
def test_multi_device_stream_context_manager() -> None:
    src_device, dst_device = 0, 1
    acc.set_device_index(src_device)
    src_prev_stream = acc.current_stream()
    dst_prev_stream = acc.current_stream(dst_device)
    with acc.Stream(dst_device) as dst_stream:
        assert acc.current_device_index() == dst_device
        assert acc.current_stream() == dst_stream
        assert acc.current_stream(src_device) == src_prev_stream
    assert acc.current_device_index() == src_device
    assert acc.current_stream() == src_prev_stream
    assert acc.current_stream(dst_device) == dst_prev_stream


def test_generic_event_behavior() -> None:
    event1 = acc.Event(enable_timing=False)
    event2 = acc.Event(enable_timing=False)
    with pytest.raises(ValueError, match="Both events must be created with "
                       "argument 'enable_timing=True'"):
        event1.elapsed_time(event2)
    event1 = acc.Event(enable_timing=True)
    event2 = acc.Event(enable_timing=True)
    with pytest.raises(ValueError, match="Both events must be recorded "
                       "before calculating elapsed time"):
        event1.elapsed_time(event2)
    # check default value of enable_timing: False
    event1 = acc.Event()
    event2 = acc.Event()
    with pytest.raises(ValueError, match="Both events must be created with "
                       "argument 'enable_timing=True'"):
        event1.elapsed_time(event2)


def test_empty_host_cache() -> None:
    # torch calls it before any allocation (pytorch#197561); this process
    # has allocated already, so a fresh one does it, then once more here.
    result = subprocess.run(
        [sys.executable, "-c", "import accelerator; "
         "accelerator.empty_host_cache(); print('ok')"],
        env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True,
        text=True, timeout=120)
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
    acc.empty_host_cache()


def test_memory_stats(accel_type: str) -> None:
    # Ensure that device allocator is initialized
    tmp = acc.Buffer(100 * 4)
    del tmp
    gc.collect()
    assert acc.memory_stats()  # _accelerator_isAllocatorInitialized()
    acc.empty_cache()

    pool_type = ["all", "small_pool", "large_pool"]
    metric_type = ["peak", "current", "allocated", "freed"]
    stats_type = ["allocated_bytes", "reserved_bytes", "active_bytes",
                  "requested_bytes"]
    mem_stats = acc.memory_stats()
    expected_stats = [f"{st}.{pt}.{mt}" for st in stats_type
                      for pt in pool_type for mt in metric_type]
    missing_stats = [stat for stat in expected_stats
                     if stat not in mem_stats]
    assert len(missing_stats) == 0, missing_stats

    prev_allocated = acc.memory_allocated()
    prev_reserved = acc.memory_reserved()
    prev_max_allocated = acc.max_memory_allocated()
    prev_max_reserved = acc.max_memory_reserved()
    assert prev_allocated >= 0
    assert prev_reserved >= 0
    assert prev_max_allocated > 0
    assert prev_max_reserved > 0
    tmp = acc.Buffer(256 * 4)
    assert acc.memory_allocated() > prev_allocated
    assert acc.memory_reserved() >= prev_reserved
    del tmp
    gc.collect()
    acc.empty_cache()
    acc.reset_peak_memory_stats()
    assert acc.memory_allocated() == prev_allocated
    assert acc.memory_reserved() == prev_reserved
    acc.reset_accumulated_memory_stats()
    prev_max_allocated = acc.max_memory_allocated()
    prev_max_reserved = acc.max_memory_reserved()
    # Activate 1kB memory
    prev_active_current = acc.memory_stats()["active_bytes.all.current"]
    tmp = acc.Buffer(256 * 4)
    # Detect if the current active memory is 1kB
    assert (acc.memory_stats()["active_bytes.all.current"]
            == 1024 + prev_active_current)
    assert acc.memory_stats()["active_bytes.all.freed"] == 0
    del tmp
    gc.collect()
    acc.empty_cache()
    assert (acc.memory_stats()["active_bytes.all.current"]
            == prev_active_current)
    assert acc.memory_stats()["active_bytes.all.freed"] == 1024
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == prev_max_allocated
    assert acc.max_memory_reserved() == prev_max_reserved


def test_get_memory_info() -> None:
    free_bytes, total_bytes = acc.get_memory_info()
    assert free_bytes >= 0
    assert total_bytes >= 0


def test_device_capability_supported_dtypes() -> None:
    # torch skips it on XPU for its own bit-field dtypes (pytorch#179888),
    # which do not exist here.
    caps = acc.get_device_capability()
    supported_dtypes = caps["supported_dtypes"]
    assert isinstance(supported_dtypes, set)
    assert len(supported_dtypes) > 0
    # Rule 3: the names are torch's.  Converting a tensor of each dtype to
    # another (torch.empty(...).to(dtype)) needs kernels, and a Buffer
    # holds bytes of any dtype: that half has nothing to translate to.
    assert supported_dtypes <= TORCH_DTYPES


# test/test_cuda.py: the generic stream and event cases ----------------------


def test_stream_compatibility(device_count: int) -> None:
    s1 = acc.Stream()
    acc.set_stream(s1)
    assert acc.current_stream().stream_id == s1.stream_id
    with pytest.raises(RuntimeError,
                       match="Device index value .* is out of index range"):
        acc.current_stream(device_count)


def test_generic_stream_event(accel_type: str) -> None:
    stream = acc.Stream(accel_type)
    assert stream.device_index == acc.current_device_index()
    cuda_stream = acc.Stream(stream_id=stream.stream_id,
                             device_index=stream.device_index,
                             device_type=stream.device_type)
    assert stream.stream_id == cuda_stream.stream_id
    assert isinstance(cuda_stream, acc.Stream)
    assert stream != acc.current_stream()
    event1 = acc.Event(accel_type, enable_timing=True)
    event2 = acc.Event(accel_type, enable_timing=True)
    assert event1.event_id == 0
    event1.record(stream)
    event2.record(stream)
    event2.synchronize()
    assert event2.query()
    assert event1.event_id != event2.event_id
    assert event1.elapsed_time(event2) >= 0


def test_events_elapsedtime(driver) -> None:
    start, end = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    stream = acc.current_stream()
    acc.set_device_index(0)
    start.record()
    driver.enqueue_sleep(stream, 20)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0
