"""The README's and the docs' commands, exactly as written, from the root of
a fresh clone.

One module-wide setup: ``git clone`` of this checkout's HEAD (committed
work only) into a temporary folder, one fresh virtual environment (with
the system's site-packages, for pytest and Sphinx), and the README's main
command run in the clone's root as a user runs it, with the environment
active: ``pip install . && python -m accelerator``.  Every test here then
uses that clone and environment:

- the main command exits 0, from the root (which imports the clone's
  ``accelerator/``, where the build placed the extension too) and from
  another folder (which imports the installed copy), and both are the
  same code;
- the README's documentation commands build the docs with ``-W`` from the
  root (docs/conf.py must not put an unbuilt source tree first);
- the README's and docs/testing.rst's examples on the driver doubles print
  what the text says they print;
- the installed pytest plugin (its real entry point) works together with
  ``-p accelerator.pytest_plugin`` and ``pytest_plugins``.

Skipped, with the reason, where this is no git checkout (an sdist, the
private copy of the instrumented build, tests/build.sh) or where ``pip install .``
cannot fetch its build requirements (no network).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
TESTING_DOCS = (REPO / "docs" / "testing.rst").read_text()

#: pip output that means the build requirements could not be downloaded
NO_NETWORK = re.compile(
    r"Could not find a version that satisfies the requirement setuptools"
    r"|No matching distribution found for setuptools|NewConnectionError"
    r"|Temporary failure in name resolution|Network is unreachable"
    r"|ProxyError|ConnectTimeout|Connection refused")


def sh_block_containing(text: str, needle: str) -> str:
    """The fenced ```sh block of README.md that contains needle."""
    blocks = [b for b in re.findall(r"^```sh\n(.*?)^```$", text,
                                    re.MULTILINE | re.DOTALL)
              if needle in b]
    assert len(blocks) == 1, f"one ```sh block with {needle!r}: {blocks}"
    return blocks[0]


def rst_block_containing(text: str, needle: str) -> str:
    """The indented body of the ``.. code-block:: sh`` holding needle."""
    for match in re.finditer(r"^\.\. code-block:: sh\n\n((?:   .*\n|\n)+)",
                             text, re.MULTILINE):
        if needle in match.group(1):
            return re.sub(r"^   ", "", match.group(1), flags=re.MULTILINE)
    raise AssertionError(f"no code-block:: sh with {needle!r}")


MAIN_COMMAND = sh_block_containing(README, "python -m accelerator").strip()


@dataclass
class Clone:
    """A fresh clone with an active virtual environment."""

    root: pathlib.Path
    env: dict[str, str]
    main: subprocess.CompletedProcess[str]

    def sh(self, script: str, cwd: pathlib.Path | None = None,
           **extra: str) -> subprocess.CompletedProcess[str]:
        """Run script with bash, as typed into a shell in the clone."""
        return subprocess.run(
            ["bash", "-c", script], cwd=cwd or self.root,
            env={**self.env, **extra}, capture_output=True, text=True,
            timeout=600, check=False)


def user_environment(venv: pathlib.Path) -> dict[str, str]:
    """A shell with the venv activated and none of this suite's settings."""
    dropped = ("ACCELERATOR_", "FAKE_CUDA_", "FAKE_ZE_", "ZE_", "ZEL_",
               "PYTHON", "PYTEST_", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clone]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if not (REPO / ".git").exists():
        pytest.skip(f"{REPO} is not a git checkout (an sdist or a private "
                    "copy): nothing to clone")
    work = tmp_path_factory.mktemp("first-command")
    root = work / "accelerator"
    subprocess.run(["git", "clone", "-q", str(REPO), str(root)], check=True,
                   timeout=300)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                    str(venv)], check=True, timeout=300)
    env = user_environment(venv)
    main = subprocess.run(["bash", "-c", MAIN_COMMAND], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900,
                          check=False)
    if main.returncode != 0 and NO_NETWORK.search(main.stdout + main.stderr):
        pytest.skip("pip install . could not download its build "
                    "requirements (no network?): " + main.stderr[-400:])
    yield Clone(root, env, main)


