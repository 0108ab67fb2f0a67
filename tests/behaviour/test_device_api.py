"""The device API, case by case against torch.accelerator's semantics."""
from __future__ import annotations

import re
import threading
import types

import numpy as np
import pytest

import accelerator as acc
import fake_drivers


def test_available_with_devices(accel_type: str, device_count: int) -> None:
    assert acc.is_available() is True
    assert acc.device_count() == device_count
    current = acc.current_accelerator()
    assert current == acc.device(accel_type)
    assert current.index is None
    assert acc.current_accelerator(check_available=True) == current
    assert acc.current_accelerator(True) == current


def test_current_device_starts_at_zero_and_follows_set() -> None:
    assert acc.current_device_index() == 0
    acc.set_device_index(1)
    assert acc.current_device_index() == 1
    acc.set_device_index(0)
    assert acc.current_device_index() == 0


@pytest.mark.usefixtures("two_devices")
def test_set_device_index_accepts_every_device_form(accel_type: str) -> None:
    duck = types.SimpleNamespace(type=accel_type, index=1)
    for form in (1, f"{accel_type}:1", acc.device(accel_type, 1), duck,
                 np.int64(1), np.uint8(1)):
        acc.set_device_index(0)
        acc.set_device_index(form)
        assert acc.current_device_index() == 1, form


def test_set_device_index_negative_is_a_no_op() -> None:
    acc.set_device_index(1)
    acc.set_device_index(-1)
    acc.set_device_index(np.int64(-1))
    assert acc.current_device_index() == 1


@pytest.mark.usefixtures("two_devices")
def test_numpy_integers_are_device_indices(accel_type: str) -> None:
    """Anything with __index__ but bool, as torch takes sizes."""
    one = np.int32(1)
    assert acc.device(one) == acc.device(accel_type, one) \
        == acc.device(accel_type, 1)
    assert acc.Stream(one).device_index == 1
    with acc.device_index(one):
        assert acc.current_device_index() == 1
    acc.synchronize(one)
    assert acc.current_device_index() == 0
    with pytest.raises(TypeError, match="bool"):
        acc.set_device_index(True)


def test_set_device_index_out_of_range(device_count: int) -> None:
    with pytest.raises(RuntimeError, match="out of index range"):
        acc.set_device_index(device_count)
    with pytest.raises(acc.DeviceIndexError) as info:
        acc.set_device_index(2**80)
    assert isinstance(info.value, (IndexError, ValueError, RuntimeError))
    assert acc.current_device_index() == 0


def test_set_device_index_rejects_bad_arguments(accel_type: str) -> None:
    with pytest.raises(ValueError, match="doesn't match the current "
                       f"accelerator {accel_type}"):
        acc.set_device_index("cpu")
    with pytest.raises(ValueError, match="Expected a device with a "
                       "specified index or an integer, but got: None"):
        acc.set_device_index(None)
    with pytest.raises(ValueError, match="specified index"):
        acc.set_device_index(accel_type)
    with pytest.raises(TypeError, match="bool"):
        acc.set_device_index(True)
    with pytest.raises(TypeError, match="float"):
        acc.set_device_index(1.0)
    with pytest.raises(ValueError, match="device type"):
        acc.set_device_index("gpu:0")
    with pytest.raises(ValueError, match="Invalid device string"):
        acc.set_device_index(f"{accel_type}:x")


def test_deprecated_aliases_warn() -> None:
    with pytest.warns(FutureWarning, match="current_device_index"):
        assert acc.current_device_idx() == 0
    with pytest.warns(FutureWarning, match="set_device_index"):
        acc.set_device_idx(1)
    assert acc.current_device_index() == 1


def test_a_new_thread_starts_on_device_zero() -> None:
    acc.set_device_index(1)
    seen: list[int] = []

    def body() -> None:
        seen.append(acc.current_device_index())
        acc.set_device_index(1)
        seen.append(acc.current_device_index())

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [0, 1]
    acc.set_device_index(0)
    assert acc.current_device_index() == 0


def test_device_index_context_manager() -> None:
    with acc.device_index(1) as value:
        assert value is None
        assert acc.current_device_index() == 1
        with acc.device_index(0):
            assert acc.current_device_index() == 0
        assert acc.current_device_index() == 1
    assert acc.current_device_index() == 0
    with acc.device_index(None):
        assert acc.current_device_index() == 0


