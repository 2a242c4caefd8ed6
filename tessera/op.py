"""Operators on whole arrays (docs/ops.md): ``from tessera import op``.

Called on NumPy arrays an op runs at once, as a generated kernel, and returns a new
array; called on the tensors of a traced function (``@graph.module``) it records a node
of the graph, which is fused and compiled with its neighbours.

>>> import numpy as np
>>> from tessera import op
>>> op.relu(np.array([-1.0, 2.0], np.float32))
array([0., 2.], dtype=float32)
"""

from __future__ import annotations

import functools

import numpy as _np

from . import dtypes as _dtypes
from .ops.module import Module as _Module
from .ops.module import apply as _apply
from .ops.tensor import Tensor as _Tensor
from .tracebacks import entry_point as _entry_point


def matmul(a, b, tile_shape=None):
    """``a @ b`` (f16, bf16, f32; f32 accumulation), as ``tile.dot`` on blocks of
    ``tile_shape = (BM, BN, BK)`` (default 128, 128, 32, less for smaller matrices). As
    NumPy's matmul, the last two dims are the matrices and the leading (batch) dims
    broadcast: one launch runs every
    product of the batch. When only ``a`` has batch dims (a linear layer) they are
    folded into its rows instead (reshapes are views), making one larger product."""
    attrs = {"tile_shape": _tile_shape(tile_shape)} if tile_shape is not None else {}
    a_shape, b_shape = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if len(a_shape) > 2 and len(b_shape) == 2:
        rows = reshape(a, (-1, a_shape[-1]))
        return reshape(_apply("matmul", [rows, b], attrs), (*a_shape[:-1], b_shape[1]))
    return _apply("matmul", [a, b], attrs)


def _tile_shape(tile_shape):
    """``op.matmul``'s ``tile_shape`` as a node attribute (hashable)."""
    if tile_shape == "auto":
        return "auto"
    if isinstance(tile_shape, dict):
        if sorted(tile_shape) != ["BK", "BM", "BN"]:
            raise ValueError(
                f"op.matmul: a tile_shape space names BM, BN and BK, not {sorted(tile_shape)}"
            )
        return tuple((name, tuple(int(v) for v in tile_shape[name])) for name in ("BM", "BN", "BK"))
    shape = tuple(int(v) for v in tile_shape)
    if len(shape) != 3 or any(v <= 0 for v in shape):  # (``min`` here is op.min)
        raise ValueError(
            f"op.matmul: tile_shape is (BM, BN, BK), 'auto' or a space, not {tile_shape!r}"
        )
    return shape


def transpose(x):
    """The transpose of a matrix (``x.T`` on traced tensors); of a batch of matrices,
    each one's (the last two dims swap, ``x.mT``)."""
    return _apply("transpose", [x], {})


def reshape(x, shape):
    """The same elements, row-major, in ``shape`` (one dim may be -1)."""
    return _apply("reshape", [x], {"shape": tuple(shape)})


