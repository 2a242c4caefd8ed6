"""Dtype-generic kernels: factories (closures over BLOCK and a dtype), ``dtype_constexpr``
parameters, string constexprs chosen at compile time, and the group shape from a factory."""

from __future__ import annotations

import numpy as np
import pytest
from error_helpers import assert_points_at, compile_error

import tessera
import tessera as ts
from tessera import (
    constexpr,
    dtype_constexpr,
    f16,
    f32,
    kernel,
    mut,
    reduce_sum,
    tbarrier,
    tile,
    tshared,
)


def make_block_sum(BLOCK, dt):
    """A kernel factory: the group shape, the shared array and the dtype come from the
    factory's arguments, in the annotations and in the body."""

    @kernel(tile=(BLOCK,), shared=BLOCK * 8)
    def block_sum(x: dt[n], out: mut[dt[grid_groups]]):
        s = tshared.alloc[dt](BLOCK)
        lane = tile.linear_id()
        i = tile.group_linear_id() * BLOCK + lane
        s[lane] = x[i] if i < n else dt(0)
        tbarrier()
        total = reduce_sum(s)
        if lane == 0:
            out[tile.group_linear_id()] = total

    return block_sum


@pytest.mark.parametrize(("block", "dt"), [(32, f32), (64, f16)])
def test_a_factory_closes_over_the_block_and_the_dtype(target, block, dt):
    k = make_block_sum(block, dt)
    x = np.ones(200, dt.np_dtype)
    out = np.zeros(-(-200 // block), dt.np_dtype)
    k[len(out)](x, out)
    want = np.full(len(out), block, dt.np_dtype)
    want[-1] = 200 - block * (len(out) - 1)
    np.testing.assert_array_equal(out, want)


@kernel(tile=(32,), shared=256)
def scaled(x: T[n], y: mut[T[n]], alpha: T, T: dtype_constexpr):
    s = tshared.alloc[T](32)
    lane = tile.linear_id()
    i = tile.group_linear_id() * 32 + lane
    s[lane] = x[i] * alpha if i < n else T(0)
    tbarrier()
    if i < n:
        y[i] = s[lane]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_one_kernel_serves_f16_and_f32(target, dtype):
    x = np.linspace(-2, 2, 50).astype(dtype)
    y = np.zeros_like(x)
    scaled[2](x, y, 0.5, dtype)
    np.testing.assert_array_equal(y, x * dtype(0.5))


def test_each_dtype_compiles_its_own_specialisation():
    with ts.config(target="cpu"):
        for dtype in (ts.f16, ts.f32, ts.f16, ts.f32):  # a Tessera dtype or NumPy's
            x = np.ones(40, dtype.np_dtype)
            scaled[2](x, np.zeros_like(x), 1.0, dtype)
        keys = [k for k in scaled._programs if k[0].name == "cpu"]
        assert len(keys) == 2


def test_an_array_of_another_dtype_than_T_is_a_launch_error():
    x = np.ones(40, np.float32)
    with pytest.raises(tessera.LaunchError, match="parameter 'x' expects dtype f16"):
        scaled[2](x, np.zeros_like(x), 1.0, np.float16)


def test_a_dtype_constexpr_needs_a_dtype():
    x = np.ones(40, np.float32)
    with pytest.raises(
        tessera.LaunchError, match="dtype_constexpr parameter .T. must be a real dtype"
    ):
        scaled[2](x, np.zeros_like(x), 1.0, "f32")


@kernel
def activation(x: f32[n], y: mut[f32[n]], ACTIVATION: constexpr = "leaky_relu"):
    i = tile.linear_id()
    if i < n:
        v = x[i]
        if ACTIVATION == "leaky_relu":
            v = v if v > 0.0 else v * 0.01
        elif ACTIVATION == "relu":
            v = max(v, 0.0)
        else:
            v = v & 1  # a type error on f32: this variant never compiles this branch
        y[i] = v


def test_a_string_constexpr_chooses_a_branch_at_compile_time(target):
    x = np.array([-1.0, 2.0], np.float32)
    y = np.zeros_like(x)
    activation[2](x, y)  # the default
    np.testing.assert_array_equal(y, np.float32([-0.01, 2.0]))
    activation[2](x, y, "relu")
    np.testing.assert_array_equal(y, [0.0, 2.0])


def test_the_branch_a_string_constexpr_keeps_is_the_one_typed():
    x = np.ones(2, np.float32)
    with pytest.raises(tessera.KernelError, match="operator & needs integers"):
        activation[2](x, np.zeros_like(x), "gelu")


def make_activation(kind):
    @kernel
    def act(x: f32[n], y: mut[f32[n]]):
        i = tile.linear_id()
        if i < n:
            y[i] = x[i] * 2.0 if kind == "double" else -x[i]

    return act


def test_a_string_from_a_factory_is_folded_when_the_decorator_runs(target):
    x = np.array([1.0, 3.0], np.float32)
    y = np.zeros_like(x)
    make_activation("double")[2](x, y)
    np.testing.assert_array_equal(y, [2.0, 6.0])
    make_activation("negate")[2](x, y)
    np.testing.assert_array_equal(y, [-1.0, -3.0])


# --------------------------------------------------------------------- errors


def k_not_a_dtype(x: T[n], y: mut[f32[n]], T: constexpr):  # E:notdtype
    y[tile.linear_id()] = x[tile.linear_id()]


def test_indexing_a_plain_constexpr_as_a_dtype_says_to_declare_dtype_constexpr():
    err = compile_error(k_not_a_dtype)
    assert "parameter 'x'" in str(err) and "'T: dtype_constexpr'" in str(err)
    assert_points_at(str(err), __file__, "notdtype", "x: T[n]")


def k_default_scalar(x: f32[n], y: mut[f32[n]], alpha: f32 = 2.0):  # E:defaultscalar
    y[tile.linear_id()] = x[tile.linear_id()] * alpha


def test_only_constexpr_parameters_take_defaults():
    err = compile_error(k_default_scalar)
    assert "parameter 'alpha' has a default; only constexpr parameters take one" in str(err)
    assert_points_at(str(err), __file__, "defaultscalar", "alpha")


MODE = "fast"


def k_string_order(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if MODE < "slow":  # E:strorder
        y[i] = x[i]


def test_strings_compare_only_for_equality():
    err = compile_error(k_string_order)
    assert "strings compare only with == and !=" in str(err)
    assert_points_at(str(err), __file__, "strorder", "MODE")


# --------------------------------------------------------------------- group shape


@kernel(tile=("BLOCK",), shared=4096)
def shaped_sum(x: f32[n], out: mut[f32[grid_groups]], BLOCK: constexpr = 64):
    s = tshared.alloc[f32](BLOCK)
    lane = tile.linear_id()
    i = tile.group_linear_id() * BLOCK + lane
    s[lane] = x[i] if i < n else 0.0
    tbarrier()
    total = reduce_sum(s)
    if lane == 0:
        out[tile.group_linear_id()] = total


@pytest.mark.parametrize("block", [32, 64, 128])
def test_the_group_shape_comes_from_a_constexpr(target, block):
    x = np.ones(300, np.float32)
    out = np.zeros(-(-300 // block), np.float32)
    shaped_sum[len(out)](x, out, block)
    want = np.full(len(out), block, np.float32)
    want[-1] = 300 - block * (len(out) - 1)
    np.testing.assert_array_equal(out, want)


def test_a_constexpr_group_shape_with_a_default_compiles_when_the_decorator_runs():
    assert list(shaped_sum._kernels)[0] == (64,)


def test_a_group_shape_of_zero_is_a_launch_error_naming_the_parameter():
    x = np.ones(300, np.float32)
    with pytest.raises(tessera.LaunchError, match="constexpr parameter 'BLOCK' gives the group"):
        shaped_sum[1](x, np.zeros(1, np.float32), 0)


def k_shape_not_constexpr(x: f32[n], BLOCK: f32):
    tbarrier()


def test_a_group_shape_must_name_a_constexpr_parameter():
    err = compile_error(k_shape_not_constexpr, tile=("BLOCK",))
    assert "'BLOCK', which is not a constexpr parameter of 'k_shape_not_constexpr'" in str(err)


def make_tuned_scale(dt):
    @ts.kernel.autotune(space={"B": [1, 2]})
    def tuned_scale(x: dt[n], y: mut[dt[n]]):
        i = tile.linear_id()
        if i < n:
            y[i] = x[i] * B

    return tuned_scale


def test_an_autotuned_kernel_made_by_a_factory_sees_the_factorys_dtype():
    k = make_tuned_scale(f16)
    x = np.ones(8, np.float16)
    y = np.zeros_like(x)
    with ts.config(target="cpu"):
        k[8](x, y)
    assert set(y.tolist()) <= {1.0, 2.0} and len(set(y.tolist())) == 1
