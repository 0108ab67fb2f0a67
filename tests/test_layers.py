"""The layers are one-way.  The Python layer (docs/python-layer.rst): no
file of it calls into the module file, no two of its files call each
other, and all its files parse a call's arguments with the one parser in
py_args.c.  The core (docs/internals.rst): no loop among its files; what
would call upward goes through the lifecycle hooks.

The layers by folder (ARCHITECTURE.md, "Layers"): python/ uses only the
core's API (core/accel.h) and base; core/ the backend contract and base; a
backends/<name>/ folder the contract (csrc/include/accelerator/) and its own
files; base/ nothing above it.  Checked on the includes and on the built
objects' undefined symbols, with no loop among the folders nor among the
files of any one folder (a backend's too).

Read from the sources, as text (which file defines each function or
object that is not static, and which other files name it), and from the
objects of the in-place build.
"""
from __future__ import annotations

import functools
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


# The layers by folder (ARCHITECTURE.md, "Layers") --------------------------

#: what each layer folder may use, includes and symbols alike: python/ the
#: core's API and base; core/ the backend contract and base; a backend the
#: contract, base's types and its own folder; base nothing above it.  The
#: contract (include/accelerator/) is headers only.
BACKENDS = sorted(p.name for p in (CSRC / "backends").iterdir() if p.is_dir())
ALLOWED_INCLUDES = {
    "base": {"base", "include/accelerator/types.h"},
    "core": {"core", "base", "include"},
    "python": {"python", "core/accel.h", "base",
               "include/accelerator/types.h"},
    "include": {"include"},
    **{f"backends/{b}": {f"backends/{b}", "include"} for b in BACKENDS},
}
#: whose symbols each layer's objects may use (a backend: its own folder
#: only, as a plugin that cannot reach _accelerator.so's hidden symbols;
#: the core: the built-in backends' tables too, its ACC_BACKENDS list)
ALLOWED_SYMBOLS = {
    "base": {"base"},
    "core": {"core", "base", "tables"},
    "python": {"python", "core", "base"},
    **{f"backends/{b}": {f"backends/{b}"} for b in BACKENDS},
}


def folder_of(path: pathlib.Path) -> str:
    """The layer folder of a file under csrc/ (or of an object under
    build/temp*/csrc/): base, core, python, include, backends/<name>."""
    parts = path.parts[path.parts.index("csrc") + 1:]
    return "/".join(parts[:2]) if parts[0] == "backends" else parts[0]


def allows(allowed: set[str], target: str) -> bool:
    """Whether target (a folder, or csrc-relative file) is in allowed,
    whose entries are folders or single files."""
    return any(target == a or target.startswith(a + "/") for a in allowed)


def includes(path: pathlib.Path,
             root: pathlib.Path = CSRC) -> list[pathlib.Path]:
    """The csrc files path includes: quoted ones beside it, <accelerator/
    ...> from csrc/include; system headers left out."""
    found = []
    for quoted, angled in re.findall(r'^\s*#\s*include\s+(?:"([^"]+)"|<'
                                     r'(accelerator/[^>]+)>)',
                                     path.read_text(), re.MULTILINE):
        target = (path.parent / quoted if quoted
                  else root / "include" / angled).resolve()
        found.append(target)
    return found


def include_violations(root: pathlib.Path = CSRC) -> list[str]:
    """Each include (of the C files and headers under root) that leaves
    what its folder may use, or names a file that is not there."""
    bad = []
    for path in sorted(root.rglob("*.[ch]")):
        folder = folder_of(path)
        for target in includes(path, root):
            if not target.is_file():
                bad.append(f"{path.relative_to(root)} includes missing "
                           f"{target}")
                continue
            try:
                where = target.relative_to(root.resolve()).as_posix()
            except ValueError:
                bad.append(f"{path.relative_to(root)} includes {target}, "
                           "outside csrc/")
                continue
            if not allows(ALLOWED_INCLUDES[folder], where):
                bad.append(f"{path.relative_to(root)} ({folder}) includes "
                           f"{where}")
    return bad


