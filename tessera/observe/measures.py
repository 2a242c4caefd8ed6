"""What a launch record measures: the bytes its arrays move, the flops its kernel declares,
its arrays' shapes; and where a record was made (the MPI rank, the wall clock).

Launch records hold the values the compiled code was called with: the array arguments
first, in parameter order, then the scalar parameters, then the kernel's size symbols
(kernel/launch.py). Everything here reads them in that order.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
import weakref
from pathlib import Path

import numpy as np

from .observers import LaunchRecord, now

_SCALARS = (np.generic, int, float, bool)
_SCALAR_TYPES = frozenset(
    {int, float, bool, np.float16, np.float32, np.float64, np.int8, np.int16, np.int32}
    | {np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_}
)
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")


def bytes_moved(args: tuple) -> int:
    """The bytes of the array arguments, each counted once (a ``mut`` array that is read
    and written counts once too: a lower bound on the memory traffic)."""
    total = 0
    for a in args:
        kind = type(a)
        if kind is np.ndarray:
            total += a.nbytes
        elif kind not in _SCALAR_TYPES and not isinstance(a, _SCALARS):
            total += a.nbytes  # a GPU array
    return total


def shapes(args: tuple) -> list[list[int]]:
    """The shapes of the array arguments, in parameter order."""
    return [list(a.shape) for a in args if not isinstance(a, _SCALARS)]


_plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def flops(record: LaunchRecord) -> float | None:
    """The floating-point operations of the launch, from its kernel's ``flops=`` function
    (None when the kernel declares none). The function gets, by parameter name, the size
    symbols' values, the scalar parameters' values, the array parameters' shapes and
    ``grid``."""
    kernel = record.kernel
    fn = kernel.flops
    if fn is None:
        return None
    plan = _plans.get(kernel)
    if plan is None:
        plan = _plans[kernel] = _plan(kernel, fn)
    args = record.args
    values = {
        name: record.grid if where == "grid" else args[i].shape if where == "shape" else args[i]
        for name, where, i in plan
    }
    return float(fn(**{k: v.item() if isinstance(v, np.generic) else v for k, v in values.items()}))


def _plan(kernel, fn) -> list[tuple[str, str, int]]:
    """Where each parameter of ``fn`` is found in a launch: (name, "shape"|"value"|"grid",
    position in the record's args)."""
    arrays = [p.name for p in kernel.params if p.kind == "array"]
    scalars = [p.name for p in kernel.params if p.kind == "scalar"]
    symbols = list(kernel.ir.symbols)
    where = {n: ("shape", i) for i, n in enumerate(arrays)}
    where.update({n: ("value", len(arrays) + i) for i, n in enumerate(scalars)})
    base = len(arrays) + len(scalars)
    where.update({n: ("value", base + i) for i, n in enumerate(symbols)})
    where["grid"] = ("grid", -1)
    return [(n, *where[n]) for n in inspect.signature(fn).parameters]


def rate(amount: float | None, seconds: float) -> float | None:
    """``amount`` per second, in billions (GB/s, GFLOP/s); None without an amount."""
    if amount is None or seconds <= 0:
        return None
    return amount / seconds / 1e9


def rank_and_size() -> tuple[int, int]:
    """This process's MPI rank and the world's size, from the launcher's variables (they
    can be read at exit, after MPI has finalised), else from mpi4py if it runs, else 0, 1."""
    for r, n in zip(RANK_VARIABLES, SIZE_VARIABLES):
        if r in os.environ and n in os.environ:
            return int(os.environ[r]), int(os.environ[n])
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank(), mpi.COMM_WORLD.Get_size()
    return 0, 1


def rank_path(path: str | os.PathLike) -> Path:
    """``path`` for this rank: ``trace.json`` becomes ``trace.rank3.json`` on rank 3 of a
    world of more than one process, and stays ``trace.json`` alone."""
    path = Path(path)
    rank, size = rank_and_size()
    if size <= 1:
        return path
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


class Clock:
    """Turns record times (``observers.now()``) into wall-clock seconds, so that the
    files of different ranks (and machines) share one time axis."""

    def __init__(self) -> None:
        self.wall0, self.now0 = time.time(), now()

    def wall(self, t: float) -> float:
        return self.wall0 + (t - self.now0)
