"""The smaller gaps a port from CUDA meets (issue 18, item 6): the grid's size per axis
(``group_count``), shared memory sized at launch (``tshared.dynamic``) and random numbers
(``tile.rand``), each on every target."""

from __future__ import annotations

import numpy as np
from test_ops_dropout import expected_mask, philox_reference

from tessera import KiB, f32, group_count, group_id, i32, i64, kernel, mut, tile


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


@kernel
def uniforms(out: mut[f32[n]], seed: i64, first: i64):
    i = tile.linear_id()
    if i < n:
        out[i] = tile.rand(seed, first + i)


def test_rand_is_the_top_24_bits_of_philox_word_0(target):
    seed, first = 2**40 + 12345, 2**33 - 5  # both words of key and counter are used
    out = np.zeros(16, np.float32)
    uniforms[16](out, seed, first)
    key = [seed & 0xFFFFFFFF, seed >> 32]
    counters = [[(first + i) & 0xFFFFFFFF, (first + i) >> 32, 0, 0] for i in range(16)]
    want = [(philox_reference(c, key)[0] >> 8) * 2.0**-24 for c in counters]
    np.testing.assert_array_equal(out, np.array(want, np.float32))


def test_rand_of_counter_and_key_zero_is_random123s_known_answer(target):
    out = np.zeros(1, np.float32)
    uniforms[1](out, 0, 0)
    assert out[0] == np.float32((0x6627E8D5 >> 8) * 2.0**-24)


def test_rand_draws_the_stream_op_dropout_masks_with(target):
    out = np.zeros(300, np.float32)
    uniforms[300](out, 1234, 0)
    np.testing.assert_array_equal(out >= 0.3, expected_mask(300, 0.3, 1234))


@kernel(tile=(8,), shared=1 * KiB)
def grouped_uniforms(out: mut[f32[n]], seed: i32):
    i = group_id(0) * 8 + tile.linear_id()
    if i < n:
        out[i] = tile.rand(seed, i)


def test_rand_in_a_grouped_kernel_with_i32_arguments_matches_a_flat_one(target):
    flat, grouped = np.zeros(40, np.float32), np.zeros(40, np.float32)
    uniforms[40](flat, 7, 0)
    grouped_uniforms[5](grouped, 7)
    np.testing.assert_array_equal(grouped, flat)
    assert ((0 <= flat) & (flat < 1)).all() and len(np.unique(flat)) == 40
