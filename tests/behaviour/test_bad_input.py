"""Bad input across the whole API: one table, the rules of docs/bad-input.md.

Each row is a call that must fail with the documented exception class
(exactly that class) and a message matching a regex that says what was
wrong.  None may crash, raise SystemError (or chain one), or be silently
accepted; after each, the thread's current device is unchanged and the API
still works.
"""
from __future__ import annotations

import copy
import os
import pathlib
import pickle
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import accelerator as acc
import fake_drivers

#: the facts of the backend under test (its double's class)
FACTS = fake_drivers.under_test()
#: the device type under test, and another one that is not it
T = FACTS.device_type
OTHER = next(t for t in fake_drivers.DOUBLES
             if t != T and t not in FACTS.device_type_aliases)


def n() -> int:
    return acc.device_count()


# Helpers: objects the table passes ---------------------------------------


class Duck:
    """Pretends to be a device: .type and .index, each may raise."""

    def __init__(self, type: Any = T, index: Any = 0) -> None:
        self._type, self._index = type, index

    @property
    def type(self) -> Any:
        if isinstance(self._type, BaseException):
            raise self._type
        return self._type

    @property
    def index(self) -> Any:
        if isinstance(self._index, BaseException):
            raise self._index
        return self._index


class TypeOnly:
    type = T


class Foreign:
    """A stream of another library (the CUDA stream protocol)."""

    def __init__(self, result: Any) -> None:
        self.result = result

    def __cuda_stream__(self) -> Any:
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def stream(device: int = 0) -> acc.Stream:
    return acc.Stream(device)


def recorded(device: int = 0, timing: bool = False) -> acc.Event:
    event = acc.Event(enable_timing=timing)
    event.record(acc.Stream(device))
    event.synchronize()
    return event


def unsafe_subclass(base: type) -> type:
    class Sub(base):  # type: ignore[misc, valid-type]
        def __new__(cls) -> Any:
            return object.__new__(cls)  # skips base.__new__
    return Sub


def exit_other() -> None:
    """b.__exit__() while a is the stream entered: refused, a unchanged."""
    a, b = acc.Stream(0), acc.Stream(0)
    with a:
        try:
            b.__exit__(None, None, None)
        finally:
            assert acc.current_stream() is a


def setattr_(obj: Any, name: str, value: Any) -> None:
    setattr(obj, name, value)


# The table ----------------------------------------------------------------

TE, VE, DIE = TypeError, ValueError, acc.DeviceIndexError
RE, NIE, AE = RuntimeError, NotImplementedError, AttributeError
DIGITS = "9" * 10
CUDA_ONLY = FACTS.has("cuda_stream_protocol")

