"""What the user reads when something fails: messages and error objects.

- Text that reaches a message from the environment or the driver (a
  library path with bytes that are not UTF-8, a long non-ASCII value cut
  to fit a 512-byte buffer) never makes the message fail to decode: the
  cut falls on a character boundary and other bytes show as ``\\xNN``,
  in the API's exceptions and in ``python -m accelerator``.
- A device index too large for a C ``long long`` is reported as passed.
- Sizes are unsigned: memory past 2**63 bytes is a positive number.
- A driver error survives pickling with its attributes.

Each driver configuration runs in its own process (a driver initialises
once per process); the environment the behaviour suite set for the
backend under test is inherited and changed one variable at a time.
"""
from __future__ import annotations

import copy
import json
import os
import pathlib
import pickle
import subprocess
import sys
from typing import Any

import pytest

import accelerator as acc
import fake_drivers

SRC = pathlib.Path(__file__).resolve().parents[2]


def child_env(**changes: str) -> dict[str, str]:
    """This process's environment (the backend under test) with changes."""
    env = {**os.environ, "PYTHONPATH": str(SRC), **changes}
    env.pop("PYTHONIOENCODING", None)
    return env


def run(arguments: list[str], **changes: str) -> subprocess.CompletedProcess:
    """python <arguments> in a child, with text decoded strictly."""
    result = subprocess.run([sys.executable, *arguments],
                            env=child_env(**changes), capture_output=True,
                            timeout=120)
    stdout = result.stdout.decode("utf-8")  # must be valid UTF-8
    stderr = result.stderr.decode("utf-8")
    return subprocess.CompletedProcess(result.args, result.returncode,
                                       stdout, stderr)


#: a child that prints, as JSON, the message of the error a device call
#: raises and every backend's library and reason
MESSAGES_CHILD = """
import json
import accelerator as acc
try:
    acc.current_device_index()
except acc.AcceleratorError as exc:
    message = str(exc)
    message.encode("utf-8")            # printable anywhere
else:
    raise SystemExit("no error")
print(json.dumps({"message": message, "backends": acc.backends()}))
"""

#: 'é' is two bytes in UTF-8 (c3 a9): a cut in the middle of one leaves
#: \\xc3 behind, which the message must never show
BROKEN_E = ("\\xc3", "\\xa9")


def assert_clean_cut(text: str) -> None:
    for half in BROKEN_E:
        assert half not in text, text


def check_report(**changes: str) -> tuple[str, dict[str, Any]]:
    """python -m accelerator, text and --json: both exit 0, no traceback."""
    text = run(["-m", "accelerator"], **changes)
    assert text.returncode == 0, text.stderr
    assert "Traceback" not in text.stderr, text.stderr
    as_json = run(["-m", "accelerator", "--json"], **changes)
    assert as_json.returncode == 0, as_json.stderr
    assert "Traceback" not in as_json.stderr, as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


# Messages that hold text of any kind ---------------------------------------


def test_a_long_non_ascii_backend_value() -> None:
    value = "é" * 300                     # 600 bytes: more than a message
    stdout, document = check_report(ACCELERATOR_BACKEND=value)
    quoted = "ACCELERATOR_BACKEND=" + "é" * 32 + "..."
    expected = ("names no backend (expected "
                f"{', '.join(fake_drivers.DOUBLES)} or none)")
    assert f"{quoted} {expected}" in stdout, stdout
    for backend in document["backends"]:
        assert backend["reason"] == f"not probed: {quoted} {expected}"
    result = run(["-c", MESSAGES_CHILD], ACCELERATOR_BACKEND=value)
    assert result.returncode == 0, result.stderr
    message = json.loads(result.stdout)["message"]
    # Each reason once, after the backends that share it.
    names = ", ".join(b["name"] for b in document["backends"])
    assert message.count(expected) == 1, message
    assert f"[{names}: not probed: {quoted} {expected}]" in message


