"""Kernels on the HIP backend, on the HIP double: what is HIP's own.

ROCm 5.2 has no call that tells a kernel's parameters, so the core reads
a native object's own table (native_table.c) and an AMD code object's
metadata (hsaco_table.c): arguments are counted and sized, bare numbers
packed, a wrong size refused; code objects are not built, so build
options are refused; an hsaco that hiprtc built for the double's gfx90a
loads and its kernels are known (a launch of one is hipErrorNoBinaryForGpu:
the double's device runs host code only), one for another architecture
is refused by the runtime with hipErrorNoBinaryForGpu; a launch on a
capturing stream is a node of the graph that every replay runs again; a
module dropped while its launch is queued is unloaded only after the
launch ran.  Each runs in a fresh process with the double underneath (the
behaviour suite, tests/behaviour/test_kernels.py, runs the kernels
themselves with ACCELERATOR_TEST_BACKEND=hip).
"""
from __future__ import annotations

import json

import pytest

import fake_drivers
import kernel_code
from test_config import run

pytestmark = pytest.mark.skipif(
    fake_drivers.HipDouble.missing() is not None,
    reason=str(fake_drivers.HipDouble.missing()))

PRELUDE = """
import ctypes, gc, json
import numpy
import accelerator as a
import fake_drivers, kernel_code
d = fake_drivers.HipDouble()
code = kernel_code.for_format("native")
"""


def outcome(body: str) -> dict:
    """Run body after PRELUDE on the HIP double; it prints one JSON
    document."""
    result = run(PRELUDE + body, **fake_drivers.HipDouble.environment(2))
    return json.loads(result.stdout.splitlines()[-1])


def error_of(expression: str) -> str:
    """Code that records what expression raises (type, message and the
    driver's fields) as `seen`."""
    return f"""
try:
    {expression}
except Exception as exc:
    seen = {{"type": type(exc).__name__, "text": str(exc),
             "api": getattr(exc, "api", None),
             "code": getattr(exc, "code", None),
             "name": getattr(exc, "error_name", None)}}
else:
    seen = None
"""


def test_the_native_table_tells_what_hip_does_not() -> None:
    """HIP accepted a numpy.float64 for a float parameter silently (the
    runtime reads the parameter's 4 bytes of it); the native table's sizes
    refuse it before the launch, as CUDA does, and a bare int passes."""
    seen = outcome("""
k = a.Module(code).get_kernel("add_one")
b = a.Buffer(64)
b.fill(0)
a.launch(k, 1, 16, b, 16)
out = bytearray(64)
b.copy_to(out)
ones = numpy.frombuffer(out, numpy.uint32).tolist()
saxpy = a.Module(code).get_kernel("saxpy")
""" + error_of("a.launch(saxpy, 1, 16, b, b, numpy.float64(2), 16)") + """
wrong_size = seen
""" + error_of("a.launch(k, 1, 16, b)") + """
print(json.dumps({"wrong_size": wrong_size, "short": seen, "ones": ones,
                  "num_args": [k.attributes["num_args"],
                               saxpy.attributes["num_args"]],
                  "launches": d.calls("hipModuleLaunchKernel")}))
""")
    assert seen["num_args"] == [2, 4]
    assert seen["ones"] == [1] * 16
    assert seen["wrong_size"]["type"] == "ValueError", seen
    assert seen["wrong_size"]["text"].startswith(
        "argument 2 has 8 bytes, expected 4 (parameter 2 of kernel "
        "'saxpy')"), seen
    assert seen["short"]["type"] == "ValueError", seen
    assert "kernel 'add_one' takes 2 arguments, got 1" in (
        seen["short"]["text"]), seen
    assert seen["launches"] == 1


def test_sized_scalars_pass_by_their_size_and_the_kernel_runs() -> None:
    seen = outcome("""
k = a.Module(code).get_kernel("saxpy")
n = 300
x = numpy.arange(n, dtype=numpy.float32)
bx, by = a.Buffer(4 * n), a.Buffer(4 * n)
bx.copy_from(x.tobytes())
by.copy_from(numpy.ones(n, dtype=numpy.float32).tobytes())
a.launch(k, 2, 256, by, bx, numpy.float32(2.0), ctypes.c_uint32(n))
out = bytearray(4 * n)
by.copy_to(out)
print(json.dumps({"ok": bool((numpy.frombuffer(out, numpy.float32)
                              == 2 * x + 1).all()),
                  "attributes": k.attributes,
                  "bad": d.live("bad_access")}))
""")
    assert seen["ok"] and seen["bad"] == 0
    # What hipFuncGetAttribute and the launch limits tell.
    assert seen["attributes"] == {
        "max_threads_per_block": 1024, "shared_memory_bytes": 0,
        "local_memory_bytes": 0, "registers": 0,
        "max_dynamic_shared_memory_bytes": 48 * 1024, "num_args": 4}


