"""Helpers that take and return tiles, as ported Triton kernels write them: constexpr
parameters usable as tile shapes, ``if FLAG:`` on a constant parameter keeping one branch,
and no element-by-element copies for parameters the helper only reads or for the tuple
it returns (passes/copies.py, passes/fold.py ``constant_shapes``)."""

from __future__ import annotations

import numpy as np

import tessera as ts
from tessera import f32, group_id, i64, kernel, mut, tile


@ts.func
def scaled_rows(x, base, scale, BM: ts.constexpr, MASK: ts.constexpr):
    rows = base + tile.arange(BM)  # BM: a constexpr of the caller, as a shape
    t = tile.load_block(x, (base, 0), (BM, 8)) * scale
    if MASK:
        t = tile.where(rows[:, None] % 2 == 0, t, 0.0)
    return t


@kernel(tile=(8,))
def rows_kernel(x: f32[n, 8], y: mut[f32[n, 8]], BLOCK: ts.constexpr, MASKED: ts.constexpr):
    half = BLOCK // 2  # a local computed from constexprs, as a shape
    base = group_id(0) * BLOCK
    top = scaled_rows(x, base, 2.0, half, MASKED)
    bottom = scaled_rows(x, base + half, 3.0, half, False)
    tile.store_block(y, (base, 0), top)
    tile.store_block(y, (base + half, 0), bottom)


def rows_reference(x, block, masked):
    y = x.copy()
    for base in range(0, len(x), block):
        half = block // 2
        y[base : base + half] *= 2
        if masked:
            rows = np.arange(base, base + half)
            y[base : base + half][rows % 2 == 1] = 0
        y[base + half : base + block] *= 3
    return y


def test_a_helper_takes_a_constexpr_as_a_tile_shape(target, rng):
    x = rng.standard_normal((32, 8)).astype(np.float32)
    for masked in (True, False):
        y = np.zeros_like(x)
        rows_kernel[4](x, y, 8, masked)
        np.testing.assert_array_equal(y, rows_reference(x, 8, masked))


def test_a_constant_flag_parameter_keeps_one_branch():
    x = np.zeros((32, 8), np.float32)
    y = np.zeros_like(x)
    text = rows_kernel.inspect("copies", x, y, 8, False)
    assert "tile.where" not in text  # MASK is False everywhere: the branch is gone
    text = rows_kernel.inspect("copies", x, y, 8, True)
    assert text.count("tile.where") == 1  # only the first call's


@ts.func
def accumulate(acc, k, v, steps):
    for i in tile.range(0, steps):
        acc = acc + k * v + i
    return acc, k * 2.0


@kernel(tile=(8,))
def carried(x: f32[n], y: mut[f32[n]], z: mut[f32[n]]):
    base = group_id(0) * 8
    a = tile.load_block(x, (base,), (8,))
    b = a * 0.5
    a, b2 = accumulate(a, b, b, 3)  # a updated by the helper, b only read
    tile.store_block(y, (base,), a)
    tile.store_block(z, (base,), b2 + b)


def test_a_helper_updating_a_tile_and_returning_a_pair_gives_python_results(target, rng):
    x = rng.standard_normal(16).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros_like(x)
    carried[2](x, y, z)
    b = x * np.float32(0.5)
    want = x.copy()
    for i in range(3):
        want = want + b * b + np.float32(i)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    np.testing.assert_array_equal(z, b * 2 + b)


def tile_copies(text: str) -> list[str]:
    """The lines of an IR listing that copy one tile variable into another."""
    return [
        line
        for line in text.splitlines()
        if " = " in line
        and line.split(" = ", 1)[1].split("  #")[0].endswith(":tile f32[8]")
        and line.split(" = ", 1)[1].split(":")[0].isidentifier()
    ]


def test_a_returned_pair_and_read_only_parameters_are_not_copied():
    x = np.zeros(16, np.float32)
    before = tile_copies(carried.inspect("webs", x, x.copy(), x.copy()))
    after = tile_copies(carried.inspect("copies", x, x.copy(), x.copy()))
    assert len(before) == 8  # acc in; the returned pair through two rounds of temporaries
    assert after == []  # the helper updates the caller's a and reads its b


@ts.func
def both(p, q):
    p = p + q  # p updated, q read: the caller passes one tile for both
    return p


@kernel(tile=(8,))
def same_tile_twice(x: f32[n], y: mut[f32[n]]):
    base = group_id(0) * 8
    a = tile.load_block(x, (base,), (8,))
    a = both(a, a)
    tile.store_block(y, (base,), a + a)


def test_one_tile_passed_for_an_updated_and_a_read_parameter(target, rng):
    x = rng.standard_normal(16).astype(np.float32)
    y = np.zeros_like(x)
    same_tile_twice[2](x, y)
    np.testing.assert_array_equal(y, (x + x) + (x + x))


@kernel(tile=(8,))
def swap_tiles(x: f32[n], y: mut[f32[n]], z: mut[f32[n]]):
    base = group_id(0) * 8
    a = tile.load_block(x, (base,), (8,))
    b = a * 2.0
    for _ in tile.range(0, 3):
        a, b = b, a
    tile.store_block(y, (base,), a)
    tile.store_block(z, (base,), b)


def test_swapping_tiles_in_a_loop_keeps_both_values(target, rng):
    x = rng.standard_normal(16).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros_like(x)
    swap_tiles[2](x, y, z)
    np.testing.assert_array_equal(y, x * 2)
    np.testing.assert_array_equal(z, x)


@kernel(tile=(8,))
def triton_arange(y: mut[i64[n]], START: ts.constexpr):
    m0 = group_id(0) * 8  # a variable start, with the end written start + n
    rows = tile.arange(m0, m0 + 8)
    tile.store_block(y, (m0,), tile.arange(START, START + 8) + tile.arange(0, 8) + rows)


def test_arange_takes_tritons_start_and_end(target):
    y = np.zeros(16, np.int64)
    triton_arange[2](y, 3)
    np.testing.assert_array_equal(y, np.tile(np.arange(3, 11) + np.arange(8), 2) + np.arange(16))


@kernel(tile=(8,))
def carried_out_of_a_loop(x: f32[n], y: mut[f32[n]]):
    base = group_id(0) * 8
    a = tile.load_block(x, (base,), (8,))
    t = a
    for _ in tile.range(0, 2):
        t = a  # a copy in, updated, and copied back ...
        t = t * 2.0
        a = t
    tile.store_block(y, (base,), t + a)  # ... but t is also read after the loop


def test_a_copy_whose_name_is_read_after_its_block_is_kept(target, rng):
    x = rng.standard_normal(16).astype(np.float32)
    y = np.zeros_like(x)
    carried_out_of_a_loop[2](x, y)
    np.testing.assert_array_equal(y, x * np.float32(4) + x * np.float32(4))
