"""Expressions for the debug target's interpreter (see codegen.py).

Each IR expression becomes a closure ``f(frame) -> value``. Operands are converted to
the operation's type exactly as the typer decided, so the arithmetic is the CPU
target's arithmetic; on top, integer division by zero and (with TESSERA_DEBUG_NAN=1)
the first NaN made from numbers are reported with the lane and the line.
"""

from __future__ import annotations

import numpy as np

from .... import dtypes as D
from ....errors import KernelArithmeticError, KernelError
from ... import ir
from ...ir import ScalarType, TileType
from ...typer import compare_type, concrete, promote
from .. import integers, own_math, semantics
from . import tiles
from .values import BINARY, COMPARE, HALF, INTEGER_RULES, NUMPY_MATH, cast_function, convert

OWN = own_math.functions(
    own_math.numpy_bits_f32, own_math.numpy_f32_bits, own_math.numpy_fma_f32, lambda f: f
)


def compile_expr(c, e: ir.Expr):
    """The closure for expression ``e`` (``c`` is the statement compiler)."""
    t = e.type
    if isinstance(e, ir.Const):
        fn = _const(e.value, t)
        if t.weak and t.dtype.is_float:  # one that meets an f64 is that f64 exactly
            fn.literal = float(e.value)
        return fn
    if isinstance(e, ir.Name):
        name = e.name
        if isinstance(t, TileType):  # inside an elementwise tile statement
            return tiles.read_element(name, t.shape)
        return lambda f: f.vars[name]
    if isinstance(e, ir.BinOp):
        return _binop(c, e)
    if isinstance(e, ir.UnaryOp):
        return _unary(c, e)
    if isinstance(e, ir.Compare):
        common = compare_type(e.left, e.right)
        a = convert(c.expr(e.left), e.left.type, common)
        b = convert(c.expr(e.right), e.right.type, common)
        op = COMPARE[e.op]
        return lambda f: np.bool_(op(a(f), b(f)))
    if isinstance(e, ir.BoolOp):
        parts = [c.truth(v) for v in e.values]
        if e.op == "and":
            return lambda f: np.bool_(all(p(f) for p in parts))
        return lambda f: np.bool_(any(p(f) for p in parts))
    if isinstance(e, ir.IfExp):
        cond = c.truth(e.cond)
        a = convert(c.expr(e.then), e.then.type, t)
        b = convert(c.expr(e.orelse), e.orelse.type, t)
        return lambda f: a(f) if cond(f) else b(f)
    if isinstance(e, ir.Cast):
        value = c.expr(e.value)
        if e.dtype in HALF:  # an explicit cast rounds, even from a 16-bit value
            rounding = cast_function(e.dtype)
            return lambda f: rounding(value(f))
        return convert(value, e.value.type, t)
    if isinstance(e, ir.MathCall):
        return _math(c, e)
    if isinstance(e, ir.Load):
        return _load(c, e)
    if isinstance(e, ir.Shape):
        name, axis = e.array.name, e.axis
        return lambda f: np.int64(f.vars[name].shape[axis])
    if isinstance(e, ir.PrimCall):
        return c.target.lowering(c.kir.name, e)(c, e, None)
    raise KernelError(c.kir.name, f"internal: no debug lowering for {type(e).__name__}", e.loc)


def _const(value, t):
    dtype = concrete(t).dtype
    if dtype == D.bool_:
        v = np.bool_(value)
    elif dtype in HALF:
        v = np.float32(dtype.np_dtype.type(float(value)))
    else:
        v = dtype.np_dtype.type(value)
    return lambda f: v


def _binop(c, e: ir.BinOp):
    t = e.type
    a = convert(c.expr(e.left), e.left.type, t)
    b = convert(c.expr(e.right), e.right.type, t)
    op, loc, is_int = BINARY[e.op], e.loc, not concrete(t).dtype.is_float
    divides = e.op in ("/", "//", "%")
    result_type = concrete(t).dtype
    rule = integers.OPERATORS.get(e.op)
    if rule is not None and result_type.is_int:  # the language's rules (integers.py)
        op = INTEGER_RULES[f"{rule}_{result_type.np_dtype.name}"]
    is_float = result_type.is_float
    to_result = (lambda v: np.float32(v)) if result_type in HALF else None

    def run(frame):
        x, y = a(frame), b(frame)
        if divides and is_int and y == 0:
            raise KernelArithmeticError(
                frame.kernel,
                f"integer division by zero ({x} {e.op} 0) by {frame.who(loc).describe()}",
                (("", loc),),
            )
        with np.errstate(all="ignore"):
            value = op(x, y)
        if to_result is not None:
            value = to_result(value)
        if is_float and c.check_nan and np.isnan(value) and not (np.isnan(x) or np.isnan(y)):
            raise _nan_error(frame, loc, f"{x} {e.op} {y}")
        return value

    return run


