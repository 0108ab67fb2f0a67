"""tests/wheel_checks.py, the wheel stage's checks, on made-up wheels: a
wheel that lacks a file of the package, ships one more, or has not the
abi3 tag is refused with what differed."""
from __future__ import annotations

import pathlib
import subprocess
import sys
import zipfile

import pytest

import wheel_checks
from fake_drivers import REPO

CHECKS = REPO / "tests" / "wheel_checks.py"
WHEEL_META = ("Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
              "Tag: {tag}-linux_x86_64\n")


def make(tmp_path: pathlib.Path, files: list[str],
         tag: str = "cp311-abi3") -> tuple[pathlib.Path, pathlib.Path]:
    source = tmp_path / "accelerator"
    source.mkdir(parents=True)
    for name in ("__init__.py", "__init__.pyi", "py.typed"):
        (source / name).write_text("")
    (source / "_accelerator.abi3.so").write_text("")   # a build output
    # The public header's one copy, and the build's copy of it (and of
    # one the tree no longer has) in the package: only the first counts.
    public = tmp_path / "csrc" / "include" / "accelerator"
    public.mkdir(parents=True)
    (public / "backend.h").write_text("")
    staged = source / "include" / "accelerator"
    staged.mkdir(parents=True)
    for name in ("backend.h", "gone.h"):
        (staged / name).write_text("")
    wheel = tmp_path / f"accelerator-0.1.0-{tag}-linux_x86_64.whl"
    info = "accelerator-0.1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in files:
            z.writestr(name, "")
        z.writestr(f"{info}/WHEEL", WHEEL_META.format(tag=tag))
        z.writestr(f"{info}/METADATA", "Name: accelerator\n"
                   "Requires-Python: >=3.11\n")
    return wheel, source


def check(wheel: pathlib.Path, source: pathlib.Path,
          what: str) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; sys.path.insert(0, {str(CHECKS.parent)!r}); "
            "import wheel_checks, pathlib; "
            f"wheel_checks.{what}(pathlib.Path({str(wheel)!r}), "
            f"pathlib.Path({str(source)!r}))" if what == "check_files" else
            f"import sys; sys.path.insert(0, {str(CHECKS.parent)!r}); "
            "import wheel_checks, pathlib; "
            f"wheel_checks.{what}(pathlib.Path({str(wheel)!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60)


GOOD = ["accelerator/__init__.py", "accelerator/__init__.pyi",
        "accelerator/py.typed", "accelerator/_accelerator.abi3.so",
        "accelerator/include/accelerator/backend.h"]


def test_a_wheel_with_the_package_s_files_passes(
        tmp_path: pathlib.Path) -> None:
    wheel, source = make(tmp_path, GOOD)
    for what in ("check_files", "check_tag"):
        result = check(wheel, source, what)
        assert result.returncode == 0 and "ok: " in result.stdout, \
            result.stdout + result.stderr


@pytest.mark.parametrize("files, named", [
    ([f for f in GOOD if f != "accelerator/py.typed"], "py.typed"),
    ([*GOOD, "accelerator/fake.c"], "fake.c"),
    ([f for f in GOOD if not f.endswith(".h")], "backend.h"),
    ([f.replace(".abi3", ".cpython-311-x86_64-linux-gnu") for f in GOOD],
     "_accelerator.abi3.so"),
], ids=["a file left out", "a file more", "a public header left out", "not the abi3 extension"])
def test_a_wheel_whose_files_differ_is_refused_naming_them(
        tmp_path: pathlib.Path, files: list[str], named: str) -> None:
    wheel, source = make(tmp_path, files)
    result = check(wheel, source, "check_files")
    assert result.returncode == 1, result.stdout
    assert "FAILED: the wheel's files differ" in result.stdout
    assert named in result.stdout


def test_a_wheel_without_the_abi3_tag_is_refused(
        tmp_path: pathlib.Path) -> None:
    wheel, source = make(tmp_path, GOOD, tag="cp311-cp311")
    result = check(wheel, source, "check_tag")
    assert result.returncode == 1, result.stdout
    assert "has not the cp311-abi3 tag" in result.stdout


def test_only_a_folder_holding_the_package_shadows_the_wheel(
        tmp_path: pathlib.Path) -> None:
    """The checks run from a folder below the checkout (the test command's
    build/test-runs/...): only the root, which holds the source copy of
    the package, and the sdist shadow the installed wheel."""
    root = tmp_path / "checkout"
    (root / "accelerator").mkdir(parents=True)
    (root / "build" / "wheel").mkdir(parents=True)
    sdist = tmp_path / "sdist"
    sdist.mkdir()
    source = root / "accelerator"
    assert wheel_checks.shadows(root, source, sdist)
    assert wheel_checks.shadows(sdist, source, sdist)
    assert wheel_checks.shadows(source, source, sdist)
    assert not wheel_checks.shadows(root / "build" / "wheel", source, sdist)
    assert not wheel_checks.shadows(tmp_path, source, sdist)
