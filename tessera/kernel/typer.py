"""Type inference for the kernel IR.

Parameters are typed by their annotations, symbols and ids are i64, and each local
variable takes the join of every value assigned to it (found by iterating to a fixed
point, as Numba does). Python literals are *weak*: ``alpha * 2.0`` stays f32 when
``alpha`` is f32; a lone float literal is f32 and a lone int literal i64.

Promotion (documented in docs/language.md): float beats int; two floats give the wider
(f16 with bf16 gives f32); two ints of one signedness give the wider; mixed signedness
gives the unsigned type if it is at least as wide, else the signed one; ``int / int``
is f64, as in Python.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import KernelError, internal_errors
from ..tile import blocks as B
from ..tile import primitives as P
from ..tile.blocks import Block, broadcast
from ..tile.mathfns import MATH
from ..tile.primitives import BITWISE_ATOMICS, RuleError
from . import ir
from .ir import ArrayType, ScalarType, TileType
from .passes.fold import int_value

# expressions that apply elementwise to tile operands (NumPy broadcasting)
ELEMENTWISE = (ir.BinOp, ir.UnaryOp, ir.Compare, ir.IfExp, ir.Cast, ir.MathCall)

I64 = ScalarType(D.i64)
BOOL = ScalarType(D.bool_)
WEAK_INT = ScalarType(D.i64, weak=True)
WEAK_FLOAT = ScalarType(D.f32, weak=True)


def concrete(t: ScalarType) -> ScalarType:
    return ScalarType(t.dtype) if t.weak else t


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """The type two scalar operands are computed in."""
    if a.weak and b.weak:
        return WEAK_FLOAT if (a.dtype.is_float or b.dtype.is_float) else a
    if a.weak or b.weak:
        weak, strong = (a, b) if a.weak else (b, a)
        if weak.dtype.is_float and not strong.dtype.is_float:
            return ScalarType(D.f32)
        if strong.dtype == D.bool_ and weak.dtype != D.bool_:
            return ScalarType(D.i64)
        return strong
    da, db = a.dtype, b.dtype
    if da == db:
        return a
    if da.is_float or db.is_float:
        if da.is_float and db.is_float:
            if da.bits == db.bits:  # f16 with bf16
                return ScalarType(D.f32)
            return a if da.bits > db.bits else b
        return a if da.is_float else b
    if da == D.bool_:
        return b
    if db == D.bool_:
        return a
    if da.kind == db.kind:
        return a if da.bits >= db.bits else b
    unsigned, signed = (a, b) if da.kind == "u" else (b, a)
    return unsigned if unsigned.dtype.bits >= signed.dtype.bits else signed


def int_literal(e: ir.Expr) -> int | None:
    """The value of an integer literal (``300``, ``-1``), or None."""
    if isinstance(e, ir.UnaryOp) and e.op == "-":
        inner = int_literal(e.operand)
        return None if inner is None else -inner
    if isinstance(e, ir.Const) and type(e.value) is int:
        return e.value
    return None


def compare_type(left: ir.Expr, right: ir.Expr) -> ScalarType:
    """The type a comparison compares in: the operands' promotion, except where a weak
    integer literal does not fit it (``x_u8 < 300``, ``x_i8 > -200``): then i64, so the
    values are compared, as Python, C and NumPy 2 compare them."""
    t = promote(left.type, right.type)
    dtype = concrete(t).dtype
    if dtype.is_int and dtype != D.bool_:
        info = np.iinfo(dtype.np_dtype)
        for side in (left, right):
            value = int_literal(side)
            if value is not None and not info.min <= value <= info.max:
                return I64
    return t


def to_float(t: ScalarType) -> ScalarType:
    if t.dtype.is_float:
        return t
    return WEAK_FLOAT if t.weak else ScalarType(D.f64)


class TypeConflict(KernelError):
    """A name given a tile or array of one type in one place and of another in another
    (``name``: the variable): an error, unless the two are independent webs of the name
    (passes/webs.py), which the pipeline then splits and types again."""

    def __init__(self, kernel: str, message: str, loc, name: str):
        super().__init__(kernel, message, loc)
        self.name = name


class Typer:
    """Fills in ``type`` on every expression of a kernel IR and ``var_types``."""

    def __init__(self, kir: ir.KernelIR):
        self.kir = kir
        self.env: dict[str, ir.Type] = {}
        for p in kir.params:
            if p.kind == "array":
                self.env[p.name] = ArrayType(p.dtype, p.ndim, "global", p.mutable)
            elif p.kind == "scalar":
                self.env[p.name] = ScalarType(p.dtype)
        for s in kir.symbols:
            self.env[s] = I64
        if kir.grouped:
            self.env["grid_groups"] = I64
        self.fixed = set(self.env)
        self.tile_operands: list[list[tuple[int, ...]]] = []  # per open expression
        self.locals: dict[str, ir.Type] = {
            a.target: ArrayType(a.dtype, len(a.shape), "shared", True) for a in kir.allocs
        }

    def error(self, node: ir.Expr | ir.Stmt, message: str) -> KernelError:
        return KernelError(self.kir.name, message, node.loc)

    def run(self) -> None:
        for _ in range(50):
            before = dict(self.locals)
            self.block(self.kir.body, final=False)
            if self.locals == before:
                break
        for name, t in self.locals.items():
            self.locals[name] = concrete(t) if isinstance(t, ScalarType) else t
        self.block(self.kir.body, final=True)
        self.kir.var_types = {**self.env, **self.locals}

    # ------------------------------------------------------------------ statements
    def block(self, body: list[ir.Stmt], final: bool) -> None:
        for s in body:
            self.stmt(s, final)

    def bind(self, stmt: ir.Stmt, name: str, t: ir.Type, final: bool) -> None:
        if name in self.fixed:
            raise self.error(stmt, f"cannot assign to '{name}'")
        old = self.locals.get(name)
        if isinstance(t, (ArrayType, TileType)) or isinstance(old, (ArrayType, TileType)):
            if old is not None and old != t:
                raise TypeConflict(
                    self.kir.name, f"'{name}' holds {old} here but {t} elsewhere", stmt.loc, name
                )
            self.locals[name] = t
        elif not final:
            self.locals[name] = t if old is None else promote(old, t)

    def stmt(self, s: ir.Stmt, final: bool) -> None:
        """Type one statement; an exception that is not a TesseraError (a bug) reaches the
        user as an InternalError at the innermost statement."""
        with internal_errors(self.kir.name, s.loc):
            self.type_stmt(s, final)

    def type_stmt(self, s: ir.Stmt, final: bool) -> None:
        if isinstance(s, ir.Assign):
            t = self.expr(s.value, final)
            self.bind(s, s.target, t, final)
        elif isinstance(s, ir.Store):
            at = self.array(s.array)
            if at.space == "global" and not at.mutable:
                raise self.error(
                    s, f"cannot write to '{s.array.name}': it is not declared mut[...]"
                )
            if s.call and self.tile_indexed(s.indices, final):
                self.tile_store(s, at, final)
                return
            self.check_indices(s, s.array, at, s.indices, final)
            self.scalar(s.value, final)
            if s.mask is not None:
                self.scalar(s.mask, final)
        elif isinstance(s, ir.ExprStmt):
            self.expr(s.value, final)
        elif isinstance(s, (ir.Print, ir.Assert)):
            for e in s.exprs():
                self.scalar(e, final)
        elif isinstance(s, (ir.If, ir.While)):
            self.scalar(s.cond, final)
            for b in s.bodies():
                self.block(b, final)
        elif isinstance(s, ir.For):
            for e in (s.start, s.stop, s.step):
                if not self.scalar(e, final).dtype.is_int:
                    raise self.error(e, "range bounds must be integers")
            if isinstance(s.step, ir.Const) and s.step.value == 0:
                raise self.error(s.step, "range() step must not be zero")
            self.bind(s, s.var, I64, final)
            self.block(s.body, final)
        elif isinstance(s, ir.CopyAsync):
            dst, src = self.array(s.dst), self.array(s.src)
            if dst.dtype != src.dtype:
                raise self.error(s, f"cp_async copies {src.dtype} into a {dst.dtype} array")
            if s.sliced and len(s.sliced) != src.ndim:
                raise self.error(
                    s, f"'{s.src.name}' has {src.ndim} dims, indexed with {len(s.sliced)}"
                )
            kept = sum(s.sliced) if s.sliced else src.ndim
            if kept != dst.ndim - len(s.dst_lead):
                raise self.error(
                    s,
                    f"cp_async copies a {kept}-d slice into a "
                    f"{dst.ndim - len(s.dst_lead)}-d shared array",
                )
            for e in s.starts + [x for x in s.stops if x is not None] + s.dst_lead:
                if not self.scalar(e, final).dtype.is_int:
                    raise self.error(e, "slice bounds must be integers")
        elif isinstance(s, (ir.SharedAlloc, ir.Break, ir.Continue)):
            pass
        else:
            raise self.error(s, f"internal: untyped statement {type(s).__name__}")

    # ------------------------------------------------------------------ expressions
    def array(self, e: ir.Expr, tiles: bool = False) -> ArrayType | TileType:
        t = None
        if isinstance(e, ir.Name):
            t = self.env.get(e.name) or self.locals.get(e.name)
        if not isinstance(t, ArrayType) and not (tiles and isinstance(t, TileType)):
            raise self.error(e, f"'{getattr(e, 'name', '?')}' is not an array")
        e.type = t
        return t

    def scalar(self, e: ir.Expr, final: bool) -> ScalarType:
        t = self.expr(e, final)
        if isinstance(t, ArrayType):
            raise self.error(e, f"array '{getattr(e, 'name', '?')}' used as a value; index it")
        if isinstance(t, TileType):
            what = f"'{e.name}'" if isinstance(e, ir.Name) else "this"
            raise self.error(
                e, f"{what} is a {t}; a single value is needed here (read one: t[i, j])"
            )
        return t

    def element(self, e: ir.Expr, final: bool) -> ScalarType:
        """An operand of an elementwise expression: a scalar, or a tile's element type (the
        tile's shape is noted for the enclosing expression's broadcast)."""
        t = self.expr(e, final)
        if isinstance(t, TileType):
            self.tile_operands[-1].append(t.shape)
            return ScalarType(t.dtype)
        return self.scalar(e, final) if isinstance(t, ArrayType) else t

    def check_indices(
        self, node, name: ir.Name, at: ArrayType, indices: list[ir.Expr], final: bool
    ) -> None:
        if len(indices) != at.ndim:
            raise self.error(
                node, f"'{name.name}' has {at.ndim} dims but is indexed with {len(indices)}"
            )
        for i in indices:
            if isinstance(self.expr(i, final), TileType):
                raise self.error(
                    i,
                    f"an index into '{name.name}' is a tile: read the array at a tile of "
                    f"indices with tile.load({name.name}, (i, ...)) or "
                    f"tile.gather({name.name}, (i, ...)), write it with tile.store or "
                    "tile.scatter",
                )
            if not self.scalar(i, final).dtype.is_int:
                raise self.error(
                    i,
                    f"index into '{name.name}' must be an integer, "
                    f"not {self.scalar(i, final).dtype}",
                )

    def expr(self, e: ir.Expr, final: bool) -> ir.Type:
        self.tile_operands.append([])
        try:
            t = self._expr(e, final)
        except RuleError as exc:
            raise self.error(e, str(exc)) from None
        shapes = self.tile_operands.pop()
        if shapes and isinstance(e, ELEMENTWISE) and isinstance(t, ScalarType):
            try:
                t = TileType(t.dtype, broadcast(*shapes))
            except RuleError as exc:
                raise self.error(e, str(exc)) from None
        e.type = (
            concrete(t)
            if (final and isinstance(t, ScalarType) and not isinstance(e, ir.Const))
            else t
        )
        return t

    def _expr(self, e: ir.Expr, final: bool) -> ir.Type:
        if isinstance(e, ir.Const):
            if isinstance(e.value, str):
                raise self.error(
                    e,
                    f"the string {e.value!r} is only compared (== or !=) with a string known "
                    "at compile time, such as a constexpr parameter",
                )
            if isinstance(e.value, D.DType):
                raise self.error(e, f"the dtype {e.value} is not a value; cast with {e.value}(x)")
            if isinstance(e.value, bool):
                return BOOL
            if isinstance(e.value, int):
                if not -(2**63) <= e.value < 2**64:
                    raise self.error(e, f"the integer {e.value} does not fit in 64 bits")
                return WEAK_INT if e.value < 2**63 else ScalarType(D.u64)
            return WEAK_FLOAT
        if isinstance(e, ir.Name):
            t = self.env.get(e.name) or self.locals.get(e.name)
            if t is None:
                if final:
                    raise self.error(e, f"'{e.name}' is used but never assigned")
                return WEAK_INT  # not yet known during the fixed-point iteration
            return t
        if isinstance(e, ir.BinOp):
            a, b = self.element(e.left, final), self.element(e.right, final)
            t = promote(a, b)
            if e.op in ("&", "|", "^", "<<", ">>"):
                if t.dtype.is_float:
                    raise self.error(e, f"operator {e.op} needs integers, not {t.dtype}")
                return t
            if e.op == "/":
                return to_float(t)
            if t.dtype == D.bool_:
                return ScalarType(D.i64, weak=t.weak)
            return t
        if isinstance(e, ir.UnaryOp):
            t = self.element(e.operand, final)
            if e.op == "not":
                return BOOL
            if e.op == "~" and t.dtype.is_float:
                raise self.error(e, "operator ~ needs an integer")
            if e.op in "-+" and t.dtype == D.bool_:
                return I64
            return t
        if isinstance(e, ir.Compare):
            a, b = self.element(e.left, final), self.element(e.right, final)
            for side, other in ((e.left, b), (e.right, a)):
                value = int_literal(side)
                if value is not None and value < 0 and concrete(other).dtype == D.u64:
                    raise self.error(
                        e,
                        f"comparing a u64 with the negative literal {value}: every u64 "
                        "is greater; compare with 0, or convert the value to i64 first",
                    )
            return BOOL
        if isinstance(e, ir.BoolOp):
            for v in e.values:
                self.scalar(v, final)
            return BOOL
        if isinstance(e, ir.IfExp):
            self.element(e.cond, final)
            return promote(self.element(e.then, final), self.element(e.orelse, final))
        if isinstance(e, ir.Cast):
            self.element(e.value, final)
            return ScalarType(e.dtype)
        if isinstance(e, ir.MathCall):
            return self.math(e, final)
        if isinstance(e, ir.Load):
            at = self.array(e.array, tiles=True)
            if isinstance(at, TileType):  # a lane reads one element of a tile
                if len(e.indices) != len(at.shape):
                    raise self.error(
                        e, f"'{e.array.name}' is a {at} but is indexed with {len(e.indices)}"
                    )
                for i in e.indices:
                    if not self.scalar(i, final).dtype.is_int:
                        raise self.error(i, f"index into '{e.array.name}' must be an integer")
                if e.mask is not None:
                    raise self.error(e, "tile.load reads arrays, not tiles")
                return ScalarType(at.dtype)
            if e.other is not None and self.tile_indexed(e.indices, final):
                return self.tile_load(e, at, final)
            self.check_indices(e, e.array, at, e.indices, final)
            if e.mask is not None:
                if isinstance(self.expr(e.mask, final), TileType):
                    raise self.error(
                        e.mask,
                        "tile.load with a tile mask reads a tile: its index needs a tile of "
                        "indices too (tile.load(a, i + tile.arange(n), mask=...))",
                    )
                self.scalar(e.mask, final)
            if e.other is not None:
                self.scalar(e.other, final)
            return ScalarType(at.dtype)
        if isinstance(e, ir.Shape):
            self.array(e.array)
            return I64
        if isinstance(e, ir.PrimCall):
            return self.primitive(e, final)
        raise self.error(e, f"internal: untyped expression {type(e).__name__}")

    def primitive(self, e: ir.PrimCall, final: bool) -> ir.Type | None:
        """Check a primitive's arguments by their declared kinds; its declared result."""
        prim = e.prim
        if prim in LANE_REDUCTIONS and isinstance(self.expr(e.args[0], final), TileType):
            # ``tile.sum(t)`` of a tile (Triton's ``tl.sum(x)``): the tile's reduction
            e.prim, e.args = LANE_REDUCTIONS[prim], [e.args[0], None]
            return self.primitive(e, final)
        if prim in LANE_REDUCTIONS.values() and isinstance(e.args[1], ir.Const):
            t = self.expr(e.args[0], final)
            if isinstance(t, TileType) and len(t.shape) == 1 and e.args[1].value in (0, -1):
                e.args[1] = None  # the only axis of a 1-d tile: the reduction of all of it
        array: ArrayType | None = None
        value: ScalarType | None = None
        described = []  # the arguments as the declaration's rule sees them
        operands: list[ScalarType] = []  # element types of tile/operand arguments
        for arg, a in zip(prim.args, e.args):
            if a is None:
                described.append(None)
            elif arg.kind in ("array", "shared"):
                array = self.array(a)
                if arg.kind == "shared" and array.space != "shared":
                    raise self.error(e, f"{prim.name} takes a shared array")
                if prim.writes and array.space == "global" and not array.mutable:
                    raise self.error(e, f"cannot write to '{a.name}': it is not declared mut[...]")
                if prim.writes and array.dtype == D.bool_:
                    raise self.error(e, f"{prim.name} needs a numeric array, not bool_")
                described.append((array.dtype, array.ndim))
            elif arg.kind == "index":
                if not prim.tile:
                    self.check_indices(e, e.args[0], array, a.items, final)
                for i in a.items:
                    if not self.scalar(i, final).dtype.is_int:
                        raise self.error(i, f"{prim.name}({arg.name}) needs integers")
                described.append(len(a.items))
            elif arg.kind in ("value", "number", "int"):
                t = self.scalar(a, final)
                if arg.kind == "number" and concrete(t).dtype == D.bool_:
                    raise self.error(e, f"{prim.name}({arg.name}) needs a number, not bool_")
                if arg.kind == "int" and not t.dtype.is_int:
                    raise self.error(e, f"{prim.name}({arg.name}) needs an integer, not {t}")
                value = value or t
                described.append(t.dtype)
            elif arg.kind in ("tile", "operand"):
                t = self.expr(a, final)
                if isinstance(t, TileType):
                    described.append(Block(t.dtype, t.shape))
                    operands.append(ScalarType(t.dtype))
                elif arg.kind == "operand" and isinstance(t, ScalarType):
                    described.append(t.dtype)
                    operands.append(t)
                else:
                    raise self.error(a, f"{prim.name}({arg.name}) needs a tile, not {t}")
            elif arg.kind == "tiles":
                described.append(self.index_tiles(prim.name, a.items, final))
            elif arg.kind == "shape":
                dims = [fold_int(d) for d in a.items]
                if any(d is None for d in dims):
                    raise self.error(a, f"{prim.name}: a tile's shape must be constant")
                described.append(tuple(dims))
            else:  # dtype, axis, axisopt, flag: constants
                described.append(a.value)
        if prim.atomic is not None:
            self.atomic_operand(e, array)
        if prim.result == "i64":
            return I64
        if prim.result == "element":
            return ScalarType(array.dtype)
        if prim.result == "value":
            return concrete(value)
        if prim.result == "rule":
            return self.rule_result(e, described, operands)
        return None

    def index_tiles(self, what: str, items: list[ir.Expr], final: bool) -> tuple:
        """The index tiles of a gather or scatter: integer tiles (or values), one per dim
        of the array; described as (how many, their broadcast shape or None)."""
        shapes = []
        for item in items:
            t = self.expr(item, final)
            if not isinstance(t, (TileType, ScalarType)) or not t.dtype.is_int:
                raise self.error(item, f"{what}: an index needs integers, not {t}")
            if isinstance(t, TileType):
                shapes.append(t.shape)
        return len(items), broadcast(*shapes) if shapes else None

    # ``tile.load``/``tile.store`` at a tile of indices: typed as the gather or scatter
    # they become (passes/tile_indexing.py rewrites them once the kernel is typed)
    def tile_indexed(self, indices: list[ir.Expr], final: bool) -> bool:
        return any(isinstance(self.expr(i, final), TileType) for i in indices)

    def tile_operands_of(self, what: str, node, at: ArrayType, indices, mask, final: bool):
        """(the array, the indices, the mask) as the gather and scatter rules see them."""
        if len(indices) != at.ndim:
            raise self.error(
                node, f"{what} of a {at.ndim}-d array needs {at.ndim} indices, not {len(indices)}"
            )
        described = self.index_tiles(what, indices, final)
        if mask is None:
            return (at.dtype, at.ndim), described, None
        t = self.expr(mask, final)
        if not isinstance(t, TileType):
            raise self.error(mask, f"{what} at a tile of indices needs a tile mask, not {t}")
        return (at.dtype, at.ndim), described, Block(t.dtype, t.shape)

    def tile_load(self, e: ir.Load, at: ArrayType, final: bool) -> TileType:
        array, index, mask = self.tile_operands_of("tile.load", e, at, e.indices, e.mask, final)
        other = self.scalar(e.other, final)
        out = B.gather.rule(array, index, mask, other.dtype)
        return TileType(out.dtype, out.shape)

    def tile_store(self, s: ir.Store, at: ArrayType, final: bool) -> None:
        if at.dtype == D.bool_:
            raise self.error(s, "tile.store at a tile of indices needs a numeric array, not bool_")
        t = self.expr(s.value, final)
        if not isinstance(t, TileType):
            raise self.error(
                s.value,
                f"tile.store at a tile of indices writes a tile, not {t} (a value: "
                "tile.full(shape, value, dtype))",
            )
        try:
            array, index, mask = self.tile_operands_of(
                "tile.store", s, at, s.indices, s.mask, final
            )
            B.scatter.rule(array, index, Block(t.dtype, t.shape), mask)
        except RuleError as exc:
            raise self.error(s, str(exc)) from None

    def atomic_operand(self, e: ir.PrimCall, array: ArrayType) -> None:
        """The array element types an atomic update takes: real numbers; integers for
        the bitwise ones."""
        prim = e.prim
        if array.dtype.kind == "c":
            raise self.error(e, f"{prim.name} needs a real array, not {array.dtype.name}")
        if array.dtype in D.FP8:
            raise self.error(
                e,
                f"{prim.name} on {array.dtype.name} is not supported (no target has 8-bit "
                "float atomics): update an f32 array and convert it after",
            )
        if prim.atomic in BITWISE_ATOMICS and not array.dtype.is_int:
            raise self.error(e, f"{prim.name} needs an integer array, not {array.dtype.name}")

    def rule_result(self, e: ir.PrimCall, described: list, operands: list) -> ir.Type | None:
        """The result a tile primitive's declared rule gives (a dtype of None: the
        promoted type of the operands after the first, as for scalars)."""
        out = e.prim.rule(*described)
        if isinstance(out, Block):
            dtype = out.dtype
            if dtype is None:
                t = operands[1]
                for other in operands[2:]:
                    t = promote(t, other)
                dtype = concrete(t).dtype
            return TileType(dtype, out.shape)
        return None if out is None else ScalarType(out)

    def math(self, e: ir.MathCall, final: bool) -> ScalarType:
        args = [self.element(a, final) for a in e.args]
        if e.func in ("min", "max"):
            if len(args) < 2:
                raise self.error(e, f"{e.func}() takes at least two values in a kernel")
            t = args[0]
            for a in args[1:]:
                t = promote(t, a)
            return t
        if e.func == "abs":
            if len(args) != 1:
                raise self.error(e, "abs() takes 1 argument")
            return args[0]
        arity, result = MATH[e.func]
        if len(args) != arity:
            raise self.error(e, f"{e.func}() takes {arity} argument{'s' * (arity > 1)}")
        t = args[0] if arity == 1 else promote(args[0], args[1])
        if result == "bool":
            return BOOL
        if result == "int":
            return I64 if t.dtype.is_float else t
        return to_float(t)


# the lane reductions, and the tile reductions they are when given a tile
LANE_REDUCTIONS = {P.sum: B.tile_sum, P.max: B.tile_max, P.min: B.tile_min}


def fold_int(e: ir.Expr) -> int | None:
    """The value of a constant integer expression (shared-array sizes), else None."""
    return int_value(e)
