"""Device memory and events shared with other processes, with real processes.

The other process is tests/behaviour/ipc_peer.py, driven over its stdin
and stdout, in the backend under test (the doubles keep device memory and
events in shared memory, so that a process maps another's by handle).
Backends that cannot share (facts.lacks["ipc"]) are checked to refuse
with their reason.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import pickle
import signal
import struct
import subprocess
import sys
import time
from typing import Any

import pytest

import accelerator

SRC = pathlib.Path(__file__).resolve().parents[2]
PEER = pathlib.Path(__file__).with_name("ipc_peer.py")


@pytest.fixture
def shares(facts) -> None:
    """The backend under test shares memory and events (else skip)."""
    if not facts.has("ipc"):
        pytest.skip(facts.lacks["ipc"])


class PeerError(Exception):
    pass


class Peer:
    """The other process: call(op, **args) -> its answer."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        self.proc = subprocess.Popen(
            [sys.executable, str(PEER)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env, text=True, bufsize=1)

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        line = self.proc.stdout.readline()
        assert line, f"the peer died (rc {self.proc.wait(30)})"
        answer = json.loads(line)
        if "error" in answer:
            raise PeerError(answer["error"])
        return answer["ok"]

    def exit(self) -> None:
        if self.proc.poll() is None:
            self.call("exit")
        self._close()
        assert self.proc.wait(60) == 0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._close()

    def _close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture
def peer() -> Any:
    p = Peer()
    yield p
    if p.proc.poll() is None:
        p.kill()
    p._close()


@pytest.fixture(scope="module", autouse=True)
def nothing_held_after_the_module() -> Any:
    """The module leaves nothing shared behind: what its consumers let go
    is freed before the next module counts allocations."""
    yield
    assert wait_until(lambda: held() == {"blocks": 0, "bytes": 0,
                                         "events": 0, "imports": 0}), held()


def host_of(buf: accelerator.Buffer) -> bytes:
    out = bytearray(buf.nbytes)
    buf.copy_to(out)
    return bytes(out)


def filled(nbytes: int, value: int) -> accelerator.Buffer:
    buf = accelerator.Buffer(nbytes)
    buf.fill(value)
    buf.stream.synchronize()
    return buf


def held() -> dict[str, int]:
    return accelerator._accelerator._ipc_held()


@pytest.fixture(autouse=True)
def _nothing_left_held() -> Any:
    """Every handle a test makes here is opened (or refused) by another
    process, so that nothing stays in this process's limbo for the tests
    that follow (shared memory counts as allocated while held)."""
    yield
    settled = wait_until(lambda: held() == {"blocks": 0, "bytes": 0,
                                            "events": 0, "imports": 0})
    assert settled, held()


@pytest.fixture
def limbo() -> Any:
    """held()["blocks"] now, less what earlier tests left (a handle never
    opened holds its memory while this process lives)."""
    accelerator.ipc_collect()
    base = held()["blocks"]
    return lambda: held()["blocks"] - base


