"""Row softmax: one group per row, group reductions for the max and the sum.

Run: python examples/softmax.py
"""

from __future__ import annotations

import math

import numpy as np

from tessera import f32, group_linear_id, kernel, mut, tile


@kernel(tile=(128,))
def softmax_rows(x: f32[rows, cols], y: mut[f32[rows, cols]]):
    row = group_linear_id()
    lane = tile.linear_id()
    m = -math.inf
    for j in range(lane, cols, 128):  # each lane strides over the row
        m = max(m, x[row, j])
    row_max = tile.max(m)  # every lane gets the row's maximum
    s = 0.0
    for j in range(lane, cols, 128):
        s += math.exp(x[row, j] - row_max)
    total = tile.sum(s)
    for j in range(lane, cols, 128):
        y[row, j] = math.exp(x[row, j] - row_max) / total


def main() -> None:
    x = np.random.default_rng(0).standard_normal((64, 1000), dtype=np.float32)
    y = np.empty_like(x)
    softmax_rows[x.shape[0]](x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    assert np.allclose(y, expected, rtol=1e-5, atol=1e-7)
    print("softmax rows sum to", y.sum(axis=1)[:4], "...")


if __name__ == "__main__":
    main()
