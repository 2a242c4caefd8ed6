"""Which ``tile.range`` loops become a register *row loop* on tensor cores (sm_80+).

Flash attention, and loops like it, keep a block of ``BM`` rows for the whole loop: each
iteration loads blocks (``kb``, ``vb``), multiplies with ``tile.dot``, works element-wise
on the products and reduces them along their rows, and carries row-shaped values::

    for n0 in tile.range(start, stop, BN):
        kb = tile.load_block(K, (n0, c), (BN, D))
        vb = tile.load_block(V, (n0, c), (BN, DV))
        s = tile.dot(qb, kb.T) * scale                  # qb loaded before the loop
        new_max = max(row_max, s.max(axis=1))
        p = math.exp(s - new_max[:, None])
        rescale = math.exp(row_max - new_max)
        row_sum = row_sum * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + tile.dot(p.astype(f16), vb)
        row_max = new_max

Every warp then owns whole rows (``BM / warps`` of them, a multiple of 16) and nothing
ever crosses warps: the products' results are register tiles in the ``mma.sync`` C layout
(*acc* tiles, any width that is a multiple of 16), row-shaped values are *row* registers
(the same in the four threads of a group), a row reduction is register steps and two
butterflies in the language's fixed tree, ``p.astype(f16)`` feeding a product becomes its
A fragments by packing C registers (no shared memory), blocks loaded in the loop go
through a ring of swizzled stages (``cp.async``) to ``ldmatrix`` (``.T`` of a block
loaded row by row is the non-transposed load), and the block loaded before the loop (the
A operand, ``qb``) is loaded once into fragment registers. :func:`plan_row_loop` finds
such a loop (statement by statement, every tile's kind) or says no; the loop then runs
as cuda/row_loop.py emits it, and statements after it use its registers (the register
epilogue of passes/mainloop.py, with row registers too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..... import dtypes as D
from .....tile import blocks as B
from .... import ir
from ....ir import ArrayType, TileType
from ....passes import gemm_loops
from ....passes.divisibility import multiple_of, nonnegative
from ....passes.fold import single_definitions
from .. import stage_copy
from .mainloop import DEFAULT_STAGES, WARP, Epilogue

ACC, ROW, STAGED, STAGED_T, OPERAND, PACKED = "acc", "row", "staged", "staged_t", "a", "packed"
INDEX = "index"  # a tile of element indices (tile.arange and scalar arithmetic on it)
REDUCTIONS = {B.tile_sum: "sum", B.tile_max: "max", B.tile_min: "min"}
_MOVES = (B.transpose, B.expand_dims)


@dataclass(frozen=True)
class Block:
    """A block of a 2-d global array loaded by ``tile.load_block``."""

    name: str  # the tile
    array: str
    row0: ir.Expr
    col0: ir.Expr
    rows: int
    cols: int
    stmt: ir.Assign


@dataclass
class RowLoop:
    loop: ir.For
    bm: int
    dtype: D.DType  # of every block (f16 or bf16)
    threads: int
    stages: int
    kinds: dict[str, str] = field(default_factory=dict)  # tile -> kind
    widths: dict[str, int] = field(default_factory=dict)  # acc tile -> its columns
    staged: list[Block] = field(default_factory=list)  # blocks loaded in the loop
    operands: dict[str, Block] = field(default_factory=dict)  # blocks loaded before it
    packed: dict[str, str] = field(default_factory=dict)  # packed A tile -> its acc tile
    sources: dict[str, str] = field(default_factory=dict)  # staged_t tile -> staged tile
    carried: dict[str, ir.Assign] = field(default_factory=dict)  # tile -> its fill before
    index: dict[str, ir.Expr] = field(default_factory=dict)  # index tile -> its value
    epilogue: object = None  # mainloop.Epilogue: what after the loop runs on registers

    @property
    def warps(self) -> int:
        return self.threads // WARP

    @property
    def warp_m(self) -> int:
        return self.bm // self.warps

    @property
    def stage_bytes(self) -> int:
        return sum(b.rows * b.cols * 2 for b in self.staged)

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.stage_bytes + 128

    @property
    def operand_bytes(self) -> int:
        return sum(b.rows * b.cols * 2 for b in self.operands.values())


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _block(s: ir.Stmt, kir: ir.KernelIR, dtype: D.DType | None) -> Block | None:
    """``x = tile.load_block(A, (i, j), (R, C))`` of a 2-d global f16/bf16 array, zero fill."""
    call = ir.prim_call(s)
    if not (isinstance(s, ir.Assign) and call is not None and call.prim is B.load_block):
        return None
    array, offsets, _shape, fill = (call.args + [None] * 4)[:4]
    t = kir.var_types.get(array.name) if isinstance(array, ir.Name) else None
    if not (isinstance(t, ArrayType) and t.space == "global" and t.ndim == 2):
        return None
    if t.dtype.name not in ("f16", "bf16") or (dtype is not None and t.dtype.name != dtype.name):
        return None
    if not (isinstance(offsets, ir.Tuple) and len(offsets.items) == 2):
        return None
    if fill is not None and not (isinstance(fill, ir.Const) and fill.value == 0):
        return None
    rows, cols = call.type.shape
    if not (_pow2(rows) and _pow2(cols) and rows % 16 == 0 and cols % 16 == 0):
        return None
    return Block(s.target, array.name, offsets.items[0], offsets.items[1], rows, cols, s)


def _index_only(value: ir.Expr, kinds: dict[str, str]) -> bool:
    """Whether ``value`` reads no tile but index tiles (and scalars, constants): its value
    at an element is arithmetic on the element's coordinates."""
    for x in ir.walk_expr(value):
        if isinstance(x, ir.PrimCall) and x.prim.collective:
            return False
        if isinstance(x, ir.Name) and isinstance(x.type, TileType):
            if kinds.get(x.name) != INDEX:
                return False
    return True


