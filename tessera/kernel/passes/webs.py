"""Live-range splitting: one name for each independent web of a local variable.

A kernel may reuse a name for unrelated values: ``i`` of a lane-dependent loop in one
phase, the counter of ``for i in range(2)`` in another. The uniformity analysis is
flow-insensitive *per name*, so the second ``i`` would count as varying because of the
first; region formation would then keep one ``i`` per lane and reload it at the top of
every lane loop, overwriting the counter of the group-level ``for i`` around it.

A *web* is a set of definitions (assignments and ``for`` headers) tied together by the
uses they reach: a use that two definitions may reach joins them. Webs of one variable
never pass a value to each other, so each may have a name of its own. The first web (in
source order) keeps the user's name; the others become ``i.1``, ``i.2``, ... (see
:func:`ir.derived_name`). Definitions are found by a reaching-definitions pass over the
structured IR; a loop is iterated to a fixed point, so a use at the top of a body sees
the definitions at its bottom (the back edge), ``continue`` goes to the loop's head and
``break`` to its exit.

The pass runs after typing: every web keeps its variable's type (the language types a
variable, not a web) and type errors name what the user wrote. The one exception is a
name rebound to a tile or array of another type (``acc = acc.astype(f32)`` after an
integer ``tile.dot``): the typer finds the conflict, the pass splits that name alone,
and typing runs again, each web with a type of its own (pipeline.py). Left as they are:

* a variable read where it may be unassigned: such a read's value is unspecified, but
  kernels that do it compile, and it keeps seeing the one variable it always saw;
* arrays: shared arrays are named in the debug target's reports and are rebound by
  swaps (``s0, s1 = s1, s0``); parameters and symbols cannot be assigned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir

ENTRY = -1  # the "definition" a variable has before it is assigned

State = dict[str, frozenset[int]]  # variable → the definitions that may reach here


def split_webs(kir: ir.KernelIR, only: set[str] | None = None) -> int:
    """Rename the independent webs of ``kir``'s scalar locals in place; each new name
    gets its variable's type. ``only``: these variables instead, before typing (the
    typer then types each web on its own: a name rebound to a tile of another dtype).
    Returns how many new names there are."""
    fixed = {p.name for p in kir.params} | set(kir.symbols) | {"grid_groups"}
    if only is None:
        candidates = {
            n for n, t in kir.var_types.items() if isinstance(t, ir.ScalarType) and n not in fixed
        }
    else:
        candidates = only - fixed
    webs = _Webs(candidates)
    webs.block(kir.body, {n: frozenset({ENTRY}) for n in candidates})
    names = webs.names()
    webs.apply(names)
    for d, name in names.items():
        if webs.defs[d].var in kir.var_types:
            kir.var_types.setdefault(name, kir.var_types[webs.defs[d].var])
    return len({name for d, name in names.items() if name != webs.defs[d].var})


@dataclass(eq=False)
class _Def:
    site: ir.Assign | ir.For
    var: str


@dataclass(eq=False)
class _Loop:
    """The states a loop's ``break``s and ``continue``s leave with."""

    breaks: list[State] = field(default_factory=list)
    continues: list[State] = field(default_factory=list)


def _join(*states: State | None) -> State | None:
    """Where paths meet: a definition reaches if it reaches along some path. ``None`` is
    the state after ``break``/``continue``: no path."""
    live = [s for s in states if s is not None]
    if not live:
        return None
    out = dict(live[0])
    for s in live[1:]:
        for var, defs in s.items():
            out[var] = out.get(var, frozenset()) | defs
    return out


class _Webs:
    def __init__(self, candidates: set[str]):
        self.candidates = candidates
        self.defs: list[_Def] = []
        self.def_of: dict[int, int] = {}  # id(site) → definition number
        self.parent: list[int] = []  # union-find over definition numbers
        self.uses: dict[int, tuple[ir.Name, set[int]]] = {}  # id(node) → node, its defs
        self.unsplittable: set[str] = set()
        self.loops: list[_Loop] = []

    # ------------------------------------------------------------------ union-find
    def find(self, d: int) -> int:
        while self.parent[d] != d:
            self.parent[d] = self.parent[self.parent[d]]
            d = self.parent[d]
        return d

    def union(self, defs: set[int]) -> None:
        roots = sorted({self.find(d) for d in defs})
        for r in roots[1:]:
            self.parent[r] = roots[0]  # the earliest definition stays the root

    # ------------------------------------------------------------------ dataflow
    def define(self, site: ir.Assign | ir.For, var: str, state: State) -> State:
        if var not in self.candidates:
            return state
        d = self.def_of.get(id(site))
        if d is None:
            d = self.def_of[id(site)] = len(self.defs)
            self.defs.append(_Def(site, var))
            self.parent.append(d)
        return {**state, var: frozenset({d})}

    def use(self, s: ir.Stmt, state: State) -> None:
        for e in ir.stmt_exprs(s):
            if not (isinstance(e, ir.Name) and e.name in self.candidates):
                continue
            reach = state[e.name]
            if ENTRY in reach:
                self.unsplittable.add(e.name)
            _, defs = self.uses.setdefault(id(e), (e, set()))
            defs |= reach - {ENTRY}
            self.union(defs)

    def block(self, body: list[ir.Stmt], state: State | None) -> State | None:
        for s in body:
            if state is None:
                break  # unreachable: its names stay as they are, in the first web
            state = self.stmt(s, state)
        return state

    def stmt(self, s: ir.Stmt, state: State) -> State | None:
        if isinstance(s, ir.If):
            self.use(s, state)
            return _join(self.block(s.body, state), self.block(s.orelse, state))
        if isinstance(s, (ir.For, ir.While)):
            if isinstance(s, ir.For):
                self.use(s, state)  # the bounds are evaluated once, before the loop
            return self.loop(s, state)
        if isinstance(s, (ir.Break, ir.Continue)):
            frame = self.loops[-1]
            (frame.breaks if isinstance(s, ir.Break) else frame.continues).append(state)
            return None
        self.use(s, state)
        if isinstance(s, ir.Assign):
            return self.define(s, s.target, state)
        return state

    def loop(self, s: ir.For | ir.While, entry: State) -> State | None:
        """The loop's head is reached from before the loop, from the end of its body and
        from ``continue``; it is left from the head (range exhausted, condition false)
        and by ``break``."""
        head = entry
        while True:
            frame = _Loop()
            self.loops.append(frame)
            if isinstance(s, ir.For):
                end = self.block(s.body, self.define(s, s.var, head))
            else:
                self.use(s, head)
                end = self.block(s.body, head)
            self.loops.pop()
            new_head = _join(entry, end, *frame.continues)
            if new_head == head:
                return _join(head, *frame.breaks)
            head = new_head

    # ------------------------------------------------------------------ renaming
    def names(self) -> dict[int, str]:
        """Definition number → its web's name."""
        out: dict[int, str] = {}
        count: dict[str, int] = {}
        for d, info in enumerate(self.defs):  # definitions are numbered in source order
            root = self.find(d)
            if root == d:
                k = count[info.var] = count.get(info.var, -1) + 1
                split = k > 0 and info.var not in self.unsplittable
                out[d] = ir.derived_name(info.var, str(k)) if split else info.var
            else:
                out[d] = out[root]
        return out

    def apply(self, names: dict[int, str]) -> None:
        for d, info in enumerate(self.defs):
            if isinstance(info.site, ir.For):
                info.site.var = names[d]
            else:
                info.site.target = names[d]
        for node, defs in self.uses.values():
            if defs:
                node.name = names[self.find(min(defs))]
