"""Shared arrays declared under lane-dependent control flow, hoisted to the kernel's top.

CUDA allocates ``__shared__`` memory statically wherever the declaration is written, and
numba-cuda's examples declare ``cuda.shared.array`` inside ``if tid < size:``. Every
target here already keeps a group's shared arrays in storage made once per group (slot
``s.slot``); the :class:`~tessera.kernel.ir.SharedAlloc` statement only binds the name.
So an allocation reached by some lanes only is moved to the top of the kernel, where every
lane binds it, as long as its uses are consistent:

* the name is allocated once (a second allocation of it, anywhere, is an error naming
  both: two declarations would be two arrays in CUDA, one name here);
* it is bound to nothing else (no ``s = t`` of another array, no swap);
* its shape is a constant (or, for ``tshared.dynamic``, a parameter or size symbol), so
  it means the same at the top.

Collectives stay where they are: a ``tbarrier()`` under the same ``if`` is still an error
(uniformity.py). Allocations under uniform control flow are left in place.
"""

from __future__ import annotations

from ...errors import KernelError, SourceLoc
from .. import ir
from . import uniformity


def hoist_divergent_allocs(kir: ir.KernelIR) -> None:
    """Move every ``tshared.alloc``/``tshared.dynamic`` reached under lane-dependent
    control flow to the top of ``kir.body`` (in source order), after checking its uses."""
    u = uniformity.analyse(kir)
    found: list[tuple[ir.SharedAlloc, SourceLoc]] = []
    kir.body = _take(kir.body, None, u, found)
    if not found:
        return
    allocs = [s for s in ir.walk_stmts(kir.body) if isinstance(s, ir.SharedAlloc)]
    allocs += [a for a, _ in found]
    for alloc, why in found:
        _check_consistent(kir, alloc, why, allocs)
    kir.body[:0] = [a for a, _ in found]


def _take(body, why, u, found) -> list[ir.Stmt]:
    """``body`` without the allocations under lane-dependent control (added to ``found``
    with the condition that made them so); nested bodies are rewritten in place."""
    out = []
    for s in body:
        if isinstance(s, ir.SharedAlloc) and why is not None:
            found.append((s, why))
            continue
        if isinstance(s, ir.If):
            inner = why or (s.cond.loc if u.expr_varies(s.cond) else None)
            s.body = _take(s.body, inner, u, found)
            s.orelse = _take(s.orelse, inner, u, found)
        elif isinstance(s, (ir.For, ir.While)):
            s.body = _take(s.body, why or u.loop_reason.get(id(s)), u, found)
        out.append(s)
    return out


def _check_consistent(kir, alloc: ir.SharedAlloc, why: SourceLoc, allocs) -> None:
    name = kir.user_vars.get(alloc.target, ir.user_name(alloc.target))
    note = (("the allocation is under this lane-dependent condition", why),)
    other = next((a for a in allocs if a is not alloc and a.target == alloc.target), None)
    if other is not None:
        raise KernelError(
            kir.name,
            f"shared array '{name}' is allocated here and at line {other.loc.line}; an "
            "allocation under lane-dependent control flow is hoisted to the kernel's top, so "
            "its name must be allocated once: allocate it once, before the if",
            alloc.loc,
            notes=note,
        )
    for s in ir.walk_stmts(kir.body):
        if isinstance(s, ir.Assign) and s.target == alloc.target:
            raise KernelError(
                kir.name,
                f"shared array '{name}' is allocated under lane-dependent control flow and "
                "assigned here too; a hoisted allocation must be its name's only binding",
                s.loc,
                notes=note,
            )
    params = {p.name for p in kir.params} | set(kir.symbols)
    for d in alloc.shape:
        if not isinstance(d, ir.Expr):
            continue
        for e in ir.walk_expr(d):
            if isinstance(e, ir.Name) and e.name not in params:
                raise KernelError(
                    kir.name,
                    f"the size of shared array '{name}' reads '{ir.user_name(e.name)}', a "
                    "variable; an allocation under lane-dependent control flow is hoisted to "
                    "the kernel's top, so its size must be a constant or a parameter",
                    e.loc,
                    notes=note,
                )
