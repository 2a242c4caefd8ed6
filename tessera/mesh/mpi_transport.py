"""Collectives over MPI: non-blocking mpi4py calls on buffers (never pickled array data).

Host arrays are NumPy; device arrays (CuPy and other ``__cuda_array_interface__``
arrays) go through the same calls when the MPI library is CUDA-aware, with CuPy as the
array module. MPI has no 16-bit float types: f16 and bf16 reduce in f32 (rounded once, at
the end) and travel as raw 16-bit data in gathers and broadcasts; bools reduce as bytes.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..runtime.world import LocalComm
from . import fingerprint
from .channel import Channel, Transfer
from .layout import block

NAME = "mpi"  # what fingerprints (and TESSERA_DIST_BACKEND) call this backend
OPS = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply"}
HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
SMALL_GATHER_BYTES = 256 * 1024  # deterministic all_reduce: gather everything below this
SCATTER_IN_PLACE_BYTES = 128 * 1024  # a stamped reduce_scatter smaller than this: in place
PAIRWISE_MEMBERS = 8  # a checked reduce_scatter on at most this many: pairwise, tagged
_MPI_OPS: dict = {}  # op name -> MPI.Op, filled on first use (mpi4py loads lazily)
_MPI: list = []  # mpi4py's MPI module, on first use


def array_module(x):
    """NumPy for host arrays, CuPy for device arrays."""
    if isinstance(x, np.ndarray):
        return np
    import cupy

    return cupy


def _mpi_op(ch: Channel, op: str):
    if isinstance(ch.comm, LocalComm):
        return None  # a world of one never reaches MPI (which may not be installed)
    if not _MPI_OPS:
        from mpi4py import MPI

        _MPI_OPS.update(sum=MPI.SUM, max=MPI.MAX, min=MPI.MIN, prod=MPI.PROD)
    return _MPI_OPS[op]


def wire_dtype(dtype):
    """The dtype MPI reduces an array of ``dtype`` in (to_reduction_wire)."""
    if dtype in HALF:
        return np.dtype(np.float32)
    return np.dtype(np.uint8) if dtype == np.bool_ else dtype


def to_reduction_wire(x, xp):
    """The array MPI reduces for ``x``: f32 for 16-bit floats, bytes for bools."""
    if x.dtype in HALF:
        return x.astype(np.float32)
    if x.dtype == np.bool_:
        return xp.ascontiguousarray(x).view(np.uint8)
    return xp.ascontiguousarray(x)


def from_reduction_wire(result, dtype):
    if result.dtype == dtype:
        return result
    if dtype == np.bool_:
        return result != 0
    return result.astype(dtype)


def _bytes(x):
    """A contiguous array as flat bytes (what gathers and broadcasts move)."""
    return x.reshape(-1).view(np.uint8)


def all_reduce(
    ch: Channel,
    x,
    op: str,
    deterministic: bool,
    in_place: bool = False,
    stamp: tuple | None = None,
    check_of: tuple = (),
) -> Transfer:
    """Reduced into a new array, which the caller copies into ``out=`` once the collective
    has completed (a collective that fails leaves ``out=`` as it was); ``in_place``: into
    ``x`` itself (a buffer of Tessera's own, which a failure may leave half reduced).
    ``stamp`` (Channel.stamp): the check travels after the data, verified before the
    result is delivered; ``check_of`` is (seq, the caller's array, None), what a mismatch
    names (as reduce_scatter's)."""
    if stamp is not None:
        return _stamped_all_reduce(ch, x, op, stamp, check_of)
    xp = array_module(x)
    wire = to_reduction_wire(x, xp)
    if deterministic:
        return _all_reduce_in_rank_order(ch, x, wire, op, xp)
    if in_place and wire is x:
        if isinstance(ch.comm, LocalComm):
            return Transfer([], lambda: x)
        request = ch.comm.Iallreduce(_in_place(), x, _mpi_op(ch, op))
        return Transfer([request], lambda: x)
    received = xp.empty_like(wire)
    request = ch.comm.Iallreduce(wire, received, _mpi_op(ch, op))
    return Transfer([request], lambda: from_reduction_wire(received, x.dtype))


def _stamped_all_reduce(ch: Channel, x, op: str, stamp, check_of: tuple) -> Transfer:
    """One buffer holds the data (in the wire dtype) and the stamp after it, reduced in
    place: MPI copies a separate send buffer into the receive buffer first anyway, so the
    copy here is the one it no longer makes. The result is delivered once the reduced
    stamp is the expected one (Channel.stamp)."""
    mine, expected = stamp
    n = x.size
    buffer = np.empty(n + mine.size, mine.dtype)
    data = buffer[:n] if x.ndim == 1 else buffer[:n].reshape(x.shape)
    data[...] = x
    buffer[n:] = mine
    request = ch.reductions.Iallreduce(_in_place(), buffer, _mpi_op(ch, op))

    def finish():
        if buffer[n:].tobytes() != expected:
            raise ch.stamp_mismatch("all_reduce", op, *check_of)
        return data if data.dtype == x.dtype else from_reduction_wire(data, x.dtype)

    return Transfer([request], finish)


def _in_place():
    return _mpi().IN_PLACE


def _mpi():
    """mpi4py's MPI module (imported on first use: a world of one never loads it)."""
    if not _MPI:
        from mpi4py import MPI

        _MPI.append(MPI)
    return _MPI[0]


def _all_reduce_in_rank_order(ch: Channel, x, wire, op: str, xp) -> Transfer:
    """The deterministic all_reduce in two steps, moving about what a ring all-reduce
    moves: each member receives everyone's share of one slice of the elements (an
    all-to-all) and reduces it in rank order, left to right; then an all-gather of the
    reduced slices. Every element is reduced in rank order, so the result is the same
    bits as one process reducing the arrays in rank order. Small arrays take one step
    instead: gather them all, reduce in rank order."""
    if wire.nbytes * ch.size <= SMALL_GATHER_BYTES:  # one step: latency, not traffic
        parts = xp.empty((ch.size,) + wire.shape, wire.dtype)
        request = ch.comm.Iallgather(wire, parts)
        return Transfer(
            [request], lambda: from_reduction_wire(reduce_in_order(parts, op, xp), x.dtype)
        )
    flat = wire.reshape(-1)
    n, total = ch.size, flat.size
    bounds = [block(total, n, i) for i in range(n)]
    counts = [b - a for a, b in bounds]
    starts = [a for a, _ in bounds]
    mine = counts[ch.index]
    shares = xp.empty(n * mine, wire.dtype)
    request = ch.comm.Ialltoallv(
        [flat, (counts, starts)], [shares, ([mine] * n, [i * mine for i in range(n)])]
    )

    def gather_reduced() -> Transfer:
        reduced = reduce_in_order(shares.reshape(n, mine), op, xp)
        result = xp.empty(total, wire.dtype)
        gathered = ch.comm.Iallgatherv(reduced, [result, (counts, starts)])
        return Transfer(
            [gathered], lambda: from_reduction_wire(result.reshape(wire.shape), x.dtype)
        )

    return Transfer([request], gather_reduced)


def reduce_in_order(parts, op: str, xp):
    """``op`` over dim 0 of ``parts``, left to right: the rank-order result."""
    ufunc = getattr(xp, OPS[op])
    total = parts[0].copy()
    for part in parts[1:]:
        ufunc(total, part, out=total)
    return total


def all_gather(ch: Channel, x, rows: list[int]) -> Transfer:
    """Concatenate the members' arrays along dim 0 (``rows[i]`` rows from member i)."""
    xp = array_module(x)
    x = xp.ascontiguousarray(x)
    row_bytes = x.dtype.itemsize * math.prod(x.shape[1:])
    out = xp.empty((sum(rows),) + tuple(x.shape[1:]), x.dtype)
    counts = [r * row_bytes for r in rows]
    displacements = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
    request = ch.comm.Iallgatherv(_bytes(x), [_bytes(out), (counts, displacements)])
    return Transfer([request], lambda: out)


def reduce_scatter(
    ch: Channel, x, op: str, rows: list[int], stamp: tuple | None = None, check_of=None
) -> Transfer:
    """``op`` over the members, then member i keeps ``rows[i]`` rows of dim 0.
    ``stamp`` (Channel.stamp; rows all equal): the check travels after each block;
    ``check_of`` is (seq, the caller's array, dim), what a mismatch names."""
    if stamp is not None:
        return _stamped_reduce_scatter(ch, x, op, rows[0], stamp, check_of)
    xp = array_module(x)
    wire = to_reduction_wire(x, xp)
    row_items = math.prod(wire.shape[1:])
    received = xp.empty((rows[ch.index],) + tuple(wire.shape[1:]), wire.dtype)
    counts = [r * row_items for r in rows]
    request = ch.comm.Ireduce_scatter(wire, received, counts, _mpi_op(ch, op))
    return Transfer([request], lambda: from_reduction_wire(received, x.dtype))


def tagged_reduce_scatter(
    ch: Channel, x, op: str, rows: list[int], tag: int, check_of: tuple
) -> Transfer:
    """``op`` over the members, then member i keeps ``rows[i]`` rows of dim 0, with the
    check in the messages' tags (Channel.tag): each member sends every other one its
    block straight from ``x`` (no copy) and receives theirs of its own block with any
    tag; a received tag that is not this call's is a mismatch, raised by every member
    before it delivers (each one received a block from the member that differs). The
    blocks are reduced in rank order. On the 2-core VM this exchange is also faster than
    MPI's reduce-scatter on two ranks (bench/README.md, "The collectives' fingerprint
    check")."""
    wire = to_reduction_wire(x, np)
    rest = wire.shape[1:]
    row_items = math.prod(rest)
    flat = wire.reshape(-1)
    n, me = ch.size, ch.index
    starts = [0]
    for r in rows:
        starts.append(starts[-1] + r * row_items)
    mine = flat[starts[me] : starts[me + 1]]
    received = np.empty((n - 1, mine.size), wire.dtype)
    receives = [_Received(ch.scatters, received[step - 1], (me - step) % n) for step in range(1, n)]
    sends = []
    for step in range(1, n):
        peer = (me + step) % n
        sends.append(ch.scatters.Isend(flat[starts[peer] : starts[peer + 1]], peer, tag))

    def finish():
        if any(r.status.Get_tag() != tag for r in receives):
            raise ch.stamp_mismatch("reduce_scatter", op, *check_of)
        parts = [mine if i == me else received[(me - i) % n - 1] for i in range(n)]
        combine = getattr(np, OPS[op])
        total = combine(parts[0], parts[1])
        for part in parts[2:]:
            combine(total, part, out=total)
        return from_reduction_wire(total.reshape((rows[me],) + rest), x.dtype)

    return Transfer(receives + sends, finish)


class _Received:
    """A receive whose status (the sender's tag) is kept when a test completes it."""

    __slots__ = ("request", "status")

    def __init__(self, comm, buffer, source: int):
        mpi = _mpi()
        self.status = mpi.Status()
        self.request = comm.Irecv(buffer, source, mpi.ANY_TAG)

    def Test(self) -> bool:  # noqa: N802 (MPI's spelling, as the requests it stands beside)
        return self.request.Test(self.status)


def _stamped_reduce_scatter(ch: Channel, x, op: str, rows: int, stamp, check_of) -> Transfer:
    """Every member's block followed by the stamp, in one buffer (the copy is the check's
    cost: the caller's array has no room for the stamps), reduce-scattered with counts.
    Under SCATTER_IN_PLACE_BYTES in place (this member's block and the reduced stamp
    come back at the buffer's front); from there on into a new array, from a send buffer
    of the channel's, reused from call to call: on a new buffer each call MPI took 6-7x
    as long as without the check from 256 KB on (bench/README.md)."""
    mine, expected = stamp
    rest = x.shape[1:]
    items = rows * math.prod(rest)
    shape = (ch.size, items + mine.size)
    large = shape[0] * shape[1] * mine.itemsize >= SCATTER_IN_PLACE_BYTES
    buffer = ch.scratch(shape, mine.dtype) if large else np.empty(shape, mine.dtype)
    if x.flags.c_contiguous:  # the common case: one 2-d copy
        buffer[:, :items] = x.reshape(ch.size, items)
    else:
        buffer[:, :items].reshape((ch.size, rows) + rest)[...] = x.reshape((ch.size, rows) + rest)
    buffer[:, items:] = mine
    counts = [shape[1]] * ch.size
    if large:
        received = np.empty(shape[1], mine.dtype)
        request = ch.scatters.Ireduce_scatter(buffer, received, counts, _mpi_op(ch, op))
    else:
        received = buffer[0]
        request = ch.scatters.Ireduce_scatter(_in_place(), buffer, counts, _mpi_op(ch, op))

    def finish():
        if large:
            ch.scratch_back(buffer)  # MPI is done with it (a failed call keeps it)
        if received[items:].tobytes() != expected:
            raise ch.stamp_mismatch("reduce_scatter", op, *check_of)
        return from_reduction_wire(received[:items].reshape((rows,) + rest), x.dtype)

    return Transfer([request], finish)


def broadcast(ch: Channel, x, root: int, header=None, check_of=None) -> Transfer:
    """``header`` (Channel.header): the check travels in front of the data, on a
    communicator of the axis's broadcasts; ``check_of`` is the sequence number, what a
    mismatch names."""
    if header is not None:
        return _broadcast_with_header(ch, x, root, header, check_of)
    xp = array_module(x)
    if ch.index == root:
        out = xp.array(x, copy=True, order="C")
    else:  # a receiver's is overwritten whole
        out = xp.empty(x.shape, x.dtype)
    request = ch.comm.Ibcast(_bytes(out), root=root)
    return Transfer([request], lambda: out)


def _broadcast_with_header(ch: Channel, x, root: int, header: bytes, seq: int) -> Transfer:
    """The root's header (its call: fingerprint.header) and its data in one message; a
    receiver delivers the data once the header is its own call's."""
    start = fingerprint.HEADER_BYTES
    buffer = np.empty(start + x.nbytes, np.uint8)
    data = np.ndarray(x.shape, x.dtype, buffer, start)
    if ch.index == root:
        buffer.data[:start] = header
        data[...] = x
    request = ch.broadcasts.Ibcast(buffer, root=root)

    def finish():
        if ch.index != root and buffer[:start].tobytes() != header:
            raise ch.header_mismatch(seq, x, root, buffer[:start].view(np.int64), header)
        return data

    return Transfer([request], finish)


def barrier(ch: Channel) -> Transfer:
    return Transfer([ch.comm.Ibarrier()], lambda: None)


def cuda_aware() -> bool:
    """Whether the MPI library says it can move device buffers."""
    from mpi4py import MPI

    query = getattr(MPI, "Query_cuda_support", None)
    return bool(query and query())