#: (id, call, exception class, message regex, needs two devices)
CASES: list[tuple[str, Callable[[], Any], type, str, bool]] = [
    # Module functions: argument counts and keywords.
    ("is_available(1)", lambda: acc.is_available(1), TE,
     r"takes no arguments", False),
    ("device_count(None)", lambda: acc.device_count(None), TE,
     r"takes no arguments", False),
    ("current_accelerator(check=)", lambda: acc.current_accelerator(
        check=True), TE, r"'check' is an invalid keyword", False),
    ("current_accelerator(2 args)", lambda: acc.current_accelerator(
        True, False), TE, r"at most 1 argument", False),
    ("current_device_index(0)", lambda: acc.current_device_index(0), TE,
     r"takes no arguments", False),
    ("set_device_index()", lambda: acc.set_device_index(), TE,
     r"exactly one argument", False),
    ("set_device_index(0, 1)", lambda: acc.set_device_index(0, 1), TE,
     r"exactly one argument", False),
    ("set_device_index(device=)", lambda: acc.set_device_index(device=0),
     TE, r"takes no keyword arguments", False),
    ("synchronize(0, 1)", lambda: acc.synchronize(0, 1), TE,
     r"at most 1 argument \(2 given\)", False),
    ("synchronize(device=)", lambda: acc.synchronize(device=0), TE,
     r"takes no keyword arguments", False),
    ("current_stream(0, 0)", lambda: acc.current_stream(0, 0), TE,
     r"at most 1 argument", False),
    ("current_stream(device=)", lambda: acc.current_stream(device=0), TE,
     r"takes no keyword arguments", False),
    ("set_stream()", lambda: acc.set_stream(), TE,
     r"exactly one argument", False),
    ("set_stream(stream=)", lambda: acc.set_stream(stream=stream()), TE,
     r"takes no keyword arguments", False),
    ("get_memory_info(0, 1)", lambda: acc.get_memory_info(0, 1), TE,
     r"at most 1 argument", False),
    # Device arguments: types.
    ("set_device_index(True)", lambda: acc.set_device_index(True), TE,
     r"got bool", False),
    ("set_device_index(1.0)", lambda: acc.set_device_index(1.0), TE,
     r"expected a device.*got float", False),
    ("set_device_index(nan)", lambda: acc.set_device_index(float("nan")),
     TE, r"expected a device.*got float", False),
    ("set_device_index(b'cuda:0')", lambda: acc.set_device_index(
        f"{T}:0".encode()), TE, r"expected a device.*got bytes", False),
    ("set_device_index([0])", lambda: acc.set_device_index([0]), TE,
     r"expected a device.*got list", False),
    ("set_device_index(object())", lambda: acc.set_device_index(object()),
     TE, r"expected a device.*got object", False),
    ("synchronize(True)", lambda: acc.synchronize(True), TE, r"got bool",
     False),
    ("current_stream(False)", lambda: acc.current_stream(False), TE,
     r"got bool", False),
    ("current_stream(1.5)", lambda: acc.current_stream(1.5), TE,
     r"expected a device.*got float", False),
    ("get_device_properties(True)", lambda: acc.get_device_properties(
        True), TE, r"got bool", False),
    ("get_device_name(0j)", lambda: acc.get_device_name(0j), TE,
     r"expected a device.*got complex", False),
    # Device arguments: values.
    ("set_device_index(None)", lambda: acc.set_device_index(None), VE,
     r"Expected a device with a specified index or an integer, but got: "
     r"None", False),
    ("set_device_index(2**80)", lambda: acc.set_device_index(2**80), DIE,
     rf"Device index value {2**80} is out of index range \[0, \d+\)",
     False),
    ("set_device_index(count)", lambda: acc.set_device_index(n()), DIE,
     r"out of index range \[0, \d+\) of the \w+ backend", False),
    ("set_device_index('T')", lambda: acc.set_device_index(T), VE,
     r"Expected a device with a specified index", False),
    ("set_device_index(device(T))", lambda: acc.set_device_index(
        acc.device(T)), VE, r"Expected a device with a specified index",
     False),
    ("set_device_index('T:count')", lambda: acc.set_device_index(
        f"{T}:{n()}"), DIE, r"out of index range", False),
    ("synchronize(-1)", lambda: acc.synchronize(-1), DIE,
     r"Device index value -1 is out of index range", False),
    ("current_stream(2**63)", lambda: acc.current_stream(2**63), DIE,
     rf"value {2**63} is out of index range", False),
    ("current_stream(-2**70)", lambda: acc.current_stream(-2**70), DIE,
     rf"value {-2**70} is out of index range", False),
    ("synchronize(10**30)", lambda: acc.synchronize(10**30), DIE,
     rf"value {10**30} is out of index range", False),
    ("get_memory_info(-2**63 - 1)", lambda: acc.get_memory_info(
        -2**63 - 1), DIE, rf"value {-2**63 - 1} is out of index range",
     False),
    ("get_memory_info(count)", lambda: acc.get_memory_info(n()), DIE,
     r"out of index range", False),
    ("get_device_name(2**31)", lambda: acc.get_device_name(2**31), DIE,
     r"out of index range", False),
    ("get_device_properties('T:5')", lambda: acc.get_device_properties(
        f"{T}:{n() + 3}"), DIE, r"out of index range", False),
    # Device strings.
    ("'T:-1'", lambda: acc.set_device_index(f"{T}:-1"), VE,
     r"Invalid device string.*non-negative decimal index", False),
    ("'T:01'", lambda: acc.set_device_index(f"{T}:01"), VE,
     r"Invalid device string", False),
    ("'T:1 '", lambda: acc.set_device_index(f"{T}:1 "), VE,
     r"Invalid device string", False),
    ("'T:'", lambda: acc.set_device_index(f"{T}:"), VE,
     r"Invalid device string", False),
    ("'T:0:1'", lambda: acc.set_device_index(f"{T}:0:1"), VE,
     r"Invalid device string", False),
    ("'T:+1'", lambda: acc.set_device_index(f"{T}:+1"), VE,
     r"Invalid device string", False),
    ("'T:10 digits'", lambda: acc.set_device_index(f"{T}:{DIGITS}"), VE,
     r"Invalid device string", False),
    ("'T: 1'", lambda: acc.set_device_index(f"{T}: 1"), VE,
     r"Invalid device string", False),
    ("'TYPE:0' upper case", lambda: acc.set_device_index(f"{T.upper()}:0"),
     VE, r"Expected one of cpu, cuda, xpu.* device type at start of device "
     r"string", False),
    ("''", lambda: acc.set_device_index(""), VE, r"Expected one of",
     False),
    ("'gpu:0'", lambda: acc.set_device_index("gpu:0"), VE,
     r"Expected one of.*'gpu:0'", False),
    ("' T:0'", lambda: acc.set_device_index(f" {T}:0"), VE,
     r"Expected one of", False),
    ("'T\\0:0'", lambda: acc.set_device_index(f"{T}\0:0"), VE,
     r"Expected one of", False),
    ("'T:\\udc80' (lone surrogate)", lambda: acc.set_device_index(
        f"{T}:\udc80"), UnicodeEncodeError, r"surrogates not allowed",
     False),
    ("'cpu'", lambda: acc.set_device_index("cpu"), VE,
     rf"cpu doesn't match the current accelerator {T}", False),
    ("'OTHER:0'", lambda: acc.set_device_index(f"{OTHER}:0"), VE,
     rf"{OTHER} doesn't match the current accelerator {T}", False),
    ("device(OTHER, 0)", lambda: acc.set_device_index(acc.device(OTHER, 0)),
     VE, r"doesn't match the current accelerator", False),
    ("synchronize('cpu')", lambda: acc.synchronize("cpu"), VE,
     r"doesn't match", False),
    ("get_memory_info('meta')", lambda: acc.get_memory_info("meta"), VE,
     r"meta doesn't match", False),
    # Objects that pretend to be devices.
    ("duck: .type raises RuntimeError", lambda: acc.set_device_index(
        Duck(type=RuntimeError("boom in type"))), RE, r"boom in type",
     False),
    ("duck: .type raises AttributeError", lambda: acc.set_device_index(
        Duck(type=AttributeError("no"))), TE,
     r"expected a device.*\.type and \.index.*got Duck", False),
    ("duck: .type is an int", lambda: acc.set_device_index(Duck(type=5)),
     TE, r"device\.type must be a str, got int", False),
    ("duck: .index raises ValueError", lambda: acc.set_device_index(
        Duck(index=ValueError("boom in index"))), VE, r"boom in index",
     False),
    ("duck: no .index", lambda: acc.set_device_index(TypeOnly()), TE,
     r"TypeOnly has \.type but no \.index", False),
    ("duck: .index is a str", lambda: acc.set_device_index(Duck(index="0")),
     TE, r"device index must be an int or None, not str", False),
    ("duck: .index is a bool", lambda: acc.set_device_index(
        Duck(index=True)), TE, r"device index must be an int or None, not "
     r"bool", False),
    ("duck: .index is a float", lambda: acc.set_device_index(
        Duck(index=1.0)), TE, r"not float", False),
    ("duck: .index huge", lambda: acc.set_device_index(Duck(index=2**40)),
     VE, r"below 2\*\*31", False),
    ("duck: .index -5", lambda: acc.set_device_index(Duck(index=-5)), VE,
     r"-1 \(no index\) or a non-negative int", False),
    ("duck: .index None", lambda: acc.set_device_index(Duck(index=None)),
     VE, r"Expected a device with a specified index", False),
    ("duck: unknown .type", lambda: acc.set_device_index(Duck(type="tpu")),
     VE, r"tpu doesn't match the current accelerator", False),
    ("duck: .index out of range", lambda: acc.current_stream(
        Duck(index=n())), DIE, r"out of index range", False),
    # set_stream.
    ("set_stream(None)", lambda: acc.set_stream(None), TE,
     r"set_stream\(\) expected an accelerator\.Stream, got NoneType",
     False),
    ("set_stream(Event())", lambda: acc.set_stream(acc.Event()), TE,
     r"expected an accelerator\.Stream, got (accelerator\.)?Event", False),
    ("set_stream(0)", lambda: acc.set_stream(0), TE,
     r"expected an accelerator\.Stream, got int", False),
    # device().
    ("device()", lambda: acc.device(), TE,
     r"missing required argument 'type'", False),
    ("device(None)", lambda: acc.device(None), TE,
     r"device\(\) expects a device string.*got NoneType", False),
    ("device(1.5)", lambda: acc.device(1.5), TE, r"got float", False),
    ("device(True)", lambda: acc.device(True), TE, r"got bool", False),
    ("device(-1)", lambda: acc.device(-1), VE,
     r"Device index must not be negative", False),
    ("device(2**31)", lambda: acc.device(2**31), VE, r"below 2\*\*31",
     False),
    ("device(T, 1.5)", lambda: acc.device(T, 1.5), TE,
     r"device index must be an int or None, not float", False),
    ("device(T, True)", lambda: acc.device(T, True), TE, r"not bool",
     False),
    ("device(T, -2)", lambda: acc.device(T, -2), VE,
     r"-1 \(no index\) or a non-negative int.*-2", False),
    ("device(T, 2**40)", lambda: acc.device(T, 2**40), VE,
     r"below 2\*\*31", False),
    ("device('T:0', 1)", lambda: acc.device(f"{T}:0", 1), VE,
     r"must not include an index because index was passed explicitly",
     False),
    ("device(1, 2)", lambda: acc.device(1, 2), TE,
     r"takes no second argument", False),
    ("device('tpu')", lambda: acc.device("tpu"), VE,
     r"Expected one of .* device type", False),
    ("device('T', idx=1)", lambda: acc.device(T, idx=1), TE,
     r"'idx' is an invalid keyword", False),
    ("device('T', 0, 1)", lambda: acc.device(T, 0, 1), TE,
     r"at most 2 arguments", False),
    ("device(b'T')", lambda: acc.device(T.encode()), TE, r"got bytes",
     False),
    ("device < device", lambda: acc.device(T, 0) < acc.device(T, 1), TE,
     r"'<' not supported", False),
    ("device.__new__(int)", lambda: acc.device.__new__(int, T), TE,
     r"is not a subtype of accelerator\.device", False),
    ("device.type = ...", lambda: setattr_(acc.device(T), "type", "x"), AE,
     r"not writable", False),
    ("device_index('T:1')", lambda: acc.device_index(f"{T}:1").__enter__(),
     TE, r"device_index\(\) expects an int device index or None, got str",
     False),
    ("device_index(2**80)", lambda: acc.device_index(2**80).__enter__(),
     DIE, rf"value {2**80} is out of index range", False),
    ("device_index(-2**80)", lambda: acc.device_index(-2**80).__enter__(),
     DIE, rf"value {-2**80} is out of index range", False),
    ("device_index(True)", lambda: acc.device_index(True).__enter__(), TE,
     r"got bool", False),
    ("device_index(count)", lambda: acc.device_index(n()).__enter__(), DIE,
     r"out of index range", False),
    ("device_index()", lambda: acc.device_index(), TE,
     r"missing 1 required positional argument", False),
    # Stream().
    ("Stream(True)", lambda: acc.Stream(True), TE, r"got bool", False),
    ("Stream(0.0)", lambda: acc.Stream(0.0), TE, r"got float", False),
    ("Stream(count)", lambda: acc.Stream(n()), DIE, r"out of index range",
     False),
    ("Stream(-1)", lambda: acc.Stream(-1), DIE, r"value -1 is out of index",
     False),
    ("Stream(2**64)", lambda: acc.Stream(2**64), DIE,
     rf"value {2**64} is out of index", False),
    ("from_handle(0, device=2**70)", lambda: acc.Stream.from_handle(
        0, device=2**70), DIE, rf"value {2**70} is out of index", False),
    ("Stream('cpu')", lambda: acc.Stream("cpu"), VE, r"doesn't match",
     False),
    ("Stream('OTHER:0')", lambda: acc.Stream(f"{OTHER}:0"), VE,
     r"doesn't match", False),
    ("Stream(0, -1) positional priority", lambda: acc.Stream(0, -1), TE,
     r"at most 1 positional argument", False),
    ("Stream(devic=0)", lambda: acc.Stream(devic=0), TE,
     r"'devic' is an invalid keyword", False),
    ("Stream(priority=1)", lambda: acc.Stream(priority=1), VE,
     r"priority must be 0 \(normal\) or negative", False),
    ("Stream(priority=2**100)", lambda: acc.Stream(priority=2**100), VE,
     r"priority must be 0 \(normal\) or negative", False),
    ("Stream(priority=0.5)", lambda: acc.Stream(priority=0.5), TE,
     r"priority must be an int, not float", False),
    ("Stream(priority=None)", lambda: acc.Stream(priority=None), TE,
     r"priority must be an int, not NoneType", False),
    ("Stream(priority=True)", lambda: acc.Stream(priority=True), TE,
     r"priority must be an int, not bool", False),
    ("Stream.from_handle()", lambda: acc.Stream.from_handle(), TE,
     r"missing required argument 'handle'", False),
    ("from_handle('0x1')", lambda: acc.Stream.from_handle("0x1"), TE,
     r"expects an int handle or an object with __cuda_stream__\(\), got "
     r"str", False),
    ("from_handle(-1)", lambda: acc.Stream.from_handle(-1), VE,
     r"non-negative int that fits in a pointer, got -1", False),
    ("from_handle(2**64)", lambda: acc.Stream.from_handle(2**64), VE,
     r"non-negative int that fits in a pointer", False),
    ("from_handle(True)", lambda: acc.Stream.from_handle(True), TE,
     r"got bool", False),
    ("from_handle(0, device=count)", lambda: acc.Stream.from_handle(
        0, device=n()), DIE, r"out of index range", False),
    ("from_handle(0, devic=0)", lambda: acc.Stream.from_handle(
        0, devic=0), TE, r"'devic' is an invalid keyword", False),
    ("from_handle: __cuda_stream__ -> str", lambda: acc.Stream.from_handle(
        Foreign("x")), TE, r"must return a tuple \(version, handle\)"
     if CUDA_ONLY else r"is a CUDA stream", False),
    ("from_handle: 3-tuple", lambda: acc.Stream.from_handle(
        Foreign((0, 1, 2))), TE, r"must return a tuple"
     if CUDA_ONLY else r"is a CUDA stream", False),
    ("from_handle: version 1", lambda: acc.Stream.from_handle(
        Foreign((1, 0))), VE if CUDA_ONLY else TE,
     r"unsupported __cuda_stream__ protocol version 1"
     if CUDA_ONLY else r"is a CUDA stream", False),
    ("from_handle: version 2**70", lambda: acc.Stream.from_handle(
        Foreign((2**70, 0))), VE if CUDA_ONLY else TE,
     r"protocol version" if CUDA_ONLY else r"is a CUDA stream", False),
    ("from_handle: handle -1", lambda: acc.Stream.from_handle(
        Foreign((0, -1))), VE if CUDA_ONLY else TE,
     r"returned the handle -1" if CUDA_ONLY else r"is a CUDA stream",
     False),
    ("from_handle: handle 2**64", lambda: acc.Stream.from_handle(
        Foreign((0, 2**64))), VE if CUDA_ONLY else TE,
     r"non-negative int that fits" if CUDA_ONLY else r"is a CUDA stream",
     False),
    ("from_handle: __cuda_stream__ -> (False, 5)",
     lambda: acc.Stream.from_handle(Foreign((False, 5))), TE,
     r"\(version, handle\) of two ints \(not bools\), got \(False, 5\)"
     if CUDA_ONLY else r"is a CUDA stream", False),
    ("from_handle: __cuda_stream__ -> (0, True)",
     lambda: acc.Stream.from_handle(Foreign((0, True))), TE,
     r"of two ints \(not bools\), got \(0, True\)"
     if CUDA_ONLY else r"is a CUDA stream", False),
    ("from_handle: __cuda_stream__ raises", lambda: acc.Stream.from_handle(
        Foreign(RuntimeError("foreign boom"))), RE if CUDA_ONLY else TE,
     r"foreign boom" if CUDA_ONLY else r"is a CUDA stream", False),
    # Stream methods.
    ("stream.query(1)", lambda: stream().query(1), TE,
     r"takes no arguments", False),
    ("stream.synchronize(None)", lambda: stream().synchronize(None), TE,
     r"takes no arguments", False),
    ("stream.wait_event(None)", lambda: stream().wait_event(None), TE,
     r"wait_event\(\) expected an accelerator\.Event, got NoneType", False),
    ("stream.wait_event(stream)", lambda: stream().wait_event(stream()), TE,
     r"expected an accelerator\.Event, got (accelerator\.)?Stream", False),
    ("stream.wait_event()", lambda: stream().wait_event(), TE,
     r"takes exactly one argument", False),
    ("stream.wait_stream(None)", lambda: stream().wait_stream(None), TE,
     r"wait_stream\(\) expected an accelerator\.Stream, got NoneType",
     False),
    ("stream.wait_stream(Event())", lambda: stream().wait_stream(
        acc.Event()), TE, r"got (accelerator\.)?Event", False),
    ("stream.record_event(1)", lambda: stream().record_event(1), TE,
     r"record_event\(\) expected an accelerator\.Event, got int", False),
    ("stream.record_event(stream)", lambda: stream().record_event(
        stream()), TE, r"got (accelerator\.)?Stream", False),
    ("stream.record_event(ev=)", lambda: stream().record_event(
        ev=acc.Event()), TE, r"'ev' is an invalid keyword: "
     r"Stream\.record_event\(\) takes one optional argument, event", False),
    ("stream.record_event(e, e)", lambda: stream().record_event(
        acc.Event(), acc.Event()), TE, r"at most 1 argument \(2 given\)",
     False),
    ("stream(0).record_event(event of device 1)",
     lambda: stream(0).record_event(recorded(1)), VE,
     r"Event device index 1 does not match recording stream's device "
     r"index 0", True),
    ("stream.__exit__ without __enter__", lambda: stream().__exit__(
        None, None, None), RE, r"__exit__\(\) (without a matching "
     r"__enter__\(\)|of a Stream that is not the innermost)", False),
    ("other stream's __exit__ inside a with", lambda: exit_other(), RE,
     r"not the innermost one entered in this thread", False),
    ("pickle a stream", lambda: pickle.dumps(stream()), TE,
     r"cannot pickle (accelerator\.)?Stream objects", False),
    ("pickle the default stream", lambda: pickle.dumps(
        acc.current_stream()), TE, r"cannot pickle", False),
    ("copy.copy(stream)", lambda: copy.copy(stream()), TE,
     r"cannot pickle", False),
    ("copy.deepcopy(stream)", lambda: copy.deepcopy(stream()), TE,
     r"cannot pickle", False),
    ("stream < stream", lambda: stream() < stream(), TE,
     r"'<' not supported", False),
    ("stream.handle = 5", lambda: setattr_(stream(), "handle", 5), AE,
     r"not writable", False),
    ("Stream.__new__(Event)", lambda: acc.Stream.__new__(acc.Event), TE,
     r"accelerator\.Event is not a subtype of accelerator\.Stream", False),
    ("Stream.query(Event())", lambda: acc.Stream.query(acc.Event()), TE,
     r"descriptor 'query' for 'accelerator\.Stream' objects doesn't apply",
     False),
    ("Stream.device.__get__(Event())", lambda: acc.Stream.device.__get__(
        acc.Event()), TE, r"descriptor 'device' for 'accelerator\.Stream' "
     r"objects doesn't apply", False),
    ("Stream subclass skipping Stream.__new__", lambda: unsafe_subclass(
        acc.Stream)(), TE, r"object\.__new__\(Sub\) is not safe, use "
     r"accelerator\.Stream\.__new__\(\)", False),
    # Event().
    ("Event(True)", lambda: acc.Event(True), TE,
     r"expected a device or an int device index, got bool", False),
    ("Event(0, True)", lambda: acc.Event(0, True), TE,
     r"takes at most 1 positional argument", False),
    ("Stream(stream_id=0, device_index=0)", lambda: acc.Stream(
        stream_id=0, device_index=0), TE, r"takes stream_id, device_index "
     r"and device_type together", False),
    ("Stream(stream_id=True, ...)", lambda: acc.Stream(
        stream_id=True, device_index=0, device_type=1), TE,
     r"takes three ints, got bool, int and int", False),
    ("Event(enable_timing=1)", lambda: acc.Event(enable_timing=1), TE,
     r"enable_timing must be a bool, not int", False),
    ("Event(blocking=None)", lambda: acc.Event(blocking=None), TE,
     r"blocking must be a bool, not NoneType", False),
    ("Event(interprocess=True, enable_timing=True)", lambda: acc.Event(
        interprocess=True, enable_timing=True), ValueError,
     r"an interprocess event cannot measure time", False),
    ("Event(interprocess=1)", lambda: acc.Event(interprocess=1), TE,
     r"interprocess must be a bool, not int", False),
    ("Buffer.from_ipc_handle(3)", lambda: acc.Buffer.from_ipc_handle(3), TE,
     r"handle must be an accelerator\.IpcHandle or its bytes, not int",
     False),
    ("Event.from_ipc_handle(b'', fd=-2)",
     lambda: acc.Event.from_ipc_handle(b"", fd=-2), ValueError,
     r"fd must be an open file descriptor", False),
    ("Event(foo=True)", lambda: acc.Event(foo=True), TE,
     r"'foo' is an invalid keyword", False),
    ("Event subclass skipping Event.__new__", lambda: unsafe_subclass(
        acc.Event)(), TE, r"is not safe, use accelerator\.Event\.__new__",
     False),
    # Event methods.
    ("event.record(1)", lambda: acc.Event().record(1), TE,
     r"Event\.record\(\) expected an accelerator\.Stream or None, got int",
     False),
    ("event.record(event)", lambda: acc.Event().record(acc.Event()), TE,
     r"got (accelerator\.)?Event", False),
    ("event.record(s, s)", lambda: acc.Event().record(stream(), stream()),
     TE, r"at most 1 argument \(2 given\)", False),
    ("event.record(stream=, x=)", lambda: acc.Event().record(
        stream=stream(), x=1), TE, r"takes one optional argument, stream",
     False),
    ("event.record(strm=)", lambda: acc.Event().record(strm=stream()), TE,
     r"takes one optional argument, stream", False),
    ("event of device 0 .record(stream of device 1)",
     lambda: recorded(0).record(stream(1)), VE,
     r"Event device index 0 does not match recording stream's device "
     r"index 1", True),
    ("event.wait(1)", lambda: recorded().wait(1), TE,
     r"Event\.wait\(\) expected an accelerator\.Stream or None", False),
    ("event.wait(s, s)", lambda: acc.Event().wait(stream(), stream()), TE,
     r"at most 1 argument", False),
    ("event.query(1)", lambda: acc.Event().query(1), TE,
     r"takes no arguments", False),
    ("event.synchronize(1)", lambda: acc.Event().synchronize(1), TE,
     r"takes no arguments", False),
    ("event.elapsed_time()", lambda: acc.Event().elapsed_time(), TE,
     r"takes exactly one argument", False),
    ("event.elapsed_time(None)", lambda: acc.Event().elapsed_time(None), TE,
     r"elapsed_time\(\) expected an accelerator\.Event, got NoneType",
     False),
    ("event.elapsed_time(stream)", lambda: acc.Event().elapsed_time(
        stream()), TE, r"got (accelerator\.)?Stream", False),
    ("elapsed_time without timing", lambda: recorded().elapsed_time(
        recorded()), VE, r"enable_timing=True", False),
    ("elapsed_time of unrecorded events", lambda: acc.Event(
        enable_timing=True).elapsed_time(acc.Event(enable_timing=True)), VE,
     r"must be recorded before calculating elapsed time", False),
    ("elapsed_time across devices", lambda: recorded(0, True).elapsed_time(
        recorded(1, True)), VE, r"recorded on the same device", True),
    ("pickle an event", lambda: pickle.dumps(acc.Event()), TE,
     r"cannot pickle (accelerator\.)?Event objects", False),
    ("copy.copy(event)", lambda: copy.copy(recorded()), TE,
     r"cannot pickle", False),
    ("event.enable_timing = True", lambda: setattr_(
        acc.Event(), "enable_timing", True), AE, r"not writable", False),
    ("Event.record(Stream())", lambda: acc.Event.record(stream()), TE,
     r"descriptor 'record' for 'accelerator\.Event' objects doesn't apply",
     False),
    # The one argument parser (csrc/python/py_args.c): every call words a wrong
    # count or keyword the same way, saying what the callable takes.
    ("Buffer(4, nbytes=4)", lambda: acc.Buffer(4, nbytes=4), TE,
     r"^Buffer\(\) got an unexpected keyword argument 'nbytes': nbytes was "
     r"given by position already \(Buffer\(\) takes at most 3 arguments\)$",
     False),
    ("buffer.fill()", lambda: acc.Buffer(4).fill(), TE,
     r"^Buffer\.fill\(\) missing 1 required positional argument: 'value'$",
     False),
    ("buffer.copy_to(dst=)", lambda: acc.Buffer(4).copy_to(
        dst=acc.Buffer(4)), TE, r"'dst' is an invalid keyword: "
     r"Buffer\.copy_to\(\) takes the keyword stream\)$", False),
    ("buffer.__dlpack__(foo=)", lambda: acc.Buffer(4).__dlpack__(foo=1), TE,
     r"'foo' is an invalid keyword: Buffer\.__dlpack__\(\) takes the "
     r"keywords stream, max_version, dl_device and copy\)$", False),
    ("buffer.__dlpack__(None)", lambda: acc.Buffer(4).__dlpack__(None), TE,
     r"^Buffer\.__dlpack__\(\) takes no positional arguments \(1 given\)$",
     False),
    ("HostBuffer()", lambda: acc.HostBuffer(), TE,
     r"^HostBuffer\(\) missing required argument 'nbytes' \(pos 1\)$",
     False),
    ("Graph(x=)", lambda: acc.Graph(x=1), TE,
     r"'x' is an invalid keyword: Graph\(\) takes the keywords keep_graph "
     r"and pool\)$", False),
    ("device_index(device=)", lambda: acc.device_index(device=0), TE,
     r"^device_index\(\) takes no keyword arguments \(got 'device'\)$",
     False),
    ("memory fraction, three arguments", lambda: getattr(
        acc.memory, "_set_per_process_memory_fraction")(0.5, 0, 1), TE,
     r"set_per_process_memory_fraction\(\) takes at most 2 arguments "
     r"\(3 given\)$", False),
]

