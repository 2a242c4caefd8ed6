"""Run under ``mpiexec -n 2`` (one node): ``all_reduce_coalesced`` of small arrays, which
reduces its one bucket in shared memory, inside a profile, a trace and a metrics file;
each rank checks that all three saw the bucket's all_reduce and writes ``ok`` (or the
failure) to ``<folder>/rank<r>.txt``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from mpi_run import report_outcome

import tessera as ts
from tessera import dist


def check(folder: Path) -> None:
    dist.Mesh(axes=("dp",), shape=(dist.size(),))
    arrays = [np.full(10, dist.rank() + 1.0, np.float32) for _ in range(5)]
    rank = dist.rank()
    with (
        ts.profile() as p,
        ts.trace(folder / "t.json"),
        ts.metrics(folder / "m.jsonl"),
    ):
        results = dist.all_reduce_coalesced(arrays, axis="dp")
    assert all(np.array_equal(r, np.full(10, 3.0, np.float32)) for r in results)
    (row,) = [r for r in p.rows() if r.kind == "collective"]
    assert row.name == "all_reduce" and len(row.times) == 1 and row.bytes == 200, row
    events = json.loads((folder / f"t.rank{rank}.json").read_text())["traceEvents"]
    (event,) = [e for e in events if e.get("cat") == "collective"]
    assert event["name"] == "all_reduce" and event["args"]["via"] == "shared memory", event
    lines = (folder / f"m.rank{rank}.jsonl").read_text().splitlines()
    (record,) = [json.loads(line) for line in lines]
    assert record["kind"] == "collective" and record["bytes"] == 200, record


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    report_outcome(lambda: check(folder), f"{folder}/rank{dist.rank()}.txt")
