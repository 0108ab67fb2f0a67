"""This process's device under a launcher (torchrun, mpirun, srun).

Launchers start one process per device and tell each its rank on the node
in an environment variable.  :func:`local_device_index` reads it, so that
every rank takes its own device with one line::

    accelerator.set_device_index(accelerator.local_device_index())
"""
from __future__ import annotations

import os

from ._accelerator import AcceleratorError, current_device_index, device_count

#: The local-rank variables, in the order they are read: torchrun (and
#: torch.distributed launchers), Open MPI, MPICH and Intel MPI (Hydra),
#: Slurm.
LOCAL_RANK_VARIABLES = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
)


def local_rank() -> tuple[str, int] | None:
    """The first local-rank variable that is set, and its value; None when
    no launcher set one.  A value that is not a non-negative integer raises
    ValueError naming the variable."""
    for name in LOCAL_RANK_VARIABLES:
        text = os.environ.get(name)
        if text is None:
            continue
        value = text.strip()
        if not value.isdigit() or not value.isascii():
            raise ValueError(
                f"{name}={text!r} is not a local rank: expected a "
                f"non-negative integer (set by the launcher: torchrun, "
                f"mpirun, srun)"
            )
        return name, int(value)
    return None


def local_device_index() -> int:
    """local_device_index()

    This process's device index: the launcher's local rank (the first set of
    ``LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_RANK``, ``MPI_LOCALRANKID``,
    ``SLURM_LOCALID``) modulo :func:`device_count`, so ranks on one node
    take devices 0, 1, ... in turn; outside a launcher, the current device.
    Asks only questions (no driver initialisation on CUDA).  Raises
    ValueError for a malformed rank and AcceleratorError when there is no
    accelerator.
    """
    rank = local_rank()
    if rank is None:
        return current_device_index()
    name, value = rank
    count = device_count()
    if count == 0:
        # current_device_index() raises the error that lists every
        # backend's reason.
        current_device_index()
        raise AcceleratorError(f"{name}={value}: no accelerator device")
    return value % count
