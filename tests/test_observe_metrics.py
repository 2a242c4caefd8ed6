"""Metrics files (JSONL and CSV): a record per launch and collective, TESSERA_METRICS, and
`tessera metrics summary`."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from observe_kernels import make_axpy

import tessera as ts
from tessera import dist
from tessera.cli import main
from tessera.observe.metrics import FIELDS, read
from tessera.observe.observers import LaunchRecord, now

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch_three(path):
    axpy = make_axpy(flops=lambda n: 2 * n)
    x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
    dist.Mesh(axes=("dp",), shape=(1,))
    with ts.metrics(path):
        for _ in range(3):
            axpy[256](x, y, 1.0)
        dist.all_reduce(np.ones(16), axis="dp")


def test_jsonl_has_one_record_per_launch_and_collective(tmp_path):
    _launch_three(tmp_path / "m.jsonl")
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["kind"] for r in records] == ["launch"] * 3 + ["collective"]
    first = records[0]
    assert set(first) == set(FIELDS)
    assert first["kernel"] == "axpy" and first["grid"] == [256] and first["bytes"] == 2048
    assert first["rank"] == 0 and first["seconds"] > 0
    assert first["gflops"] == pytest.approx(512 / first["seconds"] / 1e9, rel=1e-3)
    assert first["gbps"] == pytest.approx(2048 / first["seconds"] / 1e9, rel=1e-3)
    assert records[3]["kernel"] == "all_reduce" and records[3]["bytes"] == 128


def test_csv_has_a_header_and_the_same_records(tmp_path):
    _launch_three(tmp_path / "m.csv")
    with open(tmp_path / "m.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(FIELDS)
    assert [r["kind"] for r in rows] == ["launch"] * 3 + ["collective"]
    assert rows[0]["grid"] == "256" and rows[3]["op"] == "sum" and rows[3]["target"] == "dp"


def test_jsonl_and_csv_read_back_alike(tmp_path):
    _launch_three(tmp_path / "m.jsonl")
    _launch_three(tmp_path / "m.csv")
    for path in (tmp_path / "m.jsonl", tmp_path / "m.csv"):
        records = read(path)
        assert [r["kernel"] for r in records] == ["axpy"] * 3 + ["all_reduce"]
        assert records[0]["gflops"] > 0 and records[3]["gflops"] is None


def test_summary_prints_p50_and_p95_per_kernel(tmp_path, capsys):
    _launch_three(tmp_path / "m.csv")
    assert main(["metrics", "summary", str(tmp_path / "m.csv")]) == 0
    out = capsys.readouterr().out
    assert "p50 ms" in out and "p95 ms" in out
    axpy = next(line for line in out.splitlines() if " axpy " in line)
    assert axpy.split()[:3] == ["launch", "axpy", "3"]


def test_summary_names_a_missing_file(tmp_path, capsys):
    assert main(["metrics", "summary", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl" in capsys.readouterr().err


def test_a_metrics_file_must_be_jsonl_or_csv(tmp_path):
    with pytest.raises(ts.TesseraError, match=r"TESSERA_METRICS=.*\.jsonl or \.csv"):
        ts.metrics(tmp_path / "m.txt")


def test_the_metrics_setting_writes_every_launch_by_exit(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {HERE!r})\n"
        "import numpy as np\nfrom observe_kernels import make_axpy\n"
        "k = make_axpy()\n"
        "for _ in range(5000):\n"
        "    k[4](np.ones(4, np.float32), np.zeros(4, np.float32), 1.0)\n"
    )
    env = dict(os.environ, TESSERA_METRICS=str(tmp_path / "m.jsonl"))
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=300)
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 5000


class _SlowDeviceArray:
    """Stands in for a GPU array (no GPU here) whose size is read while its launch is
    being recorded: it holds that thread inside the record until told to go on."""

    shape = (64,)

    def __init__(self) -> None:
        self.reading, self.go = threading.Event(), threading.Event()

    @property
    def nbytes(self) -> int:
        self.reading.set()
        assert self.go.wait(10)
        return 256


def test_a_record_added_while_another_thread_flushes_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[read.__module__], "BATCH", 1)  # every record flushes
    axpy = make_axpy()
    cpu = axpy.target_for((np.ones(1, np.float32), np.ones(1, np.float32), 1.0))
    slow = _SlowDeviceArray()
    m = ts.metrics(tmp_path / "m.jsonl")

    def record(args):
        return LaunchRecord(axpy, cpu, (64,), args, now(), 1e-6, False)

    recording = threading.Thread(target=m.launch, args=(record((slow,)),))
    recording.start()
    assert slow.reading.wait(10)  # that thread is inside m.launch
    m.launch(record((np.ones(64, np.float32),)))  # this one flushes meanwhile
    slow.go.set()
    recording.join()
    m.close()
    assert sorted(r["bytes"] for r in read(tmp_path / "m.jsonl")) == [256, 256]
