"""Region formation: cut a grouped kernel's body at collectives (docs/targets.md).

Statements are split into *group-level* ones, run once per group (collectives, shared
allocations, assignments of lane-uniform variables, and control flow whose condition is
uniform) and *lane-level* ones (everything a single lane does: stores, varying
assignments, divergent control flow). Maximal runs of lane-level statements form a
:class:`LaneRegion`; a backend runs each region as a loop over the lanes of a group.

Because a region holds no collective, lanes inside it cannot observe one another, so any
interleaving is a valid execution: uniform loops can stay *outside* the lane loops
(the lane loop becomes innermost and vectorisable), and a lane's values only need
memory of their own when they live from one region into another. Those variables are
listed in :attr:`Schedule.lane_arrays`; all others stay scalars inside one lane loop.
A variable reused in several regions but always assigned before it is read in each
(a loop counter, say) is just a scalar in each of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import dtypes as D
from .. import ir
from .uniformity import Uniformity


@dataclass(eq=False)
class LaneRegion:
    stmts: list[ir.Stmt]
    index: int
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    exposed: set[str] = field(default_factory=set)  # read before surely written here


@dataclass(eq=False)
class GroupIf:
    stmt: ir.If
    body: list
    orelse: list


@dataclass(eq=False)
class GroupLoop:
    stmt: ir.For | ir.While
    body: list


GroupItem = LaneRegion | GroupIf | GroupLoop | ir.Stmt


@dataclass
class Schedule:
    items: list[GroupItem]
    regions: list[LaneRegion]
    lane_arrays: set[str]  # varying variables that need one slot per lane
    exchanged: set[str]  # lane variables collectives exchange
    # varying variables cheaper to recompute than to store: name → its one assignment,
    # in source order (``row = group_id(0) * 16 + tile.id(0)``)
    remat: dict[str, ir.Assign] = field(default_factory=dict)

    def remat_needed(self, region: LaneRegion) -> list[str]:
        """Rematerialised variables a region reads before assigning, with their inputs."""
        need = set(region.exposed) & set(self.remat)
        frontier = list(need)
        while frontier:
            for e in ir.walk_expr(self.remat[frontier.pop()].value):
                if isinstance(e, ir.Name) and e.name in self.remat and e.name not in need:
                    need.add(e.name)
                    frontier.append(e.name)
        return [n for n in self.remat if n in need]


def form_regions(kir: ir.KernelIR, u: Uniformity) -> Schedule:
    """The schedule of a grouped kernel; group-level loops over a variable that lanes
    also hold per lane are rewritten to count in a variable of their own."""
    builder = _Builder(kir, u)
    items = builder.block(kir.body)
    remat = _rematerialisable(kir, u)
    lane_arrays: set[str] = set()
    for r in builder.regions:
        r.reads, r.writes = _names(r.stmts)
        r.exposed = _exposed(r.stmts, set())
        # a value a region reads before assigning comes from an earlier region (or an
        # earlier trip of an enclosing group loop): only those need a slot per lane
        lane_arrays |= r.exposed & u.varying
    lane_arrays -= set(remat)
    # what collectives exchange between lanes, and the per-lane results they give
    lane_arrays |= builder.exchanged
    return Schedule(items, builder.regions, lane_arrays, builder.exchanged, remat)


PURE_NODES = (ir.Const, ir.BinOp, ir.UnaryOp, ir.Compare, ir.BoolOp, ir.IfExp, ir.Cast)
PURE_NODES += (ir.MathCall, ir.Shape)


def _rematerialisable(kir: ir.KernelIR, u: Uniformity) -> dict[str, ir.Assign]:
    """Lane values assigned once, at the top level, from ids, constants and names that
    never change: recomputing them in each region is cheaper than a per-lane array."""
    assigned: dict[str, int] = {}
    for s in ir.walk_stmts(kir.body):
        target = s.target if isinstance(s, ir.Assign) else getattr(s, "var", None)
        if target is not None:
            assigned[target] = assigned.get(target, 0) + 1
    stable = {p.name for p in kir.params} | set(kir.symbols) | {"grid_groups"}
    top = [s for s in kir.body if isinstance(s, ir.Assign) and assigned[s.target] == 1]
    stable |= {s.target for s in top if s.target not in u.varying}
    remat: dict[str, ir.Assign] = {}
    for s in top:
        if s.target not in u.varying:
            continue
        ok = True
        for e in ir.walk_expr(s.value):
            if isinstance(e, ir.Name):
                ok = e.name in stable or e.name in remat
            elif isinstance(e, ir.PrimCall):
                ok = e.prim.pure
            elif not isinstance(e, PURE_NODES):
                ok = False
            if not ok:
                break
        if ok:
            remat[s.target] = s
    return remat


class _Builder:
    def __init__(self, kir: ir.KernelIR, u: Uniformity):
        self.kir = kir
        self.u = u
        self.regions: list[LaneRegion] = []
        self.exchanged: set[str] = set()  # lane variables a collective reads or writes

    def group_level(self, s: ir.Stmt) -> bool:
        if ir.is_collective(s) or isinstance(s, (ir.SharedAlloc, ir.Break, ir.Continue)):
            return True
        if isinstance(s, ir.Assign):
            return s.target not in self.u.varying
        if isinstance(s, ir.If):
            return not self.u.expr_varies(s.cond)
        if isinstance(s, (ir.For, ir.While)):
            return not self.u.loop_diverges(s)
        return False

    def note_exchange(self, s: ir.Stmt, call: ir.PrimCall) -> None:
        """A collective reads each lane's value of its lane-variable arguments, and a
        varying collective (a scan, a shuffle) gives each lane a value of its own."""
        for arg, a in zip(call.prim.args, call.args):
            if arg.kind in ("value", "number", "int") and isinstance(a, ir.Name):
                if a.name in self.u.varying:
                    self.exchanged.add(a.name)
        if call.prim.varying and isinstance(s, ir.Assign):
            self.exchanged.add(s.target)

    def block(self, body: list[ir.Stmt]) -> list[GroupItem]:
        items: list[GroupItem] = []
        run: list[ir.Stmt] = []

        def flush() -> None:
            if run:
                region = LaneRegion(list(run), len(self.regions))
                self.regions.append(region)
                items.append(region)
                run.clear()

        for s in body:
            if not self.group_level(s):
                run.append(s)
                continue
            flush()
            if isinstance(s, ir.If):
                items.append(GroupIf(s, self.block(s.body), self.block(s.orelse)))
            elif isinstance(s, (ir.For, ir.While)):
                if isinstance(s, ir.For) and s.var in self.u.varying:
                    self.count_per_group(s)
                items.append(GroupLoop(s, self.block(s.body)))
            else:
                call = ir.prim_call(s)
                if call is not None and call.prim.collective:
                    self.note_exchange(s, call)
                items.append(s)
        flush()
        return items

    def count_per_group(self, loop: ir.For) -> None:
        """A group-level loop binds its counter once for the whole group. If lanes also
        hold the counter's variable per lane (one web: ``i = lane`` before ``for i in
        range(2): tbarrier()`` and ``i`` read after it), a lane region would read its own
        slot and miss the binding. So the loop counts in a uniform variable of its own and
        its body starts by copying it, ``i = counter``: a lane-level assignment, written
        to each lane's slot like any other."""
        k = 0
        while (counter := ir.derived_name(loop.var, f"c{k}")) in self.kir.var_types:
            k += 1
        i64 = ir.ScalarType(D.i64)
        self.kir.var_types[counter] = i64
        copy = ir.Assign(loop.loc, loop.var, ir.Name(loop.loc, counter, i64))
        loop.body.insert(0, copy)
        loop.var = counter


