"""Tensor-parallel GEMM: C = A @ B with the K dimension split over mesh axis ``tp``.

Each rank multiplies its K-slice of A by its K-slice of B: a partial C. The signature
says so (``C: reduce_sum[...]``), and the index launch adds the collective that sums the
partials: an all_reduce when C is replicated over ``tp``, a reduce_scatter when C is
split over ``tp`` (here by columns).

Run: tessera run -n 2 examples/tp_gemm.py     (or: mpiexec -n 2 python examples/tp_gemm.py;
alone, it is a world of one and the collectives are copies)
"""

from __future__ import annotations

import numpy as np

import tessera
from tessera import dist, f32, kernel, reduce_sum, tile


@kernel
def tp_gemm(A: f32[M, K / tp], B: f32[K / tp, N], C: reduce_sum[f32[M, N]]):
    i, j = tile.id(0), tile.id(1)
    acc = f32(0)
    for k in range(A.shape[1]):  # this rank's slice of K
        acc += A[i, k] * B[k, j]
    C[i, j] = acc


def main() -> None:
    mesh = dist.Mesh(axes=("tp",), shape=(dist.size(),))
    rng = np.random.default_rng(0)  # every rank draws the same global A and B
    a = rng.random((64, 96), dtype=np.float32)
    b = rng.random((96, 40), dtype=np.float32)
    A = dist.from_global(a, dist.ShardSpec(("col",), ("tp",)), mesh)
    B = dist.from_global(b, dist.ShardSpec(("row",), ("tp",)), mesh)

    replicated = dist.zeros((64, 40), dist.ShardSpec(), mesh)
    launch = tessera.index_launch(axis="tp")(tp_gemm)
    if mesh.rank == 0:
        print(launch.plan(A.parts("tp"), B.parts("tp"), replicated.parts("tp")))
    launch(A.parts("tp"), B.parts("tp"), replicated.parts("tp"))
    assert np.allclose(replicated.local, a @ b, rtol=1e-4)

    by_columns = dist.zeros((64, 40), dist.ShardSpec(("col",), ("tp",)), mesh)
    launch(A.parts("tp"), B.parts("tp"), by_columns.parts("tp"))
    assert np.allclose(by_columns.gather(), a @ b, rtol=1e-4)
    if mesh.rank == 0:
        print(f"tp_gemm on {mesh.size('tp')} ranks matches A @ B (all_reduce and reduce_scatter)")


if __name__ == "__main__":
    main()
