"""Attention forward, one head, with the online softmax of flash attention.

Each group owns BM rows of queries and walks over the keys and values in blocks of BN:
the scores of a block are one ``tile.dot``, the running row maximum and row sum are
rescaled as larger scores arrive, and the output accumulates ``p @ v`` block by block.
Memory beyond the inputs and the output is O(BM * d) per group, never the N x N scores.

    python examples/flash_attention.py
"""

from __future__ import annotations

import math

import numpy as np

import tessera as ts
from tessera import KiB, f32, group_id, kernel, mut, tile


@kernel(tile=(64,), shared=48 * KiB)
def attention(
    q: f32[N, 64],
    k: f32[N, 64],
    v: f32[N, 64],
    o: mut[f32[N, 64]],
    scale: f32,
    BM: ts.constexpr,
    BN: ts.constexpr,
):
    m0 = group_id(0) * BM
    qb = tile.load_block(q, (m0, 0), (BM, 64))
    row_max = tile.full((BM,), -math.inf, f32)
    row_sum = tile.zeros((BM,), f32)
    acc = tile.zeros((BM, 64), f32)
    for n0 in tile.range(0, N, BN):
        kb = tile.load_block(k, (n0, 0), (BN, 64))
        vb = tile.load_block(v, (n0, 0), (BN, 64))
        s = tile.dot(qb, kb.T) * scale
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p, vb)
        row_max = new_max
    tile.store_block(o, (m0, 0), acc / row_sum[:, None])


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    s = (q @ k.T) * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def main() -> None:
    rng = np.random.default_rng(0)
    n, d, bm, bn = 256, 64, 32, 32
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
    o = np.zeros_like(q)
    scale = 1 / math.sqrt(d)
    attention[n // bm](q, k, v, o, scale, bm, bn)
    want = reference(q, k, v, scale)
    assert np.allclose(o, want, rtol=1e-4, atol=1e-5), np.abs(o - want).max()
    print(f"flash attention N={n} d={d}: max error {np.abs(o - want).max():.2e}")


if __name__ == "__main__":
    main()
