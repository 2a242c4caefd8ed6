"""The world of processes: MPI's COMM_WORLD when the script was started by a launcher
(``mpiexec``, ``srun``, Flux, PALS, ``tessera run``), else a world of one.

A launcher whose processes MPI does not see as one world — ``srun`` with an MPI that does
not speak Slurm's PMI, or torchrun, which is not an MPI launcher — would leave every
process computing alone as rank 0 of 1. The launcher's variables (tessera.runtime.launchers) say
how many processes it started; when MPI's world has another size, making the world is an
error naming both. ``TESSERA_LAUNCHER=mpi`` or ``single`` forces one world or the other.

mpi4py is imported only then, so ``import tessera`` works — and scripts run alone — without
MPI installed. A world of one uses :class:`LocalComm`, which implements the few
communicator calls Tessera makes for a single rank.

It sits at the top of the package, below both ``tessera.mesh`` (meshes, collectives) and
``tessera.autotune`` (which agrees on winners between ranks), so that neither imports
the other.
"""

from __future__ import annotations

import atexit
import functools
import os
import stat
import sys
import time

import numpy as np

from ..config import get as setting
from ..errors import TesseraError
from . import launchers

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

    def Ialltoall(self, send, recv) -> Done:  # noqa: N802
        np.copyto(recv, send)
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


def find_mpiexec(path: str | None = None) -> str | None:
    """The site's ``mpiexec`` (the first on PATH that this Python environment did not
    install), else this environment's own (the ``mpich`` wheel puts one beside the
    interpreter, which need not be on PATH). A cluster's MPI is built for its network and
    scheduler; the wheel is the fallback that makes a laptop work."""
    installed = [
        os.path.join(os.path.dirname(sys.executable), "mpiexec"),
        os.path.join(sys.prefix, "bin", "mpiexec"),
    ]
    own = {os.path.realpath(p) for p in installed}
    search = os.environ.get("PATH", os.defpath) if path is None else path
    found = [os.path.join(folder or ".", "mpiexec") for folder in search.split(os.pathsep)]
    site = [p for p in found if os.path.realpath(p) not in own]
    for candidate in site + installed:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def launched_by_mpi() -> bool:
    return (
        "mpi4py.MPI" in sys.modules
        or any(v in os.environ for v in LAUNCHER_VARIABLES)
        or launchers.detect() is not None
    )


@functools.cache
def world():
    """COMM_WORLD under a launcher (mpi4py must be installed then), else LocalComm; see the
    module docstring for TESSERA_LAUNCHER and the check against the launcher's size."""
    mode = setting("launcher")
    if mode == "single" or (mode == "auto" and not launched_by_mpi()):
        return LocalComm()
    launch = launchers.detect()
    try:
        from mpi4py import MPI
    except ImportError:
        if mode == "mpi" or (launch is not None and (launch.size or 1) > 1):
            started = launch.describe() if launch else "TESSERA_LAUNCHER=mpi"
            raise TesseraError(
                f"this process needs MPI ({started}) but mpi4py is not installed: "
                "pip install mpi4py (with the site's MPI loaded) or 'tessera-kernels[mpi]'; "
                "TESSERA_LAUNCHER=single runs each process alone"
            ) from None
        return LocalComm()
    comm = MPI.COMM_WORLD
    if mode == "auto" and launch is not None and launch.size not in (None, comm.Get_size()):
        raise TesseraError(mismatch_message(launch, comm.Get_size(), MPI.Get_library_version()))
    if comm.Get_size() > 1:
        _abort_on_uncaught_exception(comm)
        _report_to_wrapper()
    return comm


def mismatch_message(launch: launchers.Launch, mpi_size: int, library: str) -> str:
    """The error when the launcher started ``launch.size`` processes and MPI sees
    ``mpi_size``: both sides named, then the usual causes and the ways out."""
    library = " ".join(library.strip().splitlines()[0].split()) if library.strip() else "MPI"
    ranks = "rank" if mpi_size == 1 else "ranks"
    return (
        f"this process was started by {launch.launcher} as one of {launch.size} processes "
        f"({', '.join(launch.variables)}), but MPI's world ({library}) has {mpi_size} "
        f"{ranks}: the MPI library does not see the launcher's processes as one job. "
        "Under Slurm use srun --mpi=pmix (or --mpi=pmi2) with an MPI built for it, or the "
        "MPI's own mpiexec; torchrun is not an MPI launcher (start the script with mpiexec "
        "or srun). TESSERA_LAUNCHER=mpi uses MPI's world anyway, TESSERA_LAUNCHER=single "
        "runs each process alone."
    )


ABORT_GRACE_S = 0.5  # between printing an uncaught error and aborting the job


def _abort_on_uncaught_exception(comm) -> None:
    """An exception that ends one rank's script ends the whole job (as ``python -m
    mpi4py`` does): the traceback is printed, then MPI_Abort stops every rank, instead of
    the others waiting forever in their next collective."""
    previous = sys.excepthook

    def hook(kind, value, traceback) -> None:
        previous(kind, value, traceback)
        sys.stderr.flush()
        sys.stdout.flush()
        # the launcher forwards the traceback from a pipe; an abort at once can tear the
        # job down before it has (seen under load: the message lost, the job still ended)
        time.sleep(ABORT_GRACE_S)
        comm.Abort(1)

    sys.excepthook = hook


def _report_to_wrapper() -> None:
    """Under ``tessera run`` (tessera.runtime.rank_output): tell the wrapper that this rank joined
    the world, and again at exit that it finishes, so that a rank whose process ends in
    between (``os._exit``) makes the job fail instead of ending it with status 0. Nothing
    when the variable is not this process's wrapper's (a process the rank started)."""
    value = os.environ.get("_TESSERA_RANK_STATUS", "")
    fd, _, wrapper = value.partition(",")
    if not (fd.isdigit() and wrapper.isdigit() and int(wrapper) == os.getppid()):
        return
    fd = int(fd)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
        os.write(fd, b"S")
    except OSError:
        return

    def finishing() -> None:
        try:
            os.write(fd, b"F")
        except OSError:
            pass

    atexit.register(finishing)


def rank() -> int:
    return world().Get_rank()


def size() -> int:
    return world().Get_size()
