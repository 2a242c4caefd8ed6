"""Integer semantics of the operator layer: reductions and Python numbers follow NumPy 2's
promotion (NEP 50), or raise a clear TesseraError (docs/ops.md, "Integers and Python
numbers")."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import graph, op
from tessera.errors import TesseraError


@pytest.mark.parametrize(
    "values, dtype",
    [
        (np.full(300, 100), np.int8),
        (np.full(5, 2**31 + 7), np.uint32),
        (np.ones(300), np.bool_),
        (np.full(70000, 2), np.int16),
        (np.full(3, 2**63 - 1), np.uint64),
    ],
    ids=["int8", "uint32", "bool", "int16", "uint64"],
)
def test_sum_of_small_integers_accumulates_in_the_platform_integer(values, dtype):
    x = values.astype(dtype)
    got, want = op.sum(x), np.sum(x)
    assert got.dtype == want.dtype
    assert got == want


def test_sum_of_int8_along_an_axis_is_int64():
    x = np.full((4, 200), 100, np.int8)
    for axis in (0, 1):
        got, want = op.sum(x, axis=axis), np.sum(x, axis=axis)
        assert got.dtype == want.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_sum_of_integers_in_a_module_is_int64():
    @graph.module("int_sum")
    def total(x):
        return op.sum(x * 2)

    x = np.full(300, 100, np.int8)
    got = total(x)
    assert got.dtype == np.int64
    assert got == np.sum(x * np.int8(2))


def test_max_and_min_of_bool_arrays_are_bool():
    b = np.array([False, True, False])
    assert op.max(b).dtype == np.bool_ and op.max(b) == np.max(b)
    assert op.min(b).dtype == np.bool_ and op.min(b) == np.min(b)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "maximum", "minimum"])
def test_a_python_float_with_an_int_array_promotes_to_float64(name):
    x = np.array([-3, 1, 7], np.int8)
    got = getattr(op, name)(x, 0.5)
    numpy_name = {"add": "add", "sub": "subtract", "mul": "multiply"}.get(name, name)
    want = getattr(np, numpy_name)(x, 0.5)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_array_equal(got, want)


def test_a_python_float_first_with_an_int_array_promotes_to_float64():
    x = np.array([-3, 1, 7], np.int16)
    got = op.sub(0.5, x)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, 0.5 - x)


def test_int_array_divided_by_a_python_float_is_float64():
    x = np.array([-3, 1, 7], np.int32)
    got = op.div(x, 2.0)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, x / 2.0)


@pytest.mark.parametrize("value", [1000, -129, 2**64])
def test_a_python_int_out_of_the_int8_range_is_an_error(value):
    x = np.ones(3, np.int8)
    with pytest.raises(TesseraError, match=rf"op\.add: the Python int {value} does not fit i8"):
        op.add(x, value)


def test_a_negative_python_int_with_an_unsigned_array_is_an_error():
    with pytest.raises(TesseraError, match=r"op\.sub: the Python int -1 does not fit u8"):
        op.sub(np.ones(3, np.uint8), -1)


def test_a_python_int_in_range_keeps_the_int_dtype():
    x = np.array([1, 2, 3], np.int8)
    got = op.add(x, -128)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, x + -128)


def test_a_python_int_too_large_for_a_float_is_an_error():
    with pytest.raises(TesseraError, match=r"op\.mul: the Python int 1000.* does not fit f32"):
        op.mul(np.ones(3, np.float32), 10**400)


def test_a_bool_array_with_a_python_int_promotes_to_int64():
    b = np.array([True, False])
    got = op.add(b, 1)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, b + 1)


def test_a_bool_array_with_a_python_float_promotes_to_float64():
    b = np.array([True, False])
    got = op.mul(b, 0.5)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, b * 0.5)


def test_a_python_bool_with_an_int_array_keeps_the_int_dtype():
    x = np.array([1, 2], np.int8)
    got = op.add(x, True)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, x + True)


def test_comparing_with_a_python_int_out_of_range_compares_values():
    x = np.array([-5, 0, 100], np.int8)

    @graph.module("compare_wide")
    def compare(v):
        return v < 1000, v > -1000

    lt, gt = compare(x)
    np.testing.assert_array_equal(lt, x < 1000)
    np.testing.assert_array_equal(gt, x > -1000)
    u = np.array([0, 255], np.uint8)

    @graph.module("compare_unsigned")
    def negative(v):
        return v >= -1

    np.testing.assert_array_equal(negative(u), u >= -1)


def test_where_with_an_int_array_and_a_python_float_is_float64():
    c = np.array([True, False, True])
    x = np.array([1, 2, 3], np.int8)
    got = op.where(c, x, 0.5)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.where(c, x, 0.5))


def test_where_of_two_python_ints_is_int64():
    c = np.array([True, False])
    got = op.where(c, 1, 2)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.where(c, 1, 2))


def test_a_traced_int_tensor_with_a_python_float_promotes_to_float64():
    @graph.module("int_plus_half")
    def half(x):
        return x + 0.5

    x = np.array([1, 2], np.int32)
    got = half(x)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, x + 0.5)


def test_negating_a_bool_array_is_an_error_as_in_numpy():
    with pytest.raises(TesseraError, match=r"op\.neg: .*bool"):
        op.neg(np.array([True, False]))


def test_subtracting_bool_arrays_is_an_error_as_in_numpy():
    b = np.array([True, False])
    with pytest.raises(TesseraError, match=r"op\.sub: .*bool"):
        op.sub(b, b)
