"""Which integer expressions are multiples of a constant, whatever the launch.

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
    return False
