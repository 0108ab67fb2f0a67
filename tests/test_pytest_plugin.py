"""The pytest plugin (accelerator.pytest_plugin), through pytester.

Each inner pytest run is a subprocess with its own driver configuration (a
driver initialises once per process): no CUDA library, or the CUDA driver
test double with a chosen number of devices.  The Level Zero loader is
pointed at a missing path so that the machine's own loader cannot change
the outcome.
"""
from __future__ import annotations

import itertools
import os
import pathlib
import tomllib

import pytest

import accelerator

pytest_plugins = ["pytester"]

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
CUDA_DOUBLE = REPO_ROOT / "tests" / "drivers" / "build" / "libcuda.so.1"
MISSING_LIBRARY = "/nonexistent/accelerator-tests/libmissing.so.1"
PLUGIN = "accelerator.pytest_plugin"
PACKAGE_PARENT = pathlib.Path(accelerator.__file__).resolve().parents[1]
NO_CUDA_REASON = (
    "no accelerator is available (cuda: cannot load the CUDA driver"
)

needs_double = pytest.mark.skipif(
    not CUDA_DOUBLE.exists(),
    reason=f"the CUDA driver test double is not built ({CUDA_DOUBLE}; "
    "run make -C tests/drivers cuda)",
)


def plugin_arguments() -> list[str]:
    """``-p accelerator.pytest_plugin``: it loads the plugin where the
    entry point is not installed, and is a no-op where it is."""
    return ["-p", PLUGIN]


def use_driver(
    monkeypatch: pytest.MonkeyPatch, cuda_library: str, **fake_env: str
) -> None:
    """Make the inner pytest see only this CUDA library and FAKE_* env."""
    for name in list(os.environ):
        if name.startswith(("ACCELERATOR_", "FAKE_CUDA_", "FAKE_ZE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")])
    ))
    monkeypatch.setenv("ACCELERATOR_CUDA_LIBRARY", cuda_library)
    monkeypatch.setenv("ACCELERATOR_ZE_LIBRARY", MISSING_LIBRARY)
    for name, value in fake_env.items():
        monkeypatch.setenv(name, value)


def use_double(monkeypatch: pytest.MonkeyPatch, devices: int) -> None:
    """The CUDA driver test double with ``devices`` devices."""
    use_driver(monkeypatch, str(CUDA_DOUBLE), FAKE_CUDA_DEVICES=str(devices))


def run(pytester: pytest.Pytester, *arguments: str) -> pytest.RunResult:
    """An inner pytest run, in a subprocess, with the plugin loaded."""
    return pytester.runpytest_subprocess(
        *plugin_arguments(), "-rfEs", *arguments
    )


# Registration and cost ----------------------------------------------------


def test_markers_are_listed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(monkeypatch, MISSING_LIBRARY)
    result = run(pytester, "--markers")
    result.stdout.fnmatch_lines([
        "@pytest.mark.requires_accelerator: skip the test unless an *",
        "@pytest.mark.requires_devices(n): skip the test unless the *",
    ])
    assert result.ret == 0


@needs_double
def test_a_suite_without_markers_or_fixtures_never_calls_the_driver(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_double(monkeypatch, 2)
    # The inner run loads the double itself, with the path the backend
    # would open, so it shares the double's call counters.
    pytester.makeconftest("""
        import ctypes, os, pathlib

        def pytest_unconfigure(config):
            double = ctypes.CDLL(os.environ["ACCELERATOR_CUDA_LIBRARY"])
            double.fake_cuda_call_count.restype = ctypes.c_longlong
            double.fake_cuda_call_count.argtypes = [ctypes.c_char_p]
            calls = double.fake_cuda_call_count(None)
            pathlib.Path("driver_calls.txt").write_text(str(calls))
    """)
    pytester.makepyfile("""
        import accelerator

        def test_plain(request):
            assert request.config.getoption("accelerator_check_state") is False

        def test_imports_the_package():
            assert accelerator.Stream
    """)
    result = run(pytester)
    result.assert_outcomes(passed=2)
    assert (pytester.path / "driver_calls.txt").read_text() == "0"


# Loading: the entry point, -p and pytest_plugins, in any combination ------


def install_entry_point(directory: pathlib.Path) -> None:
    """What ``pip install`` leaves for entry points: a dist-info with the
    pytest11 entries pyproject.toml declares, found on PYTHONPATH."""
    with open(REPO_ROOT / "pyproject.toml", "rb") as file:
        entries = tomllib.load(file)["project"]["entry-points"]["pytest11"]
    dist_info = directory / "accelerator_entry_point-0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: accelerator-entry-point\n"
        "Version: 0\n")
    (dist_info / "entry_points.txt").write_text("[pytest11]\n" + "".join(
        f"{name} = {value}\n" for name, value in entries.items()))


WAYS = ("entry-point", "option", "conftest")
LOADING_TESTS = f"""
    import pytest

    def test_registered_once(request):
        manager = request.config.pluginmanager
        plugins = [plugin for plugin in manager.get_plugins()
                   if getattr(plugin, "__name__", None) == {PLUGIN!r}]
        assert len(plugins) == 1
        assert request.config.getoption("accelerator_check_state") is False

    @pytest.mark.requires_devices(99)
    def test_marker_works():
        pass
"""


