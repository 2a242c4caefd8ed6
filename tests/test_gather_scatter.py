"""``tile.gather`` and ``tile.scatter``: a tile read from, or written to, an array at a tile
of indices per dim (what paged attention's block table, embedding lookups and
permutations need): the same results on every target, out-of-range and masked elements
untouched, and clear errors for what they refuse."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from tessera import (
    KernelError,
    RaceError,
    config,
    f16,
    f32,
    group_linear_id,
    i32,
    i64,
    kernel,
    mut,
    tile,
)

BN, D = 16, 32


@kernel(tile=(64,))
def paged_rows(k: f16[rows, D], table: i32[nb], out: mut[f32[m, D]]):
    # BN rows of k through a block table: row = table[j // BN] * BN + j % BN
    g = group_linear_id()
    j = tile.arange(BN) + g * BN
    blocks = tile.gather(table, (j // BN,))
    r = blocks * BN + j % BN
    vals = tile.gather(k, (r[:, None], tile.arange(D)[None, :]), other=-1.0)
    tile.store_block(out, (g * BN, 0), vals.astype(f32))


def test_gather_reads_rows_through_a_block_table_and_other_past_the_end(target, rng):
    nblocks = 6
    k = rng.standard_normal((nblocks * BN, D)).astype(np.float16)
    table = np.array([3, 1, 5, 7], np.int32)  # block 7 is past the end: reads other
    out = np.zeros((4 * BN, D), np.float32)
    paged_rows[4](k, table, out)
    want = np.full_like(out, -1.0)
    for b, block in enumerate(table[:3]):
        want[b * BN : (b + 1) * BN] = k[block * BN : (block + 1) * BN]
    np.testing.assert_array_equal(out, want)


@kernel(tile=(64,))
def permute_rows(x: f32[m, D], perm: i64[m], out: mut[f32[m, D]]):
    g = group_linear_id()
    j = tile.arange(BN) + g * BN
    v = tile.load_block(x, (g * BN, 0), (BN, D))
    p = tile.gather(perm, (j,), mask=j < m, other=-1)  # -1: outside, never written
    tile.scatter(out, (p[:, None], tile.arange(D)[None, :]), v)


def test_scatter_writes_rows_to_their_permuted_places(target, rng):
    m = 40  # the last group's rows past m are masked out
    x = rng.standard_normal((m, D)).astype(np.float32)
    perm = rng.permutation(m).astype(np.int64)
    out = np.zeros((m, D), np.float32)
    permute_rows[3](x, perm, out)
    want = np.zeros_like(out)
    want[perm] = x
    np.testing.assert_array_equal(out, want)


@kernel(tile=(32,))
def masked_lookup(table: f32[n], idx: i32[k], keep: f32[k], out: mut[f32[k]]):
    j = tile.arange(32)
    ids = tile.load_block(idx, (0,), (32,), other=-5)
    flags = tile.load_block(keep, (0,), (32,))
    got = tile.gather(table, (ids,), mask=flags > 0.0, other=7.5)
    tile.store_block(out, (0,), got, mask=j < k)
    tile.scatter(out, (ids,), tile.full((32,), 0.0), mask=ids < 0)  # writes nothing


def test_gather_masks_and_out_of_range_indices_read_other(target, rng):
    table = rng.standard_normal(10).astype(np.float32)
    idx = np.array([0, 9, 10, -1, 3, 2**31 - 1, 4, 5], np.int32)
    keep = np.array([1, 1, 1, 1, 0, 1, 1, 1], np.float32)
    out = np.zeros(8, np.float32)
    masked_lookup[1](table, idx, keep, out)
    np.testing.assert_array_equal(out, [table[0], table[9], 7.5, 7.5, 7.5, 7.5, table[4], table[5]])


@kernel(tile=(32,))
def colliding_scatter(x: f32[n], out: mut[f32[n]]):
    j = tile.arange(8)
    tile.scatter(out, (j // 2,), tile.load_block(x, (0,), (8,)))


def test_scatter_of_different_values_to_one_element_is_a_race_on_debug():
    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with config(target="debug"), pytest.raises(RaceError, match=r"tile.scatter writes different"):
        colliding_scatter[1](x, out)


def test_scatter_of_equal_values_to_one_element_is_fine_everywhere(target):
    x, out = np.repeat(np.arange(4, dtype=np.float32), 2), np.zeros(8, np.float32)
    colliding_scatter[1](x, out)
    np.testing.assert_array_equal(out, [0, 1, 2, 3, 0, 0, 0, 0])


def test_gather_needs_one_index_per_dim():
    with pytest.raises(KernelError, match=r"tile.gather of a 2-d array needs 2 indices"):

        @kernel(tile=(32,))
        def one_index(a: f32[n, m], out: mut[f32[n]]):
            tile.store_block(out, (0,), tile.gather(a, (tile.arange(8),)))


def test_gather_needs_integer_indices():
    with pytest.raises(KernelError, match=r"tile.gather: an index needs integers"):

        @kernel(tile=(32,))
        def float_index(a: f32[n], out: mut[f32[n]]):
            t = tile.arange(8).astype(f32)
            tile.store_block(out, (0,), tile.gather(a, (t,)))


def test_indexing_an_array_with_a_tile_suggests_gather():
    with pytest.raises(KernelError, match=r"an index into 'a' is a tile: .*tile.gather\(a"):

        @kernel(tile=(32,))
        def tile_index(a: f32[n], out: mut[f32[n]]):
            i = tile.arange(8)
            out[0] = a[i]


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="PTX needs numba-cuda without its simulator",
)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_gather_and_scatter_compile_to_ptx_without_local_memory(arch):
    k, table = np.zeros((96, D), np.float16), np.zeros(4, np.int32)
    ptx = paged_rows.inspect("ptx", k, table, np.zeros((64, D), np.float32), grid=4, arch=arch)
    assert "ld.global.u16" in ptx and "ld.local" not in ptx
    x, perm = np.zeros((40, D), np.float32), np.zeros(40, np.int64)
    ptx = permute_rows.inspect("ptx", x, perm, x, grid=3, arch=arch)
    assert "st.global.f32" in ptx and "ld.local" not in ptx
