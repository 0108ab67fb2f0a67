"""Round trip of a small buffer between two processes, as a ratio.

A round: the producer writes a value into the shared bytes and tells the
consumer (a byte on a pipe); the consumer checks the value, writes the
next and tells the producer, who checks it.  Timed two ways in the same
run, alternating, each over the same pipes:

  host     the bytes are host shared memory (an mmap of a memfd);
  device   the bytes are a Buffer shared with Buffer.ipc_handle(),
           ordered by two Event(interprocess=True) (fill, record; the
           other side waits on the event on its stream, copies to host,
           checks, fills, records).

The ratio device/host is what sharing device memory costs per round over
the cheapest way two processes can share bytes.  On the CUDA double by
default (no GPU needed); --real: the backend the environment selects.

    make -C tests/drivers && python setup.py build_ext --inplace
    python bench/bench_ipc.py             # --rounds N --repeats K --json F
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
NBYTES = 64


def child(mode: str, rfd: int, wfd: int, arg: str) -> None:
    """The consumer: answer every round until the pipe closes."""
    r, w = os.fdopen(rfd, "rb", 0), os.fdopen(wfd, "wb", 0)
    if mode == "host":
        fd = int(arg)
        mem = mmap.mmap(fd, NBYTES)
        while (b := r.read(1)):
            assert mem[0] == b[0]
            mem[:] = bytes([(b[0] + 1) % 256]) * NBYTES
            w.write(b)
        return
    import accelerator
    handles = json.loads(arg)
    buf = accelerator.Buffer.from_ipc_handle(bytes.fromhex(handles["buf"]))
    theirs = accelerator.Event.from_ipc_handle(bytes.fromhex(handles["a"]))
    ours = accelerator.Event.from_ipc_handle(bytes.fromhex(handles["b"]))
    stream = accelerator.current_stream()
    host = bytearray(NBYTES)
    while (b := r.read(1)):
        stream.wait_event(theirs)
        buf.copy_to(host)
        assert host[0] == b[0]
        buf.fill((b[0] + 1) % 256)
        ours.record(stream)
        w.write(b)


def spawn(mode: str, arg: str, keep: tuple[int, ...] = ()):
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, str(to_child_r),
         str(from_child_w), arg],
        pass_fds=(to_child_r, from_child_w, *keep),
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(to_child_r)
    os.close(from_child_w)
    return proc, os.fdopen(to_child_w, "wb", 0), os.fdopen(from_child_r,
                                                          "rb", 0)


def time_host(rounds: int, repeats: int) -> list[float]:
    fd = os.memfd_create("bench-ipc")
    os.ftruncate(fd, NBYTES)
    mem = mmap.mmap(fd, NBYTES)
    proc, w, r = spawn("host", str(fd), keep=(fd,))
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for i in range(rounds):
            v = (2 * i) % 256
            mem[:] = bytes([v]) * NBYTES
            w.write(bytes([v]))
            r.read(1)
            assert mem[0] == (v + 1) % 256
        out.append((time.perf_counter() - t) / rounds)
    w.close()
    proc.wait(60)
    return out


def time_device(rounds: int, repeats: int) -> list[float]:
    import accelerator
    buf = accelerator.Buffer(NBYTES)
    a = accelerator.Event(interprocess=True)
    b = accelerator.Event(interprocess=True)
    a.record()
    b.record()
    handles = {"buf": buf.ipc_handle().data.hex(),
               "a": a.ipc_handle().data.hex(), "b": b.ipc_handle().data.hex()}
    proc, w, r = spawn("device", json.dumps(handles))
    stream = accelerator.current_stream()
    host = bytearray(NBYTES)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for i in range(rounds):
            v = (2 * i) % 256
            buf.fill(v)
            a.record(stream)
            w.write(bytes([v]))
            r.read(1)
            stream.wait_event(b)
            buf.copy_to(host)
            assert host[0] == (v + 1) % 256
        out.append((time.perf_counter() - t) / rounds)
    w.close()
    proc.wait(60)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=500)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--real", action="store_true",
                   help="the backend the environment selects, not the "
                        "CUDA double")
    p.add_argument("--json", type=pathlib.Path)
    args = p.parse_args()
    if not args.real:
        os.environ.update({
            "ACCELERATOR_BACKEND": "cuda", "FAKE_CUDA_DEVICES": "1",
            "ACCELERATOR_CUDA_LIBRARY":
                str(ROOT / "tests/drivers/build/libcuda.so.1")})
    sys.path.insert(0, str(ROOT))
    host, device = [], []
    for _ in range(args.repeats):     # alternate: the machine is noisy
        host += time_host(args.rounds, 1)
        device += time_device(args.rounds, 1)
    ratios = [d / h for d, h in zip(device, host)]
    import accelerator
    result = {
        "backend": str(accelerator.current_accelerator()),
        "double": not args.real, "rounds": args.rounds,
        "host_us": statistics.median(host) * 1e6,
        "device_us": statistics.median(device) * 1e6,
        "ratio": statistics.median(ratios),
    }
    print(f"round trip of {NBYTES} bytes between two processes on "
          f"{result['backend']}{' (double)' if result['double'] else ''}: "
          f"host shared memory {result['host_us']:.1f} us, shared Buffer "
          f"with events {result['device_us']:.1f} us, ratio "
          f"{result['ratio']:.2f}x (median of {args.repeats})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
