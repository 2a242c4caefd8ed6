"""The atomic updates beyond add (``tile.atomic_max``, ``_min``, ``_and``, ``_or``, ``_xor``,
``_xchg``, ``_cas``): the same results on every target, on global and shared arrays,
with the language's rules (NaN-propagating max/min, integers wrapping, 16-bit floats
rounded once, ``atomic_cas`` comparing bits)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera import (
    KernelError,
    RaceError,
    bf16,
    config,
    f16,
    f32,
    f64,
    group_linear_id,
    i8,
    i32,
    i64,
    kernel,
    mut,
    reduce_sum,
    tbarrier,
    tile,
    tshared,
    u8,
    u32,
)

BINS = 4
LANES = 64


@kernel(tile=(LANES,))
def global_extrema(x: f32[n], hi: mut[f32[4]], lo: mut[f32[4]], old: mut[f32[n]]):
    i = tile.linear_id() + LANES * group_linear_id()
    old[i] = tile.atomic_max(hi, i % 4, x[i])
    tile.atomic_min(lo, i % 4, x[i])


def _bins(values, reduce):
    return np.array([reduce(values[k::BINS]) for k in range(BINS)])


def test_atomic_max_and_min_give_numpys_extrema_with_nan_winning(target, rng):
    x = rng.standard_normal(4 * LANES).astype(np.float32)
    x[6] = np.nan  # bin 2
    hi = np.full(BINS, -np.inf, np.float32)
    lo = np.full(BINS, np.inf, np.float32)
    old = np.zeros_like(x)
    global_extrema[4](x, hi, lo, old)
    np.testing.assert_array_equal(hi, _bins(x, np.max))
    np.testing.assert_array_equal(lo, _bins(x, np.min))
    assert np.isnan(hi[2]) and np.isnan(lo[2])
    # each returned old value is one the element held: at most the final maximum
    finite = ~np.isnan(x) & (np.arange(x.size) % BINS != 2)
    assert np.all(old[finite] <= hi[np.arange(x.size) % BINS][finite])


@kernel(tile=(LANES,))
def global_bits(
    v: i32[n], a: mut[i32[4]], o: mut[i32[4]], x: mut[i32[4]], w: mut[u8[4]], m: mut[u32[4]]
):
    i = tile.linear_id() + LANES * group_linear_id()
    k = i % 4
    tile.atomic_and(a, k, v[i])
    tile.atomic_or(o, k, v[i])
    tile.atomic_xor(x, k, v[i])
    tile.atomic_xor(w, k, v[i])  # wraps to the element's 8 bits
    tile.atomic_max(m, k, v[i])


def test_bitwise_atomics_and_unsigned_max_match_numpy(target, rng):
    v = rng.integers(-(2**31), 2**31 - 1, 4 * LANES).astype(np.int32)
    a = np.full(BINS, -1, np.int32)
    o, x, m = np.zeros(BINS, np.int32), np.zeros(BINS, np.int32), np.zeros(BINS, np.uint32)
    w = np.zeros(BINS, np.uint8)
    global_bits[4](v, a, o, x, w, m)
    np.testing.assert_array_equal(a, _bins(v, np.bitwise_and.reduce))
    np.testing.assert_array_equal(o, _bins(v, np.bitwise_or.reduce))
    np.testing.assert_array_equal(x, _bins(v, np.bitwise_xor.reduce))
    np.testing.assert_array_equal(w, _bins(v.astype(np.uint8), np.bitwise_xor.reduce))
    np.testing.assert_array_equal(m, _bins(v.astype(np.uint32), np.max))


@kernel(tile=(LANES,))
def narrow_extrema(
    x: f32[n], h: mut[f16[4]], b: mut[bf16[4]], d: mut[f64[4]], s: mut[i8[4]], q: mut[i64[4]]
):
    i = tile.linear_id() + LANES * group_linear_id()
    k = i % 4
    tile.atomic_max(h, k, x[i])
    tile.atomic_min(b, k, x[i])
    tile.atomic_max(d, k, x[i] * 2.0)
    tile.atomic_min(s, k, i)  # i converted to i8 first: wraps
    tile.atomic_min(q, k, -(i * 3000000000))


def test_atomic_extrema_on_every_dtype_round_once_and_wrap(target, rng):
    x = rng.standard_normal(4 * LANES).astype(np.float32) * 100
    h = np.full(BINS, -np.inf, np.float16)
    b = np.full(BINS, np.inf, ml_dtypes.bfloat16)
    d = np.full(BINS, -np.inf)
    s = np.full(BINS, 127, np.int8)
    q = np.zeros(BINS, np.int64)
    narrow_extrema[4](x, h, b, d, s, q)
    i = np.arange(4 * LANES)
    np.testing.assert_array_equal(h, _bins(x.astype(np.float16), np.max))
    np.testing.assert_array_equal(b, _bins(x.astype(ml_dtypes.bfloat16), np.min))
    np.testing.assert_array_equal(d, _bins(x.astype(np.float64) * 2.0, np.max))
    np.testing.assert_array_equal(s, _bins(i.astype(np.int8), np.min))
    np.testing.assert_array_equal(q, _bins(-(i * 3000000000), np.min))


@kernel(tile=(LANES,))
def tickets(counter: mut[i32[1]], got: mut[i32[n]]):
    i = tile.linear_id() + LANES * group_linear_id()
    # an increment written as a compare-and-swap loop: every lane gets its own ticket
    # (the first guess is 0, not a plain read of the counter, which would race with the
    # other lanes' swaps)
    seen = 0
    while True:
        prev = tile.atomic_cas(counter, 0, seen, seen + 1)
        if prev == seen:
            break
        seen = prev
    got[i] = seen


def test_atomic_cas_loop_hands_out_each_ticket_once(target):
    counter = np.zeros(1, np.int32)
    got = np.full(4 * LANES, -1, np.int32)
    tickets[4](counter, got)
    assert counter[0] == 4 * LANES
    np.testing.assert_array_equal(np.sort(got), np.arange(4 * LANES))


@kernel(tile=(LANES,))
def swaps(x: mut[f32[1]], h: mut[f16[1]], old: mut[f32[n]], hold: mut[f32[n]]):
    i = tile.linear_id() + LANES * group_linear_id()
    old[i] = tile.atomic_xchg(x, 0, i + 0.5)
    hold[i] = tile.atomic_xchg(h, 0, i + 0.25)


def test_atomic_xchg_returns_every_value_but_the_last_once(target):
    n = 2 * LANES
    x, h = np.full(1, -1.0, np.float32), np.full(1, -1.0, np.float16)
    old, hold = np.zeros(n, np.float32), np.zeros(n, np.float32)
    swaps[2](x, h, old, hold)
    put = np.arange(n) + 0.5
    # the values returned and the one left are the initial one and every value put
    np.testing.assert_array_equal(np.sort(np.append(old, x)), np.append(-1.0, put))
    put16 = (np.arange(n) + 0.25).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(np.sort(np.append(hold, h)), np.sort(np.append(-1.0, put16)))


@kernel(tile=(8,))
def compare_bits(z: mut[f32[3]], h: mut[bf16[2]], old: mut[f32[5]]):
    lane = tile.linear_id()
    if lane == 0:
        old[0] = tile.atomic_cas(z, 0, 0.0, 1.0)  # holds -0.0: other bits, no swap
        old[1] = tile.atomic_cas(z, 1, -0.0, 2.0)  # holds -0.0: swapped
        old[2] = tile.atomic_cas(z, 2, float("nan"), 3.0)  # a NaN matches its own bits
        old[3] = tile.atomic_cas(h, 0, 1.00390625, 4.0)  # rounds to 1.0 in bf16: swapped
        old[4] = tile.atomic_cas(h, 1, 2.0, 5.0)  # holds 3.0: no swap


def test_atomic_cas_compares_the_bits_of_expected_in_the_elements_dtype(target):
    z = np.array([-0.0, -0.0, np.nan], np.float32)
    h = np.array([1.0, 3.0], ml_dtypes.bfloat16)
    old = np.zeros(5, np.float32)
    compare_bits[1](z, h, old)
    np.testing.assert_array_equal(z, [-0.0, 2.0, 3.0])
    assert np.signbit(z[0])
    np.testing.assert_array_equal(h.astype(np.float32), [4.0, 3.0])
    np.testing.assert_array_equal(old[[1, 3, 4]], [-0.0, 1.0, 3.0])
    assert np.isnan(old[2])


@kernel(tile=(LANES,), shared=64)
def shared_updates(
    v: i32[n], x: f32[n], out: mut[i32[grid_groups, 4]], ext: mut[f32[grid_groups, 2]]
):
    s = tshared.alloc[i32](4)
    e = tshared.alloc[f32](2)
    lane = tile.linear_id()
    g = group_linear_id()
    if lane == 0:
        s[0] = -1
        s[1] = 0
        s[2] = 0
        s[3] = 0
        e[0] = -float("inf")
        e[1] = float("inf")
    tbarrier()
    i = g * LANES + lane
    tile.atomic_and(s, 0, v[i])
    tile.atomic_or(s, 1, v[i])
    tile.atomic_xor(s, 2, v[i])
    tile.atomic_max(e, 0, x[i])
    tile.atomic_min(e, 1, x[i])
    tile.atomic_cas(s, 3, lane, lane + 1)  # lanes in turn, where they meet it
    tbarrier()
    if lane < 4:
        out[g, lane] = s[lane]
    if lane < 2:
        ext[g, lane] = e[lane]


def test_atomics_on_shared_arrays_match_numpy(target, rng):
    groups = 2
    v = rng.integers(-(2**31), 2**31 - 1, groups * LANES).astype(np.int32)
    x = rng.standard_normal(groups * LANES).astype(np.float32)
    out = np.zeros((groups, 4), np.int32)
    ext = np.zeros((groups, 2), np.float32)
    shared_updates[groups](v, x, out, ext)
    for g in range(groups):
        part, xs = v[g * LANES : (g + 1) * LANES], x[g * LANES : (g + 1) * LANES]
        assert out[g, 0] == np.bitwise_and.reduce(part)
        assert out[g, 1] == np.bitwise_or.reduce(part)
        assert out[g, 2] == np.bitwise_xor.reduce(part)
        assert 1 <= out[g, 3] <= LANES  # lane k swaps only when the count is k
        np.testing.assert_array_equal(ext[g], [xs.max(), xs.min()])


def test_bitwise_atomic_on_a_float_array_is_a_located_error():
    with pytest.raises(KernelError, match=r"tile.atomic_or needs an integer array, not f32"):

        @kernel(tile=(8,))
        def float_or(a: mut[f32[4]]):
            tile.atomic_or(a, 0, 1)

        float_or[1](np.zeros(4, np.float32))


def test_atomic_on_a_read_only_argument_names_it():
    with pytest.raises(KernelError, match=r"cannot write to parameter 'a': it is not declared mut"):

        @kernel(tile=(8,))
        def read_only_max(a: f32[4]):
            tile.atomic_max(a, 0, 1.0)

        read_only_max[1](np.zeros(4, np.float32))


@kernel(tile=(8,))
def negate(x: f32[n], y: mut[f32[n]], h: mut[f16[n]]):
    i = tile.linear_id()
    y[i] = -x[i]
    h[i] = -x[i]


def test_negation_of_zero_gives_negative_zero_on_every_target(target):
    x = np.array([0.0, -0.0, 1.5, np.inf, 0.0, 0.0, 0.0, 0.0], np.float32)
    y, h = np.zeros_like(x), np.zeros(8, np.float16)
    negate[1](x, y, h)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(-x))
    np.testing.assert_array_equal(np.signbit(h), np.signbit(-x))


@kernel(tile=(LANES,), shared=4 * LANES)
def locked_sum(x: f32[n], total: mut[f32[1]], lock: mut[i32[1]]):
    part = tshared.alloc[f32](LANES)
    lane = tile.linear_id()
    i = group_linear_id() * LANES + lane
    part[lane] = x[i] if i < n else 0.0
    tbarrier()
    s = reduce_sum(part)
    if lane == 0:  # one lane takes the lock, updates, releases
        while tile.atomic_cas(lock, 0, 0, 1) != 0:
            pass
        total[0] = total[0] + s
        tile.atomic_xchg(lock, 0, 0)


def test_a_lock_taken_with_cas_and_released_with_xchg_orders_the_groups_updates(target):
    groups = 16
    x = np.arange(groups * LANES, dtype=np.float32) % 7  # sums exact in any order
    total, lock = np.zeros(1, np.float32), np.zeros(1, np.int32)
    locked_sum[groups](x, total, lock)
    assert total[0] == x.sum() and lock[0] == 0


@kernel(tile=(LANES,))
def unlocked_sum(x: f32[n], total: mut[f32[1]], lock: mut[i32[1]]):
    lane = tile.linear_id()
    if lane == 0:
        tile.atomic_xchg(lock, 0, 1)  # releases, but nobody acquires before the update
        total[0] = total[0] + x[group_linear_id()]


def test_debug_reports_a_plain_update_no_fenced_atomic_orders():
    total, lock = np.zeros(1, np.float32), np.zeros(1, np.int32)
    with (
        config(target="debug"),
        pytest.raises(RaceError, match=r"race on global array 'total' element 0"),
    ):
        unlocked_sum[2](np.ones(2, np.float32), total, lock)
