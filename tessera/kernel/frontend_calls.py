"""Lowering of calls in kernel source: primitives, casts, math, helpers (inlined) and
the group copy. A mixin of :class:`~tessera.kernel.frontend.Frontend`, kept apart so each
module reads in one sitting; it uses the frontend's name resolution and errors.
"""

from __future__ import annotations

import ast
import builtins
import math

from .. import dtypes
from ..errors import SourceLoc, TesseraError
from ..tile import blocks as B
from ..tile import primitives as P
from ..tile.mathfns import MATH
from . import ir, suggest
from .frontend_values import SMALL, ComplexValue, describe
from .func import Func
from .passes.returns import eliminate_returns
from .philox import rand as philox_rand
from .scope import Scope, assigned_names, first_assignment, strip_docstring

MATH_FUNCS = {getattr(math, name): name for name in MATH}
BUILTIN_FUNCS = {builtins.min: "min", builtins.max: "max", builtins.abs: "abs"}
TILE_METHODS = {p.name[2:]: p for p in P.REGISTRY.values() if p.method}
BUILTIN_CASTS = {builtins.int: dtypes.i64, builtins.float: dtypes.f64, builtins.bool: dtypes.bool_}
EXP2 = getattr(math, "exp2", None)  # Python 3.11+


def _float_text(node: ast.Call) -> float | None:
    """The number of ``float("inf")``, ``float("-inf")``, ``float("nan")`` (any text
    ``float`` reads), or None: not a call of ``float`` on one string constant."""
    if len(node.args) != 1 or node.keywords:
        return None
    arg = node.args[0]
    if not isinstance(arg, ast.Constant) or not isinstance(arg.value, str):
        return None
    try:
        return float(arg.value)
    except ValueError:
        return None


