"""Block offsets at the ends of i64 (issue 26, item 2): ``tile.load_block`` and
``tile.store_block`` at offsets near 2**63 or -2**63 are blocks outside the array, masked
on every target (``other`` read, nothing written), never offsets that wrap around onto
the array's first elements."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import KiB, f32, i64, kernel, mut, tbarrier, tile, tshared

BIG = 2**63 - 1
SMALL = -(2**63)
# offsets whose block (8 elements, or 4 rows) wraps past the end of i64, and ones that do
# not but lie far outside the array
FAR_ENDS = [BIG, BIG - 3, BIG - 7, BIG - 8, SMALL, SMALL + 5, 2**62, -(2**62)]


@kernel(tile=(8,))
def load_at(x: f32[n], off: i64, out: mut[f32[8]]):
    t = tile.load_block(x, (off,), (8,), other=-1.0)
    tile.store_block(out, (0,), t)


@kernel(tile=(8,))
def store_at(x: mut[f32[n]], off: i64):
    tile.store_block(x, (off,), tile.full((8,), 5.0, f32))


@kernel(tile=(8,))
def store_masked_at(x: mut[f32[n]], off: i64):
    t = tile.full((8,), 5.0, f32)
    tile.store_block(x, (off,), t, mask=tile.arange(8) >= 0)


@kernel(tile=(8,))
def load_2d_at(x: f32[R, C], r: i64, c: i64, out: mut[f32[4, 8]]):
    t = tile.load_block(x, (r, c), (4, 8), other=-1.0)
    tile.store_block(out, (0, 0), t)


@kernel(tile=(8,))
def store_2d_at(x: mut[f32[R, C]], r: i64, c: i64):
    tile.store_block(x, (r, c), tile.full((4, 8), 5.0, f32))


@kernel(tile=(8,))
def load_row_at(x: f32[R, C], r: i64, c: i64, out: mut[f32[8]]):
    """A block of the last dim, the leading index fixed at ``r``."""
    t = tile.load_block(x, (r, c), (8,), other=-1.0)
    tile.store_block(out, (0,), t)


@kernel(tile=(8,), shared=1 * KiB)
def load_shared_at(x: f32[16], off: i64, out: mut[f32[8]]):
    s = tshared.alloc[f32](16)
    lane = tile.linear_id()
    s[lane] = x[lane]
    s[lane + 8] = x[lane + 8]
    tbarrier()
    t = tile.load_block(s, (off,), (8,), other=-1.0)
    tile.store_block(out, (0,), t)


def _x():
    return np.arange(16, dtype=np.float32)


@pytest.mark.parametrize("off", FAR_ENDS)
def test_a_block_far_outside_reads_other(target, off):
    out = np.zeros(8, np.float32)
    load_at[1](_x(), off, out)
    np.testing.assert_array_equal(out, np.full(8, -1.0, np.float32))


@pytest.mark.parametrize("off", FAR_ENDS)
def test_a_block_far_outside_writes_nothing(target, off):
    x = _x()
    store_at[1](x, off)
    np.testing.assert_array_equal(x, _x())


@pytest.mark.parametrize("off", [BIG, BIG - 7, SMALL])
def test_a_masked_block_far_outside_writes_nothing(target, off):
    x = _x()
    store_masked_at[1](x, off)
    np.testing.assert_array_equal(x, _x())


@pytest.mark.parametrize("r, c", [(BIG, 0), (0, BIG), (BIG - 2, BIG - 5), (SMALL, 0), (0, SMALL)])
def test_a_2d_block_far_outside_along_any_axis_reads_other(target, r, c):
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    out = np.zeros((4, 8), np.float32)
    load_2d_at[1](x, r, c, out)
    np.testing.assert_array_equal(out, np.full((4, 8), -1.0, np.float32))


@pytest.mark.parametrize("r, c", [(BIG, 0), (0, BIG), (BIG - 2, BIG - 5), (SMALL, 0), (0, SMALL)])
def test_a_2d_block_far_outside_along_any_axis_writes_nothing(target, r, c):
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    store_2d_at[1](x, r, c)
    np.testing.assert_array_equal(x, np.arange(64, dtype=np.float32).reshape(8, 8))


@pytest.mark.parametrize("r, c", [(BIG, 0), (SMALL, 0), (2, BIG - 3), (2, SMALL)])
def test_a_row_block_at_a_far_fixed_index_or_offset_reads_other(target, r, c):
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    out = np.zeros(8, np.float32)
    load_row_at[1](x, r, c, out)
    np.testing.assert_array_equal(out, np.full(8, -1.0, np.float32))


@pytest.mark.parametrize("off", [BIG, BIG - 7, SMALL])
def test_a_shared_block_far_outside_reads_other(target, off):
    out = np.zeros(8, np.float32)
    load_shared_at[1](_x(), off, out)
    np.testing.assert_array_equal(out, np.full(8, -1.0, np.float32))


@pytest.mark.parametrize("off", [-7, -3, 0, 5, 8, 11, 15, 16])
def test_blocks_across_either_edge_still_read_the_inside(target, off):
    out = np.zeros(8, np.float32)
    load_at[1](_x(), off, out)
    want = np.array([p if 0 <= p < 16 else -1.0 for p in range(off, off + 8)], np.float32)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("off", [-7, -3, 5, 11, 15, 16])
def test_blocks_across_either_edge_still_write_the_inside(target, off):
    x = _x()
    store_at[1](x, off)
    want = _x()
    for p in range(max(off, 0), min(off + 8, 16)):
        want[p] = 5.0
    np.testing.assert_array_equal(x, want)
