"""Tracing: ops applied to :class:`Tensor` values record nodes into the graph being
built, checking each op's rule at the user's line.

A tensor is abstract (a shape and a dtype), so Python control flow in the traced
function runs once, at trace time; a branch on a tensor's *value* (``if x > 0:``) cannot
be traced and is an error naming the module, the op that made the tensor and the line.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from .. import dtypes as D
from ..dtypes import DType
from ..errors import SourceLoc, TesseraError
from . import declare
from .declare import OPS, RuleError
from .ir import Const, Graph, Input, Node, Value

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class GraphError(TesseraError):
    """A traced function breaks an op's rule: names the module, the op and the line."""

    def __init__(self, module: str, op: str, message: str, loc: SourceLoc | None):
        self.module, self.op, self.message, self.loc = module, op, message, loc
        where = f"\n{loc.render()}" if loc else ""
        scope = f"in graph module '{module}', " if module else ""
        super().__init__(f"{scope}op.{op}: {message}{where}")


# ops whose node is named otherwise than the function of tessera.op that records it
PUBLIC_NAMES = {"attention": "flash_attention"}


class OpValueError(GraphError, ValueError):
    """An op's argument has a value the op cannot take (an axis out of range, ``p=2``
    for dropout, tiles too large): names the op and the argument."""


class OpTypeError(GraphError, TypeError):
    """An op's argument is of a type the op does not take (``axis=1.5``, a dtype that
    is no dtype): names the op and the argument."""


class OpMemoryError(GraphError, MemoryError):
    """An op's operands or result do not fit in memory."""


def op_error(op: str, message: str, kind: type[GraphError] = OpValueError) -> GraphError:
    """An error of ``op`` at the user's line (in the module being traced, if any)."""
    tracer = current()
    return kind(tracer.graph.name if tracer else "", op, message, user_loc())