def _nan_error(frame, loc, what: str) -> KernelArithmeticError:
    return KernelArithmeticError(
        frame.kernel,
        f"NaN produced from non-NaN operands ({what}) by {frame.who(loc).describe()} "
        "(TESSERA_DEBUG_NAN=1)",
        (("", loc),),
    )


def _unary(c, e: ir.UnaryOp):
    t = e.type
    if e.op == "not":
        v = c.truth(e.operand)
        return lambda f: np.bool_(not v(f))
    if e.op == "~" and concrete(t).dtype == D.bool_:
        v = c.expr(e.operand)
        return lambda f: np.bool_(not v(f))
    v = convert(c.expr(e.operand), e.operand.type, t)
    if e.op == "+":
        return v
    if e.op == "-":

        def neg(f):
            with np.errstate(all="ignore"):
                return -v(f)

        return neg
    return lambda f: ~v(f)


def _math(c, e: ir.MathCall):
    t = concrete(e.type)
    if e.func in ("min", "max"):
        fn = semantics.fmin if e.func == "min" else semantics.fmax
        args = [convert(c.expr(a), a.type, t) for a in e.args]

        def minmax(frame):
            value = args[0](frame)
            for a in args[1:]:
                value = fn(value, a(frame))
            return value

        return minmax
    if e.func == "abs":
        v = convert(c.expr(e.args[0]), e.args[0].type, t)

        def absolute(frame):
            with np.errstate(all="ignore"):
                return abs(v(frame))

        return absolute
    arg_t = concrete(e.args[0].type)
    if len(e.args) == 2:
        arg_t = concrete(promote(e.args[0].type, e.args[1].type))
    if e.func in ("floor", "ceil", "trunc"):
        v = c.expr(e.args[0])
        if not arg_t.dtype.is_float:
            return v
        fn, to_int = getattr(np, e.func), INTEGER_RULES["_f2i_int64"]  # saturating
        return lambda f: to_int(fn(v(f)))
    if e.func in ("isnan", "isinf", "isfinite"):
        v = c.expr(e.args[0])
        if not arg_t.dtype.is_float:
            return lambda f: np.bool_(e.func == "isfinite")
        fn = getattr(np, e.func)
        return lambda f: np.bool_(fn(v(f)))
    args = [convert(c.expr(a), a.type, t) for a in e.args]
    fn, rep = NUMPY_MATH[e.func], np.float32 if t.dtype in HALF else t.dtype.np_dtype.type
    own = own_math.OWN.get((e.func, np.dtype(rep).name))
    if own is not None:  # the language's own (own_math.py)
        fn = OWN[own]
    loc = e.loc

    def call(frame):
        values = [a(frame) for a in args]
        with np.errstate(all="ignore"):
            value = rep(fn(*values))
        if c.check_nan and np.isnan(value) and not any(np.isnan(x) for x in values):
            raise _nan_error(frame, loc, f"{e.func}{tuple(values)}")
        return value

    return call


def _load(c, e: ir.Load):
    if isinstance(c.types[e.array.name], TileType):
        return tiles.element_load(c, e)
    name, loc = e.array.name, e.loc
    dtype = c.types[name].dtype
    index = c.indices(e.indices)
    to_compute = np.float32 if dtype in HALF else None

    def load(frame):
        value = frame.vars[name].load(index(frame), frame.who(loc))
        return to_compute(value) if to_compute is not None else value

    if e.mask is None:
        return load
    mask = c.truth(e.mask)
    other = convert(c.expr(e.other), e.other.type, ScalarType(dtype))
    return lambda f: load(f) if mask(f) else other(f)
