"""Every script in examples/ runs and checks itself against NumPy."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_run import mpi_missing

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_checks_its_result(path, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", [str(path)])  # as run by hand: no pytest options
    monkeypatch.chdir(tmp_path)  # whatever an example writes stays out of the tree
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out.strip()


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
@pytest.mark.parametrize("name", ["tp_gemm", "data_parallel"])
def test_distributed_example_runs_on_2_ranks_as_its_docstring_says(name):
    path = Path(__file__).parent.parent / "examples" / f"{name}.py"
    assert f"tessera run -n 2 examples/{name}.py" in path.read_text()
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "run", "-n", "2", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "on 2 ranks" in result.stdout


def test_readme_example_is_the_block_sum_example():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    example = (Path(__file__).parent.parent / "examples" / "block_sum.py").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert code.strip() in example


def test_targets_docs_pytorch_block_is_the_torch_example():
    docs = (Path(__file__).parent.parent / "docs" / "targets.md").read_text()
    example = (Path(__file__).parent.parent / "examples" / "torch_arrays.py").read_text()
    code = docs.split("## PyTorch and JAX", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert code.strip() in example
