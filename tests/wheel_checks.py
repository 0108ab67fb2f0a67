"""What can differ between the wheel and the in-place build, checked on
the installed wheel (tests/check_wheel.sh runs this with the venv's
Python, from a folder outside any checkout):

    python wheel_checks.py WHEEL SOURCE SDIST

WHEEL is the built wheel, SOURCE the checkout's ``accelerator`` (the
files the wheel must ship, build outputs aside, and the public headers of
``csrc/include/accelerator``), SDIST the unpacked sdist
whose doubles are built.
Each check prints one line; the first that fails exits 1 with what
differed.  The behaviour itself is checked by the suite run against the
wheel (a slice under the build's interpreter, the whole behaviour suite
under every other CPython >= 3.11, tests/stages.py).
"""
from __future__ import annotations

import email.parser
import importlib.metadata
import os
import pathlib
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

#: the stable ABI the extension is built for (setup.py's Py_LIMITED_API)
ABI_TAG = "cp311-abi3"


def fail(what: str) -> None:
    print(f"FAILED: {what}", flush=True)
    sys.exit(1)


def ok(what: str) -> None:
    print(f"ok: {what}", flush=True)


def double_env(sdist: pathlib.Path) -> dict[str, str]:
    """The environment of a user pointing the package at the CUDA double,
    with nothing of a checkout on the path."""
    drivers = sdist / "tests" / "drivers" / "build"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELERATOR_", "FAKE_", "PYTEST_"))
           and k != "PYTHONPATH"}
    env.update(ACCELERATOR_CUDA_LIBRARY=str(drivers / "libcuda.so.1"),
               FAKE_CUDA_DEVICES="2")
    return env


