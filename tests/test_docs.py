"""The documentation: every page is part of the Sphinx build, and the
Python examples run as written.

Sphinx -W warns about an .rst page outside every toctree, but skips a page
whose suffix it has no parser for without a word: a Markdown page needs
the parser in docs/conf.py and docs/requirements.txt and an entry in the
toctree.  (tests/test_first_command.py builds the docs with -W, and runs
the shell commands of the README and docs/testing.rst.)
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

import fake_drivers

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def toctree_entries() -> set[str]:
    """The pages listed in docs/index.rst's toctree."""
    text = (DOCS / "index.rst").read_text()
    match = re.search(r"^\.\. toctree::\n((?:[ \t]+.*\n|\n)+)", text,
                      re.MULTILINE)
    assert match, "docs/index.rst has no toctree"
    return {line.strip() for line in match.group(1).splitlines()
            if line.strip() and not line.strip().startswith(":")}


def test_every_page_is_in_the_toctree() -> None:
    pages = {path.stem for suffix in ("*.rst", "*.md")
             for path in DOCS.glob(suffix)} - {"index"}
    assert pages <= toctree_entries(), pages - toctree_entries()


def test_markdown_pages_have_a_parser() -> None:
    if not any(DOCS.glob("*.md")):
        return
    conf = (DOCS / "conf.py").read_text()
    assert re.search(r"extensions = \[[^\]]*\"myst_parser\"", conf), conf
    assert '".md": "markdown"' in conf
    requirements = (DOCS / "requirements.txt").read_text()
    assert re.search(r"^myst-parser\b", requirements, re.MULTILINE)


def python_examples() -> list[tuple[str, str]]:
    """(where, code) of each Python example that runs on its own: the
    README's and those of docs/index.rst, semantics.rst, asyncio.rst,
    graphs.rst and testing.rst
    (testing.rst's need tests/ on the path for fake_drivers)."""
    examples = [
        (f"README.md #{n}", code) for n, code in enumerate(re.findall(
            r"^```python\n(.*?)^```$", (REPO / "README.md").read_text(),
            re.MULTILINE | re.DOTALL))
    ]
    for page in ("index", "semantics", "testing", "asyncio", "graphs"):
        text = (DOCS / f"{page}.rst").read_text()
        for n, match in enumerate(re.finditer(
                r"^\.\. code-block:: python\n\n((?:   .*\n|\n)+)", text,
                re.MULTILINE)):
            code = re.sub(r"^   ", "", match.group(1), flags=re.MULTILINE)
            if "def test_" in code or "pytest_plugins" in code:
                continue  # pytest code, run by test_pytest_plugin.py
            examples.append((f"docs/{page}.rst #{n}", code))
    return examples


@pytest.mark.skipif(not fake_drivers.CUDA_DOUBLE.exists(),
                    reason="the CUDA driver double is not built")
@pytest.mark.parametrize("where, code", [
    pytest.param(where, code, id=where) for where, code in python_examples()
])
def test_python_examples_run_on_the_cuda_double(where: str, code: str
                                                ) -> None:
    env = {**fake_drivers.clean_environment(),
           "PYTHONPATH": os.pathsep.join([str(fake_drivers.SRC),
                                          str(REPO / "tests")]),
           "ACCELERATOR_CUDA_LIBRARY": str(fake_drivers.CUDA_DOUBLE),
           "FAKE_CUDA_DEVICES": "2"}
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{where}:\n{code}\n{result.stderr}"


