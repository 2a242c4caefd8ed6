"""Language semantics every backend reproduces exactly, written once.

The fixed reduction tree, NaN-propagating ``min``/``max`` and bfloat16 rounding are plain
Python functions: the debug target runs them as they are, and the CPU and CUDA targets
compile the very same code with Numba (:func:`jitted`) and inline it into their kernels, so
all targets agree bit for bit by construction. (Plain functions, compiled on demand, keep
Numba out of ``import tessera``: a process that only loads cached kernels never imports it.)

The tree (docs/language.md, "Determinism"): with ``p`` the largest power of two not
above ``m``, first ``s[i] op= s[i + p]`` for ``i < m - p``, then halve:
``s[i] op= s[i + h]`` for ``i < h``, ``h = p/2, p/4, ..., 1``. The order depends only
on ``m``, never on threads or timing.
"""

from __future__ import annotations

import functools
import math
import types

import numpy as np

from ... import dtypes as D
from ...tile.mathfns import MATH

# Numba's options: inlined into the caller's Numba IR (numba-cuda compiles these for
# device code the same way), or (``CALLED``, the CPU target) typed and lowered once per
# signature in a process and inlined by LLVM: a kernel's compile does not type each call
# site's copy of the body again
_JIT = dict(nogil=True, cache=False, error_model="numpy", inline="always")
CALLED = dict(nogil=True, cache=False, error_model="numpy", forceinline=True)


def fmax(a, b):
    """NaN-propagating maximum (like numpy.maximum), the language's max()."""
    return a if (a > b or a != a) else b


def fmin(a, b):
    """NaN-propagating minimum (like numpy.minimum), the language's min()."""
    return a if (a < b or a != a) else b


def add(a, b):
    return a + b


def add_i64(a, b):
    """``add`` for 64-bit signed integers, wrapping: computed unsigned, as Numba's signed
    addition may assume it never overflows (integers.py)."""
    return np.int64(np.uint64(a) + np.uint64(b))


def tree_reduce(s, m, combine):
    """Reduce ``s[:m]`` in place with the fixed tree; ``combine`` is add, fmax or fmin."""
    p = 1
    while p * 2 <= m:
        p *= 2
    for i in range(m - p):
        s[i] = combine(s[i], s[i + p])
    h = p // 2
    while h >= 1:
        for i in range(h):
            s[i] = combine(s[i], s[i + h])
        h //= 2
    return s[0]


def bit_and(a, b):
    return a & b


def bit_or(a, b):
    return a | b


def bit_xor(a, b):
    return a ^ b


def replace(a, b):
    return b


# Each atomic update's new value from the old one and the value given (primitives.py's
# ATOMIC_OPS but "cas", which compares bits); integers wrap, 16-bit floats are updated
# in f32 and rounded once when stored.
ATOMIC_UPDATE = {
    "add": add,
    "max": fmax,
    "min": fmin,
    "and": bit_and,
    "or": bit_or,
    "xor": bit_xor,
    "xchg": replace,
}


def bf16_bits(bits):
    """The bits of a float32 (as uint32) rounded to a bfloat16 (uint16): round to nearest
    even; a NaN keeps its payload's top bits, and gets the quiet bit only where
    truncation would turn it into infinity."""
    if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        high = bits >> np.uint32(16)
        if (high & np.uint32(0x7F)) == np.uint32(0):
            high |= np.uint32(0x0040)
        return np.uint16(high)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return np.uint16((bits + rounding) >> np.uint32(16))


# The 8-bit floats (OCP FP8, as ml_dtypes defines them): f8e4m3 is float8_e4m3fn (4
# exponent bits, 3 mantissa bits, bias 7, no infinities: 0x7F is NaN, 448 the largest),
# f8e5m2 is float8_e5m2 (5 and 2, bias 15, IEEE infinities and NaNs, 57344 the largest).
# A value is rounded to nearest even; one past the largest after rounding (and an
# infinity) becomes NaN in f8e4m3 and infinity in f8e5m2, as ml_dtypes converts.
F8_FORMATS = {"f8e4m3": (4, 3, True), "f8e5m2": (5, 2, False)}  # ebits, mbits, finite-only