def test_the_layers_are_the_folders() -> None:
    assert sorted(p.name for p in CSRC.iterdir()) == [
        "backends", "base", "core", "include", "python"]
    assert (CSRC / "include" / "accelerator" / "backend.h").is_file()
    names = [p.name for p in CSRC.rglob("*.[ch]")]
    assert sorted(set(n for n in names if names.count(n) > 1)) == []
    python_h = sorted(str(p.relative_to(CSRC)) for p in CSRC.rglob("*.[ch]")
                      if re.search(r"^#\s*include\s+<Python\.h>",
                                   p.read_text(), re.MULTILINE))
    assert python_h and all(p.startswith("python/") for p in python_h), \
        python_h


def test_each_folder_includes_only_what_its_layer_may_use() -> None:
    bad = include_violations()
    assert bad == [], "includes across the layers:\n" + "\n".join(bad)


def test_the_include_check_sees_an_upward_include(
        tmp_path: pathlib.Path) -> None:
    """The check can fail: a copy of the tree with one backend including
    the core's API is refused, naming the line's file."""
    copy = tmp_path / "csrc"
    shutil.copytree(CSRC, copy)
    planted = copy / "backends" / "opencl" / "opencl.c"
    planted.write_text('#include "../../core/accel.h"\n'
                       + planted.read_text())
    bad = include_violations(copy)
    assert bad == ["backends/opencl/opencl.c (backends/opencl) includes "
                   "core/accel.h"], bad


def built_objects() -> dict[pathlib.Path, str]:
    """The objects of the last in-place build, each with its folder."""
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    found = sorted(REPO.glob("build/temp.*/csrc/**/*.o"))
    if not found:
        pytest.skip("no in-place build (setup.py build_ext --inplace) "
                    "left its objects in build/")
    # Only the objects of sources that exist: an older build of a file
    # since moved or removed leaves its object behind.
    sources = {path.relative_to(REPO).with_suffix(".o").as_posix()
               for path in CSRC.rglob("*.c")}
    objects = [o for o in found
               if o.as_posix().split("/build/temp.", 1)[1].split("/", 1)[1]
               in sources]
    unbuilt = sources - {o.as_posix().split("/build/temp.", 1)[1]
                         .split("/", 1)[1] for o in objects}
    assert not unbuilt, f"sources without an object in build/: {unbuilt}"
    return {o: folder_of(o) for o in objects}


