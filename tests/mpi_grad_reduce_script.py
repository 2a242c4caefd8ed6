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

    # the operator layer's backward pass feeding the buckets as it makes the gradients
    from tessera import graph, op

    def loss(x, y, w1, w2):
        err = op.matmul(op.relu(op.matmul(x, w1)), w2) - y
        return op.mean(err * err)

    rng = np.random.default_rng(r)
    x = rng.standard_normal((32, 16)).astype(np.float32)
    y = rng.standard_normal((32, 8)).astype(np.float32)
    w1 = np.full((16, 12), 0.1, np.float32)
    w2 = np.full((12, 8), 0.2, np.float32)
    reduce = dist.GradReduce(axis="dp", op="mean", bucket_mb=0.0002)
    step = graph.value_and_grad(loss, argnums=(2, 3), reduce=reduce)
    for _ in range(2):
        value, (dw1, dw2) = step(x, y, w1, w2)
        local, (g1, g2) = graph.value_and_grad(loss, argnums=(2, 3))(x, y, w1, w2)
        assert value == local
        for got, mine in ((dw1, g1), (dw2, g2)):
            everyone = MPI.COMM_WORLD.allgather(mine)
            np.testing.assert_allclose(got, sum(everyone) / n, rtol=1e-6, atol=1e-7)
    assert reduce.plan == [[1], [0]]


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
