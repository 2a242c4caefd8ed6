"""Element types and the annotation vocabulary of kernel signatures.

``f32[n]`` is an array annotation, ``mut[f32[n]]`` an array the kernel writes, a bare
``f32`` a scalar and ``constexpr`` a compile-time constant. Inside a kernel a dtype is
also a cast (``f32(x)``); outside, calling it converts a Python value to NumPy's scalar.

Storage decisions (see docs/language.md): ``f16`` arrays are NumPy ``float16``; ``bf16``
arrays are ``ml_dtypes.bfloat16`` (the type JAX uses), ``f8e4m3``/``f8e5m2`` arrays
``ml_dtypes.float8_e4m3fn``/``float8_e5m2``. All compute in f32 and round back when
stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

KiB = 1024
MiB = 1024 * 1024


@dataclass(frozen=True, eq=False)
class DType:
    """One element type. Identity is the name, so instances compare by name."""

    name: str
    np_dtype: np.dtype
    kind: str  # "f" float, "i" signed int, "u" unsigned int, "b" bool, "c" complex
    bits: int

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def itemsize(self) -> int:
        return self.np_dtype.itemsize

    def __getitem__(self, dims: object) -> ArrayAnnotation:
        if not isinstance(dims, tuple):
            dims = (dims,)
        return ArrayAnnotation(self, tuple(dims))

    def __call__(self, value: object) -> np.generic:
        return self.np_dtype.type(value)


def _dt(name: str, np_type: object, kind: str) -> DType:
    npd = np.dtype(np_type)
    return DType(name, npd, kind, npd.itemsize * 8)


f16 = _dt("f16", np.float16, "f")
bf16 = _dt("bf16", ml_dtypes.bfloat16, "f")
f32 = _dt("f32", np.float32, "f")
f64 = _dt("f64", np.float64, "f")
i8 = _dt("i8", np.int8, "i")
i16 = _dt("i16", np.int16, "i")
i32 = _dt("i32", np.int32, "i")
i64 = _dt("i64", np.int64, "i")
u8 = _dt("u8", np.uint8, "u")
u16 = _dt("u16", np.uint16, "u")
u32 = _dt("u32", np.uint32, "u")
u64 = _dt("u64", np.uint64, "u")
bool_ = _dt("bool_", np.bool_, "b")
# 8-bit floats (OCP FP8 as ml_dtypes has them): float8_e4m3fn (no infinities, 448 the
# largest) and float8_e5m2 (IEEE-like, 57344 the largest)
f8e4m3 = _dt("f8e4m3", ml_dtypes.float8_e4m3fn, "f")
f8e5m2 = _dt("f8e5m2", ml_dtypes.float8_e5m2, "f")
FP8 = (f8e4m3, f8e5m2)
# 16- and 8-bit floats: held and computed in f32, rounded to their width when stored
# (docs/language.md)
COMPUTED_IN_F32 = (f16, bf16, f8e4m3, f8e5m2)

ALL_DTYPES: tuple[DType, ...] = (f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, bool_)
ALL_DTYPES += FP8
# complex arrays: a kernel reads and writes their elements as complex numbers, which it
# computes with as pairs of floats (docs/language.md, "Small value types")
complex64 = _dt("complex64", np.complex64, "c")
complex128 = _dt("complex128", np.complex128, "c")
COMPLEX_PARTS = {complex64: f32, complex128: f64}  # the dtype of each component
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES + (complex64, complex128)}


def from_numpy(dtype: np.dtype) -> DType | None:
    """The Tessera dtype whose storage is exactly ``dtype``, or None."""
    for d in ALL_DTYPES + (complex64, complex128):
        if d.np_dtype == dtype:
            return d
    return None


class Symbol:
    """A dimension name bound from argument shapes at launch (``n`` in ``f32[n]``)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Symbol) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("sym", self.name))

    def __getitem__(self, dims: object) -> object:
        raise TypeError(
            f"'{self.name}' is not a dtype; a dtype chosen per launch is a parameter "
            f"'{self.name}: dtype_constexpr'"
        )

    def __truediv__(self, axis: object) -> ShardedDim:
        axis_name = axis.name if isinstance(axis, Symbol) else str(axis)
        return ShardedDim(self, axis_name)


