"""The test kernels, in each format the backends load, built on demand.

Each kernel exists as OpenCL C source (built by the OpenCL driver) and as
C for the drivers' test doubles' native format (tests/drivers/
native_kernel.h: a host shared object, compiled here with the system
compiler).  The same kernels serve PTX (``nvcc -ptx``) and SPIR-V
(``clang-15`` then ``llvm-spirv-15``) builds for the tests that load the
real formats.  Builds are cached per process in a temporary folder.

The kernels (user arguments; every backend takes the same ones):
  saxpy(y, x, a: float32, n: uint32)       y[i] = a * x[i] + y[i]
  reduce_sum(x, out, n: uint32)            out[block] = the block's sum,
                                           through shared_mem (block*4)
  fill2d(out, width: uint32, height: uint32)  out[y*width+x] = y*1000+x
  add_one(data, n: uint32)                 data[i] += 1 (uint32)
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"

OPENCL_C = r"""
__kernel void saxpy(__global float *y, __global const float *x, float a,
                    uint n)
{
    size_t i = get_global_id(0);
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

__kernel void reduce_sum(__global const float *x, __global float *out,
                         uint n, __local float *scratch)
{
    size_t t = get_local_id(0), i = get_global_id(0);
    scratch[t] = i < n ? x[i] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (size_t step = get_local_size(0) / 2; step > 0; step /= 2) {
        if (t < step) {
            scratch[t] += scratch[t + step];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) {
        out[get_group_id(0)] = scratch[0];
    }
}

__kernel void fill2d(__global uint *out, uint width, uint height)
{
    size_t x = get_global_id(0), y = get_global_id(1);
    if (x < width && y < height) {
        out[y * width + x] = (uint)(y * 1000 + x);
    }
}

__kernel void add_one(__global uint *data, uint n)
{
    size_t i = get_global_id(0);
    if (i < n) {
        data[i] += 1;
    }
}
"""

NATIVE_C = r"""
#include "native_kernel.h"

#define ARG(type, i) (*(type *)args[i])
#define FOR_THREADS(b, t)                                                \
    for (unsigned t = 0; t < (b)->block[0]; t++)

static void
saxpy(const native_block *b, void *const *args)
{
    float *y = ARG(float *, 0);
    const float *x = ARG(const float *, 1);
    float a = ARG(float, 2);
    unsigned n = ARG(unsigned, 3);

    FOR_THREADS(b, t) {
        unsigned i = b->index[0] * b->block[0] + t;
        if (i < n) {
            y[i] = a * x[i] + y[i];
        }
    }
}

static void
reduce_sum(const native_block *b, void *const *args)
{
    const float *x = ARG(const float *, 0);
    float *out = ARG(float *, 1);
    unsigned n = ARG(unsigned, 2);
    float *scratch = b->shared;

    FOR_THREADS(b, t) {
        unsigned i = b->index[0] * b->block[0] + t;
        scratch[t] = i < n ? x[i] : 0.0f;
    }
    for (unsigned step = b->block[0] / 2; step > 0; step /= 2) {
        for (unsigned t = 0; t < step; t++) {
            scratch[t] += scratch[t + step];
        }
    }
    out[b->index[0]] = scratch[0];
}

static void
fill2d(const native_block *b, void *const *args)
{
    unsigned *out = ARG(unsigned *, 0);
    unsigned width = ARG(unsigned, 1), height = ARG(unsigned, 2);

    for (unsigned ty = 0; ty < b->block[1]; ty++) {
        for (unsigned tx = 0; tx < b->block[0]; tx++) {
            unsigned x = b->index[0] * b->block[0] + tx;
            unsigned y = b->index[1] * b->block[1] + ty;
            if (x < width && y < height) {
                out[y * width + x] = y * 1000 + x;
            }
        }
    }
}

static void
add_one(const native_block *b, void *const *args)
{
    unsigned *data = ARG(unsigned *, 0);
    unsigned n = ARG(unsigned, 1);

    FOR_THREADS(b, t) {
        unsigned i = b->index[0] * b->block[0] + t;
        if (i < n) {
            data[i] += 1;
        }
    }
}

static const native_param saxpy_params[] = {
    {NATIVE_PARAM_POINTER, 8}, {NATIVE_PARAM_POINTER, 8},
    {NATIVE_PARAM_FLOAT, 4}, {NATIVE_PARAM_UINT, 4}};
static const native_param reduce_params[] = {
    {NATIVE_PARAM_POINTER, 8}, {NATIVE_PARAM_POINTER, 8},
    {NATIVE_PARAM_UINT, 4}};
static const native_param fill2d_params[] = {
    {NATIVE_PARAM_POINTER, 8}, {NATIVE_PARAM_UINT, 4},
    {NATIVE_PARAM_UINT, 4}};
static const native_param add_one_params[] = {
    {NATIVE_PARAM_POINTER, 8}, {NATIVE_PARAM_UINT, 4}};

const native_kernel accelerator_native_kernels[] = {
    {"saxpy", saxpy, 4, saxpy_params, 0, 0},
    {"reduce_sum", reduce_sum, 3, reduce_params, 0, 0},
    {"fill2d", fill2d, 3, fill2d_params, 0, 0},
    {"add_one", add_one, 2, add_one_params, 0, 0},
    {0, 0, 0, 0, 0, 0},
};
"""

CUDA_C = r"""
extern "C" __global__ void saxpy(float *y, const float *x, float a,
                                 unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

extern "C" __global__ void add_one(unsigned *data, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        data[i] += 1;
    }
}
"""

#: CUDA C++ and HIP C++ alike (NVRTC and hiprtc both take it): saxpy as
#: the test kernels have it, and a template kernel for name expressions;
#: SCALE, when defined (-DSCALE=...), is the template's default factor
SOURCE_CXX = r"""
extern "C" __global__ void saxpy(float *y, const float *x, float a,
                                 unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

#ifndef SCALE
#define SCALE 1
#endif

template <typename T>
__global__ void scale(T *y, T a, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = y[i] * a * (T)SCALE;
    }
}
"""

#: HIP C++ for hiprtc: the CUDA C++ kernels, and what an AMD code
#: object's metadata tells of others (launch bounds and static shared
#: memory; a struct by value; printf's hidden argument)
HIP_C = CUDA_C + r"""
struct pair { int a; double b; };

extern "C" __global__ void __launch_bounds__(256)
bounded(float *out, int n)
{
    __shared__ float scratch[64];
    scratch[threadIdx.x % 64] = (float)n;
    __syncthreads();
    out[threadIdx.x] = scratch[(threadIdx.x + 1) % 64];
}

extern "C" __global__ void by_struct(pair p, int *out)
{
    out[0] = p.a + (int)p.b;
}

extern "C" __global__ void prints(int *x)
{
    printf("%d\n", x[0]);
}
"""

#: the smallest PTX a CUDA driver loads (recognised as PTX: it starts
#: with .version, then .target)
PTX_SAMPLE = """.version 7.0
.target sm_50
.address_size 64

.visible .entry empty()
{
    ret;
}
"""

_CACHE = Path(tempfile.mkdtemp(prefix="accelerator-kernels-"))


def _tool_env() -> dict[str, str]:
    """The environment of a build tool: without the sanitizer runtime the
    instrumented stages preload (nvcc crashes under it; the tools are not
    what is tested)."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def _cached(name: str, text: str, build: list[str], suffix: str) -> bytes:
    """Run build (with {src} and {out}) on text once per process."""
    key = hashlib.sha256((name + text + " ".join(build)).encode()).hexdigest()
    out = _CACHE / f"{key[:16]}{suffix}"
    if not out.exists():
        src = _CACHE / f"{key[:16]}.{name}"
        src.write_text(text)
        argv = [a.format(src=src, out=out, drivers=DRIVERS) for a in build]
        subprocess.run(argv, check=True, capture_output=True, text=True,
                       timeout=300, env=_tool_env())
    return out.read_bytes()


def _native_build() -> list[str]:
    """The command that builds a native module: native_kernel.h from the
    package that is imported (accelerator.get_include(), as a user's
    build finds it: the installed wheel's in the wheel stage), then the
    doubles' folder."""
    import accelerator

    include = Path(accelerator.get_include()) / "accelerator"
    return [os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O1",
            f"-I{include}", "-I{drivers}", "-o", "{out}", "{src}"]


def native(source: str = NATIVE_C) -> bytes:
    """A native module of the doubles: a host shared object (ELF)."""
    return _cached("c", source, _native_build(), ".so")


def native_path(source: str = NATIVE_C) -> Path:
    """Where native(source) is, for Module.from_file()."""
    native(source)
    key = hashlib.sha256(
        ("c" + source + " ".join(_native_build())).encode()).hexdigest()
    return _CACHE / f"{key[:16]}.so"


def sanitized_program(out: Path, sources: list[Path], flags: list[str],
                      libs: list[str]) -> subprocess.CompletedProcess:
    """Build a C check program of sources into out, with AddressSanitizer
    (leaks included) and UBSan where the compiler has them: the parsers
    it runs read untrusted images."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler"
    asan = subprocess.run([compiler, "-print-file-name=libasan.so"],
                          capture_output=True, text=True).stdout.strip()
    sanitize = ["-fsanitize=address,undefined",
                "-fno-sanitize-recover=undefined"] \
        if Path(asan).is_absolute() and Path(asan).exists() else []
    return subprocess.run(
        [compiler, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g",
         *sanitize, *flags, *map(str, sources), *libs, "-o", str(out)],
        capture_output=True, text=True)


def have(tool: str) -> bool:
    """Whether a compiler the real formats need is on this machine."""
    return shutil.which(tool) is not None or Path(tool).exists()


NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")


def ptx(source: str = CUDA_C) -> bytes:
    """PTX text from CUDA C++ (nvcc -ptx)."""
    return _cached("cu", source, [NVCC, "-ptx", "-o", "{out}", "{src}"],
                   ".ptx")


def cubin(source: str = CUDA_C, arch: str = "sm_90") -> bytes:
    """A CUDA device ELF (machine EM_CUDA) from CUDA C++ (nvcc -cubin)."""
    return _cached("cu", source, [NVCC, "-cubin", f"-arch={arch}", "-o",
                                  "{out}", "{src}"], ".cubin")


def fatbin(source: str = CUDA_C, arch: str = "sm_90") -> bytes:
    """A CUDA fat binary (nvcc -fatbin): arch's cubin and its PTX."""
    compute = arch.replace("sm_", "compute_")
    return _cached("cu", source, [NVCC, "-fatbin", "-gencode",
                                  f"arch={compute},code={arch}", "-gencode",
                                  f"arch={compute},code={compute}", "-o",
                                  "{out}", "{src}"], ".fatbin")


def spirv(source: str = OPENCL_C) -> bytes:
    """A SPIR-V module from OpenCL C (clang-15, then llvm-spirv-15)."""
    bc = _cached("cl", source, ["clang-15", "-c", "-target", "spir64",
                                "-O1", "-emit-llvm", "-cl-std=CL1.2",
                                "-o", "{out}", "{src}"], ".bc")
    key = hashlib.sha256(bc).hexdigest()[:16]
    bc_path = _CACHE / f"{key}.in.bc"
    out = _CACHE / f"{key}.spv"
    if not out.exists():
        bc_path.write_bytes(bc)
        subprocess.run(["llvm-spirv-15", str(bc_path), "-o", str(out)],
                       check=True, capture_output=True, timeout=300,
                       env=_tool_env())
    return out.read_bytes()


#: Debian's ROCm 5.2 HIP runtime (libamdhip64-5), which holds hiprtc
HIPRTC_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5")

#: hiprtc through ctypes, in a process of its own (no braces: the text
#: passes through str.format): the sanitized stages preload a runtime
#: that ROCm's LLVM is not built for, and a process that loads the HIP
#: double is spared ROCm's (loading both in one process works: the
#: backend opens the double by its path, ACCELERATOR_HIP_LIBRARY)
_HIPRTC_BUILD = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
source = open(sys.argv[2], "rb").read()
options = [o.encode() for o in sys.argv[4:]]
prog = ctypes.c_void_p()
rc = lib.hiprtcCreateProgram(ctypes.byref(prog), source, b"kernels.hip", 0,
                             None, None)
if rc == 0:
    rc = lib.hiprtcCompileProgram(
        prog, len(options), (ctypes.c_char_p * len(options))(*options))
size = ctypes.c_size_t()
lib.hiprtcGetProgramLogSize(prog, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value + 1)
lib.hiprtcGetProgramLog(prog, log)
if rc != 0:
    sys.exit("hiprtc failed (%d): %s" % (rc, log.value.decode("ascii",
                                                              "replace")))
lib.hiprtcGetCodeSize(prog, ctypes.byref(size))
code = ctypes.create_string_buffer(size.value)
if lib.hiprtcGetCode(prog, code) != 0:
    sys.exit("hiprtcGetCode failed")
open(sys.argv[3], "wb").write(code.raw)
"""


def hiprtc_missing() -> str | None:
    """Why hsaco() cannot build here, or None."""
    if not HIPRTC_LIBRARY.exists():
        return (f"no {HIPRTC_LIBRARY} (its hiprtc builds code objects): "
                "apt-get install libamdhip64-5")
    return None


def hsaco(source: str = CUDA_C, arch: str = "gfx90a") -> bytes:
    """An AMD GPU code object (ELF, machine EM_AMDGPU) for arch, from HIP
    C++ built by hiprtc (Debian's ROCm 5.2 runtime, on the CPU)."""
    return _cached("hip", source, [
        sys.executable, "-c", _HIPRTC_BUILD,
        str(HIPRTC_LIBRARY), "{src}", "{out}", f"--offload-arch={arch}"],
        ".hsaco")


@functools.lru_cache(maxsize=None)
def for_format(fmt: str) -> bytes:
    """The test kernels in fmt: 'opencl-c' or 'native'."""
    if fmt == "opencl-c":
        return OPENCL_C.encode()
    if fmt == "native":
        return native()
    raise ValueError(f"no test kernels in format {fmt!r}")


#: a module without kernels, in each format
NO_KERNELS = {
    "opencl-c": b"/* no kernels here */\n",
    "native": '#include "native_kernel.h"\n'
              "const native_kernel accelerator_native_kernels[] = "
              "{{0, 0, 0, 0, 0, 0}};\n",
}


def without_kernels(fmt: str) -> bytes:
    """Code in fmt that loads as a module with no kernels."""
    code = NO_KERNELS[fmt]
    return code if isinstance(code, bytes) else native(code)


def broken(fmt: str) -> bytes | None:
    """Code in fmt that its driver fails to build, or None where the
    driver builds nothing (a native object is loaded as it is)."""
    if fmt == "opencl-c":
        return b"__kernel void broken(__global float *x) { x[0] = y; }\n"
    return None
