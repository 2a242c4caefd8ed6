"""Constexpr arguments on the lean launch paths (tessera/kernel/launch.py): an int,
float, bool or str constexpr, given or left to its default, is bound there with the
checked path's key and values (a GEMM launched with its block sizes took the checked
path on every launch before); anything else goes to the checked path and its rules."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import constexpr, f32, kernel, mut, tile
from tessera.kernel.launch import bind
from tessera.kernel.targets import AUTO, HOST_CHOICE, TARGETS


@kernel
def scaled(
    x: f32[n], y: mut[f32[n]], SCALE: constexpr, MODE: constexpr = "add", ON: constexpr = True
):
    i = tile.linear_id()
    if i < n:
        if MODE == "add":
            y[i] = x[i] + f32(SCALE) if ON else x[i]
        else:
            y[i] = x[i] * f32(SCALE) if ON else x[i]


class FakeGPUArray:
    """An array that says it lives on a GPU (``__cuda_array_interface__``): a launch's
    check reads its pointer, shape and strides; nothing here launches it."""

    def __init__(self, shape: tuple, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "strides": None,
            "typestr": self.dtype.str,
            "data": (1 << 32, False),
            "version": 3,
        }


def _host():
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    scaled[4](x, y, 2)  # (makes the binders)
    return scaled._binders[HOST_CHOICE[AUTO]], x, y


def _checked(binder, args, grid=(4,)):
    return bind(binder.kernel, binder.params, binder.symbols, args, grid, False, binder.target)


@pytest.mark.parametrize(
    "args",
    [(2,), (2.5, "mul"), (3, "add", False), (-1, "mul", True)],
    ids=["int, defaults", "float and str", "bool", "all given"],
)
def test_plain_constexprs_take_the_lean_path_with_the_checked_paths_key(args):
    binder, x, y = _host()
    bound = binder.fast((x, y, *args), (4,))
    assert bound is not None
    checked = _checked(binder, (x, y, *args))
    assert bound.key == checked.key and bound.constexprs == checked.constexprs
    assert len(bound.call_args) == len(checked.call_args)


@pytest.mark.parametrize("scale", [np.int32(2), float("nan"), [2], None])
def test_other_constexpr_values_leave_the_lean_path(scale):
    binder, x, y = _host()
    assert binder.fast((x, y, scale), (4,)) is None


def test_a_missing_constexpr_without_a_default_leaves_the_lean_path_and_is_named():
    binder, x, y = _host()
    assert binder.fast((x, y), (4,)) is None
    with pytest.raises(tessera.LaunchError, match="takes 5 arguments"):
        scaled[4](x, y)


def test_a_constexpr_of_a_wrong_kind_is_still_refused_naming_the_parameter():
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(tessera.LaunchError, match="'SCALE'"):
        scaled[4](x, y, [2])
    assert not y.any()  # a failed launch modifies nothing


def test_launches_with_constexprs_compute_the_same_on_both_paths():
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    scaled[4](x, y, 3, "mul")
    np.testing.assert_array_equal(y, x * 3)
    scaled[4](x, y, np.int32(3), "mul")  # the checked path: the same specialisation
    np.testing.assert_array_equal(y, x * 3)
    scaled[4](x, y, 1)
    np.testing.assert_array_equal(y, x + 1)


def test_gpu_arrays_with_constexprs_take_the_device_lean_path():
    binder = scaled._binders[TARGETS["cuda"]]
    x, y = FakeGPUArray((4,), np.float32), FakeGPUArray((4,), np.float32)
    bound = binder.fast_device((x, y, 4, "mul"), (4,))
    assert bound is not None
    assert bound.constexprs == {"SCALE": 4, "MODE": "mul", "ON": True}
    assert [part for part in bound.key if isinstance(part, tuple) and len(part) == 3] == [
        ("SCALE", "int", 4),
        ("MODE", "str", "mul"),
        ("ON", "bool", True),
    ]
    assert binder.fast_device((x, y, np.int64(4)), (4,)) is None  # converted on the checked path
