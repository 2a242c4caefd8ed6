"""How many threads a CUDA block of a grouped kernel has (GPU.md §3, "Launch shapes").

A kernel with lane code (``tile.linear_id()``, ``tile.id``, shuffles, lane reductions,
atomics, ``tshared`` arrays, copies, prints) runs one thread per declared lane. A
*tile-only* kernel — every statement group-uniform scalar code or a tile statement, the
only ids ``group_id``/``group_linear_id`` — computes the same values whatever the number
of threads that share its tile statements, so the target chooses: where it has a GEMM
loop the register main loop takes (passes/mainloop.py), enough warps for warp tiles of
about 64 x 32 accumulators (4 to 8 warps); where it has a row loop (passes/row_loop.py),
a warp for every 16 rows of its block; else the declared lanes.
``group_tile_count()`` stays the declared lanes either way.
"""

from __future__ import annotations

import math

from ..... import dtypes as D
from .....tile import primitives as P
from .... import ir
from ....passes import gemm_loops
from .mainloop import WARP, match
from .row_loop import plan_row_loop

# the ids and barriers a tile-only kernel may use (everything else of primitives.py is
# lane code); every tile primitive (tile.zeros, load_block, dot, reductions, ...) is fine
UNIFORM_PRIMITIVES = (P.group_id, P.group_linear_id, P.group_count, P.group_tile_count, P.tbarrier)
WARP_TILE = 64 * 32  # accumulators a warp holds, about
MIN_WARPS, MAX_WARPS = 4, 8


def tile_only(kir: ir.KernelIR) -> bool:
    """Whether no value of the kernel depends on which lane computes it."""
    if not kir.grouped or kir.allocs:
        return False
    for s in ir.walk_stmts(kir.body):
        if isinstance(s, (ir.CopyAsync, ir.Print, ir.SharedAlloc)):
            return False
        for e in s.exprs():
            for x in ir.walk_expr(e):
                if isinstance(x, ir.PrimCall) and not (x.prim.tile or x.prim in UNIFORM_PRIMITIVES):
                    return False
    return True


def threads_for(kir: ir.KernelIR, tensor_cores: bool, stages: int) -> int:
    """The threads of one block of ``kir`` (grouped) on the CUDA target."""
    lanes = math.prod(kir.tile_shape)
    if not tensor_cores or not tile_only(kir):
        return lanes
    for s in kir.body:  # a row loop: a warp for every 16 rows of its block
        if isinstance(s, ir.For):
            for warps in (8, 4, 2, 1):
                plan = plan_row_loop(kir, s, warps * WARP, stages)
                if plan is not None and plan.bm == 16 * warps:
                    return warps * WARP
    for s in ir.walk_stmts(kir.body):
        if not isinstance(s, ir.For):
            continue
        g = gemm_loops.find(s, kir)
        if g is None or g.dtype not in (D.f16, D.bf16, D.f64):
            continue
        warps = min(max(g.m * g.n // WARP_TILE, MIN_WARPS), MAX_WARPS)
        while warps >= 1:
            if match(s, kir, warps * WARP, stages) is not None:
                return warps * WARP
            warps //= 2
    return lanes