def _elementwise(value: ir.Expr, kinds: dict[str, str], widths, width, moved=False) -> bool:
    """Whether ``value`` reads only what a register element loop can: acc tiles of
    ``width`` columns at its element, row tiles at its row (through ``[:, None]`` where
    the result is an acc tile), index tiles anyhow, scalars."""
    if _index_only(value, kinds):
        return True
    if isinstance(value, ir.Name):
        kind = kinds.get(value.name)
        if isinstance(value.type, TileType) and kind is None:
            return False
        if kind == ACC:
            return not moved and widths[value.name] == width
        if kind == ROW:
            return moved == (width is not None)
        return kind is None  # a scalar
    if isinstance(value, ir.PrimCall):
        if value.prim.collective or value.prim is B.transpose:
            return False
        if value.prim is B.expand_dims:
            axis = value.args[1]
            if moved or width is None or not (isinstance(axis, ir.Const) and axis.value == 1):
                return False
            return _elementwise(value.args[0], kinds, widths, width, True)
        return all(_elementwise(c, kinds, widths, width, moved) for c in value.children())
    return all(_elementwise(c, kinds, widths, width, moved) for c in value.children())


def _classify(loop: ir.For, kir: ir.KernelIR, plan: RowLoop) -> bool:
    """Give every tile the loop assigns its kind, statement by statement."""
    kinds, widths = plan.kinds, plan.widths
    var = loop.var
    for s in loop.body:
        if not isinstance(s, ir.Assign):
            return False
        t = kir.var_types.get(s.target)
        call = ir.prim_call(s)
        if call is not None and call.prim is B.load_block:
            blk = _block(s, kir, plan.dtype)
            if blk is None or not (isinstance(blk.row0, ir.Name) and blk.row0.name == var):
                return False
            if var in gemm_loops.names(blk.col0):
                return False
            plan.staged.append(blk)
            kinds[s.target] = STAGED
        elif call is not None and call.prim is B.transpose:
            src = call.args[0]
            if not (isinstance(src, ir.Name) and kinds.get(src.name) == STAGED):
                return False
            kinds[s.target], plan.sources[s.target] = STAGED_T, src.name
        elif call is not None and call.prim is B.dot:
            if not _dot(call, s, kir, plan):
                return False
        elif call is not None and call.prim in REDUCTIONS:
            src, axis = call.args
            ok = isinstance(src, ir.Name) and kinds.get(src.name) == ACC
            if not (ok and isinstance(axis, ir.Const) and axis.value == 1):
                return False
            if not (isinstance(t, TileType) and t.dtype.name == "f32" and t.shape == (plan.bm,)):
                return False
            kinds[s.target] = ROW
        elif call is not None and call.prim is B.arange:
            kinds[s.target] = INDEX
            plan.index[s.target] = call
        elif (
            isinstance(t, TileType)
            and not _reads_registers(s.value, kinds)
            and _index_only(s.value, kinds)
        ):
            if s.target in kinds and kinds[s.target] != INDEX:
                return False
            kinds[s.target] = INDEX
            plan.index[s.target] = s.value
        elif call is not None and call.prim is B.astype:
            src = call.args[0]
            if not (isinstance(src, ir.Name) and kinds.get(src.name) == ACC):
                return False
            if t.dtype.name != plan.dtype.name:
                return False
            kinds[s.target], plan.packed[s.target] = PACKED, src.name
            widths[s.target] = widths[src.name]
        elif isinstance(t, TileType) and t.dtype.name == "f32" and t.shape[0] == plan.bm:
            if call is not None and call.prim.collective:
                return False
            width = t.shape[1] if len(t.shape) == 2 else None
            if len(t.shape) > 2 or not _elementwise(s.value, kinds, widths, width):
                return False
            if s.target in kinds and kinds[s.target] != (ACC if width else ROW):
                return False
            kinds[s.target] = ACC if width else ROW
            if width:
                widths[s.target] = width
        else:
            return False
    return True