def test_parameters_a_launch_leaves_out_read_zeros_not_stale_memory(
) -> None:
    """ROCm 5.2 tells no parameter count, so a launch may pass fewer
    arguments than the kernel takes; the runtime reads a pointer for each
    parameter the kernel has.  Those left out must point at zeros, not at
    whatever the stack held (here: the previous launch's count)."""
    seen = outcome("""
k = a.Module(code).get_kernel("add_one")
b = a.Buffer(256)
b.fill(0)
a.launch(k, 1, 64, b, numpy.uint32(64))     # the last count: 64
""" + error_of("""for _ in range(5):
        a.launch(k, 1, 64, b)                   # no count: n reads 0""") + """
out = bytearray(256)
b.copy_to(out)
print(json.dumps({"error": seen, "num_args": k.attributes["num_args"],
                  "counts": sorted(set(numpy.frombuffer(out,
                                                        numpy.uint32).tolist())),
                  "bad": d.live("bad_access")}))
""")
    if seen["num_args"] is not None:     # where it is known: refused
        assert seen["error"]["type"] == "ValueError", seen
        assert "takes 2 arguments, got 1" in seen["error"]["text"], seen
    else:
        assert seen["error"] is None, seen
    assert seen["counts"] == [1] and seen["bad"] == 0, seen


def test_build_options_are_refused() -> None:
    seen = outcome(error_of('a.Module(code, options="-O3")') + """
print(json.dumps({"error": seen, "loads": d.calls("hipModuleLoadData")}))
""")
    assert seen["error"]["type"] == "ValueError", seen
    assert "backend hip takes no build options (got '-O3'): the runtime " \
        "compiles nothing" in seen["error"]["text"], seen
    assert seen["error"]["text"].endswith("expected options=None"), seen
    assert seen["loads"] == 0


def test_an_hsaco_for_a_gpu_is_refused_by_the_runtime() -> None:
    """An ELF of an AMD GPU (EM_AMDGPU, 224) is recognised as hsaco, and
    hipModuleLoadData finds no code the device runs; a host object passed
    as hsaco is the runtime's to judge, and runs."""
    seen = outcome("""
elf = bytearray(code)
elf[18:20] = (224).to_bytes(2, "little")
""" + error_of("a.Module(bytes(elf))") + """
recognised = seen
""" + error_of('a.Module(bytes(elf), format="hsaco")') + """
modules = d.live("module")
print(json.dumps({"recognised": recognised, "hsaco": seen,
                  "modules": modules, "host": a.Module(code).format,
                  "host_as_hsaco": a.Module(code, format="hsaco")
                  .get_kernel("add_one").name}))
""")
    for error in (seen["recognised"], seen["hsaco"]):
        assert error["type"] == "AcceleratorError", error
        assert (error["api"], error["code"], error["name"]) == (
            "hipModuleLoadData", 209, "hipErrorNoBinaryForGpu"), error
    assert seen["host"] == "native"
    assert seen["host_as_hsaco"] == "add_one"
    assert seen["modules"] == 0


def test_a_launch_in_a_capture_is_replayed() -> None:
    seen = outcome("""
k = a.Module(code).get_kernel("add_one")
s = a.Stream()
b = a.Buffer(64, stream=s)
b.fill(0, stream=s)
s.synchronize()
g = a.Graph()
with s:
    g.capture_begin()
    a.launch(k, 1, 16, b, numpy.uint32(16))
    g.capture_end()
s.synchronize()
out = bytearray(64)
b.copy_to(out)
after_capture = list(numpy.frombuffer(out, numpy.uint32))
for _ in range(3):
    with s:
        g.replay()
s.synchronize()
b.copy_to(out)
print(json.dumps({"after_capture": [int(v) for v in after_capture],
                  "after_replays": [int(v) for v in
                                    numpy.frombuffer(out, numpy.uint32)],
                  "launches": d.calls("hipModuleLaunchKernel"),
                  "bad": d.live("bad_access")}))
""")
    assert seen["after_capture"] == [0] * 16, "the captured launch ran"
    assert seen["after_replays"] == [3] * 16
    assert seen["launches"] == 1
    assert seen["bad"] == 0


