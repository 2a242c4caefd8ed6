"""``tessera.jit``: a traced step, run eagerly or captured once and replayed (docs/capture.md).
On the CPU a replay calls the recorded launches' programs directly: bitwise equal to
eager calls, one trace and one capture per key; outputs copied (or static buffers);
inputs copied into static buffers (or passed as them); written arguments bound by
address; new shapes recaptured (up to max_graphs) or refused (shapes="fixed")."""

from __future__ import annotations

import runpy
import warnings
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import CaptureError, CaptureWarning, config, graph, jit, op
from tessera.op import GraphError


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return (
        (rng.standard_normal((32, 16)) * 0.1).astype(np.float32),
        (rng.standard_normal((16, 4)) * 0.1).astype(np.float32),
    )


def _model(x, a, b):
    return op.matmul(op.relu(op.matmul(x, a)), b)


def _loss(out):
    return op.mean(out * out)


_grads = graph.value_and_grad(lambda x, a, b: _loss(_model(x, a, b)), argnums=(1, 2))


def _sgd(capture):
    @jit(capture_graph=capture)
    def sgd_step(x, a, b):
        loss, (da, db) = _grads(x, a, b)
        a[:] = a - 0.01 * da
        b[:] = b - 0.01 * db
        return loss

    return sgd_step


def _train(step, calls=5):
    a, b = _weights()
    x = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    losses = [step(x + i, a, b) for i in range(calls)]  # a new input array every call
    return np.array(losses), a, b


def _count(name):
    return tessera.stats()[name]


def test_replays_are_bitwise_equal_to_eager_calls():
    eager = _train(_sgd(False))
    captures, replays = _count("graph_captures"), _count("graph_replays")
    replayed = _train(_sgd(True))
    for e, r in zip(eager, replayed):
        np.testing.assert_array_equal(e, r)
    assert _count("graph_captures") == captures + 1  # call 2
    assert _count("graph_replays") == replays + 3  # calls 3 to 5


def test_a_replay_launches_the_recorded_kernels_only():
    step = _sgd(True)
    a, b = _weights()
    x = np.ones((8, 32), np.float32)
    step(x, a, b)
    step(x, a, b)  # the capture
    (graph_info,) = step.graphs.values()
    before = _count("launches")
    step(x, a, b)
    assert _count("launches") - before == len(graph_info["kernels"])


def test_outputs_are_copies_the_caller_may_change():
    @jit(capture_graph=True)
    def double(x):
        return x * 2.0

    x = np.arange(4, dtype=np.float32)
    first = [double(x) for _ in range(3)][-1]
    first[:] = -1.0
    np.testing.assert_array_equal(double(x), x * 2)


def test_static_outputs_are_the_graphs_buffers_overwritten_by_the_next_replay():
    @jit(capture_graph=True, outputs="static", warmup=0)
    def double(x):
        return x * 2.0

    y1 = double(np.ones(4, np.float32))
    y2 = double(np.full(4, 3.0, np.float32))
    assert y1 is y2
    np.testing.assert_array_equal(y1, 6.0)


def test_passing_the_static_input_buffer_skips_its_copy():
    @jit(capture_graph=True, warmup=0)
    def double(x):
        return x * 2.0

    double(np.ones(4, np.float32))
    buffer = double.inputs(np.ones(4, np.float32))["x"]
    buffer[:] = 5.0
    copies = _count("graph_input_copies")
    np.testing.assert_array_equal(double(buffer), 10.0)
    assert _count("graph_input_copies") == copies


def test_a_written_argument_must_be_the_captured_array():
    step = _sgd(True)
    a, b = _weights()
    x = np.ones((8, 32), np.float32)
    step(x, a, b)
    step(x, a, b)
    with pytest.raises(CaptureError, match=r"parameter 'a' is written by the step, so it is bound"):
        step(x, a.copy(), b)


def test_new_shapes_are_captured_again_up_to_max_graphs():
    @jit(capture_graph=True, warmup=0, max_graphs=1)
    def double(x):
        return x * 2.0

    double(np.ones(4, np.float32))
    with pytest.warns(CaptureWarning, match=r"more than max_graphs=1"):
        y = double(np.ones(6, np.float32))
    np.testing.assert_array_equal(y, 2.0)
    assert len(double.graphs) == 1


def test_fixed_shapes_refuse_a_new_shape():
    @jit(capture_graph=True, warmup=0, shapes="fixed")
    def double(x):
        return x * 2.0

    double(np.ones(4, np.float32))
    with pytest.raises(CaptureError, match=r"shapes='fixed'"):
        double(np.ones(6, np.float32))


