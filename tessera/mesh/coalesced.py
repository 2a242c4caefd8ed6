"""``all_reduce_coalesced``: many small arrays reduced in a few large collectives.

A collective costs a fixed latency (a few microseconds over shared memory, tens over a
network) on top of its bandwidth term, so a thousand small gradients reduced one by one
pay that latency a thousand times. Packing them into flat buckets of ``bucket_mb``
megabytes (8-32 MB is the useful range: large enough to reach full bandwidth, small
enough that the first bucket's communication overlaps packing the next) pays it a few
times. Buckets hold one dtype each; all of them are started before any is waited on.
When the axis's ranks share a node, a bucket of host arrays is reduced in shared memory
instead of by MPI's all-reduce (``shared_buckets``). Either way the results are read-only
views of a kept buffer, not copies, and profiles, traces and metrics see one
``all_reduce`` per bucket (a shared-memory one says so in its trace arguments).
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from ..arrays import transportable
from ..config import get as setting
from ..errors import TesseraError
from ..observe.observers import OBSERVERS, entered, now, report
from . import faults, shared_buckets
from .channel import ISSUE_LOCK
from .collectives import all_reduce, check_op
from .mesh import current_mesh
from .mpi_transport import array_module
from .tensor import ShardedTensor
from .views import outside_references


class BucketPool:
    """Flat buffers kept between calls, which the results are views of.

    A large buffer fresh from the allocator is new pages each time: packing into it
    faults every page in, and MPI registers the new memory on every call (over UCX an
    8 MB all-reduce into fresh memory takes several times as long as into memory it has
    seen). So the buckets are kept, and the results are slices of them rather than
    copies. A buffer is handed out again only once nothing outside the pool refers to
    it: every NumPy (or CuPy) view keeps a reference to the buffer that owns its memory,
    so while the caller holds any result of a call its buffer stays theirs, and the next
    call takes another one (or a new one, beyond ``KEEP``)."""

    KEEP = 4  # buffers per kind, in use or free

    def __init__(self):
        self._buffers: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def take(self, dtype, xp, count: int):
        """A flat ``count``-element array of ``dtype`` that no caller holds."""
        with self._lock:
            buffers = self._buffers.setdefault((dtype, xp.__name__), [])
            free = [b for b, n in zip(buffers, outside_references(buffers)) if n == 0]
            for buffer in free:
                if buffer.size >= count:
                    return buffer[:count]
            if len(buffers) >= self.KEEP:  # forget the smallest free one, else the oldest
                victim = min(free, key=lambda b: b.size) if free else buffers[0]
                buffers[:] = [b for b in buffers if b is not victim]  # not ==: arrays
            buffers.append(xp.empty(count, dtype))
            return buffers[-1][:count]

    def drop(self) -> None:
        """Forget every kept buffer (those the caller still holds live on as theirs)."""
        with self._lock:
            self._buffers.clear()


_buckets = BucketPool()


def all_reduce_coalesced(
    tensors,
    axis: str | None = None,
    op: str = "sum",
    *,
    mesh=None,
    bucket_mb: float = 16,
    deterministic: bool | None = None,
) -> list:
    """``all_reduce`` of every array (or sharded tensor) in ``tensors``, in few collectives.

    Returns new arrays (sharded tensors for sharded tensors), in the order given; every
    rank must pass the same shapes and dtypes in the same order. The arrays are read-only
    views of one flat buffer per bucket, used again once they are all gone (see
    :class:`BucketPool` and ``shared_buckets``). On one node the ranks' results are the
    same memory, so that writing into one would change the others': copy a result
    (``np.array(r)``) to modify it. PyTorch tensors and JAX arrays get new tensors (or
    arrays) of their library back: copies, since a tensor is always writable.
    """
    if not bucket_mb > 0:
        raise TesseraError(f"bucket_mb={bucket_mb!r} must be a positive number of megabytes")
    tensors = list(tensors)
    arrays = [t.local if isinstance(t, ShardedTensor) else t for t in tensors]
    callers = [None] * len(arrays)  # the ArrayKind of each PyTorch/JAX array, to give back
    if not all(type(a) is np.ndarray for a in arrays):
        for i, a in enumerate(arrays):
            arrays[i], callers[i] = transportable(a, f"item {i}")
    ndarray = np.ndarray
    kinds = [a.dtype if type(a) is ndarray else _kind(i, a) for i, a in enumerate(arrays)]
    sizes = [a.nbytes for a in arrays]
    for kind in set(kinds):
        check_op(op, kind if isinstance(kind, np.dtype) else kind[0])
    mesh = current_mesh(mesh)
    axis = mesh.axis_name(axis)  # the only axis of a one-axis mesh when not named
    channel = mesh.channel(axis)
    works = []
    for members, nbytes in _buckets_of(kinds, sizes, int(bucket_mb * 2**20)):
        pieces = arrays if len(members) == len(arrays) else [arrays[i] for i in members]
        first = pieces[0]
        count = nbytes // first.dtype.itemsize
        flat = _through_shared_memory(channel, pieces, count, first, op)
        work = None
        if flat is None:
            xp = array_module(first)
            flat = _buckets.take(first.dtype, xp, count)
            xp.concatenate([a if a.ndim == 1 else a.reshape(-1) for a in pieces], out=flat)
            work = all_reduce(  # in place, in the bucket
                flat,
                axis,
                op,
                mesh=mesh,
                out=flat,
                deterministic=deterministic,
                async_op=True,
                _own=True,
            )
        works.append((members, pieces, flat, work))
    results: list = [None] * len(arrays)
    for members, pieces, flat, work in works:
        if work is not None:
            work.wait()
        if isinstance(flat, np.ndarray):  # shared with the node's other ranks, perhaps
            flat.flags.writeable = False
        ends = list(itertools.accumulate(a.size for a in pieces))
        views = [  # plain slices: numpy's split is slower per piece
            flat[start:end] if a.ndim == 1 else flat[start:end].reshape(a.shape)
            for a, start, end in zip(pieces, [0, *ends], ends)
        ]
        if len(works) == 1:
            results = views
        else:
            for i, view in zip(members, views):
                results[i] = view
    if any(callers):  # new tensors of the caller's library (results here are read-only)
        results = [r if k is None else k.result(r) for r, k in zip(results, callers)]
    if not any(isinstance(t, ShardedTensor) for t in tensors):
        return results
    return [
        ShardedTensor(t.shape, t.layout, t.mesh, r) if isinstance(t, ShardedTensor) else r
        for t, r in zip(tensors, results)
    ]


def _through_shared_memory(channel, pieces: list, count: int, first, op: str):
    """The bucket reduced in memory the axis's ranks share (see shared_buckets), or None
    when it goes through MPI: a GPU array, a dtype MPI reduces otherwise, ranks on
    several nodes, every result region still held, or the path turned off."""
    if (
        channel.node is None  # one rank, or ranks on several nodes
        or not shared_buckets.eligible(first)
        or setting("dist_shared_memory") == "off"
    ):
        return None
    start = now() if OBSERVERS else 0.0
    with ISSUE_LOCK:  # the bucket's three synchronisations, in the one global order
        bucket = shared_buckets.BucketShape((count,), first.dtype)

        def run():
            seq = channel.begin("all_reduce", bucket, op, via="shared memory")
            faults.raise_pending(channel, seq)
            return shared_buckets.reduce_bucket(channel, pieces, count, first.dtype, op, seq)

        if not OBSERVERS:
            return faults.unretried(channel, "all_reduce", run)
        with entered("collective", "all_reduce"):  # NVTX ranges
            flat = faults.unretried(channel, "all_reduce", run)
        seq = channel.started
    if flat is not None:  # (None: through MPI, whose all_reduce reports itself)
        nbytes = count * first.dtype.itemsize
        fields = dict(op=op, axis=channel.axis, bytes=nbytes, seq=seq, via="shared memory")
        report("collective", "all_reduce", start, **fields)
    return flat


def _kind(i: int, a) -> tuple:
    """The bucket key of an array that is not a NumPy array (a CuPy array, say)."""
    if hasattr(a, "dtype") and hasattr(a, "shape"):
        return (a.dtype, array_module(a).__name__)
    raise TesseraError(f"all_reduce_coalesced: item {i} is a {type(a).__name__}, not an array")


def _buckets_of(kinds: list, sizes: list[int], limit: int) -> list[tuple[list[int], int]]:
    """The arrays' indices grouped into buckets, with each bucket's bytes: one kind each,
    at most ``limit`` bytes (or one array, if that alone is larger), in order."""
    total = sum(sizes)
    if len(set(kinds)) == 1 and total <= limit:  # the common case: one bucket
        return [(list(range(len(kinds))), total)]
    buckets: list[list] = []
    open_bucket: dict = {}  # kind -> [indices, bytes] of its bucket being filled
    for i, (kind, nbytes) in enumerate(zip(kinds, sizes)):
        bucket = open_bucket.get(kind)
        if bucket is None or bucket[1] + nbytes > limit:
            open_bucket[kind] = bucket = [[], 0]
            buckets.append(bucket)
        bucket[0].append(i)
        bucket[1] += nbytes
    return [(members, nbytes) for members, nbytes in buckets]
