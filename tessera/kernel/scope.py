"""Name bindings while the frontend lowers a function, and the AST queries it needs."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .source import SourceInfo


@dataclass
class Scope:
    """Name bindings of the function being lowered (the kernel or an inlined helper)."""

    info: SourceInfo
    locals: set[str]
    rename: dict[str, str] = field(default_factory=dict)  # source name → IR name
    array_aliases: dict[str, str] = field(default_factory=dict)  # helper array param → IR name
    result: str | None = None  # helper: the IR variable that receives the return value
    # helper: the structure of the value it returns (a tuple's, a complex number's), fixed
    # by its first ``return`` (every return must match), and that return's line
    result_shape: object = None
    result_line: int = 0
    # names holding a tuple or a complex number: source name → (structure, IR variables)
    small: dict[str, tuple[object, list[str]]] = field(default_factory=dict)
    plain: set[str] = field(default_factory=set)  # names assigned a single value
    views: dict[str, object] = field(default_factory=dict)  # name → its frontend_views.View


def strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def assigned_names(body: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def first_assignment(body: list[ast.stmt], name: str) -> ast.AST:
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return node
    return body[0]
