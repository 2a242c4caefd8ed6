"""Kernel signatures: parameter annotations → :class:`ParamSpec` objects.

Annotations are read from the kernel's AST and evaluated in the function's globals, with
every name Python cannot resolve turned into a :class:`~tessera.dtypes.Symbol`. So
``f32[n]`` works with or without ``from __future__ import annotations``, and string dims
(``f32["n"]``, ``f16["K/tp"]``) mean the same as bare ones.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
from dataclasses import dataclass

from ..dtypes import (
    COMPLEX_PARTS,
    ArrayAnnotation,
    DType,
    DTypeVar,
    MutAnnotation,
    ReductionAnnotation,
    ShardedDim,
    Symbol,
    _Constexpr,
    _DTypeConstexpr,
    as_dtype,
)
from ..errors import KernelError, SourceLoc

GRID_GROUPS = "grid_groups"


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter as the rest of the compiler sees it."""

    name: str
    kind: str  # "array", "scalar" or "constexpr"
    dtype: DType | DTypeVar | None = None  # a DTypeVar: the dtype a parameter names
    dims: tuple[int | Symbol | ShardedDim, ...] = ()
    mutable: bool = False
    loc: SourceLoc | None = None
    reduction: str | None = None  # "sum" for reduce_sum[...] outputs (written, then reduced)
    of_dtype: bool = False  # a dtype_constexpr: its value is a dtype
    default: tuple = ()  # a constexpr's default value, as a 1-tuple; () when it has none

    @property
    def ndim(self) -> int:
        return len(self.dims)

    def describe(self) -> str:
        if self.kind == "constexpr":
            return "dtype_constexpr" if self.of_dtype else "constexpr"
        if self.kind == "scalar":
            return self.dtype.name
        dims = ", ".join(repr(d) for d in self.dims)
        text = f"{self.dtype.name}[{dims}]"
        if self.reduction:
            return f"reduce_{self.reduction}[{text}]"
        return f"mut[{text}]" if self.mutable else text


class _SymbolScope(dict):
    """Locals for evaluating annotations: unknown names become symbols."""

    def __init__(self, globals_: dict, dtype_params: frozenset[str] = frozenset()):
        super().__init__()
        self._globals = globals_
        self._dtype_params = dtype_params

    def __missing__(self, key: str) -> object:
        if key in self._dtype_params:  # ``T`` of ``T: dtype_constexpr``: a dtype to bind
            return DTypeVar(key)
        if key in self._globals or hasattr(builtins, key):
            raise KeyError(key)
        return Symbol(key)


def _parse_dim(dim: object) -> int | Symbol | ShardedDim:
    if isinstance(dim, bool):
        raise TypeError(f"dimension {dim!r} is a bool")
    if isinstance(dim, int):
        if dim < 0:
            raise TypeError(f"dimension {dim} is negative")
        return dim
    if isinstance(dim, (Symbol, ShardedDim)):
        return dim
    if isinstance(dim, str):
        text = dim.strip()
        if "/" in text:
            sym, axis = (part.strip() for part in text.split("/", 1))
            if sym.isidentifier() and axis.isidentifier():
                return ShardedDim(Symbol(sym), axis)
        elif text.isidentifier():
            return Symbol(text)
        elif text.isdigit():
            return int(text)
    raise TypeError(f"{dim!r} is not a dimension (an int, a name like n, or 'K/tp')")


def _evaluate(
    node: ast.expr, globals_: dict, filename: str, dtype_params: frozenset[str] = frozenset()
) -> object:
    code = compile(ast.Expression(body=node), filename, "eval")
    scope = _SymbolScope(globals_, dtype_params)
    return eval(code, globals_, scope)  # noqa: S307 - user's own annotation


def _annotation_node(arg: ast.arg) -> ast.expr:
    node = arg.annotation
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return ast.parse(node.value, mode="eval").body
    return node


def _dtype_params(args: list[ast.arg], globals_: dict, filename: str) -> frozenset[str]:
    """The parameters annotated ``dtype_constexpr``: other annotations may use them as
    dtypes (``x: T[n]``)."""
    names = set()
    for arg in args:
        if arg.annotation is None:
            continue
        try:
            if isinstance(_evaluate(_annotation_node(arg), globals_, filename), _DTypeConstexpr):
                names.add(arg.arg)
        except Exception:  # noqa: S112 - reported when the annotation is read for real
            continue
    return frozenset(names)


