"""``tessera run``: its command line, the launcher it picks (srun in a Slurm allocation,
the site's mpiexec before the wheel's), rank-prefixed output, and the batch scripts of
docs/distributed.md run with the stand-in srun of tests/fake_launchers/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_run import mpi_missing

from tessera.runtime import runner
from tessera.runtime.world import find_mpiexec

HERE = Path(__file__).parent
FAKES = str(HERE / "fake_launchers")
DOCS = HERE.parent / "docs" / "distributed.md"
needs_mpi = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


def test_options_before_the_separator_go_to_the_launcher():
    request = runner.parse(["-n", "4", "--bind-to", "core", "--", "python", "x.py", "-v"])
    assert request.ranks == 4 and request.launcher_args == ["--bind-to", "core"]
    assert request.command == ["python", "x.py", "-v"] and request.prefix


def test_a_script_runs_with_this_python_and_keeps_its_arguments():
    request = runner.parse(["-n2", "--no-prefix", "job.py", "--epochs", "3"])
    assert request.ranks == 2 and not request.prefix
    assert request.command == [sys.executable, "job.py", "--epochs", "3"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-n", "2", "--bind-to", "core", "x.py"], "launcher options go before --"),
        (["-n", "0", "x.py"], "count >= 1"),
        (["-n", "2"], "no program to run"),
        (["--launcher", "aprun", "x.py"], "choose auto, srun or mpiexec"),
    ],
)
def test_a_command_line_that_cannot_run_says_why(argv, message):
    with pytest.raises(runner.UsageError, match=message):
        runner.parse(argv)


def _site_mpiexec(tmp_path) -> str:
    site = tmp_path / "site"
    site.mkdir()
    (site / "mpiexec").write_text("#!/bin/sh\n")
    (site / "mpiexec").chmod(0o755)
    return str(site)


def test_inside_a_slurm_allocation_the_launcher_is_srun(tmp_path):
    env = {"SLURM_JOB_ID": "42", "PATH": FAKES + os.pathsep + _site_mpiexec(tmp_path)}
    command = runner.command_line(runner.parse(["-n", "2", "x.py"]), env)
    assert command[:3] == [os.path.join(FAKES, "srun"), "-n", "2"]


def test_outside_an_allocation_the_sites_mpiexec_comes_before_the_wheels(tmp_path):
    site = _site_mpiexec(tmp_path)
    env = {"PATH": FAKES + os.pathsep + site + os.pathsep + os.path.dirname(sys.executable)}
    command = runner.command_line(runner.parse(["-n", "2", "--no-prefix", "x.py"]), env)
    watcher = [sys.executable, "-m", "tessera.runtime.rank_output", "--no-prefix"]  # no labels
    assert command == [os.path.join(site, "mpiexec"), "-n", "2", *watcher, sys.executable, "x.py"]


def test_the_wheels_mpiexec_is_the_fallback(tmp_path):
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.access(beside, os.X_OK):
        pytest.skip("no mpiexec installed beside this Python")
    assert find_mpiexec(str(tmp_path)) == beside


def _tessera_run(*argv, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "tessera.cli", "run", *argv],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=cwd,
    )


PRINT = (
    "import sys; from tessera import dist; print('rank', dist.rank()); print('e', file=sys.stderr)"
)


@needs_mpi
def test_each_output_line_is_prefixed_with_its_rank():
    result = _tessera_run("-n", "2", "--", sys.executable, "-c", PRINT)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0] rank 0", "[1] rank 1"]
    assert sorted(result.stderr.splitlines()) == ["[0] e", "[1] e"]


@needs_mpi
def test_no_prefix_leaves_the_lines_as_they_are():
    result = _tessera_run("-n", "2", "--no-prefix", "--", sys.executable, "-c", PRINT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("rank") == 2 and "[" not in result.stdout  # lines may mix


@needs_mpi
def test_launcher_options_are_forwarded_to_mpiexec():
    if (
        "HYDRA"
        not in subprocess.run([find_mpiexec(), "--version"], capture_output=True, text=True).stdout
    ):
        pytest.skip("the -genv option checked here is MPICH Hydra's")
    code = "import os; print(os.environ['FORWARDED'])"
    result = _tessera_run("-n", "2", "-genv", "FORWARDED", "yes", "--", sys.executable, "-c", code)
    assert sorted(result.stdout.splitlines()) == ["[0] yes", "[1] yes"], result.stderr


@needs_mpi
def test_a_ranks_exit_status_is_the_runs():
    result = _tessera_run("-n", "1", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert result.returncode == 3


def _batch_scripts() -> dict[str, str]:
    text = DOCS.read_text().split("### Batch scripts", 1)[1]
    blocks = re.findall(r"```bash\n(#!/bin/bash\n.*?)```", text, re.S)
    return {re.search(r"--job-name=(\S+)", b).group(1): b for b in blocks}


def test_the_docs_have_a_cpu_and_a_gpu_batch_script():
    assert sorted(_batch_scripts()) == ["tessera-cpu", "tessera-gpu"]


@needs_mpi
@pytest.mark.parametrize("name", ["tessera-cpu", "tessera-gpu"])
def test_the_docs_batch_script_runs_under_srun(name, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(_batch_scripts()[name])
    env = dict(
        os.environ,
        PATH=FAKES + os.pathsep + os.environ["PATH"],
        SLURM_JOB_ID="1",
        SLURM_NTASKS="2",
        FAKE_SRUN_MPIEXEC=find_mpiexec(),
    )
    result = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=HERE.parent,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "on 2 ranks" in result.stdout