def _elementwise(name: str, doc: str, arity: int):
    def fn(*args):
        if len(args) != arity:
            raise TypeError(f"op.{name} takes {arity} argument(s), not {len(args)}")
        return _apply(name, list(args), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise {doc}, with NumPy broadcasting."
    return fn


add = _elementwise("add", "a + b", 2)
sub = _elementwise("sub", "a - b", 2)
mul = _elementwise("mul", "a * b", 2)
div = _elementwise("div", "a / b", 2)
neg = _elementwise("neg", "-a", 1)
exp = _elementwise("exp", "e ** a", 1)
log = _elementwise("log", "natural logarithm", 1)
sqrt = _elementwise("sqrt", "square root", 1)
tanh = _elementwise("tanh", "hyperbolic tangent", 1)
relu = _elementwise("relu", "max(a, 0)", 1)
gelu = _elementwise("gelu", "a · Φ(a) (erf form)", 1)
silu = _elementwise("silu", "a · sigmoid(a)", 1)
sigmoid = _elementwise("sigmoid", "1 / (1 + e ** -a)", 1)
maximum = _elementwise("maximum", "max(a, b)", 2)
minimum = _elementwise("minimum", "min(a, b)", 2)
where = _elementwise("where", "c ? a : b", 3)


def cast(x, dtype):
    """``x`` converted to ``dtype``: a Tessera dtype (``tessera.f16``), its name
    (``"f16"``) or a NumPy dtype (``np.float16``)."""
    return _apply("cast", [x], {"dtype": _dtype_named(dtype)})


def _dtype_named(dtype) -> _dtypes.DType:
    named = _dtypes.BY_NAME.get(dtype) if isinstance(dtype, str) else _dtypes.as_dtype(dtype)
    if named is None and isinstance(dtype, str):
        try:  # a NumPy name: "float16"
            named = _dtypes.from_numpy(_np.dtype(dtype))
        except TypeError:
            named = None
    if named is None:
        known = ", ".join(sorted(_dtypes.BY_NAME))
        raise TypeError(f"op.cast: dtype={dtype!r} is not a Tessera dtype (one of {known})")
    return named


def dropout(x, p, seed):
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``.

    Element ``i`` is kept when Philox 4×32-10 of counter ``i`` and key ``seed`` gives a
    uniform number ≥ ``p``: the mask depends only on ``(seed, i)``, so it is the same on
    every target, run, thread count and rank (docs/ops.md)."""
    if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"op.dropout: p={p!r} must be a number in [0, 1)")
    if not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"op.dropout: seed={seed!r} must be an int in [0, 2**63)")
    return _apply("dropout", [x], {"p": float(p), "seed": seed, "scale": 1.0 / (1.0 - p)})


def _reduction(name: str, doc: str):
    def fn(x, axis=None, keepdims=False):
        return _apply(name, [x], {"axis": axis, "keepdims": bool(keepdims)})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"The {doc} along ``axis`` (all elements when None), in index order."
    return fn


sum = _reduction("sum", "sum")  # noqa: A001 - the op's name
mean = _reduction("mean", "mean")
max = _reduction("max", "maximum")  # noqa: A001
min = _reduction("min", "minimum")  # noqa: A001


def softmax(x, axis=-1):
    """``exp(x - max) / sum`` along the last axis."""
    return _apply("softmax", [x], {"axis": axis})


def flash_attention(q, k, v, causal=False, scale=None):
    """``softmax(q @ k.T * scale) @ v`` as one flash-attention kernel (online softmax, the
    scores never stored); ``causal``: query ``i`` sees keys ``0..i``; ``scale`` defaults to
    ``1 / sqrt(d)``. q ``(N, d)``, k ``(M, d)``, v ``(M, dv)``; f16, bf16 or f32."""
    if scale is None:
        scale = 1.0 / float(q.shape[-1]) ** 0.5
    return _apply("attention", [q, k, v], {"scale": float(scale), "causal": bool(causal)})


# ----------------------------------------------------------------------------- composites
# Normalisations are written with the ops above, so they trace into nodes that fuse with
# their neighbours and differentiate through the ops' adjoints; called on arrays they run
# as a small graph module (one per eps), not op by op.


def _layernorm(x, w, b, eps):
    mu = mean(x, axis=-1, keepdims=True)
    d = sub(x, mu)
    var = mean(mul(d, d), axis=-1, keepdims=True)
    return add(mul(div(d, sqrt(add(var, eps))), w), b)


def _rmsnorm(x, w, eps):
    ms = mean(mul(x, x), axis=-1, keepdims=True)
    return mul(div(x, sqrt(add(ms, eps))), w)


@functools.cache
def _composite(fn, eps: float) -> _Module:
    return _Module(functools.partial(fn, eps=eps), name=f"op_{fn.__name__.lstrip('_')}")


def _run(fn, eps, *args):
    if any(isinstance(a, _Tensor) for a in args):
        return fn(*args, eps)
    return _composite(fn, float(eps))(*args)


def layernorm(x, w, b, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * w + b`` over the last axis (biased variance).

    With ``w`` and ``b`` vectors along that axis (the usual case) it is one kernel, one
    lane per row; other broadcasts run as the ops that define it."""
    if _vectors_along_last_axis(x, w, b):
        return _apply("layernorm", [x, w, b], {"eps": float(eps)})
    return _run(_layernorm, eps, x, w, b)


def rmsnorm(x, w, eps=1e-6):
    """``x / sqrt(mean(x ** 2) + eps) * w`` over the last axis (one kernel when ``w`` is a
    vector along it)."""
    if _vectors_along_last_axis(x, w):
        return _apply("rmsnorm", [x, w], {"eps": float(eps)})
    return _run(_rmsnorm, eps, x, w)


def _vectors_along_last_axis(x, *params) -> bool:
    shape = tuple(getattr(x, "shape", ()))
    return bool(shape) and all(
        tuple(getattr(p, "shape", (0, 0))) == shape[-1:] and getattr(p, "dtype", None) == x.dtype
        for p in params
    )


__all__ = [
    "add", "cast", "div", "dropout", "exp", "flash_attention", "gelu", "layernorm", "log",
    "matmul", "max", "maximum", "mean", "min", "minimum", "mul", "neg", "relu", "reshape",
    "rmsnorm", "sigmoid", "silu", "softmax", "sqrt", "sub", "sum", "tanh", "transpose",
    "where",
]  # fmt: skip

# A GraphError or a compile error of a generated kernel reaches the caller with the
# caller's frames only (tessera/tracebacks.py): every public op is wrapped once, here.
for _name in __all__:
    globals()[_name] = _entry_point(globals()[_name])
