"""Every script in examples/ runs and checks itself against NumPy."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_checks_its_result(path, capsys):
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out.strip()


def test_readme_example_is_the_block_sum_example():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    example = (Path(__file__).parent.parent / "examples" / "block_sum.py").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert code.strip() in example
