"""The world of processes: MPI's COMM_WORLD when the script was started by an MPI launcher
(``mpiexec``, ``srun``, ``tessera run``), else a world of one.

mpi4py is imported only then, so ``import tessera`` works — and scripts run alone — without
MPI installed. A world of one uses :class:`LocalComm`, which implements the few
communicator calls Tessera makes for a single rank.
"""

from __future__ import annotations

import functools
import os
import sys

import numpy as np

LAUNCHER_VARIABLES = (
    "PMI_SIZE",
    "PMI_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMIX_RANK",
    "MPI_LOCALNRANKS",
    "SLURM_NTASKS",
)


class LocalComm:
    """A communicator of one rank (what a script started without MPI talks to)."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's spelling
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return 1

    def Split(self, color: int = 0, key: int = 0) -> LocalComm:  # noqa: N802
        return self

    def Allreduce(self, send, recv, op=None) -> None:  # noqa: N802
        np.copyto(recv, send)

    def Bcast(self, buf, root: int = 0) -> None:  # noqa: N802
        return None

    def allgather(self, obj) -> list:
        return [obj]

    def bcast(self, obj, root: int = 0):
        return obj

    def Barrier(self) -> None:  # noqa: N802
        return None


def find_mpiexec() -> str | None:
    """The ``mpiexec`` of this Python's MPI (the ``mpich`` wheel puts it next to the
    interpreter, which need not be on PATH in a virtual environment), else PATH's."""
    import shutil

    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("mpiexec")


def launched_by_mpi() -> bool:
    return "mpi4py.MPI" in sys.modules or any(v in os.environ for v in LAUNCHER_VARIABLES)


@functools.cache
def world():
    """COMM_WORLD under an MPI launcher (mpi4py must be installed then), else LocalComm."""
    if not launched_by_mpi():
        return LocalComm()
    try:
        from mpi4py import MPI
    except ImportError:
        return LocalComm()
    return MPI.COMM_WORLD


def rank() -> int:
    return world().Get_rank()


def size() -> int:
    return world().Get_size()
