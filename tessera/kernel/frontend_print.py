"""Lowering of ``print(...)`` and ``assert cond, "message"`` in kernel source: the
kernel's own debugging aids (docs/language.md, "Printing and asserting"). A mixin of
:class:`~tessera.kernel.frontend.Frontend`, kept apart because both are Python's syntax
given kernel meanings, with rules of their own.

What they may hold is what every target can print: constant strings and scalar values.
A CUDA printf takes its format at compile time, so an f-string (a format made at run
time) is refused, naming the line, with the spelling that works instead.
"""

from __future__ import annotations

import ast

from . import ir
from .frontend_values import SMALL, describe
from .scope import Scope


class PrintLowering:
    """``print`` calls and ``assert`` statements → :class:`ir.Print`, :class:`ir.Assert`."""

    def print_call(self, scope: Scope, node: ast.Call, loc) -> list[ir.Stmt]:
        if node.keywords:
            raise self.error(
                scope,
                node,
                "print() in a kernel takes no keyword arguments: it separates items with "
                "one space and ends the line, as Python's defaults do",
            )
        pre: list[ir.Stmt] = []
        items: list[str | ir.Expr] = []
        for arg in node.args:
            text = self.constant_text(scope, arg, "print()")
            if text is not None:
                items.append(text)
                continue
            p, value = self.value(scope, arg)
            if isinstance(value, SMALL):
                raise self.error(
                    scope,
                    arg,
                    f"print() takes single values, not {describe(value)}; print its parts",
                )
            pre += p
            items.append(value)
        return pre + [ir.Print(loc, items)]

    def assert_statement(self, scope: Scope, node: ast.Assert, loc) -> list[ir.Stmt]:
        message = ""
        if node.msg is not None:
            message = self.constant_text(scope, node.msg, "an assert")
            if message is None:
                raise self.error(scope, node.msg, "an assert's message must be a constant string")
        pre, cond = self.expr(scope, node.test)
        if pre:  # compiled out, a hoisted statement would still run: refuse it
            raise self.error(
                scope,
                node.test,
                "an assert's condition must be a plain expression (no helper calls or "
                "collectives); compute it into a variable first",
            )
        return [ir.Assert(loc, cond, message or ast.unparse(node.test))]

    def constant_text(self, scope: Scope, node: ast.expr, where: str) -> str | None:
        """The string ``node`` is (a literal, or a module constant), or None; an f-string
        is an error."""
        if isinstance(node, ast.JoinedStr):
            raise self.error(
                scope,
                node,
                f"f-strings cannot be used in {where} in a kernel (a GPU's printf takes its "
                'format at compile time); pass the values as items: print("x =", x)',
            )
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(
            self.resolve_global(scope, node), str
        ):
            _, value = self.expr(scope, node)  # a module constant: part of the cache key
            return value.value
        return None
