"""The layers are one-way.  The Python layer (docs/python-layer.rst): no
file of it calls into the module file, no two of its files call each
other, and all its files parse a call's arguments with the one parser in
py_args.c.  The core (docs/internals.rst): no loop among its files; what
would call upward goes through the lifecycle hooks.

Read from the sources, as text (which file defines each function or
object that is not static, and which other files name it), and from the
objects of the in-place build.
"""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
CSRC = REPO / "csrc"
MODULE = "_accelerator.c"


def layer_files(python: bool = True) -> dict[str, str]:
    """The C files of the Python layer (else of the core, backends
    apart), comments and strings blanked out."""
    files = {}
    for path in sorted((CSRC / ("python" if python else "core")).glob("*.c")):
        text = path.read_text()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
        text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
        files[path.name] = text
    return files


def exported(text: str) -> set[str]:
    """The names a file defines for other files: functions and objects
    at file scope that are not static."""
    names = set()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        func = re.match(r"([A-Za-z_]\w*)\(", line)
        # A definition's return type is the line above it (PEP 7).
        returns = lines[i - 1] if i > 0 else ""
        if func and re.fullmatch(r"[A-Za-z_][\w ]*\**", returns) \
                and not returns.startswith("static"):
            names.add(func.group(1))
        data = re.match(r"(?!static)[A-Za-z_][\w ]*?[\s*](\w+)(\[\])? =",
                        line)
        if data:
            names.add(data.group(1))
    return names


def calls(python: bool = True) -> dict[str, set[str]]:
    """file -> the other files of its layer whose names it uses."""
    files = layer_files(python)
    defined = {name: exported(text) for name, text in files.items()}
    graph: dict[str, set[str]] = {}
    for name, text in files.items():
        words = set(re.findall(r"\b\w+\b", text))
        graph[name] = {other for other, names in defined.items()
                       if other != name and words & names}
    return graph


def linked_calls(python: bool = True) -> dict[str, set[str]]:
    """file -> the other files of its layer whose symbols its object uses,
    from the objects of the last in-place build: these see what the
    sources hide in macros and inline functions (a method table's
    DLPack entries, the parser's inline path)."""
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    folder = "python" if python else "core"
    objects = sorted(REPO.glob(f"build/temp.*/csrc/{folder}/*.o"))
    layer = {o.name: o for o in objects}
    if not layer:
        pytest.skip("no in-place build (setup.py build_ext --inplace) "
                    "left its objects in build/")

    def symbols(path: pathlib.Path, flags: list[str]) -> set[str]:
        out = subprocess.run(["nm", *flags, str(path)], check=True,
                             capture_output=True, text=True).stdout
        return {line.split()[-1] for line in out.splitlines() if line}

    defined = {name: symbols(path, ["-g", "--defined-only"])
               for name, path in layer.items()}
    graph = {}
    for name, path in layer.items():
        used = symbols(path, ["-u"])
        graph[name] = {other for other, names in defined.items()
                       if other != name and used & names}
    return graph


def find_loop(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name):] + [name]
        if name in done:
            return None
        for other in sorted(graph[name]):
            loop = visit(other, path + [name])
            if loop:
                return loop
        done.add(name)
        return None

    for name in sorted(graph):
        loop = visit(name, [])
        if loop:
            return loop
    return None


def test_the_reader_sees_the_calls_it_must() -> None:
    """The check can fail: it sees the module file's use of the types'
    specs and the types' use of the helpers."""
    graph = calls()
    assert "py_stream.c" in graph[MODULE]
    assert "py_helpers.c" in graph["py_stream.c"]
    assert "py_args.c" in graph["py_buffer.c"]


def test_no_file_calls_the_module_file() -> None:
    users = sorted(name for name, uses in calls().items() if MODULE in uses)
    assert users == [], f"{users} call into {MODULE}: what they share " \
        "belongs in py_helpers.c or py_args.c"


def test_no_loop_among_the_python_layer_files() -> None:
    loop = find_loop(calls())
    assert loop is None, "a loop: " + " -> ".join(loop or [])


def test_no_loop_among_the_built_objects() -> None:
    graph = linked_calls()
    assert "py_dlpack.o" in graph["py_buffer.o"]  # through a macro
    users = sorted(n for n, uses in graph.items() if "_accelerator.o" in uses)
    assert users == [], f"{users} call into _accelerator.o"
    loop = find_loop(graph)
    assert loop is None, "a loop: " + " -> ".join(loop or [])


def test_one_argument_parser() -> None:
    """No file parses arguments another way: PyArg_* or a loop over
    kwnames of its own."""
    for name, text in layer_files().items():
        others = re.findall(r"\bPyArg_\w+", text)
        assert others == [], f"{name} uses {others}: use acc_parse_args"
        if name != "py_args.c":
            assert not re.search(r"PyTuple_\w+\(kwnames", text), \
                f"{name} reads kwnames itself: use acc_parse_args"


def test_the_core_reader_sees_the_calls_it_must() -> None:
    """The core's check can fail: streams use the registry, the allocator
    uses the books of uses."""
    graph = calls(python=False)
    assert "registry.c" in graph["stream.c"]
    assert "uses.c" in graph["allocator.c"]


def test_no_loop_among_the_core_files() -> None:
    loop = find_loop(calls(python=False))
    assert loop is None, "a loop in the core: " + " -> ".join(loop or []) \
        + " (a call upward belongs in a lifecycle hook, hooks.c)"


def test_no_loop_among_the_core_objects() -> None:
    graph = linked_calls(python=False)
    assert "registry.o" in graph["stream.o"]
    loop = find_loop(graph)
    assert loop is None, "a loop in the core: " + " -> ".join(loop or [])


def test_copy_size_mismatches_are_worded_by_the_core() -> None:
    """A copy's size check is a meaning error: the core words it once
    (acc_copy_check_sizes), the Python layer only raises it."""
    python = [p.name for p in sorted((CSRC / "python").glob("*.c"))
              if "size mismatch" in p.read_text()]
    assert python == [], f"the Python layer words it in {python}"
    assert "size mismatch" in (CSRC / "core" / "copies.c").read_text()
