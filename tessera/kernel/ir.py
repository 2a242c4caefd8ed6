"""The kernel IR: a small, typed, structured tree with a source location on every node.

The frontend builds it from Python's AST, the typer fills in ``type`` on expressions, the
analyses read it and the backends lower it. It stays structured (if/for/while, no CFG):
region formation on the CPU and one-thread-per-lane on CUDA both want the structure.

Collective calls and helper calls never sit inside an expression: the frontend hoists
them into their own ``Assign`` so that analyses and backends see them as statements.
Every primitive call is one generic node, :class:`PrimCall`; only forms with syntax of
their own (loads and stores with masks, ``tile.range``, ``tshared.alloc``, ``cp_async``
slices) have nodes of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..dtypes import DType
from ..errors import SourceLoc
from ..tile.primitives import Primitive

# ----------------------------------------------------------------------------- types


@dataclass(frozen=True)
class ScalarType:
    dtype: DType
    weak: bool = False  # an untyped Python literal: takes the type of what it meets

    def __repr__(self) -> str:
        return f"{self.dtype.name}{'?' if self.weak else ''}"


@dataclass(frozen=True)
class ArrayType:
    dtype: DType
    ndim: int
    space: str  # "global" (a parameter) or "shared" (tshared.alloc)
    mutable: bool

    def __repr__(self) -> str:
        prefix = "mut " if self.mutable and self.space == "global" else ""
        return f"{prefix}{self.space} {self.dtype.name}[{','.join(':' * self.ndim)}]"


@dataclass(frozen=True)
class TileType:
    """A tile value: a block of numbers of static ``shape`` owned by the whole group,
    held in its dtype's compute representation (f16/bf16 in f32)."""

    dtype: DType
    shape: tuple[int, ...]
    weak: bool = False  # never: kept so that code reading ``t.weak`` works on every type
    # where a target keeps the value (layout.Placement), set by a target's layout pass on
    # a copy of the IR (targets/cuda/passes/layouts.py); not part of the type's identity
    layout: object = field(default=None, compare=False)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __repr__(self) -> str:
        text = f"tile {self.dtype.name}[{', '.join(map(str, self.shape))}]"
        return text if self.layout is None else f"{text} #{self.layout}"


Type = ScalarType | ArrayType | TileType

# ----------------------------------------------------------------------------- expressions


@dataclass(eq=False)
class Expr:
    loc: SourceLoc

    def children(self) -> Iterator[Expr]:
        return iter(())


@dataclass(eq=False)
class Const(Expr):
    value: bool | int | float
    type: Type | None = None


@dataclass(eq=False)
class Name(Expr):
    """A local variable, a parameter, a symbol (``n``, ``grid_groups``) or a constexpr."""

    name: str
    type: Type | None = None


@dataclass(eq=False)
class BinOp(Expr):
    op: str  # + - * / // % ** & | ^ << >>
    left: Expr
    right: Expr
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield self.left
        yield self.right


@dataclass(eq=False)
class UnaryOp(Expr):
    op: str  # - + not ~
    operand: Expr
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield self.operand


@dataclass(eq=False)
class Compare(Expr):
    op: str  # < <= > >= == !=
    left: Expr
    right: Expr
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield self.left
        yield self.right


@dataclass(eq=False)
class BoolOp(Expr):
    op: str  # and, or
    values: list[Expr]
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield from self.values


@dataclass(eq=False)
class IfExp(Expr):
    cond: Expr
    then: Expr
    orelse: Expr
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield self.cond
        yield self.then
        yield self.orelse


@dataclass(eq=False)
class Cast(Expr):
    dtype: DType
    value: Expr
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield self.value


@dataclass(eq=False)
class MathCall(Expr):
    """``math.exp(x)``, ``min(a, b)``, ``abs(x)``, ...: pure elementwise functions."""

    func: str
    args: list[Expr]
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield from self.args


@dataclass(eq=False)
class Load(Expr):
    """``a[i, j]`` or ``tile.load(a, index, mask=, other=)``."""

    array: Name
    indices: list[Expr]
    mask: Expr | None = None
    other: Expr | None = None
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield self.array
        yield from self.indices
        if self.mask is not None:
            yield self.mask
        if self.other is not None:
            yield self.other


@dataclass(eq=False)
class Shape(Expr):
    array: Name
    axis: int
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield self.array


@dataclass(eq=False)
class Tuple(Expr):
    """An index tuple passed to a primitive (``tile.atomic_add(a, (i, j), v)``)."""

    items: list[Expr]
    type: Type | None = None

    def children(self) -> Iterator[Expr]:
        yield from self.items


