"""Array views in kernel source: ``As[j]`` (a sub-array of a shared or global array) and
``inp[R:]`` (an array seen from an offset), as CUDA code writes ``&As[j][0][0]`` and
``in + R``. A mixin of :class:`~tessera.kernel.frontend.Frontend`.

A view is no new array: it is a rule for rewriting indices into its *base* array. An
element ``v[i, j]`` of ``v = A[a, b:]`` is ``A[a, b + i, j]``; a block
``tile.load_block(v, (r, c), shape)`` is the block of ``A`` at ``(a, b + r, c)`` with the
leading index fixed. So every target, and every check, sees only the base array: an
index of a view may reach before the view's start (``v[i - R]``, the stencil idiom) as
long as it stays inside the base, and the bounds checks (debug target,
``TESSERA_BOUNDSCHECK``) compare with the base's extents. The start of a view is taken
when the view is made (``v = A[k:]`` then ``k += 1`` leaves ``v`` where it was), held in
variables of its own, so a view made in a loop (``s = As[k % STAGES]``) moves with it.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from . import ir
from .scope import Scope


@dataclass(frozen=True)
class View:
    """``base`` with its leading indices fixed (``lead``) and an offset added to each
    index of the remaining axes (``offsets``; None: 0). Each part is a constant
    (``("const", value)``) or the IR variable holding it (``("name", variable)``)."""

    base: str
    lead: tuple[tuple[str, object], ...]
    offsets: tuple[tuple[str, object] | None, ...]

    @property
    def ndim(self) -> int:
        return len(self.offsets)

    @property
    def trivial(self) -> bool:
        """The whole base array, unchanged."""
        return not self.lead and all(o is None for o in self.offsets)


def _part(part: tuple[str, object], loc) -> ir.Expr:
    """A fresh IR node for a view's part (IR nodes are not shared between statements)."""
    kind, value = part
    return ir.Const(loc, value) if kind == "const" else ir.Name(loc, value)


