"""The distributed surface: ``from tessera import dist``.

    mesh = dist.Mesh(axes=("dp", "tp"), shape=(2, 2))
    total = dist.all_reduce(local, axis="dp")

Re-exports only; the logic lives in tessera/mesh/.
"""

from .mesh import (
    Mesh,
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    current_mesh,
    rank,
    reduce_scatter,
    size,
    world,
)

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
