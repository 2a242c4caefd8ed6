"""GEMM loops: the ``tile.range`` loop of block loads and one ``tile.dot`` that GEMM
kernels (and ``op.matmul``) are written as, found in target-neutral terms::

    for k in tile.range(start, stop, step):
        a = tile.load_block(A, (row0, k), (BM, BK))
        b = tile.load_block(B, (k, col0), (BK, BN))
        acc = tile.dot(a, b, acc)

with A and B 2-d global arrays of one dtype, a zero fill, ``row0``/``col0`` loop-invariant
and ``a``, ``b`` and ``k`` used nowhere else. A target may run such a loop its own way
(the CUDA target keeps ``acc`` in registers: targets/cuda/passes/mainloop.py), so the
accumulator of a loop whose operands are f16, bf16, f64, i8 or f8 (and its epilogue's tiles of its
shape) do not count against the group's ``shared=`` budget here; a target that does keep
them in shared memory checks them (checks.check_tile_sizes with what it holds elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes as D
from ...tile import blocks as B
from .. import ir
from ..ir import ArrayType, TileType

# operand dtype -> the accumulator dtype a register path keeps
REGISTER_ACCUMULATORS = {D.f16: D.f32, D.bf16: D.f32, D.f64: D.f64, D.i8: D.i32, D.u8: D.i32}
REGISTER_ACCUMULATORS.update(dict.fromkeys(D.FP8, D.f32))
# A's and B's dtypes where they differ: 8-bit integers of either sign, the two 8-bit floats
MIXED = {(D.u8, D.i8), (D.i8, D.u8), (D.f8e4m3, D.f8e5m2), (D.f8e5m2, D.f8e4m3)}


@dataclass(frozen=True)
class GemmLoop:
    loop: ir.For
    a: str  # the loop's tile names (IR)
    b: str
    acc: str
    A: str  # the global arrays (IR names)
    B: str
    row0: ir.Expr  # A's block row, B's block column (loop-invariant)
    col0: ir.Expr
    m: int
    n: int
    k: int
    dtype: D.DType  # of A (and of B, but for the MIXED pairs)
    b_nk: bool = False  # B stored N x K: its block (BN, BK) loaded at (col0, k), used as .T
    a_km: bool = False  # A stored K x M: its block (BK, BM) loaded at (k, row0), used as .T
    b_dtype: D.DType | None = None  # B's where it differs from A's (a MIXED pair)


def names(e: ir.Expr) -> set[str]:
    return {x.name for x in ir.walk_expr(e) if isinstance(x, ir.Name)}


def names_read(s: ir.Stmt) -> set[str]:
    """Every name ``s`` reads, in the statements nested in it too."""
    out: set[str] = set()
    for e in s.exprs():
        out |= names(e)
    for body in s.bodies():
        for inner in ir.walk_stmts(body):
            for e in inner.exprs():
                out |= names(e)
    return out


def used_elsewhere(kir: ir.KernelIR, inside: set[int], held: set[str]) -> set[str]:
    """The names of ``held`` that a statement of ``kir`` outside ``inside`` (ids) reads
    or assigns: tiles a register loop holds that must also exist in shared memory."""
    out: set[str] = set()
    for s in ir.walk_stmts(kir.body):
        if id(s) in inside or any(True for _ in s.bodies()):
            continue
        used = names_read(s) | ({s.target} if isinstance(s, ir.Assign) else set())
        out |= used & held
    return out


def _load_parts(s: ir.Stmt, kir: ir.KernelIR):
    """(tile name, array name, offsets, shape) of ``x = tile.load_block(A, (i, j), shape)``
    of a 2-d global array with a zero fill, or None."""
    call = ir.prim_call(s)
    if not (isinstance(s, ir.Assign) and call is not None and call.prim is B.load_block):
        return None
    array, offsets, _shape, fill = (call.args + [None] * 4)[:4]
    t = kir.var_types.get(array.name) if isinstance(array, ir.Name) else None
    if not isinstance(t, ArrayType) or t.space != "global" or t.ndim != 2:
        return None
    if not isinstance(offsets, ir.Tuple) or len(offsets.items) != 2:
        return None
    if fill is not None and not (isinstance(fill, ir.Const) and fill.value == 0):
        return None
    if not isinstance(call.type, TileType) or len(call.type.shape) != 2:
        return None
    return s.target, array.name, list(offsets.items), call.type.shape


def _is_var(e: ir.Expr, var: str) -> bool:
    return isinstance(e, ir.Name) and e.name == var


def find(loop: ir.For, kir: ir.KernelIR) -> GemmLoop | None:
    """``loop`` as a GEMM loop, or None. Either operand may be stored transposed and
    multiplied as its ``.T`` (a statement of its own in the IR): B stored N x K (a linear
    layer's weights, the usual int8 layout), its block ``b = tile.load_block(B, (col0, k),
    (BN, BK))`` in ``tile.dot(a, b.T, acc)``; A stored K x M (the products of a backward
    pass, ``x.T @ g``), ``a = tile.load_block(A, (k, row0), (BK, BM))`` in
    ``tile.dot(a.T, b, acc)``."""
    body = loop.body
    if not (loop.tile_range and 3 <= len(body) <= 5):
        return None
    loads = [_load_parts(s, kir) for s in body[:2]]
    dot = ir.prim_call(body[-1])
    if None in loads or dot is None or dot.prim is not B.dot:
        return None
    if not isinstance(body[-1], ir.Assign):
        return None
    x, y, init = (dot.args + [None] * 3)[:3]
    acc = body[-1].target
    if not (isinstance(x, ir.Name) and isinstance(y, ir.Name) and _is_var(init, acc)):
        return None
    moved = {}  # a transposed tile's name -> the loaded tile's
    for s in body[2:-1]:
        call = ir.prim_call(s)
        if not (isinstance(s, ir.Assign) and call is not None and call.prim is B.transpose):
            return None
        if not isinstance(call.args[0], ir.Name) or s.target in moved:
            return None
        moved[s.target] = call.args[0].name
    if set(moved) - {x.name, y.name} or len(set(moved.values())) < len(moved):
        return None
    a_name, b_name = moved.get(x.name, x.name), moved.get(y.name, y.name)
    by_tile = {parts[0]: parts for parts in loads}
    if set(by_tile) != {a_name, b_name} or a_name == b_name:
        return None
    a_km, b_nk = x.name in moved, y.name in moved
    a, A, a_off, a_shape = by_tile[a_name]
    b, Bn, b_off, b_shape = by_tile[b_name]
    (bm, bk), (row0, a_k) = (a_shape[::-1], a_off[::-1]) if a_km else (a_shape, a_off)
    (bn, bk2), (b_k, col0) = (b_shape, b_off[::-1]) if b_nk else (b_shape[::-1], b_off)
    var = loop.var
    if not (_is_var(a_k, var) and _is_var(b_k, var)) or bk != bk2:
        return None
    held = {var, a, b, acc, *moved}
    if held & (names(row0) | names(col0)):
        return None
    dtype, b_dtype = kir.var_types[A].dtype, kir.var_types[Bn].dtype
    if b_dtype is not dtype and (dtype, b_dtype) not in MIXED:
        return None
    if not _only_in_loop(kir, loop, held - {acc}):
        return None
    if a_km and dtype.itemsize == 1:  # (no target runs 8-bit A stored K x M in registers)
        return None
    mixed = b_dtype if b_dtype is not dtype else None
    return GemmLoop(loop, a, b, acc, A, Bn, row0, col0, bm, bn, bk, dtype, b_nk, a_km, mixed)


def _only_in_loop(kir: ir.KernelIR, loop: ir.For, held: set[str]) -> bool:
    """Whether ``held`` are neither read nor written outside ``loop``'s statements."""
    inside = {id(s) for s in loop.body}
    for s in ir.walk_stmts(kir.body):
        if s is loop or id(s) in inside:
            continue
        if getattr(s, "target", None) in held or (isinstance(s, ir.For) and s.var in held):
            return False
        for e in s.exprs():
            if names(e) & held:
                return False
    return True


def register_tiles(kir: ir.KernelIR) -> set[str]:
    """The tiles of a grouped kernel that a target may keep in registers rather than
    shared memory: the accumulators of its GEMM loops whose operands are f16/bf16/f8 (with
    an f32 accumulator), i8 (i32) or f64 (f64), and the tiles of the accumulator's shape that
    statements after a top-level loop assign (its epilogue)."""
    if not kir.grouped:
        return set()
    out = set()
    top = {id(s) for s in kir.body}
    for s in ir.walk_stmts(kir.body):
        if not isinstance(s, ir.For):
            continue
        g = find(s, kir)
        t = kir.var_types.get(g.acc) if g is not None else None
        if not (isinstance(t, TileType) and REGISTER_ACCUMULATORS.get(g.dtype) is t.dtype):
            continue
        out.add(g.acc)
        if id(s) in top:
            after = kir.body[kir.body.index(s) + 1 :]
            for x in after:
                u = kir.var_types.get(x.target) if isinstance(x, ir.Assign) else None
                if isinstance(u, TileType) and u.shape == t.shape:
                    out.add(x.target)
    return out