class ViewLowering:
    """Views → indices of their base arrays (see frontend.py for the rest)."""

    def view_of(self, scope: Scope, node: ast.expr) -> tuple[list[ir.Stmt], View] | None:
        """The view ``node`` denotes (a name bound to one, or ``A[...]`` of an array or a
        view with slices or fewer indices than dims), with the statements that compute
        its parts; None when ``node`` is not a view."""
        if isinstance(node, ast.Name):
            view = scope.views.get(node.id)
            return ([], view) if view is not None else None
        if not isinstance(node, ast.Subscript) or not self.is_array_like(scope, node.value):
            return None
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        inner = self.view_of(scope, node.value)
        pre, base = inner if inner is not None else ([], self.whole_view(scope, node.value))
        if not any(isinstance(i, ast.Slice) for i in items) and len(items) >= base.ndim:
            return None  # an element
        if inner is None:  # (a complex array is read an element at a time)
            self.array_ref(scope, node.value)
        return self.narrow(scope, node, base, items, pre)

    def is_array_like(self, scope: Scope, node: ast.expr) -> bool:
        if isinstance(node, ast.Name) and node.id in scope.views:
            return True
        if isinstance(node, ast.Subscript):
            return self.view_of(scope, node) is not None
        return self.is_array_expr(scope, node)

    def whole_view(self, scope: Scope, node: ast.expr) -> View:
        array = self.array_ref(scope, node, complex_ok=True)
        ndim = self.array_ndim(scope, array, node)
        return View(array.name, (), (None,) * ndim)

    def narrow(self, scope: Scope, node: ast.Subscript, base: View, items: list, pre: list):
        """``base[items]``: leading integers fix axes, ``a:`` slices move the origin."""
        loc = self.loc(scope, node)
        if len(items) > base.ndim:
            raise self.error(scope, node, f"a {base.ndim}-d view indexed with {len(items)} items")
        lead, offsets, fixing = list(base.lead), [], True
        for item, off in zip(items, base.offsets):
            if isinstance(item, ast.Slice):
                fixing = False
                if item.upper is not None or item.step is not None:
                    raise self.error(
                        scope,
                        item,
                        "a view takes a start only (A[a:]): its indices are checked against "
                        "the whole array, not an end",
                    )
                if item.lower is None:
                    offsets.append(off)
                    continue
                p, e = self.expr(scope, item.lower)
                pre = pre + p
                offsets.append(self._plus(off, e, loc))
            elif fixing:
                p, e = self.expr(scope, item)
                pre = pre + p
                lead.append(self._plus(off, e, loc))
            else:
                raise self.error(
                    scope, item, "a view fixes leading axes only: A[j] or A[j, a:], not A[a:, j]"
                )
        offsets += base.offsets[len(items) :]
        return pre, View(base.base, tuple(lead), tuple(offsets))

    def _plus(self, offset, e: ir.Expr, loc) -> ir.Expr:
        """``offset + e``: ``offset`` is None, a bound view's part or an expression."""
        if offset is None:
            return e
        base = _part(offset, loc) if isinstance(offset, tuple) else copy.deepcopy(offset)
        return ir.BinOp(loc, "+", base, e)

    def bind_view(self, scope: Scope, target: ast.Name, pre: list, view, loc) -> list[ir.Stmt]:
        """``v = A[...]``: ``v`` names the view; its parts not constant are held in
        variables of its own (one per part, the same on every assignment of ``v``)."""
        name = target.id
        old = scope.views.get(name)
        if name in scope.plain or (old is not None and _structure(old) != _structure(view)):
            raise self.error(
                scope,
                target,
                f"'{name}' holds a view of one array with the same number of fixed and "
                "moved axes everywhere it is assigned",
            )
        out = list(pre)
        prefix = f"_view_{scope.rename.get(name, name)}"
        parts = []
        for k, e in enumerate((*view.lead, *view.offsets)):
            if e is None or isinstance(e, tuple):
                parts.append(e)
            elif isinstance(e, ir.Const):
                parts.append(("const", e.value))
            else:
                out.append(ir.Assign(loc, f"{prefix}_{k}", e))
                parts.append(("name", f"{prefix}_{k}"))
        lead = tuple(parts[: len(view.lead)])
        scope.views[name] = View(view.base, lead, tuple(parts[len(view.lead) :]))
        return out

    def view_index(self, scope: Scope, node: ast.AST, view: View, idx: list[ir.Expr], loc):
        """The base array's index of element ``idx`` of ``view``."""
        if len(idx) != view.ndim:
            raise self.error(
                scope, node, f"a {view.ndim}-d view of '{view.base}' indexed with {len(idx)}"
            )
        return self.view_lead(view, loc) + [
            self._plus(off, i, loc) for off, i in zip(view.offsets, idx)
        ]

    @staticmethod
    def view_lead(view: View, loc) -> list[ir.Expr]:
        """The view's fixed leading indices, as fresh IR nodes."""
        return [_part(p, loc) if isinstance(p, tuple) else copy.deepcopy(p) for p in view.lead]

    def indexed(self, scope: Scope, array: ast.expr, index: ast.expr, loc, complex_ok=False):
        """``array[index]`` of an array or a view: (statements, the base array, its index)."""
        found = self.view_of(scope, array)
        if found is None:
            name = self.array_ref(scope, array, complex_ok=complex_ok)
            pre, idx = self.indices(scope, index)
            return pre, name, idx
        pre, view = found
        p, idx = self.indices(scope, index)
        base = ir.Name(self.loc(scope, array), view.base)
        return pre + p, base, self.view_index(scope, index, view, idx, loc)

    def view_slice(self, scope: Scope, node: ast.AST, view: View, starts, stops, loc):
        """A ``cp_async`` source ``v[a:b, c]`` of a view: the starts and stops in its base
        (``v``'s fixed indices come first, as unsliced axes)."""
        if len(starts) != view.ndim:
            raise self.error(
                scope, node, f"a {view.ndim}-d view of '{view.base}' indexed with {len(starts)}"
            )
        starts = self.view_index(scope, node, view, starts, loc)
        moved = [
            None if stop is None else self._plus(off, stop, loc)
            for off, stop in zip(view.offsets, stops)
        ]
        return starts, [None] * len(view.lead) + moved

    def view_shape(self, scope: Scope, node: ast.Subscript, array: ast.expr, loc):
        """``v.shape[d]``: the base's extent along the axis, less the view's offset."""
        pre, view = self.view_of(scope, array)
        axis = self.constant_value(scope, node.slice)
        if not isinstance(axis, int) or not -view.ndim <= axis < view.ndim:
            raise self.error(
                scope, node.slice, f"shape index must be a constant in [0, {view.ndim})"
            )
        axis %= view.ndim
        extent = ir.Shape(loc, ir.Name(loc, view.base), len(view.lead) + axis)
        off = view.offsets[axis]
        if off is None:
            return pre, extent
        return pre, ir.BinOp(loc, "-", extent, _part(off, loc) if isinstance(off, tuple) else off)


def _structure(view: View) -> tuple:
    return (view.base, len(view.lead), len(view.offsets))