def _reads_registers(value: ir.Expr, kinds: dict[str, str]) -> bool:
    return any(
        isinstance(x, ir.Name) and kinds.get(x.name) in (ACC, ROW, PACKED, OPERAND)
        for x in ir.walk_expr(value)
    )


def _dot(call: ir.PrimCall, s: ir.Assign, kir: ir.KernelIR, plan: RowLoop) -> bool:
    """A product of an operand block or packed acc tile by a staged block (or its ``.T``),
    into an f32 acc tile."""
    a, b, init = (call.args + [None] * 3)[:3]
    kinds = plan.kinds
    if not (isinstance(a, ir.Name) and isinstance(b, ir.Name)):
        return False
    if kinds.get(a.name) not in (OPERAND, PACKED) and a.name not in plan.operands:
        return False
    if kinds.get(b.name) not in (STAGED, STAGED_T):
        return False
    t = kir.var_types.get(s.target)
    if not (isinstance(t, TileType) and t.dtype.name == "f32" and t.shape[0] == plan.bm):
        return False
    if init is not None and not (isinstance(init, ir.Name) and kinds.get(init.name) == ACC):
        return False
    if init is not None and plan.widths[init.name] != t.shape[1]:
        return False
    if s.target in kinds and kinds[s.target] != ACC:
        return False
    kinds[s.target], plan.widths[s.target] = ACC, t.shape[1]
    return t.shape[1] % 16 == 0


def _reads_before_writes(loop: ir.For) -> list[str]:
    """The names the loop body reads before it assigns them (carried into it)."""
    written: set[str] = set()
    carried: list[str] = []
    for s in loop.body:
        for e in s.exprs():
            for n in gemm_loops.names(e):
                if n not in written and n not in carried:
                    carried.append(n)
        if isinstance(s, ir.Assign):
            written.add(s.target)
    return [n for n in carried if n in written]


