"""``tessera demo``: the seed kernels and a tiled matmul, checked against NumPy and timed.

Each kernel runs on the default target; its result is compared with NumPy and the demo
prints the first-call time (which includes compiling) and the median of later calls.
"""

from __future__ import annotations

import time

import numpy as np

from . import (
    KiB,
    cp_async,
    f16,
    f32,
    group_id,
    group_linear_id,
    group_tile_count,
    kernel,
    mut,
    reduce_sum,
    tbarrier,
    tile,
    tshared,
)


@kernel
def scale(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i]


@kernel(tile=(128,), shared=8 * KiB)
def group_sum(x: f32[n], out: mut[f32[grid_groups]]):
    smem = tshared.alloc[f32](128)
    i = tile.linear_id()
    acc = 0.0
    for k in range(group_linear_id() * group_tile_count() + i, n, group_tile_count() * grid_groups):
        acc += x[k]
    smem[i] = acc
    tbarrier()
    total = reduce_sum(smem)  # collective: every lane calls it, outside the `if`
    if i == 0:
        out[group_linear_id()] = total


@kernel(tile=(128,), shared=1 * KiB)
def axpy_tiled(X: f16[m], Y: mut[f16[m]], alpha: f16):
    """Each group streams 4 chunks of 128, copying chunk t+1 while it computes chunk t."""
    s0 = tshared.alloc[f16](128)
    s1 = tshared.alloc[f16](128)
    base = group_linear_id() * 512
    lane = tile.linear_id()
    cp_async.shared.global_(s0, X[base : base + 128])
    for t in tile.range(base, base + 512, 128, prefetch=2):
        if t + 128 < base + 512:
            cp_async.shared.global_(s1, X[t + 128 : t + 256])  # prefetch the next chunk
        cp_async.wait()
        tbarrier()
        if t + lane < m:
            Y[t + lane] = alpha * s0[lane] + Y[t + lane]
        tbarrier()  # everyone is done with s0 before it is refilled
        s0, s1 = s1, s0


@kernel(tile=(16, 16), shared=2 * KiB)
def matmul(a: f32[M, K], b: f32[K, N], c: mut[f32[M, N]]):
    sa = tshared.alloc[f32]((16, 16))
    sb = tshared.alloc[f32]((16, 16))
    r, cc = tile.id(0), tile.id(1)
    row = group_id(0) * 16 + r
    col = group_id(1) * 16 + cc
    acc = 0.0
    for k0 in range(0, K, 16):
        sa[r, cc] = a[row, k0 + cc] if row < M and k0 + cc < K else 0.0
        sb[r, cc] = b[k0 + r, col] if k0 + r < K and col < N else 0.0
        tbarrier()
        for kk in range(16):
            acc += sa[r, kk] * sb[kk, cc]
        tbarrier()
    if row < M and col < N:
        c[row, col] = acc


def _timed(fn, reps: int = 5) -> tuple[float, float]:
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def run(out=print) -> bool:
    """Run every demo kernel; returns True when all results match NumPy."""
    rng = np.random.default_rng(0)
    ok = True
    rows = []

    n = 1 << 20
    x = rng.random(n, dtype=np.float32)
    y = np.empty_like(x)
    first, med = _timed(lambda: scale[n](x, y, 2.0))
    rows.append(("scale", f"n={n}", np.array_equal(y, np.float32(2.0) * x), first, med))

    groups = 64
    partial = np.zeros(groups, np.float32)
    first, med = _timed(lambda: group_sum[groups](x, partial))
    good = np.isclose(partial.sum(dtype=np.float64), x.sum(dtype=np.float64), rtol=1e-5)
    rows.append(("group_sum", f"n={n}, {groups} groups", bool(good), first, med))

    m = 1 << 16
    X = rng.random(m).astype(np.float16)
    Y0 = rng.random(m).astype(np.float16)
    Y = Y0.copy()
    expect = (np.float32(0.5) * X.astype(np.float32) + Y0.astype(np.float32)).astype(np.float16)
    first = time.perf_counter()
    axpy_tiled[m // 512](X, Y, 0.5)
    first = time.perf_counter() - first
    good = np.array_equal(Y, expect)
    _, med = _timed(lambda: axpy_tiled[m // 512](X, Y.copy(), 0.5))
    rows.append(("axpy_tiled", f"m={m} f16", bool(good), first, med))

    size = 256
    A = rng.random((size, size), dtype=np.float32)
    B = rng.random((size, size), dtype=np.float32)
    C = np.zeros((size, size), np.float32)
    grid = (size // 16, size // 16)
    first, med = _timed(lambda: matmul[grid](A, B, C))
    rows.append(("matmul", f"{size}^3", bool(np.allclose(C, A @ B, rtol=1e-4)), first, med))

    out(f"{'kernel':<12} {'size':<22} {'check':<6} {'first call':>12} {'median':>10}")
    for name, desc, good, first, med in rows:
        ok &= good
        out(
            f"{name:<12} {desc:<22} {'ok' if good else 'WRONG':<6} "
            f"{first * 1e3:>10.1f}ms {med * 1e3:>8.2f}ms"
        )
    out("first call includes compiling; median is of 5 later calls")
    return ok
