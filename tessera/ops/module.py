"""``@graph.module`` and ``@graph.kernel`` objects, and eager ops on arrays.

A module traces its function once per (argument shapes and dtypes, target), lowers the
graph (passes.py) and keeps the result; later calls with the same signature only launch.
An op called on arrays outside a graph runs at once through the same path: a one-op
graph, lowered and cached by signature.
"""

from __future__ import annotations

import functools
import inspect
import threading

import numpy as np

from .. import dtypes as D
from ..config import get as setting
from ..errors import TesseraError
from ..observe.observers import stage
from ..observe.tracebacks import entry_point
from . import plan
from .adjoints import backward
from .ir import Const, Node
from .kinds import give_back, give_back_all
from .passes import Lowered, lower
from .tensor import PUBLIC_NAMES, Tensor, Tracer, tracing


def dtype_of(name: str, a: np.ndarray) -> D.DType:
    dtype = D.from_numpy(a.dtype)
    if dtype is None:
        raise TesseraError(f"{name}: arrays of {a.dtype} are not supported")
    return dtype


def shape_of(a) -> tuple[int, ...]:
    """An array's shape as a tuple of ints (device arrays may give their own type)."""
    return tuple(int(n) for n in a.shape)


class Module:
    """A traced function of arrays (``@graph.module(name)``)."""

    def __init__(self, fn, name: str | None = None, writes: bool = False):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = name or fn.__name__
        self.writes = writes  # a @graph.kernel: results are assigned into arguments
        self.params, self.variadic = _parameters(fn)
        self.mutable = _mutable(fn)  # parameters annotated ``mut``: a module may write them
        self._lowered: dict[tuple, Lowered] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        kind = "graph.kernel" if self.writes else "graph.module"
        return f"<tessera.{kind} {self.name}>"

    def lowered(self, args: tuple) -> tuple[Lowered, list[np.ndarray]]:
        arrays = plan.operands(self.name, args)
        device = any(arrays.placed)
        key = (tuple((shape_of(a), a.dtype.str) for a in arrays), setting("target"), device)
        with self._lock:
            made = self._lowered.get(key)
            if made is None:
                made = self._lowered[key] = lower(self._trace(arrays), device)
        return made, arrays

    def _tracer(self, arrays: list[np.ndarray]) -> Tracer:
        names = list(self.params)
        if self.variadic is not None:
            names += [f"{self.variadic}{i}" for i in range(len(arrays) - len(names))]
        if len(arrays) != len(names) or len(arrays) < len(self.params):
            raise TesseraError(
                f"graph module '{self.name}' takes {len(self.params)} arrays, not {len(arrays)}"
            )
        tracer = Tracer(
            self.name,
            [(p, shape_of(a), dtype_of(self.name, a)) for p, a in zip(names, arrays)],
        )
        if not self.writes:  # a @graph.kernel writes any argument; a module, its mut ones
            star = self.variadic in self.mutable  # ``*xs: mut``: every extra argument
            tracer.writable = {
                n for n in names if n in self.mutable or (star and n not in self.params)
            }
            fn = getattr(self.fn, "__name__", self.name)
            tracer.write_rule = (
                "a graph module returns its results and leaves its arguments alone; declare "
                f"the parameter mutable ('def {fn}(..., x: mut)') to write into it, or use "
                "@graph.kernel"
            )
        return tracer

    def _trace(self, arrays: list[np.ndarray]):
        tracer = self._tracer(arrays)
        with tracing(tracer):
            result = self.fn(*tracer.tensors())
        graph = tracer.graph
        if self.writes:
            if result is not None:
                raise TesseraError(
                    f"graph kernel '{self.name}' writes its results into arguments "
                    "('C[:] = ...') and returns nothing"
                )
            if not graph.outputs:
                raise TesseraError(f"graph kernel '{self.name}' assigns no argument")
            return graph
        results = result if isinstance(result, tuple) else (result,)
        for r in results:
            if not isinstance(r, Tensor) or r.tracer is not tracer:
                raise TesseraError(
                    f"graph module '{self.name}' must return tensors it computed, "
                    f"not {type(r).__name__}"
                )
            graph.outputs.append(r.value)
        graph.returns_tuple = isinstance(result, tuple)
        return graph

    @entry_point
    def __call__(self, *args):
        with stage("graph module", self.name):
            lowered, arrays = self.lowered(args)
            results = plan.run(lowered, arrays, fresh=True)
        if self.writes:
            return None
        results = give_back_all(arrays.kind, results)  # as the caller's library
        written = lowered.graph.written  # values assigned into mut arguments come first
        results = [r for i, r in enumerate(results) if i not in written]
        return tuple(results) if lowered.graph.returns_tuple else results[0]

    @entry_point
    def graph(self, *args) -> str:
        """The optimised graph for these arguments: nodes, fused groups, kernels."""
        lowered, _ = self.lowered(args)
        kernels = "\n\n".join(s.text for s in lowered.sources if s is not None)
        return f"{lowered.text()}\n\nkernels:\n{kernels}"

    @entry_point
    def inspect(self, stage: str, *args, arch: str = "sm_90"):
        """A compiler stage for these arguments: the graph's own ("graph", "fused",
        "kernels": text), or any stage of a kernel (``k.inspect``'s: "ir", "cpu", "llvm",
        "ptx", ...) for every kernel the graph generates, each headed by its name (text;
        a dict by kernel name for "cubin" and "meta"). No stage runs anything."""
        lowered, _ = self.lowered(args)
        graph_stages = {
            "graph": lambda: str(lowered.graph),
            "fused": lowered.text,
            "kernels": lambda: "\n".join(s.text for s in lowered.sources if s is not None),
        }
        if stage in graph_stages:
            return graph_stages[stage]()
        found = {}
        for source, kernel in zip(lowered.sources, lowered.kernels):
            if source is None:
                continue
            if callable(source.grid):  # autotuned: a stage per configuration
                found[source.name] = (
                    "(an autotuned kernel: its stages exist per configuration; inspect "
                    "the kernels of module.kernels(...) after a call)"
                )
                continue
            arrays = [
                np.zeros(a.value.shape, a.value.dtype.np_dtype).reshape(plan.argument_shape(a))
                for a in source.args
            ]
            found[source.name] = kernel.inspect(stage, *arrays, grid=source.grid, arch=arch)
        if all(isinstance(v, str) for v in found.values()):
            return "\n\n".join(f"== kernel {name} ==\n{text}" for name, text in found.items())
        return found

    @entry_point
    def kernels(self, *args) -> list:
        """The generated kernels these arguments run (``inspect`` works on them)."""
        lowered, _ = self.lowered(args)
        return [k for k in lowered.kernels if k is not None]


