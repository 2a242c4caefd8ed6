"""The register GEMM main loop: generated source for one loop passes/mainloop.py planned.

Per thread: the accumulator (the ``mma.sync`` C fragments of its warp's tile) in a local
array indexed only by constants once NVVM unrolls the loops (registers, no local memory);
per iteration of the k loop, one ring stage of A (``BM x BK``) and B (``BK x BN``) in the
arrays' bits (f16, bf16, f64, i8 or f8), rows XOR-swizzled in 16-byte chunks
(kernel/layout.py ``swizzle_for``: no bank conflicts for the copies nor for ``ldmatrix``),
filled ``S - 1`` iterations ahead (8-bit B fragments come from words of its rows
transposed by byte permutes instead of ``ldmatrix.trans``: :func:`_byte_fragments`):

    for i in range(1 - S, tiles):
        if i >= 0: wait until tile i has landed (cp.async.wait_group S-2), barrier
        if i >= 0: the first k16 step of tile i: ldmatrix.x4 A fragments,
                   ldmatrix.x4.trans B fragments, one mma.sync per m16n8 tile
        if i + S - 1 < tiles: copy tile i + S - 1 into its stage; commit a group
        if i >= 0: the other k16 steps of tile i

The copies come after the first step's products so that the tensor cores start right
after the barrier and the copies' index arithmetic overlaps those products (the stage
they fill was last read in iteration i - 1, before the barrier). of the warp

Copies are 16-byte ``cp.async`` with zero fill (``src-size`` 0 outside the array: the
language's masked block load) where the array allows it (16-byte aligned rows of
contiguous elements, chunks that are wholly inside or outside); otherwise the same stage
is filled element by element with predicated loads. Every branch here is uniform over
the block and every per-thread value is index arithmetic, so emulator.py runs this very
source with NumPy vectors for the threads.

:func:`emit` takes the generated code's names (``Operands``) and an emitter with
``emit(line)`` and ``indent``; it knows nothing of the rest of the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import pysource
from . import mma, stage_copy
from .acc_layout import UNROLLED_PIECES, AccLayout, register_loops
from .passes.launch_shape import TWO_BLOCKS_ACCUMULATORS
from .passes.mainloop import WARP, Mainloop


@dataclass(frozen=True)
class Operands:
    """The generated code's names and code of what the loop reads and writes."""

    A: str  # the global arrays
    B: str
    acc: str  # the accumulator's shared tile (read before, written after the loop)
    ring: str  # the shared uint8 array of the stages
    row0: str  # i64 code: A's block row, B's block column
    col0: str
    start: str  # i64 code of the tile.range bounds
    stop: str
    step: str
    tag: str = "0"  # tells the accumulators of a kernel's several main loops apart
    init: str | None = None  # code the registers start from (None: acc's shared tile)
    keep: bool = False  # leave the result in the registers (None: into acc's shared tile)
    # which steady loop: True the chunked one, False the general one (the launch chose by
    # the arrays: launch_chunks), None both, chosen by the kernel
    chunks: bool | None = None
    # the chunked loop's tiles all lie inside A's columns and B's rows (the launch checked
    # the loop's bounds against the arrays: whole_tiles): its copies check no k bound
    whole: bool = False


def accumulator(ops: Operands) -> str:
    """The name of the loop's accumulator registers (a local array)."""
    return f"_macc{ops.tag}"


def layout(plan: Mainloop) -> AccLayout:
    """Where the loop's accumulator registers sit in the block."""
    interleave = BYTE_GROUP if plan.shape.element == 1 and not plan.b_nk else 1
    return AccLayout(instruction(plan), plan.warp_m, plan.warp_n, interleave)


_INSTRUCTIONS = {
    "f16": mma.M16N8K16_F16,
    "bf16": mma.M16N8K16_BF16,
    "f64": mma.M8N8K4_F64,
    "f32": mma.FFMA_M16N8K4,
    "i8": mma.M16N8K32_S8,
    "u8": mma.M16N8K32_U8,
    "f8e4m3": mma.M16N8K32_E4M3,
    "f8e5m2": mma.M16N8K32_E5M2,
}


def instruction(plan: Mainloop) -> mma.Instruction:
    if plan.b_dtype is not None:  # 8-bit operands of two dtypes
        return mma.BY_DTYPES[plan.dtype.name, plan.b_dtype.name]
    return _INSTRUCTIONS[plan.dtype.name]


def fragments(plan: Mainloop) -> dict:
    """What the loop multiplies on, as ``k.metadata()``'s ``fragments`` reports it
    (``dtype_in``: the operands' dtype, or A's and B's as ``"u8 x i8"``)."""
    inst = instruction(plan)
    dtype_in = plan.dtype.name
    if plan.b_dtype is not None:
        dtype_in = f"{dtype_in} x {plan.b_dtype.name}"
    # (f32: no tensor cores, fma.rn.f32 in m16n8k4 steps laid as mma's: "fma")
    unit = "fma" if inst is mma.FFMA_M16N8K4 else "mma"
    return {
        unit: f"m{inst.m}n{inst.n}k{inst.k}",
        "dtype_in": dtype_in,
        "dtype_acc": plan.acc_dtype_name,
    }


