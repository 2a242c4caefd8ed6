"""Helpers that return several values, tuples as float3/float4 values and complex numbers.

The frontend scalarises all three (tessera/kernel/frontend_values.py), so every target runs
the same real arithmetic: results agree bit for bit across targets. The kernels are ports of
classic ones: bitonic sort's Comparator, an n-body force helper, argmax's (value, index)
pair reduction and the Mandelbrot set.
"""

from __future__ import annotations

import math

import numpy as np
from error_helpers import assert_points_at, compile_error

import tessera as ts
from tessera import complex64, complex128, f32, f64, i32, i64, kernel, mut, tbarrier, tile, tshared

# --------------------------------------------------------------------- helpers


@ts.func
def comparator(a, b, up):
    """Bitonic sort's Comparator: the pair in the order ``up`` asks for."""
    if (a > b) == up:
        a, b = b, a  # reassigning parameters: the caller's values are unchanged
    return a, b


@kernel(tile=(64,), shared=1024)
def bitonic_sort(keys: mut[f32[n]]):
    s = tshared.alloc[f32](64)
    lane = tile.linear_id()
    base = tile.group_linear_id() * 64
    s[lane] = keys[base + lane]
    tbarrier()
    size = 2
    while size <= 64:
        stride = size // 2
        while stride > 0:
            pos = 2 * lane - (lane & (stride - 1))
            if lane < 32:
                up = (lane & (size // 2)) == 0
                s[pos], s[pos + stride] = comparator(s[pos], s[pos + stride], up)
            tbarrier()
            stride //= 2
        size *= 2
    keys[base + lane] = s[lane]


def test_a_helper_returns_a_tuple_the_caller_unpacks(target, rng):
    keys = rng.standard_normal(64 * 3).astype(np.float32)
    out = keys.copy()
    bitonic_sort[3](out)
    np.testing.assert_array_equal(out.reshape(3, 64), np.sort(keys.reshape(3, 64), axis=1))


@ts.func
def bump(v):
    v = v + 1.0
    return v


@kernel
def reassigns(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        v = x[i]
        w = bump(v)
        y[i] = w * 10.0 + v  # v is what it was: the helper reassigned its own copy


def test_a_helper_reassigning_a_parameter_leaves_the_callers_value(target):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros_like(x)
    reassigns[4](x, y)
    np.testing.assert_array_equal(y, (x + 1) * 10 + x)


@ts.func
def better(v, i, w, j):
    """argmax's pair reduction: the larger value, the smaller index on ties."""
    if w > v or (w == v and j < i):
        return w, j
    return v, i


@kernel(tile=(32,), shared=512)
def argmax(x: f32[n], best: mut[f32[grid_groups]], where: mut[i64[grid_groups]]):
    vals = tshared.alloc[f32](32)
    idxs = tshared.alloc[i64](32)
    lane = tile.linear_id()
    v, i = -1e30, -1
    for k in range(tile.group_linear_id() * 32 + lane, n, 32 * grid_groups):
        v, i = better(v, i, x[k], k)
    vals[lane] = v
    idxs[lane] = i
    tbarrier()
    stride = 16
    while stride > 0:
        if lane < stride:
            vals[lane], idxs[lane] = better(
                vals[lane], idxs[lane], vals[lane + stride], idxs[lane + stride]
            )
        tbarrier()
        stride //= 2
    if lane == 0:
        best[tile.group_linear_id()] = vals[0]
        where[tile.group_linear_id()] = idxs[0]


def test_a_pair_reduction_through_a_tuple_helper(target, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    x[[17, 900]] = 9.0  # a tie: the smaller index wins
    best, where = np.zeros(1, np.float32), np.zeros(1, np.int64)
    argmax[1](x, best, where)
    assert (best[0], where[0]) == (9.0, 17)


# --------------------------------------------------------------------- float3 values


@ts.func
def force(p, q, soft):
    """The pull of body ``q`` on body ``p`` (positions as 3-tuples, CUDA's float3)."""
    dx, dy, dz = q[0] - p[0], q[1] - p[1], q[2] - p[2]
    d2 = dx * dx + dy * dy + dz * dz + soft
    inv = 1.0 / (d2 * math.sqrt(d2))
    return dx * inv, dy * inv, dz * inv


@kernel
def nbody(pos: f32[n, 3], acc: mut[f32[n, 3]], soft: f32):
    i = tile.linear_id()
    if i < n:
        p = (pos[i, 0], pos[i, 1], pos[i, 2])
        a = (f32(0.0), f32(0.0), f32(0.0))
        for j in range(n):
            fx, fy, fz = force(p, (pos[j, 0], pos[j, 1], pos[j, 2]), soft)
            a = (a[0] + fx, a[1] + fy, a[2] + fz)
        acc[i, 0], acc[i, 1], acc[i, 2] = a


def test_nbody_with_float3_tuples_and_a_force_helper(target, rng):
    pos = rng.standard_normal((40, 3)).astype(np.float32)
    acc = np.zeros_like(pos)
    nbody[40](pos, acc, 0.01)
    d = (pos[None, :, :] - pos[:, None, :]).astype(np.float64)
    d2 = (d**2).sum(-1) + 0.01
    want = (d / (d2 * np.sqrt(d2))[..., None]).sum(1)
    np.testing.assert_allclose(acc, want, rtol=1e-4, atol=1e-4)


@ts.func
def rotate(v):
    x, y, z, w = v
    return (y, z, w, x)


@kernel
def float4s(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if 4 * i + 3 < n:
        v = (x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3])
        v = rotate(v)
        first, rest = v[0], (v[1], v[2], v[3])
        y[4 * i] = first
        y[4 * i + 1] = rest[0]
        y[4 * i + 2] = rest[1]
        y[4 * i + 3] = rest[-1]


def test_tuples_pass_to_and_return_from_helpers_and_index_with_constants(target):
    x = np.arange(8, dtype=np.float32)
    y = np.zeros_like(x)
    float4s[2](x, y)
    np.testing.assert_array_equal(y, [1, 2, 3, 0, 5, 6, 7, 4])


# --------------------------------------------------------------------- complex numbers


@kernel
def mandelbrot(out: mut[i32[h, w]], max_iter: i32):
    i = tile.linear_id()
    if i < h * w:
        r, c = i // w, i % w
        point = complex(-2.0 + 2.5 * c / w, -1.25 + 2.5 * r / h)
        z = complex(0.0, 0.0)
        k = 0
        while k < max_iter and abs(z) <= 2.0:
            z = z * z + point
            k += 1
        out[r, c] = k


def mandelbrot_reference(h, w, max_iter):
    out = np.zeros((h, w), np.int32)
    for r in range(h):
        for c in range(w):
            re = np.float32(-2.0) + np.float32(2.5) * np.float32(c) / np.float32(w)
            im = np.float32(-1.25) + np.float32(2.5) * np.float32(r) / np.float32(h)
            point = np.complex64(complex(re, im))
            z, k = np.complex64(0), 0
            while k < max_iter and abs(z) <= 2.0:
                z = np.complex64(z * z + point)
                k += 1
            out[r, c] = k
    return out


def test_mandelbrot_with_complex_numbers(target):
    out = np.zeros((24, 32), np.int32)
    mandelbrot[24 * 32](out, 40)
    want = mandelbrot_reference(24, 32, 40)
    assert (out != want).sum() <= 3  # f32 rounding at the set's edge may differ by one
    assert (out == 40).sum() > 50


@kernel
def complex_ops(x: f64[n], y: mut[f64[n]]):
    i = tile.linear_id()
    if 4 * i + 3 < n:
        a = complex(x[4 * i], x[4 * i + 1])
        b = complex(x[4 * i + 2], x[4 * i + 3])
        q = a / b - a.conjugate() * 2.0 + (-b)
        y[4 * i] = q.real
        y[4 * i + 1] = q.imag
        y[4 * i + 2] = abs(a)
        y[4 * i + 3] = 1.0 if a == a and a != b else 0.0


def test_complex_arithmetic_matches_python(target, rng):
    x = rng.standard_normal(16)
    y = np.zeros_like(x)
    complex_ops[4](x, y)
    for k in range(4):
        a, b = complex(x[4 * k], x[4 * k + 1]), complex(x[4 * k + 2], x[4 * k + 3])
        q = a / b - a.conjugate() * 2.0 + (-b)
        assert y[4 * k : 4 * k + 4].tolist() == [q.real, q.imag, abs(a), 1.0]


# --------------------------------------------------------------------- errors


@ts.func
def ragged(a, b):
    if a > b:
        return a, b
    return a, b, a  # E:ragged


def k_ragged(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    u, v = ragged(x[i], 0.0)
    y[i] = u + v


def test_a_helper_returning_tuples_of_two_lengths_is_an_error_at_the_return():
    err = compile_error(k_ragged)
    assert "returns a tuple of 3 values here but a tuple of 2 values" in str(err)
    assert_points_at(str(err), __file__, "ragged", "return")


def k_reshape(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    p = (x[i], x[i])
    p = (x[i], x[i], x[i])  # E:reshape
    y[i] = p[0]


def test_a_name_holding_tuples_of_two_lengths_is_an_error():
    err = compile_error(k_reshape)
    assert "'p' holds a tuple of 2 values elsewhere" in str(err)
    assert_points_at(str(err), __file__, "reshape", "p")


def k_tuple_math(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    p = (x[i], x[i])
    y[i] = p + p  # E:tuplemath


def test_arithmetic_on_a_tuple_is_an_error():
    err = compile_error(k_tuple_math)
    assert "do arithmetic on their elements" in str(err)
    assert_points_at(str(err), __file__, "tuplemath", "p + p")


def k_bad_index(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    p = ((x[i], x[i]), (x[i], x[i]))
    y[i] = p[i][0]  # E:badindex


def test_a_tuple_of_tuples_indexed_with_a_variable_is_an_error():
    err = compile_error(k_bad_index)
    assert "takes a constant index" in str(err)
    assert_points_at(str(err), __file__, "badindex", "p[i]")


# --------------------------------------------------------------------- complex arrays


@kernel
def cmul_conj(a: complex64[n], b: complex64[n], out: mut[complex64[n]], mag: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        z = a[i] * b[i].conjugate()
        out[i] = z
        mag[i] = abs(z)


def test_complex_arrays_are_read_and_written_an_element_at_a_time(target, rng):
    a = (rng.standard_normal(9) + 1j * rng.standard_normal(9)).astype(np.complex64)
    b = (rng.standard_normal(9) + 1j * rng.standard_normal(9)).astype(np.complex64)
    out, mag = np.zeros(9, np.complex64), np.zeros(9, np.float32)
    cmul_conj[9](a, b, out, mag)
    np.testing.assert_allclose(out, a * b.conj(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(mag, np.abs(a * b.conj()), rtol=1e-6)


@kernel
def cfill(out: mut[complex128[h, w]]):
    i = tile.linear_id()
    if i < h * w:
        out[i // w, i % w] = complex(f64(i), f64(-i)) if i % 2 == 0 else 7.0


def test_a_strided_complex_array_is_written_in_place(target):
    big = np.zeros((3, 8), np.complex128)
    cfill[12](big[:, ::2])
    k = np.arange(12).reshape(3, 4)
    want = np.where(k % 2 == 0, k - 1j * k, 7.0)
    np.testing.assert_array_equal(big[:, ::2], want)
    assert not big[:, 1::2].any()


def k_complex_load(a: complex64[n], y: mut[f32[n]]):
    y[tile.linear_id()] = tile.load(a, tile.linear_id())  # E:cload


def test_a_primitive_on_a_complex_array_is_an_error():
    err = compile_error(k_complex_load)
    assert "'a' is a complex array: read and write it an element at a time" in str(err)
    assert_points_at(str(err), __file__, "cload", "a,")


def k_complex_scalar(c: complex64, y: mut[f32[n]]):  # E:cscalar
    y[tile.linear_id()] = c.real


def test_a_complex_scalar_parameter_is_an_error_that_says_what_to_pass():
    err = compile_error(k_complex_scalar)
    assert "parameter 'c'" in str(err) and "complex(re, im)" in str(err)
    assert_points_at(str(err), __file__, "cscalar", "c: complex64")


@kernel
def nested(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        p = ((x[i], 1.0), complex(2.0, 3.0))
        (a, b), c = p
        y[i] = a + b + c.imag + p[0][1]


def test_nested_tuples_unpack_and_index(target):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros_like(x)
    nested[4](x, y)
    np.testing.assert_array_equal(y, x + 5)


def k_half_assigned(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i > 2:
        z = complex(x[i], 1.0)
    y[i] = z.real  # E:halfz


def test_a_complex_assigned_on_one_path_is_named_as_the_source_spells_it():
    err = compile_error(k_half_assigned)
    assert "'z.real' may be read before it is assigned" in str(err)
    assert_points_at(str(err), __file__, "halfz", "z.real")