def test_a_module_dropped_while_its_launch_is_queued_waits_for_it() -> None:
    seen = outcome("""
s = a.Stream()
m = a.Module(code)
k = m.get_kernel("add_one")
b = a.Buffer(64, stream=s)
b.fill(0, stream=s)
gate = d.gate(s)
a.launch(k, 1, 16, b, numpy.uint32(16), stream=s)
del m, k
gc.collect()
a.empty_cache()
while_queued = [d.live("module"), d.calls("hipModuleUnload")]
gate.open()
s.synchronize()
a.empty_cache()
out = bytearray(64)
b.copy_to(out)
print(json.dumps({"while_queued": while_queued,
                  "after": [d.live("module"), d.calls("hipModuleUnload")],
                  "data": sorted(set(numpy.frombuffer(out, numpy.uint32)
                                     .tolist())),
                  "misuse": d.live("kernel_misuse")}))
""")
    assert seen["while_queued"] == [1, 0], seen
    assert seen["after"] == [0, 1], seen
    assert seen["data"] == [1]
    assert seen["misuse"] == 0


def test_a_truncated_code_object_is_refused_before_the_runtime_reads_it(
) -> None:
    """hipModuleLoadData takes no size: it reads as far as the ELF headers
    say, so a cut image must not reach it (it read past the bytes)."""
    seen = outcome("""
errors = []
for cut in (64, 1000, len(code) // 2, len(code) - 1):
""" + "\n".join("    " + line for line in error_of(
        "a.Module(code[:cut])").splitlines()) + """
    errors.append(seen)
loads = d.calls("hipModuleLoadData")
print(json.dumps({"errors": errors, "loads": loads,
                  "whole": str(a.Module(code))}))
""")
    for error in seen["errors"]:
        assert error is not None and error["type"] == "ValueError", seen
        assert "the code is a truncated or damaged ELF image" in \
            error["text"], error
    assert seen["loads"] == 0, "a cut image reached the runtime"
    assert seen["whole"] == "<accelerator.Module native on hip:0>"


@pytest.mark.skipif(
    not all(map(kernel_code.have, ("clang-15", "llvm-spirv-15",
                                   kernel_code.NVCC))),
    reason="needs clang-15, llvm-spirv-15 and nvcc to build the kernels")
def test_the_double_takes_code_objects_only() -> None:
    """PTX text and SPIR-V, which the shared kernel layer reads for the
    other doubles, are no HIP code objects: hipErrorInvalidImage (200),
    and no module is left (the backend never passes them: its formats are
    hsaco and native)."""
    seen = outcome("""
runtime = ctypes.CDLL(str(fake_drivers.HIP_DOUBLE))
results = {}
for name, image in (("spirv", kernel_code.spirv()),
                    ("ptx", kernel_code.ptx() + b"\\0")):
    module = ctypes.c_void_p()
    results[name] = [runtime.hipModuleLoadData(ctypes.byref(module), image),
                     module.value]
results["modules"] = d.live("module")
print(json.dumps(results))
""")
    assert seen == {"spirv": [200, None], "ptx": [200, None], "modules": 0}


needs_hiprtc = pytest.mark.skipif(kernel_code.hiprtc_missing() is not None,
                                  reason=str(kernel_code.hiprtc_missing()))

def hsaco_outcome(body: str, tmp_path, **images: bytes) -> dict:
    """outcome(body) with each image (built here, by hiprtc in a process
    of its own) as a variable of that name."""
    paths = {}
    for name, image in images.items():
        paths[name] = tmp_path / f"{name}.hsaco"
        paths[name].write_bytes(image)
    reads = "".join(f"{name} = open({str(path)!r}, 'rb').read()\n"
                    for name, path in paths.items())
    return outcome(reads + body)


