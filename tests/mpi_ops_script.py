"""Run under ``mpiexec -n 2``: ops feed collectives (``dist.all_reduce(op.matmul(A, B),
axis="dp")``) and dropout masks agree across ranks; writes ``ok`` (or the failure) to
``<folder>/rank<r>.txt``."""

from __future__ import annotations

import sys

import numpy as np
from mpi_run import report_outcome

from tessera import dist, graph, op


def check() -> None:
    mesh = dist.Mesh(axes=("dp",), shape=(dist.size(),))
    r = mesh.rank
    rng = np.random.default_rng(0)
    a_all = rng.standard_normal((mesh.size("dp"), 24, 16)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)
    total = dist.all_reduce(op.matmul(a_all[r], b), axis="dp")
    want = sum(a.astype(np.float64) @ b for a in a_all)
    np.testing.assert_allclose(total, want, rtol=1e-4, atol=1e-4)

    mask = op.dropout(np.ones(4096, np.float32), 0.5, 2024) != 0
    masks = dist.all_gather(mask.astype(np.int8)[None, :], axis="dp")
    assert all(np.array_equal(m, masks[0]) for m in masks)

    def loss(x, w):
        return op.mean(op.relu(op.matmul(x, w)))

    grad = graph.grad(loss, argnums=1)(a_all[r], b)
    averaged = dist.all_reduce(grad, axis="dp") / mesh.size("dp")
    full = graph.grad(loss, argnums=1)(a_all.reshape(-1, 16), b)
    np.testing.assert_allclose(averaged, full, rtol=1e-4, atol=1e-6)


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
