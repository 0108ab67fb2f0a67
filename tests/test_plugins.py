"""Backend plugins (docs/plugins.rst): shared objects found through
ACCELERATOR_BACKEND_PLUGINS and the ``accelerator.backends`` entry points,
loaded at the probe (never at import) after the built-in backends, checked
and either registered as a backend like any other or refused with the
reason that ``backends()`` and ``python -m accelerator`` show.

The plugins are compiled here with cc against the public header: the
variants of tests/plugins/variants.c (one per refusal, and a few that
load) and the template, plugins/template/backend.c, a working backend run
end to end.  Each configuration runs in its own process.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import fake_drivers
from fake_drivers import REPO, SRC

VARIANTS = REPO / "tests" / "plugins" / "variants.c"
TEMPLATE = REPO / "plugins" / "template"
#: the built-in backends find no driver here, quickly
NO_DRIVERS = {name: "/nonexistent/accelerator-test/lib.so" for name in (
    "ACCELERATOR_CUDA_LIBRARY", "ACCELERATOR_ZE_LIBRARY",
    "ACCELERATOR_HIP_LIBRARY", "ACCELERATOR_OPENCL_LIBRARY")}
BUILT_IN = list(fake_drivers.DOUBLES)


def compiler() -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc) to build the test plugins")
    return cc


@pytest.fixture(scope="module")
def include() -> str:
    """The folder of accelerator/backend.h that plugins compile against,
    as a plugin's build finds it: accelerator.get_include()."""
    import accelerator
    folder = pathlib.Path(accelerator.get_include())
    assert (folder / "accelerator" / "backend.h").exists(), folder
    return str(folder)