@needs_hiprtc
def test_an_hsaco_for_the_devices_architecture_loads_and_is_checked(
        tmp_path) -> None:
    """The double's devices are gfx90a: hiprtc's code object for it
    loads, its kernels are found by name and their parameters come from
    its metadata, so a launch with a wrong count, size or kind is refused
    before the runtime; a well-formed one reaches the runtime, which has
    no binary this device runs."""
    seen = hsaco_outcome("""
m = a.Module(image, format="hsaco")
recognised = a.Module(image).format
k = m.get_kernel("saxpy")
b = a.Buffer(64)
errors = {}
for name, args in {
        "count": (b, b, numpy.float32(2)),
        "size": (b, b, numpy.float64(2), numpy.uint32(16)),
        "memory_by_value": (b, b, b, numpy.uint32(16)),
        "bare_for_pointer": (b, 7, numpy.float32(2), numpy.uint32(16)),
        "well_formed": (b, b, numpy.float32(2), numpy.uint32(16)),
        "bare_numbers": (b, b, 2.0, 16)}.items():
""" + "\n".join("    " + line for line in error_of(
        "a.launch(k, 1, 16, *args)").splitlines()) + """
    errors[name] = seen
""" + error_of('m.get_kernel("saxpy.kd")') + """
unknown = seen
# The runtime itself, through ctypes: what ROCm answers.
runtime = ctypes.CDLL(str(fake_drivers.HIP_DOUBLE))
module, function = ctypes.c_void_p(), ctypes.c_void_p()
direct = [runtime.hipModuleLoadData(ctypes.byref(module), image)]
for name in (b"add_one", b"saxpy.kd", b"nope"):
    direct.append(runtime.hipModuleGetFunction(ctypes.byref(function),
                                               module, name))
direct.append(runtime.hipModuleUnload(module))
print(json.dumps({"format": m.format, "recognised": recognised,
                  "repr": repr(m), "name": k.name,
                  "attributes": k.attributes, "errors": errors,
                  "unknown": unknown, "direct": direct,
                  "launches": d.calls("hipModuleLaunchKernel")}))
""", tmp_path, image=kernel_code.hsaco())
    assert seen["format"] == seen["recognised"] == "hsaco"
    assert seen["repr"] == "<accelerator.Module hsaco on hip:0>"
    assert seen["name"] == "saxpy"
    attributes = seen["attributes"]
    assert attributes["num_args"] == 4, attributes
    assert attributes["max_threads_per_block"] == 1024
    assert attributes["shared_memory_bytes"] == 0
    assert attributes["registers"] > 0     # the metadata's .vgpr_count
    errors = seen["errors"]
    assert errors["count"]["type"] == "ValueError", errors
    assert "kernel 'saxpy' takes 4 arguments, got 3" in errors["count"][
        "text"]
    assert errors["size"]["type"] == "ValueError", errors
    assert errors["size"]["text"].startswith(
        "argument 2 has 8 bytes, expected 4 (parameter 2 of kernel "
        "'saxpy')"), errors
    assert errors["memory_by_value"]["type"] == "ValueError", errors
    assert errors["memory_by_value"]["text"].startswith(
        "argument 2 is memory, but parameter 2 of kernel 'saxpy' is not a "
        "pointer (it takes 4 bytes by value)"), errors
    assert errors["bare_for_pointer"]["type"] == "TypeError", errors
    assert "parameter 1 is a pointer: pass a Buffer or a HostBuffer" in \
        errors["bare_for_pointer"]["text"], errors
    for name in ("well_formed", "bare_numbers"):
        error = errors[name]
        assert error["type"] == "AcceleratorError", errors
        assert (error["api"], error["code"], error["name"]) == (
            "hipModuleLaunchKernel", 209, "hipErrorNoBinaryForGpu"), errors
    # Only the well-formed launches reached the runtime.
    assert seen["launches"] == 2
    assert seen["unknown"]["type"] == "KeyError", seen
    assert "no kernel named 'saxpy.kd'" in seen["unknown"]["text"]
    # hipSuccess; the kernel; hipErrorNotFound (500) for its descriptor's
    # symbol and for an unknown name, as ROCm answers; unloaded.
    assert seen["direct"] == [0, 0, 500, 500, 0]


@needs_hiprtc
def test_an_hsacos_metadata_gives_its_limits_and_hidden_arguments_stay_out(
        tmp_path) -> None:
    seen = hsaco_outcome("""
m = a.Module(image)
bounded, prints = m.get_kernel("bounded"), m.get_kernel("prints")
b = a.Buffer(4096)
""" + error_of("a.launch(bounded, 1, 512, b, numpy.int32(1))") + """
print(json.dumps({"bounded": bounded.attributes, "too_many": seen,
                  "prints": prints.attributes,
                  "launches": d.calls("hipModuleLaunchKernel")}))
""", tmp_path, image=kernel_code.hsaco(kernel_code.HIP_C))
    bounded = seen["bounded"]
    # __launch_bounds__(256) and 64 floats of __shared__ memory.
    assert bounded["max_threads_per_block"] == 256, bounded
    assert bounded["shared_memory_bytes"] == 256
    assert bounded["max_dynamic_shared_memory_bytes"] == 48 * 1024 - 256
    assert bounded["num_args"] == 2
    assert seen["too_many"]["type"] == "ValueError", seen
    assert "beyond the kernel's limit of 256 per block" in \
        seen["too_many"]["text"], seen
    # printf's buffer is a hidden argument: the launch passes one; its
    # private memory is told.
    assert seen["prints"]["num_args"] == 1, seen
    assert seen["prints"]["local_memory_bytes"] > 0, seen
    assert seen["launches"] == 0