@pytest.mark.parametrize("ways", [
    ways for count in (1, 2, 3) for ways in itertools.combinations(WAYS, count)
], ids="+".join)
def test_every_way_of_loading_the_plugin_works_with_the_others(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
    ways: tuple[str, ...],
) -> None:
    use_driver(monkeypatch, MISSING_LIBRARY)
    if "entry-point" in ways:
        site = pytester.path / "site"
        install_entry_point(site)
        monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}"
                           f"{os.environ['PYTHONPATH']}")
        monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    else:
        # Not even an installed copy's entry point.
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    if "conftest" in ways:
        pytester.makeconftest(f"pytest_plugins = [{PLUGIN!r}]")
    pytester.makepyfile(LOADING_TESTS)
    arguments = ["-p", PLUGIN] if "option" in ways else []
    result = pytester.runpytest_subprocess(*arguments, "-rs")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * requires 99 accelerator devices*"])


# Markers ------------------------------------------------------------------

MARKED_TESTS = """
    import pytest

    @pytest.mark.requires_accelerator
    def test_any():
        pass

    @pytest.mark.requires_devices(1)
    def test_one():
        pass

    @pytest.mark.requires_devices(n=2)
    def test_two():
        pass

    @pytest.mark.requires_devices(1)
    class TestThree:
        @pytest.mark.requires_devices(3)
        def test_three(self):
            pass

    def test_unmarked():
        pass
"""


