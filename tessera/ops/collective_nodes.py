"""Collectives inside a traced function (``tessera.jit``, ``@graph.module``).

``dist.all_reduce(t, axis="dp")`` (or ``all_gather``, ``reduce_scatter``, ``broadcast``,
``all_to_all``) on
a traced tensor records a ``collective`` node: its input the tensor, its attributes the
collective and its arguments, its shape the result's (an all_gather's blocks are taken to
be of equal length: a rank whose result differs at run time gets the collective's error).
At run time (plan.py) the collective runs on the input's buffer into a buffer of the
graph's own, with every check and deadline of an eager call; a captured step's replays
(capture/replay.py) repeat it in its place among the recorded launches (on the CPU and
under the simulator, which replay launch by launch).
"""

from __future__ import annotations

from ..mesh import collectives, exchange
from .ir import Node
from .tensor import Tensor, current, user_loc

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def record(kind: str, x, axis: str, size: int, index: int, kwargs: dict):
    """The traced result of collective ``kind`` on tensor ``x`` over ``axis`` (of ``size``
    members, this one at ``index``), or None when ``x`` is no traced tensor."""
    if not isinstance(x, Tensor):
        return None
    tracer = x.tracer
    if current() is not tracer:
        raise tracer.fail(kind, "a tensor of a traced function that is not being traced")
    if kwargs.get("async_op"):
        raise tracer.fail(kind, "async_op=True inside a traced function: the graph orders it")
    if kwargs.get("out") is not None:
        raise tracer.fail(kind, "out= inside a traced function: use the returned tensor")
    shape = list(x.shape)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        dim = kwargs.get("dim", 0)
        if not -len(shape) <= dim < len(shape):
            raise tracer.fail(kind, f"dim={dim} is not a dim of a {len(shape)}-d tensor")
        dim %= len(shape)
        if kind == "all_gather":
            shape[dim] *= size
        elif kind == "all_to_all":  # blocks exchanged: the shape stays
            if shape[dim] % size:
                raise tracer.fail(
                    kind, f"dim {dim} of {tuple(shape)} does not split into {size} equal blocks"
                )
        else:  # this member's block of numpy.array_split
            shape[dim] = shape[dim] // size + (1 if index < shape[dim] % size else 0)
        kwargs = {**kwargs, "dim": dim}
    kwargs = {k: v for k, v in kwargs.items() if k not in ("out", "async_op")}
    attrs = {"kind": kind, "axis": axis, "kwargs": kwargs}
    node = Node("collective", (x.value,), attrs, tuple(shape), x.dtype, user_loc())
    return Tensor(tracer, tracer.graph.add(node))


def run(node: Node, env: dict, memory) -> object:
    """Run a recorded collective into a new buffer; the step that repeats it (a replay's)."""
    source = env[id(node.inputs[0])]
    out = memory.empty(node.shape, node.dtype.np_dtype)
    call = getattr(
        exchange if node.attrs["kind"] == "all_to_all" else collectives, node.attrs["kind"]
    )
    axis, kwargs = node.attrs["axis"], node.attrs["kwargs"]

    def step() -> None:
        call(source, axis, out=out, **kwargs)

    step()
    env[id(node)] = out
    return step


collectives.TRACED_COLLECTIVES.append(record)
