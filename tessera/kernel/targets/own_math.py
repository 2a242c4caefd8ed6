"""Math functions the language computes itself, so every target gives the same bits and
the CPU's loops vectorise (a call into libm stops LLVM's vectoriser).

f32 ``exp``, ``log``, ``tanh`` and ``erf`` (and the same of f16/bf16, which compute in
f32), built from f32 arithmetic, fused multiply-adds and integer operations on the bits
only (no libm), so NumPy, LLVM and the simulator round every step alike. The fused
multiply-adds are written out (``fma(a, b, c)``, rounded once on every target: LLVM's
``llvm.fma``, libdevice's ``fmaf``, an exact emulation in f64 for NumPy); every other
product is rounded on its own, as in kernel code. They are a vector FMA instruction each on
the CPU: the polynomials cost half the instructions, exp runs 1.45× faster in cache. LLVM
turns the branches into selects, so a loop calling these functions vectorises, with one
exception found by reading the assembly: an early return before a division keeps a loop
from vectorising, so ``log``, ``tanh`` and ``erf`` compute every piece and select at the
end. The largest errors against f64, measured over every f32 input, are in
docs/language.md (exp 0.90 ulp, log 1.16, tanh 1.37, erf 1.11) and tested in
tests/test_own_math.py. The coefficients called minimax below were fitted for these
intervals (Lawson's iteration on a least-squares fit, in f64, then rounded to f32).

* ``exp``: Cody–Waite range reduction ``x = n ln2 + r`` with ``|r| <= ln2 / 2`` (``n``
  rounded by adding and subtracting 1.5·2²³; ln2 split in a high part exact in f32
  products and a low part), ``exp(r) = 1 + r (1 + r P(r))`` with ``P`` a degree-4
  minimax polynomial by Horner's rule, and the scale ``2**n`` built from exponent bits as two
  factors (so results down to the subnormals and up to the largest f32 are rounded once).
  Inputs are clamped to [-104, 89], where the arithmetic itself gives 0 and inf; NaN gives
  NaN.
* ``log``: ``x = 2**k m`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` read off the bits
  (subnormals scaled by ``2**25`` first), ``f = m - 1`` (exact) and
  ``log(1 + f) = f - f²/2 + f³ P(f)`` with ``P`` a degree-6 minimax polynomial (no
  division: a vector division takes longer than the polynomial), plus ``k ln2`` in two
  parts. 0 gives -inf, negatives NaN, inf inf.
* ``tanh``: below 0.625 ``x + x³ P(x²)`` (a degree-4 minimax ``P``), above
  ``1 - 2 / (exp(2|x|) + 1)`` with the own ``exp``, which is 1 from 9.01 on (also where
  ``exp`` overflows to inf).
* ``erf``: below 0.9 ``x + x Q(x²)`` (degree-6 minimax ``Q``), above
  ``1 - exp(p(|x|))`` with ``p`` a degree-9 minimax polynomial of ``log(erfc)`` on
  ``[0.9, 4]``, ``|x|`` clamped to 4 (the result is 1 from 3.92 on).

Each target supplies ``bits_f32`` (uint32 bits → f32), ``f32_bits`` (f32 → uint32) and
``fma``: NumPy's view and :func:`numpy_fma_f32` in the debug target and the simulator, an
LLVM bitcast and ``llvm.fma`` on the CPU, libdevice on CUDA. Plain arithmetic on
``np.float32`` values, so Numba compiles it and the debug target runs it as it is (where
the pieces not selected may overflow: callers there turn NumPy's warnings off).
"""

from __future__ import annotations

import math

import numpy as np

_F = np.float32
LOG2E = _F(1.4426950408889634)
HALF, ONE, TWO = _F(0.5), _F(1.0), _F(2.0)
LN2_HI = _F(0.693145751953125)  # few bits: n * LN2_HI is exact for the n that occur
LN2_LO = _F(0.6931471805599453 - 0.693145751953125)
NEG_LN2_HI, NEG_LN2_LO = -LN2_HI, -LN2_LO
# exp(r) = 1 + r (1 + r P(r)) on |r| <= ln2 / 2, P of degree 4, minimax for the relative error
X2, X3, X4 = _F(0.49999994), _F(0.16666521), _F(0.041668389)
X5, X6 = _F(0.0083687166), _F(0.0013814599)
OVERFLOW, UNDERFLOW = _F(89.0), _F(-104.0)
ROUND = _F(1.5 * 2**23)  # adding it to an f32 below 2**22 in size rounds it to an integer
ROUND_BIAS = _F(1.5 * 2**23 + 127)  # the same, plus the exponent bias
MIN_EXPONENT, MAX_EXPONENT = _F(-125.0), _F(127.0)  # of exp's first scale factor
INF, ZERO = _F(np.inf), _F(0.0)
NAN, NEG_INF = _F(np.nan), _F(-np.inf)

