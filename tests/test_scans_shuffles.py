"""``tile.prefix_sum`` and the sub-group shuffles: the same bits on every target."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import f32, group_linear_id, i32, i64, kernel, mut, tile


@kernel(tile=(64,))
def scans(x: f32[n], inclusive: mut[f32[n]], exclusive: mut[f32[n]]):
    k = group_linear_id() * 64 + tile.linear_id()
    v = x[k]
    inclusive[k] = tile.prefix_sum(v)
    exclusive[k] = tile.prefix_sum(v, exclusive=True)


@kernel(tile=(64,))
def shuffles(x: i32[n], out: mut[i32[4, n]], offset: i64):
    lane = tile.linear_id()
    k = group_linear_id() * 64 + lane
    v = x[k]
    out[0, k] = tile.shuffle(v, lane * 7 + offset)
    out[1, k] = tile.shuffle_xor(v, offset)
    out[2, k] = tile.shuffle_down(v, offset)
    out[3, k] = tile.shuffle_up(v, lane % 3)


@kernel(tile=(256,))
def compact(x: f32[n], out: mut[f32[n]], count: mut[i64[grid_groups]]):
    k = group_linear_id() * 256 + tile.linear_id()
    keep = 1 if k < n and x[k] > 0 else 0
    slot = tile.prefix_sum(keep, exclusive=True)
    total = tile.sum(keep)
    if keep == 1:
        out[group_linear_id() * 256 + slot] = x[k]
    if tile.linear_id() == 0:
        count[group_linear_id()] = total


@kernel(tile=(32,))
def warp_sum(x: f32[n], out: mut[f32[grid_groups]]):
    v = x[group_linear_id() * 32 + tile.linear_id()]
    d = 16
    while d > 0:
        v += tile.shuffle_down(v, d)
        d //= 2
    if tile.linear_id() == 0:
        out[group_linear_id()] = v


def _shuffle_reference(x: np.ndarray, offset: int) -> np.ndarray:
    out = np.empty((4, x.size), np.int32)
    for k in range(x.size):
        lane = k % 64
        base, pos = k - k % 32, lane % 32

        def at(p, own=k, base=base):
            return x[base + p] if 0 <= p < 32 else x[own]

        out[0, k] = x[base + ((lane * 7 + offset) & 31)]
        out[1, k] = at(pos ^ offset)
        out[2, k] = at(pos + offset)
        out[3, k] = at(pos - lane % 3)
    return out


def test_prefix_sums_add_in_lane_order(target, rng):
    x = rng.standard_normal(256).astype(np.float32)
    inclusive, exclusive = np.zeros_like(x), np.zeros_like(x)
    scans[4](x, inclusive, exclusive)
    for g in range(4):
        acc, inc, exc = np.float32(0), [], []
        for v in x[g * 64 : (g + 1) * 64]:
            exc.append(acc)
            acc = np.float32(acc + v)
            inc.append(acc)
        assert np.array_equal(inclusive[g * 64 : (g + 1) * 64], inc)
        assert np.array_equal(exclusive[g * 64 : (g + 1) * 64], exc)


@pytest.mark.parametrize("offset", [1, 5, 31, 40])
def test_shuffles_read_the_lane_the_language_defines(target, offset):
    x = np.arange(128, dtype=np.int32) * 3 + 1
    out = np.zeros((4, 128), np.int32)
    shuffles[2](x, out, offset)
    assert np.array_equal(out, _shuffle_reference(x, offset))


def test_stream_compaction_with_an_exclusive_scan(target, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.zeros_like(x)
    groups = -(-x.size // 256)
    count = np.zeros(groups, np.int64)
    compact[groups](x, out, count)
    for g in range(groups):
        block = x[g * 256 : (g + 1) * 256]
        kept = block[block > 0]
        assert count[g] == kept.size
        assert np.array_equal(out[g * 256 : g * 256 + kept.size], kept)


def test_warp_sum_by_shuffles_is_the_same_on_every_target(target, rng):
    x = rng.standard_normal(32 * 8).astype(np.float32)
    out = np.zeros(8, np.float32)
    warp_sum[8](x, out)
    expected = []
    for g in range(8):
        v = x[g * 32 : (g + 1) * 32].copy()
        d = 16
        while d > 0:
            shifted = v.copy()
            shifted[: 32 - d] = v[d:]  # past the end: the lane's own value
            v = (v + shifted).astype(np.float32)
            d //= 2
        expected.append(v[0])
    assert np.array_equal(out, np.array(expected, np.float32))


def test_a_group_that_cannot_be_cut_into_sub_groups_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="sub-groups of 32 lanes") as err:

        @kernel(tile=(48,))
        def odd(x: f32[n], y: mut[f32[n]]):
            y[tile.linear_id()] = tile.shuffle_xor(x[tile.linear_id()], 1)

    assert "tile=(48,)" not in str(err.value) and "shuffle_xor" in str(err.value)


def test_a_shuffle_under_lane_dependent_control_is_a_compile_error():
    with pytest.raises(ts.KernelError, match="group collective"):

        @kernel(tile=(32,))
        def divergent(x: f32[n], y: mut[f32[n]]):
            if tile.linear_id() < 16:
                y[tile.linear_id()] = tile.shuffle(x[tile.linear_id()], 0)


def test_prefix_sum_needs_a_grouped_kernel():
    with pytest.raises(ts.KernelError, match="needs a grouped kernel"):

        @kernel
        def flat(x: f32[n], y: mut[f32[n]]):
            y[tile.linear_id()] = tile.prefix_sum(x[tile.linear_id()])


def test_exclusive_must_be_a_constant():
    with pytest.raises(ts.KernelError, match="True or False"):

        @kernel(tile=(32,))
        def bad(x: f32[n], y: mut[f32[n]], flag: i32):
            y[tile.linear_id()] = tile.prefix_sum(x[tile.linear_id()], exclusive=flag)


def test_prefix_sum_of_small_integers_wraps_at_their_width(target):
    @kernel(tile=(64,))
    def wrap(x: i32[n], y: mut[i32[n]]):
        k = group_linear_id() * 64 + tile.linear_id()
        y[k] = tile.prefix_sum(x[k])

    x = np.full(64, 2**30, np.int32)
    y = np.zeros_like(x)
    wrap[1](x, y)
    assert np.array_equal(y, np.cumsum(x.astype(np.int64)).astype(np.int32))
