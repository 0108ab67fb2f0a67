"""DLPack both ways: Buffer/HostBuffer.__dlpack__ and from_dlpack.

Device capsules are read through their fields (ctypes on the DLPack ABI);
host ones through numpy.  Capsules for from_dlpack are made here, over
device memory of a Buffer, with a deleter the test watches.
"""
from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import accelerator as acc

from test_memory import (  # noqa: F401 (autouse fixtures)
    _memory_supported, memory_checks, no_allocation_left)

pytestmark = pytest.mark.skipif(
    not _memory_supported(), reason="the backend has no device memory slots")


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


LEGACY_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor),
                            ("manager_ctx", ctypes.c_void_p),
                            ("deleter", LEGACY_DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


VERSIONED_DELETER = ctypes.CFUNCTYPE(
    None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p), ("deleter", VERSIONED_DELETER),
    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

api = ctypes.pythonapi
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_GetName.restype = ctypes.c_char_p
api.PyCapsule_GetName.argtypes = [ctypes.py_object]
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                              ctypes.c_void_p]


def tensor_of(capsule: object) -> tuple[str, object, DLTensor]:
    name = api.PyCapsule_GetName(capsule).decode()
    address = api.PyCapsule_GetPointer(capsule, name.encode())
    cls = DLManagedTensorVersioned if "versioned" in name \
        else DLManagedTensor
    managed = cls.from_address(address)
    return name, managed, managed.dl_tensor


# Export -------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [True, False])
def test_device_capsule_fields(driver, versioned: bool) -> None:
    b = acc.Buffer(4096, 1 if acc.device_count() > 1 else 0)
    assert b.__dlpack_device__() == (driver.dlpack_device_type,
                                     b.device.index)
    capsule = b.__dlpack__(max_version=(1, 0) if versioned else None)
    name, managed, t = tensor_of(capsule)
    assert name == ("dltensor_versioned" if versioned else "dltensor")
    if versioned:
        assert (managed.major, managed.minor) == (1, 0)
        assert managed.flags == 0
    assert t.data == b.ptr
    assert (t.device.device_type, t.device.device_id) == (
        driver.dlpack_device_type, b.device.index)
    assert t.ndim == 1
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (1, 8, 1)
    assert t.shape[0] == 4096 and t.strides[0] == 1
    assert t.byte_offset == 0
    with pytest.raises(BufferError, match="DLPack export"):
        b.close()
    del capsule, managed, t  # never consumed: the capsule frees it
    gc.collect()
    b.close()


def test_view_exports_its_range() -> None:
    b = acc.Buffer(100)
    capsule = b[10:30].__dlpack__()
    _, _, t = tensor_of(capsule)
    assert t.data == b.ptr + 10 and t.shape[0] == 20


def test_copy_true_exports_a_copy() -> None:
    b = acc.Buffer(64)
    b.fill(9)
    capsule = b.__dlpack__(max_version=(1, 1), copy=True)
    _, managed, t = tensor_of(capsule)
    assert managed.flags == 2  # IS_COPIED
    assert t.data != b.ptr
    copy = acc.from_dlpack(capsule)
    out = bytearray(64)
    copy.copy_to(out)
    assert out == b"\x09" * 64


def test_export_waits_for_the_work_on_the_current_stream(driver) -> None:
    producer, consumer = acc.Stream(0), acc.Stream(0)
    consumer.synchronize()
    b = acc.Buffer(64)
    with producer, driver.gate(producer) as gate:
        b.fill(3)
        b.__dlpack__(stream=consumer.handle)
        assert not consumer.query()  # waits for the fill behind the gate
        gate.open()
    consumer.synchronize()
    assert producer.query()


def test_export_with_stream_minus_one_does_not_wait(driver) -> None:
    producer, consumer = acc.Stream(0), acc.Stream(0)
    consumer.synchronize()  # a pooled stream may run an earlier owner's work
    b = acc.Buffer(64)
    with producer:
        driver.enqueue_sleep(producer, 100)
        b.__dlpack__(stream=-1)
    assert consumer.query()
    producer.synchronize()


