"""Kernels from source under hostile use (issue 31's hostile pass): what
would take the interpreter down (a compiler that aborts the process, a
cache entry that never ends) is refused with a clear exception instead.
Each case runs in its own process on a driver double, so that a crash is
a failed test, not a lost run.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fake_drivers

PRELUDE = textwrap.dedent("""
    import accelerator as acc, kernel_code
    SRC = kernel_code.SOURCE_CXX
    def outcome(call):
        try:
            call()
        except Exception as e:
            print("raised", type(e).__name__, e)
        else:
            print("ok")
""")


def run(backend: str, code: str, tmp_path: Path, timeout: float = 120,
        **env: str) -> str:
    """What code printed, run after PRELUDE on backend's double."""
    double = fake_drivers.DOUBLES[backend]
    environ = {**fake_drivers.clean_environment(), **double.environment(1),
               "ACCELERATOR_KERNEL_CACHE_DIR": str(tmp_path / "cache"),
               "PYTHONPATH": os.pathsep.join(
                   [str(fake_drivers.SRC), str(fake_drivers.REPO / "tests")]),
               **env}
    child = subprocess.run([sys.executable, "-c", PRELUDE + code],
                           env=environ, capture_output=True, text=True,
                           timeout=timeout)
    assert child.returncode == 0, (child.returncode, child.stdout,
                                   child.stderr)
    return child.stdout


def compiler_or_skip(backend: str, tmp_path: Path) -> None:
    fmt = {"cuda": "cuda-c++", "hip": "hip-c++"}[backend]
    found = run(backend, "from accelerator import _source\n"
                f"try:\n    _source._compiler_for({fmt!r}, 0)\n"
                "except RuntimeError as e:\n    print('none', e)\n",
                tmp_path)
    if found.startswith("none"):
        pytest.skip(f"no {fmt} compiler on this machine: {found}")


# hiprtc (ROCm 5.2) aborts the process ("munmap_chunk(): invalid pointer")
# when it compiles for a target its LLVM does not know: a newer GPU than
# the ROCm, or a mistyped --offload-arch.

@pytest.mark.parametrize("option", [
    "--offload-arch=gfx9999", "--offload-arch=garbage", "--offload-arch=",
    "--offload-arch=gfx90a,gfx9999", "--offload-arch=gfx90a:nonsense+"])
def test_an_offload_arch_hiprtc_does_not_know_is_refused(
        tmp_path: Path, option: str) -> None:
    compiler_or_skip("hip", tmp_path)
    out = run("hip", f"outcome(lambda: acc.Module(SRC, format='hip-c++', "
              f"options=[{option!r}]))\n"
              "outcome(lambda: acc.Module(SRC, format='hip-c++', "
              "options=['--offload-arch=gfx90a']))\n", tmp_path)
    refused, fine = out.splitlines()
    assert refused.startswith("raised ValueError"), out
    assert repr(option.partition("=")[2].split(",")[-1]) in refused, out
    assert "does not compile for" in refused, out
    assert fine == "ok", out


def test_a_device_hiprtc_does_not_know_is_passed_over(
        tmp_path: Path) -> None:
    compiler_or_skip("hip", tmp_path)
    out = run("hip", "outcome(lambda: acc.Module(SRC, format='hip-c++'))\n",
              tmp_path, FAKE_HIP_ARCH="gfx9999")
    assert out.startswith("raised RuntimeError"), out
    assert "'gfx9999'" in out and "does not compile for" in out, out


# The compile cache: an entry that is no regular file (a FIFO, which
# open() waits on for a writer; a link to /dev/zero, which never ends) is
# passed over and the kernel compiled, promptly and in bounded memory.

@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "folder"])
def test_an_entry_that_is_no_file_is_passed_over(tmp_path: Path,
                                                 kind: str) -> None:
    compiler_or_skip("cuda", tmp_path)
    out = run("cuda", textwrap.dedent(f"""
        import os, pathlib, resource, warnings
        # A bound on what /dev/zero could take; not under AddressSanitizer,
        # whose shadow memory is reserved address space (the timeout
        # bounds that run instead).
        if "asan" not in os.environ.get("LD_PRELOAD", ""):
            resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        cache = pathlib.Path(os.environ["ACCELERATOR_KERNEL_CACHE_DIR"])
        acc.Module(SRC, format="cuda-c++")
        [entry] = cache.glob("*.kernel")
        entry.unlink()
        kind = {kind!r}
        if kind == "fifo":
            os.mkfifo(entry)
        elif kind == "folder":
            entry.mkdir()
        else:
            entry.symlink_to(kind)
        warnings.simplefilter("ignore")
        outcome(lambda: acc.Module(SRC, format="cuda-c++").get_kernel(
            "saxpy"))
    """), tmp_path, timeout=30)
    assert out == "ok\n", out