@dataclass(eq=False)
class PrimCall(Expr):
    """A call of a declared primitive (``tessera/tile/primitives.py``): ids, atomics,
    group reductions, scans, shuffles, barriers. What it takes, its type and whether it is
    collective come from ``prim``; each target lowers it by ``prim``. Collective calls
    only ever stand alone: the whole value of an ``Assign`` or of an ``ExprStmt``.
    ``attrs`` holds what passes learn about a call (``keep_in_flight``, see
    passes/prefetch.py)."""

    prim: Primitive
    args: list[Expr | None]  # None: an optional argument left out
    type: Type | None = None
    attrs: dict = field(default_factory=dict)

    def children(self) -> Iterator[Expr]:
        yield from (a for a in self.args if a is not None)


# ----------------------------------------------------------------------------- statements


@dataclass(eq=False)
class Stmt:
    loc: SourceLoc

    def bodies(self) -> Iterator[list[Stmt]]:
        return iter(())

    def exprs(self) -> Iterator[Expr]:
        return iter(())


@dataclass(eq=False)
class Assign(Stmt):
    target: str
    value: Expr

    def exprs(self) -> Iterator[Expr]:
        yield self.value


@dataclass(eq=False)
class Store(Stmt):
    """``a[i, j] = v`` or ``tile.store(a, index, v, mask=)`` (``call``: the second, which
    a tile of indices makes a scatter: passes/tile_indexing.py)."""

    array: Name
    indices: list[Expr]
    value: Expr
    mask: Expr | None = None
    call: bool = False

    def exprs(self) -> Iterator[Expr]:
        yield self.array
        yield from self.indices
        yield self.value
        if self.mask is not None:
            yield self.mask


@dataclass(eq=False)
class ExprStmt(Stmt):
    value: Expr

    def exprs(self) -> Iterator[Expr]:
        yield self.value


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    body: list[Stmt]
    orelse: list[Stmt]

    def bodies(self) -> Iterator[list[Stmt]]:
        yield self.body
        yield self.orelse

    def exprs(self) -> Iterator[Expr]:
        yield self.cond


@dataclass(eq=False)
class For(Stmt):
    """``for var in range(start, stop, step)``; ``tile_range`` for ``tile.range``."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: list[Stmt]
    tile_range: bool = False
    prefetch: int | Expr | None = None  # an Expr of constexprs until they are bound

    def bodies(self) -> Iterator[list[Stmt]]:
        yield self.body

    def exprs(self) -> Iterator[Expr]:
        yield self.start
        yield self.stop
        yield self.step


@dataclass(eq=False)
class While(Stmt):
    cond: Expr
    body: list[Stmt]

    def bodies(self) -> Iterator[list[Stmt]]:
        yield self.body

    def exprs(self) -> Iterator[Expr]:
        yield self.cond


@dataclass(eq=False)
class Break(Stmt):
    pass


@dataclass(eq=False)
class Continue(Stmt):
    pass


@dataclass(eq=False)
class Return(Stmt):
    """Only before return elimination; the pipeline's later stages never see one."""


@dataclass(eq=False)
class CopyAsync(Stmt):
    """``cp_async.shared.global_(dst, src[a:b, c])``: per source axis either a scalar
    index (``stop`` None, the axis is dropped) or a slice ``[start, stop)``."""

    dst: Name
    src: Name
    starts: list[Expr]
    stops: list[Expr | None]
    sliced: list[bool]
    # fixed leading indices of the destination: a sub-array ``As[j]`` of a shared array
    dst_lead: list[Expr] = field(default_factory=list)

    def exprs(self) -> Iterator[Expr]:
        yield self.dst
        yield self.src
        yield from self.starts
        yield from (s for s in self.stops if s is not None)
        yield from self.dst_lead


@dataclass(eq=False)
class Print(Stmt):
    """``print(...)``: its items, constant strings and scalar values, printed as Python's
    print would (one space between, a newline after) after the lane's prefix. A statement
    of its own, not a call: targets print it their own way (docs/language.md)."""

    items: list[str | Expr]

    def exprs(self) -> Iterator[Expr]:
        yield from (i for i in self.items if isinstance(i, Expr))


@dataclass(eq=False)
class Assert(Stmt):
    """``assert cond, message``: checked where checks are on (the debug target, bounds-
    checked launches), compiled to nothing elsewhere, so ``cond`` is a plain expression
    (nothing to run before it) and evaluating it is the whole check."""

    cond: Expr
    message: str

    def exprs(self) -> Iterator[Expr]:
        yield self.cond


def prints(body: list[Stmt]) -> bool:
    """Whether ``body`` prints: targets keep such code in lane order (docs/language.md)."""
    return any(isinstance(s, Print) for s in walk_stmts(body))


