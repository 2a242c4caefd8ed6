"""Reverse-mode gradients: each op's adjoint rule, applied to a traced graph.

:func:`backward` walks the graph from a scalar result back to the inputs, calling each
node's rule with the gradient flowing into it; a rule returns one gradient per input,
written with ops on traced tensors, so the gradients are nodes of the same graph and are
fused and compiled with it (no tape of NumPy calls). Every op is deterministic, so the
gradients are the same bits on every run.

Rules follow the usual conventions: a gradient of a broadcast operand is summed over the
broadcast axes; ``max``/``min`` (and ``maximum``/``minimum`` at ties) send the gradient
to every element equal to the result (the first operand at ties); comparisons, ``eq``
and the conditions of ``where`` have no gradient.
"""

from __future__ import annotations

import math

from .. import dtypes as D
from ..errors import TesseraError
from .ir import Const, Node
from .tensor import Tensor, Tracer


def _op(t: Tensor, name: str, inputs: list, **attrs) -> Tensor:
    return t.tracer.record(name, inputs, attrs)


def _sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``g`` summed over the axes along which an operand of ``shape`` was broadcast (a
    complex ``g``: its real and imaginary parts, each summed as a real tensor)."""
    reduced = len(g.shape) > len(shape) or any(
        n == 1 and m != 1 for n, m in zip(shape, g.shape[len(g.shape) - len(shape) :])
    )
    if reduced and g.dtype.kind == "c":
        parts = [_sum_to(_op(g, part, [g]), shape) for part in ("real", "imag")]
        return _op(g, "complex", parts)
    while len(g.shape) > len(shape):
        g = _op(g, "sum", [g], axis=0, keepdims=False)
    for d, n in enumerate(shape):
        if n == 1 and g.shape[d] != 1:
            g = _op(g, "sum", [g], axis=d, keepdims=True)
    return g


def _spread(g: Tensor, node: Node, shape: tuple[int, ...]) -> Tensor:
    """A reduction's gradient ``g`` laid back over the reduced ``shape``."""
    axis = node.attrs["axis"]
    kept = tuple(1 for _ in shape) if axis is None else shape[:axis] + (1,) + shape[axis + 1 :]
    return _op(g, "expand", [_op(g, "reshape", [g], shape=kept)], shape=shape)


