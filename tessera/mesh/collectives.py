"""Collectives over one axis of a mesh, on local NumPy arrays, over MPI.

``all_reduce`` (sum, max, min, prod), ``all_gather`` (concatenates along dim 0),
``reduce_scatter`` (reduces, then each rank keeps its ``array_split`` block of dim 0),
``broadcast`` (from the axis member with index ``root``) and ``barrier``. A collective
returns a new array; ``out=`` writes into an array instead.

``deterministic=True`` (or ``TESSERA_DETERMINISTIC=1``) reduces in one fixed order — the
ranks' order along the axis, left to right — so the result is bitwise identical on every
run and equal to a single process reducing the same arrays in rank order, whatever
algorithm the MPI library uses.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import TesseraError
from .mesh import Mesh, current_mesh

OPS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def _mpi_op(op: str):
    from mpi4py import MPI

    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]


def _check(x, op: str | None = None) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TesseraError(f"collectives take NumPy arrays in this release, not {type(x).__name__}")
    if op is not None and op not in OPS:
        raise TesseraError(f"op={op!r} must be one of {', '.join(OPS)}")
    return np.ascontiguousarray(x)


def _deliver(result: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if out is None:
        return result
    if out.shape != result.shape or out.dtype != result.dtype:
        raise TesseraError(
            f"out= has shape {out.shape} and dtype {out.dtype}; the result has "
            f"{result.shape} and {result.dtype}"
        )
    out[...] = result
    return out


def all_reduce(
    x,
    axis: str,
    op: str = "sum",
    *,
    mesh: Mesh | None = None,
    out=None,
    deterministic: bool | None = None,
) -> np.ndarray:
    """Every rank of the axis gets ``op`` over all their ``x``."""
    x = _check(x, op)
    comm = current_mesh(mesh).comm(axis)
    if deterministic is None:
        deterministic = os.environ.get("TESSERA_DETERMINISTIC") == "1"
    if deterministic or comm.Get_size() == 1:
        parts = comm.allgather(x)
        result = parts[0].copy()
        for part in parts[1:]:  # rank order, left to right
            OPS[op](result, part, out=result)
        return _deliver(result, out)
    result = np.empty_like(x)
    comm.Allreduce(x, result, _mpi_op(op))
    return _deliver(result, out)


def all_gather(x, axis: str, *, mesh: Mesh | None = None, out=None) -> np.ndarray:
    """The axis's arrays concatenated along dim 0, in rank order."""
    x = _check(x)
    parts = current_mesh(mesh).comm(axis).allgather(x)
    return _deliver(np.concatenate(parts, axis=0), out)


def reduce_scatter(
    x,
    axis: str,
    op: str = "sum",
    *,
    mesh: Mesh | None = None,
    out=None,
    deterministic: bool | None = None,
) -> np.ndarray:
    """``op`` over the axis, then this rank's ``array_split`` block of dim 0."""
    mesh = current_mesh(mesh)
    total = all_reduce(x, axis, op, mesh=mesh, deterministic=deterministic)
    block = np.array_split(total, mesh.size(axis), axis=0)[mesh.index(axis)]
    return _deliver(np.ascontiguousarray(block), out)


def broadcast(x, axis: str, root: int = 0, *, mesh: Mesh | None = None, out=None) -> np.ndarray:
    """The array of the axis member with index ``root``, on every member."""
    x = _check(x)
    mesh = current_mesh(mesh)
    if not 0 <= root < mesh.size(axis):
        raise TesseraError(f"root={root} is not an index on axis {axis!r} (size {mesh.size(axis)})")
    result = x.copy()
    mesh.comm(axis).Bcast(result, root=root)
    return _deliver(result, out)


def barrier(axis: str | None = None, *, mesh: Mesh | None = None) -> None:
    """Wait for every rank of the axis (or of the whole world with no axis)."""
    if axis is None:
        from .world import world

        world().Barrier()
        return
    current_mesh(mesh).comm(axis).Barrier()
