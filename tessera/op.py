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
import itertools
import math as _math
import numbers as _numbers
import warnings as _warnings

import ml_dtypes as _ml_dtypes
import numpy as _np

from . import dtypes as _dtypes
from . import rng as _rng
from .arrays import device_info as _device_info
from .arrays import is_device_array as _is_device_array
from .arrays import layout_class as _layout_class
from .errors import CaptureWarning as _CaptureWarning
from .observe.tracebacks import entry_point as _entry_point
from .ops import fft as _fft
from .ops.module import Module as _Module
from .ops.module import apply as _apply
from .ops.plan import operands as _operands
from .ops.tensor import GraphError as GraphError  # the errors of ops (docs/ops.md)
from .ops.tensor import OpMemoryError as OpMemoryError
from .ops.tensor import OpTypeError as OpTypeError
from .ops.tensor import OpValueError as OpValueError
from .ops.tensor import Tensor as _Tensor
from .ops.tensor import op_error as _error


def matmul(a, b, tile_shape=None):
    """``a @ b`` (f16, bf16, f32 with f32 accumulation; f64 with f64), as ``tile.dot`` on
    blocks of ``tile_shape = (BM, BN, BK)`` (default 128, 128, 32, for f64 64, 64, 32;
    less for smaller matrices). As
    NumPy's matmul, the last two dims are the matrices and the leading (batch) dims
    broadcast: one launch runs every
    product of the batch. When only ``a`` has batch dims (a linear layer) they are
    folded into its rows instead (reshapes are views), making one larger product."""
    attrs = {"tile_shape": _tile_shape(tile_shape)} if tile_shape is not None else {}
    a_shape, b_shape = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if len(a_shape) > 2 and len(b_shape) == 2:
        rows = reshape(a, (-1, a_shape[-1]))
        return reshape(_product(rows, b, attrs), (*a_shape[:-1], b_shape[1]))
    return _product(a, b, attrs)


def _product(a, b, attrs: dict):
    """The product of ``a`` and ``b``; an array that is the transpose of a stored one
    (``w.T`` of an N x K ``w``) is read as stored, as a traced ``w.T`` is (the tile loads
    read its blocks transposed), not as a strided array copied element by element."""
    if not isinstance(a, _Tensor) and not isinstance(b, _Tensor):
        trans_a, trans_b = _stored_transposed(a), _stored_transposed(b)
        if trans_a or trans_b:
            product = _transposed_product(trans_a, trans_b, tuple(attrs.items()))
            return product(a.T if trans_a else a, b.T if trans_b else b)
    return _apply("matmul", [a, b], attrs)


def _stored_transposed(x) -> bool:
    """Whether ``x`` is a matrix whose transpose is C-contiguous (and it is not)."""
    if isinstance(x, _np.ndarray):
        shape, strides, itemsize = x.shape, x.strides, x.itemsize
    else:
        info = _device_info(x) if _is_device_array(x) else None
        if info is None:
            return False
        _, shape, strides, dtype = info
        itemsize = dtype.itemsize
    return len(shape) == 2 and _layout_class(shape, strides, itemsize) == "F"


def _transposed(x, flag: bool):
    return transpose(x) if flag else x


@functools.cache
def _transposed_product(trans_a: bool, trans_b: bool, attrs: tuple) -> _Module:
    def product(a, b):
        return _apply("matmul", [_transposed(a, trans_a), _transposed(b, trans_b)], dict(attrs))

    return _Module(product, name="op_matmul")


# The most elements one block of a product may hold (the BM x BN accumulator and the
# BM x BK, BK x BN operand tiles): the CPU compiles a tile kernel in a time that grows
# fast with its blocks (about half a minute at this bound, which (128, 128, 64) reaches,
# minutes at (256, 128, 32)), so larger tiles are refused before compiling (docs/ops.md).
MAX_TILE_ELEMENTS = 32768


def _is_int(v) -> bool:
    return isinstance(v, (int, _np.integer)) and not isinstance(v, (bool, _np.bool_))


