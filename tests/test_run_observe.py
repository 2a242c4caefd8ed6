"""``TESSERA_TRACE``/``TESSERA_METRICS``/``TESSERA_CRASH_DIR`` under ``tessera run -n 2``:
the documented workflow end to end. The observers run in the ranks only; the launcher and
the rank-output wrappers (which import tessera with the same settings) write nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_run import mpi_missing

HERE = Path(__file__).parent

SCRIPT = """
import numpy as np
from observe_kernels import make_axpy
from tessera import dist

dist.Mesh(axes=("dp",), shape=(dist.size(),))
x, y = np.ones(128, np.float32), np.zeros(128, np.float32)
axpy = make_axpy()
for _ in range(5):
    axpy[128](x, y, 1.0)
dist.all_reduce(y, axis="dp")
print("done")
"""


def _launches(path: Path) -> int:
    events = json.loads(path.read_text())["traceEvents"]
    return sum(1 for e in events if e.get("cat") == "launch" and e["name"] == "axpy")


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_tessera_run_leaves_each_rank_its_full_trace_and_nothing_else(tmp_path):
    (tmp_path / "job.py").write_text(SCRIPT)
    env = dict(
        os.environ,
        TESSERA_TRACE="trace.json",
        TESSERA_METRICS="metrics.jsonl",
        TESSERA_CRASH_DIR="crash",
        PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "run", "-n", "2", "job.py"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(result.stdout.split()) == ["[0]", "[1]", "done", "done"]
    assert [_launches(tmp_path / f"trace.rank{r}.json") for r in (0, 1)] == [5, 5]
    for rank in (0, 1):
        lines = (tmp_path / f"metrics.rank{rank}.jsonl").read_text().splitlines()
        assert [json.loads(line)["kind"] for line in lines].count("launch") == 5
    left = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert left == [
        "job.py", "metrics.rank0.jsonl", "metrics.rank1.jsonl",
        "trace.rank0.json", "trace.rank1.json",
    ]  # fmt: skip
    assert not any((tmp_path / "crash").iterdir())  # no empty fatal-signal files
