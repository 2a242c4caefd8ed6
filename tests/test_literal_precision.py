"""Weak literals meet f64 and complex128 values with all their bits (docs/language.md,
Decisions): ``x * 0.1``, ``math.pi * t``, ``z * (0.1 + 0.2j)`` and literal arithmetic
such as ``0.1 * 3.0`` give what NumPy gives on every target, while an f32 value still
meets the literal as an f32, as NumPy 2's promotion has it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tessera import KernelError, complex128, f32, f64, i8, i32, kernel, mut, tile, u8, u64

J = 0.1j


@kernel
def f64_literals(x: f64[n], y: mut[f64[4, n]]):
    i = tile.linear_id()
    y[0, i] = x[i] * 0.1
    y[1, i] = math.pi * x[i]
    y[2, i] = x[i] + 0.1 * 3.0
    y[3, i] = x[i] * -(1.0 / 3.0)


def test_a_float_literal_meets_an_f64_with_all_its_bits(target):
    x = np.array([1.0, 3.0, -7.25], np.float64)
    y = np.zeros((4, 3))
    f64_literals[3](x, y)
    np.testing.assert_array_equal(y[0], x * 0.1)
    np.testing.assert_array_equal(y[1], math.pi * x)
    np.testing.assert_array_equal(y[2], x + 0.1 * 3.0)
    np.testing.assert_array_equal(y[3], x * -(1.0 / 3.0))


@kernel
def complex_literals(z: complex128[n], w: mut[complex128[n]]):
    i = tile.linear_id()
    w[i] = z[i] * (0.1 + 0.2j) + J


def test_a_complex_literal_meets_a_complex128_with_all_its_bits(target):
    z = np.array([1 + 1j, -2.5 + 0.5j], np.complex128)
    w = np.zeros_like(z)
    complex_literals[2](z, w)
    # the language's product: each part's two products rounded, then added
    re = z.real * 0.1 - z.imag * 0.2
    im = z.real * 0.2 + z.imag * 0.1 + 0.1
    np.testing.assert_array_equal(w, re + 1j * im)


@kernel
def f32_literal(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i] * 0.1


def test_a_float_literal_meets_an_f32_as_an_f32(target):
    x = np.array([1.0, 3.0, 1e-3], np.float32)
    y = np.zeros_like(x)
    f32_literal[3](x, y)
    np.testing.assert_array_equal(y, x * np.float32(0.1))  # NumPy 2: x * 0.1 is the same


@kernel
def compares(x: u8[n], y: i8[n], out: mut[i32[n]]):
    i = tile.linear_id()
    out[i] = (1 if x[i] < 300 else 0) + (10 if y[i] > -200 else 0) + (100 if x[i] == 44 else 0)


def test_an_integer_literal_out_of_the_types_range_compares_by_value(target):
    x, y = np.array([44, 255], np.uint8), np.array([-128, 127], np.int8)
    out = np.zeros(2, np.int32)
    compares[2](x, y, out)
    # 300 is not 44 (its u8 wrap), and -200 is below every i8: as Python and NumPy 2 say
    np.testing.assert_array_equal(out, [111, 11])


def test_comparing_a_u64_with_a_negative_literal_is_a_located_error():
    with pytest.raises(KernelError, match=r"comparing a u64 with the negative literal -1"):

        @kernel
        def always(x: u64[n], out: mut[i32[n]]):
            i = tile.linear_id()
            out[i] = 1 if x[i] > -1 else 0
