"""Running a lowered graph: buffers for the values groups store, one launch per kernel.

Arguments are NumPy arrays (made C-contiguous; a copy only when they are not). Stored
values get fresh arrays; a reshape is a view of its input's buffer. A ``@graph.kernel``
output goes straight into the argument it is assigned to when that argument is
contiguous and no kernel reads it; otherwise it is computed aside and copied in at the
end (the kernels never read and write one buffer through different indices).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..config import get as setting
from ..errors import TesseraError
from ..kernel import stream_scope as streams
from ..kernel.targets import resolve
from .ir import Const, Input, Node
from .passes import Lowered


def run(lowered: Lowered, arrays: list[np.ndarray]) -> list[np.ndarray]:
    graph = lowered.graph
    arrays = list(arrays) + graph.captured
    env: dict[int, np.ndarray] = {}
    for inp, a in zip(graph.inputs, arrays):
        env[id(inp)] = np.ascontiguousarray(a)
    read = {id(v) for g in lowered.groups for v in g.inputs()}
    direct: dict[int, np.ndarray] = {}
    for out, index in graph.written.items():
        value, target = graph.outputs[out], arrays[index]
        if (
            isinstance(value, Node)
            and target.flags.c_contiguous
            and id(graph.inputs[index]) not in read
        ):
            direct[id(value)] = target
    with _stream_scope(arrays):
        _launch(lowered, env, direct)
    results = []
    for i, value in enumerate(graph.outputs):
        if isinstance(value, Const):
            results.append(np.full((), value.value))
            continue
        array = env[id(value)]
        if i in graph.written and array is not arrays[graph.written[i]]:
            np.copyto(arrays[graph.written[i]], array)
            array = arrays[graph.written[i]]
        results.append(array)
    return results


def _launch(lowered: Lowered, env: dict, direct: dict) -> None:
    """One launch per kernel, in the groups' order, filling ``env`` with stored values."""
    for group, source, kernel in zip(lowered.groups, lowered.sources, lowered.kernels):
        if source is None:  # a reshape: a view
            node = group.head
            env[id(node)] = env[id(node.inputs[0])].reshape(node.shape)
            continue
        for node in group.outputs:
            buffer = direct.get(id(node))
            if buffer is None:
                buffer = np.empty(node.shape, node.dtype.np_dtype)
            env[id(node)] = buffer
        args = []
        for a in source.args:
            array = env[id(a.value)]
            args.append(array.reshape(-1) if a.flat else array.reshape(-1, array.shape[-1]))
        kernel[source.grid](*args)


def _stream_scope(arrays: list[np.ndarray]):
    """The target's scope for ``graph.stream``'s current stream (or nothing)."""
    name = streams.current()
    if name is None:
        return contextlib.nullcontext()
    return resolve(setting("target"), tuple(arrays), "graph.stream").stream_scope(name)


def host_arrays(name: str, args: tuple) -> list[np.ndarray]:
    """The arguments as NumPy arrays (lists are converted; others are an error)."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.append(np.asarray(a))
        else:
            raise TesseraError(
                f"{name}: argument {i} is a {type(a).__name__}; the operator layer takes "
                "NumPy arrays (device arrays are not supported by ops yet, see docs/ops.md)"
            )
    return out


__all__ = ["Input", "run", "host_arrays"]
