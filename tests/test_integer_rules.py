"""The language's integer rules, the same bits on every target (docs/language.md,
"Integers"): wrap-around, shifts past the width, float → int out of range, negative
powers; and constants that do not fit are compile errors at their line."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera as ts
from tessera import f64, i32, i64, kernel, mut, u8

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


def _wrap64(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


@kernel
def arithmetic(y: mut[i64[n]], a: i64, s: i64):
    y[0] = a + 1
    y[1] = 1 << s
    y[2] = a << s
    y[3] = -a >> s
    y[4] = a >> s
    y[5] = i64(2) ** 63
    y[6] = (-a) * 3


@kernel
def narrow(y: mut[i32[n]], z: mut[u8[m]], a: i32, s: i32):
    y[0] = a + a
    y[1] = a << s
    y[2] = (-a) >> s
    z[0] = u8(250) + u8(10)
    z[1] = u8(1) << s


@kernel
def to_int(y: mut[i64[n]], z: mut[i32[m]], w: mut[u8[k]], f: f64):
    y[0] = i64(f)
    y[1] = i64(-f)
    y[2] = i64(f - f)  # NaN when f is inf
    z[0] = i32(f)
    w[0] = u8(-f)


@kernel
def powers(y: mut[i64[n]], b: i64, e: i64):
    y[0] = b**e
    y[1] = 2**e
    y[2] = 1**e
    y[3] = (-1) ** e
    y[4] = (-1) ** (e - 1)


def test_i64_arithmetic_wraps_and_shifts_past_the_width_give_zero(target):
    y = np.zeros(7, np.int64)
    arithmetic[1](y, I64_MAX, 64)
    assert y.tolist() == [I64_MIN, 0, 0, -1, 0, I64_MIN, _wrap64(-I64_MAX * 3)]


def test_shifts_within_the_width_are_ordinary_shifts(target):
    y = np.zeros(7, np.int64)
    arithmetic[1](y, 5, 3)
    assert y[1:5].tolist() == [8, 40, -1, 0]


def test_narrow_integers_wrap_at_their_width(target):
    y, z = np.zeros(3, np.int32), np.zeros(2, np.uint8)
    narrow[1](y, z, 2**30 + 1, 40)
    assert y.tolist() == [np.int32(2**31 + 2 - 2**32), 0, -1]
    assert z.tolist() == [4, 0]


def test_float_to_int_saturates_and_nan_gives_zero(target):
    y, z, w = np.zeros(3, np.int64), np.zeros(1, np.int32), np.zeros(1, np.uint8)
    to_int[1](y, z, w, math.inf)
    assert y.tolist() == [I64_MAX, I64_MIN, 0]
    assert z.tolist() == [2**31 - 1] and w.tolist() == [0]
    to_int[1](y, z, w, 1e30)
    assert y.tolist() == [I64_MAX, I64_MIN, 0]


def test_negative_integer_powers_truncate_toward_zero(target):
    y = np.zeros(5, np.int64)
    powers[1](y, 7, -1)
    assert y.tolist() == [0, 0, 1, -1, 1]
    powers[1](y, 3, 5)
    assert y.tolist() == [243, 32, 1, -1, 1]


def test_an_integer_literal_beyond_64_bits_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="does not fit in 64 bits") as err:

        @kernel
        def big(y: mut[i64[n]]):
            y[0] = 100000000000000000000000000000

    assert "100000000000000000000000000000" in str(err.value)


def test_a_constexpr_beyond_64_bits_is_a_compile_error_at_launch():
    @kernel
    def k(y: mut[i64[n]], c: ts.constexpr):
        y[0] = c

    with pytest.raises(ts.KernelError, match="does not fit in 64 bits"):
        k[1](np.zeros(1, np.int64), 10**30)


def test_a_scalar_beyond_a_float_range_is_a_launch_error():
    @kernel
    def k(y: mut[f64[n]], v: f64):
        y[0] = v

    with pytest.raises(ts.LaunchError, match="out of its range"):
        k[1](np.zeros(1), 10**400)


def test_a_zero_range_step_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="step must not be zero"):

        @kernel
        def k(y: mut[i64[n]]):
            for i in range(0, 10, 0):
                y[0] = i


@kernel
def stepped(y: mut[i64[n]], s: i64):
    for i in range(0, 10, s):
        y[0] += i


def test_a_zero_range_step_at_run_time_runs_no_iteration_on_the_cpu():
    y = np.zeros(1, np.int64)
    with ts.config(target="cpu"):
        stepped[1](y, 0)
    assert y[0] == 0
    with ts.config(target="cpu"):
        stepped[1](y, 3)
    assert y[0] == 0 + 3 + 6 + 9


def test_math_fmod_runs_on_every_target(target):
    @kernel
    def k(y: mut[f64[n]], a: f64):
        y[0] = math.fmod(a, 3.0)
        y[1] = math.fmod(-a, 3.0)

    y = np.zeros(2)
    k[1](y, 7.5)
    assert y.tolist() == [1.5, -1.5]
