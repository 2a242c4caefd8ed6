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
