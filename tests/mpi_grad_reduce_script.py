"""Run under ``mpiexec -n 2``: ``dist.GradReduce`` reduces gradients given in a different
order on each rank (and each step) to the sums NumPy computes; writes ``ok`` (or the
failure) to ``<folder>/rank<r>.txt``."""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI
from mpi_run import report_outcome

from tessera import dist

SHAPES = [((64, 32), np.float32), ((32,), np.float32), ((32, 10), np.float64), ((10,), np.float32)]


def gradient(step: int, rank: int, i: int) -> np.ndarray:
    shape, dtype = SHAPES[i]
    rng = np.random.default_rng(1000 * step + 10 * rank + i)
    return rng.standard_normal(shape).astype(dtype)


def check() -> None:
    mesh = dist.Mesh(axes=("dp",), shape=(dist.size(),))
    r, n = mesh.rank, mesh.size("dp")
    reducer = dist.GradReduce(SHAPES, axis="dp", bucket_mb=0.004, average=True)
    assert len(reducer.plan) > 1  # several buckets, started in one order on every rank
    order = np.random.default_rng(r).permutation(len(SHAPES))
    for step in range(3):
        for i in np.roll(order, step):  # another order on each rank and each step
            reducer.ready(int(i), gradient(step, r, int(i)))
        reduced = reducer.wait()
        for i, got in enumerate(reduced):
            want = sum(gradient(step, k, i).astype(np.float64) for k in range(n)) / n
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            assert got.dtype == SHAPES[i][1]
        mine = b"".join(g.tobytes() for g in reduced)
        assert all(x == mine for x in MPI.COMM_WORLD.allgather(mine))  # the same bits


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
