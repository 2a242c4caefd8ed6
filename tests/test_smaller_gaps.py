"""The smaller gaps a port from CUDA meets (issue 18, item 6): the grid's size per axis
(``group_count``), shared memory sized at launch (``tshared.dynamic``) and random numbers
(``tile.rand``), each on every target."""

from __future__ import annotations

import numpy as np

from tessera import KiB, group_count, group_id, i64, kernel, mut, tile


@kernel(tile=(4,), shared=1 * KiB)
def grid_sizes(out: mut[i64[grid_groups, 3]]):
    g = group_id(0) * group_count(1) + group_id(1)
    if tile.linear_id() == 0:
        out[g, 0] = group_count(0)
        out[g, 1] = group_count(1)
        out[g, 2] = group_count(2)


def test_group_count_gives_the_grid_size_along_each_axis(target):
    out = np.zeros((6, 3), np.int64)
    grid_sizes[(2, 3)](out)
    np.testing.assert_array_equal(out, np.tile([2, 3, 1], (6, 1)))


def test_group_count_of_a_one_dimensional_grid_is_one_past_its_axis(target):
    out = np.zeros((5, 3), np.int64)
    grid_sizes[5](out)
    np.testing.assert_array_equal(out, np.tile([5, 1, 1], (5, 1)))
