"""Bad and odd inputs to the operator layer are refused with a TesseraError naming the op
and the argument, never a raw ValueError, TypeError, ZeroDivisionError or MemoryError
(found by fuzzing every public op; tests/test_ops_fuzz.py keeps fuzzing them). Empty
reductions without an identity raise as NumPy's do; large matmul tiles are refused."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tessera import op
from tessera.errors import TesseraError

X = np.arange(12, dtype=np.float32).reshape(3, 4)
W = np.ones(4, np.float32)
Q = np.ones((4, 8), np.float32)


def refused(call, *words: str) -> TesseraError:
    """``call()`` raises a TesseraError whose first line holds each of ``words``."""
    with pytest.raises(TesseraError) as info:
        call()
    first = str(info.value).splitlines()[0]
    for word in words:
        assert re.search(word, first), f"{word!r} not in {first!r}"
    return info.value


# ----------------------------------------------------------------------------- item 6
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_and_min_of_an_empty_array_are_errors(name):
    refused(lambda: getattr(op, name)(np.ones(0, np.float32)), rf"op\.{name}", "empty", "identity")


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_and_min_along_an_empty_axis_are_errors(name):
    x = np.ones((4, 0), np.float32)
    refused(lambda: getattr(op, name)(x, axis=1), rf"op\.{name}", "axis 1", "identity")
    refused(lambda: getattr(op, name)(x.T, axis=0), rf"op\.{name}", "axis 0", "identity")


def test_max_along_a_full_axis_of_an_empty_array_is_empty_as_in_numpy():
    x = np.ones((0, 4), np.float32)
    got = op.max(x, axis=1)
    assert got.shape == np.max(x, axis=1).shape == (0,)


def test_sum_of_an_empty_array_is_zero_as_in_numpy():
    assert op.sum(np.ones(0, np.float32)) == 0


def test_attention_over_zero_keys_is_an_error():
    k = np.ones((0, 8), np.float32)
    refused(lambda: op.flash_attention(Q, k, k), r"op\.flash_attention", "0 keys")


def test_attention_over_zero_queries_is_empty():
    q = np.ones((0, 8), np.float32)
    assert op.flash_attention(q, Q, Q).shape == (0, 8)


# ----------------------------------------------------------------------------- item 13
def test_a_ragged_list_is_an_error_naming_the_argument():
    refused(lambda: op.add(X, [[1.0], [1.0, 2.0]]), r"op\.add", "argument 1", "list")


def test_a_complex_array_is_an_error_naming_the_dtype():
    # (+, -, *, op.real, op.imag, op.conj and the transforms take complex arrays)
    refused(lambda: op.exp(np.ones(3, np.complex64)), r"op\.exp", "complex64")
    refused(lambda: op.max(np.ones(3, np.complex64)), r"op\.max", "complex64")


def test_a_complex_cast_is_an_error():
    refused(lambda: op.cast(X, np.complex64), r"op\.cast", "dtype", "complex64")


@pytest.mark.parametrize("axis", [[0], 1.5, "0", (0, 1)], ids=["list", "float", "str", "tuple"])
def test_a_reduction_axis_that_is_no_int_is_an_error(axis):
    refused(lambda: op.sum(X, axis=axis), r"op\.sum", "axis")


def test_a_numpy_integer_axis_is_an_axis():
    np.testing.assert_allclose(op.sum(X, axis=np.int64(1)), X.sum(axis=1))


def test_a_reduction_of_a_0d_array_along_axis_0_is_its_element_as_in_numpy():
    x = np.array(3.0, np.float32)
    for axis in (0, -1):
        assert op.sum(x, axis=axis) == np.sum(x, axis=axis)
        assert op.max(x, axis=axis) == 3.0
    refused(lambda: op.sum(x, axis=1), r"op\.sum", "axis=1")


def test_softmax_of_a_0d_array_is_an_error():
    refused(lambda: op.softmax(np.array(1.0, np.float32), axis=0), r"op\.softmax")


def test_keepdims_that_is_no_bool_is_an_error():
    refused(lambda: op.sum(X, keepdims=np.ones(2)), r"op\.sum", "keepdims")


@pytest.mark.parametrize(
    "tile_shape",
    [(0, 0), (0, 0, 0), (8, 8), (-1, 8, 8), (8, 8, 8, 8), "x", 5, ("a", "b", "c"), (1.5, 8, 8)],
)
def test_a_malformed_tile_shape_is_an_error_naming_it(tile_shape):
    refused(lambda: op.matmul(X, X.T, tile_shape=tile_shape), r"op\.matmul", "tile_shape")


@pytest.mark.parametrize(
    "space", [{"BM": 8, "BN": 8, "BK": 8}, {"a": [1]}, {"BM": [0], "BN": [8], "BK": [8]}]
)
def test_a_malformed_tile_shape_space_is_an_error_naming_it(space):
    refused(lambda: op.matmul(X, X.T, tile_shape=space), r"op\.matmul", "tile_shape")


def test_a_malformed_tile_shape_is_still_a_value_error():
    with pytest.raises(ValueError):
        op.matmul(X, X.T, tile_shape=(0, 0))


@pytest.mark.parametrize(
    "a, b",
    [((4, 0), (0, 4)), ((4, 4), (4, 0)), ((0, 4), (4, 4))],
    ids=["k=0", "n=0", "m=0"],
)
def test_matmul_of_empty_matrices_is_as_numpy(a, b):
    x, y = np.ones(a, np.float32), np.ones(b, np.float32)
    got = op.matmul(x, y)
    np.testing.assert_array_equal(got, x @ y)


def test_an_operand_too_large_for_memory_is_an_error():
    huge = np.broadcast_to(np.float32(1), (2**20, 2**20))
    refused(lambda: op.matmul(huge, huge), r"op\.matmul", "memory|too large")


@pytest.mark.parametrize("shape", ["x", None, 1.5, (1.5,), ("a",)])
def test_a_reshape_to_no_shape_is_an_error(shape):
    refused(lambda: op.reshape(X, shape), r"op\.reshape", "shape")


def test_a_reshape_to_an_int_is_a_1d_reshape_as_in_numpy():
    np.testing.assert_array_equal(op.reshape(X, 12), X.reshape(12))


@pytest.mark.parametrize("dtype", ["x", None, 5, object, np.dtype("U3")])
def test_a_cast_to_no_dtype_is_an_error_naming_it(dtype):
    error = refused(lambda: op.cast(X, dtype), r"op\.cast", "dtype")
    assert isinstance(error, TypeError)


def test_a_wrong_argument_count_is_an_error_naming_the_op():
    refused(lambda: op.add(X, X, X), r"op\.add", "2 argument")
    refused(lambda: op.neg(), r"op\.neg", "1 argument")


@pytest.mark.parametrize("p", [2, -0.1, float("nan"), "0.5", None, 1.0])
def test_a_dropout_probability_out_of_range_is_an_error_naming_p(p):
    error = refused(lambda: op.dropout(X, p, 0), r"op\.dropout", "p=")
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, None, "1"])
def test_a_bad_dropout_seed_is_an_error_naming_seed(seed):
    refused(lambda: op.dropout(X, 0.5, seed), r"op\.dropout", "seed=")


def test_numpy_numbers_are_dropout_numbers():
    a = op.dropout(X, np.float32(0.5), np.int64(3))
    np.testing.assert_array_equal(a, op.dropout(X, 0.5, 3))


@pytest.mark.parametrize("eps", [None, "x", 1j])
@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_a_normalisation_eps_that_is_no_number_is_an_error(name, eps):
    args = (X, W, W) if name == "layernorm" else (X, W)
    refused(lambda: getattr(op, name)(*args, eps=eps), rf"op\.{name}", "eps")


def test_a_nan_eps_gives_nan_not_a_compile_error():
    assert np.isnan(op.rmsnorm(X, W, eps=float("nan"))).all()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_nan_or_inf_python_number_is_a_number(value):
    np.testing.assert_array_equal(op.add(X, value), X + np.float32(value))


@pytest.mark.parametrize(
    "q", [None, np.ones((), np.float32), np.ones((0,), np.float32), "q", {}], ids=repr
)
def test_attention_of_no_matrix_is_an_error_naming_q(q):
    refused(lambda: op.flash_attention(q, Q, Q), r"op\.flash_attention")


def test_attention_of_a_zero_head_dim_is_an_error():
    e = np.ones((4, 0), np.float32)
    refused(lambda: op.flash_attention(e, e, Q), r"op\.flash_attention", "head dim")


def test_attention_of_a_list_is_an_error_naming_its_dtype():
    # a list is an f64 array (NumPy's default), which attention refuses by name
    refused(lambda: op.flash_attention(Q.tolist(), Q, Q), r"op\.flash_attention", "f32")


@pytest.mark.parametrize("scale", ["x", 1j, None])
def test_an_attention_scale_that_is_no_number_is_an_error(scale):
    if scale is None:
        return  # the default
    refused(lambda: op.flash_attention(Q, Q, Q, scale=scale), r"op\.flash_attention", "scale")


def test_an_attention_causal_flag_that_is_no_bool_is_an_error():
    refused(lambda: op.flash_attention(Q, Q, Q, causal=np.ones(2)), "op.flash_attention", "causal")


# ----------------------------------------------------------------------------- item 14
@pytest.mark.parametrize("tile_shape", [(256, 128, 32), (128, 128, 128), (64, 64, 1024)])
def test_matmul_tiles_above_the_bound_are_refused_before_compiling(tile_shape):
    refused(lambda: op.matmul(X, X.T, tile_shape=tile_shape), r"op\.matmul", "tile_shape", "32768")


def test_a_tile_space_with_a_block_above_the_bound_is_refused():
    space = {"BM": [64, 256], "BN": [128], "BK": [32]}
    refused(lambda: op.matmul(X, X.T, tile_shape=space), r"op\.matmul", "tile_shape")


def test_huge_tiles_are_refused_not_an_internal_error():
    refused(lambda: op.matmul(X, X.T, tile_shape=(2**40, 8, 8)), r"op\.matmul", "tile_shape")


def test_the_largest_allowed_tiles_are_accepted():
    from tessera.op import _tile_shape  # (compiling them takes half a minute)

    assert _tile_shape((128, 128, 64)) == (128, 128, 64)
    assert _tile_shape({"BM": [128], "BN": [128], "BK": [32, 64]})