def blocks(plan: Mainloop, A: str, B: str) -> tuple[stage_copy.Block, stage_copy.Block]:
    """The staged blocks of the loop's arrays (``A``, ``B``: their names in the code)."""
    elem = plan.shape.element
    if plan.a_km:  # A stored K x M: staged as it is, rows of BM (as a K x N B's)
        block_a = stage_copy.Block("a", A, plan.k, plan.m, elem)
    else:
        block_a = stage_copy.Block("a", A, plan.m, plan.k, elem)
    if plan.b_nk:  # B stored N x K: staged as it is, rows of BK (as an M x K A's)
        return block_a, stage_copy.Block("b", B, plan.n, plan.k, elem)
    # f32 B stored K x N: a warp reads 32 bytes of one row a load (no bank conflicts, and a
    # warp's copies write whole rows), so its rows stay as they are and a k step's B
    # offsets are a running base plus constants (an XOR an access cost the loop ~40 %
    # more integer instructions than FMAs)
    return block_a, stage_copy.Block(
        "b", B, plan.k, plan.n, elem, down_columns=elem == 1, swizzled=elem != 4
    )


def launch_chunks(plan: Mainloop, offsets_in_chunks: bool) -> bool:
    """Whether the launch can choose the steady loop (``Operands.chunks``): the chunked
    loop exists for the plan's blocks and, where the arrays allow chunks, every copy
    starts on one (``offsets_in_chunks``: passes/mainloop.py)."""
    threads = plan.threads
    a, b = blocks(plan, "A", "B")
    return (
        offsets_in_chunks
        and stage_copy.chunks_fixed(a, threads)
        and stage_copy.chunks_fixed(b, threads)
    )


def whole_tiles(plan: Mainloop, start: int, stop: int, step: int, a_cols: int, b_rows: int):
    """Whether every tile of a k loop ``range(start, stop, step)`` lies inside A's
    ``a_cols`` columns and B's ``b_rows`` rows (columns where B is N x K): the launch's test
    for ``Operands.whole``
    (steps of the block's k from a start at or past 0 to a stop at or before both ends)."""
    return (
        step == plan.k and 0 <= start <= stop and (stop - start) % step == 0
        and stop <= a_cols and stop <= b_rows
    )  # fmt: skip


@dataclass(frozen=True)
class WholeTiles:
    """The launch's test for a main loop's ``Operands.whole``: its bounds as the launch
    knows them (passes/mainloop.py ``launch_bounds``) and A's and B's positions."""

    plan: Mainloop
    bounds: tuple
    a: int
    b: int

    def holds(self, args: tuple, views: dict) -> bool:
        """For a launch's call ``args`` and its arrays' ``views`` (pointer, shape, byte
        strides) by position."""
        start, stop, step = (v if type(v) is int else int(args[v[1]]) for v in self.bounds)
        plan = self.plan
        a_cols = views[self.a][1][0 if plan.a_km else 1]
        b_rows = views[self.b][1][1 if plan.b_nk else 0]
        return whole_tiles(self.plan, start, stop, step, a_cols, b_rows)