def test_a_step_that_cannot_be_captured_runs_eagerly_with_a_warning():
    @jit(capture_graph=True, warmup=0)
    def scale(x):
        x[:] = x * 2.0
        return op.sum(x)

    x = np.ones((4, 4), np.float32)[:, ::2]  # written, and not contiguous
    with pytest.warns(CaptureWarning, match=r"parameter 'x' is written by the step and is not"):
        total = scale(x)
    assert total == 16.0
    np.testing.assert_array_equal(x, 2.0)


def test_strict_capture_raises_where_a_capture_fails():
    @jit(capture_graph="strict", warmup=0)
    def scale(x):
        x[:] = x * 2.0
        return op.sum(x)

    with pytest.raises(CaptureError, match=r"not contiguous"):
        scale(np.ones((4, 4), np.float32)[:, ::2])


def test_a_host_read_in_the_body_is_an_error_at_the_trace():
    @jit(capture_graph=True)
    def reads(x):
        return x * float(op.sum(x))

    with pytest.raises(GraphError, match=r"float\(\) of a traced tensor .* read once"):
        reads(np.ones(4, np.float32))


def test_the_debug_target_runs_every_call_eagerly():
    with config(target="debug"):
        replays = _count("graph_replays")
        losses, *_ = _train(_sgd(True), calls=3)
        assert _count("graph_replays") == replays
    eager, *_ = _train(_sgd(False), calls=3)
    np.testing.assert_allclose(losses, eager, rtol=1e-6)


def test_static_argnums_trace_a_graph_per_value():
    @jit(capture_graph=True, warmup=0, static_argnums=1)
    def scaled(x, k):
        return x * float(k)

    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(scaled(x, 2), 2.0)
    np.testing.assert_array_equal(scaled(x, 3), 3.0)
    np.testing.assert_array_equal(scaled(x, 2), 2.0)
    assert len(scaled.graphs) == 2


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(capture_graph="yes"), r"capture_graph='yes' must be False, True or 'strict'"),
        (dict(warmup=-1), r"warmup=-1 must be a number of calls"),
        (dict(outputs="view"), r"outputs='view' must be one of copy, static"),
        (dict(shapes="any"), r"shapes='any' must be one of recapture, fixed"),
        (dict(max_graphs=0), r"max_graphs=0 must be a positive int"),
    ],
)
def test_bad_options_are_errors(options, message):
    with pytest.raises(tessera.TesseraError, match=message):
        jit(**options)


def test_graph_grad_inside_a_traced_function_records_into_its_graph():
    @graph.module
    def loss_and_grad(x, a, b):
        loss, (da, db) = _grads(x, a, b)
        return loss, da

    a, b = _weights()
    x = np.ones((8, 32), np.float32)
    loss, da = loss_and_grad(x, a, b)
    want_loss, (want_da, _) = _grads(x, a, b)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    np.testing.assert_allclose(da, want_da, rtol=1e-5, atol=1e-7)


def test_the_seeds_train_step_runs_as_written():
    w1, w2 = np.full((784, 256), 0.01, np.float32), np.full((256, 10), 0.01, np.float32)

    def model(x, a=w1, b=w2):
        return op.matmul(op.relu(op.matmul(x, a)), b)

    def loss_fn(out):
        return op.mean(out * out)

    @jit(capture_graph=True)
    def train_step(batch):
        out = model(batch)
        loss = loss_fn(out)
        return loss

    x = np.ones((64, 784), np.float32)
    losses = [float(train_step(x)) for _ in range(3)]
    assert losses[0] == losses[1] == losses[2] == pytest.approx(402.8297, rel=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_step(x)


def test_the_mlp_examples_training_replayed_gives_its_losses_bit_for_bit():
    mlp = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "mlp_training.py"))
    want = mlp["train"](steps=6)
    step = mlp["step"]

    @jit(capture_graph=True)
    def sgd(x, y, w1, b1, w2, b2):
        value, grads = step(x, y, w1, b1, w2, b2)
        for p, g in zip((w1, b1, w2, b2), grads):
            p[:] = p - 0.05 * g
        return value

    rng = np.random.default_rng(0)  # the example's data and initial parameters
    x = rng.standard_normal((128, 32)).astype(np.float32)
    teacher = rng.standard_normal((32, 8)).astype(np.float32)
    y = np.tanh(x @ teacher).astype(np.float32)
    params = [
        (rng.standard_normal((32, 64)) * 0.2).astype(np.float32),
        np.zeros(64, np.float32),
        (rng.standard_normal((64, 8)) * 0.2).astype(np.float32),
        np.zeros(8, np.float32),
    ]
    replays = _count("graph_replays")
    losses = [float(sgd(x, y, *params)) for _ in range(6)]
    assert losses == want
    assert _count("graph_replays") == replays + 4
