"""Integer scalar parameters on the lean launch path (tessera/kernel/launch.py): a Python
int in the parameter's range is bound there with the checked path's value; anything else
(out of range, a bool, a float, a NumPy scalar) goes to the checked path and its rules."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import f32, i32, kernel, mut, tile, u8
from tessera.kernel.launch import bind
from tessera.kernel.targets import AUTO, HOST_CHOICE


@kernel
def shifted(x: f32[n], y: mut[f32[n]], k: i32, b: u8):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] + f32(k) + f32(b)


def _binder():
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    shifted[4](x, y, 1, 2)  # (compiles; makes the binder)
    return shifted._binders[HOST_CHOICE[AUTO]], x, y


def test_in_range_python_ints_take_the_lean_path_with_the_checked_paths_values():
    binder, x, y = _binder()
    args = (x, y, -(2**31), 255)
    bound = binder.fast(args, (4,))
    assert bound is not None
    checked = bind(binder.kernel, binder.params, binder.symbols, args, (4,), False, binder.target)
    assert bound.key == checked.key
    fast_scalars = [(type(v), v) for v in bound.call_args[2:]]
    assert fast_scalars == [(type(v), v) for v in checked.call_args[2:]]


@pytest.mark.parametrize(
    "k, b", [(2**31, 0), (0, 256), (0, -1), (True, 0), (1.0, 0), (np.int32(1), 0)]
)
def test_other_scalars_leave_the_lean_path(k, b):
    binder, x, y = _binder()
    assert binder.fast((x, y, k, b), (4,)) is None


def test_an_int_out_of_range_is_still_refused_naming_the_parameter():
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(tessera.LaunchError, match="'b'"):
        shifted[4](x, y, 1, 256)
    assert not y.any()  # a failed launch modifies nothing


def test_a_launch_with_int_scalars_computes_the_same_on_both_paths():
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    shifted[4](x, y, -3, 7)
    np.testing.assert_array_equal(y, x + 4)