def _tile_shape(tile_shape):
    """``op.matmul``'s ``tile_shape`` as a node attribute (hashable)."""
    if isinstance(tile_shape, str) and tile_shape == "auto":
        return "auto"
    form = "tile_shape is (BM, BN, BK) of positive ints, 'auto' or a space"
    if isinstance(tile_shape, dict):
        if sorted(map(str, tile_shape)) != ["BK", "BM", "BN"]:
            raise _error(
                "matmul", f"a tile_shape space names BM, BN and BK, not {sorted(tile_shape)}"
            )
        space = {}
        for name in ("BM", "BN", "BK"):
            values = tile_shape[name]
            if not isinstance(values, (list, tuple)) or not values:
                raise _error("matmul", f"tile_shape[{name!r}] is a list of sizes, not {values!r}")
            if not all(_is_int(v) and v > 0 for v in values):
                raise _error("matmul", f"tile_shape[{name!r}] holds positive ints, not {values!r}")
            space[name] = tuple(int(v) for v in values)
        for bm, bn, bk in itertools.product(space["BM"], space["BN"], space["BK"]):
            _check_tiles(bm, bn, bk)
        return tuple((name, space[name]) for name in ("BM", "BN", "BK"))
    if not isinstance(tile_shape, (tuple, list)):
        raise _error("matmul", f"{form}, not {tile_shape!r}", OpTypeError)
    if len(tile_shape) != 3 or not all(_is_int(v) and v > 0 for v in tile_shape):
        raise _error("matmul", f"{form}, not {tile_shape!r}")
    shape = tuple(int(v) for v in tile_shape)
    _check_tiles(*shape)
    return shape


def _check_tiles(bm: int, bn: int, bk: int) -> None:
    elements = bm * bn + bk * (bm + bn)
    if elements > MAX_TILE_ELEMENTS:
        raise _error(
            "matmul",
            f"tile_shape {(bm, bn, bk)} makes blocks of {elements} elements (BM*BN + "
            f"BK*(BM+BN)), more than {MAX_TILE_ELEMENTS}: larger tiles take minutes to "
            "compile on the CPU; use smaller tiles (the default is (128, 128, 32))",
        )


def transpose(x):
    """The transpose of a matrix (``x.T`` on traced tensors); of a batch of matrices,
    each one's (the last two dims swap, ``x.mT``)."""
    return _apply("transpose", [x], {})


def reshape(x, shape):
    """The same elements, row-major, in ``shape`` (one dim may be -1)."""
    dims = (shape,) if _is_int(shape) else shape
    if not isinstance(dims, (tuple, list)) or not all(_is_int(n) for n in dims):
        raise _error("reshape", f"shape={shape!r} is not a tuple of ints", OpTypeError)
    return _apply("reshape", [x], {"shape": tuple(int(n) for n in dims)})


def _elementwise(name: str, doc: str, arity: int, node: str = ""):
    def fn(*args):
        if len(args) != arity:
            raise _error(name, f"takes {arity} argument(s), not {len(args)}", OpTypeError)
        return _apply(node or name, list(args), {})

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
pow = _elementwise("pow", "a ** b (a ** 2 is a * a, a ** 0.5 sqrt(a), as NumPy's)", 2)  # noqa: A001
abs = _elementwise("abs", "|a|", 1)  # noqa: A001
floor_divide = _elementwise("floor_divide", "a // b (floor division, NumPy's)", 2)
remainder = _elementwise("remainder", "a % b (the sign of b, NumPy's)", 2)
bitwise_and = _elementwise("bitwise_and", "a & b (integer and bool arrays)", 2)
bitwise_or = _elementwise("bitwise_or", "a | b (integer and bool arrays)", 2)
bitwise_xor = _elementwise("bitwise_xor", "a ^ b (integer and bool arrays)", 2)
invert = _elementwise("invert", "~a (integer arrays: the bits flipped)", 1)
logical_not = _elementwise("logical_not", "not a (bool arrays)", 1)
equal = _elementwise("equal", "a == b", 2, "eq")
not_equal = _elementwise("not_equal", "a != b", 2, "ne")
greater = _elementwise("greater", "a > b", 2, "gt")
greater_equal = _elementwise("greater_equal", "a >= b", 2, "ge")
less = _elementwise("less", "a < b", 2, "lt")
less_equal = _elementwise("less_equal", "a <= b", 2, "le")


