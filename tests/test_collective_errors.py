"""Compile errors about groups (LANGUAGE.md §2, §3, §5): collectives under lane-dependent
control flow (pointing at the collective and, in a note, at the condition), shared memory
over budget, and group primitives in flat kernels. Offending lines carry ``# E:<marker>``
comments (see error_helpers.py).
"""

from __future__ import annotations

import inspect

import numpy as np
from error_helpers import assert_points_at, compile_error

from tessera import (
    KiB,
    cp_async,
    f32,
    group_linear_id,
    kernel,
    mut,
    reduce_sum,
    tbarrier,
    tile,
    tshared,
)

FILE = inspect.getsourcefile(inspect.currentframe())


def points_at(msg: str, marker: str, token: str) -> None:
    assert_points_at(msg, FILE, marker, token)


# --------------------------------------------------------------------- divergent collectives


def assert_divergence(err, marker, token, cond_marker, cond_token):
    msg = str(err)
    assert "lane" in msg
    points_at(msg.split("note:")[0], marker, token)
    assert "note:" in msg, msg
    points_at(msg.split("note:", 1)[1], cond_marker, cond_token)


def k_div_if(x: f32[n], y: mut[f32[n]]):
    if tile.linear_id() < 5:  # E:div_if_cond
        tbarrier()  # E:div_if


def test_tbarrier_under_lane_dependent_if():
    err = compile_error(k_div_if, tile=(32,), shared=1 * KiB)
    assert "tbarrier" in str(err)
    assert_divergence(err, "div_if", "tbarrier", "div_if_cond", "tile.linear_id() < 5")


def k_div_reduce(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](32)
    lane = tile.linear_id()
    s[lane] = x[lane]
    tbarrier()
    if lane % 2 == 0:  # E:div_reduce_cond
        y[lane] = reduce_sum(s)  # E:div_reduce


def test_reduce_sum_under_lane_dependent_if():
    err = compile_error(k_div_reduce, tile=(32,), shared=1 * KiB)
    assert "reduce_sum" in str(err)
    assert_divergence(err, "div_reduce", "reduce_sum", "div_reduce_cond", "lane % 2")


