"""Collectives over one axis of a mesh, on local arrays or sharded tensors.

``all_reduce`` (sum, max, min, prod), ``all_gather`` (concatenates along dim 0),
``reduce_scatter`` (reduces, then each rank keeps its ``array_split`` block of dim 0),
``broadcast`` (from the axis member with index ``root``) and ``barrier``. On a local array
a collective returns a new array (``out=`` writes into one instead) of the caller's kind
(NumPy, CuPy, a PyTorch tensor, a JAX array; arrays.py); on a sharded tensor
it returns a sharded tensor whose layout says what changed (an all_gather makes the
gathered dim whole, a reduce_scatter splits one).

``deterministic=True`` (or ``TESSERA_DETERMINISTIC=1``) reduces in one fixed order — the
ranks' order along the axis, left to right — so the result is bitwise identical on every
run and equal to a single process reducing the same arrays in rank order, whatever
algorithm the library uses. ``async_op=True`` returns a :class:`Work` handle at once;
``handle.wait()`` gives the result.

Backends (``TESSERA_DIST_BACKEND``): ``mpi`` for host arrays (and device arrays when
the MPI library is CUDA-aware), ``nccl`` (through CuPy) for device arrays.
"""

from __future__ import annotations

import numpy as np

from ..arrays import is_device_array, transportable
from ..config import get as setting
from ..errors import TesseraError
from ..observe.observers import OBSERVERS, now
from . import algorithms, faults, link_cost, mpi_transport, nccl_transport
from .channel import ISSUE_LOCK, Channel, Transfer, then
from .layout import ShardSpec, block
from .mesh import Mesh, current_mesh, world_channel
from .work import Work, _run

OPS = tuple(mpi_transport.OPS)
# what a degraded axis (faults.py) runs instead of the library's collectives
DEGRADED = {
    "all_reduce": "ring",
    "reduce_scatter": "ring",
    "all_gather": "ring",
    "broadcast": "tree",
}


def _transport(x):
    """The backend module for array ``x`` (TESSERA_DIST_BACKEND, else from the array)."""
    backend = setting("dist_backend")
    if type(x) is np.ndarray and backend == "auto":  # the common case, first
        return mpi_transport
    on_device = is_device_array(x)
    if backend == "nccl" or (backend == "auto" and on_device and nccl_transport.available()):
        if not on_device:
            raise TesseraError(
                "TESSERA_DIST_BACKEND=nccl moves GPU arrays only; this is a host array"
            )
        return nccl_transport
    if on_device and backend == "auto" and not mpi_transport.cuda_aware():
        raise TesseraError(
            "a GPU array needs the nccl backend (pip install cupy-cuda12x) or a CUDA-aware "
            "MPI library; set TESSERA_DIST_BACKEND=mpi if yours is one but does not say so"
        )
    return mpi_transport


def _caller_kind(x, out):
    """``x`` and ``out=`` as the arrays the transports move (the NumPy view of a PyTorch
    or JAX host tensor, a CuPy view of a CUDA one), and what wraps a collective's
    ``deliver`` so the caller gets their own kind of array back: a new tensor of ``x``'s
    library, or ``out`` itself."""
    if type(x) is np.ndarray and out is None:  # the common case, first
        return x, out, _same
    x, kind = transportable(x)
    given = out
    if out is not None:
        out, out_kind = transportable(out, "out=")
        if out_kind is not None and out_kind.immutable:
            raise TesseraError(
                f"out= is a {out_kind.label}, which is immutable; pass a NumPy array or a "
                "PyTorch tensor, or no out= (the result is a new array)"
            )
    if kind is None and given is out:
        return x, out, _same

    def back(deliver):
        def deliver_back(result):
            result = deliver(result)
            if given is not None:
                return given
            return result if kind is None else kind.result(result)

        return deliver_back

    return x, out, back


def _same(deliver):
    return deliver


