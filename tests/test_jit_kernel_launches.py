"""``@kernel`` launches inside a traced function (tessera/ops/launches.py): a launch node
whose mut parameters write into a copy of the tensor passed, which stands for the written
array from then on; arguments written back to the caller; replays of a captured step
repeat the launch; what cannot be traced is an error naming the kernel and parameter."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import TesseraError, f32, graph, jit, kernel, mut, op, tile
from tessera.op import GraphError


@kernel
def axpy_into(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    y[i] = y[i] + alpha * x[i]


def _data(seed=0, n=64):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def test_a_launch_on_an_argument_writes_the_callers_array(target):
    @jit
    def step(a, b):
        axpy_into[a.shape[0]](op.relu(a), b, 0.5)
        return op.sum(b * b)

    a, b = _data()
    want = b + np.float32(0.5) * np.maximum(a, 0)
    total = step(a, b)
    np.testing.assert_array_equal(b, want)
    np.testing.assert_allclose(float(total), float((want * want).sum()), rtol=1e-5)


def test_reads_before_a_launch_see_the_old_values_and_reads_after_the_new():
    @jit
    def step(a, b):
        c = a * 2.0
        before = c + 1.0
        axpy_into[a.shape[0]](b, c, 1.0)  # c := c + b
        return before, c + 1.0

    a, b = _data(1)
    before, after = step(a, b)
    np.testing.assert_array_equal(before, a * np.float32(2) + np.float32(1))
    np.testing.assert_array_equal(after, (a * np.float32(2) + b) + np.float32(1))


def test_replays_of_a_captured_step_repeat_the_launch_on_new_values():
    @jit(capture_graph=True)
    def step(a, b):
        axpy_into[a.shape[0]](op.relu(a), b, 0.5)
        return op.sum(b)

    rng = np.random.default_rng(2)
    a, b = _data(2)
    replays = tessera.stats().get("graph_replays", 0)
    for _ in range(4):
        a[:] = rng.standard_normal(a.shape)
        want = b + np.float32(0.5) * np.maximum(a, 0)
        step(a, b)
        np.testing.assert_array_equal(b, want)
    assert tessera.stats()["graph_replays"] - replays == 2  # warm-up, capture, 2 replays
    (graph_info,) = step.graphs.values()
    assert "axpy_into" in graph_info["kernels"]


def test_a_module_may_not_launch_a_kernel_that_writes_an_argument_it_did_not_declare_mut():
    @graph.module
    def update(a, b):
        axpy_into[a.shape[0]](a, b, 1.0)
        return a + 0.0

    a, b = _data(3)
    kept = b.copy()
    with pytest.raises(GraphError, match="writes into the caller's array 'b'"):
        update(a, b)
    np.testing.assert_array_equal(b, kept)


def test_a_gradient_through_a_launch_is_an_error_naming_the_kernel():
    def loss(a, b):
        c = a * 1.0
        axpy_into[a.shape[0]](b, c, 1.0)
        return op.sum(c)

    a, b = _data(4)
    with pytest.raises(TesseraError, match="kernel 'axpy_into' wrote .* no gradient rule"):
        graph.grad(loss)(a, b)


def test_an_outside_array_for_a_mut_parameter_is_an_error():
    outside = np.zeros(64, np.float32)

    @jit
    def step(a):
        axpy_into[a.shape[0]](a, outside, 1.0)
        return a + 0.0

    with pytest.raises(GraphError, match="writes its parameter 'y' \\(mut\\): pass a tensor"):
        step(_data(5)[0])
    assert not outside.any()


def test_a_traced_tensor_for_a_scalar_parameter_is_an_error():
    @jit
    def step(a, b):
        axpy_into[a.shape[0]](a, b, op.sum(a))
        return b + 0.0

    a, b = _data(6)
    with pytest.raises(GraphError, match="parameter 'alpha' is a scalar"):
        step(a, b)


def test_one_tensor_for_a_read_and_a_mut_parameter_aliases_as_in_an_eager_launch():
    @jit
    def step(a):
        c = a + 0.0
        axpy_into[a.shape[0]](c, c, 1.0)  # c[i] = c[i] + c[i]
        return c

    a = _data(7)[0]
    eager = a.copy()
    axpy_into[a.shape[0]](eager, eager, 1.0)
    np.testing.assert_array_equal(step(a), eager)