@dataclass(eq=False)
class SharedAlloc(Stmt):
    target: str
    dtype: DType
    shape: tuple[int, ...]
    slot: int = 0  # index of the allocation in the kernel, for backends to reuse storage
    # ``tshared.dynamic[dtype](n)``: sized at launch, ``shape`` is ``(Name(n),)``, n a
    # scalar parameter or a symbol (CUDA's ``extern __shared__``)
    dynamic: bool = False


# ----------------------------------------------------------------------------- kernel


@dataclass(eq=False)
class KernelIR:
    name: str
    params: list  # list[signature.ParamSpec]
    body: list[Stmt]
    grouped: bool
    tile_shape: tuple[int, ...]
    shared_budget: int | None
    loc: SourceLoc
    num_warps: int | None = None  # @kernel(num_warps=...): a tile-only kernel's CUDA warps
    var_types: dict[str, Type] = field(default_factory=dict)
    allocs: list[SharedAlloc] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    # hash of everything the kernel's code depends on that is not in a specialisation
    # key: the kernel's source, its helpers' sources and the decorator's options
    source_hash: str = ""
    boundscheck: bool = False  # the CPU target checks every index (TESSERA_BOUNDSCHECK)
    user_vars: dict[str, str] = field(default_factory=dict)  # IR name → name in the source

    @property
    def dynamic_alloc(self) -> SharedAlloc | None:
        """The kernel's ``tshared.dynamic`` array (at most one), if any."""
        return next((a for a in self.allocs if a.dynamic), None)

    def call_arg_index(self, name: str) -> int:
        """Where a scalar parameter's or a symbol's value is in a launch's call arguments
        (arrays, then scalars, then symbols: launch.Bound.call_args)."""
        arrays = [p.name for p in self.params if p.kind == "array"]
        scalars = [p.name for p in self.params if p.kind == "scalar"]
        return len(arrays) + (scalars + self.symbols).index(name)


# ----------------------------------------------------------------------------- names


def derived_name(name: str, tag: str) -> str:
    """A name the compiler makes for one part of the user's variable ``name``: ``i.1`` is
    the second independent web of ``i`` (passes/webs.py). No Python identifier holds a
    dot, so it cannot meet a user's name; the code generators spell it as an identifier
    (``SourceEmitter.name``)."""
    return f"{user_name(name)}.{tag}"


def user_name(name: str) -> str:
    """The variable the user wrote, for a name :func:`derived_name` made (or any name)."""
    return name.partition(".")[0]


def walk_stmts(body: list[Stmt]) -> Iterator[Stmt]:
    """Every statement in ``body``, nested ones included, in source order."""
    for stmt in body:
        yield stmt
        for inner in stmt.bodies():
            yield from walk_stmts(inner)


def walk_expr(expr: Expr) -> Iterator[Expr]:
    yield expr
    for child in expr.children():
        yield from walk_expr(child)


def stmt_exprs(stmt: Stmt) -> Iterator[Expr]:
    """Every expression node directly owned by ``stmt`` (not its nested statements)."""
    for e in stmt.exprs():
        yield from walk_expr(e)


def bound_names(stmt: Stmt) -> list[str]:
    """The names ``stmt`` itself binds: an assignment's target, a loop's variable, a
    shared array's name."""
    if isinstance(stmt, (Assign, SharedAlloc)):
        return [stmt.target]
    if isinstance(stmt, For):
        return [stmt.var]
    return []


def prim_call(stmt: Stmt) -> PrimCall | None:
    """The primitive call a statement consists of (``x = prim(...)`` or ``prim(...)``)."""
    value = getattr(stmt, "value", None) if isinstance(stmt, (Assign, ExprStmt)) else None
    return value if isinstance(value, PrimCall) else None


def is_call_of(stmt: Stmt, prim: Primitive) -> bool:
    call = prim_call(stmt)
    return call is not None and call.prim is prim


def is_tile_statement(stmt: Stmt) -> bool:
    """An assignment of a tile value, or a tile primitive used as a statement (typed IR)."""
    value = getattr(stmt, "value", None) if isinstance(stmt, (Assign, ExprStmt)) else None
    if value is None:
        return False
    return isinstance(getattr(value, "type", None), TileType) or (
        isinstance(value, PrimCall) and value.prim.tile
    )


def is_collective(stmt: Stmt) -> bool:
    """Whether every lane of a group must reach ``stmt`` together."""
    if isinstance(stmt, CopyAsync) or is_tile_statement(stmt):
        return True
    if isinstance(stmt, For) and stmt.tile_range:
        return True
    call = prim_call(stmt)
    return call is not None and call.prim.collective


def contains_collective(body: list[Stmt]) -> bool:
    return any(is_collective(s) for s in walk_stmts(body))