def _local(x, op: str | None = None):
    if not (isinstance(x, np.ndarray) or is_device_array(x)):
        raise TesseraError(
            "collectives take NumPy, GPU, PyTorch or JAX arrays or sharded tensors, "
            f"not {type(x).__name__}"
        )
    check_op(op, x.dtype)
    return x


def check_op(op: str | None, dtype) -> None:
    """``op`` is one of OPS and defined on ``dtype`` (complex numbers have no order)."""
    if op is None:
        return
    if op not in OPS:
        raise TesseraError(f"op={op!r} must be one of {', '.join(OPS)}")
    if op in ("max", "min") and dtype.kind == "c":
        raise TesseraError(f"op={op!r} is not defined on complex arrays ({dtype})")


def _tag(channel: Channel, transport, deterministic: bool, x, op: str, dim: int):
    """The tag that carries the check of a host reduce_scatter exchanged pairwise over
    MPI (Channel.tag; on at most PAIRWISE_MEMBERS members), or None."""
    if (
        transport is not mpi_transport
        or deterministic
        or type(x) is not np.ndarray
        or channel.size > mpi_transport.PAIRWISE_MEMBERS
    ):
        return None
    return channel.tag(x, op, dim)


def _stamp(channel: Channel, transport, deterministic: bool, x, op: str, dim=None):
    """The stamp of a reduction (``dim``: a reduce_scatter's) that MPI moves for a host
    array (Channel.stamp), or None: the check is the exchange instead."""
    if transport is not mpi_transport or deterministic or type(x) is not np.ndarray:
        return None
    kind = "all_reduce" if dim is None else "reduce_scatter"
    return channel.stamp(kind, x, op, mpi_transport.wire_dtype(x.dtype), dim)


def _algorithm(kind: str, algorithm, channel: Channel, transport, x, deterministic=False):
    """(the algorithm to run, the tree's chunk count): link_cost.choose for this call."""
    if algorithm is None and channel.size < 2:
        return "library", 1
    if channel.degraded is not None and transport is mpi_transport and type(x) is np.ndarray:
        if not deterministic or kind in ("all_gather", "broadcast"):
            return DEGRADED[kind], 2  # after a retried transport failure (faults.py)
    name, k = link_cost.choose(
        kind,
        algorithm,
        channel.size,
        int(x.nbytes),
        channel.link_class(),
        deterministic,
        type(x) is np.ndarray,
        transport is nccl_transport,
        setting("dist_algo"),
    )
    if transport is nccl_transport and name in ("ring", "tree"):
        nccl_transport.force_algorithm(name)
    return name, k


NOT_STARTED = Transfer([], lambda: None)  # a collective whose transport failed at its start


def _started(channel: Channel, kind: str, issue, transport, deliver, async_op: bool, x, op=None):
    """Start collective ``kind`` (``issue()``: its start, again after a transport failure
    met there: faults.issued) and run it (:func:`_run`: its result, or its Work)."""
    start = now() if OBSERVERS else 0.0
    seq, transfer, check, extra, name = faults.issued(channel, kind, issue)
    again = _reissue(issue, transport)
    return _run(
        channel, kind, seq, transfer, deliver, async_op, x, op, start, check, extra, name, again
    )


def _reissue(issue, transport):
    """What starts a collective again after a transport failure (faults.py): ``issue``
    with ``again=True``, on MPI (a transport failure of NCCL's is raised)."""
    if transport is not mpi_transport:
        return None
    return lambda: issue(True)


def _by_tessera(transport, name: str) -> bool:
    """Whether Tessera's own algorithm moves the data (MPI with ring, tree or rd)."""
    return transport is mpi_transport and name in link_cost.REORDERING


def _deterministic(value: bool | None) -> bool:
    return setting("deterministic") == "1" if value is None else bool(value)


