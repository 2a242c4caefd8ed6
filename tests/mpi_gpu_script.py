"""Run under ``mpiexec -n N`` (N <= GPUs) on a GPU machine with CuPy: the collectives on
CuPy arrays (the NCCL backend), sharded tensors on GPU ranks, an index launch on the
GPU, an op's result reduced on graph.stream's stream and (where PyTorch is installed)
collectives on CUDA tensors; writes ``ok`` (or the failure) to ``<folder>/rank<r>.txt``.
test_dist_gpu.py runs it."""

from __future__ import annotations

import importlib.util
import sys

import cupy
import numpy as np
from classic_kernels import tp_gemm
from mpi_run import report_outcome

import tessera
from tessera import dist, graph, op


def check() -> None:
    mesh = dist.Mesh(axes=("x",), shape=(dist.size(),))
    n, r = mesh.size("x"), mesh.rank
    assert mesh.device.startswith("cuda:"), mesh.device
    x = cupy.arange(10, dtype=cupy.float32) * (r + 1)
    total = dist.all_reduce(x, axis="x")
    assert isinstance(total, cupy.ndarray)
    expected = np.arange(10, dtype=np.float32) * sum(q + 1 for q in range(n))
    assert np.array_equal(cupy.asnumpy(total), expected)
    exact = dist.all_reduce(x / 3, axis="x", deterministic=True)
    in_order = sum(np.arange(10, dtype=np.float32) * (q + 1) / 3 for q in range(n))
    assert np.allclose(cupy.asnumpy(exact), in_order)
    rows = dist.all_gather(cupy.full((r + 1, 2), r, cupy.int32), axis="x")
    assert cupy.asnumpy(rows)[:, 0].tolist() == [q for q in range(n) for _ in range(q + 1)]
    part = dist.reduce_scatter(cupy.ones(7, cupy.float64), axis="x")
    assert part.size == len(np.array_split(np.arange(7), n)[r]) and bool((part == n).all())
    root = dist.broadcast(cupy.full(3, float(r)), axis="x", root=n - 1)
    assert cupy.asnumpy(root).tolist() == [float(n - 1)] * 3
    coalesced = dist.all_reduce_coalesced([cupy.ones(5), cupy.ones((2, 3))], axis="x")
    assert all(bool((c == n).all()) for c in coalesced)

    rng = np.random.default_rng(1)
    a, b = rng.random((9, 13), dtype=np.float32), rng.random((13, 7), dtype=np.float32)
    tp = dist.Mesh(axes=("tp",), shape=(dist.size(),))  # the axis tp_gemm splits K over
    A = dist.from_global(a, dist.ShardSpec(("col",), ("tp",)), tp)
    B = dist.from_global(b, dist.ShardSpec(("row",), ("tp",)), tp)
    C = dist.zeros((9, 7), dist.ShardSpec(), tp)
    assert isinstance(A.local, cupy.ndarray)
    tessera.index_launch(axis="tp")(tp_gemm)(A.parts("tp"), B.parts("tp"), C.parts("tp"))
    tessera.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(C.local), a @ b, rtol=1e-5)

    # an op on device arrays, its result all-reduced on graph.stream's stream
    da, db = cupy.asarray(a[:, :8]), cupy.asarray(b[:8])
    with tessera.config(target="cuda"), graph.stream("comm"):
        summed = dist.all_reduce(op.matmul(da, db), axis="x", mesh=mesh)
    tessera.synchronize()
    host = summed.copy_to_host() if hasattr(summed, "copy_to_host") else cupy.asnumpy(summed)
    np.testing.assert_allclose(host, n * (a[:, :8] @ b[:8]), rtol=1e-5)

    if importlib.util.find_spec("torch") is not None:  # CUDA tensors in, CUDA tensors out
        import torch

        t = torch.full((4,), float(r + 1), device="cuda")
        out = dist.all_reduce(t, axis="x", mesh=mesh)
        assert isinstance(out, torch.Tensor) and out.is_cuda, type(out)
        assert out.tolist() == [float(sum(q + 1 for q in range(n)))] * 4
        half = dist.all_gather(
            torch.ones(2, dtype=torch.bfloat16, device="cuda"), axis="x", mesh=mesh
        )
        assert half.dtype == torch.bfloat16 and half.shape[0] == 2 * n, half


if __name__ == "__main__":
    report_outcome(check, f"{sys.argv[1]}/rank{dist.rank()}.txt")
