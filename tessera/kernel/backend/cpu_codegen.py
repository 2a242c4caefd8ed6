"""Kernel IR → the source text of a Numba function (the CPU target's code generator).

The output is readable Python: one ``prange`` over chunks of groups (or over tiles of a
flat kernel), the group schedule from region formation, and one lane loop per region.
Every statement carries a ``# line N`` comment pointing back at the kernel source.
Types are made explicit with NumPy scalar constructors so Numba infers exactly the
types the typer chose (Numba would otherwise widen small ints to int64).
"""

from __future__ import annotations

import math

import numpy as np

from ... import dtypes as D
from ...errors import KernelError
from .. import ir
from ..analysis.regions import GroupIf, GroupLoop, LaneRegion, Schedule
from ..ir import ArrayType, ScalarType
from ..typer import concrete, promote

HALF = (D.f16, D.bf16)
STACK_BYTES = 64 * 1024  # per-chunk arrays up to this size live on the worker's stack
NARROW_INT = {D.i8, D.i16, D.i32, D.u8, D.u16, D.u32, D.u64}


def ctor(dtype: D.DType) -> str:
    """The NumPy constructor of ``dtype``'s compute representation in generated code."""
    if dtype in HALF:
        return "np.float32"
    return "np." + dtype.np_dtype.name


def storage(dtype: D.DType) -> str:
    return "np.uint16" if dtype in HALF else "np." + dtype.np_dtype.name


