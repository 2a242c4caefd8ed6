"""Compile errors (LANGUAGE.md §5, §8): raised when the decorator runs, as KernelError,
naming the kernel and pointing at the offending source with ``file:line:col``, the line
and a caret under the column.

Each offending line carries a unique ``# E:<marker>`` comment; the expected line number
and column are computed from this file's text, so the tests survive edits.
"""

from __future__ import annotations

import importlib.util
import inspect
import textwrap

import numpy as np
import pytest

import tessera
from tessera import (
    KiB,
    cp_async,
    f32,
    i32,
    kernel,
    mut,
    reduce_sum,
    tbarrier,
    tile,
    tshared,
)

FILE = inspect.getsourcefile(inspect.currentframe())
LINES = open(FILE).read().splitlines()


def where(marker: str, token: str) -> tuple[int, int, str]:
    """(1-based line, 0-based column of ``token``, line text) of the line marked
    ``# E:<marker>``."""
    tag = f"# E:{marker}"
    hits = [k for k, text in enumerate(LINES) if text.rstrip().endswith(tag)]
    assert len(hits) == 1, f"marker {tag!r} must be on exactly one line, found {len(hits)}"
    text = LINES[hits[0]]
    assert token in text, (token, text)
    return hits[0] + 1, text.index(token), text


def assert_points_at(msg: str, marker: str, token: str) -> None:
    """``msg`` has ``FILE:line:col`` on a line of its own, then the source line, then a
    caret under ``token``."""
    line, col, text = where(marker, token)
    header = f"{FILE}:{line}:{col + 1}"
    lines = msg.splitlines()
    assert header in lines, f"expected a line {header!r} in:\n{msg}"
    k = lines.index(header)
    stripped = text.strip()
    assert lines[k + 1].strip() == stripped, msg
    caret = lines[k + 2]
    assert caret.strip() == "^", msg
    indent = len(text) - len(text.lstrip())
    assert caret.index("^") - (len(lines[k + 1]) - len(lines[k + 1].lstrip())) == col - indent, msg


def compile_error(fn, **options) -> tessera.KernelError:
    """Decorate ``fn``; the decoration itself must raise KernelError naming it."""
    decorate = kernel(**options) if options else kernel
    with pytest.raises(tessera.KernelError) as info:
        decorate(fn)
    err = info.value
    assert err.kernel == fn.__name__
    assert f"'{fn.__name__}'" in str(err)
    return err


# --------------------------------------------------------------------- unsupported syntax