def _deliver_to(out, dim: int = 0):
    """What turns a transport's result (dim ``dim`` moved to the front) into the answer."""

    def deliver(result):
        if result is out:  # the transport received straight into out=
            return out
        if result is not None and dim != 0:
            result = np.ascontiguousarray(np.moveaxis(result, 0, dim))
        if out is None:
            return result
        if out.shape != result.shape or out.dtype != result.dtype:
            raise TesseraError(
                f"out= has shape {out.shape} and dtype {out.dtype}; the result has "
                f"{result.shape} and {result.dtype}"
            )
        out[...] = result
        return out

    return deliver


def _front(x, dim: int):
    if not -x.ndim <= dim < x.ndim:
        raise TesseraError(f"dim={dim} is not a dim of a {x.ndim}-d array")
    return np.moveaxis(x, dim, 0) if dim % x.ndim else x


def all_reduce(
    x,
    axis: str | None = None,
    op: str = "sum",
    *,
    mesh: Mesh | None = None,
    out=None,
    deterministic: bool | None = None,
    async_op: bool = False,
    algorithm: str | None = None,
    _own: bool = False,
):
    """Every rank of the axis gets ``op`` over all their ``x``. ``algorithm``: "auto",
    "ring", "tree", "rd" or "library" (None: ``TESSERA_DIST_ALGO``). (``_own``: ``x`` is
    ``out``, a buffer of Tessera's own that a failed collective may leave half reduced.)"""
    if TRACED_COLLECTIVES and type(x) is not np.ndarray:  # in a traced function?
        traced = _traced(
            "all_reduce",
            x,
            axis,
            mesh,
            dict(
                op=op,
                mesh=mesh,
                out=out,
                deterministic=deterministic,
                async_op=async_op,
                algorithm=algorithm,
            ),
        )
        if traced is not None:
            return traced
    axis = _axis_of(x, axis, mesh)
    if _is_sharded(x):
        _whole_on(x, axis, "all_reduce")
        return _sharded(
            x,
            x.layout,
            out,
            lambda local, o: all_reduce(
                local,
                axis,
                op,
                mesh=x.mesh,
                out=o,
                deterministic=deterministic,
                async_op=async_op,
                algorithm=algorithm,
            ),
        )
    x, out, back = _caller_kind(x, out)
    x = _local(x, op)
    channel = current_mesh(mesh).channel(axis)
    transport = _transport(x)
    deterministic = _deterministic(deterministic)
    in_place = _own and out is x
    # an in-place call reduces into x itself: retry (faults.py) runs again from a copy
    kept = x.copy() if in_place and channel.policy == "retry" and channel.size > 1 else None

    def issue(again: bool = False):
        if again and kept is not None:
            x[...] = kept
        name, k = _algorithm("all_reduce", algorithm, channel, transport, x, deterministic)
        with ISSUE_LOCK:
            extra = dict(deterministic=deterministic, backend=transport.NAME)
            if _by_tessera(transport, name):  # members running other algorithms do not pair
                extra["algorithm"] = name
            seq = channel.begin("all_reduce", x, op, **extra)
            if seq in channel.failed:  # an injected failure: nothing goes out
                return seq, NOT_STARTED, None, extra, name
            stamp = None
            if not in_place and not _by_tessera(transport, name):
                stamp = _stamp(channel, transport, deterministic, x, op)
            check = None if stamp else channel.check("all_reduce", seq, x, op, **extra)
            if _by_tessera(transport, name):
                if name == "ring":
                    transfer = algorithms.ring_all_reduce(channel, x, op, seq)
                elif name == "rd":
                    transfer = algorithms.rd_all_reduce(channel, x, op, seq)
                else:
                    transfer = algorithms.tree_all_reduce(channel, x, op, seq, k)
            elif transport is mpi_transport and not deterministic:
                check_of = (seq, x, None)
                transfer = transport.all_reduce(channel, x, op, False, in_place, stamp, check_of)
            else:
                transfer = transport.all_reduce(channel, x, op, deterministic)
        return seq, transfer, check, extra, name

    return _started(
        channel, "all_reduce", issue, transport, back(_deliver_to(out)), async_op, x, op
    )


