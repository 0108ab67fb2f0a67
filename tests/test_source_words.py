"""The words the sources say about themselves stay true: the Python
layer's file list, the backends an error names, one version, and a
.clang-format that keeps the code as it is written."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import pathlib
import tomllib

import pytest

import accelerator

REPO = pathlib.Path(__file__).resolve().parents[1]
CSRC = REPO / "csrc"
PYTHON_LAYER = CSRC / "python"


def header_comment(path: pathlib.Path) -> str:
    text = path.read_text()
    match = re.match(r"/\*(.*?)\*/", text, re.DOTALL)
    assert match, f"{path} starts without a comment"
    return " ".join(match.group(1).replace("*", " ").split())


def test_pyaccel_h_names_every_python_layer_file() -> None:
    """pyaccel.h's list is the Python layer: every file that includes
    Python.h through it, and no other."""
    named = set(re.findall(r"\b(_accelerator\.c|py_\w+\.c)\b",
                           header_comment(PYTHON_LAYER / "pyaccel.h")))
    including = {p.name for p in CSRC.rglob("*.c")
                 if re.search(r'^#include "(pyaccel|pybuffer|pyobjects)\.h"',
                              p.read_text(), re.MULTILINE)}
    assert including, "no file includes pyaccel.h"
    assert named == including


@pytest.mark.parametrize("path", ["csrc/core/accel.h",
                                  "csrc/python/_accelerator.c"])
def test_no_text_lists_the_backends_as_two(path: str) -> None:
    """A backend's name comes from its descriptor: no comment or docstring
    says the backends are "cuda, xpu or None"."""
    text = (REPO / path).read_text()
    assert not re.search(r"""["']cuda["'],\s*["']xpu["'],?\s+or""", text)
    assert not re.search(r"""["']cuda["'],\s*["']xpu["']\)""", text)


