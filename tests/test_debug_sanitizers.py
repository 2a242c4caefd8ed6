"""The debug target's sanitizers: each catches a planted bug, names the kernel, the group,
the lane(s) and the lines involved, and leaves the arguments untouched; the same kernels
without the bug run clean."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera as ts
from tessera import KiB, cp_async, f32, i32, kernel, mut, tbarrier, tile, tshared

THIS_FILE = __file__


def line_of(marker: str) -> int:
    with open(THIS_FILE) as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# {marker}"):
                return number
    raise AssertionError(marker)


@pytest.fixture
def debug():
    with ts.config(target="debug"):
        yield


@kernel
def read_past_end(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i + 1]  # oob-global


@kernel(tile=(8,), shared=1 * KiB)
def shared_past_end(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](8)
    lane = tile.linear_id()
    s[lane] = x[lane]
    tbarrier()
    y[lane] = s[lane + 1]  # oob-shared


@kernel(tile=(8,), shared=1 * KiB)
def read_unwritten(x: f32[n], y: mut[f32[n]], skip: i32):
    s = tshared.alloc[f32](8)
    lane = tile.linear_id()
    if lane != skip:
        s[lane] = x[lane]
    tbarrier()
    y[lane] = s[(lane + 1) % 8]  # uninit


@kernel(tile=(8,), shared=1 * KiB)
def neighbour_exchange(x: f32[n], y: mut[f32[n]], with_barrier: ts.constexpr):
    s = tshared.alloc[f32](8)
    lane = tile.linear_id()
    s[lane] = x[lane]  # race-write
    if with_barrier:
        tbarrier()
    y[lane] = s[(lane + 1) % 8]  # race-read


@kernel(tile=(8,), shared=1 * KiB)
def copy_then_read(x: f32[n], y: mut[f32[n]], wait: ts.constexpr):
    s = tshared.alloc[f32](8)
    lane = tile.linear_id()
    cp_async.shared.global_(s, x[0:8])  # copy-start
    if wait:
        cp_async.wait()
    y[lane] = s[lane]  # copy-read


@kernel(tile=(8,), shared=1 * KiB)
def barrier_after_racy_flag(y: mut[f32[n]]):
    if tile.linear_id() == 7:
        y[0] = 1.0  # racy-write
    flag = y[0]  # the compiler cannot see that lanes disagree on this
    if flag > 0.0:
        tbarrier()  # divergent-barrier


@kernel
def divide(a: i32[n], b: i32[n], q: mut[i32[n]]):
    i = tile.linear_id()
    q[i] = a[i] // b[i]  # divide


@kernel
def make_nan(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i] = x[i] - x[i]  # nan


def test_out_of_bounds_global_read_names_array_lane_and_line(debug):
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    with pytest.raises(ts.OutOfBoundsError) as info:
        read_past_end[4](x, y)
    text = str(info.value)
    assert "read_past_end" in text and "'x'" in text and "lane 3" in text
    assert f"{THIS_FILE}:{line_of('oob-global')}" in text
    assert not y.any()


def test_out_of_bounds_shared_read_is_reported(debug):
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(ts.OutOfBoundsError, match="shared array 's'"):
        shared_past_end[1](x, y)


def test_read_of_unwritten_shared_memory_is_reported(debug):
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(ts.UninitializedReadError) as info:
        read_unwritten[1](x, y, 3)
    assert "lane 2" in str(info.value) and "element 3" in str(info.value)
    assert str(line_of("uninit")) in str(info.value)


def test_fully_written_shared_memory_is_not_flagged(debug):
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    read_unwritten[1](x, y, -1)
    np.testing.assert_array_equal(y, np.roll(x, -1))


def test_race_between_lanes_without_barrier_names_both_lanes_and_lines(debug):
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with pytest.raises(ts.RaceError) as info:
        neighbour_exchange[1](x, y, False)
    text = str(info.value)
    assert "race" in text and "lane 0" in text and "lane 1" in text
    assert str(line_of("race-write")) in text and str(line_of("race-read")) in text
    assert not y.any()


def test_exchange_with_barrier_is_race_free(debug):
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    neighbour_exchange[1](x, y, True)
    np.testing.assert_array_equal(y, np.roll(x, -1))


def test_read_of_async_copy_before_wait_is_reported(debug):
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with pytest.raises(ts.AsyncCopyError) as info:
        copy_then_read[1](x, y, False)
    assert str(line_of("copy-start")) in str(info.value)
    assert str(line_of("copy-read")) in str(info.value)


def test_read_of_async_copy_after_wait_is_clean(debug):
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    copy_then_read[1](x, y, True)
    np.testing.assert_array_equal(y, x)


def test_collective_under_a_racy_flag_is_reported_as_the_race_behind_it(debug):
    # Lanes can only see one global element differently through a race, and global
    # memory is race-checked: the race is found (at lane 7's write) before the divergence it
    # causes, which the scheduler would report as a DivergenceError.
    y = np.zeros(8, np.float32)
    with pytest.raises(ts.RaceError) as info:
        barrier_after_racy_flag[1](y)
    text = str(info.value)
    assert "lane 7" in text and str(line_of("racy-write")) in text
    assert not y.any()


def test_integer_division_by_zero_is_reported(debug):
    a, b = np.array([6, 7], np.int32), np.array([3, 0], np.int32)
    q = np.zeros(2, np.int32)
    with pytest.raises(ts.KernelArithmeticError, match="division by zero"):
        divide[2](a, b, q)
    assert not q.any()


def test_nan_from_numbers_is_reported_when_asked(debug):
    x, y = np.array([1.0, math.inf], np.float32), np.zeros(2, np.float32)
    make_nan[2](x, y)  # off by default: inf - inf is just NaN
    assert np.isnan(y[1])
    with ts.config(debug_nan=1), pytest.raises(ts.KernelArithmeticError) as info:
        make_nan[2](x, np.zeros(2, np.float32))
    assert "NaN" in str(info.value) and str(line_of("nan")) in str(info.value)


def test_cpu_bounds_check_names_kernel_array_and_line():
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    with ts.config(boundscheck=1), pytest.raises(ts.OutOfBoundsError) as info:
        read_past_end[4](x, y)
    text = str(info.value)
    assert "read_past_end" in text and "'x'" in text and "index 4" in text
    assert f"{THIS_FILE}:{line_of('oob-global')}" in text
    assert not y.any()


def test_cpu_bounds_check_passes_correct_kernels():
    x, y = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    with ts.config(boundscheck=1):
        read_past_end[4](x, y)
    np.testing.assert_array_equal(y[:4], x[1:])


def test_group_ids_appear_in_reports(debug):
    x, y = np.ones(16, np.float32), np.zeros(16, np.float32)
    with pytest.raises(ts.OutOfBoundsError) as info:
        shared_past_end[2](x, y)
    assert "group 0" in str(info.value)


@kernel(tile=(4,), shared=1 * KiB)
def accumulate_uninitialised(x: f32[n], y: mut[f32[n]]):
    s = tshared.alloc[f32](4)
    lane = tile.linear_id()
    s[lane] = s[lane] + x[lane]  # own-uninit
    tbarrier()
    y[lane] = s[lane]


def test_lane_reading_its_own_element_before_writing_it_is_uninitialised(debug):
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ts.UninitializedReadError) as info:
        accumulate_uninitialised[1](x, y)
    assert str(line_of("own-uninit")) in str(info.value) and "lane 0" in str(info.value)