def test_bad_export_arguments(facts) -> None:
    b = acc.Buffer(8)
    # 0 is refused (the array API standard), except where the protocol
    # names the default stream 0 (ROCm), which refuses others instead.
    for value in facts.dlpack_refused_streams or (0,):
        with pytest.raises(ValueError, match=f"stream {value}"):
            b.__dlpack__(stream=value)
    with pytest.raises(TypeError, match="int"):
        b.__dlpack__(stream="1")
    with pytest.raises(BufferError, match="cannot export"):
        b.__dlpack__(dl_device=(1, 0))
    with pytest.raises(TypeError, match="two ints"):
        b.__dlpack__(max_version=1)
    with pytest.raises(TypeError, match="copy"):
        b.__dlpack__(copy=1)
    # numpy's bool is named with its module ("got bool" read as nonsense).
    with pytest.raises(TypeError, match=r"a bool, got numpy\.bool"):
        b.__dlpack__(copy=np.True_)
    with pytest.raises(TypeError, match="unexpected keyword"):
        b.__dlpack__(steam=None)
    # Beyond 64 bits: refused with the value passed, never clamped to
    # 2**63 - 1 (which then went to the driver as a stream handle, or
    # named a device nobody asked for).
    for kwargs, value in (({"stream": 2**64}, 2**64),
                          ({"dl_device": (2**64, 0)}, 2**64),
                          ({"max_version": (1, -2**70)}, -2**70)):
        with pytest.raises(ValueError, match=rf"2\*\*63\), got {value}$"):
            b.__dlpack__(**kwargs)
    # numpy integers are ints here too, as for sizes and devices.
    device = b.__dlpack_device__()
    b.__dlpack__(stream=np.int64(-1),
                 dl_device=(np.int32(device[0]), np.int64(device[1])))
    b.close()
    with pytest.raises(ValueError, match="closed Buffer"):
        b.__dlpack__()


def test_host_buffer_to_numpy() -> None:
    h = acc.HostBuffer(16)
    assert h.__dlpack_device__() == (1, 0)
    memoryview(h)[:] = bytes(range(16))
    a = np.from_dlpack(h)
    assert a.dtype == np.uint8 and a.shape == (16,)
    assert a.tolist() == list(range(16))
    a[0] = 99  # shares the memory, writable
    assert memoryview(h)[0] == 99
    with pytest.raises(BufferError):
        h.close()
    del a
    gc.collect()
    h.close()


def test_host_buffer_export_waits_for_its_copies(driver) -> None:
    s = acc.Stream(0)
    b = acc.Buffer(32, stream=s)
    h = acc.HostBuffer(32)
    b.fill(7, stream=s)
    driver.enqueue_sleep(s, 150)
    b.copy_to(h, stream=s)
    a = np.from_dlpack(h)  # waits for the copy queued with h
    assert a.tolist() == [7] * 32


def test_host_buffer_bad_stream() -> None:
    h = acc.HostBuffer(8)
    with pytest.raises(ValueError, match="no stream"):
        h.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="cannot export"):
        h.__dlpack__(dl_device=(2, 0))
    capsule = h.__dlpack__(max_version=(1, 0), copy=True)
    _, managed, t = tensor_of(capsule)
    assert managed.flags == 2 and t.data != h.ptr


# Import -----------------------------------------------------------------------


class Made:
    """A DLPack tensor made here over some memory, in a capsule."""

    def __init__(self, ptr: int, shape: list[int], *, device: tuple,
                 versioned: bool = True, strides: list[int] | None = None,
                 flags: int = 0, major: int = 1, bits: int = 8,
                 offset: int = 0) -> None:
        self.deleted = 0
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides) \
            if strides else None
        cls = DLManagedTensorVersioned if versioned else DLManagedTensor
        self.managed = cls()
        t = self.managed.dl_tensor
        t.data = ptr
        t.device = DLDevice(*device)
        t.ndim = len(shape)
        t.dtype = DLDataType(1, bits, 1)
        t.shape = self.shape
        t.strides = self.strides
        t.byte_offset = offset
        deleter_type = VERSIONED_DELETER if versioned else LEGACY_DELETER

        def deleter(_: object) -> None:
            self.deleted += 1

        self.deleter = deleter_type(deleter)
        self.managed.deleter = self.deleter
        if versioned:
            self.managed.major, self.managed.minor = major, 0
            self.managed.flags = flags
        name = b"dltensor_versioned" if versioned else b"dltensor"
        self.capsule = api.PyCapsule_New(ctypes.addressof(self.managed),
                                         name, None)


@pytest.mark.parametrize("versioned", [True, False])
def test_from_dlpack_of_a_capsule_made_here(driver, versioned) -> None:
    b = acc.Buffer(256)
    b.fill(0)
    made = Made(b.ptr, [4, 8], device=(driver.dlpack_device_type, 0),
                versioned=versioned, bits=64 if versioned else 8,
                offset=0)
    wrapped = acc.from_dlpack(made.capsule)
    size = 4 * 8 * (8 if versioned else 1)
    assert wrapped.nbytes == size and wrapped.ptr == b.ptr
    assert wrapped.device == b.device and wrapped.owner is made.capsule
    assert api.PyCapsule_GetName(made.capsule).startswith(b"used_")
    wrapped.fill(5)
    out = bytearray(256)
    b.copy_to(out)
    assert out == b"\x05" * size + bytes(256 - size)
    assert made.deleted == 0
    wrapped.close()  # closing the view frees nothing of the producer's
    assert made.deleted == 1
    with pytest.raises(ValueError, match="consumed once"):
        acc.from_dlpack(made.capsule)


