"""Hostile and careless launches, one table: each is a LaunchError naming the kernel,
raised before anything runs (no argument changes), on every target — never a TypeError,
ValueError or OverflowError from NumPy or Numba. test_launch_errors.py has the messages
of the common mistakes; this file has the breadth."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import bool_, constexpr, f16, f32, i32, i64, kernel, mut, tile, u8


@kernel
def bl(x: f32[n], y: mut[f32[n]], alpha: f32, k: i32, c: constexpr):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + k + c


@kernel
def bl_narrow(y: mut[u8[n]], k: u8, h: f16, b: bool_, q: i64):
    y[tile.linear_id()] = k


def _x():
    return np.ones(4, np.float32)


class Floaty:
    """Not a number, though it converts to one: refused, never called."""

    def __float__(self):
        raise AssertionError("a launch must not call user code to convert a scalar")

    __index__ = __int__ = __float__


# (what, grid, the arguments after y) for bl; y is always np.zeros(4, np.float32)
BL = {
    "too few arguments": (4, lambda: (_x(),)),
    "too many arguments": (4, lambda: (_x(), 1.0, 1, 1, 2)),
    "no arguments": (4, lambda: ()),
    "None for an array": (4, lambda: (None, 1.0, 1, 1)),
    "str for an array": (4, lambda: ("abcd", 1.0, 1, 1)),
    "dict for an array": (4, lambda: ({}, 1.0, 1, 1)),
    "list for an array": (4, lambda: ([1.0] * 4, 1.0, 1, 1)),
    "tuple for an array": (4, lambda: ((1.0,) * 4, 1.0, 1, 1)),
    "memoryview for an array": (4, lambda: (memoryview(_x()), 1.0, 1, 1)),
    "object array": (4, lambda: (np.array([1.0] * 4, dtype=object), 1.0, 1, 1)),
    "structured array": (4, lambda: (np.zeros(4, [("a", np.float32)]), 1.0, 1, 1)),
    "0-d array for an array": (4, lambda: (np.ones((), np.float32), 1.0, 1, 1)),
    "NumPy scalar for an array": (4, lambda: (np.float32(1), 1.0, 1, 1)),
    "big-endian array": (4, lambda: (_x().astype(">f4"), 1.0, 1, 1)),
    "2-d array for a 1-d one": (4, lambda: (np.ones((2, 2), np.float32), 1.0, 1, 1)),
    "array for a scalar": (4, lambda: (_x(), _x(), 1, 1)),
    "0-d array for a scalar": (4, lambda: (_x(), np.ones((), np.float32), 1, 1)),
    "None for a scalar": (4, lambda: (_x(), None, 1, 1)),
    "str for a scalar": (4, lambda: (_x(), "1.0", 1, 1)),
    "complex for a scalar": (4, lambda: (_x(), 1j, 1, 1)),
    "object with __float__ for a scalar": (4, lambda: (_x(), Floaty(), 1, 1)),
    "10**400 for an f32": (4, lambda: (_x(), 10**400, 1, 1)),
    "1e300 for an f32": (4, lambda: (_x(), 1e300, 1, 1)),
    "np.float64 1e300 for an f32": (4, lambda: (_x(), np.float64(1e300), 1, 1)),
    "2**40 for an i32": (4, lambda: (_x(), 1.0, 2**40, 1)),
    "10**400 for an i32": (4, lambda: (_x(), 1.0, 10**400, 1)),
    "NaN for an i32": (4, lambda: (_x(), 1.0, float("nan"), 1)),
    "inf for an i32": (4, lambda: (_x(), 1.0, float("inf"), 1)),
    "np.float32 inf for an i32": (4, lambda: (_x(), 1.0, np.float32("inf"), 1)),
    "2.5 for an i32": (4, lambda: (_x(), 1.0, 2.5, 1)),
    "list for a constexpr": (4, lambda: (_x(), 1.0, 1, [3])),
    "array for a constexpr": (4, lambda: (_x(), 1.0, 1, np.ones(2))),
    "complex for a constexpr": (4, lambda: (_x(), 1.0, 1, 1j)),
    "negative grid": (-1, lambda: (_x(), 1.0, 1, 1)),
    "float grid": (2.0, lambda: (_x(), 1.0, 1, 1)),
    "NaN grid": (float("nan"), lambda: (_x(), 1.0, 1, 1)),
    "huge grid": (10**30, lambda: (_x(), 1.0, 1, 1)),
    "grid of 2**63": (2**63, lambda: (_x(), 1.0, 1, 1)),
    "grid past i64 lanes": ((2**40, 2**40), lambda: (_x(), 1.0, 1, 1)),
    "str grid": ("4", lambda: (_x(), 1.0, 1, 1)),
    "list grid": ([4], lambda: (_x(), 1.0, 1, 1)),
    "array grid": (np.array([4]), lambda: (_x(), 1.0, 1, 1)),
    "None grid": (None, lambda: (_x(), 1.0, 1, 1)),
    "bool grid": (True, lambda: (_x(), 1.0, 1, 1)),
    "str in a grid tuple": ((4, "a"), lambda: (_x(), 1.0, 1, 1)),
    "empty grid tuple": ((), lambda: (_x(), 1.0, 1, 1)),
    "4-d grid": ((1, 1, 1, 1), lambda: (_x(), 1.0, 1, 1)),
    "np.uint64 past i64 grid": (np.uint64(2**64 - 1), lambda: (_x(), 1.0, 1, 1)),
}


@pytest.mark.parametrize("what", list(BL))
def test_a_bad_launch_is_a_launch_error(target, what):
    grid, rest = BL[what]
    y = np.zeros(4, np.float32)
    args = rest()
    before = [a.copy() for a in (y, *args) if isinstance(a, np.ndarray)]
    with pytest.raises(tessera.LaunchError) as info:
        bl[grid](*args[:1], y, *args[1:])
    assert info.value.kernel == "bl" and "'bl'" in str(info.value)
    after = [a for a in (y, *args) if isinstance(a, np.ndarray)]
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


# (what, the scalars k, h, b, q) for bl_narrow
NARROW = {
    "-1 for a u8": (-1, 1.0, True, 1),
    "256 for a u8": (256, 1.0, True, 1),
    "1e10 for an f16": (1, 1e10, True, 1),
    "10**400 for an f16": (1, 10**400, True, 1),
    "2 for a bool": (1, 1.0, 2, 1),
    "0.5 for a bool": (1, 1.0, 0.5, 1),
    "NaN for a bool": (1, 1.0, float("nan"), 1),
    "2**63 for an i64": (1, 1.0, True, 2**63),
    "np.uint64 max for an i64": (1, 1.0, True, np.uint64(2**64 - 1)),
    "1e19 for an i64": (1, 1.0, True, 1e19),
}


@pytest.mark.parametrize("what", list(NARROW))
def test_a_scalar_outside_its_type_is_a_launch_error(target, what):
    y = np.zeros(4, np.uint8)
    with pytest.raises(tessera.LaunchError, match="'bl_narrow'"):
        bl_narrow[4](y, *NARROW[what])
    assert not y.any()