def test_markers_skip_without_accelerator(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(monkeypatch, MISSING_LIBRARY)
    pytester.makepyfile(MARKED_TESTS)
    result = run(pytester)
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines([
        f"SKIPPED * requires an accelerator: {NO_CUDA_REASON}*; xpu: *)",
        f"SKIPPED * requires 2 accelerator devices: {NO_CUDA_REASON}*",
        f"SKIPPED * requires 3 accelerator devices: {NO_CUDA_REASON}*",
    ])


@needs_double
def test_markers_skip_when_the_driver_has_no_device(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_double(monkeypatch, 0)
    pytester.makepyfile(MARKED_TESTS)
    result = run(pytester)
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines(["SKIPPED * requires an accelerator: *"
                                 "no NVIDIA GPU is visible: NVML counts "
                                 "none*"])


@needs_double
@pytest.mark.parametrize(
    ("devices", "passed", "skipped"), [(1, 3, 2), (2, 4, 1), (3, 5, 0)]
)
def test_markers_count_devices(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
    devices: int, passed: int, skipped: int,
) -> None:
    use_double(monkeypatch, devices)
    pytester.makepyfile(MARKED_TESTS)
    result = run(pytester)
    result.assert_outcomes(passed=passed, skipped=skipped)
    if devices < 3:
        result.stdout.fnmatch_lines([
            f"SKIPPED * requires 3 accelerator devices: cuda has {devices}"
        ])


@pytest.mark.parametrize("argument", ["0", "'2'", "True", "1, 2"])
def test_a_bad_requires_devices_argument_is_an_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, argument: str
) -> None:
    use_driver(monkeypatch, MISSING_LIBRARY)
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.requires_devices({argument})
        def test_bad():
            pass
    """)
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*bad marker requires_devices(n)*"])


BAD_REQUIRES_ACCELERATOR = ["5", "'cuda'", "n=2", "reason='x'"]


def test_requires_accelerator_takes_no_argument(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(monkeypatch, MISSING_LIBRARY)
    pytester.makepyfile("import pytest\n" + "".join(f"""
@pytest.mark.requires_accelerator
class TestBad{number}:
    @pytest.mark.requires_accelerator({argument})
    def test_bad(self):
        pass
""" for number, argument in enumerate(BAD_REQUIRES_ACCELERATOR)))
    result = run(pytester)
    result.assert_outcomes(errors=len(BAD_REQUIRES_ACCELERATOR))
    result.stdout.fnmatch_lines([
        f"*bad marker requires_accelerator: it takes no arguments, got "
        f"({argument}); for a number of devices use requires_devices(n)*"
        for argument in BAD_REQUIRES_ACCELERATOR
    ])


# Fixtures -----------------------------------------------------------------

DEVICE_TESTS = """
    import accelerator

    def test_device(accel_device, request):
        assert isinstance(accel_device, accelerator.device)
        assert request.node.name == f"test_device[{accel_device}]"
        assert accelerator.current_device_index() == 0
"""


@needs_double
def test_accel_device_runs_once_per_device(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_double(monkeypatch, 3)
    pytester.makepyfile(DEVICE_TESTS)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "*::test_device[[]cuda:0[]] PASSED*",
        "*::test_device[[]cuda:1[]] PASSED*",
        "*::test_device[[]cuda:2[]] PASSED*",
    ])


def test_accel_device_is_one_skipped_param_without_accelerator(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(monkeypatch, MISSING_LIBRARY)
    pytester.makepyfile(DEVICE_TESTS)
    result = run(pytester, "-v")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*::test_device[[]no-accelerator[]] SKIPPED*",
        f"SKIPPED * accel_device: {NO_CUDA_REASON}*",
    ])


@needs_double
def test_accel_stream_is_new_and_synchronized_at_teardown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_double(monkeypatch, 2)
    # The first test leaves 300 ms of work on its stream; the second one
    # runs right after its teardown and finds the stream idle.
    pytester.makepyfile("""
        import ctypes, os
        import accelerator

        double = ctypes.CDLL(os.environ["ACCELERATOR_CUDA_LIBRARY"])
        double.fake_cuda_enqueue_sleep.argtypes = [
            ctypes.c_int, ctypes.c_ulonglong, ctypes.c_double]
        streams = []

        def test_busy_stream(accel_stream):
            assert isinstance(accel_stream, accelerator.Stream)
            assert accel_stream != accelerator.current_stream()
            assert accel_stream.device == accelerator.device("cuda", 0)
            assert double.fake_cuda_enqueue_sleep(
                0, accel_stream.handle, 300.0) == 0
            assert not accel_stream.query()
            streams.append(accel_stream)

        def test_previous_stream_was_synchronized(accel_stream):
            assert streams[0].query()
            assert accel_stream != streams[0]
    """)
    result = run(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=2)


@needs_double
def test_accel_stream_is_on_accel_device_s_device(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/testing.rst's example with two devices: the stream of each
    run is on that run's device, and entering it makes that device
    current; without accel_device it is on the current device."""
    use_double(monkeypatch, 2)
    pytester.makepyfile("""
        import pytest
        import accelerator

        @pytest.mark.requires_accelerator
        def test_copy(accel_device, accel_stream):
            assert accel_stream.device == accel_device
            with accel_stream:
                assert accelerator.current_device_index() == \\
                    accel_device.index
                assert accelerator.current_stream() == accel_stream

        @pytest.fixture
        def on_the_device(accel_device):
            return accel_device

        def test_through_a_fixture(on_the_device, accel_stream):
            assert accel_stream.device == on_the_device

        def test_alone(accel_stream):
            accelerator.set_device_index(0)
            assert accel_stream.device == accelerator.device("cuda", 0)
    """)
    result = run(pytester, "-v", "-p", "no:randomly")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*::test_copy[[]cuda:1[]] PASSED*"])


def test_accel_stream_skips_without_accelerator(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(monkeypatch, MISSING_LIBRARY)
    pytester.makepyfile("""
        def test_stream(accel_stream):
            pass
    """)
    result = run(pytester)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [f"SKIPPED * accel_stream requires an accelerator: {NO_CUDA_REASON}*"]
    )


# --accelerator-check-state ------------------------------------------------

STATE_TESTS = """
    import pytest
    import accelerator

    @pytest.fixture
    def on_device_one():
        with accelerator.device_index(1):
            yield

    def test_leaves_device_one():
        accelerator.set_device_index(1)

    def test_starts_on_device_zero():
        assert accelerator.current_device_index() == 0

    def test_leaves_a_stream_on_device_one():
        accelerator.set_stream(accelerator.Stream(1))
        accelerator.set_device_index(0)

    def test_starts_on_the_default_streams():
        assert accelerator.current_stream(1).handle == 0

    def test_fixture_changes_are_not_the_tests(on_device_one):
        assert accelerator.current_device_index() == 1

    def test_restores_what_it_changes():
        with accelerator.device_index(1):
            pass
"""


@needs_double
@pytest.mark.parametrize("how", ["option", "ini"])
def test_state_check_fails_a_test_that_leaves_state_changed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    use_double(monkeypatch, 2)
    pytester.makepyfile(STATE_TESTS)
    if how == "ini":
        pytester.makeini("[pytest]\naccelerator_check_state = true\n")
        result = run(pytester, "-p", "no:randomly")
    else:
        result = run(
            pytester, "-p", "no:randomly", "--accelerator-check-state"
        )
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines([
        "the test left the accelerator state changed "
        "(--accelerator-check-state): current device index 0 -> 1",
        "the test left the accelerator state changed "
        "(--accelerator-check-state): current stream of device 1 *",
    ])
    result.stdout.fnmatch_lines([
        "FAILED *::test_leaves_device_one*",
        "FAILED *::test_leaves_a_stream_on_device_one*",
    ])


@needs_double
def test_without_the_state_check_leaks_go_unnoticed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_double(monkeypatch, 2)
    pytester.makepyfile(STATE_TESTS)
    result = run(pytester, "-p", "no:randomly")
    # The leaking tests pass; the tests after them see the leak.
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines([
        "FAILED *::test_starts_on_device_zero*",
        "FAILED *::test_starts_on_the_default_streams*",
    ])


def test_state_check_without_accelerator_passes_plain_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_driver(monkeypatch, MISSING_LIBRARY)
    pytester.makepyfile("""
        def test_plain():
            pass
    """)
    result = run(pytester, "--accelerator-check-state")
    result.assert_outcomes(passed=1)
