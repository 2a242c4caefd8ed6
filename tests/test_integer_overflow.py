"""Integer overflow in compiled code gives the bits the debug target gives (docs/language.md,
"Integers"). Numba marks signed arithmetic "no signed wrap", so LLVM may assume it never
overflows: each kernel here computes something that overflows, or counts a loop near the
ends of i64, in a way an optimiser could get wrong, and every target must agree with the
exact Python answer. Found by tests/test_mutation_fuzz.py."""

from __future__ import annotations

import math

import numpy as np

from tessera import cp_async, f32, f64, group_linear_id, i64, kernel, mut, tbarrier, tile, tshared

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


@kernel
def squarings(y: mut[i64[n]], start: i64):
    d = start
    k = 0
    while d > 0 and k < 10:  # 16, 256, 65536, 2**32, then 2**64 wraps to 0
        d = d * d
        k += 1
    y[0] = k


def test_a_loop_ends_when_its_i64_product_wraps_to_zero(target):
    y = np.zeros(1, np.int64)
    squarings[1](y, 16)
    assert y[0] == 4


@kernel
def still_bigger(y: mut[i64[n]], x: i64[n]):
    i = tile.linear_id()
    v = x[i] + (I64_MAX - 5)
    y[i] = 1 if v + 10 > v else 0


def test_an_i64_sum_past_the_maximum_is_smaller(target):
    y = np.full(3, -1, np.int64)
    still_bigger[3](y, np.array([-10, 0, 1], np.int64))
    np.testing.assert_array_equal(y, [1, 0, 0])


@kernel
def power_loop(y: mut[i64[n]], start: i64):
    d = start
    k = 0
    while d > 0 and k < 10:
        d **= 2
        k += 1
    y[0] = k


def test_an_integer_power_that_wraps_ends_a_loop(target):
    y = np.zeros(1, np.int64)
    power_loop[1](y, 16)
    assert y[0] == 4


@kernel
def min_over_minus_one(q: mut[i64[n]], r: mut[i64[n]], a: mut[i64[n]], x: i64[n]):
    i = tile.linear_id()
    q[i] = x[i] // -1
    r[i] = x[i] % -1
    a[i] = abs(x[i])


def test_min_floor_divided_by_minus_one_and_abs_of_min_wrap_to_min(target):
    x = np.array([I64_MIN, 7, -7], np.int64)
    q, r, a = (np.zeros(3, np.int64) for _ in range(3))
    min_over_minus_one[3](q, r, a, x)
    np.testing.assert_array_equal(q, [I64_MIN, -7, 7])
    np.testing.assert_array_equal(r, [0, 0, 0])
    np.testing.assert_array_equal(a, [I64_MIN, 7, 7])


@kernel(tile=(4,))
def lane_sums(total: mut[i64[grid_groups]], scan: mut[i64[n]], x: i64[n]):
    lane = tile.linear_id()
    v = x[group_linear_id() * 4 + lane]
    total[group_linear_id()] = tile.sum(v)
    scan[group_linear_id() * 4 + lane] = tile.prefix_sum(v)


def _wrap64(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


def test_group_sums_of_i64_wrap(target):
    x = np.full(4, I64_MAX, np.int64)
    total, scan = np.zeros(1, np.int64), np.zeros(4, np.int64)
    lane_sums[1](total, scan, x)
    assert total[0] == _wrap64(4 * I64_MAX)
    np.testing.assert_array_equal(scan, [_wrap64(k * I64_MAX) for k in range(1, 5)])


@kernel
def long_ranges(y: mut[i64[n]], a: i64, b: i64, s: i64):
    c = 0
    last = 0
    for t in range(a, b, s):
        c += 1
        last = t
    y[0] = c
    y[1] = last


def test_a_range_near_the_ends_of_i64_runs_as_in_python(target):
    cases = [
        (I64_MAX - 7, I64_MAX, 5),
        (-I64_MAX, I64_MAX, 2**62),
        (5, -I64_MAX, -(2**62)),
        (I64_MIN, I64_MIN + 3, 1),
    ]
    for a, b, s in cases:
        y = np.zeros(2, np.int64)
        long_ranges[1](y, a, b, s)
        values = range(a, b, s)
        assert list(y) == [len(values), values[-1]], (a, b, s)


@kernel
def floors(y: mut[i64[n]], x: f64[n]):
    i = tile.linear_id()
    y[i] = math.floor(x[i])


def test_floor_of_inf_and_nan_saturate_like_any_float_to_int_conversion(target):
    x = np.array([np.inf, -np.inf, np.nan, 1e300, -2.5], np.float64)
    y = np.full(5, 7, np.int64)
    floors[5](y, x)
    np.testing.assert_array_equal(y, [I64_MAX, I64_MIN, 0, I64_MAX, -3])


@kernel(tile=(8,))
def far_shuffles(y: mut[i64[n]], x: i64[n], d: i64):
    lane = tile.linear_id()
    y[lane] = tile.shuffle_down(x[lane], d) * 100 + tile.shuffle_up(x[lane], -d)


def test_a_shuffle_offset_near_the_ends_of_i64_reads_the_lane_itself(target):
    x = np.arange(8, dtype=np.int64)
    for d in (I64_MAX, I64_MIN):
        y = np.zeros(8, np.int64)
        far_shuffles[1](y, x, d)
        np.testing.assert_array_equal(y, x * 101)


@kernel(tile=(8,))
def copy_from(y: mut[f32[n]], x: f32[n], start: i64):
    s = tshared.alloc[f32](8)
    cp_async.shared.global_(s, x[start:])
    tbarrier()
    y[tile.linear_id()] = s[tile.linear_id()]


def test_a_copy_starting_near_the_end_of_i64_copies_nothing(target):
    x = np.arange(1, 9, dtype=np.float32)
    y = np.full(8, -1, np.float32)
    copy_from[1](y, x, I64_MAX)
    np.testing.assert_array_equal(y, np.zeros(8, np.float32))
