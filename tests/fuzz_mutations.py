"""Mutated kernels for tests/test_mutation_fuzz.py: the kernels of the test suite, with
tokens swapped and unsupported constructs inserted, as a careless or hostile user would
write them.

The seeds are read from the test files with ``ast`` (each ``@kernel`` function, with the
``@ts.func`` helpers it calls and the module constants it may read). A mutation is made of
choices (``choose(label, options)``), so hypothesis can draw them, replay them and shrink
them; nothing here imports Tessera.
"""

from __future__ import annotations

import ast
import copy
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
SEED_FILES = (
    "classic_kernels.py",
    "test_language.py",
    "test_language_groups.py",
    "test_language_numerics.py",
    "test_integer_rules.py",
    "test_scans_shuffles.py",
)

# what every mutated module starts with: the names the seed kernels use, plus helpers
# that recurse through each other and a constant, for the mutations to reach for
PRELUDE = """\
from __future__ import annotations

import math

import numpy as np

import tessera
import tessera as ts
from tessera import *  # noqa: F403
from tessera import tile

CONST = 3


@ts.func
def _fuzz_ping(v):
    return _fuzz_pong(v)


@ts.func
def _fuzz_pong(v):
    return _fuzz_ping(v - 1)


@ts.func
def _fuzz_helper(a, i):
    a[i] = 2.0
    if i > 0:
        return a[0]
    return -1.0


_fuzz_lambda = ts.func(lambda v: v)


@ts.func
async def _fuzz_async(v):
    return v


@ts.func
def _fuzz_nested(v):
    for q in range(2):
        if v > q:
            return _fuzz_helper(v, q)
    return v


@ts.func
def _fuzz_arrays(a):
    b = a
    return b[0] + a.shape[0]

"""

Choose = Callable[[str, Sequence], object]


@dataclass(frozen=True)
class Seed:
    """One kernel of the test suite: its name, where it comes from and the source of the
    module-level statements it needs (constants, helpers, then the kernel)."""

    name: str
    origin: str
    source: str

    def tree(self) -> ast.Module:
        return ast.parse(self.source)


def _decorator_names(fn: ast.FunctionDef) -> set[str]:
    names = set()
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


def _called_names(node: ast.AST) -> set[str]:
    return {
        n.func.id
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }


@functools.cache
def seeds() -> tuple[Seed, ...]:
    """Every seed kernel, in a stable order."""
    out = []
    for file in SEED_FILES:
        module = ast.parse((HERE / file).read_text())
        constants = [
            s
            for s in module.body
            if isinstance(s, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id.isupper() for t in s.targets)
            and isinstance(s.value, (ast.Constant, ast.BinOp))
        ]
        helpers = {
            s.name: s
            for s in module.body
            if isinstance(s, ast.FunctionDef) and "func" in _decorator_names(s)
        }
        for s in module.body:
            if not (isinstance(s, ast.FunctionDef) and "kernel" in _decorator_names(s)):
                continue
            used, todo = [], list(_called_names(s))
            while todo:
                name = todo.pop()
                if name in helpers and helpers[name] not in used:
                    used.append(helpers[name])
                    todo.extend(_called_names(helpers[name]))
            used.sort(key=lambda h: h.lineno)
            body = ast.Module(body=[*constants, *used, s], type_ignores=[])
            out.append(Seed(s.name, file, ast.unparse(body)))
    return tuple(out)


def module_text(tree: ast.Module) -> str:
    """The text of a mutated module: the prelude, then the (mutated) seed."""
    return PRELUDE + "\n" + ast.unparse(ast.fix_missing_locations(tree)) + "\n"


# ----------------------------------------------------------------------------- choices

