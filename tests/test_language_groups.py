"""Grouped-kernel semantics, atomics, helpers, cp_async and 16-bit floats (LANGUAGE.md
§2, §3, §8) on every target, each checked against a NumPy reference."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import tessera as ts
from tessera import (
    KiB,
    bf16,
    constexpr,
    cp_async,
    f16,
    f32,
    f64,
    group_id,
    group_linear_id,
    group_tile_count,
    i8,
    i16,
    i32,
    i64,
    kernel,
    mut,
    reduce_max,
    reduce_min,
    reduce_sum,
    tbarrier,
    tile,
    tshared,
    u8,
    u16,
)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def tree_reduce(values, op=np.add):
    """The documented tree over the last axis: with p the largest power of two <= m,
    s[i] op= s[i + p] for i < m - p, then s[i] op= s[i + h] for h = p/2 .. 1."""
    s = np.array(values, copy=True)
    m = s.shape[-1]
    p = 1 << (m.bit_length() - 1)
    s[..., : m - p] = op(s[..., : m - p], s[..., p:m])
    h = p // 2
    while h >= 1:
        s[..., :h] = op(s[..., :h], s[..., h : 2 * h])
        h //= 2
    return s[..., 0]


# --------------------------------------------------------------------- ids and shapes


@kernel(tile=(4, 4, 2), shared=0)
def ids_3d(out: mut[i64[grid_groups, 4, 4, 2, 5]]):
    g = group_linear_id()
    a, b, c = tile.id(0), tile.id(1), tile.id(2)
    out[g, a, b, c, 0] = a
    out[g, a, b, c, 1] = b
    out[g, a, b, c, 2] = c
    out[g, a, b, c, 3] = tile.linear_id()
    out[g, a, b, c, 4] = group_tile_count()


def test_three_dimensional_group_shape(target):
    out = np.full((3, 4, 4, 2, 5), -1, np.int64)
    ids_3d[3](out)
    a, b, c = np.meshgrid(np.arange(4), np.arange(4), np.arange(2), indexing="ij")
    for g in range(3):
        np.testing.assert_array_equal(out[g, ..., 0], a)
        np.testing.assert_array_equal(out[g, ..., 1], b)
        np.testing.assert_array_equal(out[g, ..., 2], c)
        np.testing.assert_array_equal(out[g, ..., 3], (a * 4 + b) * 2 + c)
        np.testing.assert_array_equal(out[g, ..., 4], 32)


@kernel(tile=(3, 5))
def group_ids_2d(out: mut[i64[p, q, 15, 4]]):
    lane = tile.linear_id()
    g0, g1 = group_id(0), group_id(1)
    out[g0, g1, lane, 0] = g0
    out[g0, g1, lane, 1] = g1
    out[g0, g1, lane, 2] = group_linear_id()
    out[g0, g1, lane, 3] = tile.id(0) * 100 + tile.id(1) * 10 + grid_groups * 1000


def test_group_id_with_tuple_grid_and_2d_group(target):
    out = np.full((3, 4, 15, 4), -1, np.int64)
    group_ids_2d[(3, 4)](out)
    g0, g1 = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
    lanes = np.arange(15)
    np.testing.assert_array_equal(out[..., 0], np.broadcast_to(g0[..., None], (3, 4, 15)))
    np.testing.assert_array_equal(out[..., 1], np.broadcast_to(g1[..., None], (3, 4, 15)))
    np.testing.assert_array_equal(
        out[..., 2], np.broadcast_to((g0 * 4 + g1)[..., None], (3, 4, 15))
    )
    np.testing.assert_array_equal(
        out[..., 3], np.broadcast_to((lanes // 5) * 100 + (lanes % 5) * 10 + 12000, (3, 4, 15))
    )


@kernel(tile=(32,), shared=1 * KiB)
def early_return_grouped(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](32)
    lane = tile.linear_id()
    k = group_linear_id() * 32 + lane
    s[lane] = x[k] if k < n else 0.0
    tbarrier()
    t = reduce_sum(s)
    if k >= n:
        return
    if x[k] < 0.0:
        y[k] = t
        return
    y[k] = x[k] * 2.0


def test_lane_dependent_early_return_in_grouped_kernel(target, rng):
    n = 70
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    early_return_grouped[3](x, y)
    padded = np.zeros(96, np.float32)
    padded[:n] = x
    sums = tree_reduce(padded.reshape(3, 32))
    ref = np.where(x < 0, sums[np.arange(n) // 32], x * np.float32(2.0))
    np.testing.assert_array_equal(y, ref)


# --------------------------------------------------------------------- loads, stores, reductions


@kernel(tile=(64,), shared=1 * KiB)
def lane_reductions(x: f32[n], out: mut[f32[grid_groups, 6]]):
    g = group_linear_id()
    lane = tile.linear_id()
    k = g * 64 + lane
    inside = k < n
    v = tile.load(x, k, mask=inside, other=0.0)
    out[g, 0] = tile.sum(v)
    hi = tile.load(x, k, mask=inside, other=-math.inf)
    out[g, 1] = tile.max(hi)
    lo = tile.load(x, k, mask=inside, other=math.inf)
    out[g, 2] = tile.min(lo)
    tile.store(out, (g, 3), 1.0, mask=lane == 0)
    tile.store(out, (g, 4), 2.0, mask=lane == 999)
    out[g, 5] = tile.sum(lane)


@kernel(tile=(8,), shared=0)
def lane_sum_of_expression(x: f32[n], out: mut[f32[grid_groups]]):
    t = tile.sum(x[group_linear_id() * 8 + tile.linear_id()] * 2.0)
    if tile.linear_id() == 0:
        out[group_linear_id()] = t


def test_tile_sum_of_an_expression(target, rng):
    x = rng.standard_normal(16).astype(np.float32)
    out = np.zeros(2, np.float32)
    lane_sum_of_expression[2](x, out)
    np.testing.assert_array_equal(bits(out), bits(tree_reduce(x.reshape(2, 8) * np.float32(2))))


@kernel(tile=(4,))
def lane_sum_of_uniform_values(out: mut[i64[grid_groups, 4]]):
    """tile.sum of values every lane holds alike: uniform, kept once per group."""
    total = tile.sum(group_linear_id() + 5)
    acc = 0
    for k in range(3):
        acc += tile.sum(k)
    out[group_linear_id(), tile.linear_id()] = total * 100 + acc


def test_lane_sum_of_a_uniform_value_sums_it_once_per_lane(target):
    out = np.zeros((2, 4), np.int64)
    lane_sum_of_uniform_values[2](out)
    expected = (np.arange(2) + 5) * 4 * 100 + (0 + 1 + 2) * 4
    np.testing.assert_array_equal(out, np.broadcast_to(expected[:, None], (2, 4)))


def test_tile_sum_max_min_and_masked_load_store(target, rng):
    n = 150
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full((3, 6), 7.0, np.float32)
    lane_reductions[3](x, out)
    pad = np.zeros(192, np.float32)
    pad[:n] = x
    blocks = pad.reshape(3, 64)
    np.testing.assert_array_equal(bits(out[:, 0]), bits(tree_reduce(blocks)))
    np.testing.assert_array_equal(out[:, 1], [x[i : i + 64].max() for i in (0, 64, 128)])
    np.testing.assert_array_equal(out[:, 2], [x[i : i + 64].min() for i in (0, 64, 128)])
    np.testing.assert_array_equal(out[:, 3], 1.0)
    np.testing.assert_array_equal(out[:, 4], 7.0)  # masked off on every lane
    np.testing.assert_array_equal(out[:, 5], sum(range(64)))


@kernel(tile=(32,), shared=1 * KiB)
def shared_minmax(x: f32[n], out: mut[f32[grid_groups, 3]]):
    s = tshared.alloc[f32](100)
    g = group_linear_id()
    for j in range(tile.linear_id(), 100, 32):
        s[j] = x[g * 100 + j]
    tbarrier()
    hi = reduce_max(s)
    lo = reduce_min(s)
    total = reduce_sum(s)
    if tile.linear_id() == 7:
        out[g, 0] = hi
        out[g, 1] = lo
        out[g, 2] = total


def test_reduce_max_min_sum_over_shared_array(target, rng):
    x = rng.standard_normal(300).astype(np.float32)
    x[150] = np.nan  # group 1 sees a NaN: max and min propagate it
    out = np.zeros((3, 3), np.float32)
    shared_minmax[3](x, out)
    blocks = x.reshape(3, 100)
    np.testing.assert_array_equal(out[:, 0], np.max(blocks, axis=1))
    np.testing.assert_array_equal(out[:, 1], np.min(blocks, axis=1))
    np.testing.assert_array_equal(bits(out[:, 2]), bits(tree_reduce(blocks)))


@kernel(tile=(16,), shared=256)
def half_reduce(x: f16[n], out: mut[f16[grid_groups]]):
    s = tshared.alloc[f16](64)
    for j in range(tile.linear_id(), 64, 16):
        s[j] = x[group_linear_id() * 64 + j]
    tbarrier()
    t = reduce_sum(s)
    if tile.linear_id() == 0:
        out[group_linear_id()] = t


def test_f16_reduction_accumulates_in_f32(target, rng):
    x = (rng.standard_normal(64 * 8) * 300).astype(np.float16)
    out = np.zeros(8, np.float16)
    half_reduce[8](x, out)
    blocks = x.reshape(8, 64)
    ref = tree_reduce(blocks.astype(np.float32)).astype(np.float16)
    assert (tree_reduce(blocks) != ref).any()  # f16 accumulation would differ
    np.testing.assert_array_equal(bits(out), bits(ref))


# --------------------------------------------------------------------- atomics


@kernel
def atomic_all(
    idx: i32[n], a: mut[i32[b]], c: mut[i64[b]], d: mut[f32[b]], e: mut[f64[b]], h: mut[f16[b]]
):
    i = tile.linear_id()
    k = idx[i]
    tile.atomic_add(a, k, i)
    tile.atomic_add(c, k, i * 1000000)
    tile.atomic_add(d, k, 0.5)
    tile.atomic_add(e, k, 0.25)
    tile.atomic_add(h, k, 1.0)


def test_atomic_add_with_collisions_on_every_dtype(target, rng):
    n, b = 6000, 7  # several thousand lanes: the launch runs on several threads
    idx = rng.integers(0, b, n).astype(np.int32)
    a, c = np.zeros(b, np.int32), np.full(b, 2**40, np.int64)
    d, e, h = np.zeros(b, np.float32), np.zeros(b), np.zeros(b, np.float16)
    atomic_all[n](idx, a, c, d, e, h)
    i = np.arange(n)
    count = np.bincount(idx, minlength=b)
    np.testing.assert_array_equal(a, np.bincount(idx, weights=i, minlength=b).astype(np.int64))
    np.testing.assert_array_equal(
        c, 2**40 + np.bincount(idx, weights=i, minlength=b).astype(np.int64) * 1000000
    )
    np.testing.assert_array_equal(d, count * 0.5)  # all partial sums are exact here
    np.testing.assert_array_equal(e, count * 0.25)
    np.testing.assert_array_equal(h, count.astype(np.float16))  # < 2048: exact in f16


@kernel
def atomic_narrow(
    idx: i32[n], a: mut[i8[b]], c: mut[i16[b]], d: mut[u8[b]], e: mut[u16[b]], h: mut[bf16[b]]
):
    i = tile.linear_id()
    k = idx[i]
    tile.atomic_add(a, k, 1)
    tile.atomic_add(c, k, 3)
    tile.atomic_add(d, k, 1)
    tile.atomic_add(e, k, 7)
    tile.atomic_add(h, k, 1.0)


def test_atomic_add_on_8_and_16_bit_elements_wraps_and_rounds_like_the_cpu(target, rng):
    n, b = 3000, 5  # neighbours share 32-bit words: CUDA swaps whole words
    idx = rng.integers(0, b, n).astype(np.int32)
    a, c = np.zeros(b, np.int8), np.zeros(b, np.int16)
    d, e = np.zeros(b, np.uint8), np.zeros(b, np.uint16)
    h = np.zeros(b, ml_dtypes.bfloat16)
    atomic_narrow[n](idx, a, c, d, e, h)
    count = np.bincount(idx, minlength=b)
    np.testing.assert_array_equal(a, count.astype(np.int8))  # wraps past 127
    np.testing.assert_array_equal(c, (count * 3).astype(np.int16))
    np.testing.assert_array_equal(d, count.astype(np.uint8))
    np.testing.assert_array_equal(e, (count * 7).astype(np.uint16))
    assert np.all(h.astype(np.float32) == 256)  # bf16 stops growing at 256: 256 + 1 rounds to 256


@kernel
def take_ticket(counter: mut[i64[1]], order: mut[i64[n]]):
    i = tile.linear_id()
    slot = tile.atomic_add(counter, 0, 1)
    order[slot] = i


def test_atomic_add_returns_the_old_value(target):
    n = 5000
    counter = np.zeros(1, np.int64)
    order = np.full(n, -1, np.int64)
    take_ticket[n](counter, order)
    assert counter[0] == n
    np.testing.assert_array_equal(np.sort(order), np.arange(n))


@kernel(tile=(48,), shared=64)
def shared_atomic(out: mut[i32[grid_groups, 2]]):
    s = tshared.alloc[i32](2)
    lane = tile.linear_id()
    if lane < 2:
        s[lane] = 0
    tbarrier()
    tile.atomic_add(s, lane % 2, lane)
    tbarrier()
    if lane < 2:
        out[group_linear_id(), lane] = s[lane]


def test_atomic_add_on_shared_memory(target):
    out = np.zeros((2, 2), np.int32)
    shared_atomic[2](out)
    lanes = np.arange(48)
    np.testing.assert_array_equal(out, [[lanes[::2].sum(), lanes[1::2].sum()]] * 2)


# --------------------------------------------------------------------- helpers


@ts.func
def clamp(v, lo, hi):
    return min(max(v, lo), hi)


@ts.func
def first_negative(a, start, stop):
    for j in range(start, stop):
        if a[j] < 0.0:
            return j
    return -1


@ts.func
def clamped_sum(a, i):
    return clamp(a[i], -1.0, 1.0) + clamp(a[i] * 2.0, -1.0, 1.0)


@ts.func
def group_total(s, v):
    s[tile.linear_id()] = v
    tbarrier()
    return reduce_sum(s)


@kernel
def use_helpers(x: f32[n], y: mut[f32[n]], neg: mut[i64[n]]):
    i = tile.linear_id()
    y[i] = clamped_sum(x, i)
    neg[i] = first_negative(x, i, min(i + 4, n))


@kernel(tile=(16,), shared=64)
def use_collective_helper(x: f32[n], out: mut[f32[grid_groups]]):
    s = tshared.alloc[f32](16)
    t = group_total(s, x[group_linear_id() * 16 + tile.linear_id()])
    if tile.linear_id() == 0:
        out[group_linear_id()] = t


def test_helpers_are_inlined(target, rng):
    x = rng.standard_normal(12).astype(np.float32)
    y, neg = np.zeros_like(x), np.zeros(12, np.int64)
    use_helpers[12](x, y, neg)
    one = np.float32(1.0)
    np.testing.assert_array_equal(y, np.clip(x, -one, one) + np.clip(x * np.float32(2), -one, one))
    ref = [next((j for j in range(i, min(i + 4, 12)) if x[j] < 0), -1) for i in range(12)]
    np.testing.assert_array_equal(neg, ref)
    assert clamp(5, 0, 3) == 3  # outside a kernel a helper is plain Python


def test_helper_with_collectives(target, rng):
    x = rng.standard_normal(32).astype(np.float32)
    out = np.zeros(2, np.float32)
    use_collective_helper[2](x, out)
    np.testing.assert_array_equal(bits(out), bits(tree_reduce(x.reshape(2, 16))))


# --------------------------------------------------------------------- cp_async


@kernel(tile=(32,), shared=1 * KiB)
def copy_tail(x: f32[n], out: mut[f32[grid_groups, 64]]):
    s = tshared.alloc[f32](64)
    lane = tile.linear_id()
    s[lane] = 7.0  # a sentinel the copy must overwrite, zeros included
    s[lane + 32] = 7.0
    tbarrier()
    base = group_linear_id() * 64
    cp_async.shared.global_(s, x[base : base + 64])
    tbarrier()
    out[group_linear_id(), lane] = s[lane]
    out[group_linear_id(), lane + 32] = s[lane + 32]


def test_cp_async_tail_zero_fills(target, rng):
    x = rng.uniform(1, 2, 80).astype(np.float32)
    out = np.full((3, 64), np.nan, np.float32)
    copy_tail[3](x, out)
    ref = np.zeros(192, np.float32)
    ref[:80] = x
    np.testing.assert_array_equal(out.reshape(-1), ref)


@kernel(tile=(16,), shared=1 * KiB)
def cx_shared(x: f32[n], out: mut[f32[grid_groups]], S: constexpr):
    s = tshared.alloc[f32](S)
    for j in range(tile.linear_id(), S, 16):
        s[j] = x[group_linear_id() * S + j]
    tbarrier()
    t = reduce_sum(s)
    if tile.linear_id() == 0:
        out[group_linear_id()] = t


def test_constexpr_shared_size(target, rng):
    x = rng.standard_normal(60).astype(np.float32)
    for size in (20, 30):
        out = np.zeros(60 // size, np.float32)
        cx_shared[60 // size](x, out, size)
        np.testing.assert_array_equal(bits(out), bits(tree_reduce(x.reshape(-1, size))))


# --------------------------------------------------------------------- f16 and bf16
