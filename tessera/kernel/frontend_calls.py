"""Lowering of calls in kernel source: primitives, casts, math, helpers (inlined) and
the group copy. A mixin of :class:`~tessera.kernel.frontend.Frontend`, kept apart so each
module reads in one sitting; it uses the frontend's name resolution and errors.
"""

from __future__ import annotations

import ast
import builtins
import math
from typing import TYPE_CHECKING

from .. import dtypes
from ..errors import SourceLoc
from ..tile import primitives as P
from ..tile.mathfns import MATH
from . import ir
from .returns import eliminate_returns

if TYPE_CHECKING:
    from .frontend import Scope

MATH_FUNCS = {getattr(math, name): name for name in MATH}
BUILTIN_FUNCS = {builtins.min: "min", builtins.max: "max", builtins.abs: "abs"}
BUILTIN_CASTS = {builtins.int: dtypes.i64, builtins.float: dtypes.f64, builtins.bool: dtypes.bool_}
REDUCE_PRIMS = {
    P.reduce_sum: ("sum", "shared"),
    P.reduce_max: ("max", "shared"),
    P.reduce_min: ("min", "shared"),
    P.sum_: ("sum", "lanes"),
    P.max_: ("max", "lanes"),
    P.min_: ("min", "lanes"),
}


class CallLowering:
    """Call expressions and call statements → IR (see frontend.py for the rest)."""

    def copy_async(self, scope: Scope, node: ast.Call, loc: SourceLoc) -> list[ir.Stmt]:
        if not self.grouped:
            raise self.flat_error(scope, node, P.copy_async.name)
        args = self.call_args(scope, node, ("dst", "src"), 2)
        dst = self.array_ref(scope, args["dst"])
        if dst.name not in self.shared_vars:
            raise self.error(scope, args["dst"], "cp_async destination must be a shared array")
        src_node = args["src"]
        pre: list[ir.Stmt] = []
        if isinstance(src_node, ast.Subscript):
            src = self.array_ref(scope, src_node.value)
            items = (
                src_node.slice.elts if isinstance(src_node.slice, ast.Tuple) else [src_node.slice]
            )
            starts, stops, sliced = [], [], []
            for item in items:
                if isinstance(item, ast.Slice):
                    if item.step is not None:
                        raise self.error(scope, item, "cp_async source slices take no step")
                    if item.lower is None:
                        starts.append(ir.Const(loc, 0))
                    else:
                        p, e = self.expr(scope, item.lower)
                        pre += p
                        starts.append(e)
                    if item.upper is None:
                        stops.append(None)
                    else:
                        p, e = self.expr(scope, item.upper)
                        pre += p
                        stops.append(e)
                    sliced.append(True)
                else:
                    p, e = self.expr(scope, item)
                    pre += p
                    starts.append(e)
                    stops.append(None)
                    sliced.append(False)
        else:
            src = self.array_ref(scope, src_node)
            starts, stops, sliced = [], [], []
        return pre + [ir.CopyAsync(loc, dst, src, starts, stops, sliced)]

    def call(self, scope: Scope, node: ast.Call, loc: SourceLoc):
        fn = self.resolve_global(scope, node.func)
        if isinstance(fn, P.Primitive):
            return self.primitive_call(scope, fn, node, loc)
        if isinstance(fn, dtypes.DType) or fn in BUILTIN_CASTS:
            dtype = fn if isinstance(fn, dtypes.DType) else BUILTIN_CASTS[fn]
            if len(node.args) != 1 or node.keywords:
                raise self.error(
                    scope, node, f"the cast {ast.unparse(node.func)}(x) takes one value"
                )
            p, v = self.expr(scope, node.args[0])
            return p, ir.Cast(loc, dtype, v)
        name = MATH_FUNCS.get(fn) or BUILTIN_FUNCS.get(fn)
        if name is not None:
            if node.keywords:
                raise self.error(scope, node, f"{name}() takes no keyword arguments")
            pre, args = [], []
            for a in node.args:
                p, e = self.expr(scope, a)
                pre += p
                args.append(e)
            return pre, ir.MathCall(loc, name, args)
        from .helpers import Func  # late: helpers import the frontend

        if isinstance(fn, Func):
            return self.inline(scope, fn, node, loc)
        if fn is builtins.range:
            raise self.error(scope, node, "range() can only be the iterable of a for loop")
        raise self.error(scope, node.func, f"cannot call '{ast.unparse(node.func)}' in a kernel")

    def primitive_call(self, scope: Scope, fn: P.Primitive, node: ast.Call, loc: SourceLoc):
        if fn.grouped_only and not self.grouped:
            raise self.flat_error(scope, node, fn.name)
        if fn is P.linear_id or fn is P.group_linear_id or fn is P.group_tile_count:
            self.no_args(scope, node, fn)
            if fn is P.group_tile_count:
                return [], ir.GroupSize(loc)
            return [], (ir.LaneId(loc, None) if fn is P.linear_id else ir.GroupId(loc, None))
        if fn is P.id or fn is P.group_id:
            args = self.call_args(scope, node, ("axis",), 1)
            axis = self.constant_value(scope, args["axis"])
            if not isinstance(axis, int) or isinstance(axis, bool) or not 0 <= axis < 3:
                raise self.error(
                    scope, args["axis"], f"{fn.name}(axis) needs a constant axis 0, 1 or 2"
                )
            return [], (ir.LaneId(loc, axis) if fn is P.id else ir.GroupId(loc, axis))
        if fn is P.load:
            args = self.call_args(scope, node, ("a", "index", "mask", "other"), 2)
            array = self.array_ref(scope, args["a"])
            pre, idx = self.indices(scope, args["index"])
            mask = other = None
            if "mask" in args:
                p, mask = self.expr(scope, args["mask"])
                pre += p
            if "other" in args:
                p, other = self.expr(scope, args["other"])
                pre += p
            return pre, ir.Load(
                loc, array, idx, mask, other if other is not None else ir.Const(loc, 0)
            )
        if fn is P.atomic_add:
            args = self.call_args(scope, node, ("a", "index", "value"), 3)
            array = self.array_ref(scope, args["a"])
            pre, idx = self.indices(scope, args["index"])
            p, v = self.expr(scope, args["value"])
            return pre + p, ir.AtomicAdd(loc, array, idx, v)
        if fn in REDUCE_PRIMS:
            op, over = REDUCE_PRIMS[fn]
            args = self.call_args(scope, node, ("value",), 1)
            if over == "shared":
                src: ir.Expr = self.array_ref(scope, args["value"])
                if src.name not in self.shared_vars:
                    raise self.error(scope, args["value"], f"{fn.name} reduces a shared array")
                pre = []
            else:
                pre, src = self.expr(scope, args["value"])
                if not isinstance(src, ir.Name):  # each lane's value lives in a variable
                    value = self.fresh("lane")
                    pre.append(ir.Assign(loc, value, src))
                    src = ir.Name(loc, value)
            t = self.fresh("red")
            return pre + [ir.Assign(loc, t, ir.Reduce(loc, op, over, src))], ir.Name(loc, t)
        if fn in (P.barrier, P.copy_wait, P.copy_async, P.store):
            raise self.error(scope, node, f"{fn.name}(...) is a statement, not a value")
        if fn is P.alloc:
            raise self.error(scope, node, "tshared.alloc must be assigned directly to a name")
        raise self.error(scope, node, f"{fn.name} cannot be used here")

    def inline(self, scope: Scope, fn, node: ast.Call, loc: SourceLoc):
        from .frontend import Scope, _assigned_names, _first_assignment, _strip_docstring

        if fn in self._inlining:
            raise self.error(
                scope, node, f"helper '{fn.name}' is recursive; kernels cannot recurse"
            )
        info = fn.source_info()
        fparams = info.fn_node.args.args
        if node.keywords or len(node.args) != len(fparams):
            raise self.error(
                scope, node, f"helper '{fn.name}' takes {len(fparams)} positional arguments"
            )
        inner = Scope(info, _assigned_names(info.fn_node.body))
        prefix = self.fresh(f"{fn.name}_")
        pre: list[ir.Stmt] = []
        for param, arg in zip(fparams, node.args):
            if param.arg in inner.locals:
                raise self.error(
                    inner,
                    _first_assignment(info.fn_node.body, param.arg),
                    f"cannot assign to parameter '{param.arg}' of helper '{fn.name}'",
                )
            if self.is_array_expr(scope, arg):
                inner.array_aliases[param.arg] = self.array_ref(scope, arg).name
                continue
            p, e = self.expr(scope, arg)
            inner.rename[param.arg] = f"{prefix}_{param.arg}"
            pre += p + [ir.Assign(loc, inner.rename[param.arg], e)]
        for name in inner.locals:
            inner.rename[name] = f"{prefix}_{name}"
        inner.result = f"_ret{prefix}"
        self._inlining.append(fn)
        if fn not in self.helpers_used:
            self.helpers_used.append(fn)
        try:
            body = self.block(inner, _strip_docstring(info.fn_node.body))
        finally:
            self._inlining.pop()
        body = eliminate_returns(body, f"{prefix}_done")
        return pre + body, ir.Name(loc, inner.result)

    def call_args(
        self, scope: Scope, node: ast.Call, names: tuple[str, ...], required: int
    ) -> dict[str, ast.expr]:
        fname = ast.unparse(node.func)
        if len(node.args) > len(names):
            raise self.error(scope, node, f"{fname}() takes at most {len(names)} arguments")
        out = dict(zip(names, node.args))
        for kw in node.keywords:
            if kw.arg not in names or kw.arg in out:
                raise self.error(scope, node, f"{fname}() got an unexpected argument '{kw.arg}'")
            out[kw.arg] = kw.value
        missing = [n for n in names[:required] if n not in out]
        if missing:
            raise self.error(scope, node, f"{fname}() is missing argument '{missing[0]}'")
        return out

    def no_args(self, scope: Scope, node: ast.Call, fn: P.Primitive) -> None:
        if node.args or node.keywords:
            raise self.error(scope, node, f"{fn.name}() takes no arguments")
