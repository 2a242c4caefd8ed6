"""Kernel IR → Python source for Numba: the part every Numba-based target shares.

Both the CPU target (region formation, lanes as loops) and the CUDA target (one thread per
lane) compile a kernel by generating a Python function and handing it to Numba. What a
*lane* does is the same on both: the same expressions, casts, stores and control flow.
That emission lives here, once; the targets subclass :class:`SourceEmitter` and supply
what differs — the frame (how lanes and groups are numbered and run) and one lowering per
primitive (``targets/<name>/lowerings.py``). How 16-bit floats are stored is the target's
``storage`` (one decision, read here).

Types are made explicit with NumPy scalar constructors so Numba infers exactly the types
the typer chose (Numba would otherwise widen small ints to int64). Every statement carries
a ``# line N`` comment pointing back at the kernel source.
"""

from __future__ import annotations

import linecache
import math

import numpy as np

from ... import dtypes as D
from ...errors import KernelError
from ...tile import primitives as P
from .. import ir
from ..ir import ArrayType, ScalarType, TileType
from ..typer import compare_type, concrete, promote
from . import integers, own_math, printing, semantics
from .target import Target
from .tile_source import TileSource

HALF = D.COMPUTED_IN_F32
# the runtime's conversions of the floats held in f32 and stored as their bits: (bits to
# f32, f32 to bits, f32 rounded to the type and back)
NARROW_FLOATS = {
    D.f16: ("_h2f", "_f2h", "_round_f16"),
    D.bf16: ("_b2f", "_f2b", "_round_bf16"),
    D.f8e4m3: ("_e4m3_f32", "_f32_e4m3", "_round_e4m3"),
    D.f8e5m2: ("_e5m2_f32", "_f32_e5m2", "_round_e5m2"),
}
SMALL = 2**32  # constant range bounds this small cannot overflow Numba's range
NARROW_INT = {D.i8, D.i16, D.i32, D.u8, D.u16, D.u32, D.u64}


def combine(op: str, dtype: D.DType) -> str:
    """The generated code's name of a group reduction's combine function (semantics.py)."""
    return f"_{semantics.combine(op, dtype).__name__}"


def trip_count(start: str, stop: str, step: str) -> str:
    """The code of the number of values of ``range(start, stop, step)`` (names of i64
    values), as a uint64 computed without overflow; 0 for a zero step (integers.py)."""
    u = "np.uint64"
    up = f"({u}({stop}) - {u}({start}) - {u}(1)) // {u}({step}) + {u}(1)"
    down = f"({u}({start}) - {u}({stop}) - {u}(1)) // ({u}(0) - {u}({step})) + {u}(1)"
    return (
        f"({up} if {step} > 0 and {start} < {stop} "
        f"else {down} if {step} < 0 and {start} > {stop} else {u}(0))"
    )


def subgroup_source(prim: P.Primitive, pos: str, delta: str, width: int) -> str:
    """The code of the sub-group position a shuffle reads for the lane at position ``pos``
    (its own where that is outside the sub-group). The bounds are compared with ``delta``
    itself, so no sum overflows whatever the offset (the debug target computes exactly)."""
    if prim is P.shuffle:
        return f"({delta} & {width - 1})"
    if prim is P.shuffle_xor:
        k = f"({pos} ^ {delta})"
        return f"({k} if 0 <= {k} < {width} else {pos})"
    if prim is P.shuffle_down:
        return f"({pos} + {delta} if -{pos} <= {delta} < {width} - {pos} else {pos})"
    return f"({pos} - {delta} if {pos} - {width} < {delta} <= {pos} else {pos})"


def ctor(dtype: D.DType) -> str:
    """The NumPy constructor of ``dtype``'s compute representation in generated code."""
    if dtype in HALF:
        return "np.float32"
    return "np." + dtype.np_dtype.name


