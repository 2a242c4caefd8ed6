"""``tile.atomic_add`` on a shared array: the same results on every target, and on the CPU
a plain read-modify-write (a group's shared memory belongs to one core there) while
atomics on global arrays stay atomic."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tessera import (
    bf16,
    f16,
    f32,
    f64,
    group_linear_id,
    i8,
    i32,
    i64,
    kernel,
    mut,
    tbarrier,
    tile,
    tshared,
)

BINS = 4


@kernel(tile=(64,), shared=256)
def shared_counts(
    idx: i32[n],
    a: mut[i32[grid_groups, 4]],
    c: mut[i64[grid_groups, 4]],
    d: mut[f32[grid_groups, 4]],
    e: mut[f64[grid_groups, 4]],
    w: mut[i8[grid_groups, 4]],
):
    sa = tshared.alloc[i32](4)
    sc = tshared.alloc[i64](4)
    sd = tshared.alloc[f32](4)
    se = tshared.alloc[f64](4)
    sw = tshared.alloc[i8](4)
    lane = tile.linear_id()
    g = group_linear_id()
    if lane < 4:
        sa[lane] = 0
        sc[lane] = 2**40
        sd[lane] = 0.0
        se[lane] = 0.0
        sw[lane] = 100
    tbarrier()
    k = idx[g * 64 + lane]
    tile.atomic_add(sa, k, lane)
    tile.atomic_add(sc, k, lane * 1000000)
    tile.atomic_add(sd, k, 0.5)
    tile.atomic_add(se, k, 0.25)
    tile.atomic_add(sw, k, 3)
    tbarrier()
    if lane < 4:
        a[g, lane] = sa[lane]
        c[g, lane] = sc[lane]
        d[g, lane] = sd[lane]
        e[g, lane] = se[lane]
        w[g, lane] = sw[lane]


def test_shared_atomic_add_sums_every_dtype_and_wraps_integers(target, rng):
    groups = 3
    idx = rng.integers(0, BINS, groups * 64).astype(np.int32)
    a = np.zeros((groups, BINS), np.int32)
    c = np.zeros((groups, BINS), np.int64)
    d = np.zeros((groups, BINS), np.float32)
    e = np.zeros((groups, BINS))
    w = np.zeros((groups, BINS), np.int8)
    shared_counts[groups](idx, a, c, d, e, w)
    lanes = np.arange(64)
    for g in range(groups):
        k = idx[g * 64 : (g + 1) * 64]
        count = np.bincount(k, minlength=BINS)
        lane_sums = np.bincount(k, weights=lanes, minlength=BINS).astype(np.int64)
        np.testing.assert_array_equal(a[g], lane_sums)
        np.testing.assert_array_equal(c[g], 2**40 + lane_sums * 1000000)
        np.testing.assert_array_equal(d[g], count * 0.5)
        np.testing.assert_array_equal(e[g], count * 0.25)
        np.testing.assert_array_equal(w[g], (100 + 3 * count).astype(np.int8))


@kernel(tile=(32,), shared=64)
def shared_half_counts(h: mut[f16[2]], b: mut[bf16[2]]):
    sh = tshared.alloc[f16](2)
    sb = tshared.alloc[bf16](2)
    lane = tile.linear_id()
    if lane < 2:
        sh[lane] = 0.0
        sb[lane] = 250.0
    tbarrier()
    tile.atomic_add(sh, lane % 2, 1.0)
    tile.atomic_add(sb, lane % 2, 1.0)
    tbarrier()
    if lane < 2:
        h[lane] = sh[lane]
        b[lane] = sb[lane]


def test_shared_atomic_add_on_16_bit_floats_rounds_each_add(target):
    h = np.zeros(2, np.float16)
    b = np.zeros(2, ml_dtypes.bfloat16)
    shared_half_counts[1](h, b)
    np.testing.assert_array_equal(h, [16.0, 16.0])
    # bf16 counts 250, 251, ... 256, then stops: 256 + 1 rounds back to 256 (ties to even)
    np.testing.assert_array_equal(b.astype(np.float32), [256.0, 256.0])


@kernel(tile=(16,), shared=64)
def shared_tickets(order: mut[i32[grid_groups, 16]]):
    s = tshared.alloc[i32](1)
    lane = tile.linear_id()
    if lane == 0:
        s[0] = 0
    tbarrier()
    slot = tile.atomic_add(s, 0, 1)
    order[group_linear_id(), slot] = lane


def test_shared_atomic_add_returns_the_old_value(target):
    order = np.full((2, 16), -1, np.int32)
    shared_tickets[2](order)
    np.testing.assert_array_equal(np.sort(order, axis=1), [np.arange(16)] * 2)


@kernel(tile=(32,), shared=64)
def group_histogram(x: i32[n], hist: mut[i32[4]]):
    s = tshared.alloc[i32](4)
    lane = tile.linear_id()
    if lane < 4:
        s[lane] = 0
    tbarrier()
    tile.atomic_add(s, x[group_linear_id() * 32 + lane], 1)
    tbarrier()
    if lane < 4:
        tile.atomic_add(hist, lane, s[lane])


def test_cpu_adds_to_shared_memory_plainly_and_to_global_memory_atomically():
    x = np.zeros(64, np.int32)
    hist = np.zeros(4, np.int32)
    source = group_histogram.inspect("cpu", x, hist, grid=2)
    assert "_plain_add(v_s, " in source
    assert "_atomic_add(p_hist, " in source