real = _elementwise("real", "real part of a complex array (f32 of complex64, f64 of complex128)", 1)
imag = _elementwise("imag", "imaginary part of a complex array", 1)
conj = _elementwise("conj", "complex conjugate of a complex array", 1)


def clip(x, a_min=None, a_max=None):
    """``x`` limited to ``[a_min, a_max]`` (arrays or numbers, broadcast), as NumPy's
    ``clip``: ``minimum(maximum(x, a_min), a_max)``, one bound may be None."""
    if a_min is None and a_max is None:
        raise _error("clip", "needs a_min or a_max (both are None)", OpTypeError)
    if a_min is None:
        return _apply("minimum", [x, a_max], {})
    if a_max is None:
        return _apply("maximum", [x, a_min], {})
    return _apply("clip", [x, a_min, a_max], {})


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
    if named is None or named.kind == "c":
        known = ", ".join(d.name for d in _dtypes.ALL_DTYPES)
        what = "a dtype the operator layer computes in" if named else "a Tessera dtype"
        raise _error("cast", f"dtype={dtype!r} is not {what} (one of {known})", OpTypeError)
    return named


def dropout(x, p, seed):
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``.

    Element ``i`` is kept when Philox 4×32-10 of counter ``i`` and key ``seed`` gives a
    uniform number ≥ ``p``: the mask depends only on ``(seed, i)``, so it is the same on
    every target, run, thread count and rank (docs/ops.md). ``seed`` may be a
    ``tessera.rng.Generator``: then the counter starts at its offset, read when the kernel
    runs, and each call advances it, so every call (and every replay of a captured step)
    draws a new mask."""
    if not isinstance(p, _numbers.Real) or not 0.0 <= p < 1.0:
        raise _error("dropout", f"p={p!r} must be a number in [0, 1)")
    if isinstance(seed, _rng.Generator):
        return _dropout_drawing(x, float(p), seed)
    if isinstance(seed, bool) or not isinstance(seed, (int, _np.integer)) or not 0 <= seed < 2**63:
        raise _error("dropout", f"seed={seed!r} must be an int in [0, 2**63) or a Generator")
    p, seed = float(p), int(seed)
    if _capturing(x):
        _warnings.warn(
            f"op.dropout with the int seed {seed} in a captured step: this mask repeats on "
            "every replay (pass a tessera.rng.Generator to draw a new one each call)",
            _CaptureWarning,
            stacklevel=3,
        )
    return _apply("dropout", [x], {"p": p, "seed": seed, "scale": 1.0 / (1.0 - p)})


def _dropout_drawing(x, p: float, gen):
    """``op.dropout(x, p, gen)``: draws counted in the call, the offset advanced after."""
    tracer = getattr(x, "tracer", None)
    skip = 0
    if tracer is not None:  # the draws of this call's earlier dropouts from ``gen``
        skip = tracer.graph.draws.get(id(gen), 0)
    attrs = {"p": p, "scale": 1.0 / (1.0 - p), "skip": skip}
    out = _apply("dropout_gen", [x, gen.seed_array, gen.offset_array], attrs)
    size = _math.prod(tuple(getattr(x, "shape", ())))
    if tracer is not None:
        if skip == 0:  # the first from ``gen`` in this graph: advance after every run
            tracer.graph.after.append(lambda: gen.advance(tracer.graph.draws[id(gen)]))
        tracer.graph.draws[id(gen)] = skip + size
    else:
        gen.advance(size)
    return out


def _capturing(x) -> bool:
    tracer = getattr(x, "tracer", None)
    return bool(getattr(tracer, "capturing", False))


def _reduction(name: str, doc: str):
    def fn(x, axis=None, keepdims=False):
        return _apply(name, [x], {"axis": _axis(name, axis), "keepdims": _flag(name, keepdims)})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"The {doc} along ``axis`` (all elements when None), in index order."
    return fn


sum = _reduction("sum", "sum")  # noqa: A001 - the op's name
mean = _reduction("mean", "mean")
max = _reduction("max", "maximum")  # noqa: A001
min = _reduction("min", "minimum")  # noqa: A001


def _axis(op: str, axis) -> int | None:
    """One axis (an int) or None: NumPy's tuples of axes are not taken."""
    if axis is None or _is_int(axis):
        return None if axis is None else int(axis)
    raise _error(op, f"axis={axis!r} is not an axis: one int, or None for all", OpTypeError)


