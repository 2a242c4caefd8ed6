"""Chrome traces: tessera.trace(path), TESSERA_TRACE, one file per MPI rank and
`tessera trace merge`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from mpi_run import mpi_missing, run_mpi
from observe_kernels import make_axpy

import tessera as ts
from tessera import dist, graph
from tessera.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))


def _events(path) -> list[dict]:
    return [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]


def test_a_launch_is_a_complete_event_with_target_grid_and_shapes(tmp_path, target):
    axpy = make_axpy()
    with ts.trace(tmp_path / "t.json"):
        axpy[32](np.ones(32, np.float32), np.zeros(32, np.float32), 1.0)
    launch = next(e for e in _events(tmp_path / "t.json") if e["cat"] == "launch")
    assert launch["name"] == "axpy" and launch["dur"] > 0 and launch["pid"] == 0
    assert launch["args"]["grid"] == [32] and launch["args"]["shapes"] == [[32], [32]]
    assert launch["args"]["target"] == target


def test_compile_stages_and_cache_loads_are_in_the_trace(tmp_path, cache_dir):
    x = np.ones(8, np.float32)
    with ts.trace(tmp_path / "cold.json"):
        make_axpy()[8](x, np.zeros(8, np.float32), 1.0)
    with ts.trace(tmp_path / "warm.json"):
        make_axpy()[8](x, np.zeros(8, np.float32), 1.0)
    cold = {e["name"] for e in _events(tmp_path / "cold.json") if e["cat"] == "compile"}
    assert {"axpy specialise and generate", "axpy numba"} <= cold
    loads = [e for e in _events(tmp_path / "warm.json") if e["cat"] == "cache load"]
    assert loads and loads[0]["args"]["found"] is True


def test_collectives_carry_op_axis_bytes_and_seq(tmp_path):
    dist.Mesh(axes=("dp",), shape=(1,))
    with ts.trace(tmp_path / "t.json"):
        dist.all_reduce(np.ones(4), axis="dp", op="max")
    event = next(e for e in _events(tmp_path / "t.json") if e["cat"] == "collective")
    assert event["name"] == "all_reduce"
    assert event["args"]["op"] == "max" and event["args"]["axis"] == "dp"
    assert event["args"]["bytes"] == 32 and event["args"]["seq"] >= 1


def test_graph_module_runs_are_in_the_trace(tmp_path):
    @graph.module("double")
    def double(a):
        return a + a

    with ts.trace(tmp_path / "t.json"):
        double(np.ones(4, np.float32))
    cats = {(e["cat"], e["name"]) for e in _events(tmp_path / "t.json")}
    assert ("graph module", "double") in cats
    assert any(cat == "launch" for cat, _ in cats)


def test_autotune_trials_are_in_the_trace(tmp_path):
    from autotune_kernels import run_add_into

    with ts.config(autotune="retune"), ts.trace(tmp_path / "t.json"):
        run_add_into()
    trials = [e for e in _events(tmp_path / "t.json") if e["cat"] == "autotune trial"]
    assert trials and "config" in trials[0]["args"] and trials[0]["args"]["median_s"] > 0


def test_the_trace_setting_writes_the_file_at_exit(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {HERE!r})\n"
        "import numpy as np\nfrom observe_kernels import make_axpy\n"
        "make_axpy()[4](np.ones(4, np.float32), np.zeros(4, np.float32), 1.0)\n"
    )
    env = dict(os.environ, TESSERA_TRACE=str(tmp_path / "trace.json"))
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=300)
    assert any(e["name"] == "axpy" for e in _events(tmp_path / "trace.json"))


def test_merging_two_traces_of_one_process_gives_each_its_own_track(tmp_path):
    axpy = make_axpy()
    for name in ("a.json", "b.json"):
        with ts.trace(tmp_path / name):
            axpy[4](np.ones(4, np.float32), np.zeros(4, np.float32), 1.0)
    assert main(["trace", "merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                 "-o", str(tmp_path / "m.json")]) == 0  # fmt: skip
    assert {e["pid"] for e in _events(tmp_path / "m.json")} == {0, 1}


def test_merge_names_a_missing_file(tmp_path, capsys):
    assert main(["trace", "merge", str(tmp_path / "nope.json"), "-o", "x.json"]) == 2
    assert "nope.json" in capsys.readouterr().err


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_each_rank_writes_its_trace_and_merge_makes_a_track_per_rank(tmp_path):
    env = dict(
        os.environ,
        TESSERA_TRACE=str(tmp_path / "trace.json"),
        TESSERA_METRICS=str(tmp_path / "metrics.jsonl"),
    )
    result = run_mpi("mpi_observe_script.py", 2, tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == ["ok", "ok"]
    files = [str(tmp_path / f"trace.rank{r}.json") for r in (0, 1)]
    assert main(["trace", "merge", *files, "-o", str(tmp_path / "trace.json")]) == 0
    events = _events(tmp_path / "trace.json")
    for rank in (0, 1):
        mine = {(e["cat"], e["name"]) for e in events if e["pid"] == rank}
        assert {("launch", "axpy"), ("collective", "all_reduce")} <= mine
    for rank in (0, 1):
        lines = (tmp_path / f"metrics.rank{rank}.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert {r["kind"] for r in records} == {"launch", "collective"}
        assert {r["rank"] for r in records} == {rank}


def test_a_long_trace_streams_its_events_and_holds_few_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[ts.trace.__module__], "BATCH", 10)
    axpy = make_axpy()
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    axpy[8](x, y, 1.0)  # compiled outside the trace
    with ts.trace(tmp_path / "t.json") as t:
        for _ in range(35):
            axpy[8](x, y, 1.0)
            assert len(t.events) < 10
        assert t.written == 30
    assert sum(e["cat"] == "launch" for e in _events(tmp_path / "t.json")) == 35


def test_merge_reads_the_batches_of_a_trace_that_was_never_closed(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[ts.trace.__module__], "BATCH", 4)
    axpy = make_axpy()
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    axpy[8](x, y, 1.0)
    with ts.trace(tmp_path / "t.json"):
        for _ in range(9):
            axpy[8](x, y, 1.0)
        unfinished = (tmp_path / "t.json").read_text()
    (tmp_path / "dead.json").write_text(unfinished)  # as a process that died would leave it
    merged = tmp_path / "m.json"
    assert main(["trace", "merge", str(tmp_path / "dead.json"), "-o", str(merged)]) == 0
    assert sum(e["cat"] == "launch" for e in _events(merged)) == 8


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_coalesced_buckets_reduced_in_shared_memory_are_profiled_traced_and_metered(tmp_path):
    result = run_mpi("mpi_observe_coalesced_script.py", 2, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == ["ok", "ok"]
