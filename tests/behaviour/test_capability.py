"""get_device_capability(): the dtypes a device supports, from its driver."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import accelerator as acc

SRC = pathlib.Path(__file__).resolve().parents[2]
#: what every device holds and computes in, whatever its driver says
EVERY_DEVICE = frozenset({"bool", "uint8", "int8", "int16", "int32",
                          "int64", "float32", "complex64"})

#: a child that reports device 0's dtypes and the driver calls that the
#: first and the second get_device_capability() made
CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import accelerator, fake_drivers
driver = fake_drivers.DOUBLES[accelerator.current_accelerator().type]()
driver.reset_counts()
first = accelerator.get_device_capability(0)
calls = driver.calls({call!r})
again = accelerator.get_device_capability()
print(json.dumps([sorted(first["supported_dtypes"]), calls,
                  driver.calls({call!r}) - calls,
                  sorted(again["supported_dtypes"])]))
"""


def child(facts, **env: str) -> tuple[set[str], int, int, set[str]]:
    code = CHILD.format(tests=str(SRC / "tests"),
                        call=facts.capability_call)
    result = subprocess.run([sys.executable, "-c", code],
                            env={**os.environ, "PYTHONPATH": str(SRC), **env},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    first, calls, more, again = json.loads(result.stdout)
    return set(first), calls, more, set(again)


def test_supported_dtypes_are_the_drivers(facts, device_count: int) -> None:
    expected = EVERY_DEVICE | facts.float_dtypes
    for device in (None, *range(device_count),
                   f"{facts.device_type}:{device_count - 1}"):
        caps = acc.get_device_capability(device)
        assert isinstance(caps["supported_dtypes"], set)
        assert caps["supported_dtypes"] == expected


def test_fewer_dtypes_when_the_driver_says_so(driver, facts) -> None:
    env, gone = facts.fewer_float_dtypes
    assert gone and gone <= facts.float_dtypes
    first, _, _, _ = child(facts, **env)
    assert first == EVERY_DEVICE | (facts.float_dtypes - gone)


def test_read_from_the_driver_once(driver, facts) -> None:
    first, calls, more, again = child(facts)
    assert first == again == EVERY_DEVICE | facts.float_dtypes
    assert calls > 0 and more == 0


def test_backend_facts(device_count: int) -> None:
    for device in range(device_count):
        props = acc.get_device_properties(device)
        caps = acc.get_device_capability(device)
        if props.major >= 0:
            assert caps["compute_capability"] == (props.major, props.minor)
        else:
            assert "compute_capability" not in caps


def test_a_returned_dict_is_the_callers() -> None:
    caps = acc.get_device_capability()
    caps["supported_dtypes"].add("int4")
    caps["extra"] = 1
    assert "int4" not in acc.get_device_capability()["supported_dtypes"]
    assert "extra" not in acc.get_device_capability()


def test_bad_devices_are_refused(device_count: int) -> None:
    with pytest.raises(ValueError, match="doesn't match"):
        acc.get_device_capability("cpu")
    with pytest.raises(acc.DeviceIndexError):
        acc.get_device_capability(device_count)
    with pytest.raises(TypeError):
        acc.get_device_capability(0, 1)
