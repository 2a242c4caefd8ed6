"""Tile values in generated Python, the part the CPU and CUDA targets share.

A tile variable is an array in the generated code (per chunk of groups on the CPU, in
shared memory on CUDA) holding its dtype's compute representation. A tile statement
computes its result one element at a time: :attr:`TileSource.element` names the index
variables of the element being computed, and the ordinary scalar emitter does the rest,
because a tile variable read inside the statement becomes its element there (broadcast,
right-aligned, as NumPy does). ``t.T`` and ``t[None, :]`` move the index; ``astype`` and
``where`` are scalar code. The targets supply the loops (:meth:`element_loops`): nested
loops on the CPU, every lane taking its share on CUDA.
"""

from __future__ import annotations

from contextlib import contextmanager

from ... import dtypes as D
from ...errors import KernelError
from ...tile import blocks as B
from .. import ir
from ..ir import ScalarType, TileType


class TileSource:
    """A mixin of :class:`~.pysource.SourceEmitter` for tile values."""

    element: list[str] | None = None  # the index variables of the element being computed

    # ------------------------------------------------------------------ target hooks
    def element_loops(self, shape: tuple[int, ...], body) -> None:
        """Emit code running ``body()`` (which emits the element's statements, with
        ``self.element`` set) for every element of ``shape``."""
        raise KernelError(self.kir.name, "internal: the target has no tile loops", self.kir.loc)

    def tile_temp(self, t: TileType) -> str:
        """A scratch array for a tile statement that reads its own target."""
        raise KernelError(self.kir.name, "internal: the target has no tile scratch", self.kir.loc)

    # ------------------------------------------------------------------ reading
    def tile_read(self, name: str, shape: tuple[int, ...]) -> str:
        """Tile variable ``name`` at the current element (broadcast, right-aligned)."""
        tail = self.element[len(self.element) - len(shape) :]
        index = ", ".join("0" if n == 1 else i for i, n in zip(tail, shape))
        return f"{self.name(name)}[{index}]"

    @contextmanager
    def moved_element(self, move):
        saved = self.element
        self.element = move(saved)
        try:
            yield
        finally:
            self.element = saved

    # ------------------------------------------------------------------ statements
    def tile_statement(self, s: ir.Stmt) -> None:
        """An elementwise tile assignment (tile primitives that make values are lowered
        by the target, ``self.lower``)."""
        t = s.value.type
        aside = reads_elsewhere(s.value, s.target)
        dest = self.tile_temp(t) if aside else self.name(s.target)

        def body() -> None:
            value = self.conv(self.expr(s.value), s.value.type, self.types[s.target])
            self.emit(f"{dest}[{', '.join(self.element)}] = {value}", s.loc)

        self.element_loops(t.shape, body)
        if aside:  # the statement read the tile it replaces at other elements than the
            # one it writes: computed aside, then copied
            self.element_loops(
                t.shape,
                lambda: self.emit(
                    f"{self.name(s.target)}[{', '.join(self.element)}] = "
                    f"{dest}[{', '.join(self.element)}]"
                ),
            )

    def store_code(self, code: str, src: D.DType, dst: D.DType) -> str:
        """A tile element (compute representation of ``src``) as ``dst`` stores it."""
        if dst in D.COMPUTED_IN_F32:
            return self.f32_to_half(self.conv(code, ScalarType(src), ScalarType(D.f32)), dst)
        return self.conv(code, ScalarType(src), ScalarType(dst))


# Expressions that read their operands at the element they compute (``acc * 2 + b``,
# ``tile.where(c, acc, 0)``, ``acc.astype(f16)``); ``t.T`` and ``t[None, :]`` move it.
_SAME_ELEMENT = (ir.BinOp, ir.UnaryOp, ir.Compare, ir.BoolOp, ir.IfExp, ir.Cast, ir.MathCall)
_SAME_ELEMENT_PRIMS = (B.where, B.astype)


def reads_elsewhere(value: ir.Expr, target: str) -> bool:
    """Whether an elementwise tile statement assigning ``value`` to ``target`` reads
    ``target`` at an element other than the one it writes. Only then is the result
    computed aside and copied back (every lane, or loop step, reads and writes its own
    element otherwise, so ``acc = max(acc + bias, 0)`` runs in place: no second tile of
    shared memory on CUDA)."""
    if isinstance(value, ir.Name):
        return False
    same = isinstance(value, _SAME_ELEMENT) or (
        isinstance(value, ir.PrimCall) and value.prim in _SAME_ELEMENT_PRIMS
    )
    if same:
        return any(reads_elsewhere(child, target) for child in value.children())
    return any(isinstance(e, ir.Name) and e.name == target for e in ir.walk_expr(value))


# ----------------------------------------------------------------------------- lowerings
# The elementwise tile primitives are scalar code at the current element, the same on
# every target that generates Python; each target registers these in its table.


def lower_where(cg, call, site) -> str:
    c, a, b = call.args
    t = call.type
    then = cg.conv(cg.expr(a), a.type, t)
    other = cg.conv(cg.expr(b), b.type, t)
    return f"({then} if {cg.truth(c)} else {other})"


def lower_astype(cg, call, site) -> str:
    source, dtype = call.args[0], call.args[1].value
    if dtype in D.COMPUTED_IN_F32:  # an explicit conversion rounds, as a scalar cast does
        return cg.round_half(cg.expr(source), dtype)
    return cg.conv(cg.expr(source), source.type, ScalarType(dtype))


def lower_transpose(cg, call, site) -> str:
    rank = len(call.type.shape)
    with cg.moved_element(lambda el: el[: len(el) - rank] + el[len(el) - rank :][::-1]):
        return cg.expr(call.args[0])


def lower_expand_dims(cg, call, site) -> str:
    rank, axis = len(call.type.shape), call.args[1].value

    def move(el: list[str]) -> list[str]:
        head, tail = el[: len(el) - rank], el[len(el) - rank :]
        return head + tail[:axis] + tail[axis + 1 :]

    with cg.moved_element(move):
        return cg.expr(call.args[0])


ELEMENTWISE_LOWERINGS = {
    B.where: lower_where,
    B.astype: lower_astype,
    B.transpose: lower_transpose,
    B.expand_dims: lower_expand_dims,
}