def k_with(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    with open("nowhere"):  # E:with
        y[i] = x[i]


def test_with_statement_is_unsupported():
    err = compile_error(k_with)
    assert "With" in str(err) and "not supported" in str(err)
    assert_points_at(str(err), "with", "with")


def k_listcomp(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    v = [x[j] for j in range(3)]  # E:listcomp
    y[i] = v


def test_list_comprehension_is_unsupported():
    err = compile_error(k_listcomp)
    assert "ListComp" in str(err) and "not supported" in str(err)
    assert_points_at(str(err), "listcomp", "[x[j]")


def k_lambda(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    f = lambda v: v + 1  # noqa: E731  # E:lambda
    y[i] = x[i]


def test_lambda_is_unsupported():
    err = compile_error(k_lambda)
    assert "Lambda" in str(err) and "not supported" in str(err)
    assert_points_at(str(err), "lambda", "lambda")


def k_print(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    print(x[i])  # E:print


def test_calling_an_arbitrary_python_function_is_refused():
    err = compile_error(k_print)
    assert "print" in str(err)
    assert_points_at(str(err), "print", "print")


# --------------------------------------------------------------------- names and types


def k_undef(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i] * no_such_name  # E:undef


def test_undefined_name():
    err = compile_error(k_undef)
    assert "no_such_name" in str(err) and "not defined" in str(err)
    assert_points_at(str(err), "undef", "no_such_name")


def k_floatidx(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i * 0.5]  # E:floatidx


def test_float_index_is_a_type_error():
    err = compile_error(k_floatidx)
    assert "integer" in str(err) and "f32" in str(err)
    assert_points_at(str(err), "floatidx", "i * 0.5")


def k_bitfloat(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i] & 1  # E:bitfloat


def test_bitwise_op_on_float_is_a_type_error():
    err = compile_error(k_bitfloat)
    assert "&" in str(err) and "integer" in str(err)
    assert_points_at(str(err), "bitfloat", "x[i] & 1")


def k_nomut(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    x[i] = y[i]  # E:nomut


def test_write_to_non_mut_parameter():
    err = compile_error(k_nomut)
    assert "'x'" in str(err) and "mut" in str(err)
    assert_points_at(str(err), "nomut", "x[i] =")


def k_nomut_atomic(h: i32[n]):
    tile.atomic_add(h, 0, 1)  # E:nomut_atomic


def test_atomic_add_into_non_mut_parameter():
    err = compile_error(k_nomut_atomic)
    assert "'h'" in str(err) and "mut" in str(err)
    assert_points_at(str(err), "nomut_atomic", "tile.atomic_add")


def k_assignparam(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    alpha = 2.0  # E:assignparam
    y[i] = alpha * x[i]


def test_assigning_to_a_parameter_name():
    err = compile_error(k_assignparam)
    assert "cannot assign to parameter 'alpha'" in str(err)
    assert_points_at(str(err), "assignparam", "alpha")


# --------------------------------------------------------------------- divergent collectives


def assert_divergence(err, marker, token, cond_marker, cond_token):
    msg = str(err)
    assert "lane" in msg
    assert_points_at(msg.split("note:")[0], marker, token)
    assert "note:" in msg, msg
    assert_points_at(msg.split("note:", 1)[1], cond_marker, cond_token)


def k_div_if(x: f32[n], y: mut[f32[n]]):
    if tile.linear_id() < 5:  # E:div_if_cond
        tbarrier()  # E:div_if


def test_tbarrier_under_lane_dependent_if():
    err = compile_error(k_div_if, tile=(32,), shared=1 * KiB)
    assert "tbarrier" in str(err)
    assert_divergence(err, "div_if", "tbarrier", "div_if_cond", "tile.linear_id() < 5")


def k_div_reduce(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](32)
    lane = tile.linear_id()
    s[lane] = x[lane]
    tbarrier()
    if lane % 2 == 0:  # E:div_reduce_cond
        y[lane] = reduce_sum(s)  # E:div_reduce


def test_reduce_sum_under_lane_dependent_if():
    err = compile_error(k_div_reduce, tile=(32,), shared=1 * KiB)
    assert "reduce_sum" in str(err)
    assert_divergence(err, "div_reduce", "reduce_sum", "div_reduce_cond", "lane % 2")


def k_div_return(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    if lane == 3:  # E:div_return_cond
        return
    tbarrier()  # E:div_return
    y[lane] = x[lane]


def test_tbarrier_after_lane_dependent_early_return():
    err = compile_error(k_div_return, tile=(32,), shared=1 * KiB)
    assert_divergence(err, "div_return", "tbarrier", "div_return_cond", "if lane")


def k_div_loop(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    for j in range(lane):  # E:div_loop_cond
        tbarrier()  # E:div_loop


def test_tbarrier_in_loop_with_lane_dependent_trip_count():
    err = compile_error(k_div_loop, tile=(32,), shared=1 * KiB)
    assert_divergence(err, "div_loop", "tbarrier", "div_loop_cond", "lane)")


def k_div_while(x: f32[n], y: mut[f32[n]]):
    k = 0
    while k < tile.linear_id():  # E:div_while_cond
        tbarrier()  # E:div_while
        k += 1


def test_tbarrier_in_while_with_lane_dependent_condition():
    err = compile_error(k_div_while, tile=(32,), shared=1 * KiB)
    assert_divergence(err, "div_while", "tbarrier", "div_while_cond", "k < tile")


def k_div_mem(x: f32[n], y: mut[f32[n]]):
    v = x[tile.linear_id()]
    if v > 0.0:  # E:div_mem_cond
        tbarrier()  # E:div_mem


def test_tbarrier_under_condition_on_memory_read_at_lane_index():
    err = compile_error(k_div_mem, tile=(32,), shared=1 * KiB)
    assert_divergence(err, "div_mem", "tbarrier", "div_mem_cond", "v > 0.0")


# --------------------------------------------------------------------- shared memory budget


def k_over(x: f32[n], y: mut[f32[n]]):
    small = tshared.alloc[f32](16)
    big = tshared.alloc[f32](1024)  # E:over
    tbarrier()


def test_shared_memory_over_budget_prints_both_sizes():
    err = compile_error(k_over, tile=(32,), shared=2 * KiB)
    msg = str(err)
    assert str(16 * 4 + 1024 * 4) in msg and str(2 * KiB) in msg, msg
    assert "budget" in msg
    assert_points_at(msg, "over", "big")


def k_at_budget(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](1000)
    t = tshared.alloc[f32](24)


def test_shared_memory_exactly_at_budget_is_fine():
    assert kernel(tile=(32,), shared=4 * KiB)(k_at_budget).grouped


# --------------------------------------------------------------------- group primitives in flat kernels


def k_flat_barrier(x: f32[n], y: mut[f32[n]]):
    tbarrier()  # E:flat_barrier


def test_tbarrier_in_flat_kernel():
    err = compile_error(k_flat_barrier)
    assert "tile=" in str(err)
    assert_points_at(str(err), "flat_barrier", "tbarrier")


def k_flat_alloc(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](32)  # E:flat_alloc


def test_tshared_alloc_in_flat_kernel():
    err = compile_error(k_flat_alloc)
    assert "tile=" in str(err) and "tshared.alloc" in str(err)
    assert_points_at(str(err), "flat_alloc", "tshared")


def k_flat_reduce(x: f32[n], y: mut[f32[n]]):
    y[0] = reduce_sum(x)  # E:flat_reduce


def test_reduce_sum_in_flat_kernel():
    err = compile_error(k_flat_reduce)
    assert "tile=" in str(err) and "reduce_sum" in str(err)
    assert_points_at(str(err), "flat_reduce", "reduce_sum")


def k_flat_copy(x: f32[n], y: mut[f32[n]]):
    cp_async.shared.global_(y, x[0:4])  # E:flat_copy


def test_cp_async_in_flat_kernel():
    err = compile_error(k_flat_copy)
    assert "tile=" in str(err) and "cp_async" in str(err)
    assert_points_at(str(err), "flat_copy", "cp_async")


def k_flat_tsum(x: f32[n], y: mut[f32[n]]):
    y[0] = tile.sum(x[tile.linear_id()])  # E:flat_tsum


def test_tile_sum_in_flat_kernel():
    err = compile_error(k_flat_tsum)
    assert "tile=" in str(err)
    assert_points_at(str(err), "flat_tsum", "tile.sum")


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


STRING_DIMS_MODULE = '''
import tessera
from tessera import f32, mut, tile, kernel


@kernel
def copy_strdims(x: f32["n"], y: mut[f32["n"]], z: f32["n", 3]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] + z[i, 2]
'''


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


@pytest.mark.xfail(strict=True, reason="BUG: a kernel defined inside a function (indented "
                   "source) fails at decoration with 'bad annotation ... is not a valid range': "
                   "source_info_of shifts col_offset but not end_col_offset of annotation nodes")
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
    def nested_strcopy(x: "f32[n]", y: "mut[f32[n]]"):
        i = tile.linear_id()
        y[i] = x[i]

    x = rng.standard_normal(10).astype(np.float32)
    y = np.zeros_like(x)
    nested_strcopy[10](x, y)
    np.testing.assert_array_equal(y, x)


def test_kernel_error_is_a_tessera_error():
    assert issubclass(tessera.KernelError, tessera.TesseraError)