def test_from_dlpack_keeps_the_producer(driver) -> None:
    b = acc.Buffer(64)
    wrapped = acc.from_dlpack(b)  # through __dlpack__ / __dlpack_device__
    assert wrapped.owner is b and wrapped.ptr == b.ptr
    del b
    gc.collect()
    wrapped.fill(1)  # b's memory is alive
    out = bytearray(64)
    wrapped.copy_to(out)
    assert out == b"\x01" * 64


def test_from_dlpack_byte_offset_and_strides(driver) -> None:
    b = acc.Buffer(64)
    made = Made(b.ptr, [2, 3], device=(driver.dlpack_device_type, 0),
                strides=[3, 1], offset=10)
    wrapped = acc.from_dlpack(made.capsule)
    assert wrapped.ptr == b.ptr + 10 and wrapped.nbytes == 6


def test_from_dlpack_refuses_what_it_cannot_wrap(driver) -> None:
    b = acc.Buffer(64)
    ours = (driver.dlpack_device_type, 0)
    cases = [
        (Made(b.ptr, [8], device=(1, 0)), BufferError, "device type"),
        (Made(b.ptr, [4, 4], device=ours, strides=[1, 4]), BufferError,
         "C-contiguous"),
        (Made(b.ptr, [8], device=ours, flags=1), BufferError, "read-only"),
        (Made(b.ptr, [8], device=ours, major=2), BufferError, "DLPack 2"),
        (Made(b.ptr, [8], device=ours, bits=4), BufferError, "whole number"),
        # A 0-bit element is no type: not an empty tensor of 8 elements.
        (Made(b.ptr, [8], device=ours, bits=0), BufferError,
         "0 bits.*not a whole number of bytes, at least one"),
        (Made(b.ptr, [8], device=(ours[0], 99)), acc.DeviceIndexError,
         "out of index range"),
        # The address itself, not a format string PyErr_Format cannot read.
        (Made(0x1234000, [8], device=ours), BufferError,
         "^from_dlpack\\(\\): 0x1234000 is not device memory"),
        # NULL is no memory on any backend (Level Zero's lookup failed
        # with an AcceleratorError instead).
        (Made(0, [8], device=ours), BufferError, " 0 is not device memory"),
        (Made(b.ptr, [-1], device=ours), BufferError, "negative"),
    ]
    for made, exc, text in cases:
        with pytest.raises(exc, match=text):
            acc.from_dlpack(made.capsule)
        # Not consumed: the capsule still owns its tensor.
        assert not api.PyCapsule_GetName(made.capsule).startswith(b"used_")
    with pytest.raises(TypeError, match="__dlpack__"):
        acc.from_dlpack(bytearray(8))
    with pytest.raises(BufferError, match="DLPack device type 1"):
        acc.from_dlpack(np.zeros(8, dtype=np.uint8))
    with pytest.raises(ValueError, match="capsule"):
        acc.from_dlpack(api.PyCapsule_New(1, b"something else", None))


def test_from_dlpack_of_empty(driver) -> None:
    made = Made(0, [0], device=(driver.dlpack_device_type, 0))
    wrapped = acc.from_dlpack(made.capsule)
    assert wrapped.nbytes == 0
    wrapped.copy_from(b"")


# Every byte a wrapper covers is memory the driver knows -----------------------


def allocation_of(driver, b: "acc.Buffer") -> tuple[int, int]:
    """(base, size) of the driver allocation that holds b (a segment of
    the caching allocator: what another library's suballocation sits in)."""
    kind, base, size = driver.mem_range(b.ptr)
    assert kind == 1 and base <= b.ptr < base + size, (kind, base, size)
    return base, size


