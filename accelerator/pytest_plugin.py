"""pytest plugin: accelerator markers, fixtures and a state check.

Registered through the ``pytest11`` entry point ``accelerator.pytest_plugin``
(the module's own name), so an installed ``accelerator`` makes these
available to every test suite.  ``-p accelerator.pytest_plugin`` and
``pytest_plugins = ["accelerator.pytest_plugin"]`` in a conftest load it
where the entry point is not installed, and are no-ops where it is (any
combination works); ``-p no:accelerator.pytest_plugin`` turns it off.

Markers (listed by ``pytest --markers``):
  ``requires_accelerator``  skip unless an accelerator is available; the
                            reason gives each backend's reason.  It takes
                            no arguments (for a count, requires_devices).
  ``requires_devices(n)``   skip unless the accelerator has at least n
                            devices.
Fixtures:
  ``accel_device``  an ``accelerator.device``; a test that uses it runs once
                    per device, with ids like ``cuda:0``.  With no
                    accelerator it has one skipped parameter,
                    ``no-accelerator``.  It does not change the current
                    device.
  ``accel_stream``  a new ``accelerator.Stream``, synchronized at
                    teardown: on ``accel_device``'s device when the test
                    (or a fixture of it) uses ``accel_device``, else on
                    the current device; skips when there is no
                    accelerator.
Option:
  ``--accelerator-check-state`` (ini: ``accelerator_check_state = true``)
      fails a test that returns with the current device index, or the
      current stream of any device, different from what it was when the
      test started (after its fixtures were set up), then restores it so
      later tests start clean.
  ``--accelerator-devices-per-worker=K`` (pytest-xdist, ``pytest -n N``)
      gives each worker K devices of its own (default: the devices spread
      evenly, at least one each), decided in the controller without
      initialising a driver and set as ACCELERATOR_VISIBLE_DEVICES in the
      worker's environment before it starts, so a worker sees only its
      devices, numbered from 0, and ``accel_device`` runs each test on the
      worker's own devices.  A worker left without a device skips device
      tests, saying why.  The pytest header lists every worker's devices.
      Nothing changes without xdist, with ``-n 0`` or ``-p no:xdist``.

Cost: importing this module imports the ``accelerator`` package, which
calls no driver function.  The drivers are probed only for a test that
uses one of the markers (at its setup) or ``accel_device`` (at collection,
to parametrize it) or ``accel_stream``, or when the state check is on; a
suite that uses none of them never touches a driver.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

import pytest

import accelerator
from accelerator import _xdist

STATE_CHECK_PLUGIN_NAME = "accelerator-state-check"
#: In an xdist worker: its share (xdist's workerinput), else None.
WORKER_SHARE = pytest.StashKey[dict | None]()
#: The reason of this process when it is an xdist worker without a device.
_worker_reason: list[str] = []


# Probing ------------------------------------------------------------------


def no_accelerator_reason() -> str:
    """Why there is no accelerator, with the reason of every backend."""
    if _worker_reason:
        return _worker_reason[0]
    reasons = "; ".join(
        f"{backend['name']}: {backend.get('reason') or 'not available'}"
        for backend in accelerator.backends()
    )
    return f"no accelerator is available ({reasons})"


def missing_devices_reason(needed: int) -> str | None:
    """Why a test that needs ``needed`` devices cannot run, or None."""
    if needed == 1:
        wanted = "requires an accelerator"
    else:
        wanted = f"requires {needed} accelerator devices"
    if not accelerator.is_available():
        return f"{wanted}: {no_accelerator_reason()}"
    count = accelerator.device_count()
    if count < needed:
        backend = accelerator.current_accelerator()
        assert backend is not None
        return f"{wanted}: {backend.type} has {count}"
    return None


# Markers ------------------------------------------------------------------


def requires_devices_argument(n: int) -> int:
    """The argument of ``requires_devices(n)``: one int, at least 1."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TypeError(f"expected an int n >= 1, got {n!r}")
    return n


def bad_marker(item: pytest.Item, marker: str, problem: str) -> NoReturn:
    """Fail the test: its marker cannot mean anything."""
    pytest.fail(f"{item.nodeid}: bad marker {marker}: {problem}",
                pytrace=False)


def required_device_count(item: pytest.Item) -> int | None:
    """How many devices the markers of ``item`` require; None if no marker."""
    needed: int | None = None
    for marker in item.iter_markers("requires_accelerator"):
        if marker.args or marker.kwargs:
            given = ", ".join([*map(repr, marker.args), *(
                f"{key}={value!r}" for key, value in marker.kwargs.items())])
            bad_marker(item, "requires_accelerator",
                       f"it takes no arguments, got ({given}); for a number "
                       "of devices use requires_devices(n)")
        needed = 1
    for marker in item.iter_markers("requires_devices"):
        try:
            count = requires_devices_argument(*marker.args, **marker.kwargs)
        except TypeError as error:
            problem = str(error)
        else:
            needed = max(needed or 0, count)
            continue
        bad_marker(item, "requires_devices(n)", problem)
    return needed


