"""What ported Triton and CUDA code writes (issue "what real code needs", item 10):
``math.exp2``, ``float("-inf")`` and small constant lists indexed in a loop, on every
target (docs/language.md, "Small value types" and "Math")."""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

import tessera as ts
from tessera import f32, i8, i32, kernel, mut, tile

needs_exp2 = pytest.mark.skipif(sys.version_info < (3, 11), reason="math.exp2 is Python 3.11+")


def _exp2_kernel():
    @kernel
    def exp2_and_log2(x: f32[n], y: mut[f32[n]]):
        i = tile.linear_id()
        if i < n:
            y[i] = math.exp2(x[i]) + math.log2(x[i] + 1.0)

    return exp2_and_log2


@needs_exp2
def test_exp2_and_log2_match_numpy(target):
    x = np.linspace(-20, 20, 41, dtype=np.float32)
    x = np.abs(x)  # log2(x + 1) needs x > -1
    y = np.zeros_like(x)
    _exp2_kernel()[x.size](x, y)
    np.testing.assert_allclose(y, np.exp2(x) + np.log2(x + 1), rtol=2e-6)


@needs_exp2
@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="compiles PTX")
def test_exp2_compiles_to_ptx():
    x = np.zeros(4, np.float32)
    ptx = _exp2_kernel().inspect("ptx", x, x, grid=4)
    assert ".entry" in ptx and "st.global.f32" in ptx  # libdevice's powf, inlined by NVVM


@kernel
def infinities(x: f32[n], y: mut[f32[n]], z: mut[f32[3]]):
    i = tile.linear_id()
    if i < n:
        lowest = -float("inf")
        y[i] = max(x[i], lowest)
    if i == 0:
        z[0] = float("-inf")
        z[1] = float("inf")
        z[2] = float("nan")


def test_float_of_inf_and_nan_strings_are_constants(target):
    x = np.array([-3.0, 0.0, 2.5], np.float32)
    y, z = np.zeros_like(x), np.zeros(3, np.float32)
    infinities[3](x, y, z)
    np.testing.assert_array_equal(y, x)
    assert z[0] == -np.inf and z[1] == np.inf and np.isnan(z[2])


@kernel
def stencil(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    c = [0.5, 0.25, 0.125]
    if i + 2 < n:
        s = 0.0
        for j in range(3):
            s += c[j] * x[i + j]
        y[i] = s


def test_a_constant_list_is_indexed_in_a_loop(target):
    x = np.arange(10, dtype=np.float32)
    y = np.zeros_like(x)
    stencil[10](x, y)
    expected = 0.5 * x[:-2] + 0.25 * x[1:-1] + 0.125 * x[2:]
    np.testing.assert_allclose(y[:-2], expected, rtol=1e-6)


@kernel
def pick(y: mut[f32[n]], k: i32):
    i = tile.linear_id()
    c = (1.5, 2.5, 3.5, 4.5)
    if i < n:
        y[i] = c[k]


@pytest.mark.parametrize(("k", "value"), [(0, 1.5), (2, 3.5), (3, 4.5), (-1, 4.5), (-4, 1.5)])
def test_a_tuple_takes_an_index_value_as_python_does(target, k, value):
    y = np.zeros(3, np.float32)
    pick[3](y, k)
    np.testing.assert_array_equal(y, value)


@pytest.mark.parametrize("k", [4, -5])
def test_an_index_out_of_range_is_an_error_where_checks_are_on(k):
    y = np.zeros(3, np.float32)
    for name in ("cpu", "debug"):
        with ts.config(target=name, boundscheck=True):
            with pytest.raises(ts.KernelAssertionError, match=r"c\[k\]: index out of range of 4"):
                pick[3](y, k)


def test_a_constant_index_out_of_range_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="index 3 is out of range of 3 values"):

        @kernel
        def past_the_end(y: mut[f32[n]]):
            c = [1.0, 2.0, 3.0]
            y[0] = c[3]


def test_a_sequence_of_tuples_needs_a_constant_index():
    with pytest.raises(ts.KernelError, match="sequence of tuples or complex numbers"):

        @kernel
        def nested(y: mut[f32[n]], k: i32):
            c = [(1.0, 2.0), (3.0, 4.0)]
            y[0] = c[k][0]


@kernel(tile=(64,))
def widen_then_scale(a: i32[n], y: mut[f32[n]]):
    g = tile.group_id(0)
    acc = tile.load_block(a, (g * 64,), (64,))
    acc = acc.astype(f32) * 0.5
    tile.store_block(y, (g * 64,), acc)


def test_a_name_rebound_to_a_tile_of_another_dtype_is_a_new_variable(target):
    a = np.arange(128, dtype=np.int32)
    y = np.zeros(128, np.float32)
    widen_then_scale[2](a, y)
    np.testing.assert_array_equal(y, a * 0.5)


@kernel(tile=(16,))
def int8_dot_dequantised(a: i8[m, k], b: i8[k, n], c: mut[f32[m, n]], scale: f32):
    acc = tile.dot(tile.load_block(a, (0, 0), (16, 16)), tile.load_block(b, (0, 0), (16, 16)))
    acc = acc.astype(f32) * scale
    tile.store_block(c, (0, 0), acc)


def test_an_integer_dot_rebound_as_its_scaled_float_version(target):
    a = np.random.default_rng(0).integers(-5, 5, (16, 16)).astype(np.int8)
    c = np.zeros((16, 16), np.float32)
    int8_dot_dequantised[1](a, a, c, 0.25)
    np.testing.assert_array_equal(c, (a.astype(np.int32) @ a.astype(np.int32)) * 0.25)


def test_a_name_holding_two_tile_types_where_paths_meet_is_still_an_error():
    with pytest.raises(ts.KernelError, match="'acc' holds tile"):

        @kernel(tile=(64,))
        def joined(a: i32[n], y: mut[f32[n]], flag: i32):
            acc = tile.load_block(a, (0,), (64,))
            if flag > 0:
                acc = acc.astype(f32)
            tile.store_block(y, (0,), acc)
