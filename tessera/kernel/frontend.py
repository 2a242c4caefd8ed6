"""Python AST → kernel IR.

The kernel body is parsed from source, never run as Python. Names resolve as Python would
(locals, then parameters and symbols, then the function's globals); what a name resolves
to decides what a call means: a :class:`~tessera.tile.Primitive`, a dtype cast, a
``math`` function, ``min/max/abs``, or a ``@tessera.func`` helper, which is inlined.

Anything outside the kernel subset is a :class:`KernelError` naming the construct and
pointing at its line. Collective calls and helper calls are hoisted out of expressions
into statements of their own, so later stages see them as statements.
"""

from __future__ import annotations

import ast
import builtins
import itertools

from .. import dtypes
from ..errors import KernelError, SourceLoc, internal_errors
from ..tile import blocks as B
from ..tile import primitives as P
from . import ir, suggest
from .frontend_calls import CallLowering
from .frontend_print import PrintLowering
from .frontend_values import SMALL, TupleValue, ValueLowering, describe, leaves
from .frontend_views import ViewLowering
from .scope import Scope, assigned_names, first_assignment, strip_docstring
from .signature import GRID_GROUPS, ParamSpec
from .source import SourceInfo
from .typer import fold_int

BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
}
CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
UNARYOPS = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}
MAX_EXPRESSION_DEPTH = 40  # levels of one expression, a leaf included (docs/language.md)
MAX_SHARED_DIMS = 4  # of a shared array: its copies and reductions are loops, one a dim


