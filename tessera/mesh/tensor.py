"""Sharded tensors: each rank holds only its block of a global array.

W = dist.tensor(shape=(M, N), layout=dist.ShardSpec(partition=("row",),
                mesh_axes=("tp",)), mesh=mesh, dtype="f32")
W.local            # this rank's block (NumPy)
W.global_slice     # where it sits in the global array
W.gather()         # the whole array, on every rank (for tests and small data)
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import TesseraError
from .collectives import all_gather
from .layout import ShardSpec, local_slice
from .mesh import Mesh, current_mesh


class ShardedTensor:
    def __init__(self, shape, layout: ShardSpec, mesh: Mesh, local: np.ndarray):
        self.shape = tuple(int(s) for s in shape)
        self.layout = layout
        self.mesh = mesh
        self.global_slice = local_slice(self.shape, layout, mesh)
        self.local_shape = tuple(s.stop - s.start for s in self.global_slice)
        if local.shape != self.local_shape:
            raise TesseraError(
                f"local block has shape {local.shape}, the layout says {self.local_shape}"
            )
        self.local = local

    @property
    def dtype(self) -> np.dtype:
        return self.local.dtype

    def __repr__(self) -> str:
        return (
            f"ShardedTensor(shape={self.shape}, local_shape={self.local_shape}, "
            f"layout={self.layout}, rank={self.mesh.rank})"
        )

    def with_local(self, layout: ShardSpec, local) -> ShardedTensor:
        """A tensor of the same global shape and mesh with another layout and block."""
        return ShardedTensor(self.shape, layout, self.mesh, local)

    def parts(self, axis: str) -> Parts:
        """The view an index launch over ``axis`` fans out (``index_launch(axis=...)``)."""
        return Parts(self, axis)

    def gather(self) -> np.ndarray:
        """The global array on every rank: an all_gather over each axis the tensor is
        split over (replicas need nothing)."""
        data = self.local
        for dim, axis in zip(self.layout.partition, self.layout.mesh_axes):
            data = all_gather(data, axis, mesh=self.mesh, dim=dim)
        return data if self.layout.partition else data.copy()


class Parts:
    """``W.parts("tp")``: tensor ``W`` as an index launch over axis ``tp`` sees it, one
    shard per member of the axis (each rank launches on its own)."""

    def __init__(self, tensor: ShardedTensor, axis: str):
        tensor.mesh.size(axis)  # an unknown axis is an error naming the mesh's axes
        self.tensor, self.axis = tensor, axis

    def __repr__(self) -> str:
        return f"Parts({self.tensor!r}, axis={self.axis!r})"


def _np_dtype(dtype) -> np.dtype:
    if isinstance(dtype, dtypes.DType):
        return dtype.np_dtype
    if isinstance(dtype, str) and dtype in dtypes.BY_NAME:
        return dtypes.BY_NAME[dtype].np_dtype
    return np.dtype(dtype)


def shard_module(mesh: Mesh):
    """Where a rank's shards live: CuPy on a rank with a GPU (when CuPy is installed),
    else NumPy. GPU shards ran on one GPU rank (docs/distributed.md)."""
    if mesh.device != "cpu":
        try:
            import cupy
        except ImportError:
            return np
        return cupy
    return np


def _make(shape, layout, mesh, dtype, fill: str) -> ShardedTensor:
    mesh = current_mesh(mesh)
    layout = layout or ShardSpec()
    where = local_slice(tuple(shape), layout, mesh)
    local_shape = tuple(s.stop - s.start for s in where)
    local = getattr(shard_module(mesh), fill)(local_shape, _np_dtype(dtype))
    return ShardedTensor(shape, layout, mesh, local)


def tensor(
    shape, layout: ShardSpec | None = None, mesh: Mesh | None = None, dtype="f32"
) -> ShardedTensor:
    """A sharded tensor of zeros (each rank allocates only its block)."""
    return _make(shape, layout, mesh, dtype, "zeros")


def zeros(shape, layout=None, mesh=None, dtype="f32") -> ShardedTensor:
    return _make(shape, layout, mesh, dtype, "zeros")


def empty(shape, layout=None, mesh=None, dtype="f32") -> ShardedTensor:
    return _make(shape, layout, mesh, dtype, "empty")


def from_global(
    array: np.ndarray, layout: ShardSpec | None = None, mesh: Mesh | None = None
) -> ShardedTensor:
    """Each rank keeps its block of ``array`` (which every rank holds)."""
    mesh = current_mesh(mesh)
    layout = layout or ShardSpec()
    where = local_slice(array.shape, layout, mesh)
    module = shard_module(mesh)  # CuPy copies a NumPy block to the GPU in asarray only
    local = module.ascontiguousarray(module.asarray(array[where]))
    return ShardedTensor(array.shape, layout, mesh, local)
