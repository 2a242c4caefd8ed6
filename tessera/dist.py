"""The distributed surface: ``from tessera import dist``.

    mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, 2))
    total = dist.all_reduce(local, axis="dp")

Re-exports only; the logic lives in tessera/mesh/.
"""

from .mesh import (
    Mesh,
    ShardedTensor,
    ShardSpec,
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    current_mesh,
    empty,
    from_global,
    rank,
    reduce_scatter,
    size,
    tensor,
    world,
    zeros,
)

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
