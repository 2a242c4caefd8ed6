"""Argument binding and launch checks (docs/language.md, "Errors").

Everything is checked before anything runs, so a refused launch leaves every argument
untouched: argument count, array type, dtype, ndim, literal dims, consistent symbol
binding, writability of ``mut`` arrays, the device of each array, scalar conversion and
the grid. The result is a :class:`Bound` with the specialisation key and the values to
pass to the compiled code.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .. import dtypes as D
from ..arrays import (
    DEVICE_READERS,
    DeviceArg,
    bits_view,
    device_dtype,
    device_info,
    host_view,
    is_device_array,
    layout_class,
)
from ..dtypes import COMPUTED_IN_F32, ShardedDim, Symbol
from ..errors import LaunchError
from . import ir
from .passes.checks import DEFAULT_SHARED_BUDGET
from .signature import GRID_GROUPS, ParamSpec, resolve_dtypes
from .targets.target import Target

_NO_CONSTEXPRS: dict[str, object] = {}
_I64 = -(2**63)
NAN = float("nan")  # the one NaN constexpr keys hold (keys compare NaN by identity)
# NumPy's flag bits that Numba specialises on: contiguity (C, F), alignment, writability
_C, _F, _ALIGNED, _WRITEABLE = 0x1, 0x2, 0x100, 0x400
_KEY_FLAGS = _C | _F | _ALIGNED | _WRITEABLE


class Bound(NamedTuple):
    key: tuple
    call_args: tuple  # arrays, then scalars, then symbol values, in the codegen's order
    constexprs: dict[str, object]


def _bound(fields: tuple) -> Bound:
    """A Bound of (key, call_args, constexprs), made without NamedTuple's keyword call."""
    return tuple.__new__(Bound, fields)


# Who takes a launch whose arguments include a traced tensor of the operator layer (a
# ``@kernel`` called inside ``tessera.jit``): tessera/ops/launches.py registers itself
# here (the kernel layer sits below the operator layer and knows nothing of it).
TRACED_LAUNCHES: list = []


def traced(kernel, grid: tuple[int, ...], args: tuple) -> bool:
    """Whether a traced function took this launch as a node of its graph."""
    return any(record(kernel, grid, args) for record in TRACED_LAUNCHES)


def normalise_grid(kernel: str, grid: object) -> tuple[int, ...]:
    if type(grid) is int and 0 <= grid < 2**63:
        return (grid,)
    dims = grid if isinstance(grid, tuple) else (grid,)
    if not 1 <= len(dims) <= 3:
        raise LaunchError(kernel, f"grid {grid!r} must be an int or a tuple of 1 to 3 ints")
    out = []
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            raise LaunchError(kernel, f"grid {grid!r} must hold non-negative ints")
        if d >= 2**63:
            raise LaunchError(kernel, f"grid {grid!r}: an extent must be below 2**63 (i64)")
        out.append(int(d))
    return tuple(out)


