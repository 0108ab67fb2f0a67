"""Kernels on the CUDA backend, over the CUDA double (tests/drivers/).

The behaviour suite (tests/behaviour/test_kernels.py) runs the test
kernels in the double's native format on every backend; these are the
CUDA-specific cases: PTX from nvcc read (entry names, parameter sizes
through cuFuncGetParamInfo, bare ints passed by size) and refused at
launch with CUDA_ERROR_NO_BINARY_FOR_GPU, the JIT's error log as
BuildError.log, cubins (nvcc, NVRTC) for the device read (kernels,
parameters, the attributes ptxas reports) and refused at launch, cubins
it cannot run and damaged ones refused at load, an older driver
without the CUDA 12.4 calls, a launch captured into a graph and replayed,
a module dropped while its launch is queued (the unload waits; the
double's "kernel_misuse" detector proves it would notice), and the
double's own rules at its ABI (geometry, global-mode capture).

Each case runs in a fresh interpreter: the driver initialises once per
process, and a case may change its version.
"""
from __future__ import annotations

import re
import struct
import subprocess
import sys
import textwrap

import pytest

import fake_drivers
import kernel_code
from fake_drivers import CUDA_DOUBLE, REPO

pytestmark = pytest.mark.skipif(not CUDA_DOUBLE.exists(),
                                reason="run make -C tests/drivers")
needs_nvcc = pytest.mark.skipif(not kernel_code.have(kernel_code.NVCC),
                                reason="nvcc is not installed")

#: each case's start: the double's control and the test kernels
PRELUDE = """
import ctypes, gc, sys, types
sys.path.insert(0, {tests!r})
import accelerator as a, fake_drivers, kernel_code, numpy
driver = fake_drivers.CudaDouble()
assert a.is_available()
"""


def run(code: str, abi: bool = False, **env: str) -> str:
    """code after PRELUDE (and ABI) in a fresh interpreter on the CUDA
    double; its stderr."""
    environment = fake_drivers.clean_environment()
    environment.update(fake_drivers.CudaDouble.environment(2))
    environment.update(PYTHONPATH=str(REPO), **env)
    script = PRELUDE.format(tests=str(REPO / "tests")) + \
        (ABI if abi else "") + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stderr


@needs_nvcc
def test_ptx_is_read_and_its_launch_refused_with_no_binary() -> None:
    run("""
    m = a.Module(kernel_code.ptx())
    assert m.format == "ptx"
    saxpy, add_one = m.get_kernel("saxpy"), m.get_kernel("add_one")
    # Parameter sizes from the PTX .param list (cuFuncGetParamInfo).
    assert saxpy.attributes["num_args"] == 4
    assert add_one.attributes["num_args"] == 2
    try:
        m.get_kernel("missing")
        raise AssertionError("no KeyError")
    except KeyError as e:
        assert "its kernels: saxpy, add_one" in str(e), str(e)
    b = a.Buffer(64)
    # A bare int is passed with the size the driver tells (4 bytes): the
    # launch reaches the driver, which has no binary for this device.
    before = driver.calls("cuLaunchKernel")
    try:
        a.launch(add_one, 1, 16, b, 16)
        raise AssertionError("launched PTX on the double")
    except a.AcceleratorError as e:
        assert (e.api, e.code, e.error_name) == (
            "cuLaunchKernel", 209, "CUDA_ERROR_NO_BINARY_FOR_GPU"), vars(e)
        assert "no kernel image is available" in str(e), str(e)
    assert driver.calls("cuLaunchKernel") == before + 1
    # A mismatch with a parameter's size is refused before the driver.
    try:
        a.launch(add_one, 1, 16, b, numpy.uint64(16))
        raise AssertionError("an 8-byte argument for a 4-byte parameter")
    except ValueError as e:
        assert "argument 1 has 8 bytes, expected 4" in str(e), str(e)
    assert driver.calls("cuLaunchKernel") == before + 1
    assert driver.live("bad_access") == 0
    """)


