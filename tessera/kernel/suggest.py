""" "Did you mean ...?" for names a kernel cannot use.

A port from CUDA, Numba or NumPy writes the spellings it knows (``tile.shfl_down``,
``cuda.syncthreads()``, ``np.sin``); a typo writes a near miss (``tile.linear_idd``). The
language keeps one spelling per primitive (docs/language.md, Decisions): these are
refused, and the error names the spelling to write instead. The frontend calls
:func:`name_hint`, :func:`attribute_hint` and :func:`call_hint` when it raises.
"""

from __future__ import annotations

import builtins
import difflib
import math
import types

from .. import tile
from ..tile.mathfns import MATH

# CUDA's and numba-cuda's names of what the language spells otherwise (the last part of
# the name: ``cuda.shfl_down_sync``, ``tile.shfl_down`` and ``__shfl_down_sync`` alike)
_SHUFFLE_NOTE = "; the shuffles take no lane mask: every lane of the sub-group takes part"
CUDA_SPELLINGS: dict[str, tuple[str, str]] = {
    **{
        f"{prefix}shfl_{kind}{sync}": (f"tile.shuffle_{kind}", _SHUFFLE_NOTE)
        for prefix in ("", "__")
        for kind in ("down", "up", "xor")
        for sync in ("", "_sync")
    },
    **{
        f"{prefix}shfl{sync}": ("tile.shuffle", _SHUFFLE_NOTE)
        for prefix in ("", "__")
        for sync in ("", "_sync", "_idx")
    },
    "syncthreads": ("tbarrier", ""),
    "__syncthreads": ("tbarrier", ""),
    "atomicAdd": ("tile.atomic_add", ""),
    "atomicSub": ("tile.atomic_add", "; add the negated value"),
    **{
        f"atomic{op.title()}": (f"tile.atomic_{op.lower()}", "")
        for op in ("Max", "Min", "And", "Or", "Xor")
    },
    "atomicExch": ("tile.atomic_xchg", ""),
    "atomic_exch": ("tile.atomic_xchg", ""),
    "atomicCAS": ("tile.atomic_cas", ""),
    "atomic_compare_and_swap": ("tile.atomic_cas", ""),
    # numba-cuda's random numbers: the language has one counter-based generator
    **{
        f"xoroshiro128p_{kind}_float{bits}": (
            "tile.rand",
            "; tile.rand(seed, offset) is a uniform f32 in [0, 1), a pure function of its "
            "arguments (no state array): give each draw its own offset",
        )
        for kind in ("uniform", "normal")
        for bits in (32, 64)
    },
    "create_xoroshiro128p_states": (
        "tile.rand",
        "; tile.rand(seed, offset) needs no state array: pass the seed to the kernel",
    ),
}
# numba-cuda's ``cuda.atomic.<name>`` → the language's ``tile.atomic_<op>``
_NUMBA_ATOMICS = {"add": "add", "sub": "add", "max": "max", "min": "min", "and_": "and"}
_NUMBA_ATOMICS.update({"or_": "or", "xor": "xor", "exch": "xchg", "cas": "cas"})
_NUMBA_ATOMICS.update({"compare_and_swap": "cas", "nanmax": "max", "nanmin": "min"})

# NumPy's spellings of what the ``math`` module and the builtins do in a kernel
_NUMPY_RENAMES = {
    "abs": "abs(x)",
    "absolute": "abs(x)",
    "minimum": "min(a, b)",
    "fmin": "min(a, b)",
    "maximum": "max(a, b)",
    "fmax": "max(a, b)",
    "power": "the ** operator",
    "arcsin": "math.asin(x)",
    "arccos": "math.acos(x)",
    "arctan": "math.atan(x)",
    "arctan2": "math.atan2(y, x)",
    "arcsinh": "math.asinh(x)",
    "arccosh": "math.acosh(x)",
    "arctanh": "math.atanh(x)",
    "where": "tile.where(c, a, b) on tiles, `a if c else b` on values",
}
_NUMPY_CASTS = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool_": "bool_",
}
_KERNEL_BUILTINS = ("range", "min", "max", "abs", "int", "float", "bool", "complex", "print")


def _close(word: str, candidates) -> str | None:
    found = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.75)
    return found[0] if found else None


_NOT_SPELLED = {"alloc", "dynamic", "copy_async", "copy_wait", "kernel_print", "kernel_assert"}


def _primitive_names() -> dict[str, str]:
    """The primitives' short names → how the source spells them (``tile.shuffle_down``,
    ``tbarrier``: each declaration's own name; ``tshared``, ``cp_async`` as they are)."""
    out = {}
    for name in tile.__all__:
        if name[0].isupper() or name in _NOT_SPELLED or name == "subgroup_width":
            continue
        spelled = getattr(getattr(tile, name), "name", None)
        if not isinstance(spelled, str):
            spelled = name if name in ("tshared", "cp_async") else f"tile.{name}"
        out[name] = spelled
    return out


