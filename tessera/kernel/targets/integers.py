"""The language's integer rules where hardware and Numba disagree, written once.

Every target calls these (the debug target as plain Python on NumPy scalars, the CPU and
CUDA targets compiled by Numba and inlined), so they agree bit for bit (docs/language.md,
"Integers"):

* ``a << b`` and ``a >> b`` with a count outside ``[0, width)`` give 0 (``>>`` of a
  negative signed value: -1), where x86 masks the count and LLVM makes poison;
* ``a ** b`` on integers wraps at the type's width; a negative exponent gives the
  truncated quotient ``1 / a**-b``: ``1`` for ``a == 1``, ``±1`` for ``a == -1``, else 0;
* a float converted to an integer type saturates at the type's range, and NaN gives 0
  (what CUDA's conversions do), where x86 gives the "indefinite" value and LLVM poison;
* ``a // b`` and ``a % b`` by zero give 0, and ``MIN // -1`` wraps to ``MIN`` (``MIN % -1``
  is 0), where the divide instruction traps;
* ``abs(MIN)`` wraps to ``MIN``;
* ``for v in range(start, stop, step)`` runs as many iterations as Python's ``range``,
  counted without overflow (Numba's ``range`` overflows near the ends of i64), and none
  when ``step`` is 0 at run time (the debug target reports that): generated inline by
  ``SourceEmitter.loop_header``.

Numba marks signed arithmetic "no signed wrap" (LLVM may then assume it never overflows,
and turn ``while d > 0: d *= d`` into an endless loop), so these rules multiply in the
unsigned type of the same width, and generated code adds, subtracts, multiplies and
negates 64-bit signed values the same way (``SourceEmitter.binop``); narrower types are
computed in 64 bits by Numba and cannot overflow before they are truncated.

Each rule is made per integer type (``make(np.int32)``), so generated code calls
``_shl_int32(a, b)`` and gets an ``int32``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# integer operators computed by a rule here, by the prefix of the rule's name
OPERATORS = {"<<": "_shl", ">>": "_shr", "**": "_pow", "//": "_fdiv", "%": "_mod"}
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


def _unsigned(t: type) -> type:
    return np.dtype(f"u{np.dtype(t).itemsize}").type


def _power(t: type) -> Callable:
    signed = np.iinfo(t).min < 0
    one, zero = t(1), t(0)
    minus_one = t(-1) if signed else t(1)
    u = _unsigned(t)

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
                result = t(u(result) * u(base))
            base = t(u(base) * u(base))
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


def _division(t: type) -> tuple[Callable, Callable, Callable]:
    signed = np.iinfo(t).min < 0
    zero = t(0)
    minus_one = t(-1) if signed else t(0)
    u = _unsigned(t)

    def floordiv(a, b):
        if b == zero:
            return zero
        if signed and b == minus_one:
            return t(u(zero) - u(a))  # MIN // -1 wraps to MIN
        return t(a // b)

    def mod(a, b):
        if b == zero or (signed and b == minus_one):
            return zero
        return t(a % b)

    def absolute(a):
        return t(u(zero) - u(a)) if a < zero else a

    return floordiv, mod, absolute


def trip_count(start, stop, step):
    """The number of values of ``range(start, stop, step)`` (i64 values) as a uint64,
    computed without overflow; 0 for a zero step."""
    if step > 0 and start < stop:
        return (np.uint64(stop) - np.uint64(start) - np.uint64(1)) // np.uint64(step) + np.uint64(1)
    if step < 0 and start > stop:
        down = np.uint64(start) - np.uint64(stop) - np.uint64(1)
        return down // (np.uint64(0) - np.uint64(step)) + np.uint64(1)
    return np.uint64(0)


def block_origin(origin, size, extent):
    """The origin (i64) of a block of ``size`` along an array axis of ``extent``: moved to
    ``-size``, still wholly outside, where the block lies wholly outside the axis (past
    either end, however far), so that ``origin + element`` never wraps around."""
    return origin if -size < origin < extent else np.int64(-size)


def functions(compile_: Callable = lambda fn: fn) -> dict[str, Callable]:
    """Every rule for every integer type, by the name generated code calls it by
    (``_shl_int32``, ``_pow_int32``, ``_f2i_int32``, ``_fdiv_int32``, ...), each passed
    through ``compile_`` (Numba's ``njit`` for the compiled targets)."""
    out = {}
    for t in INT_TYPES:
        name = np.dtype(t).name
        shl, shr = _shifts(t)
        out[f"_shl_{name}"] = compile_(shl)
        out[f"_shr_{name}"] = compile_(shr)
        out[f"_pow_{name}"] = compile_(_power(t))
        out[f"_f2i_{name}"] = compile_(_from_float(t))
        floordiv, mod, absolute = _division(t)
        out[f"_fdiv_{name}"] = compile_(floordiv)
        out[f"_mod_{name}"] = compile_(mod)
        out[f"_abs_{name}"] = compile_(absolute)
    out["_trip_count"] = compile_(trip_count)
    out["_block_origin"] = compile_(block_origin)
    return out
