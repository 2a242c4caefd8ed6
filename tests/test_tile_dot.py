"""tile.dot beyond the GEMM loop: edge shapes of the CPU's register blocks, integer
products, a product that replaces one of its inputs, and the CPU's vector code."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera as ts
from tessera import KiB, f32, i8, i32, kernel, mut, tile


@kernel(tile=(16,), shared=64 * KiB)
def product(
    a: f32[M, K],
    b: f32[K, N],
    c: mut[f32[M, N]],
    init: f32[M, N],
    TM: ts.constexpr,
    TK: ts.constexpr,
    TN: ts.constexpr,
):
    x = tile.load_block(a, (0, 0), (TM, TK))
    y = tile.load_block(b, (0, 0), (TK, TN))
    acc = tile.load_block(init, (0, 0), (TM, TN))
    tile.store_block(c, (0, 0), tile.dot(x, y, acc))


# (M, K, N): blocks of 8 rows, then single rows; 32 columns, then 16, then single columns
EDGE_SHAPES = [(8, 4, 32), (13, 7, 45), (5, 3, 61), (1, 1, 1), (17, 9, 16)]


@pytest.mark.parametrize("shape", EDGE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_dot_of_shapes_off_the_register_blocks_matches_numpy(target, rng, shape):
    m, k, n = shape
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    init = rng.standard_normal((m, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    product[1](a, b, c, init, m, k, n)
    want = init.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_dot_is_the_same_bits_on_every_run(rng):
    a = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal((24, 50)).astype(np.float32)
    init = np.zeros((40, 50), np.float32)
    first, again = np.zeros((40, 50), np.float32), np.zeros((40, 50), np.float32)
    product[1](a, b, first, init, 40, 24, 50)
    product[1](a, b, again, init, 40, 24, 50)
    assert np.array_equal(first, again)


@kernel(tile=(16,), shared=16 * KiB)
def int_product(a: i8[19, 40], b: i8[40, 37], c: mut[i32[19, 37]]):
    x = tile.load_block(a, (0, 0), (19, 40))
    y = tile.load_block(b, (0, 0), (40, 37))
    tile.store_block(c, (0, 0), tile.dot(x, y))


def test_i8_tiles_multiply_into_exact_i32(target, rng):
    a = rng.integers(-128, 128, (19, 40), dtype=np.int8)
    b = rng.integers(-128, 128, (40, 37), dtype=np.int8)
    c = np.zeros((19, 37), np.int32)
    int_product[1](a, b, c)
    assert np.array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@kernel(tile=(16,), shared=16 * KiB)
def repeated(x0: f32[16, 16], w: f32[16, 16], out: mut[f32[16, 16]]):
    x = tile.load_block(x0, (0, 0), (16, 16))
    m = tile.load_block(w, (0, 0), (16, 16))
    x = tile.dot(x, m)
    x = tile.dot(m, x)
    tile.store_block(out, (0, 0), x)


def test_a_product_may_replace_one_of_its_inputs(target, rng):
    x0 = rng.standard_normal((16, 16)).astype(np.float32)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    out = np.zeros((16, 16), np.float32)
    repeated[1](x0, w, out)
    x, m = x0.astype(np.float64), w.astype(np.float64)
    np.testing.assert_allclose(out, m @ (x @ m), rtol=1e-4, atol=1e-4)


def test_the_cpu_product_is_packed_fused_multiply_adds(rng):
    """The micro-kernel keeps its results in vector registers: packed FMAs, no scalar."""
    a = np.ones((64, 32), np.float32)
    b = np.ones((32, 64), np.float32)
    init = np.zeros((64, 64), np.float32)
    c = np.zeros((64, 64), np.float32)
    with ts.config(target="cpu"):
        asm = product.inspect("asm", a, b, c, init, 64, 32, 64)
    assert re.search(r"vfmadd\d+ps\s+%[yz]mm", asm)
    assert not re.search(r"vfmadd\d+ss", asm)
