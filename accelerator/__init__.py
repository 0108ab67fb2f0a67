"""One device-agnostic runtime API over every GPU on the machine.

The API of ``torch.accelerator`` (is_available, current_accelerator,
device_count, current_device_index, set_device_index, current_stream,
set_stream, synchronize, device_index) with ``device``, ``Stream`` and
``Event`` objects, implemented in C over the CUDA Driver API (``cuda``),
the oneAPI Level Zero loader (``xpu``), the HIP runtime (``hip``) and
OpenCL (``opencl``).  PyTorch is not needed.

Importing the package calls no driver function; the first call that needs
a backend probes the drivers once.
"""
# No `from __future__ import annotations` and a private alias of warnings:
# dir(accelerator) shows the API only.
import os as _os
import warnings as _warnings

from . import _accelerator
from ._accelerator import (
    MAX_DEVICES,
    AcceleratorError,
    Buffer,
    BuildError,
    DeviceIndexError,
    DeviceProperties,
    Event,
    Graph,
    HostBuffer,
    Kernel,
    Module,
    OutOfMemoryError,
    Stream,
    backends,
    current_accelerator,
    current_device_index,
    current_stream,
    device,
    device_count,
    device_index,
    empty_cache,
    empty_host_cache,
    from_dlpack,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_memory_info,
    ipc_collect,
    is_available,
    launch,
    set_device_index,
    set_stream,
    synchronize,
)
from ._ipc import IpcHandle
from ._launch import local_device_index
from . import memory
from .memory import (
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)

__all__ = [
    "MAX_DEVICES",
    "AcceleratorError",
    "Buffer",
    "BuildError",
    "DeviceIndexError",
    "DeviceProperties",
    "Event",
    "Graph",
    "HostBuffer",
    "IpcHandle",
    "Kernel",
    "Module",
    "OutOfMemoryError",
    "Stream",
    "backends",
    "current_accelerator",
    "current_device_idx",
    "current_device_index",
    "current_stream",
    "device",
    "device_count",
    "device_index",
    "empty_cache",
    "empty_host_cache",
    "from_dlpack",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_include",
    "get_memory_info",
    "ipc_collect",
    "is_available",
    "launch",
    "local_device_index",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_device_idx",
    "set_device_index",
    "set_per_process_memory_fraction",
    "set_stream",
    "synchronize",
]

__version__ = "0.1.0"


def get_include() -> str:
    """get_include()

    The folder of the C headers that ship with the package:
    ``accelerator/backend.h``, the public backend contract (with the base
    types it includes, ``accelerator/types.h``), and
    ``accelerator/native_kernel.h``, the driver test doubles' native kernel
    format (:ref:`kernels-without-a-gpu`).  Compile with
    ``-I "$(python -c 'import accelerator; print(accelerator.get_include())')"``.
    """
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)),
                         "include")


def current_device_idx() -> int:
    """current_device_idx()

    Deprecated alias of :func:`current_device_index`.
    """
    _warnings.warn(
        "Use `current_device_index` instead.", FutureWarning, stacklevel=2
    )
    return current_device_index()


def set_device_idx(device: object, /) -> None:
    """set_device_idx(device, /)

    Deprecated alias of :func:`set_device_index`.
    """
    _warnings.warn("Use `set_device_index` instead.", FutureWarning, stacklevel=2)
    set_device_index(device)