def skip_at_test_location(reason: str) -> None:
    """Skip the running test, reported at the test's own location, as
    pytest's skip marker is (a private keyword, so fall back without it)."""
    try:
        skip = pytest.skip.Exception(reason, _use_item_location=True)
    except TypeError:
        skip = pytest.skip.Exception(reason)
    raise skip


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add --accelerator-check-state and its ini twin."""
    help_text = (
        "fail a test that leaves the current accelerator device or stream "
        "changed"
    )
    parser.getgroup("accelerator").addoption(
        "--accelerator-check-state", action="store_true", default=False,
        dest="accelerator_check_state", help=help_text,
    )
    parser.getgroup("accelerator").addoption(
        "--accelerator-devices-per-worker", type=devices_per_worker,
        default=None, dest="accelerator_devices_per_worker", metavar="K",
        help="with pytest-xdist (-n N): give each worker K devices of its "
        "own (default: spread evenly, at least one each)",
    )
    parser.addini("accelerator_check_state", help_text, type="bool",
                  default=False)


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers; turn the state check on when asked."""
    config.addinivalue_line(
        "markers",
        "requires_accelerator: skip the test unless an accelerator (GPU) "
        "is available",
    )
    config.addinivalue_line(
        "markers",
        "requires_devices(n): skip the test unless the accelerator has at "
        "least n devices",
    )
    if config.getoption("accelerator_check_state", False) or config.getini(
        "accelerator_check_state"
    ):
        config.pluginmanager.register(StateCheck(), STATE_CHECK_PLUGIN_NAME)
    configure_worker(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip, before its fixtures run, a test whose markers are not met."""
    needed = required_device_count(item)
    if needed is not None:
        reason = missing_devices_reason(needed)
        if reason is not None:
            skip_at_test_location(reason)


# Fixtures -----------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``accel_device`` over every device (ids like cuda:0)."""
    if "accel_device" not in metafunc.fixturenames:
        return
    current = accelerator.current_accelerator()
    share = metafunc.config.stash.get(WORKER_SHARE, None)
    if share is not None:
        params = worker_device_params(share)
    elif current is not None:
        device_type = current.type
        params = [
            pytest.param(accelerator.device(device_type, index),
                         id=f"{device_type}:{index}")
            for index in range(accelerator.device_count())
        ]
    else:
        params = [
            pytest.param(
                None, id="no-accelerator",
                marks=pytest.mark.skip(
                    reason=f"accel_device: {no_accelerator_reason()}"
                ),
            )
        ]
    metafunc.parametrize("accel_device", params, indirect=True)


@pytest.fixture
def accel_device(request: pytest.FixtureRequest) -> accelerator.device:
    """One accelerator device; the test runs once per device."""
    if not hasattr(request, "param"):
        pytest.fail(
            "accel_device is parametrized at collection: request it as an "
            "argument of the test or of a fixture, not by getfixturevalue",
            pytrace=False,
        )
    return request.param


@pytest.fixture
def accel_stream(
    request: pytest.FixtureRequest,
) -> Iterator[accelerator.Stream]:
    """A new stream on accel_device's device where the test uses it (the
    two agree), else on the current device; synchronized at teardown."""
    if not accelerator.is_available():
        pytest.skip(f"accel_stream requires an accelerator: "
                    f"{no_accelerator_reason()}")
    device = (request.getfixturevalue("accel_device")
              if "accel_device" in request.fixturenames else None)
    stream = accelerator.Stream(device)
    yield stream
    stream.synchronize()


# State check --------------------------------------------------------------


@dataclass(frozen=True)
class AcceleratorState:
    """The calling thread's current device and each device's current stream."""

    device_index: int
    streams: tuple[accelerator.Stream, ...]

    @classmethod
    def capture(cls) -> AcceleratorState | None:
        """The state now, or None when there is no accelerator."""
        if not accelerator.is_available():
            return None
        return cls(
            device_index=accelerator.current_device_index(),
            streams=tuple(
                accelerator.current_stream(index)
                for index in range(accelerator.device_count())
            ),
        )

    def changes_since(self, before: AcceleratorState) -> list[str]:
        """What differs from ``before``, one description per change."""
        changes = []
        if self.device_index != before.device_index:
            changes.append(f"current device index {before.device_index} -> "
                           f"{self.device_index}")
        for index, (old, new) in enumerate(zip(before.streams, self.streams)):
            if old != new:
                changes.append(f"current stream of device {index} {old!r} -> "
                               f"{new!r}")
        return changes

    def restore(self) -> None:
        """Make this state current again (streams first: setting a stream
        also moves the current device)."""
        for index, stream in enumerate(self.streams):
            if accelerator.current_stream(index) != stream:
                accelerator.set_stream(stream)
        accelerator.set_device_index(self.device_index)


STATE_BEFORE_CALL = pytest.StashKey[AcceleratorState | None]()


class StateCheck:
    """The --accelerator-check-state hooks, registered only when it is on."""

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Record the state once the test's fixtures are set up."""
        item.stash[STATE_BEFORE_CALL] = AcceleratorState.capture()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        """After a test that passed: fail it if it left the state changed."""
        before = item.stash.get(STATE_BEFORE_CALL, None)
        after = AcceleratorState.capture()
        if before is None or after is None:
            return
        changes = after.changes_since(before)
        if changes:
            pytest.fail(
                "the test left the accelerator state changed "
                "(--accelerator-check-state): " + "; ".join(changes),
                pytrace=False,
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """Restore the recorded state, passed or failed, before fixtures'
        own teardown."""
        before = item.stash.get(STATE_BEFORE_CALL, None)
        if before is not None:
            before.restore()


# pytest-xdist ---------------------------------------------------------------
#
# Optional hooks: pytest only calls them when xdist is loaded, and nothing
# here imports xdist.  The controller plans (accelerator._xdist); each
# worker starts with its ACCELERATOR_VISIBLE_DEVICES already set.

PLAN = pytest.StashKey[_xdist.Plan | None]()


def devices_per_worker(text: str) -> int:
    """argparse type of --accelerator-devices-per-worker."""
    try:
        return _xdist.parse_devices_per_worker(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def xdist_plan(config: pytest.Config) -> _xdist.Plan | None:
    """The controller's plan, made once; None when xdist runs no workers
    here, or there is no accelerator to share."""
    if PLAN in config.stash:
        return config.stash[PLAN]
    plan = None
    tx = config.getoption("tx", None) or []
    if (not hasattr(config, "workerinput")
            and config.getoption("dist", "no") != "no" and tx):
        current = accelerator.current_accelerator()
        if current is not None:
            plan = _xdist.make_plan(
                _xdist.worker_ids(tx), current.type,
                accelerator.device_count(),
                config.getoption("accelerator_devices_per_worker"),
                accelerator._accelerator._visible_devices())
    config.stash[PLAN] = plan
    return plan


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Under xdist, which worker has which devices."""
    plan = xdist_plan(config)
    return plan.header_lines() if plan is not None else []


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: list) -> None:
    """Put each local worker's devices in its environment, so that they
    are set before the worker imports anything (execnet applies env:
    before it runs xdist's worker code)."""
    plan = xdist_plan(config)
    if plan is None:
        return
    for spec in specs:
        share = plan.share(getattr(spec, "id", None) or "")
        if share is not None and getattr(spec, "popen", False):
            spec.env[_xdist.VISIBLE_ENV] = share.visible_devices


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # type: ignore[no-untyped-def]
    """Tell the worker its share: parameters and skip reasons."""
    plan = xdist_plan(node.config)
    if plan is not None and getattr(node.gateway.spec, "popen", False):
        node.workerinput[_xdist.WORKERINPUT_KEY] = plan.workerinput(
            node.gateway.id)


def configure_worker(config: pytest.Config) -> None:
    """In a worker: remember its share, check that its environment got it
    before any probe."""
    workerinput = getattr(config, "workerinput", None) or {}
    share = workerinput.get(_xdist.WORKERINPUT_KEY)
    config.stash[WORKER_SHARE] = share
    if share is None:
        return
    if share["reason"]:
        _worker_reason[:] = [share["reason"]]
    visible = share["visible_devices"]
    if os.environ.get(_xdist.VISIBLE_ENV) != visible:
        if accelerator._accelerator._probed():
            raise pytest.UsageError(
                f"xdist worker {workerinput.get('workerid')}: the "
                f"accelerator was probed before its devices were set "
                f"({_xdist.VISIBLE_ENV}={visible!r} expected)")
        os.environ[_xdist.VISIBLE_ENV] = visible


def worker_device_params(share: dict) -> list:
    """The same accel_device parameters in every worker: one per device
    slot, skipped where this worker has no device."""
    device_type = share["type"]
    params = []
    for slot in range(share["per_worker"]):
        if slot < len(share["devices"]):
            params.append(pytest.param(accelerator.device(device_type, slot),
                                       id=f"{device_type}:{slot}"))
        else:
            params.append(pytest.param(
                None, id=f"{device_type}:{slot}",
                marks=pytest.mark.skip(
                    reason=f"accel_device: {share['reason']}")))
    return params
