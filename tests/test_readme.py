"""The README's Quick start is what CI runs: its first command installs from the checkout
(the distribution is not on the package index yet), and every command line of its bash
blocks is a line of ``.ci/run``, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```bash\n")[1:]]
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_first_quick_start_command_installs_from_the_checkout():
    first = _quick_start_commands()[0]
    assert first in ("python -m pip install .", "python -m pip install -e .")


def test_ci_runs_every_quick_start_command_as_the_readme_writes_it():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = _quick_start_commands()
    assert 'python -m pip install -e ".[test]" && python -m pytest -q tests' in commands
    assert [c for c in commands if c not in ci] == []


def _status_and_tested_here() -> tuple[str, str]:
    readme = (ROOT / "README.md").read_text()
    status = " ".join(readme.split("\nStatus:", 1)[1].split())
    targets = (ROOT / "docs" / "targets.md").read_text()
    tested = " ".join(targets.split("**Tested here**", 1)[1].split("\n\n", 1)[0].split())
    return status, tested


def test_the_readme_status_says_what_targets_md_says_ran_on_a_gpu():
    """docs/targets.md's "Tested here" is the record; the README's status follows it."""
    status, tested = _status_and_tested_here()
    assert '"Tested here"' in status and "docs/targets.md" in status
    ran = re.search(r"\*\*Run on a GPU\*\* \(one (\w+)", tested)
    if ran:
        assert f"has run on one {ran.group(1)}" in status
        assert "not yet run on a GPU" not in status
    else:
        assert "not yet run on a GPU" in status
    if "anything across several GPUs" in tested:  # what is still missing says so too
        assert "not yet across several" in status
