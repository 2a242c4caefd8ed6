"""Compile errors (LANGUAGE.md §5, §8) that do not involve groups: raised when the
decorator runs, as KernelError naming the kernel and pointing at the offending source
(``file:line:col``, the line and a caret). Offending lines carry ``# E:<marker>``
comments (see error_helpers.py). Group-related errors are in test_collective_errors.py.
"""

from __future__ import annotations

import importlib.util
import inspect
import textwrap

import numpy as np
import pytest
from error_helpers import assert_points_at, compile_error

import tessera
from tessera import constexpr, f32, i32, kernel, mut, tile

FILE = inspect.getsourcefile(inspect.currentframe())


def points_at(msg: str, marker: str, token: str) -> None:
    assert_points_at(msg, FILE, marker, token)


# --------------------------------------------------------------------- unsupported syntax


def k_with(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    with open("nowhere"):  # E:with
        y[i] = x[i]


def test_with_statement_is_unsupported():
    err = compile_error(k_with)
    assert "With" in str(err) and "not supported" in str(err)
    points_at(str(err), "with", "with")


def k_listcomp(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    v = [x[j] for j in range(3)]  # E:listcomp
    y[i] = v


def test_list_comprehension_is_unsupported():
    err = compile_error(k_listcomp)
    assert "ListComp" in str(err) and "not supported" in str(err)
    points_at(str(err), "listcomp", "[x[j]")


def k_lambda(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    f = lambda v: v + 1  # noqa: E731, F841  # E:lambda
    y[i] = x[i]


def test_lambda_is_unsupported():
    err = compile_error(k_lambda)
    assert "Lambda" in str(err) and "not supported" in str(err)
    points_at(str(err), "lambda", "lambda")


def k_input(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    input(x[i])  # E:input


def test_calling_an_arbitrary_python_function_is_refused():
    err = compile_error(k_input)
    assert "cannot call 'input'" in str(err)
    points_at(str(err), "input", "input")


# --------------------------------------------------------------------- names and types


def k_undef(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i] * no_such_name  # E:undef


def test_undefined_name():
    err = compile_error(k_undef)
    assert "no_such_name" in str(err) and "not defined" in str(err)
    points_at(str(err), "undef", "no_such_name")


def k_floatidx(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i * 0.5]  # E:floatidx


def test_float_index_is_a_type_error():
    err = compile_error(k_floatidx)
    assert "integer" in str(err) and "f32" in str(err)
    points_at(str(err), "floatidx", "i * 0.5")


def k_bitfloat(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i] & 1  # E:bitfloat


def test_bitwise_op_on_float_is_a_type_error():
    err = compile_error(k_bitfloat)
    assert "&" in str(err) and "integer" in str(err)
    points_at(str(err), "bitfloat", "x[i] & 1")


def k_nomut(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    x[i] = y[i]  # E:nomut


def test_write_to_non_mut_parameter():
    err = compile_error(k_nomut)
    assert "'x'" in str(err) and "mut" in str(err)
    points_at(str(err), "nomut", "x[i] =")


def k_nomut_atomic(h: i32[n]):
    tile.atomic_add(h, 0, 1)  # E:nomut_atomic


def test_atomic_add_into_non_mut_parameter():
    err = compile_error(k_nomut_atomic)
    assert "'h'" in str(err) and "mut" in str(err)
    points_at(str(err), "nomut_atomic", "tile.atomic_add")


def k_assignparam(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    alpha = 2.0  # E:assignparam
    y[i] = alpha * x[i]


def test_assigning_to_a_parameter_name():
    err = compile_error(k_assignparam)
    assert "cannot assign to parameter 'alpha'" in str(err)
    points_at(str(err), "assignparam", "alpha")


# --------------------------------------------------------------------- annotations that work


@kernel
def copy_future(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i]


def test_bare_symbol_dims_with_future_annotations(rng):
    x = rng.standard_normal(50).astype(np.float32)
    y = np.zeros_like(x)
    copy_future[50](x, y)
    np.testing.assert_array_equal(y, x)


STRING_DIMS_MODULE = """
import tessera
from tessera import f32, mut, tile, kernel


@kernel
def copy_strdims(x: f32["n"], y: mut[f32["n"]], z: f32["n", 3]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] + z[i, 2]
"""


def test_string_dims_without_future_import(tmp_path, rng):
    path = tmp_path / "strdims_mod.py"
    path.write_text(textwrap.dedent(STRING_DIMS_MODULE))
    spec = importlib.util.spec_from_file_location("strdims_mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert "annotations" not in vars(mod)  # really no __future__ import
    x = rng.standard_normal(20).astype(np.float32)
    z = rng.standard_normal((20, 3)).astype(np.float32)
    y = np.zeros_like(x)
    mod.copy_strdims[20](x, y, z)
    np.testing.assert_array_equal(y, x + z[:, 2])


def test_kernel_defined_inside_a_function_compiles(rng):
    @kernel
    def nested_copy(x: f32[n], y: mut[f32[n]], alpha: f32):
        i = tile.linear_id()
        y[i] = alpha * x[i]

    x = rng.standard_normal(10).astype(np.float32)
    y = np.zeros_like(x)
    nested_copy[10](x, y, 2.0)
    np.testing.assert_array_equal(y, np.float32(2.0) * x)


def test_kernel_with_string_annotations_inside_a_function_compiles(rng):
    @kernel
    def nested_strcopy(x: "f32[n]", y: "mut[f32[n]]"):  # noqa: UP037
        i = tile.linear_id()
        y[i] = x[i]

    x = rng.standard_normal(10).astype(np.float32)
    y = np.zeros_like(x)
    nested_strcopy[10](x, y)
    np.testing.assert_array_equal(y, x)


def test_kernel_error_is_a_tessera_error():
    assert issubclass(tessera.KernelError, tessera.TesseraError)


@tessera.func
def helper_with_type_error(v):
    return v & 1.5  # E:helper_error


def k_calls_bad_helper(x: f32[n], y: mut[f32[n]]):
    y[0] = helper_with_type_error(x[0])


def test_error_inside_a_helper_points_at_the_helper_line():
    err = compile_error(k_calls_bad_helper)
    assert "&" in str(err)
    points_at(str(err), "helper_error", "v & 1.5")


@tessera.func
def recurse(v):
    return recurse(v - 1) if v > 0 else v


def k_recursive(x: f32[n], y: mut[f32[n]]):
    y[0] = recurse(x[0])


def test_recursive_helper_is_a_compile_error():
    err = compile_error(k_recursive)
    assert "recurs" in str(err)


def k_constexpr_type_error(x: f32[n], y: mut[f32[n]], C: constexpr):
    i = tile.linear_id()
    y[i] = x[i * C]  # E:cx_type


def test_type_error_with_constexpr_surfaces_at_the_launch_that_hits_it(rng):
    k = kernel(k_constexpr_type_error)  # fine at decoration: it depends on C
    x = rng.standard_normal(4).astype(np.float32)
    y = np.zeros_like(x)
    k[4](x, y, 1)
    np.testing.assert_array_equal(y, x)
    y0 = y.copy()
    with pytest.raises(tessera.KernelError) as info:
        k[4](x, y, 0.5)
    assert "k_constexpr_type_error" in str(info.value) and "integer" in str(info.value)
    points_at(str(info.value), "cx_type", "i * C")
    np.testing.assert_array_equal(y, y0)


# --------------------------------------------------------------------- found by fuzzing
# (tests/test_mutation_fuzz.py): each was a raw Python exception, an error that did not
# name the kernel, or a kernel the targets ran differently


def k_bad_string_annotation(x: "f32[n", y: mut[f32[n]]):  # noqa: F722  # E:strann
    y[0] = 1.0


def test_a_string_annotation_that_does_not_parse_points_at_the_parameter():
    err = compile_error(k_bad_string_annotation)
    assert "bad annotation for parameter 'x'" in str(err)
    points_at(str(err), "strann", "x:")


lambda_helper = tessera.func(lambda v: v)


def k_calls_lambda_helper(x: f32[n], y: mut[f32[n]]):
    y[0] = lambda_helper(x[0])  # E:lambda_helper


def test_a_helper_without_a_def_is_an_error_at_the_call():
    err = compile_error(k_calls_lambda_helper)
    assert "plain 'def' function" in str(err)
    points_at(str(err), "lambda_helper", "lambda_helper(")


@tessera.func
async def async_helper(v):
    return v


def k_calls_async_helper(x: f32[n], y: mut[f32[n]]):
    y[0] = async_helper(x[0])  # E:async_helper


def test_an_async_helper_is_an_error_at_the_call():
    err = compile_error(k_calls_async_helper)
    points_at(str(err), "async_helper", "async_helper(")


def k_dim_named_like_a_scalar(x: f32[alpha], y: mut[f32[n]], alpha: f32):  # E:dimclash
    y[0] = alpha * x[0]


def test_a_dimension_with_the_name_of_a_parameter_is_an_error():
    """The debug target read the symbol, the CPU target the parameter."""
    err = compile_error(k_dim_named_like_a_scalar)
    assert "dimension 'alpha' of parameter 'x'" in str(err)
    points_at(str(err), "dimclash", "x:")


def k_grid_groups_parameter(y: mut[f32[grid_groups]], grid_groups: i32):  # E:ggparam
    y[0] = 1.0


def test_a_parameter_named_grid_groups_is_an_error():
    err = compile_error(k_grid_groups_parameter, tile=(4,))
    points_at(str(err), "ggparam", "grid_groups:")


class _Settings:
    @property
    def scale(self):
        raise RuntimeError("not configured")


SETTINGS = _Settings()


def k_reads_a_failing_property(x: f32[n], y: mut[f32[n]]):
    y[0] = x[0] * SETTINGS.scale  # E:property


def test_a_global_attribute_that_raises_is_an_error_at_the_attribute():
    """The user's property raised while the kernel was compiled: their error, at their
    line, not a bug in Tessera."""
    err = compile_error(k_reads_a_failing_property)
    assert "raised RuntimeError: not configured" in str(err)
    points_at(str(err), "property", "SETTINGS.scale")
