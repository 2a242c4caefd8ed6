"""Autotuning: the double-buffered axpy_tiled over its chunk size and pipeline depth, and
a tiled matmul over its tile size. Run ``tessera tune examples/autotune.py`` to see the
table of every sweep.

Run: python examples/autotune.py
"""

from __future__ import annotations

import numpy as np

import tessera as ts
from tessera import (
    cp_async,
    f16,
    f32,
    group_id,
    group_linear_id,
    kernel,
    mut,
    tbarrier,
    tile,
    tshared,
)


@kernel.autotune(
    space=dict(BM=[64, 128], stages=[2, 3]),
    key=["m"],
    tile=lambda c: (c.BM,),
    shared=lambda c: 2 * c.BM * 2,
)
def axpy_tiled(X: f16[m], Y: mut[f16[m]], alpha: f16):
    """Each group streams 4 chunks of BM, copying chunk t+1 while it computes chunk t."""
    s0 = tshared.alloc[f16](BM)
    s1 = tshared.alloc[f16](BM)
    base = group_linear_id() * BM * 4
    lane = tile.linear_id()
    cp_async.shared.global_(s0, X[base : base + BM])
    for t in tile.range(base, base + BM * 4, BM, prefetch=stages):
        if t + BM < base + BM * 4:
            cp_async.shared.global_(s1, X[t + BM : t + 2 * BM])
        cp_async.wait()
        if t + lane < m:
            Y[t + lane] = alpha * s0[lane] + Y[t + lane]
        tbarrier()
        s0, s1 = s1, s0


@kernel.autotune(
    space=dict(T=[8, 16]), tile=lambda c: (c.T, c.T), shared=lambda c: 2 * c.T * c.T * 4
)
def matmul(a: f32[M, K], b: f32[K, N], c: mut[f32[M, N]]):
    sa = tshared.alloc[f32]((T, T))
    sb = tshared.alloc[f32]((T, T))
    r, cc = tile.id(0), tile.id(1)
    row = group_id(0) * T + r
    col = group_id(1) * T + cc
    acc = 0.0
    for k0 in range(0, K, T):
        sa[r, cc] = a[row, k0 + cc] if row < M and k0 + cc < K else 0.0
        sb[r, cc] = b[k0 + r, col] if k0 + r < K and col < N else 0.0
        tbarrier()
        for kk in range(T):
            acc += sa[r, kk] * sb[kk, cc]
        tbarrier()
    if row < M and col < N:
        c[row, col] = acc


def main() -> None:
    rng = np.random.default_rng(0)
    m = 1 << 14
    x = rng.random(m).astype(np.float16)
    y = rng.random(m).astype(np.float16)
    expected = (np.float32(0.5) * x.astype(np.float32) + y.astype(np.float32)).astype(np.float16)
    axpy_tiled[lambda c: -(-m // (c.BM * 4))](x, y, 0.5)  # tunes, then launches once
    assert np.array_equal(y, expected)
    print("axpy_tiled best config:", axpy_tiled.best_config(x, y))

    a = rng.random((96, 80), dtype=np.float32)
    b = rng.random((80, 64), dtype=np.float32)
    out = np.zeros((96, 64), np.float32)
    matmul[lambda cfg: (-(-96 // cfg.T), -(-64 // cfg.T))](a, b, out)
    assert np.allclose(out, a @ b, rtol=1e-5)
    print("matmul best config:", matmul.best_config(a, b, out))
    print("autotune trials in this process:", ts.stats()["autotune_trials"])


if __name__ == "__main__":
    main()