def nm(path: pathlib.Path, *flags: str) -> set[str]:
    out = subprocess.run(["nm", *flags, str(path)], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@functools.cache
def symbol_uses() -> tuple[dict[str, set[str]], list[str]]:
    """object (csrc-relative) -> the objects whose symbols it uses, and
    each use that leaves what its folder may use."""
    objects = built_objects()
    defined = {o: nm(o, "-g", "--defined-only") for o in objects}
    tables = set(re.findall(r"\bX\((acc_\w+_backend)\)",
                            (CSRC / "core" / "core.h").read_text()))
    api = set(re.findall(r"\b(acc_\w+)\b",
                         (CSRC / "core" / "accel.h").read_text()))
    key = {o: o.as_posix().split("/csrc/", 1)[1] for o in objects}
    graph: dict[str, set[str]] = {}
    bad = []
    for o, folder in objects.items():
        graph[key[o]] = set()
        for symbol in sorted(nm(o, "-u")):
            for other, names in defined.items():
                if other == o or symbol not in names:
                    continue
                graph[key[o]].add(key[other])
                where = objects[other]
                if where.startswith("backends/") and where != folder \
                        and symbol in tables:
                    where = "tables"
                if not allows(ALLOWED_SYMBOLS[folder], where):
                    bad.append(f"{key[o]} ({folder}) uses {symbol} of "
                               f"{key[other]}")
                elif (folder == "python" and where == "core"
                        and symbol not in api):
                    bad.append(f"{key[o]} uses {symbol} of {key[other]}, "
                               "not the core's API (core/accel.h)")
    return graph, bad


def test_each_folder_s_objects_use_only_what_its_layer_may() -> None:
    graph, bad = symbol_uses()
    # The reader sees what it must: a backend's own files, the Python
    # layer's use of the core, the registry's built-in tables.
    assert "backends/cuda/cuda_nvml.o" in graph["backends/cuda/cuda.o"]
    assert "core/registry.o" in graph["python/_accelerator.o"]
    assert "backends/cuda/cuda.o" in graph["core/registry.o"]
    assert bad == [], "symbols across the layers:\n" + "\n".join(bad)


@pytest.mark.parametrize("folder", ["base", "core", "python",
                                    *(f"backends/{b}" for b in BACKENDS)])
def test_no_loop_among_a_folder_s_objects(folder: str) -> None:
    graph, _ = symbol_uses()
    inside = {name: {u for u in uses if u.startswith(folder + "/")}
              for name, uses in graph.items() if name.startswith(folder + "/")}
    assert inside, f"no objects of {folder}"
    loop = find_loop(inside)
    assert loop is None, f"a loop in {folder}: " + " -> ".join(loop or [])


def test_no_loop_among_the_folders() -> None:
    graph, _ = symbol_uses()
    folders: dict[str, set[str]] = {}
    for name, uses in graph.items():
        mine = folder_of(pathlib.Path("csrc", name))
        folders.setdefault(mine, set()).update(
            folder_of(pathlib.Path("csrc", u)) for u in uses)
    for path in CSRC.rglob("*.[ch]"):
        folders.setdefault(folder_of(path), set()).update(
            folder_of(t) for t in includes(path) if "csrc" in t.parts)
    for name in folders:
        folders[name].discard(name)
    loop = find_loop({k: {u for u in v if u in folders}
                      for k, v in folders.items()})
    assert loop is None, "a loop among the layers: " + " -> ".join(loop or [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backend_compiles_against_the_public_header_and_its_folder(
        backend: str, tmp_path: pathlib.Path) -> None:
    """Each in-tree backend, compiled with only csrc/include on the include
    path and its own folder beside it, as a plugin would be."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    folder = tmp_path / backend
    shutil.copytree(CSRC / "backends" / backend, folder)
    shutil.copytree(CSRC / "include", tmp_path / "include")
    for source in sorted(folder.glob("*.c")):
        result = subprocess.run(
            [compiler, "-std=gnu11", "-Wall", "-Wextra", "-Werror",
             "-Wno-missing-field-initializers", "-fsyntax-only",
             f"-I{tmp_path / 'include'}", str(source)],
            capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (source.name, result.stderr)


def test_get_include_holds_the_contract_a_plugin_builds_against(
        tmp_path: pathlib.Path) -> None:
    """accelerator.get_include() (the imported copy: the root's, or the
    installed wheel's) holds accelerator/backend.h, the same as the one
    copy in csrc/include, and a plugin-shaped file compiles against it
    alone."""
    import accelerator

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    include = pathlib.Path(accelerator.get_include())
    for name in ("backend.h", "types.h", "native_kernel.h"):
        shipped = include / "accelerator" / name
        assert shipped.is_file(), shipped
        if (CSRC / "include").is_dir():
            assert shipped.read_bytes() == (
                CSRC / "include" / "accelerator" / name).read_bytes(), name
    source = tmp_path / "plugin.c"
    source.write_text(
        "#define ACC_BACKEND_HOST my_host\n"
        "#include <accelerator/backend.h>\n"
        "ACC_BACKEND_HOST_DEFINE(my_attach)\n"
        "static acc_status my_probe(acc_probe_result *out, acc_error *err)\n"
        "{\n    (void)out;\n    acc_trace(\"probed\");\n"
        "    acc_error_set(err, ACC_ERR_NO_ACCELERATOR, \"no %s\", \"my\");\n"
        "    return ACC_ERR_NO_ACCELERATOR;\n}\n"
        "static const acc_backend table = {\n    ACC_BACKEND_ABI,\n"
        "    .name = \"my\",\n    .attach = my_attach,\n"
        "    .probe = my_probe,\n};\n"
        "const acc_backend *accelerator_backend_plugin(void);\n"
        "const acc_backend *accelerator_backend_plugin(void)\n"
        "{\n    return &table;\n}\n")
    result = subprocess.run(
        [compiler, "-std=gnu11", "-Wall", "-Wextra", "-Werror",
         "-Wno-missing-field-initializers", "-shared", "-fPIC",
         f"-I{include}", str(source), "-o", str(tmp_path / "plugin.so")],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    undefined = nm(tmp_path / "plugin.so", "-u") if shutil.which("nm") \
        else set()
    assert not {s for s in undefined if s.startswith("acc_")}, undefined
