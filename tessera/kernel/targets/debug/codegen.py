"""The debug target's interpreter: kernel IR → Python closures run lane by lane.

Each statement becomes a closure over a lane's :class:`Frame`; a statement that contains
a collective becomes a *generator* that yields the collective to the group scheduler
(program.py) and receives its result, so every lane is a generator that pauses at each
collective. Expressions are compiled by codegen_expr.py and primitives by lowerings.py;
values and conversions are those of values.py.
"""

from __future__ import annotations

import numpy as np

from .... import dtypes as D
from ....errors import KernelArithmeticError, KernelError
from ... import ir
from ...ir import ArrayType, ScalarType
from ...typer import concrete
from .. import printing
from ..target import Target
from . import codegen_expr, tiles
from .runtime import Who
from .values import HALF, convert, converter, to_narrow

BREAK, CONTINUE = "break", "continue"


class Frame:
    """One lane's state: its variables and where it is."""

    __slots__ = ("vars", "lane", "lane_ids", "group", "group_ids", "kernel", "element")

    def __init__(self, kernel, variables, lane, lane_ids, group, group_ids):
        self.kernel = kernel
        self.element = ()  # the tile element an elementwise tile statement computes
        self.vars = variables
        self.lane, self.lane_ids = lane, lane_ids
        self.group, self.group_ids = group, group_ids

    def who(self, loc) -> Who:
        return Who(self.kernel, self.group_ids, self.lane_ids, loc)


