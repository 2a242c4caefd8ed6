"""A grouped GEMM over problems of different row counts in the language's ragged-batch
form (docs/language.md, "Ragged batches"): the problems' rows concatenated, an offsets
array, one launch; the same results on every target as NumPy's per-problem products."""

from __future__ import annotations

import numpy as np

from tessera import f32, group_id, i64, kernel, mut, tile

BM, BN, BK = 16, 16, 16


@kernel(tile=(64,))
def grouped_gemm(A: f32[rows, K], B: f32[G, K, N], starts: i64[G1], C: mut[f32[rows, N]]):
    p = group_id(0)  # the problem
    row0 = starts[p] + group_id(1) * BM  # this group's rows of it
    end = starts[p + 1]
    n0 = group_id(2) * BN
    if row0 < end:
        acc = tile.zeros((BM, BN), f32)
        for k0 in tile.range(0, K, BK):
            a = tile.load_block(A, (row0, k0), (BM, BK))
            b = tile.load_block(B, (p, k0, n0), (BK, BN))
            acc = tile.dot(a, b, acc)
        r = tile.arange(BM) + row0
        tile.store_block(C, (row0, n0), acc, mask=(r < end)[:, None])


def test_grouped_gemm_over_ragged_problems_matches_each_product(target, rng):
    ms = [5, 40, 0, 17]  # rows per problem: one empty, none a multiple of BM
    k, n = 24, 40
    starts = np.concatenate([[0], np.cumsum(ms)]).astype(np.int64)
    a = rng.standard_normal((starts[-1], k)).astype(np.float32)
    b = rng.standard_normal((len(ms), k, n)).astype(np.float32)
    c = np.full((starts[-1], n), np.nan, np.float32)
    grouped_gemm[len(ms), -(-max(ms) // BM), -(-n // BN)](a, b, starts, c)
    want = np.concatenate([a[starts[i] : starts[i + 1]] @ b[i] for i in range(len(ms))])
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