def test_device_index_restores_on_exception_and_is_reentrant() -> None:
    guard = acc.device_index(1)
    with pytest.raises(KeyError):
        with guard:
            with guard:
                assert acc.current_device_index() == 1
            raise KeyError("boom")
    assert acc.current_device_index() == 0


def test_device_index_takes_ints_only(device_count: int,
                                      accel_type: str) -> None:
    with pytest.raises(TypeError, match="int device index"):
        with acc.device_index(f"{accel_type}:1"):
            pass
    with pytest.raises(acc.DeviceIndexError):
        with acc.device_index(device_count):
            pass
    with pytest.raises(acc.DeviceIndexError):
        with acc.device_index(-1):
            pass
    assert acc.current_device_index() == 0


def test_synchronize_keeps_the_current_device(driver) -> None:
    acc.set_device_index(1)
    stream = acc.current_stream(0)
    driver.enqueue_sleep(acc.Stream(0), 30)
    acc.synchronize(0)
    assert acc.current_device_index() == 1
    assert stream.query()
    acc.synchronize()
    acc.synchronize(acc.device(acc.current_accelerator().type, 0))


def test_synchronize_waits_for_all_streams_of_the_device(driver) -> None:
    streams = [acc.Stream(0) for _ in range(3)]
    gates = [driver.gate(stream) for stream in streams]
    for stream in streams:
        stream.record_event()  # so that query() sees it on every backend
    assert not any(stream.query() for stream in streams)
    for gate in gates:
        gate.open_soon()
    acc.synchronize(0)
    assert all(gate.is_open for gate in gates)
    assert all(stream.query() for stream in streams)


def test_synchronize_rejects_bad_devices(device_count: int) -> None:
    with pytest.raises(acc.DeviceIndexError):
        acc.synchronize(device_count)
    with pytest.raises(acc.DeviceIndexError):
        acc.synchronize(-1)
    with pytest.raises(ValueError, match="doesn't match"):
        acc.synchronize("cpu")
    with pytest.raises(TypeError):
        acc.synchronize(0, 1)  # type: ignore[call-arg]


def test_hot_queries_make_no_driver_call(driver) -> None:
    acc.current_stream()
    before = driver.calls()
    for _ in range(100):
        acc.is_available()
        acc.device_count()
        acc.current_device_index()
        acc.current_accelerator()
        acc.current_stream()
        acc.set_device_index(0)
    assert driver.calls() == before


def test_memory_info_and_properties(device_count: int,
                                    accel_type: str) -> None:
    for index in range(device_count):
        free, total = acc.get_memory_info(index)
        assert 0 <= free <= total
        props = acc.get_device_properties(index)
        assert props.index == index and props.type == accel_type
        assert props.total_memory == total
        assert props.name and acc.get_device_name(index) == props.name
        assert acc.get_device_properties(index) is props
    assert acc.get_device_properties() == acc.get_device_properties(0)
    for index in range(device_count):
        estimates = acc.get_device_properties(index).estimates
        assert isinstance(estimates, tuple)
        assert set(estimates) <= {"free_memory"}, estimates


def test_the_report_names_what_multi_processor_count_counts(
        device_count: int, facts: type[fake_drivers.DriverDouble]) -> None:
    """The backend's descriptor says what multi_processor_count counts on
    its devices; the report's text takes that word from it."""
    from accelerator import _report
    mine = [b for b in acc.backends() if b["selected"]]
    assert [b["processor_label"] for b in mine] == [facts.processor_label]
    text = _report.format_text(_report.collect_report())
    for index in range(device_count):
        count = acc.get_device_properties(index).multi_processor_count
        assert count > 0
        assert text.count(f"      {facts.processor_label}: {count}\n") >= 1


#: every device type torch parses (c10::DeviceType), besides cpu
TORCH_DEVICE_TYPES = ("cuda", "xpu", "opencl", "mps", "hip", "meta", "ipu",
                      "mkldnn", "opengl", "ideep", "ve", "fpga", "maia",
                      "xla", "lazy", "vulkan", "hpu", "mtia", "privateuseone")


def test_every_device_type_torch_parses_is_parsed(
        accel_type: str, facts: type[fake_drivers.DriverDouble]) -> None:
    """A backend added for any of torch's device types needs no change to
    the parser: each parses, and one that does not name the accelerator's
    devices is refused for that reason, not as unknown."""
    for name in TORCH_DEVICE_TYPES:
        assert acc.device(f"{name}:1").type == name
        assert acc.device(name, 1) == acc.device(f"{name}:1")
        if name != accel_type and name not in facts.device_type_aliases:
            with pytest.raises(ValueError, match=(
                    f"^{name} doesn't match the current accelerator "
                    f"{accel_type}")):
                acc.set_device_index(f"{name}:0")