if not CUDA_ONLY:
    CASES.append(("__cuda_stream__ of a non-CUDA stream",
                  lambda: stream().__cuda_stream__(), TE,
                  r"only defined for CUDA streams", False))


def test_the_table_is_large_and_unique() -> None:
    ids = [case[0] for case in CASES]
    assert len(ids) >= 60
    assert len(ids) == len(set(ids)), "duplicate ids"


def chain(exc: BaseException | None) -> list[BaseException]:
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


@pytest.mark.parametrize("name, call, cls, pattern, two",
                         [pytest.param(*case, id=case[0]) for case in CASES])
def test_bad_input(name: str, call: Callable[[], Any], cls: type,
                   pattern: str, two: bool, device_count: int) -> None:
    if two and device_count < 2:
        pytest.skip("needs two devices")
    acc.set_device_index(0)
    before = acc.current_stream()
    for _ in range(2):  # the same way each time
        with pytest.raises(BaseException) as info:
            call()
        exc = info.value
        assert type(exc) is cls, f"{name}: {type(exc).__name__}: {exc}"
        assert re.search(pattern, str(exc)), f"{name}: {exc}"
        assert not any(isinstance(e, SystemError) for e in chain(exc))
    # Nothing changed, and the API works.
    assert acc.current_device_index() == 0
    assert acc.current_stream() is before
    fresh = acc.Stream()
    fresh.record_event().synchronize()
    assert fresh.query() is True


