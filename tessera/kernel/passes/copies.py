"""Copies that only pass a value along are removed: ``t = y`` where ``t`` is a temporary.

The front end makes such copies where it must keep Python's meaning in general: a
helper's ``return a, b`` evaluates the tuple into temporaries before binding the results,
and the caller's ``x, y = f(...)`` unpacks them through temporaries again (so that
``a, b = b, a`` swaps). For tiles each copy is a loop over every element that the
compiler must process and the CPU must run: a 2-tuple of 64x64 tiles returned from a
helper cost six of them. Here a copy ``t = y`` of a variable ``t`` assigned nowhere else
is dropped and ``t``'s reads become reads of ``y``, when those reads are all later
statements of the same block (not inside nested loops or branches) and ``y`` keeps its
value until the last of them (the last may assign ``y``: it reads first, as Python does).
Only tiles (a scalar's copy costs nothing). Runs after typing: both names have one type.
"""

from __future__ import annotations

from .. import ir


def propagate_copies(kir: ir.KernelIR) -> None:
    assigned: dict[str, int] = {}
    for s in ir.walk_stmts(kir.body):
        for name in ir.bound_names(s):
            assigned[name] = assigned.get(name, 0) + 1
    reads: dict[str, int] = {}
    for s in ir.walk_stmts(kir.body):
        for e in ir.stmt_exprs(s):
            if isinstance(e, ir.Name):
                reads[e.name] = reads.get(e.name, 0) + 1
    params = {p.name for p in kir.params}
    removed: set[str] = set()
    _block(kir.body, (assigned, reads), params, removed, kir)
    _merge_block(kir.body, kir, removed)
    for name in removed:
        kir.var_types.pop(name, None)


def _merge_block(body: list[ir.Stmt], kir, removed: set[str]) -> None:
    """``t = y; ...; y = t`` (a helper's tile parameter that it updates, and the caller
    taking the result back: ``dk = f(dk, ...)``) becomes ``...`` with ``t`` renamed ``y``,
    where ``t`` occurs only between the two and ``y`` not at all."""
    for s in body:
        for inner in s.bodies():
            _merge_block(inner, kir, removed)
    i = 0
    while i < len(body):
        s = body[i]
        if isinstance(s, ir.Assign) and isinstance(s.value, ir.Name) and s.target != s.value.name:
            t, y = s.target, s.value.name
            last = _merge_end(body, i, t, y, kir)
            if last is not None:
                for inner in body[i + 1 : last]:
                    _rename(inner, t, y)
                del body[last]
                del body[i]
                removed.add(t)
                continue
        i += 1


def _merge_end(body: list[ir.Stmt], i: int, t: str, y: str, kir) -> int | None:
    types = kir.var_types
    if t in {p.name for p in kir.params} or not isinstance(types.get(t), ir.TileType):
        return None
    if types.get(y) != types[t]:
        return None
    for j in range(i + 1, len(body)):
        s = body[j]
        if isinstance(s, ir.Assign) and s.target == y and _is_name(s.value, t):
            if _count(kir.body, t) != _count(body[i : j + 1], t):
                return None  # t is read or bound elsewhere too (after a loop, say)
            return j
        if _occurs(s, y):
            return None
    return None


def _count(body: list[ir.Stmt], name: str) -> int:
    """How often ``name`` is read or bound in ``body``, nested statements included."""
    total = 0
    for x in ir.walk_stmts(body):
        total += ir.bound_names(x).count(name)
        total += sum(1 for e in ir.stmt_exprs(x) if isinstance(e, ir.Name) and e.name == name)
    return total


def _is_name(e: ir.Expr, name: str) -> bool:
    return isinstance(e, ir.Name) and e.name == name


def _occurs(s: ir.Stmt, name: str) -> bool:
    """Whether ``name`` is read or assigned in ``s`` or its nested statements."""
    return any(name in ir.bound_names(x) for x in ir.walk_stmts([s])) or _reads(s, name)


def _rename(s: ir.Stmt, old: str, new: str) -> None:
    for x in ir.walk_stmts([s]):
        if getattr(x, "target", None) == old and isinstance(x, ir.Assign):
            x.target = new
        for e in ir.stmt_exprs(x):
            if isinstance(e, ir.Name) and e.name == old:
                e.name = new


def _block(body: list[ir.Stmt], counts, params, removed: set[str], kir) -> None:
    for s in body:
        for inner in s.bodies():
            _block(inner, counts, params, removed, kir)
    assigned, reads = counts
    i = 0
    while i < len(body):
        s = body[i]
        if _removable(s, assigned, params, kir) and _forward(
            body, i, s.target, s.value.name, reads.get(s.target, 0)
        ):
            if s.value.name in reads:  # the copy's own read is gone; t's reads are y's
                reads[s.value.name] += reads.pop(s.target, 0) - 1
            removed.add(s.target)
            del body[i]
            continue
        i += 1


def _removable(s: ir.Stmt, assigned, params, kir) -> bool:
    if not (isinstance(s, ir.Assign) and isinstance(s.value, ir.Name)):
        return False
    t, y = s.target, s.value.name
    if t == y or assigned.get(t) != 1 or t in params:
        return False
    types = kir.var_types  # (parameters and symbols are not there: their copies stay)
    return isinstance(types.get(t), ir.TileType) and types.get(y) == types[t]


def _forward(body: list[ir.Stmt], i: int, t: str, y: str, reads: int) -> bool:
    """Replace the reads of ``t`` after statement ``i`` by ``y``, if they are all of its
    ``reads``, all in the block's own statements, and ``y`` is not assigned before the
    last of them."""
    uses = []
    for j in range(i + 1, len(body)):
        s = body[j]
        if any(_reads(inner, t) for b in s.bodies() for inner in b):
            return False  # read in a nested block: leave it
        if any(isinstance(e, ir.Name) and e.name == t for e in ir.stmt_exprs(s)):
            uses.append(j)
    found = sum(
        1 for j in uses for e in ir.stmt_exprs(body[j]) if isinstance(e, ir.Name) and e.name == t
    )
    if not uses or found != reads:
        return False  # read elsewhere too (an earlier statement of a loop), or never
    last = uses[-1]
    for j in range(i + 1, last + 1):
        s = body[j]
        writes_y = y in ir.bound_names(s) or any(
            y in ir.bound_names(inner) for b in s.bodies() for inner in ir.walk_stmts(b)
        )
        if writes_y and not (j == last and isinstance(s, ir.Assign) and not list(s.bodies())):
            return False
    for j in uses:
        for e in ir.stmt_exprs(body[j]):
            if isinstance(e, ir.Name) and e.name == t:
                e.name = y
    return True


def _reads(s: ir.Stmt, name: str) -> bool:
    for inner in [s, *(x for b in s.bodies() for x in ir.walk_stmts(b))]:
        if any(isinstance(e, ir.Name) and e.name == name for e in ir.stmt_exprs(inner)):
            return True
    return False