def run_example(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code],
                          env={**fake_drivers.clean_environment(),
                               "PYTHONPATH": str(fake_drivers.SRC), **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("backend", sorted(fake_drivers.DOUBLES))
def test_readme_examples_run_with_one_device(backend: str) -> None:
    double = fake_drivers.DOUBLES[backend]
    if double.missing():
        pytest.skip(double.missing())
    example, memory = [code for where, code in python_examples()
                       if where.startswith("README.md")][:2]
    result = run_example(example, double.environment(1))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{backend} 1 "), result.stdout
    assert re.fullmatch(rf"filled 1 MiB on {backend}:0 in \d+\.\d{{3}} ms",
                        lines[1]), result.stdout
    result = run_example(memory, double.environment(1))
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(" GB/s\n"), result.stdout
    quick_start = dict(python_examples())["docs/index.rst #0"]
    result = run_example(quick_start, double.environment(1))
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(not fake_drivers.CUDA_DOUBLE.exists(),
                    reason="the CUDA driver double is not built")
def test_readme_examples_say_why_with_no_device() -> None:
    example, memory = [code for where, code in python_examples()
                       if where.startswith("README.md")][:2]
    env = {"ACCELERATOR_CUDA_LIBRARY": str(fake_drivers.CUDA_DOUBLE),
           "FAKE_CUDA_DEVICES": "0",
           "ACCELERATOR_ZE_LIBRARY": "/nonexistent/libze_loader.so.1",
           "ACCELERATOR_HIP_LIBRARY": "/nonexistent/libamdhip64.so.5",
           "ACCELERATOR_KFD_TOPOLOGY": "none",
           "ACCELERATOR_OPENCL_LIBRARY": "/nonexistent/libOpenCL.so.1"}
    result = run_example(example, env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "no accelerator:"
    assert [line.split(":")[0] for line in lines[1:]] == [
        "  cuda", "  xpu", "  hip", "  opencl"]
    assert "counts none" in lines[1], lines
    assert all("nonexistent" in line for line in lines[2:]), lines
    result = run_example(memory, env)
    assert result.returncode == 1
    assert "python -m accelerator` says why" in result.stderr


def readme_no_gpu_block() -> str:
    """The README's sh block after "No GPU at hand?"."""
    text = (REPO / "README.md").read_text()
    match = re.search(r"No GPU at hand\?.*?^```sh\n(.*?)^```$", text,
                      re.MULTILINE | re.DOTALL)
    assert match, "the README has no no-GPU block"
    return match.group(1)


def test_readme_no_gpu_block_runs_on_every_double(
        tmp_path: pathlib.Path) -> None:
    """Each line of the README's no-GPU block, as written, from a folder
    of the user's (the lines use absolute paths): one line per backend
    with a double, each printing that backend with one device, and the
    no-device line saying why."""
    example = next(code for where, code in python_examples()
                   if where.startswith("README.md"))
    (tmp_path / "example.py").write_text(example)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**fake_drivers.clean_environment(),
           "PYTHONPATH": str(fake_drivers.SRC),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    lines = readme_no_gpu_block().splitlines()
    assert lines[0] == "make -C tests/drivers", lines
    assert lines[1].startswith("D=$PWD/"), lines
    runs = [line.split("#")[0].strip() for line in lines[2:]]
    seen = set()
    for run, line in zip(runs, lines[2:]):
        backend = re.search(r"ACCELERATOR_BACKEND=(\w+)", run)
        name = backend.group(1) if backend else "cuda"
        double = fake_drivers.DOUBLES[name]
        if double.missing():
            continue
        result = subprocess.run(
            ["bash", "-ec", f"cd {REPO}\n{lines[1]}\ncd {tmp_path}\n{run}"],
            env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"{line}\n{result.stderr}"
        if "# no device" in line:
            assert result.stdout.startswith("no accelerator:\n"), line
        else:
            assert result.stdout.startswith(f"{name} 1 "), \
                f"{line}\n{result.stdout}"
            seen.add(name)
    assert set(fake_drivers.DOUBLES) - seen == {
        name for name, double in fake_drivers.DOUBLES.items()
        if double.missing()}, f"the block has no line for some backend: {seen}"


def test_readme_names_the_test_command_s_stages() -> None:
    """The README's list of the test command's stages names stages that
    tests/stages.py has."""
    text = (REPO / "README.md").read_text()
    listed = re.findall(r"\*\*([\w-]+)\*\*", text.split(
        "arguments after `--` go to every pytest")[1].split("Every stage")[0])
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "stages.py"),
                           "--list"], capture_output=True, text=True,
                          check=True)
    stages = {line.split()[0] for line in proc.stdout.splitlines()}
    assert listed and set(listed) <= stages, (listed, sorted(stages))


