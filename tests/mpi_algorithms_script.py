"""Run under ``mpiexec -n 2``, ``-n 3`` or ``-n 4``: every collective algorithm
(tessera/mesh/algorithms.py) against the library's result and NumPy; writes ``ok`` (or the
failure) to ``<folder>/rank<r>.txt``."""

from __future__ import annotations

import sys

import numpy as np
from mpi_run import report_outcome

from tessera import TesseraError, dist
from tessera.mesh import link_cost


def data(rank: int, shape, dtype) -> np.ndarray:
    rng = np.random.default_rng(rank)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.3
    return rng.integers(-50, 50, shape).astype(dtype)


def check() -> None:
    mesh = dist.Mesh(axes=("x",), shape=(dist.size(),))
    r, n = mesh.rank, mesh.size("x")
    everyone = lambda shape, dtype: [data(i, shape, dtype) for i in range(n)]  # noqa: E731

    # integers: every algorithm gives the library's sums exactly (no rounding to differ)
    for shape in [(7,), (1000, 3), (1,), (2, 5)]:
        for op, fold in (("sum", np.add), ("max", np.maximum), ("min", np.minimum)):
            want = fold.reduce(np.stack(everyone(shape, np.int64)), axis=0)
            for algorithm in ("library", "ring", "rd", "tree", "auto"):
                got = dist.all_reduce(data(r, shape, np.int64), "x", op, algorithm=algorithm)
                np.testing.assert_array_equal(got, want, err_msg=f"{algorithm} {op} {shape}")

    # floats: within rounding of NumPy's sum; every rank holds the same bits
    for algorithm in ("ring", "rd", "tree"):
        got = dist.all_reduce(data(r, (4099,), np.float32), "x", algorithm=algorithm)
        want = np.stack(everyone((4099,), np.float32)).sum(axis=0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        same = dist.all_gather(got[None], "x")
        assert all(np.array_equal(same[0], row) for row in same), algorithm

    # 16-bit floats reduce in f32 and bools as bytes, as through the library
    half = dist.all_reduce(data(r, (33,), np.float16), "x", algorithm="ring")
    np.testing.assert_array_equal(half, dist.all_reduce(data(r, (33,), np.float16), "x"))
    flags = dist.all_reduce(data(r, (20,), np.bool_), "x", "max", algorithm="tree")
    np.testing.assert_array_equal(flags, np.logical_or.reduce(everyone((20,), np.bool_)))

    # reduce_scatter (uneven blocks of dim 1) and all_gather (blocks of different lengths)
    for algorithm in ("ring", "rd"):
        x = data(r, (3, 2 * n + 1), np.int32)
        got = dist.reduce_scatter(x, "x", dim=1, algorithm=algorithm)
        total = np.stack(everyone((3, 2 * n + 1), np.int32)).sum(axis=0)
        np.testing.assert_array_equal(got, np.array_split(total, n, axis=1)[r])
        mine = data(r, (r + 1, 2), np.float64)
        got = dist.all_gather(mine, "x", algorithm=algorithm)
        np.testing.assert_array_equal(
            got, np.concatenate([data(i, (i + 1, 2), np.float64) for i in range(n)])
        )
        # f32 sums of rd's halving: within rounding of NumPy's
        got = dist.reduce_scatter(data(r, (4 * n + 3,), np.float32), "x", algorithm=algorithm)
        want = np.array_split(np.stack(everyone((4 * n + 3,), np.float32)).sum(0), n)[r]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    mine = data(r, (r + 1, 2), np.float64)
    got = dist.all_gather(mine, "x", algorithm="ring")
    np.testing.assert_array_equal(
        got, np.concatenate([data(i, (i + 1, 2), np.float64) for i in range(n)])
    )

    # broadcast down a tree from every root, large enough for several chunks
    for root in range(n):
        got = dist.broadcast(data(r, (50_000,), np.float32), "x", root=root, algorithm="tree")
        np.testing.assert_array_equal(got, data(root, (50_000,), np.float32))

    # in flight at once: each collective's messages stay its own
    works = [
        dist.all_reduce(
            data(r + k, (257,), np.int64),
            "x",
            async_op=True,
            algorithm=("ring", "rd", "tree")[k % 3],
        )
        for k in range(6)
    ]
    for k, w in enumerate(works):
        assert w.algorithm == ("ring", "rd", "tree")[k % 3]
        want = np.stack([data(i + k, (257,), np.int64) for i in range(n)]).sum(axis=0)
        np.testing.assert_array_equal(w.wait(), want)

    # deterministic mode keeps the rank order: a reordering algorithm is an error
    try:
        dist.all_reduce(np.ones(3), "x", deterministic=True, algorithm="ring")
        raise AssertionError("no error")
    except TesseraError as exc:
        assert "deterministic reduces in rank order; ring would change the order" in str(exc)
    dist.barrier()

    # measured links: one class here (every rank on this node), fitted and used by auto
    topo = dist.topology(mesh, measure=True)
    assert [k for k, _, _ in topo.measured] == ["shm"], topo.measured
    ((_, alpha, beta),) = topo.measured
    # (either fit may be 0 on a loaded machine: an oversubscribed ping-pong's small
    # messages can take as long as its large ones)
    assert alpha >= 0 and beta >= 0, (alpha, beta)
    assert link_cost.parameters("shm") == (alpha, beta), (link_cost.parameters("shm"), alpha, beta)
    assert topo.to_dict()["alpha_beta"]["shm"]["alpha_s"] == alpha


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