class Binder:
    """The launch checks of one kernel, with a fast path for well-formed launches.

    ``bind`` first tries a lean pass that only confirms the arguments are right; any
    doubt falls back to :func:`bind`, which finds the problem and raises the error.
    """

    def __init__(
        self,
        kernel: str,
        params: list[ParamSpec],
        symbols: list[str],
        grouped: bool,
        target: Target,
    ):
        self.kernel, self.params, self.symbols, self.grouped = kernel, params, symbols, grouped
        self.target = target
        self._seen: list = [None] * len(params)  # fast_device: per position, last layout
        self.plan = []
        for p in params:
            if not isinstance(p.dtype, (D.DType, type(None))) or p.dtype in D.COMPLEX_PARTS:
                self.plan = None  # a dtype bound per launch, or complex: the checked path
                break
            if p.kind == "array":
                dims = []
                for axis, d in enumerate(p.dims):
                    if isinstance(d, int):
                        dims.append((axis, d, None))
                    elif isinstance(d, Symbol):
                        dims.append((axis, None, d.name))
                    else:
                        self.plan = None  # sharded dims take the general path
                        break
                if self.plan is None:
                    break
                view = target.storage(p.dtype)
                self.plan.append(("array", p.dtype.np_dtype, p.ndim, p.mutable, tuple(dims), view))
            elif p.kind == "scalar" and p.dtype.is_float and p.dtype not in COMPUTED_IN_F32:
                limit = float(np.finfo(p.dtype.np_dtype).max)  # past it: the checked path
                bounds = (-limit, limit, False)
                self.plan.append(("float", p.dtype.np_dtype.type, bounds, None, None, None))
            elif p.kind == "scalar" and p.dtype.is_int and p.dtype != D.bool_:
                info = np.iinfo(p.dtype.np_dtype)  # a Python int in range, else checked
                bounds = (int(info.min), int(info.max), True)
                self.plan.append(("int", p.dtype.np_dtype.type, bounds, None, None, None))
            elif p.kind == "constexpr" and not p.of_dtype:  # a plain value, else checked
                self.plan.append(("constexpr", p.name, None, None, None, None))
            else:
                self.plan = None
                break
        # the values of the trailing parameters with defaults (a launch may leave them out)
        tail = 0
        while tail < len(params) and params[len(params) - 1 - tail].default:
            tail += 1
        self._defaults = tuple(p.default[0] for p in params[len(params) - tail :])
        # fast_device's rows: (position, is an array (CONSTEXPR for a constexpr), dtype
        # (a constexpr's name), ndim or a scalar's bounds (lowest, highest, Python ints
        # only), literal dims (axis, extent), symbolic dims (axis, name))
        self._device_plan = None
        if self.plan is not None and target.device_arrays:
            self._device_plan = [
                (
                    k,
                    CONSTEXPR if kind == "constexpr" else kind == "array",
                    dtype,
                    ndim,
                    tuple((axis, d) for axis, d, sym in dims or () if sym is None),
                    tuple((axis, sym) for axis, _, sym in dims or () if sym is not None),
                )
                for k, (kind, dtype, ndim, _, dims, _) in enumerate(self.plan)
            ]

    def bind(self, args: tuple, grid: tuple[int, ...]) -> Bound:
        bound = self.fast(args, grid)
        if bound is None:
            return bind(
                self.kernel, self.params, self.symbols, args, grid, self.grouped, self.target
            )
        return bound

    def fast(self, args: tuple, grid: tuple[int, ...]) -> Bound | None:
        """The lean check of a well-formed launch of NumPy arrays (or host tensors of
        PyTorch and JAX, through their NumPy views), or None (then call ``bind``)."""
        return self._fast(args, grid, _host_array) if self.plan is not None else None

    def fast_device(self, args: tuple, grid: tuple[int, ...]) -> Bound | None:
        """The same for a launch of GPU arrays (numba-cuda, CuPy, CUDA PyTorch tensors,
        ``__cuda_array_interface__``) on a target that takes them, or None. The arrays are
        passed on as :class:`DeviceArg` (what was read of them, read once): the target's
        launcher writes their pointers itself.

        Written for speed (the GPU launch path): each array is read through its type's
        accessor (arrays.device_info), and its layout class, the key part, is computed
        only when its shape or strides differ from those its position had last time."""
        plan = self._device_plan
        if plan is None:
            return None
        if len(args) != len(plan):
            args = self._with_defaults(args)
            if args is None:
                return None
        syms = _grid_symbols(self.grouped, grid)
        key = [len(grid)]
        arrays, scalars = [], []
        constexprs = _NO_CONSTEXPRS
        readers, seen = DEVICE_READERS, self._seen
        for k, is_array, dtype, limit, literals, symbolic in plan:
            a = args[k]
            if is_array is CONSTEXPR:
                constexprs = _add_constexpr(key, constexprs, dtype, a)
                if constexprs is None:
                    return None
            elif is_array:
                reader = readers.get(type(a))
                info = device_info(a) if reader is None else reader(a)
                if info is None:
                    return None
                pointer, shape, strides, a_dtype = info
                last = seen[k]  # (shape, strides, dtype, key part): one tuple, threads agree
                if last is None or last[2] is not a_dtype or last[0] != shape or last[1] != strides:
                    if len(shape) != limit or (a_dtype is not dtype and a_dtype != dtype):
                        return None
                    for axis, literal in literals:
                        if shape[axis] != literal:
                            return None
                    part = device_key(shape, strides, a_dtype.itemsize)
                    last = seen[k] = (shape, strides, a_dtype, part)
                for axis, sym in symbolic:
                    extent = shape[axis]
                    if syms.setdefault(sym, extent) != extent:
                        return None
                key.append(last[3])
                arrays.append(DeviceArg((pointer, shape, strides, a_dtype, a)))
            else:
                if not _scalar_fits(a, limit):
                    return None
                scalars.append(dtype(a))
        if not _symbol_values(self.symbols, syms, scalars):
            return None
        arrays += scalars
        return _bound((tuple(key), tuple(arrays), constexprs))

    def _with_defaults(self, args: tuple) -> tuple | None:
        """``args`` with the defaults of the trailing parameters it leaves out, or None
        (a wrong count: the checked path says what is missing)."""
        missing = len(self.params) - len(args)
        if 0 < missing <= len(self._defaults):
            return tuple(args) + self._defaults[len(self._defaults) - missing :]
        return None

    def _fast(self, args: tuple, grid: tuple[int, ...], read) -> Bound | None:
        """The launch-path check: None as soon as anything is unusual. ``read(a, mutable,
        view)`` gives an array's (value passed on, ndim, dtype, shape, key part) or None."""
        plan = self.plan
        if len(args) != len(plan):
            args = self._with_defaults(args)
            if args is None:
                return None
        syms = _grid_symbols(self.grouped, grid)
        key = [len(grid)]
        arrays, scalars = [], []
        constexprs = _NO_CONSTEXPRS
        # a scalar row keeps its bounds (scalar_fits) where arrays keep ndim; a constexpr
        # row its name where a scalar's has its dtype
        for (kind, dtype, ndim, mutable, dims, view), a in zip(plan, args):
            if kind == "constexpr":
                constexprs = _add_constexpr(key, constexprs, dtype, a)
                if constexprs is None:
                    return None
            elif kind == "array":
                found = read(a, mutable, view)
                if found is None:
                    return None
                value, a_ndim, a_dtype, shape, key_part = found
                if a_ndim != ndim:
                    return None
                if a_dtype is not dtype and a_dtype != dtype:
                    return None
                for axis, literal, sym in dims:
                    extent = shape[axis]
                    if sym is None:
                        if extent != literal:
                            return None
                    elif syms.setdefault(sym, extent) != extent:
                        return None
                key.append(key_part)
                arrays.append(value)
            else:
                if not _scalar_fits(a, ndim):
                    return None
                scalars.append(dtype(a))
        if not _symbol_values(self.symbols, syms, scalars):
            return None
        return Bound(tuple(key), tuple(arrays + scalars), constexprs)