def wait_until(predicate, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        accelerator.ipc_collect()
        if predicate():
            return True
        time.sleep(0.01)
    return False


# The envelope, as ipc.c lays it out: tests forge handles from other
# boots, backends and devices (the checksum is FNV-1a of the bytes before
# it).
ENVELOPE = struct.Struct("=8sII16s16s16siiQQQQQiIQQQ64sQ")


def forged(data: bytes, **changes: Any) -> bytes:
    fields = list(ENVELOPE.unpack(data))
    names = ("magic", "version", "kind", "backend", "boot", "uuid", "pid",
             "driver_fd", "start", "base", "alloc_size", "offset", "nbytes",
             "lease_fd", "slot", "lease_inode", "generation", "serial",
             "driver", "checksum")
    for name, value in changes.items():
        fields[names.index(name)] = value
    body = ENVELOPE.pack(*fields)[:-8]
    h = 1469598103934665603
    for byte in body:
        h = ((h ^ byte) * 1099511628211) & (2 ** 64 - 1)
    return body + struct.pack("=Q", h)


# Refusal --------------------------------------------------------------------

def test_a_backend_that_cannot_share_says_why(facts) -> None:
    if facts.has("ipc"):
        pytest.skip("this backend shares memory")
    buf = filled(64, 1)
    with pytest.raises(NotImplementedError) as info:
        buf.ipc_handle()
    assert facts.lacks["ipc"] in str(info.value)
    with pytest.raises(NotImplementedError):
        pickle.dumps(buf)
    e = accelerator.Event(interprocess=True)
    e.record()
    with pytest.raises(NotImplementedError):
        e.ipc_handle()


def test_interprocess_events_take_no_timing() -> None:
    with pytest.raises(ValueError, match="cannot measure time"):
        accelerator.Event(interprocess=True, enable_timing=True)
    with pytest.raises(TypeError, match="interprocess=True"):
        pickle.dumps(accelerator.Event())


# One buffer, both ways ----------------------------------------------------------

def test_a_consumer_reads_and_writes_the_producers_memory(shares,
                                                        peer) -> None:
    buf = filled(4096, 0x5A)
    handle = buf.ipc_handle()
    assert isinstance(handle, accelerator.IpcHandle)
    assert handle.kind == "memory" and handle.nbytes == 4096
    assert handle.pid == os.getpid()
    assert handle.backend == accelerator.current_accelerator().type
    assert handle.allocation_size >= handle.offset + 4096
    assert peer.call("open", name="b", handle=handle.data.hex()) == 4096
    assert peer.call("read", name="b") == "5a" * 4096
    peer.call("fill", name="b", value=0xC3)
    assert host_of(buf) == b"\xc3" * 4096
    peer.exit()


def test_a_view_shares_its_bytes_only(shares, peer) -> None:
    buf = accelerator.Buffer(1024)
    buf.fill(1)
    buf[256:512].fill(2)
    buf.stream.synchronize()
    handle = buf[256:512].ipc_handle()
    assert handle.nbytes == 256
    peer.call("open", name="v", handle=handle.data.hex())
    assert peer.call("read", name="v") == "02" * 256
    peer.exit()


def test_the_memory_outlives_the_producers_buffer(shares, peer,
                                                 limbo) -> None:
    """Dropped by the producer while a consumer has it open: kept (still
    allocated here) until the consumer lets go."""
    buf = filled(2048, 7)
    allocated = accelerator.memory_allocated()
    peer.call("open", name="b", handle=buf.ipc_handle().data.hex())
    del buf
    accelerator.ipc_collect()
    assert limbo() == 1
    assert accelerator.memory_allocated() == allocated
    # No reuse: a new Buffer gets other memory, and the consumer reads
    # what was there.
    other = filled(2048, 9)
    assert peer.call("read", name="b") == "07" * 2048
    peer.call("close", name="b")
    peer.call("collect")          # its next call notices the close
    assert wait_until(lambda: limbo() == 0)
    assert accelerator.memory_allocated() == allocated
    other.close()
    peer.exit()


def test_a_consumer_killed_with_sigkill_lets_the_memory_go(shares, peer,
                                                          limbo) -> None:
    buf = filled(4096, 3)
    peer.call("open", name="b", handle=buf.ipc_handle().data.hex())
    buf.close()
    accelerator.ipc_collect()
    assert limbo() == 1
    peer.kill()
    # The kernel drops the dead consumer's lease at once; the next
    # collect frees the memory.
    assert wait_until(lambda: limbo() == 0, seconds=2.0)


def test_a_handle_never_opened_holds_the_memory_while_the_producer_lives(
        shares, peer) -> None:
    peer.call("make", name="b", nbytes=512, value=1)
    peer.call("drop", name="b")
    assert peer.call("held")["blocks"] == 1
    peer.exit()


def test_the_producer_exiting_first(shares, peer) -> None:
    """The consumer's mapping stays readable here (the doubles' shared
    memory lives while mapped; a real driver may not keep it: see
    docs/processes.rst), closing it is clean, and a handle of the exited
    producer is refused."""
    data = bytes.fromhex(peer.call("make", name="p", nbytes=1024, value=0x42))
    late = bytes.fromhex(peer.call("make", name="q", nbytes=64, value=1))
    mine = accelerator.Buffer.from_ipc_handle(data)
    peer.exit()
    assert host_of(mine) == b"\x42" * 1024
    mine.close()
    with pytest.raises(RuntimeError, match="has exited"):
        accelerator.Buffer.from_ipc_handle(late)
    assert wait_until(lambda: held()["imports"] == 0)


def test_eight_consumers_of_one_buffer(shares, limbo) -> None:
    buf = filled(8 * 512, 0)
    peers = [Peer() for _ in range(8)]
    try:
        for i, p in enumerate(peers):
            p.call("open", name="all", handle=buf.ipc_handle().data.hex())
            p.call("open", name="mine",
                   handle=buf[i * 512:(i + 1) * 512].ipc_handle().data.hex())
        for i, p in enumerate(peers):
            p.call("fill", name="mine", value=i + 1)
        expected = b"".join(bytes([i + 1]) * 512 for i in range(8))
        assert host_of(buf) == expected
        for p in peers:
            assert bytes.fromhex(p.call("read", name="all")) == expected
        buf.close()
        for p in peers[:7]:
            p.exit()
        accelerator.ipc_collect()
        assert limbo() == 1      # the last consumer holds it (views too)
        peers[7].exit()
        assert wait_until(lambda: limbo() == 0)
    finally:
        for p in peers:
            if p.proc.poll() is None:
                p.kill()


# Events ---------------------------------------------------------------------

def test_a_thousand_rounds_of_ping_pong(shares, peer, driver) -> None:
    """Each side waits for the other's event on its own stream before it
    reads, checks the value and writes the next: work ordered by an event
    in one process is ordered in the other.  Nothing leaks."""
    if not driver.has("ipc_rerecord_across_processes"):
        pytest.skip(driver.lacks["ipc_rerecord_across_processes"])
    buf = filled(256, 0)
    a = accelerator.Event(interprocess=True)
    b = accelerator.Event(interprocess=True)
    a.record()
    b.record()
    peer.call("open", name="buf", handle=buf.ipc_handle().data.hex())
    peer.call("open_event", name="a", handle=a.ipc_handle().data.hex())
    peer.call("open_event", name="b", handle=b.ipc_handle().data.hex())
    stream = accelerator.current_stream()

    def rounds(first: int, last: int) -> None:
        for i in range(first, last):
            value = (2 * i) % 256
            buf.fill(value)
            a.record(stream)
            peer.call("round", buf="buf", a="a", b="b", value=value)
            stream.wait_event(b)
            got = host_of(buf)
            assert got == bytes([(value + 1) % 256]) * 256, (i, got[:4])

    # The steady state after a hundred rounds (streams, and Level Zero's
    # event slots, made on first use and as many as were in flight at
    # once) holds for the rest: nothing grows with the rounds.
    rounds(0, 100)
    accelerator.synchronize()
    accelerator.empty_cache()
    fds = len(os.listdir("/proc/self/fd"))
    peer_fds = peer.call("fds")
    live = driver.live_all()
    rounds(100, 1000)
    accelerator.synchronize()
    accelerator.empty_cache()
    assert len(os.listdir("/proc/self/fd")) == fds
    assert peer.call("fds") == peer_fds
    after = driver.live_all()
    for kind, count in live.items():
        if kind in driver.pooled_kinds:
            # Kept for reuse (as many as were in flight at once), but not
            # one per round.
            assert after[kind] - count <= 4, (kind, count, after[kind])
        else:
            assert after[kind] == count, (kind, count, after[kind])
    peer.exit()


def test_an_event_opened_elsewhere_orders_work_here(shares, peer) -> None:
    mine = accelerator.Event(interprocess=True)
    with pytest.raises(RuntimeError, match="record the event"):
        mine.ipc_handle()
    data = bytes.fromhex(peer.call("make_event", name="e"))
    theirs = accelerator.Event.from_ipc_handle(data)
    theirs.synchronize()              # the peer's record has run
    assert theirs.query()
    accelerator.current_stream().wait_event(theirs)
    with pytest.raises(ValueError, match="another process"):
        theirs.ipc_handle()
    del theirs
    peer.exit()


# Channels -------------------------------------------------------------------

def _consumer(queue: Any, answers: Any) -> None:
    buf = queue.get()
    event = queue.get()
    event.synchronize()
    answers.put(host_of(buf))
    buf.fill(0x77)
    buf.stream.synchronize()
    answers.put("done")


def test_through_a_multiprocessing_queue(shares) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue, answers = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_consumer, args=(queue, answers))
    child.start()
    try:
        buf = filled(1024, 0x31)
        event = accelerator.Event(interprocess=True)
        event.record()
        queue.put(buf)
        queue.put(event)
        assert answers.get(timeout=60) == b"\x31" * 1024
        assert answers.get(timeout=60) == "done"
        assert host_of(buf) == b"\x77" * 1024
    finally:
        child.join(60)
        if child.exitcode is None:
            child.kill()
    assert child.exitcode == 0