def check_files(wheel: pathlib.Path, source: pathlib.Path) -> None:
    """The package's files as the checkout has them (a module, a stub or
    a header left out of the package data or the sdist's manifest differs
    only here: the in-place build imports them from the checkout), one
    extension with the abi3 name, and nothing else: no tests, no C
    sources."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    package = {n for n in names if not n.split("/")[0].endswith(".dist-info")}
    expected = {f"accelerator/{p.relative_to(source).as_posix()}"
                for p in source.rglob("*") if p.is_file()
                and "__pycache__" not in p.parts
                and p.relative_to(source).parts[0] != "include"
                and p.suffix not in (".so", ".pyc", ".gcda", ".gcno")}
    # The public headers: one copy in csrc/include/, which the build
    # copies into the package (its include/ is a build output).
    expected |= {f"accelerator/include/accelerator/{h.name}"
                 for h in (source.parent / "csrc" / "include"
                           / "accelerator").glob("*.h")}
    extension = "accelerator/_accelerator.abi3.so"
    expected.add(extension)
    if package != expected:
        fail(f"the wheel's files differ from the source package's: "
             f"missing {sorted(expected - package)}, "
             f"extra {sorted(package - expected)}")
    ok(f"the wheel ships the {len(expected)} files of accelerator/ "
       "and the abi3 extension, nothing else")


def check_tag(wheel: pathlib.Path) -> None:
    """One wheel for every CPython >= 3.11: the abi3 tag in its name and
    in its WHEEL metadata, and the requirement in its METADATA."""
    parts = wheel.name[:-len(".whl")].split("-")
    if "-".join(parts[2:4]) != ABI_TAG:
        fail(f"the wheel's name {wheel.name} has not the {ABI_TAG} tag")
    with zipfile.ZipFile(wheel) as z:
        info = next(n.split("/")[0] for n in z.namelist()
                    if n.endswith(".dist-info/WHEEL"))
        meta = email.parser.Parser().parsestr(
            z.read(f"{info}/WHEEL").decode())
        metadata = email.parser.Parser().parsestr(
            z.read(f"{info}/METADATA").decode())
    tags = meta.get_all("Tag") or []
    if not tags or not all(t.startswith(ABI_TAG + "-") for t in tags):
        fail(f"the WHEEL metadata's tags are {tags}, not {ABI_TAG}-*")
    if meta.get("Root-Is-Purelib") != "false":
        fail("the WHEEL metadata calls an extension's wheel pure")
    if metadata.get("Requires-Python") != ">=3.11":
        fail(f"Requires-Python is {metadata.get('Requires-Python')!r}")
    ok(f"tagged {', '.join(tags)}; Requires-Python >=3.11")


def check_extension_links_no_libpython() -> None:
    """An abi3 extension takes its symbols from the interpreter that
    loads it: it names no libpython of its own."""
    import accelerator._accelerator as ext
    needed = subprocess.run(["readelf", "-d", ext.__file__],
                            capture_output=True, text=True)
    if needed.returncode != 0:
        ok("readelf is not installed: the extension's links not read")
        return
    if "libpython" in needed.stdout:
        fail(f"{ext.__file__} links a libpython:\n{needed.stdout}")
    ok("the extension links no libpython")


def check_imported_from_site_packages() -> None:
    """The package and its extension come from this environment's
    site-packages, not from a checkout."""
    import accelerator
    import accelerator._accelerator as ext
    site = pathlib.Path(sysconfig.get_paths()["platlib"]).resolve()
    for what, path in (("accelerator", accelerator.__file__),
                       ("accelerator._accelerator", ext.__file__)):
        if not pathlib.Path(path).resolve().is_relative_to(site):
            fail(f"{what} was imported from {path}, not from {site}")
    ok(f"accelerator and its extension import from {site}")


def check_package_data() -> None:
    """The typing promise ships: py.typed and the stubs beside the
    modules they describe."""
    import accelerator
    here = pathlib.Path(accelerator.__file__).parent
    for name in ("py.typed", "__init__.pyi", "_accelerator.pyi"):
        if not (here / name).is_file():
            fail(f"{name} is not installed beside {accelerator.__file__}")
    ok("py.typed and the stubs are installed")


def check_entry_point(sdist: pathlib.Path) -> None:
    """pytest finds the plugin through the wheel's pytest11 entry point
    alone: a user's test takes accel_device without naming the plugin."""
    points = [e for e in importlib.metadata.entry_points(group="pytest11")
              if e.value == "accelerator.pytest_plugin"]
    if [e.name for e in points] != ["accelerator.pytest_plugin"]:
        fail(f"the pytest11 entry points for the plugin are {points}")
    with tempfile.TemporaryDirectory() as tmp:
        # Its own rootdir: no checkout's pytest configuration (and its
        # pythonpath) from a folder above.
        (pathlib.Path(tmp) / "pytest.ini").write_text("[pytest]\n")
        test = pathlib.Path(tmp) / "test_user.py"
        test.write_text(
            "import pathlib, sysconfig\n\n"
            "import accelerator\n\n"
            "def test_device(accel_device):\n"
            "    site = pathlib.Path(sysconfig.get_paths()['platlib'])\n"
            "    assert pathlib.Path(accelerator.__file__).is_relative_to("
            "site)\n"
            "    assert accel_device.type == 'cuda'\n")
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             str(test)], cwd=tmp, env=double_env(sdist),
            capture_output=True, text=True, timeout=300)
    if result.returncode != 0 or "2 passed" not in result.stdout:
        fail("a user's test of accel_device, with the plugin from the "
             f"entry point:\n{result.stdout}{result.stderr}")
    ok("the pytest11 entry point loads the plugin: accel_device ran on "
       "both devices")


def check_main(sdist: pathlib.Path) -> None:
    """`python -m accelerator` runs from the wheel and finds the double."""
    result = subprocess.run(
        [sys.executable, "-m", "accelerator", "--require"],
        env=double_env(sdist), capture_output=True, text=True, timeout=300)
    if result.returncode != 0 or "Accelerator: cuda" not in result.stdout \
            or "2 devices" not in result.stdout or "Traceback" in result.stderr:
        fail(f"python -m accelerator --require:\n{result.stdout}"
             f"{result.stderr}")
    ok("python -m accelerator --require finds the CUDA double")


def shadows(here: pathlib.Path, source: pathlib.Path,
            sdist: pathlib.Path) -> bool:
    """Whether children run in `here` could import the package from the
    sdist or the checkout (`source`: its package folder) instead of the
    wheel.  The folder a child runs in comes first on its sys.path (-c,
    -m): it shadows the wheel where it holds a package of that name, as
    the checkout's root does; a folder below the root (build/) does not."""
    return here.is_relative_to(sdist) or here.is_relative_to(source) \
        or (here / source.name).exists()


def main(argv: list[str]) -> int:
    wheel, source, sdist = (pathlib.Path(a).resolve() for a in argv)
    here = pathlib.Path.cwd().resolve()
    if shadows(here, source, sdist):
        fail("run from outside the sdist and the checkout, so that nothing "
             "of them shadows the installed package")
    check_files(wheel, source)
    check_tag(wheel)
    check_imported_from_site_packages()
    check_extension_links_no_libpython()
    check_package_data()
    check_entry_point(sdist)
    check_main(sdist)
    print("wheel checks: all 7 ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
