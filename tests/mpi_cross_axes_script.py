"""Run under ``mpiexec -n 4`` with a folder: on a 2×2 mesh (axes ``dp`` and ``tp``) the
ranks of dp index 0 (ranks 0 and 1) all_reduce over ``tp`` while ranks 2 and 3 all_reduce
over ``dp``; then every rank calls ``barrier()``. Ranks 0 and 1 pair with each other and
return; ranks 2 and 3 wait for them on ``dp``, they for ranks 2 and 3 in the barrier.
Each rank writes ``<folder>/cross.rank<r>.txt``: what its all_reduce returned (or its
error's class name and message), a line ``--``, and the same for its barrier.
test_dist_cross_axes.py reads them."""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

import tessera
from tessera import dist


def outcome(call) -> str:
    try:
        with tessera.config(collective_timeout="30"):
            return f"no error\n{call()!r}"
    except (dist.CollectiveMismatch, dist.CollectiveTimeout) as exc:
        return f"{type(exc).__name__}\n{exc}"


if __name__ == "__main__":
    mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, 2))
    rank = dist.rank()
    dist.barrier()  # the world's channel exists on every rank
    axis = "tp" if mesh.index("dp") == 0 else "dp"
    first = outcome(lambda: dist.all_reduce(np.full(4, float(rank)), axis))
    second = outcome(dist.barrier)
    with open(f"{sys.argv[1]}/cross.rank{rank}.txt", "w") as f:
        f.write(f"{first}\n--\n{second}")
    MPI.COMM_WORLD.Barrier()  # every rank has written its report
    os._exit(0)  # the mismatched collectives are still posted: no MPI_Finalize