@pytest.mark.parametrize("ptx, says", [
    (".target sm_90\\n.entry k()\\n{\\n ret;\\n}\\n",
     "Missing .version directive"),
    (".version 8.0\\n.target sm_90\\n.entry k(.param .u64 p,\\n"
     ".param .u32 n\\n{\\n ret;\\n}\\n", "unbalanced parameter list"),
])
def test_a_ptx_error_raises_build_error_with_the_jit_log(ptx: str,
                                                         says: str) -> None:
    run(f"""
    try:
        a.Module(b"{ptx}", format="ptx")
        raise AssertionError("bad PTX loaded")
    except a.BuildError as e:
        assert (e.api, e.code, e.error_name) == (
            "cuModuleLoadDataEx", 218, "CUDA_ERROR_INVALID_PTX"), vars(e)
        assert {says!r} in e.log, e.log
        assert e.log.startswith("ptxas application ptx input, line "), e.log
    assert driver.live("module") == 0
    """)


def test_build_options_are_refused_on_cuda() -> None:
    run("""
    try:
        a.Module(kernel_code.native(), options="-O3")
        raise AssertionError("options accepted")
    except ValueError as e:
        assert "takes no build options (got '-O3')" in str(e), str(e)
    assert driver.calls("cuModuleLoadDataEx") == 0
    """)


def kinds_cubin(compiler: str, tmp_path, arch: str = "sm_90"
                ) -> tuple[bytes, dict[str, dict[str, int]]]:
    """kernel_code.CUDA_KINDS's cubin for arch by nvcc or NVRTC (skipped
    where missing), and what ptxas -v told of each kernel: registers,
    static shared memory (bytes smem), local memory (stack frame)."""
    if compiler == "nvcc":
        if not kernel_code.have(kernel_code.NVCC):
            pytest.skip("nvcc is not installed")
        src, out = tmp_path / "kinds.cu", tmp_path / "kinds.cubin"
        src.write_text(kernel_code.CUDA_KINDS)
        build = subprocess.run([kernel_code.NVCC, "-cubin", f"-arch={arch}",
                                "-Xptxas", "-v", "-o", str(out), str(src)],
                               capture_output=True, text=True, timeout=300,
                               env=kernel_code._tool_env())
        assert build.returncode == 0, build.stderr
        return out.read_bytes(), ptxas_report(build.stdout + build.stderr)
    lib, where = kernel_code.find_nvrtc()
    if lib is None:
        pytest.skip(f"no libnvrtc ({where})")
    log: list[str] = []
    cubin = kernel_code.nvrtc_compile(lib, kernel_code.CUDA_KINDS, arch,
                                      "cubin", ("--ptxas-options=-v",), log)
    return cubin, ptxas_report(log[0])