# log(1 + f) = f - f²/2 + f³ P(f) on [sqrt(1/2) - 1, sqrt(2) - 1], P of degree 6, minimax
# for the relative error (degree 7 measured 0.86 ulp at most and 5 % slower)
L2, L3, L4 = _F(0.33333910), _F(-0.25001338), _F(0.19963063)
L5, L6, L7 = _F(-0.16577585), _F(0.14914769), _F(-0.14267488)
L8 = _F(0.087004311)
TWO25 = _F(2.0**25)
SQRT_HALF_BITS = np.uint32(0x3F3504F3)  # the bits of sqrt(1/2) in f32
ONE_MINUS_SQRT_HALF_BITS = np.uint32(0x3F800000 - 0x3F3504F3)
SMALLEST_NORMAL_BITS = np.uint32(0x00800000)
ROUND_BITS = np.uint32(0x4B400000)  # the bits of ROUND
MINUS_BIAS, MINUS_BIAS_25 = _F(-127.0), _F(-127.0 - 25.0)

# tanh: x + x³ P(x²) on [0, 0.625], minimax for the relative error
TANH_SMALL = _F(0.625)
T0, T1, T2 = _F(-0.3333328), _F(0.13331442), _F(-0.053739704)
T3, T4 = _F(0.020639053), _F(-0.005704947)

# erf: x + x Q(x²) on [0, 0.9]; 1 - exp(p(x)) on [0.9, 4], p ≈ log(erfc), both minimax
ERF_SMALL, ERF_ONE = _F(0.9), _F(4.0)
E0, E1, E2, E3 = _F(0.12837917), _F(-0.37612635), _F(0.11283715), _F(-0.026860509)
E4, E5, E6 = _F(0.0052038585), _F(-0.00081756315), _F(8.5130705e-05)
P0, P1, P2, P3 = _F(8.3978404e-05), _F(-1.1289679), _F(-0.63478476), _F(-0.10612039)
P4, P5, P6 = _F(0.02307826), _F(-0.0029132282), _F(-7.0536946e-05)
P7, P8, P9 = _F(0.00010618843), _F(-1.826305e-05), _F(1.1358343e-06)


def make_pow2_f32(bits_f32, f32_bits):
    """``2**m`` for an integral f32 ``m`` in [-126, 127], made from bits: adding
    ``ROUND_BIAS`` puts ``m + 127`` in the low mantissa bits; the shift moves them into the
    exponent and the rest out of the 32 bits."""

    def pow2_f32(m):
        return bits_f32(np.uint32(f32_bits(m + ROUND_BIAS) << np.uint32(23)))

    return pow2_f32


def make_exp_f32(pow2_f32, fma):
    """``exp`` of an f32 value, with the target's own ``pow2_f32`` and ``fma``."""

    def exp_f32(x):
        # every step is f32 arithmetic or a 32-bit integer step (no int64 conversion),
        # so a vector of 16 lanes stays 16 lanes wide throughout. Clamped to [-104, 89],
        # the arithmetic itself gives 0 below and inf above; a NaN is put back at the end
        c = min(max(x, UNDERFLOW), OVERFLOW)
        n = fma(c, LOG2E, ROUND) - ROUND  # c / ln2 rounded to an integer (a float)
        r = fma(n, NEG_LN2_LO, fma(n, NEG_LN2_HI, c))  # n * LN2_HI is exact
        p = fma(fma(fma(fma(X6, r, X5), r, X4), r, X3), r, X2)
        u = fma(r, fma(r, p, ONE), ONE)  # 1 + r (1 + r P(r)), in [sqrt(1/2), sqrt(2)]
        # 2**n as two factors 2**n1 * 2**n2, n1 in [-125, 127]: u * 2**n1 is then an
        # exact normal f32, and the second product rounds once, down to the subnormals
        # and up to the largest f32
        n1 = min(max(n, MIN_EXPONENT), MAX_EXPONENT)
        y = (u * pow2_f32(n1)) * pow2_f32(n - n1)
        return x if x != x else y

    return exp_f32