class CpuCodegen:
    """Generates the source of ``_kernel`` for one specialisation."""

    def __init__(self, kir: ir.KernelIR, schedule: Schedule | None, grid_ndim: int):
        self.kir = kir
        self.schedule = schedule
        self.grid_ndim = grid_ndim
        self.types = kir.var_types
        self.params = {p.name: p for p in kir.params}
        self.lines: list[str] = []
        self.indent = 0
        self.lane_arrays = schedule.lane_arrays if schedule else set()
        self.scratch: list[tuple[str, str, int]] = []  # (name, dtype ctor, size)
        self.stack_arrays: dict[str, tuple[tuple[int, ...], str]] = {}  # name → shape, dtype
        self.stack_bytes = 0
        # with bounds checks on: (array, axis, rank, loc) of each checked index, by site
        self.check_sites: list[tuple[str, int, int, object]] = []
        self.tile = kir.tile_shape
        self.lanes = math.prod(self.tile) if kir.grouped else 1

    # ------------------------------------------------------------------ naming
    def name(self, n: str) -> str:
        p = self.params.get(n)
        if p is not None:
            return "p_" + n
        if n in self.kir.symbols or n == "grid_groups":
            return "s_" + n
        return "v_" + n

    def emit(self, line: str, loc=None) -> None:
        suffix = f"  # line {loc.line}" if loc is not None else ""
        self.lines.append("    " * self.indent + line + suffix)

    # ------------------------------------------------------------------ entry
    def generate(self) -> str:
        arrays = [p.name for p in self.kir.params if p.kind == "array"]
        scalars = [p.name for p in self.kir.params if p.kind == "scalar"]
        args = [self.name(n) for n in arrays + scalars]
        args += ["s_" + s for s in self.kir.symbols]
        args += [f"_N{d}" for d in range(self.grid_ndim)]
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

    def nested(self, fn) -> None:
        self.indent += 1
        fn()
        self.indent -= 1

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
            src = f"_la_{self.name(r.source.name)}"
            self.emit(f"for _i in range({size}):", s.loc)
            self.emit(
                f"    {scratch}[_i] = {self.conv(src + '[_i]', self.types[r.source.name], t)}"
            )
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

    def shared_shape(self, var: str, at: ir.Stmt) -> tuple[int, ...]:
        """The shape of the shared array a variable holds; every candidate must agree."""
        shapes = set()
        for a in self.kir.allocs:
            if a.target == var:
                shapes.add(tuple(int(x) for x in a.shape))
        if not shapes:  # a variable bound by assignment from shared arrays (a swap)
            shapes = {
                tuple(int(x) for x in a.shape)
                for a in self.kir.allocs
                if len(a.shape) == self.types[var].ndim and a.dtype == self.types[var].dtype
            }
        if len(shapes) != 1:
            raise KernelError(
                self.kir.name, f"cannot tell the shape of shared array '{var}'", at.loc
            )
        return shapes.pop()

    def copy_async(self, s: ir.CopyAsync) -> None:
        dst, src = self.name(s.dst.name), self.name(s.src.name)
        src_t = self.types[s.src.name]
        sliced = s.sliced or [True] * src_t.ndim
        starts = s.starts or [ir.Const(s.loc, 0)] * src_t.ndim
        stops = s.stops or [None] * src_t.ndim
        self.emit(f"# cp_async.shared.global_({s.dst.name}, {s.src.name}[...]): eager copy", s.loc)
        src_idx, conds, q = [], [], 0
        for a, (is_slice, start, stop) in enumerate(zip(sliced, starts, stops)):
            self.emit(f"_cs{a} = {self.conv(self.expr(start), start.type, ir.ScalarType(D.i64))}")
            end = f"{src}.shape[{a}]"
            if stop is not None:
                end = f"min({end}, {self.conv(self.expr(stop), stop.type, ir.ScalarType(D.i64))})"
            self.emit(f"_ce{a} = {end}")
            if is_slice:
                src_idx.append(f"_cs{a} + _q{q}")
                conds.append(f"0 <= _cs{a} + _q{q} < _ce{a}")
                q += 1
            else:
                src_idx.append(f"_cs{a}")
                conds.append(f"0 <= _cs{a} < _ce{a}")
        for d in range(q):
            self.emit(f"{'    ' * d}for _q{d} in range({dst}.shape[{d}]):")
        pad = "    " * q
        dst_idx = ", ".join(f"_q{d}" for d in range(q))
        self.emit(f"{pad}if {' and '.join(conds)}:")
        self.emit(f"{pad}    {dst}[{dst_idx}] = {src}[{', '.join(src_idx)}]")
        self.emit(f"{pad}else:")
        self.emit(f"{pad}    {dst}[{dst_idx}] = 0")

    # ------------------------------------------------------------------ lane level
    def lane_block(self, body: list[ir.Stmt]) -> None:
        if not body:
            self.emit("pass")
        for s in body:
            self.lane_stmt(s)

    def loop_header(self, s: ir.For | ir.While) -> None:
        if isinstance(s, ir.For):
            i64 = ScalarType(D.i64)
            parts = [self.conv(self.expr(e), e.type, i64) for e in (s.start, s.stop, s.step)]
            self.emit(f"for {self.name(s.var)} in range({', '.join(parts)}):", s.loc)
        else:
            self.emit(f"while {self.truth(s.cond)}:", s.loc)

    def lane_stmt(self, s: ir.Stmt) -> None:
        if isinstance(s, ir.Assign):
            t = self.types[s.target]
            if isinstance(t, ArrayType):
                self.emit(f"{self.name(s.target)} = {self.name(s.value.name)}", s.loc)
            else:
                value = self.conv(self.expr(s.value), s.value.type, t)
                self.emit(f"{self.name(s.target)} = {value}", s.loc)
        elif isinstance(s, ir.Store):
            at = self.types[s.array.name]
            target = f"{self.name(s.array.name)}[{self.index(s.indices, s.array, s.loc)}]"
            value = self.store_value(s.value, at.dtype)
            if s.mask is not None:
                self.emit(f"if {self.truth(s.mask)}:", s.loc)
                self.emit(f"    {target} = {value}")
            else:
                self.emit(f"{target} = {value}", s.loc)
        elif isinstance(s, ir.ExprStmt):
            self.emit(self.expr(s.value), s.loc)
        elif isinstance(s, ir.If):
            self.emit(f"if {self.truth(s.cond)}:", s.loc)
            self.nested(lambda: self.lane_block(s.body))
            if s.orelse:
                self.emit("else:")
                self.nested(lambda: self.lane_block(s.orelse))
        elif isinstance(s, (ir.For, ir.While)):
            self.loop_header(s)
            self.nested(lambda: self.lane_block(s.body))
        elif isinstance(s, ir.Break):
            self.emit("break", s.loc)
        elif isinstance(s, ir.Continue):
            self.emit("continue", s.loc)
        else:
            raise KernelError(
                self.kir.name, f"internal: cannot lower {type(s).__name__} in a lane region", s.loc
            )

    # ------------------------------------------------------------------ expressions
    def conv(self, code: str, src: ir.Type, dst: ir.Type) -> str:
        """Convert ``code`` from type ``src`` to ``dst`` in compute representation."""
        s, d = concrete(src).dtype, concrete(dst).dtype
        if s == d:
            return code
        if d == D.bool_:
            return f"({code} != 0)"
        if d == D.f16:
            return f"_round_f16({code})"
        if d == D.bf16:
            return f"_round_bf16({code})"
        if s in HALF and d == D.f32:
            return code
        return f"{ctor(d)}({code})"

    def truth(self, e: ir.Expr) -> str:
        code = self.expr(e)
        return code if concrete(e.type).dtype == D.bool_ else f"({code} != 0)"

    def index(self, indices: list[ir.Expr], array: ir.Name, loc) -> str:
        # Unsigned indices: Tessera has no negative-index wraparound (a negative index is
        # out of bounds, as on a GPU), and without Numba's wraparound select LLVM
        # vectorises guarded loads and stores.
        if not self.kir.boundscheck:
            return ", ".join(f"np.uint64({self.expr(i)})" for i in indices)
        out = []
        for axis, i in enumerate(indices):
            site = len(self.check_sites)
            self.check_sites.append((array.name, axis, len(indices), loc))
            extent = f"{self.name(array.name)}.shape[{axis}]"
            out.append(f"np.uint64(_check_index({self.expr(i)}, {extent}, {site}))")
        return ", ".join(out)

    def load_storage(self, code: str, dtype: D.DType) -> str:
        if dtype == D.f16:
            return f"_h2f({code})"
        if dtype == D.bf16:
            return f"_b2f({code})"
        return code

    def store_value(self, e: ir.Expr, dtype: D.DType) -> str:
        if dtype == D.f16:
            return f"_f2h({self.conv(self.expr(e), e.type, ScalarType(D.f32))})"
        if dtype == D.bf16:
            return f"_f2b({self.conv(self.expr(e), e.type, ScalarType(D.f32))})"
        return self.conv(self.expr(e), e.type, ScalarType(dtype))

    def const(self, value: object, t: ScalarType) -> str:
        dtype = concrete(t).dtype
        if dtype == D.bool_:
            return "True" if value else "False"
        if dtype.is_float:
            v = float(value)
            if dtype == D.f16:
                v = float(D.f16.np_dtype.type(v))
            elif dtype == D.bf16:
                v = float(D.bf16.np_dtype.type(v))
            text = (
                repr(v)
                if math.isfinite(v)
                else ("math.nan" if v != v else ("math.inf" if v > 0 else "-math.inf"))
            )
            return f"{ctor(dtype)}({text})"
        return f"{ctor(dtype)}({int(value)})"

    def expr(self, e: ir.Expr) -> str:
        t = e.type
        if isinstance(e, ir.Const):
            return self.const(e.value, t)
        if isinstance(e, ir.Name):
            if e.name == "grid_groups":
                return "s_grid_groups"
            return self.name(e.name)
        if isinstance(e, ir.BinOp):
            return self.binop(e)
        if isinstance(e, ir.UnaryOp):
            if e.op == "not":
                return f"(not {self.truth(e.operand)})"
            if e.op == "~" and concrete(t).dtype == D.bool_:
                return f"(not {self.expr(e.operand)})"
            code = f"({e.op}{self.conv(self.expr(e.operand), e.operand.type, t)})"
            return self.wrap(code, t)
        if isinstance(e, ir.Compare):
            c = promote(e.left.type, e.right.type)
            a = self.conv(self.expr(e.left), e.left.type, c)
            b = self.conv(self.expr(e.right), e.right.type, c)
            return f"({a} {e.op} {b})"
        if isinstance(e, ir.BoolOp):
            return "(" + f" {e.op} ".join(self.truth(v) for v in e.values) + ")"
        if isinstance(e, ir.IfExp):
            a = self.conv(self.expr(e.then), e.then.type, t)
            b = self.conv(self.expr(e.orelse), e.orelse.type, t)
            return f"({a} if {self.truth(e.cond)} else {b})"
        if isinstance(e, ir.Cast):
            if e.dtype in HALF:  # an explicit cast rounds, even from a 16-bit value
                rounding = "_round_f16" if e.dtype == D.f16 else "_round_bf16"
                return f"{rounding}({self.expr(e.value)})"
            return self.conv(self.expr(e.value), e.value.type, t)
        if isinstance(e, ir.MathCall):
            return self.math(e)
        if isinstance(e, ir.Load):
            return self.load(e)
        if isinstance(e, ir.Shape):
            return f"np.int64({self.name(e.array.name)}.shape[{e.axis}])"
        if isinstance(e, ir.LaneId):
            return self.lane_id(e.axis)
        if isinstance(e, ir.GroupId):
            return "np.int64(_g)" if e.axis is None else self.group_axis(e.axis)
        if isinstance(e, ir.GroupSize):
            return f"np.int64({self.lanes})"
        if isinstance(e, ir.AtomicAdd):
            at = self.types[e.array.name]
            target_t = ScalarType(D.f32 if at.dtype in HALF else at.dtype)
            value = self.conv(self.expr(e.value), e.value.type, target_t)
            idx = self.index(e.indices, e.array, e.loc)
            idx = idx if len(e.indices) == 1 else f"({idx})"
            args = f"{self.name(e.array.name)}, {idx}, {value}"
            if at.dtype == D.f16:
                return f"_atomic_add_16({args}, _h2f, _f2h)"
            if at.dtype == D.bf16:
                return f"_atomic_add_16({args}, _b2f, _f2b)"
            return f"_atomic_add({args})"
        raise KernelError(self.kir.name, f"internal: cannot lower {type(e).__name__}", e.loc)

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

    def wrap(self, code: str, t: ir.Type) -> str:
        dtype = concrete(t).dtype
        return f"{ctor(dtype)}({code})" if dtype in NARROW_INT else code

    def binop(self, e: ir.BinOp) -> str:
        t = e.type
        a = self.conv(self.expr(e.left), e.left.type, t)
        b = self.conv(self.expr(e.right), e.right.type, t)
        if e.op in ("&", "|", "^") and concrete(t).dtype == D.bool_:
            return f"({a} {e.op} {b})"
        code = f"({a} {e.op} {b})"
        if concrete(t).dtype.is_float and e.op in ("//", "%", "**"):
            code = f"{ctor(concrete(t).dtype)}{code}"
        return self.wrap(code, t)

    def math(self, e: ir.MathCall) -> str:
        t = concrete(e.type)
        if e.func in ("min", "max"):
            fn = "_fmin" if e.func == "min" else "_fmax"
            args = [self.conv(self.expr(a), a.type, t) for a in e.args]
            code = args[0]
            for a in args[1:]:
                code = f"{fn}({code}, {a})"
            return code
        if e.func == "abs":
            return self.wrap(f"abs({self.conv(self.expr(e.args[0]), e.args[0].type, t)})", t)
        arg_t = concrete(e.args[0].type)
        if len(e.args) == 2:
            arg_t = concrete(promote(e.args[0].type, e.args[1].type))
        if e.func in ("floor", "ceil", "trunc"):
            if not arg_t.dtype.is_float:
                return self.expr(e.args[0])
            return f"np.int64(math.{e.func}({self.expr(e.args[0])}))"
        if e.func in ("isnan", "isinf", "isfinite"):
            if not arg_t.dtype.is_float:
                return "True" if e.func == "isfinite" else "False"
            return f"math.{e.func}({self.expr(e.args[0])})"
        args = ", ".join(self.conv(self.expr(a), a.type, t) for a in e.args)
        return f"{ctor(t.dtype)}(math.{e.func}({args}))"

    def load(self, e: ir.Load) -> str:
        at = self.types[e.array.name]
        array = self.name(e.array.name)
        code = self.load_storage(f"{array}[{self.index(e.indices, e.array, e.loc)}]", at.dtype)
        if e.mask is None:
            return code
        other = self.conv(self.expr(e.other), e.other.type, ScalarType(at.dtype))
        return f"({code} if {self.truth(e.mask)} else {other})"
