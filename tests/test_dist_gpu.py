"""The distributed layer on GPUs: NCCL through CuPy, CuPy shards, an index launch on the
GPU. Runs where CuPy, mpiexec and an NVIDIA GPU are present (one rank per GPU, at most
two); skipped elsewhere — this project's CI machines have no GPU. It passed on one rank on
an H100; two GPU ranks have not run yet."""

from __future__ import annotations

import importlib.util
import os

import pytest
from mpi_run import run_mpi

from tessera.mesh.devices import gpus_on_node
from tessera.runtime.world import find_mpiexec

HERE = os.path.dirname(os.path.abspath(__file__))


def _gpus() -> int:
    if importlib.util.find_spec("cupy") is None or importlib.util.find_spec("mpi4py") is None:
        return 0
    try:
        return gpus_on_node()
    except Exception:
        return 0


GPUS = _gpus()
pytestmark = pytest.mark.skipif(
    GPUS == 0 or find_mpiexec() is None, reason="needs CuPy, mpiexec and an NVIDIA GPU"
)


def test_collectives_shards_and_index_launch_run_on_gpu_ranks(tmp_path):
    ranks = min(2, GPUS)  # NCCL wants one GPU per rank
    env = dict(os.environ, TESSERA_COLLECTIVE_TIMEOUT="120")
    result = run_mpi("mpi_gpu_script.py", ranks, tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = {r: (tmp_path / f"rank{r}.txt").read_text() for r in range(ranks)}
    assert reports == {r: "ok" for r in range(ranks)}, reports