BIN_OPS = (
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.LShift, ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.MatMult,
)  # fmt: skip
CMP_OPS = (
    ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn,
)  # fmt: skip
UNARY_OPS = (ast.USub, ast.UAdd, ast.Not, ast.Invert)
NUMBERS = (
    0, 1, -1, 2, 7, 0.0, -0.0, 0.5, -2.5, 1e308, 5e-324, float("inf"), 2**31 - 1, 2**31,
    2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30,
    10**400, True, False, None, "text", b"bytes", 1j, ...,
)  # fmt: skip
EXTRA_NAMES = (
    "tile", "math", "np", "ts", "tessera", "print", "len", "range", "min", "abs", "int",
    "float", "CONST", "_fuzz_ping", "grid_groups", "kernel", "f64", "i8", "u64", "bool_",
    "f16", "bf16", "mut", "constexpr", "tbarrier", "tshared", "group_id", "reduce_sum",
    "no_such_name", "KiB", "__name__", "object",
)  # fmt: skip
ATTRIBUTES = (
    "linear_id", "id", "sum", "max", "min", "prefix_sum", "shuffle", "shuffle_xor", "atomic_add",
    "load", "store", "range", "alloc", "global_", "shared", "wait", "exp", "sqrt", "floor",
    "isnan", "fmod", "pi", "inf", "nan", "shape", "size", "dtype", "real", "T", "nope",
)  # fmt: skip
# annotations a parameter may be given instead of its own
ANNOTATIONS = (
    "'f32[n'", "'mut[f32[n]]'", "f32[n, m, k, l]", "f32[-1]", "f32[0]", "f32[n][m]",
    "mut[mut[f32[n]]]", "constexpr[3]", "f32[1.5]", "f32['n/']", "f32['K/tp/x']",
    "np.float32", "int", "f32[2 ** 63]", "f32[()]", "reduce_sum[f32]", "reduce_sum[f32[n]]",
    "mut[f32]", "mut[3]", "f32[n:m]", "'f32'", "f32[tile]", "i64", "bool_[n]", "f16[n]",
    "bf16[n, n]", "u64[n]", "constexpr", "f32[grid_groups]", "f32['K/tp']", "i8[n]",
    "mut[bool_[n]]", "mut[i64[n, 3]]", "f32[n, 1]", "mut[f16[n]]", "bool_", "u8", "f16",
)  # fmt: skip
# parameters a kernel may be given in addition to its own
PARAMETERS = (
    "cx: constexpr", "sc: i64", "fl: f64", "hf: f16", "bb: bool_", "arr: i32[n]",
    "arr2: mut[u8[n, 2]]", "w: u64", "h16: mut[bf16[n]]", "i8s: i8[n]",
)  # fmt: skip
INDEX_EDITS = ("drop", "add", "slice", "full_slice", "ellipsis", "none", "negative", "float",
               "huge", "string")  # fmt: skip
CALL_EDITS = ("drop_arg", "add_arg", "keyword", "mask_keyword", "star_arg", "double_star")
STATEMENT_EDITS = ("delete", "duplicate", "move_up")

