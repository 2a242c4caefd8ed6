"""Small value types in kernel source: tuples of values and complex numbers.

Neither reaches the IR. A tuple (``p = (x, y, z)``, a helper's ``return fx, fy, fz``) is
a fixed number of values, and a complex number is two floats, so the frontend *scalarises*
them: a variable holding one becomes one IR variable per component (``p__0``, ``z__re``),
and arithmetic on complex numbers is spelled out in real arithmetic here. Every target
then runs the same real operations in the same order, so they agree bit for bit, and the
CUDA lowering needs nothing it did not have. A mixin of
:class:`~tessera.kernel.frontend.Frontend`, like the call lowering.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from ..dtypes import COMPLEX_PARTS
from ..errors import SourceLoc
from . import ir, literals
from .func import Func
from .scope import Scope


@dataclass
class TupleValue:
    """A tuple of values (each an IR expression or itself a small value)."""

    items: list


@dataclass
class ComplexValue:
    """A complex number as its two real components."""

    re: ir.Expr
    im: ir.Expr


SMALL = (TupleValue, ComplexValue)


def describe(value: object) -> str:
    """What a value is, for messages: "a tuple of 3 values", "a complex number"."""
    if isinstance(value, TupleValue):
        return f"a tuple of {len(value.items)} values"
    if isinstance(value, ComplexValue):
        return "a complex number"
    return "a single value"


def shape_of(value: object) -> object:
    """The structure of a value, to compare the values assigned to one name."""
    if isinstance(value, TupleValue):
        return tuple(shape_of(v) for v in value.items)
    if isinstance(value, ComplexValue):
        return "complex"
    return "value"


def leaves(value: object) -> list[ir.Expr]:
    """The IR values a small value consists of, in order."""
    if isinstance(value, TupleValue):
        return [leaf for v in value.items for leaf in leaves(v)]
    if isinstance(value, ComplexValue):
        return [value.re, value.im]
    return [value]


def rebuild(shape: object, parts: list[ir.Expr]) -> object:
    """The value of structure ``shape`` whose leaves are ``parts`` (consumed in order)."""
    if shape == "complex":
        return ComplexValue(parts.pop(0), parts.pop(0))
    if isinstance(shape, tuple):
        return TupleValue([rebuild(s, parts) for s in shape])
    return parts.pop(0)


def component_names(base: str, shape: object, shown: bool = False) -> list[str]:
    """The IR variables that hold a variable ``base`` of structure ``shape`` (``shown``:
    how the source spells each: ``z.real``, ``p[0]``)."""
    if shape == "complex":
        return [f"{base}.real", f"{base}.imag"] if shown else [f"{base}__re", f"{base}__im"]
    if isinstance(shape, tuple):
        return [
            n
            for k, s in enumerate(shape)
            for n in component_names(f"{base}[{k}]" if shown else f"{base}__{k}", s, shown)
        ]
    return [base]


class ValueLowering:
    """Tuples and complex numbers → real IR (see the module docstring)."""

    # ------------------------------------------------------------------ variables
    def bind_small(
        self, scope: Scope, target: ast.Name, value: object, loc: SourceLoc
    ) -> list[ir.Stmt]:
        """``name = <tuple or complex>``: assign each component's variable. Every component
        is evaluated before any is assigned, so ``p = (p[1], p[0])`` swaps."""
        shape = shape_of(value)
        self.check_shape(scope, target, shape)
        base = self.local_name(scope, target)
        names = component_names(base, shape)
        scope.small[target.id] = (shape, names)
        for n, shown in zip(names, component_names(target.id, shape, shown=True)):
            self.user_vars[n] = shown  # messages name ``z.real``, ``p[0]``
        return self.assign_leaves(names, leaves(value), loc)

    def assign_leaves(self, names: list[str], values: list[ir.Expr], loc) -> list[ir.Stmt]:
        if len(names) == 1:
            return [ir.Assign(loc, names[0], values[0])]
        pre: list[ir.Stmt] = []
        temps = self.assign_temps(pre, values, loc)
        return pre + [ir.Assign(loc, n, v) for n, v in zip(names, temps)]

    def assign_temps(self, pre: list[ir.Stmt], values: list[ir.Expr], loc) -> list[ir.Expr]:
        """Each value in a fresh variable (constants stay), the assignments added to
        ``pre``: evaluating all before assigning any keeps ``a, b = b, a`` a swap."""
        temps: list[ir.Expr] = []
        for v in values:
            if isinstance(v, (ir.Const, ir.Shape)):
                temps.append(v)
                continue
            t = self.fresh("t")
            pre.append(ir.Assign(loc, t, v))
            temps.append(ir.Name(loc, t))
        return temps

    @staticmethod
    def rebuild_value(like: object, parts: list[ir.Expr]) -> object:
        return rebuild(shape_of(like), list(parts))

    def unpack_value(
        self, scope: Scope, target: ast.Tuple, value: object, loc: SourceLoc
    ) -> list[ir.Stmt]:
        """``(a, b), c = ...``: a nested target takes a tuple of its length (the value's
        components are already in variables of their own)."""
        if not isinstance(value, TupleValue) or len(value.items) != len(target.elts):
            raise self.error(
                scope, target, f"unpacking {describe(value)} into {len(target.elts)} targets"
            )
        out: list[ir.Stmt] = []
        for tgt, v in zip(target.elts, value.items):
            if isinstance(tgt, ast.Tuple):
                out += self.unpack_value(scope, tgt, v, loc)
            elif not isinstance(tgt, ast.Name):
                raise self.error(scope, tgt, "can only unpack a tuple into names")
            elif isinstance(v, SMALL):
                out += self.bind_small(scope, tgt, v, loc)
            else:
                self.check_shape(scope, tgt, "value")
                scope.plain.add(tgt.id)
                out.append(ir.Assign(loc, self.local_name(scope, tgt), v))
        return out

    def helper_return(self, scope: Scope, node: ast.Return, loc: SourceLoc) -> list[ir.Stmt]:
        """``return v`` in a helper: every return gives a value of one structure (one
        value, a complex number, or a tuple of one length), as a C function has one
        return type."""
        pre, value = self.value(scope, node.value)
        shape = shape_of(value)
        if scope.result_shape is None:
            scope.result_shape, scope.result_line = shape, loc.line
        elif scope.result_shape != shape:
            raise self.error(
                scope,
                node,
                f"helper '{scope.info.fn_node.name}' returns {_shape_text(shape)} here but "
                f"{_shape_text(scope.result_shape)} at line {scope.result_line}; every "
                "return must give the same kind of value",
            )
        names = component_names(scope.result, shape)
        return pre + self.assign_leaves(names, leaves(value), loc) + [ir.Return(loc)]

    def helper_result(self, scope: Scope, loc: SourceLoc) -> object:
        """What a call of an inlined helper evaluates to (its result variables)."""
        if scope.result_shape is None or scope.result_shape == "value":
            return ir.Name(loc, scope.result)
        names = component_names(scope.result, scope.result_shape)
        return rebuild(scope.result_shape, [ir.Name(loc, n) for n in names])

    def bind_argument(self, inner: Scope, param: str, value: object, name: str, loc):
        """A helper's parameter receives a tuple or a complex number: its own variables
        (the caller's are never written: a helper may reassign its parameters)."""
        shape = shape_of(value)
        names = component_names(name, shape)
        inner.small[param] = (shape, names)
        return self.assign_leaves(names, leaves(value), loc)

    def holds_small(self, scope: Scope, node: ast.expr) -> bool:
        """Whether ``node`` may be a tuple or a complex number: a variable holding one, or
        an expression whose value is only known once lowered (a call, arithmetic)."""
        if isinstance(node, ast.Name):
            return node.id in scope.small or self.complex_global(scope, node.id) is not None
        if isinstance(node, ast.Constant):
            return isinstance(node.value, complex)
        if isinstance(node, ast.BinOp):  # ``(z * w).real``
            return self.holds_small(scope, node.left) or self.holds_small(scope, node.right)
        if isinstance(node, ast.UnaryOp):
            return self.holds_small(scope, node.operand)
        if isinstance(node, (ast.Tuple, ast.List)):
            return True
        if isinstance(node, ast.Subscript):  # ``p[0][1]`` of nested tuples, ``x[i].imag``
            base = node.value
            if isinstance(base, ast.Name) and base.id not in scope.small:
                name = scope.array_aliases.get(base.id) or scope.rename.get(base.id, base.id)
                return self.is_complex_array(ir.Name(None, name))
            return self.holds_small(scope, base)
        if isinstance(node, ast.Call):
            fn = self.resolve_global(scope, node.func)
            return fn is builtins.complex or isinstance(fn, Func)
        return False

    def small_select(self, scope: Scope, node: ast.IfExp, cond, then, orelse, pre, loc):
        """``a if c else b`` of tuples or complex numbers: one branch's components."""
        (pa, a), (pb, b) = then, orelse
        zero = ir.Const(loc, 0.0)
        if isinstance(a, ComplexValue) and shape_of(b) == "value":  # a real has no imag
            b = ComplexValue(b, zero)
        if isinstance(b, ComplexValue) and shape_of(a) == "value":
            a = ComplexValue(a, zero)
        if shape_of(a) != shape_of(b):
            raise self.error(
                scope, node, f"the branches give {describe(a)} and {describe(b)}; give one kind"
            )
        names = [self.fresh("sel") for _ in leaves(a)]
        body_a = pa + [ir.Assign(loc, n, v) for n, v in zip(names, leaves(a))]
        body_b = pb + [ir.Assign(loc, n, v) for n, v in zip(names, leaves(b))]
        value = rebuild(shape_of(a), [ir.Name(loc, n) for n in names])
        return pre + [ir.If(loc, cond, body_a, body_b)], value

    def check_shape(self, scope: Scope, target: ast.Name, shape: object) -> None:
        """One name holds one kind of value: a single value, a complex number, or a tuple
        of one structure (as in CUDA, where a variable has one type)."""
        held = scope.small[target.id][0] if target.id in scope.small else None
        if held is None and target.id in scope.plain:
            held = "value"
        if held is not None and held != shape:
            have = _shape_text(held)
            raise self.error(
                scope, target, f"'{target.id}' holds {have} elsewhere, {_shape_text(shape)} here"
            )

    def small_name(self, scope: Scope, name: str, loc: SourceLoc) -> object | None:
        """The value of a variable holding a tuple or a complex number (or of a module
        constant that is a complex number), else None."""
        if name not in scope.small:
            value = self.complex_global(scope, name)
            return None if value is None else complex_constant(value, loc)
        shape, names = scope.small[name]
        return rebuild(shape, [ir.Name(loc, n) for n in names])

    def complex_literal(self, value: complex, loc: SourceLoc) -> ComplexValue:
        return complex_constant(value, loc)

    def complex_global(self, scope: Scope, name: str) -> complex | None:
        """A module constant that is a complex number (``J = 1j``), baked in as numbers
        are; None for anything else."""
        if name in scope.locals or name in scope.rename or name in self.params:
            return None
        value = scope.info.globals.get(name)
        if type(value) is not complex:
            return None
        self.global_constants[name] = value
        return value

    # ------------------------------------------------------------------ expressions
    def small_subscript(self, scope: Scope, node: ast.Subscript, value: object, loc):
        """``p[k]`` of a tuple (or of a list, read-only in a kernel): with a constant
        ``k`` the item itself, as for a CUDA float3's ``.x``; with a value ``k`` (a
        stencil's coefficient ``c[j]`` in a loop) a choice among the items, which must be
        single values. An index outside ``[-n, n)`` is an error where checks are on
        (bounds-checked launches, the debug target) and reads the last item elsewhere,
        as an array read past its end reads whatever is there."""
        if not isinstance(value, TupleValue):
            raise self.error(scope, node, f"{describe(value)} cannot be indexed")
        n = len(value.items)
        k = self.constant_value(scope, node.slice)
        if type(k) is int:
            if not -n <= k < n:
                raise self.error(scope, node, f"index {k} is out of range of {n} values")
            return [], value.items[k]
        if k is not None:
            raise self.error(scope, node, f"a sequence of {n} values takes an integer index")
        if any(isinstance(item, SMALL) for item in value.items):
            raise self.error(
                scope, node, "a sequence of tuples or complex numbers takes a constant index"
            )
        pre, index = self.expr(scope, node.slice)
        t = self.fresh("idx")
        pre.append(ir.Assign(loc, t, index))
        i = ir.Name(loc, t)
        text = f"{ast.unparse(node)}: index out of range of {n} values"
        inside = ir.BoolOp(
            loc,
            "and",
            [
                ir.Compare(loc, ">=", i, ir.Const(loc, -n)),
                ir.Compare(loc, "<", i, ir.Const(loc, n)),
            ],
        )
        pre.append(ir.Assert(loc, inside, text))
        chosen = value.items[n - 1]
        for j in range(n - 2, -1, -1):  # item j where i == j or i == j - n
            hit = ir.BoolOp(
                loc,
                "or",
                [
                    ir.Compare(loc, "==", i, ir.Const(loc, j)),
                    ir.Compare(loc, "==", i, ir.Const(loc, j - n)),
                ],
            )
            chosen = ir.IfExp(loc, hit, value.items[j], chosen)
        return pre, chosen

    def small_attribute(self, scope: Scope, node: ast.Attribute, value: object):
        if isinstance(value, ComplexValue) and node.attr in ("real", "imag"):
            return value.re if node.attr == "real" else value.im
        raise self.error(scope, node, f"{describe(value)} has no attribute '{node.attr}'")

    def complex_call(self, scope: Scope, node: ast.Call, loc: SourceLoc):
        """``complex(x, y)`` (or ``complex(x)``): a complex number of two floats."""
        if node.keywords or not 1 <= len(node.args) <= 2:
            raise self.error(scope, node, "complex(real, imag) takes one or two values")
        pre, parts = [], []
        for a in node.args:
            p, e = self.expr(scope, a)
            pre += p
            parts.append(_floating(e))
        im = parts[1] if len(parts) == 2 else ir.Const(loc, 0.0)
        return pre, ComplexValue(parts[0], im)

    def conjugate(self, scope: Scope, node: ast.Call, loc: SourceLoc):
        if node.args or node.keywords:
            raise self.error(scope, node, "conjugate() takes no arguments")
        pre, z = self.value(scope, node.func.value)
        if not isinstance(z, ComplexValue):
            raise self.error(scope, node, f"{describe(z)} has no method 'conjugate'")
        return pre, ComplexValue(z.re, ir.UnaryOp(loc, "-", z.im))

    def small_binop(self, scope: Scope, node: ast.BinOp, op: str, a: object, b: object, loc):
        """Complex arithmetic in real operations (a real operand has no imaginary part)."""
        if isinstance(a, TupleValue) or isinstance(b, TupleValue):
            raise self.error(
                scope,
                node,
                "tuples are indexed, unpacked and passed to helpers; do arithmetic on their "
                "elements (p[0] + q[0])",
            )
        pre: list[ir.Stmt] = []
        if op in ("+", "-"):
            ar, ai = (a.re, a.im) if isinstance(a, ComplexValue) else (a, None)
            br, bi = (b.re, b.im) if isinstance(b, ComplexValue) else (b, None)
            re = ir.BinOp(loc, op, ar, br)
            if ai is None:
                im = bi if op == "+" else ir.UnaryOp(loc, "-", bi)
            else:
                im = ai if bi is None else ir.BinOp(loc, op, ai, bi)
            return pre, ComplexValue(re, im)
        if op == "*":
            if not isinstance(a, ComplexValue):
                a, b = b, a  # real * z = z * real
            if not isinstance(b, ComplexValue):
                b = self.once(pre, b, loc)
                return pre, ComplexValue(ir.BinOp(loc, "*", a.re, b), ir.BinOp(loc, "*", a.im, b))
            ar, ai, br, bi = (self.once(pre, v, loc) for v in (a.re, a.im, b.re, b.im))

            def mul(x, y):
                return ir.BinOp(loc, "*", x, y)

            re = ir.BinOp(loc, "-", mul(ar, br), mul(ai, bi))
            im = ir.BinOp(loc, "+", mul(ar, bi), mul(ai, br))
            return pre, ComplexValue(re, im)
        if op == "/":
            return self.complex_divide(pre, a, b, loc)
        raise self.error(scope, node, f"operator {op} is not defined for complex numbers")

    def complex_divide(self, pre: list[ir.Stmt], a: object, b: object, loc):
        """``a / b`` as CPython and Numba compute it (Smith's method: no overflow from
        squaring the divisor)."""
        ar, ai = (a.re, a.im) if isinstance(a, ComplexValue) else (a, ir.Const(loc, 0.0))
        ar, ai = self.once(pre, ar, loc), self.once(pre, ai, loc)
        if not isinstance(b, ComplexValue):
            b = self.once(pre, b, loc)
            return pre, ComplexValue(ir.BinOp(loc, "/", ar, b), ir.BinOp(loc, "/", ai, b))
        br, bi = self.once(pre, b.re, loc), self.once(pre, b.im, loc)

        def op(o, x, y):
            return ir.BinOp(loc, o, x, y)

        wide = ir.Compare(loc, ">=", ir.MathCall(loc, "fabs", [br]), ir.MathCall(loc, "fabs", [bi]))
        wide = self.once(pre, wide, loc)
        ratio = self.once(pre, ir.IfExp(loc, wide, op("/", bi, br), op("/", br, bi)), loc)
        denom_wide = op("+", br, op("*", bi, ratio))
        denom_tall = op("+", bi, op("*", br, ratio))
        denom = self.once(pre, ir.IfExp(loc, wide, denom_wide, denom_tall), loc)
        re_wide = op("/", op("+", ar, op("*", ai, ratio)), denom)
        im_wide = op("/", op("-", ai, op("*", ar, ratio)), denom)
        re_tall = op("/", op("+", op("*", ar, ratio), ai), denom)
        im_tall = op("/", op("-", op("*", ai, ratio), ar), denom)
        return pre, ComplexValue(
            ir.IfExp(loc, wide, re_wide, re_tall), ir.IfExp(loc, wide, im_wide, im_tall)
        )

    def once(self, pre: list[ir.Stmt], value: ir.Expr, loc: SourceLoc) -> ir.Expr:
        """``value`` in a variable (appended to ``pre``) when it is more than a name or a
        constant, so a component used twice is computed once and expressions stay small."""
        if isinstance(value, (ir.Name, ir.Const)):
            return value
        number = literals.folded(value)  # a literal's part: stays a (weak) literal
        if number is not None:
            return number
        t = self.fresh("c")
        pre.append(ir.Assign(loc, t, value))
        return ir.Name(loc, t)

    def small_unary(self, scope: Scope, node: ast.UnaryOp, op: str, value: object, loc):
        if isinstance(value, ComplexValue) and op in "-+":
            if op == "+":
                return [], value
            return [], ComplexValue(ir.UnaryOp(loc, "-", value.re), ir.UnaryOp(loc, "-", value.im))
        raise self.error(scope, node, f"operator {op} is not defined for {describe(value)}")

    def small_compare(self, scope: Scope, node: ast.Compare, a: object, b: object, loc):
        """``z == w`` / ``z != w`` of complex numbers (a real side has no imaginary part)."""
        op = node.ops[0]
        if len(node.ops) != 1 or not isinstance(op, (ast.Eq, ast.NotEq)):
            raise self.error(scope, node, "complex numbers compare only with == and !=")
        if isinstance(a, TupleValue) or isinstance(b, TupleValue):
            raise self.error(scope, node, "tuples cannot be compared; compare their elements")
        zero = ir.Const(loc, 0.0)
        ar, ai = (a.re, a.im) if isinstance(a, ComplexValue) else (a, zero)
        br, bi = (b.re, b.im) if isinstance(b, ComplexValue) else (b, zero)
        if isinstance(op, ast.Eq):
            parts = [ir.Compare(loc, "==", ar, br), ir.Compare(loc, "==", ai, bi)]
            return [], ir.BoolOp(loc, "and", parts)
        parts = [ir.Compare(loc, "!=", ar, br), ir.Compare(loc, "!=", ai, bi)]
        return [], ir.BoolOp(loc, "or", parts)

    # ------------------------------------------------------------------ complex arrays
    def is_complex_array(self, array: ir.Name) -> bool:
        p = self.params.get(array.name)
        return p is not None and p.kind == "array" and p.dtype in COMPLEX_PARTS

    def load_complex(self, array: ir.Name, idx: list[ir.Expr], loc: SourceLoc) -> ComplexValue:
        """``x[i]`` of a complex array: its floats ``x[i, 0]`` and ``x[i, 1]`` (the kernel
        sees a complex array as its floats with an axis of 2 added, launch.py)."""
        return ComplexValue(
            ir.Load(loc, array, [*idx, ir.Const(loc, 0)]),
            ir.Load(loc, array, [*idx, ir.Const(loc, 1)]),
        )

    def store_complex(self, scope: Scope, node, array: ir.Name, idx, value, loc):
        """``x[i] = z`` into a complex array (a real value has no imaginary part)."""
        if isinstance(value, TupleValue):
            raise self.error(scope, node, f"cannot store {describe(value)} in a complex array")
        if not isinstance(value, ComplexValue):
            value = ComplexValue(value, ir.Const(loc, 0.0))
        pre: list[ir.Stmt] = []
        idx = [self.once(pre, i, loc) for i in idx]  # each index evaluated once
        return pre + [
            ir.Store(loc, array, [*idx, ir.Const(loc, 0)], value.re),
            ir.Store(loc, array, [*idx, ir.Const(loc, 1)], value.im),
        ]

    def small_abs(self, value: ComplexValue, loc: SourceLoc):
        """``abs(z)``: the hypotenuse, as NumPy and Numba compute it (no overflow)."""
        return ir.MathCall(loc, "hypot", [value.re, value.im])


def complex_constant(value: complex, loc: SourceLoc) -> ComplexValue:
    """A complex literal (``2j``, ``1 + 2j`` is ``1`` plus this): two float literals,
    weak as every float literal is (f32 parts unless an f64 value joins them)."""
    return ComplexValue(ir.Const(loc, float(value.real)), ir.Const(loc, float(value.imag)))


def _floating(e: ir.Expr) -> ir.Expr:
    """An integer literal component of complex() as a float literal (1 → 1.0)."""
    if isinstance(e, ir.Const) and type(e.value) is int:
        return ir.Const(e.loc, float(e.value))
    return e


def _shape_text(shape: object) -> str:
    if shape == "complex":
        return "a complex number"
    if isinstance(shape, tuple):
        return f"a tuple of {len(shape)} values"
    return "a single value"
