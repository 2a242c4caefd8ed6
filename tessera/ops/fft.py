"""``op.fft``, ``op.ifft``, ``op.rfft`` and ``op.irfft`` (docs/ops.md, "FFT"): NumPy's
``numpy.fft`` functions, computed by the kernels of fft_core.py on every target.

On arrays a call runs at once (:func:`run`); on the tensors of a traced function it
records a node of the graph (:func:`record`: the transform's length, axis and scale
worked out here), which plan.py runs with the same kernels and whose adjoint
(adjoints.py) is the conjugate transform.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from . import kinds, plan
from .fft_core import NORMS, _complex_dtype, _length, _norm_scale, kernels, transform
from .tensor import OpTypeError, Tensor, current, op_error

_INVERSE = {"fft": False, "ifft": True, "rfft": False, "irfft": True}


def _checked(op: str, shape: tuple[int, ...], dtype: np.dtype, n, axis, norm):
    """The normalised axis, the transform's length and scale, and the result's real
    dtype (irfft) of a call on ``shape`` and ``dtype``; errors name the op."""
    if not shape:
        raise op_error(op, "takes an array of at least one dim, not a number")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise op_error(op, f"axis must be an int, not {type(axis).__name__}", OpTypeError)
    if not -len(shape) <= axis < len(shape):
        raise op_error(op, f"axis {axis} is out of range for an array of {len(shape)} dims")
    axis = int(axis) % len(shape)
    if op == "rfft" and dtype.kind == "c":
        raise op_error(op, f"takes a real array, not {dtype} (use op.fft)", OpTypeError)
    ct = _complex_dtype(op, dtype)
    given = shape[axis]
    if op == "irfft":  # n output points from n // 2 + 1 input points
        length = _length(op, n, 2 * (given - 1))
        if given == 0:
            raise op_error(op, "invalid number of data points (0): irfft needs at least one")
    else:
        length = _length(op, n, given)
        if given == 0:
            raise op_error(op, f"invalid number of data points (0) along axis {axis}")
    scale = _norm_scale(op, norm, length, _INVERSE[op])
    real = None
    if op == "irfft":  # the real part, as NumPy: f16 in gives f16 out
        real = D.f16 if dtype == np.float16 else D.COMPLEX_PARTS[ct]
    return axis, length, scale, real


def run(op: str, x, n, axis, norm):
    """``numpy.fft.<op>(x, n, axis, norm)``: on arrays at once; on a traced tensor (or
    an array inside a traced function) a node of its graph."""
    if isinstance(x, Tensor) or current() is not None:
        return record(op, x, n, axis, norm)
    given_arrays = plan.operands(f"op.{op}", (x,))
    a, kind = given_arrays[0], given_arrays.kind
    shape = tuple(int(d) for d in a.shape)
    axis, length, scale, real = _checked(op, shape, np.dtype(a.dtype), n, axis, norm)
    out = transform(
        op,
        a,
        plan.memory(a),
        length=length,
        axis=axis,
        scale=scale,
        inverse=_INVERSE[op],
        mode={"rfft": "r2c", "irfft": "c2r"}.get(op, "c2c"),
        real=real,
    )
    return kinds.give_back(kind, out)


def record(op: str, x, n, axis, norm):
    """The node of ``op`` on ``x`` in the graph being traced (``x`` a tensor of it, or
    an array it captures)."""
    tracer = x.tracer if isinstance(x, Tensor) else current()
    if not isinstance(x, (Tensor, np.ndarray)):
        x = plan.operands(f"op.{op}", (x,))[0]
    shape = tuple(int(d) for d in x.shape)
    dtype = x.dtype.np_dtype if isinstance(x, Tensor) else np.dtype(x.dtype)
    if dtype.kind not in "fc" or dtype == D.bf16.np_dtype:
        raise op_error(
            op, f"a traced transform takes f16, f32, f64 or complex tensors, not {dtype}"
        )
    axis, length, scale, _ = _checked(op, shape, dtype, n, axis, norm)
    return tracer.record(op, [x], {"n": length, "axis": axis, "scale": scale})


__all__ = ["NORMS", "kernels", "record", "run"]
