"""Gradient buckets reduced while the backward pass still runs: ``dist.GradReduce``.

Data-parallel training reduces every gradient over the ranks. Reducing each one alone
costs a collective per gradient; reducing all of them after the backward pass leaves the
network idle while it runs. A ``GradReduce`` plans fixed buckets of about ``bucket_mb``
megabytes over the parameters (in reverse order: a backward pass makes the last layer's
gradients first), and ``ready(i, g)`` copies gradient ``i`` into its slot; a bucket whose
slots are all filled starts its all-reduce at once (asynchronously), as soon as every
bucket before it has started — so every rank starts the same collectives in the same
order, whatever order its gradients come in. ``wait()`` finishes the rest and returns the
reduced gradients in parameter order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TesseraError
from .collectives import all_reduce
from .mesh import Mesh, current_mesh

ALIGN = 256  # bytes: each gradient's slot starts on such a boundary in its bucket


@dataclass
class _Bucket:
    dtype: np.dtype
    slots: list  # (parameter index, offset in elements, shape)
    size: int  # elements
    buffer: np.ndarray | None = None
    work: object = None
    filled: int = 0


class GradReduce:
    """Buckets for gradients shaped like ``params`` (arrays, or (shape, dtype) pairs),
    reduced over ``axis`` with ``op`` ("sum", "max", "min", or "mean": the sum divided by
    the axis's size, as ``average=True`` says too). Use one per model: ``ready`` each
    gradient as it is made, then ``wait``. Without ``params`` the buckets are planned on
    first use: ``graph.value_and_grad(loss, argnums, reduce=GradReduce(axis="dp",
    op="mean"))`` plans them over the gradients of ``argnums`` and gives each one as soon
    as the backward pass has computed it."""

    def __init__(
        self,
        params=None,
        axis: str | None = None,
        *,
        mesh: Mesh | None = None,
        bucket_mb: float = 16,
        op: str = "sum",
        average: bool = False,
        deterministic: bool | None = None,
        algorithm: str | None = None,
    ):
        if not 0 < bucket_mb <= 1024:
            raise TesseraError(f"GradReduce: bucket_mb={bucket_mb!r} must be in (0, 1024]")
        if op == "mean":
            op, average = "sum", True
        if average and op != "sum":
            raise TesseraError("GradReduce: average=True averages a sum; op must be 'sum'")
        self.mesh = current_mesh(mesh)
        self.axis = self.mesh.axis_name(axis)
        self.op, self.average, self.deterministic = op, average, deterministic
        self.algorithm = algorithm
        self.limit = int(bucket_mb * 2**20)
        self.specs: list = []
        self.buckets: list[_Bucket] = []
        if params is not None:
            self.plan_for(params)

    def plan_for(self, params) -> None:
        """Plan the buckets over gradients shaped like ``params`` (once)."""
        self.specs = [_spec(p) for p in params]
        self.buckets = _plan(self.specs, self.limit)
        self.where = {i: (b, o) for b, bk in enumerate(self.buckets) for i, o, _ in bk.slots}
        self._reset()

    @property
    def planned(self) -> bool:
        return bool(self.specs)

    def _reset(self) -> None:
        self.done = [False] * len(self.specs)
        self.started = 0  # buckets whose all-reduce has started, in plan order
        for bucket in self.buckets:
            if bucket.buffer is None:  # kept from step to step (the result is a new array)
                bucket.buffer = np.zeros(bucket.size, bucket.dtype)  # (gaps stay zero)
            bucket.work, bucket.filled = None, 0

    def ready(self, index: int, grad) -> None:
        """Gradient ``index`` (of ``params``) is ready: copy it into its bucket, and start
        every bucket that is now full and next in order."""
        if not 0 <= index < len(self.specs):
            raise TesseraError(f"GradReduce.ready: no parameter {index} (of {len(self.specs)})")
        shape, dtype = self.specs[index]
        grad = np.asarray(grad)
        if grad.shape != shape or grad.dtype != dtype:
            raise TesseraError(
                f"GradReduce.ready: gradient {index} is {grad.dtype} {grad.shape}; its "
                f"parameter is {dtype} {shape}"
            )
        if self.done[index]:
            raise TesseraError(f"GradReduce.ready: gradient {index} was given twice this step")
        b, offset = self.where[index]
        bucket = self.buckets[b]
        bucket.buffer[offset : offset + grad.size] = grad.reshape(-1)
        self.done[index] = True
        bucket.filled += 1
        self._start_ready()

    def _start_ready(self) -> None:
        while self.started < len(self.buckets):
            bucket = self.buckets[self.started]
            if bucket.filled < len(bucket.slots):
                return
            bucket.work = all_reduce(
                bucket.buffer,
                self.axis,
                self.op,
                mesh=self.mesh,
                deterministic=self.deterministic,
                async_op=True,
                algorithm=self.algorithm,
            )
            self.started += 1

    def progress(self) -> None:
        """Let the started buckets' collectives progress (MPI moves a non-blocking
        collective's data only inside MPI calls: the backward pass calls this between its
        kernels)."""
        for bucket in self.buckets[: self.started]:
            if bucket.work is not None:
                bucket.work.is_completed()

    def wait(self) -> list[np.ndarray]:
        """The reduced gradients, in parameter order (every one must have been given);
        then the next step begins."""
        missing = [i for i, d in enumerate(self.done) if not d]
        if missing:
            raise TesseraError(
                f"GradReduce.wait: gradients {missing} were not given this step (every rank "
                "must give every gradient: the buckets are reduced together)"
            )
        size = self.mesh.size(self.axis)
        out: list = [None] * len(self.specs)
        for bucket in self.buckets:
            reduced = bucket.work.wait()
            if self.average:
                reduced /= reduced.dtype.type(size)  # (a new array of the collective's)
            for i, offset, shape in bucket.slots:
                n = int(np.prod(shape))
                out[i] = reduced[offset : offset + n].reshape(shape)
        self._reset()
        return out

    @property
    def plan(self) -> list[list[int]]:
        """The parameter indices of each bucket, in the order the buckets start."""
        return [[i for i, _, _ in b.slots] for b in self.buckets]


def _spec(p) -> tuple[tuple[int, ...], np.dtype]:
    if hasattr(p, "shape") and hasattr(p, "dtype"):
        return tuple(p.shape), np.dtype(p.dtype)
    shape, dtype = p
    return tuple(shape), np.dtype(dtype)


def _plan(specs: list, limit: int) -> list[_Bucket]:
    """Buckets over the parameters in reverse order, one dtype each, each holding at most
    ``limit`` bytes (or one larger gradient), every slot starting on ALIGN bytes."""
    buckets: list[_Bucket] = []
    open_by_dtype: dict[np.dtype, _Bucket] = {}
    for i in reversed(range(len(specs))):
        shape, dtype = specs[i]
        n = int(np.prod(shape))
        step = max(ALIGN // dtype.itemsize, 1)
        bucket = open_by_dtype.get(dtype)
        start = 0 if bucket is None else -(-bucket.size // step) * step
        if bucket is None or (start + n) * dtype.itemsize > limit and bucket.slots:
            bucket = _Bucket(dtype, [], 0)
            buckets.append(bucket)
            open_by_dtype[dtype] = bucket
            start = 0
        bucket.slots.append((i, start, shape))
        bucket.size = start + n
    return buckets
