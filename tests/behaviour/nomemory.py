"""Every API call with each of its first Python allocations failing (the
_testcapi allocator hooks): run in a fresh process by test_faults'
test_host_out_of_memory_never_crashes (nomemory_main)."""
from __future__ import annotations

from typing import Any

import accelerator as acc
from fault_actions import make_double


#: allocations made to fail, one at a time, in each call
NOMEMORY_DEPTH = 40


class _Foreign:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


class _Duck:
    def __init__(self, type: str) -> None:
        self.type, self.index = type, 1


def nomemory_calls(driver: Any) -> dict[str, tuple[Any, Any]]:
    """name -> (setup or None, call): every API, under allocation failure."""
    import pickle
    t = acc.current_accelerator().type
    s, s2 = acc.Stream(0), acc.Stream(1)
    e, e2 = acc.Event(enable_timing=True), acc.Event(enable_timing=True)
    e.record(s)
    e2.record(s)
    e2.synchronize()
    d = acc.device(t, 1)
    failing = driver.functions["query"]
    calls = {
        "is_available": acc.is_available,
        "device_count": acc.device_count,
        "current_accelerator": acc.current_accelerator,
        "current_device_index": acc.current_device_index,
        "set_device_index(1)": lambda: acc.set_device_index(1),
        "set_device_index('t:0')": lambda: acc.set_device_index(f"{t}:0"),
        "set_device_index(duck)": lambda: acc.set_device_index(_Duck(t)),
        "set_device_index(bad)": lambda: acc.set_device_index(99),
        "device_index(1)": lambda: acc.device_index(1).__enter__(),
        "synchronize(1)": lambda: acc.synchronize(1),
        "current_stream(1)": lambda: acc.current_stream(1),
        "set_stream(s2)": lambda: acc.set_stream(s2),
        "set_stream(default)": lambda: acc.set_stream(acc.current_stream(0)),
        "Stream(1)": lambda: acc.Stream(1, priority=-1),
        "Stream.from_handle": lambda: acc.Stream.from_handle(s.handle, 0),
        "with s": lambda: s.__enter__() and s.__exit__(None, None, None),
        "s.query/synchronize": lambda: (s.query(), s.synchronize()),
        "s.wait_event": lambda: s2.wait_event(e),
        "s.wait_stream": lambda: s2.wait_stream(s),
        "s.record_event": lambda: s.record_event(),
        "Event().record": lambda: acc.Event(blocking=True).record(s),
        "e.record/query/sync": lambda: (e.record(s), e.query(),
                                        e.synchronize()),
        "e.wait": lambda: e.wait(stream=s2),
        "e.elapsed_time": lambda: e.elapsed_time(e2),
        "device('t:1')": lambda: acc.device(f"{t}:1"),
        "device(t, 1)": lambda: acc.device(t, index=1),
        "device(1)": lambda: acc.device(1),
        "device str/repr/hash/pickle": lambda: (
            str(d), repr(d), hash(d), pickle.loads(pickle.dumps(d)),
            d == acc.device(t, 1)),
        "stream attributes": lambda: (repr(s), s.device, s.handle, hash(s),
                                      s.device_type, s == s2),
        "event attributes": lambda: (repr(e), e.device, e.handle,
                                     e.device_index),
        "get_memory_info": lambda: acc.get_memory_info(1),
        "get_device_properties": lambda: acc.get_device_properties(1),
        "get_device_name": lambda: acc.get_device_name(0),
        "backends": acc.backends,
        "empty_cache": acc.empty_cache,
        "bad device string": lambda: acc.device("cuda:x"),
        "pickle a stream": lambda: pickle.dumps(s),
    }
    def load_module_again() -> None:
        """A second instance of the extension module (multi-phase init):
        module_exec failing half-way must clean up."""
        import importlib.util
        spec = importlib.util.find_spec("accelerator._accelerator")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

    calls["load the module again"] = load_module_again
    if driver.has("device_memory"):
        b, h = acc.Buffer(64), acc.HostBuffer(64)
        b1 = acc.Buffer(64, 1)
        out = bytearray(64)
        calls.update({
            "Buffer(64, 1)": lambda: acc.Buffer(64, 1, stream=s2),
            "HostBuffer(64)": lambda: acc.HostBuffer(64),
            "Buffer copies": lambda: (b.copy_from(bytes(64)), b.copy_to(out),
                                      b.copy_from(h), b.copy_to(h),
                                      b.copy_from(b1), b.fill(3, stream=s)),
            "Buffer views and attributes": lambda: (
                b[1:9].fill(1), repr(b), b.device, b.stream, b.ptr, len(b),
                b.record_stream(s2)),
            "with Buffer": lambda: acc.Buffer(8).__enter__().close(),
            "Buffer.__dlpack__": lambda: (b.__dlpack__(), b.__dlpack__(
                max_version=(1, 0), stream=-1), b.__dlpack_device__()),
            "from_dlpack": lambda: acc.from_dlpack(b),
            "HostBuffer memoryview and DLPack": lambda: (
                memoryview(h).release(), h.__dlpack__(max_version=(1, 0)),
                h.__dlpack_device__()),
        })
    if driver.has("cuda_stream_protocol"):
        calls["from_handle(__cuda_stream__)"] = \
            lambda: acc.Stream.from_handle(_Foreign(s.handle))
        calls["__cuda_stream__"] = s.__cuda_stream__
    result = {name: (None, call) for name, call in calls.items()}
    number = driver.unknown_error[0]
    result["a driver error"] = (
        lambda: driver.fail(failing, 1, number),
        lambda: (s.query(), e.query(), acc.Event().record(s),
                 acc.Event().query()))
    return result


def nomemory_main() -> None:
    """Each call with its k-th Python allocation failing, k = 0, 1, ...:
    the call works or raises MemoryError (or what it raises anyway);
    never another error, never a crash.  Prints the problems, one a line."""
    import _testcapi
    driver = make_double()
    acc.set_device_index(0)
    calls = nomemory_calls(driver)
    problems = []
    for name, (setup, call) in calls.items():
        # First with failures: some results are cached once made.
        outcomes = []
        for k in range(NOMEMORY_DEPTH):
            if setup:
                setup()
            outcome: type | None = None
            _testcapi.set_nomemory(k, k + 1)
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - sorted below
                outcome = type(exc)
            finally:
                _testcapi.remove_mem_hooks()
            driver.clear_faults()
            outcomes.append(outcome)
        if setup:
            setup()
        try:
            call()
            normal: type | None = None
        except Exception as exc:  # noqa: BLE001 - what it does anyway
            normal = type(exc)
        driver.clear_faults()
        for k, outcome in enumerate(outcomes):
            if outcome not in (normal, MemoryError):
                problems.append(f"{name}: allocation {k}: {outcome} "
                                f"(without failures: {normal})")
        # Still working afterwards.
        acc.set_device_index(0)
        acc.set_stream(acc.current_stream(0))
        acc.Stream(1).record_event().synchronize()
    print("\n".join(problems))