class SourceEmitter(TileSource):
    """Emits a lane's statements and expressions; subclasses add the kernel's frame."""

    # math functions the target's Numba has under another name (default: math.<name>)
    math_functions: dict[str, str] = {}
    # whether bounds-checked launches (TESSERA_BOUNDSCHECK) check this target's code
    checked_launches = True
    # integer operations computed by calling a rule of integers.py (by operator)
    integer_rules = frozenset({"<<", ">>", "**", "//", "%", "abs"})

    def __init__(self, kir: ir.KernelIR, grid_ndim: int, target: Target):
        self.kir = kir
        self.target = target
        self.grid_ndim = grid_ndim
        self.types = kir.var_types
        self.params = {p.name: p for p in kir.params}
        self.lines: list[str] = []
        self.indent = 0
        self.tile = kir.tile_shape
        self.lanes = math.prod(self.tile) if kir.grouped else 1
        self.group_lanes = self.lanes  # the declared lanes (a target may run more threads)
        self.own_math_calls = 0  # calls of the language's own exp, log, tanh, erf emitted
        self.checked = kir.boundscheck and self.checked_launches  # indices and asserts
        # with bounds checks on: (array, axis, rank, loc) of each checked index, by site
        self.check_sites: list[tuple[str, int, int, object]] = []
        self.assert_sites: list[tuple[str, object]] = []  # (message, loc) of each assert
        # the code of each weak float literal emitted, and its Python value: one that
        # meets an f64 becomes that f64 exactly, not the f32 of a lone literal (conv)
        self.weak_literals: dict[str, float] = {}

    # ------------------------------------------------------------------ target hooks
    def collective(self, s: ir.Stmt) -> None:
        """Emit a collective statement met in lane code (one-thread-per-lane targets)."""
        raise KernelError(self.kir.name, f"internal: {type(s).__name__} in lane code", s.loc)

    def lower(self, call: ir.PrimCall, site: ir.Stmt | None = None) -> str | None:
        """The target's lowering of a primitive call: the code of its value, or (a
        collective, ``site`` its statement) None after emitting its statements."""
        return self.target.lowering(self.kir.name, call)(self, call, site)

    def print_line(self, s: ir.Print) -> None:
        """``print``: through Numba's print, the prefix made a string of its own (Numba
        separates items by a space, and the prefix's ids are not separated)."""
        pieces = printing.prefix_template(self.kir, self.grid_ndim).split("{}")
        prefix = repr(pieces[0])
        for code, piece in zip(self.print_ids(), pieces[1:]):
            prefix += f" + str({code}) + {piece!r}"
        items = [repr(i) if isinstance(i, str) else self.expr(i) for i in s.items]
        self.emit(f"print({', '.join([prefix, *items])})", s.loc)

    def check_assert(self, s: ir.Assert) -> None:
        """A checked ``assert``: a failure raises AssertionError(site, *ids), which the
        program turns into a KernelAssertionError naming the lane and the line."""
        site = len(self.assert_sites)
        self.assert_sites.append((s.message, s.loc))
        self.emit(f"if not {self.truth(s.cond)}:", s.loc)
        self.emit(f"    raise AssertionError({', '.join([str(site), *self.print_ids()])})")

    def print_ids(self) -> list[str]:
        """The code of the ids a print's prefix shows: the group's then the lane's (a
        grouped kernel), or the tile's (a flat one)."""
        if not self.kir.grouped:
            return [self.lane_id(d) for d in range(self.grid_ndim)]
        groups = [self.group_axis(d) for d in range(self.grid_ndim)]
        return groups + [self.lane_id(d) for d in range(len(self.tile))]

    # ------------------------------------------------------------------ shared helpers
    def kernel_args(self) -> list[str]:
        """The generated function's parameters, in the order launches pass them: arrays,
        scalars, symbols, then the grid's extents."""
        arrays = [p.name for p in self.kir.params if p.kind == "array"]
        scalars = [p.name for p in self.kir.params if p.kind == "scalar"]
        args = [self.name(n) for n in arrays + scalars]
        args += ["s_" + s for s in self.kir.symbols]
        return args + [f"_N{d}" for d in range(self.grid_ndim)]

    def source_file(self, target: str) -> str:
        """Register the generated source with linecache under a unique name, so tracebacks
        and debuggers show its lines; returns that name."""
        filename = f"<tessera-{target} {self.kir.name} {id(self):x}>"
        source = "\n".join(self.lines) + "\n"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        return filename

    def copy_bounds(self, s: ir.CopyAsync) -> tuple[str, str, int, list[str], list[str]]:
        """Emit the source slice's bounds of a ``cp_async`` (``_cs<axis>`` start and
        ``_ce<axis>`` end, clipped to the array); returns the destination and source
        names, the number of sliced axes and, in terms of ``_q<d>`` (the destination
        index), the source index and the in-range conditions."""
        dst, src = self.name(s.dst.name), self.name(s.src.name)
        if s.dst_lead:  # ``As[j]``: the copy fills a sub-array (a view of the shared array)
            i64 = ScalarType(D.i64)
            lead = [self.conv(self.expr(e), e.type, i64) for e in s.dst_lead]
            self.emit(f"_cpd = {dst}[{', '.join(lead)}]")
            dst = "_cpd"
        src_t = self.types[s.src.name]
        sliced = s.sliced or [True] * src_t.ndim
        starts = s.starts or [ir.Const(s.loc, 0)] * src_t.ndim
        stops = s.stops or [None] * src_t.ndim
        i64 = ScalarType(D.i64)
        src_idx, conds, q = [], [], 0
        for a, (is_slice, start, stop) in enumerate(zip(sliced, starts, stops)):
            self.emit(f"_cs{a} = {self.conv(self.expr(start), start.type, i64)}")
            end = f"{src}.shape[{a}]"
            if stop is not None:
                end = f"min({end}, {self.conv(self.expr(stop), stop.type, i64)})"
            self.emit(f"_ce{a} = {end}")
            if is_slice:  # a start near the end of i64 wraps negative: out of range
                index = self.arith(f"_cs{a}", "+", f"_q{q}", i64)
                src_idx.append(index)
                conds.append(f"0 <= {index} < _ce{a}")
                q += 1
            else:
                src_idx.append(f"_cs{a}")
                conds.append(f"0 <= _cs{a} < _ce{a}")
        return dst, src, q, src_idx, conds

    def shared_shape(self, var: str, at: ir.Stmt) -> tuple[int, ...]:
        """The shape of the shared array a variable holds; every candidate must agree
        (a variable bound by swapping shared arrays may hold any of its kind)."""
        t = self.types[var]
        if any(a.dynamic for a in self.kir.allocs if a.target == var):
            raise KernelError(
                self.kir.name,
                f"'{var}' is a tshared.dynamic array, sized at launch; this needs a shared array "
                "of constant shape (tshared.alloc)",
                at.loc,
            )
        shapes = {tuple(int(x) for x in a.shape) for a in self.kir.allocs if a.target == var}
        if not shapes:
            shapes = {
                tuple(int(x) for x in a.shape)
                for a in self.kir.allocs
                if len(a.shape) == t.ndim and a.dtype == t.dtype and not a.dynamic
            }
        if len(shapes) != 1:
            raise KernelError(
                self.kir.name, f"cannot tell the shape of shared array '{var}'", at.loc
            )
        return shapes.pop()

    # How 16-bit floats are stored (``code`` is an element) and rounded (``code`` is f32
    # or wider): as uint16 bits where the target's storage says so (converted by the
    # runtime's _h2f/_f2h/_b2f/_f2b, rounded by _round_f16/_round_bf16), else natively.
    def storage(self, dtype: D.DType) -> str:
        """The NumPy constructor of ``dtype``'s storage in arrays."""
        return "np." + (self.target.storage(dtype) or dtype.np_dtype).name

    def bits(self, dtype: D.DType) -> bool:
        return self.target.storage(dtype) is not None

    def half_to_f32(self, code: str, dtype: D.DType) -> str:
        if not self.bits(dtype):
            return f"np.float32({code})"
        return f"{NARROW_FLOATS[dtype][0]}({code})"

    def f32_to_half(self, code: str, dtype: D.DType) -> str:
        if not self.bits(dtype):
            return f"{self.storage(dtype)}({code})"
        return f"{NARROW_FLOATS[dtype][1]}({code})"

    def round_half(self, code: str, dtype: D.DType) -> str:
        if not self.bits(dtype):
            return f"np.float32({self.storage(dtype)}(np.float32({code})))"
        return f"{NARROW_FLOATS[dtype][2]}({code})"

    # ------------------------------------------------------------------ naming
    def name(self, n: str) -> str:
        p = self.params.get(n)
        if p is not None:
            return "p_" + n
        if n in self.kir.symbols or n == "grid_groups":
            return "s_" + n
        user, _, tag = n.partition(".")
        # a derived name (``i.1``: ir.derived_name) becomes ``v1_i``: tags hold no "_",
        # so it meets neither a user's ``v_<name>`` nor another derived name
        return f"v{tag}_{user}" if tag else "v_" + n

    def unflatten(self, linear: str, prefix: str, extents: list) -> None:
        """Emit ``<prefix><d>`` for each axis of a row-major ``linear`` index over
        ``extents`` (the last axis varies fastest)."""
        rest = linear
        for d in reversed(range(1, len(extents))):
            self.emit(f"{prefix}{d} = {rest} % {extents[d]}")
            rest = f"({rest} // {extents[d]})"
        self.emit(f"{prefix}0 = {rest}")

    def emit(self, line: str, loc=None) -> None:
        suffix = f"  # line {loc.line}" if loc is not None else ""
        self.lines.append("    " * self.indent + line + suffix)

    # ------------------------------------------------------------------ entry
    def nested(self, fn) -> None:
        self.indent += 1
        fn()
        self.indent -= 1

    def lane_block(self, body: list[ir.Stmt]) -> None:
        if not body:
            self.emit("pass")
        for s in body:
            self.lane_stmt(s)

    def trip_count(self, start: str, stop: str, step: str) -> str:
        """The code of a range loop's trip count (:func:`trip_count`; a target may call
        the same rule as a function, integers.trip_count)."""
        return trip_count(start, stop, step)

    def block_origin(self, origin: str, size: int, extent: str) -> str:
        """The code of a block's origin along one axis (integers.block_origin)."""
        return f"{origin} if -{size} < {origin} < {extent} else np.int64(-{size})"

    def loop_header(self, s: ir.For | ir.While) -> None:
        """A loop's first line(s); its body follows one level deeper. A ``range`` loop
        whose bounds are not small constants counts its trips without overflow
        (:func:`trip_count`) and computes the variable from the trip."""
        if isinstance(s, ir.While):
            self.emit(f"while {self.truth(s.cond)}:", s.loc)
            return
        i64 = ScalarType(D.i64)
        start, stop, step = (self.conv(self.expr(e), e.type, i64) for e in s.exprs())
        var = self.name(s.var)
        if all(isinstance(e, ir.Const) and abs(e.value) < SMALL for e in s.exprs()):
            self.emit(f"for {var} in range({start}, {stop}, {step}):", s.loc)
            return
        a, b, c, k = (f"{v}{len(self.lines)}" for v in ("_ra", "_rb", "_rc", "_rk"))
        self.emit(f"{a}, {b}, {c} = {start}, {stop}, {step}", s.loc)
        self.emit(f"for {k} in range({self.trip_count(a, b, c)}):")
        self.emit(f"    {var} = np.int64(np.uint64({a}) + np.uint64({k}) * np.uint64({c}))")

    def lane_stmt(self, s: ir.Stmt) -> None:
        if ir.is_collective(s) or isinstance(s, ir.SharedAlloc):
            self.collective(s)
        elif isinstance(s, ir.Assign):
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
        elif isinstance(s, ir.Print):
            self.print_line(s)
        elif isinstance(s, ir.Assert):
            if self.checked:  # compiled out unless checks are on
                self.check_assert(s)
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
        if d == D.f64 and src.weak and code in self.weak_literals:  # the literal's value
            return self.const(self.weak_literals[code], dst)
        if d == D.bool_:
            return f"({code} != 0)"
        if d in HALF:
            return self.round_half(code, d)
        if s in HALF and d == D.f32:
            return code
        if s.is_float and d.is_int:  # saturating, NaN to 0 (integers.py)
            return f"_f2i_{d.np_dtype.name}({code})"
        return f"{ctor(d)}({code})"

    def truth(self, e: ir.Expr) -> str:
        code = self.expr(e)
        return code if concrete(e.type).dtype == D.bool_ else f"({code} != 0)"

    def index(self, indices: list[ir.Expr], array: ir.Name, loc, shape=None) -> str:
        """An index tuple's code (unparenthesised); ``shape``: a tile's static shape (an
        array's extents are read from the array)."""
        # Unsigned indices: Tessera has no negative-index wraparound (a negative index is
        # out of bounds, as on a GPU), and without Numba's wraparound select LLVM
        # vectorises guarded loads and stores.
        if not self.checked:
            return ", ".join(f"np.uint64({self.expr(i)})" for i in indices)
        out = []
        for axis, i in enumerate(indices):
            site = len(self.check_sites)
            self.check_sites.append((array.name, axis, len(indices), loc))
            extent = shape[axis] if shape else f"{self.name(array.name)}.shape[{axis}]"
            out.append(f"np.uint64(_check_index({self.expr(i)}, {extent}, {site}))")
        return ", ".join(out)

    def load_storage(self, code: str, dtype: D.DType) -> str:
        return self.half_to_f32(code, dtype) if dtype in HALF else code

    def store_value(self, e: ir.Expr, dtype: D.DType) -> str:
        if dtype in HALF:
            return self.f32_to_half(self.conv(self.expr(e), e.type, ScalarType(D.f32)), dtype)
        return self.conv(self.expr(e), e.type, ScalarType(dtype))

    def const(self, value: object, t: ScalarType) -> str:
        dtype = concrete(t).dtype
        if dtype == D.bool_:
            return "True" if value else "False"
        if dtype.is_float:
            v = float(value)
            if dtype in D.FP8:  # as a value is rounded: to f32, then to 8 bits
                v = float(np.float32(v).astype(dtype.np_dtype))
            elif dtype in HALF:
                v = float(dtype.np_dtype.type(v))
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
            code = self.const(e.value, t)
            if t.weak and t.dtype.is_float:
                self.weak_literals[code] = e.value
            return code
        if isinstance(e, ir.Name):
            if e.name == "grid_groups":
                return "s_grid_groups"
            if isinstance(t, TileType):  # inside a tile statement: the current element
                return self.tile_read(e.name, t.shape)
            return self.name(e.name)
        if isinstance(e, ir.BinOp):
            return self.binop(e)
        if isinstance(e, ir.UnaryOp):
            if e.op == "not":
                return f"(not {self.truth(e.operand)})"
            if e.op == "~" and concrete(t).dtype == D.bool_:
                return f"(not {self.expr(e.operand)})"
            operand = self.conv(self.expr(e.operand), e.operand.type, t)
            if e.op == "-" and concrete(t).dtype.is_int:  # wraps at the type's width
                return self.arith(self.const(0, t), "-", operand, t)
            return self.wrap(f"({e.op}{operand})", t)
        if isinstance(e, ir.Compare):
            c = compare_type(e.left, e.right)
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
                return self.round_half(self.expr(e.value), e.dtype)
            return self.conv(self.expr(e.value), e.value.type, t)
        if isinstance(e, ir.MathCall):
            return self.math(e)
        if isinstance(e, ir.Load):
            return self.load(e)
        if isinstance(e, ir.Shape):
            return f"np.int64({self.name(e.array.name)}.shape[{e.axis}])"
        if isinstance(e, ir.PrimCall):
            return self.lower(e)
        raise KernelError(self.kir.name, f"internal: cannot lower {type(e).__name__}", e.loc)

    def wrap(self, code: str, t: ir.Type) -> str:
        dtype = concrete(t).dtype
        return f"{ctor(dtype)}({code})" if dtype in NARROW_INT else code

    def binop(self, e: ir.BinOp) -> str:
        t = e.type
        a = self.conv(self.expr(e.left), e.left.type, t)
        b = self.conv(self.expr(e.right), e.right.type, t)
        if e.op in ("&", "|", "^") and concrete(t).dtype == D.bool_:
            return f"({a} {e.op} {b})"
        dtype = concrete(t).dtype
        rule = integers.OPERATORS.get(e.op) if e.op in self.integer_rules else None
        if rule is not None and dtype.is_int:  # the language's rules (integers.py)
            return f"{rule}_{dtype.np_dtype.name}({a}, {b})"
        if dtype.is_float and e.op in ("//", "%", "**"):
            return f"{ctor(dtype)}({a} {e.op} {b})"
        return self.arith(a, e.op, b, t)

    def arith(self, a: str, op: str, b: str, t: ir.Type) -> str:
        """``a op b`` in type ``t``, wrapping at its width: 64-bit signed values are added,
        subtracted and multiplied as unsigned ones (integers.py: Numba's signed arithmetic
        may assume it never overflows); narrower ones are computed wider and truncated."""
        if concrete(t).dtype == D.i64 and op in "+-*":
            return f"np.int64(np.uint64({a}) {op} np.uint64({b}))"
        return self.wrap(f"({a} {op} {b})", t)

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
            code = self.conv(self.expr(e.args[0]), e.args[0].type, t)
            if t.dtype.is_int and t.dtype != D.bool_ and "abs" in self.integer_rules:
                return f"_abs_{t.dtype.np_dtype.name}({code})"  # abs(MIN) wraps (integers.py)
            return self.wrap(f"abs({code})", t)
        arg_t = concrete(e.args[0].type)
        if len(e.args) == 2:
            arg_t = concrete(promote(e.args[0].type, e.args[1].type))
        if e.func in ("floor", "ceil", "trunc"):
            if not arg_t.dtype.is_float:
                return self.expr(e.args[0])
            return f"_f2i_int64(np.{e.func}({self.expr(e.args[0])}))"  # saturating
        if e.func in ("isnan", "isinf", "isfinite"):
            if not arg_t.dtype.is_float:
                return "True" if e.func == "isfinite" else "False"
            return f"math.{e.func}({self.expr(e.args[0])})"
        args = ", ".join(self.conv(self.expr(a), a.type, t) for a in e.args)
        own = own_math.OWN.get((e.func, ctor(t.dtype).removeprefix("np.")))
        if own is not None:  # the language's own, the same bits on every target
            self.own_math_calls += 1
            return f"{own}({args})"
        fn = self.math_functions.get(e.func, f"math.{e.func}")
        return f"{ctor(t.dtype)}({fn}({args}))"

    def load(self, e: ir.Load) -> str:
        at = self.types[e.array.name]
        array = self.name(e.array.name)
        if isinstance(at, TileType):  # a lane reads one element of a tile (checked as
            # array reads are: in bounds-checked launches)
            return f"{array}[{self.index(e.indices, e.array, e.loc, at.shape)}]"
        code = self.load_storage(f"{array}[{self.index(e.indices, e.array, e.loc)}]", at.dtype)
        if e.mask is None:
            return code
        other = self.conv(self.expr(e.other), e.other.type, ScalarType(at.dtype))
        return f"({code} if {self.truth(e.mask)} else {other})"