class GradModule(Module):
    """``graph.grad(f, argnums)`` / ``graph.value_and_grad``: the traced ``f`` extended
    with its adjoint (adjoints.py), lowered and run as one fused graph."""

    def __init__(self, fn, argnums, with_value: bool, reduce=None):
        super().__init__(fn, f"grad_{getattr(fn, 'name', fn.__name__)}")
        self.reduce = reduce  # a dist.GradReduce: gradients reduced as they are made
        self.fn = getattr(fn, "fn", fn)  # a @graph.module's function is traced again
        self.params, self.variadic = _parameters(self.fn)
        self.many = isinstance(argnums, (tuple, list))
        self.argnums = tuple(argnums) if self.many else (argnums,)
        self.with_value = with_value

    def _trace(self, arrays: list[np.ndarray]):
        tracer = self._tracer(arrays)
        tracer.writable = set()
        tracer.write_rule = "a function graph.grad differentiates cannot write into its arguments"
        tensors = tracer.tensors()
        with tracing(tracer):
            result, grads = self._differentiated(tracer, tensors)
        graph = tracer.graph
        graph.outputs = ([result.value] if self.with_value else []) + [g.value for g in grads]
        return graph

    @entry_point
    def __call__(self, *args):
        traced = [a for a in args if isinstance(a, Tensor)]
        if traced:  # inside a traced function: the adjoint joins its graph
            return self._inline(traced[0].tracer, args)
        with stage("graph module", self.name):
            lowered, arrays = self.lowered(args)
            if self.reduce is None:
                results = plan.run(lowered, arrays, fresh=True)
            else:
                results = self._reduced(lowered, arrays)
            results = give_back_all(arrays.kind, results)
        value = results.pop(0) if self.with_value else None
        grads = tuple(results) if self.many else results[0]
        return (value, grads) if self.with_value else grads

    def _reduced(self, lowered: Lowered, arrays) -> list:
        """Run the step, giving ``reduce`` each gradient as soon as the kernel that makes it
        has run (its bucket's collective starts while the backward pass goes on, and
        progresses between the later kernels); the value, then the reduced gradients."""
        reduce, graph = self.reduce, lowered.graph
        grads = graph.outputs[1:] if self.with_value else list(graph.outputs)
        params = [arrays[i] for i in self.argnums]
        if any(not isinstance(a, np.ndarray) for a in params):
            raise TesseraError(
                f"graph.grad of '{self.name}' with reduce=: gradients are reduced from host "
                "arrays; for GPU arrays reduce them after the step (dist.all_reduce_coalesced)"
            )
        if not reduce.planned:  # the gradients' own dtypes (a Const's: its parameter's)
            reduce.plan_for(
                [
                    (p.shape, p.dtype if isinstance(g, Const) else g.dtype.np_dtype)
                    for p, g in zip(params, grads)
                ]
            )
        watch, constant = {}, []
        for i, node in enumerate(grads):
            if isinstance(node, Const):  # a gradient that does not depend on the inputs
                constant.append((i, np.full(params[i].shape, node.value, params[i].dtype)))
            else:
                watch[id(node)] = functools.partial(reduce.ready, i)
        results = plan.run(lowered, arrays, fresh=True, watch=watch, between=reduce.progress)
        for i, grad in constant:
            reduce.ready(i, grad)
        value = results[:1] if self.with_value else []
        return value + list(reduce.wait())

    def _inline(self, tracer: Tracer, args: tuple):
        """``graph.grad`` called on the tensors of a function being traced (``tessera.jit``,
        a module): ``fn`` and its adjoint are recorded into that function's graph."""
        if any(not isinstance(a, Tensor) or a.tracer is not tracer for a in args):
            raise TesseraError(
                f"graph.grad of '{self.name}' inside a traced function takes the tensors "
                "of that function only"
            )
        if self.reduce is not None:
            raise TesseraError(
                f"graph.grad of '{self.name}' with reduce= runs as a step of its own, not "
                "inside a traced function: call dist collectives on its gradients there"
            )
        result, grads = self._differentiated(tracer, list(args))
        grads = tuple(grads) if self.many else grads[0]
        return (result, grads) if self.with_value else grads

    def _differentiated(self, tracer: Tracer, tensors: list) -> tuple:
        """``fn`` of ``tensors`` recorded into ``tracer``, and its adjoint's gradients."""
        for i in self.argnums:
            if not isinstance(i, int) or not -len(tensors) <= i < len(tensors):
                raise TesseraError(
                    f"graph.grad of '{self.name}': argnums={self.argnums!r} names no "
                    f"argument of the {len(tensors)} given"
                )
        result = self.fn(*tensors)
        if not isinstance(result, Tensor) or result.tracer is not tracer:
            raise TesseraError(
                f"graph.grad of '{self.name}': the function must return a scalar tensor "
                f"it computed, not {type(result).__name__}"
            )
        return result, backward(tracer, result, [tensors[i] for i in self.argnums])


