"""A rank that leaves the job before the others (``os._exit(0)`` mid-job) makes the job
fail, naming the rank, instead of MPICH's Hydra ending the others and exiting 0. Real
``tessera run -n 2`` runs of tests/mpi_rank_exit_script.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mpi_run import HERE, mpi_missing

pytestmark = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


def tessera_run(mode: str, folder, *options: str):
    script = os.path.join(HERE, "mpi_rank_exit_script.py")
    return subprocess.run(
        [sys.executable, "-m", "tessera.cli", "run", "-n", "2", *options, script, mode, folder],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("options", [(), ("--no-prefix",)])
def test_a_rank_that_exits_with_status_0_mid_job_fails_the_job(options, tmp_path):
    result = tessera_run("exit0", tmp_path, *options)
    assert result.returncode != 0, result.stderr[-2000:]
    assert "rank 1 left the job before the others" in result.stderr
    assert not (tmp_path / "rank1.txt").exists()


def test_ranks_that_finish_end_the_job_with_status_0(tmp_path):
    result = tessera_run("finish", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)] == ["finished"] * 2
