"""Device memory statistics and controls, as ``torch.accelerator.memory``.

Device memory for :class:`accelerator.Buffer` comes from a caching allocator in the
C core, built as torch's CUDA caching allocator: sizes round up to 512
bytes; requests up to 1 MiB are carved out of 2 MiB segments (the small
pool), larger ones out of 20 MiB segments (requests under 10 MiB) or
segments of their own rounded up to 2 MiB (the large pool).  A freed
block is cached for reuse by later allocations on the same stream, or on
any stream once the work of every stream it was used on
(``Buffer.record_stream``) has completed.  ``ACCELERATOR_ALLOCATOR=direct``
turns caching off: every buffer is then its own driver allocation of the
bytes asked for, which suits memory checkers; the statistics stay exact.

The statistics have torch's keys and meanings (see
:func:`accelerator.memory_stats`).
Every function takes an optional device (an index, a device, a device
string; None means the current device).
"""
# No `from __future__ import annotations` (nor typing names): dir() shows
# the API only; _DeviceLike exists in the stubs, so annotations name it as
# a string.
import typing as _typing

from ._accelerator import (
    _memory_stats,
    _reset_accumulated_memory_stats,
    _reset_peak_memory_stats,
    _set_per_process_memory_fraction,
    empty_cache,
    empty_host_cache,
    get_memory_info,
)

if _typing.TYPE_CHECKING:
    from ._accelerator import _DeviceLike

__all__ = [
    "empty_cache",
    "empty_host_cache",
    "get_memory_info",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
]


def memory_stats(device: "_DeviceLike | None" = None, /) -> dict[str, int]:
    """memory_stats(device=None, /)

    The allocator's statistics for device, as torch's: a dict sorted by
    key, empty before this process allocated any device memory.

    ``{name}.{all,small_pool,large_pool}.{current,peak,allocated,freed}``
    for each name: ``allocation`` (live blocks), ``allocated_bytes``
    (their rounded sizes), ``requested_bytes`` (the sizes asked for),
    ``active``/``active_bytes`` (live blocks and freed ones still waiting
    for work on streams they were used on), ``segment``/``reserved_bytes``
    (driver allocations, used or cached), ``inactive_split``/
    ``inactive_split_bytes`` (free blocks inside partly used segments,
    which empty_cache cannot release).  ``current`` is the value now,
    ``peak`` the most since the last reset_peak_memory_stats, and
    ``allocated``/``freed`` the totals added and removed since the last
    reset_accumulated_memory_stats.  Also ``num_alloc_retries`` (cache
    releases after a failed driver allocation), ``num_ooms``,
    ``num_sync_all_streams``, ``num_device_alloc``, ``num_device_free``,
    and, as torch reports without its max_split_size option,
    ``max_split_size`` (-1) and ``oversize_allocations.*`` and
    ``oversize_segments.*`` (0).
    """
    return dict(sorted(_memory_stats(device).items()))


def memory_allocated(device: "_DeviceLike | None" = None, /) -> int:
    """memory_allocated(device=None, /)

    Bytes of device memory held by live buffers (rounded sizes).
    """
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: "_DeviceLike | None" = None, /) -> int:
    """max_memory_allocated(device=None, /)

    The peak of :func:`accelerator.memory_allocated` since the last reset.
    """
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: "_DeviceLike | None" = None, /) -> int:
    """memory_reserved(device=None, /)

    Bytes this process holds from the driver: used or cached.
    """
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: "_DeviceLike | None" = None, /) -> int:
    """max_memory_reserved(device=None, /)

    The peak of :func:`accelerator.memory_reserved` since the last reset.
    """
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: "_DeviceLike | None" = None, /) -> None:
    """reset_peak_memory_stats(device=None, /)

    Set every ``peak`` statistic of device to its ``current`` value.
    """
    _reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: "_DeviceLike | None" = None, /) -> None:
    """reset_accumulated_memory_stats(device=None, /)

    Zero the ``allocated`` and ``freed`` totals and the ``num_*``
    counters of device.
    """
    _reset_accumulated_memory_stats(device)


def set_per_process_memory_fraction(fraction: float, device: "_DeviceLike | None" = None) -> None:
    """set_per_process_memory_fraction(fraction, device=None)

    Cap the memory this process may reserve on device at ``fraction``
    (a float in [0, 1]) of the device's total memory.  An allocation that
    would pass the cap first releases the cache, then raises
    :class:`accelerator.OutOfMemoryError`.
    """
    _set_per_process_memory_fraction(fraction, device)


def _scaled(value: int, units: list[str], step: int, limit: int) -> tuple[int, str]:
    """value in the first unit where it stays under limit (torch's way)."""
    reference, unit = value, 0
    while unit < len(units) - 1 and reference >= limit:
        value //= step
        reference //= step
        unit += 1
    return value, units[unit]


def _format_size(size: int) -> str:
    value, unit = _scaled(size, ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"],
                          1024, 768 * 1024)
    return f"{value:6d} {unit}"


def _format_count(count: int) -> str:
    value, unit = _scaled(count, [" ", "K", "M"], 1000, 750 * 1000)
    return f"{value:7d} {unit} "


#: (title, key, is bytes) of each section of memory_summary
_SECTIONS = [
    ("Allocated memory", "allocated_bytes", True),
    ("Active memory", "active_bytes", True),
    ("Requested memory", "requested_bytes", True),
    ("Reserved memory", "reserved_bytes", True),
    ("Non-releasable memory", "inactive_split_bytes", True),
    ("Allocations", "allocation", False),
    ("Active allocs", "active", False),
    ("Reserved segments", "segment", False),
    ("Non-releasable allocs", "inactive_split", False),
]


def memory_summary(device: "_DeviceLike | None" = None, abbreviated: bool = False) -> str:
    """memory_summary(device=None, abbreviated=False)

    A readable table of :func:`accelerator.memory_stats`, as torch's: for each
    statistic its current value, peak, total allocated and total freed,
    overall and (unless abbreviated) per pool.
    """
    from . import _accelerator

    stats = memory_stats(device)
    index = _accelerator._device_index_of(device)
    mode = _accelerator._allocator()
    retries = stats.get("num_alloc_retries", 0)
    rule = "|" + "-" * 75 + "|"
    double = "|" + "=" * 75 + "|"
    title = f"accelerator memory summary, device {index} ({mode})"
    lines = [
        double,
        f"|{title:^75}|",
        rule,
        f"|{'OOMs: ' + str(stats.get('num_ooms', 0)):^36}|"
        f"{'allocation retries: ' + str(retries):^38}|",
        double,
        "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  "
        "| Tot Freed  |",
    ]
    pools = [("all", "")] if abbreviated else [
        ("all", ""), ("large_pool", "      from large pool"),
        ("small_pool", "      from small pool")]
    for name, key, is_bytes in _SECTIONS:
        lines.append(rule)
        for pool, label in pools:
            values = [stats.get(f"{key}.{pool}.{field}", 0)
                      for field in ("current", "peak", "allocated", "freed")]
            cells = [(_format_size if is_bytes else _format_count)(v)
                     for v in values]
            lines.append(f"| {(label or name):<22}|"
                         + "".join(f" {cell:<10} |" for cell in cells))
    lines.append(double)
    return "\n".join(lines) + "\n"