def ptxas_report(text: str) -> dict[str, dict[str, int]]:
    """ptxas -v's lines, per entry function."""
    kernels: dict[str, dict[str, int]] = {}
    entry = None
    for line in text.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            entry = kernels.setdefault(m[1], {"shared_memory_bytes": 0})
        elif m := re.search(r"Function properties for (\w+)", line):
            entry = kernels.get(m[1])
        elif entry is not None and (
                m := re.search(r"(\d+) bytes stack frame", line)):
            entry["local_memory_bytes"] = int(m[1])
        elif entry is not None and (
                m := re.search(r"Used (\d+) registers", line)):
            entry["registers"] = int(m[1])
            if smem := re.search(r"(\d+) bytes smem", line):
                entry["shared_memory_bytes"] = int(smem[1])
    assert set(kernels) == {"saxpy", "mixed", "spill", "empty",
                            "_Z7mangledPi", "calls"}, text
    return kernels


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_a_cubin_for_the_device_is_read_and_its_launch_refused(
        tmp_path, compiler: str) -> None:
    """A cubin for sm_90 on the double's 9.0: its kernels, their
    parameters (the core sizes each argument by them) and the attributes
    ptxas reported; the launch reaches the driver, which has no binary it
    runs."""
    cubin, report = kinds_cubin(compiler, tmp_path)
    run(f"""
    class Pair(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]
    class Odd(ctypes.Structure):
        _fields_ = [("c", ctypes.c_char * 3)]
    class Wide(ctypes.Structure):
        _fields_ = [("v", ctypes.c_float * 4)]
    m = a.Module({cubin!r})
    assert m.format == "cubin"
    report = {report!r}
    for name, told in report.items():
        attributes = m.get_kernel(name).attributes
        for key, value in told.items():
            assert attributes[key] == value, (name, key, attributes, told)
    mixed = m.get_kernel("mixed")
    assert mixed.attributes["max_threads_per_block"] == 128
    assert mixed.attributes["num_args"] == 9
    assert m.get_kernel("saxpy").attributes["max_threads_per_block"] == 1024
    assert m.get_kernel("empty").attributes["num_args"] == 0
    try:
        m.get_kernel("helper")
        raise AssertionError("a device function taken for a kernel")
    except KeyError:
        pass
    out = a.Buffer(512)
    args = [numpy.int8(1), numpy.float64(2), numpy.int32(3), Pair(4, 5),
            numpy.int16(6), Odd(b"abc"), numpy.int64(7), Wide(), out]
    before = driver.calls("cuLaunchKernel")
    try:
        a.launch(mixed, 1, 128, *args)
        raise AssertionError("launched a cubin on the double")
    except a.AcceleratorError as e:
        assert (e.api, e.code, e.error_name) == (
            "cuLaunchKernel", 209, "CUDA_ERROR_NO_BINARY_FOR_GPU"), vars(e)
    assert driver.calls("cuLaunchKernel") == before + 1
    # Each argument checked against its parameter's size.
    for i, wrong in ((0, numpy.int16(1)), (3, Odd(b"x")), (4, numpy.int32(6)),
                     (5, Pair(1, 2))):
        bad = list(args)
        bad[i] = wrong
        try:
            a.launch(mixed, 1, 128, *bad)
            raise AssertionError("argument %d of the wrong size" % i)
        except ValueError as e:
            assert "argument %d has %d bytes, expected %d" % (
                i, ctypes.sizeof(wrong) if isinstance(wrong, ctypes.Structure)
                else wrong.nbytes, ctypes.sizeof(args[i])
                if isinstance(args[i], ctypes.Structure)
                else args[i].nbytes) in str(e), str(e)
    assert driver.calls("cuLaunchKernel") == before + 1
    # Beyond its launch bounds: refused by the core, from the attribute.
    try:
        a.launch(mixed, 1, 256, *args)
        raise AssertionError("256 threads for a kernel bound to 128")
    except ValueError as e:
        assert "128" in str(e), str(e)
    del mixed, m
    gc.collect()
    assert driver.live("module") == 0
    """)


def other_machine_cubins() -> list[object]:
    """An ELF for EM_CUDA the device (9.0) cannot run: real cubins of
    another major version or a newer minor one, where nvcc is, and the
    double's native object marked EM_CUDA (its e_flags tell sm_0)."""
    return [pytest.param(arch, marks=needs_nvcc)
            for arch in ("sm_80", "sm_89", "sm_100", "sm_120")] + ["patched"]


@pytest.mark.parametrize("source", other_machine_cubins())
def test_a_cubin_of_another_machine_is_refused(tmp_path, source: str) -> None:
    if source == "patched":
        image = bytearray(kernel_code.native())
        image[18:20] = (190).to_bytes(2, "little")  # e_machine: EM_CUDA
    else:
        image = bytearray(kernel_code.cubin(arch=source))
    (tmp_path / "image").write_bytes(bytes(image))
    run(f"""
    try:
        a.Module.from_file({str(tmp_path / "image")!r})
        raise AssertionError("a cubin for another machine loaded")
    except a.AcceleratorError as e:
        assert type(e) is a.AcceleratorError, type(e)
        assert (e.api, e.code, e.error_name) == (
            "cuModuleLoadDataEx", 209, "CUDA_ERROR_NO_BINARY_FOR_GPU"), vars(e)
    assert driver.live("module") == 0
    """)


