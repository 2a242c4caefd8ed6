"""A few SGD steps of a 2-layer MLP, with gradients from ``graph.value_and_grad``.

    python examples/mlp_training.py

The loss and its gradients are one traced graph: the forward ops, then each op's adjoint,
fused into a handful of generated kernels. The run is deterministic: the same losses,
bit for bit, every time.
"""

from __future__ import annotations

import numpy as np

from tessera import graph, op


def loss(x, y, w1, b1, w2, b2):
    h = op.relu(op.matmul(x, w1) + b1)
    err = op.matmul(h, w2) + b2 - y
    return op.mean(err * err)


step = graph.value_and_grad(loss, argnums=(2, 3, 4, 5))


def train(steps: int = 20, lr: float = 0.05) -> list[float]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 32)).astype(np.float32)
    teacher = rng.standard_normal((32, 8)).astype(np.float32)
    y = np.tanh(x @ teacher).astype(np.float32)
    params = [
        (rng.standard_normal((32, 64)) * 0.2).astype(np.float32),
        np.zeros(64, np.float32),
        (rng.standard_normal((64, 8)) * 0.2).astype(np.float32),
        np.zeros(8, np.float32),
    ]
    losses = []
    for _ in range(steps):
        value, grads = step(x, y, *params)
        losses.append(float(value))
        params = [p - np.float32(lr) * g for p, g in zip(params, grads)]
    return losses


def main() -> None:
    losses = train()
    assert losses[-1] < 0.5 * losses[0], losses
    assert train() == losses  # deterministic, bit for bit
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} in {len(losses)} SGD steps")


if __name__ == "__main__":
    main()
