"""Device memory shared between accelerator and torch processes, both ways.

On a real NVIDIA GPU (bench/gpu_check.sh runs it), each in two processes:

  torch opens ours    an accelerator Buffer's IpcHandle.driver_handle is
                      opened in a torch process (cuIpcOpenMemHandle through
                      cuda.bindings, wrapped as a torch tensor by the CUDA
                      array interface), read and written there;
  ours opens torch's  a torch tensor's storage handle (_share_cuda_()) is
                      opened here with Buffer.from_driver_ipc_handle(),
                      read and written here, and checked in torch.

Prints one markdown line per direction; exit 1 when one failed, 0 when it
passed or torch is missing (the line says so).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

TORCH_CONSUMER = textwrap.dedent("""
    import json, sys
    import torch
    from cuda.bindings import driver
    torch.zeros(1, device="cuda")          # the primary context, current
    msg = json.loads(sys.stdin.readline())
    handle = driver.CUipcMemHandle()
    handle.reserved = bytes.fromhex(msg["handle"])
    err, base = driver.cuIpcOpenMemHandle(
        handle, driver.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    assert err == driver.CUresult.CUDA_SUCCESS, err

    class View:
        __cuda_array_interface__ = {
            "data": (int(base) + msg["offset"], False),
            "shape": (msg["nbytes"],), "typestr": "|u1", "version": 3}

    t = torch.as_tensor(View(), device="cuda")
    ok = bool((t == 0x5A).all())
    t.fill_(0x11)
    torch.cuda.synchronize()
    del t
    driver.cuIpcCloseMemHandle(base)
    print(json.dumps({"read": ok}), flush=True)
""")

TORCH_PRODUCER = textwrap.dedent("""
    import json, sys
    import torch
    t = torch.full((4096,), 0x2B, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    device, handle, size, offset, *rest = t.untyped_storage()._share_cuda_()
    print(json.dumps({"handle": bytes(handle).hex(), "offset": offset,
                      "nbytes": t.numel()}), flush=True)
    sys.stdin.readline()                   # the consumer wrote
    torch.cuda.synchronize()
    print(json.dumps({"seen": bool((t == 0x33).all())}), flush=True)
""")


def torch_opens_ours() -> str:
    import accelerator
    buf = accelerator.Buffer(4096)
    buf.fill(0x5A)
    buf.stream.synchronize()
    h = buf.ipc_handle()
    child = subprocess.run(
        [sys.executable, "-c", TORCH_CONSUMER], capture_output=True,
        text=True, timeout=120,
        input=json.dumps({"handle": h.driver_handle.hex(),
                          "offset": h.offset, "nbytes": h.nbytes}) + "\n")
    if child.returncode != 0:
        return f"FAILED (torch process: {child.stderr.strip()[-300:]})"
    read = json.loads(child.stdout.splitlines()[-1])["read"]
    out = bytearray(4096)
    buf.copy_to(out)
    written = out == b"\x11" * 4096
    return ("ok: torch read our bytes and wrote them back"
            if read and written else
            f"FAILED (torch read ours: {read}, we read torch's write: "
            f"{written})")


def ours_opens_torchs() -> str:
    import accelerator
    child = subprocess.Popen([sys.executable, "-c", TORCH_PRODUCER],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        msg = json.loads(child.stdout.readline())
        buf = accelerator.Buffer.from_driver_ipc_handle(
            bytes.fromhex(msg["handle"]), msg["nbytes"], msg["offset"])
        out = bytearray(buf.nbytes)
        buf.copy_to(out)
        read = out == b"\x2b" * buf.nbytes
        buf.fill(0x33)
        buf.stream.synchronize()
        child.stdin.write("\n")
        child.stdin.flush()
        seen = json.loads(child.stdout.readline())["seen"]
        buf.close()
    finally:
        child.stdin.close()
        child.wait(60)
    return ("ok: we read torch's bytes and torch saw our write"
            if read and seen else
            f"FAILED (we read torch's: {read}, torch saw ours: {seen})")


def main() -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("- IPC with torch: skipped (torch is not installed)")
        return 0
    status = 0
    for name, step in (("torch opens ours", torch_opens_ours),
                       ("ours opens torch's", ours_opens_torchs)):
        try:
            line = step()
        except Exception as exc:  # reported, not raised: the check goes on
            line = f"FAILED ({type(exc).__name__}: {exc})"
        status |= line.startswith("FAILED")
        print(f"- IPC with torch, {name}: {line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
