"""``tile.load`` and ``tile.store`` at a tile of indices become ``tile.gather`` and
``tile.scatter``.

``tile.load(k, (rows[:, None], cols[None, :]), mask=m, other=0)`` is what Triton's
``tl.load(k_ptr + rows[:, None] * D + cols[None, :], mask=m, other=0)`` becomes: the typer
types such a load (a store likewise) as the gather (scatter) it is, and this pass, on the
typed IR, makes it that primitive call, marked ``attrs["in_bounds"]``. The mark is the
contract of ``tile.load``, which differs from ``tile.gather``'s in one point: an element
that is not masked off must be inside the array. Where checks are on (the debug target,
bounds-checked CPU launches) one outside is an error naming the kernel, the array and the
line; elsewhere it reads ``other`` (a store writes nothing), as a gather's does, so no
target ever reads or writes outside the array.

Operands that are not a variable or a constant (``rows[:, None]``, ``j < n``) are assigned
to variables of their own first, as the front end does for a primitive's arguments; a
load inside an expression (``tile.load(a, i) * 2``) is assigned to one too. Tiles are
values computed whole, in group-uniform code, so evaluating them first keeps the meaning.
The kernel is typed again afterwards (pipeline.type_kernel).
"""

from __future__ import annotations

import dataclasses

from ...tile import blocks as B
from .. import ir

IN_BOUNDS = "in_bounds"  # the PrimCall attribute: tile.load/tile.store's contract (above)


def lower_tile_indexing(kir: ir.KernelIR) -> bool:
    """Rewrite every tile-indexed load and store of the typed ``kir``; whether any was."""
    rewriter = _Rewriter(kir)
    kir.body = rewriter.block(kir.body)
    return rewriter.changed


def _tile_typed(e: ir.Expr | None) -> bool:
    return e is not None and isinstance(e.type, ir.TileType)


def _tile_load(e: ir.Expr) -> bool:
    """A ``tile.load`` (its ``other`` given: ``a[i]`` has none) at a tile of indices."""
    return isinstance(e, ir.Load) and e.other is not None and any(map(_tile_typed, e.indices))


class _Rewriter:
    def __init__(self, kir: ir.KernelIR):
        self.kir = kir
        self.count = 0
        self.changed = False

    def fresh(self) -> str:
        while (name := ir.derived_name("_index", f"t{self.count}")) in self.kir.var_types:
            self.count += 1
        self.count += 1
        return name

    def block(self, body: list[ir.Stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in body:
            for inner in s.bodies():
                inner[:] = self.block(inner)
            out += self.stmt(s)
        return out

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        pre: list[ir.Stmt] = []
        if isinstance(s, ir.Store) and s.call and any(map(_tile_typed, s.indices)):
            self.changed = True
            index = ir.Tuple(s.loc, [self.operand(i, pre) for i in s.indices])
            value = self.operand(s.value, pre)
            mask = None if s.mask is None else self.operand(s.mask, pre)
            call = ir.PrimCall(s.loc, B.scatter, [s.array, index, value, mask])
            call.attrs[IN_BOUNDS] = True
            return pre + [ir.ExprStmt(s.loc, call)]
        if isinstance(s, ir.Assign) and _tile_load(s.value):
            s.value = self.gather(s.value, pre)
        elif isinstance(s, (ir.Assign, ir.ExprStmt, ir.Store)):
            # (tiles reach no other statement: conditions and bounds are scalars, and the
            # collectives that make scalars of tiles stand alone)
            self.children(s, pre)
        return pre + [s]

    def children(self, node: ir.Expr | ir.Stmt, pre: list[ir.Stmt]) -> None:
        """Replace the tile-indexed loads under ``node`` by variables assigned in ``pre``."""
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if isinstance(value, ir.Expr):
                setattr(node, f.name, self.expr(value, pre))
            elif isinstance(value, list):
                setattr(
                    node,
                    f.name,
                    [self.expr(v, pre) if isinstance(v, ir.Expr) else v for v in value],
                )

    def expr(self, e: ir.Expr, pre: list[ir.Stmt]) -> ir.Expr:
        self.children(e, pre)
        if not _tile_load(e):
            return e
        name = self.fresh()
        pre.append(ir.Assign(e.loc, name, self.gather(e, pre)))
        return ir.Name(e.loc, name, e.type)

    def gather(self, e: ir.Load, pre: list[ir.Stmt]) -> ir.PrimCall:
        self.changed = True
        index = ir.Tuple(e.loc, [self.operand(i, pre) for i in e.indices])
        mask = None if e.mask is None else self.operand(e.mask, pre)
        args = [e.array, index, mask, self.operand(e.other, pre)]
        call = ir.PrimCall(e.loc, B.gather, args, e.type)
        call.attrs[IN_BOUNDS] = True
        return call

    def operand(self, e: ir.Expr, pre: list[ir.Stmt]) -> ir.Expr:
        """``e`` (its own tile-indexed loads rewritten) as a primitive's argument: a
        variable or a constant."""
        e = self.expr(e, pre)
        if isinstance(e, (ir.Name, ir.Const)):
            return e
        name = self.fresh()
        pre.append(ir.Assign(e.loc, name, e))
        return ir.Name(e.loc, name, e.type)
