"""``print`` and ``assert`` in kernels (docs/language.md, "Printing and asserting"): the
lane's prefix on every target, lines in group-then-lane order on cpu and debug, asserts
checked on debug and in bounds-checked launches and compiled out elsewhere, and the
compile errors for what cannot be printed. Offending lines carry ``# E:<marker>``
comments (error_helpers.py)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import numpy as np
import pytest
from error_helpers import assert_points_at, compile_error

import tessera
from tessera import (
    constexpr,
    f32,
    func,
    group_linear_id,
    group_tile_count,
    i64,
    kernel,
    mut,
    tbarrier,
    tile,
)

FILE = inspect.getsourcefile(inspect.currentframe())
ORDERED = ("cpu", "debug")  # the targets whose lines come in group-then-lane order


def lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


def ordered(target: str, got: list[str]) -> list[str]:
    """The lines as printed where the target orders them, else sorted (CUDA)."""
    return got if target in ORDERED else sorted(got)


# --------------------------------------------------------------------- print


@kernel(tile=(3,))
def print_ids(out: mut[i64[n]]):
    i = tile.linear_id()
    print("lane value", i * 10, i > 0, "100% {literal}")
    out[i] = i


def test_print_prefixes_each_line_with_the_group_and_the_lane(target, capsys):
    print_ids[2](np.zeros(3, np.int64))
    expected = [
        f"[group ({g},) lane ({l},)] lane value {l * 10} {l > 0} 100% {{literal}}"
        for g in range(2)
        for l in range(3)
    ]
    assert ordered(target, lines(capsys)) == expected


@kernel(tile=(2, 2))
def print_2d(out: mut[i64[n]]):
    print("at", tile.id(0), tile.id(1))
    out[tile.linear_id()] = 1


def test_print_prefix_shows_every_axis_of_the_grid_and_the_group(target, capsys):
    print_2d[(2, 1)](np.zeros(4, np.int64))
    expected = [
        f"[group ({g}, 0) lane ({a}, {b})] at {a} {b}"
        for g in range(2)
        for a in range(2)
        for b in range(2)
    ]
    assert ordered(target, lines(capsys)) == expected


@kernel
def print_flat(out: mut[i64[n, m]]):
    print("tile", tile.id(0) * 10 + tile.id(1))
    out[tile.id(0), tile.id(1)] = 1


def test_print_in_a_flat_kernel_names_the_tile(target, capsys):
    print_flat[(2, 3)](np.zeros((2, 3), np.int64))
    expected = [f"[tile ({a}, {b})] tile {a * 10 + b}" for a in range(2) for b in range(3)]
    assert ordered(target, lines(capsys)) == expected


@kernel(tile=(1,))
def print_floats(x: f32[n], out: mut[f32[n]]):
    print(x[0], x[1], "end")
    out[0] = x[0]


def test_print_writes_floats_as_python_does_and_as_printf_on_cuda(target, capsys):
    print_floats[1](np.array([1.5, -0.25], np.float32), np.zeros(2, np.float32))
    text = "1.500000 -0.250000" if target == "cuda" else "1.5 -0.25"
    assert lines(capsys) == [f"[group (0,) lane (0,)] {text} end"]


@kernel(tile=(4,))
def print_many_groups(out: mut[i64[n]]):
    i = tile.linear_id()
    print("first", i)
    tbarrier()
    print("second", i)
    out[i] = i


def test_print_lines_come_group_by_group_then_lane_by_lane(target, capsys):
    if target not in ORDERED:
        pytest.skip("CUDA's printf is unordered")
    with tessera.config(parallel_threshold=1):  # would run groups on every core
        print_many_groups[6](np.zeros(4, np.int64))
    expected = []
    for g in range(6):
        expected += [f"[group ({g},) lane ({l},)] first {l}" for l in range(4)]
        expected += [f"[group ({g},) lane ({l},)] second {l}" for l in range(4)]
    assert lines(capsys) == expected


@kernel(tile=(4,))
def print_strided(out: mut[i64[n]]):
    for j in range(tile.linear_id(), out.shape[0], group_tile_count()):
        print("element", j)
        out[j] = j


def test_print_in_a_lane_strided_loop_keeps_each_lanes_lines_together(target, capsys):
    if target not in ORDERED:
        pytest.skip("CUDA's printf is unordered")
    print_strided[1](np.zeros(8, np.int64))
    expected = [f"[group (0,) lane ({j % 4},)] element {j}" for j in (0, 4, 1, 5, 2, 6, 3, 7)]
    assert lines(capsys) == expected


SCALE = "scale"


@kernel(tile=(1,))
def print_constant(out: mut[f32[n]]):
    print(SCALE, 2)
    out[0] = 2.0


def test_print_takes_module_string_constants(target, capsys):
    print_constant[1](np.zeros(1, np.float32))
    assert lines(capsys) == ["[group (0,) lane (0,)] scale 2"]


@func
def doubled(v):
    print("helper got", v)
    return v * 2


@kernel(tile=(2,))
def print_in_helper(out: mut[i64[n]], MODE: constexpr):
    i = tile.linear_id()
    out[i] = doubled(i)
    print(MODE)


def test_print_works_in_helpers_and_prints_string_constexprs(target, capsys):
    print_in_helper[1](np.zeros(2, np.int64), "fast")
    expected = []
    for lane in range(2):
        expected += [f"[group (0,) lane ({lane},)] helper got {lane}"]
        expected += [f"[group (0,) lane ({lane},)] fast"]
    assert ordered(target, lines(capsys)) == ordered(target, expected)


# --------------------------------------------------------------------- assert


@kernel(tile=(4,))
def positive(x: f32[n], out: mut[f32[n]]):
    i = group_linear_id() * 4 + tile.linear_id()
    out[i] = x[i] * 2.0
    assert x[i] > 0.0, "x must be positive"  # E:assert


def test_a_failing_assert_names_kernel_group_lane_message_and_line(target):
    if target not in ORDERED:
        pytest.skip("CUDA launches are not checked: the assert is compiled out")
    x = np.ones(8, np.float32)
    x[6] = -1.0
    out = np.zeros(8, np.float32)
    with tessera.config(boundscheck=1), pytest.raises(tessera.KernelAssertionError) as info:
        positive[2](x, out)
    msg = str(info.value)
    assert "in kernel 'positive'" in msg and "x must be positive" in msg, msg
    assert "lane (2,) of group (1,)" in msg, msg
    assert_points_at(msg, FILE, "assert", "assert")
    assert not out.any()  # the launch modified nothing


def test_a_passing_assert_lets_the_launch_write_its_results(target):
    x = np.ones(8, np.float32)
    out = np.zeros(8, np.float32)
    with tessera.config(boundscheck=1):
        positive[2](x, out)
    np.testing.assert_array_equal(out, 2.0)


def test_a_failing_assert_is_compiled_out_without_checks(target):
    if target == "debug":
        pytest.skip("the debug target always checks")
    x = -np.ones(8, np.float32)
    out = np.zeros(8, np.float32)
    positive[2](x, out)
    np.testing.assert_array_equal(out, -2.0)


@kernel
def bare_assert(x: f32[n]):
    assert x[tile.linear_id()] < 1.0


def test_an_assert_without_a_message_reports_its_condition(target):
    if target not in ORDERED:
        pytest.skip("CUDA launches are not checked")
    with tessera.config(boundscheck=1), pytest.raises(tessera.KernelAssertionError) as info:
        bare_assert[3](np.array([0.0, 0.5, 2.0], np.float32))
    assert "assertion failed: x[tile.linear_id()] < 1.0 (tile (2,))" in str(info.value)


def test_the_unchecked_cpu_code_has_no_trace_of_the_assert():
    x, out = np.ones(8, np.float32), np.zeros(8, np.float32)
    unchecked = positive.inspect("cpu", x, out, grid=2)
    assert "AssertionError" not in unchecked and "> np.float32(0.0)" not in unchecked
    assert "assert" in positive.inspect("ir", x, out, grid=2)  # the IR still holds it


# --------------------------------------------------------------------- compile errors


def k_fstring(x: f32[n]):
    i = tile.linear_id()
    print(f"x = {x[i]}")  # E:fstring


def test_an_f_string_in_print_is_a_compile_error_naming_the_line():
    err = compile_error(k_fstring)
    assert "f-strings" in str(err) and 'print("x =", x)' in str(err)
    assert_points_at(str(err), FILE, "fstring", 'f"')


def k_sep(x: f32[n]):
    print(x[0], sep=",")  # E:sep


def test_print_keywords_are_a_compile_error():
    err = compile_error(k_sep)
    assert "no keyword arguments" in str(err)
    assert_points_at(str(err), FILE, "sep", "print")


def k_tuple(x: f32[n]):
    print((x[0], x[1]))  # E:tuple


def test_printing_a_tuple_is_a_compile_error():
    err = compile_error(k_tuple)
    assert "single values" in str(err)
    assert_points_at(str(err), FILE, "tuple", "(x[0]")


def k_print_value(x: f32[n], out: mut[f32[n]]):
    out[0] = print(x[0])  # E:value


def test_print_used_as_a_value_is_a_compile_error():
    err = compile_error(k_print_value)
    assert "print() is a statement" in str(err)


def k_assert_fstring(x: f32[n]):
    assert x[0] > 0.0, f"bad {x[0]}"  # E:amsg


def test_an_assert_message_must_be_a_constant_string():
    err = compile_error(k_assert_fstring)
    assert "f-strings" in str(err)
    assert_points_at(str(err), FILE, "amsg", 'f"')


@func
def is_small(v):
    return v < 1.0


def k_assert_helper(x: f32[n]):
    assert is_small(x[0]), "small"  # E:ahelper


def test_an_assert_condition_that_needs_statements_is_a_compile_error():
    err = compile_error(k_assert_helper)
    assert "plain expression" in str(err)
    assert_points_at(str(err), FILE, "ahelper", "is_small")


# --------------------------------------------------------------------- the docs


def docs_example() -> tuple[str, str]:
    """The code block of docs/language.md's "Printing and asserting" and the output
    block after it."""
    with open(os.path.join(os.path.dirname(FILE), "..", "docs", "language.md")) as f:
        text = f.read()
    section = text.split("## Printing and asserting", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    shown = section.split("```text\n", 1)[1].split("```", 1)[0]
    return code, shown


@pytest.mark.parametrize("name", ORDERED)
def test_the_docs_example_prints_what_the_docs_show(name, tmp_path):
    code, shown = docs_example()
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ, TESSERA_TARGET=name, PYTHONPATH=os.path.dirname(os.path.dirname(FILE)))
    result = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == shown