def test_the_main_command_works_from_the_root_of_a_fresh_clone(
    clone: Clone,
) -> None:
    assert MAIN_COMMAND == "pip install . && python -m accelerator"
    assert clone.main.returncode == 0, clone.main.stdout + clone.main.stderr
    assert "Traceback" not in clone.main.stderr, clone.main.stderr
    assert re.search(r"^accelerator \d+\.\d+\.\d+ \(Python ",
                     clone.main.stdout, re.MULTILINE), clone.main.stdout
    assert "\nBackends:\n" in clone.main.stdout
    # From the root, `import accelerator` is the clone's package, with
    # the extension the build placed beside it; from anywhere else, the
    # installed copy.  Both are the same code, headers included.
    where = ("python -c 'import accelerator, accelerator._accelerator as e;"
             " print(accelerator.__file__); print(e.__file__);"
             " print(accelerator.get_include())'")
    venv = pathlib.Path(clone.env["VIRTUAL_ENV"])
    copies = []
    for cwd in (clone.root, venv):
        found = clone.sh(where, cwd=cwd)
        assert found.returncode == 0, found.stderr
        copies.append([pathlib.Path(p) for p in found.stdout.split()])
    (root_init, root_ext, root_include), (init, ext, include) = copies
    assert root_init == clone.root / "accelerator" / "__init__.py"
    assert init.is_relative_to(venv), init
    assert root_ext.parent == root_init.parent
    assert root_ext.read_bytes() == ext.read_bytes()
    assert root_init.read_bytes() == init.read_bytes()
    for header in ("backend.h", "types.h", "native_kernel.h"):
        assert ((pathlib.Path(root_include) / "accelerator" / header)
                .read_bytes()
                == (pathlib.Path(include) / "accelerator" / header)
                .read_bytes()), header
    elsewhere = clone.sh("python -m accelerator", cwd=venv)
    assert elsewhere.returncode == 0, elsewhere.stderr
    heading = re.compile(r"^accelerator \d.*$", re.MULTILINE)
    assert heading.findall(elsewhere.stdout) == \
        heading.findall(clone.main.stdout)
    # docs/index.rst's other two forms.
    as_json = clone.sh("python -m accelerator --json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["schema"] == 1
    required = clone.sh("python -m accelerator --require",
                        ACCELERATOR_CUDA_LIBRARY="/nonexistent/libcuda.so.1",
                        ACCELERATOR_ZE_LIBRARY="/nonexistent/libze.so.1")
    assert required.returncode == 1, required.stderr
    assert "no accelerator is available" in required.stderr


def test_the_docs_build_from_the_root_of_the_clone(clone: Clone) -> None:
    commands = sh_block_containing(README, "python -m sphinx")
    assert "python -m sphinx -W -b html docs docs/_build/html" in commands
    result = clone.sh(commands)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    html = clone.root / "docs" / "_build" / "html"
    for page in ("index", "api", "semantics", "bad-input", "testing"):
        assert (html / f"{page}.html").is_file(), page


def test_the_readme_example_on_the_cuda_double(clone: Clone) -> None:
    commands = sh_block_containing(README, "FAKE_CUDA_DEVICES=2")
    expected = re.search(r"^# (.+)\n\Z", commands, re.MULTILINE)
    assert expected, commands
    result = clone.sh(commands)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == expected.group(1)


def test_the_docs_examples_on_the_doubles(clone: Clone) -> None:
    block = rst_block_containing(TESTING_DOCS, "FAKE_CUDA_DEVICES=2")
    cuda, level_zero = block.strip().split("\n\n")
    built = clone.sh("make -s -C tests/drivers")
    assert built.returncode == 0, built.stderr
    result = clone.sh(cuda)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "2 Fake CUDA Device 1\n"
    if not (clone.root / "tests/drivers/build/libze_test_driver.so").exists():
        pytest.skip("the Level Zero example needs libze-dev (the test "
                    "driver is not built)")
    result = clone.sh(level_zero)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True 2 xpu\n"


def test_the_installed_plugin_with_every_other_way_of_loading_it(
    clone: Clone, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["accelerator.pytest_plugin"]\n')
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.requires_devices(99)\n"
        "def test_marked():\n    pass\n")
    result = clone.sh("python -m pytest -p accelerator.pytest_plugin -rs "
                      "-p no:cacheprovider", cwd=tmp_path)
    if "No module named pytest" in result.stderr:
        pytest.skip("pytest is not importable in the fresh environment")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "requires 99 accelerator devices" in result.stdout