@needs_nvcc
def test_a_cubin_runs_on_its_major_version_from_its_minor_on() -> None:
    """On a device of compute capability 8.6: sm_80 and sm_86 cubins load,
    sm_89 (a newer minor) and sm_90 (another major) do not."""
    cubins = {arch: kernel_code.cubin(arch=arch)
              for arch in ("sm_80", "sm_86", "sm_89", "sm_90")}
    run(f"""
    seen = {{}}
    for arch, image in {cubins!r}.items():
        try:
            m = a.Module(image)
            seen[arch] = m.get_kernel("saxpy").attributes["num_args"]
            del m
        except a.AcceleratorError as e:
            seen[arch] = e.error_name
    assert seen == {{"sm_80": 4, "sm_86": 4,
                     "sm_89": "CUDA_ERROR_NO_BINARY_FOR_GPU",
                     "sm_90": "CUDA_ERROR_NO_BINARY_FOR_GPU"}}, seen
    assert a.get_device_properties(0).major == 8
    """, FAKE_CUDA_CC="8.6")


@needs_nvcc
def test_a_damaged_cubin_is_refused_as_an_invalid_image(tmp_path) -> None:
    """Damage the core's ELF check cannot see (its tables lie within the
    image): the double refuses it, the reason in the JIT's error log."""
    image = bytearray(kernel_code.cubin(kernel_code.CUDA_KINDS))
    shoff, = struct.unpack_from("<Q", image, 40)
    shnum, shstrndx = struct.unpack_from("<HH", image, 60)
    sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + 64 * i)
                for i in range(shnum)]
    names = sections[shstrndx][4]

    def named(name: str) -> tuple:
        return next(s for s in sections if image[
            names + s[0]:names + s[0] + len(name) + 1] == name.encode() + b"\0")

    info = named(".nv.info.mixed")
    at = info[4]
    while image[at + 1] != 0x17:           # the first EIATTR_KPARAM_INFO
        at += 4 + (struct.unpack_from("<H", image, at + 2)[0]
                   if image[at] == 4 else 0)
    image[at + 2:at + 4] = b"\xff\xff"     # its value runs past the section
    run(f"""
    try:
        a.Module({bytes(image)!r})
        raise AssertionError("a damaged cubin loaded")
    except a.AcceleratorError as e:
        assert (e.api, e.error_name) == (
            "cuModuleLoadDataEx", "CUDA_ERROR_INVALID_IMAGE"), vars(e)
    assert driver.live("module") == 0
    """)


def fat_binary(*payloads: bytes) -> bytes:
    """A fat binary of payloads: its 16-byte header (magic, version,
    header size, the entries' size), then each entry's 64-byte header
    (kind, version, header size, payload size, ...) and payload."""
    body = b"".join(struct.pack("<HHIQ", 2, 0x101, 64, len(p)) + bytes(48)
                    + p for p in payloads)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def fat_binaries() -> list[object]:
    """A real one where nvcc is, and one made here."""
    return [pytest.param("nvcc", marks=needs_nvcc), "made"]