def _parameters(fn) -> tuple[list[str], str | None]:
    """The names of ``fn``'s positional parameters, and of its ``*args`` if any."""
    params, variadic = [], None
    for p in inspect.signature(fn).parameters.values():
        if p.kind == inspect.Parameter.VAR_POSITIONAL:
            variadic = p.name
        elif p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            params.append(p.name)
    return params, variadic


def _mutable(fn) -> set[str]:
    """The parameters of ``fn`` annotated ``mut`` (``w: mut``, ``w: mut[f32[n]]``, or
    those spelled as strings under ``from __future__ import annotations``)."""
    out = set()
    for p in inspect.signature(fn).parameters.values():
        a = p.annotation
        if isinstance(a, str):
            head = a.replace(" ", "").split("[", 1)[0]
            declared = head == "mut" or head.endswith(".mut")
        else:
            declared = a is D.mut or isinstance(a, D.MutAnnotation)
        if declared:
            out.add(p.name)
    return out


def grad(fn, argnums=0, reduce=None):
    """The gradient of ``fn`` (a function of arrays returning a scalar tensor, or a
    ``@graph.module``) with respect to argument ``argnums`` (an int or a tuple).
    ``reduce=dist.GradReduce(axis="dp", op="mean")``: each gradient is reduced over the
    axis in buckets started while the backward pass still runs (docs/distributed.md)."""
    return GradModule(fn, argnums, with_value=False, reduce=reduce)


