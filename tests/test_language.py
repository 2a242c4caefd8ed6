"""Flat-kernel semantics (LANGUAGE.md §1, §2, §4, §8) on every target, each checked
against a Python or NumPy reference. Group features live in test_language_groups.py."""

from __future__ import annotations

import numpy as np

import tessera as ts
from tessera import constexpr, f32, i32, i64, kernel, mut, tile


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# --------------------------------------------------------------------- control flow


@kernel
def collatz_steps(x: i64[n], out: mut[i64[n]]):
    i = tile.linear_id()
    v = x[i]
    steps = 0
    while True:
        if v == 1:
            break
        steps += 1
        if v % 2 == 0:
            v = v // 2
            continue
        v = 3 * v + 1
    out[i] = steps


def test_while_break_continue(target):
    x = np.arange(1, 60, dtype=np.int64)
    out = np.full_like(x, -1)
    collatz_steps[x.size](x, out)

    def steps(v):
        s = 0
        while v != 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            s += 1
        return s

    np.testing.assert_array_equal(out, [steps(int(v)) for v in x])


@kernel
def for_break_continue(x: i64[n], out: mut[i64[n]]):
    i = tile.linear_id()
    acc = 0
    for j in range(100):
        if j % 3 == 0:
            continue
        if j * j > x[i]:
            break
        acc += j
    out[i] = acc


def test_for_break_continue(target):
    x = np.array([0, 1, 5, 17, 50, 2000, 10**6], np.int64)
    out = np.zeros_like(x)
    for_break_continue[x.size](x, out)
    ref = []
    for v in x:
        acc = 0
        for j in range(100):
            if j % 3 == 0:
                continue
            if j * j > v:
                break
            acc += j
        ref.append(acc)
    np.testing.assert_array_equal(out, ref)