def _flag(op: str, value, name: str = "keepdims") -> bool:
    if isinstance(value, (bool, _np.bool_)) or _is_int(value):
        return bool(value)
    raise _error(op, f"{name}={value!r} is not a bool", OpTypeError)


def _number(op: str, value, name: str) -> float:
    if isinstance(value, _numbers.Real):
        return float(value)
    raise _error(op, f"{name}={value!r} is not a real number", OpTypeError)


def softmax(x, axis=-1):
    """``exp(x - max) / sum`` along the last axis."""
    return _apply("softmax", [x], {"axis": _axis("softmax", axis)})


def _log_softmax(x, axis):
    shifted = sub(x, max(x, axis=axis, keepdims=True))
    return sub(shifted, log(sum(exp(shifted), axis=axis, keepdims=True)))


@functools.cache
def _log_softmax_module(axis) -> _Module:
    return _Module(functools.partial(_log_softmax, axis=axis), name="op_log_softmax")


def log_softmax(x, axis=-1):
    """``x - max - log(sum(exp(x - max)))`` along ``axis``. Along the last axis (the
    default) one kernel, one group of lanes per row, as ``softmax``: the row's max and
    sum met in the fixed tree, then each element; along another axis (or all, ``None``)
    the ops that define it, fused (reductions for the max and the sum, the latter with
    its ``exp`` prologue, and elementwise kernels)."""
    axis = _axis("log_softmax", axis)
    rank = len(_shape(x))
    if axis is not None and (not -rank <= axis < rank or axis % rank == rank - 1):
        # (a 0-d array, an axis out of range: the row kernel's rule names them)
        return _apply("log_softmax", [x], {"axis": axis})
    if isinstance(x, _Tensor):
        return _log_softmax(x, axis)
    return _log_softmax_module(axis)(x)


_REDUCTIONS = ("mean", "sum", "none")


def _cross_entropy(logits, targets, reduction):
    rows = _apply("cross_entropy", [logits, targets], {})
    return rows if reduction == "none" else (mean if reduction == "mean" else sum)(rows)


@functools.cache
def _cross_entropy_module(reduction: str) -> _Module:
    return _Module(functools.partial(_cross_entropy, reduction=reduction), name="op_cross_entropy")


def cross_entropy(logits, targets, reduction="mean"):
    """``logsumexp(logits[i]) - logits[i, targets[i]]`` for each row of logits ``(N, C)``
    (f16, bf16, f32, f64) and integer class indices ``targets`` ``(N,)``: one kernel, one
    group of lanes per row (as ``softmax``), writes the row losses; ``reduction`` "mean"
    or "sum" then reduces them with ``op.mean`` / ``op.sum``, "none" returns them.

    Targets on the host are checked before the launch (one outside ``0..C-1`` is an
    error); device arrays and traced tensors are not: such a row's loss is NaN."""
    if reduction not in _REDUCTIONS:
        raise _error(
            "cross_entropy", f"reduction={reduction!r} is not one of 'mean', 'sum', 'none'"
        )
    if isinstance(logits, _Tensor) or isinstance(targets, _Tensor):
        return _cross_entropy(logits, targets, reduction)
    _check_targets(logits, targets)
    if reduction == "none":
        return _apply("cross_entropy", [logits, targets], {})
    return _cross_entropy_module(reduction)(logits, targets)


