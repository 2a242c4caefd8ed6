"""A kernel as a file of its own: its source, the helpers it calls and the names it reads.

A repro pack must rebuild the kernel without the user's program (which may launch it at
import time, need data files, or take minutes to reach the launch). So the kernel's source
is written out with what its body and decorator name: modules become imports, Tessera's
public names ``from tessera import ...``, numbers and strings their literal value, and
``@tessera.func`` helpers from the same program their own source, recursively. What
cannot be written out that way is listed, so a replay that fails on it says why.
"""

from __future__ import annotations

import ast
import builtins
import sys
import textwrap
import types

from ..kernel.source import source_text_of

_LITERALS = (bool, int, float, str, type(None))


def standalone(fn: types.FunctionType) -> tuple[str, list[str]]:
    """(the text of a module that defines ``fn`` as the program did, names it could not
    write out)."""
    imports: dict[str, str] = {}
    values: dict[str, str] = {}
    helpers: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()
    _add(fn, imports, values, helpers, missing, seen)
    header = [
        '"""A kernel written out by Tessera\'s crash capture (tessera pack-repro)."""',
        "",
        "from __future__ import annotations  # array dims name symbols, never evaluated",
        "",
    ]
    text = "\n".join(header + sorted(set(imports.values())) + [""] + list(values.values()))
    return text + "\n\n\n" + "\n\n\n".join(helpers) + "\n", missing


def _add(fn, imports, values, helpers, missing, seen) -> None:
    seen.add(fn.__name__)
    source = textwrap.dedent("".join(source_text_of(fn, "function").lines))  # as compiled
    for name in sorted(_names(source) - {fn.__name__}):
        if name in seen or name in vars(builtins) or name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        seen.add(name)
        if isinstance(value, types.ModuleType):
            imports[name] = _import_module(name, value)
        elif getattr(sys.modules.get("tessera"), name, None) is value:
            imports[name] = f"from tessera import {name}"
        elif isinstance(value, _LITERALS):
            values[name] = f"{name} = {value!r}"
        elif _user_function(value) is not None:
            _add(_user_function(value), imports, values, helpers, missing, seen)
        elif _public(value) is not None:
            imports[name] = _public(value)
        else:
            missing.append(name)
    helpers.append(source.rstrip())


def _names(source: str) -> set[str]:
    """The global names the function's source reads (body, annotations, decorators): every
    name it loads, less its parameters and the names it assigns."""
    tree = ast.parse(source)
    local = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (names if isinstance(n.ctx, ast.Load) else local).add(n.id)
    return names - local


def _import_module(name: str, module: types.ModuleType) -> str:
    full = module.__name__
    if full == name:
        return f"import {full}"
    if "." in full:
        parent, _, leaf = full.rpartition(".")
        return f"from {parent} import {leaf}" + ("" if leaf == name else f" as {name}")
    return f"import {full} as {name}"


def _user_function(value: object) -> types.FunctionType | None:
    """The Python function behind a helper (``@tessera.func``) or kernel of the program."""
    fn = getattr(value, "fn", None)
    if isinstance(fn, types.FunctionType) and not fn.__module__.startswith("tessera"):
        return fn
    return None


def _public(value: object) -> str | None:
    """``from module import name`` for a class or function a module exposes by name."""
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not module or not name or "." in name or module == "__main__":
        return None
    return f"from {module} import {name}"