def parse_params(
    kernel_name: str, fn_node: ast.FunctionDef, globals_: dict, filename: str, line_offset: int
) -> list[ParamSpec]:
    """Read every parameter's annotation; errors name the parameter and its line."""
    args = fn_node.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise KernelError(
            kernel_name,
            "kernel parameters must be plain positional parameters (no *args, "
            "**kwargs or keyword-only parameters)",
            SourceLoc(filename, fn_node.lineno + line_offset, fn_node.col_offset),
        )
    dtype_params = _dtype_params(args.args, globals_, filename)
    defaults = dict(
        zip([a.arg for a in args.args][len(args.args) - len(args.defaults) :], args.defaults)
    )
    specs: list[ParamSpec] = []
    for arg in args.args:
        loc = SourceLoc(filename, arg.lineno + line_offset, arg.col_offset)
        if arg.annotation is None:
            raise KernelError(
                kernel_name,
                f"parameter '{arg.arg}' has no annotation; write e.g. 'x: f32[n]', "
                "'y: mut[f32[n]]', 'alpha: f32' or 'BM: constexpr'",
                loc,
            )
        try:
            ann = _evaluate(_annotation_node(arg), globals_, filename, dtype_params)
            spec = _spec_from_annotation(arg.arg, ann, loc)
            if arg.arg in defaults:
                spec = _with_default(kernel_name, spec, defaults[arg.arg], globals_, filename)
            specs.append(spec)
        except KernelError:
            raise
        except Exception as exc:  # the annotation is user code; any failure is theirs
            raise KernelError(
                kernel_name, f"bad annotation for parameter '{arg.arg}': {exc}", loc
            ) from None
    _check_names(kernel_name, specs)
    return specs


def _with_default(
    kernel_name: str, spec: ParamSpec, node: ast.expr, globals_: dict, filename: str
) -> ParamSpec:
    """``ACTIVATION: constexpr = "relu"``: only compile-time parameters take defaults (a
    launch may leave them out, from the last one back)."""
    if spec.kind != "constexpr":
        raise KernelError(
            kernel_name,
            f"parameter '{spec.name}' has a default; only constexpr parameters take one",
            spec.loc,
        )
    value = _evaluate(node, globals_, filename)
    if spec.of_dtype and as_dtype(value) is None:
        raise KernelError(
            kernel_name, f"the default of '{spec.name}' is {value!r}, not a dtype", spec.loc
        )
    value = as_dtype(value) if spec.of_dtype else value
    return dataclasses.replace(spec, default=(value,))


def _check_names(kernel_name: str, specs: list[ParamSpec]) -> None:
    """A dimension symbol is a variable of the body, like a parameter: the two may not
    share a name (nor may a parameter take the name ``grid_groups``)."""
    names = {p.name for p in specs}
    for p in specs:
        if p.name == GRID_GROUPS:
            raise KernelError(
                kernel_name, f"'{GRID_GROUPS}' is the number of groups, not a parameter", p.loc
            )
    for p in specs:
        for d in p.dims:
            sym = d.symbol if isinstance(d, ShardedDim) else d
            if isinstance(sym, Symbol) and sym.name in names:
                raise KernelError(
                    kernel_name,
                    f"dimension '{sym.name}' of parameter '{p.name}' has the name of a "
                    "parameter; give one of them another name",
                    p.loc,
                )


def _spec_from_annotation(name: str, ann: object, loc: SourceLoc) -> ParamSpec:
    mutable, reduction = False, None
    if isinstance(ann, MutAnnotation):
        mutable, ann = True, ann.array
    elif isinstance(ann, ReductionAnnotation):  # partial sums: the kernel writes them
        mutable, reduction, ann = True, ann.op, ann.array
    if isinstance(ann, ArrayAnnotation):
        dims = tuple(_parse_dim(d) for d in ann.dims)
        if not dims:
            raise TypeError("an array needs at least one dimension")
        return ParamSpec(name, "array", ann.dtype, dims, mutable, loc, reduction)
    if ann in COMPLEX_PARTS:
        raise TypeError(
            f"a {ann} scalar parameter is not supported: pass its two floats and write "
            "complex(re, im) in the body, or pass a complex array"
        )
    if isinstance(ann, (DType, DTypeVar)):
        return ParamSpec(name, "scalar", ann, loc=loc)
    if isinstance(ann, _Constexpr):
        return ParamSpec(name, "constexpr", loc=loc)
    if isinstance(ann, _DTypeConstexpr):
        return ParamSpec(name, "constexpr", loc=loc, of_dtype=True)
    raise TypeError(
        f"{ann!r} is not a Tessera annotation (expected f32[n], mut[f32[n]], "
        "reduce_sum[f32[n]], f32, constexpr or dtype_constexpr)"
    )


def complex_storage(p: ParamSpec) -> ParamSpec:
    """A complex array parameter as compiled code sees it: an array of its floats with an
    axis of 2 added (real, imaginary); launch.py passes such a view. Others unchanged."""
    if p.kind != "array" or p.dtype not in COMPLEX_PARTS:
        return p
    return dataclasses.replace(p, dtype=COMPLEX_PARTS[p.dtype], dims=(*p.dims, 2))


def resolve_dtypes(params: list[ParamSpec], constexprs: dict[str, object]) -> list[ParamSpec]:
    """The parameters with each ``T`` of ``T: dtype_constexpr`` replaced by its value."""
    if not any(isinstance(p.dtype, DTypeVar) for p in params):
        return params
    return [
        dataclasses.replace(p, dtype=constexprs[p.dtype.name])
        if isinstance(p.dtype, DTypeVar)
        else p
        for p in params
    ]


def symbols_of(params: list[ParamSpec]) -> list[str]:
    """Every symbol the signature mentions, in order of first appearance."""
    seen: list[str] = []
    for p in params:
        for d in p.dims:
            sym = d.symbol if isinstance(d, ShardedDim) else d
            if isinstance(sym, Symbol) and sym.name not in seen:
                seen.append(sym.name)
    return seen
