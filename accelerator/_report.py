"""The environment report behind ``python -m accelerator``.

``python -m accelerator`` prints a readable report: the selected backend,
its driver version, every device (name, memory, compute capability, PCI
bus id, multiprocessor count) and every known backend with the reason it
is not available.  Paste it into a bug report.

Options:
  ``--json``     print the report as one JSON document (the keys below).
  ``--require``  exit with status 1, after the report, with a message on
                 stderr, when no accelerator is available.
  ``--no-init``  do not initialise a driver the probe left uninitialised
                 (CUDA counted through NVML): devices are listed by index
                 only, marked "not read" (not an error), and the process
                 stays free to fork CUDA workers.
The exit status is 0 otherwise (2 for a bad command line, from argparse;
1, with one line on stderr, when stdout cannot be written: closed, full,
or a pipe nobody reads).

Probing creates no context: the report reads ``backends()``,
``get_device_properties()`` and ``get_memory_info()`` only.  On CUDA the
last one retains each listed device's primary context, as any CUDA
program does, so the free memory it reports includes that context.  On
CUDA the probe counts devices through NVML without initialising CUDA;
reading the devices' properties then initialises it (``cuInit``), unless
``--no-init`` (or ``collect_report(init=False)``) is given.  The backends
are read after the devices, so ``initialized`` is the state the report
leaves behind.  A number the driver cannot give and the report shows
guessed (free memory on Level Zero without Sysman and on OpenCL: the
total less what this process took) is listed in the device's ``estimates`` and marked
"(estimate ...)" in the text.

JSON document (schema 1; keys are only ever added, under the same number):
  ``schema``          1
  ``version``         the accelerator package's version
  ``python``          the Python version, e.g. ``"3.11.7"``
  ``platform``        ``platform.platform()``
  ``available``       true when an accelerator is usable
  ``backend``         the selected backend's name (``"cuda"``, ``"xpu"``,
                      ``"hip"``, ``"opencl"``), or null
  ``device_type``     its device type, or null
  ``driver_version``  its driver version as text (``"12.8"``), or null
  ``device_count``    the number of devices, 0 when none
  ``visible_devices`` the backend's indices of the devices
                      ACCELERATOR_VISIBLE_DEVICES made visible, in order,
                      or null when it is unset
  ``devices``         one object per device, in index order:
      ``index``                  the device index
      ``device``                 ``"<type>:<index>"``, e.g. ``"cuda:0"``
      ``name``, ``uuid``         text, or null if unreadable
      ``total_memory``           bytes, or null
      ``free_memory``            bytes, or null
      ``compute_capability``     ``[major, minor]`` (CUDA), else null
      ``pci_bus_id``             ``"dddd:bb:dd.f"``, or null if unknown
      ``multi_processor_count``  SMs (CUDA), execution units (Level Zero),
                                 compute units (OpenCL)
      ``vendor_id``, ``device_id``  PCI ids as integers, or null
      ``is_integrated``          true when it shares memory with the host
      ``memory_reserved``, ``memory_allocated``  bytes this process holds
                                 from the driver and in live buffers, or
                                 null before it allocated device memory
      ``error``                  null, or why a query of this device failed
      ``read``                   false when the device was listed unread
                                 (``--no-init``), true otherwise
      ``estimates``              the names of the values above that are
                                 guesses, not the driver's figures:
                                 ``["free_memory"]`` or ``[]``
  ``backends``        one object per known backend, in probe order:
      ``name``, ``device_type``, ``library`` (path or name tried),
      ``loaded``, ``available``, ``selected``, ``driver_version`` (text or
      null), ``device_count``, ``reason`` (why not available, or why its
      first use failed, or null), ``counted_by`` (what counted the
      devices: ``"cuInit (...)"``, ``"NVML (...)"``; or null),
      ``initialized`` (the driver is initialised in this process) and
      ``processor_label`` (what ``multi_processor_count`` counts on its
      devices, from the backend's descriptor: ``"multiprocessors"``,
      ``"execution units"``, ``"compute units"``), ``plugin`` (a backend
      plugin's shared object, or null for a built-in backend) and
      ``origin`` (``"built-in"``, ``"ACCELERATOR_BACKEND_PLUGINS"``, or the
      entry point that named the plugin) and ``refused`` (a plugin the
      core refused, listed after the backends; ``reason`` says why)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO, TypedDict

import accelerator
from accelerator import _accelerator

SCHEMA_VERSION = 1
GIB = 1024**3

class BackendReport(TypedDict):
    """One known backend, as ``accelerator.backends()`` describes it."""

    name: str
    device_type: str
    library: str | None
    loaded: bool
    available: bool
    selected: bool
    driver_version: str | None
    device_count: int
    reason: str | None
    counted_by: str | None
    initialized: bool
    processor_label: str | None
    plugin: str | None
    origin: str
    refused: bool


class DeviceReport(TypedDict):
    """One device of the selected backend."""

    index: int
    device: str
    name: str | None
    uuid: str | None
    total_memory: int | None
    free_memory: int | None
    compute_capability: list[int] | None
    pci_bus_id: str | None
    multi_processor_count: int | None
    vendor_id: int | None
    device_id: int | None
    is_integrated: bool | None
    memory_reserved: int | None
    memory_allocated: int | None
    error: str | None
    read: bool
    estimates: list[str]


class Report(TypedDict):
    """The whole report; its keys are the JSON document's."""

    schema: int
    version: str
    python: str
    platform: str
    available: bool
    backend: str | None
    device_type: str | None
    driver_version: str | None
    device_count: int
    visible_devices: list[int] | None
    devices: list[DeviceReport]
    backends: list[BackendReport]


