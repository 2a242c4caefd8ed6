"""The operators a NumPy user types on traced tensors (``**``, reflected ``**``, ``==``,
``!=``, ``abs``) and the ops beside them (``op.pow``, ``op.abs``, ``op.clip``,
``op.log_softmax``, the comparisons), against NumPy (docs/ops.md, "The ops"); their
adjoints are in tests/test_ops_grad.py."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import graph, op


@pytest.fixture
def x():
    return np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)


def test_square_of_a_traced_tensor_is_numpys_bits(x):
    square = graph.module("square")(lambda t: t**2)
    assert square(x).tobytes() == (x**2).tobytes()


def test_root_of_a_traced_tensor_is_numpys_sqrt(x):
    root = graph.module("root")(lambda t: t**0.5)
    p = np.abs(x)
    assert root(p).tobytes() == np.sqrt(p).tobytes()


def test_a_number_to_a_traced_power_matches_numpy(x):
    two_to = graph.module("two_to")(lambda t: 2**t)
    np.testing.assert_allclose(two_to(x), 2.0**x, rtol=1e-6)


def test_a_traced_tensor_to_a_traced_power_matches_numpy(x):
    power = graph.module("power")(lambda a, b: a**b)
    p = np.abs(x) + 0.5
    np.testing.assert_allclose(power(p, x), p**x, rtol=1e-6)


def test_a_captured_numpy_array_to_a_traced_power_is_reflected(x):
    base = np.full(6, 3.0, np.float32)
    power = graph.module("reflected")(lambda t: base**t)
    np.testing.assert_allclose(power(x), base**x, rtol=1e-6)


def test_eager_pow_of_integers_stays_integer():
    out = op.pow(np.arange(5, dtype=np.int32), 3)
    assert out.dtype == np.int32 and out.tolist() == [0, 1, 8, 27, 64]


def test_an_integer_array_to_a_negative_int_is_refused_as_numpy_refuses_it():
    with pytest.raises(op.GraphError, match="negative power"):
        op.pow(np.arange(3, dtype=np.int32), -1)


def test_pow_fuses_into_a_matmul_epilogue(x):
    @graph.module("squared_product")
    def squared(a, b):
        return op.matmul(a, b) ** 2

    b = x.T.copy()
    before = tessera.stats()["launches"]
    out = squared(x, b)
    assert tessera.stats()["launches"] - before == 1
    np.testing.assert_allclose(out, (x @ b) ** 2, rtol=1e-5, atol=1e-5)


def test_equality_of_traced_tensors_is_an_elementwise_bool(x):
    same = graph.module("same")(lambda a, b: op.where(a == b, a, 0.0))
    y = np.where(x > 0, x, 1.0).astype(np.float32)
    np.testing.assert_array_equal(same(x, y), np.where(x == y, x, 0))


def test_inequality_of_traced_tensors_is_an_elementwise_bool(x):
    differ = graph.module("differ")(lambda a, b: op.where(a != b, b, 0.0))
    y = np.where(x > 0, x, 1.0).astype(np.float32)
    np.testing.assert_array_equal(differ(x, y), np.where(x != y, y, 0))


def test_abs_of_a_traced_tensor_is_numpys(x):
    assert graph.module("magnitude")(lambda t: abs(t))(x).tobytes() == np.abs(x).tobytes()


def test_eager_abs_of_integers_is_numpys():
    a = np.array([-3, 0, 5], np.int8)
    assert op.abs(a).tolist() == [3, 0, 5]


def test_clip_between_numbers_is_numpys(x):
    assert op.clip(x, -0.5, 0.5).tobytes() == np.clip(x, -0.5, 0.5).tobytes()


def test_clip_between_broadcast_arrays_is_numpys(x):
    lo, hi = x[0] - 1.0, x[1] + 1.0
    assert op.clip(x, lo, hi).tobytes() == np.clip(x, lo, hi).tobytes()


def test_clip_with_one_bound_is_numpys(x):
    assert op.clip(x, None, 0.25).tobytes() == np.clip(x, None, 0.25).tobytes()


def test_clip_without_bounds_is_refused_naming_the_op(x):
    with pytest.raises(tessera.op.OpTypeError, match="clip"):
        op.clip(x)


def test_log_softmax_matches_numpy(x):
    shifted = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(op.log_softmax(x), want, rtol=1e-5, atol=1e-6)


def test_log_softmax_along_axis_0_matches_numpy(x):
    shifted = x.astype(np.float64) - x.max(axis=0, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(axis=0, keepdims=True))
    np.testing.assert_allclose(op.log_softmax(x, axis=0), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name, numpy",
    [
        ("equal", np.equal),
        ("not_equal", np.not_equal),
        ("greater", np.greater),
        ("greater_equal", np.greater_equal),
        ("less", np.less),
        ("less_equal", np.less_equal),
    ],
)
def test_eager_comparisons_are_numpys(x, name, numpy):
    y = np.where(x > 0, x, 0.0).astype(np.float32)
    np.testing.assert_array_equal(getattr(op, name)(x, y), numpy(x, y))


# ----------------------------------------------------------------------------- // % & | ^ ~
INTS = (np.array([[-7, -3, 0, 5], [9, -8, 1, 2]], np.int32), np.array([2, -4, 3, 0], np.int32))
FLOATS = (
    np.array([[-7.5, -3.0, 0.0, 5.0], [9.25, -8.0, 1.0, 2.0]], np.float32),
    np.array([2.0, -4.0, 3.0, 0.0], np.float32),
)


@pytest.mark.parametrize("a, b", [INTS, FLOATS], ids=["i32", "f32"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's, for the zero divisors
def test_floor_division_and_remainder_are_numpys_with_zero_divisors(target, a, b):
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(a, b), np.remainder(a, b)
    np.testing.assert_array_equal(op.floor_divide(a, b), want_q)
    np.testing.assert_array_equal(op.remainder(a, b), want_r)


def test_bitwise_ops_of_integers_and_bools_are_numpys(target):
    a, b = INTS
    np.testing.assert_array_equal(op.bitwise_and(a, b), a & b)
    np.testing.assert_array_equal(op.bitwise_or(a, 6), a | 6)
    np.testing.assert_array_equal(op.bitwise_xor(a, b), a ^ b)
    np.testing.assert_array_equal(op.invert(a), ~a)
    m = a > 0
    np.testing.assert_array_equal(op.logical_not(m), ~m)
    np.testing.assert_array_equal(op.bitwise_and(m, b != 0), m & (b != 0))


def test_traced_tensors_take_floor_division_remainder_and_bitwise_operators():
    a, b = INTS
    f = graph.module("int_ops")(lambda t, u: (t // 2 + t % 3) * (u & 1) + (~u) ^ (t | 4))
    np.testing.assert_array_equal(f(a, b), (a // 2 + a % 3) * (b & 1) + (~b) ^ (a | 4))
    g = graph.module("bool_ops")(lambda t: ~(t > 0) | (t < -5))
    np.testing.assert_array_equal(g(a), ~(a > 0) | (a < -5))
    h = graph.module("reflected")(lambda t: 100 // (t + 10) + 7 % (t + 10))
    np.testing.assert_array_equal(h(a), 100 // (a + 10) + 7 % (a + 10))


def test_a_bitwise_op_of_floats_is_an_error_naming_it():
    with pytest.raises(tessera.TesseraError, match=r"op\.bitwise_and: takes integer or bool"):
        op.bitwise_and(FLOATS[0], 1)
