"""Collectives inside a traced function (tessera/ops/collective_nodes.py): a node of the
graph run in its place, eager and in a captured step's replays; in a world of one here,
on 2 real ranks through ``mpiexec`` (tests/mpi_jit_collectives_script.py)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_run import mpi_missing, run_mpi

import tessera
from tessera import TesseraError, dist, graph, jit, op
from tessera.op import GraphError


@pytest.fixture
def mesh():
    return dist.Mesh(axes=("x",), shape=(1,))


def test_a_collective_is_a_node_of_the_graph_run_in_its_place(mesh):
    @jit
    def step(a):
        return dist.all_reduce(op.relu(a), axis="x") * 2.0

    a = np.linspace(-1, 1, 8).astype(np.float32)
    np.testing.assert_array_equal(step(a), np.maximum(a, 0) * 2)
    assert "collective" in str(step.graph(a))


def test_replays_of_a_captured_step_repeat_the_collective(mesh):
    @jit(capture_graph=True)
    def step(a):
        return dist.all_gather(a * 3.0, axis="x", dim=0)

    channel = mesh.channel("x")
    rng = np.random.default_rng(0)
    for _ in range(4):
        a = rng.standard_normal((2, 3)).astype(np.float32)
        before = channel.started
        np.testing.assert_array_equal(step(a), a * np.float32(3))
        assert channel.started == before + 1  # the collective ran on every call
    (captured,) = step.graphs.values()
    assert "all_gather" in captured["kernels"]


def test_async_op_inside_a_traced_function_is_an_error(mesh):
    @jit
    def step(a):
        return dist.all_reduce(a * 1.0, axis="x", async_op=True)

    with pytest.raises(GraphError, match="async_op=True inside a traced function"):
        step(np.ones(4, np.float32))


def test_a_gradient_through_a_collective_is_an_error_naming_it(mesh):
    def loss(a):
        return op.sum(dist.all_reduce(a * 2.0, axis="x"))

    with pytest.raises(TesseraError, match="depends on dist.all_reduce .* no gradient rule"):
        graph.grad(loss)(np.ones(4, np.float32))


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_collectives_inside_jit_on_2_ranks_eager_and_captured(tmp_path):
    result = run_mpi("mpi_jit_collectives_script.py", 2, tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    for r in range(2):
        assert (tmp_path / f"rank{r}.txt").read_text() == "ok"


def test_stats_count_no_launch_for_a_collective(mesh):
    @jit(capture_graph=True)
    def step(a):
        return dist.broadcast(a + 1.0, axis="x", root=0)

    a = np.ones(3, np.float32)
    for _ in range(3):
        step(a)
    launches = tessera.stats()["launches"]
    step(a)  # a replay: the elementwise kernel is a launch, the broadcast is not
    assert tessera.stats()["launches"] - launches == 1