def _grid_symbols(grouped: bool, grid: tuple[int, ...]) -> dict[str, int]:
    """The symbols a launch knows before reading its arrays: a grouped kernel's count of
    groups."""
    if not grouped:
        return {}
    groups = 1
    for g in grid:
        groups *= g
    return {GRID_GROUPS: groups}


def _symbol_values(symbols, syms: dict, scalars: list) -> bool:
    """Append each symbol's extent (read from the arrays) to ``scalars``; False where one
    was not read (then the checked path binds the launch)."""
    for name in symbols:
        value = syms.get(name)
        if value is None:
            return False
        scalars.append(value)
    return True


CONSTEXPR = object()  # fast_device's mark of a constexpr row (where others say is-array)


def _add_constexpr(key: list, constexprs: dict, name: str, a) -> dict | None:
    """``constexprs`` (a new dict in place of the shared empty one) with constexpr ``name``
    bound to ``a``, its key part appended to ``key``; None where only the checked path may
    take ``a`` (:func:`_constexpr_part`)."""
    part = _constexpr_part(name, a)
    if part is None:
        return None
    key.append(part)
    if constexprs is _NO_CONSTEXPRS:
        constexprs = {}
    constexprs[name] = a
    return constexprs


def _constexpr_part(name: str, a) -> tuple | None:
    """The key part of constexpr argument ``a`` on the lean path (the checked path's:
    ``bind``), or None where only the checked path may take it: a NumPy scalar (converted
    there), a NaN (one value there), anything not an int, float, bool or str (refused)."""
    t = type(a)
    if t is int or t is bool or t is str or (t is float and a == a):
        return (name, t.__name__, a)
    return None


