"""Software pipelining of ``tile.range(..., prefetch=k)`` loops: which ``cp_async.wait()``
may leave the iteration's own copies in flight.

The language promises that a copy is complete after the next ``cp_async.wait()`` or
``tbarrier()``. A double-buffered loop copies chunk t+1 and then waits before computing
chunk t; taken literally, that wait also waits for chunk t+1, and nothing overlaps. In a
loop declared ``prefetch=k`` (k >= 2) the compiler looks for the pattern and proves that
the difference cannot be observed, then marks the wait ``keep_in_flight = k - 1``: on
CUDA it becomes ``cp.async.wait_group`` leaving the newest groups — those started earlier
in the same iteration — in flight while the iteration computes. The proof, for the first
top-level wait W of the loop body:

* P = the shared arrays that copies started in the body before W write to; no barrier,
  wait or nested loop with copies may come before W in the body (the count of groups
  started in the iteration is then the count of copies executed before W);
* after W, the top-level statements up to a later top-level ``tbarrier()`` or
  ``cp_async.wait()`` C neither name an array of P nor rebind any shared array
  (``s0, s1 = s1, s0`` must come after C) nor hold a barrier, wait or reduction of
  their own. Barriers and waits between W and C (``wait(); tbarrier(); compute;
  tbarrier()``) are marked like W; C itself — the last one before P is touched, or
  before the iteration ends — completes every copy.

Anything else keeps the literal meaning: the wait completes every copy. Targets whose
copies are synchronous (CPU, debug) ignore the mark.
"""

from __future__ import annotations

from ...tile import primitives as P
from .. import ir

MAX_KEEP = 7  # cp.async.wait_group takes an immediate; larger depths gain nothing


def mark_prefetch_waits(kir: ir.KernelIR) -> None:
    """Set ``keep_in_flight`` on each wait and barrier the rules above allow."""
    for s in ir.walk_stmts(kir.body):
        if isinstance(s, ir.For) and s.tile_range and (s.prefetch or 0) >= 2:
            _mark_loop(kir, s)


def _mark_loop(kir: ir.KernelIR, loop: ir.For) -> None:
    body = loop.body
    waits = [i for i, s in enumerate(body) if ir.is_call_of(s, P.copy_wait)]
    if not waits:
        return
    w = waits[0]
    pending: set[str] = set()
    for s in body[:w]:
        for inner in ir.walk_stmts([s]):
            if _is_sync(inner):
                return
            if isinstance(inner, (ir.For, ir.While)) and _has_copy(inner.body):
                return  # a copy in a loop: how many groups the iteration starts is unknown
            if isinstance(inner, ir.CopyAsync):
                pending.add(inner.dst.name)
    if not pending:
        return
    syncs = [w]  # W and the later top-level barriers/waits that may keep P in flight
    for i in range(w + 1, len(body)):
        if _is_sync(body[i]):
            syncs.append(i)
        elif not _leaves_alone(kir, body[i], pending):
            break
    keep = min(loop.prefetch - 1, MAX_KEEP)
    for i in syncs[:-1]:  # the last one completes every copy
        ir.prim_call(body[i]).attrs["keep_in_flight"] = keep


def keep_in_flight(stmt: ir.Stmt) -> int:
    """How many of the newest copy groups a barrier or wait may leave in flight."""
    return ir.prim_call(stmt).attrs.get("keep_in_flight", 0)


def _is_sync(s: ir.Stmt) -> bool:
    return ir.is_call_of(s, P.tbarrier) or ir.is_call_of(s, P.copy_wait)


def _has_copy(body: list[ir.Stmt]) -> bool:
    return any(isinstance(s, ir.CopyAsync) for s in ir.walk_stmts(body))


def _leaves_alone(kir: ir.KernelIR, stmt: ir.Stmt, pending: set[str]) -> bool:
    """Whether ``stmt`` neither touches the arrays in flight nor rebinds a shared array."""
    for s in ir.walk_stmts([stmt]):
        if ir.is_collective(s) or isinstance(s, (ir.SharedAlloc, ir.Break, ir.Continue)):
            return False  # break/continue would skip the completing barrier
        if isinstance(s, ir.Assign):
            if s.target in pending or _is_shared(kir, s.target):
                return False
        for e in ir.stmt_exprs(s):
            if isinstance(e, ir.Name) and e.name in pending:
                return False
    return True


def _is_shared(kir: ir.KernelIR, name: str) -> bool:
    t = kir.var_types.get(name)
    return isinstance(t, ir.ArrayType) and t.space == "shared"
