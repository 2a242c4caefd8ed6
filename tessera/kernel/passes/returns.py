"""Return elimination: early ``return`` → a flag and structured control flow.

Backends lower loops over lanes and groups, where a Python ``return`` would leave more
than the current lane; so every ``return`` that is not the last statement becomes
``flag = True`` plus ``break`` out of enclosing loops, and the statements after it run
under ``if not flag``. The flag is an ordinary variable, so the uniformity analysis sees
a lane-dependent return exactly as it sees any lane-dependent condition: a collective
after it is divergent.
"""

from __future__ import annotations

from .. import ir


def eliminate_returns(body: list[ir.Stmt], flag: str) -> list[ir.Stmt]:
    """``body`` without ``Return`` statements (a trailing one is simply dropped)."""
    while body and isinstance(body[-1], ir.Return):
        body = body[:-1]
    if not any(isinstance(s, ir.Return) for s in ir.walk_stmts(body)):
        return body
    loc = body[0].loc
    lowered, _ = _block(body, flag, in_loop=False)
    return [ir.Assign(loc, flag, ir.Const(loc, False))] + lowered


def _not_flag(stmt: ir.Stmt, flag: str) -> ir.Expr:
    return ir.UnaryOp(stmt.loc, "not", ir.Name(stmt.loc, flag))


def _block(body: list[ir.Stmt], flag: str, in_loop: bool) -> tuple[list[ir.Stmt], bool]:
    """Lower one statement list; the bool says whether it may have returned.

    After a statement that may return, the rest runs under ``if not flag`` (in a loop:
    after ``if flag: break``). Each such guard sits beside the previous one, not inside
    it, so a run of early returns does not nest the code one level deeper each."""
    out: list[ir.Stmt] = []
    target = out  # where the next statement goes: ``out`` or the last guard's body
    returned = False
    for stmt in body:
        if isinstance(stmt, ir.Return):
            target.append(ir.Assign(stmt.loc, flag, ir.Const(stmt.loc, True)))
            if in_loop:
                target.append(ir.Break(stmt.loc))
            return out, True
        may_return = False
        if isinstance(stmt, ir.If):
            stmt.body, r1 = _block(stmt.body, flag, in_loop)
            stmt.orelse, r2 = _block(stmt.orelse, flag, in_loop)
            may_return = r1 or r2
        elif isinstance(stmt, (ir.For, ir.While)):
            stmt.body, may_return = _block(stmt.body, flag, in_loop=True)
        target.append(stmt)
        if may_return:
            returned = True
            if in_loop:  # leave the enclosing loop too; the code after it checks the flag
                target.append(ir.If(stmt.loc, ir.Name(stmt.loc, flag), [ir.Break(stmt.loc)], []))
            else:
                guard = ir.If(stmt.loc, _not_flag(stmt, flag), [], [])
                out.append(guard)
                target = guard.body
    if target is not out and not target:
        out.pop()  # a guard with nothing after it
    return out, returned
