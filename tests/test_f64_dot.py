"""f64 tiles: ``tile.dot`` of f64 tiles into an f64 accumulator, and ``op.matmul`` on f64
arrays, on every target (the CPU's register-blocked FMA micro-kernel, the debug target's
NumPy reference, CUDA's plain register-blocked path; DMMA is not used yet)."""

from __future__ import annotations

import importlib.util
import os
import re
from fractions import Fraction

import numpy as np
import pytest

import tessera
import tessera as ts
from tessera import KiB, f32, f64, graph, group_id, kernel, mut, op, tile
from tessera.kernel.targets.cuda.lowerings import UNROLL_K


@kernel(tile=(32,), shared=64 * KiB)
def gemm(
    A: f64[M, K],
    B: f64[K, N],
    C: mut[f64[M, N]],
    BM: ts.constexpr,
    BN: ts.constexpr,
    BK: ts.constexpr,
):
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f64)
    for k0 in tile.range(0, K, BK):
        a = tile.load_block(A, (m0, k0), (BM, BK))
        b = tile.load_block(B, (k0, n0), (BK, BN))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


def run_gemm(a, b, bm, bn, bk):
    c = np.full((a.shape[0], b.shape[1]), np.nan)
    gemm[(-(-a.shape[0] // bm), -(-b.shape[1] // bn))](a, b, c, bm, bn, bk)
    return c


def assert_f64_close(got, a, b, init=None):
    """Each element within 1e-12 of the size of its sum (|a| @ |b|): f64 products summed
    in any order; an f32 accumulator or f32 operands would miss by about 1e-7."""
    want = a @ b + (0 if init is None else init)
    scale = np.abs(a) @ np.abs(b) + (0 if init is None else np.abs(init))
    assert got.dtype == np.float64
    np.testing.assert_array_less(np.abs(got - want), 1e-12 * scale + 1e-300)


# (M, K, N, BM, BN, BK): whole blocks; blocks past every edge; the CPU's 8-row and
# vector-wide register blocks, then single rows and columns
SHAPES = [
    (64, 64, 64, 32, 32, 16),
    (70, 45, 83, 32, 48, 16),
    (13, 7, 29, 16, 32, 8),
    (1, 1, 1, 8, 8, 8),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_f64_tile_gemm_matches_numpys_f64_matmul(target, rng, shape):
    m, k, n, bm, bn, bk = shape
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    assert_f64_close(run_gemm(a, b, bm, bn, bk), a, b)


def test_f64_keeps_what_f32_would_round_away(target):
    """1 + 1e-10 is 1 in f32: the accumulator, the operands and the products are f64."""
    a = np.array([[1.0, 1e-10, 3.0**-20]])
    b = np.array([[1.0], [1.0], [3.0**-20]])
    assert run_gemm(a, b, 8, 8, 8)[0, 0] == 1.0 + 1e-10 + 3.0**-40


@kernel(tile=(16,), shared=32 * KiB)
def product(
    a: f64[M, K], b: f64[K, N], init: f64[M, N], c: mut[f64[M, N]],
    TM: ts.constexpr, TK: ts.constexpr, TN: ts.constexpr,
):  # fmt: skip
    x = tile.load_block(a, (0, 0), (TM, TK))
    y = tile.load_block(b, (0, 0), (TK, TN))
    acc = tile.load_block(init, (0, 0), (TM, TN))
    tile.store_block(c, (0, 0), tile.dot(x, y, acc))


def in_order(a, b, init, fused):
    """``init + a @ b`` summed over k in order, each step rounded to f64 once (``fused``,
    the CPU's FMA; exact rationals, then one rounding) or twice (product, then sum)."""
    out = init.copy()
    for i, j in np.ndindex(out.shape):
        c = float(out[i, j])
        for k in range(a.shape[1]):
            x, y = float(a[i, k]), float(b[k, j])
            c = float(Fraction(x) * Fraction(y) + Fraction(c)) if fused else c + x * y
        out[i, j] = c
    return out


@pytest.mark.parametrize("shape", [(9, 11, 29), (8, 5, 16), (3, 4, 5)], ids=str)
def test_f64_dot_sums_k_in_order_with_the_targets_rounding(target, rng, shape):
    """TILES.md §3 promises tile.dot a tolerance across targets, not bits; each target's
    order is k ascending: the CPU fuses each step, the debug target (and the CUDA
    simulator's plain path) rounds the product and the sum."""
    m, k, n = shape
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    init = rng.standard_normal((m, n))
    c = np.zeros((m, n))
    product[1](a, b, init, c, m, k, n)
    assert np.array_equal(c, in_order(a, b, init, fused=target == "cpu"))
    assert_f64_close(c, a, b, init)


def test_f64_dot_is_the_same_bits_on_every_run(rng):
    a, b = rng.standard_normal((70, 45)), rng.standard_normal((45, 83))
    first = run_gemm(a, b, 32, 48, 16)
    assert np.array_equal(first, run_gemm(a, b, 32, 48, 16))


def test_f64_dot_takes_an_f64_accumulator_only():
    with pytest.raises(ts.KernelError, match=r"accumulator must be f64"):

        @kernel(tile=(8,))
        def bad(x: f32[n]):
            a = tile.zeros((4, 8), f64)
            tile.dot(a, tile.zeros((8, 4), f64), tile.zeros((4, 4), f32))


def test_f64_and_f32_tiles_do_not_meet_in_a_dot():
    with pytest.raises(ts.KernelError, match=r"f64 and f32"):

        @kernel(tile=(8,))
        def bad(x: f32[n]):
            tile.dot(tile.zeros((4, 8), f64), tile.zeros((8, 4), f32))


# ----------------------------------------------------------------------------- op.matmul


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((100, 70), (70, 90)), ((3, 17, 33), (33, 9)), ((2, 5, 8), (2, 8, 6)), ((1, 1), (1, 1))],
    ids=str,
)
def test_op_matmul_of_f64_arrays_is_f64(target, rng, a_shape, b_shape):
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    c = op.matmul(a, b)
    assert c.dtype == np.float64 and c.shape == np.matmul(a, b).shape
    scale = np.matmul(np.abs(a), np.abs(b))
    np.testing.assert_array_less(np.abs(c - np.matmul(a, b)), 1e-12 * scale + 1e-300)


@graph.module("linear_relu_f64")
def linear_relu(A, B, bias):
    return op.relu(op.matmul(A, B) + bias)


def test_a_fused_f64_linear_layer_is_one_launch_in_f64(target, rng):
    a, b = rng.standard_normal((100, 70)), rng.standard_normal((70, 90))
    bias = rng.standard_normal(90)
    linear_relu(a, b, bias)  # traced and compiled
    before = tessera.stats()["launches"]
    y = linear_relu(a, b, bias)
    assert tessera.stats()["launches"] - before == 1
    assert y.dtype == np.float64
    scale = np.abs(a) @ np.abs(b) + np.abs(bias)
    np.testing.assert_array_less(np.abs(y - np.maximum(a @ b + bias, 0)), 1e-12 * scale + 1e-300)


def test_f64_matmul_does_not_mix_with_f32(rng):
    with pytest.raises(tessera.TesseraError, match="mixes dtypes f64 and f32"):
        op.matmul(rng.standard_normal((4, 4)), np.ones((4, 4), np.float32))


# ----------------------------------------------------------------------------- CUDA PTX


@kernel(tile=(64,), shared=96 * KiB)
def product64(a: f64[M, K], b: f64[K, N], c: mut[f64[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f64)
    for k0 in tile.range(0, K, 32):
        x = tile.load_block(a, (m0, k0), (64, 32))
        acc = tile.dot(x, tile.load_block(b, (k0, n0), (32, 64)), acc)
    tile.store_block(c, (m0, n0), acc)


@kernel(tile=(64,), shared=96 * KiB)
def product64_k8(a: f64[M, K], b: f64[K, N], c: mut[f64[M, N]]):
    m0, n0 = group_id(0) * 64, group_id(1) * 64
    acc = tile.zeros((64, 64), f64)
    for k0 in tile.range(0, K, 8):
        x = tile.load_block(a, (m0, k0), (64, 8))
        acc = tile.dot(x, tile.load_block(b, (k0, n0), (8, 64)), acc)
    tile.store_block(c, (m0, n0), acc)


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
def test_the_cuda_f64_dot_is_dfma_on_registers_off_the_dmma_loop():
    """The plain path (k blocks of 8: rows too short for the DMMA loop's staging): each
    lane's 8 x 8 f64 accumulators stay in registers, one ``fma.rn.f64`` each per step of
    k, nothing in local memory (a spill is ld.local). The same loop with k blocks of 32
    runs on DMMA (tests/test_cuda_mainloop.py)."""
    a, b, c = (np.zeros((128, 128)) for _ in range(3))
    ptx = product64_k8.inspect("ptx", a, b, c, grid=(2, 2), arch="sm_90")
    fmas = len(re.findall(r"\bfma\.rn\.f64\b", ptx))
    assert fmas >= 64 * UNROLL_K and fmas % 64 == 0 and "mma.sync" not in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx
    ptx = product64.inspect("ptx", a, b, c, grid=(2, 2), arch="sm_90")
    assert "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64" in ptx


def test_f64_attention_shaped_graphs_stay_f64_products(target, rng):
    """``softmax(q @ k.T * c) @ v`` in f64 is not folded into the (f32) flash kernel: two
    f64 products and a softmax, as NumPy computes it."""

    @graph.module("attention_f64")
    def attend(q, k, v):
        return op.matmul(op.softmax(op.matmul(q, k.T) * 0.125), v)

    q, k, v = (rng.standard_normal((40, 16)) for _ in range(3))
    s = q @ k.T * 0.125
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = p / p.sum(axis=1, keepdims=True) @ v
    got = attend(q, k, v)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_the_f64_matmul_adjoint_matches_finite_differences(rng):
    """The gradient of a product is two products: in f64 they meet central differences as
    closely as every other op's adjoint (tests/test_ops_grad.py)."""
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    probe = rng.standard_normal((5, 3))

    def loss(a, b):
        return op.sum(op.matmul(a, b) * probe)

    ga, gb = graph.grad(loss, argnums=(0, 1))(a, b)
    assert ga.dtype == gb.dtype == np.float64
    for i, g in enumerate((ga, gb)):
        want = np.zeros_like(g)
        x = (a, b)[i]
        for j in np.ndindex(x.shape):
            saved = x[j]
            x[j] = saved + 1e-6
            up = np.sum(a @ b * probe)
            x[j] = saved - 1e-6
            down = np.sum(a @ b * probe)
            x[j] = saved
            want[j] = (up - down) / 2e-6
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