def backend_report(record: Mapping[str, Any]) -> BackendReport:
    """Copy the keys of one ``backends()`` record that the schema promises."""
    return BackendReport(
        name=record["name"],
        device_type=record["device_type"],
        library=record.get("library"),
        loaded=bool(record.get("loaded")),
        available=bool(record.get("available")),
        selected=bool(record.get("selected")),
        driver_version=record.get("driver_version"),
        device_count=int(record.get("device_count") or 0),
        reason=record.get("reason"),
        counted_by=record.get("counted_by"),
        initialized=bool(record.get("initialized")),
        processor_label=record.get("processor_label"),
        plugin=record.get("plugin"),
        origin=record.get("origin") or "built-in",
        refused=bool(record.get("refused")),
    )


def device_report_skeleton(device_type: str, index: int) -> DeviceReport:
    """One device with nothing read yet."""
    return DeviceReport(
        index=index, device=f"{device_type}:{index}", name=None, uuid=None,
        total_memory=None, free_memory=None, compute_capability=None,
        pci_bus_id=None, multi_processor_count=None, vendor_id=None,
        device_id=None, is_integrated=None, memory_reserved=None,
        memory_allocated=None, error=None, read=True, estimates=[],
    )


def device_report(device_type: str, index: int) -> DeviceReport:
    """Read one device's properties and memory; record a failure (of
    whatever exception the backend's status maps to), not raise.
    What the backend does not support (a plugin may lack device
    properties or memory information) stays unknown."""
    report = device_report_skeleton(device_type, index)
    try:
        try:
            props = accelerator.get_device_properties(index)
        except NotImplementedError:
            props = None
        if props is not None:
            report.update({
                "name": props.name,
                "uuid": props.uuid,
                "total_memory": props.total_memory,
                "compute_capability": (
                    [props.major, props.minor] if props.major >= 0 else None
                ),
                "pci_bus_id": props.pci_bus_id or None,
                "multi_processor_count": props.multi_processor_count,
                "vendor_id": props.vendor_id,
                "device_id": props.device_id,
                "is_integrated": props.is_integrated,
                "estimates": list(props.estimates),
            })
        try:
            report["free_memory"], total = accelerator.get_memory_info(index)
        except NotImplementedError:
            total = None
        if report["total_memory"] is None:
            report["total_memory"] = total
        stats = accelerator.memory_stats(index)
        if stats:
            report["memory_reserved"] = stats["reserved_bytes.all.current"]
            report["memory_allocated"] = stats["allocated_bytes.all.current"]
    except accelerator.AcceleratorError as error:
        report["error"] = str(error)
    except (ValueError, IndexError, KeyError, MemoryError,
            RuntimeError) as error:  # what a backend's other statuses raise
        report["error"] = f"{type(error).__name__}: {error}"
    return report


