"""Plugins that misbehave without crashing (issue 30's hostile pass): a
plugin that returns errors, however badly it words them, gets clean
exceptions; a table the core cannot trust is refused; no plugin named is
dropped from the report in silence.

One plugin, tests/plugins/hostile.c (the template with every slot made to
fail on demand), configured at load by environment variables, serves
every case; each case runs in its own process.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from test_plugins import (BUILT_IN, build, distribution, environment,
                          report, run)

HOSTILE = pathlib.Path(__file__).resolve().parent / "plugins" / "hostile.c"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory,
            include: str) -> pathlib.Path:
    return build(tmp_path_factory.mktemp("hostile"), include, "hostile",
                 source=HOSTILE)


@pytest.fixture(scope="module")
def include() -> str:
    import accelerator
    return accelerator.get_include()


# The table -----------------------------------------------------------------

@pytest.mark.parametrize("alias, problem", [
    ("cpu", "'cpu' is the host's device type"),
    ("none", "ACCELERATOR_BACKEND=none means no accelerator"),
    ("Bad Alias", "expected 1 to 31 lowercase letters"),
    ("", "expected 1 to 31 lowercase letters"),
    ("x:ff", "expected 1 to 31 lowercase letters"),
])
def test_a_device_type_alias_users_cannot_write_is_refused(
        hostile, alias: str, problem: str) -> None:
    """The alias names the plugin's devices where users pass a device, as
    its device type does: "cpu" would make the host's device type the
    plugin's."""
    backends = run(BACKENDS, environment([hostile], HOSTILE_ALIAS=alias))
    record = backends[len(BUILT_IN)]
    assert record["refused"] is True, record
    assert record["reason"].startswith(
        "plugin refused: its device type alias "), record
    assert problem in record["reason"], record


def test_an_alias_of_a_built_in_device_type_loads(hostile) -> None:
    """As HIP's "cuda": torch built for ROCm calls AMD GPUs cuda devices."""
    got = run("""
        import json, accelerator as a
        print(json.dumps([a.current_accelerator().type,
                          str(a.Stream(device="cuda:0").device)]))
        """, environment([hostile], HOSTILE_ALIAS="cuda",
                         ACCELERATOR_BACKEND="hostile"))
    assert got == ["hostile", "hostile:0"]


BACKENDS = """
import json, accelerator
print(json.dumps(accelerator.backends()))
"""


# Slots that fail -------------------------------------------------------------

#: every slot after the probe, through the API
EXERCISE = """
import json, accelerator as a
out = {}
def t(label, f):
    try:
        f()
        out[label] = "ok"
    except Exception as e:
        out[label] = [type(e).__name__, str(e)]
t("synchronize", lambda: a.synchronize(0))
t("properties", lambda: a.get_device_properties(0))
t("memory_info", lambda: a.get_memory_info(0))
t("stream", lambda: a.Stream())
t("query", lambda: a.current_stream().query())
t("stream_synchronize", lambda: a.current_stream().synchronize())
t("event", lambda: a.Event().record())
t("buffer", lambda: a.Buffer(4096))
t("host_buffer", lambda: a.HostBuffer(64))
print(json.dumps(out))
"""


@pytest.mark.parametrize("how, words", [
    ("nofill", "returned ACC_ERR_DRIVER (6) without an error record"),
    ("mismatch", "hostile: mismatched"),
    ("status:1", "returned status 1 (ACC_NOT_READY), which is not a failure"),
    ("status:13", "returned status 13, which is no acc_status"),
    ("status:-1", "returned status -1, which is no acc_status"),
    ("status:999", "returned status 999, which is no acc_status"),
])
def test_a_slot_that_words_its_error_badly_raises_accelerator_error(
        hostile, how: str, words: str) -> None:
    """The contract asks a failing slot to return its status and fill the
    error record; one that does neither well still gets AcceleratorError,
    never SystemError or a message read from memory nobody wrote."""
    got = run(EXERCISE, environment([hostile], HOSTILE_FAIL=how,
                                    ACCELERATOR_BACKEND="hostile"))
    for label, outcome in got.items():
        assert outcome[0] == "AcceleratorError", (label, outcome)
        assert words in outcome[1], (label, outcome)