def test_through_a_pipe_and_a_file(shares, peer, tmp_path) -> None:
    buf = filled(128, 0x11)
    read_end, write_end = os.pipe()
    os.write(write_end, buf.ipc_handle().data)
    os.close(write_end)
    through_pipe = os.read(read_end, 4096)
    os.close(read_end)
    path = tmp_path / "handle"
    path.write_bytes(pickle.dumps(buf[0:64]))
    peer.call("open", name="p", handle=through_pipe.hex())
    assert peer.call("read", name="p") == "11" * 128
    # A pickle is a handle too.
    peer.call("unpickle", name="f", path=str(path))
    peer.call("fill", name="f", value=0x22)
    assert host_of(buf) == b"\x22" * 64 + b"\x11" * 64
    peer.exit()


# Bad handles ----------------------------------------------------------------

def test_bad_handles_are_refused_with_the_reason(shares, peer) -> None:
    buf = filled(256, 1)
    good = buf.ipc_handle().data
    Buffer = accelerator.Buffer
    with pytest.raises(ValueError, match="216"):
        Buffer.from_ipc_handle(b"garbage")
    with pytest.raises(ValueError, match="mark"):
        Buffer.from_ipc_handle(bytes(216))
    with pytest.raises(ValueError, match="checksum"):
        Buffer.from_ipc_handle(good[:100] + bytes([good[100] ^ 1])
                               + good[101:])
    with pytest.raises(TypeError, match="IpcHandle"):
        Buffer.from_ipc_handle(42)
    with pytest.raises(TypeError, match="fd"):
        Buffer.from_ipc_handle(good, fd="3")
    with pytest.raises(ValueError, match="fd"):
        Buffer.from_ipc_handle(good, fd=-1)
    with pytest.raises(ValueError, match="this very process"):
        Buffer.from_ipc_handle(good)
    with pytest.raises(ValueError, match="Event.from_ipc_handle"):
        Buffer.from_ipc_handle(
            bytes.fromhex(peer.call("make_event", name="e")))
    # As another process sees them:
    for changes, error in (
            ({"boot": bytes(16)}, "another machine"),
            ({"backend": b"nosuch"}, "backend nosuch"),
            ({"uuid": b"\xee" * 16}, "UUID"),
            ({"start": 1}, "has exited"),
            ({"version": 99}, "version 99"),
            ({"offset": 1 << 40}, "outside its allocation")):
        with pytest.raises(PeerError, match=error):
            peer.call("open", name="x", handle=forged(good, **changes).hex())
    peer.call("open", name="ok", handle=good.hex())
    with pytest.raises(PeerError, match="open in this process already"):
        peer.call("open", name="again", handle=good.hex())
    # The failed opens spent nothing and left nothing open.
    assert peer.call("held")["imports"] == 1
    # Closed, the handle opens again (the producer still holds it).
    peer.call("close", name="ok")
    peer.call("open", name="again", handle=good.hex())
    peer.exit()


