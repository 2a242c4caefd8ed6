"""Data parallelism: every rank computes gradients on its slice of the batch with Tessera
kernels, and one ``dist.all_reduce_coalesced`` call sums all of them (rather than one
all_reduce per parameter).

The model is a linear layer, ``pred = x @ w + b``, trained on the mean squared error over
the whole batch. Each rank's gradient is its rows' share of that mean, so the sum over
the ranks is the full-batch gradient.

Run: tessera run -n 2 examples/data_parallel.py   (or: mpiexec -n 2 python
examples/data_parallel.py; alone, it is a world of one and the all-reduce is a copy)
"""

from __future__ import annotations

import numpy as np

from tessera import dist, f32, kernel, mut, tile


@kernel
def residual(
    x: f32[rows, d_in],
    w: f32[d_in, d_out],
    b: f32[d_out],
    y: f32[rows, d_out],
    r: mut[f32[rows, d_out]],
):
    i, o = tile.id(0), tile.id(1)
    pred = b[o]
    for k in range(d_in):
        pred += x[i, k] * w[k, o]
    r[i, o] = pred - y[i, o]


@kernel
def gradients(
    x: f32[rows, d_in],
    r: f32[rows, d_out],
    scale: f32,
    dw: mut[f32[d_in, d_out]],
    db: mut[f32[d_out]],
):
    j, o = tile.id(0), tile.id(1)  # row d_in of the grid computes the bias gradient
    acc = f32(0)
    for i in range(rows):
        acc += (x[i, j] if j < d_in else f32(1)) * r[i, o]
    if j < d_in:
        dw[j, o] = scale * acc
    else:
        db[o] = scale * acc


def local_gradients(x, y, w, b, batch: int):
    r = np.empty_like(y)
    residual[y.shape](x, w, b, y, r)
    dw, db = np.empty_like(w), np.empty_like(b)
    scale = 2.0 / (batch * y.shape[1])  # d(mean squared error) over the whole batch
    gradients[(w.shape[0] + 1, w.shape[1])](x, r, scale, dw, db)
    return dw, db


def main() -> None:
    mesh = dist.Mesh(axes=("dp",), shape=(dist.size(),))
    rng = np.random.default_rng(0)  # every rank draws the same batch and weights
    batch, d_in, d_out = 512, 16, 4
    x = rng.standard_normal((batch, d_in), dtype=np.float32)
    y = x @ rng.standard_normal((d_in, d_out), dtype=np.float32) + 0.5
    w = np.zeros((d_in, d_out), np.float32)
    b = np.zeros(d_out, np.float32)
    rows = dist.ShardSpec(("row",), ("dp",))  # this rank's block of the batch
    x_mine = dist.from_global(x, rows, mesh).local
    y_mine = dist.from_global(y, rows, mesh).local

    dw, db = dist.all_reduce_coalesced(local_gradients(x_mine, y_mine, w, b, batch), axis="dp")
    r = x @ w + b - y  # the full-batch gradient, in NumPy
    assert np.allclose(dw, 2 * x.T @ r / r.size, atol=1e-5)
    assert np.allclose(db, 2 * r.sum(axis=0) / r.size, atol=1e-5)

    lr, losses = 1.0, []
    for _ in range(50):
        dw, db = dist.all_reduce_coalesced(local_gradients(x_mine, y_mine, w, b, batch), axis="dp")
        w -= lr * dw  # the results are read-only; w and b are this rank's own
        b -= lr * db
        losses.append(float(np.mean((x @ w + b - y) ** 2)))
    assert losses[-1] < 1e-3 * losses[0]
    everyone = dist.all_gather(np.concatenate([w.ravel(), b])[None], axis="dp")
    assert all(np.array_equal(row, everyone[0]) for row in everyone)  # the same model
    if mesh.rank == 0:
        print(
            f"data parallel on {mesh.size('dp')} ranks: loss {losses[0]:.4f} -> "
            f"{losses[-1]:.2e}, the same weights on every rank"
        )


if __name__ == "__main__":
    main()
