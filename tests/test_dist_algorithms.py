"""Collective algorithms (tessera/mesh/algorithms.py, link_cost.py): ring, tree and
recursive doubling on 2, 3 and 4 real ranks against the library and NumPy
(tests/mpi_algorithms_script.py), and the α–β choice in a world of one."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi_run import mpi_missing, run_mpi

from tessera import TesseraError, dist
from tessera.mesh import link_cost


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_every_algorithm_gives_the_librarys_result(ranks, tmp_path):
    env = dict(os.environ, TESSERA_COLLECTIVE_TIMEOUT="60")
    result = run_mpi("mpi_algorithms_script.py", ranks, tmp_path, env=env, timeout=200)
    outcomes = [(tmp_path / f"rank{r}.txt").read_text() for r in range(ranks)]
    assert outcomes == ["ok"] * ranks, (outcomes, result.stderr[-2000:])


@pytest.fixture
def mesh():
    return dist.Mesh(axes=("x",), shape=(1,))


def test_an_algorithm_a_collective_lacks_is_an_error_listing_the_valid_ones(mesh):
    with pytest.raises(
        TesseraError, match="broadcast has no algorithm 'ring'; choose one of auto, tree, library"
    ):
        dist.broadcast(np.ones(3), "x", algorithm="ring")


def test_an_explicit_algorithm_runs_in_a_world_of_one(mesh):
    work = dist.all_reduce(np.arange(5.0), "x", algorithm="tree", async_op=True)
    assert work.algorithm == "tree"
    np.testing.assert_array_equal(work.wait(), np.arange(5.0))


def test_deterministic_with_a_reordering_algorithm_is_an_error(mesh):
    with pytest.raises(TesseraError, match="deterministic reduces in rank order; rd would"):
        dist.all_reduce(np.ones(3), "x", deterministic=True, algorithm="rd")


def test_the_model_costs_follow_the_formulas():
    alpha, beta, p, n = 1e-5, 1e-10, 8, 1 << 20
    got = link_cost.costs("all_reduce", p, n, alpha, beta)
    a, g = alpha + link_cost.step_overhead(), link_cost.gamma()
    assert got["ring"] == pytest.approx(2 * 7 * a + 2 * (7 / 8) * n * beta + (7 / 8) * n * g)
    assert got["rd"] == pytest.approx(3 * (a + n * beta + n * g))
    k = link_cost.best_k(p, n, a, beta)
    assert got["tree"] == pytest.approx(2 * (3 + k - 1) * (a + n * beta / k) + 3 * n * g)


def test_measured_timings_replace_an_algorithms_formula(monkeypatch):
    monkeypatch.setattr(link_cost, "_fitted", {})
    link_cost.set_fitted("ring", 2, [(8, 30e-6), (65536, 40e-6), (4 << 20, 600e-6)])
    got = link_cost.costs("all_reduce", 2, 1 << 20, 1e-6, 1e-10)
    assert got["ring"] == pytest.approx(40e-6 + (1048576 - 65536) * (560e-6 / (4194304 - 65536)))
    # on 4 ranks: the latency part scales with the steps (2 -> 6), the rest with the bytes
    # each rank moves (1 -> 1.5 payloads)
    four = link_cost.costs("all_reduce", 4, 1 << 20, 1e-6, 1e-10)["ring"]
    assert four == pytest.approx(30e-6 * 3 + (got["ring"] - 30e-6) * 1.5)


def test_the_tree_chunk_count_minimises_its_cost():
    p, n, alpha, beta = 16, 64 << 20, 3e-5, 1e-10
    k = link_cost.best_k(p, n, alpha, beta)
    cost = lambda k: 2 * (4 + k - 1) * (alpha + n * beta / k)  # noqa: E731
    assert cost(k) <= min(cost(k - 1), cost(k + 1)) + 1e-12


def test_auto_takes_the_least_modelled_cost():
    for nbytes in (8, 1 << 10, 1 << 20, 64 << 20):
        name, _ = link_cost.choose(
            "all_reduce", "auto", 4, nbytes, "net", False, True, False, "auto"
        )
        alpha, beta = link_cost.parameters("net")
        modelled = link_cost.costs("all_reduce", 4, nbytes, alpha, beta)
        assert name == min(modelled, key=modelled.get)


def test_a_setting_a_collective_lacks_runs_auto():
    name, _ = link_cost.choose("broadcast", None, 2, 64, "shm", False, True, False, "rd")
    assert name in link_cost.VALID["broadcast"]


def test_an_axis_on_one_node_is_costed_as_shared_memory():
    assert link_cost.axis_link([("n", 1, 1), ("n", 2, 2)]) == "shm"
    assert link_cost.axis_link([("n", 1, 1), ("m", 2, 2)]) == "net"
    assert link_cost.axis_link([("n", 1, 1)]) == "self"


def test_ping_pong_timings_fit_alpha_and_beta():
    alpha, beta = link_cost.fit(small=2e-6, large=2e-6 + (4 << 20) / 5e9)
    assert alpha == pytest.approx(2e-6, rel=1e-3) and beta == pytest.approx(1 / 5e9, rel=1e-3)
