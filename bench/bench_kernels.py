#!/usr/bin/env python3
"""Launch overhead of a trivial kernel: accelerator beside pyopencl and
beside cuda.core and cuda.bindings.

    python bench/bench_kernels.py [--quick] [--only opencl|cuda]
                                  [--markdown OUT.md] [--json OUT.json]

The kernel is add_one (tests/kernel_code.py) on 1,024 uint32s: 4 blocks
of 256 threads.  Two platforms, each in its own worker process, where
every library launches the same kernel on the same device, interleaved
(bench_peers.time_rows):

- opencl: PoCL's pthread device (one), through the system's ICD loader,
  with pyopencl (PyPI) beside us: the kernel built from OpenCL C source.
- cuda: the CUDA driver double (tests/drivers/build on LD_LIBRARY_PATH, as
  bench_peers.py does) with cuda.core and raw cuda.bindings beside us: the
  double runs its native format (a host shared object), which each
  library loads as it would load a cubin.  Without --double the real
  driver runs what accelerator's NVRTC compile makes of the kernel's
  CUDA C++ (a cubin for the device's SM, else PTX).

Rows: the launch call alone (the work queues; each timing drains the
queues after it), and a launch followed by a wait for it.  Figures are ns
per call net of the empty loop and ratios ours/peer, medians over the
repeats; no budget.  pyopencl and cuda.core come from this interpreter
when it has them, else from a throwaway venv where pip installs them
(--venv, --no-install), as bench_peers.py does.  See bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import bench_peers
from bench_peers import DOUBLES, REPO, RESULT_TAG, fmt, markdown_table

N = 1024
GRID, BLOCK = 4, 256

PLATFORMS: dict[str, dict[str, Any]] = {
    "opencl": {
        "libs": ("accelerator", "pyopencl", "pyopencl, arguments set once"),
        "packages": ["pyopencl"],
        "probe": "import pyopencl",
        "rows": [
            ("launch", "launch add_one (queued, not waited for)",
             ["launch(k, 4, 256, buf, n32, stream=s)"],
             ["knl(q, (1024,), (256,), cbuf, n32)"],
             ["enqueue_nd_range_kernel(q, knl, (1024,), (256,))"]),
            ("launch_wait", "launch add_one and wait for it",
             ["launch(k, 4, 256, buf, n32, stream=s); s.synchronize()"],
             ["knl(q, (1024,), (256,), cbuf, n32); q.finish()"],
             ["enqueue_nd_range_kernel(q, knl, (1024,), (256,)); "
              "q.finish()"]),
        ],
    },
    "cuda": {
        "libs": ("accelerator", "cuda.core", "cuda.bindings"),
        "packages": bench_peers.PEER_PACKAGES,
        "probe": bench_peers.PEER_PROBE,
        "rows": [
            ("launch", "launch add_one (queued, not waited for)",
             ["launch(k, 4, 256, buf, n32, stream=s)"],
             ["claunch(cs, cfg, ck, cbuf, n32)"],
             ["cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, cs_h, kp_addr, 0)"]),
            ("launch_wait", "launch add_one and wait for it",
             ["launch(k, 4, 256, buf, n32, stream=s); s.synchronize()"],
             ["claunch(cs, cfg, ck, cbuf, n32); cs.sync()"],
             ["cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, cs_h, kp_addr, 0); "
              "cuStreamSynchronize(cs_h)"]),
        ],
    },
}


# The workers: every library in one process --------------------------------


def kernel_code() -> Any:
    sys.path.insert(0, str(REPO / "tests"))
    import kernel_code as code
    return code


def ours(code: bytes | str, missing: dict[str, str]) -> dict[str, Any]:
    """accelerator's names: add_one loaded, a buffer, a stream; where the
    backend cannot load it, only the stream, and why in missing."""
    import numpy as np
    import accelerator as A

    if not A.is_available():
        raise SystemExit("no accelerator: " + "; ".join(
            f"{b['name']}: {b['reason']}" for b in A.backends()))
    s = A.Stream()
    names = {"s": s, "n32": np.uint32(N), "device_name": A.get_device_name(0)}
    try:
        names.update(launch=A.launch, buf=A.Buffer(N * 4, stream=s),
                     k=A.Module(code).get_kernel("add_one"))
    except Exception as exc:  # a backend without kernels
        missing["accelerator"] = f"{type(exc).__name__}: {exc}"[:200]
    return names


def opencl_names() -> tuple[dict[str, Any], dict[str, str]]:
    source = kernel_code().OPENCL_C
    missing: dict[str, str] = {}
    names = ours(source, missing)
    try:
        import pyopencl as cl

        names["version"] = cl.VERSION_TEXT
        device = next(d for p in cl.get_platforms() for d in p.get_devices()
                      if d.name == names["device_name"])
        ctx = cl.Context([device])
        q = cl.CommandQueue(ctx)
        knl = cl.Kernel(cl.Program(ctx, source).build(), "add_one")
        cbuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, N * 4)
        knl.set_args(cbuf, names["n32"])
        names.update(q=q, knl=knl, cbuf=cbuf,
                     enqueue_nd_range_kernel=cl.enqueue_nd_range_kernel)
    except Exception as exc:  # no pyopencl, or not the same device
        missing["pyopencl"] = f"{type(exc).__name__}: {exc}"
    return names, missing


def cuda_code(double: bool) -> tuple[bytes, str]:
    """add_one for the CUDA driver, and its format: the double's native
    object, or what accelerator's NVRTC compile makes of the CUDA C++ for
    the device (a cubin for its SM, else PTX; the compile cache's)."""
    if double:
        return kernel_code().native(), "native"
    import accelerator
    from accelerator import _source

    accelerator.is_available()   # the probe, which Module() makes first
    code, fmt, _names = _source.build(kernel_code().CUDA_C.encode(),
                                      "cuda-c++", None, None, 0)
    return code, fmt


def cuda_names(double: bool) -> tuple[dict[str, Any], dict[str, str]]:
    import ctypes

    binary, fmt = cuda_code(double)
    missing: dict[str, str] = {}
    names = ours(binary, missing)
    try:
        import cuda.bindings.driver as drv

        err, device = drv.cuDeviceGet(0)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        err, ctx = drv.cuDevicePrimaryCtxRetain(device)   # ours, too
        assert err == drv.CUresult.CUDA_SUCCESS, err
        err, = drv.cuCtxSetCurrent(ctx)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        err, module = drv.cuModuleLoadData(binary)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        err, f = drv.cuModuleGetFunction(module, b"add_one")
        assert err == drv.CUresult.CUDA_SUCCESS, err
        err, stream = drv.cuStreamCreateWithPriority(1, 0)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        err, raw = drv.cuMemAlloc(N * 4)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        values = (ctypes.c_uint64(int(raw)), ctypes.c_uint32(N))
        kp = (ctypes.c_void_p * 2)(*(ctypes.addressof(v) for v in values))
        # The timed calls return their error without raising: one checked
        # launch first, so that a refused launch is not timed as one.
        err, = drv.cuLaunchKernel(f, GRID, 1, 1, BLOCK, 1, 1, 0, stream,
                                  ctypes.addressof(kp), 0)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        err, = drv.cuStreamSynchronize(stream)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        names.update(cuLaunchKernel=drv.cuLaunchKernel,
                     cuStreamSynchronize=drv.cuStreamSynchronize, f=f,
                     cs_h=stream, kp_addr=ctypes.addressof(kp), _keep=(
                         values, kp, module))
    except Exception as exc:
        missing["cuda.bindings"] = f"{type(exc).__name__}: {exc}"[:200]
    try:
        import cuda.core
        from cuda.core import Device, Kernel, LaunchConfig, ObjectCode, launch

        names["version"] = cuda.core.__version__
        dev = Device(0)
        dev.set_current()
        cs = dev.create_stream()
        names.update(claunch=launch, cs=cs,
                     cfg=LaunchConfig(grid=GRID, block=BLOCK),
                     cbuf=dev.allocate(N * 4, stream=cs))
        obj = (ObjectCode.from_ptx(binary) if fmt == "ptx"
               else ObjectCode.from_cubin(binary))
        try:
            names["ck"] = obj.get_kernel("add_one")
        except Exception as exc:
            # cuda.core loads through cuLibraryLoadData, which the double
            # lacks: take the function cuda.bindings loaded instead, so
            # that cuda.core's launch path is what is tried.
            if "f" not in names:
                raise
            names["ck"] = Kernel.from_handle(int(names["f"]))
            names["notes"] = [
                "cuda.core's kernel is the function cuda.bindings loaded "
                "(Kernel.from_handle): its own loading failed: "
                f"{type(exc).__name__}: {exc}"[:200]]
    except Exception as exc:  # the double may lack what cuda.core needs
        missing["cuda.core"] = f"{type(exc).__name__}: {exc}"[:200]
    return names, missing


def run_worker(platform: str, double: bool, target: float, repeats: int
               ) -> dict[str, Any]:
    spec = PLATFORMS[platform]
    names, missing = (opencl_names() if platform == "opencl"
                      else cuda_names(double))
    settle = "s.synchronize()" + ("; q.finish()" if "q" in names else "") + (
        "; cs.sync()" if "cs" in names else "")
    rows = bench_peers.time_rows(
        names, [(key, cells) for key, _label, *cells in spec["rows"]],
        spec["libs"], settle, target, repeats)
    return {"rows": rows, "missing": missing,
            "device": names["device_name"], "notes": names.get("notes", []),
            "versions": {"peer": names.get("version", "?"),
                         "python": sys.version.split()[0]}}


# The orchestrator -----------------------------------------------------------


def worker_env(platform: str, double: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if platform == "cuda":
        env["ACCELERATOR_BACKEND"] = "cuda"
        if double:
            env.update(FAKE_CUDA_DEVICES="1",
                       ACCELERATOR_CUDA_LIBRARY=str(DOUBLES / "libcuda.so.1"))
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                filter(None, [str(DOUBLES), env.get("LD_LIBRARY_PATH")]))
    else:
        # PoCL's CPU device, once, through the system loader.
        env.pop("ACCELERATOR_OPENCL_LIBRARY", None)
        env.update(ACCELERATOR_BACKEND="opencl", POCL_DEVICES="pthread",
                   ACCELERATOR_OPENCL_DEVICE_TYPE="all")
    return env


def render(platform: str, result: dict[str, Any]) -> str:
    libs = PLATFORMS[platform]["libs"]
    headers = ["row", *(f"{lib} ns" for lib in libs),
               *(f"ours/{lib}" for lib in libs[1:])]
    lines, notes = [], []
    for key, label, *_ in PLATFORMS[platform]["rows"]:
        row = result["rows"][key]
        ns = row.get("ns", {})
        lines.append([label, *(fmt(ns.get(lib)) for lib in libs),
                      *(fmt(row.get(f"ratio_{lib}"), 2, "x")
                        for lib in libs[1:])])
        notes += [f"- {label}, {lib}: {why}"
                  for lib, why in row["why"].items()
                  if not lib.startswith(tuple(result["missing"]))]
    notes += [f"- {lib}: {why}" for lib, why in result["missing"].items()]
    notes += [f"- {note}" for note in result["notes"]]
    text = markdown_table(headers, lines)
    if notes:
        text += "\n\nNot measured (the statement tried, and why):\n" + \
            "\n".join(notes)
    return text


def run_platform(platform: str, args: argparse.Namespace, target: float,
                 repeats: int) -> tuple[str, dict[str, Any] | None]:
    """The platform's table (or why it was skipped) and its data."""
    spec = PLATFORMS[platform]
    if platform == "cuda" and args.double and not (
            DOUBLES / "libcuda.so.1").exists():
        return ("skipped: the CUDA double is not built (make -C "
                "tests/drivers)"), None
    python, where = bench_peers.peer_python(
        args.venv, not args.no_install, spec["packages"], spec["probe"])
    if python is None:   # ours alone; the table says why the peer is not
        python, where = sys.executable, f"nowhere ({where})"
    cmd = [python, str(Path(__file__).resolve()), "--worker", platform,
           "--target-ms", str(target), "--repeats", str(repeats)]
    if args.double:
        cmd.append("--double")
    proc = subprocess.run(cmd, env=worker_env(platform, args.double),
                          capture_output=True, text=True, timeout=1800)
    for out_line in reversed(proc.stdout.splitlines()):
        if out_line.startswith(RESULT_TAG):
            result = json.loads(out_line[len(RESULT_TAG):])
            break
    else:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
        return "the worker failed:\n  " + "\n  ".join(tail), None
    driver = ("the CUDA driver double" if platform == "cuda" and args.double
              else "the real driver")
    head = (f"{platform}: add_one on {result['device']} ({driver}), "
            f"{GRID} blocks of {BLOCK}; {' vs '.join(spec['libs'][:2])} "
            f"{result['versions']['peer']} from {where}; Python "
            f"{result['versions']['python']}, {os.cpu_count()} CPUs; ns "
            f"per call net of the empty loop, medians of {repeats} "
            f"repeats; ratios: medians of per-repeat ratios")
    return head + "\n\n" + render(platform, result), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(PLATFORMS),
                        help="one platform (default: both)")
    args, target, repeats = bench_peers.parse_options(
        parser, "pyopencl or cuda.core", choices=sorted(PLATFORMS))
    if args.worker:
        print(RESULT_TAG + json.dumps(run_worker(
            args.worker, args.double, target / 1e3, repeats)))
        return 0
    texts, data, failed = [], {}, False
    for platform in [args.only] if args.only else list(PLATFORMS):
        text, result = run_platform(platform, args, target, repeats)
        failed |= text.startswith("the worker failed")
        texts.append(text)
        data[platform] = result
    text = "\n\n".join(texts)
    bench_peers.show(args, text, data)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