def _check_targets(logits, targets) -> None:
    """Host targets outside ``0..C-1`` refused before anything runs (their min and max)."""
    x, t = _operands("op.cross_entropy", (logits, targets))
    if _is_device_array(t) or len(tuple(x.shape)) != 2 or t.dtype.kind not in "iu" or not t.size:
        return  # (device arrays are not read back; the op's rule refuses other shapes)
    classes = int(x.shape[1])
    low, high = int(_np.min(t)), int(_np.max(t))
    if low < 0 or high >= classes:
        bad = low if low < 0 else high
        raise _error(
            "cross_entropy",
            f"target {bad} is not a class index of logits {tuple(x.shape)}: targets "
            f"must lie in 0..{classes - 1}",
        )


def flash_attention(q, k, v, causal=False, scale=None):
    """``softmax(q @ k.T * scale) @ v`` as one flash-attention kernel (online softmax, the
    scores never stored); ``causal``: query ``i`` sees keys ``0..i``; ``scale`` defaults to
    ``1 / sqrt(d)``. q ``(N, d)``, k ``(M, d)``, v ``(M, dv)``; f16, bf16 or f32."""
    if isinstance(q, (list, tuple)):  # as every op's operands: an array
        q = _operands("op.flash_attention", (q,))[0]
    if scale is None:  # 1 / sqrt(d); a q with no head dim is refused by the op's rule
        shape = tuple(getattr(q, "shape", ()))
        scale = 1.0 / _math.sqrt(shape[-1]) if shape and shape[-1] > 0 else 1.0
    attrs = {
        "scale": _number("flash_attention", scale, "scale"),
        "causal": _flag("flash_attention", causal, "causal"),
    }
    return _apply("attention", [q, k, v], attrs)


# ----------------------------------------------------------------------------- FFT
# numpy.fft's functions, computed by kernels of the language (ops/fft.py; docs/ops.md)


def fft(x, n=None, axis=-1, norm=None):
    """The discrete Fourier transform of ``x`` along ``axis``, as ``numpy.fft.fft``:
    ``n`` points (cropped or zero-padded), ``norm`` "backward" (default), "ortho" or
    "forward"; complex64 for f16/f32/complex64 input, complex128 otherwise."""
    return _fft.run("fft", x, n, axis, norm)


def ifft(x, n=None, axis=-1, norm=None):
    """The inverse of :func:`fft` (``1/n`` scaled by default), as ``numpy.fft.ifft``."""
    return _fft.run("ifft", x, n, axis, norm)


def rfft(x, n=None, axis=-1, norm=None):
    """The transform of a real ``x``: its first ``n // 2 + 1`` points (``numpy.fft.rfft``)."""
    return _fft.run("rfft", x, n, axis, norm)


def irfft(x, n=None, axis=-1, norm=None):
    """The real signal of ``n`` points (default ``2 * (len - 1)``) whose :func:`rfft` is
    ``x``, as ``numpy.fft.irfft``."""
    return _fft.run("irfft", x, n, axis, norm)


# ----------------------------------------------------------------------------- quantization
# 8-bit floats with explicit scales (docs/ops.md, "Quantization"): per tensor (a number)
# or per channel (a vector along ``axis``); written with the ops, so they fuse.


def quantize(x, scale, dtype="f8e4m3", axis=None):
    """``x / scale`` saturated to ``dtype``'s largest finite value and rounded to it
    (f8e4m3 or f8e5m2; NaN stays NaN). ``scale``: a number, or with ``axis`` a vector of
    one scale per index along that axis (per-channel). Computed in f32 (f64 for f64)."""
    dt = _dtype_named(dtype)
    if dt not in _dtypes.FP8:
        raise _error("quantize", f"dtype={dt.name} is not an 8-bit float (f8e4m3, f8e5m2)")
    largest = float(_ml_dtypes.finfo(dt.np_dtype).max)
    wide = _wide(x)
    scaled = div(wide, _scale("quantize", scale, x, axis))
    return cast(clip(scaled, -largest, largest), dt)


def dequantize(q, scale, dtype="f32", axis=None):
    """``q`` (8-bit floats) converted to ``dtype`` and multiplied by ``scale`` (a number,
    or with ``axis`` a vector of one scale per index along that axis)."""
    return mul(cast(q, dtype), _scale("dequantize", scale, q, axis))


