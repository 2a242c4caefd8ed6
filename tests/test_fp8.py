"""The 8-bit floats f8e4m3 and f8e5m2 (ml_dtypes' float8_e4m3fn and float8_e5m2) in
kernels and in the operator layer: held in f32, rounded to nearest even when stored with
ml_dtypes' bits (overflow: NaN in f8e4m3, infinity in f8e5m2) on every target;
``tile.dot`` of 8-bit tiles exact in f32; ``op.quantize``/``op.dequantize`` with
per-tensor and per-channel scales."""

from __future__ import annotations

import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest

from tessera import (
    KernelError,
    KiB,
    LaunchError,
    f8e4m3,
    f8e5m2,
    f32,
    graph,
    group_id,
    kernel,
    mut,
    op,
    tbarrier,
    tile,
    tshared,
)
from tessera.kernel.targets.semantics import F8_FORMATS, f8_bits, f8_value_bits
from tessera.ops.tensor import GraphError

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 448, 464, 480, 57344, 61440, 1e-3, 2e-3, -0.0, 0.0]


def _bits(a):
    return np.asarray(a).view(np.uint8)


@pytest.mark.parametrize("name, ml", [("f8e4m3", E4M3), ("f8e5m2", E5M2)])
def test_the_languages_rounding_is_ml_dtypes_bit_for_bit(name, ml):
    fmt = F8_FORMATS[name]
    codes = np.arange(256, dtype=np.uint8)
    values = np.array([f8_value_bits(c, *fmt) for c in codes], np.uint32).view(np.float32)
    want = codes.view(ml).astype(np.float32)
    np.testing.assert_array_equal(values, want)  # NaNs in the same places
    rng = np.random.default_rng(0)
    bits = np.concatenate(
        [
            rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32),
            np.arange(0x3A000000, 0x3C000000, 4099, dtype=np.uint32),  # e4m3's subnormals
            np.arange(0x43D00000, 0x44000000, 257, dtype=np.uint32),  # around 448
            np.arange(0x47600000, 0x47900000, 257, dtype=np.uint32),  # around 57344
            np.array(SPECIAL, np.float32).view(np.uint32),
        ]
    )
    got = np.array([f8_bits(b, *fmt) for b in bits], np.uint8)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, _bits(bits.view(np.float32).astype(ml)))


@kernel
def stores(x: f32[n], a: mut[f8e4m3[n]], b: mut[f8e5m2[n]], back: mut[f32[n]], cast: mut[f32[n]]):
    i = tile.linear_id()
    a[i] = x[i]
    b[i] = x[i] * 2.0
    back[i] = f32(a[i]) + f32(b[i])
    cast[i] = f8e4m3(x[i]) * 1.0


def test_stores_loads_and_casts_round_as_ml_dtypes(target, rng):
    x = np.concatenate([rng.standard_normal(64) * 100, SPECIAL]).astype(np.float32)
    n = x.size
    a, b = np.zeros(n, E4M3), np.zeros(n, E5M2)
    back, cast = np.zeros(n, np.float32), np.zeros(n, np.float32)
    with np.errstate(invalid="ignore"):
        want_a, want_b = x.astype(E4M3), (x * 2).astype(E5M2)
    stores[n](x, a, b, back, cast)
    np.testing.assert_array_equal(_bits(a), _bits(want_a))
    np.testing.assert_array_equal(_bits(b), _bits(want_b))
    np.testing.assert_array_equal(back, want_a.astype(np.float32) + want_b.astype(np.float32))
    np.testing.assert_array_equal(cast, want_a.astype(np.float32))


@kernel(tile=(64,), shared=16 * KiB)
def dot8(A: f8e4m3[M, K], B: f8e4m3[K, N], C: mut[f32[M, N]], D8: mut[f8e5m2[M, N]], s: f8e4m3):
    acc = tile.zeros((16, 16), f32)
    for k0 in tile.range(0, K, 16):
        a = tile.load_block(A, (group_id(0) * 16, k0), (16, 16))
        b = tile.load_block(B, (k0, group_id(1) * 16), (16, 16))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (group_id(0) * 16, group_id(1) * 16), acc * s)
    tile.store_block(D8, (group_id(0) * 16, group_id(1) * 16), acc.astype(f8e5m2))


def test_dot_of_8_bit_tiles_is_exact_in_f32_and_a_scalar_parameter_rounds(target, rng):
    a = (rng.standard_normal((32, 48)) * 4).astype(E4M3)
    b = (rng.standard_normal((48, 32)) * 4).astype(E4M3)
    c, d8 = np.zeros((32, 32), np.float32), np.zeros((32, 32), E5M2)
    dot8[2, 2](a, b, c, d8, 0.3)  # 0.3 is 0.3125 in f8e4m3
    product = a.astype(np.float64) @ b.astype(np.float64)  # exact: small integers' sums
    np.testing.assert_array_equal(c, (product * 0.3125).astype(np.float32))
    np.testing.assert_array_equal(_bits(d8), _bits(product.astype(np.float32).astype(E5M2)))