def dims(names: str) -> Any:  # Symbol, or a tuple of them: ``n, m = dims("n m")`` unpacks
    """Dimension symbols bound to names of your own: ``n, m = tessera.dims("n m")``.

    Unknown names in an annotation already become symbols, but a linter (ruff/pyflakes
    F821, mypy, pyright) cannot know that and reports ``f32[n]`` as an undefined name;
    defining ``n`` at module level keeps the file lint-clean and means the same thing.
    One name gives one symbol, several (separated by spaces or commas) a tuple.
    """
    parts = names.replace(",", " ").split()
    if not parts or not all(p.isidentifier() for p in parts):
        raise TypeError(f"dims({names!r}) needs dimension names such as 'n m' or 'M, K'")
    symbols = tuple(Symbol(p) for p in parts)
    return symbols[0] if len(symbols) == 1 else symbols


@dataclass(frozen=True)
class ShardedDim:
    """``K/tp``: the local extent of symbol K split over mesh axis ``tp`` (docs/distributed.md)."""

    symbol: Symbol
    axis: str

    def __repr__(self) -> str:
        return f"{self.symbol.name}/{self.axis}"


Dim = int | Symbol | ShardedDim


@dataclass(frozen=True)
class ArrayAnnotation:
    dtype: DType
    dims: tuple[object, ...]

    def __repr__(self) -> str:
        return f"{self.dtype.name}[{', '.join(map(repr, self.dims))}]"


@dataclass(frozen=True)
class MutAnnotation:
    array: ArrayAnnotation

    def __repr__(self) -> str:
        return f"mut[{self.array!r}]"


@dataclass(frozen=True)
class ReductionAnnotation:
    """``reduce_sum[f32[M, N]]``: an output an index launch reduces over its axis; the
    kernel writes this rank's partial result (docs/distributed.md)."""

    array: ArrayAnnotation
    op: str = "sum"

    def __repr__(self) -> str:
        return f"reduce_{self.op}[{self.array!r}]"


class _Mut:
    """``mut[f32[n]]`` marks an array parameter the kernel may write."""

    def __getitem__(self, array: object) -> MutAnnotation:
        if not isinstance(array, ArrayAnnotation):
            raise TypeError(f"mut[...] takes an array annotation such as f32[n], got {array!r}")
        return MutAnnotation(array)

    def __repr__(self) -> str:
        return "mut"


class _Constexpr:
    """Annotation of a compile-time constant parameter; each value compiles its own code."""

    def __repr__(self) -> str:
        return "constexpr"


class _DTypeConstexpr:
    """Annotation of a dtype parameter (``T: dtype_constexpr``): a launch passes a dtype
    (``ts.f16`` or NumPy's), and each dtype compiles its own code. The signature and body
    use ``T`` as a dtype: ``x: T[n]``, ``tshared.alloc[T](...)``, ``T(0)``."""

    def __repr__(self) -> str:
        return "dtype_constexpr"


@dataclass(frozen=True)
class DTypeVar:
    """The dtype a ``dtype_constexpr`` parameter names, before a launch binds it."""

    name: str

    def __getitem__(self, dims: object) -> ArrayAnnotation:
        if not isinstance(dims, tuple):
            dims = (dims,)
        return ArrayAnnotation(self, tuple(dims))

    def __repr__(self) -> str:
        return self.name


def as_dtype(value: object) -> DType | None:
    """The Tessera dtype ``value`` names (a DType, or a NumPy dtype or scalar type)."""
    if isinstance(value, DType):
        return value
    if value is None or isinstance(value, (str, bool, int, float)):
        return None  # (NumPy reads None as float64 and names as dtypes)
    try:
        return from_numpy(np.dtype(value))
    except TypeError:
        return None


mut = _Mut()
constexpr = _Constexpr()
dtype_constexpr = _DTypeConstexpr()