def value_and_grad(fn, argnums=0, reduce=None):
    """Like :func:`grad`, returning ``(value, gradient)``."""
    return GradModule(fn, argnums, with_value=True, reduce=reduce)


def module(name: str | None = None):
    """``@graph.module("attention")``: trace, fuse and run the function as a graph."""
    if callable(name):
        return Module(name)
    return lambda fn: Module(fn, name)


def graph_kernel(fn):
    """``@graph.kernel``: like a module, but results are assigned into arguments
    (``C[:] = op.relu(op.matmul(A, B) + bias)``) and nothing is returned."""
    return Module(fn, writes=True)


# ----------------------------------------------------------------------------- eager
_eager: dict[tuple, Lowered] = {}
_eager_lock = threading.Lock()


def apply(op: str, inputs: list, attrs: dict):
    """``op`` on ``inputs``: recorded when any input is a traced tensor, else run now."""
    for v in inputs:
        if isinstance(v, Tensor):
            return v.tracer.record(op, list(inputs), dict(attrs))
    name = f"op.{PUBLIC_NAMES.get(op, op)}"
    numbers = False
    for v in inputs:  # (a loop: a generator's any() costs more than the check)
        if isinstance(v, _NUMBERS):
            numbers = True
            break
    if numbers:
        arrays = plan.operands(name, tuple(v for v in inputs if not isinstance(v, _NUMBERS)))
        parts = tuple(  # (repr: a NaN is one key, though it equals no NaN)
            ("c", type(v).__name__, repr(v)) if isinstance(v, _NUMBERS) else ("a",) for v in inputs
        )
    else:  # arrays only (the usual call): the same key, with less work
        arrays = plan.operands(name, tuple(inputs))
        parts = (("a",),) * len(inputs)
    if not arrays:
        raise TesseraError(f"{name} needs at least one array")
    key = (op, tuple(sorted(attrs.items())) if len(attrs) > 1 else tuple(attrs.items()), parts)
    device = any(arrays.placed)
    key += (tuple([(tuple(a.shape), a.dtype) for a in arrays]), setting("target"), device)
    lowered = _eager.get(key)  # (a dict read is atomic; made under the lock)
    if lowered is None:
        with _eager_lock:
            lowered = _eager.get(key)
            if lowered is None:
                lowered = _eager[key] = lower(_one_op(op, inputs, attrs, arrays), device)
    return give_back(arrays.kind, plan.run(lowered, arrays)[0])


_NUMBERS = (bool, int, float)


def _one_op(op: str, inputs: list, attrs: dict, arrays: list[np.ndarray]):
    tracer = Tracer(
        f"op_{op}",
        [
            (f"x{i}", shape_of(a), dtype_of(f"op.{PUBLIC_NAMES.get(op, op)}", a))
            for i, a in enumerate(arrays)
        ],
    )
    tracer.graph.name = None
    tensors = iter(tracer.tensors())
    args = [v if isinstance(v, (bool, int, float)) else next(tensors) for v in inputs]
    out = tracer.record(op, args, dict(attrs))
    tracer.graph.name = f"op_{op}"
    tracer.graph.outputs.append(out.value)
    return tracer.graph


__all__ = ["Module", "Node", "apply", "grad", "graph_kernel", "module", "value_and_grad"]