def _rules(node: Node, g: Tensor, x: list, out: Tensor) -> list:
    """The gradient of each input of ``node`` (None: none), given ``g`` = d result/d out."""
    op = node.op
    a = x[0]
    b = x[1] if len(x) > 1 else None
    if op == "copy":
        return [g]
    if op == "real":  # a real loss's gradient of a complex z is dL/d re z + i dL/d im z
        return [_op(g, "complex", [g, 0.0])]
    if op == "imag":
        return [_op(g, "complex", [0.0, g])]
    if op == "conj":
        return [_op(g, "conj", [g])]
    if op == "complex":
        return [_op(g, "real", [g]), _op(g, "imag", [g])]
    if op in ("fft", "ifft", "rfft", "irfft"):
        return [_fft_rule(node, g, a)]
    if op == "add":
        return [g, g]
    if op == "sub":
        return [g, -g]
    if op == "mul":  # complex operands: g times the other's conjugate (PyTorch's convention)
        return [g * _conj(b), g * _conj(a)]
    if op == "div":
        return [g / b, -(g * out) / b]
    if op == "neg":
        return [-g]
    if op == "exp":
        return [g * out]
    if op == "log":
        return [g / a]
    if op == "sqrt":
        return [g * 0.5 / out]
    if op == "tanh":
        return [g * (1.0 - out * out)]
    if op == "relu":
        return [_op(g, "where", [a > 0.0, g, 0.0])]
    if op == "sigmoid":
        return [g * out * (1.0 - out)]
    if op == "silu":
        s = _op(g, "sigmoid", [a])
        return [g * (s + a * s * (1.0 - s))]
    if op == "gelu":
        return [g * _op(g, "gelu_grad", [a])]
    if op in ("maximum", "minimum"):
        first = _op(g, "ge" if op == "maximum" else "le", [a, b])
        return [_op(g, "where", [first, g, 0.0]), _op(g, "where", [first, 0.0, g])]
    if op == "pow":
        return _pow_rule(g, a, b, out)
    if op == "remainder":  # a - floor(a / b) * b: 1 for a, -floor(a / b) for b
        return [g, -(g * _op(g, "floor_divide", [a, b]))]
    if op == "abs":  # the sign of a (0 at 0, as NumPy's sign)
        return [_op(g, "where", [a > 0.0, g, _op(g, "where", [a < 0.0, -g, 0.0])])]
    if op == "clip":  # NumPy's clip is minimum(maximum(a, lo), hi): their tie rules
        lo, hi = b, x[2]
        raised = _op(g, "maximum", [a, lo])
        inside = _op(g, "where", [raised <= hi, g, 0.0])
        return [
            _op(g, "where", [_op(g, "ge", [a, lo]), inside, 0.0]),
            _op(g, "where", [_op(g, "lt", [a, lo]), inside, 0.0]),
            _op(g, "where", [raised > hi, g, 0.0]),
        ]
    if op == "where":
        return [None, _op(g, "where", [a, g, 0.0]), _op(g, "where", [a, 0.0, g])]
    if op == "cast":
        return [_op(g, "cast", [g], dtype=a.dtype)]
    if op == "expand":
        return [g]
    if op == "dropout":  # the same mask: it depends on the element index and seed only
        return [_op(g, "dropout", [g], **node.attrs)]
    if op == "dropout_gen":  # the same mask: the call's offset, read once per run
        return [_op(g, "dropout_gen", [g, x[1], x[2]], **node.attrs), None, None]
    if op == "matmul":
        return [
            _op(g, "matmul", [g, _op(g, "transpose", [b])]),
            _op(g, "matmul", [_op(g, "transpose", [a]), g]),
        ]
    if op == "transpose":
        return [_op(g, "transpose", [g])]
    if op == "reshape":
        return [_op(g, "reshape", [g], shape=a.shape)]
    if op == "sum":
        return [_spread(g, node, a.shape)]
    if op == "mean":
        count = math.prod(a.shape) if node.attrs["axis"] is None else a.shape[node.attrs["axis"]]
        return [_spread(g, node, a.shape) * (1.0 / count)]
    if op in ("max", "min"):
        hit = _op(g, "eq", [a, _spread(out, node, a.shape)])
        return [_op(g, "where", [hit, _spread(g, node, a.shape), 0.0])]
    if op == "attention":  # flash backward: the probabilities are recomputed block by block
        attrs = dict(node.attrs)
        lse = _op(g, "attention_lse", [a, b], **attrs)
        f32_g = g if g.dtype == D.f32 else _op(g, "cast", [g], dtype=D.f32)
        f32_out = out if out.dtype == D.f32 else _op(out, "cast", [out], dtype=D.f32)
        delta = _op(g, "sum", [f32_g * f32_out], axis=1, keepdims=False)
        inputs = [a, b, x[2], g, lse, delta]
        return [_op(g, f"attention_{part}", inputs, **attrs) for part in ("dq", "dk", "dv")]
    if op in ("layernorm", "rmsnorm"):
        return _norm_rule(node, g, x)
    if op == "cross_entropy":  # (softmax(logits) - onehot(targets)) * g, per row; no d targets
        return [_op(g, "cross_entropy_grad", [a, b, g]), None]
    if op == "softmax":
        inner = _op(g, "sum", [g * out], axis=len(out.shape) - 1, keepdims=True)
        return [out * (g - inner)]
    if op == "log_softmax":  # g - softmax(x) · sum(g) along the row
        total = _op(g, "sum", [g], axis=len(out.shape) - 1, keepdims=True)
        return [g - _op(out, "exp", [out]) * total]
    return [None] * len(x)  # comparisons and eq: no gradient


def _conj(v):
    """The conjugate of a complex tensor; anything else as it is."""
    if isinstance(v, Tensor) and v.dtype.kind == "c":
        return _op(v, "conj", [v])
    return v


def _fft_rule(node: Node, g: Tensor, x: Tensor) -> Tensor:
    """The adjoint of a transform: its conjugate transpose, ``scale`` times the transform
    of the other sign (fft's is ``n · ifft`` for norm "backward"), then the transpose of
    ``n=``'s crop or pad (the result cropped or zero-padded back to the input's length).
    rfft's: the spectrum zero-padded to ``n`` points, transformed, its real part;
    irfft's: the rfft of ``g`` with the bins that stand for two points (``0 < k < n - k``)
    doubled. The gradient of a real input is the real part (PyTorch's conventions)."""
    attrs = node.attrs
    if any(k in attrs for k in ("out", "double", "real")):
        raise TesseraError(
            f"graph.grad of '{g.tracer.graph.name}': a second derivative through a "
            f"transform (here op.{node.op}, the adjoint of one) is not supported"
        )
    real = x.dtype.kind != "c"
    adjoint = {"n": attrs["n"], "axis": attrs["axis"], "scale": attrs["scale"]}
    adjoint["out"] = x.shape[attrs["axis"]]
    if node.op == "irfft":
        grad = _op(g, "rfft", [g], **adjoint, double=True, real=real)
    elif node.op == "rfft":
        grad = _op(g, "ifft", [g], **adjoint, real=True)
    else:
        grad = _op(g, "ifft" if node.op == "fft" else "fft", [g], **adjoint, real=real)
    return grad if grad.dtype == x.dtype else _op(grad, "cast", [grad], dtype=x.dtype)


