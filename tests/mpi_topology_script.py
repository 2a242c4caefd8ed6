"""Run under ``mpiexec -n 2``: ``dist.topology`` agrees with MPI's shared-memory split and
is the same table on every rank; writes ``ok`` (or the failure) to ``<folder>/rank<r>.txt``."""

from __future__ import annotations

import sys

from mpi4py import MPI
from mpi_run import report_outcome

from tessera import dist


def check() -> None:
    mesh = dist.Mesh(axes=("x",), shape=(dist.size(),))
    topo = dist.topology(mesh)
    assert dist.topology(mesh) is topo  # cached per mesh
    shared = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    node_ranks = shared.allgather(MPI.COMM_WORLD.Get_rank())
    me = topo.members[mesh.rank]
    assert [m.rank for m in topo.members if m.node == me.node] == sorted(node_ranks)
    assert me.local_rank == shared.Get_rank()
    for other in node_ranks:
        assert topo.link(mesh.rank, other) in ("self", "shm")
    tables = MPI.COMM_WORLD.allgather(topo.to_json())
    assert all(t == tables[0] for t in tables)


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
