"""Our DLPack declarations (csrc/python/dlpack_abi.h) match a real dlpack.h.

tests/drivers/check_dlpack_abi.c includes both and asserts, with
_Static_assert, that every code, struct size, field offset and field size
we declare is the spec header's; it is compiled with -Werror.  Debian's
libdlpack-dev is DLPack 0.6 (no versioned struct, no kDLOneAPI): it checks
what it has.  A current (1.x) header is looked for in
$ACCELERATOR_DLPACK_INCLUDE (a folder holding dlpack/dlpack.h or
dlpack.h) and in the files of the installed Python distributions (the
cuda-core wheel of tests/requirements.txt ships one).
"""
from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from fake_drivers import REPO

CHECK = REPO / "tests" / "drivers" / "check_dlpack_abi.c"
DEBIAN = pathlib.Path("/usr/include/dlpack/dlpack.h")


def major_version(header: pathlib.Path) -> int:
    match = re.search(r"#define\s+DLPACK_MAJOR_VERSION\s+(\d+)",
                      header.read_text(errors="replace"))
    return int(match.group(1)) if match else 0


def current_header() -> pathlib.Path | None:
    """A dlpack.h of DLPack 1.x at hand, or None."""
    candidates: list[pathlib.Path] = []
    folder = os.environ.get("ACCELERATOR_DLPACK_INCLUDE")
    if folder:
        candidates += [pathlib.Path(folder) / "dlpack" / "dlpack.h",
                       pathlib.Path(folder) / "dlpack.h"]
    for dist in importlib.metadata.distributions():
        for file in dist.files or ():
            if file.name == "dlpack.h":
                candidates.append(pathlib.Path(dist.locate_file(file)))
    for header in candidates:
        if header.is_file() and major_version(header) >= 1:
            return header
    return None


def compile_check(tmp_path: pathlib.Path, header: pathlib.Path | None,
                  source: pathlib.Path = CHECK) -> subprocess.CompletedProcess:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler"
    include: list[str] = []
    if header is not None:
        # Served as <dlpack/dlpack.h>, ahead of /usr/include.
        (tmp_path / "inc" / "dlpack").mkdir(parents=True, exist_ok=True)
        shutil.copy(header, tmp_path / "inc" / "dlpack" / "dlpack.h")
        include = [f"-I{tmp_path / 'inc'}"]
    return subprocess.run(
        [compiler, "-std=c11", "-Wall", "-Wextra", "-Werror", *include,
         "-c", str(source), "-o", str(tmp_path / "check.o")],
        capture_output=True, text=True)


@pytest.mark.skipif(not DEBIAN.exists(),
                    reason=f"no {DEBIAN} (apt-get install libdlpack-dev)")
def test_declarations_match_debian_dlpack_0_6(tmp_path) -> None:
    assert major_version(DEBIAN) == 0  # 0.6: the legacy ABI only
    result = compile_check(tmp_path, None)
    assert result.returncode == 0, result.stderr


def test_declarations_match_a_current_dlpack(tmp_path) -> None:
    header = current_header()
    if header is None:
        pytest.skip("no DLPack 1.x dlpack.h at hand: set "
                    "ACCELERATOR_DLPACK_INCLUDE, or install a wheel that "
                    "ships one (cuda-core, in tests/requirements.txt)")
    result = compile_check(tmp_path, header)
    assert result.returncode == 0, (header, result.stderr)


@pytest.mark.skipif(not DEBIAN.exists(),
                    reason=f"no {DEBIAN} (apt-get install libdlpack-dev)")
def test_the_check_catches_a_wrong_declaration(tmp_path) -> None:
    ours = (REPO / "csrc" / "python" / "dlpack_abi.h").read_text()
    wrong = ours.replace("    uint16_t lanes;", "    uint8_t lanes;")
    assert wrong != ours
    (tmp_path / "csrc" / "python").mkdir(parents=True)
    (tmp_path / "csrc" / "python" / "dlpack_abi.h").write_text(wrong)
    source = tmp_path / "sub" / "sub" / "check.c"
    source.parent.mkdir(parents=True)
    source.write_text(CHECK.read_text())
    result = compile_check(tmp_path, None, source)
    assert result.returncode != 0
    assert "DLDataType.lanes size differs" in result.stderr, result.stderr
