"""Values in the debug target's interpreter: NumPy scalars in the compute representation
the other targets use (f16/bf16 compute in f32), the operators on them, and conversions
exactly where the typer puts them, so results agree with the CPU target bit for bit.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .... import dtypes as D
from ... import ir
from ...typer import concrete
from .. import integers, semantics

HALF = D.COMPUTED_IN_F32
NUMPY_MATH = semantics.NUMPY_MATH
BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "**": lambda a, b: a**b,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    "<<": lambda a, b: a << b,
    ">>": lambda a, b: a >> b,
}
COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def compute_type(dtype: D.DType) -> type:
    """The NumPy scalar type a value of ``dtype`` is held in while computing."""
    return np.float32 if dtype in HALF else dtype.np_dtype.type


INTEGER_RULES = integers.functions()  # shifts, powers, float → int (integers.py)


def converter(src: ir.Type, dst: ir.Type):
    """A function converting a computed value from type ``src`` to ``dst``."""
    s, d = concrete(src).dtype, concrete(dst).dtype
    if s == d:
        return None
    if s.is_float and d.is_int:
        return INTEGER_RULES[f"_f2i_{d.np_dtype.name}"]
    return cast_function(d, from_half=s in HALF)


def cast_function(d: D.DType, from_half: bool = False):
    if d == D.bool_:
        return lambda v: np.bool_(v != 0)
    if d in HALF:
        return lambda v: np.float32(to_narrow(v, d))
    if from_half and d == D.f32:
        return None
    target = d.np_dtype.type
    return lambda v: target(v)


def to_narrow(value, dtype: D.DType) -> object:
    """A value rounded to a float stored narrower than f32 (f16, bf16, f8e4m3, f8e5m2),
    as that type's NumPy scalar, with the language's rules (semantics.py)."""
    if dtype == D.f16:
        return np.float16(np.float32(value))
    if dtype == D.bf16:
        return to_bf16(value)
    bits = np.float32(value).view(np.uint32)
    return np.uint8(semantics.f8_bits(bits, *semantics.F8_FORMATS[dtype.name])).view(dtype.np_dtype)


def to_bf16(value) -> object:
    """A value rounded to bfloat16 with the language's rule (semantics.bf16_bits)."""
    bits = semantics.bf16_bits(np.float32(value).view(np.uint32))
    return np.uint16(bits).view(ml_dtypes.bfloat16)


def convert(fn, src: ir.Type, dst: ir.Type):
    """``fn`` followed by the conversion from ``src`` to ``dst`` (if any); a weak float
    literal that meets an f64 is that f64 exactly (not the f32 of a lone literal)."""
    literal = getattr(fn, "literal", None)
    if literal is not None and getattr(src, "weak", False) and concrete(dst).dtype == D.f64:
        value = np.float64(literal)
        return lambda f: value
    c = converter(src, dst)
    return fn if c is None else (lambda f: c(fn(f)))
