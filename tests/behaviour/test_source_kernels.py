"""Kernels from source: CUDA C++ through NVRTC, HIP C++ through hiprtc.

The compilers are real (the CUDA toolkit's NVRTC, the hiprtc inside
Debian's libamdhip64.so.5): what they make loads on the driver doubles,
which read its kernels and parameters (so the launch checks run) and
refuse to run it, as a device with no binary for the code would (the
doubles' devices run host code only).  Which backend compiles what comes
from the double classes (source_format, compiler_env, no_binary_error).
The compile cache is checked here too: every test gets its own folder.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import accelerator as acc
import fake_drivers
import kernel_code
from accelerator import _accelerator, _kernel_cache, _source

SRC = kernel_code.SOURCE_CXX


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "kernel-cache"
    monkeypatch.setenv("ACCELERATOR_KERNEL_CACHE_DIR", str(folder))
    monkeypatch.delenv("ACCELERATOR_KERNEL_CACHE_MAX_BYTES", raising=False)
    return folder


@pytest.fixture
def fmt(facts: type[fake_drivers.DriverDouble],
        driver: fake_drivers.DriverDouble) -> str:
    """The backend's source format, once its compiler is found."""
    if not facts.source_format:
        pytest.skip("the backend compiles no source (its double class "
                    "names no source_format)")
    acc.set_device_index(0)
    try:
        _source._compiler_for(facts.source_format, 0)
    except RuntimeError as e:
        if "found to compile" in str(e):
            pytest.skip(f"no compiler on this machine: {e}")
        raise
    return facts.source_format


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.kernel")) if folder.is_dir() else []