def _names(stmts: list[ir.Stmt]) -> tuple[set[str], set[str]]:
    reads: set[str] = set()
    writes: set[str] = set()
    for s in ir.walk_stmts(stmts):
        for e in ir.stmt_exprs(s):
            if isinstance(e, ir.Name):
                reads.add(e.name)
        if isinstance(s, ir.Assign):
            writes.add(s.target)
        elif isinstance(s, ir.For):
            writes.add(s.var)
    return reads, writes


def _reads_of(s: ir.Stmt) -> set[str]:
    return {e.name for e in ir.stmt_exprs(s) if isinstance(e, ir.Name)}


def _exposed(stmts: list[ir.Stmt], defined: set[str]) -> set[str]:
    """Names read in ``stmts`` before they are surely assigned (``defined`` is updated)."""
    out: set[str] = set()
    for s in stmts:
        out |= _reads_of(s) - defined
        if isinstance(s, ir.Assign):
            defined.add(s.target)
        elif isinstance(s, ir.If):
            d1, d2 = set(defined), set(defined)
            out |= _exposed(s.body, d1) | _exposed(s.orelse, d2)
            defined |= d1 & d2
        elif isinstance(s, (ir.For, ir.While)):
            inner = set(defined) | ({s.var} if isinstance(s, ir.For) else set())
            # a read before the body's own assignment sees the previous trip's value,
            # and the body starts from ``defined`` only: both cases show up as exposed
            out |= _exposed(s.body, inner)
    return out
