"""TESSERA_CPU_VECTOR_BITS: the vector width the CPU target asks LLVM for
(targets/cpu/vector_width.py). The width changes speed only, never a result."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba.core import codegen

import tessera as ts
from tessera import f32, group_id, kernel, mut, tile
from tessera.kernel.targets.cpu import vector_width


def make_math_kernel():
    """A fresh kernel object each call (the width is read when its code is compiled)."""

    @kernel
    def lane_math(x: f32[n], y: mut[f32[4, n]]):
        i = tile.linear_id()
        if i < n:
            y[0, i] = math.exp(x[i])
            y[1, i] = math.log(abs(x[i]))
            y[2, i] = math.tanh(x[i])
            y[3, i] = math.erf(x[i]) * x[i] + 0.5

    return lane_math


def make_tile_kernel():
    @kernel(tile=(16,))
    def row_softmax(x: f32[R, 64], y: mut[f32[R, 64]]):
        r0 = group_id(0) * 4
        t = tile.load_block(x, (r0, 0), (4, 64))
        e = math.exp(t - t.max(axis=1)[:, None])
        tile.store_block(y, (r0, 0), e / e.sum(axis=1)[:, None])

    return row_softmax


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(3)
    parts = [rng.uniform(-90, 90, 3000), rng.uniform(-2, 2, 3000), [0.0, -0.0, np.nan, np.inf]]
    return np.concatenate(parts).astype(np.float32)


@pytest.mark.parametrize("bits", ["256", "512"])
def test_lane_math_gives_the_same_bits_at_either_width(bits):
    x = _inputs()
    want = np.zeros((4, x.size), np.float32)
    with ts.config(target="debug"):
        make_math_kernel()[x.size](x, want)
    got = np.zeros_like(want)
    with ts.config(target="cpu", cpu_vector_bits=bits):
        make_math_kernel()[x.size](x, got)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("bits", ["256", "512"])
def test_tile_math_gives_the_same_bits_at_either_width(bits):
    x = np.random.default_rng(4).standard_normal((64, 64)).astype(np.float32)
    want = np.zeros_like(x)
    with ts.config(target="debug"):
        make_tile_kernel()[16](x, want)
    got = np.zeros_like(x)
    with ts.config(target="cpu", cpu_vector_bits=bits):
        make_tile_kernel()[16](x, got)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_auto_widens_arithmetic_bound_kernels_on_an_avx512_cpu_only():
    with ts.config(cpu_vector_bits="auto"):
        expected = 512 if vector_width.host_has_avx512() else None
        assert vector_width.preferred_bits(arithmetic_bound=True) == expected
        assert vector_width.preferred_bits(arithmetic_bound=False) is None


def test_a_number_sets_the_width_of_every_kernel():
    with ts.config(cpu_vector_bits="256"):
        assert vector_width.preferred_bits(arithmetic_bound=True) == 256
    with ts.config(cpu_vector_bits="512"):
        assert vector_width.preferred_bits(arithmetic_bound=False) == 512


@pytest.mark.skipif(not vector_width.host_has_avx512(), reason="needs an AVX-512 CPU")
def test_a_kernel_calling_exp_is_widened_and_a_plain_one_is_not():
    @kernel
    def scaled(x: f32[n], y: mut[f32[n]]):
        i = tile.linear_id()
        if i < n:
            y[i] = 2.0 * x[i] + y[i]

    x = _inputs()
    y = np.zeros((4, x.size), np.float32)
    with ts.config(target="cpu", cpu_vector_bits="auto"):
        k = make_math_kernel()
        k[x.size](x, y)
        assert "vmulps\t%zmm" in k.inspect("asm", x, y)
        plain = np.zeros_like(x)
        scaled[x.size](x, plain)
        assert "vmulps\t%zmm" not in scaled.inspect("asm", x, plain)


@pytest.mark.skipif(not vector_width.host_has_avx512(), reason="needs an AVX-512 CPU")
def test_512_bits_computes_16_floats_per_instruction_and_256_bits_8():
    x = _inputs()
    y = np.zeros((4, x.size), np.float32)
    asm = {}
    for bits in ("256", "512"):
        with ts.config(target="cpu", cpu_vector_bits=bits):
            k = make_math_kernel()
            k[x.size](x, y)
            asm[bits] = k.inspect("asm", x, y)
    assert "vmulps\t%zmm" in asm["512"]
    assert "vmulps\t%zmm" not in asm["256"]
    assert "vmulps\t%ymm" in asm["256"]


def test_numba_code_compiled_afterwards_is_left_alone():
    original = codegen.CPUCodeLibrary.add_ir_module
    x = _inputs()
    with ts.config(cpu_vector_bits="512"):
        make_math_kernel()[x.size](x, np.zeros((4, x.size), np.float32))
    assert codegen.CPUCodeLibrary.add_ir_module is original