# Triton's names with another spelling here (tl.<name> ported as tile.<name>)
TRITON_SPELLINGS = {
    "maximum": "max(a, b) (elementwise on tiles)",
    "minimum": "min(a, b) (elementwise on tiles)",
    "program_id": "tile.group_id(axis)",
    "num_programs": "tile.group_count(axis)",
    "cdiv": "-(-a // b)",
    "sigmoid": "1.0 / (1.0 + math.exp(-x))",
    "fma": "a * b + c",
    "cumsum": "tile.prefix_sum(value) (over the lanes)",
}

# CUDA features the language does not have, and what to write instead
NOT_IN_LANGUAGE = {
    "this_grid": (
        "grid-wide synchronisation (a cooperative launch) is not in the language: end the "
        "kernel where the grid would sync and launch a second kernel for the rest (one "
        "launch finishes every group before the next launch starts, on every target)"
    ),
}
NOT_IN_LANGUAGE["grid_sync"] = NOT_IN_LANGUAGE["sync_grid"] = NOT_IN_LANGUAGE["this_grid"]


def _cuda(word: str) -> str | None:
    if word in NOT_IN_LANGUAGE:
        return NOT_IN_LANGUAGE[word]
    if word in CUDA_SPELLINGS:
        spelling, note = CUDA_SPELLINGS[word]
        if spelling == "tbarrier":
            return "did you mean tbarrier()?"
        return f"did you mean {spelling}?" + (f" ({note[2:]})" if note else "")
    return None


def name_hint(name: str, known) -> str:
    """The hint after "name 'x' is not defined" (``known``: the names in scope)."""
    hint = _cuda(name)
    if hint is not None:
        return "; " + hint
    prims = _primitive_names()
    if name in prims:
        spelled = prims[name]
        first = spelled.split(".")[0]
        return f"; it is {spelled}: import it (from tessera import {first})"
    best = _close(name, [*known, *_KERNEL_BUILTINS])
    if best is not None:
        return f"; did you mean {best}?"
    best = _close(name, prims)
    if best is not None:
        return f"; did you mean {prims[best]}?"
    return ""


def attribute_hint(base: object, base_text: str, attr: str) -> str:
    """The hint after "'base.attr' is not defined"."""
    hint = _cuda(attr)
    if hint is not None:
        return "; " + hint
    if _is_numpy(base) or getattr(base, "__name__", "") == "numpy":
        return "; NumPy functions do not run in kernels: write the arithmetic, or math.*"
    if base is tile and attr in MATH:  # Triton's tl.exp(x)
        return f"; write math.{attr}(x) (the math functions apply to tiles elementwise)"
    if base is tile and attr in TRITON_SPELLINGS:
        return f"; write {TRITON_SPELLINGS[attr]}"
    public = list(MATH) if base is math else [n for n in dir(base) if not n.startswith("_")]
    best = _close(attr, public)
    if best is not None:
        return f"; did you mean {base_text}.{best}?"
    return ""


def call_hint(fn: object, text: str) -> str:
    """The hint after "cannot call 'text' in a kernel": the language's spelling of a
    NumPy function or a CUDA intrinsic."""
    last = text.rsplit(".", 1)[-1]
    if text.rsplit(".", 2)[-2:-1] == ["atomic"] and last in _NUMBA_ATOMICS:
        return f"; did you mean tile.atomic_{_NUMBA_ATOMICS[last]}?"
    hint = _cuda(last)
    if hint is not None:
        return "; " + hint
    if _is_numpy(fn):
        name = getattr(fn, "__name__", last)
        if name in _NUMPY_CASTS:
            return f"; write the cast {_NUMPY_CASTS[name]}(x)"
        if name in MATH:
            return f"; write math.{name}(x) (the math module's functions work in kernels)"
        if name in _NUMPY_RENAMES:
            return f"; write {_NUMPY_RENAMES[name]}"
        return "; NumPy functions do not run in kernels: write the arithmetic, or math.*"
    if fn is getattr(builtins, last, None) and last in ("pow", "sum", "len"):
        return {
            "pow": "; write the ** operator",
            "sum": "; write a loop, reduce_sum(shared) or tile.sum(v)",
            "len": "; write x.shape[0]",
        }[last]
    return ""


def _is_numpy(fn: object) -> bool:
    module = getattr(fn, "__module__", None) or ""
    if isinstance(fn, types.ModuleType):
        return False
    if type(fn).__name__ == "ufunc":
        return True
    return module == "numpy" or module.startswith("numpy.")
