"""docs/observability.md's walkthrough is the example it names, and that example's trace
and metrics files read back."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from tessera.observe.metrics import summary

ROOT = Path(__file__).parent.parent


def test_the_walkthroughs_kernel_is_the_examples():
    docs = (ROOT / "docs" / "observability.md").read_text()
    example = (ROOT / "examples" / "profile_matmul.py").read_text()
    code = docs.split("```python\n", 1)[1].split("```", 1)[0]
    assert code.strip() in example


def test_the_example_writes_a_trace_and_metrics_the_summary_reads(tmp_path, capsys):
    runpy.run_path(str(ROOT / "examples" / "profile_matmul.py"))["main"](tmp_path)
    assert "matmul" in capsys.readouterr().out
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert sum(e.get("cat") == "launch" for e in events) == 5
    line = next(ln for ln in summary(tmp_path / "metrics.jsonl").splitlines() if "matmul" in ln)
    assert line.split()[2] == "5" and line.split()[-1] != "-"  # GFLOP/s from flops=