def all_gather(
    x,
    axis: str | None = None,
    *,
    mesh: Mesh | None = None,
    out=None,
    dim: int = 0,
    async_op: bool = False,
    algorithm: str | None = None,
):
    """The axis's arrays concatenated along ``dim`` (default 0), in rank order; blocks may
    differ in length along ``dim``. A sharded tensor is gathered along the dim that is
    split over ``axis``. ``algorithm``: "auto", "ring", "rd" or "library"."""
    if TRACED_COLLECTIVES and type(x) is not np.ndarray:  # in a traced function?
        kwargs = dict(mesh=mesh, out=out, dim=dim, async_op=async_op, algorithm=algorithm)
        traced = _traced("all_gather", x, axis, mesh, kwargs)
        if traced is not None:
            return traced
    axis = _axis_of(x, axis, mesh)
    if _is_sharded(x):
        split = _split_dim(x, axis, "all_gather")
        layout = _without(x.layout, axis)
        return _sharded(
            x,
            layout,
            out,
            lambda local, o: all_gather(
                local, axis, mesh=x.mesh, out=o, dim=split, async_op=async_op, algorithm=algorithm
            ),
        )
    x, out, back = _caller_kind(x, out)
    x = _local(x)
    front = _front(x, dim)
    channel = current_mesh(mesh).channel(axis)
    transport = _transport(x)

    def issue(again: bool = False):
        name, _ = _algorithm("all_gather", algorithm, channel, transport, x)
        with ISSUE_LOCK:
            extra = dict(dim=dim % x.ndim, backend=transport.NAME)
            if _by_tessera(transport, name):
                extra["algorithm"] = name
            seq, rows = channel.begin_gather(x, **extra)
            if seq in channel.failed:  # an injected failure: nothing goes out
                return seq, NOT_STARTED, None, extra, name
            if _by_tessera(transport, name):
                gather = algorithms.rd_all_gather if name == "rd" else algorithms.ring_all_gather
                transfer = gather(channel, front, rows, seq)
            else:
                transfer = transport.all_gather(channel, front, rows)
        return seq, transfer, None, extra, name

    return _started(
        channel,
        "all_gather",
        issue,
        transport,
        back(_deliver_to(out, dim % x.ndim)),
        async_op,
        x,
        None,
    )


