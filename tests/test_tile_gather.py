"""``tile.load`` and ``tile.store`` at a tile of indices (Triton's ``tl.load(ptr + offsets)``
with computed offsets): gathers and scatters that keep tile.load's contract, the same
results on every target; an element not masked off must be inside the array, which the
debug target and bounds-checked CPU launches check (an OutOfBoundsError naming the
kernel, the array and ``file:line``), and no target reads or writes outside it."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from error_helpers import assert_points_at
from test_language_docs import _section

import tessera as ts
from tessera import (
    KernelError,
    OutOfBoundsError,
    RaceError,
    f16,
    f32,
    group_linear_id,
    i32,
    i64,
    kernel,
    mut,
    tile,
)

THIS_FILE = __file__
BN, D = 16, 32


@kernel(tile=(32,))
def lookup(table: f32[n], idx: i32[m], out: mut[f32[m]]):
    j = tile.arange(32)
    ids = tile.load_block(idx, (0,), (32,))
    tile.store_block(out, (0,), tile.load(table, ids), mask=j < m)  # E:lookup


def test_a_1d_load_at_a_tile_of_indices_gathers(target, rng):
    table = rng.standard_normal(50).astype(np.float32)
    idx = rng.integers(0, 50, 32).astype(np.int32)
    out = np.zeros(32, np.float32)
    lookup[1](table, idx, out)
    np.testing.assert_array_equal(out, table[idx])


@kernel(tile=(64,))
def paged_rows(kcache: f16[rows, D], table: i32[nb], out: mut[f32[m, D]]):
    # the paged-attention pattern: row j of the sequence is row j % BN of block table[j // BN]
    g = group_linear_id()
    j = tile.arange(BN) + g * BN
    r = tile.load(table, j // BN) * BN + j % BN
    kb = tile.load(kcache, (r[:, None], tile.arange(D)[None, :])).astype(f32) * 2.0
    tile.store_block(out, (g * BN, 0), kb)


def test_a_2d_load_reads_rows_through_a_block_table(target, rng):
    kcache = rng.standard_normal((6 * BN, D)).astype(np.float16)
    table = np.array([3, 1, 5, 0], np.int32)
    out = np.zeros((4 * BN, D), np.float32)
    paged_rows[4](kcache, table, out)
    want = kcache.reshape(6, BN, D)[table].reshape(4 * BN, D).astype(np.float32) * 2
    np.testing.assert_array_equal(out, want)


@kernel(tile=(64,))
def masked_rows(x: f32[r, c], rows: i64[k], out: mut[f32[k, 8]]):
    j = tile.arange(8)
    ids = tile.load_block(rows, (0,), (8,), other=-1)  # past k: -1, masked off below
    v = tile.load(x, (ids[:, None], j[None, :]), mask=(ids >= 0)[:, None], other=-7.5)
    tile.store_block(out, (0, 0), v)


def test_a_masked_load_reads_other_where_the_mask_is_false(target):
    x = np.arange(40, dtype=np.float32).reshape(5, 8)
    rows = np.array([4, 0, -1, 2, 1], np.int64)  # a -1 inside the array: masked off too
    out = np.zeros((5, 8), np.float32)
    masked_rows[1](x, rows, out)
    want = x[rows]
    want[2] = -7.5
    np.testing.assert_array_equal(out, want)


@kernel(tile=(64,))
def permute_rows(x: f32[m, D], perm: i64[m], out: mut[f32[m, D]]):
    g = group_linear_id()
    j = tile.arange(BN) + g * BN
    v = tile.load_block(x, (g * BN, 0), (BN, D))
    p = tile.load(perm, j, mask=j < m, other=0)
    tile.store(out, (p[:, None], tile.arange(D)[None, :]), v, mask=(j < m)[:, None])  # E:perm


def test_a_store_at_a_tile_of_indices_scatters(target, rng):
    m = 40  # the last group's rows past m are masked off
    x = rng.standard_normal((m, D)).astype(np.float32)
    perm = rng.permutation(m).astype(np.int64)
    out = np.zeros((m, D), np.float32)
    permute_rows[3](x, perm, out)
    want = np.zeros_like(out)
    want[perm] = x
    np.testing.assert_array_equal(out, want)


def _checked(target):
    if target == "cuda":
        pytest.skip("the cuda target has no bounds-checked launches (arrays neither)")
    return ts.config(boundscheck=1)


@pytest.mark.parametrize("bad", [50, -1, 2**31 - 1])
def test_a_load_outside_the_array_is_an_error_naming_array_and_line(target, bad):
    table = np.arange(50, dtype=np.float32)
    idx = np.arange(32, dtype=np.int32)
    idx[7] = bad
    out = np.zeros(32, np.float32)
    with _checked(target), pytest.raises(OutOfBoundsError) as info:
        lookup[1](table, idx, out)
    text = str(info.value)
    assert "'lookup'" in text and "'table'" in text and str(bad) in text
    assert_points_at(text, THIS_FILE, "lookup", "tile.load(")
    assert not out.any()


def test_a_store_outside_the_array_is_an_error_naming_array_and_line(target):
    x = np.ones((20, D), np.float32)
    perm = np.arange(20, dtype=np.int64)
    perm[3] = 20
    out = np.zeros((20, D), np.float32)
    with _checked(target), pytest.raises(OutOfBoundsError) as info:
        permute_rows[2](x, perm, out)
    text = str(info.value)
    assert "'permute_rows'" in text and "'out'" in text and "20" in text
    assert_points_at(text, THIS_FILE, "perm", "tile.store(")
    assert not out.any()


def test_unchecked_an_index_outside_reads_other_and_writes_nothing(target):
    """Without checks (plain CPU launches, CUDA) nothing outside the array is touched."""
    if target == "debug":
        pytest.skip("the debug target always checks")
    table = np.arange(50, dtype=np.float32)
    idx = np.arange(32, dtype=np.int32)
    idx[7] = 10**6
    out = np.full(32, -1, np.float32)
    lookup[1](table, idx, out)
    want = idx.astype(np.float32)
    want[7] = 0.0  # other
    np.testing.assert_array_equal(out, want)
    x, perm = np.ones((20, D), np.float32), np.arange(20, dtype=np.int64)
    perm[3] = 10**6
    out = np.zeros((20, D), np.float32)
    permute_rows[2](x, perm, out)
    want = np.ones_like(out)
    want[3] = 0.0
    np.testing.assert_array_equal(out, want)


@kernel(tile=(32,))
def colliding(x: f32[n], out: mut[f32[n]]):
    j = tile.arange(8)
    tile.store(out, j // 2, tile.load_block(x, (0,), (8,)))


def test_a_store_of_different_values_to_one_element_is_a_race_on_debug():
    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with ts.config(target="debug"), pytest.raises(RaceError, match=r"tile.store writes different"):
        colliding[1](x, out)


def test_a_store_of_equal_values_to_one_element_is_fine_everywhere(target):
    x, out = np.repeat(np.arange(4, dtype=np.float32), 2), np.zeros(8, np.float32)
    colliding[1](x, out)
    np.testing.assert_array_equal(out, [0, 1, 2, 3, 0, 0, 0, 0])


def test_a_float_index_tile_is_refused():
    with pytest.raises(KernelError, match=r"tile.load: an index needs integers, not tile f32\[8\]"):

        @kernel(tile=(32,))
        def float_index(a: f32[n], out: mut[f32[n]]):
            t = tile.arange(8).astype(f32)
            tile.store_block(out, (0,), tile.load(a, t))


def test_a_store_at_a_tile_of_indices_needs_a_tile_value():
    with pytest.raises(KernelError, match=r"tile.store at a tile of indices writes a tile"):

        @kernel(tile=(32,))
        def scalar_value(a: mut[f32[n]]):
            tile.store(a, tile.arange(8), 1.0)


def test_a_tile_mask_with_a_scalar_index_says_what_is_missing():
    with pytest.raises(KernelError, match=r"tile mask reads a tile: its index needs a tile"):

        @kernel(tile=(32,))
        def scalar_index(a: f32[n], out: mut[f32[n]]):
            v = tile.load(a, 0, mask=tile.arange(8) < n)
            tile.store_block(out, (0,), v)


def test_subscripting_an_array_with_a_tile_points_to_tile_load_and_store():
    with pytest.raises(KernelError, match=r"is a tile: .*tile.load\(a, .*tile.store"):

        @kernel(tile=(32,))
        def subscript_read(a: f32[n], out: mut[f32[n]]):
            tile.store_block(out, (0,), a[tile.arange(8)])

    with pytest.raises(KernelError, match=r"an index into 'out' is a tile: .*tile.store"):

        @kernel(tile=(32,))
        def subscript_write(a: f32[n], out: mut[f32[n]]):
            out[tile.arange(8)] = tile.load_block(a, (0,), (8,))


def test_a_load_needs_one_index_per_dim():
    with pytest.raises(KernelError, match=r"tile.load of a 2-d array needs 2 indices, not 1"):

        @kernel(tile=(32,))
        def one_index(a: f32[n, m], out: mut[f32[n]]):
            tile.store_block(out, (0,), tile.load(a, tile.arange(8)))


def test_the_docs_example_reads_a_paged_kv_cache(target, rng):
    page, heads, dim = 16, 2, 32
    title = "Gathers and scatters: tile.load and tile.store at tiles of indices"
    kernels = _section(title, PAGE=page, PAGES=2, DH=dim)
    kv = rng.standard_normal((5 * page, heads, dim)).astype(np.float32)
    table = np.array([[4, 2], [0, 3]], np.int32)  # two sequences of two pages each
    lengths = np.array([30, 17], np.int64)
    out = np.zeros((2, heads, 2 * page, dim), np.float32)
    kernels["gather_pages"][2, heads](kv, table, lengths, out)
    for s in range(2):
        rows = (table[s][:, None] * page + np.arange(page)).ravel()[: lengths[s]]
        want = np.zeros((heads, 2 * page, dim), np.float32)
        want[:, : lengths[s]] = kv[rows].transpose(1, 0, 2)
        np.testing.assert_array_equal(out[s], want)


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_tile_indexed_load_and_store_compile_to_ptx(arch):
    kcache, table = np.zeros((96, D), np.float16), np.zeros(4, np.int32)
    out = np.zeros((64, D), np.float32)
    ptx = paged_rows.inspect("ptx", kcache, table, out, grid=4, arch=arch)
    assert "ld.global.u16" in ptx and "ld.global.u32" in ptx and "ld.local" not in ptx
    x, perm = np.zeros((40, D), np.float32), np.zeros(40, np.int64)
    ptx = permute_rows.inspect("ptx", x, perm, x, grid=3, arch=arch)
    assert "st.global.f32" in ptx and "ld.local" not in ptx