def emit(out, plan: Mainloop, ops: Operands) -> None:
    """Append the loop's source to ``out`` (an emitter: ``emit(line)``, ``indent``)."""
    inst = instruction(plan)
    S, elem = plan.stages, plan.shape.element
    bm, bn, bk, wm, wn = plan.m, plan.n, plan.k, plan.warp_m, plan.warp_n
    row_a, row_b = plan.a_row_bytes, plan.b_row_bytes
    stage = plan.stage_bytes
    ce = plan.chunk_elements
    acc_t = pysource.ctor(plan.acc_dtype)
    e = out.emit
    e(
        f"# register GEMM main loop: {bm}x{bn} {plan.acc_dtype_name} accumulator in registers "
        f"({plan.warps_m}x{plan.warps_n} warps of {wm}x{wn}), {inst.ptx}, A and B "
        f"through {S} swizzled shared stages of {stage} bytes"
        + ("" if blocks(plan, ops.A, ops.B)[1].swizzled else " (B's rows unswizzled)")
    )
    e(f"_mw = _lane // {WARP}")
    e(f"_mg = (_lane % {WARP}) // 4  # groupID")
    e("_mq = _lane % 4  # threadID_in_group")
    e(f"_mwm = _mw // {plan.warps_n}")
    e(f"_mwn = _mw % {plan.warps_n}")
    nk, km = plan.b_nk, plan.a_km
    if elem <= 2:
        e("_mlr = _lane % 16  # ldmatrix: the row (A) or k-row (B) this lane addresses")
        e(f"_mlh = (_lane % {WARP}) // 16  # ... and which 16-byte chunk of the pair")
    if elem <= 2 and (nk or km):  # matrices 0-3 in rows 0-7 | chunk 0, 1, rows 8-15 | 0, 1
        e("_mlbr = ((_lane % 32) // 16) * 8 + _lane % 8  # the row this lane addresses")
        e("_mlbh = (_lane // 8) % 2  # ... and which 16-byte chunk of the pair")
    if elem <= 2:
        e(f"_mswa = {stage_copy.swizzle(elem, row_a, '_mlbr' if km else '_mlr', '0')}")
    if elem <= 2 and nk:  # N x K B: ldmatrix.x4 (no .trans)
        e(f"_mswb = {stage_copy.swizzle(elem, row_b, '_mlbr', '0')}")
    elif elem == 2:
        e(f"_mswb = {stage_copy.swizzle(elem, row_b, '_mlr', '0')}")
    if elem == 1 and not nk:
        _byte_offsets(out, plan)
    if elem == 8:  # the swizzle of the rows a lane's fragments come from (row % 4 is the lane's)
        e(f"_mswa = {'_mq * 2' if km else '(_mg % 4) * 2'}")
        e(f"_mswb = {'(_mg % 4) * 2' if nk else '_mq * 2'}")
    if elem == 4:  # f32: a lane's A rows are groupID + 8j, whose swizzle (period 8) is one
        e(f"_mswa = {stage_copy.swizzle(4, row_a, '_mg', '0')}")
    a, b = ops.A, ops.B
    e(f"_mra = {ops.row0}")
    e(f"_mra = _mra if -{bm} < _mra < {a}.shape[{1 if km else 0}] else np.int64(-{bm})")
    e(f"_mcb = {ops.col0}")
    e(f"_mcb = _mcb if -{bn} < _mcb < {b}.shape[{0 if nk else 1}] else np.int64(-{bn})")
    block_a, block_b = blocks(plan, ops.A, ops.B)
    stage_copy.array_info(out, block_a)
    stage_copy.array_info(out, block_b)
    if km:
        e(f"_mfa = {stage_copy.chunks_possible(block_a)} and _mra % {ce} == 0")
    else:
        e(f"_mfa = {stage_copy.chunks_possible(block_a)}  # 16-byte chunks of A possible")
    if nk:
        e(f"_mfb = {stage_copy.chunks_possible(block_b)}")
    else:
        e(f"_mfb = {stage_copy.chunks_possible(block_b)} and _mcb % {ce} == 0")
    walk_a = "rows" if km else "cols"
    moving_a = (
        walk_a if stage_copy.chunk_setup(out, block_a, plan.threads, "_mra", walk_a) else None
    )
    walk_b = "cols" if nk else "rows"
    moving_b = (
        walk_b if stage_copy.chunk_setup(out, block_b, plan.threads, "_mcb", walk_b) else None
    )
    e(f"_ms0 = (np.int64(_saddr({ops.ring})) + 127) // 128 * 128  # the ring, 128-byte aligned")
    per = inst.c.elements
    jobs = (wm // inst.m) * (wn // inst.n)
    acc = accumulator(ops)
    e(f"{acc} = cuda.local.array({per * jobs}, {acc_t})")
    if ops.init is not None:
        e(f"for _mj in range({per * jobs}):")
        e(f"    {acc}[_mj] = {ops.init}")
    else:
        _accumulator(out, plan, acc, ops.acc, load=True)
    # (with k bounds to check as well, the second buffer makes ptxas spill a 128 x 256 block)
    rotated = bool(ops.chunks) and ops.whole and rotates(plan)
    if elem <= 2:  # this thread's fragments of one k step (two steps' where rotated)
        copies_of = 2 if rotated else 1
        e(f"_mga = cuda.local.array({copies_of * 4 * (wm // inst.m)}, np.uint32)")
        e(f"_mgb = cuda.local.array({copies_of * 4 * (wn // 16)}, np.uint32)")
    if elem == 4:  # a lane's A values of a k4 step (4 of each of its rows), B's of a k
        e(f"_mav = cuda.local.array({8 * (wm // inst.m)}, np.float32)")
        e(f"_mbv = cuda.local.array({(8 if nk else 2) * (wn // inst.n)}, np.float32)")
    e(f"_mk0, _mk1, _mk2 = {ops.start}, {ops.stop}, {ops.step}")
    e(f"_mkt = np.int64({pysource.trip_count('_mk0', '_mk1', '_mk2')})")
    steps = bk // inst.k
    wait = "_cp_wait_all" if S == 2 else f"_cp_wait{S - 2}"
    staged = (block_a, block_b, moving_a, moving_b)

    def clamped_k() -> None:  # the tile's k, clamped to just outside A and B
        e(f"_mka = _mk if -{bk} < _mk < {a}.shape[{0 if km else 1}] else np.int64(-{bk})")
        e(f"_mkb = _mk if -{bk} < _mk < {b}.shape[{1 if nk else 0}] else np.int64(-{bk})")

    def prologue() -> None:  # tile _mt = 0 .. S - 2 into stage _mt
        e(f"_mt = _mi + {S - 1}")
        e("if _mt < _mkt:")
        out.indent += 1
        e("_mk = np.int64(np.uint64(_mk0) + np.uint64(_mt) * np.uint64(_mk2))")
        clamped_k()
        e(f"_mst = _ms0 + _mt * {stage}")
        _copy_blocks(out, plan, staged, True)
        out.indent -= 1
        e("_cp_commit()")

    def copies(general: bool) -> None:  # tile _mi + S - 1 into stage _mst
        if general:
            e("if _mi < _mkl:")
            out.indent += 1
        e(f"_mk = np.int64(np.uint64(_mk0) + np.uint64(_mi + {S - 1}) * np.uint64(_mk2))")
        if general or not ops.whole:
            clamped_k()
        else:  # a live tile's k is inside both arrays; a dead one's copies read nothing
            e("_mka = _mkb = _mk")
        _copy_blocks(out, plan, staged, general, ops.whole)
        if general:
            out.indent -= 1
        e("_cp_commit()")
        e(f"_mwo = np.uint32(0 if _mwo == {(S - 1) * stage} else _mwo + {stage})  # round the ring")

    def iteration(general: bool) -> None:
        e(f"{wait}()  # tile _mi has landed (its group and every older one)")
        e("cuda.syncthreads()")
        # the first k step's products go first: the tensor cores start right after the
        # barrier, and the copies' index arithmetic runs while those products execute
        e("_mrs = _ms0 + _mro")
        e("_mst = _ms0 + _mwo")
        e("_mkk = 0")
        _fragments(out, plan, inst, acc)
        copies(general)
        if steps > 1:
            e(f"for _mkk in range(1, {steps}):")
            out.indent += 1
            _fragments(out, plan, inst, acc)
            out.indent -= 1
        e(f"_mro = np.uint32(0 if _mro == {(S - 1) * stage} else _mro + {stage})")

    def rotated_loop() -> None:
        # each k16 step's fragments are loaded a step ahead, into the other of two
        # buffers; the last step's products come after the barrier for the next tile and
        # its first fragments (so the tensor cores are busy across the barrier). A stage is
        # last read before the barrier of the iteration that precedes its copy.
        e(f"{wait}()  # tile 0 has landed")
        e("cuda.syncthreads()")
        _load_fragments(out, plan, inst, "_ms0", 0, 0)
        e("for _mi in range(_mkt):")
        out.indent += 1
        e("_mrs = _ms0 + _mro")
        e("_mst = _ms0 + _mwo")
        for kk in range(steps):
            if kk + 1 < steps:
                _load_fragments(out, plan, inst, "_mrs", kk + 1, (kk + 1) % 2)
            else:
                e(f"{wait}()  # tile _mi + 1 has landed")
                e("cuda.syncthreads()")
                e(f"_mro = np.uint32(0 if _mro == {(S - 1) * stage} else _mro + {stage})")
                _load_fragments(out, plan, inst, "(_ms0 + _mro)", 0, 0)
            if kk == 0:
                copies(False)
            _products(out, plan, inst, acc, kk % 2)
        out.indent -= 1

    # the prologue: tiles 0 .. S - 2 into their stages (general copies even where the
    # launch chose the chunked loop: the branch-free copies unrolled here as well cost a
    # 128 x 128 f16 block its second block an SM: ptxas spills under that register cap)
    # the steady loop keeps the stages it reads (_mro) and writes (_mwo) as running 32-bit
    # offsets into the ring (no modulo an iteration, one register each) and the last
    # iteration that copies (_mkl); the k of a copied tile is computed from _mi (a shift
    # where start and step are constants; a running k costs the two registers that made
    # ptxas spill a 128 x 128 f16 block under its two-blocks cap)
    if rotated:  # (one block an SM) the prologue's copies branch-free too: every stage
        # is written, zeros past the last tile, before a fragment load may read it
        e("_mro = np.uint32(0)")
        e("_mwo = np.uint32(0)")
        e(f"_mkl = _mkt - {S - 1}")
        e(f"for _mi in range({1 - S}, 0):")
        out.indent += 1
        e("_mst = _ms0 + _mwo")
        copies(False)
        out.indent -= 1
    else:
        e(f"for _mi in range({1 - S}, 0):")
        out.indent += 1
        prologue()
        out.indent -= 1
        e("_mro = np.uint32(0)")
        e(f"_mwo = np.uint32({(S - 1) * stage})")
        e(f"_mkl = _mkt - {S - 1}")
    both = moving_a and moving_b and ops.chunks is None
    if ops.chunks or both:
        # every tile copies by 16-byte chunks: an iteration is one branch-free block of
        # code (a copy past the last tile is a zero fill into a stage nobody reads)
        if both:
            fits = f"{stage_copy.narrow(block_a)} and {stage_copy.narrow(block_b)}"
            e(f"if _mfa and _mfb and _mk0 % {ce} == 0 and _mk2 % {ce} == 0 and {fits}:")
            out.indent += 1
        if rotated:
            rotated_loop()
            out.indent -= 1 if both else 0
        else:
            e("for _mi in range(_mkt):")
            out.indent += 1
            iteration(False)
            out.indent -= 2 if both else 1
        if both:
            e("else:")
            out.indent += 1
    if not ops.chunks:
        e("for _mi in range(_mkt):")
        out.indent += 1
        iteration(True)
        out.indent -= 1
    if both:
        out.indent -= 1
    e("_cp_wait_all()")
    if not ops.keep:
        _accumulator(out, plan, acc, ops.acc, load=False)
        e("cuda.syncthreads()")


def _copy_blocks(out, plan: Mainloop, staged, general: bool, whole: bool = False) -> None:
    """The copies of a tile (its k: ``_mk``) into stage ``_mst``: in the general loop, by chunks or
    element by element as each tile allows; in the fast loop, by chunks, branch-free,
    the tile's existence (``_mi < _mkl``) part of every chunk's mask."""
    block_a, block_b, moving_a, moving_b = staged
    ce, threads, a_bytes = plan.chunk_elements, plan.threads, plan.a_bytes
    if general:
        if plan.a_km:
            stage_copy.copy(out, block_a, threads, "_mst", "_mka", "_mra", "_mfa", moving_a)
        else:
            fast_a = f"_mfa and _mka % {ce} == 0"
            stage_copy.copy(out, block_a, threads, "_mst", "_mra", "_mka", fast_a, moving_a)
        if plan.b_nk:
            fast_b = f"_mfb and _mkb % {ce} == 0"
            stage_copy.copy(
                out, block_b, threads, f"_mst + {a_bytes}", "_mcb", "_mkb", fast_b, moving_b
            )
        else:
            stage_copy.copy(
                out, block_b, threads, f"_mst + {a_bytes}", "_mkb", "_mcb", "_mfb", moving_b
            )
        return
    live = "(_mi < _mkl)"
    stage_copy.chunk_copy(out, block_a, threads, "_mst", "_mka", moving_a, live, whole)
    b_base = f"_mst + {a_bytes}"
    stage_copy.chunk_copy(out, block_b, threads, b_base, "_mkb", moving_b, live, whole)


def _fragments(out, plan: Mainloop, inst, acc: str) -> None:
    """The products of k step ``_mkk`` of the stage at ``_mrs``."""
    if plan.shape.element <= 2:
        _fragments_16(out, plan, inst, acc)
    elif plan.shape.element == 4:
        _fragments_32(out, plan, inst, acc)
    else:
        _fragments_64(out, plan, inst, acc)


def _fragments_16(out, plan: Mainloop, inst, acc: str) -> None:
    """One k step of 32 bytes (k16 of 16-bit operands, k32 of 8-bit ones): ldmatrix.x4 A
    fragments per m16 tile, B fragments per pair of n8 tiles (ldmatrix.x4.trans, or byte
    loads for 8-bit operands), one mma.sync per m16n8 tile; loops of constant extent over
    local arrays (NVVM unrolls them: registers), so the source stays short."""
    _load_fragments(out, plan, inst, "_mrs", "_mkk", 0)
    _products(out, plan, inst, acc, 0)


ROTATE = True  # fragments a k16 step ahead where rotates() allows (off: to compare)


def rotates(plan: Mainloop) -> bool:
    """Whether the chunked steady loop without k bounds (``Operands.whole``) loads each
    k16 step's fragments a step ahead (two buffers of them): f16/bf16 blocks of an even
    number of k16 steps whose accumulators already take the block to one an SM (the 128 x
    256 block: a 128 x 128 one keeps its second block an SM, under whose register cap the
    second buffer would spill)."""
    steps = plan.k // instruction(plan).k
    return (
        ROTATE and plan.shape.element == 2 and steps % 2 == 0
        and plan.accumulators > TWO_BLOCKS_ACCUMULATORS
    )  # fmt: skip


def _load_fragments(out, plan: Mainloop, inst, stage: str, kk, buf: int) -> None:
    """k step ``kk``'s (an int, or the code of one) A and B fragments from the stage at
    ``stage`` into buffer ``buf`` (a constant: the registers stay registers). A step is 32
    bytes of a row of A (two 16-byte chunks: k16 of 16-bit elements, k32 of 8-bit ones,
    whose A fragment is the 16-bit one's in byte pairs, isa/mma_sync.py)."""
    wm, wn, row_a, row_b = plan.warp_m, plan.warp_n, plan.a_row_bytes, plan.b_row_bytes
    mt_count, pairs = wm // inst.m, wn // 16
    chunk_of_k, row_of_k = (
        (2 * kk, kk * inst.k) if isinstance(kk, int) else (f"2 * {kk}", f"{kk} * {inst.k}")
    )
    e = out.emit
    regs = ", ".join(f"_mga[{_at(4 * mt_count * buf)}4 * _mmt + {r}]" for r in range(4))
    if plan.a_km:  # A stored K x M: one ldmatrix.x4.trans per m16 tile
        e(f"for _mmt in range({mt_count}):  # A (K x M): one ldmatrix.x4.trans per m16 tile")
        chunk = f"_mwm * {wm // 8} + 2 * _mmt + _mlbh"
        row = f"({row_of_k} + _mlbr) * {row_a}"
        e(f"    {regs} = _ldsm4t({stage} + {row} + ((({chunk}) ^ _mswa) * 16))")
    else:
        e(f"for _mmt in range({mt_count}):  # A: one ldmatrix.x4 per m16 tile (step {kk})")
        row = f"(_mwm * {wm} + {inst.m} * _mmt + _mlr) * {row_a}"
        e(f"    {regs} = _ldsm4({stage} + {row} + ((({chunk_of_k} + _mlh) ^ _mswa) * 16))")
    if plan.b_nk:
        e(f"for _mnp in range({pairs}):  # B (N x K): one ldmatrix.x4 per pair of n8 tiles")
        regs = ", ".join(f"_mgb[{_at(4 * pairs * buf)}4 * _mnp + {r}]" for r in range(4))
        row = f"(_mwn * {wn} + 16 * _mnp + _mlbr) * {row_b}"
        chunk = f"(({chunk_of_k} + _mlbh) ^ _mswb) * 16"
        e(f"    {regs} = _ldsm4({stage} + {plan.a_bytes} + {row} + ({chunk}))")
        return
    if plan.shape.element == 1:
        _byte_fragments(out, plan, inst, stage, row_of_k, buf)
        return
    e(f"for _mnp in range({pairs}):  # B: one ldmatrix.x4.trans per pair of n8 tiles")
    regs = ", ".join(f"_mgb[{_at(4 * pairs * buf)}4 * _mnp + {r}]" for r in range(4))
    chunk = f"_mwn * {wn // 8} + 2 * _mnp + _mlh"
    e(
        f"    {regs} = _ldsm4t({stage} + {plan.a_bytes} + ({row_of_k} + _mlr) * {row_b} + "
        f"((({chunk}) ^ _mswb) * 16))"
    )


BYTE_GROUP = 4  # n8 tiles of 8-bit B whose columns interleave (AccLayout.interleave)
# prmt selectors of a 4 x 4 byte transpose: rows j, j + 1's bytes 0, 1 (and 2, 3), then
# the four rows' byte i (i = 0, 1 from the first pair, 2, 3 from the second)
_PAIR = (0x5140, 0x7362)
_QUAD = (0x5410, 0x7632)


def _byte_offsets(out, plan: Mainloop) -> None:
    """Before the loop, for 8-bit B fragments: the lane's 4-byte word in a stage (B's
    part) at k-row ``4 _mq + j`` of each 32 columns ``s`` of its warp tile (the word of
    columns ``4 _mg .. 4 _mg + 3`` of the span, swizzled: ``_mbo[4 s + j]``, registers:
    the loops that index it are unrolled). B's rows are swizzled for reads down its
    columns (``layout.swizzle_down_columns``), terms that repeat every 16 rows, so every
    word a k32 step loads is one of these plus a constant."""
    spans, row_b = plan.warp_n // (BYTE_GROUP * 8), plan.b_row_bytes
    e = out.emit
    e(f"_mbo = cuda.local.array({4 * spans}, np.uint32)")
    e(f"for _mc in range({spans}):")
    chunk = f"_mwn * {plan.warp_n // 16} + 2 * _mc + _mg // 4"
    for j in range(4):
        row = f"4 * _mq + {j}"
        at = f"({row}) * {row_b} + {stage_copy.swizzle(1, row_b, row, chunk, True)} * 16"
        e(f"    _mbo[4 * _mc + {j}] = {plan.a_bytes} + {at} + 4 * (_mg % 4)")


def _byte_fragments(out, plan: Mainloop, inst, stage: str, row_of_k: str, buf: int) -> None:
    """8-bit B fragments from the K x N stage (K not contiguous): a register holds four
    bytes down K at one column (k ``4 _mq + 16 r + j``, n ``_mg`` of its n8 tile), which no
    ``ldmatrix`` delivers (it moves 16-bit units of a row). Of each 32 columns the four n8
    tiles take every fourth column (tile ``p``'s column ``c`` is the span's ``4 c + p``:
    ``AccLayout.interleave``), so one 4-byte word of a row holds a lane's column of all
    four, and four words (rows ``j`` = 0..3) transposed by eight ``prmt`` are their four
    registers: 2 loads and 4 permutes a register pair of four tiles' (:func:`_byte_offsets`
    made the words' offsets)."""
    row_b = plan.b_row_bytes
    spans = plan.warp_n // (BYTE_GROUP * 8)
    b0 = _at(2 * (plan.warp_n // inst.n) * buf)
    e = out.emit
    e(f"for _mc in range({spans}):  # B: per 32 columns, 4 interleaved n8 tiles")
    for r in range(2):
        base = f"{stage} + ({row_of_k} + {16 * r}) * {row_b}"
        for j in range(4):
            e(f"    _mv{j} = _lds32({base} + _mbo[4 * _mc + {j}])")
        for j, (rows, sel) in enumerate(
            ((0, _PAIR[0]), (0, _PAIR[1]), (2, _PAIR[0]), (2, _PAIR[1]))
        ):
            e(f"    _mu{j} = _prmt(_mv{rows}, _mv{rows + 1}, {sel:#06x})")
        for p in range(BYTE_GROUP):
            lo, hi = ("_mu0", "_mu2") if p < 2 else ("_mu1", "_mu3")
            e(f"    _mgb[{b0}2 * (4 * _mc + {p}) + {r}] = _prmt({lo}, {hi}, {_QUAD[p % 2]:#06x})")


def _at(offset: int) -> str:
    """A buffer's first register as an index's leading term ("" for the first buffer)."""
    return f"{offset} + " if offset else ""


def _products(out, plan: Mainloop, inst, acc: str, buf: int) -> None:
    """One mma.sync per m16n8 tile of the fragments in buffer ``buf``."""
    mt_count, nt_count = plan.warp_m // inst.m, plan.warp_n // inst.n
    a0, b0 = _at(4 * mt_count * buf), _at(4 * (plan.warp_n // 16) * buf)
    e = out.emit
    e(f"for _mj in range({mt_count * nt_count}):  # one mma.sync per m16n8 tile")
    e(f"    _mmt = _mj // {nt_count}")
    e(f"    _mnt = _mj % {nt_count}")
    c = ", ".join(f"{acc}[4 * _mj + {r}]" for r in range(4))
    fa = ", ".join(f"_mga[{a0}4 * _mmt + {r}]" for r in range(4))
    fb = f"_mgb[{b0}2 * _mnt], _mgb[{b0}2 * _mnt + 1]"
    e(f"    {c} = {inst.name}({fa}, {fb}, {c})")


def _fragments_64(out, plan: Mainloop, inst, acc: str) -> None:
    """One k4 step of DMMA: each lane's A element (row groupID, column threadID) per m8
    tile and B element (row threadID, column groupID) per n8 tile by 8-byte shared loads,
    one mma.sync.m8n8k4 per m8n8 tile."""
    wm, wn, row_a, row_b = plan.warp_m, plan.warp_n, plan.a_row_bytes, plan.b_row_bytes
    mt_count, nt_count = wm // inst.m, wn // inst.n
    for mt in range(mt_count):
        if plan.a_km:  # A stored K x M: a lane's element is row threadID, column groupID
            chunk = f"_mwm * {wm // 2} + {mt * inst.m // 2} + _mg // 2"
            out.emit(
                f"_mfa{mt} = _lds64(_mrs + (_mkk * {inst.k} + _mq) * {row_a} + "
                f"((({chunk}) ^ _mswa) * 16) + (_mg % 2) * 8)"
            )
            continue
        row = f"(_mwm * {wm} + {mt * inst.m} + _mg) * {row_a}"
        out.emit(
            f"_mfa{mt} = _lds64(_mrs + {row} + (((_mkk * 2 + _mq // 2) ^ _mswa) * 16)"
            " + (_mq % 2) * 8)"
        )
    for nt in range(nt_count):
        if plan.b_nk:  # B stored N x K: a lane's element is row groupID, column threadID
            row = f"(_mwn * {wn} + {nt * inst.n} + _mg) * {row_b}"
            out.emit(
                f"_mfb{nt} = _lds64(_mrs + {plan.a_bytes} + {row} + "
                "(((_mkk * 2 + _mq // 2) ^ _mswb) * 16) + (_mq % 2) * 8)"
            )
            continue
        chunk = f"_mwn * {wn // 2} + {nt * inst.n // 2} + _mg // 2"
        out.emit(
            f"_mfb{nt} = _lds64(_mrs + {plan.a_bytes} + (_mkk * {inst.k} + _mq) * {row_b} + "
            f"((({chunk}) ^ _mswb) * 16) + (_mg % 2) * 8)"
        )
    for mt in range(mt_count):
        for nt in range(nt_count):
            c = ", ".join(f"{acc}[{2 * (mt * nt_count + nt) + r}]" for r in range(2))
            out.emit(f"{c} = {inst.name}(_mfa{mt}, _mfb{nt}, {c})")


def _fragments_32(out, plan: Mainloop, inst, acc: str) -> None:
    """One k4 step of the f32 loop (mma.FFMA_M16N8K4, no tensor cores): a lane's A values
    — rows groupID + 8 j of its warp tile, four k of one 16-byte chunk, one
    ``ld.shared.v4.f32`` a row; the rows' swizzle spreads a warp's 8 rows over 8 chunks:
    no bank conflicts — then for each k its B values (columns 2 threadID and + 1 of each
    n8 tile: one ``ld.shared.v2.f32``; B stored N x K: one 16-byte load of four k a
    column, before the k loop) and one ``fma.rn.f32`` for each accumulator element."""
    wm, wn, row_a, row_b = plan.warp_m, plan.warp_n, plan.a_row_bytes, plan.b_row_bytes
    mt_count, nt_count = wm // inst.m, wn // inst.n
    block_b = blocks(plan, "", "")[1]
    e = out.emit
    four = ", ".join(f"_mav[4 * _mmr + {r}]" for r in range(4))
    e(f"for _mmr in range({2 * mt_count}):  # A: the lane's row groupID + 8 _mmr, k4")
    row = f"(_mwm * {wm} + 8 * _mmr + _mg) * {row_a}"
    e(f"    {four} = _lds128f(_mrs + {row} + ((_mkk ^ _mswa) * 16))")
    b0 = f"_mrs + {plan.a_bytes}"
    if plan.b_nk:  # B stored N x K: the lane's columns are rows of the stage
        four = ", ".join(f"_mbv[4 * _mnc + {r}]" for r in range(4))
        e(f"for _mnc in range({2 * nt_count}):  # B (N x K): column 2 threadID + _mnc, k4")
        n = f"_mwn * {wn} + 8 * (_mnc // 2) + 2 * _mq + _mnc % 2"
        chunk = stage_copy.swizzle(4, row_b, "2 * _mq + _mnc % 2", "_mkk")
        e(f"    {four} = _lds128f({b0} + ({n}) * {row_b} + {chunk} * 16)")
    jobs = mt_count * nt_count
    kq = "_mkq"
    e(f"for _mkq in range({inst.k}):  # the step's k (NVVM unrolls it: registers)")
    out.indent += 1
    if not plan.b_nk:
        two = "_mbv[2 * _mnt], _mbv[2 * _mnt + 1]"
        e(f"for _mnt in range({nt_count}):  # B: columns 2 threadID, + 1 of n8 tile _mnt")
        chunk = block_b.chunk(f"4 * _mkk + {kq}", f"_mwn * {wn // 4} + 2 * _mnt + _mq // 2")
        at = f"{b0} + (4 * _mkk + {kq}) * {row_b} + {chunk} * 16 + (_mq % 2) * 8"
        e(f"    {two} = _lds64f({at})")
        b_value = "_mbv[2 * (_mj % {nt}) + {c}]"
    else:
        b_value = "_mbv[4 * (2 * (_mj % {nt}) + {c}) + {kq}]"
    # m16n8 tiles _mj, at most UNROLLED_PIECES a loop (NVVM unrolls those: registers),
    # the four elements of each written out
    for first in range(0, jobs, UNROLLED_PIECES):
        count = min(UNROLLED_PIECES, jobs - first)
        e(f"for _mjj in range({count}):  # k _mkq of m16n8 tiles {first}..")
        e(f"    _mj = _mjj + {first}" if first else "    _mj = _mjj")
        for i in range(4):
            a = f"_mav[4 * (2 * (_mj // {nt_count}) + {i // 2}) + {kq}]"
            b = b_value.format(nt=nt_count, c=i % 2, kq=kq)
            c = f"{acc}[4 * _mj + {i}]"
            e(f"    {c} = _ffma({a}, {b}, {c})")
    out.indent -= 1


def _accumulator(out, plan: Mainloop, acc: str, tile: str, load: bool) -> None:
    """Read (``load``) or write the accumulator registers at their C fragment positions
    of the shared tile: each thread touches only its own elements."""
    cast = pysource.ctor(plan.acc_dtype)

    def body(row: str, col: str, reg: str, row_reg: str) -> None:
        place, r = f"{tile}[{row}, {col}]", f"{acc}[{reg}]"
        out.emit(f"{r} = {cast}({place})" if load else f"{place} = {r}")

    register_loops(out, layout(plan), body)


def grouped_raster(out, rows: int) -> None:
    """Group ids of a 2-d grid from ``_g`` (the block index) in grouped raster order:
    bands of ``rows`` group rows, each band column by column, so the blocks running at
    once share rows of A and columns of B in L2 (groups are independent in the language,
    so any order is theirs). ``_g`` is then renumbered row-major from the ids, which is
    what ``group_linear_id()`` reads."""
    e = out.emit
    e(f"_gw = {rows} * _N1  # groups in a band of {rows} group rows")
    e(f"_gf = (_g // _gw) * {rows}  # the band's first group row")
    e(f"_gs = min(_N0 - _gf, {rows})  # its rows (the last band may have fewer)")
    e("_g0 = _gf + (_g % _gw) % _gs")
    e("_g1 = (_g % _gw) // _gs")
    e("_g = _g0 * _N1 + _g1")
