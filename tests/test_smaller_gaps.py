"""The smaller gaps a port from CUDA meets (issue 18, item 6): the grid's size per axis
(``group_count``), shared memory sized at launch (``tshared.dynamic``) and random numbers
(``tile.rand``), each on every target."""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_dropout import expected_mask, philox_reference

import tessera as ts
from tessera import (
    KernelError,
    KiB,
    LaunchError,
    cp_async,
    f32,
    group_count,
    group_id,
    i32,
    i64,
    kernel,
    mut,
    reduce_sum,
    tbarrier,
    tile,
    tshared,
)


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


@kernel(tile=(32,), shared=4 * KiB)
def reverse_chunks(x: f32[n], y: mut[f32[n]], chunk: i64):
    """Each group reverses a chunk of ``chunk`` elements through shared memory sized at
    launch, next to a constant allocation."""
    s = tshared.dynamic[f32](chunk)
    flags = tshared.alloc[i32](32)
    base = group_id(0) * chunk
    lane = tile.linear_id()
    flags[lane] = 1
    for k in range(lane, chunk, 32):
        s[k] = x[base + k] if base + k < n else 0.0
    tbarrier()
    for k in range(lane, chunk, 32):
        if base + k < n:
            y[base + k] = s[chunk - 1 - k] + f32(flags[(lane + 1) % 32] - 1)


@pytest.mark.parametrize("chunk", [40, 100])
def test_dynamic_shared_memory_takes_its_size_from_the_launch(target, chunk):
    x = np.arange(400, dtype=np.float32)
    y = np.zeros(400, np.float32)
    reverse_chunks[400 // chunk](x, y, chunk)
    want = np.concatenate([c[::-1] for c in np.split(x, 400 // chunk)])
    np.testing.assert_array_equal(y, want)


def test_dynamic_shared_memory_over_the_budget_is_a_launch_error_that_changes_nothing(target):
    x, y = np.ones(2000, np.float32), np.full(2000, 7.0, np.float32)
    with pytest.raises(LaunchError) as info:
        reverse_chunks[2](x, y, 1000)  # 4000 bytes + 128 of flags > shared=4096
    message = str(info.value)
    assert "reverse_chunks" in message and "parameter 'chunk'" in message
    assert "4128" in message and "4096" in message
    assert (y == 7.0).all()


@kernel(tile=(16,))
def dynamic_by_symbol(x: f32[m], out: mut[f32[grid_groups]]):
    s = tshared.dynamic[f32](m)
    for k in range(tile.linear_id(), m, 16):
        s[k] = x[k]
    tbarrier()
    if tile.linear_id() == 0:
        total = f32(0.0)
        for k in range(m):
            total += s[k]
        out[group_id(0)] = total


def test_dynamic_shared_memory_sized_by_a_symbol(target):
    out = np.zeros(3, np.float32)
    dynamic_by_symbol[3](np.arange(50, dtype=np.float32), out)
    np.testing.assert_array_equal(out, np.full(3, 1225.0, np.float32))


def test_dynamic_shared_size_must_be_a_launch_argument():
    def sized_by_a_local(x: f32[n]):
        k = 4
        s = tshared.dynamic[f32](k)  # noqa: F841
        tbarrier()

    with pytest.raises(KernelError, match="scalar integer parameter or a size symbol"):
        kernel(tile=(4,))(sized_by_a_local)


def reduces_a_dynamic_array(x: f32[n], out: mut[f32[n]]):
    s = tshared.dynamic[f32](n)
    s[tile.linear_id()] = 1.0
    tbarrier()
    total = reduce_sum(s)
    out[tile.linear_id()] = total


def test_a_group_reduction_of_a_dynamic_shared_array_is_a_compile_error():
    with pytest.raises(KernelError, match="constant shape"):
        kernel(tile=(4,))(reduces_a_dynamic_array)


@kernel(tile=(8,))
def copies_into_dynamic(x: f32[n], y: mut[f32[n]], chunk: i64):
    s = tshared.dynamic[f32](chunk)
    base = group_id(0) * chunk
    cp_async.shared.global_(s, x[base : base + chunk])
    tbarrier()
    for k in range(tile.linear_id(), chunk, 8):
        if base + k < n:
            y[base + k] = s[k] * 2.0


def test_cp_async_fills_a_dynamic_shared_array(target):
    x, y = np.arange(50, dtype=np.float32), np.zeros(50, np.float32)
    copies_into_dynamic[4](x, y, 13)
    np.testing.assert_array_equal(y, 2 * x)


def test_the_debug_target_checks_a_dynamic_shared_array_against_its_launch_size():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with ts.config(target="debug"), pytest.raises(ts.OutOfBoundsError, match=r"shape \(10,\)"):
        reads_past_dynamic[1](x, y, 10)
    assert not y.any()


@kernel(tile=(8,))
def reads_past_dynamic(x: f32[n], y: mut[f32[n]], chunk: i64):
    s = tshared.dynamic[f32](chunk)
    s[tile.linear_id()] = x[tile.linear_id()]
    tbarrier()
    y[tile.linear_id()] = s[tile.linear_id() + chunk - 4]  # lanes 4..7 read past chunk
