"""The kernels of the operator layer's discrete Fourier transforms (``op.fft``,
``op.ifft``, ``op.rfft``, ``op.irfft``; docs/ops.md, "FFT") and the one function that runs
them on an array (:func:`transform`: eager calls, fft.py, and the graph's FFT nodes,
plan.py), NumPy's ``numpy.fft`` functions on every target.

A transform of length ``n`` along the last axis runs each row through:

* a *load* kernel: the input converted to the complex dtype of the result (NumPy's: f16
  and f32 → complex64; f64, integers and bool → complex128), cropped or zero-padded to
  ``n`` (irfft: the Hermitian spectrum of ``n`` points rebuilt from ``n // 2 + 1``);
* for ``n`` a power of two, ``log2(n)`` Stockham radix-2 passes (autosorting: each pass
  reads one buffer and writes the other in natural order, so no bit reversal), run two at
  a time (a lane the two butterflies of a pass whose outputs meet in the next, kept in
  registers between them: the same operations, half the memory passes), the twiddles
  ``exp(±iπk/p)`` computed once a transform in f64, rounded once, and read from a table;
* for other ``n``, Bluestein's algorithm: the transform as a circular convolution with
  the chirp ``exp(±iπt²/n)`` of power-of-two length ``m ≥ 2n - 1``, done with the passes
  above (three transforms of length ``m``);
* the scale of ``norm`` (``"backward"``: 1 forward, ``1/n`` inverse; ``"ortho"``:
  ``1/√n``; ``"forward"``: ``1/n`` forward) in the last kernel, then rfft's first
  ``n // 2 + 1`` columns or irfft's real part.

Other axes are moved last (NumPy arrays; device arrays take the last axis). The kernels
are made on first use, per complex dtype. The adjoints (adjoints.py) run the same
kernels with three more steps: a result's columns cropped or zero-padded to the input's
length (the transpose of ``n=``), irfft's interior bins doubled, a real part taken.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import dtypes as D
from .. import tile
from ..arrays import is_device_array
from ..decorators import kernel
from ..dtypes import complex64, complex128, dtype_constexpr, f64, i64, mut
from .tensor import OpTypeError, op_error

NORMS = ("backward", "ortho", "forward")


@functools.cache
def kernels(ct: D.DType) -> dict:
    """The transform's kernels for complex dtype ``ct`` (complex64 or complex128)."""
    rt = D.COMPLEX_PARTS[ct]

    @kernel
    def load_real(x: T[rows, m], y: mut[ct[rows, n]], T: dtype_constexpr):
        r, j = tile.id(0), tile.id(1)
        v = complex(rt(0.0), rt(0.0))
        if j < m:
            v = complex(rt(x[r, j]), rt(0.0))
        y[r, j] = v

    @kernel
    def load_complex(x: ct[rows, m], y: mut[ct[rows, n]]):
        r, j = tile.id(0), tile.id(1)
        v = complex(rt(0.0), rt(0.0))
        if j < m:
            v = x[r, j]
        y[r, j] = v

    @kernel
    def load_hermitian(x: ct[rows, m], y: mut[ct[rows, n]]):
        # the spectrum of a real signal of n points from its first n // 2 + 1
        r, j = tile.id(0), tile.id(1)
        k = j if j <= n // 2 else n - j
        v = complex(rt(0.0), rt(0.0))
        if k < m:
            v = x[r, k]
        if j > n // 2:
            v = v.conjugate()
        y[r, j] = v

    @kernel
    def twiddles(w: mut[ct[half]], sign: f64):
        # exp(sign iπ j/half), j < half: pass p's twiddle of k is w[k * (half // p)]
        # (the same angle, exactly: k/p and k s/(p s) are equal quotients for s = 2^e)
        j = tile.linear_id()
        if j < half:
            angle = sign * math.pi * f64(j) / f64(half)
            w[j] = complex(rt(math.cos(angle)), rt(math.sin(angle)))

    @kernel
    def radix2(x: ct[rows, n], y: mut[ct[rows, n]], w: ct[half], lp: i64, ln: i64, scale: rt):
        # one Stockham pass: sub-transforms of length p = 2^lp become ones of length 2p
        # (n = 2^ln: the index arithmetic is shifts and masks, no division)
        i = tile.linear_id()
        if i < rows * half:
            r, b = i >> (ln - 1), i & (half - 1)
            k = b & ((1 << lp) - 1)
            u0 = x[r, b]
            u1 = x[r, b + half] * w[k << (ln - 1 - lp)]
            j = ((b - k) << 1) + k
            y[r, j] = (u0 + u1) * scale
            y[r, j + (1 << lp)] = (u0 - u1) * scale

    @kernel
    def radix4(x: ct[rows, n], y: mut[ct[rows, n]], w: ct[half], lp: i64, ln: i64, scale: rt):
        # two Stockham passes in one (p -> 2p -> 4p, p = 2^lp), each lane the two
        # butterflies of the first pass whose outputs meet in the second: the same
        # operations in the same order as two radix2 launches (the second's scale alone
        # applied), in registers between them
        i = tile.linear_id()
        quarter = n >> 2
        if i < rows * quarter:
            r, c = i >> (ln - 2), i & (quarter - 1)
            p = 1 << lp
            # first pass: butterflies b = c and b = c + n/4 (their k: b % p)
            k = c & (p - 1)
            wk = w[k << (ln - 1 - lp)]
            a0 = x[r, c]
            a1 = x[r, c + half] * wk
            b0 = x[r, c + quarter]
            b1 = x[r, c + quarter + half] * wk
            # their outputs at j and j + p; (c + n/4)'s land n/2 further on
            s0, s1 = a0 + a1, a0 - a1
            t0, t1 = b0 + b1, b0 - b1
            # second pass (length 2p): outputs j and j + p of the first pass are the
            # butterflies b2 = j and b2 = j + p, paired with b2 + n/2 = the t values
            j = ((c - k) << 1) + k
            q = p << 1
            k2 = j & (q - 1)
            v0 = t0 * w[k2 << (ln - 2 - lp)]
            j2 = ((j - k2) << 1) + k2
            y[r, j2] = (s0 + v0) * scale
            y[r, j2 + q] = (s0 - v0) * scale
            k3 = (j + p) & (q - 1)
            v1 = t1 * w[k3 << (ln - 2 - lp)]
            j3 = ((j + p - k3) << 1) + k3
            y[r, j3] = (s1 + v1) * scale
            y[r, j3 + q] = (s1 - v1) * scale

    @kernel
    def scaled(x: ct[rows, n], y: mut[ct[rows, n]], scale: rt):
        r, j = tile.id(0), tile.id(1)
        y[r, j] = x[r, j] * scale

    @kernel
    def chirp_in(x: ct[rows, n], y: mut[ct[rows, m]], sign: f64):
        # Bluestein: x_j exp(sign iπ j²/n), zero-padded to m
        r, j = tile.id(0), tile.id(1)
        v = complex(rt(0.0), rt(0.0))
        if j < n:
            angle = sign * math.pi * f64((j * j) % (2 * n)) / f64(n)
            v = x[r, j] * complex(rt(math.cos(angle)), rt(math.sin(angle)))
        y[r, j] = v

    @kernel
    def chirp_filter(y: mut[ct[one, m]], n: i64, sign: f64):
        # Bluestein: exp(-sign iπ t²/n) at t and at m - t, for t < n; zero between
        j = tile.linear_id()
        if j < m:
            t = j if j < n else m - j
            v = complex(rt(0.0), rt(0.0))
            if t < n:
                angle = -sign * math.pi * f64((t * t) % (2 * n)) / f64(n)
                v = complex(rt(math.cos(angle)), rt(math.sin(angle)))
            y[0, j] = v

    @kernel
    def multiply_rows(x: ct[rows, m], h: ct[one, m], y: mut[ct[rows, m]]):
        r, j = tile.id(0), tile.id(1)
        y[r, j] = x[r, j] * h[0, j]

    @kernel
    def chirp_out(x: ct[rows, m], y: mut[ct[rows, n]], sign: f64, scale: rt):
        r, k = tile.id(0), tile.id(1)
        angle = sign * math.pi * f64((k * k) % (2 * n)) / f64(n)
        y[r, k] = x[r, k] * complex(rt(math.cos(angle)), rt(math.sin(angle))) * scale

    @kernel
    def first_columns(x: ct[rows, n], y: mut[ct[rows, m]]):
        r, j = tile.id(0), tile.id(1)
        y[r, j] = x[r, j]

    @kernel
    def double_interior(x: ct[rows, m], y: mut[ct[rows, m]], n: i64):
        # irfft's adjoint: the bins 0 < j < n - j stand for two of the n points
        r, j = tile.id(0), tile.id(1)
        v = x[r, j]
        if 0 < j and j < n - j:
            v = v + v
        y[r, j] = v

    @kernel
    def real_part(x: ct[rows, n], y: mut[T[rows, n]], T: dtype_constexpr):
        r, j = tile.id(0), tile.id(1)
        y[r, j] = T(x[r, j].real)

    return dict(locals())


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class _Transform:
    """One call: the rows, the memory they live in, the kernels of their dtype."""

    def __init__(self, op: str, rows: int, ct: D.DType, memory):
        self.op, self.rows, self.ct, self.memory = op, rows, ct, memory
        self.k = kernels(ct)

    def empty(self, n: int, dtype: D.DType | None = None):
        return self.memory.empty((self.rows, n), (dtype or self.ct).np_dtype)

    def launch(self, name: str, grid, *args) -> None:
        """Launch kernel ``name`` over ``grid`` (a count, or (rows, width): element
        kernels take their row and column from the grid, no division) unless empty."""
        if math.prod(grid if isinstance(grid, tuple) else (grid,)) > 0:
            self.k[name][grid](*args)

    def transform(self, a, n: int, sign: float, scale: float):
        """The length-``n`` DFT of the rows of ``a`` (complex, ``(rows, n)``), times
        ``scale``; may write ``a``."""
        if _power_of_two(n):
            return self.stockham(a, n, sign, scale)
        m = 1 << (2 * n - 2).bit_length()  # a power of two >= 2n - 1
        chirped = self.empty(m)
        self.launch("chirp_in", (self.rows, m), a, chirped, sign)
        spectrum = self.stockham(chirped, m, -1.0, 1.0)
        h = self.memory.empty((1, m), self.ct.np_dtype)
        self.k["chirp_filter"][m](h, n, sign)
        h_spectrum = _Transform(self.op, 1, self.ct, self.memory).stockham(h, m, -1.0, 1.0)
        self.launch("multiply_rows", (self.rows, m), spectrum, h_spectrum, spectrum)
        convolved = self.stockham(spectrum, m, 1.0, 1.0 / m)
        out = self.empty(n)
        self.launch("chirp_out", (self.rows, n), convolved, out, sign, scale)
        return out

    def stockham(self, a, n: int, sign: float, scale: float):
        """Stockham passes over ``a``, two at a time where two remain (``radix4``), else
        one (``radix2``); the result (``a`` or a second buffer)."""
        if n == 1:
            if scale != 1.0:
                self.launch("scaled", (self.rows, 1), a, a, scale)
            return a
        w = self.memory.empty((n // 2,), self.ct.np_dtype)
        self.k["twiddles"][n // 2](w, sign)
        b = self.empty(n)
        ln, lp = n.bit_length() - 1, 0
        while lp < ln:
            if lp + 2 <= ln:
                last = lp + 2 == ln
                self.launch("radix4", self.rows * (n // 4), a, b, w, lp, ln, scale if last else 1.0)
                lp += 2
            else:
                self.launch("radix2", self.rows * (n // 2), a, b, w, lp, ln, scale)
                lp += 1
            a, b = b, a
        return a


def _norm_scale(op: str, norm, n: int, inverse: bool) -> float:
    if norm is None:
        norm = "backward"
    if norm not in NORMS:
        raise op_error(op, f"norm={norm!r} is not one of {', '.join(map(repr, NORMS))}")
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm == "backward") == inverse else 1.0


def _complex_dtype(op: str, dtype: np.dtype) -> D.DType:
    """NumPy's result dtype of a transform of ``dtype``."""
    if dtype.kind == "c":
        return complex64 if dtype == np.complex64 else complex128
    if dtype.kind in "biu" or dtype == np.float64:
        return complex128
    if dtype in (np.float16, np.float32):
        return complex64
    raise op_error(op, f"takes arrays of numbers, not {dtype}", OpTypeError)


def _length(op: str, n, default: int) -> int:
    if n is None:
        n = default
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise op_error(op, f"n must be an int, not {type(n).__name__}", OpTypeError)
    if n < 1:
        raise op_error(op, f"invalid number of data points ({n}): n must be at least 1")
    return int(n)


def transform(
    op: str,
    a,
    memory,
    *,
    length: int,
    axis: int,
    scale: float,
    inverse: bool,
    mode: str = "c2c",
    out: int | None = None,
    double: bool = False,
    real: D.DType | None = None,
):
    """The length-``length`` transform of ``a`` (a host or device array) along ``axis``
    (normalised), times ``scale``, its buffers made by ``memory``: ``mode`` "c2c" (a
    complex or real input), "r2c" (rfft: the first ``length // 2 + 1`` columns) or "c2r"
    (irfft: the Hermitian spectrum of ``length`` points rebuilt from ``a``'s first
    ``length // 2 + 1``); then, for the adjoints, the interior bins doubled
    (``double``), the columns cropped or zero-padded to ``out``, and the real part taken
    in dtype ``real``."""
    shape = tuple(int(d) for d in a.shape)
    dtype = np.dtype(a.dtype)
    ct = _complex_dtype(op, dtype)
    given = shape[axis]
    device = is_device_array(a)
    if device and axis != len(shape) - 1:
        raise op_error(op, "a device array is transformed along its last axis (axis=-1)")
    if not device:
        a = np.ascontiguousarray(np.moveaxis(np.asarray(a), axis, -1))
    lead = a.shape[:-1]
    rows = math.prod(lead)
    rows_a = a.reshape((rows, given))
    t = _Transform(op, rows, ct, memory)
    if mode == "c2r":
        if dtype.kind != "c":  # a real spectrum: its imaginary parts are 0
            spectrum = t.empty(given)
            t.launch("load_real", (rows, given), rows_a, spectrum, D.from_numpy(dtype))
            rows_a = spectrum
        full = t.empty(length)
        t.launch("load_hermitian", (rows, length), rows_a, full)
    else:
        full = t.empty(length)
        if dtype.kind == "c":
            t.launch("load_complex", (rows, length), rows_a, full)
        else:
            t.launch("load_real", (rows, length), rows_a, full, D.from_numpy(dtype))
    result = t.transform(full, length, 1.0 if inverse else -1.0, scale)
    if mode == "r2c":  # rfft: the first n // 2 + 1 columns
        half = t.empty(length // 2 + 1)
        t.launch("first_columns", (rows, length // 2 + 1), result, half)
        result = half
    width = int(tuple(result.shape)[-1])  # (the simulator's shapes take no index -1)
    if double:
        t.launch("double_interior", (rows, width), result, result, length)
    if out is not None and out != width:
        resized = t.empty(out)
        t.launch("load_complex", (rows, out), result, resized)
        result, width = resized, out
    if real is not None:
        parts = t.empty(width, real)
        t.launch("real_part", (rows, width), result, parts, real)
        result = parts
    result = result.reshape((*lead, width))
    return result if device else np.moveaxis(result, -1, axis)


def node_result(node, a, memory):
    """The value of a graph's transform node (declare.fft_type) on array ``a``."""
    attrs = node.attrs
    result = transform(
        node.op,
        a,
        memory,
        length=attrs["n"],
        axis=attrs["axis"],
        scale=attrs["scale"],
        inverse=node.op in ("ifft", "irfft"),
        mode={"rfft": "r2c", "irfft": "c2r"}.get(node.op, "c2c"),
        out=attrs.get("out"),
        double=attrs.get("double", False),
        real=node.dtype if node.dtype.kind != "c" else None,
    )
    return np.ascontiguousarray(result) if isinstance(result, np.ndarray) else result


__all__ = ["NORMS", "kernels", "node_result", "transform"]
