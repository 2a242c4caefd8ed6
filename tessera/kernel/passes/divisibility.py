"""Which integer expressions are multiples of a constant (or at least 0), whatever the
launch.

The CUDA register main loop copies its blocks in 16-byte chunks; whether every copy of a
launch can be a chunk depends on the arrays (the launch sees them) and on the loop's
offsets: the block's first column and the k loop's start and step must be multiples of
a chunk's elements. Those offsets are usually products of a constexpr block size
(``group_id(1) * BN``, ``tile.range(0, K, BK)``), which this reads from the IR: a
constant, a product with a multiple, a sum or difference of multiples, a name the kernel
assigns once to such an expression. Anything else is not known to be a multiple (the
answer is only ever a proof, never a guess).
"""

from __future__ import annotations

from .. import ir

_DEPTH = 32  # names defined through names: far deeper than any kernel's offsets


def multiple_of(e: ir.Expr, n: int, definitions: dict[str, ir.Expr], depth: int = 0) -> bool:
    """Whether integer ``e`` is a multiple of ``n`` (a power of two: wrapping 64-bit
    arithmetic keeps its multiples) for every launch; ``definitions``: the kernel's names
    assigned once (``fold.single_definitions``)."""
    if n == 1:
        return True
    if depth > _DEPTH:
        return False
    if isinstance(e, ir.Const):
        value = e.value
        return isinstance(value, int) and not isinstance(value, bool) and value % n == 0
    if isinstance(e, ir.Name):
        value = definitions.get(e.name)
        return value is not None and multiple_of(value, n, definitions, depth + 1)
    if isinstance(e, ir.UnaryOp) and e.op in ("-", "+"):
        return multiple_of(e.operand, n, definitions, depth + 1)
    if isinstance(e, ir.BinOp):
        left = multiple_of(e.left, n, definitions, depth + 1)
        if e.op == "*":
            return left or multiple_of(e.right, n, definitions, depth + 1)
        if e.op in ("+", "-"):
            return left and multiple_of(e.right, n, definitions, depth + 1)
        if e.op == "<<" and isinstance(e.right, ir.Const) and isinstance(e.right.value, int):
            shift = e.right.value
            return left or (0 <= shift < 64 and (1 << shift) % n == 0)
    if isinstance(e, ir.MathCall) and e.func in ("min", "max") and e.args:
        return all(multiple_of(a, n, definitions, depth + 1) for a in e.args)
    return False


def nonnegative(e: ir.Expr, definitions: dict[str, ir.Expr]) -> bool:
    """Whether integer ``e`` is at least 0 for every launch, no step of it wrapping:
    constants at least 0, group ids (below 2**31), and sums, products, ``min`` and ``max``
    of such values whose largest possible value stays below 2**63; names assigned once."""
    top = _largest(e, definitions, 0)
    return top is not None and top < 2**63


def _largest(e: ir.Expr, definitions: dict[str, ir.Expr], depth: int) -> int | None:
    """The largest value of an expression of non-negative terms (None: not one)."""
    if depth > _DEPTH:
        return None
    if isinstance(e, ir.Const):
        value = e.value
        return value if type(value) is int and value >= 0 else None
    if isinstance(e, ir.Name):
        value = definitions.get(e.name)
        return None if value is None else _largest(value, definitions, depth + 1)
    if isinstance(e, ir.PrimCall):
        return 2**31 - 1 if e.prim.name == "group_id" else None
    parts = []
    if isinstance(e, ir.BinOp) and e.op in ("+", "*"):
        parts = [e.left, e.right]
    elif isinstance(e, ir.MathCall) and e.func in ("min", "max") and e.args:
        parts = list(e.args)
    tops = [_largest(x, definitions, depth + 1) for x in parts]
    if not tops or None in tops or max(tops) >= 2**63:
        return None
    if isinstance(e, ir.BinOp):
        return tops[0] + tops[1] if e.op == "+" else tops[0] * tops[1]
    return min(tops) if e.func == "min" else max(tops)
