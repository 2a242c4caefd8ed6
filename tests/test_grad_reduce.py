"""``dist.GradReduce`` (tessera/mesh/grad_reduce.py): the bucket plan, buckets started in
plan order whatever order the gradients come in, the reduced gradients on 2 real ranks
(tests/mpi_grad_reduce_script.py), and the errors, in a world of one."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_run import mpi_missing, run_mpi

from tessera import TesseraError, dist


@pytest.fixture
def mesh():
    return dist.Mesh(axes=("dp",), shape=(1,))


SHAPES = [((1000,), np.float32), ((300,), np.float32), ((50,), np.float64), ((700,), np.float32)]


def test_buckets_hold_the_parameters_in_reverse_order_by_dtype_and_size(mesh):
    reducer = dist.GradReduce(SHAPES, axis="dp", bucket_mb=4100 / 2**20)  # 4100 bytes
    assert reducer.plan == [[3, 1], [2], [0]]  # 700 + 300 f32 fit; then 1000 f32 alone
    three, one = reducer.buckets[0].slots
    assert (three[1], one[1]) == (0, 704)  # the second slot starts on a 256-byte line


def test_a_full_bucket_starts_only_after_the_buckets_before_it(mesh):
    reducer = dist.GradReduce(SHAPES, axis="dp", bucket_mb=4100 / 2**20)
    channel = mesh.channel("dp")
    before = channel.started
    reducer.ready(0, np.ones(1000, np.float32))  # the last bucket is full: it waits
    assert channel.started == before
    reducer.ready(2, np.ones(50))  # still waiting on the first bucket
    assert channel.started == before
    reducer.ready(3, np.ones(700, np.float32))
    reducer.ready(1, np.ones(300, np.float32))  # now all three start, in plan order
    assert channel.started == before + 3
    grads = reducer.wait()
    assert [g.shape for g in grads] == [(1000,), (300,), (50,), (700,)]
    assert all((g == 1).all() for g in grads)


def test_a_gradient_given_twice_or_of_another_shape_or_missing_is_an_error(mesh):
    reducer = dist.GradReduce(SHAPES, axis="dp")
    reducer.ready(1, np.zeros(300, np.float32))
    with pytest.raises(TesseraError, match="gradient 1 was given twice"):
        reducer.ready(1, np.zeros(300, np.float32))
    with pytest.raises(
        TesseraError, match="gradient 2 is float32 \\(50,\\); its parameter is float64"
    ):
        reducer.ready(2, np.zeros(50, np.float32))
    with pytest.raises(TesseraError, match="gradients \\[0, 2, 3\\] were not given"):
        reducer.wait()


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_gradients_in_any_order_reduce_to_numpys_sums_on_2_ranks(tmp_path):
    result = run_mpi("mpi_grad_reduce_script.py", 2, tmp_path, timeout=120)
    outcomes = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert outcomes == ["ok", "ok"], (outcomes, result.stderr[-2000:])


def _mlp_loss(x, y, w1, w2):
    from tessera import op

    err = op.matmul(op.relu(op.matmul(x, w1)), w2) - y
    return op.mean(err * err)


def _mlp_args():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.standard_normal((16, 4)).astype(np.float32)
    w1 = rng.standard_normal((8, 6)).astype(np.float32)
    w2 = rng.standard_normal((6, 4)).astype(np.float32)
    return x, y, w1, w2


def test_value_and_grad_gives_each_gradient_as_the_backward_pass_makes_it(mesh, monkeypatch):
    from tessera import graph

    reducer = dist.GradReduce(axis="dp", op="mean")
    given = []
    ready = reducer.ready
    monkeypatch.setattr(reducer, "ready", lambda i, g: (given.append(i), ready(i, g))[1])
    step = graph.value_and_grad(_mlp_loss, argnums=(2, 3), reduce=reducer)
    value, (dw1, dw2) = step(*_mlp_args())
    want_value, (w1, w2) = graph.value_and_grad(_mlp_loss, argnums=(2, 3))(*_mlp_args())
    assert value == want_value
    np.testing.assert_array_equal(dw1, w1)  # the mean over one rank
    np.testing.assert_array_equal(dw2, w2)
    assert given == [1, 0]  # the last layer's gradient is made (and given) first
    assert reducer.plan == [[1, 0]]  # planned on first use over the gradients of argnums


def test_a_gradient_reducer_in_a_traced_function_is_an_error(mesh):
    import tessera
    from tessera import graph

    step = graph.grad(_mlp_loss, argnums=2, reduce=dist.GradReduce(axis="dp"))

    @tessera.jit
    def train(x, y, w1, w2):
        return step(x, y, w1, w2)

    with pytest.raises(TesseraError, match="with reduce= runs as a step of its own"):
        train(*_mlp_args())


def test_a_bucket_size_outside_its_range_is_an_error(mesh):
    with pytest.raises(TesseraError, match=r"bucket_mb=2048 must be in \(0, 1024\]"):
        dist.GradReduce(axis="dp", bucket_mb=2048)