@pytest.mark.parametrize("source", fat_binaries())
def test_a_fat_binary_is_checked_before_the_driver_reads_it(
        source: str) -> None:
    whole = (kernel_code.fatbin() if source == "nvcc"
             else fat_binary(b"\x7fELF" + bytes(200), b"PTX" * 30))
    damaged = bytearray(whole)   # its first entry's payload runs past
    struct.pack_into("<Q", damaged, 16 + 8, len(whole))
    run(f"""
    whole, damaged = {whole!r}, {bytes(damaged)!r}
    refused = {{
        "truncated": (whole[:-8], "its header names more bytes than it has"),
        "a header only": (whole[:16], "its header names more bytes"),
        "shorter than its header": (whole[:12], "it is shorter than its "
                                     "16-byte header"),
        "an entry past the end": (damaged, "an entry runs past"),
    }}
    for what, (code, says) in refused.items():
        for fmt in (None, "fatbin"):
            try:
                a.Module(code, format=fmt)
                raise AssertionError(what + " loaded")
            except ValueError as e:
                assert "truncated or damaged fat binary: " + says in str(e), e
    try:
        a.Module(b"\x7fELF" + bytes(60), format="fatbin")
        raise AssertionError("an ELF image taken as a fat binary")
    except ValueError as e:
        assert "not fatbin (no fat binary magic number 0xBA55ED50" in str(e)
    assert driver.calls("cuModuleLoadDataEx") == 0
    # Whole, it reaches the driver (the double loads no fat binary).
    for code in (whole, whole + bytes(16)):
        try:
            a.Module(code)
            raise AssertionError("the double loaded a fat binary")
        except a.AcceleratorError as e:
            assert (e.api, e.error_name) == (
                "cuModuleLoadDataEx", "CUDA_ERROR_INVALID_IMAGE"), vars(e)
    assert driver.calls("cuModuleLoadDataEx") == 2
    """)


def test_an_older_driver_tells_no_parameters_and_no_names() -> None:
    """Without cuFuncGetParamInfo (before 12.4) the driver tells no
    parameters: the core reads a native module's own table instead."""
    run("""
    m = a.Module(kernel_code.native())
    k = m.get_kernel("add_one")
    assert k.attributes["num_args"] == 2, k.attributes
    assert k.attributes["max_threads_per_block"] == 1024
    try:
        m.get_kernel("missing")
        raise AssertionError("no KeyError")
    except KeyError as e:
        assert "its kernels" not in str(e), str(e)
    b = a.Buffer(256)
    b.fill(0)
    a.launch(k, 1, 64, b, 64)              # sized by the table
    a.launch(k, 1, 64, b, numpy.uint32(64))
    out = bytearray(256)
    b.copy_to(out)
    assert numpy.frombuffer(out, numpy.uint32).tolist() == [2] * 64
    for name in ("cuFuncGetParamInfo", "cuModuleGetFunctionCount",
                 "cuModuleEnumerateFunctions", "cuFuncGetName"):
        assert driver.calls(name) == 0, name
    """, FAKE_CUDA_DRIVER_VERSION="12000")


#: add_one (256 counts) of a native module, and a zeroed buffer for it
ADD_ONE = textwrap.indent("""
s = a.Stream()
m = a.Module(kernel_code.native())
k = m.get_kernel("add_one")
b = a.Buffer(1024, stream=s)
b.fill(0, stream=s)
s.synchronize()
""", "    ")


def test_a_captured_launch_is_replayed() -> None:
    run(ADD_ONE + """
    g = a.Graph()
    launched = driver.calls("cuLaunchKernel")
    with s:
        g.capture_begin()
        a.launch(k, 4, 64, b, numpy.uint32(256), stream=s)
        g.capture_end()
    s.synchronize()
    out = bytearray(1024)
    b.copy_to(out)
    assert out == bytes(1024), "a captured launch ran at capture"
    for _ in range(3):
        with s:
            g.replay()
    s.synchronize()
    b.copy_to(out)
    assert out == numpy.full(256, 3, numpy.uint32).tobytes()
    assert driver.calls("cuLaunchKernel") == launched + 1
    del g, k, m
    gc.collect()
    a.synchronize(0)
    a.empty_cache()
    assert driver.live("module") == 0
    assert driver.fired_detectors() == {}
    """)


def test_a_module_dropped_while_its_launch_is_queued_waits_for_it() -> None:
    run(ADD_ONE + """
    with driver.stall(s) as gate:
        a.launch(k, 4, 64, b, numpy.uint32(256), stream=s)
        del k, m
        gc.collect()
        a.empty_cache()
        assert driver.live("module") == 1, "unloaded under its launch"
        assert driver.calls("cuModuleUnload") == 0
    s.synchronize()
    a.empty_cache()
    assert driver.calls("cuModuleUnload") == 1
    assert driver.live("module") == 0
    out = bytearray(1024)
    b.copy_to(out)
    assert out == numpy.full(256, 1, numpy.uint32).tobytes()
    assert driver.fired_detectors() == {}
    """)


