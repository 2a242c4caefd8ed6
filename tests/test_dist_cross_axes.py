"""Ranks that call collectives over different axes of a 2×2 mesh wait for each other
(ranks 0 and 1 all_reduce over ``tp`` and return, then wait in a barrier for ranks 2
and 3, which wait for them in an all_reduce over ``dp``): every rank raises
CollectiveMismatch at the first probe of its wait (about a second), naming both waits,
instead of timing out (ranks 2 and 3) or waiting for ever. A real ``mpiexec -n 4`` run
of tests/mpi_cross_axes_script.py."""

from __future__ import annotations

import os

import pytest
from mpi_run import mpi_missing, run_mpi

pytestmark = pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cross")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_DIST")}
    result = run_mpi("mpi_cross_axes_script.py", 4, folder, env=env, timeout=120)
    texts = []
    for rank in range(4):
        path = folder / f"cross.rank{rank}.txt"
        texts.append(path.read_text() if path.exists() else f"no report\n{result.stderr[-3000:]}")
    return [text.split("\n--\n") for text in texts]


def test_the_ranks_that_paired_return_their_sum_then_raise_in_the_barrier(reports):
    for rank in (0, 1):
        reduced, barrier = reports[rank]
        assert reduced.startswith("no error") and "array([1., 1., 1., 1.])" in reduced, reduced
        assert barrier.startswith("CollectiveMismatch"), barrier
        assert "barrier #2 on axis 'world'" in barrier, barrier
        assert "all_reduce #1 on axis 'dp'" in barrier, barrier


def test_the_ranks_whose_partners_never_come_raise_a_mismatch_not_a_timeout(reports):
    for rank in (2, 3):
        reduced, barrier = reports[rank]
        assert reduced.startswith("CollectiveMismatch"), reduced
        assert "all_reduce #1 on axis 'dp'" in reduced, reduced
        assert "barrier #2 on axis 'world'" in reduced, reduced
        assert "each waits for the other" in reduced, reduced