@pytest.mark.parametrize("shift", ["", "a"], ids=["even", "odd"])
def test_a_library_path_that_is_not_utf8(
    driver: fake_drivers.DriverDouble, shift: str
) -> None:
    # Invalid bytes first, then enough 'é' that the 512-byte messages are
    # cut inside them; the two shifts put the cut on each byte of an 'é'.
    raw = b"/nonexistent/\xff\xfe-" + shift.encode() + "é".encode() * 240
    path = os.fsdecode(raw)
    shown = raw.decode("utf-8", "backslashreplace")
    assert shown.startswith("/nonexistent/\\xff\\xfe-")
    stdout, document = check_report(**{driver.library_env: path})
    assert f"library: {shown} (not loaded)" in stdout, stdout
    assert_clean_cut(stdout)
    assert document["available"] is False
    mine = [b for b in document["backends"] if b["library"] == shown]
    assert len(mine) == 1, document["backends"]
    assert mine[0]["loaded"] is False
    assert mine[0]["reason"].startswith(("cannot load", "cannot open")), \
        mine[0]
    assert "/nonexistent/\\xff\\xfe-" in mine[0]["reason"]
    assert_clean_cut(mine[0]["reason"])

    result = run(["-c", MESSAGES_CHILD], **{driver.library_env: path})
    assert result.returncode == 0, result.stderr
    child = json.loads(result.stdout)
    assert "/nonexistent/\\xff\\xfe-" in child["message"], child["message"]
    assert_clean_cut(child["message"])
    assert [b["library"] for b in child["backends"]].count(shown) == 1


# Device indices as passed --------------------------------------------------


@pytest.mark.parametrize("value", [-2**63 - 1, -2**80, -10**400])
def test_a_negative_index_of_any_size_is_a_no_op_for_set_device_index(
    device_count: int, value: int
) -> None:
    acc.set_device_index(1 if device_count > 1 else 0)
    before = acc.current_device_index()
    acc.set_device_index(value)
    assert acc.current_device_index() == before


class LoudInt(int):
    """An int whose str() is not its value."""

    def __str__(self) -> str:
        return "not the value"


def test_an_int_subclass_index_is_reported_by_its_value() -> None:
    with pytest.raises(acc.DeviceIndexError,
                       match=rf"^Device index value {2**70} is out of"):
        acc.set_device_index(LoudInt(2**70))


def test_an_index_past_256_bits_is_reported_by_its_size() -> None:
    with pytest.raises(acc.DeviceIndexError,
                       match=r"^Device index value <an int of 20001 bits> "
                       r"is out of index range \[0, \d+\) of the \w+ "
                       r"backend$"):
        acc.synchronize(2**20000)


def has_device_memory() -> bool:
    try:
        acc.Buffer(0)
    except NotImplementedError:
        return False
    return True


@pytest.mark.skipif(not has_device_memory(),
                    reason="the backend has no device memory slots")
@pytest.mark.parametrize("call, cls, pattern", [
    (lambda: acc.Buffer(-2**70), ValueError,
     rf"^Buffer\(\) must be a size in bytes >= 0, got {-2**70}$"),
    (lambda: acc.Buffer(2**70), acc.OutOfMemoryError,
     rf"^Buffer\(\) cannot allocate {2**70} bytes: more than 2\*\*64 - 1, "
     r"more than any memory$"),
    (lambda: acc.HostBuffer(-2**64), ValueError,
     rf"^HostBuffer\(\) must be a size in bytes >= 0, got {-2**64}$"),
    (lambda: acc.HostBuffer(2**64), acc.OutOfMemoryError,
     rf"^HostBuffer\(\) cannot allocate {2**64} bytes"),
    (lambda: acc.Buffer(-2**300), ValueError,
     r"got -<an int of 301 bits>$"),
    (lambda: acc.Buffer(2**300), acc.OutOfMemoryError,
     r"cannot allocate <an int of 301 bits> bytes"),
    (lambda: acc.Buffer(8).fill(2**70), ValueError,
     rf"^fill value must be a byte value in 0\.\.255, got {2**70}$"),
    (lambda: acc.Buffer(8).fill(-2**63 - 1), ValueError,
     rf"^fill value must be a byte value in 0\.\.255, got {-2**63 - 1}$"),
], ids=["Buffer(-2**70)", "Buffer(2**70)", "HostBuffer(-2**64)",
        "HostBuffer(2**64)", "Buffer(-2**300)", "Buffer(2**300)",
        "fill(2**70)", "fill(-2**63-1)"])