class CallLowering:
    """Call expressions and call statements → IR (see frontend.py for the rest)."""

    def copy_async(self, scope: Scope, node: ast.Call, loc: SourceLoc) -> list[ir.Stmt]:
        """``cp_async.shared.global_(dst, src[a:b, c])``: slices are its own syntax."""
        if not self.grouped:
            raise self.flat_error(scope, node, P.copy_async.name)
        args = self.call_args(scope, node, ("dst", "src"), 2)
        pre: list[ir.Stmt] = []
        dst_lead: list[ir.Expr] = []
        found = self.view_of(scope, args["dst"])
        if found is not None:  # ``As[j]``: a sub-array of a shared array
            pre, view = found
            if any(o is not None for o in view.offsets):
                raise self.error(
                    scope, args["dst"], "a cp_async destination view fixes leading axes only"
                )
            dst = ir.Name(loc, view.base)
            dst_lead = self.view_lead(view, loc)
        else:
            dst = self.array_ref(scope, args["dst"])
        if dst.name not in self.shared_vars:
            raise self.error(scope, args["dst"], "cp_async destination must be a shared array")
        src_node = args["src"]
        if isinstance(src_node, ast.Name) and src_node.id in scope.views:
            view = scope.views[src_node.id]  # a whole view: from its start
            everything = ast.Slice(None, None, None)
            src_node = ast.copy_location(
                ast.Subscript(src_node, ast.Tuple([everything] * view.ndim), ast.Load()), src_node
            )
        src_view = None
        if isinstance(src_node, ast.Subscript):
            found = self.view_of(scope, src_node.value)
            if found is not None:  # ``inp[R:]`` sliced again: indices of its base
                p, src_view = found
                pre += p
                src = ir.Name(loc, src_view.base)
            else:
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
            if src_view is not None:
                starts, stops = self.view_slice(scope, src_node, src_view, starts, stops, loc)
                sliced = [False] * len(src_view.lead) + sliced
        else:
            src = self.array_ref(scope, src_node)
            starts, stops, sliced = [], [], []
        return pre + [ir.CopyAsync(loc, dst, src, starts, stops, sliced, dst_lead)]

    def call(self, scope: Scope, node: ast.Call, loc: SourceLoc):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "conjugate":
            return self.conjugate(scope, node, loc)
        method = self.tile_method(scope, node.func)
        if method is not None:  # ``t.sum(axis=0)``: the tile is the first argument
            call = ast.copy_location(
                ast.Call(node.func, [node.func.value, *node.args], node.keywords), node
            )
            return self.primitive_call(scope, method, call, loc)
        fn = self.dtype_of(scope, node.func) or self.resolve_global(scope, node.func)
        if isinstance(fn, P.Primitive):
            if fn.is_statement:
                raise self.error(scope, node, f"{fn.name}() is a statement, not a value")
            return self.primitive_call(scope, fn, node, loc)
        if fn is P.load:
            return self.masked_load(scope, node, loc)
        if fn is P.rand:  # the Philox helper, inlined: the same arithmetic on every target
            args = self.call_args(scope, node, ("seed", "offset"), 2)
            call = ast.copy_location(ast.Call(node.func, [args["seed"], args["offset"]], []), node)
            return self.inline(scope, philox_rand, call, loc)
        if isinstance(fn, P.SyntaxForm):
            raise self.syntax_form_error(scope, fn, node)
        if fn is builtins.float and _float_text(node) is not None:  # float("-inf"), "nan"
            return [], ir.Const(loc, _float_text(node))
        if fn is EXP2 and fn is not None:  # math.exp2 (Python 3.11+): 2 ** x, as pow
            if len(node.args) != 1 or node.keywords:
                raise self.error(scope, node, "exp2() takes one value")
            pre, x = self.expr(scope, node.args[0])
            return pre, ir.MathCall(loc, "pow", [ir.Const(loc, 2.0), x])
        if isinstance(fn, (dtypes.DType, dtypes.DTypeVar)) or fn in BUILTIN_CASTS:
            dtype = fn if isinstance(fn, (dtypes.DType, dtypes.DTypeVar)) else BUILTIN_CASTS[fn]
            if len(node.args) != 1 or node.keywords:
                raise self.error(
                    scope, node, f"the cast {ast.unparse(node.func)}(x) takes one value"
                )
            p, v = self.expr(scope, node.args[0])
            return p, ir.Cast(loc, dtype, v)
        if fn is builtins.complex:
            return self.complex_call(scope, node, loc)
        name = MATH_FUNCS.get(fn) or BUILTIN_FUNCS.get(fn)
        if name is not None:
            if node.keywords:
                raise self.error(scope, node, f"{name}() takes no keyword arguments")
            pre, args = [], []
            for a in node.args:
                p, e = self.value(scope, a)
                if isinstance(e, ComplexValue) and name == "abs" and len(node.args) == 1:
                    return p, self.small_abs(e, loc)
                if isinstance(e, SMALL):
                    raise self.error(scope, a, f"{name}() takes single values, not {describe(e)}")
                pre += p
                args.append(e)
            return pre, ir.MathCall(loc, name, args)
        if isinstance(fn, Func):
            return self.inline(scope, fn, node, loc)
        if fn is builtins.range:
            raise self.error(scope, node, "range() can only be the iterable of a for loop")
        if fn is builtins.print:
            raise self.error(scope, node, "print() is a statement in a kernel, not a value")
        text = ast.unparse(node.func)
        hint = suggest.call_hint(fn, text)
        raise self.error(scope, node.func, f"cannot call '{text}' in a kernel{hint}")

    def primitive_call(self, scope: Scope, fn: P.Primitive, node: ast.Call, loc: SourceLoc):
        """A declared primitive → one :class:`ir.PrimCall`, its arguments parsed by kind.
        A collective call is hoisted into a statement of its own, and so are the lane
        values it exchanges (each lane's value lives in a variable)."""
        if fn.grouped_only and not self.grouped:
            raise self.flat_error(scope, node, fn.name)
        if fn is B.arange and len(node.args) == 2 and not node.keywords:
            return self.value(scope, _arange_from(node))
        if fn in _TILE_FORMS and (
            len(node.args) == 2 or any(k.arg == "axis" for k in node.keywords)
        ):
            fn = _TILE_FORMS[fn]  # ``tile.sum(t, axis=0)``, Triton's ``tl.sum(x, axis=0)``
        names = tuple(a.name for a in fn.args)
        required = sum(1 for a in fn.args if a.required)
        given = self.call_args(scope, node, names, required)
        pre: list[ir.Stmt] = []
        args: list[ir.Expr | None] = []
        view = None  # the array argument's view: the index after it is the view's
        for arg in fn.args:
            if arg.name not in given:  # an optional argument: its constant, or None
                args.append(None if arg.default is None else ir.Const(loc, arg.default))
                continue
            found = self.view_of(scope, given[arg.name]) if arg.kind == "array" else None
            if found is not None:  # ``tile.load_block(As[s], ...)``: the base array
                p, view = found
                pre += p
                args.append(ir.Name(self.loc(scope, given[arg.name]), view.base))
                continue
            if arg.kind == "shared" and self.view_of(scope, given[arg.name]) is not None:
                raise self.error(scope, given[arg.name], f"{fn.name} takes a whole array")
            p, e = self.primitive_arg(scope, fn, arg, given[arg.name])
            if arg.kind == "index" and view is not None:
                e = ir.Tuple(e.loc, self.view_index(scope, given[arg.name], view, e.items, e.loc))
            pre += p
            args.append(e)
        call = ir.PrimCall(loc, fn, args)
        if not fn.collective or fn.is_statement:
            return pre, call
        result = self.fresh("coll")
        return pre + [ir.Assign(loc, result, call)], ir.Name(loc, result)

    def primitive_arg(self, scope: Scope, fn: P.Primitive, arg: P.Arg, node: ast.expr):
        loc = self.loc(scope, node)
        if arg.kind == "dtype":
            dtype = self.dtype_of(scope, node)
            if dtype is None:
                raise self.error(scope, node, f"{fn.name}({arg.name}) needs a dtype such as f32")
            return [], ir.Const(loc, dtype)
        if arg.kind == "shape":
            items = node.elts if isinstance(node, ast.Tuple) else [node]
            pre, dims = [], []
            for item in items:
                p, e = self.expr(scope, item)
                pre += p
                dims.append(e)
            return pre, ir.Tuple(loc, dims)
        if arg.kind == "axisopt":
            if isinstance(node, ast.Constant) and node.value is None:
                return [], None
            value = self.constant_value(scope, node)
            if type(value) is not int:
                raise self.error(scope, node, f"{fn.name}({arg.name}) needs a constant axis")
            return [], ir.Const(loc, value)
        if arg.kind in ("axis", "flag"):
            value = self.constant_value(scope, node)
            if arg.kind == "flag" and isinstance(value, bool):
                return [], ir.Const(self.loc(scope, node), value)
            if arg.kind == "axis" and type(value) is int and 0 <= value < 3:
                return [], ir.Const(self.loc(scope, node), value)
            wanted = "a constant axis 0, 1 or 2" if arg.kind == "axis" else "True or False"
            raise self.error(scope, node, f"{fn.name}({arg.name}) needs {wanted}")
        if arg.kind == "index":
            pre, items = self.indices(scope, node)
            return pre, ir.Tuple(self.loc(scope, node), items)
        if arg.kind == "tiles":  # each index tile a variable of its own, as tile arguments
            pre, items = self.indices(scope, node)
            for k, item in enumerate(items):
                if not isinstance(item, (ir.Name, ir.Const)):
                    name = self.fresh("index")
                    pre.append(ir.Assign(item.loc, name, item))
                    items[k] = ir.Name(item.loc, name)
            return pre, ir.Tuple(self.loc(scope, node), items)
        if arg.kind in ("array", "shared"):
            array = self.array_ref(scope, node)
            if arg.kind == "shared" and array.name not in self.shared_vars:
                raise self.error(scope, node, f"{fn.name} takes a shared array")
            if arg.kind == "shared" and any(
                a.dynamic and a.target == array.name for a in self.allocs
            ):
                raise self.error(
                    scope,
                    node,
                    f"{fn.name} needs a shared array of constant shape (tshared.alloc), not "
                    "a tshared.dynamic one, sized at launch",
                )
            return [], array
        pre, value = self.expr(scope, node)
        if value is None:
            raise self.error(scope, node, f"{fn.name}({arg.name}) needs a value")
        if fn.collective and not isinstance(value, (ir.Name, ir.Const)):
            lane_value = self.fresh("lane")
            pre.append(ir.Assign(value.loc, lane_value, value))
            value = ir.Name(value.loc, lane_value)
        return pre, value

    def tile_method(self, scope: Scope, func: ast.expr) -> P.Primitive | None:
        """The tile primitive ``t.<name>`` spells, when ``t`` is a local variable or an
        expression (not a module or another global)."""
        if not isinstance(func, ast.Attribute):
            return None
        if isinstance(func.value, ast.Name):
            if func.value.id not in scope.locals and func.value.id not in scope.rename:
                return None
        elif not isinstance(func.value, (ast.Call, ast.Subscript, ast.BinOp, ast.UnaryOp)):
            return None
        method = TILE_METHODS.get(func.attr)
        if method is None:
            raise self.error(scope, func, f"a tile has no method '{func.attr}'")
        return method

    def tile_view(self, scope: Scope, node: ast.Subscript, items: list, loc: SourceLoc):
        """``t[None, :]``, ``t[:, None]``: a tile with an axis of size 1 added."""
        pre, value = self.expr(scope, node.value)
        axis = 0
        for item in items:
            if isinstance(item, ast.Constant) and item.value is None:
                value = ir.PrimCall(loc, B.expand_dims, [value, ir.Const(loc, axis)])
            elif not (
                isinstance(item, ast.Slice) and item.lower is item.upper is item.step is None
            ):
                raise self.error(scope, item, "a tile view takes only None and ':'")
            axis += 1
        return pre, value

    def masked_load(self, scope: Scope, node: ast.Call, loc: SourceLoc):
        """``tile.load(a, index, mask=, other=)``: a load whose mask is its own syntax."""
        args = self.call_args(scope, node, ("a", "index", "mask", "other"), 2)
        pre, array, idx = self.indexed(scope, args["a"], args["index"], loc)
        mask = None
        other: ir.Expr = ir.Const(loc, 0)
        if "mask" in args:
            p, mask = self.expr(scope, args["mask"])
            pre += p
        if "other" in args:
            p, other = self.expr(scope, args["other"])
            pre += p
        return pre, ir.Load(loc, array, idx, mask, other)

    def syntax_form_error(self, scope: Scope, fn: P.SyntaxForm, node: ast.Call):
        if fn is P.alloc:
            return self.error(scope, node, "tshared.alloc must be assigned directly to a name")
        if fn is P.range:
            return self.error(scope, node, "tile.range() can only be the iterable of a for loop")
        return self.error(scope, node, f"{fn.name}(...) is a statement, not a value")

    def inline(self, scope: Scope, fn: Func, node: ast.Call, loc: SourceLoc):
        if fn in self._inlining:
            raise self.error(
                scope, node, f"helper '{fn.name}' is recursive; kernels cannot recurse"
            )
        try:
            info = fn.source_info()
        except TesseraError as exc:  # no source, or not a plain def: shown at the call
            raise self.error(scope, node, str(exc)) from None
        fparams = info.fn_node.args.args
        if node.keywords or len(node.args) != len(fparams):
            raise self.error(
                scope, node, f"helper '{fn.name}' takes {len(fparams)} positional arguments"
            )
        inner = Scope(info, assigned_names(info.fn_node.body))
        prefix = self.fresh(f"{fn.name}_")
        pre: list[ir.Stmt] = []
        for param, arg in zip(fparams, node.args):
            found = self.view_of(scope, arg)
            if found is not None:  # a view: the helper indexes its base the same way
                pre += found[0]
                inner.views[param.arg] = found[1]
                continue
            if self.is_array_expr(scope, arg):  # by reference: the helper may not rebind it
                if param.arg in inner.locals:
                    raise self.error(
                        inner,
                        first_assignment(info.fn_node.body, param.arg),
                        f"cannot assign to parameter '{param.arg}' of helper '{fn.name}': "
                        "it is an array, passed by reference",
                    )
                inner.array_aliases[param.arg] = self.array_ref(scope, arg, complex_ok=True).name
                continue
            # by value: the parameter is a variable of the helper's own, which it may
            # reassign (the caller's value is unchanged), as in Python and CUDA
            p, e = self.value(scope, arg)
            if isinstance(e, ir.Name) and param.arg not in inner.locals:
                # a variable that the helper only reads: the helper reads the caller's
                # (tiles are immutable and the caller's names are out of the helper's
                # reach, so nothing can change it meanwhile), no copy of a tile to make
                pre += p
                inner.rename[param.arg] = e.name
                inner.plain.add(param.arg)
                continue
            inner.rename[param.arg] = f"{prefix}_{param.arg}"
            if isinstance(e, SMALL):
                pre += p + self.bind_argument(inner, param.arg, e, inner.rename[param.arg], loc)
            else:
                inner.plain.add(param.arg)
                pre += p + [ir.Assign(loc, inner.rename[param.arg], e)]
        for name in inner.locals:
            inner.rename[name] = f"{prefix}_{name}"
        inner.result = f"_ret{prefix}"
        self._inlining.append(fn)
        if fn not in self.helpers_used:
            self.helpers_used.append(fn)
        depth, self.depth = self.depth, 0  # the body's statements stand on their own
        try:
            body = self.block(inner, strip_docstring(info.fn_node.body))
        finally:
            self._inlining.pop()
            self.depth = depth
        body = eliminate_returns(body, f"{prefix}_done")
        return pre + body, self.helper_result(inner, loc)

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


_TILE_FORMS = {P.sum: B.tile_sum, P.max: B.tile_max, P.min: B.tile_min}


def _arange_from(node: ast.Call) -> ast.expr:
    """Triton's ``tl.arange(start, end)`` as ``start + tile.arange(end - start)``: the
    length must be a constant (start and end constexprs or literals, or ``end`` written
    ``start + n``: ``tile.arange(m0, m0 + BM)``)."""
    start, stop = node.args
    length = ast.copy_location(ast.BinOp(stop, ast.Sub(), start), node)
    if isinstance(stop, ast.BinOp) and isinstance(stop.op, ast.Add):  # (m0, m0 + BM): BM
        same = ast.dump(start)
        if ast.dump(stop.left) == same:
            length = stop.right
        elif ast.dump(stop.right) == same:
            length = stop.left
    call = ast.copy_location(ast.Call(node.func, [length], []), node)
    if isinstance(start, ast.Constant) and start.value == 0:
        return call
    return ast.copy_location(ast.BinOp(start, ast.Add(), call), node)