# Each NVRTC entry point failing (tests/drivers/nvrtc_shim.c: the real
# NVRTC behind a library that fails a named call on demand): a clear
# exception of the right kind, and every program made destroyed.

SHIM = fake_drivers.DRIVERS / "libnvrtc_shim.so"
#: where the failure shows: raised when the library is opened (the
#: version and architectures are read once), or at the compile
AT_OPEN = ("nvrtcVersion", "nvrtcGetNumSupportedArchs",
           "nvrtcGetSupportedArchs")
#: (entry point, its failure code, what Module() raises: "ok" where the
#: call is only ever extra)
AT_COMPILE = [
    ("nvrtcCreateProgram", 1, "AcceleratorError"),
    ("nvrtcAddNameExpression", 3, "ValueError"),
    ("nvrtcCompileProgram", 6, "BuildError"),        # COMPILATION
    ("nvrtcCompileProgram", 5, "BuildError"),        # INVALID_OPTION
    # the compiler failing, not refusing the source: no BuildError
    ("nvrtcCompileProgram", 7, "AcceleratorError"),  # BUILTIN_OPERATION
    ("nvrtcCompileProgram", 1, "AcceleratorError"),  # OUT_OF_MEMORY
    ("nvrtcGetProgramLogSize", 3, "ok"),
    ("nvrtcGetProgramLog", 3, "ok"),
    ("nvrtcGetCUBINSize", 3, "AcceleratorError"),
    ("nvrtcGetCUBIN", 3, "AcceleratorError"),
    ("nvrtcGetLoweredName", 3, "ValueError"),
]


def test_each_nvrtc_call_failing_is_a_clear_error_and_leaks_nothing(
        tmp_path: Path) -> None:
    if not SHIM.exists():
        pytest.skip("no tests/drivers/build/libnvrtc_shim.so (make -C "
                    "tests/drivers)")
    compiler_or_skip("cuda", tmp_path)
    out = run("cuda", textwrap.dedent(f"""
        import ctypes, os
        from accelerator import _source
        os.environ["NVRTC_SHIM_REAL"] = _source._compiler_for(
            "cuda-c++", 0)[0]
        shim = ctypes.CDLL({str(SHIM)!r})
        shim.nvrtc_shim_fail.argtypes = [ctypes.c_char_p, ctypes.c_long,
                                         ctypes.c_int]
        def module():
            return acc.Module(SRC, format="cuda-c++",
                              name_expressions=["scale<float>"])
        def left():
            made, gone = ctypes.c_long(), ctypes.c_long()
            shim.nvrtc_shim_counts(ctypes.byref(made), ctypes.byref(gone))
            return made.value - gone.value
        # Each spelling of the path is a library opened anew.
        for i, name in enumerate({AT_OPEN!r}):
            shim.nvrtc_shim_fail(name.encode(), 1, 3)
            os.environ["ACCELERATOR_NVRTC_LIBRARY"] = (
                {str(SHIM.parent)!r} + "/." * (i + 1) + "/" + {SHIM.name!r})
            outcome(module)
        os.environ["ACCELERATOR_NVRTC_LIBRARY"] = {str(SHIM)!r}
        for name, code, _ in {AT_COMPILE!r}:
            shim.nvrtc_shim_fail(name.encode(), 1, code)
            outcome(module)
            print("left", left())
    """), tmp_path, ACCELERATOR_KERNEL_CACHE_DIR="")
    lines = out.splitlines()
    for name, line in zip(AT_OPEN, lines):
        assert line.startswith("raised RuntimeError"), (name, out)
        assert "names no usable NVRTC" in line, (name, out)
    rest = lines[len(AT_OPEN):]
    assert len(rest) == 2 * len(AT_COMPILE), out
    for (name, code, expected), line, left in zip(AT_COMPILE, rest[::2],
                                                  rest[1::2]):
        if expected == "ok":
            assert line == "ok", (name, code, out)
        else:
            assert line.startswith(f"raised {expected} "), (name, code, out)
            assert name in line or expected == "ValueError", (name, out)
        assert left == "left 0", (name, code, out)


