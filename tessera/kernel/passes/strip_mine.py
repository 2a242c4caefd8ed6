"""Strip-mining of lane-strided loops, the commonest loop of a grouped kernel.

``for j in range(tile.linear_id() + a, n, group_tile_count()):`` makes each lane walk a
row with a stride of one group. Run lane after lane on a CPU, that is a strided walk per
lane and a loop that cannot vectorise. The same iterations, in the same order for each
lane, are::

    for jb in range(a, n, L):          # uniform: runs once per group
        j = jb + tile.linear_id()
        if j < n:
            ...body...

whose body becomes a lane loop over consecutive elements. The rewrite is exact when the
bounds do not change inside the loop, the body does not leave the loop early, and ``j``
is not read after the loop, and the body does not print (which would reorder its lines);
anything else is left alone.
"""

from __future__ import annotations

import itertools

from ... import dtypes as D
from ...tile import primitives as P
from .. import ir
from .uniformity import Uniformity


def strip_mine(kir: ir.KernelIR, u: Uniformity) -> int:
    """Rewrite every eligible loop of ``kir`` in place; returns how many were rewritten."""
    if not kir.grouped:
        return 0
    lanes = 1
    for t in kir.tile_shape:
        lanes *= t
    counter = itertools.count()
    assigned = _assigned(kir.body)
    lane_names = _lane_aliases(kir.body)
    outside_reads = _reads_outside_own_loops(kir.body)
    rewritten = 0

    def visit(body: list[ir.Stmt]) -> None:
        nonlocal rewritten
        for k, s in enumerate(body):
            for inner in s.bodies():
                visit(inner)
            if isinstance(s, ir.For) and _eligible(
                s, lanes, u, assigned, outside_reads, lane_names
            ):
                body[k] = _rewrite(kir, s, f"_strip{next(counter)}_{s.var}", lane_names)
                rewritten += 1

    visit(kir.body)
    return rewritten


def _is_lane_id(e: ir.Expr) -> bool:
    return isinstance(e, ir.PrimCall) and e.prim is P.linear_id


def _is_lane(e: ir.Expr, lane_names: set[str]) -> bool:
    return _is_lane_id(e) or (isinstance(e, ir.Name) and e.name in lane_names)


def _lane_offset(start: ir.Expr, lane_names: set[str]) -> ir.Expr | None:
    """``a`` if ``start`` is ``tile.linear_id() + a`` (either order) or the id alone; a
    variable assigned ``tile.linear_id()`` once, at the top, counts as the id."""
    if _is_lane(start, lane_names):
        return ir.Const(start.loc, 0, ir.ScalarType(D.i64, weak=True))
    if isinstance(start, ir.BinOp) and start.op == "+":
        for lane, other in ((start.left, start.right), (start.right, start.left)):
            if _is_lane(lane, lane_names):
                return other
    return None


def _lane_aliases(body: list[ir.Stmt]) -> set[str]:
    counts: dict[str, int] = {}
    for s in ir.walk_stmts(body):
        target = s.target if isinstance(s, ir.Assign) else getattr(s, "var", None)
        if target is not None:
            counts[target] = counts.get(target, 0) + 1
    return {
        s.target
        for s in body
        if isinstance(s, ir.Assign) and counts[s.target] == 1 and _is_lane_id(s.value)
    }


def _stable(e: ir.Expr, u: Uniformity, assigned: set[str]) -> bool:
    """Uniform and unchanged while the loop runs: constants, symbols, parameters, sizes."""
    for node in ir.walk_expr(e):
        if isinstance(node, ir.Name) and (node.name in assigned or node.name in u.varying):
            return False
        if isinstance(node, ir.PrimCall):
            if node.prim.varying or not node.prim.pure:
                return False
        elif not isinstance(node, (ir.Const, ir.Name, ir.Shape, ir.BinOp, ir.UnaryOp)):
            return False
    return True


def _step_is(step: ir.Expr, lanes: int) -> bool:
    return (isinstance(step, ir.PrimCall) and step.prim is P.group_tile_count) or (
        isinstance(step, ir.Const) and not isinstance(step.value, bool) and step.value == lanes
    )


def _eligible(s: ir.For, lanes, u, assigned, outside_reads, lane_names) -> bool:
    if s.tile_range or not _step_is(s.step, lanes):
        return False
    offset = _lane_offset(s.start, lane_names)
    if offset is None or not _stable(offset, u, assigned) or not _stable(s.stop, u, assigned):
        return False
    if s.var in outside_reads or ir.contains_collective(s.body) or ir.prints(s.body):
        return False  # (a print's lines come lane after lane: docs/language.md)
    return not _leaves_early(s.body)


def _leaves_early(body: list[ir.Stmt]) -> bool:
    """A break or continue of this loop (not of a loop nested in it)."""
    for s in body:
        if isinstance(s, (ir.Break, ir.Continue)):
            return True
        if isinstance(s, ir.If) and (_leaves_early(s.body) or _leaves_early(s.orelse)):
            return True
    return False


def _rewrite(kir: ir.KernelIR, s: ir.For, block_var: str, lane_names: set[str]) -> ir.For:
    """The loop over block starts; it runs after typing, so it types what it makes."""
    loc = s.loc
    i64, boolean = ir.ScalarType(D.i64), ir.ScalarType(D.bool_)
    offset = _lane_offset(s.start, lane_names)
    lane = ir.PrimCall(loc, P.linear_id, [], type=i64)
    start = ir.Name(loc, block_var, type=i64)
    body = [
        ir.Assign(loc, s.var, ir.BinOp(loc, "+", start, lane, type=i64)),
        ir.If(
            loc, ir.Compare(loc, "<", ir.Name(loc, s.var, i64), s.stop, type=boolean), s.body, []
        ),
    ]
    kir.var_types[block_var] = i64
    return ir.For(loc, block_var, offset, s.stop, s.step, body)


def _assigned(body: list[ir.Stmt]) -> set[str]:
    out = set()
    for s in ir.walk_stmts(body):
        if isinstance(s, ir.Assign):
            out.add(s.target)
        elif isinstance(s, ir.For):
            out.add(s.var)
    return out


def _reads_outside_own_loops(body: list[ir.Stmt], loop_vars: frozenset = frozenset()) -> set:
    """Names read somewhere that is not inside a ``for`` loop over that same name."""
    out: set[str] = set()
    for s in body:
        for e in ir.stmt_exprs(s):
            if isinstance(e, ir.Name) and e.name not in loop_vars:
                out.add(e.name)
        inner_vars = loop_vars | {s.var} if isinstance(s, ir.For) else loop_vars
        for inner in s.bodies():
            out |= _reads_outside_own_loops(inner, inner_vars)
    return out
