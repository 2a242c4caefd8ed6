"""Transfers between pairs of ranks of an axis: ``send``, ``recv``, ``sendrecv`` and the
collective ``all_to_all`` (docs/distributed.md, "Point to point").

Peers are indices on the axis, as a broadcast's root is. Point-to-point transfers travel
on a communicator of their own (``Channel.p2p``), so they never pair with a collective;
between two ranks they arrive in the order they were sent. Each message is preceded by a
small header (dtype, shape), so a receiver that expects another array gets
:class:`CollectiveMismatch` naming both, never bytes of the wrong kind. Waits are those of
the collectives (``tessera.runtime.timed``): a transfer whose peer never comes ends at
``TESSERA_COLLECTIVE_TIMEOUT`` with :class:`CollectiveTimeout` naming the peer, one whose
peer on this node has exited at the next check of the members (:class:`RankExited`).
A standard-mode send of a small message may complete before its receiver posts (MPI
buffers it), so it is the receiver that reports a missing partner.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..errors import CollectiveMismatch, CollectiveTimeout, TesseraError
from ..observe.observers import OBSERVERS, now
from ..runtime import timed
from . import faults, mpi_transport
from .channel import ISSUE_LOCK, Channel, Transfer
from .collectives import (
    TRACED_COLLECTIVES,
    _axis_of,
    _caller_kind,
    _deliver_to,
    _front,
    _local,
    _run,
    _traced,
    _transport,
)
from .mesh import Mesh, current_mesh

TAG = 7400  # data and headers of point-to-point transfers, on Channel.p2p
HEADER = 10  # int64s: a marker, the dtype's number, ndim, shape (up to 7 dims)
MARKER = 0x54535250  # "TSRP": what a header starts with


def send(x, dst: int, axis: str | None = None, *, mesh: Mesh | None = None) -> None:
    """Send array ``x`` to the member with index ``dst`` on ``axis``; returns once ``x``
    may be reused (MPI may have buffered it)."""
    channel, x = _host(x, axis, mesh, "send")
    peer = _peer(channel, dst, "dst")
    _wait(channel, _post_send(channel, x, peer), "send", peer)


def recv(out, src: int, axis: str | None = None, *, mesh: Mesh | None = None):
    """Receive into ``out`` (an array of the sent array's shape and dtype) what the
    member with index ``src`` sends; returns ``out``."""
    channel, out = _host(out, axis, mesh, "recv")
    if not out.flags.writeable or not out.flags.c_contiguous:
        raise TesseraError("recv: out must be a writable C-contiguous array")
    peer = _peer(channel, src, "src")
    header = _receive_header(channel, peer, "recv")
    _check_header(channel, header, out, peer, "recv")
    _wait(channel, [channel.p2p.Irecv(_bytes(out), source=peer, tag=TAG)], "recv", peer)
    return out


def sendrecv(x, dst: int, src: int, axis: str | None = None, *, mesh: Mesh | None = None, out=None):
    """Send ``x`` to ``dst`` and receive from ``src`` at once (a ring's step: no order to
    get wrong, no deadlock); the received array (``out`` if given)."""
    channel, x = _host(x, axis, mesh, "sendrecv")
    to, source = _peer(channel, dst, "dst"), _peer(channel, src, "src")
    sends = _post_send(channel, x, to)  # waited on with the data: the peer's data recv
    header = _receive_header(channel, source, "sendrecv")  # comes after its header's
    if out is None:
        dtype, shape = _decoded(header)
        out = np.empty(shape, dtype)
    else:
        out = _host(out, axis, mesh, "sendrecv")[1]
        _check_header(channel, header, out, source, "sendrecv")
    data = channel.p2p.Irecv(_bytes(out), source=source, tag=TAG)
    _wait(channel, [*sends, data], "sendrecv", source)
    return out


def all_to_all(
    x,
    axis: str | None = None,
    *,
    mesh: Mesh | None = None,
    dim: int = 0,
    out=None,
    async_op: bool = False,
):
    """``x`` split into equal blocks along ``dim``, one per member: block ``j`` goes to
    member ``j``, and the result holds the blocks received, in member order, along
    ``dim`` (an expert-parallel layer's exchange; its own inverse)."""
    if TRACED_COLLECTIVES and type(x) is not np.ndarray:  # in a traced function?
        traced = _traced(
            "all_to_all", x, axis, mesh, dict(mesh=mesh, out=out, dim=dim, async_op=async_op)
        )
        if traced is not None:
            return traced
    axis = _axis_of(x, axis, mesh)
    x, out, back = _caller_kind(x, out)
    x = _local(x)
    channel = current_mesh(mesh).channel(axis)
    if not -x.ndim <= dim < max(x.ndim, 1):
        raise TesseraError(f"all_to_all: dim={dim} is not a dim of a {x.ndim}-d array")
    moved = _front(x, dim)
    if moved.ndim == 0 or moved.shape[0] % channel.size:
        raise TesseraError(
            f"all_to_all: dim {dim} of shape {x.shape} does not split into {channel.size} "
            f"equal blocks (axis {axis!r})"
        )
    if _transport(x) is not mpi_transport:
        raise TesseraError("all_to_all moves host arrays (or GPU arrays with a CUDA-aware MPI)")
    start = now() if OBSERVERS else 0.0
    with ISSUE_LOCK:
        extra = dict(dim=dim % x.ndim, backend="mpi")
        seq = faults.unretried(
            channel, "all_to_all", lambda: channel.begin("all_to_all", x, **extra)
        )
        check = channel.check("all_to_all", seq, x, **extra)
        sent = np.ascontiguousarray(moved)
        received = np.empty_like(sent)
        request = channel.comm.Ialltoall(_bytes(sent), _bytes(received))
        transfer = Transfer([request], lambda: (sent, received)[1])
    deliver = back(_deliver_to(out, dim % x.ndim))
    return _run(
        channel, "all_to_all", seq, transfer, deliver, async_op, x, None, start, check, extra
    )


# ----------------------------------------------------------------------------- the wire


def _host(x, axis, mesh, kind: str) -> tuple[Channel, np.ndarray]:
    x, _, _ = _caller_kind(x, None)
    x = _local(x)
    if not isinstance(x, np.ndarray) and not mpi_transport.cuda_aware():
        raise TesseraError(f"{kind} moves host arrays (or GPU arrays with a CUDA-aware MPI)")
    if x.ndim > HEADER - 3:
        raise TesseraError(f"{kind}: arrays of up to {HEADER - 3} dims, not {x.ndim}")
    return current_mesh(mesh).channel(current_mesh(mesh).axis_name(axis)), x


def _peer(channel: Channel, index: int, name: str) -> int:
    if not isinstance(index, (int, np.integer)) or not 0 <= index < channel.size:
        raise TesseraError(
            f"{name}={index!r} is not an index on axis {channel.axis!r} (size {channel.size})"
        )
    if index == channel.index:
        raise TesseraError(f"{name}={index} is this rank's own index on axis {channel.axis!r}")
    return int(index)


def _bytes(x):
    return x.reshape(-1).view(np.uint8)


def _encoded(x) -> np.ndarray:
    if np.dtype(x.dtype).num not in _DTYPES:
        raise TesseraError(f"point-to-point transfers do not move arrays of {x.dtype}")
    header = np.zeros(HEADER, np.int64)
    header[0], header[1], header[2] = MARKER, np.dtype(x.dtype).num, x.ndim
    header[3 : 3 + x.ndim] = x.shape
    return header


def _decoded(header: np.ndarray) -> tuple[np.dtype, tuple[int, ...]]:
    ndim = int(header[2])
    if header[0] != MARKER or int(header[1]) not in _DTYPES or not 0 <= ndim <= HEADER - 3:
        raise TesseraError("internal: a point-to-point message arrived without its header")
    return _DTYPES[int(header[1])], tuple(int(n) for n in header[3 : 3 + ndim])


_DTYPES = {
    np.dtype(t).num: np.dtype(t)
    for t in (
        np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
        np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
        ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
    )
}  # fmt: skip


def _post_send(channel: Channel, x, peer: int) -> list:
    """The header and the data, started (mpi4py's requests keep their buffers alive)."""
    data = np.ascontiguousarray(x)
    return [
        channel.p2p.Isend(_encoded(data), dest=peer, tag=TAG),
        channel.p2p.Isend(_bytes(data), dest=peer, tag=TAG),
    ]


def _receive_header(channel: Channel, peer: int, kind: str) -> np.ndarray:
    header = np.empty(HEADER, np.int64)
    _wait(channel, [channel.p2p.Irecv(header, source=peer, tag=TAG)], kind, peer)
    return header


def _check_header(channel: Channel, header, out, peer: int, kind: str) -> None:
    """A mismatch error unless ``out`` takes the announced array (whose data is then
    received aside, so the next transfer between the two finds its own header)."""
    dtype, shape = _decoded(header)
    if dtype != out.dtype or shape != out.shape:
        aside = np.empty(shape, dtype)
        _wait(channel, [channel.p2p.Irecv(_bytes(aside), source=peer, tag=TAG)], kind, peer)
        raise CollectiveMismatch(
            f"{kind} on axis {channel.axis!r}: rank {channel.world_ranks[peer]} sent "
            f"{dtype} {shape}, this rank (rank {channel.world_ranks[channel.index]}) receives "
            f"into {out.dtype} {out.shape}"
        )


def _wait(channel: Channel, requests: list, kind: str, peer: int) -> None:
    """Wait for ``requests`` with the collectives' deadline and liveness checks; the
    error names the peer."""
    channel.p2p_started += 1
    seq = channel.p2p_started
    rank = channel.world_ranks[peer]
    me = channel.world_ranks[channel.index]

    def on_timeout(seconds: float) -> CollectiveTimeout:
        return CollectiveTimeout(
            f"{kind} on axis {channel.axis!r} between rank {me} and rank {rank} timed out "
            f"after {seconds:g} s (TESSERA_COLLECTIVE_TIMEOUT): rank {rank} did not take "
            "part (no matching send or recv)",
            kind,
            seq,
            channel.axis,
            [rank],
        )

    def probe() -> None:
        channel.check_members(kind, seq)  # a peer of this node that exited: at once

    timed.wait(
        requests,
        lambda: f"{kind} with rank {rank} on axis '{channel.axis}'",
        on_timeout,
        probe=probe,
    )