def test_migrating_names_every_backend() -> None:
    """docs/migrating.rst's rows that list the backends list each one with
    a double: current_accelerator()'s devices, Stream.device_type's c10
    numbers, and the fork note's backends that count without
    initialising their driver; graphs on each backend that has them."""
    page = (DOCS / "migrating.rst").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(
        r"^   \* - (.*)\n(?:     .*\n|       .*\n)*", page, re.MULTILINE)}
    accelerator_row = rows["``torch.accelerator.current_accelerator()``"]
    stream_row = next(row for key, row in rows.items()
                      if key.startswith("``s.device``"))
    graph_row = next(row for key, row in rows.items() if "Graph" in key)
    fork = page.split("**Fork.**")[1].split("\n- **")[0]
    for name, double in fake_drivers.DOUBLES.items():
        assert f"``device('{name}')``" in accelerator_row, name
        assert re.search(rf"\b{name.upper()} {double.torch_device_type}\b",
                         " ".join(stream_row.split())), name
        if double.counted_without_init:
            assert double.display_type in fork, name
        if "graphs" not in double.lacks:
            assert double.display_type in graph_row.replace(
                "Level Zero", "XPU"), name


# docs/kernels.rst: its Python blocks run in order as one session on PoCL
# (OpenCL C source), its pytest example runs under pytest, and its native
# kernel (a C block) is built and launched on the doubles that run native
# code.

KERNELS_PAGE = (DOCS / "kernels.rst").read_text()


def rst_blocks(text: str, language: str) -> list[str]:
    """The code of each ``.. code-block:: language`` of text, unindented."""
    return [re.sub(r"^   ", "", match.group(1), flags=re.MULTILINE)
            for match in re.finditer(
                rf"^\.\. code-block:: {language}\n\n((?:   .*\n|\n)+)",
                text, re.MULTILINE)]


def kernels_session() -> str:
    return "\n".join(code for code in rst_blocks(KERNELS_PAGE, "python")
                     if "def test_" not in code)


def kernels_pytest_example() -> str:
    [code] = [code for code in rst_blocks(KERNELS_PAGE, "python")
              if "def test_" in code]
    return code


OPENCL = fake_drivers.DOUBLES["opencl"]


@pytest.mark.skipif(OPENCL.missing() is not None,
                    reason=OPENCL.missing() or "")
def test_kernels_page_runs_on_opencl() -> None:
    result = run_example(kernels_session(), OPENCL.environment(1))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["opencl-c 4",
                         "clBuildProgram CL_BUILD_PROGRAM_FAILURE"], lines
    assert lines[2] == "saxpy True", lines
    assert lines[3].startswith("argument 2 has 8 bytes, expected 4"), lines
    assert re.fullmatch(r"saxpy took \d+\.\d{3} ms", lines[4]), lines


def run_pytest_example(tmp_path: pathlib.Path, env: dict[str, str]
                       ) -> subprocess.CompletedProcess:
    (tmp_path / "test_saxpy.py").write_text(kernels_pytest_example())
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "accelerator.pytest_plugin", "-rs", "test_saxpy.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**fake_drivers.clean_environment(),
             "PYTHONPATH": str(fake_drivers.SRC), **env})


@pytest.mark.skipif(OPENCL.missing() is not None,
                    reason=OPENCL.missing() or "")
def test_kernels_pytest_example_passes_on_opencl(
        tmp_path: pathlib.Path) -> None:
    result = run_pytest_example(tmp_path, OPENCL.environment(1))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^5 passed, 1 skipped", result.stdout,
                     re.MULTILINE), result.stdout


