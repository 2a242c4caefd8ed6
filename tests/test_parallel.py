"""The multi-core path: launches big enough to spread groups over cores (forced here with
``parallel_threshold=0``) give the same results as the one-core path."""

from __future__ import annotations

import numpy as np
import pytest
from classic_kernels import block_reduce_tree, histogram, matmul, prefix_scan, transpose

import tessera as ts
from tessera import f32, kernel, mut, tile


@pytest.fixture
def parallel():
    with ts.config(parallel_threshold=0):
        yield


@kernel
def atomic_total(x: f32[n], total: mut[f32[1]]):
    i = tile.linear_id()
    if i < n:
        tile.atomic_add(total, 0, x[i])


def test_histogram_atomics_are_exact_across_cores(parallel, rng):
    values = rng.integers(0, 7, 50_000).astype(np.int32)
    hist = np.zeros(7, np.int32)
    histogram[values.size](values, hist)
    assert np.array_equal(hist, np.bincount(values, minlength=7))


def test_float_atomic_sum_across_cores_loses_no_update(parallel):
    x = np.ones(40_000, np.float32)  # every partial sum is exact in f32
    total = np.zeros(1, np.float32)
    atomic_total[x.size](x, total)
    assert total[0] == 40_000.0


def test_block_reduction_matches_the_one_core_path_bitwise(rng):
    x = rng.random(10_000, dtype=np.float32)
    serial, par = np.zeros(40, np.float32), np.zeros(40, np.float32)
    block_reduce_tree[40](x, serial)
    with ts.config(parallel_threshold=0):
        block_reduce_tree[40](x, par)
    assert serial.tobytes() == par.tobytes()


def test_shared_tiles_are_private_to_each_core(parallel, rng):
    a = rng.random((70, 90), dtype=np.float32)
    b = rng.random((90, 50), dtype=np.float32)
    c = np.zeros((70, 50), np.float32)
    matmul[(5, 4)](a, b, c)
    assert np.allclose(c, a @ b, rtol=1e-5)
    out = np.zeros((90, 70), np.float32)
    transpose[(5, 6)](a, out)
    assert np.array_equal(out, a.T)


def test_double_buffered_scan_on_many_cores(parallel, rng):
    x = rng.random(3000, dtype=np.float32)
    out = np.zeros_like(x)
    prefix_scan[12](x, out)
    expected = np.concatenate([np.cumsum(x[i : i + 256]) for i in range(0, 3000, 256)])
    assert np.allclose(out, expected, rtol=1e-5)