def make_log_f32(bits_f32, f32_bits, fma):
    """``log`` of an f32 value, with the target's bit casts both ways and ``fma``."""

    def log_f32(x):
        # 32-bit integer steps only (each wrapped back to uint32), so a vector of 16
        # lanes stays 16 lanes wide; k is made a float by the ROUND trick, not converted
        b = f32_bits(x)
        k0 = MINUS_BIAS
        if b < SMALLEST_NORMAL_BITS:  # zero or subnormal: scale into the normal range first
            b = f32_bits(x * TWO25)
            k0 = MINUS_BIAS_25
        b = np.uint32(b + ONE_MINUS_SQRT_HALF_BITS)  # moves the exponent step to m = sqrt(1/2)
        e = np.uint32(b >> np.uint32(23))
        dk = (bits_f32(np.uint32(e + ROUND_BITS)) - ROUND) + k0  # e - 127 (- 25), exact
        f = bits_f32(np.uint32((b & np.uint32(0x007FFFFF)) + np.uint32(SQRT_HALF_BITS))) - ONE
        # log(1 + f) = f - f²/2 + f³ P(f): no division, which takes a vector unit longer
        # than the whole polynomial
        z = f * f
        p = fma(fma(fma(fma(fma(fma(L8, f, L7), f, L6), f, L5), f, L4), f, L3), f, L2)
        hz = HALF * z
        y = fma(dk, LN2_HI, fma(f * z, p, dk * LN2_LO) - hz + f)  # dk * LN2_HI is exact
        # the special cases after the arithmetic (finite for every input): returning
        # before it would keep LLVM from vectorising a loop over log (the division)
        if x == ZERO:
            y = NEG_INF
        if x == INF:
            y = x
        if x < ZERO:
            y = NAN
        if x != x:
            y = x
        return y

    return log_f32


def make_tanh_f32(exp_f32, fma):
    """``tanh`` of an f32 value, with the target's own ``exp_f32`` and ``fma``."""

    def tanh_f32(x):
        a = abs(x)
        z = a * a
        p = fma(fma(fma(fma(T4, z, T3), z, T2), z, T1), z, T0)
        small = fma(a * z, p, a)
        # 1 from |x| > 9.01 on (2 / (exp + 1) is below half an ulp), also when exp is inf
        big = ONE - TWO / (exp_f32(a + a) + ONE)
        t = small if a < TANH_SMALL else big
        return t if x > ZERO else (-t if x < ZERO else x)  # x: NaN, and -0.0 stays -0.0

    return tanh_f32


def make_erf_f32(exp_f32, fma):
    """``erf`` of an f32 value, with the target's own ``exp_f32`` and ``fma``."""

    def erf_f32(x):
        a = abs(x)
        s = x * x
        q = fma(fma(fma(fma(fma(fma(E6, s, E5), s, E4), s, E3), s, E2), s, E1), s, E0)
        t = a if a < ERF_ONE else ERF_ONE  # from 4 on the result is 1 (erfc(4) is 1.5e-8)
        p = fma(fma(fma(fma(fma(P9, t, P8), t, P7), t, P6), t, P5), t, P4)
        p = fma(fma(fma(fma(p, t, P3), t, P2), t, P1), t, P0)
        e = ONE - exp_f32(p)
        r = fma(x, q, x) if a < ERF_SMALL else (e if x > ZERO else -e)
        return x if x != x else r

    return erf_f32


def numpy_bits_f32(bits):
    """uint32 bits → f32 by NumPy (the debug target, the simulator)."""
    return np.uint32(bits).view(np.float32)


def numpy_f32_bits(value):
    """f32 → its uint32 bits by NumPy (the debug target, the simulator)."""
    return np.float32(value).view(np.uint32)


def numpy_fma_f32(a, b, c):
    """``a * b + c`` of f32 values rounded once, as the CPU's and the GPU's fused
    multiply-add rounds it (the debug target, the simulator; NumPy has no fma).

    In f64 the product is exact (24 + 24 bits) and the sum's rounding error is known
    exactly (Knuth's two-sum); the f64 sum is then rounded to odd (moved one place toward
    the exact value when inexact and even), which makes its rounding to f32 the correct
    rounding of the exact value (53 bits are more than 24 + 2; Boldo and Melquiond)."""
    product, addend = float(a) * float(b), float(c)
    s = product + addend
    if s - s == 0.0:  # finite: the two-sum's error is exact
        v = s - product
        error = (product - (s - v)) + (addend - v)
        if error != 0.0 and int(math.frexp(s)[0] * 2.0**53) % 2 == 0:
            s = math.nextafter(s, math.inf if error > 0.0 else -math.inf)
    return np.float32(s)


def functions(bits_f32, f32_bits, fma, jit) -> dict:
    """The own functions by their names in generated code, each passed through ``jit``
    (the target's compiler; the identity where kernels run as Python)."""
    exp_f32 = jit(make_exp_f32(jit(make_pow2_f32(bits_f32, f32_bits)), fma))
    return {
        "_exp_f32": exp_f32,
        "_log_f32": jit(make_log_f32(bits_f32, f32_bits, fma)),
        "_tanh_f32": jit(make_tanh_f32(exp_f32, fma)),
        "_erf_f32": jit(make_erf_f32(exp_f32, fma)),
    }


# what generated code calls for a math function of a dtype, where the language has its own
OWN = {(name, "float32"): f"_{name}_f32" for name in ("exp", "log", "tanh", "erf")}