def _scalar_fits(a, bounds: tuple) -> bool:
    """Whether scalar argument ``a`` takes the fast path of a parameter with ``bounds``
    (lowest, highest, ints only): a Python int (or, for a float parameter, a float) in
    range. Anything else — NaN, inf, a value out of range, a bool, NumPy scalars — takes
    the checked path, which converts or refuses it with its message."""
    lo, hi, ints = bounds
    t = type(a)
    if t is int:
        return lo <= a <= hi and (ints or _I64 <= a < -_I64)
    return t is float and not ints and lo <= a <= hi


def _host_array(a, mutable: bool, view):
    """What the fast check needs of a host array (a NumPy array or a host tensor's view)."""
    if type(a) is not np.ndarray:
        a = host_view(a)  # a PyTorch or JAX host tensor: its NumPy view
        if a is None:
            return None
    flags = a.flags.num
    if mutable and not flags & _WRITEABLE:
        return None
    return (a if view is None else a.view(view)), a.ndim, a.dtype, a.shape, flags & _KEY_FLAGS


def device_key(shape: tuple, strides: tuple, itemsize: int) -> tuple:
    """A GPU array's part of a specialisation key: its layout class (what the compiled
    code may assume about its strides)."""
    return ("device", layout_class(shape, strides, itemsize))


_global_extents = threading.local()


@contextlib.contextmanager
def global_extents(values: dict[str, int]) -> Iterator[None]:
    """Inside this block, a ``K/tp`` dim binds ``K`` to ``values["K"]``: an index launch
    knows the global extent of a sharded tensor, which its local shard (uneven blocks)
    cannot tell. Elsewhere ``K`` is the local extent times the axis size (1 outside an
    index launch). Only kernels with such dims read this, on their general bind path."""
    previous = getattr(_global_extents, "values", None)
    _global_extents.values = values
    try:
        yield
    finally:
        _global_extents.values = previous


def bind(
    kernel: str,
    params: list[ParamSpec],
    symbols: list[str],
    args: tuple,
    grid: tuple[int, ...],
    grouped: bool,
    target: Target,
    axis_size=lambda axis: 1,
) -> Bound:
    """Check every argument for a launch on ``target``; raise a LaunchError naming the
    first problem. Targets with ``device_arrays`` accept GPU arrays too."""
    if len(args) < len(params) and all(p.default for p in params[len(args) :]):
        args = tuple(args) + tuple(p.default[0] for p in params[len(args) :])
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise LaunchError(
            kernel, f"takes {len(params)} arguments ({names}) but {len(args)} were given"
        )
    bound: dict[str, int] = {}
    bound_by: dict[str, str] = {}
    if grouped:
        groups = 1
        for g in grid:
            groups *= g
        bound[GRID_GROUPS], bound_by[GRID_GROUPS] = groups, "the launch grid"
    arrays, scalars, key = [], [], [len(grid)]
    constexprs = {
        p.name: _constexpr(kernel, p, a) for p, a in zip(params, args) if p.kind == "constexpr"
    }  # first: they give the dtypes of the others
    params = resolve_dtypes(params, constexprs)
    for p, a in zip(params, args):
        if p.kind == "array":
            arrays.append(_check_array(kernel, p, a, bound, bound_by, axis_size, target))
            key.append(a.flags.num & _KEY_FLAGS if isinstance(a, np.ndarray) else _key_of(a))
        elif p.kind == "scalar":
            scalars.append(_convert_scalar(kernel, p, a))
        else:
            a = constexprs[p.name]
            key.append((p.name, type(a).__name__, a))
    sym_values = tuple(bound[s] for s in symbols)
    return Bound(tuple(key), tuple(arrays) + tuple(scalars) + sym_values, constexprs)


def _key_of(a) -> object:
    """The key part of a GPU array on the checked path (the simulator's arrays, which
    have no pointer, are all one kind)."""
    info = device_info(a)
    return "device" if info is None else device_key(info[1], info[2], info[3].itemsize)


