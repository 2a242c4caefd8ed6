"""The classic kernels of classic_kernels.py, checked against NumPy on every target.

Sizes are deliberately not multiples of the group size, so every kernel's tail guard is
exercised. Where the kernel's arithmetic order is fixed (elementwise work, the hand
written trees, the scans), the reference reproduces it in float32 and the comparison is
bit for bit; otherwise it is a tolerance check against a float64 reference.
"""

from __future__ import annotations

import classic_kernels as ck
import numpy as np
import pytest


def cdiv(a, b):
    return -(-a // b)


def bits(a):
    """The raw bits of a float array, for bit-exact comparisons that see -0.0 and NaN."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def test_scale_matches_numpy_and_ignores_extra_tiles(target, rng):
    n = 1001
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n + 3, 7.0, np.float32)  # the 3 extra elements are outside y[:n]
    ck.scale[n + 13](x, y[:n], 1.75)
    np.testing.assert_array_equal(bits(y[:n]), bits(np.float32(1.75) * x))
    np.testing.assert_array_equal(y[n:], np.float32(7.0))


def test_axpy_matches_numpy_bitwise(target, rng):
    n = 777
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    expected = np.float32(-0.3) * x + y
    ck.axpy[n](x, y, -0.3)
    np.testing.assert_array_equal(bits(y), bits(expected))


def test_group_sum_partials_add_up(target, rng):
    n, groups = 10_037, 6
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(groups, np.nan, np.float32)
    ck.group_sum[groups](x, out)
    # group g sums the elements whose index lies in a 128-wide slot owned by g
    owner = (np.arange(n) // 128) % groups
    ref = np.array([x[owner == g].astype(np.float64).sum() for g in range(groups)])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


def _tree_block_sums(x, block):
    """block_reduce_tree's order: pad to whole blocks, then s[:h] += s[h:2h], h halving."""
    g = cdiv(x.size, block)
    s = np.zeros((g, block), np.float32)
    s.reshape(-1)[: x.size] = x
    h = block // 2
    while h > 0:
        s[:, :h] = s[:, :h] + s[:, h : 2 * h]
        h //= 2
    return s[:, 0].copy()


def test_block_reduce_tree_bitwise(target, rng):
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    g = cdiv(n, 256)
    partial = np.full(g, np.nan, np.float32)
    ck.block_reduce_tree[g](x, partial)
    np.testing.assert_array_equal(bits(partial), bits(_tree_block_sums(x, 256)))


@pytest.mark.parametrize("m, n", [(37, 50), (16, 16), (1, 33)])
def test_transpose(target, rng, m, n):
    a = rng.standard_normal((m, n)).astype(np.float32)
    out = np.full((n, m), np.nan, np.float32)
    ck.transpose[(cdiv(m, 16), cdiv(n, 16))](a, out)
    np.testing.assert_array_equal(out, a.T)


def test_transpose_of_non_contiguous_view(target, rng):
    base = rng.standard_normal((40, 60)).astype(np.float32)
    a = base[::2, 1::3]  # (20, 20), strided in both axes
    out = np.zeros((20, 20), np.float32)
    ck.transpose[(2, 2)](a, out)
    np.testing.assert_array_equal(out, a.T)


def test_matmul_bitwise_with_sequential_k(target, rng):
    M, K, N = 37, 45, 29
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    matmul_grid = (cdiv(M, 16), cdiv(N, 16))
    ck.matmul[matmul_grid](a, b, c)
    # each lane accumulates acc += a[r, k] * b[k, c] for k = 0..K-1 in order, in f32
    acc = np.zeros((M, N), np.float32)
    for k in range(K):
        acc = acc + a[:, k : k + 1] * b[k : k + 1, :]
    np.testing.assert_array_equal(bits(c), bits(acc))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_prefix_scan_per_block_bitwise(target, rng):
    n = 700
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    g = cdiv(n, 256)
    ck.prefix_scan[g](x, out)
    s = np.zeros((g, 256), np.float32)
    s.reshape(-1)[:n] = x
    offset = 1
    while offset < 256:  # Hillis-Steele: v = s[lane] + s[lane - offset]
        v = s.copy()
        v[:, offset:] = s[:, offset:] + s[:, :-offset]
        s = v
        offset *= 2
    np.testing.assert_array_equal(bits(out), bits(s.reshape(-1)[:n]))
    ref = np.concatenate([np.cumsum(x[i : i + 256], dtype=np.float64) for i in range(0, n, 256)])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_histogram_counts_and_skips_out_of_range(target, rng):
    n, bins = 5003, 17
    x = rng.integers(-3, bins + 3, n).astype(np.int32)
    hist = np.arange(bins, dtype=np.int32)  # accumulates onto what is there
    ck.histogram[n](x, hist)
    valid = x[(x >= 0) & (x < bins)]
    np.testing.assert_array_equal(hist, np.arange(bins) + np.bincount(valid, minlength=bins))


def test_softmax_rows(target, rng):
    rows, cols = 5, 300
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    y = np.full_like(x, np.nan)
    ck.softmax_rows[rows](x, y)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)


def test_stencil5_bitwise_and_border_copied(target, rng):
    h, w = 13, 21
    u = rng.standard_normal((h, w)).astype(np.float32)
    out = np.full_like(u, np.nan)
    ck.stencil5[(h + 2, w + 3)](u, out)  # extra tiles must do nothing
    ref = u.copy()
    ref[1:-1, 1:-1] = np.float32(0.25) * (
        ((u[:-2, 1:-1] + u[2:, 1:-1]) + u[1:-1, :-2]) + u[1:-1, 2:]
    )
    np.testing.assert_array_equal(bits(out), bits(ref))


@pytest.mark.parametrize("m, groups", [(1000, 2), (1500, 2), (300, 1), (512, 1)])
def test_axpy_tiled_f16_bit_exact(target, rng, m, groups):
    """Each group covers 4 chunks of 128 = 512 elements; the rest of Y is untouched."""
    X = rng.standard_normal(m).astype(np.float16)
    Y0 = rng.standard_normal(m).astype(np.float16)
    Y = Y0.copy()
    alpha = 0.3  # not representable: it is rounded to f16 at the launch
    ck.axpy_tiled[groups](X, Y, alpha)
    covered = min(m, groups * 512)
    full = (np.float32(np.float16(alpha)) * X.astype(np.float32) + Y0.astype(np.float32)).astype(
        np.float16
    )
    np.testing.assert_array_equal(bits(Y[:covered]), bits(full[:covered]))
    np.testing.assert_array_equal(bits(Y[covered:]), bits(Y0[covered:]))
