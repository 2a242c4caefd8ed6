"""Rank agreement: two MPI ranks whose timings favour different configs still launch the
same one (``scope="world"``), unless each rank may choose (``scope="rank"``)."""

from __future__ import annotations

import os

import pytest
from mpi_run import mpi_missing, run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


def _launched(scope: str, folder) -> dict[int, str]:
    """Run the script on 2 ranks; each rank writes the config it launched to a file."""
    env = dict(os.environ, TESSERA_CACHE="off")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    result = run_mpi("mpi_autotune_script.py", 2, scope, folder, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return {r: (folder / f"rank{r}.txt").read_text() for r in (0, 1)}


def test_ranks_launch_rank_zeros_winner_whatever_they_would_measure(tmp_path):
    assert _launched("world", tmp_path) == {0: "BM=64", 1: "BM=64"}


def test_scope_rank_lets_each_rank_keep_its_own_winner(tmp_path):
    assert _launched("rank", tmp_path) == {0: "BM=64", 1: "BM=128"}
