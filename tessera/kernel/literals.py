"""Arithmetic of number literals, done as Python does it (in double precision).

``0.1 * 3.0``, ``-0.5``, ``1 / 3``, the parts of ``0.1 + 0.2j``: an expression of Python
number literals with a float among them is computed at compile time and stays a *weak*
literal (docs/language.md, Decisions), so it meets an f64 value with all its bits, as the
same expression written in Python would (a lone literal is still f32). Integer-only
arithmetic is left to the kernel's own wrapping rules; a division by zero to the kernel.
"""

from __future__ import annotations

from . import ir

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def folded(e: ir.Expr) -> ir.Const | None:
    """``e`` as one literal when it is float arithmetic of number literals, else None."""
    if isinstance(e, ir.Const):
        return e if type(e.value) in (int, float) else None
    if isinstance(e, ir.UnaryOp) and e.op in "+-":
        inner = folded(e.operand)
        if inner is None or type(inner.value) is not float:
            return None
        return ir.Const(e.loc, -inner.value if e.op == "-" else inner.value)
    if not isinstance(e, ir.BinOp) or e.op not in (*_OPS, "/"):
        return None
    a, b = folded(e.left), folded(e.right)
    if a is None or b is None or float not in (type(a.value), type(b.value)):
        return None
    if e.op == "/":
        return ir.Const(e.loc, a.value / b.value) if b.value != 0 else None
    return ir.Const(e.loc, _OPS[e.op](a.value, b.value))
