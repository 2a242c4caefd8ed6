"""Meshes and collectives on 2 and 4 real MPI ranks (``mpiexec``), and in a world of one."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi_run import mpi_missing, run_mpi

import tessera as ts
from tessera import dist

HERE = os.path.dirname(os.path.abspath(__file__))
needs_mpi = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_collectives_on_a_mesh_match_numpy_on_every_rank(ranks, tmp_path):
    result = run_mpi("mpi_collectives_script.py", ranks, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = {r: (tmp_path / f"rank{r}.txt").read_text() for r in range(ranks)}
    assert reports == {r: "ok" for r in range(ranks)}, reports


def test_a_script_started_alone_is_a_world_of_one():
    mesh = dist.Mesh(axes=("dp",), shape=(1,))
    x = np.arange(4.0)
    assert mesh.rank == 0 and mesh.coords == (0,)
    np.testing.assert_array_equal(dist.all_reduce(x, axis="dp"), x)
    np.testing.assert_array_equal(dist.all_gather(x, axis="dp"), x)


def test_a_mesh_bigger_than_the_world_says_how_to_launch():
    with pytest.raises(ts.TesseraError, match=r"needs 4 ranks.*mpiexec -n 4"):
        dist.Mesh(axes=("dp", "tp"), shape=(2, 2))


def test_unknown_axis_and_op_are_errors():
    dist.Mesh(axes=("dp",), shape=(1,))
    with pytest.raises(ts.TesseraError, match="no axis 'tp'"):
        dist.all_reduce(np.zeros(2), axis="tp")
    with pytest.raises(ts.TesseraError, match="op="):
        dist.all_reduce(np.zeros(2), axis="dp", op="mean")


@needs_mpi
def test_sharded_tensors_hold_array_split_blocks_and_gather_back(tmp_path):
    result = run_mpi("mpi_tensor_script.py", 4, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = {r: (tmp_path / f"rank{r}.txt").read_text() for r in range(4)}
    assert reports == {r: "ok" for r in range(4)}, reports


def test_layout_blocks_follow_array_split():
    from tessera.mesh.layout import block

    sizes = [block(10, 4, i) for i in range(4)]
    assert sizes == [(0, 3), (3, 6), (6, 8), (8, 10)]


def test_shard_spec_rejects_mismatched_pairs():
    with pytest.raises(ts.TesseraError, match="pairs each partitioned dim"):
        dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp",))
