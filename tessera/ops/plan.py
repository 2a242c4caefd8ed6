"""Running a lowered graph: buffers for the values groups store, one launch per kernel.

Arguments are NumPy arrays (made C-contiguous; a copy only when they are not) or device
arrays (then every buffer is a device array of the target that runs them, and arrays a
module captured are copied there). Stored values get fresh arrays; a reshape is a view of
its input's buffer. A ``@graph.kernel``
output goes straight into the argument it is assigned to when that argument is
contiguous and no kernel reads it; otherwise it is computed aside and copied in at the
end (the kernels never read and write one buffer through different indices).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..arrays import is_device_array
from ..config import get as setting
from ..errors import TesseraError
from ..kernel import stream_scope as streams
from ..kernel.targets import resolve
from .ir import Const, Input, Node
from .passes import Lowered


def run(lowered: Lowered, arrays: list) -> list:
    graph = lowered.graph
    memory = _memory(arrays)
    arrays = list(arrays) + [memory.from_host(c) for c in graph.captured]
    env: dict[int, object] = {}
    for inp, a in zip(graph.inputs, arrays):
        env[id(inp)] = np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a
    read = {id(v) for g in lowered.groups for v in g.inputs()}
    direct: dict[int, object] = {}
    for out, index in graph.written.items():
        value, target = graph.outputs[out], arrays[index]
        if isinstance(value, Node) and c_contiguous(target) and id(graph.inputs[index]) not in read:
            direct[id(value)] = target
    with _stream_scope(arrays):
        _launch(lowered, env, direct, memory)
    results = []
    for i, value in enumerate(graph.outputs):
        if isinstance(value, Const):
            results.append(memory.from_host(np.full((), value.value)))
            continue
        array = env[id(value)]
        if i in graph.written and array is not arrays[graph.written[i]]:
            arrays[graph.written[i]][...] = array
            array = arrays[graph.written[i]]
        results.append(array)
    return results


def _launch(lowered: Lowered, env: dict, direct: dict, memory) -> None:
    """One launch per kernel, in the groups' order, filling ``env`` with stored values."""
    for group, source, kernel in zip(lowered.groups, lowered.sources, lowered.kernels):
        if source is None:  # a reshape: a view
            node = group.head
            env[id(node)] = env[id(node.inputs[0])].reshape(node.shape)
            continue
        for node in group.outputs:
            buffer = direct.get(id(node))
            if buffer is None:
                buffer = memory.empty(node.shape, node.dtype.np_dtype)
            env[id(node)] = buffer
        args = []
        for a in source.args:
            array = env[id(a.value)]
            args.append(array.reshape(-1) if a.flat else array.reshape(-1, a.value.shape[-1]))
        kernel[source.grid](*args)


def _memory(arrays: list):
    """Where the graph's buffers live: beside device arrays, the target that runs them
    makes them (``Target.empty``); beside host arrays, NumPy."""
    if any(is_device_array(a) for a in arrays):
        return resolve(setting("target"), tuple(arrays), "the operator layer")
    return _HOST


class _Host:
    empty = staticmethod(np.empty)
    from_host = staticmethod(lambda a: a)


_HOST = _Host()


def c_contiguous(a) -> bool:
    """Whether ``a`` (a NumPy or device array) is laid out row-major without gaps."""
    if isinstance(a, np.ndarray):
        return bool(a.flags.c_contiguous)
    expected = a.dtype.itemsize
    for n, stride in zip(reversed(a.shape), reversed(a.strides)):
        if n != 1 and stride != expected:
            return False
        expected *= n
    return True


def _stream_scope(arrays: list[np.ndarray]):
    """The target's scope for ``graph.stream``'s current stream (or nothing)."""
    name = streams.current()
    if name is None:
        return contextlib.nullcontext()
    return resolve(setting("target"), tuple(arrays), "graph.stream").stream_scope(name)


def operands(name: str, args: tuple) -> list:
    """The arguments as arrays: NumPy arrays (lists are converted) or device arrays
    (all of one kind; device arrays row-major without gaps)."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray) or is_device_array(a):
            out.append(a)
        elif isinstance(a, (list, tuple, np.generic)):
            out.append(np.asarray(a))
        else:
            raise TesseraError(
                f"{name}: argument {i} is a {type(a).__name__}; the operator layer takes "
                "NumPy arrays or device arrays (a sharded tensor: pass its .local)"
            )
    kinds = {is_device_array(a) for a in out}
    if len(kinds) > 1:
        raise TesseraError(f"{name}: the arguments mix host and device arrays; copy one side")
    for i, a in enumerate(out):
        if is_device_array(a) and not c_contiguous(a):
            raise TesseraError(f"{name}: device array argument {i} is not contiguous")
    return out


__all__ = ["Input", "c_contiguous", "operands", "run"]
