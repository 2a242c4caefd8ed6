"""Meshes of ranks, sharded tensors, index launches and the collectives between them
(see docs/distributed.md)."""

from ..errors import (
    CollectiveMismatch,
    CollectiveTimeout,
    DistError,
    FaultWarning,
    RankExited,
    RankLost,
    TransportError,
)
from ..runtime.world import rank, size, world
from .coalesced import all_reduce_coalesced
from .collectives import Work, all_gather, all_reduce, barrier, broadcast, reduce_scatter
from .exchange import all_to_all, recv, send, sendrecv
from .fabric import Topology, topology
from .grad_reduce import GradReduce
from .index_launch import IndexLaunch, Plan, index_launch
from .layout import ShardSpec
from .mesh import Mesh, current_mesh
from .tensor import Parts, ShardedTensor, empty, from_global, tensor, zeros

__all__ = [
    "CollectiveMismatch",
    "CollectiveTimeout",
    "DistError",
    "FaultWarning",
    "GradReduce",
    "IndexLaunch",
    "Mesh",
    "Parts",
    "Plan",
    "RankExited",
    "RankLost",
    "ShardSpec",
    "ShardedTensor",
    "Topology",
    "TransportError",
    "Work",
    "all_gather",
    "all_reduce",
    "all_reduce_coalesced",
    "all_to_all",
    "barrier",
    "broadcast",
    "current_mesh",
    "empty",
    "from_global",
    "index_launch",
    "rank",
    "recv",
    "reduce_scatter",
    "send",
    "sendrecv",
    "size",
    "tensor",
    "topology",
    "world",
    "zeros",
]
