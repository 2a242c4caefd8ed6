"""The register row loop: generated source for a loop passes/row_loop.py planned.

Each warp owns ``warp_m`` whole rows of the block (``_mwm`` its slab, ``_mwn`` 0); every
tile of the loop is registers: acc tiles in the ``mma.sync`` C layout (acc_layout.py),
row tiles one value per row of a thread's elements. Before the loop the operand blocks
(``qb``) are copied to shared memory once and loaded into A fragments (``ldmatrix.x4``)
that stay in registers, and the carried tiles get their fill. The loop is the main loop's
pipeline (mainloop.py): the blocks it loads go through a ring of ``S`` swizzled stages
filled ``S - 1`` iterations ahead by 16-byte ``cp.async`` (stage_copy.py), issued after
the iteration's first product (so that the tensor cores start right after the barrier);
each statement in order:

* a product: per k16 step, the A fragments (the operand's registers, or packed from an
  acc tile's C registers: ``p.astype(f16)``), the B fragments from the stage
  (``ldmatrix.x4.trans`` of a block loaded row by row, ``ldmatrix.x4`` for its ``.T``),
  one ``mma.sync.m16n8k16`` per 16 x 8 piece of the warp's rows;
* an element-wise statement: each register, the ordinary expression code
  (register_tiles.py);
* a row reduction: the language's fixed tree over the row's columns: register steps for
  the column bits held in registers (the 8-column pieces, highest bit first), then
  ``shfl.sync.bfly`` across the group's four threads (column bits 2 and 1), then the last
  register step (bit 0), the lower index always the left operand;
* ``astype`` of an acc tile feeding a product: its C registers packed into A fragments.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import pysource
from . import mma, stage_copy
from .acc_layout import AccLayout
from .passes.mainloop import WARP
from .passes.row_loop import ACC, INDEX, PACKED, REDUCTIONS, ROW, STAGED, STAGED_T

COMBINE = {"sum": None, "max": "_max32", "min": "_min32"}


def instruction(plan) -> mma.Instruction:
    return mma.M16N8K16_F16 if plan.dtype.name == "f16" else mma.M16N8K16_BF16


def emit(cg, plan, ring: str, staging: str) -> None:
    """Append the loop (and what comes before it) to ``cg``, a CudaCodegen."""
    inst = instruction(plan)
    wm, S = plan.warp_m, plan.stages
    mt_count = wm // 16
    layout = lambda width: AccLayout(inst, wm, width)  # noqa: E731
    e = cg.emit
    e(
        f"# register row loop: {plan.warps} warps of {wm} rows, {inst.ptx}, "
        f"{len(plan.staged)} blocks through {S} swizzled shared stages of {plan.stage_bytes} bytes"
    )
    e(f"_mw = _lane // {WARP}")
    e(f"_mg = (_lane % {WARP}) // 4  # groupID")
    e("_mq = _lane % 4  # threadID_in_group")
    e("_mwm = _mw  # the warp's slab of rows")
    e("_mwn = 0")
    e("_mlr = _lane % 16  # ldmatrix addressing")
    e(f"_mlh = (_lane % {WARP}) // 16")
    e("_ml8 = _lane % 8")
    e(f"_mlq = ((_lane % {WARP}) // 8) % 2")
    fragments = _operands(cg, plan, staging, mt_count)
    cg.keep_registers({}, {}, layout, None)
    cg.index_tiles = dict(plan.index)
    for name, init in plan.carried.items():
        t = cg.types[name]
        regs = cg.register_array(name, t, init.loc)
        fill = cg.fill_code(init, name)
        e(f"for _mj in range({cg.register_count(t)}):")
        e(f"    {regs}[_mj] = {fill}")
    blocks = _staged(cg, plan)
    offsets, at = {}, 0
    for blk, _ in blocks:
        offsets[blk.name] = at
        at += blk.bytes
    loop = plan.loop
    e(f"_ms0 = (np.int64(_saddr({ring})) + 127) // 128 * 128  # the ring, 128-byte aligned")
    e(f"_mk0, _mk1, _mk2 = {cg.i64(loop.start)}, {cg.i64(loop.stop)}, {cg.i64(loop.step)}")
    e(f"_mkt = np.int64({pysource.trip_count('_mk0', '_mk1', '_mk2')})")
    # the stages read (_mro) and written (_mwo): running 32-bit offsets into the ring
    last = (S - 1) * plan.stage_bytes
    e("_mro = np.uint32(0)")
    e("_mwo = np.uint32(0)")
    # the launch chose the steady loop by the arrays (codegen.py): a prologue loop, then
    # the steady loop (branch-free where every tile copies by chunks); otherwise (an
    # ahead-of-time image) one loop whose first S - 1 iterations are the prologue
    chosen = cg.chunks if id(loop) in cg.launch_chunked_rows else None
    whole = bool(chosen and cg.whole)

    def copies() -> None:  # tile _mi + S - 1 into the stage read in iteration _mi - 1
        e(f"_mt = _mi + {S - 1}")
        e("if _mt < _mkt:  # copy tile _mt's blocks into its stage")
        cg.indent += 1
        e("_mk = np.int64(np.uint64(_mk0) + np.uint64(_mt) * np.uint64(_mk2))")
        e("_mst = _ms0 + _mwo")
        for blk, moving in blocks:
            n, rows = blk.name, blk.rows
            e(f"_mk{n} = _mk if -{rows} < _mk < {blk.array}.shape[0] else np.int64(-{rows})")
            fast = f"_mf{n} and _mc{n} % {blk.chunk_elements} == 0"
            base = f"_mst + {offsets[blk.name]}"
            stage_copy.copy(cg, blk, plan.threads, base, f"_mk{n}", f"_mc{n}", fast, moving)
        cg.indent -= 1
        commit()

    def chunked_copies() -> None:  # the same, branch-free: a tile past the last fills zeros
        e(f"_mk = np.int64(np.uint64(_mk0) + np.uint64(_mi + {S - 1}) * np.uint64(_mk2))")
        e("_mst = _ms0 + _mwo")
        for blk, moving in blocks:
            n, rows = blk.name, blk.rows
            if whole:  # a live tile's rows are inside the array; a dead one reads nothing
                e(f"_mk{n} = _mk")
            else:
                e(f"_mk{n} = _mk if -{rows} < _mk < {blk.array}.shape[0] else np.int64(-{rows})")
            base = f"_mst + {offsets[blk.name]}"
            live = "(_mi < _mkl)"
            stage_copy.chunk_copy(cg, blk, plan.threads, base, f"_mk{n}", moving, live, whole)
        commit()

    def commit() -> None:
        e("_cp_commit()")
        e(f"_mwo = np.uint32(0 if _mwo == {last} else _mwo + {plan.stage_bytes})")

    def wait() -> None:
        e(f"{'_cp_wait_all' if S == 2 else f'_cp_wait{S - 2}'}()  # tile _mi has landed")
        e("cuda.syncthreads()")

    if chosen is None:
        e(f"for _mi in range({1 - S}, _mkt):")
        cg.indent += 1
        e("if _mi >= 0:")
        cg.indent += 1
        wait()
        cg.indent -= 1
        e("if _mi < 0:")
        cg.indent += 1
        copies()
        cg.indent -= 1
        e("else:")
        cg.indent += 1
        _body(cg, plan, inst, fragments, offsets, mt_count, copies)
        cg.indent -= 2
    else:
        e(f"for _mi in range({1 - S}, 0):  # the prologue: tiles 0 .. S - 2")
        cg.indent += 1
        copies()
        cg.indent -= 1
        e(f"_mkl = _mkt - {S - 1}  # the last iteration that copies a tile")
        e("for _mi in range(_mkt):")
        cg.indent += 1
        wait()
        _body(cg, plan, inst, fragments, offsets, mt_count, chunked_copies if chosen else copies)
        cg.indent -= 1
    e("_cp_wait_all()")
    tiles = {n: cg.reg_tiles[n] for n in plan.carried}
    kinds = {n: plan.kinds[n] for n in plan.carried}
    cg.keep_registers(tiles, kinds, layout, plan.epilogue)
    cg.index_tiles = {}


def _body(cg, plan, inst, fragments, offsets, mt_count, copies) -> None:
    """Iteration ``_mi``'s statements on the stage at ``_mro``; ``copies()`` emits the
    copies of the tile ``S - 1`` ahead, after the first product (whose tensor-core work
    the copies' index arithmetic overlaps)."""
    e = cg.emit
    loop = plan.loop
    last, size = (plan.stages - 1) * plan.stage_bytes, plan.stage_bytes
    e("_mrs = _ms0 + _mro")
    e(f"_mro = np.uint32(0 if _mro == {last} else _mro + {size})")
    e(f"{cg.name(loop.var)} = np.int64(np.uint64(_mk0) + np.uint64(_mi) * np.uint64(_mk2))")
    names = {blk.stmt.target: blk for blk in plan.staged}
    stage_of = {b.name: offsets[f"s{k}"] for k, b in enumerate(plan.staged)}
    packed: dict[str, str] = {}
    copied = False
    for s in loop.body:
        kind = plan.kinds.get(s.target)
        call = s.value if hasattr(s.value, "prim") else None
        if kind in (STAGED, STAGED_T, INDEX):  # in the stage; computed where read
            continue
        if call is not None and call.prim.name == "tile.dot":
            _product(cg, plan, inst, s, call, fragments, packed, names, stage_of, mt_count)
            if not copied:  # the copies' index arithmetic overlaps the first products
                copies()
                copied = True
        elif call is not None and call.prim in REDUCTIONS:
            _reduce(cg, plan, s, call, REDUCTIONS[call.prim], mt_count)
        elif kind == PACKED:
            packed[s.target] = _pack(cg, plan, inst, s, mt_count)
        else:
            cg.register_elementwise(s.target, s.value, s.loc)
    if not copied:
        copies()


@dataclass(frozen=True)
class WholeRows:
    """The launch's test for a row loop's copies without row bounds: its tiles end at or
    before ``end`` whatever the launch (passes/row_loop.py ``tiles_end``), which must be
    within the rows of each staged array (its position among the launch's arrays)."""

    end: int
    arrays: tuple[int, ...]

    def holds(self, args: tuple, views: dict) -> bool:
        return all(self.end <= views[i][1][0] for i in self.arrays)


def _operands(cg, plan, staging: str, mt_count: int) -> dict:
    """Copy the operand blocks to shared memory once, load their A fragments; returns
    name -> the local array of its fragments (four registers per (m16 tile, k16 step))."""
    e = cg.emit
    e(f"_mq0 = (np.int64(_saddr({staging})) + 127) // 128 * 128  # the operands, aligned")
    out, at = {}, 0
    for k, (name, blk) in enumerate(plan.operands.items()):
        b = stage_copy.Block(f"o{k}", cg.name(blk.array), blk.rows, blk.cols, 2)
        stage_copy.array_info(cg, b)
        e(f"_mo{k}r = {cg.i64(blk.row0)}")
        e(f"_mo{k}r = _mo{k}r if -{b.rows} < _mo{k}r < {b.array}.shape[0] else np.int64(-{b.rows})")
        e(f"_mo{k}c = {cg.i64(blk.col0)}")
        e(f"_mo{k}c = _mo{k}c if -{b.cols} < _mo{k}c < {b.array}.shape[1] else np.int64(-{b.cols})")
        fast = f"{stage_copy.chunks_possible(b)} and _mo{k}c % 8 == 0"
        base = f"_mq0 + {at}"
        stage_copy.copy(cg, b, plan.threads, base, f"_mo{k}r", f"_mo{k}c", fast)
        e("_cp_commit()")
        e("_cp_wait_all()")
        e("cuda.syncthreads()")
        swz = stage_copy.swizzle(2, b.row_bytes, "_mlr", "0")
        e(f"_mso{k} = {swz}")
        k_steps = blk.cols // 16
        frags = f"_mA{k}"
        e(f"{frags} = cuda.local.array({mt_count * k_steps * 4}, np.uint32)")
        e(f"for _mj in range({mt_count * k_steps}):  # (m16 row tile, k16 step)")
        e(f"    _mmt, _mkk = _mj // {k_steps}, _mj % {k_steps}")
        addr = (
            f"{base} + (_mwm * {plan.warp_m} + 16 * _mmt + _mlr) * {b.row_bytes}"
            f" + (((2 * _mkk + _mlh) ^ _mso{k}) * 16)"
        )
        regs = ", ".join(f"{frags}[4 * _mj + {r}]" for r in range(4))
        e(f"    {regs} = _ldsm4({addr})")
        out[name] = frags
        at += b.bytes
    return out


def _staged(cg, plan) -> list:
    """The blocks of one stage, their arrays' addresses and whether they copy by chunks."""
    e = cg.emit
    blocks = []
    for k, blk in enumerate(plan.staged):
        b = stage_copy.Block(f"s{k}", cg.name(blk.array), blk.rows, blk.cols, 2)
        stage_copy.array_info(cg, b)
        e(f"_mcs{k} = {cg.i64(blk.col0)}")
        e(f"_mcs{k} = _mcs{k} if -{b.cols} < _mcs{k} < {b.array}.shape[1] else np.int64(-{b.cols})")
        e(f"_mfs{k} = {stage_copy.chunks_possible(b)}")
        moving = "rows" if stage_copy.chunk_setup(cg, b, plan.threads, f"_mcs{k}", "rows") else None
        blocks.append((b, moving))
    return blocks


def _product(cg, plan, inst, s, call, fragments, packed, names, stage_of, mt_count) -> None:
    """``target = A @ B (+ init)`` on tensor cores into the target's registers."""
    a, b, init = (call.args + [None] * 3)[:3]
    t = cg.types[s.target]
    width = t.shape[1]
    nt_count = width // 8
    e = cg.emit
    kind_b = plan.kinds[b.name]
    src = names[plan.sources.get(b.name, b.name)]
    base = f"_mrs + {stage_of[src.name]}"
    row_bytes = src.cols * 2
    if kind_b == STAGED_T:  # B = block^T: its rows are the columns n, its columns k
        k_steps = src.cols // 16
        e(f"_msb = {stage_copy.swizzle(2, row_bytes, '_ml8', '0')}")
    else:  # B = block: its rows are k, its columns n
        k_steps = src.rows // 16
        e(f"_msb = {stage_copy.swizzle(2, row_bytes, '_mlr', '0')}")
    # the result's registers: zero, or a copy of the initial value
    acc = f"_mp{len(cg.lines)}"
    e(f"{acc} = cuda.local.array({mt_count * nt_count * 4}, np.float32)")
    start = cg.reg_tiles.get(init.name) if init is not None else None
    e(f"for _mj in range({mt_count * nt_count * 4}):")
    e(f"    {acc}[_mj] = {start + '[_mj]' if start else 'np.float32(0)'}")
    bregs = f"_mbr{len(cg.lines)}"
    e(f"{bregs} = cuda.local.array({2 * nt_count}, np.uint32)")
    fa = fragments.get(a.name) or packed[a.name]  # (m16 tile, k16 step) -> 4 registers
    e(f"for _mkk in range({k_steps}):  # k16 steps")
    cg.indent += 1
    e(f"for _mnp in range({nt_count // 2}):  # pairs of n8 pieces: one ldmatrix.x4")
    if kind_b == STAGED_T:
        row = f"(16 * _mnp + _ml8 + 8 * _mlh) * {row_bytes}"
        addr = f"{base} + {row} + (((2 * _mkk + _mlq) ^ _msb) * 16)"
        load = "_ldsm4"
    else:
        row = f"(16 * _mkk + _mlr) * {row_bytes}"
        addr = f"{base} + {row} + (((2 * _mnp + _mlh) ^ _msb) * 16)"
        load = "_ldsm4t"
    regs = ", ".join(f"{bregs}[4 * _mnp + {r}]" for r in range(4))
    e(f"    {regs} = {load}({addr})")
    e(f"for _mj in range({mt_count * nt_count}):  # (m16 row tile, n8 piece)")
    e(f"    _mmt, _mnt = _mj // {nt_count}, _mj % {nt_count}")
    a_regs = ", ".join(f"{fa}[4 * (_mmt * {k_steps} + _mkk) + {r}]" for r in range(4))
    b_regs = f"{bregs}[2 * _mnt], {bregs}[2 * _mnt + 1]"
    c = ", ".join(f"{acc}[4 * _mj + {r}]" for r in range(4))
    e(f"    {c} = {inst.name}({a_regs}, {b_regs}, {c})")
    cg.indent -= 1
    _assign(cg, s.target, acc, mt_count * nt_count * 4, ACC)


def _assign(cg, target: str, regs: str, count: int, kind: str) -> None:
    """``target``'s registers are now ``regs``: copied into its own array where it has
    one (a loop-carried tile keeps one array across iterations), else renamed."""
    held = cg.reg_tiles.get(target)
    if held is None:
        cg.reg_tiles[target], cg.reg_kinds[target] = regs, kind
        return
    cg.emit(f"for _mj in range({count}):")
    cg.emit(f"    {held}[_mj] = {regs}[_mj]")


def _pack(cg, plan, inst, s, mt_count) -> str:
    """``target = source.astype(half)``: the source's C registers as A fragments of the
    next product: per (m16 row tile, k16 step) four .b32 registers, the C elements of the
    step's two n8 pieces (rows g and g + 8) packed in pairs. Returns their local array."""
    src = cg.reg_tiles[plan.packed[s.target]]
    nt_count = plan.widths[s.target] // 8
    k_steps = nt_count // 2
    out = f"_mP{len(cg.lines)}"
    cg.emit(f"{out} = cuda.local.array({mt_count * k_steps * 4}, np.uint32)")
    cg.emit(f"for _mj in range({mt_count * k_steps}):  # (m16 row tile, k16 step)")
    cg.emit(f"    _mmt, _mkk = _mj // {k_steps}, _mj % {k_steps}")
    cg.emit(f"    _mc = 4 * (_mmt * {nt_count} + 2 * _mkk)  # the step's first n8 piece")
    for r, (lo, hi) in enumerate(((0, 1), (2, 3), (4, 5), (6, 7))):
        cg.emit(f"    {out}[4 * _mj + {r}] = {inst.pack}({src}[_mc + {lo}], {src}[_mc + {hi}])")
    return out


def _reduce(cg, plan, s, call, op: str, mt_count: int) -> None:
    """``target = source.<op>(axis=1)`` by the fixed tree (module docstring)."""
    src = cg.reg_tiles[call.args[0].name]
    nt_count = plan.widths[call.args[0].name] // 8
    dest = f"_mrr{len(cg.lines)}"
    cg.emit(f"{dest} = cuda.local.array({2 * mt_count}, np.float32)")
    fn = COMBINE[op]

    def combine(left: str, right: str) -> str:
        if fn is None:
            return f"np.float32({left} + {right})"
        return f"{fn}({left}, {right})"  # semantics.fmax / fmin as one select

    e = cg.emit
    work = f"_mvw{len(cg.lines)}"
    e(f"{work} = cuda.local.array({2 * nt_count}, np.float32)  # a row's (piece, half) values")
    e(f"for _mrr in range({2 * mt_count}):  # the thread's rows")
    cg.indent += 1
    e("_mmt, _mh = _mrr // 2, _mrr % 2")
    e(f"for _mj in range({2 * nt_count}):")
    e(f"    {work}[_mj] = {src}[4 * (_mmt * {nt_count} + _mj // 2) + 2 * _mh + _mj % 2]")
    d = nt_count // 2
    while d >= 1:  # the 8-column pieces' bits, highest first: (piece, half) + (d, 0)
        e(f"for _mj in range({2 * d}):")
        e(f"    {work}[_mj] = {combine(f'{work}[_mj]', f'{work}[_mj + {2 * d}]')}")
        d //= 2
    for b in (0, 1):
        x = f"_mx{b}"
        e(f"{x} = {work}[{b}]")
        for mask in (2, 1):  # column bits 2 and 1: threads of the group
            e(f"_my = _shfl_xor({x}, {mask})")
            if fn is None:  # a sum: IEEE addition commutes, bit for bit
                e(f"{x} = {combine(x, '_my')}")
                continue
            e(f"_mlow = (_mq & {mask}) == 0  # this thread has the lower index")
            e(f"{x} = {combine(f'_select(_mlow, {x}, _my)', f'_select(_mlow, _my, {x})')}")
    e(f"{dest}[_mrr] = {combine('_mx0', '_mx1')}")
    cg.indent -= 1
    _assign(cg, s.target, dest, 2 * mt_count, ROW)