@kernel
def early_return_flat(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i >= n:
        return
    if x[i] < 0.0:
        y[i] = -1.0
        return
    for j in range(5):
        if x[i] < j:
            y[i] = 10.0 + j
            return
    y[i] = x[i]


def test_early_return_in_flat_kernel(target):
    x = np.array([-3.0, 0.5, 1.5, 4.5, 7.0, -0.0, 2.0], np.float32)
    y = np.full(x.size, np.nan, np.float32)
    early_return_flat[x.size + 5](x, y)  # extra tiles return at once
    ref = []
    for v in x:
        if v < 0:
            ref.append(-1.0)
        else:
            ref.append(next((10.0 + j for j in range(5) if v < j), v))
    np.testing.assert_array_equal(y, np.array(ref, np.float32))


@kernel
def elif_chain(x: f32[n], out: mut[i32[n]]):
    i = tile.linear_id()
    v = x[i]
    if v < -1.0:
        c = 0
    elif v < 0.0:
        c = 1
    elif v == 0.0:
        c = 2
    elif v < 1.0:
        c = 3
    else:
        c = 4
    out[i] = c


def test_elif_chain(target):
    x = np.array([-5, -1, -0.5, 0, 0.5, 1, 9, np.nan], np.float32)
    out = np.full(x.size, -1, np.int32)
    elif_chain[x.size](x, out)
    np.testing.assert_array_equal(
        out, np.select([x < -1, x < 0, x == 0, x < 1], [0, 1, 2, 3], default=4)
    )


@kernel
def cond_expr(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    v = x[i]
    y[i] = v if v > 0.0 else (-2.0 * v if v > -1.0 else 100.0)


def test_conditional_expression(target, rng):
    x = rng.uniform(-2, 2, 50).astype(np.float32)
    y = np.zeros_like(x)
    cond_expr[x.size](x, y)
    ref = np.where(x > 0, x, np.where(x > -1, np.float32(-2.0) * x, np.float32(100.0)))
    np.testing.assert_array_equal(y, ref)


# --------------------------------------------------------------------- assignment forms


@kernel
def unpack_swap(a: f32[n], b: f32[n], c: f32[n], out: mut[f32[p, q]]):
    i = tile.linear_id()
    x, y, z = a[i], b[i], c[i]
    x, y = y, x
    x, y, z = z, x, y
    rows, cols = out.shape
    out[i, 0] = x
    out[i, 1] = y
    out[i, 2] = z
    out[i, 3] = rows * 10 + cols + out.shape[1] * 1000


def test_tuple_unpacking_swap_and_shape(target, rng):
    a, b, c = (rng.standard_normal(9).astype(np.float32) for _ in range(3))
    out = np.zeros((9, 4), np.float32)
    unpack_swap[9](a, b, c, out)
    # (x, y, z) = (a, b, c) -> swap -> (b, a, c) -> rotate -> (c, b, a)
    np.testing.assert_array_equal(out[:, 0], c)
    np.testing.assert_array_equal(out[:, 1], b)
    np.testing.assert_array_equal(out[:, 2], a)
    np.testing.assert_array_equal(out[:, 3], 9 * 10 + 4 + 4000)


@kernel
def aug_assign(x: f32[n], y: mut[f32[n]], h: mut[i64[n]]):
    i = tile.linear_id()
    y[i] += x[i]
    y[i] *= 2.0
    y[i] -= 1.0
    y[i] /= 4.0
    h[i] += 10
    h[i] //= 3
    h[i] %= 5
    h[i] -= 2


def test_augmented_assignment_on_elements(target, rng):
    x = rng.standard_normal(20).astype(np.float32)
    y = rng.standard_normal(20).astype(np.float32)
    h = rng.integers(-50, 50, 20).astype(np.int64)
    ry = ((y + x) * np.float32(2.0) - np.float32(1.0)) / np.float32(4.0)
    rh = ((h + 10) // 3) % 5 - 2
    aug_assign[20](x, y, h)
    np.testing.assert_array_equal(bits(y), bits(ry))
    np.testing.assert_array_equal(h, rh)


# --------------------------------------------------------------------- arithmetic and builtins


# --------------------------------------------------------------------- constexpr and symbols


def power_cx(x: f32[n], y: mut[f32[n]], P: constexpr):
    i = tile.linear_id()
    acc = 1.0
    for _ in range(P):
        acc *= x[i]
    y[i] = acc


def test_constexpr_values_compile_separate_specialisations(target, rng):
    k = kernel(power_cx)  # a fresh kernel: nothing cached yet
    x = rng.standard_normal(16).astype(np.float32)
    y = np.zeros_like(x)
    before = ts.stats()["compiles"]
    k[16](x, y, 2)
    np.testing.assert_array_equal(y, x * x)
    assert ts.stats()["compiles"] == before + 1
    k[16](x, y, 3)
    np.testing.assert_array_equal(y, (x * x) * x)
    assert ts.stats()["compiles"] == before + 2
    k[16](x, y, 2)
    np.testing.assert_array_equal(y, x * x)
    k[16](x, y, 3)
    assert ts.stats()["compiles"] == before + 2  # both are cached now


@kernel
def symbols_and_grid(a: f32[m, k], out: mut[i64[m, k, 4]]):
    i, j = tile.id(0), tile.id(1)
    if i < m and j < k:
        out[i, j, 0] = i
        out[i, j, 1] = j
        out[i, j, 2] = tile.linear_id()
        out[i, j, 3] = m * 100 + k


def test_grid_tuple_ids_and_symbols_in_flat_kernel(target):
    m, k = 5, 7
    a = np.zeros((m, k), np.float32)
    out = np.full((m, k, 4), -1, np.int64)
    symbols_and_grid[(m + 1, k + 2)](a, out)
    ii, jj = np.meshgrid(np.arange(m), np.arange(k), indexing="ij")
    np.testing.assert_array_equal(out[..., 0], ii)
    np.testing.assert_array_equal(out[..., 1], jj)
    np.testing.assert_array_equal(out[..., 2], ii * (k + 2) + jj)  # row-major over the grid
    np.testing.assert_array_equal(out[..., 3], m * 100 + k)


@kernel
def grid3(out: mut[i64[a, b, c]]):
    out[tile.id(0), tile.id(1), tile.id(2)] = tile.linear_id()


def test_three_dimensional_flat_grid(target):
    out = np.full((2, 3, 4), -1, np.int64)
    grid3[(2, 3, 4)](out)
    np.testing.assert_array_equal(out, np.arange(24).reshape(2, 3, 4))


@kernel
def masked_load_store_flat(x: f32[n], y: mut[f32[m]]):
    i = tile.linear_id()
    v = tile.load(x, i, mask=i < n, other=-5.0)
    tile.store(y, i, v * 2.0, mask=i % 3 != 0)


def test_masked_load_and_store_in_flat_kernel(target, rng):
    x = rng.standard_normal(7).astype(np.float32)
    y = np.full(10, 9.0, np.float32)
    masked_load_store_flat[10](x, y)
    padded = np.concatenate([x, np.full(3, -5.0, np.float32)])
    ref = np.where(np.arange(10) % 3 != 0, padded * np.float32(2.0), np.float32(9.0))
    np.testing.assert_array_equal(y, ref)


def test_stats_counts_each_launch_once_however_often_it_is_read(target, rng):
    k = kernel(power_cx)
    x = rng.standard_normal(16).astype(np.float32)
    y = np.zeros_like(x)
    before = ts.stats()["launches"]
    k[16](x, y, 2)
    assert ts.stats()["launches"] == ts.stats()["launches"] == before + 1
    k[16](x, y, 2)
    k[16](x, y, 2)
    assert ts.stats()["launches"] == before + 3
