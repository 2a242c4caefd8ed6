"""The classic kernels the test-suite checks against NumPy on every target."""

from __future__ import annotations

import math

from tessera import (
    KiB,
    cp_async,
    f16,
    f32,
    group_id,
    group_linear_id,
    group_tile_count,
    i32,
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


@kernel
def axpy(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]


@kernel(tile=(128,), shared=8 * KiB)
def group_sum(x: f32[n], out: mut[f32[grid_groups]]):
    smem = tshared.alloc[f32](128)
    i = tile.linear_id()
    acc = 0.0
    for k in range(group_linear_id() * group_tile_count() + i, n, group_tile_count() * grid_groups):
        acc += x[k]
    smem[i] = acc
    tbarrier()
    total = reduce_sum(smem)
    if i == 0:
        out[group_linear_id()] = total


@kernel(tile=(256,), shared=1 * KiB)
def block_reduce_tree(x: f32[n], partial: mut[f32[grid_groups]]):
    """Shared-memory tree reduction written out by hand, one element per lane."""
    s = tshared.alloc[f32](256)
    lane = tile.linear_id()
    k = group_linear_id() * 256 + lane
    s[lane] = x[k] if k < n else 0.0
    tbarrier()
    stride = 128
    while stride > 0:
        if lane < stride:
            s[lane] += s[lane + stride]
        tbarrier()
        stride //= 2
    if lane == 0:
        partial[group_linear_id()] = s[0]


@kernel(tile=(16, 16), shared=2 * KiB)
def transpose(a: f32[m, n], out: mut[f32[n, m]]):
    """Transpose through a padded shared tile (16 x 17 avoids bank conflicts on GPUs)."""
    t = tshared.alloc[f32]((16, 17))
    r, c = tile.id(0), tile.id(1)
    row = group_id(0) * 16 + r
    col = group_id(1) * 16 + c
    if row < m and col < n:
        t[r, c] = a[row, col]
    tbarrier()
    orow = group_id(1) * 16 + r
    ocol = group_id(0) * 16 + c
    if orow < n and ocol < m:
        out[orow, ocol] = t[c, r]


@kernel(tile=(16, 16), shared=2 * KiB)
def matmul(a: f32[M, K], b: f32[K, N], c: mut[f32[M, N]]):
    """C = A @ B with 16 x 16 shared tiles and barriers."""
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


@kernel(tile=(256,), shared=2 * KiB)
def prefix_scan(x: f32[n], out: mut[f32[n]]):
    """Inclusive scan of each 256-element block (Hillis-Steele, double-buffered)."""
    s0 = tshared.alloc[f32](256)
    s1 = tshared.alloc[f32](256)
    lane = tile.linear_id()
    k = group_linear_id() * 256 + lane
    s0[lane] = x[k] if k < n else 0.0
    tbarrier()
    offset = 1
    while offset < 256:
        v = s0[lane]
        if lane >= offset:
            v += s0[lane - offset]
        s1[lane] = v
        tbarrier()
        s0, s1 = s1, s0
        offset *= 2
    if k < n:
        out[k] = s0[lane]


@kernel
def histogram(x: i32[n], hist: mut[i32[bins]]):
    i = tile.linear_id()
    if i < n:
        b = x[i]
        if 0 <= b < bins:
            tile.atomic_add(hist, b, 1)


@kernel(tile=(128,), shared=1 * KiB)
def softmax_rows(x: f32[rows, cols], y: mut[f32[rows, cols]]):
    """One group per row: max and sum with group reductions, then normalise."""
    row = group_linear_id()
    lane = tile.linear_id()
    m = -math.inf
    for j in range(lane, cols, 128):
        m = max(m, x[row, j])
    row_max = tile.max(m)
    s = 0.0
    for j in range(lane, cols, 128):
        s += math.exp(x[row, j] - row_max)
    total = tile.sum(s)
    for j in range(lane, cols, 128):
        y[row, j] = math.exp(x[row, j] - row_max) / total


@kernel
def stencil5(u: f32[h, w], out: mut[f32[h, w]]):
    """2-D 5-point stencil on the interior; the border is copied."""
    i, j = tile.id(0), tile.id(1)
    if i < h and j < w:
        if 0 < i < h - 1 and 0 < j < w - 1:
            out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        else:
            out[i, j] = u[i, j]


@kernel(tile=(128,), shared=1 * KiB)
def axpy_tiled(X: f16[m], Y: mut[f16[m]], alpha: f16):
    """Double-buffered axpy: copy chunk t+1 while computing chunk t (seed, corrected)."""
    s0 = tshared.alloc[f16](128)
    s1 = tshared.alloc[f16](128)
    base = group_linear_id() * 128 * 4
    lane = tile.linear_id()
    cp_async.shared.global_(s0, X[base : base + 128])
    for t in tile.range(base, base + 128 * 4, 128, prefetch=2):
        if t + 128 < base + 128 * 4:
            cp_async.shared.global_(s1, X[t + 128 : t + 256])
        cp_async.wait()
        tbarrier()
        if t + lane < m:
            Y[t + lane] = alpha * s0[lane] + Y[t + lane]
        tbarrier()
        s0, s1 = s1, s0


# a tensor-parallel GEMM: K split over mesh axis tp, partial sums reduced by the launch
@kernel
def tp_gemm(A: f32[M, K / tp], B: f32[K / tp, N], C: reduce_sum[f32[M, N]]):
    i, j = tile.id(0), tile.id(1)
    acc = f32(0)
    for k in range(A.shape[1]):
        acc += A[i, k] * B[k, j]
    C[i, j] = acc
