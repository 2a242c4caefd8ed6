"""Complex literals in kernels (``0.0j``, ``1 + 2j``, a module constant ``1j``): a complex
number of two float literals, weak as float literals are, so the same arithmetic runs on
every target (docs/language.md, "Small value types")."""

from __future__ import annotations

import numpy as np

from tessera import complex64, complex128, f32, kernel, mut, tile

ROTATE = 1j  # a module constant, baked in as numbers are


@kernel
def start_at_zero(x: complex64[n], y: mut[complex64[n]]):
    i = tile.linear_id()
    if i < n:
        z = 0.0j
        z = z + x[i]
        y[i] = z


def test_a_zero_imaginary_literal_starts_a_sum(target):
    x = (np.arange(6) + 1j * np.arange(6, 12)).astype(np.complex64)
    y = np.zeros_like(x)
    start_at_zero[6](x, y)
    np.testing.assert_array_equal(y, x)


@kernel
def scale_by_literal(x: complex64[n], y: mut[complex64[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] * (1 + 2j)


def test_a_real_plus_imaginary_literal_multiplies(target):
    x = (np.arange(5) - 0.5j * np.arange(5)).astype(np.complex64)
    y = np.zeros_like(x)
    scale_by_literal[5](x, y)
    np.testing.assert_allclose(y, x * np.complex64(1 + 2j), rtol=1e-6)


@kernel
def literal_parts(y: mut[f32[4]]):
    i = tile.linear_id()
    if i == 0:
        z = -1.5 + 2j
        y[0] = z.real
        y[1] = z.imag
        y[2] = abs(3 + 4j)
        y[3] = (2j * 2j).real


def test_literal_parts_and_arithmetic(target):
    y = np.zeros(4, np.float32)
    literal_parts[1](y)
    np.testing.assert_array_equal(y, [-1.5, 2.0, 5.0, -4.0])


@kernel
def store_literal(y: mut[complex128[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = 0.5 - 1j * i


def test_a_literal_stored_into_a_complex128_array(target):
    y = np.zeros(3, np.complex128)
    store_literal[3](y)
    np.testing.assert_array_equal(y, 0.5 - 1j * np.arange(3))


@kernel
def rotate(x: complex128[n], y: mut[complex128[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] * ROTATE


def test_a_module_complex_constant(target):
    x = np.array([1 + 2j, -3 + 0.25j], np.complex128)
    y = np.zeros_like(x)
    rotate[2](x, y)
    np.testing.assert_array_equal(y, x * 1j)


@kernel
def parts_of_expressions(x: complex64[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i].imag + (x[i] * 2j).real


def test_parts_of_an_element_and_of_an_expression(target):
    x = np.array([1 + 2j, 3 - 1j], np.complex64)
    y = np.zeros(2, np.float32)
    parts_of_expressions[2](x, y)
    np.testing.assert_array_equal(y, x.imag + (x * 2j).real)
