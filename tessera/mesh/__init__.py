"""Meshes of ranks and the collectives between them (see docs/distributed.md)."""

from .collectives import all_gather, all_reduce, barrier, broadcast, reduce_scatter
from .mesh import Mesh, current_mesh
from .world import rank, size, world

__all__ = [
    "Mesh",
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "current_mesh",
    "rank",
    "reduce_scatter",
    "size",
    "world",
]