# unsupported (or hostile) code to insert; {v} is a scalar variable of the kernel, {a} an
# array parameter (or a variable when there is none)
SNIPPETS = (
    "try:\n    fz = 1\nexcept Exception:\n    pass",
    "try:\n    pass\nfinally:\n    pass",
    "with open('f') as fh:\n    pass",
    "fz = lambda q: q + 1",
    "class Fz:\n    pass",
    "fz = sum((q for q in range(3)))",
    "fz = [1, 2, 3]",
    "fz = {1: 2}",
    "fz = {1, 2}",
    "fz = [q for q in range(3)]",
    "fz = {q: q for q in range(3)}",
    "fz = {q for q in range(3)}",
    "fz = f'{{v}}'",
    "fz = max(*{a})",
    "fz = min(*(1, 2))",
    "fz = abs(**{})",
    "global fz_global",
    "def fz_inner():\n    return 1",
    "fz = _fuzz_ping({v})",
    "yield {v}",
    "fz = yield",
    "assert {v} > 0",
    "del {v}",
    "if (fz := {v}) > 0:\n    pass",
    "fz = {a}[1:3]",
    "fz = {a}[:, 0]",
    "fz = 0 < {a} < 1",
    "fz = {a} + 1",
    "fz = {a}.T",
    "fz = {v}.real",
    "fz = {v}.bit_length()",
    "fz = unknown_fn({v})",
    "fz = np.sum({a})",
    "print({v})",
    "fz = tile.linear_id(axis=0)",
    "fz = tile.id(axis=0)",
    "fz = tile.id(0, 1)",
    "fz = tile.id(3)",
    "fz = tile.sum({v}, foo=1)",
    "fz = math.sqrt(x={v})",
    "fz = min({v}, 1, key=abs)",
    "fz = min({v})",
    "fz = math.exp()",
    "fz = math.atan2({v})",
    "for q in range(3, step=1):\n    pass",
    "for q in range():\n    pass",
    "for q in range(1, 2, 3, 4):\n    pass",
    "for q in range(0, 10, 0):\n    pass",
    "for q in [1, 2]:\n    pass",
    "for q, r in range(3):\n    pass",
    "for {a} in range(3):\n    pass",
    "while {v}:\n    break\nelse:\n    pass",
    "fz = {v} if {a} else 0",
    "fz = {a}",
    "fz = {a}.shape",
    "fz = {a}.shape[5]",
    "fz = {a}.shape[{v}]",
    "{a}.shape[0] = 3",
    "{a} = {a}",
    "fz: int = 3",
    "fz = 'text'",
    "fz = None",
    "fz = ...",
    "fz = 1j",
    "fz = {v} @ {v}",
    "fz = {v} is None",
    "fz = {v} in (1, 2)",
    "fz = not {a}",
    "fz = -{a}",
    "fz = {a}[{a}]",
    "fz = {a}[{v}, {v}, {v}, {v}]",
    "fz = f32",
    "fz = f32[n]",
    "fz = tile",
    "fz = tile.linear_id",
    "fz = math.pi + math.inf",
    "fz = 10 ** 400",
    "fz = 2 ** 64 + {v}",
    "fz = f32(10 ** 400)",
    "fz = i64(1e400)",
    "fz = int(math.inf)",
    "fz = range(3)",
    "fz = {v} + " + " + ".join(["1"] * 150),
    "fz = " + "-" * 150 + "{v}",
    "fz = tshared.alloc[f32](10 ** 12)",
    "fz = tshared.alloc[f32](-1)",
    "fz = tshared.alloc[f32]((0,))",
    "fz = tshared.alloc[f32]((2, 2, 2, 2))",
    "fz = tshared.alloc[f32](1.5)",
    "fz = tshared.alloc[f32](n)",
    "fz = tshared.alloc[np.float32](4)",
    "fz = tshared.alloc(4)",
    "fz = tshared.alloc[f32, f32](4)",
    "tbarrier(1)",
    "cp_async.wait()",
    "cp_async.shared.global_({a}, {a}[0:4])",
    "fz = group_id(3)",
    "fz = group_id({v})",
    "fz = tile.shuffle({v}, 1)",
    "fz = tile.atomic_add({a}, 0, 1.0)",
    "fz = tile.atomic_add({a}, (0, 0, 0), 1)",
    "tile.store({a}, 0, 1, mask=1.5)",
    "fz = tile.load({a}, (0, 0))",
    "fz = tile.load({a}, 0, other={a})",
    "fz = tile.prefix_sum({v}, exclusive=1)",
    "fz = tile.prefix_sum({v}, exclusive={v})",
    "fz = tile.sum({a})",
    "fz = reduce_sum({a})",
    "fz = reduce_sum({v})",
    "fz = {v}\nfz = fz[0]",
    "fz = {v}\nfz.x = 1",
    "fz, = {v},",
    "fz, q = {a}.shape",
    "fz = {a}.shape[0:1]",
    "fz = {v}\nfz += {a}",
    "{a}[0] += {a}",
    "{a}[0] = {a}",
    "fz = {v}\nfz @= 2",
    "raise ValueError('x')",
    "import os",
    "fz = __import__('os')",
    "fz = getattr({v}, 'real')",
    "fz = {v} < {v} < {a}",
    "fz = {v}\nfz = fz(1)",
    "fz = tile.linear_id()()",
    "fz = (1, 2)",
    "fz = [{v}][0]",
    "return {v}",
    "return",
    "fz = math.floor({v} * 1e300) + math.ceil(math.inf) + math.trunc(math.nan)",
    "fz = math.log({v}) + math.sqrt(-{v}) + math.acos({v}) + math.exp({v} * 1e10)",
    "fz = math.fmod({v}, 0.0) + math.atan2(0.0, {v} * 0.0) + math.hypot(1e308, {v})",
    "fz = i64(1e300) + int(-1e300) + i32(2 ** 40) + u8(-1) + i64(18446744073709551615)",
    "fz = f32(1e300) + f16(70000.0) + bf16({v}) / 0.0",
    "fz = ({v} << -1) + ({v} >> 64) + (1 << 63)",
    "fz = {v} ** -1.5 + 0.0 ** -1.0 + (-1) ** -3 + 0 ** -1",
    "fz = {v} // 0 + {v} % 0 + {v} / 0",
    "fz = {v} // -1 + {v} % -1 + abs({v}) - {v}",
    "fz = u64({v}) - u64(100) + 18446744073709551615 * {v}",
    "fz = min({v}, 0.5, True) + max({v} * 0.0 / 0.0, 1.0)",
    "fz = (u8(255) + i8(-1)) + (u32({v}) // -3) + (u64(5) % -2)",
    "fz = tile.shuffle({v}, -1) + tile.shuffle_down({v}, 9223372036854775807)",
    "fz = tile.shuffle_up({v}, -9223372036854775807 - 1) + tile.shuffle_xor({v}, -1)",
    "fz = tile.sum(9223372036854775807) + tile.prefix_sum({v} * 100)",
    "fz = tile.max({v}) + tile.min(-{v}) + tile.prefix_sum({v}, exclusive=True)",
    "for q in range(9223372036854775800, 9223372036854775807, 5):\n    fz = q",
    "for q in range(5, -9223372036854775807, -4611686018427387904):\n    fz = q",
    "for q in range({v}, {v} + 3, {v} - {v}):\n    fz = q",
    "for q in tile.range(0, 16, 8, prefetch=2):\n    fz = q",
    "for q in range(3):\n    for q in range(2):\n        fz = q",
    "fz = 9223372036854775000\nwhile fz > 0:\n    fz += 100",
    "fz = {v}\nwhile fz > 0 and fz < 1000:\n    fz *= fz",
    "n = 3",
    "grid_groups = 3",
    "fz = grid_groups + group_tile_count() + group_linear_id()",
    "fz = y.shape[-1] + {a}.shape[True]",
    "fz = {a}[int({v} * 0.0 / 0.0)]",
    "fz = {a}[{v} > 3]",
    "tile.atomic_add({a}, 0, 1e10)",
    "tile.atomic_add({a}, 1, -1)",
    "fz = tile.load({a}, 100, mask={v} > 2, other=1e10)",
    "tile.store({a}, 0, -1.5e10, mask={v})",
    "cp_async.shared.global_({a}, {a}[9223372036854775807:])",
    "fz = tshared.alloc[f32](4)\nfz[tile.linear_id()] = 1.0\ntbarrier()\nq = reduce_sum(fz)",
    "fz = tshared.alloc[i8](4)\nfz[0] = 100\ntbarrier()\nq = reduce_max(fz)",
    "if tile.linear_id() == 0:\n    fz = tshared.alloc[f32](4)",
    "if tile.linear_id() == 0:\n    tbarrier()",
    "if {v} > 0:\n    return\nif {v} > 1:\n    return",
    "fz = _fuzz_helper({a}, {v})",
    "fz = _fuzz_helper({v}, {a})",
    "fz = _fuzz_lambda({v})",
    "fz = _fuzz_async({v})",
    "fz = _fuzz_nested({v})",
    "fz = _fuzz_arrays({a})",
)


