"""The CPU thread count: the node's cores divided among the ranks on the node, unless
TESSERA_THREADS or NUMBA_NUM_THREADS says otherwise; tested alone and under mpiexec."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from mpi_run import mpi_missing, run_mpi

import tessera
from tessera.cli import main
from tessera.errors import SettingError
from tessera.runtime import threads

CORES = os.cpu_count() or 1
BOUND = threads.usable_cores() < CORES  # this process already has fewer cores than the node


@pytest.mark.skipif(BOUND, reason="this process is bound to fewer cores than the node has")
@pytest.mark.parametrize("ranks", [None, 1, 2, 3, 64])
def test_default_is_the_cores_divided_by_the_ranks_on_the_node(ranks):
    count, reason = threads.choose(ranks, environ={})
    assert count == max(1, CORES // (ranks or 1))
    assert (f"{ranks} ranks on node" in reason) == bool(ranks and ranks > 1)


def test_tessera_threads_sets_the_count():
    with tessera.config(threads="3"):
        assert threads.choose(2, environ={}) == (3, "TESSERA_THREADS")


@pytest.mark.parametrize("value", ["0", "many"])
def test_tessera_threads_must_be_a_positive_count(value):
    with tessera.config(threads=value), pytest.raises(SettingError, match="TESSERA_THREADS"):
        threads.choose(None, environ={})


def test_a_numba_num_threads_the_user_set_wins():
    assert threads.choose(2, environ={"NUMBA_NUM_THREADS": "5"}) == (5, "NUMBA_NUM_THREADS")


@pytest.mark.skipif(BOUND, reason="this process is bound to fewer cores than the node has")
def test_a_count_tessera_chose_is_chosen_again_in_a_child_process():
    env = {"NUMBA_NUM_THREADS": "1", threads.CHOSEN: "1"}
    assert threads.choose(None, environ=env) == (CORES, f"{CORES} cores")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or CORES < 2, reason="needs 2 cores")
def test_a_process_bound_to_some_cores_uses_those_as_they_are():
    code = (
        "import os; os.sched_setaffinity(0, {0}); from tessera import threads; "
        "print(threads.choose(2, environ={}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "(1, 'the 1 cores the launcher bound this process to')"


def test_info_shows_the_thread_count_and_why(capsys):
    assert main(["info"]) == 0
    assert f"threads   {threads.describe()}" in capsys.readouterr().out


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
@pytest.mark.parametrize("source", ["launcher", "from-mpi"])
def test_two_ranks_on_one_node_share_its_cores(source):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_NUM_THREADS", threads.CHOSEN)}
    result = run_mpi("mpi_threads_script.py", 2, source, env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    share = max(1, CORES // 2)
    lines = sorted(re.findall(r"rank \d: [^)]*\)", result.stdout))  # ranks' lines may mix
    assert lines == [
        f"rank {r}: numba {share}; {share} threads ({CORES} cores / 2 ranks on node)"
        for r in (0, 1)
    ]


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_tessera_threads_overrides_the_share_under_mpi():
    env = dict(os.environ, TESSERA_THREADS="2")
    env.pop("NUMBA_NUM_THREADS", None)
    result = run_mpi("mpi_threads_script.py", 2, "launcher", env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("numba 2; 2 threads (TESSERA_THREADS)") == 2
