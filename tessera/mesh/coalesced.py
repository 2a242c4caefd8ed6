"""``all_reduce_coalesced``: many small arrays reduced in a few large collectives.

A collective costs a fixed latency (a few microseconds over shared memory, tens over a
network) on top of its bandwidth term, so a thousand small gradients reduced one by one
pay that latency a thousand times. Packing them into flat buckets of ``bucket_mb``
megabytes (8-32 MB is the useful range: large enough to reach full bandwidth, small
enough that the first bucket's communication overlaps packing the next) pays it a few
times. Buckets hold one dtype each; all of them are started before any is waited on.
"""

from __future__ import annotations

from ..errors import TesseraError
from .collectives import all_reduce
from .mpi_transport import array_module
from .tensor import ShardedTensor


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
        if not hasattr(a, "dtype") or not hasattr(a, "shape"):
            raise TesseraError(
                f"all_reduce_coalesced: item {i} is a {type(a).__name__}, not an array"
            )
        kind = (a.dtype, array_module(a).__name__)
        b = open_bucket.get(kind)
        if b is None or buckets[b][1] + a.nbytes > limit:
            open_bucket[kind] = b = len(buckets)
            buckets.append(([], 0))
        members, size = buckets[b]
        members.append(i)
        buckets[b] = (members, size + a.nbytes)
    works = []
    for members, _ in buckets:
        first = arrays[members[0]]
        xp = array_module(first)
        flat = xp.concatenate([xp.ravel(arrays[i]) for i in members])
        works.append(
            (
                members,
                all_reduce(  # in place: the packed bucket is ours
                    flat, axis, op, mesh=mesh, out=flat, deterministic=deterministic, async_op=True
                ),
            )
        )
    results: list = [None] * len(arrays)
    for members, work in works:
        flat = work.wait()
        offset = 0
        for i in members:
            n = arrays[i].size
            results[i] = flat[offset : offset + n].reshape(arrays[i].shape)
            offset += n
    return [
        ShardedTensor(t.shape, t.layout, t.mesh, r) if isinstance(t, ShardedTensor) else r
        for t, r in zip(tensors, results)
    ]
