"""Lint-clean shape annotations (``tessera.dims``), ``from __future__ import annotations``
and the ``py.typed`` marker: the ways a type checker or linter meets a kernel signature."""

from __future__ import annotations

import runpy
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tessera

ROOT = Path(__file__).parent.parent

KERNEL = """
import numpy as np
import tessera
from tessera import f32, kernel, mut, tile
{dims}

@kernel
def scale(x: f32[n], y: mut[f32[n]]):
    i = tile.id(0)
    if i < n:
        y[i] = 2 * x[i]

x = np.arange(5, dtype=np.float32)
y = np.zeros(5, np.float32)
scale[5](x, y)
"""


def test_dims_gives_one_symbol_per_name():
    n, m = tessera.dims("n m")
    k = tessera.dims("k")
    assert (repr(n), repr(m), repr(k)) == ("n", "m", "k")
    assert tessera.dims("M, K") == tessera.dims("M K")


def test_dims_refuses_what_is_not_a_name():
    with pytest.raises(TypeError, match="dimension names"):
        tessera.dims("n 2x")


@pytest.mark.parametrize(
    "future, declared",
    [(True, True), (False, True), (True, False)],
    ids=["future-annotations-dims", "eager-dims", "future-annotations-bare-names"],
)
def test_shape_annotations_work_with_and_without_future_annotations(tmp_path, future, declared):
    """Bare names need the future import (or Python 3.14's lazy annotations): evaluated
    eagerly, ``f32[n]`` is a NameError before Tessera sees it; ``dims`` works either way."""
    source = KERNEL.format(dims='n = tessera.dims("n")' if declared else "")
    if future:
        source = "from __future__ import annotations\n" + source
    path = tmp_path / "k.py"
    path.write_text(source)
    result = runpy.run_path(str(path))
    assert np.array_equal(result["y"], 2 * np.arange(5, dtype=np.float32))


@pytest.mark.skipif(shutil.which("ruff") is None, reason="needs ruff")
def test_an_example_using_dims_passes_ruff_undefined_name_check():
    example = ROOT / "examples" / "lint_clean.py"
    assert "tessera.dims(" in example.read_text()
    checked = subprocess.run(
        ["ruff", "check", "--isolated", "--select", "F821,F722", str(example)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout


@pytest.mark.skipif(shutil.which("ruff") is None, reason="needs ruff")
def test_bare_shape_names_are_what_ruff_reports(tmp_path):
    path = tmp_path / "bare.py"
    path.write_text(KERNEL.format(dims=""))
    checked = subprocess.run(
        ["ruff", "check", "--isolated", "--select", "F821", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 1 and "F821" in checked.stdout


def test_the_package_ships_the_py_typed_marker():
    assert (Path(tessera.__file__).parent / "py.typed").is_file()


def test_the_primitives_all_is_spelled_out_and_lists_every_declaration():
    """Type checkers read ``__all__`` only when it is literal lists: no list built at run
    time, and every declared primitive in it."""
    import ast

    from tessera.tile import primitives

    source = Path(primitives.__file__).read_text()
    spelled: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert isinstance(node.value, ast.List), ast.unparse(node)
                spelled += [ast.literal_eval(e) for e in node.value.elts]
    declared = [k for k, v in vars(primitives).items() if isinstance(v, primitives.Primitive)]
    assert set(declared) <= set(spelled) and spelled == primitives.__all__


@pytest.mark.skipif(shutil.which("mypy") is None, reason="needs mypy (the [test] extra)")
def test_mypy_passes_the_lint_clean_example(tmp_path):
    checked = subprocess.run(
        ["mypy", "--cache-dir", str(tmp_path), "--follow-imports=silent",
         str(ROOT / "examples" / "lint_clean.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout
