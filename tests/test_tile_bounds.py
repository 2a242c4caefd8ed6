"""A lane's read of a tile element out of the tile's bounds (issue 26, item 2b) is checked
as an array read is: on the debug target and in bounds-checked launches on the CPU
(``boundscheck=1``), an OutOfBoundsError naming the kernel, the tile, the index and
``file:line`` with the line shown; the launch modifies no argument. The cuda target has
no bounds-checked launches (for arrays neither): there the out-of-bounds tests skip, but
numba-cuda's simulator checks every index, and reports it as an OutOfBoundsError too."""

from __future__ import annotations

import numpy as np
import pytest
from error_helpers import assert_points_at, where

import tessera as ts
from tessera import OutOfBoundsError, f32, i64, kernel, mut, tile

THIS_FILE = __file__


@kernel(tile=(8,))
def read_shifted(x: f32[8], d: i64, out: mut[f32[8]]):
    t = tile.load_block(x, (0,), (8,))
    lane = tile.linear_id()
    out[lane] = t[lane + d]  # E:shifted


@kernel(tile=(8,))
def read_2d(x: f32[4, 8], r: i64, c: i64, out: mut[f32[8]]):
    t = tile.load_block(x, (0, 0), (4, 8))
    lane = tile.linear_id()
    out[lane] = t[r, lane + c]  # E:2d


def _checked_or_skip(target):
    if target == "cuda":
        pytest.skip("the cuda target has no bounds-checked launches (arrays neither)")
    return ts.config(boundscheck=1)


def _shifted_error(target, d) -> tuple[str, np.ndarray]:
    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with _checked_or_skip(target), pytest.raises(OutOfBoundsError) as info:
        read_shifted[1](x, d, out)
    return str(info.value), out


@pytest.mark.parametrize("d", [100, 8])
def test_a_lane_reading_past_a_tiles_end_is_out_of_bounds(target, d):
    text, _ = _shifted_error(target, d)
    assert "tile 't'" in text and f"{d}" in text


@pytest.mark.parametrize("d", [-9, -1])
def test_a_lane_reading_before_a_tiles_start_is_out_of_bounds(target, d):
    text, _ = _shifted_error(target, d)
    assert "tile 't'" in text and f"{d}" in text


def test_the_error_names_the_kernel_and_shows_the_line(target):
    text, _ = _shifted_error(target, 100)
    assert "'read_shifted'" in text
    assert_points_at(text, THIS_FILE, "shifted", "t[lane + d]")


def test_an_out_of_bounds_tile_read_modifies_no_argument(target):
    _, out = _shifted_error(target, -9)
    assert not out.any()


@pytest.mark.parametrize("r, c", [(4, 0), (-1, 0), (0, 1), (0, -5), (2**62, 0)])
def test_a_2d_tile_read_is_checked_along_each_axis(target, r, c):
    x, out = np.arange(32, dtype=np.float32).reshape(4, 8), np.zeros(8, np.float32)
    with _checked_or_skip(target), pytest.raises(OutOfBoundsError) as info:
        read_2d[1](x, r, c, out)
    text = str(info.value)
    assert "tile 't'" in text and "'read_2d'" in text
    assert_points_at(text, THIS_FILE, "2d", "t[r, ")


def test_tile_reads_inside_the_bounds_pass_a_checked_launch(target):
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros(8, np.float32)
    with ts.config(boundscheck=1):
        read_2d[1](x, 3, 0, out)
    np.testing.assert_array_equal(out, x[3])
    with ts.config(boundscheck=1):
        read_shifted[1](x[0], 0, out)
    np.testing.assert_array_equal(out, x[0])


def test_the_simulator_reports_an_out_of_bounds_read_as_an_out_of_bounds_error(target):
    if target != "cuda":
        pytest.skip("numba-cuda's simulator only")
    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        read_shifted[1](x, 100, out)
    text = str(info.value)
    assert "'read_shifted'" in text and "out of bounds" in text
    line, _, _ = where(THIS_FILE, "shifted", "t[lane + d]")
    assert f"{THIS_FILE}:{line}:" in text  # the line (the simulator knows no column)