def test_sizes_and_fill_values_outside_long_long_are_shown_as_passed(
    call: Any, cls: type, pattern: str
) -> None:
    with pytest.raises(cls, match=pattern) as info:
        call()
    assert type(info.value) is cls


def test_a_size_past_2_63_reaches_the_driver_as_asked() -> None:
    if not has_device_memory():
        pytest.skip("the backend has no device memory slots")
    with pytest.raises(acc.OutOfMemoryError,
                       match=rf"Tried to allocate .* \({2**63 + 5} bytes\)"):
        acc.Buffer(2**63 + 5)


# Sizes ---------------------------------------------------------------------


@pytest.mark.parametrize("total", [2**63 + 2**40, 2**64 - 2**30],
                         ids=["2**63+", "2**64-"])
def test_memory_sizes_past_2_63_are_positive(
    driver: fake_drivers.DriverDouble, total: int
) -> None:
    if not driver.has("set_total_memory"):
        pytest.skip(driver.lacks["set_total_memory"])
    code = ("import json, accelerator as acc; "
            "free, total = acc.get_memory_info(0); "
            "p = acc.get_device_properties(1); "
            "print(json.dumps([free, total, p.total_memory, "
            "acc.get_memory_info(1)]))")
    result = run(["-c", code], **{driver.total_mem_env: str(total)})
    assert result.returncode == 0, result.stderr
    free, reported, properties_total, (free1, total1) = json.loads(
        result.stdout)
    assert reported == properties_total == total1 == total
    assert 2**63 < free <= total and 2**63 < free1 <= total
    stdout, document = check_report(**{driver.total_mem_env: str(total)})
    for device in document["devices"]:
        assert device["total_memory"] == total, device
        assert 2**63 < device["free_memory"] <= total, device


# Pickling ------------------------------------------------------------------


def driver_error(driver: fake_drivers.DriverDouble, oom: bool
                 ) -> acc.AcceleratorError:
    """A real error of the driver underneath: stream creation fails."""
    code = driver.oom_error[0] if oom else driver.unknown_error[0]
    acc.empty_cache()                    # no pooled stream to reuse
    driver.fail(driver.stream_create_api, 1, code)
    with pytest.raises(acc.AcceleratorError) as info:
        acc.Stream(1)
    driver.clear_faults()
    return info.value


ATTRIBUTES = ("args", "backend", "api", "code", "error_name")


def described(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__qualname__, "message": str(exc),
            **{name: getattr(exc, name) for name in ATTRIBUTES}}


@pytest.mark.parametrize("oom", [False, True], ids=["error", "oom"])
def test_a_driver_error_pickles_with_its_attributes(
    driver: fake_drivers.DriverDouble, oom: bool
) -> None:
    exc = driver_error(driver, oom)
    assert type(exc) is (acc.OutOfMemoryError if oom
                         else acc.AcceleratorError)
    code, name = driver.oom_error if oom else driver.unknown_error
    expected = described(exc)
    assert expected["api"] == driver.stream_create_api
    assert (expected["code"], expected["error_name"]) == (code, name)
    assert expected["backend"] == acc.current_accelerator().type
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert described(pickle.loads(pickle.dumps(exc, protocol))) \
            == expected, protocol
    assert described(copy.copy(exc)) == expected
    assert described(copy.deepcopy(exc)) == expected
    # In another process, which never saw the error raised.
    code_text = (
        "import json, pickle, sys\n"
        "exc = pickle.loads(sys.stdin.buffer.read())\n"
        "print(json.dumps({'type': type(exc).__qualname__, "
        "'message': str(exc), 'args': list(exc.args), "
        "**{n: getattr(exc, n) for n in "
        "('backend', 'api', 'code', 'error_name')}}))\n")
    result = subprocess.run([sys.executable, "-c", code_text],
                            input=pickle.dumps(exc), env=child_env(),
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    other = json.loads(result.stdout)
    other["args"] = tuple(other["args"])
    assert other == expected
