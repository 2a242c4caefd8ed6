"""Attention and a linear layer as graphs of ops: traced once, fused, run as kernels.

    python examples/attention.py

``op`` functions on traced tensors record a graph; the module fuses it (the scale into
the first matmul, bias and ReLU into the linear layer's matmul) and runs generated
kernels. ``module.graph(...)`` prints what it made.
"""

from __future__ import annotations

import numpy as np

import tessera
from tessera import graph, op


@graph.module("attention")
def attention(q, k, v):
    scores = op.matmul(q, k.T) * (1.0 / np.sqrt(q.shape[1]))
    return op.matmul(op.softmax(scores), v)


@graph.module("linear_relu")
def linear_relu(x, w, bias):
    return op.relu(op.matmul(x, w) + bias)


def numpy_attention(q, k, v):
    s = q.astype(np.float64) @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def main() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((256, 64)).astype(np.float32) for _ in range(3))
    out = attention(q, k, v)
    np.testing.assert_allclose(out, numpy_attention(q, k, v), rtol=1e-4, atol=1e-5)

    x = rng.standard_normal((256, 128)).astype(np.float32)
    w = rng.standard_normal((128, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    linear_relu(x, w, bias)  # traced and compiled on the first call
    before = tessera.stats()["launches"]
    y = linear_relu(x, w, bias)
    launched = tessera.stats()["launches"] - before
    np.testing.assert_allclose(y, np.maximum(x @ w + bias, 0), rtol=1e-4, atol=1e-4)
    print(linear_relu.graph(x, w, bias).split("kernels:")[0])
    print(f"attention matches NumPy; relu(x @ w + bias) ran as {launched} launch")


if __name__ == "__main__":
    main()