# ----------------------------------------------------------------------------- mutations


def _nodes(tree: ast.Module, kind: type | tuple) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, kind)]


def _outside_decorators(tree: ast.Module, kind: type | tuple) -> list[ast.AST]:
    """Nodes of ``kind`` except those naming a decorator: ``@kernel`` turned into
    ``@tile`` is no longer a kernel (its numbers, ``tile=``, are still mutated)."""
    inside = {
        id(n)
        for fn in _nodes(tree, ast.FunctionDef)
        for d in fn.decorator_list
        for n in ast.walk(d.func if isinstance(d, ast.Call) else d)
    }
    return [n for n in _nodes(tree, kind) if id(n) not in inside]


def _numbers(tree: ast.Module) -> list[ast.Constant]:
    return [
        n
        for n in _nodes(tree, ast.Constant)
        if isinstance(n.value, (int, float)) and not isinstance(n.value, bool) or n.value is True
    ]


def _blocks(tree: ast.Module) -> list[list[ast.stmt]]:
    """Every statement list inside the module's functions (bodies, else-branches)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module):
            continue
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                out.append(block)
    return out


def _kernel(tree: ast.Module) -> ast.FunctionDef:
    return tree.body[-1]


def _scope_names(tree: ast.Module) -> tuple[list[str], list[str]]:
    """(scalar-ish names, array parameter names) of the kernel, for snippets and swaps."""
    fn = _kernel(tree)
    arrays = [
        a.arg
        for a in fn.args.args
        if a.annotation is not None and isinstance(a.annotation, ast.Subscript)
    ]
    scalars = [a.arg for a in fn.args.args if a.arg not in arrays]
    assigned = sorted(
        {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    )
    return scalars + assigned, arrays


def _index_edit(node: ast.Subscript, edit: str) -> None:
    items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
    replacement = {
        "slice": ast.Slice(ast.Constant(1), ast.Constant(3), None),
        "full_slice": ast.Slice(None, None, None),
        "ellipsis": ast.Constant(...),
        "none": ast.Constant(None),
        "negative": ast.Constant(-1),
        "float": ast.Constant(0.5),
        "huge": ast.Constant(2**63),
        "string": ast.Constant("i"),
    }
    if edit == "drop":
        items = items[:-1]
    elif edit == "add":
        items = items + [ast.Constant(0)]
    else:
        items = items[:-1] + [replacement[edit]]
    node.slice = items[0] if len(items) == 1 else ast.Tuple(items, ast.Load())


def _call_edit(node: ast.Call, edit: str, arrays: list[str]) -> None:
    if edit == "drop_arg":
        if node.args:
            node.args.pop()
        elif node.keywords:
            node.keywords.pop()
    elif edit == "add_arg":
        node.args.append(ast.Constant(0))
    elif edit == "keyword":
        node.keywords.append(ast.keyword("axis", ast.Constant(0)))
    elif edit == "mask_keyword":
        node.keywords.append(ast.keyword("mask", ast.Constant(True)))
    elif edit == "star_arg":
        node.args.append(
            ast.Starred(ast.Name(arrays[0] if arrays else "CONST", ast.Load()), ast.Load())
        )
    else:
        node.keywords.append(ast.keyword(None, ast.Dict([], [])))


def _statement_edit(tree: ast.Module, choose: Choose) -> None:
    block = choose("block", _blocks(tree))
    k = choose("statement", range(len(block)))
    edit = choose("edit", STATEMENT_EDITS)
    if edit == "delete":
        del block[k]
        if not block:
            block.append(ast.Pass())
    elif edit == "duplicate":
        block.insert(k, copy.deepcopy(block[k]))
    elif k > 0:
        block[k - 1], block[k] = block[k], block[k - 1]


def _insert(tree: ast.Module, choose: Choose) -> None:
    scalars, arrays = _scope_names(tree)
    text = choose("snippet", SNIPPETS)
    v = choose("variable", scalars or ["CONST"])
    a = choose("array", arrays or scalars or ["CONST"])
    statements = ast.parse(text.replace("{v}", v).replace("{a}", a)).body
    block = choose("block", _blocks(tree))
    k = choose("position", range(len(block) + 1))
    block[k:k] = statements


def _parameter_edit(tree: ast.Module, kind: str, choose: Choose) -> None:
    """``annotation``: a parameter's annotation replaced; ``parameter``: one added."""
    args = _kernel(tree).args.args
    if kind == "parameter":
        arg = ast.parse(f"def f({choose('parameter', PARAMETERS)}): pass").body[0].args.args[0]
        args.insert(choose("position", range(len(args) + 1)), arg)
    elif args:
        choose("parameter", args).annotation = ast.parse(
            choose("annotation", ANNOTATIONS), mode="eval"
        ).body