def build(folder: pathlib.Path, include: str, name: str, *defines: str,
          source: pathlib.Path = VARIANTS) -> pathlib.Path:
    """Compile source into folder/lib<name>.so, warnings as errors."""
    out = folder / f"lib{name}.so"
    result = subprocess.run(
        [compiler(), "-std=gnu11", "-Wall", "-Wextra", "-Werror",
         "-Wno-missing-field-initializers", "-shared", "-fPIC",
         "-fvisibility=hidden", f"-I{include}", *defines, str(source),
         "-o", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return out


def environment(plugins: list[pathlib.Path | str] | None = None,
                **extra: str) -> dict[str, str]:
    env = fake_drivers.clean_environment()
    env.update(NO_DRIVERS)
    env["PYTHONPATH"] = str(SRC)
    if plugins is not None:
        env["ACCELERATOR_BACKEND_PLUGINS"] = ":".join(map(str, plugins))
    env.update(extra)
    return env


def run(code: str, env: dict[str, str], timeout: float = 120) -> object:
    """Run code in a fresh interpreter; what it prints last, as JSON."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                            env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


BACKENDS = """
import json, accelerator
print(json.dumps({"available": accelerator.is_available(),
                  "backends": accelerator.backends()}))
"""


def report(env: dict[str, str], *arguments: str) -> str:
    result = subprocess.run([sys.executable, "-m", "accelerator", *arguments],
                            env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


# Refusals ------------------------------------------------------------------

ABI_NEXT_MINOR = "-DABI_MINOR=(ACCELERATOR_BACKEND_ABI_MINOR+1)"
#: The header's minor version, and the regex text of this and the next.
ABI_MINOR = int(re.search(
    r"#define ACCELERATOR_BACKEND_ABI_MINOR (\d+)",
    (pathlib.Path(__file__).resolve().parents[1] / "csrc" / "include"
     / "accelerator" / "backend.h").read_text()).group(1))
THIS_ABI, NEXT_ABI = rf"1\.{ABI_MINOR}", rf"1\.{ABI_MINOR + 1}"

#: case -> (how the variant is built, the reason it is refused for)
REFUSALS: dict[str, tuple[tuple[str, ...], str]] = {
    "missing": ((), r"the file does not open: \S+: cannot open shared "
                    r"object file: No such file or directory"),
    "not_a_library": ((), r"the file does not open: \S+: (invalid ELF "
                          r"header|file too short)"),
    "undefined_symbol": (("-DUNDEFINED_SYMBOL",),
                         r"the file does not open: \S+: undefined symbol: "
                         r"variant_nowhere"),
    "no_entry": (("-DNO_ENTRY",), r"it exports no accelerator_backend_plugin"
                                  r" \(.*undefined symbol: "
                                  r"accelerator_backend_plugin"),
    "null_table": (("-DNULL_TABLE",),
                   r"accelerator_backend_plugin\(\) returned no table"),
    "abi_major": (("-DABI_MAJOR=(ACCELERATOR_BACKEND_ABI_MAJOR+1)",),
                  r"it was built for backend ABI 2\.\d+, and this "
                  rf"accelerator speaks {THIS_ABI}: another major version"),
    "abi_size": (("-DSTRUCT_SIZE=(sizeof(acc_backend)-8)",),
                 rf"its struct_size, \d+, is not the size of ABI {THIS_ABI}'s"
                 r" table, \d+ bytes"),
    "abi_newer_slot": ((ABI_NEXT_MINOR, "-DAPPENDED_SLOT=1"),
                       rf"it was built for backend ABI {NEXT_ABI} and fills "
                       rf"slots that this accelerator \(ABI {THIS_ABI}\) does "
                       r"not know"),
    "abi_1_0_size": (("-DABI_MINOR=0",),
                     r"its struct_size, \d+, is not the size of ABI 1\.0's "
                     r"table, \d+ bytes"),
    "incomplete": (("-DWITHOUT_STREAM_QUERY",),
                   r"incomplete backend: its required slot stream_query is "
                   r"NULL"),
    "partial_group": (("-DPARTIAL_MEMORY",),
                      r"incomplete backend: its device memory slots are "
                      r"filled in part: mem_free is NULL while mem_alloc is "
                      r"set"),
    "builtin_name": (('-DNAME="hip"', '-DDEVICE_TYPE="hipv"'),
                     r"its name 'hip' is taken: the built-in backend hip "
                     r"has it as its name"),
    "builtin_type": (('-DNAME="typetaken"', '-DDEVICE_TYPE="xpu"'),
                     r"its device type 'xpu' is taken: the built-in backend "
                     r"xpu has it as its name"),
    "bad_name": (('-DNAME="Bad Name"',),
                 r"its name 'Bad Name' cannot be used: expected 1 to 31 "
                 r"lowercase letters"),
    "none": (('-DNAME="none"',), r"its name 'none' cannot be used: "
                                 r"ACCELERATOR_BACKEND=none means no "
                                 r"accelerator"),
    "same_file": ((), r"it is the plugin first, loaded already from \S+/"
                      r"libfirst\.so"),
    "same_name": (('-DNAME="first"',),
                  r"its name 'first' is taken: the plugin first \(\S+/"
                  r"libfirst\.so\) has it as its name"),
}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory,
             include: str) -> dict[str, object]:
    """One process with every variant of REFUSALS named, after a plugin
    that loads ("first"): its backends(), its report as text and JSON."""
    folder = tmp_path_factory.mktemp("refusals")
    first = build(folder, include, "first", '-DNAME="first"')
    paths: dict[str, pathlib.Path] = {}
    for case, (defines, _) in REFUSALS.items():
        if case == "missing":
            paths[case] = folder / "libmissing.so"
        elif case == "not_a_library":
            paths[case] = folder / "libnot_a_library.so"
            paths[case].write_text("not a shared object\n")
        elif case == "same_file":
            paths[case] = first
        else:
            name = [] if any(d.startswith("-DNAME=") for d in defines) \
                else [f'-DNAME="{case}"']
            paths[case] = build(folder, include, case, *defines, *name)
    env = environment([first, *paths.values()])
    got = run(BACKENDS, env)
    return {"paths": paths, "first": first, "backends": got["backends"],
            "text": report(env), "json": json.loads(report(env, "--json"))}


def record_of(backends: list[dict], path: pathlib.Path) -> dict:
    found = [b for b in backends if b["plugin"] == str(path)]
    assert len(found) >= 1, (path, backends)
    return found[-1]


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refused_plugin_shows_its_reason(refusals, case: str) -> None:
    """Each way a plugin is refused: the file does not open, lacks the
    symbol, hands no table, has another major ABI version or a wrong
    size, fills slots of a newer minor version, fails the table check
    (backend_check.c), or takes a name already taken."""
    path = refusals["paths"][case]
    record = record_of(refusals["backends"], path)
    assert record["refused"] is True, record
    assert record["available"] is False and record["selected"] is False
    assert record["origin"] == "ACCELERATOR_BACKEND_PLUGINS"
    assert record["reason"].startswith("plugin refused: "), record
    assert re.search(REFUSALS[case][1], record["reason"]), record["reason"]
    # The report says the same, as text and as JSON.
    assert f"      reason: {record['reason']}" in refusals["text"]
    assert record_of(refusals["json"]["backends"], path) == {
        key: record[key] for key in record_of(refusals["json"]["backends"],
                                              path)}


def test_refused_plugins_follow_the_backends(refusals) -> None:
    names = [b["name"] for b in refusals["backends"]]
    assert names[:len(BUILT_IN) + 1] == [*BUILT_IN, "first"], names
    assert all(b["refused"] for b in refusals["backends"][len(BUILT_IN)
                                                          + 1:])
    assert len(names) == len(BUILT_IN) + 1 + len(REFUSALS)
    # A refused plugin's table, when it was read, names it in the report;
    # otherwise its file does.
    assert record_of(refusals["backends"], refusals["paths"]["incomplete"])[
        "name"] == "incomplete"
    assert record_of(refusals["backends"], refusals["paths"]["missing"])[
        "name"] == "libmissing.so"


def test_the_text_report_marks_refused_plugins(refusals) -> None:
    text = refusals["text"]
    assert "  first: selected\n" in text, text
    assert f"      plugin: {refusals['first']} (ACCELERATOR_BACKEND_PLUGINS)" \
        in text
    assert "  incomplete: refused\n" in text, text


# Plugins that load ---------------------------------------------------------

@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory,
           include: str) -> dict[str, pathlib.Path]:
    folder = tmp_path_factory.mktemp("loaded")
    return {
        "plain": build(folder, include, "plain", '-DNAME="plain"'),
        "newer": build(folder, include, "newer", '-DNAME="newer"',
                       ABI_NEXT_MINOR, "-DAPPENDED_SLOT=0"),
        # Built against ABI 1.0's table, which ended before the compilers.
        "older": build(folder, include, "older", '-DNAME="older"',
                       "-DABI_MINOR=0",
                       "-DSTRUCT_SIZE=offsetof(acc_backend,source_formats)"),
        "failing": build(folder, include, "failing", '-DNAME="failing"',
                         "-DPROBE_FAILS"),
    }


def test_plugins_register_after_the_built_in_backends(loaded) -> None:
    """In the order named; one built for a newer minor ABI version that
    fills none of the slots this core lacks loads too, as does one built
    for ABI 1.0 (its table ends before the compilers); a plugin whose
    probe fails is registered, and unavailable for its own reason."""
    got = run(BACKENDS, environment(
        [loaded["plain"], loaded["newer"], loaded["failing"],
         loaded["older"]]))
    backends = got["backends"]
    assert [b["name"] for b in backends] == [*BUILT_IN, "plain", "newer",
                                             "failing", "older"]
    for b in backends[:len(BUILT_IN)]:
        assert (b["plugin"], b["origin"], b["refused"]) == (
            None, "built-in", False), b
    plain, newer, failing, older = backends[len(BUILT_IN):]
    assert older["available"] and not older["refused"], older
    assert plain["plugin"] == str(loaded["plain"])
    assert plain["origin"] == "ACCELERATOR_BACKEND_PLUGINS"
    # The first usable backend is selected: no built-in one is, here.
    assert got["available"] is True and plain["selected"] is True
    assert plain["available"] and newer["available"], backends
    assert not any(b["refused"] for b in backends), backends
    assert failing["available"] is False
    assert failing["reason"] == "the variant's own reason: no device here"


def test_at_most_sixteen_plugins_load(tmp_path, include) -> None:
    plugins = [build(tmp_path, include, f"p{i}", f'-DNAME="p{i}"')
               for i in range(17)]
    backends = run(BACKENDS, environment(plugins))["backends"]
    assert [b["name"] for b in backends if b["plugin"] and not b["refused"]
            ] == [f"p{i}" for i in range(16)]
    last = record_of(backends, plugins[-1])
    assert last["reason"] == \
        "plugin refused: not loaded: at most 16 plugins are loaded"


@pytest.mark.parametrize("name", ["newer", "failing"])
def test_accelerator_backend_selects_a_plugin(loaded, name: str) -> None:
    got = run("""
        import json, accelerator
        try:
            accelerator.current_device_index()
            error = None
        except RuntimeError as exc:
            error = str(exc)
        acc = accelerator.current_accelerator()
        print(json.dumps([accelerator.is_available(),
                          acc.type if acc else None, error]))
        """, environment([loaded["plain"], loaded[name]],
                         ACCELERATOR_BACKEND=name))
    if name == "newer":
        assert got == [True, "newer", None]
    else:
        available, acc, error = got
        assert (available, acc) == (False, None)
        assert "[failing: the variant's own reason: no device here]" in error
        assert "not probed: ACCELERATOR_BACKEND=failing" in error


def test_accelerator_backend_naming_a_refused_plugin_says_why(
        loaded, tmp_path, include) -> None:
    refused = build(tmp_path, include, "refused", '-DNAME="refused"',
                    "-DWITHOUT_STREAM_QUERY")
    error = run("""
        import json, accelerator
        try:
            accelerator.current_device_index()
        except RuntimeError as exc:
            print(json.dumps(str(exc)))
        """, environment([refused], ACCELERATOR_BACKEND="refused"))
    assert "not probed: ACCELERATOR_BACKEND=refused]" in error, error
    assert "[refused: plugin refused: incomplete backend: its required " \
        "slot stream_query is NULL]" in error, error


def test_an_unknown_backend_name_lists_the_plugins(loaded) -> None:
    got = run(BACKENDS, environment([loaded["plain"]],
                                    ACCELERATOR_BACKEND="nosuch"))
    assert got["available"] is False
    assert got["backends"][0]["reason"] == (
        "not probed: ACCELERATOR_BACKEND=nosuch names no backend (expected "
        "cuda, xpu, hip, opencl, plain or none)")


def test_plugins_load_at_the_probe_never_at_import(loaded) -> None:
    got = run(f"""
        import json, sys
        def mapped():
            return {str(loaded['plain'])!r} in open('/proc/self/maps').read()
        import accelerator
        at_import = [mapped(), accelerator._accelerator._probed(),
                     "accelerator._plugins" in sys.modules]
        accelerator.is_available()
        print(json.dumps([at_import, mapped()]))
        """, environment([loaded["plain"]]))
    assert got == [[False, False, False], True]


# The template, end to end ---------------------------------------------------

@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory,
             include: str) -> pathlib.Path:
    return build(tmp_path_factory.mktemp("template"), include, "template",
                 source=TEMPLATE / "backend.c")


def test_the_template_runs_as_a_backend(template) -> None:
    """A plugin gets what a built-in backend gets: devices, streams,
    events, the caching allocator and its statistics, device strings."""
    got = run("""
        import json, accelerator as a
        assert a.is_available() and a.device_count() == 1
        dev = a.current_accelerator()
        b = a.Buffer(4096)
        b.copy_from(bytes(range(256)) * 16)
        out = bytearray(4096)
        s = a.Stream()
        start, end = a.Event(enable_timing=True), a.Event(enable_timing=True)
        start.record(s)
        b.fill(7, stream=s)
        end.record(s)
        end.synchronize()
        b.copy_to(out)
        print(json.dumps({
            "device": str(dev), "parsed": str(a.device("template:0")),
            "name": a.get_device_name(0),
            "out": list(set(out)), "elapsed": start.elapsed_time(end) >= 0,
            "allocated": a.memory_allocated(0),
            "stream": s.device_type, "query": s.query()}))
        """, environment([template], ACCELERATOR_BACKEND="template"))
    assert got == {"device": "template", "parsed": "template:0",
                   "name": "Template host device", "out": [7],
                   "elapsed": True, "allocated": 4096, "stream": 20,
                   "query": True}


def test_a_device_type_of_no_backend_is_refused_with_the_plugins_named(
        template) -> None:
    got = run("""
        import json, accelerator as a
        try:
            a.device("nosuch:0")
        except ValueError as exc:
            print(json.dumps(str(exc)))
        """, environment([template]))
    assert ", privateuseone, or a plugin's: template device type at start " \
        "of device string: 'nosuch:0'" in got, got


def test_the_report_shows_the_selected_plugin(template) -> None:
    text = report(environment([template], ACCELERATOR_BACKEND="template"))
    assert "Accelerator: template (driver 1.0), 1 device\n" \
        "  template:0  Template host device\n" in text, text
    assert "      host processors: " in text, text
    assert "  template: selected\n" in text, text
    assert f"      plugin: {template} (ACCELERATOR_BACKEND_PLUGINS)" in text


def test_the_report_reads_a_plugin_without_device_properties(
        loaded) -> None:
    """Device properties and memory information are optional slots: the
    report leaves them unknown instead of failing."""
    document = json.loads(report(environment([loaded["plain"]]), "--json"))
    assert document["backend"] == "plain"
    device = document["devices"][0]
    assert (device["device"], device["name"], device["total_memory"],
            device["error"]) == ("plain:0", None, None, None), device


# Entry points ---------------------------------------------------------------

def distribution(site: pathlib.Path, entry_points: str) -> None:
    """A distribution installed in site: its metadata folder and its
    package, acc_fake_plugin, whose plugin_path() returns the path in
    FAKE_PLUGIN_PATH."""
    info = site / "acc_fake_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acc-fake-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    package = site / "acc_fake_plugin"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent("""
        import os
        def plugin_path():
            return os.environ["FAKE_PLUGIN_PATH"]
        RELATIVE = "libtemplate.so"
        """))


ENTRY_POINTS = """\
[accelerator.backends]
template = acc_fake_plugin:plugin_path
broken = acc_fake_missing:plugin_path
relative = acc_fake_plugin:RELATIVE
"""


def test_entry_points_name_plugins(template, tmp_path) -> None:
    distribution(tmp_path / "site", ENTRY_POINTS)
    env = environment(FAKE_PLUGIN_PATH=str(template))
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "site")
    got = run(BACKENDS, env)
    by_name = {b["name"]: b for b in got["backends"][len(BUILT_IN):]}
    assert list(by_name) == ["template", "broken", "relative"], by_name
    assert by_name["template"]["plugin"] == str(template)
    assert by_name["template"]["origin"] == (
        "entry point template = acc_fake_plugin:plugin_path "
        "(acc-fake-plugin 1.0)")
    assert by_name["template"]["available"] is True
    broken = by_name["broken"]
    assert broken["refused"] and broken["plugin"] is None
    assert broken["reason"] == (
        "plugin refused: its entry point did not give the plugin's path: "
        "ModuleNotFoundError: No module named 'acc_fake_missing'")
    assert by_name["relative"]["reason"] == (
        "plugin refused: its entry point did not give the plugin's path: "
        "ValueError: it gave 'libtemplate.so', which is not an absolute "
        "path")
    text = report(env)
    assert "      plugin: named by entry point broken = " \
        "acc_fake_missing:plugin_path (acc-fake-plugin 1.0)" in text, text


def test_the_environment_variable_wins_over_an_entry_point(
        template, tmp_path, include) -> None:
    other = build(tmp_path, include, "other", source=TEMPLATE / "backend.c")
    distribution(tmp_path / "site", ENTRY_POINTS)
    env = environment([other], FAKE_PLUGIN_PATH=str(template))
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "site")
    backends = run(BACKENDS, env)["backends"]
    mine = backends[len(BUILT_IN)]
    assert (mine["name"], mine["plugin"]) == ("template", str(other))
    installed = record_of(backends, template)
    assert installed["refused"] is True
    assert installed["reason"] == (
        f"plugin refused: its name 'template' is taken: the plugin template "
        f"({other}) has it as its name")


CHEAP = """
import json, sys
before = "importlib.metadata" in sys.modules
import accelerator
accelerator.is_available()
print(json.dumps([before, "accelerator._plugins" in sys.modules,
                  "importlib.metadata" in sys.modules]))
"""


def test_no_plugin_installed_costs_no_importlib_metadata(tmp_path) -> None:
    """The probe lists entry points with importlib.metadata (tens of ms to
    import) only when some distribution's metadata names the group."""
    distribution(tmp_path / "site", "[console_scripts]\nx = y:z\n")
    env = environment()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "site")
    assert run(CHEAP, env) == [False, True, False]
    (tmp_path / "site" / "acc_fake_plugin-1.0.dist-info"
     / "entry_points.txt").write_text(ENTRY_POINTS)
    assert run(CHEAP, env) == [False, True, True]


@pytest.mark.parametrize("first", ["threads", "subinterpreter"])
def test_threads_and_subinterpreters_probe_with_the_plugins(
        template, tmp_path, first: str) -> None:
    """Whichever thread or interpreter probes first offers the entry
    points; every one then sees the plugin."""
    interpreters = "_interpreters" if sys.version_info >= (3, 13) \
        else "_xxsubinterpreters"
    distribution(tmp_path / "site", ENTRY_POINTS)
    env = environment(FAKE_PLUGIN_PATH=str(template),
                      ACCELERATOR_BACKEND="template")
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "site")
    got = run(f"""
        import json, threading
        import {interpreters} as interpreters
        import accelerator

        def in_subinterpreter():
            interp = interpreters.create()
            interpreters.run_string(interp, "import accelerator; "
                                    "assert accelerator.is_available()")
            interpreters.destroy(interp)

        seen = []
        def probe():
            seen.append(accelerator.current_accelerator().type)
        if {first!r} == "subinterpreter":
            in_subinterpreter()
        threads = [threading.Thread(target=probe) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        in_subinterpreter()
        print(json.dumps(seen))
        """, env)
    assert got == ["template"] * 8


@pytest.mark.parametrize("discover, why", [
    ("lambda: 1 / 0", "ZeroDivisionError: division by zero"),
    ("lambda: {}", "TypeError: accelerator._plugins.discover() gave "
                   "something other than a list"),
    ("lambda: [('x', 1, 'o', None)]", "TypeError: accelerator._plugins."
     "discover() gave something other than a str or None for a text"),
])
def test_entry_points_that_cannot_be_listed_are_reported(
        discover: str, why: str) -> None:
    """The probe goes on without them, and the report says why."""
    got = run(f"""
        import json
        import accelerator, accelerator._plugins
        accelerator._plugins.discover = {discover}
        available = accelerator.is_available()
        print(json.dumps([available, accelerator.backends()[-1]]))
        """, environment())
    available, record = got
    assert available is False
    assert (record["name"], record["refused"], record["plugin"]) == (
        "entry points", True, None), record
    assert record["reason"] == (
        "plugin refused: the accelerator.backends entry points could not "
        f"be listed: {why}"), record
