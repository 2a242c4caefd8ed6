"""``all_reduce_coalesced``: many small arrays reduced in a few large collectives.

A collective costs a fixed latency (a few microseconds over shared memory, tens over a
network) on top of its bandwidth term, so a thousand small gradients reduced one by one
pay that latency a thousand times. Packing them into flat buckets of ``bucket_mb``
megabytes (8-32 MB is the useful range: large enough to reach full bandwidth, small
enough that the first bucket's communication overlaps packing the next) pays it a few
times. Buckets hold one dtype each; all of them are started before any is waited on.
"""

from __future__ import annotations

import threading

import numpy as np

from ..errors import TesseraError
from .collectives import all_reduce
from .mpi_transport import array_module
from .tensor import ShardedTensor


class BucketPool:
    """Flat buffers kept between calls. A large buffer fresh from the allocator is new
    pages each time, and packing into it and reducing it in place is slower than in a
    buffer that is already mapped and warm; the results are copied out in one piece."""

    KEEP = 4  # buffers per dtype

    def __init__(self):
        self._free: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def take(self, dtype, xp, count: int):
        key = (dtype, xp.__name__)
        with self._lock:
            free = self._free.get(key, [])
            for k, buffer in enumerate(free):
                if buffer.size >= count:
                    return free.pop(k)[:count]
        return xp.empty(count, dtype)

    def give_back(self, view) -> None:
        buffer = view.base if view.base is not None else view
        key = (buffer.dtype, type(buffer).__module__.split(".")[0])
        with self._lock:
            free = self._free.setdefault(key, [])
            free.append(buffer)
            free.sort(key=lambda b: b.size)
            del free[: max(0, len(free) - self.KEEP)]


_buckets = BucketPool()


def all_reduce_coalesced(
    tensors,
    axis: str,
    op: str = "sum",
    *,
    mesh=None,
    bucket_mb: float = 16,
    deterministic: bool | None = None,
) -> list:
    """``all_reduce`` of every array (or sharded tensor) in ``tensors``, in few collectives.

    Returns new arrays (sharded tensors for sharded tensors), in the order given; every
    rank must pass the same shapes and dtypes in the same order.
    """
    if not bucket_mb > 0:
        raise TesseraError(f"bucket_mb={bucket_mb!r} must be a positive number of megabytes")
    tensors = list(tensors)
    arrays = [t.local if isinstance(t, ShardedTensor) else t for t in tensors]
    limit = int(bucket_mb * 2**20)
    buckets: list[tuple[list[int], int]] = []  # (indices, bytes)
    open_bucket: dict[tuple, int] = {}  # (dtype, array module) -> index in buckets
    for i, a in enumerate(arrays):
        if type(a) is np.ndarray:  # the common case, without the generic checks
            kind = (a.dtype, "numpy")
        elif hasattr(a, "dtype") and hasattr(a, "shape"):
            kind = (a.dtype, array_module(a).__name__)
        else:
            raise TesseraError(
                f"all_reduce_coalesced: item {i} is a {type(a).__name__}, not an array"
            )
        b = open_bucket.get(kind)
        if b is None or buckets[b][1] + a.nbytes > limit:
            open_bucket[kind] = b = len(buckets)
            buckets.append(([], 0))
        members, size = buckets[b]
        members.append(i)
        buckets[b] = (members, size + a.nbytes)
    works = []
    for members, nbytes in buckets:
        first = arrays[members[0]]
        xp = array_module(first)
        flat = _buckets.take(first.dtype, xp, nbytes // first.dtype.itemsize)
        pieces = [arrays[i] for i in members]
        xp.concatenate([a if a.ndim == 1 else a.reshape(-1) for a in pieces], out=flat)
        work = all_reduce(  # in place, in the bucket
            flat, axis, op, mesh=mesh, out=flat, deterministic=deterministic, async_op=True
        )
        works.append((members, flat, work))
    results: list = [None] * len(arrays)
    for members, flat, work in works:
        work.wait()
        xp = array_module(flat)
        fresh = flat.copy()  # the results' memory: the bucket goes back to the pool
        _buckets.give_back(flat)
        ends = np.cumsum([arrays[i].size for i in members])[:-1].tolist()
        for i, piece in zip(members, xp.split(fresh, ends)):
            shape = arrays[i].shape
            results[i] = piece if piece.shape == shape else piece.reshape(shape)
    return [
        ShardedTensor(t.shape, t.layout, t.mesh, r) if isinstance(t, ShardedTensor) else r
        for t, r in zip(tensors, results)
    ]