def mutate(tree: ast.Module, kind: str, choose: Choose) -> None:
    """Apply one mutation of ``kind`` (one of :data:`KINDS`) to ``tree`` in place."""
    if kind == "insert":
        return _insert(tree, choose)
    if kind in ("annotation", "parameter"):
        return _parameter_edit(tree, kind, choose)
    if kind == "statement":
        return _statement_edit(tree, choose)
    sites = {
        "binop": lambda: _nodes(tree, (ast.BinOp, ast.AugAssign)),
        "compare": lambda: _nodes(tree, ast.Compare),
        "unary": lambda: _nodes(tree, (ast.UnaryOp, ast.BoolOp)),
        "name": lambda: _outside_decorators(tree, ast.Name),
        "attribute": lambda: _outside_decorators(tree, ast.Attribute),
        "number": lambda: _numbers(tree),
        "index": lambda: _nodes(tree, ast.Subscript),
        "call": lambda: _nodes(tree, ast.Call),
    }[kind]()
    if not sites:
        return None
    node = choose("site", sites)
    if kind == "binop":
        node.op = choose("op", BIN_OPS)()
    elif kind == "compare":
        k = choose("which", range(len(node.ops)))
        node.ops[k] = choose("op", CMP_OPS)()
    elif kind == "unary":
        if isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        else:
            node.op = choose("op", UNARY_OPS)()
    elif kind == "name":
        scalars, arrays = _scope_names(tree)
        node.id = choose("name", sorted(set(scalars + arrays)) + list(EXTRA_NAMES))
    elif kind == "attribute":
        node.attr = choose("attribute", ATTRIBUTES)
    elif kind == "number":
        node.value = choose("number", NUMBERS)
    elif kind == "index":
        _index_edit(node, choose("edit", INDEX_EDITS))
    else:
        _call_edit(node, choose("edit", CALL_EDITS), _scope_names(tree)[1])
    return None


KINDS = (
    "insert", "statement", "binop", "compare", "unary", "name", "attribute", "number",
    "index", "call", "annotation", "parameter",
)  # fmt: skip