class Counting:
    """_accelerator._compile, counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.real = _accelerator._compile
        monkeypatch.setattr(_accelerator, "_compile", self)

    def __call__(self, *args: object) -> object:
        self.calls += 1
        return self.real(*args)


# Compiling and loading -----------------------------------------------------

def test_source_compiles_loads_and_tells_its_parameters(
        fmt: str, facts: type[fake_drivers.DriverDouble]) -> None:
    module = acc.Module(SRC, format=fmt)
    assert module.format == fmt
    assert fmt in repr(module)
    saxpy = module.get_kernel("saxpy")
    assert saxpy.attributes["num_args"] == 4
    n = 256
    y, x = acc.Buffer(n * 4), acc.Buffer(n * 4)
    # The arguments are checked against what the code tells...
    with pytest.raises(ValueError, match="4"):
        acc.launch(saxpy, 1, n, y, x, np.float32(2))
    with pytest.raises((TypeError, ValueError), match="argument 3"):
        acc.launch(saxpy, 1, n, y, x, np.float32(2), np.uint64(n))
    # ...and the doubles' devices cannot run it.
    with pytest.raises(acc.AcceleratorError) as e:
        acc.launch(saxpy, 1, n, y, x, np.float32(2), np.uint32(n))
        acc.synchronize()
    assert e.value.error_name == facts.no_binary_error


def test_text_with_global_kernels_is_the_backends_source(fmt: str) -> None:
    assert acc.Module(SRC).format == fmt
    assert acc.Module({fake_drivers.under_test().device_type: SRC,
                       "opencl": kernel_code.OPENCL_C}).format == fmt


def test_source_from_a_file_by_its_suffix(fmt: str, tmp_path: Path) -> None:
    path = tmp_path / ("k.cu" if fmt == "cuda-c++" else "k.hip")
    path.write_text(SRC)
    assert acc.Module.from_file(path).format == fmt


def test_the_compilers_refusal_is_a_build_error_with_its_log(
        fmt: str, facts: type[fake_drivers.DriverDouble]) -> None:
    with pytest.raises(acc.BuildError) as e:
        acc.Module('extern "C" __global__ void broken(float *y) '
                   "{ y[0] = undefined_name; }", format=fmt)
    assert e.value.api == facts.compiler_compile
    assert e.value.log and "undefined_name" in e.value.log
    assert "undefined_name" in str(e.value)


def test_options_reach_the_compiler(fmt: str) -> None:
    guarded = SRC + "\n#if SCALE != 3\n#error SCALE is not 3\n#endif\n"
    with pytest.raises(acc.BuildError, match="SCALE is not 3"):
        acc.Module(guarded, format=fmt)
    for options in ("-DSCALE=3", ["-DSCALE=3"], ("-DSCALE=3", "-DOTHER=1"),
                    "-DOTHER  -DSCALE=3"):
        assert acc.Module(guarded, format=fmt, options=options).format == fmt
    with pytest.raises(acc.BuildError):
        acc.Module(SRC, format=fmt, options=["--no-such-option-here"])


@pytest.mark.parametrize("options, error, words", [
    (42, TypeError, "options must be a str or a sequence of str, not int"),
    (b"-DX", TypeError, "not bytes"),
    (["-DX", 3], TypeError, "must hold only str, not int"),
    (["-DX\0Y"], ValueError, "NUL"),
    # the compilers' own words for these: "unrecognized option  found"
    (["-DX", ""], ValueError, "options item 1 is empty"),
    (["\t"], ValueError, "options item 0 is empty"),
])
def test_bad_options_are_refused(fmt: str, options: object,
                                 error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        acc.Module(SRC, format=fmt, options=options)


@pytest.mark.parametrize("suffix", ["\0", "\0ptx", "\0 anything"])
def test_a_format_with_a_nul_is_refused(fmt: str, suffix: str) -> None:
    with pytest.raises(ValueError, match="format"):
        acc.Module(SRC, format=fmt + suffix)
    library = _source._compiler_for(fmt, 0)[0]
    with pytest.raises(ValueError, match="format"):
        _accelerator._compile(fmt + suffix, library, 0, SRC.encode(), (),
                              ())


def test_name_expressions_find_template_kernels(fmt: str) -> None:
    module = acc.Module(SRC, format=fmt,
                        name_expressions=["scale<float>", "scale<double>"])
    single, double = (module.get_kernel("scale<float>"),
                      module.get_kernel("scale<double>"))
    assert single != double
    assert single.attributes["num_args"] == 3
    assert single.name.startswith("_Z") and "scale" in single.name
    assert module.get_kernel("saxpy").attributes["num_args"] == 4
    with pytest.raises(KeyError, match=r"name_expressions=\[.*scale<int>"):
        module.get_kernel("scale<int>")
    with pytest.raises(KeyError):
        module.get_kernel("nothing")


@pytest.mark.parametrize("names, error, words", [
    ([""], ValueError, "empty"),
    ([" "], ValueError, "empty"),
    (["scale<float>", "\t\n"], ValueError, "item 1 is empty"),
    (["scale<float>", "scale<float>"], ValueError, "twice"),
    ([3], TypeError, "only str"),
    (["scale<float>\0"], ValueError, "NUL"),
    (5, TypeError, "sequence of str"),
])
def test_bad_name_expressions_are_refused(fmt: str, names: object,
                                          error: type[Exception],
                                          words: str) -> None:
    with pytest.raises(error, match=words):
        acc.Module(SRC, format=fmt, name_expressions=names)


def test_a_name_expression_of_no_kernel_is_refused(fmt: str) -> None:
    with pytest.raises((acc.BuildError, ValueError)):
        acc.Module(SRC, format=fmt, name_expressions=["nothing<float>"])


def test_name_expressions_are_for_source_only(
        code_for_backend: bytes | None) -> None:
    if code_for_backend is None:
        pytest.skip("the backend has no kernels")
    with pytest.raises(ValueError, match="name_expressions are for source"):
        acc.Module(code_for_backend, name_expressions=["saxpy"])


@pytest.fixture
def code_for_backend(facts: type[fake_drivers.DriverDouble],
                     driver: fake_drivers.DriverDouble) -> bytes | None:
    if not facts.kernel_format:
        return None
    return kernel_code.for_format(facts.kernel_format)


# Backends without a compiler, and missing compilers ------------------------

def test_source_for_a_backend_that_compiles_none_is_refused(
        facts: type[fake_drivers.DriverDouble],
        driver: fake_drivers.DriverDouble) -> None:
    if not facts.kernel_format:
        pytest.skip("the backend has no kernels")
    for other in ("cuda-c++", "hip-c++"):
        if other == facts.source_format:
            continue
        with pytest.raises(ValueError, match=re.escape(
                f"cannot compile {other} source (is it a kernel for another "
                "backend?)")):
            acc.Module(SRC, format=other)
        # and the private functions _source calls, the core's own check
        for call in (lambda: _accelerator._compiler_id(other, "lib", 0),
                     lambda: _accelerator._compile(other, "lib", 0, b"x",
                                                   (), ())):
            with pytest.raises(ValueError, match=re.escape(
                    f"does not compile {other} source")):
                call()
    if not facts.source_format:
        with pytest.raises(ValueError, match="another backend"):
            acc.Module(SRC)


@pytest.fixture
def through_spirv(facts: type[fake_drivers.DriverDouble],
                  driver: fake_drivers.DriverDouble) -> None:
    if not facts.opencl_c_through_spirv:
        pytest.skip("the backend builds OpenCL C itself, or loads no SPIR-V")
    if _source.shutil.which("clang-15") is None:
        pytest.skip("no clang-15 (Debian's clang-15 and llvm-spirv-15)")


def test_opencl_c_where_only_spirv_loads_goes_through_clang(
        through_spirv: None, cache: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    module = acc.Module(kernel_code.OPENCL_C)
    assert module.format == "opencl-c" and "(spirv)" in repr(module)
    assert module.get_kernel("saxpy")
    [entry] = entries(cache)
    runs: list[object] = []
    real = _source.subprocess.run
    monkeypatch.setattr(_source.subprocess, "run",
                        lambda *a, **k: runs.append(a) or real(*a, **k))
    acc.Module(kernel_code.OPENCL_C)
    assert runs == [] and entries(cache) == [entry]
    acc.Module(kernel_code.OPENCL_C, options="-DUNUSED=1")
    assert len(runs) == 2 and len(entries(cache)) == 2
    with pytest.raises(acc.BuildError) as e:
        acc.Module("__kernel void broken(__global int *x) { x[0] = ; }",
                   format="opencl-c")
    assert e.value.api == "clang" and e.value.log
    assert e.value.log.startswith("kernel.cl:1:"), e.value.log


def test_opencl_c_without_an_offline_compiler_names_them(
        through_spirv: None, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setattr(_source, "_offline", {})
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError) as e:
        acc.Module(kernel_code.OPENCL_C + "// no compiler\n")
    for word in ("loads SPIR-V, not OpenCL C", "clang-15", "llvm-spirv",
                 "ocloc", "format='spirv'"):
        assert word in str(e.value)


def test_a_named_compiler_that_does_not_open_says_so(
        fmt: str, facts: type[fake_drivers.DriverDouble],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = str(tmp_path / "libnothing.so")
    monkeypatch.setenv(facts.compiler_env, missing)
    with pytest.raises(RuntimeError, match=f"{facts.compiler_env}="
                       f".*{missing}.*does not open"):
        acc.Module(SRC, format=fmt)
    monkeypatch.setenv(facts.compiler_env, "libc.so.6")
    with pytest.raises(RuntimeError, match="lacks"):
        acc.Module(SRC, format=fmt)


def test_no_compiler_found_names_every_place(
        fmt: str, facts: type[fake_drivers.DriverDouble],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(facts.compiler_env, raising=False)
    monkeypatch.setattr(_source, "_found", {})
    monkeypatch.setattr(_source, "_places", lambda f: [
        ("the first place", []), ("the second place", ["libnothing.so.9"])])
    with pytest.raises(RuntimeError) as e:
        acc.Module(SRC, format=fmt)
    text = str(e.value)
    assert f"{facts.compiler_env} is unset" in text
    assert "the first place: none installed" in text
    assert "the second place: libnothing.so.9 does not open" in text
    assert "or name the library in " + facts.compiler_env in text


# The compile cache -----------------------------------------------------------

def test_a_cache_hit_never_calls_the_compiler(
        fmt: str, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting(monkeypatch)
    first = acc.Module(SRC + "// hit\n", format=fmt,
                       name_expressions=["scale<float>"])
    assert counting.calls == 1 and len(entries(cache)) == 1
    again = acc.Module(SRC + "// hit\n", format=fmt,
                       name_expressions=["scale<float>"])
    assert counting.calls == 1
    assert again.get_kernel("scale<float>").name == \
        first.get_kernel("scale<float>").name


@pytest.mark.parametrize("change", ["source", "options", "names"])
def test_what_changes_the_code_changes_the_key(
        fmt: str, cache: Path, monkeypatch: pytest.MonkeyPatch,
        change: str) -> None:
    counting = Counting(monkeypatch)
    acc.Module(SRC, format=fmt)
    kwargs: dict[str, object] = {
        "source": {}, "options": {"options": "-DSCALE=2"},
        "names": {"name_expressions": ["scale<float>"]}}[change]
    acc.Module(SRC + ("\n" if change == "source" else ""), format=fmt,
               **kwargs)  # type: ignore[arg-type]
    assert counting.calls == 2 and len(entries(cache)) == 2


def forged(data: bytes, **header: object) -> bytes:
    """data, an entry, with its header's fields changed (its code and
    digest still check)."""
    magic = _kernel_cache._MAGIC
    line, _, code = data[len(magic):].partition(b"\n")
    fields = {**json.loads(line), **header}
    return magic + json.dumps(fields).encode() + b"\n" + code


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage",
                                    "empty", "deep", "list", "lowered",
                                    "format"])
def test_a_damaged_entry_is_ignored_and_rebuilt(
        fmt: str, cache: Path, monkeypatch: pytest.MonkeyPatch,
        damage: str) -> None:
    counting = Counting(monkeypatch)
    acc.Module(SRC, format=fmt)
    [entry] = entries(cache)
    data = entry.read_bytes()
    magic = _kernel_cache._MAGIC
    entry.write_bytes({"truncated": data[:len(data) // 2],
                       "flipped": data[:-1] + bytes([data[-1] ^ 1]),
                       "garbage": os.urandom(len(data)),
                       "empty": b"",
                       # JSON nested past the parser's recursion limit
                       "deep": magic + b"[" * 100_000 + b"\n",
                       "list": magic + b"[1, 2]\n",
                       "lowered": forged(data, lowered=[["saxpy", 1]]),
                       # a format no compiler makes (the code checks)
                       "format": forged(data, format="cuda-c++"),
                       }[damage])
    assert acc.Module(SRC, format=fmt).get_kernel("saxpy")
    assert counting.calls == 2
    assert entry.read_bytes() == data     # rewritten whole
    acc.Module(SRC, format=fmt)
    assert counting.calls == 2


def test_an_unwritable_folder_compiles_without_caching_and_says_so_once(
        fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    monkeypatch.setenv("ACCELERATOR_KERNEL_CACHE_DIR", str(blocker / "sub"))
    with pytest.warns(RuntimeWarning, match="cannot be written.*compiling "
                      "without caching"):
        assert acc.Module(SRC + "// a\n", format=fmt).format == fmt
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert acc.Module(SRC + "// b\n", format=fmt).format == fmt


def test_an_entry_that_cannot_be_written_is_named(
        fmt: str, cache: Path) -> None:
    """A folder in an entry's place: the warning names the entry, not
    only the folder (which can be written)."""
    acc.Module(SRC, format=fmt)
    [entry] = entries(cache)
    entry.unlink()
    entry.mkdir()
    with pytest.warns(RuntimeWarning, match=f"Is a directory: .*"
                      f"{entry.name}"):
        assert acc.Module(SRC, format=fmt).format == fmt


def test_an_empty_folder_setting_caches_nothing(
        fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATOR_KERNEL_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    counting = Counting(monkeypatch)
    acc.Module(SRC, format=fmt)
    acc.Module(SRC, format=fmt)
    assert counting.calls == 2
    assert not any(tmp_path.rglob("*.kernel"))


def test_the_default_folder_is_under_the_users_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELERATOR_KERNEL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _kernel_cache.folder() == str(tmp_path / "accelerator"
                                         / "kernels")


def test_the_cache_stays_within_its_bound(
        fmt: str, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc.Module(SRC + "// 0\n", format=fmt)
    [entry] = entries(cache)
    monkeypatch.setenv("ACCELERATOR_KERNEL_CACHE_MAX_BYTES",
                       str(entry.stat().st_size * 2 + 10))
    for i in range(1, 5):
        acc.Module(SRC + f"// {i}\n", format=fmt)
    assert len(entries(cache)) == 2
    monkeypatch.setenv("ACCELERATOR_KERNEL_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="ACCELERATOR_KERNEL_CACHE_MAX"):
        acc.Module(SRC + "// 9\n", format=fmt)


def test_threads_compiling_the_same_kernel_at_once(
        fmt: str, cache: Path) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def compile_one() -> None:
        try:
            barrier.wait()
            module = acc.Module(SRC + "// threads\n", format=fmt,
                                name_expressions=["scale<float>"])
            assert module.get_kernel("scale<float>").attributes[
                "num_args"] == 3
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=compile_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(entries(cache)) == 1
    assert not list(cache.glob(".tmp-*"))


def test_processes_compiling_the_same_kernel_share_one_entry(
        fmt: str, cache: Path) -> None:
    script = textwrap.dedent(f"""
        import accelerator, kernel_code
        m = accelerator.Module(kernel_code.SOURCE_CXX + "// procs\\n",
                               format={fmt!r})
        print(m.get_kernel("saxpy").attributes["num_args"])
    """)
    env = dict(os.environ, ACCELERATOR_KERNEL_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join(sys.path))
    children = [subprocess.Popen([sys.executable, "-c", script], env=env,
                                 stdout=subprocess.PIPE, text=True)
                for _ in range(3)]
    outputs = [c.communicate(timeout=120)[0] for c in children]
    assert [c.returncode for c in children] == [0, 0, 0]
    assert outputs == ["4\n"] * 3
    assert len(entries(cache)) == 1


# The private functions _source calls: every argument checked ---------------

@pytest.mark.parametrize("args, error, words", [
    ((), TypeError, "takes 3 positional arguments"),
    ((1, "lib", 0), TypeError, "format must be a str"),
    (("ptx", "lib", 0), ValueError, "not a source format"),
    (("cuda-c++", 5, 0), TypeError, "library must be a str"),
    (("cuda-c++", "li\0b", 0), ValueError, "library holds a NUL"),
    (("cuda-c++", "", 0), ValueError, "no compiler library named"),
    (("cuda-c++", "lib", 99), Exception, "Device index value 99"),
])
def test_compiler_id_checks_its_arguments(
        fmt: str, args: tuple[object, ...], error: type[Exception],
        words: str) -> None:
    args = tuple(fmt if a == "cuda-c++" else a for a in args)
    with pytest.raises(error, match=words):
        _accelerator._compiler_id(*args)


def test_compile_checks_its_arguments(fmt: str) -> None:
    library, _ = _source._compiler_for(fmt, 0)
    ok = (fmt, library, 0, SRC.encode(), (), ())

    def call(at: int, value: object) -> None:
        args = list(ok)
        args[at] = value
        _accelerator._compile(*args)

    with pytest.raises(TypeError, match="takes 6 positional arguments"):
        _accelerator._compile(*ok[:5])
    with pytest.raises(TypeError, match="source must be bytes"):
        call(3, SRC)
    with pytest.raises(ValueError, match="the source is empty"):
        call(3, b"")
    with pytest.raises(ValueError, match="holds a NUL byte at byte 3"):
        call(3, b"int\0x;")
    with pytest.raises(TypeError, match="options must be a tuple"):
        call(4, ["-DX"])
    with pytest.raises(TypeError, match=r"must hold only str, not int "
                       r"\(item 1\)"):
        call(4, ("-DX", 1))
    with pytest.raises(ValueError, match="1025 options, expected at most"):
        call(4, ("-DX",) * 1025)
    with pytest.raises(ValueError, match="option 0 holds a NUL"):
        call(4, ("-D\0X",))
    with pytest.raises(ValueError, match="name expression 0 is empty"):
        call(5, ("",))
    with pytest.raises(ValueError, match="name expression 1 holds a NUL"):
        call(5, ("scale<float>", "a\0b"))
    # (KeyError: _source's search takes it as "not here, try the next")
    with pytest.raises(KeyError, match="does not open"):
        call(1, "/nonexistent/libnvrtc.so")
    code, code_format, lowered, log = _accelerator._compile(
        fmt, library, 0, SRC.encode(), (), ("scale<float>",))
    assert code and code_format in ("cubin", "ptx", "hsaco")
    assert len(lowered) == 1 and lowered[0]
    assert log is None or isinstance(log, str)
