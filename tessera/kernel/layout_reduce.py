"""The language's fixed reduction tree over a distributed layout, as steps a group runs.

The tree (docs/language.md, "Determinism and the reduction tree"; semantics.tree_reduce)
over ``m = 2**b`` values combines, for ``h = m/2, m/4, ..., 1``, ``s[i] = s[i] (+) s[i+h]``
for ``i < h``: step ``h`` pairs indices that differ in bit ``log2(h)`` only. In a
distributed layout whose bases along the reduced axis are single bits of that axis (every
layout of kernel/layout.py but the shared ones), that index bit is exactly one bit of a
register, a lane or a warp, so the step is:

* ``reg``: a thread's local combine of two of its registers;
* ``lane``: a butterfly, ``shfl.sync.bfly`` with the lane mask of that bit: every lane
  combines its value with its partner's, the lower index's value as the left operand, so
  both lanes of a pair hold ``s[i] (+) s[i+h]``;
* ``warp``: consecutive warp steps are one exchange through shared memory: every warp
  stores its values, one barrier, each warp reads its partners' and runs those steps of
  the tree itself.

Every step is applied to all positions (a butterfly all-reduce): by induction, after the
steps for bits ``b-1 .. j`` every position holds the tree's partial sum for its index's
low ``j`` bits, so at the end every holder has the tree's ``s[0]``, bit for bit, in the
registers :func:`~tessera.kernel.layout.slice` keeps. Only power-of-two axes take this
path (tiles of other shapes stay in shared memory), so the tree's tail fold never occurs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .layout import DISTRIBUTED, LinearLayout, slice_registers


@dataclass(frozen=True)
class Step:
    """One step of the tree: ``kind`` is ``"reg"``, ``"lane"`` or ``"warp"``; ``bits``
    the bits of that index (several for one warp exchange), in tree order; ``h`` the
    tree's distances, one per bit."""

    kind: str
    bits: tuple[int, ...]
    h: tuple[int, ...]


def tree_steps(layout: LinearLayout, axis: int) -> list[Step]:
    """The steps reducing ``layout`` along ``axis`` in the fixed tree's order."""
    if layout.names != DISTRIBUTED or layout.kind == "other":
        raise ValueError("tree_steps() takes a distributed layout that covers its tile")
    where = {}
    for kind in DISTRIBUTED:
        for bit, basis in enumerate(layout.bases(kind)):
            if basis[axis]:
                value = basis[axis]
                if value & (value - 1) or any(c for d, c in enumerate(basis) if d != axis):
                    raise ValueError(
                        f"the {kind} basis {basis} mixes bits: no tree step maps onto it"
                    )
                where[value] = (kind, bit)
    steps: list[Step] = []
    h = layout.shape[axis] // 2
    while h >= 1:
        kind, bit = where[h]
        if steps and kind == "warp" and steps[-1].kind == "warp":
            last = steps.pop()
            steps.append(Step("warp", last.bits + (bit,), last.h + (h,)))
        else:
            steps.append(Step(kind, (bit,), (h,)))
        h //= 2
    return steps


def _butterfly(values: np.ndarray, axis: int, bit: int, combine) -> np.ndarray:
    """Every position combined with its partner across ``bit`` of array axis ``axis``,
    the partner with that bit clear as the left operand."""
    n = values.shape[axis]
    index = np.arange(n)
    partner = np.take(values, index ^ (1 << bit), axis=axis)
    high = ((index >> bit) & 1).astype(bool)
    high = high.reshape([-1 if d == axis else 1 for d in range(values.ndim)])
    low_value = np.where(high, partner, values)
    high_value = np.where(high, values, partner)
    return combine(low_value, high_value)


def apply_tree(layout: LinearLayout, axis: int, values: np.ndarray, combine) -> np.ndarray:
    """Run the steps in NumPy on ``values`` held under ``layout`` (shaped
    ``layout.value_shape``, i.e. (warp, lane, reg)); ``combine(left, right)`` is the
    elementwise reduction (a NumPy ufunc-like function). Returns the values held under
    ``slice(layout, axis)``: every holder of a result has the tree's result."""
    values = np.array(values, copy=True)
    array_axis = {"warp": 0, "lane": 1, "reg": 2}
    for step in tree_steps(layout, axis):
        if step.kind != "warp":
            values = _butterfly(values, array_axis[step.kind], step.bits[0], combine)
            continue
        # one exchange: each warp reads the stored values of every warp that differs in
        # the step's bits, then runs the steps locally (a butterfly over what it read)
        stored = values  # the shared buffer, after the barrier
        mask = sum(1 << b for b in step.bits)
        warps = np.arange(values.shape[0])
        partners = [(warps & ~mask) | j for j in range(values.shape[0]) if j & ~mask == 0]
        local = np.stack([stored[p] for p in partners])  # (partners, warp, lane, reg)
        # partner k is the k-th subset of the step's bits: bit t of k is its t-th bit
        slot = {b: k for k, b in enumerate(sorted(step.bits))}
        for b in step.bits:
            local = _butterfly(local, 0, slot[b], combine)
        own = sum(((warps >> b) & 1) << slot[b] for b in step.bits)
        values = local[own, warps]
    return values[:, :, slice_registers(layout, axis)]
