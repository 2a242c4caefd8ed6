"""Meshes of ranks and the collectives between them (see docs/distributed.md)."""

from .collectives import all_gather, all_reduce, barrier, broadcast, reduce_scatter
from .layout import ShardSpec
from .mesh import Mesh, current_mesh
from .tensor import ShardedTensor, empty, from_global, tensor, zeros
from .world import rank, size, world

__all__ = [
    "ShardSpec",
    "ShardedTensor",
    "empty",
    "from_global",
    "tensor",
    "zeros",
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