def test_a_handle_of_released_memory_is_refused(shares, peer,
                                               limbo) -> None:
    buf = filled(256, 1)
    data = buf.ipc_handle().data
    peer.call("open", name="b", handle=data.hex())
    peer.call("close", name="b")
    buf.close()
    assert wait_until(lambda: limbo() == 0)
    again = forged(data, serial=10 ** 9)
    with pytest.raises(PeerError, match="released"):
        peer.call("open", name="b2", handle=again.hex())
    peer.exit()


def test_statistics_on_both_sides(shares, peer) -> None:
    """The producer counts shared memory as allocated until no process
    holds it; the consumer does not count what it opened."""
    before = peer.call("allocated")
    buf = filled(1 << 20, 5)
    peer.call("open", name="b", handle=buf.ipc_handle().data.hex())
    assert peer.call("allocated") == before
    peer.exit()


def test_the_example_runs(shares) -> None:
    example = SRC / "examples" / "share_between_processes.py"
    result = subprocess.run([sys.executable, str(example)],
                            env={**os.environ, "PYTHONPATH": str(SRC)},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "10 rounds between two processes" in result.stdout


def test_another_librarys_driver_handle_opens(shares, peer) -> None:
    """The driver's own 64-byte handle (what torch and CuPy share) opens
    with from_driver_ipc_handle(), checked against the allocation's range
    by the driver; ours is IpcHandle.driver_handle."""
    data = bytes.fromhex(peer.call("make", name="p", nbytes=4096, value=0x2B))
    handle = accelerator.IpcHandle(data)
    raw, offset = handle.driver_handle, handle.offset
    assert len(raw) == 64
    # Where the driver's handle rests on a descriptor, this process needs
    # its own copy of it (here through /proc, as the same user).
    theirs = peer.call("driver_fd", name="p")
    fd = (os.open(f"/proc/{handle.pid}/fd/{theirs}", os.O_RDWR)
          if theirs is not None else None)
    try:
        buf = accelerator.Buffer.from_driver_ipc_handle(raw, 4096, offset,
                                                        fd=fd)
    finally:
        if fd is not None:
            os.close(fd)
    assert host_of(buf) == b"\x2b" * 4096
    with pytest.raises(ValueError, match="allocation"):
        accelerator.Buffer.from_driver_ipc_handle(
            raw, handle.allocation_size + 1, fd=fd)
    with pytest.raises(ValueError, match="64 bytes"):
        accelerator.Buffer.from_driver_ipc_handle(raw[:10], 16)
    with pytest.raises(TypeError, match="ints"):
        accelerator.Buffer.from_driver_ipc_handle(raw, "16")
    buf.close()
    assert wait_until(lambda: held()["imports"] == 0)
    peer.exit()


def test_the_arguments_are_checked(shares, peer) -> None:
    """Every argument of the sharing calls is refused with what was wrong,
    before anything is opened."""
    Buffer, Event = accelerator.Buffer, accelerator.Event
    data = bytes.fromhex(peer.call("make", name="p", nbytes=64, value=1))
    raw = accelerator.IpcHandle(data).driver_handle
    for call, cls, pattern in (
            (lambda: Buffer.from_ipc_handle(), TypeError, "handle"),
            (lambda: Buffer.from_ipc_handle(data, 3), TypeError,
             "positional"),
            (lambda: Buffer.from_ipc_handle(data, fd=True), TypeError,
             "fd must be a file descriptor"),
            (lambda: Buffer.from_ipc_handle(data, fd=1 << 40), ValueError,
             "fd must be an open file descriptor"),
            (lambda: Buffer.from_ipc_handle(data, fd=10 ** 30), ValueError,
             "fd must be an open file descriptor"),
            (lambda: Event.from_ipc_handle(data, blocking=1), TypeError,
             "blocking must be a bool"),
            (lambda: Event.from_ipc_handle(object()), TypeError,
             "IpcHandle or its bytes"),
            (lambda: Event.from_ipc_handle(data), ValueError,
             "Buffer.from_ipc_handle"),
            (lambda: Buffer.from_driver_ipc_handle(raw, -1), ValueError,
             "nbytes must be a size"),
            (lambda: Buffer.from_driver_ipc_handle(raw, 8, -1), ValueError,
             "offset must be a size"),
            (lambda: Buffer.from_driver_ipc_handle(raw, 0), ValueError,
             "nbytes must be positive"),
            (lambda: Buffer.from_driver_ipc_handle(raw, 8, 2 ** 64 - 4),
             ValueError, "fit in the address space"),
            (lambda: Buffer.from_driver_ipc_handle(raw, 8, device=99),
             accelerator.DeviceIndexError, "99"),
            (lambda: Buffer.from_driver_ipc_handle(raw, 8, fd=-3),
             ValueError, "fd must be"),
            (lambda: accelerator.IpcHandle("text"), TypeError,
             "data must be bytes"),
            (lambda: accelerator.IpcHandle(data, fd=-1), ValueError,
             "fd must be None"),
            (lambda: accelerator.IpcHandle(b"x" * 216).kind, ValueError,
             "mark or checksum"),
            (lambda: Buffer(64)[0:0].ipc_handle(), ValueError,
             "empty Buffer"),
    ):
        with pytest.raises(cls, match=pattern):
            call()
    # A closed Buffer, a wrapper of foreign memory, an unrecorded or
    # ordinary event:
    closed = Buffer(64)
    closed.close()
    with pytest.raises(ValueError):
        closed.ipc_handle()
    theirs = Buffer.from_ipc_handle(data)
    with pytest.raises(ValueError, match="only memory this module"):
        theirs.ipc_handle()
    with pytest.raises(ValueError, match="interprocess=True"):
        e = Event()
        e.record()
        e.ipc_handle()
    # An IpcHandle's face: equal by bytes, pickled without its descriptor.
    h = accelerator.IpcHandle(data, fd=5)
    assert h == accelerator.IpcHandle(data) and hash(h) == hash(data)
    assert bytes(h) == data
    assert pickle.loads(pickle.dumps(h)).fd is None
    assert "64 bytes" in repr(h) and "unreadable" in repr(
        accelerator.IpcHandle(b"\0"))
    theirs.close()
    peer.exit()


def test_an_interprocess_event_recorded_again_while_in_use(
        shares, peer, driver) -> None:
    """Recorded again while its last record is pending and streams wait on
    it, here and in another process: each wait sees the record it was
    called after, and the event is the same driver event throughout (the
    other process keeps it)."""
    s1, s2 = accelerator.Stream(), accelerator.Stream()
    e = accelerator.Event(interprocess=True)
    e.record(s1)
    peer.call("open_event", name="e", handle=e.ipc_handle().data.hex())
    buf = filled(64, 0)
    with driver.gate(s1):
        buf.fill(1, stream=s1)
        e.record(s1)
        s2.wait_event(e)
        buf.fill(2, stream=s1)
        e.record(s1)
        s2.wait_event(e)
        assert not e.query()
    s2.synchronize()
    assert e.query()
    assert host_of(buf) == b"\x02" * 64
    # The peer sees the latest record complete.
    assert peer.call("query_event", name="e") is True
    for _ in range(20):
        with driver.gate(s1):
            e.record(s1)
            s2.wait_event(e)
        s2.synchronize()
    assert e.query()
    peer.exit()
