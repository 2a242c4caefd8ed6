"""Lane-uniformity: which values depend on the lane, and which control flow diverges.

A value is *varying* if it derives from ``tile.linear_id()``/``tile.id()``, from an
atomic's result, from memory read at a varying index, or from a variable assigned under
varying control. A loop *diverges* if its bounds or condition vary, or if a ``break`` or
``continue`` leaves it under varying control. The analysis is flow-insensitive per
variable and iterated to a fixed point: conservative, cheap and easy to explain.

Collectives (barriers, copies, group reductions, ``tile.range``) under varying control
are compile errors that point at the collective and at the condition that made it
divergent (docs/language.md, "Collectives").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import KernelError, SourceLoc
from .. import ir


@dataclass
class Uniformity:
    varying: set[str] = field(default_factory=set)
    divergent_loops: set[int] = field(default_factory=set)  # id() of For/While statements
    # id(loop) → why it diverges (for error notes)
    loop_reason: dict[int, SourceLoc] = field(default_factory=dict)

    def expr_varies(self, e: ir.Expr) -> bool:
        """Whether ``e`` may differ between the lanes of a group. A collective's result
        is what its declaration says (a group reduction is uniform whatever it reads)."""
        if isinstance(e, ir.PrimCall):
            if e.prim.varying:
                return True
            if e.prim.collective:
                return False
        if isinstance(e, ir.Name):
            return e.name in self.varying
        return any(self.expr_varies(child) for child in e.children())

    def loop_diverges(self, s: ir.Stmt) -> bool:
        return id(s) in self.divergent_loops


def analyse(kir: ir.KernelIR) -> Uniformity:
    u = Uniformity()
    for _ in range(100):
        before = (len(u.varying), len(u.divergent_loops))
        _walk(kir.body, False, u)
        if (len(u.varying), len(u.divergent_loops)) == before:
            break
    return u


def _walk(body: list[ir.Stmt], ctrl: bool, u: Uniformity) -> None:
    for s in body:
        if isinstance(s, ir.Assign):
            if ctrl or u.expr_varies(s.value):
                u.varying.add(s.target)
        elif isinstance(s, ir.If):
            inner = ctrl or u.expr_varies(s.cond)
            _walk(s.body, inner, u)
            _walk(s.orelse, inner, u)
        elif isinstance(s, (ir.For, ir.While)):
            heads = [s.start, s.stop, s.step] if isinstance(s, ir.For) else [s.cond]
            reason = next((e.loc for e in heads if u.expr_varies(e)), None)
            if reason is None:
                reason = _varying_exit(s.body, None, u)
            if reason is not None and id(s) not in u.divergent_loops:
                u.divergent_loops.add(id(s))
                u.loop_reason[id(s)] = reason
            diverges = id(s) in u.divergent_loops
            if isinstance(s, ir.For) and (ctrl or diverges):
                u.varying.add(s.var)
            _walk(s.body, ctrl or diverges, u)


def _varying_exit(body: list[ir.Stmt], why: SourceLoc | None, u: Uniformity) -> SourceLoc | None:
    """The lane-dependent condition under which a break/continue leaves the enclosing
    loop, if there is one."""
    for s in body:
        if isinstance(s, (ir.Break, ir.Continue)) and why is not None:
            return why
        if isinstance(s, ir.If):
            inner = why or (s.cond.loc if u.expr_varies(s.cond) else None)
            found = _varying_exit(s.body, inner, u) or _varying_exit(s.orelse, inner, u)
            if found is not None:
                return found
    return None


def check_collectives(kir: ir.KernelIR, u: Uniformity) -> None:
    """Raise if any collective may be reached by some lanes of a group but not others."""
    _check(kir, kir.body, None, u)


def _check(kir: ir.KernelIR, body: list[ir.Stmt], why: SourceLoc | None, u: Uniformity) -> None:
    for s in body:
        if isinstance(s, ir.SharedAlloc) and why is not None:
            raise KernelError(
                kir.name,
                "tshared.alloc is reached under lane-dependent control flow; a shared array "
                "belongs to the whole group, so every lane must reach its allocation",
                s.loc,
                notes=(("this condition depends on the lane", why),),
            )
        if ir.is_collective(s):
            if why is not None:
                raise KernelError(
                    kir.name,
                    f"{_describe(s)} is a group collective but is reached under lane-dependent "
                    "control flow; every lane of a group must reach it",
                    s.loc,
                    notes=(("this condition depends on the lane", why),),
                )
            operands = []
            if isinstance(s, ir.For):
                operands = [s.start, s.stop, s.step]
            elif isinstance(s, ir.CopyAsync):
                operands = s.starts + [e for e in s.stops if e is not None] + s.dst_lead
            if ir.is_tile_statement(s):  # a tile is one value for the group
                _check_tile_operands(kir, s, u)
            for e in operands:
                if u.expr_varies(e):
                    raise KernelError(
                        kir.name,
                        f"the bounds of {_describe(s)} depend on the lane; they must be the "
                        "same for every lane of a group",
                        e.loc,
                    )
        if isinstance(s, ir.While) and why is None:
            _check_spin_lock(kir, s, u)
        if isinstance(s, ir.If):
            inner = why or (s.cond.loc if u.expr_varies(s.cond) else None)
            _check(kir, s.body, inner, u)
            _check(kir, s.orelse, inner, u)
        elif isinstance(s, (ir.For, ir.While)):
            inner = why or u.loop_reason.get(id(s))
            _check(kir, s.body, inner, u)


def _check_spin_lock(kir: ir.KernelIR, s: ir.While, u: Uniformity) -> None:
    """A ``while`` spinning on one lock (an ``atomic_cas``/``atomic_xchg`` of an element
    the same for every lane) that every lane of a group runs never ends: one lane takes the
    lock, the others wait for it, and it waits for them (a group's lanes run one after
    another on the CPU, in lockstep on a GPU). Triton runs such code once per program; in
    Tessera it must be one lane's (docs/language.md, "Atomics")."""
    for e in ir.walk_expr(s.cond):
        if not (isinstance(e, ir.PrimCall) and e.prim.atomic in ("cas", "xchg")):
            continue
        if u.expr_varies(e.args[1]):
            continue  # a lock per lane (lanes meet only on equal indices)
        raise KernelError(
            kir.name,
            "every lane of the group spins on the same lock here, so the loop never ends "
            "(the lane that takes the lock waits for the others, which wait for it); take "
            "the lock in one lane, 'if tile.linear_id() == 0:', and let the group in with "
            "tbarrier() (docs/language.md, Atomics)",
            s.loc,
        )


def _check_tile_operands(kir: ir.KernelIR, s: ir.Stmt, u: Uniformity) -> None:
    for e in ir.stmt_exprs(s):
        if isinstance(e, ir.Name) and e.name in u.varying:
            raise KernelError(
                kir.name,
                f"a tile statement reads '{ir.user_name(e.name)}', which differs between the "
                "lanes of a group; a tile is one value for the whole group",
                e.loc,
            )
        if isinstance(e, ir.PrimCall) and e.prim.varying:
            raise KernelError(
                kir.name,
                f"a tile statement uses {e.prim.name}(), which differs between the lanes of "
                "a group; a tile is one value for the whole group",
                e.loc,
            )


def _describe(s: ir.Stmt) -> str:
    if isinstance(s, ir.CopyAsync):
        return "cp_async.shared.global_()"
    if isinstance(s, ir.For):
        return "tile.range()"
    call = ir.prim_call(s)
    return f"{call.prim.name}()" if call is not None else "a tile statement"
