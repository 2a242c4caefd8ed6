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

from .....errors import KernelError
from .....tile import primitives as P
from .... import ir
from ....passes import gemm_loops
from .mainloop import WARP, match, runs, threads_refusal
from .row_loop import plan_row_loop

# the ids and barriers a tile-only kernel may use (everything else of primitives.py is
# lane code); every tile primitive (tile.zeros, load_block, dot, reductions, ...) is fine
UNIFORM_PRIMITIVES = (P.group_id, P.group_linear_id, P.group_count, P.group_tile_count, P.tbarrier)
WARP_TILE = 64 * 32  # accumulators a warp holds, about
MIN_WARPS, MAX_WARPS = 4, 8
TWO_BLOCKS_ACCUMULATORS = 64  # 32-bit accumulator registers a thread holds, at most
TWO_BLOCKS_SHARED = 200 * 1024  # two rings in an SM's shared memory (sm_90: 228 KiB)
MAX_THREADS_PER_SM = 2048


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


def blocks_per_sm(mainloops, row_loops, threads: int) -> int:
    """The blocks of a kernel each SM should hold at once, asked of ptxas as the launch
    bound's minimum (which caps a thread's registers at 65,536 / (blocks x threads)).

    2 where the kernel's register loops are all GEMM main loops whose accumulators take
    at most ``TWO_BLOCKS_ACCUMULATORS`` registers a thread and whose rings leave room
    for a second block in shared memory: while one block waits at its barrier the
    other keeps the tensor cores busy (the 128 x 128 x 32 block of 8 warps, 4 stages,
    fits 127 registers without spills). 1 otherwise: row loops and larger warp tiles
    need their registers. Where ptxas would spill under the cap, the program compiles
    again without it (program.py)."""
    loops = list(mainloops)
    if not loops or row_loops or 2 * threads > MAX_THREADS_PER_SM:
        return 1
    for plan in loops:
        acc = plan.accumulators * (2 if plan.shape.element == 8 else 1)
        if acc > TWO_BLOCKS_ACCUMULATORS or 2 * plan.ring_bytes > TWO_BLOCKS_SHARED:
            return 1
    return 2


def threads_for(kir: ir.KernelIR, tensor_cores: bool, stages: int, fp8: bool = False) -> int:
    """The threads of one block of ``kir`` (grouped) on the CUDA target (``fp8``: the
    architecture has f8 ``mma.sync``)."""
    lanes = math.prod(kir.tile_shape)
    if kir.num_warps is not None:
        return _asked(kir, tensor_cores, stages, kir.num_warps, fp8)
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
        if g is None or not runs(g.dtype, fp8):
            continue
        warps = min(max(g.m * g.n // WARP_TILE, MIN_WARPS), MAX_WARPS)
        while warps >= 1:
            if match(s, kir, warps * WARP, stages, fp8) is not None:
                return warps * WARP
            warps //= 2
    return lanes


def _asked(kir: ir.KernelIR, tensor_cores: bool, stages: int, warps: int, fp8: bool) -> int:
    """``@kernel(num_warps=W)``: W warps for a tile-only kernel, whose register loops
    must divide among them (a KernelError naming both otherwise)."""
    if not tile_only(kir):
        raise KernelError(
            kir.name,
            f"num_warps={warps} is for tile-only kernels; this one has lane code (ids, "
            f"shuffles, atomics, tshared arrays, copies or prints), so it runs a thread per "
            f"declared lane ({math.prod(kir.tile_shape)})",
            kir.loc,
        )
    threads = warps * WARP
    if not tensor_cores:  # the shared-memory path: any number of threads shares a tile
        return threads
    for s in ir.walk_stmts(kir.body):
        if not isinstance(s, ir.For):
            continue
        rows = plan_row_loop(kir, s, threads, stages)
        if rows is not None and rows.bm != 16 * warps:
            raise KernelError(
                kir.name,
                f"num_warps={warps} does not divide the row loop's block of {rows.bm} rows "
                f"(a warp takes 16 rows: num_warps={max(rows.bm // 16, 1)})",
                s.loc,
            )
        g = gemm_loops.find(s, kir)
        if g is None or not runs(g.dtype, fp8) or match(s, kir, threads, stages, fp8) is not None:
            continue
        # a loop the register path takes with other warps, but not with these
        taken = any(match(s, kir, w * WARP, stages, fp8) for w in (1, 2, 4, 8, 16, 32))
        why = threads_refusal(g, threads) if taken else None
        if why is not None:
            raise KernelError(
                kir.name,
                f"num_warps={warps} cannot run this GEMM loop in registers: {why} "
                "(docs/targets.md, 'Register GEMM main loop')",
                s.loc,
            )
    return threads
