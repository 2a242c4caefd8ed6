"""Advice at mesh creation (MESH.md, "Topology"): a ``tp`` axis whose groups span hosts
while another order of the same axes would keep every group on one.

Tensor parallelism exchanges activations at every layer, so its groups belong on one
node; the mesh lays ranks out row-major over its axes in the order given, and launchers
number ranks node by node, so the axis that varies fastest (the last) is the one that
stays on a node. ``Mesh(axes=("tp", "dp"), shape=(2, 2))`` over two nodes of two ranks
puts each ``tp`` pair across the nodes; ``("dp", "tp")`` keeps them together. One WARNING
(rank 0) names the order to use.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np

log = logging.getLogger("tessera")
AXIS = "tp"  # the axis advised about


def _groups_span(order: tuple[str, ...], sizes: dict[str, int], nodes: list, axis: str) -> bool:
    """Whether some group of ``axis`` (ranks differing only along it) spans two nodes when
    the ranks are laid out row-major over ``order``."""
    shape = tuple(sizes[a] for a in order)
    grid = np.asarray(nodes, dtype=object).reshape(shape)
    moved = np.moveaxis(grid, order.index(axis), -1).reshape(-1, sizes[axis])
    return any(len(set(row)) > 1 for row in moved)


def advice(axes: tuple[str, ...], shape: tuple[int, ...], nodes: list) -> str | None:
    """The warning for a mesh whose ranks (in world order) sit on ``nodes`` (any hashable
    node ids), or None when there is nothing to say."""
    if AXIS not in axes or len(axes) < 2:
        return None
    sizes = dict(zip(axes, shape))
    if sizes[AXIS] < 2 or not _groups_span(axes, sizes, nodes, AXIS):
        return None
    last = tuple(a for a in axes if a != AXIS) + (AXIS,)  # the smallest change first
    for order in (last, *itertools.permutations(axes)):
        if not _groups_span(order, sizes, nodes, AXIS):
            better = ", ".join(repr(a) for a in order)
            return (
                f"mesh axes {axes} put the ranks of each '{AXIS}' group on different hosts; "
                f"tensor-parallel traffic crosses the network at every layer. The order "
                f"axes=({better}) (shape in the same order) keeps every '{AXIS}' group on "
                "one host"
            )
    return None


def advise(axes: tuple[str, ...], shape: tuple[int, ...], comm, node_key) -> None:
    """Gather every rank's node (collective: all ranks call it) and log the advice once,
    on rank 0."""
    if AXIS not in axes or comm.Get_size() < 2:
        return
    nodes = comm.allgather(node_key)
    text = advice(axes, shape, nodes)
    if text is not None and comm.Get_rank() == 0:
        log.warning(text)
