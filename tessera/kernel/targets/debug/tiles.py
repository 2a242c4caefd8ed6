"""Tile values in the debug target: NumPy arrays in compute representation, one per group.

A tile statement is a group collective: the scheduler runs it once, in lane 0's frame
(its operands are uniform, the uniformity check made sure), and every lane gets the same
array. An elementwise statement is evaluated one element after another by the ordinary
scalar closures: ``frame.element`` is the index being computed, and a tile variable read
inside the expression gives its element there (broadcast, right-aligned, as NumPy does),
so tiles follow the scalar rules bit for bit. ``t.T`` and ``t[None, :]`` compute their
operand at a moved index.
"""

from __future__ import annotations

import numpy as np

from ....errors import OutOfBoundsError
from ... import ir
from ...ir import ScalarType
from .values import HALF, compute_type, converter, to_narrow


def at_element(shape: tuple[int, ...], element: tuple[int, ...]) -> tuple[int, ...]:
    """The index into a tile of ``shape`` that element ``element`` of a (broadcast)
    result reads: right-aligned, size-1 dims always 0."""
    tail = element[len(element) - len(shape) :]
    return tuple(0 if n == 1 else i for i, n in zip(tail, shape))


def read_element(name: str, shape: tuple[int, ...]):
    """The closure reading tile variable ``name`` at the frame's current element."""
    return lambda f: f.vars[name][at_element(shape, f.element)]


def moved(inner, move):
    """``inner`` evaluated at the element ``move(element)`` instead."""

    def run(frame):
        saved = frame.element
        frame.element = move(saved)
        try:
            return inner(frame)
        finally:
            frame.element = saved

    return run


def evaluate(shape: tuple[int, ...], dtype, element_fn, frame) -> np.ndarray:
    """A tile of ``shape``: ``element_fn`` at each element, in row-major order."""
    out = np.empty(shape, compute_type(dtype))
    saved = frame.element
    try:
        for index in np.ndindex(*shape):
            frame.element = index
            out[index] = element_fn(frame)
    finally:
        frame.element = saved
    return out


def tile_statement(c, s: ir.Stmt):
    """(payload, perform) of a tile assignment whose value is an elementwise expression."""
    t = s.value.type
    value = c.expr(s.value)

    def perform(run, stmt, frames):
        result = evaluate(t.shape, t.dtype, value, frames[0])
        return [result] * len(frames)

    return (lambda f: f), perform


def element_load(c, e: ir.Load):
    """A lane reading one element of a tile (bounds-checked, like every debug access)."""
    name, loc, shape = e.array.name, e.loc, c.types[e.array.name].shape
    index = c.indices(e.indices)

    def load(frame):
        where = tuple(int(i) for i in index(frame))
        if not all(0 <= i < n for i, n in zip(where, shape)):
            raise OutOfBoundsError(
                frame.kernel,
                f"index {where} is out of bounds for tile '{ir.user_name(name)}' of shape "
                f"{shape} ({frame.who(loc).describe()})",
                (("", loc),),
            )
        return frame.vars[name][where]

    return load


def storage_of(src, dst_dtype):
    """A function from a tile element (compute representation of ``src``) to what an
    array of ``dst_dtype`` stores: the rounding and conversions of scalar stores."""
    to_dst = converter(ScalarType(src), ScalarType(dst_dtype)) or (lambda v: v)
    if dst_dtype in HALF:

        def rounded(v):
            with np.errstate(over="ignore"):  # overflow to inf is the rounding rule
                return to_narrow(np.float32(to_dst(v)), dst_dtype)

        return rounded
    return to_dst


def block_positions(offset: tuple[int, ...], shape: tuple[int, ...], extent: tuple[int, ...]):
    """Each element index of a block at ``offset``, with its array index when the element
    lies inside an array of ``extent`` (None outside). Offsets before the block's dims
    are fixed indices (a block of a sub-array, ``As[j]``)."""
    lead = len(offset) - len(shape)
    for index in np.ndindex(*shape):
        pos = offset[:lead] + tuple(o + i for o, i in zip(offset[lead:], index))
        inside = all(0 <= p < n for p, n in zip(pos, extent))
        yield index, (pos if inside else None)
