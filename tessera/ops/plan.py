"""Running a lowered graph: buffers for the values groups store, one launch per kernel.

Arguments are NumPy arrays (made C-contiguous; a copy only when they are not) or device
arrays (then every buffer is a device array of the target that runs them, and arrays a
module captured are copied there). Stored values get fresh arrays; a reshape is a view of
its input's buffer. A ``@graph.kernel``
output goes straight into the argument it is assigned to where aliasing.py proves that
the same as reading every input first; otherwise it is computed aside and copied in at
the end, in program order (the kernels never read and write one buffer through
different indices). A read-only argument that is assigned is refused before anything runs.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from ..arrays import is_device_array, numba_array
from ..config import get as setting
from ..errors import TesseraError
from ..kernel import stream_scope as streams
from ..kernel.targets import DEVICE_CHOICE, resolve
from . import aliasing, collective_nodes, fft_core, kinds, launches, recording
from .aliasing import c_contiguous
from .compile_ahead import compile_ahead
from .declare import OPS
from .ir import Const, Input
from .passes import Lowered


def run(
    lowered: Lowered, arrays: list, fresh: bool = False, watch: dict | None = None, between=None
) -> list:
    """Launch ``lowered`` on ``arrays``; the graph's outputs, written into the arguments
    they are assigned to (aliasing.py: as if every input were read before any output is
    written). ``fresh``: no result is (a view of) an argument. ``watch``: {id(node):
    fn(array)}, each called once its node's value is stored (a value no kernel stores, an
    input, at the end); ``between()`` is called after each kernel."""
    graph = lowered.graph
    if not (graph.written or graph.captured or graph.after or fresh or watch or between):
        if streams.current() is None:  # (an op's call: nothing but the launches)
            return _run_plain(lowered, arrays)
    results, finish = start(lowered, arrays, fresh, watch, between)
    finish.run()
    return results


def _run_plain(lowered: Lowered, arrays: list) -> list:
    """:func:`run` of a graph that assigns no argument, captures no array and has no host
    step, outside any ``graph.stream`` (what :func:`start` does for it, less the rest)."""
    graph = lowered.graph
    buffers = memory(arrays)
    env: dict[int, object] = {}
    for inp, a in zip(graph.inputs, arrays):
        env[id(inp)] = np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a
    _launch(lowered, env, _NONE, buffers, _NONE)
    return [
        buffers.from_host(np.full((), value.value)) if isinstance(value, Const) else env[id(value)]
        for value in graph.outputs
    ]


_NONE: dict = {}  # (read, never written)


@dataclasses.dataclass
class Finish:
    """What a run does after its launches: outputs computed aside copied into the
    arguments they are assigned to, each read first (privately where it overlaps one)."""

    buffers: object  # where the graph's buffers live (:func:`memory`)
    writes: list  # (argument, value, whether the value is copied aside first)
    after: list = dataclasses.field(default_factory=list)  # the graph's host steps

    def run(self) -> None:
        pending = [
            (t, aliasing.private_copy(self.buffers, a) if private else a)
            for t, a, private in self.writes
        ]
        for target, array in pending:  # every value is read before any output is written
            aliasing.assign(target, array, self.buffers)
        for step in self.after:  # a Generator's advance: once its kernels have read it
            step()


def start(
    lowered: Lowered, arrays: list, fresh: bool = False, watch: dict | None = None, between=None
) -> tuple[list, Finish]:
    """:func:`run` but its last step, which it returns (``tessera.jit`` replays it)."""
    graph = lowered.graph
    buffers = memory(arrays)
    arrays = list(arrays)
    if graph.captured:
        arrays += [buffers.from_host(c) for c in graph.captured]
    env: dict[int, object] = {}
    for inp, a in zip(graph.inputs, arrays):
        env[id(inp)] = np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a
    direct = {}
    if graph.written:  # (an op, and most modules, assign no argument)
        aliasing.check_writable(graph, arrays)
        direct = aliasing.direct_outputs(lowered, arrays, env)
    if streams.current() is None:
        _launch(lowered, env, direct, buffers, watch or {}, between)
    else:
        with _stream_scope(arrays):
            _launch(lowered, env, direct, buffers, watch or {}, between)
    for key, fn in list((watch or {}).items()):  # values no kernel stored (inputs)
        if key in env:
            fn(env[key])
    results, writes = [], []
    for i, value in enumerate(graph.outputs):
        if isinstance(value, Const):
            results.append(buffers.from_host(np.full((), value.value)))
            continue
        array = env[id(value)]
        if i in graph.written:
            target = arrays[graph.written[i]]
            if array is not target:
                writes.append((target, array))
            array = target
        elif fresh and any(aliasing.overlap(array, a) for a in arrays):
            array = aliasing.private_copy(buffers, array)
        results.append(array)
    targets = [arrays[index] for index in graph.written.values()]
    steps = [(t, a, _overlaps(a, targets)) for t, a in writes]
    return results, Finish(buffers, steps, list(graph.after))


def _launch(lowered: Lowered, env: dict, direct: dict, memory, watch: dict, between=None) -> None:
    """One launch per kernel, in the groups' order, filling ``env`` with stored values
    (and calling ``watch``'s functions as theirs are stored, ``between()`` after each)."""
    calls = lowered.calls
    if calls is None:  # the first run: its kernels compiled side by side (compile_ahead.py)
        calls = _calls(lowered)
        compile_ahead(lowered, calls, env, None if memory is _HOST else memory)
        lowered.calls = calls
    else:
        for c, k in zip(calls, lowered.kernels):
            if c is not None and c[0] is not k:  # (again for a kernel replaced since)
                calls = lowered.calls = _calls(lowered)
                break
    for group, source, call in zip(lowered.groups, lowered.sources, calls):
        _stored(group, source, env, memory, call, direct)
        if watch:
            for node in group.outputs if source is not None else [group.head]:
                fn = watch.pop(id(node), None)
                if fn is not None and id(node) in env:
                    fn(env[id(node)])
        if between is not None:
            between()


def _calls(lowered: Lowered) -> list:
    """Per group, what running it takes, worked out once per lowered graph: its kernel,
    that kernel launched over its grid (``kernel[grid]``), and for each argument the value
    it reads and the shape the kernel takes it in; None for a group without a kernel."""
    calls = []
    for source, kernel in zip(lowered.sources, lowered.kernels):
        if source is None:
            calls.append(None)
            continue
        args = tuple((id(a.value), _concrete_shape(a)) for a in source.args)
        calls.append((kernel, kernel[source.grid], args))
    return calls


def _concrete_shape(a) -> tuple[int, ...]:
    """:func:`argument_shape` with the flat shape's -1 worked out."""
    shape = tuple(a.value.shape)
    if not a.flat:
        return _matrix(shape)
    count = 1
    for n in shape:
        count *= n
    return (count,)


def _stored(group, source, env: dict, memory, call, direct: dict) -> None:
    """Run one group: its kernel's launch, or the view, launch or collective it stands for."""
    if source is None:  # a reshape (a view), or a @kernel launched by the user
        node = group.head
        if node.op == "launch":
            launches.run(node, env)
        elif node.op == "collective":
            step = collective_nodes.run(node, env, memory)
            recording.host_step(node.attrs["kind"], step)
        elif node.op == "launch_result":
            launches.result(node, env)
        elif OPS[node.op].kind == "fft":
            env[id(node)] = fft_core.node_result(node, env[id(node.inputs[0])], memory)
        else:
            env[id(node)] = env[id(node.inputs[0])].reshape(node.shape)
        return
    for node in group.outputs:
        buffer = direct.get(id(node))
        if buffer is None:
            buffer = memory.empty(node.shape, node.dtype.np_dtype)
        env[id(node)] = buffer
    _, launch, shapes = call
    launch(*[reshaped(env[key], shape) for key, shape in shapes])


def reshaped(array, shape: tuple[int, ...]):
    """``array.reshape(shape)`` (``array`` row-major without gaps, as every buffer of a
    run is): the array itself when it has that shape; a numba-cuda device array's view
    made directly, as its ``reshape`` makes it, without working the layout out again
    (arrays.numba_array; the view's strides worked out once per layout)."""
    if array.shape == shape:
        return array
    cls = type(array)
    if cls.__name__ == "DeviceNDArray" and cls.__module__.startswith("numba"):
        dtype = array.dtype
        key = (array.shape, array.strides, dtype.itemsize, shape)
        strides = _VIEW_STRIDES.get(key)
        if strides is None:
            strides = _view_strides(*key)
        if strides:
            return numba_array(cls, shape, strides, dtype, array.gpu_data)
    return array.reshape(shape)


_VIEW_STRIDES: dict = {}  # (shape, strides, itemsize, new shape) → the view's, or ()


def _view_strides(shape, strides, itemsize: int, to: tuple[int, ...]) -> tuple[int, ...]:
    """A row-major view's strides in shape ``to`` of an array of ``shape`` and
    ``strides``; () where the array is not row-major as numba-cuda's reshape checks it."""
    view = _c_strides(to, itemsize) if strides == _c_strides(shape, itemsize) else ()
    if len(_VIEW_STRIDES) >= 4096:
        _VIEW_STRIDES.clear()
    _VIEW_STRIDES[shape, strides, itemsize, to] = view
    return view


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Row-major byte strides as numba-cuda's ``reshape`` gives a contiguous array's."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def argument_shape(a) -> tuple[int, ...]:
    """The shape a generated kernel takes argument ``a`` (codegen.Arg) in: flat, or a
    matrix."""
    return (-1,) if a.flat else _matrix(a.value.shape)


def _matrix(shape: tuple[int, ...]) -> tuple[int, int]:
    """``shape`` as a matrix, its leading dims folded into the rows (empty ones too)."""
    rows = 1
    for n in shape[:-1]:
        rows *= n
    return rows, shape[-1]


def _overlaps(array, others: list) -> bool:
    return any(aliasing.overlap(array, other) for other in others)


def memory(arrays: list):
    """Where the graph's buffers live: beside device arrays, the target that runs them
    makes them (``Target.empty``); beside host arrays, NumPy. (An op's operands say
    where each array is: ``Operands.placed``.)"""
    placed = getattr(arrays, "placed", None)
    if placed is None:
        placed = [is_device_array(a) for a in arrays]
    if any(placed):
        name = setting("target")
        target = DEVICE_CHOICE.get(name)  # a device array: the target that takes them
        return target if target is not None else resolve(name, tuple(arrays), "the operator layer")
    return _HOST


class _Host:
    empty = staticmethod(np.empty)
    from_host = staticmethod(lambda a: a)


_HOST = _Host()


def _stream_scope(arrays: list[np.ndarray]):
    """The target's scope for ``graph.stream``'s current stream (or nothing)."""
    name = streams.current()
    if name is None:
        return contextlib.nullcontext()
    return resolve(setting("target"), tuple(arrays), "graph.stream").stream_scope(name)


def operands(name: str, args: tuple) -> kinds.Operands:
    """The arguments as arrays (kinds.py: NumPy arrays, views of other libraries' host
    tensors, device arrays), all on the host or all on a device, device arrays
    row-major without gaps; ``.kind`` says what the results go back as."""
    out = kinds.operands(name, args)
    placed = out.placed
    if True in placed:
        if False in placed:
            raise TesseraError(f"{name}: the arguments mix host and device arrays; copy one side")
        for i, a in enumerate(out):
            layout = (a.shape, a.strides, a.dtype.itemsize)
            row_major = _ROW_MAJOR.get(layout)
            if row_major is None:
                row_major = _row_major(layout, a)
            if not row_major:
                raise TesseraError(f"{name}: device array argument {i} is not contiguous")
    return out


_ROW_MAJOR: dict = {}  # (shape, strides, itemsize) of device arrays → c_contiguous


def _row_major(layout: tuple, a) -> bool:
    row_major = c_contiguous(a)
    if len(_ROW_MAJOR) >= 4096:
        _ROW_MAJOR.clear()
    _ROW_MAJOR[layout] = row_major
    return row_major


__all__ = ["Finish", "Input", "c_contiguous", "memory", "operands", "run", "start"]