@needs_hiprtc
@pytest.mark.parametrize("arch", ["gfx1030", "gfx906", "gfx90a:xnack+",
                                  "gfx90a:sramecc-"])
def test_an_hsaco_for_another_architecture_is_refused(tmp_path,
                                                      arch: str) -> None:
    """The double is a gfx90a with sramecc on and xnack off, as an MI200
    ("gfx90a:sramecc+:xnack-"): its own code object loads, one for
    another ISA or for the other settings has no binary it runs."""
    seen = hsaco_outcome(error_of('a.Module(image, format="hsaco")') + """
own = a.Module(own_image).get_kernel("saxpy").attributes["num_args"]
del own_image
print(json.dumps({"error": seen, "own": own,
                  "loads": d.calls("hipModuleLoadData")}))
""", tmp_path, image=kernel_code.hsaco(arch=arch),
        own_image=kernel_code.hsaco(arch="gfx90a:sramecc+:xnack-"))
    error = seen["error"]
    assert error["type"] == "AcceleratorError", error
    assert (error["api"], error["code"], error["name"]) == (
        "hipModuleLoadData", 209, "hipErrorNoBinaryForGpu"), error
    assert seen["own"] == 4 and seen["loads"] == 2, seen


def _damaged(image: bytes) -> dict[str, bytes]:
    """Copies of image whose headers still fit its bytes, with the
    metadata or the symbols broken."""
    at = image.index(b"amdhsa.kernels")
    metadata = bytearray(image)
    metadata[at - 1] = 0xc1          # the key's header: never used
    symbol = bytearray(image)
    for name in (b"saxpy.kd\0", b"add_one.kd\0"):
        for i in [j for j in range(len(image)) if image.startswith(name, j)]:
            symbol[i + len(name) - 3] = ord("x")   # "saxpy.kx"
    return {"metadata": bytes(metadata), "symbol": bytes(symbol)}


@needs_hiprtc
def test_a_damaged_hsaco_is_refused_cleanly(tmp_path) -> None:
    """Damaged metadata or a kernel without its descriptor symbol:
    hipErrorInvalidImage (the headers fit, so the runtime reads it); a
    truncated image never reaches the runtime; corrupted metadata bytes
    load or are refused, never crash."""
    image = kernel_code.hsaco()
    images = _damaged(image)
    seen = hsaco_outcome("""
errors = {}
for name, code in (("metadata", metadata), ("symbol", symbol),
                   ("cut", image[:len(image) // 2])):
""" + "\n".join("    " + line for line in error_of(
        'a.Module(code, format="hsaco")').splitlines()) + """
    errors[name] = seen
loads = d.calls("hipModuleLoadData")
import random
at = image.index(b"amdhsa.kernels")
rng = random.Random(7)
outcomes = set()
for _ in range(300):
    code = bytearray(image)
    for _ in range(rng.randint(1, 4)):
        code[rng.randrange(at - 8, at + 1000)] = rng.randrange(256)
    try:
        module = a.Module(bytes(code), format="hsaco")
        outcomes.add("loaded")
    except a.AcceleratorError as exc:
        outcomes.add(exc.error_name)
print(json.dumps({"errors": errors, "loads": loads,
                  "outcomes": sorted(outcomes),
                  "modules": d.live("module")}))
""", tmp_path, image=image, **images)
    for name in ("metadata", "symbol"):
        error = seen["errors"][name]
        assert error["type"] == "AcceleratorError", seen
        assert (error["api"], error["code"], error["name"]) == (
            "hipModuleLoadData", 200, "hipErrorInvalidImage"), seen
    assert seen["errors"]["cut"]["type"] == "ValueError", seen
    assert "truncated or damaged ELF image" in seen["errors"]["cut"]["text"]
    assert seen["loads"] == 2, "the cut image reached the runtime"
    assert set(seen["outcomes"]) <= {"loaded", "hipErrorInvalidImage"}, seen
    assert "hipErrorInvalidImage" in seen["outcomes"], seen
