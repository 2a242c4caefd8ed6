"""The ``math`` module functions kernels may call, declared once.

Each entry gives the number of arguments and the kind of result: ``float`` (the float
type of the arguments; ints compute in f64), ``bool`` or ``int`` (``floor``, ``ceil`` and
``trunc`` return i64, as in Python).
"""

from __future__ import annotations

_FLOAT_1 = (
    "exp expm1 log log2 log10 log1p sqrt sin cos tan asin acos atan sinh cosh tanh asinh "
    "acosh atanh fabs erf erfc"
).split()
_FLOAT_2 = "atan2 pow hypot copysign fmod".split()

MATH: dict[str, tuple[int, str]] = {
    **{name: (1, "float") for name in _FLOAT_1},
    **{name: (2, "float") for name in _FLOAT_2},
    **{name: (1, "bool") for name in ("isnan", "isinf", "isfinite")},
    **{name: (1, "int") for name in ("floor", "ceil", "trunc")},
}