@pytest.mark.parametrize("status", [3, 4, 8, 12])
def test_the_report_survives_a_device_that_fails_to_be_read(
        hostile, status: int) -> None:
    """python -m accelerator records a failure reading the selected
    backend's device, whatever exception it maps to."""
    env = environment([hostile], HOSTILE_FAIL=f"status:{status}",
                      ACCELERATOR_BACKEND="hostile")
    document = json.loads(report(env, "--json"))
    device = document["devices"][0]
    assert device["error"], device
    assert "      error: " in report(env)


def test_a_probe_that_fails_without_a_reason_says_so(hostile) -> None:
    backends = run(BACKENDS, environment([hostile], HOSTILE_PROBE="fail"))
    record = backends[len(BUILT_IN)]
    assert record["available"] is False
    assert record["reason"] == ("its probe failed (ACC_ERR_DRIVER) without "
                                "saying why"), record


# Nothing dropped in silence --------------------------------------------------

def test_refusals_past_the_report_limit_are_counted(tmp_path) -> None:
    paths = [tmp_path / f"missing{i}.so" for i in range(100)]
    backends = run(BACKENDS, environment(paths))[len(BUILT_IN):]
    assert len(backends) == 64, len(backends)
    assert [b["plugin"] for b in backends[:63]] == list(map(str, paths[:63]))
    last = backends[-1]
    assert (last["name"], last["refused"], last["plugin"]) == (
        "more plugins", True, None), last
    assert last["reason"] == ("plugin refused: 37 more plugins were refused "
                              "(ACCELERATOR_DEBUG=1 traces each)"), last


def test_every_entry_point_is_offered(hostile, tmp_path) -> None:
    """More entry points than any limit: the last one still loads."""
    lines = [f"e{i:03d} = acc_fake_plugin:RELATIVE" for i in range(80)]
    distribution(tmp_path / "site", "[accelerator.backends]\n"
                 + "\n".join(lines) + "\nzzz = acc_fake_plugin:plugin_path\n")
    env = environment(FAKE_PLUGIN_PATH=str(hostile))
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "site")
    backends = run(BACKENDS, env)
    assert backends[len(BUILT_IN)]["name"] == "hostile", backends
    assert backends[len(BUILT_IN)]["available"] is True


@pytest.mark.parametrize("path, why", [
    ("'/tmp/a' + chr(0) + 'b.so'",
     "ValueError: it gave a path with a NUL character"),
    ("os.fsdecode(b'/tmp/\\xff.so')", "ValueError: it gave a path that is "
     "not UTF-8"),
])
def test_one_bad_entry_point_path_leaves_the_others(
        hostile, tmp_path, path: str, why: str) -> None:
    distribution(tmp_path / "site", "[accelerator.backends]\n"
                 "bad = acc_fake_plugin:bad\n"
                 "good = acc_fake_plugin:plugin_path\n")
    package = tmp_path / "site" / "acc_fake_plugin" / "__init__.py"
    package.write_text(package.read_text() + f"\nbad = {path}\n")
    env = environment(FAKE_PLUGIN_PATH=str(hostile))
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "site")
    backends = run(BACKENDS, env)[len(BUILT_IN):]
    assert backends[0]["name"] == "hostile" and backends[0]["available"], \
        backends
    bad = backends[1]
    assert (bad["name"], bad["refused"], bad["plugin"]) == ("bad", True,
                                                            None), bad
    assert bad["reason"].startswith(
        f"plugin refused: its entry point did not give the plugin's path: "
        f"{why}: '/tmp/"), bad
