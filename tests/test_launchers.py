"""Launcher detection and the world it must agree with: every launcher's variables are
read, and a launcher whose processes MPI does not see as one world (torchrun, srun with an
MPI that does not talk to Slurm) is an error naming both, unless TESSERA_LAUNCHER says
otherwise. Launchers absent here (srun, torchrun) are the fakes in tests/fake_launchers/."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from mpi_run import mpi_missing

from tessera.runtime import launchers

HERE = os.path.dirname(os.path.abspath(__file__))
FAKES = os.path.join(HERE, "fake_launchers")
PRINT_WORLD = "from tessera import dist; print(f'world {dist.rank()} of {dist.size()}')"

ENVIRONMENTS = {
    "mpiexec (Hydra/PMI)": ({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "2"}, 3, 4, 2),
    "Open MPI": (
        {
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        },
        1,
        8,
        4,
    ),
    "torchrun": (
        {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
        2,
        4,
        2,
    ),
    "Flux": ({"FLUX_TASK_RANK": "5", "FLUX_JOB_SIZE": "6"}, 5, 6, None),
    "srun": ({"SLURM_PROCID": "7", "SLURM_STEP_NUM_TASKS": "16"}, 7, 16, None),
    "Cray PALS": ({"PALS_RANKID": "2", "PALS_LOCAL_SIZE": "4"}, 2, None, 4),
    "PMIx": ({"PMIX_RANK": "1"}, 1, None, None),
}


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_each_launcher_is_recognised_from_its_variables(name):
    env, rank, size, local = ENVIRONMENTS[name]
    launch = launchers.detect(env)
    assert (launch.launcher, launch.rank, launch.size) == (name, rank, size)
    assert launchers.ranks_on_node(env) == local


def test_no_launcher_variables_is_no_launcher():
    assert launchers.detect({"PATH": "/bin"}) is None


def test_generic_rank_variables_alone_are_not_taken_for_torchrun():
    assert launchers.detect({"RANK": "1", "WORLD_SIZE": "2"}) is None


def test_mpiexec_inside_a_slurm_allocation_is_described_by_pmi():
    env = {"PMI_RANK": "0", "PMI_SIZE": "8", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    assert launchers.detect(env).size == 8


def _run(command, **env):
    full = dict(os.environ, PATH=FAKES + os.pathsep + os.environ["PATH"], **env)
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=full, cwd=HERE)


needs_mpi = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


@needs_mpi
def test_torchrun_processes_that_mpi_sees_alone_are_an_error_naming_both():
    result = _run(
        ["torchrun", "--nproc-per-node", "2", "--no-python", sys.executable, "-c", PRINT_WORLD]
    )
    assert result.returncode != 0 and "world 0 of 1" not in result.stdout
    assert "started by torchrun as one of 2 processes (RANK=" in result.stderr
    assert "MPI's world (MPICH" in result.stderr or "MPI's world (" in result.stderr
    assert "has 1 rank" in result.stderr and "TESSERA_LAUNCHER=single" in result.stderr


@needs_mpi
def test_srun_without_pmi_is_an_error_that_says_srun_mpi_pmix():
    result = _run(["srun", "-n", "2", sys.executable, "-c", PRINT_WORLD], FAKE_SRUN_NO_PMI="1")
    assert result.returncode != 0
    assert "started by srun as one of 2 processes (SLURM_PROCID=" in result.stderr
    assert "srun --mpi=pmix" in result.stderr


@needs_mpi
@pytest.mark.parametrize("mode", ["single", "mpi"])
def test_the_launcher_setting_overrides_the_check(mode):
    result = _run(
        ["torchrun", "--nproc-per-node", "2", "--no-python", sys.executable, "-c", PRINT_WORLD],
        TESSERA_LAUNCHER=mode,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("world 0 of 1") == 2


@needs_mpi
def test_srun_through_pmi_makes_one_world():
    result = _run(["srun", "-n", "2", sys.executable, "-c", PRINT_WORLD])
    assert result.returncode == 0, result.stderr
    # (two processes share the pipe: their lines may interleave within a line)
    assert sorted(re.findall(r"world \d of \d", result.stdout)) == ["world 0 of 2", "world 1 of 2"]
