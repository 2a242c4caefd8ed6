"""The world of processes: MPI's COMM_WORLD when the script was started by an MPI launcher
(``mpiexec``, ``srun``, ``tessera run``), else a world of one.

mpi4py is imported only then, so ``import tessera`` works — and scripts run alone — without
MPI installed. A world of one uses :class:`LocalComm`, which implements the few
communicator calls Tessera makes for a single rank.

It sits at the top of the package, below both ``tessera.mesh`` (meshes, collectives) and
``tessera.autotune`` (which agrees on winners between ranks), so that neither imports
the other.
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

    def Dup(self) -> LocalComm:  # noqa: N802
        return self

    # the non-blocking calls the collectives use, complete at once for one rank
    def Iallreduce(self, send, recv, op=None) -> Done:  # noqa: N802
        np.copyto(recv, send)
        return Done()

    def Iallgather(self, send, recv) -> Done:  # noqa: N802
        np.copyto(recv.reshape(send.shape), send)
        return Done()

    def Iallgatherv(self, send, recv) -> Done:  # noqa: N802
        np.copyto(recv[0].reshape(send.shape), send)
        return Done()

    def Ireduce_scatter(self, send, recv, counts=None, op=None) -> Done:  # noqa: N802
        np.copyto(recv, send.reshape(recv.shape))
        return Done()

    def Ialltoallv(self, send, recv) -> Done:  # noqa: N802
        np.copyto(recv[0], send[0])
        return Done()

    def Ibcast(self, buf, root: int = 0) -> Done:  # noqa: N802
        return Done()

    def Ibarrier(self) -> Done:  # noqa: N802
        return Done()


class Done:
    """A request that is already complete (what LocalComm's non-blocking calls return)."""

    def Test(self) -> bool:  # noqa: N802
        return True


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
    if MPI.COMM_WORLD.Get_size() > 1:
        _abort_on_uncaught_exception(MPI.COMM_WORLD)
    return MPI.COMM_WORLD


def _abort_on_uncaught_exception(comm) -> None:
    """An exception that ends one rank's script ends the whole job (as ``python -m
    mpi4py`` does): the traceback is printed, then MPI_Abort stops every rank, instead of
    the others waiting forever in their next collective."""
    previous = sys.excepthook

    def hook(kind, value, traceback) -> None:
        previous(kind, value, traceback)
        sys.stderr.flush()
        sys.stdout.flush()
        comm.Abort(1)

    sys.excepthook = hook


def rank() -> int:
    return world().Get_rank()


def size() -> int:
    return world().Get_size()