NO_ACCELERATOR = """
import accelerator as a
a.empty_cache()                     # before any probe: nothing to release
for call in (lambda: a.device(0), lambda: a.set_device_index("cuda:0"),
             lambda: a.current_stream("xpu:1"), lambda: a.Stream(),
             lambda: a.Event(), lambda: a.synchronize(0),
             lambda: a.get_device_name(), lambda: a.device_index(0).__enter__(),
             lambda: a.Stream.from_handle(0)):
    try:
        call()
    except a.AcceleratorError as exc:
        assert "none is available" in str(exc), exc
        assert exc.api is None and exc.code is None, vars(exc)
    else:
        raise AssertionError("accepted without an accelerator")
# Argument errors are still argument errors.
for call, cls in ((lambda: a.set_device_index(True), TypeError),
                  (lambda: a.device("cuda:x"), ValueError),
                  (lambda: a.Stream(priority=0.5), TypeError),
                  (lambda: a.Event(enable_timing=1), TypeError)):
    try:
        call()
    except cls:
        pass
assert a.current_accelerator() is None and a.device_count() == 0
a.empty_cache()
print("ok")
"""


def test_bad_input_without_an_accelerator() -> None:
    """ACCELERATOR_BACKEND=none: every call that needs a device says so."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELERATOR_", "FAKE_", "ZE_"))}
    env.update(ACCELERATOR_BACKEND="none",
               PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2]))
    result = subprocess.run([sys.executable, "-c", NO_ACCELERATOR], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_an_empty_backend_variable_means_unset() -> None:
    """ACCELERATOR_BACKEND='' probes as if unset (cuda, then xpu)."""
    env = dict(os.environ, ACCELERATOR_BACKEND="",
               PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2]))
    code = ("import accelerator as a; "
            "print(a.is_available(), [b['reason'] for b in a.backends()"
            " if b['selected']])")
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True [None]\n", result.stdout
