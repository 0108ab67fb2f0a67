"""synchronize(d) waits for work other libraries queued on device d.

The CUDA runtime, torch and CuPy queue their work on each device's primary
context, the one this package uses too.  synchronize(d) promises to wait
for all work on the device, by anyone: also when this process never used
device d through this package (it has not retained that context), and
without making the context when nobody has.  The CUDA double's
fake_cuda_foreign_work plays the other library: it retains the primary
context for itself and queues timed work on its legacy default stream.

Level Zero has no equivalent: its contexts are per library and the API has
no device-wide wait, so synchronize(d) there covers the streams this
package made (docs/semantics.rst).
Each case runs in a fresh interpreter: which contexts a process retained
is per process.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import fake_drivers
from fake_drivers import CUDA_DOUBLE, REPO

pytestmark = pytest.mark.skipif(not CUDA_DOUBLE.exists(),
                                reason="run make -C tests/drivers")

PRELUDE = """
import sys
sys.path.insert(0, {tests!r})
import accelerator as a
import fake_drivers
driver = fake_drivers.CudaDouble()
assert a.is_available()
"""


#: how the probe counts devices: through NVML (cuInit deferred to the first
#: use), or with cuInit (the CUDA double alone)
COUNTING = {"nvml": {}, "cuinit": fake_drivers.CudaDouble.eager_probe_env}


def run(code: str, counting: str = "nvml") -> None:
    env = fake_drivers.clean_environment()
    env.update(COUNTING[counting])
    env.update(ACCELERATOR_BACKEND="cuda",
               ACCELERATOR_CUDA_LIBRARY=str(CUDA_DOUBLE),
               FAKE_CUDA_DEVICES="2",
               PYTHONPATH=str(REPO))
    script = PRELUDE.format(tests=str(REPO / "tests")) + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("counting", list(COUNTING))
def test_synchronize_waits_for_another_librarys_work_on_an_unused_device(
        counting: str) -> None:
    run("""
    driver.foreign_work(1, 300)
    assert not driver.foreign_done(1)
    retains = driver.calls("cuDevicePrimaryCtxRetain")
    a.synchronize(1)
    assert driver.foreign_done(1), "synchronize(1) returned before the work"
    # It used the context the other library made; made none of its own.
    assert driver.live("context") == 1
    assert driver.calls("cuDevicePrimaryCtxRetain") == retains + 1
    # The current device did not change, and device 1 still works.
    assert a.current_device_index() == 0
    driver.foreign_work(1, 100)
    a.synchronize(1)
    assert driver.foreign_done(1)
    """, counting)


def test_synchronize_waits_for_another_librarys_work_on_a_used_device(
) -> None:
    run("""
    a.Stream(1).synchronize()              # this process retained device 1
    driver.foreign_work(1, 300)
    a.synchronize(1)
    assert driver.foreign_done(1)
    """)


@pytest.mark.parametrize("counting", list(COUNTING))
def test_synchronize_makes_no_context_on_an_idle_device(
        counting: str) -> None:
    """Nobody made device 1's primary context: nothing can be queued
    there, and asking makes no context (it would cost device memory)."""
    run("""
    a.synchronize(1)                       # maybe nobody initialised CUDA
    assert driver.calls("cuDevicePrimaryCtxRetain") == 0
    assert driver.live("context") == 0
    a.Stream(0).synchronize()              # now this process has
    states = driver.calls("cuDevicePrimaryCtxGetState")
    a.synchronize(1)
    assert driver.calls("cuDevicePrimaryCtxGetState") == states + 1
    assert driver.live("context") == 1     # device 0's only
    """, counting)


@pytest.mark.parametrize("counting", list(COUNTING))
def test_synchronize_waits_only_on_the_device_asked_for(
        counting: str) -> None:
    run("""
    driver.foreign_work(0, 100)
    driver.foreign_work(1, 1000)
    a.synchronize(0)
    assert driver.foreign_done(0)
    assert not driver.foreign_done(1)
    a.synchronize(1)
    assert driver.foreign_done(1)
    """, counting)
