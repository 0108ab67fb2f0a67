"""The behaviour suite: the same tests for every backend.

ACCELERATOR_TEST_BACKEND picks the driver underneath, in this process:
  a device type   that backend's double (fake_drivers.DOUBLES: cuda, the
                  default, xpu, hip, opencl), in its class's environment
                  (xpu with FAKE_ZE_DRIVERS=2 set: one device on each of
                  two drivers)
  real            whatever real driver the machine has (the GPU check);
                  tests that need a double's controls are skipped
The environment is set here, at collection, before any test probes.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

# numpy and kernel_code load here, at collection, before
# tests/conftest.py's gc.freeze(): fault_actions imports them only when
# an action runs (its children need neither), and loaded by a test they
# would stay for every later gc.collect() of the session to traverse.
import numpy  # noqa: F401
import pytest

import fake_drivers
import kernel_code  # noqa: F401

BACKEND = fake_drivers.TEST_BACKEND
DEVICES = 2

if BACKEND in fake_drivers.DOUBLES:
    _double_cls = fake_drivers.DOUBLES[BACKEND]
    _missing = _double_cls.missing()
    if _missing is not None:
        raise pytest.UsageError(_missing)
    os.environ.update(_double_cls.environment(DEVICES))
elif BACKEND != "real":
    raise pytest.UsageError(f"unknown ACCELERATOR_TEST_BACKEND={BACKEND!r}")

import accelerator  # noqa: E402  (after the environment is set)


_driver = (fake_drivers.DOUBLES[BACKEND]()
           if BACKEND in fake_drivers.DOUBLES else None)


@pytest.fixture
def driver() -> fake_drivers.DriverDouble:
    """The driver double underneath, for counters, faults and timed work."""
    if _driver is None:
        pytest.skip("needs a driver test double (not the real driver)")
    return _driver


@pytest.fixture(scope="session")
def facts() -> type[fake_drivers.DriverDouble]:
    """The facts of the backend under test: its double's class."""
    return fake_drivers.under_test()


@pytest.fixture(scope="session")
def accel_type() -> str:
    """The device type of the backend under test ('cuda', 'xpu' ...)."""
    if not accelerator.is_available():
        pytest.fail("no accelerator: " + repr(accelerator.backends()))
    acc = accelerator.current_accelerator()
    assert acc is not None
    return acc.type


@pytest.fixture(scope="session")
def device_count() -> int:
    count = accelerator.device_count()
    if BACKEND != "real":
        assert count == DEVICES
    return count


@pytest.fixture
def two_devices(device_count: int) -> None:
    if device_count < 2:
        pytest.skip("needs two devices")


@pytest.fixture(scope="session")
def default_streams() -> list[accelerator.Stream]:
    """Each device's default stream, as current at the session's start."""
    if not accelerator.is_available():
        return []
    return [accelerator.current_stream(i)
            for i in range(accelerator.device_count())]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A detector of the double (bad access, guard damage) that fired
    during a test's call or teardown fails that test, and is reset, so
    that one defect is one red test and not every test after it."""
    outcome = yield
    if _driver is None or call.when == "setup":
        return
    fired = _driver.fired_detectors()
    if not fired:
        return
    _driver.reset_detectors()
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{type(_driver).__name__}'s detectors fired during this test's "
            f"{call.when}: {fired} (the double's lines on stderr say where);"
            " they are reset for the next test")


@pytest.fixture(autouse=True)
def restore_state(default_streams: list[accelerator.Stream]) -> Iterator[None]:
    """Each test ends on device 0 with the default streams current."""
    yield
    if _driver is not None:
        _driver.open_gates()
        _driver.clear_faults()
    for stream in default_streams:
        accelerator.set_stream(stream)
    if default_streams:
        accelerator.set_device_index(0)
