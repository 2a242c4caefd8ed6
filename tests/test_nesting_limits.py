"""How deep a kernel may nest (docs/language.md, "Limits"): as deep as the limits say on
every target, and one level more is a compile error at the node that goes past them,
never a SyntaxError from Python compiling the CPU target's generated code, nor a
RecursionError. Kernels are generated as text, written to a file and imported (kernels are
compiled from their source file). Found by tests/test_mutation_fuzz.py."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest
from error_helpers import assert_points_at

import tessera
from tessera.kernel.frontend import MAX_EXPRESSION_DEPTH
from tessera.kernel.passes.checks import MAX_BLOCK_DEPTH, MAX_LOOP_DEPTH

HEADER = "from __future__ import annotations\nimport tessera\nfrom tessera import *\n\n"
_modules = itertools.count()


def load(tmp_path, source: str):
    """Import ``source`` (a module defining kernel ``k``) from a file; the module."""
    path = tmp_path / f"nest{next(_modules)}.py"
    path.write_text(HEADER + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refused(tmp_path, source: str, marker: str, token: str, needle: str) -> None:
    with pytest.raises(tessera.KernelError) as info:
        load(tmp_path, source)
    message = str(info.value)
    assert "'k'" in message and needle in message, message
    path = info.value.loc.file
    assert_points_at(message, path, marker, token)


def chain(depth: int) -> str:
    """An i64 expression nested ``depth`` levels deep (``x[i]`` is two: the load and its
    index), each operation wrapping and converting."""
    code = "x[i]"
    for level in range(depth - 2):
        code = f"({code} + i32(i))" if level % 2 else f"-{code}"
    return code


def test_an_expression_at_the_depth_limit_runs_on_every_target(tmp_path, target):
    module = load(
        tmp_path,
        "@kernel\ndef k(x: i64[n], y: mut[i64[n]]):\n"
        f"    i = tile.linear_id()\n    y[i] = {chain(MAX_EXPRESSION_DEPTH)}\n",
    )
    x, y = np.arange(4, dtype=np.int64), np.zeros(4, np.int64)
    module.k[4](x, y)
    expected = x.copy()
    for level in range(MAX_EXPRESSION_DEPTH - 2):
        expected = expected + np.arange(4) if level % 2 else -expected
    np.testing.assert_array_equal(y, expected)


def test_an_expression_past_the_depth_limit_is_a_compile_error_at_its_node(tmp_path):
    deep = chain(MAX_EXPRESSION_DEPTH + 1)
    source = (
        "@kernel\ndef k(x: i64[n], y: mut[i64[n]]):\n"
        f"    i = tile.linear_id()\n    y[i] = {deep}  # E:deep\n"
    )
    refused(tmp_path, source, "deep", "i] + i32", f"more than {MAX_EXPRESSION_DEPTH}")


def test_a_very_long_sum_is_a_compile_error_not_a_recursion_error(tmp_path):
    source = f"@kernel\ndef k(y: mut[i64[n]]):\n    y[0] = {' + '.join(['1'] * 2000)}  # E:long\n"
    refused(tmp_path, source, "long", "1 + 1", "split it with variables")


def nested_loops(depth: int, marker: str = "") -> str:
    """A grouped kernel (3-D groups) with ``depth`` nested loops, the innermost reducing
    a 4-D shared array: every loop a target's frame adds is there too."""
    lines = [
        "@kernel(tile=(2, 2, 2), shared=1024)",
        "def k(y: mut[f32[n]]):",
        "    s = tshared.alloc[f32]((2, 2, 2, 2))",
        "    s[tile.id(0), tile.id(1), tile.id(2), 0] = 1.0",
        "    s[tile.id(0), tile.id(1), tile.id(2), 1] = 2.0",
        "    acc = 0.0",
    ]
    for d in range(depth):
        lines.append(
            "    " * (d + 1) + f"for i{d} in range(2):" + (marker if d == depth - 1 else "")
        )
    lines.append("    " * (depth + 1) + "tbarrier()")
    lines.append("    " * (depth + 1) + "acc += reduce_sum(s)")
    lines.append("    y[group_linear_id() * 8 + tile.linear_id()] = acc")
    return "\n".join(lines) + "\n"


def test_loops_at_the_nesting_limit_run_on_every_target(tmp_path, target):
    module = load(tmp_path, nested_loops(MAX_LOOP_DEPTH))
    y = np.zeros(8, np.float32)
    module.k[1](y)
    np.testing.assert_array_equal(y, np.full(8, 24.0 * 2**MAX_LOOP_DEPTH, np.float32))


def test_loops_past_the_nesting_limit_are_a_compile_error_at_the_loop(tmp_path):
    source = nested_loops(MAX_LOOP_DEPTH + 1, "  # E:loops")
    refused(tmp_path, source, "loops", "for", f"more than {MAX_LOOP_DEPTH}")


def nested_ifs(depth: int, marker: str = "") -> str:
    lines = ["@kernel", "def k(y: mut[i64[n]]):", "    i = tile.linear_id()"]
    for d in range(depth):
        lines.append("    " * (d + 1) + f"if i < {depth - d}:")
    lines.append("    " * (depth + 1) + "y[i] += 1" + marker)
    return "\n".join(lines) + "\n"


def test_statements_at_the_nesting_limit_run_on_every_target(tmp_path, target):
    module = load(tmp_path, nested_ifs(MAX_BLOCK_DEPTH))
    y = np.zeros(4, np.int64)
    module.k[4](y)
    np.testing.assert_array_equal(y, [1, 0, 0, 0])


def test_statements_past_the_nesting_limit_are_a_compile_error(tmp_path):
    source = nested_ifs(MAX_BLOCK_DEPTH + 1, "  # E:ifs")
    refused(tmp_path, source, "ifs", "y[i]", f"more than {MAX_BLOCK_DEPTH}")


def test_a_run_of_early_returns_does_not_nest_the_code(tmp_path, target):
    """120 guards: nested one in the next, the CPU's code would pass Python's 99 levels."""
    guards = "".join(f"    if x[i] == {v}:\n        return\n    y[i] += 1\n" for v in range(120))
    module = load(
        tmp_path, f"@kernel\ndef k(x: i64[n], y: mut[i64[n]]):\n    i = tile.linear_id()\n{guards}"
    )
    x, y = np.array([0, 5, 119, 200], np.int64), np.zeros(4, np.int64)
    module.k[4](x, y)
    np.testing.assert_array_equal(y, [0, 5, 119, 120])


def test_a_shared_array_of_five_dims_is_a_compile_error(tmp_path):
    source = (
        "@kernel(tile=(2,))\ndef k(y: mut[f32[n]]):\n"
        "    s = tshared.alloc[f32]((1, 1, 1, 1, 1))  # E:dims\n"
    )
    refused(tmp_path, source, "dims", "(1, 1", "1 to 4 dims")
