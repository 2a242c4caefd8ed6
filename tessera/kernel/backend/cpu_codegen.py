"""Kernel IR → the source text of a Numba function (the CPU target's code generator).

The output is readable Python: one ``prange`` over chunks of groups (or over tiles of a
flat kernel), the group schedule from region formation, and one lane loop per region.
What a lane does is emitted by the shared :class:`~.pysource.SourceEmitter`; this module
adds the frame: chunks, groups, lane loops, per-lane arrays and the collectives.
"""

from __future__ import annotations

import math

import numpy as np

from ... import dtypes as D
from .. import ir
from ..analysis.regions import GroupIf, GroupLoop, LaneRegion, Schedule
from ..ir import ScalarType
from ..typer import concrete
from .pysource import HALF, SourceEmitter, ctor

STACK_BYTES = 64 * 1024  # per-chunk arrays up to this size live on the worker's stack


def storage(dtype: D.DType) -> str:
    return "np.uint16" if dtype in HALF else "np." + dtype.np_dtype.name


class CpuCodegen(SourceEmitter):
    """Generates the source of ``_kernel`` for one specialisation."""

    def __init__(self, kir: ir.KernelIR, schedule: Schedule | None, grid_ndim: int):
        super().__init__(kir, grid_ndim)
        self.schedule = schedule
        self.lane_arrays = schedule.lane_arrays if schedule else set()
        self.scratch: list[tuple[str, str, int]] = []  # (name, dtype ctor, size)
        self.stack_arrays: dict[str, tuple[tuple[int, ...], str]] = {}  # name → shape, dtype
        self.stack_bytes = 0

    def generate(self) -> str:
        args = self.kernel_args()
        if self.kir.grouped:
            args.append("_nchunks")
        self.emit(f"def _kernel({', '.join(args)}):")
        self.indent += 1
        self.emit(f'"""Tessera kernel {self.kir.name} ({self.kir.loc}) for the CPU."""')
        if self.kir.grouped:
            self.grouped_body()
        else:
            self.flat_body()
        return "\n".join(self.lines) + "\n"

    def flat_body(self) -> None:
        dims = range(self.grid_ndim)
        for d in dims:
            loop = "_prange" if d == 0 else "range"
            self.emit(f"for _t{d} in {loop}(_N{d}):")
            self.indent += 1
        lin = "_t0"
        for d in list(dims)[1:]:
            lin = f"({lin} * _N{d} + _t{d})"
        self.emit(f"_lin = {lin}")
        self.lane_block(self.kir.body)

    def grouped_body(self) -> None:
        g = " * ".join(f"_N{d}" for d in range(self.grid_ndim))
        self.emit(f"_G = {g}")
        self.emit("s_grid_groups = _G")
        self.emit("for _c in _prange(_nchunks):")
        self.indent += 1
        for a in self.kir.allocs:
            shape = tuple(int(x) for x in a.shape)
            self.emit(f"_sh{a.slot} = {self.scratch_array(shape, storage(a.dtype))}", a.loc)
        for v in sorted(self.lane_arrays):
            t = self.types[v]
            array = self.scratch_array((self.lanes,), ctor(t.dtype))
            self.emit(f"_la_{self.name(v)} = {array}")
        body_start = len(self.lines)
        self.indent += 1
        self.group_items(self.schedule.items)
        self.indent -= 1
        body = self.lines[body_start:]
        del self.lines[body_start:]
        for name, dt, size in self.scratch:
            self.emit(f"{name} = {self.scratch_array((size,), dt)}")
        self.emit("for _g in range((_c * _G) // _nchunks, ((_c + 1) * _G) // _nchunks):")
        self.indent += 1
        rest = "_g"
        for d in reversed(range(1, self.grid_ndim)):
            self.emit(f"_g{d} = {rest} % _N{d}")
            rest = f"({rest} // _N{d})"
        self.emit(f"_g0 = {rest}")
        self.indent -= 1
        self.lines.extend(body)

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
        for item in items:
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
        if isinstance(s, ir.SharedAlloc):
            self.emit(f"{self.name(s.target)} = _sh{s.slot}", s.loc)
        elif isinstance(s, ir.Barrier):
            self.emit("# tbarrier(): the lane loops before and after are the barrier", s.loc)
        elif isinstance(s, ir.CopyWait):
            self.emit("# cp_async.wait(): copies complete eagerly on the CPU", s.loc)
        elif isinstance(s, ir.CopyAsync):
            self.copy_async(s)
        elif isinstance(s, ir.Assign) and isinstance(s.value, ir.Reduce):
            self.reduce(s)
        else:
            self.lane_stmt(s)

    def sinkable(self, item: GroupLoop) -> bool:
        """A uniform ``for`` holding a single region can run inside the outer lane loops
        (each lane still runs the loop in order), which keeps a lane row's values hot
        and leaves the innermost lane loop vectorisable: ``for l0: for k: for l1:``."""
        return (
            len(self.tile) > 1
            and isinstance(item.stmt, ir.For)
            and len(item.body) == 1
            and isinstance(item.body[0], LaneRegion)
        )

    def lane_region(self, r: LaneRegion, sunk: ir.For | None = None) -> None:
        used = (r.reads | r.writes) & self.lane_arrays
        remat = [self.schedule.remat[v] for v in self.schedule.remat_needed(r)]
        needs_lane = bool(used) or any(
            isinstance(e, ir.LaneId) and (e.axis is None or len(self.tile) == 1)
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

    def reduce(self, s: ir.Assign) -> None:
        r = s.value
        t = concrete(r.type)
        scratch = f"_scr{len(self.scratch)}"
        combine = {"sum": "_add", "max": "_fmax", "min": "_fmin"}[r.op]
        if r.over == "lanes":
            size = self.lanes
            src = self.name(r.source.name)
            if r.source.name in self.lane_arrays:  # else a uniform value, the same for all
                src = f"_la_{src}[_i]"
            self.emit(f"for _i in range({size}):", s.loc)
            self.emit(f"    {scratch}[_i] = {self.conv(src, self.types[r.source.name], t)}")
        else:
            at = self.types[r.source.name]
            shape = self.shared_shape(r.source.name, s)
            size = math.prod(shape)
            arr = self.name(r.source.name)
            idx = ", ".join(f"_i{d}" for d in range(len(shape)))
            lin = "_i0"
            for d in range(1, len(shape)):
                lin = f"({lin} * {shape[d]} + _i{d})"
            for d, n in enumerate(shape):
                self.emit(f"{'    ' * d}for _i{d} in range({n}):", s.loc if d == 0 else None)
            value = self.conv(self.load_storage(f"{arr}[{idx}]", at.dtype), ScalarType(at.dtype), t)
            self.emit(f"{'    ' * len(shape)}{scratch}[{lin}] = {value}")
        self.scratch.append((scratch, ctor(t.dtype), size))
        target_t = self.types[s.target]
        value = self.conv(f"_tree_reduce({scratch}, {size}, {combine})", t, target_t)
        self.emit(f"{self.name(s.target)} = {value}", s.loc)

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

    def atomic_add(self, array: str, dtype: D.DType, idx: str, value: str) -> str:
        args = f"{array}, {idx}, {value}"
        if dtype == D.f16:
            return f"_atomic_add_16({args}, _h2f, _f2h)"
        if dtype == D.bf16:
            return f"_atomic_add_16({args}, _b2f, _f2b)"
        return f"_atomic_add({args})"
