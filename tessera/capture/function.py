"""``tessera.jit``: a traced step, run eagerly or captured and replayed
(docs/capture.md).

A jit function is traced as ``@graph.module`` is (one graph per key: argument shapes,
dtypes, target, ``static_argnums`` values), may assign into its arguments (``a[:] = e``)
and call ``graph.grad``/``value_and_grad``. With ``capture_graph`` its first ``warmup``
calls of a key run eagerly (tracing, compiling, loading every kernel), the next one is
captured (capture.py) and the later ones replay the capture.
"""

from __future__ import annotations

import collections
import inspect
import threading
import warnings

import numpy as np

from ..arrays import is_device_array
from ..config import get as setting
from ..errors import CaptureError, CaptureWarning, TesseraError
from ..kernel.targets import resolve
from ..observe import observers
from ..observe.tracebacks import entry_point
from ..ops import plan
from ..ops.kinds import give_back_all
from ..ops.module import Module, shape_of
from . import replay as capture

OUTPUTS = ("copy", "static")
SHAPES = ("recapture", "fixed")


class _Entry:
    """What one key of a jit function has: its calls so far and its captured graph."""

    def __init__(self) -> None:
        self.calls = 0
        self.graph: capture.Graph | None = None
        self.eager = False  # its capture failed: it runs eagerly from now on


class JitFunction(Module):
    """A function of arrays traced, fused and run as a graph; captured and replayed with
    ``capture_graph``. Call it like the function."""

    def __init__(self, fn, capture_graph, warmup, outputs, shapes, max_graphs, static_argnums):
        super().__init__(fn)
        self.capture_graph = capture_graph
        self.warmup = warmup
        self.outputs = outputs
        self.shapes = shapes
        self.max_graphs = max_graphs
        self.static_argnums = tuple(static_argnums)
        self._entries: collections.OrderedDict = collections.OrderedDict()  # key → _Entry
        self._bound: dict = {}  # static_argnums values → the JitFunction they fix
        self._entries_lock = threading.Lock()
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"<tessera.jit {self.name} capture_graph={self.capture_graph!r}>"

    # ------------------------------------------------------------------ tracing
    def _tracer(self, arrays):
        tracer = super()._tracer(arrays)
        tracer.writable = set(self._names(arrays))  # a step may write any argument
        tracer.capturing = bool(self.capture_graph)  # an int-seeded dropout warns
        return tracer

    def _split(self, args: tuple) -> tuple[tuple, tuple]:
        """(the array arguments, the values of ``static_argnums``)."""
        fixed = {i % max(len(args), 1) for i in self.static_argnums}
        statics = tuple(args[i] for i in sorted(fixed) if i < len(args))
        arrays = tuple(a for i, a in enumerate(args) if i not in fixed)
        return arrays, statics

    # ------------------------------------------------------------------ calls
    @entry_point
    def __call__(self, *args):
        arrays, statics = self._split(args)
        if statics:
            return self._with_statics(statics)(*arrays)
        with observers.stage("graph module", self.name):
            lowered, operands = self.lowered(arrays)
            results = self._run(lowered, operands)
        results = give_back_all(operands.kind, results)
        written = lowered.graph.written
        results = [r for i, r in enumerate(results) if i not in written]
        if not results:
            return None
        return tuple(results) if lowered.graph.returns_tuple else results[0]

    @entry_point
    def inspect(self, stage: str, *args, arch: str = "sm_90"):
        """``Module.inspect``, with ``static_argnums`` values among ``args`` as in a call."""
        arrays, statics = self._split(args)
        if statics:
            return self._with_statics(statics).inspect(stage, *arrays, arch=arch)
        return super().inspect(stage, *arrays, arch=arch)

    def _with_statics(self, statics: tuple) -> JitFunction:
        """The jit function of ``fn`` with its static arguments fixed (one per value)."""
        with self._entries_lock:
            made = self._bound.get(statics)
            if made is None:
                fixed = sorted(i % (len(statics) + len(self.params)) for i in self.static_argnums)
                fn = _bind_statics(self.fn, fixed, statics)
                made = JitFunction(
                    fn, self.capture_graph, self.warmup, self.outputs, self.shapes,
                    self.max_graphs, (),
                )  # fmt: skip
                made.name = self.name
                self._bound[statics] = made
        return made

    def _run(self, lowered, operands) -> list:
        target = resolve(setting("target"), tuple(operands), self.name)
        if not self.capture_graph or not target.replays:
            return plan.run(lowered, operands, fresh=True)
        key = (tuple((shape_of(a), a.dtype.str) for a in operands), target.name)
        entry = self._entry(key)
        entry.calls += 1
        if entry.graph is None and (entry.eager or entry.calls <= self.warmup):
            return plan.run(lowered, operands, fresh=True)
        if entry.graph is None:
            entry.graph = self._capture(entry, lowered, operands, target)
            if entry.graph is None:
                return plan.run(lowered, operands, fresh=True)
            outputs = entry.graph.outputs  # the capture call ran the step
        else:
            outputs = entry.graph.replay(self._names(operands), list(operands))
        return outputs if self.outputs == "static" else [_copy(o) for o in outputs]

    def _entry(self, key) -> _Entry:
        with self._entries_lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry
            graphs = list(self._entries)
            if graphs and self.shapes == "fixed":
                raise CaptureError(
                    f"tessera.jit '{self.name}': shapes='fixed', but this call's arguments "
                    f"({_describe(key)}) differ from the captured ones ({_describe(graphs[0])})"
                )
            if len(graphs) >= self.max_graphs:
                self._warn(
                    "max_graphs",
                    f"tessera.jit '{self.name}': more than max_graphs={self.max_graphs} "
                    "argument shapes; the least recently used graph is dropped (pad the "
                    "shapes to a few sizes to keep replaying)",
                )
                dropped = self._entries.pop(graphs[0])
                if dropped.graph is not None:
                    dropped.graph.close()
            entry = self._entries[key] = _Entry()
            return entry

    def _capture(self, entry: _Entry, lowered, operands, target) -> capture.Graph | None:
        if target.device_arrays and not all(_on_device(a) for a in operands):
            host = next(n for n, a in zip(self._names(operands), operands) if not _on_device(a))
            raise CaptureError(
                f"tessera.jit '{self.name}': parameter '{host}' is a host array; a captured "
                "CUDA step reads device memory: pass a device array or write into "
                f"{self.name}.inputs(...)['{host}']"
            )
        written = {self._names(operands)[i] for i in lowered.graph.written.values()}
        try:
            return capture.capture(
                self.name, lowered, self._names(operands), operands, written, target
            )
        except CaptureError as exc:
            if self.capture_graph == "strict":
                raise
            entry.eager = True
            self._warn(str(exc), f"{exc}; the step runs eagerly")
            return None

    def _names(self, operands) -> list[str]:
        names = list(self.params)
        if self.variadic is not None:
            names += [f"{self.variadic}{i}" for i in range(len(operands) - len(names))]
        return names

    def _warn(self, cause: str, message: str) -> None:
        if cause not in self._warned:
            self._warned.add(cause)
            warnings.warn(message, CaptureWarning, stacklevel=4)

    # ------------------------------------------------------------------ the public surface
    @entry_point
    def inputs(self, *args) -> dict:
        """The captured graph's static input buffers for these arguments, by parameter
        name: passing a buffer (after writing into it) skips that argument's copy."""
        arrays, statics = self._split(args)
        if statics:
            return self._with_statics(statics).inputs(*arrays)
        operands = plan.operands(self.name, arrays)
        target = resolve(setting("target"), tuple(operands), self.name)
        key = (tuple((shape_of(a), a.dtype.str) for a in operands), target.name)
        entry = self._entries.get(key)
        if entry is None or entry.graph is None:
            raise TesseraError(
                f"tessera.jit '{self.name}' has not captured these arguments yet (the "
                f"capture is call {self.warmup + 1} of a key)"
            )
        return dict(entry.graph.inputs)

    @property
    def graphs(self) -> dict:
        """Per key, what its captured graph holds: kernels, arena bytes, capture time."""
        out = {}
        for statics, bound in self._bound.items():
            out.update({(statics, k): v for k, v in bound.graphs.items()})
        for key, entry in self._entries.items():
            if entry.graph is not None:
                g = entry.graph
                out[key] = {
                    "kernels": list(g.kernels),
                    "arena_bytes": g.arena_bytes,
                    "capture_seconds": g.capture_seconds,
                    "device_graph": g.device is not None,  # replayed as one CUDA graph
                }
        return out

    def reset(self) -> None:
        """Forget every trace and capture: the next call warms up again."""
        with self._entries_lock:
            for entry in self._entries.values():
                if entry.graph is not None:
                    entry.graph.close()
            self._entries.clear()
            self._bound.clear()
        with self._lock:
            self._lowered.clear()


