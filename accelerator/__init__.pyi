"""Type stubs for the accelerator package (the public names)."""

from typing_extensions import deprecated

from . import _accelerator as _accelerator
from ._accelerator import (
    MAX_DEVICES as MAX_DEVICES,
    AcceleratorError as AcceleratorError,
    Buffer as Buffer,
    BuildError as BuildError,
    DeviceIndexError as DeviceIndexError,
    DeviceProperties as DeviceProperties,
    Event as Event,
    Graph as Graph,
    HostBuffer as HostBuffer,
    Kernel as Kernel,
    Module as Module,
    OutOfMemoryError as OutOfMemoryError,
    Stream as Stream,
    _DeviceLike,
    backends as backends,
    current_accelerator as current_accelerator,
    current_device_index as current_device_index,
    current_stream as current_stream,
    device_index as device_index,
    device as device,
    device_count as device_count,
    empty_cache as empty_cache,
    empty_host_cache as empty_host_cache,
    from_dlpack as from_dlpack,
    get_device_capability as get_device_capability,
    get_device_name as get_device_name,
    get_device_properties as get_device_properties,
    get_memory_info as get_memory_info,
    ipc_collect as ipc_collect,
    is_available as is_available,
    launch as launch,
    set_device_index as set_device_index,
    set_stream as set_stream,
    synchronize as synchronize,
)
from ._ipc import IpcHandle as IpcHandle
from ._launch import local_device_index as local_device_index
from . import memory as memory
from .memory import (
    max_memory_allocated as max_memory_allocated,
    max_memory_reserved as max_memory_reserved,
    memory_allocated as memory_allocated,
    memory_reserved as memory_reserved,
    memory_stats as memory_stats,
    memory_summary as memory_summary,
    reset_accumulated_memory_stats as reset_accumulated_memory_stats,
    reset_peak_memory_stats as reset_peak_memory_stats,
    set_per_process_memory_fraction as set_per_process_memory_fraction,
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
    "empty_cache",
    "empty_host_cache",
    "from_dlpack",
    "get_device_capability",
    "device_index",
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

__version__: str

def get_include() -> str: ...
@deprecated("Use `current_device_index` instead.")
def current_device_idx() -> int: ...
@deprecated("Use `set_device_index` instead.")
def set_device_idx(device: _DeviceLike, /) -> None: ...