def f8_bits(bits, ebits, mbits, finite):
    """The bits of a float32 (as uint32) rounded to an 8-bit float's code (uint8)."""
    sign = (bits >> np.uint32(24)) & np.uint32(0x80)
    a = bits & np.uint32(0x7FFFFFFF)
    nan = np.uint32(0x7F) if finite else np.uint32(0x7E)
    inf = np.uint32(0x7F) if finite else np.uint32(0x7C)
    if a > np.uint32(0x7F800000):
        return np.uint8(sign | nan)
    if a == np.uint32(0x7F800000):
        return np.uint8(sign | inf)
    e32 = np.int64(a >> np.uint32(23))
    if e32 == 0:  # zero or an f32 subnormal: far below the smallest 8-bit value
        return np.uint8(sign)
    m32 = np.int64(a & np.uint32(0x7FFFFF))
    bias = (1 << (ebits - 1)) - 1
    exponent = e32 - 127
    if exponent >= 1 - bias:  # a normal 8-bit value
        shift = 23 - mbits
        code = ((exponent + bias) << mbits) | (m32 >> shift)
        rest = m32 & ((1 << shift) - 1)
    else:  # subnormal: the significand with its leading one, shifted further
        shift = 23 - mbits + (1 - bias - exponent)
        if shift > 24:
            return np.uint8(sign)
        full = m32 | (1 << 23)
        code = full >> shift
        rest = full & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    if rest > half or (rest == half and (code & 1) == 1):
        code += 1
    largest = 0x7E if finite else 0x7B
    if code > largest:
        return np.uint8(sign | inf)
    return np.uint8(sign | np.uint32(code))


def f8_value_bits(code, ebits, mbits, finite):
    """The float32 bits (uint32) of an 8-bit float's code: exact."""
    c = np.uint32(code)
    sign = (c & np.uint32(0x80)) << np.uint32(24)
    e = np.int64((c >> np.uint32(mbits)) & np.uint32((1 << ebits) - 1))
    m = np.int64(c & np.uint32((1 << mbits) - 1))
    top = (1 << ebits) - 1
    if (finite and e == top and m == (1 << mbits) - 1) or (not finite and e == top and m != 0):
        return sign | np.uint32(0x7FC00000)
    if not finite and e == top:
        return sign | np.uint32(0x7F800000)
    bias = (1 << (ebits - 1)) - 1
    if e == 0:
        if m == 0:
            return sign
        e = 1  # subnormal: normalise the significand
        while (m & (1 << mbits)) == 0:
            m <<= 1
            e -= 1
        m &= (1 << mbits) - 1
    return sign | np.uint32(((e - bias + 127) << 23) | (m << (23 - mbits)))


COMBINE = {"sum": add, "max": fmax, "min": fmin}  # each group reduction's combine


def combine(op: str, dtype: D.DType):
    """The combine function of group reduction ``op`` on values of ``dtype``."""
    return add_i64 if op == "sum" and dtype == D.i64 else COMBINE[op]


# NumPy's names for the float functions of the math module where they differ
_NUMPY_NAMES = {
    "asin": "arcsin",
    "acos": "arccos",
    "atan": "arctan",
    "atan2": "arctan2",
    "asinh": "arcsinh",
    "acosh": "arccosh",
    "atanh": "arctanh",
    "pow": "power",
}
# The language's float math functions computed by NumPy, which gives NaN or inf where the
# math module raises (``math.sqrt(-1.0)``), as a GPU and LLVM do; erf/erfc from math.
NUMPY_MATH = {
    name: getattr(np, _NUMPY_NAMES.get(name, name), None) or getattr(math, name)
    for name, (_, kind) in MATH.items()
    if kind == "float"
}


@functools.cache
def jitted(called: bool = False) -> types.SimpleNamespace:
    """These functions compiled by Numba (lazily, inlined where called: in Numba's IR, or
    with ``called`` by LLVM, see ``CALLED``), by the same names."""
    import numba

    jit = numba.njit(**(CALLED if called else _JIT))
    return types.SimpleNamespace(
        fmax=jit(fmax),
        fmin=jit(fmin),
        add=jit(add),
        add_i64=jit(add_i64),
        **{f"atomic_{op}": jit(fn) for op, fn in ATOMIC_UPDATE.items()},
        tree_reduce=jit(tree_reduce),
        bf16_bits=jit(bf16_bits),
        f8_bits=jit(f8_bits),
        f8_value_bits=jit(f8_value_bits),
    )