def unread_device(device_type: str, index: int) -> DeviceReport:
    """A device listed by index only: reading it would initialise the
    driver, which the caller asked not to do."""
    report = device_report_skeleton(device_type, index)
    report["read"] = False
    return report


def collect_report(init: bool = True) -> Report:
    """Probe every backend and read every device of the selected one.

    With ``init=False`` a driver that the probe left uninitialised (CUDA
    counted through NVML) stays so: its devices are listed unread.
    """
    backends = [backend_report(record) for record in accelerator.backends()]
    selected = next((b for b in backends if b["selected"]), None)
    if not accelerator.is_available():
        selected = None
    device_count = accelerator.device_count() if selected else 0
    read = device_report if init or (selected and selected["initialized"]) \
        else unread_device
    devices = [read(selected["device_type"], index)
               for index in range(device_count)] if selected else []
    # Reading the devices may have initialised the driver: report the
    # state now, not the probe's.
    backends = [backend_report(record) for record in accelerator.backends()]
    return Report(
        schema=SCHEMA_VERSION,
        version=accelerator.__version__,
        python=platform.python_version(),
        platform=platform.platform(),
        available=selected is not None,
        backend=selected["name"] if selected else None,
        device_type=selected["device_type"] if selected else None,
        driver_version=selected["driver_version"] if selected else None,
        device_count=device_count,
        visible_devices=_accelerator._visible_devices(),
        devices=devices,
        backends=backends,
    )


def gib(size: int | None) -> str:
    """A byte count as GiB with two decimals, or 'unknown'."""
    return "unknown" if size is None else f"{size / GIB:.2f} GiB"


def human(size: int) -> str:
    """A byte count in the largest binary unit it reaches, two decimals."""
    value, unit = float(size), "bytes"
    for next_unit in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, next_unit
    return f"{size} bytes" if unit == "bytes" else f"{value:.2f} {unit}"


def format_device(device: DeviceReport, processor_label: str) -> list[str]:
    """The text lines that describe one device, whose backend calls what
    multi_processor_count counts processor_label."""
    if not device["read"]:
        return [f"  {device['device']}  not read: --no-init leaves the "
                "driver uninitialised"]
    lines = [f"  {device['device']}  {device['name'] or 'unknown name'}"]
    if device["error"] is not None:
        lines.append(f"      error: {device['error']}")
    guessed = ("" if "free_memory" not in device["estimates"] else
               " (estimate: the driver cannot say what is free)")
    lines.append(
        f"      memory: {gib(device['total_memory'])} total, "
        f"{gib(device['free_memory'])} free{guessed}"
    )
    if device["memory_reserved"] is not None:
        lines.append(
            f"      this process: {human(device['memory_reserved'])} "
            f"reserved, {human(device['memory_allocated'] or 0)} allocated"
        )
    if device["compute_capability"] is not None:
        major, minor = device["compute_capability"]
        lines.append(f"      compute capability: {major}.{minor}")
    lines.append(f"      PCI bus id: {device['pci_bus_id'] or 'unknown'}")
    if device["multi_processor_count"] is not None:
        lines.append(f"      {processor_label}: "
                     f"{device['multi_processor_count']}")
    return lines


def plugin_line(backend: BackendReport) -> str:
    """Where a plugin came from: its file and what named it."""
    if backend["plugin"] is None:
        return f"      plugin: named by {backend['origin']}"
    return f"      plugin: {backend['plugin']} ({backend['origin']})"


