"""Kernel IR → the source text of a Numba function (the CPU target's code generator).

The output is readable Python: one ``prange`` over chunks of groups (or over tiles of a
flat kernel), the group schedule from region formation, and one lane loop per region.
What a lane does is emitted by the shared :class:`~..pysource.SourceEmitter`; this module
adds the frame: chunks, groups, lane loops and per-lane arrays. Primitives are lowered by
lowerings.py; collectives run at group level, between lane loops, over the lanes' values.
"""

from __future__ import annotations

import math

import numpy as np

from ....tile import primitives as P
from ... import ir
from ...ir import TileType
from ...passes.regions import GroupIf, GroupLoop, LaneRegion, Schedule
from ...typer import concrete
from ..pysource import SourceEmitter, ctor
from ..target import Target
from ..tile_source import reads_elsewhere
from . import block_copies

STACK_BYTES = 256 * 1024  # per-chunk arrays up to this size live on the worker's stack


class CpuCodegen(SourceEmitter):
    """Generates the source of ``_kernel`` for one specialisation."""

    math_functions = {"fmod": "np.fmod"}  # Numba's CPU target has no math.fmod

    def __init__(
        self,
        kir: ir.KernelIR,
        schedule: Schedule | None,
        grid_ndim: int,
        target: Target,
        chunked: bool = False,
    ):
        """``chunked``: a flat kernel is generated as ``_chunk`` too (ahead-of-time
        modules run every kernel as chunks of its outermost loop: tessera/aot)."""
        super().__init__(kir, grid_ndim, target)
        self.schedule = schedule
        self.chunked = chunked
        self.lane_arrays = schedule.lane_arrays if schedule else set()
        self.scratch: list[tuple[str, str, int]] = []  # (name, dtype ctor, size)
        self.stack_arrays: dict[str, tuple[tuple[int, ...], str]] = {}  # name → shape, dtype
        self.block_copies: dict[str, tuple] = {}  # name → block_copies.function's key
        self.stack_bytes = 0

    def generate(self) -> str:
        """The kernel's source. A flat kernel is one function, ``_kernel``. A grouped
        kernel is ``_chunk(_c, ...)``, which runs chunk ``_c`` of the groups: the one-core
        variant is ``_chunk`` for chunk 0 of 1, and the parallel one runs every chunk on
        the process's driver for its argument types (parallel_driver.py): the two variants
        share one compile of the body."""
        args = self.kernel_args()
        if not self.kir.grouped and self.chunked:
            self.emit(f"def _chunk(_c, {', '.join(args)}, _nchunks):")
            self.indent += 1
            self.emit(
                f'"""Tessera kernel {self.kir.name} ({self.kir.loc}) for the CPU: a chunk."""'
            )
            self.flat_body()
            return "\n".join(self.lines) + "\n"
        if not self.kir.grouped:
            self.emit(f"def _kernel({', '.join(args)}):")
            self.indent += 1
            self.emit(f'"""Tessera kernel {self.kir.name} ({self.kir.loc}) for the CPU."""')
            self.flat_body()
            return "\n".join(self.lines) + "\n"
        args.append("_nchunks")
        self.emit(f"def _chunk(_c, {', '.join(args)}):")
        self.indent += 1
        self.emit(f'"""Tessera kernel {self.kir.name} ({self.kir.loc}) for the CPU: a chunk."""')
        self.grouped_body()
        return "\n".join(self.lines) + "\n"

    def flat_body(self) -> None:
        dims = range(self.grid_ndim)
        body, limit = self.kir.body, None
        guard = self.bounds_guard() if self.grid_ndim == 1 else None
        if guard is not None:  # the loop stops where the guard would start failing
            body, limit, loc = guard
            self.emit(f"_limit = min(_N0, {limit})", loc)
        for d in dims:
            loop = "_prange" if d == 0 else "range"
            extent = "_limit" if d == 0 and limit is not None else f"_N{d}"
            if d == 0 and self.chunked:  # chunk _c of _nchunks of the outermost loop
                extent = f"(_c * {extent}) // _nchunks, ((_c + 1) * {extent}) // _nchunks"
            self.emit(f"for _t{d} in {loop}({extent}):")
            self.indent += 1
        lin = "_t0"
        for d in list(dims)[1:]:
            lin = f"({lin} * _N{d} + _t{d})"
        self.emit(f"_lin = {lin}")
        self.lane_block(body)

    def bounds_guard(self) -> tuple[list[ir.Stmt], str, ir.SourceLoc] | None:
        """For the usual flat kernel ``i = tile.linear_id(); if i < n: ...`` (nothing
        else at the top level, ``n`` a parameter, symbol or constant): the statements to
        run per element (the assignment and the guarded body), the code of ``n`` and
        the guard's place; None for any other kernel.

        The loop then runs to ``min(grid, n)`` and no element tests the guard: with the
        test, the loop vectorises into masked loads and stores, about 5 % slower."""
        if len(self.kir.body) != 2:
            return None
        first, second = self.kir.body
        if not (isinstance(first, ir.Assign) and ir.is_call_of(first, P.linear_id)):
            return None
        if not (isinstance(second, ir.If) and not second.orelse):
            return None
        cond = second.cond
        if not (isinstance(cond, ir.Compare) and cond.op == "<"):
            return None
        if not (isinstance(cond.left, ir.Name) and cond.left.name == first.target):
            return None
        bound = cond.right
        invariant = isinstance(bound, ir.Const) or (  # (parameters are never assigned)
            isinstance(bound, ir.Name)
            and (bound.name in self.params or bound.name in self.kir.symbols)
        )
        dtype = concrete(bound.type).dtype
        if not invariant or not (dtype.kind == "i" or (dtype.kind == "u" and dtype.bits < 64)):
            return None  # (a u64 bound may not fit the loop's int64 count)
        return [first, *second.body], f"np.int64({self.expr(bound)})", second.loc

    def grouped_body(self) -> None:
        g = " * ".join(f"_N{d}" for d in range(self.grid_ndim))
        self.emit(f"_G = {g}")
        self.emit("s_grid_groups = _G")
        for a in self.kir.allocs:
            if a.dynamic:  # sized by a launch argument: on the heap, once per chunk
                size = f"np.int64({self.name(a.shape[0].name)})"
                self.emit(f"_sh{a.slot} = np.empty({size}, {self.storage(a.dtype)})", a.loc)
                continue
            shape = tuple(int(x) for x in a.shape)
            self.emit(f"_sh{a.slot} = {self.scratch_array(shape, self.storage(a.dtype))}", a.loc)
        for v in sorted(self.lane_arrays):
            t = self.types[v]
            array = self.scratch_array((self.lanes,), ctor(t.dtype))
            self.emit(f"_la_{self.name(v)} = {array}")
        for v, t in sorted(self.types.items()):  # a tile variable: an array per chunk
            if isinstance(t, TileType):
                self.emit(f"{self.name(v)} = {self.scratch_array(t.shape, ctor(t.dtype))}")
        body_start = len(self.lines)
        self.indent += 1
        self.group_items(self.schedule.items)
        self.indent -= 1
        body = self.lines[body_start:]
        del self.lines[body_start:]
        for name, dt, size in self.scratch:
            shape = size if isinstance(size, tuple) else (size,)
            self.emit(f"{name} = {self.scratch_array(shape, dt)}")
        self.emit("for _g in range((_c * _G) // _nchunks, ((_c + 1) * _G) // _nchunks):")
        self.indent += 1
        self.unflatten("_g", "_g", [f"_N{d}" for d in range(self.grid_ndim)])
        self.indent -= 1
        self.lines.extend(body)

    def block_copy(self, kind: str, lead: int, shape: tuple[int, ...], masked=False) -> str:
        """The name of the shared function copying such blocks (block_copies.py)."""
        name = block_copies.name(kind, lead, shape, masked)
        self.block_copies[name] = (kind, lead, shape, masked)
        return name

    def scratch_array(self, shape: tuple[int, ...], dtype: str) -> str:
        """Code that makes a per-chunk array: on the stack while the chunk's arrays fit
        in STACK_BYTES (distinct stack arrays let LLVM prove they do not alias, keep
        values in registers and vectorise), else on the heap."""
        nbytes = math.prod(shape) * np.dtype(dtype.removeprefix("np.")).itemsize
        if self.stack_bytes + nbytes <= STACK_BYTES:
            self.stack_bytes += nbytes
            name = f"_stack{len(self.stack_arrays)}"
            self.stack_arrays[name] = (shape, dtype.removeprefix("np."))
            return f"{name}()"
        return f"np.empty({shape}, {dtype})"

    # ------------------------------------------------------------------ group level
    def group_items(self, items: list) -> None:
        if not items:
            self.emit("pass")
        i = 0
        while i < len(items):
            run = elementwise_run(items, i)
            if len(run) > 1:
                self.fused_tile_statements(run)
                i += len(run)
                continue
            item = items[i]
            i += 1
            if isinstance(item, LaneRegion):
                self.lane_region(item)
            elif isinstance(item, GroupIf):
                self.emit(f"if {self.truth(item.stmt.cond)}:", item.stmt.loc)
                self.nested(lambda it=item: self.group_items(it.body))
                if item.orelse:
                    self.emit("else:")
                    self.nested(lambda it=item: self.group_items(it.orelse))
            elif isinstance(item, GroupLoop) and self.sinkable(item):
                self.lane_region(item.body[0], sunk=item.stmt)
            elif isinstance(item, GroupLoop):
                self.loop_header(item.stmt)
                self.nested(lambda it=item: self.group_items(it.body))
            else:
                self.group_stmt(item)

    def group_stmt(self, s: ir.Stmt) -> None:
        call = ir.prim_call(s)
        if isinstance(s, ir.SharedAlloc):
            self.emit(f"{self.name(s.target)} = _sh{s.slot}", s.loc)
        elif isinstance(s, ir.CopyAsync):
            self.copy_async(s)
        elif call is not None and call.prim.collective:
            self.lower(call, s)
        elif ir.is_tile_statement(s):
            self.tile_statement(s)
        else:
            self.lane_stmt(s)

    def fused_tile_statements(self, run: list[ir.Assign]) -> None:
        """Consecutive elementwise tile statements of one shape (elementwise_run) in one
        loop nest: each element computes them in order, with the bits it would have
        statement by statement."""

        def body() -> None:
            for s in run:
                value = self.conv(self.expr(s.value), s.value.type, self.types[s.target])
                self.emit(f"{self.name(s.target)}[{', '.join(self.element)}] = {value}", s.loc)

        self.element_loops(run[0].value.type.shape, body)

    def sinkable(self, item: GroupLoop) -> bool:
        """A uniform ``for`` holding a single region can run inside the outer lane loops
        (each lane still runs the loop in order), which keeps a lane row's values hot
        and leaves the innermost lane loop vectorisable: ``for l0: for k: for l1:``."""
        return (
            len(self.tile) > 1
            and isinstance(item.stmt, ir.For)
            and not ir.prints(item.stmt.body)  # lines stay in lane order
            and len(item.body) == 1
            and isinstance(item.body[0], LaneRegion)
        )

    def lane_region(self, r: LaneRegion, sunk: ir.For | None = None) -> None:
        used = (r.reads | r.writes) & self.lane_arrays
        remat = [self.schedule.remat[v] for v in self.schedule.remat_needed(r)]
        needs_lane = bool(used) or any(
            isinstance(e, ir.PrimCall) and e.prim.varying
            for s in list(ir.walk_stmts(r.stmts)) + remat
            for e in ir.stmt_exprs(s)
        )
        self.emit(f"# region {r.index}")
        if len(self.tile) == 1:
            self.emit(f"for _lane in range({self.tile[0]}):")
            self.indent += 1
        else:
            for d, size in enumerate(self.tile):
                if sunk is not None and d == len(self.tile) - 1:
                    self.loop_header(sunk)
                    self.indent += 1
                self.emit(f"for _l{d} in range({size}):")
                self.indent += 1
            if needs_lane:
                lin = "_l0"
                for d in range(1, len(self.tile)):
                    lin = f"({lin} * {self.tile[d]} + _l{d})"
                self.emit(f"_lane = {lin}")
        for v in sorted(used):
            self.emit(f"{self.name(v)} = _la_{self.name(v)}[np.uint64(_lane)]")
        for v in self.schedule.remat_needed(r):
            self.lane_stmt(self.schedule.remat[v])
        self.lane_block(r.stmts)
        for v in sorted(r.writes & self.lane_arrays):
            self.emit(f"_la_{self.name(v)}[np.uint64(_lane)] = {self.name(v)}")
        self.indent -= len(self.tile) + (sunk is not None and len(self.tile) > 1)

    # ------------------------------------------------------------------ collectives
    def lane_value(self, e: ir.Expr, lane: str) -> str:
        """The value lane ``lane`` holds of a collective's argument: from its per-lane
        array where the value varies, else the group's one value."""
        if isinstance(e, ir.Name) and e.name in self.lane_arrays:
            return f"_la_{self.name(e.name)}[{lane}]"
        return self.expr(e)

    def scratch_for(self, dtype_ctor: str, size: int) -> str:
        """A per-chunk scratch array for one collective."""
        name = f"_scr{len(self.scratch)}"
        self.scratch.append((name, dtype_ctor, size))
        return name

    def set_result(self, site: ir.Stmt, code: str, t: ir.Type, lane: str | None = None) -> None:
        """Assign a collective's result (of type ``t``) to its statement's target: to
        lane ``lane``'s slot when the result varies by lane."""
        if not isinstance(site, ir.Assign):
            return
        value = self.conv(code, t, self.types[site.target])
        if lane is not None and site.target in self.lane_arrays:
            self.emit(f"_la_{self.name(site.target)}[{lane}] = {value}")
        elif lane is None:
            self.emit(f"{self.name(site.target)} = {value}", site.loc)

    # ------------------------------------------------------------------ rules as calls
    # (functions compiled once per process and inlined by LLVM: a branchy expression
    # written out would add blocks to the kernel's function, which Numba's passes pay for)
    def trip_count(self, start: str, stop: str, step: str) -> str:
        return f"_trip_count({start}, {stop}, {step})"

    def block_origin(self, origin: str, size: int, extent: str) -> str:
        return f"_block_origin({origin}, np.int64({size}), {extent})"

    # ------------------------------------------------------------------ tiles
    def element_loops(self, shape: tuple[int, ...], body) -> None:
        """Nested loops over a tile's elements (the last axis innermost, contiguous)."""
        saved, self.element = self.element, [f"_e{d}" for d in range(len(shape))]
        for d, n in enumerate(shape):
            self.emit(f"for _e{d} in range({n}):")
            self.indent += 1
        body()
        self.indent -= len(shape)
        self.element = saved

    def tile_temp(self, t: TileType) -> str:
        return self.scratch_for(ctor(t.dtype), t.shape)

    def copy_async(self, s: ir.CopyAsync) -> None:
        self.emit(f"# cp_async.shared.global_({s.dst.name}, {s.src.name}[...]): eager copy", s.loc)
        dst, src, q, src_idx, conds = self.copy_bounds(s)
        for d in range(q):
            self.emit(f"{'    ' * d}for _q{d} in range({dst}.shape[{d}]):")
        pad = "    " * q
        dst_idx = ", ".join(f"_q{d}" for d in range(q))
        self.emit(f"{pad}if {' and '.join(conds)}:")
        self.emit(f"{pad}    {dst}[{dst_idx}] = {src}[{', '.join(src_idx)}]")
        self.emit(f"{pad}else:")
        self.emit(f"{pad}    {dst}[{dst_idx}] = 0")

    # ------------------------------------------------------------------ lane level
    def lane_id(self, axis: int | None) -> str:
        if not self.kir.grouped:
            if axis is None:
                return "np.int64(_lin)"
            if axis >= self.grid_ndim:
                return "np.int64(0)"
            return f"np.int64(_t{axis})"
        if axis is None or len(self.tile) == 1:
            return "np.int64(0)" if axis not in (None, 0) else "np.int64(_lane)"
        if axis >= len(self.tile):
            return "np.int64(0)"
        return f"np.int64(_l{axis})"

    def group_axis(self, axis: int) -> str:
        if axis >= self.grid_ndim:
            return "np.int64(0)"
        return f"np.int64(_g{axis})"


def elementwise_run(items: list, start: int) -> list[ir.Assign]:
    """The elementwise tile statements of one shape from ``items[start]`` on that may run
    in one loop nest: none reads a tile that the run writes at an element other than the
    one it computes (``t.T`` of a square tile, say), so computing every statement at one
    element before the next element reads and writes what running them one by one does."""
    run: list[ir.Assign] = []
    for item in items[start:]:
        if not _elementwise(item):
            break
        if run and item.value.type.shape != run[0].value.type.shape:
            break
        written = {s.target for s in run} | {item.target}
        if any(reads_elsewhere(item.value, w) for w in written):
            break
        if any(reads_elsewhere(s.value, item.target) for s in run):
            break
        run.append(item)
    return run


def _elementwise(item) -> bool:
    if not isinstance(item, ir.Assign) or not ir.is_tile_statement(item):
        return False
    call = ir.prim_call(item)
    if call is not None and call.prim.collective:
        return False
    return isinstance(item.value.type, TileType)