def k_div_return(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    if lane == 3:  # E:div_return_cond
        return
    tbarrier()  # E:div_return
    y[lane] = x[lane]


def k_div_alloc(x: f32[n], out: mut[f32[n]]):
    if tile.linear_id() < 5:  # E:div_alloc_cond
        s = tshared.alloc[f32](32)  # E:div_alloc
        s[0] = x[0]


def test_tshared_alloc_under_lane_dependent_if():
    """Found by tests/test_mutation_fuzz.py (the debug target ran it, the CPU target
    failed with an internal error; then it was refused): the allocation is now hoisted to
    the kernel's top, as CUDA allocates shared memory statically, and the kernel compiles
    (tests/test_shared_hoist.py runs such kernels on every target; this one races on
    ``s[0]``, which the debug target reports)."""
    k = kernel(tile=(32,), shared=1 * KiB)(k_div_alloc)
    x = np.zeros(32, np.float32)
    ir = k.inspect("ir", x, x, grid=1)
    assert ir.index("tshared.alloc") < ir.index("if ")  # bound before the if, by every lane


def test_tbarrier_after_lane_dependent_early_return():
    err = compile_error(k_div_return, tile=(32,), shared=1 * KiB)
    assert_divergence(err, "div_return", "tbarrier", "div_return_cond", "if lane")


def k_div_loop(x: f32[n], y: mut[f32[n]]):
    lane = tile.linear_id()
    for _j in range(lane):  # E:div_loop_cond
        tbarrier()  # E:div_loop


def test_tbarrier_in_loop_with_lane_dependent_trip_count():
    err = compile_error(k_div_loop, tile=(32,), shared=1 * KiB)
    assert_divergence(err, "div_loop", "tbarrier", "div_loop_cond", "lane)")


def k_div_while(x: f32[n], y: mut[f32[n]]):
    k = 0
    while k < tile.linear_id():  # E:div_while_cond
        tbarrier()  # E:div_while
        k += 1


def test_tbarrier_in_while_with_lane_dependent_condition():
    err = compile_error(k_div_while, tile=(32,), shared=1 * KiB)
    assert_divergence(err, "div_while", "tbarrier", "div_while_cond", "k < tile")


def k_div_mem(x: f32[n], y: mut[f32[n]]):
    v = x[tile.linear_id()]
    if v > 0.0:  # E:div_mem_cond
        tbarrier()  # E:div_mem


def test_tbarrier_under_condition_on_memory_read_at_lane_index():
    err = compile_error(k_div_mem, tile=(32,), shared=1 * KiB)
    assert_divergence(err, "div_mem", "tbarrier", "div_mem_cond", "v > 0.0")


# --------------------------------------------------------------------- shared memory budget


def k_over(x: f32[n], y: mut[f32[n]]):
    small = tshared.alloc[f32](16)  # noqa: F841
    big = tshared.alloc[f32](1024)  # noqa: F841  # E:over
    tbarrier()


def test_shared_memory_over_budget_prints_both_sizes():
    err = compile_error(k_over, tile=(32,), shared=2 * KiB)
    msg = str(err)
    assert str(16 * 4 + 1024 * 4) in msg and str(2 * KiB) in msg, msg
    assert "budget" in msg
    points_at(msg, "over", "big")


def k_at_budget(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](1000)  # noqa: F841
    t = tshared.alloc[f32](24)  # noqa: F841


def test_shared_memory_exactly_at_budget_is_fine():
    assert kernel(tile=(32,), shared=4 * KiB)(k_at_budget).grouped


# ----------------------------------------------------- group primitives in flat kernels


def k_flat_barrier(x: f32[n], y: mut[f32[n]]):
    tbarrier()  # E:flat_barrier


def test_tbarrier_in_flat_kernel():
    err = compile_error(k_flat_barrier)
    assert "tile=" in str(err)
    points_at(str(err), "flat_barrier", "tbarrier")


def k_flat_alloc(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](32)  # noqa: F841  # E:flat_alloc


def test_tshared_alloc_in_flat_kernel():
    err = compile_error(k_flat_alloc)
    assert "tile=" in str(err) and "tshared.alloc" in str(err)
    points_at(str(err), "flat_alloc", "tshared")


def k_flat_reduce(x: f32[n], y: mut[f32[n]]):
    y[0] = reduce_sum(x)  # E:flat_reduce


def test_reduce_sum_in_flat_kernel():
    err = compile_error(k_flat_reduce)
    assert "tile=" in str(err) and "reduce_sum" in str(err)
    points_at(str(err), "flat_reduce", "reduce_sum")


def k_flat_copy(x: f32[n], y: mut[f32[n]]):
    cp_async.shared.global_(y, x[0:4])  # E:flat_copy


def test_cp_async_in_flat_kernel():
    err = compile_error(k_flat_copy)
    assert "tile=" in str(err) and "cp_async" in str(err)
    points_at(str(err), "flat_copy", "cp_async")


def k_flat_tsum(x: f32[n], y: mut[f32[n]]):
    y[0] = tile.sum(x[tile.linear_id()])  # E:flat_tsum


def test_tile_sum_in_flat_kernel():
    err = compile_error(k_flat_tsum)
    assert "tile=" in str(err)
    points_at(str(err), "flat_tsum", "tile.sum")


def k_div_break(x: f32[n], y: mut[f32[n]]):
    for j in range(4):
        if tile.linear_id() == j:  # E:div_break_cond
            break
        tbarrier()  # E:div_break


def test_tbarrier_after_lane_dependent_break_is_an_error():
    err = compile_error(k_div_break, tile=(8,), shared=0)
    assert "note:" in str(err)
    points_at(str(err).split("note:")[0], "div_break", "tbarrier")


def test_lane_dependent_break_note_points_at_the_condition():
    err = compile_error(k_div_break, tile=(8,), shared=0)
    points_at(str(err).split("note:", 1)[1], "div_break_cond", "tile.linear_id() == j")


def k_div_copy_bounds(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](8)
    lane = tile.linear_id()
    cp_async.shared.global_(s, x[lane : lane + 8])  # E:div_copy_bounds
    tbarrier()


def test_cp_async_bounds_depending_on_the_lane():
    err = compile_error(k_div_copy_bounds, tile=(8,), shared=64)
    assert "cp_async" in str(err) and "lane" in str(err)
    points_at(str(err), "div_copy_bounds", "lane : lane")


def k_div_tile_range(x: f32[n], y: mut[f32[n]]):
    for t in tile.range(0, tile.linear_id()):  # E:div_tile_range
        y[t] = 0.0


def test_tile_range_bounds_depending_on_the_lane():
    err = compile_error(k_div_tile_range, tile=(8,), shared=0)
    assert "tile.range" in str(err)
    points_at(str(err), "div_tile_range", "tile.linear_id()")


def k_uniform_return(x: f32[n], y: mut[f32[grid_groups]]):
    s = tshared.alloc[f32](8)
    if group_linear_id() == 1:  # the same for every lane of a group: not divergent
        return
    s[tile.linear_id()] = x[group_linear_id() * 8 + tile.linear_id()]
    tbarrier()
    t = reduce_sum(s)
    y[group_linear_id()] = t


def test_group_uniform_early_return_before_a_collective_is_fine():
    k = kernel(tile=(8,), shared=64)(k_uniform_return)
    x = np.arange(24, dtype=np.float32)
    y = np.full(3, -1.0, np.float32)
    k[3](x, y)
    np.testing.assert_array_equal(y, [x[:8].sum(), -1.0, x[16:].sum()])
