"""How a tensor is split over a mesh: ``ShardSpec(partition=("row", "col"),
mesh_axes=("tp", "pp"))`` splits dim 0 over axis ``tp`` and dim 1 over axis ``pp``; mesh
axes that are not named hold replicas.

Blocks follow ``numpy.array_split``: along a split dimension of extent ``n`` over ``k``
ranks, the first ``n % k`` blocks have one more row than the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TesseraError

DIM_NAMES = {"row": 0, "col": 1}


@dataclass(frozen=True)
class ShardSpec:
    partition: tuple = ()
    mesh_axes: tuple = ()

    def __post_init__(self):
        partition = tuple(self.partition)
        axes = tuple(self.mesh_axes)
        if len(partition) != len(axes):
            raise TesseraError(
                f"ShardSpec pairs each partitioned dim with a mesh axis: "
                f"{partition} and {axes} differ in length"
            )
        dims = tuple(DIM_NAMES.get(p, p) for p in partition)
        if not all(isinstance(d, int) and d >= 0 for d in dims):
            raise TesseraError(f"partition {partition} must name dims as 'row', 'col' or ints")
        if len(set(dims)) != len(dims) or len(set(axes)) != len(axes):
            raise TesseraError("a dim or mesh axis appears twice in a ShardSpec")
        object.__setattr__(self, "partition", dims)
        object.__setattr__(self, "mesh_axes", axes)

    def axis_of(self, dim: int) -> str | None:
        """The mesh axis ``dim`` is split over, or None if it is whole on every rank."""
        for d, axis in zip(self.partition, self.mesh_axes):
            if d == dim:
                return axis
        return None


def block(extent: int, parts: int, index: int) -> tuple[int, int]:
    """``[start, stop)`` of block ``index`` of ``extent`` split in ``parts`` (array_split)."""
    base, extra = divmod(extent, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def local_slice(shape: tuple[int, ...], spec: ShardSpec, mesh) -> tuple[slice, ...]:
    """This rank's part of a tensor of global ``shape``."""
    for d in spec.partition:
        if d >= len(shape):
            raise TesseraError(f"ShardSpec splits dim {d} of a {len(shape)}-d tensor")
    out = []
    for dim, extent in enumerate(shape):
        axis = spec.axis_of(dim)
        if axis is None:
            out.append(slice(0, extent))
        else:
            start, stop = block(extent, mesh.size(axis), mesh.index(axis))
            out.append(slice(start, stop))
    return tuple(out)
