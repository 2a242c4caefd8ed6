"""The command line's edges: a missing pack, several metrics files, ``info --json``,
``cache prune --older-than``; a SettingWarning at the user's line; ``k.inspect`` builds
explained quietly."""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
import warnings

import numpy as np

from tessera import config, f32, kernel, mut, tile
from tessera.cli import main
from tessera.config import refresh
from tessera.kernel import disk_cache

config_module = importlib.import_module("tessera.config")  # (tessera.config: the function)


def test_replaying_a_missing_pack_is_one_line(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "missing.zip")]) == 2
    err = capsys.readouterr().err
    assert err == f"tessera replay: no such file: {tmp_path / 'missing.zip'}\n"


def _metrics(path, kernel_name, seconds):
    record = {"time": 0.0, "kind": "launch", "kernel": kernel_name, "target": "cpu",
              "grid": [1], "seconds": seconds, "bytes": 8, "gbps": 1.0, "gflops": None,
              "rank": 0, "op": "", "seq": None}  # fmt: skip
    path.write_text(json.dumps(record) + "\n")


def test_metrics_summary_merges_several_files_and_globs(tmp_path, capsys):
    for rank in (0, 1, 2):
        _metrics(tmp_path / f"metrics.rank{rank}.jsonl", "axpy", 0.001 * (rank + 1))
    assert main(["metrics", "summary", str(tmp_path / "metrics.rank0.jsonl"),
                 str(tmp_path / "metrics.rank[12].jsonl")]) == 0  # fmt: skip
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "axpy" in line]
    assert row.split()[2] == "3"  # the three ranks' launches together


def test_info_json_is_one_document_for_bug_reports(capsys):
    assert main(["info", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert {"tessera", "python", "numba", "targets", "settings"} <= set(facts)
    assert facts["targets"]["cpu"] == "usable"


def test_cache_prune_removes_only_entries_older_than_asked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    refresh()
    folder = tmp_path / "k"
    folder.mkdir()
    old, new = folder / f"old{disk_cache.SUFFIX}", folder / f"new{disk_cache.SUFFIX}"
    old.write_bytes(b"x" * 10)
    new.write_bytes(b"y" * 10)
    week_ago = time.time() - 8 * 86400
    os.utime(old, (week_ago, week_ago))
    try:
        assert main(["cache", "prune", "--older-than", "7d"]) == 0
    finally:
        monkeypatch.undo()
        refresh()
    assert not old.exists() and new.exists()
    assert "removed 1 file" in capsys.readouterr().out


@kernel
def _scale(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = 2 * x[i]


def test_a_setting_warning_read_in_a_launch_points_at_the_users_line(monkeypatch):
    monkeypatch.setenv("TESSERA_BOUNDSCHECK", "maybe")
    monkeypatch.setattr(config_module, "_warned", set())
    refresh()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _scale[4](np.ones(4, np.float32), np.zeros(4, np.float32))  # the user's line
    finally:
        monkeypatch.undo()
        refresh()
    assert [w.filename for w in caught] == [__file__]


def test_inspect_explains_its_builds_below_warning(caplog):
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    with config(explain_recompile=True), caplog.at_level(logging.DEBUG, logger="tessera"):
        _scale[8](x, y)
        _scale.inspect("llvm", x, y, grid=8)
    said = [r for r in caplog.records if "recompiles" in r.getMessage()]
    assert said and all(r.levelno < logging.WARNING for r in said)
