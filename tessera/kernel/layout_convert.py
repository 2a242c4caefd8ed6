"""Conversion plans between two layouts of one tile (kernel/layout.py), as data.

``convert(src, dst)`` picks the cheapest way a group can move a tile held under ``src``
into ``dst``, trying in order:

* ``identity``: both layouts hold every element at the same register, lane and warp;
* ``rename``: every thread already holds each element ``dst`` wants it to hold, in some
  register: a permutation of registers, no instruction at all (the flash-attention case:
  the m16n8 accumulator pairs of S are the m16n8k16 A operand of P @ V);
* ``shuffle``: the element a lane wants for register ``r`` is in the same warp, and for
  each ``r`` in one source register ``s`` of all lanes: one ``shfl.sync.idx`` per
  destination register (source lane per lane, register ``s``);
* ``shared``: store ``src`` into a shared buffer, one barrier, load ``dst`` (the buffer
  row-major, 16-byte chunks XOR-swizzled as :func:`~tessera.kernel.layout.swizzle_for`
  rules for its rows; a target that reads a dot operand with ``ldmatrix`` plans that
  load with targets/cuda/isa/ldmatrix.py).

:meth:`Conversion.apply` runs a plan in NumPy on the values held under ``src`` (arrays
shaped ``src.value_shape``); tests/test_layouts.py checks every plan reproduces the tile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .layout import DISTRIBUTED, LinearLayout, shared, swizzle_for


@dataclass(frozen=True)
class Conversion:
    """How to move a tile from layout ``src`` to ``dst``. ``source`` (for ``rename`` and
    ``shuffle``) is, per destination (warp, lane, reg), the flat source index over
    ``src.value_shape``; ``buffer`` (for ``shared``) is the shared layout."""

    kind: str  # "identity", "rename", "shuffle" or "shared"
    src: LinearLayout
    dst: LinearLayout
    source: np.ndarray | None = None
    buffer: LinearLayout | None = None

    def apply(self, values: np.ndarray) -> np.ndarray:
        """The values ``dst`` holds, from the values ``src`` holds (NumPy model)."""
        values = np.asarray(values)
        if values.shape != self.src.value_shape:
            raise ValueError(f"values of shape {values.shape}, {self.src.value_shape} expected")
        if self.kind == "identity":
            return values.copy()
        if self.kind in ("rename", "shuffle"):
            return values.reshape(-1)[self.source]
        smem = np.empty(self.buffer.elements, dtype=values.dtype)
        # every thread stores what it holds (broadcast copies store the same value)
        smem[self.buffer.inverse[self.src.flat_positions]] = values
        return smem[self.buffer.inverse[self.dst.flat_positions]]


def convert(src: LinearLayout, dst: LinearLayout, element_bytes: int = 4) -> Conversion:
    """The plan moving a tile from ``src`` to ``dst`` (same shape, distributed layouts
    that cover the tile)."""
    if src.shape != dst.shape:
        raise ValueError(f"cannot convert a {src.shape} layout into a {dst.shape} one")
    for layout in (src, dst):
        if layout.names != DISTRIBUTED or layout.kind == "other":
            raise ValueError("convert() takes distributed layouts that cover the tile")
    if src.value_shape == dst.value_shape and np.array_equal(
        src.flat_positions, dst.flat_positions
    ):
        return Conversion("identity", src, dst)
    source = _same_thread(src, dst)
    if source is not None:
        return Conversion("rename", src, dst, source=source)
    source = _same_warp(src, dst)
    if source is not None:
        return Conversion("shuffle", src, dst, source=source)
    return Conversion("shared", src, dst, buffer=_buffer(src.shape, element_bytes))


def _holders(src: LinearLayout) -> np.ndarray:
    """Per flat tile index, every flat source index holding it: shape (elements, copies),
    copies ordered by flat source index."""
    flat = src.flat_positions.ravel()
    order = np.argsort(flat, kind="stable")
    return order.reshape(src.elements, -1)


def _split(src: LinearLayout, index: np.ndarray):
    """(warp, lane, reg) of flat source indices."""
    warps, lanes, regs = src.value_shape
    return index // (lanes * regs), (index // regs) % lanes, index % regs


def _same_thread(src: LinearLayout, dst: LinearLayout) -> np.ndarray | None:
    """Per destination slot, a source index in the same warp and lane, or None if some
    element is not held by the thread that wants it."""
    if src.value_shape[:2] != dst.value_shape[:2]:
        return None
    holders = _holders(src)[dst.flat_positions]  # (w, l, r, copies)
    warp, lane, _ = _split(src, holders)
    w = np.arange(dst.value_shape[0])[:, None, None, None]
    ln = np.arange(dst.value_shape[1])[None, :, None, None]
    ok = (warp == w) & (lane == ln)
    if not ok.any(axis=-1).all():
        return None
    return np.take_along_axis(holders, ok.argmax(axis=-1)[..., None], axis=-1)[..., 0]


def _same_warp(src: LinearLayout, dst: LinearLayout) -> np.ndarray | None:
    """Per destination slot, a source index in the same warp such that each destination
    register reads one source register (uniform over the group's lanes), or None."""
    if src.value_shape[:2] != dst.value_shape[:2]:
        return None
    holders = _holders(src)[dst.flat_positions]  # (w, l, r, copies)
    warp, _, reg = _split(src, holders)
    ok = warp == np.arange(dst.value_shape[0])[:, None, None, None]
    # present[w, l, r, s]: lane l of warp w can read destination r from source register s
    present = np.zeros(dst.value_shape + (src.value_shape[2],), dtype=bool)
    w, ln, r, _ = np.nonzero(ok)
    present[w, ln, r, reg[ok]] = True
    common = present.all(axis=(0, 1))  # (dst regs, src regs)
    if not common.any(axis=-1).all():
        return None
    chosen = common.argmax(axis=-1)  # the source register of each destination register
    pick = (ok & (reg == chosen[None, None, :, None])).argmax(axis=-1)
    return np.take_along_axis(holders, pick[..., None], axis=-1)[..., 0]


def _buffer(shape, element_bytes: int) -> LinearLayout:
    """The shared buffer of a conversion: row-major, swizzled where rows are whole
    16-byte chunks."""
    row_bytes = shape[-1] * element_bytes
    if len(shape) == 2 and row_bytes >= 16 and shape[0] > 1:
        return shared(shape, element_bytes, swizzle_for(row_bytes))
    return shared(shape, element_bytes)