def reduce_scatter(
    x,
    axis: str | None = None,
    op: str = "sum",
    *,
    mesh: Mesh | None = None,
    out=None,
    dim: int = 0,
    deterministic: bool | None = None,
    async_op: bool = False,
    algorithm: str | None = None,
):
    """``op`` over the axis, then this rank's ``array_split`` block of ``dim`` (default 0).
    A sharded tensor (whole on ``axis``) comes back split over ``axis`` along ``dim``.
    ``algorithm``: "auto", "ring", "rd" or "library"."""
    if TRACED_COLLECTIVES and type(x) is not np.ndarray:  # in a traced function?
        traced = _traced(
            "reduce_scatter",
            x,
            axis,
            mesh,
            dict(
                op=op,
                mesh=mesh,
                out=out,
                dim=dim,
                deterministic=deterministic,
                async_op=async_op,
                algorithm=algorithm,
            ),
        )
        if traced is not None:
            return traced
    axis = _axis_of(x, axis, mesh)
    if _is_sharded(x):
        _whole_on(x, axis, "reduce_scatter")
        if x.layout.axis_of(dim) is not None:
            raise TesseraError(
                f"reduce_scatter: dim {dim} is already split over axis '{x.layout.axis_of(dim)}'"
            )
        layout = ShardSpec(x.layout.partition + (dim,), x.layout.mesh_axes + (axis,))
        return _sharded(
            x,
            layout,
            out,
            lambda local, o: reduce_scatter(
                local,
                axis,
                op,
                mesh=x.mesh,
                out=o,
                dim=dim,
                deterministic=deterministic,
                async_op=async_op,
                algorithm=algorithm,
            ),
        )
    x, out, back = _caller_kind(x, out)
    x = _local(x, op)
    front = _front(x, dim)
    channel = current_mesh(mesh).channel(axis)
    extent = front.shape[0]
    rows = [b - a for a, b in (block(extent, channel.size, i) for i in range(channel.size))]
    deliver = back(_deliver_to(out, dim % x.ndim))
    transport = _transport(x)
    deterministic = _deterministic(deterministic)

    def issue(again: bool = False):
        name, _ = _algorithm("reduce_scatter", algorithm, channel, transport, x, deterministic)
        with ISSUE_LOCK:
            extra = dict(dim=dim % x.ndim, deterministic=deterministic, backend=transport.NAME)
            if _by_tessera(transport, name):
                extra["algorithm"] = name
            seq = channel.begin("reduce_scatter", x, op, **extra)
            if seq in channel.failed:  # an injected failure: nothing goes out
                return seq, NOT_STARTED, None, extra, name
            stamp = tag = None
            if not _by_tessera(transport, name):  # the check in the tags, or a stamp a block
                tag = _tag(channel, transport, deterministic, x, op, extra["dim"])
                if tag is None and extent % channel.size == 0:
                    stamp = _stamp(channel, transport, deterministic, x, op, extra["dim"])
            checked = stamp is not None or tag is not None
            check = None if checked else channel.check("reduce_scatter", seq, x, op, **extra)
            check_of = (seq, x, extra["dim"])
            if _by_tessera(transport, name):
                scatter = (
                    algorithms.rd_reduce_scatter if name == "rd" else algorithms.ring_reduce_scatter
                )
                transfer = scatter(channel, front, op, rows, seq)
            elif tag is not None:
                transfer = mpi_transport.tagged_reduce_scatter(
                    channel, front, op, rows, tag, check_of
                )
            elif stamp:
                transfer = transport.reduce_scatter(channel, front, op, rows, stamp, check_of)
            elif deterministic:  # the rank-order sum, then this rank's block
                whole = transport.all_reduce(channel, front, op, True)
                first = sum(rows[: channel.index])
                last = first + rows[channel.index]
                transfer = then(whole, lambda total: total[first:last])
            else:
                transfer = transport.reduce_scatter(channel, front, op, rows)
        return seq, transfer, check, extra, name

    return _started(channel, "reduce_scatter", issue, transport, deliver, async_op, x, op)


def broadcast(
    x,
    axis: str | None = None,
    root: int = 0,
    *,
    mesh: Mesh | None = None,
    out=None,
    async_op: bool = False,
    algorithm: str | None = None,
):
    """The array of the axis member with index ``root``, on every member. ``algorithm``:
    "auto", "tree" or "library"."""
    if TRACED_COLLECTIVES and type(x) is not np.ndarray:  # in a traced function?
        kwargs = dict(root=root, mesh=mesh, out=out, async_op=async_op, algorithm=algorithm)
        traced = _traced("broadcast", x, axis, mesh, kwargs)
        if traced is not None:
            return traced
    axis = _axis_of(x, axis, mesh)
    if _is_sharded(x):
        return _sharded(
            x,
            x.layout,
            out,
            lambda local, o: broadcast(
                local, axis, root, mesh=x.mesh, out=o, async_op=async_op, algorithm=algorithm
            ),
        )
    x, out, back = _caller_kind(x, out)
    x = _local(x)
    channel = current_mesh(mesh).channel(axis)
    if not 0 <= root < channel.size:
        raise TesseraError(f"root={root} is not an index on axis {axis!r} (size {channel.size})")
    transport = _transport(x)

    def issue(again: bool = False):
        name, k = _algorithm("broadcast", algorithm, channel, transport, x)
        with ISSUE_LOCK:
            extra = dict(root=root, backend=transport.NAME)
            if _by_tessera(transport, name):
                extra["algorithm"] = name
            seq = channel.begin("broadcast", x, **extra)
            if seq in channel.failed:  # an injected failure: nothing goes out
                return seq, NOT_STARTED, None, extra, name
            roots, channel.roots = channel.roots, hash((channel.roots, root))
            header = None
            if type(x) is np.ndarray and transport is mpi_transport and name == "library":
                header = channel.header(x, root, seq, roots)  # in front of the data
            check = None if header is not None else channel.check("broadcast", seq, x, **extra)
            if _by_tessera(transport, name):
                transfer = algorithms.tree_broadcast(channel, x, root, seq, k)
            elif header is not None:
                transfer = transport.broadcast(channel, x, root, header, seq)
            else:
                transfer = transport.broadcast(channel, x, root)
        return seq, transfer, check, extra, name

    return _started(
        channel, "broadcast", issue, transport, back(_deliver_to(out)), async_op, x, None
    )


