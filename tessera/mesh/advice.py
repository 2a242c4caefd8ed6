"""Advice at mesh creation (MESH.md, "Topology"): a ``tp`` axis whose groups span hosts
(or, on one host, GPUs of different NVLink islands) while another order of the same axes
would keep every group on one.

Tensor parallelism exchanges activations at every layer, so its groups belong on one
node; the mesh lays ranks out row-major over its axes in the order given, and launchers
number ranks node by node, so the axis that varies fastest (the last) is the one that
stays on a node. ``Mesh(axes=("tp", "dp"), shape=(2, 2))`` over two nodes of two ranks
puts each ``tp`` pair across the nodes; ``("dp", "tp")`` keeps them together. One WARNING
(rank 0) names the order to use. Within a host, GPUs joined by NVLink (directly or
through each other: an *island*, as NVML reports the links) exchange far faster than
over PCIe; where every ``tp`` group fits on one host but some spans two islands while
another order keeps each in one, the warning says that instead.
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
    ids: dict = {}
    grid = np.array([ids.setdefault(n, len(ids)) for n in nodes]).reshape(shape)
    moved = np.moveaxis(grid, order.index(axis), -1).reshape(-1, sizes[axis])
    return any(len(set(row)) > 1 for row in moved)


def _better_order(axes: tuple[str, ...], sizes: dict[str, int], places: list):
    """An order of ``axes`` that keeps every ``tp`` group in one of ``places`` (the
    smallest change first: ``tp`` last), or None."""
    last = tuple(a for a in axes if a != AXIS) + (AXIS,)
    for order in (last, *itertools.permutations(axes)):
        if not _groups_span(order, sizes, places, AXIS):
            return order
    return None


_SPANS = (  # what a spanning group crosses, and what the better order keeps
    (
        "put the ranks of each 'tp' group on different hosts; tensor-parallel traffic "
        "crosses the network at every layer",
        "keeps every 'tp' group on one host",
    ),
    (
        "put the GPUs of each 'tp' group in different NVLink islands of a host; "
        "tensor-parallel traffic between them crosses PCIe at every layer",
        "keeps every 'tp' group's GPUs joined by NVLink",
    ),
)


def advice(
    axes: tuple[str, ...], shape: tuple[int, ...], nodes: list, islands: list | None = None
) -> str | None:
    """The warning for a mesh whose ranks (in world order) sit on ``nodes`` (any hashable
    node ids) and, where known, GPUs of NVLink ``islands`` (:func:`islands`), or None when
    there is nothing to say: hosts first, islands where every group fits on a host."""
    if AXIS not in axes or len(axes) < 2:
        return None
    sizes = dict(zip(axes, shape))
    if sizes[AXIS] < 2:
        return None
    for places, (crosses, keeps) in zip((nodes, islands), _SPANS):
        if places is None or not _groups_span(axes, sizes, places, AXIS):
            continue
        order = _better_order(axes, sizes, places)
        if order is None:
            return None
        better = ", ".join(repr(a) for a in order)
        return (
            f"mesh axes {axes} {crosses}. The order axes=({better}) (shape in the same "
            f"order) {keeps}"
        )
    return None


def islands(gpus: list) -> list:
    """Per rank, its NVLink island: ``gpus`` holds per rank (node, bus id, NVLink peers'
    bus ids) — the bus id empty where NVML did not describe a GPU, then the rank's island
    is its node. GPUs of one node joined by NVLink directly or through each other are one
    island, named by the node and their smallest bus id."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for node, bus, peers in gpus:
        if bus:
            for peer in peers:
                a, b = find((node, bus)), find((node, peer))
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return [(node, find((node, bus))[1]) if bus else (node, "") for node, bus, _ in gpus]


def advise(
    axes: tuple[str, ...], shape: tuple[int, ...], comm, node_key, gpu: dict | None = None
) -> None:
    """Gather every rank's node and GPU (``devices.gpu_view``: its bus id and NVLink
    peers; collective: all ranks call it) and log the advice once, on rank 0."""
    if AXIS not in axes or comm.Get_size() < 2:
        return
    bus = gpu.get("bus_id", "") if gpu else ""
    peers = tuple(peer for peer, _ in gpu.get("nvlinks", ())) if gpu else ()
    places = comm.allgather((node_key, bus, peers))
    nodes = [node for node, _, _ in places]
    text = advice(axes, shape, nodes, islands(places) if any(b for _, b, _ in places) else None)
    if text is not None and comm.Get_rank() == 0:
        log.warning(text)
