"""A name reused for unrelated values in a grouped kernel (LANGUAGE.md, "The body"): a
uniform loop counter and a per-lane variable that share a name stay apart on every target
(region formation used to reload the counter from the lane variable's slots)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import (
    KiB,
    constexpr,
    group_linear_id,
    i32,
    i64,
    kernel,
    mut,
    tbarrier,
    tile,
    tshared,
)


@kernel(tile=(64,), shared=1 * KiB)
def histogram(x: i32[n], bins: mut[i32[grid_groups, 256]]):
    """Each group counts its slice of ``x`` into 256 bins."""
    s = tshared.alloc[i32](256)
    lane = tile.linear_id()
    for i in range(4):  # uniform: one i for the whole group
        s[lane + i * 64] = 0
    tbarrier()
    per_group = (n + grid_groups - 1) // grid_groups
    for i in range(0, per_group, 64):  # uniform
        k = group_linear_id() * per_group + i + lane
        if i + lane < per_group and k < n:
            tile.atomic_add(s, x[k], 1)
    tbarrier()
    for i in range(lane, 256, 64):  # one i per lane
        bins[group_linear_id(), i] = s[i]


@kernel(tile=(128,), shared=8 * KiB)
def radix_pass(keys: i32[n], out: mut[i32[n]], shift: i32):
    """One stable pass of an LSD radix sort on 4-bit digits, in one group: each lane
    counts its own chunk, lane 0 scans the counts (digit-major, lane-minor), each lane
    scatters its chunk."""
    counts = tshared.alloc[i32](16 * 128)
    lane = tile.linear_id()
    chunk = (n + 127) // 128
    for i in range(16):  # uniform
        counts[i * 128 + lane] = 0
    tbarrier()
    for i in range(chunk):  # uniform
        k = lane * chunk + i
        if k < n:
            counts[((keys[k] >> shift) & 15) * 128 + lane] += 1
    tbarrier()
    if lane == 0:
        run = 0
        for i in range(16 * 128):  # lane 0's own
            c = counts[i]
            counts[i] = run
            run += c
    tbarrier()
    for i in range(chunk):
        k = lane * chunk + i
        if k < n:
            d = (keys[k] >> shift) & 15
            out[counts[d * 128 + lane]] = keys[k]
            counts[d * 128 + lane] += 1


@kernel(tile=(4,))
def counter_read_after_loop(out: mut[i64[grid_groups, 4]]):
    s = tshared.alloc[i64](4)
    lane = tile.linear_id()
    i = lane * 10  # the same web as the counter: the read after the loop sees both
    for i in range(3):
        s[lane] = i
        tbarrier()
    out[group_linear_id(), lane] = i * 100 + s[lane]


def test_histogram_whose_loops_share_a_name_matches_numpy(target, rng):
    x = rng.integers(0, 256, 5000).astype(np.int32)
    bins = np.full((1, 256), -1, np.int32)
    histogram[1](x, bins)
    np.testing.assert_array_equal(bins.sum(axis=0), np.bincount(x, minlength=256))


def test_radix_pass_whose_loops_share_a_name_matches_numpy(target, rng):
    keys = rng.integers(0, 1 << 16, 1000).astype(np.int32)
    out = np.full_like(keys, -1)
    radix_pass[1](keys, out, np.int32(4))
    np.testing.assert_array_equal(out, keys[np.argsort((keys >> 4) & 15, kind="stable")])


def test_counter_of_uniform_loop_read_after_it_is_its_last_value(target):
    out = np.zeros((2, 4), np.int64)
    counter_read_after_loop[2](out)
    np.testing.assert_array_equal(out, np.full((2, 4), 202))


def test_uniform_counter_sharing_a_name_with_a_lane_variable_is_not_stored_per_lane():
    x = np.zeros(10, np.int32)
    bins = np.zeros((1, 256), np.int32)
    assert histogram.inspect("regions", x, bins, grid=1).splitlines()[0] == "lane arrays: none"


@kernel(tile=(4,))
def carried_to_the_next_trip(out: mut[i64[grid_groups, 4]]):
    lane = tile.linear_id()
    t = 0
    for r in range(3):
        out[group_linear_id(), lane] = t  # the previous trip's t: one web with t = 0
        tbarrier()
        t = lane * 10 + r
        tbarrier()


def test_value_carried_around_a_loop_reaches_the_next_trip(target):
    out = np.zeros((2, 4), np.int64)
    carried_to_the_next_trip[2](out)
    np.testing.assert_array_equal(out, np.broadcast_to(np.arange(4) * 10 + 1, (2, 4)))


@kernel(tile=(4,))
def reuses_a_name_for_an_array(out: mut[i64[n]], C: constexpr):
    s = tshared.alloc[i64](4)
    v = s
    v[tile.linear_id()] = C
    tbarrier()
    for v in range(2):
        out[v] = s[v]


def test_a_name_rebound_from_an_array_to_a_counter_is_two_variables(target):
    out = np.zeros(4, np.int64)
    reuses_a_name_for_an_array[1](out, 2)
    np.testing.assert_array_equal(out, [2, 2, 0, 0])


@kernel(tile=(4,))
def joins_an_array_and_a_number(out: mut[i64[n]], C: constexpr):
    s = tshared.alloc[i64](4)
    v = s
    if tile.linear_id() == C:
        v = 3
    out[0] = v


def test_type_error_in_a_kernel_reusing_a_name_names_the_users_variable():
    with pytest.raises(tessera.KernelError) as info:
        joins_an_array_and_a_number[1](np.zeros(4, np.int64), 2)
    assert "'v' holds shared i64[:] here but i64" in str(info.value)
    assert type(info.value) is tessera.KernelError
