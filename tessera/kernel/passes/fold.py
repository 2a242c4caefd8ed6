"""Compile-time choices: string comparisons folded, branches on constants removed, and
arithmetic of float literals done in double precision, as Python does it.

A kernel chooses among variants with compile-time values, as Triton kernels do
(``ACTIVATION: constexpr = "leaky_relu"`` ... ``if ACTIVATION == "leaky_relu":``). Strings
exist only at compile time, so every comparison of two strings is folded here, and an
``if`` (or ``a if c else b``) whose condition is now a constant keeps only the branch
taken: the other is never typed or generated, so it may use what this variant lacks.
A printed string becomes text of its line. Runs when the decorator runs (strings from
module constants or a factory's closure) and again once constexpr parameters are bound.
"""

from __future__ import annotations

import dataclasses

from ...errors import KernelError
from .. import ir, literals


def fold_constants(kir: ir.KernelIR) -> None:
    kir.body = _block(kir, kir.body)


def _block(kir: ir.KernelIR, body: list[ir.Stmt]) -> list[ir.Stmt]:
    out: list[ir.Stmt] = []
    for s in body:
        for f in dataclasses.fields(s):
            value = getattr(s, f.name)
            if isinstance(value, ir.Expr):
                setattr(s, f.name, _expr(kir, value))
            elif isinstance(value, list) and any(isinstance(v, ir.Expr) for v in value):
                setattr(s, f.name, [_expr(kir, v) if isinstance(v, ir.Expr) else v for v in value])
        if isinstance(s, ir.Print):  # a string constexpr printed: text of the line
            s.items = [i.value if _is_str(i) else i for i in s.items]
        for b in list(s.bodies()):
            b[:] = _block(kir, b)
        if isinstance(s, ir.If) and isinstance(s.cond, ir.Const):
            out.extend(s.body if s.cond.value else s.orelse)
        else:
            out.append(s)
    return out


def _expr(kir: ir.KernelIR, e: ir.Expr) -> ir.Expr:
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, ir.Expr):
            setattr(e, f.name, _expr(kir, value))
        elif isinstance(value, list) and any(isinstance(v, ir.Expr) for v in value):
            setattr(e, f.name, [_expr(kir, v) if isinstance(v, ir.Expr) else v for v in value])
    if isinstance(e, ir.Compare):
        a, b = e.left, e.right
        consts = isinstance(a, ir.Const) and isinstance(b, ir.Const)
        if consts and (isinstance(a.value, str) or isinstance(b.value, str)):
            if e.op not in ("==", "!="):
                raise KernelError(kir.name, "strings compare only with == and !=", e.loc)
            return ir.Const(e.loc, (a.value == b.value) == (e.op == "=="))
    if isinstance(e, (ir.BinOp, ir.UnaryOp)):
        number = literals.folded(e)
        if number is not None:
            return number
    if isinstance(e, ir.UnaryOp) and e.op == "not" and _is_bool(e.operand):
        return ir.Const(e.loc, not e.operand.value)
    if isinstance(e, ir.BoolOp) and all(_is_bool(v) for v in e.values):
        values = [v.value for v in e.values]
        return ir.Const(e.loc, all(values) if e.op == "and" else any(values))
    if isinstance(e, ir.IfExp) and _is_bool(e.cond):
        return e.then if e.cond.value else e.orelse
    return e


def _is_bool(e: ir.Expr) -> bool:
    return isinstance(e, ir.Const) and isinstance(e.value, bool)


def _is_str(e: object) -> bool:
    return isinstance(e, ir.Const) and isinstance(e.value, str)


