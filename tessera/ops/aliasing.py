"""The caller's arrays in a graph run: which overlap, which may be written, and which
``@graph.kernel`` outputs the kernels may write straight into.

The rule (docs/ops.md, "Arguments, aliasing and failures"): every read sees the arguments
as they were passed and every write lands in program order, as if each input were read
before any output is written (NumPy's rule for overlapping ``out=``). An output goes
straight into its argument only where that is provably the same: its kernel is the last
launch (so a failure before it leaves every argument untouched), no other output
overlaps it, and no kernel reads memory it overlaps after it is written — the one
exception being an elementwise kernel reading the very same view at the element it
writes (``x[:] = x * 2``), where each lane loads its element before storing it.
Overlap is decided by byte ranges: ``__array_interface__`` on the host,
``__cuda_array_interface__`` on the device; an array whose memory cannot be located is
taken to overlap everything.
"""

from __future__ import annotations

import numpy as np

from ..arrays import device_dtype
from ..errors import TesseraError
from .ir import Input, Node, Value

_NOWHERE = (0, 0)


def _interface(a) -> dict | None:
    if isinstance(a, np.ndarray):
        return a.__array_interface__
    try:
        face = getattr(a, "__cuda_array_interface__", None)
    except Exception:  # an interface that raises: treated as unknown memory
        return None
    if face is None and isinstance(getattr(a, "_ary", None), np.ndarray):
        return a._ary.__array_interface__  # numba-cuda's simulator: a host array inside
    return face


def extent(a) -> tuple[int, int] | None:
    """The byte range ``[lo, hi)`` ``a``'s elements span; None where it is unknown."""
    face = _interface(a)
    if face is None:
        return None
    shape = tuple(int(n) for n in face["shape"])
    if any(n == 0 for n in shape):
        return _NOWHERE
    itemsize = np.dtype(face["typestr"]).itemsize
    strides = face.get("strides")
    if strides is None:  # row-major without gaps
        strides, step = [], itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    lo = hi = int(face["data"][0])
    for n, s in zip(shape, strides):
        (lo, hi) = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
    return lo, hi + itemsize


def overlap(a, b) -> bool:
    """Whether ``a`` and ``b`` may share memory (by their byte ranges)."""
    ea, eb = extent(a), extent(b)
    if ea is None or eb is None:
        return True
    return ea[0] < eb[1] and eb[0] < ea[1] and ea != _NOWHERE and eb != _NOWHERE


def same_view(a, b) -> bool:
    """Whether ``a`` and ``b`` are the same row-major elements of one memory."""
    fa, fb = _interface(a), _interface(b)
    if fa is None or fb is None:
        return False
    return (
        fa["data"][0] == fb["data"][0]
        and np.dtype(fa["typestr"]).itemsize == np.dtype(fb["typestr"]).itemsize
        and int(np.prod(fa["shape"])) == int(np.prod(fb["shape"]))
        and _row_major(a)
        and _row_major(b)
    )


def c_contiguous(a) -> bool:
    """Whether ``a`` (a NumPy or device array) is laid out row-major without gaps."""
    if isinstance(a, np.ndarray):
        return bool(a.flags.c_contiguous)
    if 0 in tuple(a.shape):  # no element: any strides will do, as NumPy's flags say
        return True
    expected = a.dtype.itemsize
    for n, stride in zip(reversed(a.shape), reversed(a.strides)):
        if n != 1 and stride != expected:
            return False
        expected *= n
    return True


def _row_major(a) -> bool:
    return c_contiguous(a)


def writable(a) -> bool:
    if isinstance(a, np.ndarray):
        return bool(a.flags.writeable)
    face = _interface(a)
    return not (face is not None and len(face.get("data", ())) > 1 and face["data"][1])


def check_writable(graph, arrays: list) -> None:
    """Refuse a read-only argument a ``@graph.kernel`` (or a ``mut`` parameter) writes,
    before anything runs."""
    for index in sorted(set(graph.written.values())):
        if not writable(arrays[index]):
            raise TesseraError(
                f"graph '{graph.name}': argument '{graph.inputs[index].name}' is assigned "
                "but the array passed is read-only; nothing was written"
            )


def root(value: Value) -> Value:
    """The value whose buffer ``value`` is a view of (through reshapes)."""
    while isinstance(value, Node) and value.op == "reshape":
        value = value.inputs[0]
    return value


def direct_outputs(lowered, arrays: list, env: dict) -> dict[int, object]:
    """``{id(output value): argument}`` for the outputs written straight into their
    argument by the kernel that computes them (the others are computed aside and copied
    in at the end, in program order)."""
    graph, groups = lowered.graph, lowered.groups
    kernels = [k for k, s in enumerate(lowered.sources) if s is not None]
    if not graph.written or not kernels:
        return {}
    last = kernels[-1]
    reads = []  # (group index or None for "at the end", value read, its argument)
    for k, g in enumerate(groups):
        if lowered.sources[k] is None and g.kind != "fft":  # a view: its readers read
            continue  # its argument
        at = k if g.kind != "fft" or k < last else None  # (a transform after: at the end)
        for v in g.inputs():
            if isinstance(root(v), Input):
                reads.append((at, v, env[id(root(v))]))
    for value in graph.outputs:
        if isinstance(root(value), Input):
            reads.append((None, value, env[id(root(value))]))
    direct: dict[int, object] = {}
    for out, index in graph.written.items():
        value, target = graph.outputs[out], arrays[index]
        if not isinstance(value, Node) or value not in groups[last].outputs:
            continue
        if not _row_major(target) or any(
            o != out and overlap(target, arrays[i]) for o, i in graph.written.items()
        ):
            continue
        if all(_read_first(groups[last], last, k, v, a, target) for k, v, a in reads):
            direct[id(value)] = target
    return direct


def _read_first(group, last: int, k, value: Value, array, target) -> bool:
    """Whether a read of ``array`` (as ``value``, by group ``k``) is safe with ``target``
    written by the last group."""
    if not overlap(array, target):
        return True
    if k is None:  # read at the end: a result, or a value copied into an argument
        return False
    if k < last:
        return True
    return (
        group.kind == "elementwise"
        and isinstance(value, Input)
        and value.shape == group.shape
        and same_view(array, target)
    )


def private_copy(memory, a):
    """A copy of ``a`` in fresh memory of its kind (``memory`` makes device buffers)."""
    if isinstance(a, np.ndarray):
        return a.copy()
    buffer = memory.empty(tuple(int(n) for n in a.shape), device_dtype(a))
    assign(buffer, a, memory)
    return buffer


def assign(target, source, memory=None) -> None:
    """``target[...] = source``, for every array kind: numba-cuda's device arrays take no
    ``...`` index; they are copied by ``memory`` (the target whose memory they are in:
    ``Target.copy``, one asynchronous copy on CUDA) or else by ``copy_to_device``."""
    if not isinstance(target, np.ndarray) and hasattr(target, "copy_to_device"):
        copy = getattr(memory, "copy", None)
        if copy is not None:
            copy(target, source)
        else:
            target.copy_to_device(source)
    else:
        target[...] = source


__all__ = [
    "assign",
    "check_writable",
    "direct_outputs",
    "extent",
    "overlap",
    "private_copy",
    "writable",
]
