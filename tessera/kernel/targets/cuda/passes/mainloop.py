"""Which ``tile.range`` loops become a register GEMM main loop on tensor cores (sm_80+).

The loop Tessera's GEMM kernels and ``op.matmul`` are written as::

    acc = ...                                   # any f32 tile value (BM, BN)
    for k in tile.range(start, stop, step):
        a = tile.load_block(A, (row0, k), (BM, BK))
        b = tile.load_block(B, (k, col0), (BK, BN))
        acc = tile.dot(a, b, acc)

with A and B f16 (or both bf16, f64, i8, f8e4m3 or f8e5m2; the f8 types where the
architecture has their ``mma.sync``, sm_89+) global arrays. Such a loop keeps ``acc`` in registers
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

import dataclasses
import math
from dataclasses import dataclass, field

from ..... import dtypes as D
from .....tile import blocks as B
from .... import ir
from ....ir import TileType
from ....layout import Swizzle, swizzle_down_columns, swizzle_for
from ....passes import gemm_loops
from ....passes.divisibility import multiple_of
from ....passes.fold import single_definitions

WARP = 32
DEFAULT_STAGES = 3  # sm_80's default depth (GPU.md §2: 4 on sm_90); prefetch=p sets p + 1
MAX_ACC_REGISTERS = 128  # 32-bit accumulator registers a thread may hold (the rest: fragments)


@dataclass(frozen=True)
class Shape:
    """An operand family's instruction shape: ``mma.sync`` m x n x k, the element bytes,
    and the columns a warp's tile grows by (f16/bf16: pairs of n8 tiles, which one
    ``ldmatrix.x4.trans`` loads)."""

    m: int
    n: int
    k: int
    element: int
    n_unit: int


# f16/bf16: m16n8k16 from ldmatrix; f64: DMMA m8n8k4 from 8-byte shared loads; 8-bit:
# m16n8k32, A from ldmatrix, B (K x N, K not contiguous) from 4-byte loads of 32 columns
# (four n8 tiles, interleaved) transposed by byte permutes
SHAPES = {
    D.f16: Shape(16, 8, 16, 2, 16),
    D.bf16: Shape(16, 8, 16, 2, 16),
    D.f64: Shape(8, 8, 4, 8, 8),
    D.i8: Shape(16, 8, 32, 1, 32),
    D.u8: Shape(16, 8, 32, 1, 32),
    D.f8e4m3: Shape(16, 8, 32, 1, 32),
    D.f8e5m2: Shape(16, 8, 32, 1, 32),
    # f32 without TF32: fma.rn.f32 laid as m16n8's accumulator, k4 steps of one 16-byte
    # chunk of A's rows (mma.FFMA_M16N8K4)
    D.f32: Shape(16, 8, 4, 4, 8),
}
FP8_ARCH = (8, 9)  # mma.sync with .e4m3/.e5m2 operands: sm_89 (Ada) and newer


def runs(dtype: D.DType, fp8: bool) -> bool:
    """Whether a loop of ``dtype`` operands may run as a main loop: a dtype of SHAPES,
    the f8 types only where the architecture has their ``mma.sync`` (``fp8``)."""
    return dtype in SHAPES and (fp8 or dtype not in D.FP8)


# (f32 accumulators are not gemm_loops.REGISTER_ACCUMULATORS: the language's shared
# budget still counts them, as every target but this loop keeps them in shared memory)
ACCUMULATORS = {**gemm_loops.REGISTER_ACCUMULATORS, D.f32: D.f32}


@dataclass(frozen=True)
class Epilogue:
    """What of a top-level main loop's surroundings runs on the accumulator's registers.

    ``init``: acc's ``tile.zeros``/``tile.full`` statement before the loop, whose value
    the registers start from (the statement itself then emits nothing). ``statements``:
    the ids of the statements after the loop computed register by register, each thread
    at its own accumulator elements: element-wise tile statements of the accumulator's
    shape that read register tiles only at the element they compute, and
    ``tile.store_block`` of a register tile. ``materialise``: the id of the first
    statement after the loop that needs a register tile as a shared tile (they are
    written there first), None if none does. ``registers``: the tile names held in
    registers; ``shared``: those of them that also need their shared tile."""

    init: ir.Assign | None
    statements: frozenset[int]
    materialise: int | None
    registers: frozenset[str]
    shared: frozenset[str] = field(default_factory=frozenset)

    @property
    def register_only(self) -> frozenset[str]:
        """Tiles that never exist in shared memory."""
        return self.registers - self.shared


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
    epilogue: Epilogue | None = None  # what runs on the registers around the loop
    b_nk: bool = False  # B stored N x K (multiplied as b.T): staged as BN rows of BK
    a_km: bool = False  # A stored K x M (multiplied as a.T): staged as BK rows of BM
    b_dtype: D.DType | None = None  # B's where it differs from A's (gemm_loops.MIXED)

    @property
    def shape(self) -> Shape:
        return SHAPES[self.dtype]

    @property
    def acc_dtype(self) -> D.DType:
        return ACCUMULATORS[self.dtype]

    @property
    def acc_dtype_name(self) -> str:
        return self.acc_dtype.name

    @property
    def chunk_elements(self) -> int:
        """Elements in one 16-byte chunk (one ``cp.async``)."""
        return 16 // self.shape.element

    @property
    def warp_m(self) -> int:
        return self.m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.n // self.warps_n

    @property
    def a_row_bytes(self) -> int:
        return self.shape.element * (self.m if self.a_km else self.k)

    @property
    def b_row_bytes(self) -> int:
        return self.shape.element * (self.k if self.b_nk else self.n)

    @property
    def a_bytes(self) -> int:
        return self.m * self.k * self.shape.element

    @property
    def stage_bytes(self) -> int:
        return self.a_bytes + self.k * self.n * self.shape.element

    @property
    def ring_bytes(self) -> int:
        """Shared bytes of the ring, with 128 bytes to align its start."""
        return self.stages * self.stage_bytes + 128

    @property
    def a_swizzle(self) -> Swizzle:
        return swizzle_for(self.a_row_bytes)

    @property
    def b_swizzle(self) -> Swizzle:
        """(8-bit K x N B is read a byte at a time down its columns: its own swizzle.)"""
        if self.shape.element == 1 and not self.b_nk:
            return swizzle_down_columns(self.b_row_bytes)
        return swizzle_for(self.b_row_bytes)

    @property
    def accumulators(self) -> int:
        """Accumulator elements per thread."""
        return self.m * self.n // self.threads


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def warp_grid(m: int, n: int, warps: int, shape: Shape = SHAPES[D.f16]) -> tuple[int, int] | None:
    """(warps along m, warps along n) giving each warp a whole number of the
    instruction's rows and column units, the squarest such warp tile; None if none."""
    best = None
    for wm in (1 << i for i in range(warps.bit_length())):
        wn = warps // wm
        if wm * wn != warps or m % (wm * shape.m) or n % (wn * shape.n_unit):
            continue
        score = abs(math.log2((m // wm) / (n // wn)))
        if best is None or score < best[0]:
            best = (score, (wm, wn))
    return None if best is None else best[1]


def threads_refusal(g: gemm_loops.GemmLoop, threads: int) -> str | None:
    """Why ``threads`` cannot run GEMM loop ``g`` as this main loop, or None."""
    shape = SHAPES[g.dtype]
    warps = threads // WARP
    if warp_grid(g.m, g.n, warps, shape) is None:
        return f"{warps} warps do not divide the block {g.m} x {g.n} into warp tiles"
    # whole 16-byte chunks per thread for the copies; a register budget for acc
    per_chunk = 16 // shape.element
    if (g.m * g.k // per_chunk) % threads or (g.k * g.n // per_chunk) % threads:
        return (
            f"the blocks {g.m} x {g.k} and {g.k} x {g.n} do not split into whole 16-byte "
            f"copies for {threads} threads"
        )
    held = g.m * g.n // threads * (ACCUMULATORS[g.dtype].itemsize // 4)
    if held > MAX_ACC_REGISTERS:
        return (
            f"each of {threads} threads would hold {held} accumulator registers of the "
            f"{g.m} x {g.n} block, over the {MAX_ACC_REGISTERS} the loop allows"
        )
    return None


def match(
    loop: ir.For,
    kir: ir.KernelIR,
    threads: int,
    default_stages: int = DEFAULT_STAGES,
    fp8: bool = False,
) -> Mainloop | None:
    """The plan for ``loop``, or None where it is not the main loop this path runs
    (``fp8``: the architecture has f8 ``mma.sync``)."""
    g = gemm_loops.find(loop, kir) if threads % WARP == 0 else None
    if g is None or not runs(g.dtype, fp8) or not runs(g.b_dtype or g.dtype, fp8):
        return None
    bm, bn, bk, dtype = g.m, g.n, g.k, g.dtype
    if dtype == D.f32 and (g.a_km or _tf32(loop)):  # (TF32 asked: the plain path's mma)
        return None
    shape = SHAPES[dtype]
    acc_dtype = ACCUMULATORS[dtype]
    acc_t = kir.var_types.get(g.acc)
    if not (isinstance(acc_t, TileType) and acc_t.dtype is acc_dtype and acc_t.shape == (bm, bn)):
        return None
    if not all(_pow2(v) for v in (bm, bn, bk)) or bk % shape.k:
        return None
    # rows of at least 128 bytes for 8-byte elements (their swizzle spreads 8 chunks)
    if shape.element == 8 and min(bk, bn, bm) * 8 < 128:
        return None
    grid = warp_grid(bm, bn, threads // WARP, shape)
    if threads_refusal(g, threads) is not None:
        return None
    prefetch = loop.prefetch if isinstance(loop.prefetch, int) else None
    stages = max(2, prefetch + 1) if prefetch is not None else default_stages
    return Mainloop(
        loop, g.a, g.b, g.acc, g.A, g.B, g.row0, g.col0, bm, bn, bk, dtype, threads, *grid, stages,
        b_nk=g.b_nk, a_km=g.a_km, b_dtype=g.b_dtype,
    )  # fmt: skip


def _tf32(loop: ir.For) -> bool:
    """Whether the loop's ``tile.dot`` asks for TF32 (``allow_tf32=True``)."""
    call = ir.prim_call(loop.body[-1])
    flag = call.args[3] if call is not None and len(call.args) > 3 else None
    return isinstance(flag, ir.Const) and bool(flag.value)


def offsets_in_chunks(plan: Mainloop, kir: ir.KernelIR) -> bool:
    """Whether the loop's copies start on whole 16-byte chunks for every launch where the
    arrays allow chunks: A and B are the kernel's own array parameters (the launch sees
    their alignment, strides and extents) and B's first column and the k loop's start
    and step are multiples of a chunk's elements (passes/divisibility.py). Then the launch
    chooses between a kernel with only the chunked loop and one with only the general
    loop, instead of one kernel holding both (docs/targets.md)."""
    params = {p.name for p in kir.params if p.kind == "array"}
    if plan.A not in params or plan.B not in params:
        return False
    chunk = plan.chunk_elements
    definitions = single_definitions(kir)
    loop = plan.loop
    offsets = [loop.start, loop.step]
    offsets += [plan.row0] if plan.a_km else []  # (A's columns, where it is K x M)
    offsets += [] if plan.b_nk else [plan.col0]
    return all(multiple_of(e, chunk, definitions) for e in offsets)


def launch_bounds(loop: ir.For, kir: ir.KernelIR) -> tuple | None:
    """A loop's start, stop and step as a launch knows them: each an int (a constant)
    or ``("arg", i)``, the position of a scalar parameter's or a symbol's value in the
    launch's call arguments (a name the kernel never rebinds, or assigned once to one);
    None where any is something else. The launch tests a main loop's with
    ``mainloop.whole_tiles``."""
    definitions = single_definitions(kir)
    rebound = {n for s in ir.walk_stmts(kir.body) for n in ir.bound_names(s)}
    given = (set(kir.symbols) | {p.name for p in kir.params if p.kind == "scalar"}) - rebound
    out = []
    for e in (loop.start, loop.stop, loop.step):
        for _ in range(8):  # a name assigned once: its value
            if not isinstance(e, ir.Name) or e.name not in definitions:
                break
            e = definitions[e.name]
        if isinstance(e, ir.Const) and type(e.value) is int:
            out.append(e.value)
        elif isinstance(e, ir.Name) and e.name in given:
            out.append(("arg", kir.call_arg_index(e.name)))
        else:
            return None
    return tuple(out)


def plan_mainloops(
    kir: ir.KernelIR, threads: int, stages: int = DEFAULT_STAGES, fp8: bool = False
) -> dict[int, Mainloop]:
    """The recognised loops of a grouped kernel, by ``id`` of their ``For`` statement
    (``stages``: the ring's depth where ``prefetch=`` does not give it; ``fp8``: the
    architecture has f8 ``mma.sync``)."""
    if not kir.grouped:
        return {}
    plans = {}
    for s in ir.walk_stmts(kir.body):
        if isinstance(s, ir.For):
            plan = match(s, kir, threads, stages, fp8)
            if plan is not None:
                plans[id(s)] = plan
    if len(plans) == 1:  # one loop's registers: the surroundings of several would meet
        (key, plan), top = next(iter(plans.items())), kir.body
        if any(s is plan.loop for s in top):
            plans[key] = dataclasses.replace(plan, epilogue=plan_epilogue(kir, plan))
    return plans


# ----------------------------------------------------------------------------- epilogue
_MOVES = (B.transpose, B.expand_dims)


def _reads_in_place(value: ir.Expr, names: set[str], moved: bool = False) -> bool:
    """Whether ``value`` reads every tile of ``names`` only at the element it computes
    (not through ``.T`` or an added axis)."""
    if isinstance(value, ir.Name):
        return not (moved and value.name in names)
    if isinstance(value, ir.PrimCall):
        if value.prim.collective:
            return False
        moved = moved or value.prim in _MOVES
    return all(_reads_in_place(c, names, moved) for c in value.children())


def _compound(s: ir.Stmt) -> bool:
    return any(True for _ in s.bodies())


def _init(kir: ir.KernelIR, plan: Mainloop) -> ir.Assign | None:
    """acc's constant-filled definition before the loop, if nothing else there uses acc."""
    top = kir.body
    at = next(i for i, s in enumerate(top) if s is plan.loop)
    found = None
    for s in top[:at]:
        call = ir.prim_call(s)
        if isinstance(s, ir.Assign) and s.target == plan.acc:
            filled = call is not None and (
                call.prim is B.zeros or (call.prim is B.full and isinstance(call.args[1], ir.Const))
            )
            if found is not None or not filled:
                return None
            found = s
        elif plan.acc in gemm_loops.names_read(s) or any(
            getattr(inner, "target", None) == plan.acc
            for body in s.bodies()
            for inner in ir.walk_stmts(body)
        ):
            return None
    return found


def plan_epilogue(kir: ir.KernelIR, plan: Mainloop) -> Epilogue:
    """Which statements around a top-level main loop run on its registers."""
    top = kir.body
    at = next(i for i, s in enumerate(top) if s is plan.loop)
    shape = (plan.m, plan.n)
    live = {plan.acc}  # tiles in registers now
    ever = {plan.acc}
    shared: set[str] = set()
    handled: set[int] = set()
    materialise = None
    for s in top[at + 1 :]:
        reads = gemm_loops.names_read(s) & live
        target = getattr(s, "target", None)
        call = ir.prim_call(s)
        t = getattr(getattr(s, "value", None), "type", None)
        if not reads and not _compound(s):
            if target in live:  # overwritten by the general path: a shared tile now
                live.discard(target)
                shared.add(target)
            continue
        if _compound(s):  # a compound statement: fine while it never meets a register tile
            written = {getattr(x, "target", None) for b in s.bodies() for x in ir.walk_stmts(b)}
            if not ((gemm_loops.names_read(s) | written) & ever):
                continue
            materialise = id(s)
            shared |= live
            break
        elementwise = (
            isinstance(s, ir.Assign)
            and ir.is_tile_statement(s)
            and not (call is not None and call.prim.collective)
            and isinstance(t, TileType)
            and t.shape == shape
            and _reads_in_place(s.value, live)
        )
        stored = (
            call is not None
            and call.prim is B.store_block
            and isinstance(call.args[2], ir.Name)
            and call.args[2].name in live
            and call.args[2].type.shape == shape
            and not (call.args[3] is not None and call.args[3].type.shape != shape)
        )
        if elementwise:
            handled.add(id(s))
            live.add(s.target)
            ever.add(s.target)
        elif stored:
            handled.add(id(s))
        else:
            materialise = id(s)
            shared |= live
            break
    init = _init(kir, plan)
    if init is None:
        shared.add(plan.acc)
    # a register tile's name used anywhere else in the kernel needs its shared tile
    inside = {id(x) for x in plan.loop.body} | handled | {id(plan.loop)}
    if init is not None:
        inside.add(id(init))
    shared |= gemm_loops.used_elsewhere(kir, inside, ever)
    return Epilogue(init, frozenset(handled), materialise, frozenset(ever), frozenset(shared))
