"""Faults in a distributed job end in errors, never in hangs: real ``mpiexec`` runs of
tests/mpi_faults_script.py with a planted fault each."""

from __future__ import annotations

import os
import time

import pytest
from mpi_run import hydra_missing, mpi_missing, run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


def run_faulty(mode: str, ranks: int, folder, launcher=(), **env):
    started = time.monotonic()
    result = run_mpi(
        "mpi_faults_script.py",
        ranks,
        mode,
        folder,
        env=dict(os.environ, **env),
        timeout=120,
        launcher=launcher,
    )
    return result, time.monotonic() - started


@pytest.mark.parametrize("mode", ["skip", "skip_coalesced"])
def test_a_rank_that_skips_a_collective_makes_the_others_time_out(mode, tmp_path):
    result, _ = run_faulty(mode, 4, tmp_path, FAULT_TIMEOUT="3")
    # the first rank to time out ends the job: read whichever waiting ranks reported
    reports = [(tmp_path / f"rank{r}.txt") for r in range(3)]
    written = [p.read_text() for p in reports if p.exists() and p.read_text()]
    assert written, result.stderr[-2000:]
    report = written[0]
    kind, collective, seq, axis, missing, took = report.splitlines()[0].split(" ", 5)
    assert (kind, collective, seq, axis, missing) == (
        "CollectiveTimeout",
        "all_reduce",
        "2",
        "x",
        "[3]",
    )
    assert 3.0 <= float(took) < 6.0  # the timeout, plus at most a second asking who is there
    assert "ranks [3] did not arrive" in report and "rank 3: no answer" in report
    assert result.returncode != 0  # the uncaught timeout ended the job


def test_coalesced_arrays_that_differ_between_ranks_are_named_on_every_rank(tmp_path):
    result, _ = run_faulty("mismatch_coalesced", 2, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    for r in range(2):
        report = (tmp_path / f"rank{r}.txt").read_text()
        assert report.startswith("CollectiveMismatch"), report
        assert "rank 0 (index 0 on axis 'x'): a bucket of 12 bytes of float32, op=sum" in report
        assert "rank 1 (index 1 on axis 'x'): a bucket of 16 bytes of float32, op=sum" in report


def test_a_rank_that_raises_ends_the_job(tmp_path):
    result, took = run_faulty("raise", 2, tmp_path, TESSERA_COLLECTIVE_TIMEOUT="100")
    assert result.returncode != 0
    assert "planted failure on rank 1" in result.stderr
    assert took < 60  # ended by MPI_Abort, not by the 100 s collective timeout
    assert not (tmp_path / "rank0.txt").exists()  # rank 0 never finished its all_reduce


def test_a_rank_that_dies_ends_the_job(tmp_path):
    result, took = run_faulty("die", 2, tmp_path, TESSERA_COLLECTIVE_TIMEOUT="100")
    assert result.returncode != 0
    assert (tmp_path / "rank1.txt").read_text() == "dying"
    assert took < 60


@pytest.mark.skipif(hydra_missing(), reason="needs MPICH's mpiexec (-disable-auto-cleanup)")
def test_a_rank_that_exits_ends_the_others_wait_without_the_launcher(tmp_path):
    # the launcher does not end the job: the waiting rank sees the exit on its own
    result, took = run_faulty(
        "die_unnoticed",
        2,
        tmp_path,
        launcher=("-disable-auto-cleanup",),
        TESSERA_COLLECTIVE_TIMEOUT="100",
    )
    assert result.returncode != 0
    report = (tmp_path / "rank0.txt").read_text()
    kind, missing, waited = report.splitlines()[0].split(" ", 2)
    assert (kind, missing) == ("RankExited", "[1]"), report
    assert 0.9 <= float(waited) < 10  # the first check of the members, at 1 s
    assert "ranks [1] have exited (rank 1: pid" in report
    assert took < 60


def test_a_collective_timeout_is_captured_under_a_crash_directory(tmp_path):
    crashes = tmp_path / "crashes"
    run_faulty("skip", 4, tmp_path, FAULT_TIMEOUT="3", TESSERA_CRASH_DIR=str(crashes))
    captured = sorted(p.name for p in crashes.glob("*-all_reduce-rank*"))
    assert captured, list(crashes.iterdir()) if crashes.exists() else "no crash directory"
    error = (crashes / captured[0] / "error.txt").read_text()
    assert error.startswith("CollectiveTimeout: all_reduce #2 on axis 'x' timed out")