def test_device_objects_are_shared_but_not_across_types(
        accel_type: str) -> None:
    """device() hands out one object per argument tuple (a value cache),
    and the cache never answers for arguments that only compare equal."""
    assert acc.device(accel_type, 1) is acc.device(accel_type, 1)
    assert acc.device(f"{accel_type}:1") is acc.device(f"{accel_type}:1")
    assert acc.device(accel_type, 1) == acc.device(f"{accel_type}:1")
    assert acc.current_accelerator() is acc.current_accelerator(True)
    with pytest.raises(TypeError, match="bool"):
        acc.device(accel_type, True)
    with pytest.raises(TypeError, match="float"):
        acc.device(accel_type, 1.0)
    for i in range(1000):  # the cache is bounded; all still right
        assert acc.device(accel_type, i).index == i


def test_current_accelerator_arguments() -> None:
    with pytest.raises(TypeError, match="at most 1 argument"):
        acc.current_accelerator(True, check_available=True)
    with pytest.raises(TypeError, match="invalid keyword"):
        acc.current_accelerator(check=True)
    class Falsy:
        def __bool__(self) -> bool:
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        acc.current_accelerator(Falsy())


def test_free_memory_and_pci_address_come_from_the_driver(
        driver, facts, device_count: int) -> None:
    """Where the driver can say (Level Zero through Sysman), free memory is
    read, not estimated, and the PCI address is known; where it cannot
    (OpenCL), the properties say that free memory is an estimate and the
    PCI address is empty rather than made up."""
    # The estimate is the total less what this process holds: segments
    # that earlier tests left in the allocator's cache count.
    acc.empty_cache()
    for index in range(device_count):
        props = acc.get_device_properties(index)
        if facts.has("free_memory"):
            assert props.estimates == ()
        else:
            assert props.estimates == ("free_memory",)
            free, total = acc.get_memory_info(index)
            assert free == total == props.total_memory
        if facts.has("pci_bus_id"):
            assert re.fullmatch(
                r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]",
                props.pci_bus_id), props.pci_bus_id
        else:
            assert props.pci_bus_id == ""
    if facts.has("pci_bus_id"):
        buses = {acc.get_device_properties(i).pci_bus_id
                 for i in range(device_count)}
        assert len(buses) == device_count


def test_device_index_exits_out_of_order_restore_their_own_enter() -> None:
    """As torch, where each object restores what its own enter saw."""
    first, second = acc.device_index(1), acc.device_index(0)
    first.__enter__()                      # saves 0
    second.__enter__()                     # saves 1
    first.__exit__(None, None, None)       # not innermost: restores 0
    assert acc.current_device_index() == 0
    second.__exit__(None, None, None)      # restores 1
    assert acc.current_device_index() == 1
    acc.set_device_index(0)
    guards = [acc.device_index(i % 2) for i in range(40)]
    for guard in guards:                   # deep nesting grows the stack
        guard.__enter__()
    for guard in reversed(guards):
        guard.__exit__(None, None, None)
    assert acc.current_device_index() == 0
    assert repr(first) == "device_index(1)" and first.idx == 1


class TorchDevice:
    """What a torch.device looks like to the module: .type and .index."""

    def __init__(self, type: str, index: int | None) -> None:
        self.type = type
        self.index = index


@pytest.mark.usefixtures("two_devices")
def test_a_device_type_alias_names_the_same_devices(facts) -> None:
    """On HIP, torch built for ROCm writes "cuda" for the AMD devices:
    "cuda:1", device("cuda", 1) and a torch.device("cuda", 1) all mean
    device 1 of the backend, whose own type is still what it reports."""
    if not facts.device_type_aliases:
        pytest.skip(f"the {facts.device_type} backend has no other device "
                    "type")
    for alias in facts.device_type_aliases:
        for device in (f"{alias}:1", acc.device(alias, 1),
                       TorchDevice(alias, 1)):
            acc.set_device_index(0)
            acc.set_device_index(device)
            assert acc.current_device_index() == 1
            assert acc.current_stream(device).device_index == 1
            assert acc.current_stream(device).device.type == facts.device_type
        with acc.device_index(0):
            # No index: the current device, as for the backend's own type.
            assert acc.current_stream(alias).device_index == 0
        assert acc.current_accelerator().type == facts.device_type