def test_the_version_is_written_once() -> None:
    """pyproject.toml takes the version from accelerator.__version__, and
    setuptools reads it from there without importing the extension."""
    if not (REPO / "accelerator").is_dir():
        pytest.skip("no source package: tests/check_wheel.sh removes it to "
                    "test the installed wheel")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "accelerator.__version__"}
    written = [p for p in (REPO / "accelerator").glob("*.py")
               if re.search(r"^__version__ = ", p.read_text(), re.MULTILINE)]
    assert [p.name for p in written] == ["__init__.py"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", accelerator.__version__)
    result = subprocess.run([sys.executable, "setup.py", "--version"],
                            cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == accelerator.__version__


#: Code in the house style (PEP 7), as clang-format must leave it.
HOUSE_STYLE = """\
typedef struct pair {
    int first;
    const char *second; /* may be NULL */
} pair;

static int
count_pairs(const pair *pairs, size_t n, unsigned long long limit_of_first,
            int *out)
{
    int found = 0;

    for (size_t i = 0; i < n; i++) {
        if (pairs[i].second == NULL) {
            continue;
        }
        else if (pairs[i].first > 0
                 && (unsigned long long)pairs[i].first < limit_of_first) {
            found++;
        }
        switch (pairs[i].first) {
        case 0:
            break;
        default:
            found += 2;
            break;
        }
    }
    *out = found;
    return 0;
}
"""


def test_clang_format_keeps_the_house_style() -> None:
    tool = shutil.which("clang-format") or shutil.which("clang-format-15")
    if tool is None:
        pytest.skip("clang-format is not installed")
    result = subprocess.run([tool, "--style=file",
                             f"--assume-filename={CSRC / 'example.c'}"],
                            input=HOUSE_STYLE, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == HOUSE_STYLE


#: a descriptor's own fields, where a backend writes its name once
DESCRIPTOR_FIELD = re.compile(
    r"\.(name|device_type|device_type_alias)\s*=\s*$")


def backend_names() -> list[str]:
    """Every backend's name, from the double classes (tests/fake_drivers)."""
    import fake_drivers
    return list(fake_drivers.DOUBLES)


@pytest.mark.parametrize("path", sorted(
    str(p.relative_to(REPO)) for p in (CSRC / "backends").rglob("*.[ch]")))
def test_a_backend_takes_its_name_for_messages_from_its_descriptor(
        path: str) -> None:
    """No string in a backend's code names a backend ("backend xpu cannot
    ...", an error's backend "cuda"), except the descriptor's own fields:
    messages take the name from the descriptor.  Trace lines, which open
    with the backend's name and a colon, are ACCELERATOR_DEBUG's output,
    not messages."""
    text = (REPO / path).read_text()
    # Comments out, line breaks kept (the failure names the line).
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()),
                  text, flags=re.DOTALL)
    names = "|".join(backend_names())
    found = []
    for match in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', text):
        before = text[text.rfind("\n", 0, match.start()) + 1:match.start()]
        if (re.search(rf"\b({names})\b", match.group(1))
                and not re.match(rf"({names}): ", match.group(1))
                and not DESCRIPTOR_FIELD.search(before)):
            found.append((text.count("\n", 0, match.start()) + 1,
                          match.group(1)))
    assert found == [], f"{path} names a backend in a message"


def test_a_backend_is_registered_by_one_line() -> None:
    """Outside csrc/backends/, a backend's descriptor is named once: its
    line in core.h's ACC_BACKENDS, which declares it and fills the
    dispatcher's registry (docs/backends.rst, "Adding a backend")."""
    registry = re.search(r"^#define ACC_BACKENDS\(X\)((?:.*\\\n)*.*)$",
                         (CSRC / "core" / "core.h").read_text(),
                         re.MULTILINE)
    assert registry, "core.h has no ACC_BACKENDS list"
    listed = re.findall(r"\bX\((acc_\w+_backend)\)", registry.group(1))
    assert len(listed) == len(backend_names()) == len(set(listed))
    for path in sorted(CSRC.rglob("*.[ch]")):
        if "backends" in path.relative_to(CSRC).parts:
            continue
        text = path.read_text()
        if path.name == "core.h":
            text = text.replace(registry.group(0), "")
        named = set(re.findall(r"\b(acc_\w+_backend)\b", text)) & set(listed)
        assert named == set(), f"{path.name} names {sorted(named)}"


def prose_files() -> list[pathlib.Path]:
    """The tracked C, Python, stub and documentation files."""
    listed = subprocess.run(["git", "ls-files", "csrc", "accelerator", "tests",
                             "docs", "bench", "README.md", "setup.py"],
                            cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: " + listed.stderr.strip())
    return [REPO / name for name in listed.stdout.split()
            if name.endswith((".c", ".h", ".py", ".pyi", ".rst", ".md"))]


def test_no_doubled_article_and_no_an_before_a_consonant_name() -> None:
    """No doubled article (the word "a" twice, also across a comment's
    line break) and no "an" before HIP, in prose or in a message built
    with the device type's display name ("an %s stream" reads wrong on
    HIP)."""
    gap = r"(?:\s|\*|#|//)+"
    found = []
    for path in prose_files():
        text = path.read_text(errors="replace")
        for pattern in (rf"\b[Aa]{gap}a\s+[A-Za-z]{{2,}}",
                        rf"\b[Aa]n{gap}HIP\b",
                        r'\ban %s[^;]*acc_display_device_type\(\)'):
            for match in re.finditer(pattern, text):
                found.append(f"{path.relative_to(REPO)}:"
                             f"{text.count(chr(10), 0, match.start()) + 1}: "
                             f"{' '.join(match.group().split())[:60]}")
    assert found == [], "\n".join(found)


def test_the_docstrings_name_every_backend() -> None:
    """The package's docstring names each backend with its device type,
    the extension's (module_doc) each backend by its display name, and
    setup.py's each driver library it opens at run time."""
    import fake_drivers
    probe = subprocess.run(
        [sys.executable, "-c", "import accelerator, json; print(json.dumps("
         "[b['library'] for b in accelerator.backends()]))"],
        env={**fake_drivers.clean_environment(),
             "PYTHONPATH": str(fake_drivers.SRC)},
        capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    libraries = __import__("json").loads(probe.stdout)
    setup_doc = re.match(r'"""(.*?)"""', (REPO / "setup.py").read_text(),
                         re.DOTALL)
    assert setup_doc, "setup.py has no docstring"
    package_doc = " ".join((accelerator.__doc__ or "").split())
    module_doc = " ".join((accelerator._accelerator.__doc__ or "").split())
    for (name, double), library in zip(fake_drivers.DOUBLES.items(),
                                       libraries):
        assert f"(``{name}``)" in package_doc, name
        assert double.display_type in module_doc.replace("Level Zero",
                                                         "XPU"), name
        assert library in setup_doc.group(1), library


def test_no_test_is_an_empty_placeholder() -> None:
    """No test function is a body of nothing (a docstring, pass or ...):
    a test that cannot fail is no test; one that needs what is missing
    here is left out, with the reason in its file's docstring."""
    import ast
    found = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.name.startswith("test_")):
                continue
            body = [s for s in node.body
                    if not (isinstance(s, ast.Expr)
                            and isinstance(s.value, ast.Constant))
                    and not isinstance(s, ast.Pass)]
            if not body:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} "
                             f"{node.name}")
    assert found == [], "\n".join(found)


def python_layer_definitions() -> set[str]:
    """The functions the Python layer's .c files define for each other."""
    names = set()
    for path in [PYTHON_LAYER / "_accelerator.c",
                 *PYTHON_LAYER.glob("py_*.c")]:
        names |= set(re.findall(r"^(?!static)\w[\w \*]*?\n?(acc_\w+)\(",
                                path.read_text(), re.MULTILINE))
    return names


@pytest.mark.parametrize("header", ["pyaccel.h", "pybuffer.h",
                                    "pyobjects.h"])
def test_the_python_layer_s_headers_call_nothing_of_its_files(
        header: str) -> None:
    """A Python layer header declares; its inline code calls only the core
    and Python, never a function of the files that include it (the circle
    py_args.c / py_helpers.c -> pyaccel.h -> py_args.c)."""
    text = (PYTHON_LAYER / header).read_text()
    defined = python_layer_definitions()
    calls = []
    for match in re.finditer(r"^static inline [^\n]*\n(\w+)\([^)]*\)\n\{\n"
                             r"(.*?)^\}", text, re.MULTILINE | re.DOTALL):
        for called in re.findall(r"\b(acc_\w+)\(", match.group(2)):
            if called in defined:
                calls.append(f"{match.group(1)} calls {called}")
    assert calls == [], "\n".join(calls)
