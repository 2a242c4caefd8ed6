"""Grouped GEMMs in the language's ragged-batch forms (docs/language.md, "Ragged
batches"): problems of different row counts (their rows concatenated, an offsets array)
and problems of different m, n and k (packed operands, gathers and scatters), one launch
each; the same results on every target as NumPy's per-problem products."""

from __future__ import annotations

import numpy as np
from test_language_docs import _section

from tessera import f32, group_id, i64, kernel, mut, tile

BM, BN, BK = 16, 16, 16
RAGGED = "Ragged batches: a grouped GEMM"


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


def _packed(arrays) -> tuple[np.ndarray, np.ndarray]:
    """The arrays' elements one after another (row-major) and where each one starts."""
    starts = np.concatenate([[0], np.cumsum([a.size for a in arrays])]).astype(np.int64)
    return np.concatenate([a.ravel() for a in arrays]), starts[:-1]


def test_grouped_gemm_over_problems_of_different_m_n_and_k_matches_each_product(target, rng):
    shapes = [(5, 24, 24), (24, 7, 3), (0, 8, 8), (17, 20, 50), (3, 0, 5), (9, 9, 0)]
    a_list = [rng.standard_normal((m, k)).astype(np.float32) for m, _, k in shapes]
    b_list = [rng.standard_normal((k, n)).astype(np.float32) for _, n, k in shapes]
    a, a_starts = _packed(a_list)
    b, b_starts = _packed(b_list)
    c, c_starts = _packed([np.full((m, n), np.nan, np.float32) for m, n, _ in shapes])
    starts = np.stack([a_starts, b_starts, c_starts], axis=1)
    grid = (
        len(shapes),
        -(-max(m for m, _, _ in shapes) // BM),
        -(-max(n for _, n, _ in shapes) // BN),
    )
    ragged_gemm = _section(RAGGED, BM=BM, BN=BN, BK=BK)["ragged_gemm"]  # docs/language.md's
    ragged_gemm[grid](a, b, np.array(shapes, np.int64), starts, c)
    for (m, n, _), start, x, y in zip(shapes, c_starts, a_list, b_list):
        got = c[start : start + m * n].reshape(m, n)
        np.testing.assert_allclose(got, x @ y, rtol=1e-5, atol=1e-5)  # k = 0: zeros
