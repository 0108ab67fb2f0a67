"""The behaviour suite: the same tests for every backend.

ACCELERATOR_TEST_BACKEND picks the driver underneath, in this process:
  cuda (default)  the CUDA driver double, 2 devices
  xpu             the Level Zero test driver under Debian's real loader
  real            whatever real driver the machine has (the GPU check);
                  tests that need a double's controls are skipped
The environment is set here, at collection, before any test probes.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import fake_drivers

BACKEND = os.environ.get("ACCELERATOR_TEST_BACKEND", "cuda")
DEVICES = 2

if BACKEND == "cuda":
    if not fake_drivers.CUDA_DOUBLE.exists():
        raise pytest.UsageError(
            f"{fake_drivers.CUDA_DOUBLE} is missing: run make -C tests/drivers")
    os.environ.update(
        ACCELERATOR_BACKEND="cuda",
        ACCELERATOR_CUDA_LIBRARY=str(fake_drivers.CUDA_DOUBLE),
        FAKE_CUDA_DEVICES=str(DEVICES),
    )
elif BACKEND == "xpu":
    if not fake_drivers.ZE_DRIVER.exists():
        raise pytest.UsageError(
            f"{fake_drivers.ZE_DRIVER} is missing: install libze-dev and "
            "run make -C tests/drivers")
    os.environ.update(
        ACCELERATOR_BACKEND="xpu",
        ZE_ENABLE_ALT_DRIVERS=str(fake_drivers.ZE_DRIVER),
        FAKE_ZE_DEVICES=str(DEVICES),
    )
elif BACKEND != "real":
    raise pytest.UsageError(f"unknown ACCELERATOR_TEST_BACKEND={BACKEND!r}")

import accelerator  # noqa: E402  (after the environment is set)


def make_driver() -> fake_drivers.DriverDouble | None:
    if BACKEND == "cuda":
        return fake_drivers.CudaDouble()
    if BACKEND == "xpu":
        return fake_drivers.ZeDouble()
    return None


_driver = make_driver()


@pytest.fixture
def driver() -> fake_drivers.DriverDouble:
    """The driver double underneath, for counters, faults and timed work."""
    if _driver is None:
        pytest.skip("needs a driver test double (not the real driver)")
    return _driver


@pytest.fixture(scope="session")
def accel_type() -> str:
    """The device type of the backend under test ('cuda' or 'xpu')."""
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


@pytest.fixture(autouse=True)
def restore_state(default_streams: list[accelerator.Stream]) -> Iterator[None]:
    """Each test ends on device 0 with the default streams current."""
    yield
    if _driver is not None:
        _driver.clear_faults()
    for stream in default_streams:
        accelerator.set_stream(stream)
    if default_streams:
        accelerator.set_device_index(0)