class Compiler:
    """Turns one specialised, typed kernel IR into closures."""

    def __init__(self, kir: ir.KernelIR, target: Target, check_nan: bool = False):
        self.kir = kir
        self.target = target
        self.types = kir.var_types
        self.check_nan = check_nan  # read by the closures at run time: set per launch
        # each collective statement → how the group performs it (lowerings.py)
        self.performers: dict[ir.Stmt, object] = {}

    # ------------------------------------------------------------------ statements
    def block(self, body: list[ir.Stmt]):
        """A block runner: a plain function, or a generator function when it holds a
        collective. Either returns None, BREAK or CONTINUE."""
        parts = [(ir.contains_collective([s]), self.stmt(s)) for s in body]
        if not any(gen for gen, _ in parts):
            fns = [fn for _, fn in parts]

            def run(frame):
                for fn in fns:
                    signal = fn(frame)
                    if signal is not None:
                        return signal
                return None

            return False, run

        def run_gen(frame):
            for gen, fn in parts:
                signal = (yield from fn(frame)) if gen else fn(frame)
                if signal is not None:
                    return signal
            return None

        return True, run_gen

    def stmt(self, s: ir.Stmt):
        call = ir.prim_call(s)
        if (call is not None and call.prim.collective) or ir.is_tile_statement(s):
            return self.collective(s, call)
        if isinstance(s, ir.Assign):
            return self.assign(s)
        if isinstance(s, ir.Store):
            return self.store(s)
        if isinstance(s, ir.ExprStmt):
            value = self.expr(s.value)

            def effect(frame):
                value(frame)

            return effect
        if isinstance(s, ir.If):
            return self.if_(s)
        if isinstance(s, ir.For):
            return self.for_(s)
        if isinstance(s, ir.While):
            return self.while_(s)
        if isinstance(s, ir.Break):
            return lambda f: BREAK
        if isinstance(s, ir.Continue):
            return lambda f: CONTINUE
        if isinstance(s, ir.SharedAlloc):
            name, slot = s.target, s.slot

            def alloc(frame):
                frame.vars[name] = frame.vars["__shared__"][slot]

            return alloc
        if isinstance(s, ir.CopyAsync):
            return self.copy_async(s)
        if isinstance(s, ir.Print):
            return self.print_line(s)
        if isinstance(s, ir.Assert):
            return self.checked_assert(s)
        raise KernelError(
            self.kir.name, f"internal: no debug lowering for {type(s).__name__}", s.loc
        )

    def assign(self, s: ir.Assign):
        name = s.target
        if isinstance(self.types[name], ArrayType):
            src = s.value.name

            def alias(frame):
                frame.vars[name] = frame.vars[src]

            return alias
        value = convert(self.expr(s.value), s.value.type, self.types[name])

        def run(frame):
            frame.vars[name] = value(frame)

        return run

    def store(self, s: ir.Store):
        array, name = s.array.name, s.array.name
        dtype = self.types[name].dtype
        index = self.indices(s.indices)
        value = self.store_value(s.value, dtype)
        mask = self.truth(s.mask) if s.mask is not None else None
        loc = s.loc

        def run(frame):
            if mask is not None and not mask(frame):
                return
            frame.vars[array].store(index(frame), value(frame), frame.who(loc))

        return run

    def store_value(self, e: ir.Expr, dtype: D.DType):
        if dtype in HALF:
            as_f32 = convert(self.expr(e), e.type, ScalarType(D.f32))

            def rounded(frame):
                with np.errstate(over="ignore"):  # overflow to inf is the rounding rule
                    return to_narrow(np.float32(as_f32(frame)), dtype)

            return rounded
        return convert(self.expr(e), e.type, ScalarType(dtype))

    def if_(self, s: ir.If):
        cond = self.truth(s.cond)
        g1, body = self.block(s.body)
        g2, orelse = self.block(s.orelse)
        if not (g1 or g2):
            return lambda f: body(f) if cond(f) else orelse(f)

        def run_gen(frame):
            branch, gen = (body, g1) if cond(frame) else (orelse, g2)
            return (yield from branch(frame)) if gen else branch(frame)

        return run_gen

    def for_(self, s: ir.For):
        i64 = ScalarType(D.i64)
        bounds = [convert(self.expr(e), e.type, i64) for e in (s.start, s.stop, s.step)]
        gen, body = self.block(s.body)
        var, loc = s.var, s.loc

        def trips(frame):
            start, stop, step = (int(b(frame)) for b in bounds)
            if step == 0:
                raise KernelArithmeticError(frame.kernel, "range() step is zero", (("", loc),))
            return range(start, stop, step)

        if not gen and not s.tile_range:

            def run(frame):
                for i in trips(frame):
                    frame.vars[var] = np.int64(i)
                    if body(frame) == BREAK:
                        break
                return None

            return run

        def run_gen(frame):
            values = trips(frame)
            if s.tile_range:
                yield ("range", s, (values.start, values.stop, values.step))
            for i in values:
                frame.vars[var] = np.int64(i)
                signal = (yield from body(frame)) if gen else body(frame)
                if signal == BREAK:
                    break
            return None

        return run_gen

    def while_(self, s: ir.While):
        cond = self.truth(s.cond)
        gen, body = self.block(s.body)
        if not gen:

            def run(frame):
                while cond(frame):
                    if body(frame) == BREAK:
                        break
                return None

            return run

        def run_gen(frame):
            while cond(frame):
                if (yield from body(frame)) == BREAK:
                    break
            return None

        return run_gen

    def collective(self, s: ir.Stmt, call: ir.PrimCall):
        """Each lane hands its payload to the group, which performs the primitive once
        (the lowering's ``perform``) and gives each lane its result."""
        if call is not None and call.prim.collective:
            payload, perform = self.target.lowering(self.kir.name, call)(self, call, s)
        else:  # an elementwise tile statement
            payload, perform = tiles.tile_statement(self, s)
        self.performers[s] = perform
        name = s.target if isinstance(s, ir.Assign) else None
        to_target = None
        if name is not None:
            to_target = converter(s.value.type, self.types[name]) or (lambda v: v)

        def run_gen(frame):
            result = yield ("prim", s, payload(frame))
            if name is not None:
                frame.vars[name] = to_target(result)
            return None

        return run_gen

    def copy_async(self, s: ir.CopyAsync):
        i64 = ScalarType(D.i64)
        starts = [convert(self.expr(e), e.type, i64) for e in s.starts]
        stops = [None if e is None else convert(self.expr(e), e.type, i64) for e in s.stops]
        lead = [convert(self.expr(e), e.type, i64) for e in s.dst_lead]

        def run_gen(frame):
            args = (
                frame.vars[s.dst.name],
                frame.vars[s.src.name],
                tuple(int(st(frame)) for st in starts),
                tuple(None if sp is None else int(sp(frame)) for sp in stops),
                tuple(int(x(frame)) for x in lead),
            )
            yield ("copy", s, args)
            return None

        return run_gen

    def print_line(self, s: ir.Print):
        """The line the CPU target prints (printing.py), to ``sys.stdout``."""
        items = [i if isinstance(i, str) else self.expr(i) for i in s.items]
        grouped = self.kir.grouped

        def run(frame):
            ids = frame.group_ids + frame.lane_ids if grouped else frame.lane_ids
            ndim = len(frame.group_ids if grouped else frame.lane_ids)
            prefix = printing.prefix_template(self.kir, ndim).format(*ids)
            texts = [i if isinstance(i, str) else printing.value_text(i(frame)) for i in items]
            print(prefix, *texts)

        return run

    def checked_assert(self, s: ir.Assert):
        """Always checked: the debug target is where kernels are checked."""
        cond = self.truth(s.cond)
        grouped, message, loc = self.kir.grouped, s.message, s.loc

        def run(frame):
            if not cond(frame):
                ids = frame.group_ids + frame.lane_ids if grouped else frame.lane_ids
                ndim = len(frame.group_ids if grouped else frame.lane_ids)
                raise printing.assertion_failed(self.kir, message, loc, ids, ndim)

        return run

    # ------------------------------------------------------------------ expressions
    def truth(self, e: ir.Expr):
        value = self.expr(e)
        if concrete(e.type).dtype == D.bool_:
            return lambda f: bool(value(f))
        return lambda f: bool(value(f) != 0)

    def indices(self, indices: list[ir.Expr]):
        fns = [self.expr(i) for i in indices]
        return lambda f: tuple(fn(f) for fn in fns)

    def expr(self, e: ir.Expr):
        return codegen_expr.compile_expr(self, e)