def barrier(axis: str | None = None, *, mesh: Mesh | None = None) -> None:
    """Wait for every rank of the axis (or of the whole world with no axis)."""
    channel = world_channel() if axis is None else current_mesh(mesh).channel(axis)

    def issue(again: bool = False):
        with ISSUE_LOCK:
            seq = channel.begin("barrier", None)
            if seq in channel.failed:  # an injected failure: nothing goes out
                return seq, NOT_STARTED, None, {}, "library"
            check = channel.check("barrier", seq, None)
            transfer = mpi_transport.barrier(channel)
        return seq, transfer, check, {}, "library"

    _started(channel, "barrier", issue, mpi_transport, lambda _: None, False, None)


# Who takes a collective called on a traced tensor of the operator layer (inside
# ``tessera.jit``): tessera/ops/collective_nodes.py registers itself here (this layer sits
# below the operator layer and knows nothing of it).
TRACED_COLLECTIVES: list = []


def _traced(kind: str, x, axis: str | None, mesh: Mesh | None, kwargs: dict):
    """The traced result when ``x`` is a tensor of a traced function, else None."""
    if not hasattr(x, "tracer"):
        return None
    the_mesh = current_mesh(mesh)
    name = the_mesh.axis_name(axis)
    channel = the_mesh.channel(name)
    for record in TRACED_COLLECTIVES:
        found = record(kind, x, name, channel.size, channel.index, kwargs)
        if found is not None:
            return found
    return None


def _axis_of(x, axis: str | None, mesh: Mesh | None) -> str:
    """The axis a collective runs over: ``axis``, or the mesh's only one when it is None."""
    return (x.mesh if _is_sharded(x) else current_mesh(mesh)).axis_name(axis)


def _is_sharded(x) -> bool:
    """A sharded tensor (mesh/tensor.py, which builds on this module: it is recognised by
    what it has, not imported)."""
    return hasattr(x, "layout") and hasattr(x, "local") and hasattr(x, "with_local")


def _sharded(t, layout: ShardSpec, out, collective):
    """Run ``collective`` on ``t``'s local block; wrap the result in a sharded tensor."""
    if out is not None and not _is_sharded(out):
        raise TesseraError("out= of a collective on a sharded tensor must be a sharded tensor")
    result = collective(t.local, None if out is None else out.local)

    def wrap(local):
        return out if out is not None else t.with_local(layout, local)

    if isinstance(result, Work):
        inner = result._deliver
        result._deliver = lambda data: wrap(inner(data))
        return result
    return wrap(result)


def _split_dim(t, axis: str, kind: str) -> int:
    for d, a in zip(t.layout.partition, t.layout.mesh_axes):
        if a == axis:
            return d
    raise TesseraError(f"{kind}: the tensor is not split over axis '{axis}' ({t.layout})")


def _whole_on(t, axis: str, kind: str) -> None:
    if axis in t.layout.mesh_axes:
        raise TesseraError(
            f"{kind} over axis '{axis}' needs a tensor that is whole on that axis, but this "
            f"one is split over it ({t.layout}); all_gather it first"
        )


def _without(layout: ShardSpec, axis: str) -> ShardSpec:
    pairs = [(d, a) for d, a in zip(layout.partition, layout.mesh_axes) if a != axis]
    return ShardSpec(tuple(d for d, _ in pairs), tuple(a for _, a in pairs))