def _wide(x):
    """``x`` in f32 (f64 stays f64): the scaled value is rounded once, to 8 bits."""
    dtype = getattr(x, "dtype", None)
    named = _dtypes.from_numpy(_np.dtype(dtype)) if isinstance(dtype, _np.dtype) else dtype
    return x if named in (_dtypes.f32, _dtypes.f64) else cast(x, _dtypes.f32)


def _shape(value) -> tuple:
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else _np.shape(value)


def _scale(op: str, scale, x, axis):
    """A per-tensor scale as it is; a per-channel one shaped to broadcast along ``axis``."""
    if axis is None:
        if _shape(scale) != ():
            raise _error(op, "a scale per channel needs axis= (the channels' axis)")
        return scale
    shape = tuple(getattr(x, "shape", ()))
    if isinstance(axis, bool) or not _is_int(axis) or not -len(shape) <= axis < len(shape):
        raise _error(op, f"axis={axis!r} is not an axis of an array of {len(shape)} dims")
    axis = int(axis) % len(shape)
    count = _shape(scale)
    if count != (shape[axis],):
        raise _error(
            op, f"a per-channel scale along axis {axis} has {shape[axis]} values, not {count}"
        )
    return reshape(scale, tuple(shape[axis] if d == axis else 1 for d in range(len(shape))))


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
    eps = _number("layernorm", eps, "eps")
    _not_0d("layernorm", x)
    if _vectors_along_last_axis(x, w, b):
        return _apply("layernorm", [x, w, b], {"eps": float(eps)})
    return _run(_layernorm, eps, x, w, b)


def rmsnorm(x, w, eps=1e-6):
    """``x / sqrt(mean(x ** 2) + eps) * w`` over the last axis (one kernel when ``w`` is a
    vector along it)."""
    eps = _number("rmsnorm", eps, "eps")
    _not_0d("rmsnorm", x)
    if _vectors_along_last_axis(x, w):
        return _apply("rmsnorm", [x, w], {"eps": float(eps)})
    return _run(_rmsnorm, eps, x, w)


def _not_0d(op: str, x) -> None:
    if tuple(getattr(x, "shape", (1,))) == ():
        raise _error(op, "normalises along the last axis of an array, not a 0-d array x")


def _vectors_along_last_axis(x, *params) -> bool:
    shape = tuple(getattr(x, "shape", ()))
    return bool(shape) and all(
        tuple(getattr(p, "shape", (0, 0))) == shape[-1:] and getattr(p, "dtype", None) == x.dtype
        for p in params
    )


__all__ = [
    "abs", "add", "bitwise_and", "bitwise_or", "bitwise_xor", "cast", "clip",
    "cross_entropy", "div", "dropout", "equal", "exp", "floor_divide", "invert",
    "logical_not", "remainder",
    "flash_attention", "gelu", "greater", "greater_equal", "layernorm", "less", "less_equal", "log",
    "log_softmax", "matmul", "max", "maximum", "mean", "min", "minimum", "mul", "neg",
    "not_equal", "pow", "relu", "reshape", "rmsnorm", "sigmoid", "silu", "softmax", "sqrt",
    "sub", "sum", "tanh", "transpose", "where", "fft", "ifft", "rfft", "irfft", "quantize",
    "dequantize", "real", "imag", "conj",
]  # fmt: skip


def _refusing_memory(name: str, fn):
    """``fn``, whose MemoryError (operands or a result larger than memory: a broadcast
    array's copy, a huge result) is an error naming the op."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except MemoryError as exc:
            raise _error(
                name,
                f"the operands or the result are too large for memory ({exc})",
                OpMemoryError,
            ) from None

    return call


# A GraphError or a compile error of a generated kernel reaches the caller with the
# caller's frames only (tessera/tracebacks.py): every public op is wrapped once, here.
for _name in __all__:
    globals()[_name] = _entry_point(_refusing_memory(_name, globals()[_name]))
