"""Rank agreement: two MPI ranks whose timings favour different configs still launch the
same one (``scope="world"``), unless each rank may choose (``scope="rank"``); ranks that
do not launch the same tuned kernel and key get an error, never a hang or another key's
winner."""

from __future__ import annotations

import os

import pytest
from mpi_run import mpi_missing, run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


def _launched(mode: str, folder, timeout: int = 240, **env) -> dict[int, str]:
    """Run the script on 2 ranks; what each rank wrote to its file."""
    env = dict(os.environ, TESSERA_CACHE="off", **env)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    result = run_mpi("mpi_autotune_script.py", 2, mode, folder, env=env, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        r: (folder / f"rank{r}.txt").read_text()
        for r in (0, 1)
        if (folder / f"rank{r}.txt").exists()
    }


def test_ranks_launch_rank_zeros_winner_whatever_they_would_measure(tmp_path):
    assert _launched("world", tmp_path) == {0: "BM=64", 1: "BM=64"}


def test_scope_rank_lets_each_rank_keep_its_own_winner(tmp_path):
    assert _launched("rank", tmp_path) == {0: "BM=64", 1: "BM=128"}


def test_a_rank_that_launches_a_tuned_kernel_alone_times_out(tmp_path):
    reports = _launched("unmatched", tmp_path, timeout=90, TESSERA_COLLECTIVE_TIMEOUT="3")
    kind, took = reports[1].split("\n")[0].split()
    assert kind == "CollectiveTimeout" and 3.0 <= float(took) < 10.0, reports[1]
    assert "autotune agreement #1 (kernel 'add') timed out after 3 s" in reports[1]


def test_ranks_that_launch_different_keys_get_a_mismatch_on_every_rank(tmp_path):
    reports = _launched("different_keys", tmp_path, TESSERA_COLLECTIVE_TIMEOUT="60")
    for r in (0, 1):
        assert reports[r].startswith("CollectiveMismatch"), reports[r]
        assert "key {'n': 500}" in reports[r].split("rank 0: ")[1].split("\n")[0]
        assert "key {'n': 600}" in reports[r].split("rank 1: ")[1].split("\n")[0]