def format_backend(backend: BackendReport) -> list[str]:
    """The text lines that describe one known backend."""
    if backend["refused"]:
        # Nothing of it ran: where it came from, and why it was refused.
        return [f"  {backend['name']}: refused", plugin_line(backend),
                f"      reason: {backend['reason']}"]
    if backend["selected"]:
        state = "selected"
    elif backend["available"]:
        state = "available"
    else:
        state = "not available"
    loaded = "loaded" if backend["loaded"] else "not loaded"
    kind = "" if backend["name"] == backend["device_type"] else (
        f" (device type {backend['device_type']})"
    )
    lines = [
        f"  {backend['name']}{kind}: {state}",
        f"      library: {backend['library'] or 'none'} ({loaded})",
        f"      driver version: {backend['driver_version'] or 'unknown'}",
        f"      devices: {backend['device_count']}",
    ]
    if backend["plugin"] is not None:
        lines.append(plugin_line(backend))
    if backend["counted_by"] is not None:
        lines.append(f"      counted by: {backend['counted_by']}")
    if backend["available"] and backend["reason"] is None:
        # Where the backend is not available, or its first use failed,
        # the reason says what the driver did (a failed hipInit() is
        # neither state).
        initialized = "initialised" if backend["initialized"] else (
            "not initialised (it initialises at the first use)")
        lines.append(f"      driver: {initialized}")
    if backend["reason"] is not None:
        lines.append(f"      reason: {backend['reason']}")
    return lines


def format_text(report: Report) -> str:
    """The readable report, ending with a newline."""
    lines = [
        f"accelerator {report['version']} "
        f"(Python {report['python']}, {report['platform']})",
        "",
    ]
    if report["available"]:
        count = report["device_count"]
        lines.append(
            f"Accelerator: {report['backend']} "
            f"(driver {report['driver_version'] or 'unknown'}), "
            f"{count} device{'' if count == 1 else 's'}"
        )
        if report["visible_devices"] is not None:
            lines.append(
                "  ACCELERATOR_VISIBLE_DEVICES: devices "
                + ", ".join(map(str, report["visible_devices"]))
                + f" of the {report['backend']} backend"
            )
        label = next((b["processor_label"] for b in report["backends"]
                      if b["selected"]), None) or "processors"
        for device in report["devices"]:
            lines.extend(format_device(device, label))
    else:
        lines.append("No accelerator is available (reasons below).")
    lines.extend(["", "Backends:"])
    for backend in report["backends"]:
        lines.extend(format_backend(backend))
    return "\n".join(lines) + "\n"


def unavailable_message(report: Report) -> str:
    """The --require failure message: every backend's reason, one line."""
    reasons = "; ".join(
        f"{b['name']}: {b['reason'] or 'not available'}"
        for b in report["backends"]
    )
    return f"no accelerator is available ({reasons})"


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line of ``python -m accelerator``."""
    parser = argparse.ArgumentParser(
        prog="python -m accelerator",
        description="Report the accelerators (GPUs) this process can use, "
        "and why each backend is or is not available.",
    )
    parser.add_argument(
        "--json", action="store_true",
        help=f"print one JSON document (schema {SCHEMA_VERSION}) instead of "
        "text",
    )
    parser.add_argument(
        "--require", action="store_true",
        help="exit with status 1 when no accelerator is available",
    )
    parser.add_argument(
        "--no-init", action="store_true",
        help="do not initialise a driver the probe left uninitialised (CUDA "
        "counted through NVML); list its devices unread",
    )
    return parser.parse_args(argv)


def write_output(text: str, stdout: TextIO | None) -> str | None:
    """Write and flush text; None, or why stdout could not take it."""
    if stdout is None:  # the process started with its stdout closed
        return "stdout is closed"
    try:
        stdout.write(text)
        stdout.flush()
    except OSError as error:
        if stdout is sys.stdout:
            # What is still buffered would fail again at exit, with a
            # second message and status 120: send it nowhere instead.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stdout.fileno())
            os.close(devnull)
        return error.strerror or str(error)
    return None


def main(
    argv: Sequence[str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Print the report; return the exit status (1 for --require without
    an accelerator, or when stdout cannot be written)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    arguments = parse_arguments(argv)
    report = collect_report(init=not arguments.no_init)
    if arguments.json:
        text = json.dumps(report, indent=2) + "\n"
    else:
        text = format_text(report)
    failure = write_output(text, stdout)
    if failure is not None:
        print(f"python -m accelerator: cannot write the report: {failure}",
              file=stderr)
        return 1
    if arguments.require and not report["available"]:
        print(f"python -m accelerator: {unavailable_message(report)}",
              file=stderr)
        return 1
    return 0
