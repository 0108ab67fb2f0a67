"""The other process of the sharing tests (test_ipc.py).

Run as ``python ipc_peer.py``: it reads one JSON command per line on stdin
and answers each with one JSON line on stdout ({"ok": ...} or
{"error": "<type>: <message>"}), in the backend the parent's environment
selects.  It keeps what it opens or makes by name.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
from typing import Any

import accelerator

objects: dict[str, Any] = {}


def read(name: str) -> str:
    buf = objects[name]
    host = bytearray(buf.nbytes)
    buf.copy_to(host)
    return host.hex()


def command(c: dict[str, Any]) -> Any:
    op = c["op"]
    if op == "open":
        objects[c["name"]] = accelerator.Buffer.from_ipc_handle(
            bytes.fromhex(c["handle"]), fd=c.get("fd"))
        return objects[c["name"]].nbytes
    if op == "unpickle":
        # A Buffer or Event pickled into a file by the other process.
        with open(c["path"], "rb") as f:
            objects[c["name"]] = pickle.load(f)
        return True
    if op == "open_event":
        objects[c["name"]] = accelerator.Event.from_ipc_handle(
            bytes.fromhex(c["handle"]))
        return True
    if op == "query_event":
        objects[c["name"]].synchronize()
        return objects[c["name"]].query()
    if op == "read":
        return read(c["name"])
    if op == "fill":
        buf = objects[c["name"]]
        buf.fill(c["value"])
        buf.stream.synchronize()
        return True
    if op == "make":
        buf = accelerator.Buffer(c["nbytes"])
        buf.fill(c["value"])
        buf.stream.synchronize()
        objects[c["name"]] = buf
        return buf.ipc_handle().data.hex()
    if op == "driver_fd":
        # The descriptor the driver's handle rests on, or None.
        return objects[c["name"]].ipc_handle().fd
    if op == "make_event":
        e = accelerator.Event(interprocess=True)
        e.record()
        objects[c["name"]] = e
        return e.ipc_handle().data.hex()
    if op == "close":
        objects.pop(c["name"]).close()
        return True
    if op == "drop":
        del objects[c["name"]]
        return True
    if op == "round":
        # The consumer's half of a ping-pong round: wait for the
        # producer's event on this process's stream, check its value,
        # answer with value + 1 and our own event.
        buf, theirs, ours = (objects[c[k]] for k in ("buf", "a", "b"))
        stream = accelerator.current_stream()
        stream.wait_event(theirs)
        host = bytearray(buf.nbytes)
        buf.copy_to(host)
        if host != bytes([c["value"]]) * buf.nbytes:
            raise AssertionError(f"round {c['value']}: read {host[:8].hex()}")
        buf.fill((c["value"] + 1) % 256)
        ours.record(stream)
        return True
    if op == "handles":
        # n more handles of a named Buffer (or of its [start:stop] view).
        buf = objects[c["name"]]
        if "stop" in c:
            buf = buf[c.get("start", 0):c["stop"]]
        return [buf.ipc_handle().data.hex() for _ in range(c["n"])]
    if op == "event_handles":
        e = objects[c["name"]]
        return [e.ipc_handle().data.hex() for _ in range(c["n"])]
    if op == "collect":
        # This process's work done first: its closes then settle here.
        accelerator.synchronize()
        accelerator.ipc_collect()
        return accelerator._accelerator._ipc_held()
    if op == "fill_close":
        # Queue a fill and close at once: the memory goes once the fill
        # has completed, noticed at this process's next call.
        buf = objects.pop(c["name"])
        buf.fill(c["value"])
        buf.close()
        return True
    if op == "open_many":
        # Open every handle of a list (kept, as one list, by name).
        cls = (accelerator.Event if c.get("kind") == "event"
               else accelerator.Buffer)
        objects[c["name"]] = [cls.from_ipc_handle(bytes.fromhex(h))
                              for h in c["handles"]]
        return len(objects[c["name"]])
    if op == "delay":
        # Slow a driver function of this process's double (a test kills
        # the peer inside it).
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
        import fake_drivers
        fake_drivers.under_test()().delay(c["function"], c["ms"])
        return True
    if op == "record":
        e = objects[c["name"]]
        e.record()
        e.synchronize()
        return e.query()
    if op == "fds":
        return len(os.listdir("/proc/self/fd"))
    if op == "held":
        return accelerator._accelerator._ipc_held()
    if op == "allocated":
        return accelerator.memory_allocated()
    if op == "exit":
        objects.clear()
        return True
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    for line in sys.stdin:
        c = json.loads(line)
        try:
            answer = {"ok": command(c)}
        except Exception as exc:  # every failure goes back to the test
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if c["op"] == "exit":
            break


if __name__ == "__main__":
    main()
