"""Kernel IR → the source of a numba-cuda kernel: one CUDA block per group, one thread
per lane (flat kernels: one thread per tile, the tail guarded).

What a lane does is emitted by the shared :class:`~..pysource.SourceEmitter`, exactly as
on the CPU; this module adds the thread and block numbering, shared arrays
(``cuda.shared.array``) and copies; lowerings.py lowers the primitives (``tbarrier`` is
``cuda.syncthreads()``, group reductions run *the same* reduction tree as every target).
Lanes are numbered row-major (the last group axis varies fastest, i.e. it is
``threadIdx.x`` of a 1-D block of ``prod(tile)`` threads).
"""

from __future__ import annotations

import math

import numpy as np

from .... import dtypes as D
from ... import ir
from ...ir import TileType
from ...passes import checks
from ...passes.prefetch import keep_in_flight
from ...typer import concrete
from .. import printing
from ..pysource import SourceEmitter, ctor
from ..target import Target
from . import blocked_tiles, mainloop, row_loop
from .passes.launch_shape import threads_for
from .passes.mainloop import launch_bounds, offsets_in_chunks, plan_mainloops
from .passes.row_loop import launch_chunks as row_loop_launch_chunks
from .passes.row_loop import plan_row_loops, staged_blocks, tiles_end
from .register_tiles import RegisterTiles
from .rounding import PRODUCTS

FLAT_BLOCK = 256  # threads per block of a flat kernel
STATIC_SHARED_LIMIT = 48 * 1024  # above this a block's shared memory must be dynamic
RASTER_ROWS = 8  # GEMM kernels run their groups in bands of this many group rows (L2 reuse)


def padded(t: TileType) -> tuple[int, ...]:
    """The shape a tile's shared array is declared with: a row of a whole number of
    shared-memory bank rows (32 words) gets one element more, unused. Every lane then
    finds the next row of a tile in the next bank instead of the same one: the plain
    tile.dot's lanes read two rows of ``x`` at once, and mma.sync's fragment loads read
    eight (``groupID``), which otherwise queue on one bank."""
    shape = tuple(t.shape)
    row_bytes = shape[-1] * _itemsize(ctor(t.dtype)) if shape else 0
    if len(shape) >= 2 and row_bytes % 128 == 0:
        return shape[:-1] + (shape[-1] + 1,)
    return shape


def _tile_label(generated: str, rings=()) -> str:
    """A shared tile as an error message names it: the user's variable, a main loop's
    staging ring, or a temporary."""
    if generated in rings:
        return "the staging ring of a tile.dot main loop"
    name = generated.removeprefix("v_")
    return f"tile {name}" if not name.startswith("_") else "a temporary tile"


def _itemsize(ctor_name: str) -> int:
    """Bytes of one element of a generated array of ``np.float32``-style type."""
    return np.dtype(ctor_name.removeprefix("np.")).itemsize


