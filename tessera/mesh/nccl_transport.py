"""Collectives over NCCL for device arrays, through CuPy's NCCL communicator.

Run on one GPU (one rank, an H100), not yet across several GPUs (docs/distributed.md).
It is written against CuPy's documented ``cupy.cuda.nccl`` API and kept small.

One NCCL communicator per mesh axis, made on the axis's first GPU collective: member 0
makes the unique id, MPI broadcasts it. Operations are enqueued on the stream Tessera's
launches go to (`tessera.stream()`, `graph.stream(name)`), else on CuPy's current stream;
completion is an event on that stream, polled (with the collective timeout) like MPI
requests. NCCL needs equal counts per rank: uneven gathers are padded to the largest
block and compacted, uneven reduce-scatters reduce everything and keep a block.
"""

from __future__ import annotations

import functools
import logging
import os

from ..kernel.targets.cuda.streams import collective_stream, fence, fencing
from .channel import Channel, Transfer, then
from .mpi_transport import reduce_in_order

NAME = "nccl"  # what fingerprints (and TESSERA_DIST_BACKEND) call this backend
_made = [False]  # whether this process has made an NCCL communicator (NCCL_ALGO is read then)
_NCCL_NAMES = {"ring": "Ring", "tree": "Tree"}


def _nccl():
    from cupy.cuda import nccl

    return nccl


@functools.cache
def available() -> bool:
    try:
        _nccl()
    except ImportError:
        return False
    return True


def communicator(ch: Channel):
    """The axis's NCCL communicator (collective: every member calls this together)."""
    if ch.nccl is None:
        nccl = _nccl()
        uid = nccl.get_unique_id() if ch.index == 0 else None
        uid = ch.comm.bcast(uid, root=0)
        ch.nccl = nccl.NcclCommunicator(ch.size, uid, ch.index)
        _made[0] = True
    return ch.nccl


def force_algorithm(name: str) -> None:
    """A forced ``ring`` or ``tree`` on NCCL: ``NCCL_ALGO``, which NCCL reads when the
    process makes its first communicator, so the choice is the process's; a different
    forced choice after that applies to new processes only (said once)."""
    wanted = _NCCL_NAMES[name]
    if os.environ.get("NCCL_ALGO") == wanted:
        return
    if not _made[0]:
        os.environ["NCCL_ALGO"] = wanted
        return
    if not _warned_algo:
        _warned_algo.append(name)
        logging.getLogger("tessera").warning(
            "algorithm=%r on NCCL sets NCCL_ALGO=%s, which NCCL reads when a process makes its "
            "first communicator: this process keeps NCCL_ALGO=%s; it applies to new processes",
            name,
            wanted,
            os.environ.get("NCCL_ALGO", "(NCCL's choice)"),
        )


_warned_algo: list = []


def _dtype_code(dtype) -> int:
    nccl = _nccl()
    names = {
        "int8": "NCCL_INT8",
        "uint8": "NCCL_UINT8",
        "bool": "NCCL_UINT8",
        "int32": "NCCL_INT32",
        "uint32": "NCCL_UINT32",
        "int64": "NCCL_INT64",
        "uint64": "NCCL_UINT64",
        "float16": "NCCL_FLOAT16",
        "bfloat16": "NCCL_BFLOAT16",
        "float32": "NCCL_FLOAT32",
        "float64": "NCCL_FLOAT64",
    }
    return getattr(nccl, names[dtype.name])


def _op_code(op: str) -> int:
    nccl = _nccl()
    return {
        "sum": nccl.NCCL_SUM,
        "max": nccl.NCCL_MAX,
        "min": nccl.NCCL_MIN,
        "prod": nccl.NCCL_PROD,
    }[op]


def _enqueued(finish) -> Transfer:
    import cupy

    event = cupy.cuda.Event(block=False, disable_timing=True)
    event.record(_cupy_stream())
    return Transfer([], finish, gpu_done=lambda: event.done)


def _cupy_stream():
    """The stream to enqueue on, as CuPy's: the one Tessera's launches go to now
    (``tessera.stream()`` or ``graph.stream(name)``, streams.collective_stream), else
    CuPy's current stream."""
    import cupy

    s = collective_stream()
    if s == 0:
        return cupy.cuda.get_current_stream()
    handle = getattr(s.handle, "value", s.handle)  # ctypes handle, or the binding's
    return cupy.cuda.ExternalStream(int(handle))


def _stream(*pointers: int) -> int:
    """The stream to enqueue on, after fencing it against the other named streams that
    used these arrays (streams.fence: a collective that reduces what a kernel on another
    stream wrote waits for it on the GPU)."""
    s = collective_stream()
    if s != 0 and fencing():
        fence(s, pointers)
    return _cupy_stream().ptr


def _contiguous(x):
    """``x`` as a contiguous CuPy array: a CuPy array as it is, any other GPU array (a
    numba-cuda device array, which the operator layer returns) viewed without a copy
    through its ``__cuda_array_interface__``."""
    import cupy

    return cupy.ascontiguousarray(cupy.asarray(x))


def all_reduce(ch: Channel, x, op: str, deterministic: bool) -> Transfer:
    import cupy

    x = _contiguous(x)
    comm = communicator(ch)
    if deterministic:
        parts = cupy.empty((ch.size,) + x.shape, x.dtype)
        comm.allGather(
            x.data.ptr,
            parts.data.ptr,
            x.size,
            _dtype_code(x.dtype),
            _stream(x.data.ptr, parts.data.ptr),
        )
        return _enqueued(lambda: reduce_in_order(parts, op, cupy))
    out = cupy.empty_like(x)
    comm.allReduce(
        x.data.ptr,
        out.data.ptr,
        x.size,
        _dtype_code(x.dtype),
        _op_code(op),
        _stream(x.data.ptr, out.data.ptr),
    )
    return _enqueued(lambda: out)


def all_gather(ch: Channel, x, rows: list[int]) -> Transfer:
    import cupy

    x = _contiguous(x)
    most = max(rows)
    padded = cupy.zeros((most,) + x.shape[1:], x.dtype)
    padded[: x.shape[0]] = x
    parts = cupy.empty((ch.size,) + padded.shape, x.dtype)
    communicator(ch).allGather(
        padded.data.ptr,
        parts.data.ptr,
        padded.size,
        _dtype_code(x.dtype),
        _stream(padded.data.ptr, parts.data.ptr),
    )
    return _enqueued(lambda: cupy.concatenate([parts[i, :r] for i, r in enumerate(rows)]))


def reduce_scatter(ch: Channel, x, op: str, rows: list[int]) -> Transfer:
    import cupy

    x = _contiguous(x)
    start = sum(rows[: ch.index])
    if len(set(rows)) > 1:  # uneven blocks: NCCL's reduce-scatter needs equal counts
        whole = all_reduce(ch, x, op, deterministic=False)
        return then(whole, lambda total: total[start : start + rows[ch.index]])
    out = cupy.empty((rows[ch.index],) + x.shape[1:], x.dtype)
    communicator(ch).reduceScatter(
        x.data.ptr,
        out.data.ptr,
        out.size,
        _dtype_code(x.dtype),
        _op_code(op),
        _stream(x.data.ptr, out.data.ptr),
    )
    return _enqueued(lambda: out)


def broadcast(ch: Channel, x, root: int) -> Transfer:
    import cupy

    out = cupy.array(cupy.asarray(x), copy=True, order="C")
    communicator(ch).bcast(
        out.data.ptr, out.nbytes, _nccl().NCCL_UINT8, root, _stream(out.data.ptr)
    )
    return _enqueued(lambda: out)
