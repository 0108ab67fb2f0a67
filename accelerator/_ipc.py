"""Device memory and events shared with other processes of this machine.

``Buffer.ipc_handle()`` and ``Event.ipc_handle()`` give an
:class:`IpcHandle`; another process opens it with
``Buffer.from_ipc_handle()`` or ``Event.from_ipc_handle()``.  Pickling a
Buffer or an ``Event(interprocess=True)`` shares it the same way, so both
travel through ``multiprocessing`` queues, pipes and process arguments.
See ``docs/processes.rst``.
"""
from __future__ import annotations

from typing import Any, Callable

from . import _accelerator


class IpcHandle:
    """A handle to device memory or an event that another process opens.

    ``data`` is the handle itself (216 bytes: the driver's own handle in
    an envelope naming the machine's boot, the backend, the device's UUID,
    the exporting process and its lease); send it by any channel.  ``fd``
    is the descriptor the driver's handle rests on in the exporting
    process (Level Zero), else None: the receiving process takes it from
    the exporter itself (``pidfd_getfd``), or is given it
    (``socket.send_fds``) and passes it as ``fd=``.
    """

    __slots__ = ("data", "fd")

    def __init__(self, data: bytes, fd: int | None = None) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"IpcHandle: data must be bytes, not {type(data).__name__}")
        if fd is not None and (not isinstance(fd, int) or isinstance(fd, bool)
                               or fd < 0):
            raise ValueError(f"IpcHandle: fd must be None or a file "
                             f"descriptor (a non-negative int), got {fd!r}")
        self.data = bytes(data)
        self.fd = fd

    def _fields(self) -> dict[str, Any]:
        return _accelerator._ipc_describe(self.data)

    @property
    def kind(self) -> str:
        """``"memory"`` or ``"event"``."""
        return self._fields()["kind"]

    @property
    def backend(self) -> str:
        """The device type of the exporting process's backend."""
        return self._fields()["backend"]

    @property
    def device_uuid(self) -> str:
        """The UUID of the device the memory or event lives on (hex)."""
        return self._fields()["device_uuid"]

    @property
    def pid(self) -> int:
        """The exporting process."""
        return self._fields()["pid"]

    @property
    def nbytes(self) -> int:
        """The bytes shared (0 for an event)."""
        return self._fields()["nbytes"]

    @property
    def offset(self) -> int:
        """Where the shared bytes start in the driver allocation."""
        return self._fields()["offset"]

    @property
    def allocation_size(self) -> int:
        """The size of the whole driver allocation the handle opens."""
        return self._fields()["allocation_size"]

    @property
    def driver_handle(self) -> bytes:
        """The driver's own 64-byte handle of the whole allocation (CUDA's
        ``CUipcMemHandle``, HIP's ``hipIpcMemHandle_t``, Level Zero's
        ``ze_ipc_mem_handle_t``; an event's for an event): what another
        library opens (``cuIpcOpenMemHandle``, CuPy's
        ``runtime.ipcOpenMemHandle``), adding ``offset``.  Opened that way,
        the memory has no lease: keep the Buffer alive meanwhile."""
        return self._fields()["driver_handle"]

    def __bytes__(self) -> bytes:
        return self.data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IpcHandle) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)

    def __reduce__(self) -> tuple[Callable[..., IpcHandle], tuple[bytes]]:
        # The descriptor number is the exporter's: it means nothing in
        # another process.
        return (IpcHandle, (self.data,))

    def __repr__(self) -> str:
        try:
            f = self._fields()
        except ValueError:
            return f"<IpcHandle of {len(self.data)} unreadable bytes>"
        what = ("event" if f["kind"] == "event"
                else f"{f['nbytes']} bytes at offset {f['offset']}")
        return (f"<IpcHandle {what} on {f['backend']} device "
                f"{f['device_uuid'][:8]} of pid {f['pid']}>")


def _before_share(buffer: Any) -> None:
    """What pickling a Buffer waits for: the work queued on its stream."""
    buffer.stream.synchronize()


def _reduction(name: str, data: bytes) -> tuple[Callable[..., Any],
                                                tuple[bytes]]:
    return (globals()[name], (data,))


def _rebuild_buffer(data: bytes) -> Any:
    return _accelerator.Buffer.from_ipc_handle(data)


def _rebuild_event(data: bytes) -> Any:
    return _accelerator.Event.from_ipc_handle(data)