def _pow_rule(g: Tensor, a, b, out: Tensor) -> list:
    """d(a ** b) = b · a ** (b - 1) da + a ** b · log(a) db; a Python number's
    gradient is not needed (None), an exponent 0 gives none."""
    da = db = None
    if isinstance(a, Tensor) and not (isinstance(b, (int, float)) and b == 0):
        if isinstance(b, (int, float)) and b == 2:
            da = g * 2.0 * a
        else:
            da = g * b * a ** (b - 1.0)
    if isinstance(b, Tensor):
        if isinstance(a, Tensor):
            db = g * out * _op(g, "log", [a])
        else:  # a number: its logarithm is a constant (NaN for a negative base, as NumPy)
            db = g * out * (math.log(a) if a > 0 else (-math.inf if a == 0 else math.nan))
    return [da, db]


def _norm_rule(node: Node, g: Tensor, x: list) -> list:
    """layernorm: with x̂ = (x - μ)·r and g' = g·w, dx = r·(g' - mean(g') - x̂·mean(g'·x̂));
    rmsnorm: dx = r·g' - x·r³·mean(g'·x). The statistics are recomputed from ``x``."""
    a, w = x[0], x[1]
    last = len(a.shape) - 1

    def mean(t: Tensor) -> Tensor:
        return _op(t, "mean", [t], axis=last, keepdims=True)

    eps = node.attrs["eps"]
    gw = g * w
    if node.op == "layernorm":
        d = a - mean(a)
        r = 1.0 / _op(g, "sqrt", [mean(d * d) + eps])
        xhat = d * r
        return [r * (gw - mean(gw) - xhat * mean(gw * xhat)), g * xhat, g]
    r = 1.0 / _op(g, "sqrt", [mean(a * a) + eps])
    return [r * gw - a * (r * r * r) * mean(gw * a), g * a * r]


def backward(tracer: Tracer, result: Tensor, wrt: list[Tensor]) -> list[Tensor]:
    """d result / d each of ``wrt`` (``result`` a scalar), as nodes of ``tracer``."""
    if result.shape != ():
        raise TesseraError(
            f"graph.grad of '{tracer.graph.name}': the function must return a scalar "
            f"(shape ()), not shape {result.shape}; reduce it with op.sum or op.mean"
        )
    if not result.dtype.is_float:
        raise TesseraError(f"graph.grad of '{tracer.graph.name}': the result is not a float")
    grads: dict[int, Tensor] = {}
    seed = tracer.record("full", [], {"shape": (), "dtype": result.dtype, "value": 1.0})
    grads[id(result.value)] = seed
    for node in reversed(tracer.graph.nodes[: _position(tracer, result) + 1]):
        g = grads.get(id(node))
        if g is None:
            continue
        if node.op in ("launch_result", "collective"):
            raise _no_rule(tracer, node)
        inputs = [Tensor(tracer, v) if not isinstance(v, Const) else v.value for v in node.inputs]
        rules = _rules(node, g, inputs, Tensor(tracer, node))
        for value, contribution in zip(node.inputs, rules):
            if contribution is None or isinstance(value, Const) or value.dtype.kind not in "fc":
                continue
            contribution = _sum_to(contribution, value.shape)
            if contribution.shape != value.shape:
                contribution = _op(contribution, "expand", [contribution], shape=value.shape)
            held = grads.get(id(value))
            grads[id(value)] = contribution if held is None else held + contribution
    out = []
    for t in wrt:
        g = grads.get(id(t.value))
        if g is None and t.dtype.kind == "c":  # the result does not depend on it: 0
            zero = {"shape": t.shape, "dtype": D.COMPLEX_PARTS[t.dtype], "value": 0.0}
            g = tracer.record("full", [], zero)
            g = tracer.record("complex", [g, g], {})
        elif g is None:
            g = tracer.record("full", [], {"shape": t.shape, "dtype": t.dtype, "value": 0.0})
        out.append(g)
    return out


def _no_rule(tracer: Tracer, node: Node) -> TesseraError:
    """The error of a gradient through a @kernel launch or a collective."""
    where = f" at {node.loc}" if node.loc else ""
    if node.op == "collective":
        what = f"dist.{node.attrs['kind']}{where}, which has"
    else:
        what = f"what kernel '{node.inputs[0].attrs['kernel'].name}' wrote{where}; a @kernel has"
    return TesseraError(
        f"graph.grad of '{tracer.graph.name}': the result depends on {what} no gradient "
        "rule (differentiate the part before it, or write it with ops)"
    )


def _position(tracer: Tracer, result: Tensor) -> int:
    if not isinstance(result.value, Node):
        return -1
    return tracer.graph.nodes.index(result.value)