def _constexpr(kernel: str, p: ParamSpec, a: object) -> object:
    """A constexpr argument as the compiler sees it: a number, a bool or a string; for a
    ``dtype_constexpr``, a dtype (``ts.f16`` or NumPy's ``np.float16``)."""
    if p.of_dtype:
        dtype = D.as_dtype(a)
        if dtype is None or dtype in D.COMPLEX_PARTS:
            raise LaunchError(
                kernel,
                f"dtype_constexpr parameter '{p.name}' must be a real dtype such as ts.f16 "
                f"or np.float16, got {a!r}",
            )
        return dtype
    if isinstance(a, (np.generic,)):
        a = a.item()
    if not isinstance(a, (bool, int, float, str)):
        raise LaunchError(
            kernel,
            f"constexpr parameter '{p.name}' must be an int, "
            f"float, bool or str, got {type(a).__name__}",
        )
    if isinstance(a, float) and a != a:
        a = NAN  # every NaN is one value: one specialisation, not one per launch
    return a


def _check_array(kernel, p: ParamSpec, a, bound, bound_by, axis_size, target: Target):
    if target.device_arrays and is_device_array(a):
        pass
    elif not isinstance(a, np.ndarray):
        if is_device_array(a):
            raise LaunchError(
                kernel,
                f"parameter '{p.name}' is a GPU array but this launch runs on the "
                f"{target.name} target; pass NumPy arrays, or launch on a GPU target",
            )
        raise LaunchError(
            kernel,
            f"parameter '{p.name}' expects a NumPy array {p.describe()}, got {type(a).__name__}",
        )
    dtype = device_dtype(a)
    if dtype != p.dtype.np_dtype:
        raise LaunchError(
            kernel,
            f"parameter '{p.name}' expects dtype {p.dtype.name} "
            f"({p.dtype.np_dtype}), got {dtype}; Tessera never converts "
            "arrays silently",
        )
    shape = tuple(a.shape)
    if len(shape) != p.ndim:
        raise LaunchError(
            kernel,
            f"parameter '{p.name}' expects {p.ndim} dims "
            f"({p.describe()}), got an array of shape {shape}",
        )
    if p.mutable and isinstance(a, np.ndarray) and not a.flags.writeable:
        raise LaunchError(
            kernel, f"parameter '{p.name}' is mut[...] but the array passed is read-only"
        )
    for axis, (dim, extent) in enumerate(zip(p.dims, shape)):
        if isinstance(dim, int):
            if extent != dim:
                raise LaunchError(
                    kernel, f"parameter '{p.name}' has shape {shape} but dim {axis} must be {dim}"
                )
            continue
        sym = dim.symbol.name if isinstance(dim, ShardedDim) else dim.name
        value = extent
        if isinstance(dim, ShardedDim):
            given = getattr(_global_extents, "values", None) or {}
            value = given.get(sym, extent * axis_size(dim.axis))
        if sym in bound and bound[sym] != value:
            raise LaunchError(
                kernel,
                f"{p.name} has shape {shape} but {sym}={bound[sym]} was bound by {bound_by[sym]}",
            )
        bound[sym] = value
        bound_by.setdefault(sym, p.name)
    if p.dtype in D.COMPLEX_PARTS:
        return complex_parts(kernel, p, a)
    view = target.storage(p.dtype)  # e.g. 16-bit floats as uint16 bits
    return a if view is None else bits_view(a, view)


def complex_parts(kernel: str, p: ParamSpec, a):
    """A complex array as the kernel's code sees it: its floats, with an axis of 2 added
    (real, imaginary) — a view, so writes reach the array (docs/language.md)."""
    part = D.COMPLEX_PARTS[p.dtype].np_dtype
    shape = tuple(a.shape) + (2,)
    if isinstance(a, np.ndarray):
        strides = a.strides + (part.itemsize,)
        return np.lib.stride_tricks.as_strided(a.real, shape, strides, writeable=p.mutable)
    try:  # a device array: C-contiguous ones have the same view
        return a.view(part).reshape(shape)
    except Exception as exc:
        raise LaunchError(
            kernel,
            f"parameter '{p.name}': a complex GPU array is passed as its floats, which "
            f"needs a C-contiguous array ({type(exc).__name__}: {exc})",
        ) from None


