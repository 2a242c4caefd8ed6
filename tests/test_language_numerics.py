"""Arithmetic semantics (LANGUAGE.md §8, docs/language.md "Decisions") on every target:
math functions, min/max/abs, casts, Python division semantics, weak literals, promotion,
wrapping, and 16-bit floats (computed in f32, rounded once when stored)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from sampling import for_target

import tessera as ts
from tessera import bf16, f16, f32, f64, i8, i32, i64, kernel, mut, tile, u32

W = 3  # a module-level constant: usable as a dimension and as a value


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@kernel
def math_funcs(
    x: f64[n],
    tab: i64[k],
    e: mut[f64[n]],
    s: mut[f64[n]],
    fl: mut[i64[n]],
    picked: mut[i64[n]],
    nan: mut[i32[n]],
):
    i = tile.linear_id()
    v = x[i]
    e[i] = math.exp(v)
    s[i] = math.sqrt(v)
    fl[i] = math.floor(v)
    picked[i] = tab[math.floor(v) + 3]  # floor is an int: usable as an index
    nan[i] = 1 if math.isnan(s[i]) else 0


def test_math_functions(target):
    x = np.array([-2.5, -0.5, 0.0, 0.25, 1.0, 2.75, 3.5], np.float64)
    tab = np.arange(10, dtype=np.int64) * 7
    e, s = np.zeros_like(x), np.zeros_like(x)
    fl, picked = np.zeros(x.size, np.int64), np.zeros(x.size, np.int64)
    nan = np.full(x.size, -1, np.int32)
    with np.errstate(invalid="ignore"):
        ref_s = np.sqrt(x)
    math_funcs[x.size](x, tab, e, s, fl, picked, nan)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-15)
    np.testing.assert_array_equal(s, ref_s)
    np.testing.assert_array_equal(fl, np.floor(x).astype(np.int64))
    np.testing.assert_array_equal(picked, tab[np.floor(x).astype(np.int64) + 3])
    np.testing.assert_array_equal(nan, np.isnan(ref_s).astype(np.int32))


@kernel
def min_max_abs(
    a: f32[n],
    b: f32[n],
    mx: mut[f32[n]],
    mn: mut[f32[n]],
    m1: mut[f32[n]],
    m3: mut[f32[n]],
    ab: mut[f32[n]],
    ia: i32[n],
    iab: mut[i32[n]],
):
    i = tile.linear_id()
    mx[i] = max(a[i], b[i])
    mn[i] = min(a[i], b[i])
    m1[i] = max(1.0, a[i])
    m3[i] = min(a[i], b[i], 0.5)
    ab[i] = abs(a[i])
    iab[i] = abs(ia[i]) + max(ia[i], 0) - min(ia[i], 0)


def test_min_max_propagate_nan_and_abs(target):
    nan = np.nan
    a = np.array([nan, 1.0, nan, -3.0, 2.0, -0.0, 0.0, 7.0], np.float32)
    b = np.array([1.0, nan, nan, 4.0, -5.0, 0.0, 7.0, 7.0], np.float32)
    ia = np.array([-5, 0, 3, -2147483647, 9, -1, 1, 2], np.int32)
    outs = [np.zeros(8, np.float32) for _ in range(5)]
    iab = np.zeros(8, np.int32)
    min_max_abs[8](a, b, *outs, ia, iab)
    mx, mn, m1, m3, ab = outs
    np.testing.assert_array_equal(mx[:5], np.maximum(a, b)[:5])  # nan wherever either is
    np.testing.assert_array_equal(mn[:5], np.minimum(a, b)[:5])
    assert np.isnan(mx[0]) and np.isnan(mx[1]) and np.isnan(mn[0]) and np.isnan(mn[1])
    np.testing.assert_array_equal(m1, np.maximum(np.float32(1.0), a))
    np.testing.assert_array_equal(m3, np.minimum(np.minimum(a, b), np.float32(0.5)))
    np.testing.assert_array_equal(bits(ab), bits(np.abs(a)))
    np.testing.assert_array_equal(iab, np.abs(ia) + np.maximum(ia, 0) - np.minimum(ia, 0))


@kernel
def casts(x: f32[n], k: i64[n], f: mut[f32[n]], i: mut[i32[n]], j: mut[i64[n]], d: mut[f64[n]]):
    t = tile.linear_id()
    f[t] = f32(k[t]) + 0.5
    i[t] = i32(x[t])
    j[t] = int(x[t]) * 3
    d[t] = float(k[t]) / 3.0


def test_casts_truncate_toward_zero(target):
    x = np.array([2.7, -2.7, 0.4, -0.4, 100.99, -100.99], np.float32)
    k = np.array([1, -3, 2**40 + 1, 7, 0, -9], np.int64)
    f, d = np.zeros(6, np.float32), np.zeros(6)
    i, j = np.zeros(6, np.int32), np.zeros(6, np.int64)
    casts[6](x, k, f, i, j, d)
    np.testing.assert_array_equal(f, k.astype(np.float32) + np.float32(0.5))
    np.testing.assert_array_equal(i, np.trunc(x).astype(np.int32))
    np.testing.assert_array_equal(j, np.trunc(x).astype(np.int64) * 3)
    np.testing.assert_array_equal(d, k.astype(np.float64) / 3.0)


@kernel
def floor_div_mod(
    a: i64[n],
    b: i64[n],
    q: mut[i64[n]],
    r: mut[i64[n]],
    a32: i32[n],
    b32: i32[n],
    q32: mut[i32[n]],
    r32: mut[i32[n]],
    fa: f32[n],
    fb: f32[n],
    fq: mut[f32[n]],
    fr: mut[f32[n]],
    tdiv: mut[f64[n]],
):
    i = tile.linear_id()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]
    q32[i] = a32[i] // b32[i]
    r32[i] = a32[i] % b32[i]
    fq[i] = fa[i] // fb[i]
    fr[i] = fa[i] % fb[i]
    tdiv[i] = a[i] / b[i]


def test_floor_division_and_modulo_follow_python(target):
    pairs = [(a, b) for a in (-7, -6, -1, 0, 1, 6, 7) for b in (-3, -2, 2, 3)]
    a = np.array([p[0] for p in pairs], np.int64)
    b = np.array([p[1] for p in pairs], np.int64)
    n = a.size
    q, r, tdiv = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n)
    q32, r32 = np.zeros(n, np.int32), np.zeros(n, np.int32)
    fa, fb = (a + 0.5).astype(np.float32), b.astype(np.float32)
    fq, fr = np.zeros(n, np.float32), np.zeros(n, np.float32)
    floor_div_mod[n](
        a, b, q, r, a.astype(np.int32), b.astype(np.int32), q32, r32, fa, fb, fq, fr, tdiv
    )
    np.testing.assert_array_equal(q, [x // y for x, y in pairs])
    np.testing.assert_array_equal(r, [x % y for x, y in pairs])
    np.testing.assert_array_equal(q32, [x // y for x, y in pairs])
    np.testing.assert_array_equal(r32, [x % y for x, y in pairs])
    np.testing.assert_array_equal(fq, np.floor_divide(fa, fb))
    np.testing.assert_array_equal(fr, np.mod(fa, fb))
    # int / int is f64, like Python: 1/3 keeps all 53 bits
    np.testing.assert_array_equal(tdiv, [x / y for x, y in pairs])


@kernel
def weak_literals(x: f32[n], k: i32[n], alpha: f32, y: mut[f64[n]], z: mut[i64[n]], w: mut[f64[n]]):
    i = tile.linear_id()
    y[i] = alpha * 2.0 + x[i] * 0.1  # computed in f32, then widened by the store
    z[i] = k[i] * 3  # i32 arithmetic: wraps at 32 bits
    t = 0.1  # a lone float literal is f32
    w[i] = t


def test_weak_literals_keep_the_typed_operand_dtype(target, rng):
    x = rng.standard_normal(10).astype(np.float32)
    k = np.array([1, -1, 2**30, -(2**30), 2**31 - 1, 5, 0, 7, 8, 9], np.int32)
    y, w, z = np.zeros(10), np.zeros(10), np.zeros(10, np.int64)
    weak_literals[10](x, k, np.float32(0.7), y, z, w)
    ref = np.float32(0.7) * np.float32(2.0) + x * np.float32(0.1)
    np.testing.assert_array_equal(y, ref.astype(np.float64))
    assert not np.array_equal(y, 0.7 * 2.0 + x.astype(np.float64) * 0.1)
    np.testing.assert_array_equal(z, [((int(v) * 3 + 2**31) % 2**32) - 2**31 for v in k])
    np.testing.assert_array_equal(w, np.float64(np.float32(0.1)))


@kernel
def half_ops(x: f16[n], y: mut[f16[n]], z: mut[f16[n]]):
    i = tile.linear_id()
    y[i] = x[i]
    z[i] = x[i] * 2.0 + 1.0


@kernel
def bfloat_ops(x: bf16[n], y: mut[bf16[n]], z: mut[bf16[n]]):
    i = tile.linear_id()
    y[i] = x[i]
    z[i] = x[i] * 2.0 + 1.0


HALF_KERNELS = {"f16": (half_ops, np.float16), "bf16": (bfloat_ops, ml_dtypes.bfloat16)}


def all_values(np_type, with_signalling_nans=False):
    """Every 16-bit pattern of the type; quiet NaNs only unless asked."""
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    v = pats.view(np_type)
    if not with_signalling_nans:
        quiet_bit = 0x0200 if np_type is np.float16 else 0x0040
        v = v[~np.isnan(v.astype(np.float32)) | ((pats & quiet_bit) != 0)]
    return v


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_half_copy_and_arithmetic_round_once(target, name):
    k, np_type = HALF_KERNELS[name]
    x = for_target(all_values(np_type))
    y, z = np.zeros_like(x), np.zeros_like(x)
    k[x.size](x, y, z)
    np.testing.assert_array_equal(bits(y), bits(x))
    with np.errstate(over="ignore", invalid="ignore"):
        ref = (x.astype(np.float32) * np.float32(2.0) + np.float32(1.0)).astype(np_type)
    finite = ~np.isnan(ref.astype(np.float32))
    np.testing.assert_array_equal(bits(z)[finite], bits(ref)[finite])
    assert np.isnan(z[~finite].astype(np.float32)).all()


def test_f16_copy_preserves_every_bit_pattern(target):
    x = all_values(np.float16, with_signalling_nans=True)
    assert x.size == 1 << 16
    x = for_target(x)
    y, z = np.zeros_like(x), np.zeros_like(x)
    half_ops[x.size](x, y, z)
    np.testing.assert_array_equal(bits(y), bits(x))


def test_bf16_copy_preserves_signalling_nan_bits(target):
    k, np_type = HALF_KERNELS["bf16"]
    x = for_target(all_values(np_type, with_signalling_nans=True))
    y, z = np.zeros_like(x), np.zeros_like(x)
    k[x.size](x, y, z)
    np.testing.assert_array_equal(bits(y), bits(x))


@kernel
def int_corners(
    a: i64[n],
    b: i64[n],
    u: u32[n],
    s: i32[n],
    c: i8[n],
    m: f32[n, W],
    q: mut[i64[n, 10]],
    f: mut[f64[n]],
):
    i = tile.linear_id()
    q[i, 0] = a[i] // b[i]  # integer division by zero gives 0
    q[i, 1] = a[i] % b[i]
    q[i, 2] = u[i] + s[i]  # u32 with i32 -> u32, wrapping at 32 bits
    q[i, 3] = c[i] + 1  # i8 wraps
    q[i, 4] = True + a[i]  # bool takes the other operand's type
    q[i, 5] = a[i] ** 2
    q[i, 6] = W * 10 + m.shape[1]
    q[i, 7] = tile.load(s, i + 1, mask=i + 1 < n, other=-5.9)  # other -> i32: -5
    q[i, 8] = 1 if (0 <= a[i] < 5 and not b[i] == 0) or a[i] == 100 else 0
    q[i, 9] = int(bool(a[i])) + abs(s[i])
    f[i] = a[i] / b[i]  # float division by zero: inf or nan


def test_integer_corner_cases(target):
    a = np.array([7, -7, 0, 100, 3, -1], np.int64)
    b = np.array([0, 0, 0, 3, -2, 1], np.int64)
    u = np.array([2**32 - 1, 5, 0, 1, 2, 3], np.uint32)
    s = np.array([1, 2, -(2**31), 4, 5, -6], np.int32)
    c = np.array([127, -128, 0, 1, 2, 3], np.int8)
    q, f = np.zeros((6, 10), np.int64), np.zeros(6)
    if target == "debug":  # the debug target reports what the fast targets let pass
        with pytest.raises(ts.KernelArithmeticError, match="integer division by zero"):
            int_corners[6](a, b, u, s, c, np.zeros((6, 3), np.float32), q, f)
        assert not q.any()  # and a reported launch modifies nothing
        return
    int_corners[6](a, b, u, s, c, np.zeros((6, 3), np.float32), q, f)
    np.testing.assert_array_equal(q[:, 0], [0, 0, 0, 33, -2, -1])
    np.testing.assert_array_equal(q[:, 1], [0, 0, 0, 1, -1, 0])
    np.testing.assert_array_equal(q[:, 2], (u.astype(np.int64) + s) % 2**32)
    np.testing.assert_array_equal(q[:, 3], [-128, -127, 1, 2, 3, 4])
    np.testing.assert_array_equal(q[:, 4], a + 1)
    np.testing.assert_array_equal(q[:, 5], a * a)
    np.testing.assert_array_equal(q[:, 6], 33)
    np.testing.assert_array_equal(q[:, 7], [2, -(2**31), 4, 5, -6, -5])
    np.testing.assert_array_equal(q[:, 8], [0, 0, 0, 1, 1, 0])
    # abs(i32 min) wraps to i32 min
    np.testing.assert_array_equal(q[:, 9], [1 + 1, 1 + 2, 0 - 2**31, 1 + 4, 1 + 5, 1 + 6])
    np.testing.assert_array_equal(f[:2], [np.inf, -np.inf])
    assert np.isnan(f[2])
    np.testing.assert_array_equal(f[3:], [100 / 3, 3 / -2, -1.0])


@kernel
def half_rounding(
    x: f16[n], b: bf16[n], y: mut[f16[n]], z: mut[f16[n]], u: mut[f16[n]], w: mut[f32[n]]
):
    i = tile.linear_id()
    y[i] = f16(x[i] * 0.3) + x[i]  # explicit conversion rounds in the middle
    z[i] = x[i] * 0.3 + x[i]  # rounded once, at the store
    t = x[i] * 0.3  # a local keeps f32 precision
    u[i] = t + x[i]
    w[i] = x[i] + b[i]  # f16 with bf16 computes in f32


def run_half_rounding(rng):
    x = rng.standard_normal(3000).astype(np.float16)
    b = rng.standard_normal(3000).astype(ml_dtypes.bfloat16)
    y, z, u = np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    w = np.zeros(3000, np.float32)
    half_rounding[x.size](x, b, y, z, u, w)
    xf, c = x.astype(np.float32), np.float32(np.float16(0.3))  # the literal becomes f16
    once = (xf * c + xf).astype(np.float16)
    twice = ((xf * c).astype(np.float16).astype(np.float32) + xf).astype(np.float16)
    assert (bits(once) != bits(twice)).any()  # the two orders are distinguishable
    return x, b, y, z, u, w, once, twice


def test_half_values_round_once_at_the_store(target, rng):
    x, b, y, z, u, w, once, twice = run_half_rounding(rng)
    np.testing.assert_array_equal(bits(z), bits(once))
    np.testing.assert_array_equal(bits(u), bits(once))
    np.testing.assert_array_equal(w, x.astype(np.float32) + b.astype(np.float32))


def test_explicit_f16_cast_rounds_to_16_bits(target, rng):
    x, b, y, z, u, w, once, twice = run_half_rounding(rng)
    np.testing.assert_array_equal(bits(y), bits(twice))
