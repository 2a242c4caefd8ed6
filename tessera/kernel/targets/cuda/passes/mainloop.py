"""Which ``tile.range`` loops become a register GEMM main loop on tensor cores (sm_80+).

The loop Tessera's GEMM kernels and ``op.matmul`` are written as::

    acc = ...                                   # any f32 tile value (BM, BN)
    for k in tile.range(start, stop, step):
        a = tile.load_block(A, (row0, k), (BM, BK))
        b = tile.load_block(B, (k, col0), (BK, BN))
        acc = tile.dot(a, b, acc)

with A and B f16 (or both bf16) global arrays. Such a loop keeps ``acc`` in registers
for all its iterations (the ``mma.sync`` accumulator layout, one warp tile per warp), never
materialises ``a`` and ``b`` as tiles: their blocks go straight from global memory into a
ring of XOR-swizzled shared stages (16-byte ``cp.async`` with zero fill where the block
overhangs the array, element copies where the array's alignment does not allow 16-byte
chunks) and from there into ``ldmatrix`` fragments (cuda/mainloop.py emits it). ``acc`` is
read from its shared tile once before the loop and written back once after it, so the rest
of the kernel (the epilogue) is unchanged.

:func:`plan_mainloops` finds the loops; everything else keeps the general path, which
computes the same values (docs/targets.md, "Register GEMM main loop").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..... import dtypes as D
from .....tile import blocks as B
from .... import ir
from ....ir import ArrayType, TileType
from ....layout import Swizzle, swizzle_for

WARP = 32
MMA_M, MMA_N, MMA_K = 16, 8, 16  # m16n8k16; B fragments come in pairs of n8 tiles
DEFAULT_STAGES = 3  # sm_80's default depth (GPU.md §2); `prefetch=` sets S = prefetch + 1
MAX_ACC_REGISTERS = 128  # accumulator registers a thread may hold (the rest: fragments)
DTYPES = (D.f16, D.bf16)


@dataclass(frozen=True)
class Mainloop:
    """One recognised loop and how it runs: the block shapes, the warp tiling of the
    accumulator, the stages and the shared staging layout."""

    loop: ir.For
    a: str  # the loop's tile names (IR)
    b: str
    acc: str
    A: str  # the global arrays (IR names)
    B: str
    row0: ir.Expr  # A's row offset (loop-invariant)
    col0: ir.Expr  # B's column offset (loop-invariant)
    m: int  # BM
    n: int  # BN
    k: int  # BK
    dtype: D.DType
    threads: int
    warps_m: int
    warps_n: int
    stages: int

    @property
    def warp_m(self) -> int:
        return self.m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.n // self.warps_n

    @property
    def a_row_bytes(self) -> int:
        return 2 * self.k

    @property
    def b_row_bytes(self) -> int:
        return 2 * self.n

    @property
    def a_bytes(self) -> int:
        return self.m * self.a_row_bytes

    @property
    def stage_bytes(self) -> int:
        return self.a_bytes + self.k * self.b_row_bytes

    @property
    def ring_bytes(self) -> int:
        """Shared bytes of the ring, with 128 bytes to align its start."""
        return self.stages * self.stage_bytes + 128

    @property
    def a_swizzle(self) -> Swizzle:
        return swizzle_for(self.a_row_bytes)

    @property
    def b_swizzle(self) -> Swizzle:
        return swizzle_for(self.b_row_bytes)

    @property
    def accumulators(self) -> int:
        """f32 accumulator registers per thread."""
        return self.m * self.n // self.threads


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def warp_grid(m: int, n: int, warps: int) -> tuple[int, int] | None:
    """(warps along m, warps along n) giving each warp a whole number of m16 rows and
    of n16 column pairs, the squarest such warp tile; None if there is none."""
    best = None
    for wm in (1 << i for i in range(warps.bit_length())):
        wn = warps // wm
        if wm * wn != warps or m % (wm * MMA_M) or n % (wn * 2 * MMA_N):
            continue
        score = abs(math.log2((m // wm) / (n // wn)))
        if best is None or score < best[0]:
            best = (score, (wm, wn))
    return None if best is None else best[1]


def _names(e: ir.Expr) -> set[str]:
    return {x.name for x in ir.walk_expr(e) if isinstance(x, ir.Name)}


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


def match(loop: ir.For, kir: ir.KernelIR, threads: int) -> Mainloop | None:
    """The plan for ``loop``, or None where it is not the main loop this path runs."""
    if not (loop.tile_range and len(loop.body) == 3 and threads % WARP == 0):
        return None
    loads = [_load_parts(s, kir) for s in loop.body[:2]]
    dot = ir.prim_call(loop.body[2])
    if None in loads or dot is None or dot.prim is not B.dot:
        return None
    if not isinstance(loop.body[2], ir.Assign):
        return None
    x, y, init = (dot.args + [None] * 3)[:3]
    acc = loop.body[2].target
    if not (isinstance(x, ir.Name) and isinstance(y, ir.Name) and _is_var(init, acc)):
        return None
    by_tile = {parts[0]: parts for parts in loads}
    if set(by_tile) != {x.name, y.name} or x.name == y.name:
        return None
    a, A, a_off, (bm, bk) = by_tile[x.name]
    b, Bn, b_off, (bk2, bn) = by_tile[y.name]
    var = loop.var
    if not (_is_var(a_off[1], var) and _is_var(b_off[0], var)) or bk != bk2:
        return None
    row0, col0 = a_off[0], b_off[1]
    if {var, a, b, acc} & (_names(row0) | _names(col0)):
        return None
    dtype = kir.var_types[A].dtype
    acc_t = kir.var_types.get(acc)
    if dtype not in DTYPES or kir.var_types[Bn].dtype is not dtype:
        return None
    if not (isinstance(acc_t, TileType) and acc_t.dtype is D.f32 and acc_t.shape == (bm, bn)):
        return None
    if not all(_pow2(v) for v in (bm, bn, bk)) or bk % MMA_K:
        return None
    grid = warp_grid(bm, bn, threads // WARP)
    # whole 16-byte chunks per thread for the copies; a register budget for acc
    chunks_a, chunks_b = bm * bk // 8, bk * bn // 8
    if grid is None or chunks_a % threads or chunks_b % threads:
        return None
    if bm * bn // threads > MAX_ACC_REGISTERS:
        return None
    if not _only_in_loop(kir, loop, {a, b, var}):
        return None
    prefetch = loop.prefetch if isinstance(loop.prefetch, int) else None
    stages = max(2, prefetch + 1) if prefetch is not None else DEFAULT_STAGES
    return Mainloop(loop, a, b, acc, A, Bn, row0, col0, bm, bn, bk, dtype, threads, *grid, stages)


def _only_in_loop(kir: ir.KernelIR, loop: ir.For, names: set[str]) -> bool:
    """Whether ``names`` are neither read nor written outside ``loop``'s three
    statements (nor read by anything but the loop's own loads and product)."""
    inside = {id(s) for s in loop.body}
    for s in ir.walk_stmts(kir.body):
        if s is loop or id(s) in inside:
            continue
        if getattr(s, "target", None) in names or (isinstance(s, ir.For) and s.var in names):
            return False
        for e in s.exprs():
            if _names(e) & names:
                return False
    # inside: the loads read only the loop variable, the product only a and b
    return True


def plan_mainloops(kir: ir.KernelIR, threads: int) -> dict[int, Mainloop]:
    """The recognised loops of a grouped kernel, by ``id`` of their ``For`` statement."""
    if not kir.grouped:
        return {}
    plans = {}
    for s in ir.walk_stmts(kir.body):
        if isinstance(s, ir.For):
            plan = match(s, kir, threads)
            if plan is not None:
                plans[id(s)] = plan
    return plans