@kernel(tile=(32,), shared=1 * KiB)
def reverse8(x: f8e4m3[n], y: mut[f8e4m3[n]]):
    s = tshared.alloc[f8e4m3](32)
    i = tile.linear_id()
    s[i] = x[i] * 2.0
    tbarrier()
    y[i] = s[31 - i]


def test_shared_arrays_of_8_bit_floats_round_when_written(target, rng):
    x = (rng.standard_normal(32) * 10).astype(E4M3)
    y = np.zeros(32, E4M3)
    reverse8[1](x, y)
    np.testing.assert_array_equal(_bits(y), _bits((x.astype(np.float32) * 2).astype(E4M3)[::-1]))


def test_atomics_on_8_bit_floats_are_refused():
    with pytest.raises(KernelError, match=r"tile.atomic_add on f8e4m3 is not supported"):

        @kernel
        def atomic8(a: mut[f8e4m3[n]]):
            tile.atomic_add(a, 0, 1.0)


def test_ops_cast_and_compute_in_8_bit_floats(rng):
    x = rng.standard_normal(40).astype(np.float32) * 10
    q = op.cast(x, f8e4m3)
    assert q.dtype == E4M3
    np.testing.assert_array_equal(_bits(q), _bits(x.astype(E4M3)))
    np.testing.assert_array_equal(
        _bits(op.add(q, q)), _bits((q.astype(np.float32) * 2).astype(E4M3))
    )
    np.testing.assert_array_equal(op.cast(q, "f32"), q.astype(np.float32))


def test_quantize_saturates_and_rounds_per_tensor(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32) * 100
    x[0, :3] = [np.nan, 1e6, -1e6]
    q = op.quantize(x, 0.5)
    want = np.clip(x / np.float32(0.5), -448, 448).astype(E4M3)
    np.testing.assert_array_equal(_bits(q), _bits(want))


def test_quantize_and_dequantize_per_channel_fuse_in_a_module(rng):
    @graph.module
    def roundtrip(x, s):
        return op.dequantize(op.quantize(x, s, dtype=f8e5m2, axis=1), s, axis=1)

    x = rng.standard_normal((8, 16)).astype(np.float32)
    s = (np.abs(x).max(axis=0) / 57344).astype(np.float32)
    y = roundtrip(x, s)
    want = np.clip(x / s, -57344, 57344).astype(E5M2).astype(np.float32) * s
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: op.quantize(x, 1.0, dtype="f16"), r"dtype=f16 is not an 8-bit float"),
        (lambda x: op.quantize(x, np.ones(3, np.float32), axis=0), r"has 4 values, not \(3,\)"),
        (lambda x: op.quantize(x, np.ones(4, np.float32)), r"a scale per channel needs axis="),
        (lambda x: op.dequantize(x, 1.0, axis=2), r"axis=2 is not an axis"),
    ],
)
def test_bad_quantization_arguments_name_the_op(call, message):
    with pytest.raises(GraphError, match=message):
        call(np.ones((4, 6), np.float32))


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
def test_8_bit_floats_travel_as_bytes_in_ptx():
    x, a, b = np.zeros(16, np.float32), np.zeros(16, E4M3), np.zeros(16, E5M2)
    ptx = stores.inspect("ptx", x, a, b, x, x, grid=16, arch="sm_90")
    assert "ld.global.u8" in ptx and "st.global.u8" in ptx and "ld.local" not in ptx


def test_the_docs_per_column_quantization_keeps_f8e4m3_precision(rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    s = np.abs(x).max(axis=0) / 448  # one scale per column
    q = op.quantize(x, s, axis=1)
    y = op.dequantize(q, s, axis=1)
    assert q.dtype == E4M3 and y.dtype == np.float32
    # half a unit in the last place of 3 mantissa bits, or of the smallest normal's
    step = np.maximum(np.abs(x / s), 2.0**-6) * 2.0**-4 * s
    assert np.all(np.abs(y - x) <= step)


def test_a_scalar_past_f8e4m3s_range_is_a_launch_error_not_nan():
    a = np.zeros((16, 16), E4M3)
    with pytest.raises(LaunchError, match=r"parameter 's' is f8e4m3; 1000.0 is out of its range"):
        dot8[1, 1](a, a, np.zeros((16, 16), np.float32), np.zeros((16, 16), E5M2), 1000.0)


def test_matmul_of_8_bit_arrays_accumulates_in_f32_and_rounds_once(target, rng):
    a = rng.integers(-4, 5, (40, 24)).astype(E4M3)  # small integers: every sum exact
    b = rng.integers(-4, 5, (24, 30)).astype(E4M3)
    c = op.matmul(a, b)
    assert c.dtype == E4M3
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(E4M3)
    np.testing.assert_array_equal(_bits(c), _bits(want))
