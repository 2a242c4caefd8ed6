"""Region formation (LANGUAGE.md §7) as seen through ``k.inspect("regions")``: which values
get a slot per lane, which are recomputed, and which loops are rewritten."""

from __future__ import annotations

import numpy as np
from classic_kernels import matmul, softmax_rows

from tessera import f32, group_linear_id, kernel, mut, tile


@kernel(tile=(8,))
def strided_with_late_read(x: f32[n], y: mut[f32[grid_groups]]):
    acc = 0.0
    j = 0
    for j in range(tile.linear_id(), n, 8):
        acc += x[j]
    total = tile.sum(acc + f32(j) * 0.0)  # j is read after its loop: no rewrite
    if tile.linear_id() == 0:
        y[group_linear_id()] = total


def test_ids_derived_values_are_recomputed_not_stored():
    a = np.zeros((32, 32), np.float32)
    text = matmul.inspect("regions", a, a, a, grid=(2, 2))
    assert text.splitlines()[0] == "lane arrays: ['acc']"


def test_lane_strided_loops_become_uniform_loops_over_lane_rows():
    x = np.zeros((4, 300), np.float32)
    text = softmax_rows.inspect("regions", x, x, grid=4)
    assert text.count("for _strip") == 3


def test_strided_loop_whose_counter_is_read_afterwards_is_left_alone(rng):
    x = rng.random(100, dtype=np.float32)
    y = np.zeros(1, np.float32)
    assert "_strip" not in strided_with_late_read.inspect("regions", x, y, grid=1)
    strided_with_late_read[1](x, y)
    assert np.isclose(y[0], x.sum(), rtol=1e-5)


def test_uniform_loop_holding_one_region_runs_between_the_lane_loops():
    a = np.zeros((32, 32), np.float32)
    code = matmul.inspect("cpu", a, a, a, grid=(2, 2))
    lines = [line.strip() for line in code.splitlines()]
    k = lines.index("for _l0 in range(16):", lines.index("# region 2"))
    assert lines[k + 1].startswith("for v_kk in range(")
    assert lines[k + 2] == "for _l1 in range(16):"