def plan_row_loop(kir: ir.KernelIR, loop: ir.For, threads: int, stages: int = DEFAULT_STAGES):
    """The plan for a top-level ``loop`` of ``kir`` run on ``threads`` threads, or None."""
    if not (kir.grouped and loop.tile_range and threads % WARP == 0):
        return None
    top = kir.body
    if not any(s is loop for s in top):
        return None
    at = next(i for i, s in enumerate(top) if s is loop)
    # operands: blocks loaded before the loop that the loop's products take as A
    dtype, bm, operands = None, None, {}
    for s in top[:at]:
        blk = _block(s, kir, dtype)
        if blk is not None:
            dtype = kir.var_types[blk.array].dtype
            bm = blk.rows if bm is None else bm
            if blk.rows == bm:
                operands[blk.name] = blk
    if dtype is None or bm is None or bm % (16 * (threads // WARP)):
        return None
    prefetch = loop.prefetch if isinstance(loop.prefetch, int) else None
    plan = RowLoop(loop, bm, dtype, threads, max(2, prefetch + 1) if prefetch else stages)
    plan.operands = operands
    for name in operands:
        plan.kinds[name] = OPERAND
    # carried tiles: their constant fill before the loop, nothing else before it
    carried = [n for n in _reads_before_writes(loop) if isinstance(kir.var_types.get(n), TileType)]
    for name in carried:
        init = _fill(kir, top[:at], name)
        t = kir.var_types[name]
        if init is None or t.dtype.name != "f32" or t.shape[0] != bm or len(t.shape) > 2:
            return None
        plan.carried[name] = init
        plan.kinds[name] = ACC if len(t.shape) == 2 else ROW
        if len(t.shape) == 2:
            plan.widths[name] = t.shape[1]
    if not _classify(loop, kir, plan) or not plan.staged:
        return None
    # every thread copies whole 16-byte chunks (8 elements) of every block it stages
    blocks = plan.staged + [operands[n] for n in operands]
    if any((b.rows * b.cols // 8) % threads for b in blocks):
        return None
    if any(plan.kinds.get(n) not in (ACC, ROW) for n in carried):
        return None
    used = [b for b in operands if b in _loop_reads(loop)]
    if not used or not _used_only_as_a(plan, loop, kir):
        return None
    plan.operands = {n: operands[n] for n in used}
    return plan


def _loop_reads(loop: ir.For) -> set[str]:
    out: set[str] = set()
    for s in loop.body:
        for e in s.exprs():
            out |= gemm_loops.names(e)
    return out


def _used_only_as_a(plan: RowLoop, loop: ir.For, kir: ir.KernelIR) -> bool:
    """Operand blocks, staged blocks and packed tiles are read by nothing but the loop's
    products (and ``.T``); the loop's other tiles are not read before it."""
    inside = {id(s) for s in loop.body}
    special = {n for n, k in plan.kinds.items() if k in (OPERAND, STAGED, STAGED_T, PACKED)}
    for s in ir.walk_stmts(kir.body):
        if id(s) in inside:
            call = ir.prim_call(s)
            if call is not None and call.prim in (B.dot, B.transpose):
                continue
            if any(gemm_loops.names(e) & special for e in s.exprs()):
                return False
            continue
        if s is loop or (isinstance(s, ir.Assign) and s.target in plan.operands):
            continue
        names = set()
        for e in s.exprs():
            names |= gemm_loops.names(e)
        if names & special:
            return False
    return True


def _fill(kir: ir.KernelIR, before: list[ir.Stmt], name: str) -> ir.Assign | None:
    """``name``'s one definition before the loop, ``tile.zeros`` or ``tile.full`` of a
    constant or of a scalar assigned once, if nothing else there touches ``name``."""
    found = None
    for s in before:
        if isinstance(s, ir.Assign) and s.target == name:
            call = ir.prim_call(s)
            if found is not None or call is None or call.prim not in (B.zeros, B.full):
                return None
            if call.prim is B.full and not _constant_scalar(call.args[1], before):
                return None
            found = s
        elif any(name in gemm_loops.names(e) for e in s.exprs()):
            return None
    return found


def _constant_scalar(e: ir.Expr, before: list[ir.Stmt]) -> bool:
    """A constant, or a scalar assigned once (before the loop) from constants."""
    if isinstance(e, ir.Const):
        return True
    if isinstance(e, ir.Name):
        defs = [s for s in before if isinstance(s, ir.Assign) and s.target == e.name]
        return len(defs) == 1 and not gemm_loops.names(defs[0].value)
    return False


def plan_epilogue(kir: ir.KernelIR, plan: RowLoop) -> Epilogue:
    """What after the loop runs on its registers: element-wise statements of acc and row
    tiles (as in the loop) and ``tile.store_block`` of an acc tile; the first other
    statement that reads a register tile gets them all in shared memory first."""
    top = kir.body
    at = next(i for i, s in enumerate(top) if s is plan.loop)
    kinds = {n: plan.kinds[n] for n in plan.carried}
    widths = {n: plan.widths[n] for n in plan.carried if n in plan.widths}
    live, ever = set(kinds), set(kinds)
    shared: set[str] = set()
    handled: set[int] = set()
    materialise = None
    for s in top[at + 1 :]:
        reads = gemm_loops.names_read(s) & live
        call = ir.prim_call(s)
        t = kir.var_types.get(getattr(s, "target", None))
        if not reads and not any(True for _ in s.bodies()):
            if getattr(s, "target", None) in live:
                live.discard(s.target)
                shared.add(s.target)
            continue
        stored = (
            call is not None
            and call.prim is B.store_block
            and isinstance(call.args[2], ir.Name)
            and kinds.get(call.args[2].name) == ACC
            and call.args[2].name in live
            and call.args[3] is None
        )
        view = {n: k for n, k in kinds.items() if n in live}
        elementwise = (
            isinstance(s, ir.Assign)
            and isinstance(t, TileType)
            and t.dtype.is_float
            and t.shape[0] == plan.bm
            and len(t.shape) <= 2
            and not (call is not None and call.prim.collective)
            and _elementwise(s.value, view, widths, t.shape[1] if len(t.shape) == 2 else None)
        )
        if elementwise:
            handled.add(id(s))
            kinds[s.target] = ACC if len(t.shape) == 2 else ROW
            if len(t.shape) == 2:
                widths[s.target] = t.shape[1]
            live.add(s.target)
            ever.add(s.target)
        elif stored:
            handled.add(id(s))
        else:
            materialise = id(s)
            shared |= live
            break
    inside = {id(x) for x in plan.loop.body} | handled | {id(plan.loop)}
    inside |= {id(x) for x in plan.carried.values()}
    shared |= gemm_loops.used_elsewhere(kir, inside, ever)
    plan.kinds.update(kinds)
    plan.widths.update(widths)
    return Epilogue(None, frozenset(handled), materialise, frozenset(ever), frozenset(shared))


def staged_blocks(plan: RowLoop) -> list:
    """The loop's staged blocks as stage copies see them (``stage_copy.Block``, named by
    their arrays' IR names)."""
    element = plan.dtype.itemsize
    return [
        stage_copy.Block(f"s{k}", b.array, b.rows, b.cols, element)
        for k, b in enumerate(plan.staged)
    ]


def launch_chunks(plan: RowLoop, kir: ir.KernelIR, threads: int) -> bool:
    """Whether the launch can choose the row loop's steady loop by the arrays, as it does a
    GEMM main loop's (docs/targets.md): every staged block is of an array parameter, starts
    at a column that is a multiple of a 16-byte chunk for every launch, and keeps its
    threads' chunk columns from pass to pass (``stage_copy.chunks_fixed``)."""
    params = {p.name for p in kir.params if p.kind == "array"}
    definitions = single_definitions(kir)
    for blk, staged in zip(plan.staged, staged_blocks(plan)):
        if blk.array not in params or not stage_copy.chunks_fixed(staged, threads):
            return False
        if not multiple_of(blk.col0, staged.chunk_elements, definitions):
            return False
    return bool(plan.staged)


def tiles_end(plan: RowLoop, kir: ir.KernelIR) -> int | None:
    """A constant that every tile of the loop ends at or before, whatever the launch, or
    None: the loop steps by the staged blocks' rows from a non-negative multiple of them
    to a stop that is a multiple of them and a constant, or the ``min`` of one and other
    multiples (a group's share of the keys: ``min(keys, k0 + share)``). The launch then
    needs only that constant against the arrays' rows (``WholeRows``)."""
    loop = plan.loop
    rows = {blk.rows for blk in plan.staged}
    step = loop.step
    if len(rows) != 1 or not (isinstance(step, ir.Const) and step.value == min(rows)):
        return None
    definitions = single_definitions(kir)
    n = step.value
    if not (multiple_of(loop.start, n, definitions) and nonnegative(loop.start, definitions)):
        return None
    stop = loop.stop
    if not multiple_of(stop, n, definitions):
        return None
    if isinstance(stop, ir.Const) and type(stop.value) is int:
        return stop.value
    if isinstance(stop, ir.MathCall) and stop.func == "min":
        limits = [a.value for a in stop.args if isinstance(a, ir.Const) and type(a.value) is int]
        return min(limits) if limits else None
    return None


def plan_row_loops(kir: ir.KernelIR, threads: int, stages: int, mainloops: dict) -> dict:
    """The kernel's row loop (at most one, at its top level, where no GEMM main loop is),
    by ``id`` of its ``For`` statement, with its epilogue."""
    if mainloops or not kir.grouped:
        return {}
    plans = {}
    for s in kir.body:
        if isinstance(s, ir.For):
            plan = plan_row_loop(kir, s, threads, stages)
            if plan is not None:
                plan.epilogue = plan_epilogue(kir, plan)
                plans[id(s)] = plan
    return plans if len(plans) == 1 else {}
