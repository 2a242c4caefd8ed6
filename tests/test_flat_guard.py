"""The usual flat kernel ``i = tile.linear_id(); if i < n: ...``: the CPU target runs its
loop to ``min(grid, n)`` instead of testing the guard per element (cpu/codegen.py); every
target gives the same results for grids larger and smaller than ``n``."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import f32, i32, i64, kernel, mut, tile


@kernel
def scale(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = 2.0 * x[i] + 1.0


@kernel
def first_k(x: f32[n], y: mut[f32[n]], k: i32):
    i = tile.linear_id()
    if i < k:
        y[i] = x[i] * x[i]


@kernel
def counts_every_lane(y: mut[i64[n]], hits: mut[i64[1]]):
    i = tile.linear_id()
    tile.atomic_add(hits, 0, 1)
    if i < n:
        y[i] = i


@pytest.mark.parametrize("grid", [1000, 1537, 4000])
def test_a_guarded_flat_kernel_writes_exactly_the_elements_below_n(target, grid):
    x = np.arange(1537, dtype=np.float32)
    y = np.full(1537, -1.0, np.float32)
    scale[grid](x, y)
    done = min(grid, 1537)
    assert np.array_equal(y[:done], 2 * x[:done] + 1)
    assert (y[done:] == -1).all()


@pytest.mark.parametrize("k", [-5, 0, 300, 5000])
def test_a_scalar_bound_limits_the_elements_even_when_negative(target, k):
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros(1000, np.float32)
    first_k[1000](x, y, np.int32(k))
    done = max(0, min(k, 1000))
    assert np.array_equal(y[:done], x[:done] ** 2)
    assert (y[done:] == 0).all()


def test_statements_before_the_guard_still_run_for_every_lane(target):
    y = np.zeros(100, np.int64)
    hits = np.zeros(1, np.int64)
    counts_every_lane[300](y, hits)
    assert hits[0] == 300 and np.array_equal(y, np.arange(100))


def test_the_cpu_loop_runs_to_the_bound_with_no_test_per_element():
    x = np.zeros(64, np.float32)
    code = scale.inspect("cpu", x, np.zeros_like(x))
    assert "_limit = min(_N0, np.int64(s_n))" in code
    assert "if (v_i < s_n)" not in code
