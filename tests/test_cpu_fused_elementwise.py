"""Consecutive elementwise tile statements of one shape run in one loop nest on the CPU
(cpu/codegen.py ``elementwise_run``), with the bits of running them one by one, and never
when a statement reads a tile of the run at another element (a square tile's ``.T``)."""

from __future__ import annotations

import math

import numpy as np

from tessera import f32, group_id, kernel, mut, tile


@kernel(tile=(8,))
def three_steps(x: f32[n, 16], y: mut[f32[n, 16]]):
    r0 = group_id(0) * 8
    a = tile.load_block(x, (r0, 0), (8, 16))
    b = a * 2.0 - 1.0
    c = math.exp(b - a)
    c = tile.where(c > 1.0, c, b)
    tile.store_block(y, (r0, 0), c + a)


def test_fused_statements_give_every_targets_bits(target, rng):
    x = rng.standard_normal((16, 16)).astype(np.float32)
    y = np.zeros_like(x)
    three_steps[2](x, y)
    b = x * np.float32(2) - np.float32(1)
    c = np.exp(b - x)
    want = np.where(c > 1, c, b) + x
    np.testing.assert_allclose(y, want, rtol=2e-7, atol=0)


def test_four_statements_of_one_shape_are_one_loop_nest():
    x = np.zeros((16, 16), np.float32)
    source = three_steps.inspect("cpu", x, x.copy())
    loops = [line for line in source.splitlines() if line.strip().startswith("for _e0 in")]
    assert len(loops) == 1, source  # b, c, c, and the stored c + a: one nest


@kernel(tile=(8,))
def transposed_after(x: f32[8, 8], y: mut[f32[8, 8]], z: mut[f32[8, 8]]):
    a = tile.load_block(x, (0, 0), (8, 8))
    b = a + 1.0
    c = b.T * 2.0  # reads b at the mirrored element: b must be complete first
    b = b * 3.0  # and then b changes: c must have read the old b
    tile.store_block(y, (0, 0), c)
    tile.store_block(z, (0, 0), b)


def test_a_transposed_read_of_a_tile_of_the_run_splits_the_run(target, rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros_like(x)
    transposed_after[1](x, y, z)
    np.testing.assert_array_equal(y, (x + np.float32(1)).T * np.float32(2))
    np.testing.assert_array_equal(z, (x + np.float32(1)) * np.float32(3))