def _bind_statics(fn, fixed: list[int], statics: tuple):
    def bound(*arrays):
        args, it, values = [], iter(arrays), iter(statics)
        for i in range(len(arrays) + len(statics)):
            args.append(next(values) if i in fixed else next(it))
        return fn(*args)

    params = [p for i, p in enumerate(inspect.signature(fn).parameters.values()) if i not in fixed]
    bound.__signature__ = inspect.Signature(params)
    bound.__name__ = getattr(fn, "__name__", "jit")
    return bound


def _copy(a):
    """A new array of ``a``'s values, on the host or on the device as ``a`` is."""
    if is_device_array(a):
        memory = plan.memory([a])
        out = memory.empty(tuple(a.shape), a.dtype)
        memory.copy(out, a)  # (CUDA: pooled memory, one asynchronous copy)
        return out
    return np.array(a, copy=True)


def _on_device(a) -> bool:
    return is_device_array(a)


def _describe(key) -> str:
    shapes = key[0] if isinstance(key, tuple) and key and isinstance(key[0], tuple) else ()
    return ", ".join(f"{dtype}{list(shape)}" for shape, dtype in shapes) or "none"


def jit(
    fn=None,
    *,
    capture_graph=False,
    warmup=1,
    outputs="copy",
    shapes="recapture",
    max_graphs=8,
    static_argnums=(),
):
    """``@tessera.jit`` or ``@tessera.jit(capture_graph=True, ...)`` (docs/capture.md)."""
    if capture_graph not in (False, True, "strict"):
        raise TesseraError(f"capture_graph={capture_graph!r} must be False, True or 'strict'")
    if type(warmup) is not int or warmup < 0:
        raise TesseraError(f"warmup={warmup!r} must be a number of calls (0 or more)")
    if outputs not in OUTPUTS:
        raise TesseraError(f"outputs={outputs!r} must be one of {', '.join(OUTPUTS)}")
    if shapes not in SHAPES:
        raise TesseraError(f"shapes={shapes!r} must be one of {', '.join(SHAPES)}")
    if type(max_graphs) is not int or max_graphs < 1:
        raise TesseraError(f"max_graphs={max_graphs!r} must be a positive int")
    argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    if not all(type(i) is int for i in argnums):
        raise TesseraError(f"static_argnums={static_argnums!r} must be ints")

    def wrap(f):
        return JitFunction(f, capture_graph, warmup, outputs, shapes, max_graphs, argnums)

    return wrap(fn) if fn is not None else wrap
