"""Kernels from source under hostile use (issue 31's hostile pass): what
would take the interpreter down (a compiler that aborts the process, a
cache entry that never ends) is refused with a clear exception instead.
Each case runs in its own process on a driver double, so that a crash is
a failed test, not a lost run.
"""
from __future__ import annotations

import os
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
