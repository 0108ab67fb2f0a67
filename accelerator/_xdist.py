"""Devices for pytest-xdist workers: who gets which, decided in the controller.

With ``pytest -n N`` the controller splits its devices among the workers
(``--accelerator-devices-per-worker=K``; default: as many each as divides
evenly, at least one) and starts each worker with ACCELERATOR_VISIBLE_DEVICES
set to its share, so the worker's probe sees only its own devices, numbered
from 0.  Every worker gets the same number of devices (the rest go unused),
so every worker collects the same ``accel_device`` parameters, as xdist
requires; a worker left without any skips device tests, saying why.

The controller only asks questions (``is_available()``, ``device_count()``):
on CUDA they count through NVML without initialising the driver.  Nothing
here imports xdist: the plugin's hooks are optional ones.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

VISIBLE_ENV = "ACCELERATOR_VISIBLE_DEVICES"
#: key of the worker's share in xdist's workerinput
WORKERINPUT_KEY = "accelerator_devices"


@dataclasses.dataclass(frozen=True)
class WorkerShare:
    """One worker's devices, as the controller numbers them (its indices)
    and as the backend numbers them (what ACCELERATOR_VISIBLE_DEVICES
    says)."""

    worker: str
    devices: tuple[int, ...]
    backend_indices: tuple[int, ...]

    @property
    def visible_devices(self) -> str:
        """The worker's ACCELERATOR_VISIBLE_DEVICES ('' for none)."""
        return ",".join(map(str, self.backend_indices))


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every worker's share of the controller's devices."""

    device_type: str
    device_count: int
    per_worker: int
    requested: int | None
    shares: tuple[WorkerShare, ...]

    def share(self, worker: str) -> WorkerShare | None:
        return next((s for s in self.shares if s.worker == worker), None)

    def none_reason(self, worker: str) -> str:
        """Why ``worker`` has no device."""
        how = (f"--accelerator-devices-per-worker={self.requested}"
               if self.requested else "spread evenly")
        return (f"xdist worker {worker} has no accelerator device: "
                f"{self.device_count} {self.device_type} device"
                f"{'' if self.device_count == 1 else 's'} for "
                f"{len(self.shares)} workers, {self.per_worker} per worker "
                f"({how}); run fewer workers (-n) to use every worker")

    def workerinput(self, worker: str) -> dict[str, object]:
        """What the worker needs to parametrize and skip like the others."""
        share = self.share(worker)
        devices = list(share.devices) if share else []
        return {
            "type": self.device_type,
            "per_worker": self.per_worker,
            "devices": devices,
            "visible_devices": share.visible_devices if share else "",
            "reason": None if devices else self.none_reason(worker),
        }

    def header_lines(self) -> list[str]:
        """The pytest header: which worker has which devices."""
        how = (f"--accelerator-devices-per-worker={self.requested}"
               if self.requested else "spread evenly")
        lines = [f"accelerator xdist: {self.device_count} "
                 f"{self.device_type} device"
                 f"{'' if self.device_count == 1 else 's'}, "
                 f"{self.per_worker} per worker ({how})"]
        for share in self.shares:
            if share.devices:
                names = ", ".join(f"{self.device_type}:{d}"
                                  for d in share.devices)
                lines.append(f"  {share.worker}: {names} "
                             f"({VISIBLE_ENV}={share.visible_devices})")
            else:
                lines.append(f"  {share.worker}: none (device tests skip)")
        return lines


def per_worker_count(device_count: int, workers: int,
                     requested: int | None) -> int:
    """Devices per worker: as asked, else an even split (at least one)."""
    if requested is not None:
        return requested
    return max(1, device_count // max(1, workers))


def make_plan(workers: Sequence[str], device_type: str, device_count: int,
              requested: int | None,
              backend_indices: Sequence[int] | None) -> Plan:
    """Give the workers, in order, consecutive devices: ``per_worker`` each
    while they last.  backend_indices maps the controller's device i to the
    backend's (its own ACCELERATOR_VISIBLE_DEVICES), None for identity."""
    k = per_worker_count(device_count, len(workers), requested)
    mapping = list(backend_indices) if backend_indices is not None else list(
        range(device_count))
    shares = []
    for n, worker in enumerate(workers):
        first = n * k
        devices = tuple(range(first, min(first + k, device_count)))
        if len(devices) < k:
            devices = ()  # a partial share would collect other parameters
        shares.append(WorkerShare(worker, devices,
                                  tuple(mapping[d] for d in devices)))
    return Plan(device_type, device_count, k, requested, tuple(shares))


def worker_ids(tx_specs: Sequence[str]) -> list[str]:
    """xdist's worker ids for its --tx specs ("2*popen" counts twice), in
    the order it numbers them: gw0, gw1, ..."""
    count = 0
    for spec in tx_specs:
        match = re.match(r"^(\d+)\*", spec)
        count += int(match.group(1)) if match else 1
    return [f"gw{i}" for i in range(count)]


def parse_devices_per_worker(text: str) -> int:
    """The value of --accelerator-devices-per-worker: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"expected a number of devices >= 1, got {text!r}")
    return value