#: the double at its own ABI, as another library would call it
ABI = """
lib = driver.lib
u64, vp, ui = ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_uint
lib.cuModuleLoadData.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp,
                                    ctypes.c_char_p]
lib.cuModuleUnload.argtypes = [vp]
lib.cuLaunchKernel.argtypes = [vp, ui, ui, ui, ui, ui, ui, ui, vp,
                               ctypes.POINTER(vp), ctypes.POINTER(vp)]
lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
lib.cuStreamCreateWithPriority.argtypes = [ctypes.POINTER(vp), ui,
                                           ctypes.c_int]
lib.cuStreamSynchronize.argtypes = [vp]
ctx = vp()
assert lib.cuInit(0) == 0
assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert lib.cuCtxSetCurrent(ctx) == 0
image = kernel_code.native()
mod, fn, stream = vp(), vp(), vp()
assert lib.cuModuleLoadData(ctypes.byref(mod), image) == 0
assert lib.cuModuleGetFunction(ctypes.byref(fn), mod, b"add_one") == 0
assert lib.cuModuleGetFunction(ctypes.byref(vp()), mod, b"nope") == 500
assert lib.cuStreamCreateWithPriority(ctypes.byref(stream), 1, 0) == 0
dev = u64()
assert lib.cuMemAlloc_v2(ctypes.byref(dev), 1024) == 0
count = ctypes.c_uint(256)
params = (vp * 2)(ctypes.cast(ctypes.byref(dev), vp),
                  ctypes.cast(ctypes.byref(count), vp))

def launch(grid=(4, 1, 1), block=(64, 1, 1), shared=0, extra=None):
    return lib.cuLaunchKernel(fn, *grid, *block, shared, stream, params,
                              extra)
"""


def test_the_double_refuses_bad_geometry_as_the_driver_does() -> None:
    run("""
    assert launch(block=(2048, 1, 1)) == 1      # beyond 1024 threads
    assert launch(block=(1, 1, 65)) == 1        # z beyond 64
    assert launch(block=(32, 32, 2)) == 1       # 2048 threads in all
    assert launch(grid=(0, 1, 1)) == 1
    assert launch(grid=(1, 65536, 1)) == 1
    assert launch(shared=48 * 1024 + 1) == 1
    extra = (vp * 1)(None)
    assert lib.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, None,
                              extra) == 801  # the packed form: not modelled
    assert driver.calls("cuLaunchKernel") == 7
    assert launch() == 0
    assert lib.cuStreamSynchronize(stream) == 0
    assert driver.fired_detectors() == {}
    """, abi=True)


def test_the_double_detects_an_unload_while_a_launch_is_queued() -> None:
    stderr = run("""
    gate = driver.stall(types.SimpleNamespace(device_index=0,
                                              handle=stream.value))
    assert launch() == 0
    assert lib.cuModuleUnload(mod) == 0
    assert driver.live("kernel_misuse") == 1
    gate.open()
    assert lib.cuStreamSynchronize(stream) == 0
    # The launch was not run from the unloaded module's code: counted.
    assert driver.live("kernel_misuse") == 2
    driver.reset_detectors()
    assert driver.fired_detectors() == {}
    """, abi=True)
    assert "module unloaded while 1 launch(es) of it are queued" in stderr
    assert "launch of kernel add_one of an unloaded module" in stderr


def test_loading_a_module_invalidates_a_global_capture() -> None:
    run("""
    s = a.Stream()
    g = a.Graph()
    with s:
        g.capture_begin()
        # Another library (ctypes here) loads a module meanwhile: unsafe
        # during a global-mode capture.
        other = vp()
        assert lib.cuModuleLoadData(ctypes.byref(other), image) == 900
        try:
            g.capture_end()
            raise AssertionError("the capture survived")
        except a.AcceleratorError as e:
            assert e.error_name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert driver.live("module") == 1   # the ABI prelude's own
    """, abi=True)
