"""Rank agreement: under MPI every rank must launch the same config.

With ``scope="world"`` (the default) rank 0 decides — from the cache or by tuning — and
broadcasts the winner; the other ranks run no trial. ``scope="rank"`` lets each rank
decide alone. mpi4py is imported only when the process was started by an MPI launcher
(its environment says so) or mpi4py is already in use; without MPI this is a no-op.
"""

from __future__ import annotations

from collections.abc import Callable

from ..world import world as mesh_world
from .space import Config


def world():
    """MPI.COMM_WORLD when running under MPI with more than one rank, else None."""
    comm = mesh_world()
    return comm if comm.Get_size() > 1 else None


def agree(scope: str, decide: Callable[[], Config]) -> Config:
    """The config every rank launches (``decide`` runs on rank 0 only, or everywhere with
    ``scope="rank"``). An exception on rank 0 is re-raised on every rank, so no rank
    waits forever in the broadcast."""
    comm = world() if scope == "world" else None
    if comm is None:
        return decide()
    if comm.Get_rank() == 0:
        try:
            outcome = ("ok", dict(decide().items()))
        except Exception as exc:  # pass it on: the other ranks are waiting for rank 0
            outcome = ("error", exc)
        comm.bcast(outcome, root=0)
    else:
        outcome = comm.bcast(None, root=0)
    if outcome[0] == "error":
        raise outcome[1]
    return Config(outcome[1])
