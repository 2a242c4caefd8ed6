"""Tile values: block loads and stores, elementwise math with broadcasting, tile.dot and
reductions, the same bits on every target."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera as ts
from tessera import KiB, cp_async, f16, f32, group_id, i32, kernel, mut, tbarrier, tile, tshared


@kernel(tile=(32,), shared=16 * KiB)
def gemm(A: f32[M, K], B: f32[K, N], C: mut[f32[M, N]], BM: ts.constexpr, BK: ts.constexpr):
    m0 = group_id(0) * BM
    n0 = group_id(1) * BM
    acc = tile.zeros((BM, BM), f32)
    for k0 in tile.range(0, K, BK):
        a = tile.load_block(A, (m0, k0), (BM, BK))
        b = tile.load_block(B, (k0, n0), (BK, BM))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(16,))
def elementwise(x: f32[R, 8], v: f32[8], out: mut[f32[R, 8]], out_t: mut[f32[8, R]]):
    t = tile.load_block(x, (group_id(0) * 4, 0), (4, 8))
    row = tile.load_block(v, (0,), (8,))
    y = tile.where(t > 0.0, t * 2.0 - row[None, :], -t)
    tile.store_block(out, (group_id(0) * 4, 0), max(y, row[None, :]).astype(f16).astype(f32))
    tile.store_block(out_t, (0, group_id(0) * 4), y.T)


@kernel(tile=(8,))
def reductions(x: f32[4, 6], rows: mut[f32[4]], cols: mut[f32[6]], total: mut[f32[1]]):
    t = tile.load_block(x, (0, 0), (4, 6))
    tile.store_block(rows, (0,), t.sum(axis=1))
    tile.store_block(cols, (0,), t.max(axis=0))
    s = t.sum()
    if tile.linear_id() == 0:
        total[0] = s


@kernel(tile=(8,))
def edges(x: f32[n], out: mut[f32[m]], lane_reads: mut[f32[8]]):
    t = tile.load_block(x, (n - 3,), (8,), other=-1.0)
    tile.store_block(out, (m - 5,), t + tile.arange(8).astype(f32))
    lane = tile.linear_id()
    lane_reads[lane] = t[7 - lane]


@kernel(tile=(32,))
def half_dot(a: f16[16, 8], b: f16[8, 16], c: mut[f32[16, 16]]):
    x = tile.load_block(a, (0, 0), (16, 8))
    y = tile.load_block(b, (0, 0), (8, 16))
    tile.store_block(c, (0, 0), tile.dot(x, y))


@kernel(tile=(16,))
def softmax_rows(x: f32[R, 64], out: mut[f32[R, 64]]):
    r0 = group_id(0) * 4
    t = tile.load_block(x, (r0, 0), (4, 64), other=-math.inf)
    e = math.exp(t - t.max(axis=1)[:, None])
    tile.store_block(out, (r0, 0), e / e.sum(axis=1)[:, None])


def _dot_in_order(a, b, acc, fused=False):
    """acc + a @ b with each element summed over k in order, in f32 (every target's order
    for tile.dot); ``fused``: each step one fused multiply-add (the CPU's micro-kernel;
    an f32 product is exact in f64, so only the sum is rounded, once, to f32)."""
    out = acc.astype(np.float32).copy()
    for k in range(a.shape[1]):
        product = a[:, k : k + 1].astype(np.float64) * b[k : k + 1, :].astype(np.float64)
        if fused:
            out = (out.astype(np.float64) + product).astype(np.float32)
        else:
            out = (out + product.astype(np.float32)).astype(np.float32)
    return out


def _tree(values: np.ndarray, combine) -> np.float32:
    s = list(values)
    p = 1
    while p * 2 <= len(s):
        p *= 2
    for i in range(len(s) - p):
        s[i] = combine(s[i], s[i + p])
    h = p // 2
    while h >= 1:
        for i in range(h):
            s[i] = combine(s[i], s[i + h])
        h //= 2
    return s[0]


def test_tile_gemm_sums_k_in_order_on_every_target(target, rng):
    """The order is k ascending everywhere; the CPU fuses each multiply-add (TILES.md §3
    leaves tile.dot's rounding to the backend)."""
    a = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal((24, 40)).astype(np.float32)
    c = np.zeros((40, 40), np.float32)
    gemm[(3, 3)](a, b, c, 16, 8)
    pa = np.zeros((48, 24), np.float32)
    pa[:40] = a
    pb = np.zeros((24, 48), np.float32)
    pb[:, :40] = b
    want = np.zeros((48, 48), np.float32)
    for m0 in range(0, 48, 16):
        for n0 in range(0, 48, 16):
            acc = np.zeros((16, 16), np.float32)
            for k0 in range(0, 24, 8):
                acc = _dot_in_order(
                    pa[m0 : m0 + 16, k0 : k0 + 8],
                    pb[k0 : k0 + 8, n0 : n0 + 16],
                    acc,
                    fused=target == "cpu",
                )
            want[m0 : m0 + 16, n0 : n0 + 16] = acc
    assert np.array_equal(c, want[:40, :40])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_elementwise_tiles_broadcast_convert_and_transpose(target, rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)
    v = rng.standard_normal(8).astype(np.float32)
    out, out_t = np.zeros_like(x), np.zeros((8, 8), np.float32)
    elementwise[2](x, v, out, out_t)
    y = np.where(x > 0, (x * np.float32(2) - v[None, :]).astype(np.float32), -x)
    want = np.maximum(y, v[None, :]).astype(np.float16).astype(np.float32)
    assert np.array_equal(out, want)
    assert np.array_equal(out_t, y.T)


def test_tile_reductions_use_the_fixed_tree(target, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    rows, cols, total = np.zeros(4, np.float32), np.zeros(6, np.float32), np.zeros(1, np.float32)
    reductions[1](x, rows, cols, total)

    def add(p, q):
        return np.float32(p + q)

    assert np.array_equal(rows, [_tree(r, add) for r in x])
    assert np.array_equal(cols, x.max(axis=0))
    assert total[0] == _tree(x.ravel(), add)


def test_blocks_past_the_edges_read_other_and_write_nothing(target):
    x = np.arange(10, dtype=np.float32)
    out = np.full(7, 99.0, np.float32)
    lane_reads = np.zeros(8, np.float32)
    edges[1](x, out, lane_reads)
    t = np.array([7, 8, 9, -1, -1, -1, -1, -1], np.float32)
    assert np.array_equal(out, [99, 99, 7, 9, 11, 2, 3])
    assert np.array_equal(lane_reads, t[::-1])


def test_half_inputs_multiply_into_f32(target, rng):
    a = rng.standard_normal((16, 8)).astype(np.float16)
    b = rng.standard_normal((8, 16)).astype(np.float16)
    c = np.zeros((16, 16), np.float32)
    half_dot[1](a, b, c)
    zero = np.zeros((16, 16), np.float32)
    assert np.array_equal(c, _dot_in_order(a.astype(np.float32), b.astype(np.float32), zero))


def test_softmax_with_tiles_matches_numpy(target, rng):
    x = rng.standard_normal((8, 64)).astype(np.float32)
    out = np.zeros_like(x)
    softmax_rows[2](x, out)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-6, atol=1e-7)


def test_dot_with_mismatched_inner_dims_names_both_shapes():
    with pytest.raises(ts.KernelError, match=r"\(4, 8\) and \(6, 4\)"):

        @kernel(tile=(8,))
        def bad(x: f32[n]):
            a = tile.zeros((4, 8), f32)
            b = tile.zeros((6, 4), f32)
            tile.dot(a, b)


def test_a_tile_statement_under_lane_dependent_control_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="group collective"):

        @kernel(tile=(8,))
        def divergent(x: f32[n], y: mut[f32[n]]):
            if tile.linear_id() < 4:
                tile.store_block(y, (0,), tile.load_block(x, (0,), (8,)))


