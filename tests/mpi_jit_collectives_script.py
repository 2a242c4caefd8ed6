"""Run under ``mpiexec -n 2``: collectives inside ``tessera.jit`` (ops/collective_nodes.py),
eager and captured, against NumPy; writes ``ok`` (or the failure) to
``<folder>/rank<r>.txt``."""

from __future__ import annotations

import sys

import numpy as np
from mpi_run import report_outcome

from tessera import dist, jit, op


def reference(xs, w):
    total = sum(x.astype(np.float64) @ w for x in xs)
    gathered = np.concatenate([np.maximum(x, 0) for x in xs])
    return total * 0.5, gathered


def check() -> None:
    mesh = dist.Mesh(axes=("dp",), shape=(dist.size(),))
    r, size = mesh.rank, mesh.size("dp")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)

    def body(x, w):
        total = dist.all_reduce(op.matmul(x, w), axis="dp")
        return total * 0.5, dist.all_gather(op.relu(x), axis="dp")

    eager, captured = jit(body), jit(capture_graph=True)(body)
    for _ in range(4):
        xs = [rng.standard_normal((6, 16)).astype(np.float32) for _k in range(size)]
        want_total, want_gathered = reference(xs, w)
        for f in (eager, captured):
            total, gathered = f(xs[r], w)
            np.testing.assert_allclose(total, want_total, rtol=1e-4, atol=1e-4)
            np.testing.assert_array_equal(gathered, want_gathered)
    (graph,) = captured.graphs.values()
    assert graph["kernels"].count("all_reduce") == 1 and "all_gather" in graph["kernels"], graph

    @jit
    def others(x):
        scattered = dist.reduce_scatter(x * 1.0, axis="dp", dim=0)
        exchanged = dist.all_to_all(x * 1.0, axis="dp", dim=0)
        return scattered, dist.broadcast(x + 0.0, axis="dp", root=size - 1), exchanged

    xs = [
        np.arange(4 * size * 3, dtype=np.float32).reshape(4 * size, 3) * (k + 1)
        for k in range(size)
    ]
    scattered, root_x, exchanged = others(xs[r])
    blocks = [np.split(x, size)[r] for x in xs]  # block r of every rank, in rank order
    np.testing.assert_array_equal(exchanged, np.concatenate(blocks))
    np.testing.assert_array_equal(scattered, np.array_split(sum(xs), size)[r])
    np.testing.assert_array_equal(root_x, xs[size - 1])


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