def test_from_dlpack_takes_a_tensor_filling_its_allocation(driver) -> None:
    b = acc.Buffer(4096)
    base, size = allocation_of(driver, b)
    ours = (driver.dlpack_device_type, 0)
    made = Made(base, [size], device=ours)
    wrapped = acc.from_dlpack(made.capsule)
    assert (wrapped.ptr, wrapped.nbytes) == (base, size)
    wrapped.fill(7)  # every byte of the allocation, none beyond it
    out = bytearray(4096)
    b.copy_to(out)
    assert out == b"\x07" * 4096
    # A suballocation (torch's, CuPy's) reaching the allocation's end.
    tail = Made(base, [size - 512], device=ours, offset=512)
    assert acc.from_dlpack(tail.capsule).nbytes == size - 512
    # The same as 64-bit elements with C-contiguous strides.
    rows = Made(base, [2, size // 16], device=ours, bits=64,
                strides=[size // 16, 1])
    assert acc.from_dlpack(rows.capsule).nbytes == size


def test_from_dlpack_refuses_a_tensor_past_its_allocation(driver) -> None:
    b = acc.Buffer(4096)
    base, size = allocation_of(driver, b)
    ours = (driver.dlpack_device_type, 0)
    end = f"at most {size - 512} bytes from {base + 512:#x}"
    cases = [
        # One byte more than the allocation.
        (Made(base, [size + 1], device=ours),
         rf"{size + 1} bytes at {base:#x} run past the end .*\({size} "
         rf"bytes at {base:#x}\): expected at most {size} bytes"),
        # Its first byte inside, the last one past the end.
        (Made(base, [size - 511], device=ours, offset=512),
         rf"{size - 511} bytes at {base + 512:#x} run past .*{end}"),
        # The offset brings a fitting shape past the end.
        (Made(base, [2], device=ours, offset=size - 1),
         rf"2 bytes at {base + size - 1:#x} run past"),
        # Shapes whose product (times the element size) fits in 64 bits
        # but not in the allocation.
        (Made(base, [2**32, 2**31], device=ours), "run past the end"),
        (Made(base, [3, size // 8], device=ours, bits=64,
              strides=[size // 8, 1]), f"{3 * size} bytes at"),
    ]
    for made, text in cases:
        with pytest.raises(ValueError, match=text):
            acc.from_dlpack(made.capsule)
        assert not api.PyCapsule_GetName(made.capsule).startswith(b"used_")
        assert made.deleted == 0
    assert driver.live("bad_access") == 0


def test_from_dlpack_refuses_offsets_beyond_the_address_space(driver) -> None:
    b = acc.Buffer(4096)
    ours = (driver.dlpack_device_type, 0)
    # A "negative" offset: data + byte_offset wraps around to b.ptr, which
    # was taken as b's memory.
    wrapping = Made(b.ptr + 16, [16], device=ours, offset=2**64 - 16)
    with pytest.raises(ValueError, match=r"byte_offset 18446744073709551600 "
                       r"and 16 bytes .* address space"):
        acc.from_dlpack(wrapping.capsule)
    # The tensor's end beyond 2**64.
    past = Made(b.ptr, [2**24 - 1, 2**40], device=ours)
    with pytest.raises(ValueError, match="address space"):
        acc.from_dlpack(past.capsule)
    # One past the allocation's end is in none (the doubles' pointer
    # lookups said device memory there, and Level Zero's range lookup
    # then failed with an AcceleratorError).
    base, size = allocation_of(driver, b)
    with pytest.raises(BufferError, match="is not device memory"):
        acc.from_dlpack(Made(base, [1], device=ours, offset=size).capsule)
    # A huge offset inside the address space lands in no allocation.
    huge = Made(b.ptr, [8], device=ours, offset=2**62)
    with pytest.raises(BufferError, match="is not device memory"):
        acc.from_dlpack(huge.capsule)
    # Too large for 64 bits at all.
    with pytest.raises(BufferError, match="too large"):
        acc.from_dlpack(Made(b.ptr, [2**62], device=ours, bits=64).capsule)


# The producer's stream --------------------------------------------------------


class Producer:
    """An array of another library over a Buffer: records the stream
    each __dlpack__ call was given."""

    def __init__(self, buffer: "acc.Buffer") -> None:
        self.buffer = buffer
        self.streams: list[object] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.buffer.__dlpack_device__()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None,
                   copy=None):
        self.streams.append(stream)
        return self.buffer.__dlpack__(stream=stream, max_version=max_version)


def test_from_dlpack_passes_the_current_stream(facts) -> None:
    b = acc.Buffer(64)
    producer = Producer(b)
    s = acc.Stream(0)
    with s:
        acc.from_dlpack(producer)
    default = acc.current_stream(0)
    acc.from_dlpack(producer)
    if facts.dlpack_passes_stream:
        # torch's rule on CUDA and ROCm: the current stream's handle, the
        # protocol's value for a default stream whose handle is 0.
        expected = [s.handle, default.handle or facts.dlpack_default_stream]
    else:
        expected = [None, None]
    assert producer.streams == expected