def test_a_tile_made_from_a_lane_value_names_the_variable():
    with pytest.raises(ts.KernelError, match="reads 'v', which differs between the lanes"):

        @kernel(tile=(8,))
        def varying(x: f32[n], y: mut[f32[n]]):
            v = x[tile.linear_id()]
            t = tile.full((8,), v)
            tile.store_block(y, (0,), t)


def test_tiles_need_a_grouped_kernel():
    with pytest.raises(ts.KernelError, match="needs a grouped kernel"):

        @kernel
        def flat(y: mut[f32[n]]):
            tile.store_block(y, (0,), tile.zeros((4,), f32))


def test_a_tile_shape_must_be_constant():
    with pytest.raises(ts.KernelError, match="shape must be constant"):

        @kernel(tile=(8,))
        def sized(y: mut[f32[n]]):
            tile.store_block(y, (0,), tile.zeros((n,), f32))


def test_a_tile_used_where_a_value_is_needed_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="a single value is needed here"):

        @kernel(tile=(8,))
        def mixed(y: mut[f32[n]]):
            t = tile.zeros((8,), f32)
            y[0] = t


def test_integer_tiles_wrap_like_integer_scalars(target):
    @kernel(tile=(4,))
    def ints(y: mut[i32[n]]):
        t = tile.full((4,), 2**30, i32)
        tile.store_block(y, (0,), t + t + tile.arange(4).astype(i32))

    y = np.zeros(4, np.int32)
    ints[1](y)
    assert np.array_equal(y, (np.int64(2**31) + np.arange(4) - 2**32).astype(np.int32))


@kernel(tile=(16,), shared=4 * KiB)
def staged(A: f32[M, K], out: mut[f32[M, K]]):
    s = tshared.alloc[f32]((8, 8))
    r0 = group_id(0) * 8
    c0 = group_id(1) * 8
    cp_async.shared.global_(s, A[r0 : r0 + 8, c0 : c0 + 8])
    tbarrier()
    t = tile.load_block(s, (0, 0), (8, 8))
    tile.store_block(out, (r0, c0), t * 2.0)


def test_a_2d_async_copy_stages_a_block_that_a_tile_reads(target):
    a = np.arange(12 * 20, dtype=np.float32).reshape(12, 20)
    out = np.zeros_like(a)
    staged[(2, 3)](a, out)
    assert np.array_equal(out, a * 2)


def test_a_tile_larger_than_the_groups_budget_names_the_tile_and_the_budget():
    with pytest.raises(ts.KernelError, match=r"tile 'big' .* needs 65536 bytes .* 16384 bytes"):

        @kernel(tile=(8,), shared=16 * KiB)
        def too_big(y: mut[f32[n]]):
            big = tile.zeros((128, 128), f32)
            tile.store_block(y, (0,), big.sum(axis=0))