def _convert_scalar(kernel, p: ParamSpec, value) -> np.generic:
    dtype = p.dtype
    if isinstance(value, np.ndarray) or not isinstance(
        value, (bool, int, float, np.bool_, np.integer, np.floating)
    ):
        raise LaunchError(
            kernel,
            f"parameter '{p.name}' expects a {dtype.name} scalar, got {type(value).__name__}",
        )
    if dtype.is_int and isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise LaunchError(
            kernel, f"parameter '{p.name}' is {dtype.name} but got the non-integral value {value!r}"
        )
    if dtype == D.bool_:
        if value != 0 and value != 1:  # NaN too
            raise LaunchError(
                kernel, f"parameter '{p.name}' is bool_; {value!r} is not True, False, 0 or 1"
            )
        return np.bool_(value)
    if dtype.is_int:
        info = np.iinfo(dtype.np_dtype)
        if not info.min <= int(value) <= info.max:
            raise LaunchError(
                kernel, f"parameter '{p.name}' is {dtype.name}; {value!r} is out of range"
            )
        return dtype.np_dtype.type(int(value))
    try:
        with np.errstate(over="ignore"):
            converted = dtype.np_dtype.type(value)
        finite = np.isfinite(value)  # f8e4m3, which has no infinity, overflows to NaN
        if finite and not np.isfinite(np.float32(converted)):
            raise OverflowError
    except OverflowError:
        raise LaunchError(
            kernel, f"parameter '{p.name}' is {dtype.name}; {value!r} is out of its range"
        ) from None
    if dtype in COMPUTED_IN_F32:  # rounded to 16 or 8 bits, computed in f32
        return np.float32(converted)
    return converted


def key_parts(key: tuple, params: list[ParamSpec]) -> dict[str, tuple]:
    """A specialisation key (built by :meth:`Binder._fast` and :func:`bind`) by name.

    ``{"grid": ("grid", rank)}``, then per array parameter ``("array", flag bits)`` and per
    constexpr ``("constexpr", type name, value)``, in parameter order; scalars are not in
    the key (their dtype is fixed by the signature).
    """
    parts: dict[str, tuple] = {"grid": ("grid", key[0])}
    rest = iter(key[1:])
    for p in params:
        if p.kind == "array":
            parts[p.name] = ("array", next(rest))
        elif p.kind == "constexpr":
            _, type_name, value = next(rest)
            parts[p.name] = ("constexpr", type_name, value)
    return parts


def describe_flags(flags: int) -> dict[str, str]:
    """An array's key bits in words: its layout, alignment and writability."""
    # a 1-D contiguous array is both C and F contiguous to NumPy
    layout = {_C | _F: "contiguous", _C: "C", _F: "F", 0: "strided"}[flags & (_C | _F)]
    return {
        "layout": layout,
        "aligned": "aligned" if flags & _ALIGNED else "unaligned",
        "writable": "writable" if flags & _WRITEABLE else "read-only",
    }


def check_dynamic_shared(kir: ir.KernelIR, static_bytes: int, call_args: tuple) -> int:
    """The bytes a launch's ``tshared.dynamic`` array takes: its size is read from the
    launch's arguments; with the constant allocations it must fit ``shared=`` (48 KiB
    without it), or the launch fails before anything runs."""
    alloc = kir.dynamic_alloc
    size = alloc.shape[0].name
    n = int(call_args[kir.call_arg_index(size)])
    source = f"parameter '{size}'" if size not in kir.symbols else f"size symbol '{size}'"
    if n < 0:
        raise LaunchError(
            kir.name, f"tshared.dynamic array '{alloc.target}' has {n} elements ({source})"
        )
    nbytes = n * alloc.dtype.itemsize
    budget = DEFAULT_SHARED_BUDGET if kir.shared_budget is None else kir.shared_budget
    if static_bytes + nbytes > budget:
        raise LaunchError(
            kir.name,
            f"tshared.dynamic array '{alloc.target}' of {size}={n} {alloc.dtype.name} elements "
            f"({source}) needs {nbytes} bytes; with {static_bytes} bytes of tshared.alloc "
            f"arrays that is {static_bytes + nbytes}, over the kernel's shared={budget} bytes",
        )
    return nbytes