def constant_shapes(kir: ir.KernelIR) -> None:
    """A name assigned once, to a constant integer, stands for its value where the
    language needs a constant: a tile's shape (``tile.zeros((BN, 64))``, ``tile.arange(BN)``,
    a block's shape) and a shared array's. That is what a helper's parameter bound to a
    constexpr is (``bwd_dq(..., BLOCK_N2)``, Triton's ``BN: tl.constexpr``), and a local
    computed from constexprs (``MASK_BLOCK_M = BLOCK_M // SLICE``). Elsewhere the name stays
    a variable of its own type, so arithmetic keeps its dtypes."""
    constants, flags = _constant_names(kir)
    if not constants and not flags:
        return
    known = {**constants, **flags}
    conditions = False
    for s in ir.walk_stmts(kir.body):
        if isinstance(s, ir.If) and _substituted(s.cond, known) is not s.cond:
            s.cond = _substituted(s.cond, known)  # ``if MASK:`` in a helper: one branch stays
            conditions = True
        if isinstance(s, ir.SharedAlloc) and not s.dynamic:
            s.shape = tuple(_resolved(d, constants) for d in s.shape)
        for e in ir.stmt_exprs(s):
            if isinstance(e, ir.PrimCall):
                for arg, a in zip(e.prim.args, e.args):
                    if arg.kind == "shape" and isinstance(a, ir.Tuple):
                        a.items = [_resolved(d, constants) for d in a.items]
    if conditions:
        fold_constants(kir)


def single_definitions(kir: ir.KernelIR) -> dict[str, ir.Expr]:
    """The names the kernel binds exactly once, by an assignment (not a parameter, a loop
    variable or a shared array), each with the value assigned."""
    params = {p.name for p in kir.params}
    bound: dict[str, int] = {}
    values: dict[str, ir.Expr] = {}
    for s in ir.walk_stmts(kir.body):
        for name in ir.bound_names(s):
            bound[name] = bound.get(name, 0) + 1
        if isinstance(s, ir.Assign):
            values[s.target] = s.value
    return {n: v for n, v in values.items() if bound[n] == 1 and n not in params}


def _constant_names(kir: ir.KernelIR) -> tuple[dict[str, int], dict[str, bool]]:
    candidates = single_definitions(kir)
    flags = {n: v.value for n, v in candidates.items() if _is_bool(v)}
    known: dict[str, int] = {}
    while True:  # names defined from names defined from constants: until nothing changes
        found = {n: int_value(v, known) for n, v in candidates.items() if n not in known}
        found = {n: v for n, v in found.items() if v is not None}
        if not found:
            return known, flags
        known.update(found)


def _substituted(e: ir.Expr, known: dict) -> ir.Expr:
    """``e`` with the names in ``known`` replaced by their constants (a new expression
    where any was; ``e`` itself where none was)."""
    if isinstance(e, ir.Name) and e.name in known:
        return ir.Const(e.loc, known[e.name])
    changed = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, ir.Expr):
            new = _substituted(value, known)
            if new is not value:
                changed[f.name] = new
        elif isinstance(value, list) and any(isinstance(v, ir.Expr) for v in value):
            new_list = [_substituted(v, known) if isinstance(v, ir.Expr) else v for v in value]
            if any(a is not b for a, b in zip(new_list, value)):
                changed[f.name] = new_list
    return dataclasses.replace(e, **changed) if changed else e


def _resolved(d, constants: dict[str, int]):
    if isinstance(d, ir.Expr) and not isinstance(d, ir.Const):
        value = int_value(d, constants)
        if value is not None:
            return ir.Const(d.loc, value)
    return d


def int_value(e: ir.Expr, known: dict[str, int] | None = None) -> int | None:
    """The value of an integer expression of constants and ``known`` names, else None."""
    known = {} if known is None else known
    if isinstance(e, ir.Const):
        value = e.value
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(e, ir.Name):
        return known.get(e.name)
    if isinstance(e, ir.BinOp):
        a, b = int_value(e.left, known), int_value(e.right, known)
        if a is None or b is None:
            return None
        if e.op in ("+", "-", "*"):
            return a + b if e.op == "+" else a - b if e.op == "-" else a * b
        if e.op in ("//", "%") and b != 0:
            return a // b if e.op == "//" else a % b
        return None
    if isinstance(e, ir.UnaryOp) and e.op == "-":
        v = int_value(e.operand, known)
        return None if v is None else -v
    return None
