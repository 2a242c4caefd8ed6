"""The language's integer rules where hardware and Numba disagree, written once.

Every target calls these (the debug target as plain Python on NumPy scalars, the CPU and
CUDA targets compiled by Numba and inlined), so they agree bit for bit (docs/language.md,
"Integers"):

* ``a << b`` and ``a >> b`` with a count outside ``[0, width)`` give 0 (``>>`` of a
  negative signed value: -1), where x86 masks the count and LLVM makes poison;
* ``a ** b`` on integers wraps at the type's width; a negative exponent gives the
  truncated quotient ``1 / a**-b``: ``1`` for ``a == 1``, ``±1`` for ``a == -1``, else 0;
* a float converted to an integer type saturates at the type's range, and NaN gives 0
  (what CUDA's conversions do), where x86 gives the "indefinite" value and LLVM poison.

Each rule is made per integer type (``make(np.int32)``), so generated code calls
``_shl_int32(a, b)`` and gets an ``int32``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

INT_TYPES = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)


def _shifts(t: type) -> tuple[Callable, Callable]:
    info = np.iinfo(t)
    bits, signed = info.bits, info.min < 0
    zero, minus_one = t(0), t(-1) if signed else t(0)

    def shl(a, b):
        if b < 0 or b >= bits:
            return zero
        return t(a << b)

    def shr(a, b):
        if b < 0 or b >= bits:
            return minus_one if a < zero else zero
        return t(a >> b)

    return shl, shr


def _power(t: type) -> Callable:
    signed = np.iinfo(t).min < 0
    one, zero = t(1), t(0)
    minus_one = t(-1) if signed else t(1)

    def power(a, b):
        if b < 0:
            if a == one:
                return one
            if signed and a == minus_one:
                return one if b % 2 == 0 else minus_one
            return zero
        result, base, n = one, a, b
        while n > 0:
            if n % 2 == 1:
                result = t(result * base)
            base = t(base * base)
            n = n // 2
        return result

    return power


def _from_float(t: type) -> Callable:
    info = np.iinfo(t)
    low_f, high_f = float(info.min), float(info.max) + 1.0  # exact powers of two
    zero, low, high = t(0), t(info.min), t(info.max)

    def from_float(x):
        if x != x:
            return zero
        if x < low_f:
            return low
        if x >= high_f:
            return high
        return t(x)

    return from_float


def functions(compile_: Callable = lambda fn: fn) -> dict[str, Callable]:
    """Every rule for every integer type, by the name generated code calls it by
    (``_shl_int32``, ``_shr_int32``, ``_pow_int32``, ``_f2i_int32``, ...), each passed
    through ``compile_`` (Numba's ``njit`` for the compiled targets)."""
    out = {}
    for t in INT_TYPES:
        name = np.dtype(t).name
        shl, shr = _shifts(t)
        out[f"_shl_{name}"] = compile_(shl)
        out[f"_shr_{name}"] = compile_(shr)
        out[f"_pow_{name}"] = compile_(_power(t))
        out[f"_f2i_{name}"] = compile_(_from_float(t))
    return out
