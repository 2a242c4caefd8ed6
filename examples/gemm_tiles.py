"""GEMM with a fused bias + ReLU epilogue, written with tile values.

Each group computes one BM x BN block of C: it loads blocks of A and B, multiplies them
with ``tile.dot`` into an f32 accumulator, adds the bias row and applies ReLU before the
single store. Edges need no special code: a block read past the end of an array reads 0,
and a block store writes only the elements inside C.

    python examples/gemm_tiles.py
"""

from __future__ import annotations

import numpy as np

import tessera as ts
from tessera import KiB, f32, group_id, kernel, mut, tile


@kernel(tile=(64,), shared=32 * KiB)
def linear_relu(
    A: f32[M, K],
    B: f32[K, N],
    bias: f32[N],
    C: mut[f32[M, N]],
    BM: ts.constexpr,
    BN: ts.constexpr,
    BK: ts.constexpr,
):
    m0 = group_id(0) * BM
    n0 = group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, BK):
        a = tile.load_block(A, (m0, k0), (BM, BK))
        b = tile.load_block(B, (k0, n0), (BK, BN))
        acc = tile.dot(a, b, acc)
    y = acc + tile.load_block(bias, (n0,), (BN,))[None, :]
    tile.store_block(C, (m0, n0), max(y, 0.0))


def main() -> None:
    rng = np.random.default_rng(0)
    m, k, n, bm, bn, bk = 100, 72, 90, 32, 32, 16
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    linear_relu[(-(-m // bm), -(-n // bn))](a, b, bias, c, bm, bn, bk)
    want = np.maximum(a @ b + bias, 0)
    assert np.allclose(c, want, rtol=1e-4, atol=1e-4), np.abs(c - want).max()
    print(f"linear + ReLU {m}x{k} @ {k}x{n} with tile.dot: max error {np.abs(c - want).max():.2e}")


if __name__ == "__main__":
    main()