def user_loc() -> SourceLoc | None:
    """The innermost frame outside the tessera package: the user's line."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_PACKAGE + os.sep):
            return SourceLoc(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return None


class Tracer:
    """The graph being traced, and the module it belongs to."""

    def __init__(self, name: str, inputs: list[tuple[str, tuple[int, ...], DType]]):
        self.graph = Graph(name, [Input(i, n, s, d) for i, (n, s, d) in enumerate(inputs)])
        # the names of the arguments ``x[:] = ...`` may write (None: every one), and why
        # the others may not (set by the module that traces)
        self.writable: set[str] | None = None
        self.write_rule = ""
        self.capturing = False  # traced for a captured step (tessera.jit): replays repeat it

    def tensors(self) -> list[Tensor]:
        return [Tensor(self, i) for i in self.graph.inputs]

    def capture(self, op: str, array: np.ndarray) -> Input:
        """An array the traced function reads from outside (a closure, a global): an
        extra input of the graph, bound to this array object on every run."""
        graph = self.graph
        first = len(graph.inputs) - len(graph.captured)
        for value, held in zip(graph.inputs[first:], graph.captured):
            if held is array:
                return value
        dtype = D.from_numpy(array.dtype)
        if dtype is None:
            raise self.fail(op, f"arrays of {array.dtype} are not supported")
        name = f"captured{len(self.graph.captured)}"
        value = Input(len(self.graph.inputs), name, array.shape, dtype)
        self.graph.inputs.append(value)
        self.graph.captured.append(array)
        return value

    def fail(self, op: str, message: str) -> GraphError:
        # (named as the user called it: op.flash_attention)
        return GraphError(self.graph.name, PUBLIC_NAMES.get(op, op), message, user_loc())

    def record(self, op: str, inputs: list, attrs: dict) -> Tensor:
        """Apply ``op`` to ``inputs`` (tensors of this tracer or Python numbers)."""
        decl = OPS[op]
        values: list[Value] = []
        for v in inputs:
            if isinstance(v, Tensor):
                if v.tracer is not self:
                    raise self.fail(op, "a tensor of another traced function")
                values.append(v.value)
            elif isinstance(v, (bool, int, float)):
                values.append(Const(v))
            elif isinstance(v, np.ndarray):
                values.append(self.capture(op, v))
            else:
                raise self.fail(
                    op,
                    f"takes tensors, arrays or Python numbers, not {type(v).__name__}",
                )
        if op not in declare.COMPLEX_OPS:
            for v in values:
                if v.dtype is not None and v.dtype.kind == "c":
                    raise self.fail(
                        op,
                        f"takes real tensors, not {v.dtype.name}: complex tensors take +, -, "
                        "*, unary -, op.real, op.imag, op.conj and the transforms",
                    )
        if op in ("add", "sub", "mul"):
            values = self._complexified(values)
        try:
            if decl.kind == "elementwise":
                values = self._promoted(decl, values)
            shape, dtype = _rule(decl, values, attrs)
        except RuleError as exc:
            raise self.fail(op, str(exc)) from None
        node = self.graph.add(Node(op, tuple(values), attrs, shape, dtype, user_loc()))
        return Tensor(self, node)

    def _complexified(self, values: list[Value]) -> list[Value]:
        """``values`` with each real tensor beside a complex one of its parts' dtype made
        complex (``x + 0i``, as NumPy promotes f32 beside complex64)."""
        complexes = {v.dtype for v in values if v.dtype is not None and v.dtype.kind == "c"}
        if len(complexes) != 1:
            return values
        ct = complexes.pop()
        out = list(values)
        for k, v in enumerate(values):
            if not isinstance(v, Const) and v.dtype == D.COMPLEX_PARTS[ct]:
                made = Node("complex", (v, Const(0.0)), {"dtype": ct}, v.shape, ct, user_loc())
                out[k] = self.graph.add(made)
        return out

    def _promoted(self, decl, values: list[Value]) -> list[Value]:
        """``values`` with each array cast to the dtype it meets Python numbers in
        (NumPy 2's promotion: ``declare.promote``)."""
        dtype = declare.promote(decl, values)
        if dtype is None:
            return values
        first = 1 if decl.name == "where" else 0
        out = list(values)
        for k, v in enumerate(values[first:], first):
            if not isinstance(v, Const) and v.dtype != dtype:
                cast = Node("cast", (v,), {"dtype": dtype}, v.shape, dtype, user_loc())
                out[k] = self.graph.add(cast)
        return out


def _rule(decl, values, attrs) -> tuple[tuple[int, ...], DType]:
    if decl.kind == "elementwise":
        return declare.elementwise_type(decl, values, attrs)
    x = values[0]
    if isinstance(x, Const):
        raise RuleError("takes a tensor, not a number")
    if any(isinstance(v, Const) for v in values):
        raise RuleError("takes tensors, not numbers")
    if decl.kind == "matmul":
        return declare.matmul_type(x, values[1])
    if decl.kind == "attention":
        return declare.attention_type(*values)
    if decl.kind in ("attention_lse", "attention_grad"):
        return declare.attention_grad_type(decl.name, *values)
    if decl.kind == "cross_entropy":
        return declare.cross_entropy_type(*values)
    if decl.kind == "fft":
        return declare.fft_type(decl.name, x, attrs)
    if decl.floats_only and not x.dtype.is_float:
        raise RuleError(f"takes float arrays, not {x.dtype.name}")
    if decl.kind == "norm":
        return declare.norm_type(*values)
    if decl.kind == "reduce":
        attrs["axis"] = declare.normalise_axis(attrs["axis"], len(x.shape))
        if decl.name in ("max", "min"):
            declare.check_nonempty(decl.name, x.shape, attrs["axis"])
        shape = declare.reduce_type(x, attrs["axis"], attrs["keepdims"])
        return shape, declare.reduce_dtype(decl.name, x.dtype)
    if decl.kind == "softmax":
        if not x.shape:
            raise RuleError("runs along the last axis of an array, not of a number")
        axis = declare.normalise_axis(attrs.pop("axis"), len(x.shape))
        if axis != len(x.shape) - 1:
            raise RuleError("runs along the last axis (transpose first for another)")
        return x.shape, x.dtype
    if decl.kind == "transpose":
        if len(x.shape) < 2:
            raise RuleError(f"swaps the last two dims of an array of 2 or more, not {x.shape}")
        return (*x.shape[:-2], x.shape[-1], x.shape[-2]), x.dtype
    attrs["shape"] = declare.reshape_type(x, attrs["shape"])
    return attrs["shape"], x.dtype


class Tensor:
    """A value of a traced function: shape and dtype now, an array when the graph runs."""

    __array_priority__ = 100  # NumPy defers to our operators

    def __init__(self, tracer: Tracer, value: Input | Node):
        self.tracer = tracer
        self.value = value

    shape = property(lambda self: self.value.shape)
    dtype = property(lambda self: self.value.dtype)
    ndim = property(lambda self: len(self.value.shape))
    mT = property(lambda self: self.tracer.record("transpose", [self], {}))
    real = property(lambda self: self.tracer.record("real", [self], {}))
    imag = property(lambda self: self.tracer.record("imag", [self], {}))

    def conj(self) -> Tensor:
        """The complex conjugate (``op.conj``)."""
        return self.tracer.record("conj", [self], {})

    @property
    def T(self) -> Tensor:
        """The transpose of a 2-d tensor (NumPy's ``.T`` reverses every dim; for a batch
        of matrices ``.mT`` swaps the last two)."""
        if self.ndim != 2:
            raise self.tracer.fail(
                "transpose", f".T of a {self.ndim}-d tensor is ambiguous: use .mT or op.transpose"
            )
        return self.mT

    def __repr__(self) -> str:
        return f"<traced tensor {self.dtype.name}{list(self.shape)}>"

    def _op(self, name: str, *others) -> Tensor:
        return self.tracer.record(name, [self, *others], {})

    def _rop(self, name: str, other) -> Tensor:
        return self.tracer.record(name, [other, self], {})

    __add__ = lambda self, o: self._op("add", o)  # noqa: E731
    __radd__ = lambda self, o: self._rop("add", o)  # noqa: E731
    __sub__ = lambda self, o: self._op("sub", o)  # noqa: E731
    __rsub__ = lambda self, o: self._rop("sub", o)  # noqa: E731
    __mul__ = lambda self, o: self._op("mul", o)  # noqa: E731
    __rmul__ = lambda self, o: self._rop("mul", o)  # noqa: E731
    __truediv__ = lambda self, o: self._op("div", o)  # noqa: E731
    __rtruediv__ = lambda self, o: self._rop("div", o)  # noqa: E731
    __neg__ = lambda self: self._op("neg")  # noqa: E731
    __gt__ = lambda self, o: self._op("gt", o)  # noqa: E731
    __ge__ = lambda self, o: self._op("ge", o)  # noqa: E731
    __lt__ = lambda self, o: self._op("lt", o)  # noqa: E731
    __le__ = lambda self, o: self._op("le", o)  # noqa: E731
    __eq__ = lambda self, o: self._op("eq", o)  # noqa: E731
    __ne__ = lambda self, o: self._op("ne", o)  # noqa: E731
    __pow__ = lambda self, o: self._op("pow", o)  # noqa: E731
    __rpow__ = lambda self, o: self._rop("pow", o)  # noqa: E731
    __abs__ = lambda self: self._op("abs")  # noqa: E731
    __floordiv__ = lambda self, o: self._op("floor_divide", o)  # noqa: E731
    __rfloordiv__ = lambda self, o: self._rop("floor_divide", o)  # noqa: E731
    __mod__ = lambda self, o: self._op("remainder", o)  # noqa: E731
    __rmod__ = lambda self, o: self._rop("remainder", o)  # noqa: E731
    __and__ = lambda self, o: self._op("bitwise_and", o)  # noqa: E731
    __rand__ = lambda self, o: self._rop("bitwise_and", o)  # noqa: E731
    __or__ = lambda self, o: self._op("bitwise_or", o)  # noqa: E731
    __ror__ = lambda self, o: self._rop("bitwise_or", o)  # noqa: E731
    __xor__ = lambda self, o: self._op("bitwise_xor", o)  # noqa: E731
    __rxor__ = lambda self, o: self._rop("bitwise_xor", o)  # noqa: E731
    # ~ of a bool array is its logical not (NumPy's), of an integer array the bits flipped
    __invert__ = lambda self: self._op("logical_not" if self.dtype == D.bool_ else "invert")  # noqa: E731
    __pos__ = lambda self: self  # noqa: E731
    __matmul__ = lambda self, o: self._op("matmul", o)  # noqa: E731
    __rmatmul__ = lambda self, o: self._rop("matmul", o)  # noqa: E731

    def __bool__(self) -> bool:
        made_by = f"op.{self.value.op}" if isinstance(self.value, Node) else "an argument"
        raise self.tracer.fail(
            self.value.op if isinstance(self.value, Node) else "input",
            f"a Python branch on a traced tensor's value (made by {made_by}) cannot be "
            "traced: the graph is recorded once, for every value; use op.where(c, a, b)",
        )

    def _host_value(self, what: str):
        made_by = f"op.{self.value.op}" if isinstance(self.value, Node) else "an argument"
        raise self.tracer.fail(
            self.value.op if isinstance(self.value, Node) else "input",
            f"{what} of a traced tensor (made by {made_by}) would be read once, when "
            f"'{self.tracer.graph.name}' is traced, never on later calls or replays: "
            "return the tensor and read the array after the call",
        )

    def __float__(self) -> float:
        self._host_value("float()")

    def __int__(self) -> int:
        self._host_value("int()")

    def __index__(self) -> int:
        self._host_value("an index")

    def __array__(self, *args, **kwargs):
        self._host_value("a NumPy conversion")

    __hash__ = object.__hash__

    def __setitem__(self, index, value) -> None:
        """``C[:] = expr`` in a ``@graph.kernel`` (or into a ``mut`` parameter of a
        module): the result is written into ``C``, and ``C`` stands for it from then on."""
        graph = self.tracer.graph
        target = getattr(self, "argument", None)  # the argument this tensor was assigned to
        if target is None and isinstance(self.value, Input):
            target = self.value
        if index != slice(None) or target is None:
            raise self.tracer.fail("setitem", "only 'C[:] = value' into an argument is traced")
        allowed = self.tracer.writable
        if allowed is not None and target.name not in allowed:
            raise self.tracer.fail(
                "setitem",
                f"'{target.name}[:] = ...' writes into the caller's array '{target.name}': "
                f"{self.tracer.write_rule}",
            )
        if not isinstance(value, Tensor) or value.shape != self.shape:
            shape = getattr(value, "shape", "a number")
            raise self.tracer.fail(
                "setitem", f"assigns {shape} into {target.name} of shape {self.shape}"
            )
        if value.dtype != self.dtype:
            value = self.tracer.record("cast", [value], {"dtype": self.dtype})
        graph.outputs.append(value.value)
        graph.written[len(graph.outputs) - 1] = target.index
        self.argument, self.value = target, value.value  # later reads see the new value


_local = threading.local()


def current() -> Tracer | None:
    return getattr(_local, "tracer", None)


class tracing:
    """``with tracing(tracer):`` ops called on tensors record into ``tracer``."""

    def __init__(self, tracer: Tracer):
        self.tracer = tracer

    def __enter__(self) -> Tracer:
        self.saved = current()
        _local.tracer = self.tracer
        return self.tracer

    def __exit__(self, *exc) -> None:
        _local.tracer = self.saved
