"""Triton's layer-norm tutorial (forward, and the backward whose partial dW/dB sums are
guarded by a lock per group of rows), ported: ``tile.sum`` of a tile (Triton's ``tl.sum``),
and the lock taken by one lane (a lock every lane spins on is a compile error, not a hang)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera as ts
from tessera import KernelError, f32, group_id, i32, kernel, mut, tbarrier, tile


@kernel(tile=(64,))
def ln_fwd(X: f32[M, N], Y: mut[f32[M, N]], W: f32[N], B: f32[N], Mean: mut[f32[M]],
           Rstd: mut[f32[M]], eps: f32, BLOCK: ts.constexpr):  # fmt: skip
    row = group_id(0)
    acc = tile.zeros((BLOCK,), f32)
    for off in tile.range(0, N, BLOCK):
        acc += tile.load_block(X, (row, off), (BLOCK,))
    mean = tile.sum(acc) / N  # a tile's sum: Triton's tl.sum(x, axis=0)
    acc = tile.zeros((BLOCK,), f32)
    for off in tile.range(0, N, BLOCK):
        cols = tile.arange(off, off + BLOCK)
        x = tile.where(cols < N, tile.load_block(X, (row, off), (BLOCK,)) - mean, 0.0)
        acc += x * x
    rstd = 1 / math.sqrt(tile.sum(acc, axis=0) / N + eps)
    tile.store_block(Mean, (row,), tile.full((1,), mean, f32))
    tile.store_block(Rstd, (row,), tile.full((1,), rstd, f32))
    for off in tile.range(0, N, BLOCK):
        x = tile.load_block(X, (row, off), (BLOCK,))
        w = tile.load_block(W, (off,), (BLOCK,))
        b = tile.load_block(B, (off,), (BLOCK,))
        tile.store_block(Y, (row, off), (x - mean) * rstd * w + b)


@kernel(tile=(64,))
def ln_bwd_dx(DX: mut[f32[M, N]], DY: f32[M, N], DW: mut[f32[G, N]], DB: mut[f32[G, N]],
              X: f32[M, N], W: f32[N], Mean: f32[M], Rstd: f32[M], Lock: mut[i32[L]],
              GROUP: ts.constexpr, BLOCK: ts.constexpr):  # fmt: skip
    row = group_id(0)
    lock = row % GROUP
    mask = tile.arange(0, BLOCK) < N
    x = tile.load_block(X, (row, 0), (BLOCK,))
    dy = tile.load_block(DY, (row, 0), (BLOCK,))
    w = tile.load_block(W, (0,), (BLOCK,))
    xhat = tile.where(mask, (x - Mean[row]) * Rstd[row], 0.0)
    wdy = tile.where(mask, w * dy, 0.0)
    c1 = tile.sum(xhat * wdy) / N
    c2 = tile.sum(wdy) / N
    tile.store_block(DX, (row, 0), (wdy - (xhat * c1 + c2)) * Rstd[row])
    partial_dw = dy * xhat
    partial_db = dy
    if tile.linear_id() == 0:  # one lane takes the lock; the group follows
        while tile.atomic_cas(Lock, lock, 0, 1) == 1:
            pass
    tbarrier()
    if Lock[GROUP + lock] != 0:  # not the first row of this group: add what is there
        partial_dw += tile.load_block(DW, (lock, 0), (BLOCK,))
        partial_db += tile.load_block(DB, (lock, 0), (BLOCK,))
    tile.store_block(DW, (lock, 0), partial_dw)
    tile.store_block(DB, (lock, 0), partial_db)
    tbarrier()
    if tile.linear_id() == 0:
        Lock[GROUP + lock] = 1
        tile.atomic_xchg(Lock, lock, 0)


def test_the_ported_layer_norm_forward_and_backward_match_numpy(target, rng):
    m, n, groups = 8, 64, 2
    x, dy = (rng.standard_normal((m, n)).astype(np.float32) for _ in range(2))
    w, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    y, mean, rstd = np.zeros_like(x), np.zeros(m, np.float32), np.zeros(m, np.float32)
    ln_fwd[m](x, y, w, b, mean, rstd, 1e-5, 64)
    mu, sd = x.mean(1, keepdims=True), 1 / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    xh = (x - mu) * sd
    np.testing.assert_allclose(y, xh * w + b, rtol=1e-4, atol=1e-5)
    dx, dw, db = (
        np.zeros_like(x),
        np.zeros((groups, n), np.float32),
        np.zeros((groups, n), np.float32),
    )
    lock = np.zeros(2 * groups, np.int32)
    ln_bwd_dx[m](dx, dy, dw, db, x, w, mean, rstd, lock, groups, 64)
    wdy = w * dy
    want = (wdy - (xh * (xh * wdy).mean(1, keepdims=True) + wdy.mean(1, keepdims=True))) * sd
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw.sum(0), (dy * xh).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db.sum(0), dy.sum(0), rtol=1e-4, atol=1e-4)
    assert not lock[:groups].any()  # every lock released


def test_tile_max_and_min_of_a_tile_reduce_it(target):
    @kernel(tile=(8,))
    def extremes(x: f32[n], out: mut[f32[2]]):
        t = tile.load_block(x, (0,), (8,))
        tile.store_block(out, (0,), tile.full((1,), tile.max(t), f32))
        tile.store_block(out, (1,), tile.full((1,), tile.min(t, axis=0), f32))

    x = np.array([3, -1, 4, 1, -5, 9, 2, 6], np.float32)
    out = np.zeros(2, np.float32)
    extremes[1](x, out)
    np.testing.assert_array_equal(out, [9, -5])


def test_a_lock_every_lane_spins_on_is_a_compile_error():
    with pytest.raises(KernelError, match="every lane of the group spins on the same lock") as e:

        @kernel(tile=(64,))
        def every_lane_locks(total: mut[f32[1]], lock: mut[i32[1]]):
            while tile.atomic_cas(lock, 0, 0, 1) == 1:
                pass
            total[0] = total[0] + 1.0
            tile.atomic_xchg(lock, 0, 0)

    assert "test_ported_layernorm.py" in str(e.value) and "while tile.atomic_cas" in str(e.value)