class Frontend(CallLowering, PrintLowering, ValueLowering, ViewLowering):
    """Lowers one kernel's AST to IR. Use :func:`build_ir`."""

    def __init__(
        self, kernel_name: str, params: list[ParamSpec], grouped: bool, symbols: list[str]
    ):
        self.kernel = kernel_name
        self.params = {p.name: p for p in params}
        self.grouped = grouped
        self.symbols = set(symbols) | ({GRID_GROUPS} if grouped else set())
        self.shared_vars: set[str] = set()
        self.allocs: list[ir.SharedAlloc] = []
        self._counter = itertools.count()
        self._inlining: list[object] = []
        self.helpers_used: list[object] = []  # every @tessera.func inlined, for cache keys
        self.global_constants: dict[str, object] = {}  # module constants baked into the IR
        self.user_vars: dict[str, str] = {}  # IR name → the name in the source
        self.depth = 0  # of the expression being lowered (a helper's body starts at 0)

    # ------------------------------------------------------------------ helpers
    def error(self, scope: Scope, node: ast.AST, message: str) -> KernelError:
        return KernelError(self.kernel, message, self.loc(scope, node))

    def loc(self, scope: Scope, node: ast.AST) -> SourceLoc:
        return SourceLoc(
            scope.info.filename,
            getattr(node, "lineno", 1) + scope.info.line_offset,
            getattr(node, "col_offset", 0),
        )

    def fresh(self, hint: str) -> str:
        return f"_{hint}{next(self._counter)}"

    # ------------------------------------------------------------------ entry
    def lower_function(self, info: SourceInfo) -> list[ir.Stmt]:
        scope = Scope(info, assigned_names(info.fn_node.body))
        for name in scope.locals & set(self.params):
            node = first_assignment(info.fn_node.body, name)
            raise self.error(scope, node, f"cannot assign to parameter '{name}'")
        return self.block(scope, strip_docstring(info.fn_node.body))

    def block(self, scope: Scope, stmts: list[ast.stmt]) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(scope, s))
        return out

    # ------------------------------------------------------------------ statements
    def stmt(self, scope: Scope, node: ast.stmt) -> list[ir.Stmt]:
        """Lower one statement. An exception that is not a TesseraError is a bug in the
        compiler: it reaches the user as an InternalError at the innermost statement."""
        with internal_errors(self.kernel, self.loc(scope, node)):
            return self.lower_stmt(scope, node)

    def lower_stmt(self, scope: Scope, node: ast.stmt) -> list[ir.Stmt]:
        loc = self.loc(scope, node)
        if isinstance(node, ast.Pass):
            return []
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise self.error(scope, node, "chained assignment (a = b = c) is not supported")
            return self.assign(scope, node.targets[0], node.value, loc)
        if isinstance(node, ast.AugAssign):
            op = BINOPS.get(type(node.op))
            target = node.target
            read = ast.copy_location(
                ast.Subscript(target.value, target.slice, ast.Load())
                if isinstance(target, ast.Subscript)
                else ast.Name(getattr(target, "id", "?"), ast.Load()),
                target,
            )
            value = ast.copy_location(ast.BinOp(read, node.op, node.value), node)
            if op is None:
                raise self.error(scope, node, "unsupported augmented assignment operator")
            return self.assign(scope, target, value, loc)
        if isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return []
            return self.expr_statement(scope, node.value, loc)
        if isinstance(node, ast.If):
            pre, cond = self.expr(scope, node.test)
            return pre + [
                ir.If(loc, cond, self.block(scope, node.body), self.block(scope, node.orelse))
            ]
        if isinstance(node, ast.For):
            return self.for_loop(scope, node, loc)
        if isinstance(node, ast.While):
            if node.orelse:
                raise self.error(scope, node, "'while ... else' is not supported in kernels")
            pre, cond = self.expr(scope, node.test)
            body = self.block(scope, node.body)
            if pre:  # the condition needs statements: evaluate it at the top of each trip
                flag = self.fresh("cond")
                body = (
                    pre
                    + [
                        ir.Assign(loc, flag, cond),
                        ir.If(loc, ir.UnaryOp(loc, "not", ir.Name(loc, flag)), [ir.Break(loc)], []),
                    ]
                    + body
                )
                return [ir.While(loc, ir.Const(loc, True), body)]
            return [ir.While(loc, cond, body)]
        if isinstance(node, ast.Assert):
            return self.assert_statement(scope, node, loc)
        if isinstance(node, ast.Break):
            return [ir.Break(loc)]
        if isinstance(node, ast.Continue):
            return [ir.Continue(loc)]
        if isinstance(node, ast.Return):
            if scope.result is None:
                if node.value is not None:
                    raise self.error(
                        scope, node, "a kernel returns nothing; write results to a mut parameter"
                    )
                return [ir.Return(loc)]
            if node.value is None:
                raise self.error(scope, node, "a helper used as a value must return a value")
            return self.helper_return(scope, node, loc)
        raise self.error(
            scope, node, f"'{type(node).__name__}' statements are not supported in kernels"
        )

    def assign(
        self, scope: Scope, target: ast.expr, value: ast.expr, loc: SourceLoc
    ) -> list[ir.Stmt]:
        if isinstance(target, ast.Tuple):
            return self.unpack(scope, target, value, loc)
        if isinstance(target, ast.Name):
            alloc = self.try_shared_alloc(scope, target, value, loc)
            if alloc is not None:
                return [alloc]
            view = self.view_of(scope, value)  # ``s = As[j]``, ``v = inp[R:]``
            if view is not None:
                return self.bind_view(scope, target, *view, loc)
            if target.id in scope.views:
                raise self.error(
                    scope, target, f"'{target.id}' holds a view; it cannot hold a value too"
                )
            pre, val = self.value(scope, value)
            if isinstance(val, SMALL):
                return pre + self.bind_small(scope, target, val, loc)
            self.check_shape(scope, target, "value")
            scope.plain.add(target.id)
            name = self.local_name(scope, target)
            if pre and _is_tile_result(pre[-1], val):  # ``acc = tile.dot(a, b, acc)``
                return pre[:-1] + [ir.Assign(loc, name, pre[-1].value)]  # no temporary
            return pre + [ir.Assign(loc, name, val)]
        if isinstance(target, ast.Subscript):
            pre_i, array, indices = self.indexed(scope, target.value, target.slice, loc, True)
            if self.is_complex_array(array):
                pre_v, val = self.value(scope, value)
                return pre_i + pre_v + self.store_complex(scope, value, array, indices, val, loc)
            pre_v, val = self.expr(scope, value)
            return pre_i + pre_v + [ir.Store(loc, array, indices, val)]
        raise self.error(scope, target, "can only assign to a name, an element or a tuple")

    def unpack(
        self, scope: Scope, target: ast.Tuple, value: ast.expr, loc: SourceLoc
    ) -> list[ir.Stmt]:
        elts = target.elts
        if isinstance(value, ast.Attribute) and value.attr == "shape":
            array = self.array_ref(scope, value.value, complex_ok=True)
            ndim = self.array_ndim(scope, array, value)
            if ndim != len(elts):
                raise self.error(scope, target, f"unpacking {ndim} dims into {len(elts)} names")
            values = [ir.Shape(loc, array, k) for k in range(ndim)]
            pre: list[ir.Stmt] = []
        else:
            pre, got = self.value(scope, value)
            if not isinstance(got, TupleValue):
                raise self.error(
                    scope,
                    value,
                    f"can only unpack a tuple or an array's .shape, not {describe(got)}",
                )
            if len(got.items) != len(elts):
                raise self.error(
                    scope, target, f"unpacking {len(got.items)} values into {len(elts)} targets"
                )
            values = got.items
        # evaluate every value before assigning any target: a, b = b, a swaps
        temps = []
        for v in values:
            if isinstance(v, SMALL):
                parts = leaves(v)
                held = self.assign_temps(pre, parts, loc)
                temps.append(self.rebuild_value(v, held))
                continue
            temps.extend(self.assign_temps(pre, [v], loc))
        for tgt, v in zip(elts, temps):
            if isinstance(v, SMALL) or isinstance(tgt, ast.Tuple):
                if isinstance(tgt, ast.Tuple):
                    pre += self.unpack_value(scope, tgt, v, loc)
                elif isinstance(tgt, ast.Name):
                    pre += self.bind_small(scope, tgt, v, loc)
                else:
                    raise self.error(scope, tgt, f"cannot store {describe(v)} in an element")
            elif isinstance(tgt, ast.Name):
                self.check_shape(scope, tgt, "value")
                scope.plain.add(tgt.id)
                pre.append(ir.Assign(loc, self.local_name(scope, tgt), v))
            elif isinstance(tgt, ast.Subscript):
                p, array, idx = self.indexed(scope, tgt.value, tgt.slice, loc)
                pre += p + [ir.Store(loc, array, idx, v)]
            else:
                raise self.error(scope, tgt, "can only unpack into names or elements")
        return pre

    def try_shared_alloc(
        self, scope: Scope, target: ast.Name, value: ast.expr, loc: SourceLoc
    ) -> ir.SharedAlloc | None:
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Subscript)):
            return None
        form = self.resolve_global(scope, value.func.value)
        if form is P.dynamic:
            return self.dynamic_shared(scope, target, value, loc)
        if form is not P.alloc:
            return None
        if not self.grouped:
            raise self.flat_error(scope, value, "tshared.alloc")
        dtype = self.dtype_of(scope, value.func.slice)
        if dtype is None:
            raise self.error(scope, value.func.slice, "tshared.alloc[...] needs a dtype")
        if len(value.args) != 1 or value.keywords:
            raise self.error(scope, value, "tshared.alloc[dtype](shape) takes one shape")
        shape_node = value.args[0]
        dims = shape_node.elts if isinstance(shape_node, ast.Tuple) else [shape_node]
        if not 1 <= len(dims) <= MAX_SHARED_DIMS:
            raise self.error(
                scope,
                shape_node,
                f"a shared array has 1 to {MAX_SHARED_DIMS} dims, not {len(dims)}",
            )
        shape = []
        for d in dims:
            pre, e = self.expr(scope, d)
            if pre:
                raise self.error(scope, d, "a shared array's size must be a compile-time constant")
            shape.append(e)
        name = self.local_name(scope, target)
        self.shared_vars.add(name)
        alloc = ir.SharedAlloc(loc, name, dtype, tuple(shape), slot=len(self.allocs))
        self.allocs.append(alloc)
        return alloc

    def dynamic_shared(
        self, scope: Scope, target: ast.Name, value: ast.Call, loc: SourceLoc
    ) -> ir.SharedAlloc:
        """``tshared.dynamic[dtype](n)``: one per kernel, 1-D, ``n`` a scalar integer
        parameter or a size symbol, so the launch knows the size before anything runs."""
        if not self.grouped:
            raise self.flat_error(scope, value, P.dynamic.name)
        dtype = self.dtype_of(scope, value.func.slice)
        if not isinstance(dtype, dtypes.DType):
            raise self.error(scope, value.func.slice, "tshared.dynamic[...] needs a dtype")
        if any(a.dynamic for a in self.allocs):
            raise self.error(scope, value, "a kernel has at most one tshared.dynamic array")
        size = value.args[0] if len(value.args) == 1 and not value.keywords else None
        p = self.params.get(size.id) if isinstance(size, ast.Name) else None
        is_int = p is not None and p.kind == "scalar" and p.dtype.is_int
        if not (is_int or (isinstance(size, ast.Name) and size.id in self.symbols)):
            raise self.error(
                scope,
                size or value,
                "tshared.dynamic[dtype](n) takes one size: a scalar integer parameter or a "
                "size symbol of the signature, bound at launch",
            )
        if size.id == GRID_GROUPS:
            raise self.error(scope, size, "a tshared.dynamic size cannot be grid_groups")
        name = self.local_name(scope, target)
        self.shared_vars.add(name)
        shape = (ir.Name(self.loc(scope, size), size.id),)
        alloc = ir.SharedAlloc(loc, name, dtype, shape, slot=len(self.allocs), dynamic=True)
        self.allocs.append(alloc)
        return alloc

    def for_loop(self, scope: Scope, node: ast.For, loc: SourceLoc) -> list[ir.Stmt]:
        if node.orelse:
            raise self.error(scope, node, "'for ... else' is not supported in kernels")
        if not isinstance(node.target, ast.Name):
            raise self.error(scope, node.target, "a loop variable must be a single name")
        it = node.iter
        fn = self.resolve_global(scope, it.func) if isinstance(it, ast.Call) else None
        if fn is builtins.range:
            tile_range = False
        elif fn is P.range:
            tile_range = True
            if not self.grouped:
                raise self.flat_error(scope, it, "tile.range")
        else:
            raise self.error(scope, it, "kernels loop only over range(...) or tile.range(...)")
        kwargs = {k.arg: k.value for k in it.keywords}
        allowed = {"prefetch"} if tile_range else set()
        allowed |= {"start", "stop", "step"} if tile_range else set()
        for key in kwargs:
            if key not in allowed:
                raise self.error(
                    scope,
                    it,
                    f"unexpected keyword '{key}' in {P.range.name if tile_range else 'range'}",
                )
        args = list(it.args)
        for key in ("start", "stop", "step"):
            if key in kwargs:
                args.append(kwargs[key])
        if not 1 <= len(args) <= 3:
            raise self.error(scope, it, "range takes 1 to 3 arguments")
        pre: list[ir.Stmt] = []
        parts = []
        for a in args:
            p, e = self.expr(scope, a)
            pre += p
            parts.append(e)
        one, zero = ir.Const(loc, 1), ir.Const(loc, 0)
        start, stop, step = (
            (zero, parts[0], one)
            if len(parts) == 1
            else (parts[0], parts[1], one)
            if len(parts) == 2
            else tuple(parts)
        )
        prefetch = None
        if "prefetch" in kwargs:  # the constants a shared shape takes (constexprs folded later)
            pnode = kwargs["prefetch"]
            p, e = self.expr(scope, pnode)
            value = fold_int(e) if not p else None
            constexprs = {n for n, q in self.params.items() if q.kind == "constexpr"}
            later = not p and all(
                isinstance(x, (ir.Const, ir.BinOp, ir.UnaryOp))
                or (isinstance(x, ir.Name) and x.name in constexprs)
                for x in ir.walk_expr(e)
            )
            if (value is None and not later) or (value is not None and value < 1):
                raise self.error(scope, pnode, "prefetch must be a positive integer constant")
            prefetch = e if value is None else value
        self.check_shape(scope, node.target, "value")
        scope.plain.add(node.target.id)
        var = self.local_name(scope, node.target)
        body = self.block(scope, node.body)
        return pre + [ir.For(loc, var, start, stop, step, body, tile_range, prefetch)]

    def expr_statement(self, scope: Scope, node: ast.expr, loc: SourceLoc) -> list[ir.Stmt]:
        if not isinstance(node, ast.Call):
            raise self.error(scope, node, "an expression statement must be a call")
        fn = self.resolve_global(scope, node.func)
        if fn is builtins.print:
            return self.print_call(scope, node, loc)
        if isinstance(fn, P.Primitive) and fn.is_statement:
            pre, call = self.primitive_call(scope, fn, node, loc)
            return pre + [ir.ExprStmt(loc, call)]
        if fn is P.copy_async:
            return self.copy_async(scope, node, loc)
        if fn is P.store:
            args = self.call_args(scope, node, ("a", "index", "value", "mask"), 3)
            pre, array, idx = self.indexed(scope, args["a"], args["index"], loc)
            p2, val = self.expr(scope, args["value"])
            mask = None
            if "mask" in args:
                p3, mask = self.expr(scope, args["mask"])
                p2 += p3
            return pre + p2 + [ir.Store(loc, array, idx, val, mask, call=True)]
        pre, e = self.value(scope, node)
        if isinstance(e, SMALL) or (isinstance(e, ir.Name) and e.name.startswith("_ret")):
            return pre  # a helper called for its effects
        return pre + [ir.ExprStmt(loc, e)]

    # ------------------------------------------------------------------ expressions
    def expr(self, scope: Scope, node: ast.expr) -> tuple[list[ir.Stmt], ir.Expr]:
        """Lower an expression that is one value; returns statements that must run first,
        and the value."""
        pre, value = self.value(scope, node)
        if isinstance(value, SMALL):
            raise self.error(
                scope, node, f"{describe(value)} cannot be used here; a single value is needed"
            )
        return pre, value

    def value(self, scope: Scope, node: ast.expr) -> tuple[list[ir.Stmt], object]:
        """Lower an expression that may also be a tuple or a complex number
        (frontend_values.py); returns statements that must run first, and the value.

        An expression nested deeper than :data:`MAX_EXPRESSION_DEPTH` is refused at the
        node that goes past it: generated code nests a few parentheses per level, and
        Python's parser takes at most 200."""
        if self.depth >= MAX_EXPRESSION_DEPTH:
            raise self.error(
                scope,
                node,
                f"the expression nests more than {MAX_EXPRESSION_DEPTH} levels deep; "
                "split it with variables",
            )
        self.depth += 1
        try:
            return self.lower_expr(scope, node)
        finally:
            self.depth -= 1

    def lower_expr(self, scope: Scope, node: ast.expr) -> tuple[list[ir.Stmt], ir.Expr]:
        loc = self.loc(scope, node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float, str)):  # strings: passes/fold.py
                return [], ir.Const(loc, node.value)
            if isinstance(node.value, complex):  # ``2j``: its parts, float literals
                return [], self.complex_literal(node.value, loc)
            raise self.error(scope, node, f"constant {node.value!r} is not a number or bool")
        if isinstance(node, ast.Name):
            small = self.small_name(scope, node.id, loc)
            if small is not None:
                return [], small
            return [], self.name_expr(scope, node, loc)
        if isinstance(node, (ast.Tuple, ast.List)):  # a list is a read-only sequence here
            pre, items = [], []
            for elt in node.elts:
                p, e = self.value(scope, elt)
                pre += p
                items.append(e)
            return pre, TupleValue(items)
        if isinstance(node, ast.BinOp):
            op = BINOPS.get(type(node.op))
            if op is None:
                raise self.error(scope, node, f"operator {type(node.op).__name__} is not supported")
            p1, a = self.value(scope, node.left)
            p2, b = self.value(scope, node.right)
            if isinstance(a, SMALL) or isinstance(b, SMALL):
                p3, v = self.small_binop(scope, node, op, a, b, loc)
                return p1 + p2 + p3, v
            return p1 + p2, ir.BinOp(loc, op, a, b)
        if isinstance(node, ast.UnaryOp):
            p, a = self.value(scope, node.operand)
            if isinstance(a, SMALL):
                p2, v = self.small_unary(scope, node, UNARYOPS[type(node.op)], a, loc)
                return p + p2, v
            return p, ir.UnaryOp(loc, UNARYOPS[type(node.op)], a)
        if isinstance(node, ast.Compare):
            return self.compare(scope, node, loc)
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            return self.short_circuit(scope, op, node.values, loc)
        if isinstance(node, ast.IfExp):
            pc, c = self.expr(scope, node.test)
            pa, a = self.value(scope, node.body)
            pb, b = self.value(scope, node.orelse)
            if isinstance(a, SMALL) or isinstance(b, SMALL):
                return self.small_select(scope, node, c, (pa, a), (pb, b), pc, loc)
            if not pa and not pb:
                return pc, ir.IfExp(loc, c, a, b)
            t = self.fresh("sel")
            stmt = ir.If(loc, c, pa + [ir.Assign(loc, t, a)], pb + [ir.Assign(loc, t, b)])
            return pc + [stmt], ir.Name(loc, t)
        if isinstance(node, ast.Subscript):
            return self.subscript(scope, node, loc)
        if isinstance(node, ast.Attribute):
            if self.holds_small(scope, node.value):
                pre, base = self.value(scope, node.value)
                return pre, self.small_attribute(scope, node, base)
            if node.attr == "T" and self.tile_method(scope, node) is not None:
                pre, base = self.expr(scope, node.value)
                return pre, ir.PrimCall(loc, B.transpose, [base])
            value = self.resolve_global(scope, node)
            if isinstance(value, (bool, int, float, str)):
                self.global_constants[ast.unparse(node)] = value
                return [], ir.Const(loc, value)
            raise self.error(scope, node, f"'{ast.unparse(node)}' cannot be used as a value")
        if isinstance(node, ast.Call):
            return self.call(scope, node, loc)
        raise self.error(
            scope, node, f"'{type(node).__name__}' expressions are not supported in kernels"
        )

    def compare(self, scope: Scope, node: ast.Compare, loc: SourceLoc):
        pre, left = self.value(scope, node.left)
        if isinstance(left, SMALL) or len(node.comparators) == 1:
            p, right = self.value(scope, node.comparators[0])
            if isinstance(left, SMALL) or isinstance(right, SMALL):
                p2, v = self.small_compare(scope, node, left, right, loc)
                return pre + p + p2, v
            if type(node.ops[0]) not in CMPOPS:
                raise self.error(
                    scope, node, f"comparison {type(node.ops[0]).__name__} is not supported"
                )
            return pre + p, ir.Compare(loc, CMPOPS[type(node.ops[0])], left, right)
        parts = []
        for op, comparator in zip(node.ops, node.comparators):
            if type(op) not in CMPOPS:
                raise self.error(scope, node, f"comparison {type(op).__name__} is not supported")
            p, right = self.expr(scope, comparator)
            pre += p
            parts.append(ir.Compare(loc, CMPOPS[type(op)], left, right))
            left = right
        return pre, parts[0] if len(parts) == 1 else ir.BoolOp(loc, "and", parts)

    def short_circuit(self, scope: Scope, op: str, values: list[ast.expr], loc: SourceLoc):
        pre, first = self.expr(scope, values[0])
        lowered = [self.expr(scope, v) for v in values[1:]]
        if not any(p for p, _ in lowered):
            return pre, ir.BoolOp(loc, op, [first] + [e for _, e in lowered])
        # a later operand needs statements: keep Python's short-circuit with an if-chain
        t = self.fresh("bool")
        out = pre + [ir.Assign(loc, t, ir.Cast(loc, dtypes.bool_, first))]
        for p, e in lowered:
            test = ir.Name(loc, t) if op == "and" else ir.UnaryOp(loc, "not", ir.Name(loc, t))
            out.append(ir.If(loc, test, p + [ir.Assign(loc, t, ir.Cast(loc, dtypes.bool_, e))], []))
        return out, ir.Name(loc, t)

    def subscript(self, scope: Scope, node: ast.Subscript, loc: SourceLoc):
        base = node.value
        if self.holds_small(scope, base):
            pre, value = self.value(scope, base)
            p2, item = self.small_subscript(scope, node, value, loc)
            return pre + p2, item
        if isinstance(base, ast.Attribute) and base.attr == "shape":
            if self.view_of(scope, base.value) is not None:
                return self.view_shape(scope, node, base.value, loc)
            array = self.array_ref(scope, base.value, complex_ok=True)
            axis = self.constant_value(scope, node.slice)
            ndim = self.array_ndim(scope, array, node)
            if not isinstance(axis, int) or not -ndim <= axis < ndim:
                raise self.error(
                    scope, node.slice, f"shape index must be a constant in [0, {ndim})"
                )
            return [], ir.Shape(loc, array, axis % ndim)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if self.view_of(scope, node) is not None:
            raise self.error(
                scope,
                node,
                f"'{ast.unparse(node)}' is a view of an array: assign it to a name, index it "
                "or pass it to a primitive",
            )
        if any(
            isinstance(i, ast.Slice) or (isinstance(i, ast.Constant) and i.value is None)
            for i in items
        ):
            return self.tile_view(scope, node, items, loc)
        pre, array, idx = self.indexed(scope, base, node.slice, loc, True)
        if self.is_complex_array(array):
            return pre, self.load_complex(array, idx, loc)
        return pre, ir.Load(loc, array, idx)

    def indices(self, scope: Scope, node: ast.expr) -> tuple[list[ir.Stmt], list[ir.Expr]]:
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        pre: list[ir.Stmt] = []
        out = []
        for item in items:
            if isinstance(item, ast.Slice):
                raise self.error(
                    scope,
                    item,
                    "slices are only allowed as the source of cp_async; index "
                    "one element at a time",
                )
            p, e = self.expr(scope, item)
            pre += p
            out.append(e)
        return pre, out

    # ------------------------------------------------------------------ names
    def name_expr(self, scope: Scope, node: ast.Name, loc: SourceLoc) -> ir.Expr:
        name = node.id
        if name in scope.array_aliases:
            return ir.Name(loc, scope.array_aliases[name])
        if name in scope.rename:
            return ir.Name(loc, scope.rename[name])
        if name in scope.locals or name in self.params or name in self.symbols:
            return ir.Name(loc, name)
        value = self.resolve_global(scope, node)
        if isinstance(value, (bool, int, float, str)):
            self.global_constants[name] = value
            return ir.Const(loc, value)
        raise self.error(scope, node, f"'{name}' cannot be used as a value in a kernel")

    def local_name(self, scope: Scope, node: ast.Name) -> str:
        if node.id in scope.array_aliases:
            raise self.error(scope, node, f"cannot assign to parameter '{node.id}'")
        name = scope.rename.get(node.id, node.id)
        self.user_vars[name] = node.id  # a variable the user wrote (IR name → source name)
        return name

    def resolve_global(self, scope: Scope, node: ast.expr) -> object:
        """The Python object a dotted name refers to in the function's globals."""
        if isinstance(node, ast.Name):
            if node.id in scope.locals or node.id in scope.rename or node.id in self.params:
                return _LOCAL
            if node.id in scope.info.globals:
                return scope.info.globals[node.id]
            if hasattr(builtins, node.id):
                return getattr(builtins, node.id)
            known = [*scope.locals, *self.params, *self.symbols, *scope.info.globals]
            hint = suggest.name_hint(node.id, known)
            raise self.error(scope, node, f"name '{node.id}' is not defined{hint}")
        if isinstance(node, ast.Attribute):
            base = self.resolve_global(scope, node.value)
            if base is _LOCAL:
                return _LOCAL
            try:
                return getattr(base, node.attr)
            except AttributeError:
                hint = suggest.attribute_hint(base, ast.unparse(node.value), node.attr)
                message = f"'{ast.unparse(node)}' is not defined{hint}"
                raise self.error(scope, node, message) from None
            except Exception as exc:  # a property of the user's, run at compile time
                raise self.error(
                    scope, node, f"reading '{ast.unparse(node)}' raised {type(exc).__name__}: {exc}"
                ) from None
        return _LOCAL

    def dtype_of(self, scope: Scope, node: ast.expr) -> dtypes.DType | dtypes.DTypeVar | None:
        """The dtype ``node`` names: a dtype, or a ``T: dtype_constexpr`` parameter (bound
        per launch: a :class:`~tessera.dtypes.DTypeVar` until then)."""
        if isinstance(node, ast.Name) and node.id not in scope.locals:
            p = self.params.get(node.id)
            if p is not None and p.of_dtype:
                return dtypes.DTypeVar(node.id)
        value = self.resolve_global(scope, node)
        return value if isinstance(value, dtypes.DType) else None

    def constant_value(self, scope: Scope, node: ast.expr) -> object:
        pre, e = self.expr(scope, node)
        if not pre and isinstance(e, ir.Const):
            return e.value
        if isinstance(e, ir.UnaryOp) and e.op == "-" and isinstance(e.operand, ir.Const):
            return -e.operand.value
        return None

    def array_ref(self, scope: Scope, node: ast.expr, complex_ok: bool = False) -> ir.Name:
        """The array ``node`` names. A complex array is read and written only an element
        at a time (``complex_ok``): the primitives take arrays of real numbers."""
        if isinstance(node, ast.Name):
            name = scope.array_aliases.get(node.id) or scope.rename.get(node.id, node.id)
            p = self.params.get(name)
            if p is not None and p.kind == "array" and p.dtype in dtypes.COMPLEX_PARTS:
                if not complex_ok:
                    raise self.error(
                        scope,
                        node,
                        f"'{node.id}' is a complex array: read and write it an element at a "
                        "time (z = x[i], x[i] = z)",
                    )
            if (p is not None and p.kind == "array") or name in self.shared_vars:
                return ir.Name(self.loc(scope, node), name)
            if node.id in scope.locals:  # a local variable holding a shared array
                return ir.Name(self.loc(scope, node), name)
        raise self.error(scope, node, f"'{ast.unparse(node)}' is not an array")

    def is_array_expr(self, scope: Scope, node: ast.expr) -> bool:
        if not isinstance(node, ast.Name):
            return False
        name = scope.array_aliases.get(node.id) or scope.rename.get(node.id, node.id)
        p = self.params.get(name)
        return (p is not None and p.kind == "array") or name in self.shared_vars

    def array_ndim(self, scope: Scope, array: ir.Name, node: ast.AST) -> int:
        p = self.params.get(array.name)
        if p is not None:
            return p.ndim
        for a in self.allocs:
            if a.target == array.name:
                return len(a.shape)
        raise self.error(scope, node, f"'{array.name}' is not an array")

    # ------------------------------------------------------------------ argument helpers
    def flat_error(self, scope: Scope, node: ast.AST, what: str) -> KernelError:
        return self.error(
            scope,
            node,
            f"{what} needs a grouped kernel: declare the group shape with "
            "@kernel(tile=(...,), shared=...)",
        )


_LOCAL = object()  # resolve_global's answer for names that are not globals


def _is_tile_result(last: ir.Stmt, value: ir.Expr) -> bool:
    """``last`` is the hoisted ``_coll = <tile primitive>`` that ``value`` reads: the
    primitive can assign the user's variable directly (every target reads a tile
    primitive's operands element by element before writing that element)."""
    return (
        isinstance(value, ir.Name)
        and isinstance(last, ir.Assign)
        and last.target == value.name
        and isinstance(last.value, ir.PrimCall)
        and last.value.prim.tile
    )
