"""Adjoints: every op's gradient against central finite differences, an MLP and attention
against hand-written NumPy gradients, and the same bits on every run."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import f64, graph, op


def finite_difference(f, args, index, eps):
    """Central differences of scalar ``f(*args)`` with respect to ``args[index]``."""
    x = args[index]
    out = np.zeros(x.shape, np.float64)
    for i in np.ndindex(x.shape):
        saved = x[i]
        x[i] = saved + eps
        up = float(f(*args))
        x[i] = saved - eps
        down = float(f(*args))
        x[i] = saved
        out[i] = (up - down) / (2 * eps)
    return out


# op name → (function of traced tensors, input shapes, positive inputs only)
CASES = {
    "add": (lambda a, b: op.add(a, b), [(3, 4), (4,)], False),
    "sub": (lambda a, b: a - b, [(3, 4), (3, 1)], False),
    "mul": (lambda a, b: a * b, [(3, 4), (3, 4)], False),
    "div": (lambda a, b: a / b, [(3, 4), (4,)], True),
    "neg": (lambda a: -a, [(5,)], False),
    "exp": (op.exp, [(3, 4)], False),
    "log": (op.log, [(3, 4)], True),
    "sqrt": (op.sqrt, [(3, 4)], True),
    "tanh": (op.tanh, [(3, 4)], False),
    "relu": (op.relu, [(3, 4)], False),
    "gelu": (op.gelu, [(3, 4)], False),
    "silu": (op.silu, [(3, 4)], False),
    "sigmoid": (op.sigmoid, [(3, 4)], False),
    "maximum": (op.maximum, [(3, 4), (3, 4)], False),
    "minimum": (op.minimum, [(3, 4), (3, 4)], False),
    "where": (lambda a, b: op.where(a > b, a * 2.0, b), [(3, 4), (3, 4)], False),
    "cast": (lambda a: op.cast(a, f64) * a, [(3, 4)], False),
    "sum": (lambda a: op.sum(a, axis=1, keepdims=True), [(3, 4)], False),
    "mean": (lambda a: op.mean(a, axis=0), [(3, 4)], False),
    "max": (lambda a: op.max(a, axis=1), [(3, 4)], False),
    "min": (lambda a: op.min(a), [(3, 4)], False),
    "softmax": (op.softmax, [(3, 5)], False),
    "layernorm": (lambda x, w, b: op.layernorm(x, w, b), [(3, 5), (5,), (5,)], False),
    "rmsnorm": (lambda x, w: op.rmsnorm(x, w), [(3, 5), (5,)], False),
    "transpose": (lambda a: a.T * 3.0, [(3, 4)], False),
    "reshape": (lambda a: op.reshape(a, (2, 6)) * 3.0, [(3, 4)], False),
    "pow_square": (lambda a: a**2, [(3, 4)], False),
    "pow_root": (lambda a: a**0.5, [(3, 4)], True),
    "pow_number": (lambda a: a**1.5, [(3, 4)], True),
    "pow_tensors": (lambda a, b: a**b, [(3, 4), (4,)], True),
    "rpow": (lambda a: 2.0**a, [(3, 4)], False),
    "abs": (lambda a: abs(a), [(3, 4)], False),
    "remainder": (lambda a, b: (a * 7.0) % (b + 1.0), [(3, 4), (4,)], True),
    "clip": (lambda a, lo, hi: op.clip(a, lo, hi - 2.0 * lo), [(3, 4), (4,), (4,)], False),
    "clip_numbers": (lambda a: op.clip(a, -0.5, 0.5), [(3, 4)], False),
    "log_softmax": (op.log_softmax, [(3, 5)], False),
    "log_softmax_axis0": (lambda a: op.log_softmax(a, axis=0), [(3, 5)], False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_ops_adjoint_matches_finite_differences(name):
    fn, shapes, positive = CASES[name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    args = [rng.uniform(0.5, 2.0, s) if positive else rng.standard_normal(s) for s in shapes]
    probe = rng.standard_normal(np.broadcast_shapes(*shapes) if name != "transpose" else (4, 3))

    def loss(*xs):
        y = fn(*xs)
        weights = probe.reshape(-1)[: int(np.prod(y.shape))].reshape(y.shape) if y.shape else 1.0
        return op.sum(y * weights)

    forward = graph.module(f"fd_{name}")(loss)
    grads = graph.grad(loss, argnums=tuple(range(len(args))))(*args)
    for i, g in enumerate(grads):
        want = finite_difference(forward, args, i, 1e-6)
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6, err_msg=f"input {i}")


def test_matmul_adjoint_matches_finite_differences():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    probe = rng.standard_normal((5, 3)).astype(np.float32)

    def loss(a, b):
        return op.sum(op.matmul(a, b) * probe)

    ga, gb = graph.grad(loss, argnums=(0, 1))(a, b)
    f64_loss = lambda a, b: np.sum((a.astype(np.float64) @ b) * probe)  # noqa: E731
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(ga, finite_difference(f64_loss, [a64, b64], 0, 1e-6), rtol=1e-4)
    np.testing.assert_allclose(gb, finite_difference(f64_loss, [a64, b64], 1, 1e-6), rtol=1e-4)


def test_batched_matmul_adjoint_sums_over_the_broadcast_batch():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 4, 5))
    b = rng.standard_normal((5, 2))
    probe = rng.standard_normal((3, 4, 2)).astype(np.float32)

    def loss(a, b):
        return op.sum((a @ b) * probe)

    ga, gb = graph.grad(loss, argnums=(0, 1))(a.astype(np.float32), b.astype(np.float32))
    f64_loss = lambda a, b: np.sum(np.matmul(a, b) * probe)  # noqa: E731
    np.testing.assert_allclose(ga, finite_difference(f64_loss, [a, b], 0, 1e-6), rtol=1e-4)
    np.testing.assert_allclose(gb, finite_difference(f64_loss, [a, b], 1, 1e-6), rtol=1e-4)


def mlp_loss(x, y, w1, b1, w2, b2):
    h = op.relu(op.matmul(x, w1) + b1)
    err = op.matmul(h, w2) + b2 - y
    return op.mean(err * err)


def test_two_layer_mlp_gradients_match_numpy():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((32, 16)).astype(np.float32)
    y = rng.standard_normal((32, 4)).astype(np.float32)
    w1 = (rng.standard_normal((16, 24)) * 0.3).astype(np.float32)
    b1 = (rng.standard_normal(24) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((24, 4)) * 0.3).astype(np.float32)
    b2 = (rng.standard_normal(4) * 0.1).astype(np.float32)
    value, grads = graph.value_and_grad(mlp_loss, argnums=(2, 3, 4, 5))(x, y, w1, b1, w2, b2)
    z = x.astype(np.float64) @ w1 + b1
    h = np.maximum(z, 0)
    err = h @ w2 + b2 - y
    d_out = 2 * err / err.size
    dz = (d_out @ w2.T) * (z > 0)
    want = [x.T @ dz, dz.sum(0), h.T @ d_out, d_out.sum(0)]
    np.testing.assert_allclose(value, np.mean(err * err), rtol=1e-5)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_attention_gradients_match_numpy():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((12, 8)).astype(np.float32) for _ in range(3))
    probe = rng.standard_normal((12, 8)).astype(np.float32)

    def loss(q, k, v):
        p = op.softmax(op.matmul(q, k.T) * 0.25)
        return op.sum(op.matmul(p, v) * probe)

    gq, gk, gv = graph.grad(loss, argnums=(0, 1, 2))(q, k, v)
    s = q.astype(np.float64) @ k.T * 0.25
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dp = probe @ v.T
    ds = p * (dp - (dp * p).sum(1, keepdims=True)) * 0.25
    for g, w in zip((gq, gk, gv), (ds @ k, ds.T @ q, p.T @ probe)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_gradients_match_numpy(causal):
    rng = np.random.default_rng(6)
    q, k = rng.standard_normal((2, 40, 16)).astype(np.float32)
    v = rng.standard_normal((40, 8)).astype(np.float32)
    probe = rng.standard_normal((40, 8)).astype(np.float32)

    def loss(q, k, v):
        return op.sum(op.flash_attention(q, k, v, causal=causal) * probe)

    gq, gk, gv = graph.grad(loss, argnums=(0, 1, 2))(q, k, v)
    s = q.astype(np.float64) @ k.T / 4.0
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dp = probe @ v.T
    ds = p * (dp - (dp * p).sum(1, keepdims=True)) / 4.0
    for g, w in zip((gq, gk, gv), (ds @ k, ds.T @ q, p.T @ probe)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_the_attention_gradient_stores_nothing_of_size_n_by_m(target):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((40, 8)).astype(np.float32)
    k, v = rng.standard_normal((2, 24, 8)).astype(np.float32)
    probe = rng.standard_normal((40, 8)).astype(np.float32)

    def loss(q, k, v):
        return op.sum(op.flash_attention(q, k, v, causal=True) * probe)

    step = graph.grad(loss, argnums=(0, 1, 2))
    lowered, _ = step.lowered((q, k, v))
    stored = [n.shape for g in lowered.groups for n in g.outputs]
    assert all(np.prod(shape) < 40 * 24 for shape in stored), stored
    gq, gk, gv = step(q, k, v)
    s = np.where(np.tril(np.ones((40, 24), bool)), q.astype(np.float64) @ k.T / np.sqrt(8), -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ds = p * (probe @ v.T - ((probe @ v.T) * p).sum(1, keepdims=True)) / np.sqrt(8)
    for g, want in zip((gq, gk, gv), (ds @ k, ds.T @ q, p.T @ probe)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


def test_gradients_are_the_same_bits_on_every_run():
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(32, 16), (32, 4)]]
    args += [rng.standard_normal(s).astype(np.float32) for s in [(16, 24), (24,), (24, 4), (4,)]]
    step = graph.grad(mlp_loss, argnums=(2, 4))
    first = step(*args)
    again = step(*args)
    for a, b in zip(first, again):
        assert np.array_equal(a, b)


def test_a_gradient_is_a_fused_graph_of_few_kernels():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    step = graph.grad(lambda x, w, b: op.sum(op.relu(op.matmul(x, w) + b)), argnums=1)
    nodes = step.graph(x, w, b).split("fused groups:")[0].count(" = ")
    assert len(step.kernels(x, w, b)) < nodes


def test_grad_of_a_non_scalar_is_an_error():
    with pytest.raises(tessera.TesseraError, match=r"must return a scalar .* shape \(3,\)"):
        graph.grad(lambda x: op.exp(x))(np.ones(3, np.float32))
