"""The layout pass: where each tile value of a kernel lives on CUDA (GPU.md §1).

After the CUDA code generator has placed a kernel's tiles — the register main loops'
and row loops' plans (passes/mainloop.py, passes/row_loop.py), the element-wise register
tiles (blocked_tiles.py), shared memory for the rest — :func:`placements` says for every
tile variable where it lives as a :class:`~tessera.kernel.layout.Placement`:

* ``mma_acc``: an ``mma.sync`` accumulator (a main loop's, a row loop's, and what their
  epilogues compute from it), as :func:`acc_layout.linear` lays its registers;
* ``slice``: a row vector of such a tile (a reduction along its columns, a running
  maximum), :func:`acc_layout.row_linear`;
* ``mma_operand(A)``: a row loop's A operand held as fragments (a block loaded before the
  loop, or an accumulator packed as A: attention's ``P``);
* ``blocked``: an element-wise register tile, thread ``t`` holding elements ``t + kT``;
* ``shared``: the staging ring of a main loop's or row loop's operand blocks (home
  ``staged``: 16-byte ``cp.async`` into XOR-swizzled stages, read by ``ldmatrix``), or a
  tile kept whole in shared memory (home ``shared``), with the reason where a register
  tile was refused;
* ``index``: a row loop's tile of element indices, computed where it is read.

:func:`annotate` returns a copy of the kernel's IR whose tile types carry their
placement (``tile f32[128, 128] #mma_acc``): ``k.inspect("layouts")``. The layouts are
checked against the generated code by the tests (tests/test_cuda_layouts.py: each
register's element in the code's own index arithmetic equals the layout's).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from .... import ir
from ....ir import TileType
from ....ir_print import format_kernel
from ....layout import HOMES, Placement, Swizzle, blocked, mma_operand, shared
from ...pysource import ctor
from .. import mainloop, row_loop
from ..acc_layout import AccLayout, linear, row_linear
from ..stage_copy import stage_swizzle
from .row_loop import ACC, INDEX, OPERAND, PACKED, ROW, STAGED, STAGED_T

WARP = 32


def _pow2(shape) -> bool:
    return all(n > 0 and n & (n - 1) == 0 for n in shape)


def _itemsize(t: TileType) -> int:
    """Bytes of one value of ``t`` in its compute representation (f16 tiles hold f32)."""
    return np.dtype(ctor(t.dtype).removeprefix("np.")).itemsize


def _words(t: TileType) -> int:
    """32-bit registers one value of ``t`` takes."""
    return max(1, _itemsize(t) // 4)


def _acc(acc: AccLayout, t: TileType, shape, note: str) -> Placement:
    """An accumulator tile (``shape``: the tile's; a row tile's parent's)."""
    if len(t.shape) == 2:
        return Placement(
            "registers", "mma_acc", linear(acc, shape), acc.registers * _words(t), 0, note
        )
    return Placement("registers", "slice", row_linear(acc, shape), acc.row_regs, 0, note)


def _staged(
    t: TileType, element: int, stages: int, note: str, swizzle: Swizzle | None
) -> Placement:
    """A block passing through a ring of ``stages`` shared stages, its rows' 16-byte chunks
    XOR-swizzled by ``swizzle`` (None: rows as they are)."""
    rows, cols = t.shape
    layout = None
    if _pow2(t.shape):
        try:
            layout = shared(t.shape, element, swizzle)
        except ValueError:  # a swizzle wider than the rows: the table has no basis for it
            layout = None
    return Placement(
        "staged",
        "shared",
        layout,
        0,
        rows * cols * element * stages,
        f"{stages} shared stages by 16-byte cp.async, {_swizzle_text(swizzle)}; {note}",
    )


def _swizzle_text(sw: Swizzle | None) -> str:
    if sw is None:
        return "rows as they are (no swizzle: its reads meet no bank conflict)"
    term = (
        f"(row // {sw.per_phase}) % {sw.max_phase}" if sw.per_phase > 1 else f"row % {sw.max_phase}"
    )
    scale = f" * {sw.scale}" if sw.scale != 1 else ""
    return f"16-byte chunk c of a row stored at c ^ ({term}){scale}"


def _mainloop(out: dict, p, types: dict) -> None:
    acc = mainloop.layout(p)
    inst = acc.inst
    name = inst.ptx
    ep = p.epilogue
    shape = types[p.acc].shape
    acc_note = f"{name}: warp tiles of {p.warp_m} x {p.warp_n}, {p.warps_m} x {p.warps_n} warps"
    staged = mainloop.blocks(p, "A", "B")
    for tile, operand, stored, block in zip(
        (p.a, p.b), "AB", (p.a_km, p.b_nk), staged, strict=True
    ):
        t = types[tile]
        # how the fragments are read (mainloop.py): A K x M and B K x N transposed
        how = "ldmatrix.x4.trans" if stored == (operand == "A") else "ldmatrix.x4"
        down = t.dtype.itemsize == 1 and operand == "B" and not p.b_nk
        if down:
            how = "4-byte shared loads and byte permutes"
        elif t.dtype.itemsize == 8:
            how = "8-byte shared loads"
        elif t.dtype.itemsize == 4:  # the f32 loop: four k of a row, or two columns of a k
            wide = operand == "A" or p.b_nk
            how = "16-byte shared loads" if wide else "8-byte shared loads"
        note = f"read as mma_operand({operand}) by {how}"
        out[tile] = _staged(t, t.dtype.itemsize, p.stages, note, block.swizzle)
    later = ep.shared if ep is not None else frozenset({p.acc})
    for tile in sorted((ep.registers if ep is not None else frozenset()) | {p.acc}):
        t = types[tile]
        where = acc_note if tile == p.acc else f"the main loop's epilogue, {name} registers"
        out[tile] = _acc(acc, t, shape, where)
        if tile in later:
            out[tile] = _also_shared(out[tile], t)


def _also_shared(place: Placement, t: TileType) -> Placement:
    """``place`` for a register tile a later statement needs in shared memory too."""
    from_ = "its registers are written to shared memory for a statement that needs it there"
    return Placement(
        place.home,
        place.kind,
        place.layout,
        place.registers,
        math.prod(t.shape) * _itemsize(t),
        f"{place.note}; {from_}",
    )


def _row_loop(out: dict, p, types: dict) -> None:
    inst = row_loop.instruction(p)
    rows = p.bm
    note = f"row loop: {p.warps} warps of {p.warp_m} rows, {inst.ptx}"
    for tile, kind in sorted(p.kinds.items()):
        t = types[tile]
        if kind == ACC or kind == ROW:
            width = p.widths.get(tile, inst.n) if kind == ACC else inst.n
            acc = AccLayout(inst, p.warp_m, width)
            out[tile] = _acc(acc, t, (rows, width), note)
        elif kind in (OPERAND, PACKED):
            a = inst.a.atom()
            layout = mma_operand("A", a, t.shape, (p.warps, 1)) if _pow2(t.shape) else None
            regs = math.prod(t.shape) // p.threads // inst.per_register
            how = (
                "an accumulator packed into A fragments"
                if kind == PACKED
                else "loaded once through shared memory by ldmatrix"
            )
            out[tile] = Placement("registers", "mma_operand(A)", layout, regs, 0, f"{note}; {how}")
        elif kind == STAGED:
            note = "read as mma_operand(B) by ldmatrix"
            out[tile] = _staged(t, 2, p.stages, note, stage_swizzle(2, t.shape[1] * 2))
        elif kind == STAGED_T:
            source = ir.user_name(p.sources[tile])
            how = f"{source}'s stages read transposed as mma_operand(B) by ldmatrix"
            out[tile] = Placement("staged", "shared", None, 0, 0, how)
        elif kind == INDEX:
            out[tile] = Placement(
                "computed", "index", None, 0, 0, "element indices, computed where read"
            )
    ep = p.epilogue
    for tile in sorted(ep.registers if ep is not None else ()):
        if tile in out:
            continue
        t = types[tile]
        width = t.shape[1] if len(t.shape) == 2 else inst.n
        out[tile] = _acc(
            AccLayout(inst, p.warp_m, width), t, (rows, width), "the row loop's epilogue"
        )
    for tile in ep.shared if ep is not None else ():
        out[tile] = _also_shared(out[tile], types[tile])


def _blocked(t: TileType, lanes: int) -> Placement:
    per = math.prod(t.shape) // lanes
    layout = None
    if _pow2(t.shape) and _pow2((lanes,)):
        threads = min(lanes, WARP)
        layout = blocked(t.shape, 1, threads, lanes // threads)
    return Placement(
        "registers",
        "blocked",
        layout,
        per * _words(t),
        0,
        f"thread t of {lanes} holds elements t + {lanes} k (k < {per}), row-major",
    )


def placements(cg, padded) -> dict[str, Placement]:
    """Every tile variable of ``cg`` (a generated CudaCodegen) and where it lives;
    ``padded(t)``: the shape a shared tile is declared with."""
    types = cg.types
    out: dict[str, Placement] = {}
    for p in cg.mainloops.values():
        _mainloop(out, p, types)
    for p in cg.row_loops.values():
        _row_loop(out, p, types)
    for v in cg.blocked:
        out[v] = _blocked(types[v], cg.lanes)
    for v, t in types.items():
        if isinstance(t, TileType) and v not in out:
            why = cg.moved.get(v) or cg.not_registers.get(v) or "kept whole for the group"
            nbytes = math.prod(padded(t)) * _itemsize(t)
            out[v] = Placement("shared", "shared", None, 0, nbytes, why)
    return out


def annotate(kir: ir.KernelIR, places: dict[str, Placement]) -> ir.KernelIR:
    """A copy of ``kir`` whose tile variables' types carry their placement."""
    out = copy.deepcopy(kir)
    typed = {
        v: TileType(t.dtype, t.shape, layout=places[v])
        for v, t in kir.var_types.items()
        if isinstance(t, TileType) and v in places
    }
    out.var_types.update(typed)
    for stmt in ir.walk_stmts(out.body):
        for e in ir.stmt_exprs(stmt):
            if isinstance(e, ir.Name) and e.name in typed:
                e.type = typed[e.name]
    return out


def _where(p: Placement) -> str:
    """A placement in words, for ``k.inspect("layouts")``."""
    if p.home == "registers":
        text = f"in registers, {p.kind}, {p.registers} registers a thread"
        if p.shared_bytes:
            text += f", and {p.shared_bytes} bytes of shared memory"
    elif p.home == "shared":
        text = f"in shared memory, {p.shared_bytes} bytes"
    elif p.home == "staged":
        text = "staged" + (f", {p.shared_bytes} bytes of shared memory" if p.shared_bytes else "")
    else:
        text = "computed"
    return f"{text}: {p.note}" if p.note else text


def describe(kir: ir.KernelIR, places: dict[str, Placement], threads: int, shared_arrays) -> str:
    """``k.inspect("layouts")``: the typed IR with placements, then each tile's in words
    and what the group keeps in shared memory."""
    lines = [format_kernel(annotate(kir, places)).rstrip("\n"), ""]
    lines.append(f"tiles ({threads} threads a group, {threads // WARP or 1} warps):")
    for v in sorted(places, key=lambda v: (HOMES.index(places[v].home), v)):
        p, t = places[v], kir.var_types[v]
        lines.append(f"  {v}: {t.dtype.name}[{', '.join(map(str, t.shape))}] {_where(p)}")
    total = sum(n for _, n in shared_arrays)
    lines.append(f"shared memory ({total} bytes):")
    lines += [f"  {label}: {n} bytes" for label, n in shared_arrays] or ["  none"]
    return "\n".join(lines) + "\n"
