"""Point-to-point transfers and all_to_all (tessera/mesh/exchange.py): on 2 and 4 real
ranks through ``mpiexec`` (tests/mpi_exchange_script.py: rings, pairs, a large message,
all_to_all against NumPy, a dtype mismatch and a missing sender), and their argument
checks in a world of one."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi_run import mpi_missing, run_mpi

from tessera import TesseraError, dist


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
@pytest.mark.parametrize("ranks", [2, 4])
def test_exchanges_between_ranks_match_numpy_and_name_their_faults(ranks, tmp_path):
    env = dict(os.environ, TESSERA_COLLECTIVE_TIMEOUT="60", FAULT_TIMEOUT="2")
    result = run_mpi("mpi_exchange_script.py", ranks, tmp_path, env=env, timeout=200)
    outcomes = [(tmp_path / f"rank{r}.txt").read_text() for r in range(ranks)]
    assert outcomes == ["ok"] * ranks, (outcomes, result.stderr[-2000:])


@pytest.fixture
def mesh():
    return dist.Mesh(axes=("x",), shape=(1,))


def test_a_peer_outside_the_axis_is_an_error(mesh):
    with pytest.raises(TesseraError, match="dst=3 is not an index on axis 'x' \\(size 1\\)"):
        dist.send(np.ones(2), dst=3, axis="x")


def test_a_transfer_to_this_rank_itself_is_an_error(mesh):
    with pytest.raises(TesseraError, match="src=0 is this rank's own index"):
        dist.recv(np.ones(2), src=0, axis="x")


def test_all_to_all_needs_equal_blocks(mesh):
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(dist.all_to_all(x, axis="x", dim=1), x)  # one member
    with pytest.raises(TesseraError, match="all_to_all: dim=5 is not a dim of a 2-d array"):
        dist.all_to_all(x, axis="x", dim=5)


def test_recv_into_a_read_only_array_is_an_error(mesh):
    out = np.zeros(3)
    out.flags.writeable = False
    with pytest.raises(TesseraError, match="recv: out must be a writable"):
        dist.recv(out, src=0, axis="x")