def test_an_nvrtc_too_old_or_without_the_devices_architecture_is_refused(
        tmp_path: Path) -> None:
    """An NVRTC older than 11.2 (the shim tells 11.1) is passed over as
    too old; one whose architectures all lie above the device's (NVRTC 13
    starts at sm_75, the double told to be 5.0) says so, and what to do."""
    if not SHIM.exists():
        pytest.skip("no tests/drivers/build/libnvrtc_shim.so (make -C "
                    "tests/drivers)")
    compiler_or_skip("cuda", tmp_path)
    real = run("cuda", "from accelerator import _source\n"
               "print(_source._compiler_for('cuda-c++', 0)[0])\n",
               tmp_path).strip()
    script = textwrap.dedent("""
        outcome(lambda: acc.Module(SRC, format="cuda-c++"))
    """)
    old = run("cuda", script, tmp_path, ACCELERATOR_KERNEL_CACHE_DIR="",
              ACCELERATOR_NVRTC_LIBRARY=str(SHIM), NVRTC_SHIM_REAL=real,
              NVRTC_SHIM_VERSION="11.1")
    assert old.startswith("raised RuntimeError"), old
    assert "is NVRTC 11.1, too old: expected 11.2 or later" in old, old
    below = run("cuda", script, tmp_path, ACCELERATOR_KERNEL_CACHE_DIR="",
                ACCELERATOR_NVRTC_LIBRARY=real, FAKE_CUDA_CC="5.0")
    assert below.startswith("raised RuntimeError"), below
    assert re.search(r"which compiles for sm_\d+ and later; the device is "
                     r"sm_50 \(name an older NVRTC in "
                     r"ACCELERATOR_NVRTC_LIBRARY\)", below), below


def test_an_option_asking_nvrtc_for_other_output_is_named(
        tmp_path: Path) -> None:
    """-dlto makes NVRTC keep LTO IR, no cubin: the error says an option
    may have asked for it, not only that the target may be wrong."""
    compiler_or_skip("cuda", tmp_path)
    out = run("cuda", "outcome(lambda: acc.Module(SRC, format='cuda-c++', "
              "options=['-dlto']))\n", tmp_path)
    assert out.startswith("raised AcceleratorError nvrtcGetCUBIN() gave no "
                          "code"), out
    assert "an option" in out, out


def test_a_compiler_named_past_the_kept_few_is_not_made_at_each_call(
        tmp_path: Path) -> None:
    """Each library name opened keeps its compiler: past the first few
    names, one was made again (and lost) at every compile."""
    compiler_or_skip("cuda", tmp_path)
    out = run("cuda", textwrap.dedent("""
        import ctypes, os
        from accelerator import _accelerator, _source
        class Mallinfo2(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in (
                "arena ordblks smblks hblks hblkhd usmblks fsmblks "
                "uordblks fordblks keepcost").split()]
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Mallinfo2
        def used():
            info = libc.mallinfo2()
            return info.uordblks + info.hblkhd
        real = _source._compiler_for("cuda-c++", 0)[0]
        folder, name = os.path.split(real)
        # Twelve names of one library, each opened once.
        names = [folder + "/." * i + "/" + name for i in range(12)]
        for library in names:
            _accelerator._compiler_id("cuda-c++", library, 0)
        before = used()
        for _ in range(2000):
            _accelerator._compiler_id("cuda-c++", names[-1], 0)
        print((used() - before) / 2000)
    """), tmp_path)
    assert float(out) < 16, f"{out} bytes lost per call"


def test_the_key_follows_a_library_whose_path_holds_a_space(
        tmp_path: Path) -> None:
    """The key holds the library file's size and time (a compiler
    replaced in place compiles anew), read from the path at the end of
    who compiles: all of it, spaces included."""
    from accelerator import _kernel_cache
    library = tmp_path / "CUDA 13" / "lib" / "libnvrtc.so.13"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"one build")
    ident = f"nvrtc 13.0 sm_90 {library}"
    before = _kernel_cache.key("cuda-c++", ident, (), (), b"source")
    library.write_bytes(b"another build")
    assert _kernel_cache.key("cuda-c++", ident, (), (), b"source") != before
