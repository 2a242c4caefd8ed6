"""Run under ``mpiexec -n 2`` or ``-n 4``: checks every collective on a mesh against NumPy
and writes ``ok`` (or the failure) to ``<folder>/rank<r>.txt``."""

from __future__ import annotations

import sys

import numpy as np
from mpi_run import report_outcome

from tessera import dist


def check() -> None:
    n = dist.size()
    mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, n // 2))
    r = mesh.rank
    tp = mesh.size("tp")
    members = [(mesh.coords[0], j) for j in range(tp)]  # my tp group, in tp order
    ranks = [i * tp + j for i, j in members]
    mine = np.arange(6, dtype=np.float64) + r * 10

    total = dist.all_reduce(mine, axis="tp")
    assert np.array_equal(total, sum(np.arange(6.0) + q * 10 for q in ranks))
    assert np.array_equal(
        dist.all_reduce(mine, axis="tp", op="max"), np.arange(6.0) + max(ranks) * 10
    )
    exact = dist.all_reduce(mine.astype(np.float32) / 3, axis="dp", deterministic=True)
    in_order = np.zeros(6, np.float32)
    for q in (mesh.coords[1], tp + mesh.coords[1]):  # dp group, rank order
        in_order = in_order + (np.arange(6, dtype=np.float32) + q * 10).astype(np.float32) / 3
    assert exact.tobytes() == in_order.tobytes()

    gathered = dist.all_gather(np.full((1, 2), r, np.int64), axis="tp")
    assert np.array_equal(gathered[:, 0], ranks)
    scattered = dist.reduce_scatter(np.ones(5, np.int32) * (r + 1), axis="tp")
    expected = np.array_split(np.ones(5, np.int32) * sum(q + 1 for q in ranks), tp)
    assert np.array_equal(scattered, expected[mesh.index("tp")])
    out = np.empty(3)
    got = dist.broadcast(np.full(3, float(r)), axis="tp", root=tp - 1, out=out)
    assert got is out and np.array_equal(out, np.full(3, float(ranks[-1])))
    with mesh:
        dist.barrier("dp")
    dist.barrier()


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