class CudaCodegen(RegisterTiles, SourceEmitter):
    """Generates the source of ``_kernel`` (to be wrapped in ``numba.cuda.jit``)."""

    # integer division and abs stay the hardware's (no trap on a GPU): calling a rule's
    # device function would need a GPU to compile, and PTX is made without one
    integer_rules = frozenset({"<<", ">>", "**"})
    checked_launches = False  # bounds checks and asserts are the CPU's and debug's
    blocked: frozenset = frozenset()  # tiles in registers, blocked (set in __init__)

    def __init__(
        self,
        kir: ir.KernelIR,
        grid_ndim: int,
        target: Target,
        async_copies: bool = True,
        simulated: bool = False,
        tensor_cores: bool = False,
        stages: int = 3,
        chunks: bool | None = None,
        whole: bool = False,
        fp8: bool = False,
        excluded: frozenset = frozenset(),
    ):
        super().__init__(kir, grid_ndim, target)
        self.simulated = simulated  # numba-cuda's simulator: no warp shuffles
        # mma.sync for f16/bf16 tile.dot (sm_80+; the simulator cannot run inline PTX)
        self.tensor_cores = tensor_cores and not simulated
        # ... and for f8 tile.dot where the architecture has it (sm_89+: ``fp8``)
        fp8 = fp8 and self.tensor_cores
        # a tile-only kernel's block may have other threads than its lanes
        if kir.grouped:
            self.lanes = threads_for(kir, self.tensor_cores, stages, fp8)
        # tile.range GEMM loops run as register main loops (passes/mainloop.py)
        self.mainloops = plan_mainloops(kir, self.lanes, stages, fp8) if self.tensor_cores else {}
        # their operand tiles go global -> shared stages -> fragments, never a tile
        self.unstaged = {n for p in self.mainloops.values() for n in (p.a, p.b)}
        # main loops whose steady loop the launch chooses by the arrays (``chunks``: the
        # chunked one, the general one, or None: both, chosen in the kernel)
        self.chunks = chunks
        self.launch_chunked = {
            key
            for key, p in self.mainloops.items()
            if mainloop.launch_chunks(p, offsets_in_chunks(p, kir))
        }
        arrays = [p.name for p in kir.params if p.kind == "array"]
        self.chunk_checks = tuple(  # (array parameter's position, its staged block)
            (arrays.index(name), block)
            for key, p in self.mainloops.items()
            if key in self.launch_chunked
            for name, block in zip((p.A, p.B), mainloop.blocks(p, "A", "B"))
        )
        # where the chunked loop runs, whether the k loop's tiles lie inside A and B (then
        # its copies check no k bound: ``whole``) is the launch's test too
        self.whole = whole
        bounds = {key: launch_bounds(p.loop, kir) for key, p in self.mainloops.items()}
        self.whole_checks = tuple(
            mainloop.WholeTiles(p, bounds[key], arrays.index(p.A), arrays.index(p.B))
            for key, p in self.mainloops.items()
            if key in self.launch_chunked and bounds[key] is not None
        )
        if len(self.whole_checks) != len(self.launch_chunked):
            self.whole_checks = ()  # (every chunked loop is whole, or none is)
        self.rings: dict[str, int] = {}  # shared staging rings of the main loops, bytes
        # other tile.range loops of blocks and products as register row loops
        self.row_loops = (
            plan_row_loops(kir, self.lanes, stages, self.mainloops) if self.tensor_cores else {}
        )
        for p in self.row_loops.values():  # in registers or stages, unless needed later
            self.unstaged |= set(p.kinds) - p.epilogue.shared
        self._row_loop_checks(kir, arrays)
        self.init_registers(list(self.mainloops.values()) + list(self.row_loops.values()))
        for p in self.row_loops.values():
            for init in p.carried.values():
                self.fused_inits[id(init)] = "its registers start the row loop"
            for blk in p.operands.values():
                self.fused_inits[id(blk.stmt)] = "loaded into fragments by the row loop"
        self.tile_temps: list[tuple[str, TileType]] = []  # shared scratch of tile statements
        self.scratch: dict[str, int] = {}  # compute dtype ctor → elements of shared scratch
        self.dynamic_shared_bytes = 0  # > 0: shared arrays are carved from dynamic memory
        self.alloc_bytes: list[tuple[str, int]] = []  # tshared.alloc arrays, bytes each
        self.alloc_sizes: list = []  # (tshared.alloc statement, bytes), grouped kernels
        self.shared_arrays: list[tuple[str, int]] = []  # all of a group's, once generated
        # cp.async for copies (off under the simulator, which cannot run inline PTX)
        self.async_copies = async_copies
        self.uses_copies = any(isinstance(s, ir.CopyAsync) for s in ir.walk_stmts(kir.body))
        self.keeps_copies_in_flight = async_copies and any(
            ir.prim_call(s) is not None and keep_in_flight(s) for s in ir.walk_stmts(kir.body)
        )
        # element-wise tiles in registers (blocked_tiles.py), but those an earlier try of
        # this kernel found to need shared memory (``excluded``)
        self.not_registers: dict[str, str] = {}  # tile -> why it is no register tile
        self.moved: dict[str, str] = {}  # ... why an earlier try moved it (generated())
        self.blocked = blocked_tiles.candidates(
            kir, self.types, self.lanes, self.unstaged, excluded, self.not_registers
        )
        self.blocked_vars = {  # register name -> tile variable
            blocked_tiles.register_name(SourceEmitter.name(self, v)): v for v in self.blocked
        }
        self.blocked_shapes = {r: self.types[v].shape for r, v in self.blocked_vars.items()}
        # 16-bit sources copied two elements at a time need 4-byte alignment, which only
        # the launch can see: one bool argument per such array
        self.align_params: list[str] = (
            sorted(
                {
                    s.src.name
                    for s in ir.walk_stmts(kir.body)
                    if isinstance(s, ir.CopyAsync) and kir.var_types[s.src.name].dtype.itemsize == 2
                }
            )
            if async_copies
            else []
        )

    def _row_loop_checks(self, kir: ir.KernelIR, arrays: list[str]) -> None:
        """A row loop whose steady loop the launch chooses (as a main loop's: its staged
        arrays' chunk checks) and, where its tiles end at a constant for every launch,
        whether they lie inside the arrays (``row_loop.WholeRows``)."""
        self.launch_chunked_rows = set()
        for key, p in self.row_loops.items():
            if not row_loop_launch_chunks(p, kir, self.lanes):
                continue
            self.launch_chunked_rows.add(key)
            positions = tuple(arrays.index(blk.array) for blk in p.staged)
            self.chunk_checks += tuple(zip(positions, staged_blocks(p)))
            end = tiles_end(p, kir)
            if end is not None:
                self.whole_checks += (row_loop.WholeRows(end, positions),)

    # ------------------------------------------------------------------ frame
    def generate(self) -> str:
        args = self.kernel_args()
        args += [f"_align_{name}" for name in self.align_params]
        self.emit(f"def _kernel({', '.join(args)}):")
        self.indent += 1
        self.emit(f'"""Tessera kernel {self.kir.name} ({self.kir.loc}) for CUDA."""')
        body_start = len(self.lines)
        if self.kir.grouped:
            self.grouped_frame()
        else:
            self.flat_frame()
        self.lane_block(self.kir.body)
        # shared scratch for reductions is declared up front, sized by what was emitted
        declared = [
            f"    _scr_{dt.removeprefix('np.')} = cuda.shared.array({size}, {dt})"
            for dt, size in self.scratch.items()
        ]
        # other tile variables and tile scratch live in shared memory: one value per group
        tiles = [
            (self.name(v), t)
            for v, t in sorted(self.types.items())
            if isinstance(t, TileType) and v not in self.unstaged and v not in self.blocked
        ]
        declared += self.shared_declarations(tiles + self.tile_temps)
        declared += blocked_tiles.declarations(self)
        self.lines[body_start:body_start] = declared
        # what is in shared memory after all (a GEMM loop's accumulator too, where this
        # code keeps it there) must fit the group's budget
        checks.check_tile_sizes(self.kir, exempt=self.unstaged | self.blocked)
        # what a group keeps in shared memory besides tshared.dynamic (program.py checks
        # it against the architecture's limit before ptxas would refuse the kernel)
        self.shared_arrays = (
            self.alloc_bytes
            + [
                (f"reduction scratch ({dt.removeprefix('np.')})", size * _itemsize(dt))
                for dt, size in self.scratch.items()
            ]
            + [
                (
                    _tile_label(name, self.rings),
                    math.prod(padded(t)) * _itemsize(ctor(t.dtype)),
                )
                for name, t in tiles + self.tile_temps
            ]
        )
        return "\n".join(self.lines) + "\n"

    def flat_frame(self) -> None:
        total = " * ".join(f"_N{d}" for d in range(self.grid_ndim))
        self.emit("_lin = cuda.grid(1)")
        self.emit(f"if _lin >= {total}:")
        self.emit("    return")
        self.unflatten("_lin", "_t", [f"_N{d}" for d in range(self.grid_ndim)])

    def grouped_frame(self) -> None:
        self.emit("_lane = cuda.threadIdx.x")
        if self.keeps_copies_in_flight:
            self.emit("_cp_it = 0  # copy groups started in this tile.range iteration")
        self.unflatten("_lane", "_l", list(self.tile))
        self.emit("_g = cuda.blockIdx.x")
        if self.mainloops and self.grid_ndim == 2:
            mainloop.grouped_raster(self, RASTER_ROWS)
        else:
            self.unflatten("_g", "_g", [f"_N{d}" for d in range(self.grid_ndim)])
        self.emit(f"s_grid_groups = {' * '.join(f'_N{d}' for d in range(self.grid_ndim))}")
        self.alloc_sizes = [
            (a, math.prod(int(x) for x in a.shape) * a.dtype.itemsize)
            for a in self.kir.allocs
            if not a.dynamic
        ]
        self.alloc_bytes = [(f"tshared array {a.target}", n) for a, n in self.alloc_sizes]

    def shared_declarations(self, tiles: list[tuple[str, TileType]]) -> list[str]:
        """The group's shared arrays (``tshared.alloc``, tiles) as static arrays while
        static shared memory (48 KiB a block, with the reduction scratch) holds them;
        what does not fit becomes slices of dynamic shared memory (sized at launch, opted
        in above 48 KiB): the ``tshared`` arrays first (or whenever a ``tshared.dynamic``
        array is sized at launch), the tiles too if they still do not fit. Every extern
        shared array starts at the same address, so each is a slice of one of its dtype,
        at a byte offset rounded up to 16; ``tshared.dynamic`` comes last."""
        allocs = [
            (f"_sh{a.slot}", tuple(int(x) for x in a.shape), self.storage(a.dtype), n)
            for a, n in self.alloc_sizes
        ]
        tile_arrays = [
            (name, padded(t), ctor(t.dtype), math.prod(padded(t)) * _itemsize(ctor(t.dtype)))
            for name, t in tiles
        ]
        scratch = sum(size * _itemsize(dt) for dt, size in self.scratch.items())

        def total(arrays):
            return sum(n for *_, n in arrays)

        dynamic = self.kir.dynamic_alloc
        limit = STATIC_SHARED_LIMIT - scratch
        if dynamic is None and total(allocs) + total(tile_arrays) <= limit:
            static, carved = allocs + tile_arrays, []
        elif total(tile_arrays) <= limit:
            static, carved = tile_arrays, allocs
        else:
            static, carved = [], allocs + tile_arrays
        lines = [f"    {name} = cuda.shared.array({shape}, {dt})" for name, shape, dt, _ in static]
        offset = 0
        for name, shape, dt, nbytes in carved:
            base = dt.removeprefix("np.")
            start = offset // np.dtype(base).itemsize
            view = f"cuda.shared.array(0, _dt_{base})[{start}:{start + math.prod(shape)}]"
            if len(shape) > 1:  # a constant-shaped view, no run-time reshape
                view = f"_shaped({view}, {shape})"
            lines.append(f"    {name} = {view}")
            offset += -(-nbytes // 16) * 16
        if dynamic is not None:  # last: its size is the launch's (program.py adds it)
            dt = self.storage(dynamic.dtype).removeprefix("np.")
            start = offset // dynamic.dtype.itemsize
            size = self.name(dynamic.shape[0].name)
            lines.append(
                f"    _sh{dynamic.slot} = cuda.shared.array(0, _dt_{dt})[{start}:{start} + {size}]"
            )
        self.dynamic_shared_bytes = offset
        return lines

    # ------------------------------------------------------------------ numbering
    def lane_id(self, axis: int | None) -> str:
        if not self.kir.grouped:
            if axis is None:
                return "np.int64(_lin)"
            return "np.int64(0)" if axis >= self.grid_ndim else f"np.int64(_t{axis})"
        if axis is None:
            return "np.int64(_lane)"
        return "np.int64(0)" if axis >= len(self.tile) else f"np.int64(_l{axis})"

    def group_axis(self, axis: int) -> str:
        return "np.int64(0)" if axis >= self.grid_ndim else f"np.int64(_g{axis})"

    # ------------------------------------------------------------------ collectives
    def collective(self, s: ir.Stmt) -> None:
        call = ir.prim_call(s)
        if isinstance(s, ir.SharedAlloc):
            self.emit(f"{self.name(s.target)} = _sh{s.slot}", s.loc)
        elif isinstance(s, ir.CopyAsync):
            self.copy_async(s)
        elif isinstance(s, ir.For) and id(s) in self.mainloops:
            self.register_mainloop(self.mainloops[id(s)])
        elif isinstance(s, ir.For) and id(s) in self.row_loops:
            self.register_row_loop(self.row_loops[id(s)])
        elif isinstance(s, ir.For) and s.tile_range:
            self.loop_header(s)
            if self.keeps_copies_in_flight:
                self.emit("    _cp_it = 0")
            self.nested(lambda: self.lane_block(s.body))
        elif call is not None and call.prim.collective:
            self.lower(call, s)
        elif ir.is_tile_statement(s):
            self.tile_statement(s)
        else:
            super().collective(s)

    def set_result(self, site: ir.Stmt, code: str, t: ir.Type) -> None:
        """Assign a collective's result (of type ``t``) to its statement's target."""
        if isinstance(site, ir.Assign):
            target = self.conv(code, t, self.types[site.target])
            self.emit(f"{self.name(site.target)} = {target}", site.loc)

    # ------------------------------------------------------------------ print
    def print_line(self, s: ir.Print) -> None:
        """One ``vprintf`` of the whole line (printf.py)."""
        template = printing.template(self.kir, self.grid_ndim, s)
        values = self.print_ids() + [self.expr(i) for i in s.items if not isinstance(i, str)]
        self.emit(f"_printf({template!r}, ({', '.join(values)},))", s.loc)

    # ------------------------------------------------------------------ tiles
    def element_loops(self, shape: tuple[int, ...], body) -> None:
        """Every lane computes its share of a tile's elements; then the group waits, so
        the whole tile is visible to every lane. In a main loop's epilogue: each thread
        its accumulator elements, no barrier."""
        if self.reg_elements:
            self.register_element_loops(shape, body)
            return
        size = 1
        for n in shape:
            size *= n
        saved, self.element = self.element, [f"_e{d}" for d in range(len(shape))]
        per = blocked_tiles.element_form(shape, self.lanes) if self.kir.grouped else None
        if per is None:
            self.emit(f"for _t in range(_lane, {size}, {self.lanes}):")
        else:  # thread t's k-th element is element t + k * lanes (blocked_tiles.py)
            self.emit(f"for _kk in range({per}):")
            self.emit(f"    _t = _lane + _kk * {self.lanes}")
        self.indent += 1
        self.unflatten("_t", "_e", list(shape))
        start = len(self.lines)
        body()
        self.indent -= 1
        private = per is not None and blocked_tiles.align_loop(
            self.lines, start, self.blocked_shapes, shape, self.element
        )
        if not private:  # other lanes read what the loop wrote, or wrote what it read
            self.emit("cuda.syncthreads()")
        self.element = saved

    def name(self, n: str) -> str:
        base = super().name(n)
        return blocked_tiles.register_name(base) if n in self.blocked else base

    def tile_temp(self, t: TileType) -> str:
        name = f"_tt{len(self.tile_temps)}"
        self.tile_temps.append((name, t))
        return name

    def arith(self, a: str, op: str, b: str, t: ir.Type) -> str:
        """A float product is rounded on its own, never contracted into an FMA
        (rounding.py); everything else as on every target."""
        dtype = concrete(t).dtype
        if dtype in D.COMPUTED_IN_F32:  # f16/bf16 arithmetic is f32 arithmetic, rounded later
            dtype = D.f32
        product = PRODUCTS.get(dtype) if op == "*" and not self.simulated else None
        if product is not None:
            return f"{product}({a}, {b})"
        return super().arith(a, op, b, t)

    def scratch_for(self, dtype: D.DType, size: int) -> str:
        key = ctor(dtype)
        self.scratch[key] = max(self.scratch.get(key, 0), size)
        return f"_scr_{key.removeprefix('np.')}"

    def wait_keeping_in_flight(self, s: ir.Stmt) -> None:
        """``cp.async.wait_group n``: the iteration's newest ``n`` groups stay in flight
        (passes/prefetch.py proved nothing reads them before the next barrier). ``n``
        is an immediate, so the groups started so far pick one of the constant waits."""
        keep = keep_in_flight(s)
        self.emit(f"if _cp_it >= {keep}:", s.loc)
        self.emit(f"    _cp_wait{keep}()")
        for n in range(keep - 1, 0, -1):
            self.emit(f"elif _cp_it == {n}:")
            self.emit(f"    _cp_wait{n}()")
        self.emit("else:")
        self.emit("    _cp_wait_all()")

    def commit(self) -> str:
        return "_cp_commit(); _cp_it += 1" if self.keeps_copies_in_flight else "_cp_commit()"

    def copy_async(self, s: ir.CopyAsync) -> None:
        """Every lane copies its share of the slice (zero-filling past the tail)."""
        self.emit(f"# cp_async.shared.global_({s.dst.name}, {s.src.name}[...])", s.loc)
        dst, src, q, src_idx, conds = self.copy_bounds(s)
        src_t = self.types[s.src.name]
        sliced = s.sliced or [True] * src_t.ndim
        itemsize = src_t.dtype.itemsize
        if self.async_copies and itemsize in (4, 8):
            self.copy_loop(s, dst, src, q, src_idx, conds, f"_cp_async{itemsize}", itemsize)
            self.emit(self.commit())
        elif self.async_copies and itemsize == 2 and q == 1 and len(sliced) == 1:
            self.copy_pairs(s, dst, src, src_idx, conds)
        else:
            self.copy_loop(s, dst, src, q, src_idx, conds, None, itemsize)

    def copy_loop(self, s, dst, src, q, src_idx, conds, intrinsic, itemsize) -> None:
        """Each lane takes every L-th element of the destination."""
        total = " * ".join(f"{dst}.shape[{d}]" for d in range(q))
        self.emit(f"for _q in range(_lane, {total}, {self.lanes}):")
        rest = "_q"
        for d in reversed(range(q)):
            self.emit(f"    _q{d} = {rest} % {dst}.shape[{d}]" if d else f"    _q{d} = {rest}")
            rest = f"({rest} // {dst}.shape[{d}])"
        dst_idx = ", ".join(f"_q{d}" for d in range(q))
        inside = " and ".join(conds)
        if intrinsic is not None:  # one cp.async per element; out of range reads 0 bytes
            zero = ", ".join("0" for _ in src_idx)
            self.emit(f"    if {inside}:")
            self.emit(
                f"        {intrinsic}({dst}, ({dst_idx},), {src}, ({', '.join(src_idx)},), "
                f"{itemsize})"
            )
            self.emit("    else:")
            self.emit(f"        {intrinsic}({dst}, ({dst_idx},), {src}, ({zero},), 0)")
            return
        self.emit(f"    if {inside}:")
        self.emit(f"        {dst}[{dst_idx}] = {src}[{', '.join(src_idx)}]")
        self.emit("    else:")
        self.emit(f"        {dst}[{dst_idx}] = 0")

    def copy_pairs(self, s, dst, src, src_idx, conds) -> None:
        """16-bit elements: cp.async moves 4 bytes at least, so each lane copies a pair
        when the source is 4-byte aligned there (else the plain copy)."""
        name = s.src.name
        self.emit(f"if _align_{name} and _cs0 >= 0 and _cs0 % 2 == 0 and {dst}.shape[0] % 2 == 0:")
        self.emit(f"    for _p in range(_lane, {dst}.shape[0] // 2, {self.lanes}):")
        self.emit("        _q0 = 2 * _p")
        self.emit("        _n = min(2, max(0, _ce0 - (_cs0 + _q0)))")
        self.emit(
            f"        _cp_async4({dst}, (_q0,), {src}, ((_cs0 + _q0) if _n > 0 else 0,), 2 * _n)"
        )
        self.emit(f"    {self.commit()}")
        self.emit("else:")
        self.indent += 1
        self.copy_loop(s, dst, src, 1, src_idx, conds, None, 2)
        self.indent -= 1