def test_kernels_pytest_example_skips_without_accelerator(
        tmp_path: pathlib.Path) -> None:
    result = run_pytest_example(tmp_path, {"ACCELERATOR_BACKEND": "none"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^6 skipped", result.stdout, re.MULTILINE), (
        result.stdout)


NATIVE_DOUBLES = sorted(name for name, cls in fake_drivers.DOUBLES.items()
                        if cls.kernel_format == "native")

NATIVE_SAXPY_CHECK = """
import sys
import numpy as np
import accelerator

module = accelerator.Module.from_file(sys.argv[1], format="native")
# The format the page says the module has, with format="native" or none.
with open(sys.argv[1], "rb") as f:
    unnamed = accelerator.Module(f.read())
assert (module.format, unnamed.format) == (sys.argv[3], sys.argv[3]), \
    (module.format, unnamed.format)
saxpy = module.get_kernel("saxpy")
# Where the driver tells parameter sizes, bare numbers pass (and it tells
# the count); elsewhere the arguments are sized numpy scalars.
sizes_told = sys.argv[2] == "sizes"
if sizes_told:
    assert saxpy.attributes["num_args"] == 4, saxpy.attributes
n = 1000
x = np.arange(n, dtype=np.float32)
y = np.full(n, 0.5, dtype=np.float32)
dx, dy = accelerator.Buffer(x.nbytes), accelerator.Buffer(y.nbytes)
dx.copy_from(x)
dy.copy_from(y)
a, count = (2.0, n) if sizes_told else (np.float32(2.0), np.uint32(n))
accelerator.launch(saxpy, (n + 63) // 64, 64, dy, dx, a, count)
out = np.empty_like(y)
dy.copy_to(out)
assert out.tobytes() == (np.float32(2) * x + y).tobytes()
print("ok")
"""


def build_native_saxpy(where: pathlib.Path) -> None:
    """The page's native saxpy.c, built into where/saxpy.so by the page's
    own command (a shell line that asks the package for its headers),
    with nothing from the checkout but the package on the path."""
    [source] = [code for code in rst_blocks(KERNELS_PAGE, "c")
                if "accelerator_native_kernels" in code]
    build = re.search(r"^/\* saxpy\.c: (cc .*) \*/$", source, re.MULTILINE)
    assert build, "the native example says how to build it"
    assert "tests/drivers" not in source, "the page needs no checkout"
    (where / "saxpy.c").write_text(source)
    command = build.group(1).replace("python -c", f"'{sys.executable}' -c")
    command = os.environ.get("CC", "cc") + command[len("cc"):]
    subprocess.run(["bash", "-c", command], cwd=where, check=True,
                   timeout=120, env={**fake_drivers.clean_environment(),
                                     "PYTHONPATH": str(fake_drivers.SRC)})


@pytest.mark.parametrize("backend", NATIVE_DOUBLES)
def test_kernels_page_native_kernel_runs_on_the_doubles(
        backend: str, tmp_path: pathlib.Path) -> None:
    double = fake_drivers.DOUBLES[backend]
    if double.missing():
        pytest.skip(double.missing())
    build_native_saxpy(tmp_path)
    told = re.search(r"Module\.format <accelerator\.Module\.format>`\s+is"
                     r"\s+``\"([\w-]+)\"``", KERNELS_PAGE.split(
                         "accelerator_native_kernels")[-1])
    assert told, "the page says what Module.format is for the native kernel"
    result = subprocess.run(
        [sys.executable, "-c", NATIVE_SAXPY_CHECK,
         str(tmp_path / "saxpy.so"),
         "sizes" if double.kernel_param_sizes else "no-sizes",
         told.group(1)],
        capture_output=True, text=True,
        timeout=120, env={**fake_drivers.clean_environment(),
                          "PYTHONPATH": str(fake_drivers.SRC),
                          **double.environment(1)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


@pytest.mark.parametrize("backend", NATIVE_DOUBLES)
def test_kernels_pytest_example_passes_on_the_native_doubles(
        backend: str, tmp_path: pathlib.Path) -> None:
    """A new user's test from the page, as written, with the page's
    native saxpy.so beside it: every test runs on every double that runs
    native code, the source test on those whose backend compiles source
    (it skips on the others: Level Zero)."""
    double = fake_drivers.DOUBLES[backend]
    if double.missing():
        pytest.skip(double.missing())
    build_native_saxpy(tmp_path)
    result = run_pytest_example(tmp_path, {
        **double.environment(1),
        "ACCELERATOR_KERNEL_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout + result.stderr
    counts = "6 passed" if double.source_format else "5 passed, 1 skipped"
    assert re.search(rf"^{counts} in", result.stdout, re.MULTILINE), (
        result.stdout)


def test_kernels_page_examples_type_check(tmp_path: pathlib.Path) -> None:
    """The page's Python, as a user's editor sees it: mypy --strict with
    the package's stubs (numpy arrays and scalars where a copy or a launch
    takes host data, dict code, sized scalars)."""
    pytest.importorskip("mypy")
    (tmp_path / "session.py").write_text(kernels_session())
    (tmp_path / "test_saxpy.py").write_text(kernels_pytest_example())
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", os.devnull, "session.py", "test_saxpy.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(fake_drivers.SRC)})
    assert result.returncode == 0, result.stdout + result.stderr
