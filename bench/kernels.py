"""The Tessera kernels the benchmarks time.

Copied from the test-suite's classic kernels on purpose: ``bench/`` must not import
``tests/``, and a benchmark should keep measuring the same source when the tests change.
"""

from __future__ import annotations

import math

from tessera import (
    KiB,
    constexpr,
    cp_async,
    f16,
    f32,
    group_id,
    group_linear_id,
    i8,
    i32,
    i64,
    kernel,
    mut,
    tbarrier,
    tile,
    tshared,
)


@kernel
def empty(x: f32[n]):
    """Does nothing: its launch time is the launch overhead."""
    pass


@kernel
def axpy(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]


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
    """Double-buffered axpy: copy chunk t+1 while computing chunk t (512 elements a group)."""
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


# --- the CPU target's speed traps (bench/cpu_traps.py) ----------------------------------


@kernel(tile=(256,), shared=2 * KiB)
def scan_swap(x: f32[n], out: mut[f32[n]]):
    """Inclusive scan of each 256-element block, double-buffered by swapping the arrays."""
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


@kernel(tile=(256,), shared=2 * KiB)
def scan_copy_back(x: f32[n], out: mut[f32[n]]):
    """The same scan without the swap: each step copies the second buffer back."""
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
        s0[lane] = s1[lane]
        tbarrier()
        offset *= 2
    if k < n:
        out[k] = s0[lane]


@kernel(tile=(256,), shared=1 * KiB)
def histogram_shared(x: i32[n], hist: mut[i32[256]], per_group: i64):
    """A histogram privatised in shared memory (atomics there), added to the global one
    once per group (atomics there too)."""
    s = tshared.alloc[i32](256)
    lane = tile.linear_id()
    s[lane] = 0
    tbarrier()
    start = group_linear_id() * per_group
    for i in range(start + lane, min(start + per_group, n), 256):
        tile.atomic_add(s, x[i], 1)
    tbarrier()
    tile.atomic_add(hist, lane, s[lane])


@kernel
def histogram_global(x: i32[n], hist: mut[i32[256]]):
    """Every element's count is an atomic add on the global histogram."""
    i = tile.linear_id()
    if i < n:
        tile.atomic_add(hist, x[i], 1)


@kernel(tile=(256,), shared=64 * KiB)
def gemm_f16(
    A: f16[M, K],
    B: f16[K, N],
    C: mut[f32[M, N]],
    BM: constexpr,
    BN: constexpr,
    BK: constexpr,
):
    """C = A @ B, f16 operands, f32 result: on sm_80+ the CUDA target's register main loop
    (GPU.md §2), one BM x BN block of C per group."""
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, BK):
        a = tile.load_block(A, (m0, k0), (BM, BK))
        b = tile.load_block(B, (k0, n0), (BK, BN))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(256,), shared=64 * KiB)
def gemm_f16_nt(
    A: f16[M, K],
    W: f16[N, K],
    C: mut[f32[M, N]],
    BM: constexpr,
    BN: constexpr,
    BK: constexpr,
):
    """C = A @ W.T with W stored N x K (a linear layer's weights): the register main loop
    reads W's blocks as stored (plain ldmatrix for its fragments)."""
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, BK):
        a = tile.load_block(A, (m0, k0), (BM, BK))
        w = tile.load_block(W, (n0, k0), (BN, BK))
        acc = tile.dot(a, w.T, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(256,), shared=200 * KiB)
def gemm_f32(
    A: f32[M, K],
    B: f32[K, N],
    C: mut[f32[M, N]],
    BM: constexpr,
    BN: constexpr,
    BK: constexpr,
):
    """C = A @ B in f32 (no TF32): on sm_80+ the CUDA target's f32 register main loop
    (fma.rn.f32 from swizzled shared stages), one BM x BN block of C per group."""
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), f32)
    for k0 in tile.range(0, K, BK):
        a = tile.load_block(A, (m0, k0), (BM, BK))
        b = tile.load_block(B, (k0, n0), (BK, BN))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


@kernel(tile=(256,), shared=64 * KiB)
def gemm_i8(
    A: i8[M, K],
    B: i8[K, N],
    C: mut[i32[M, N]],
    BM: constexpr,
    BN: constexpr,
    BK: constexpr,
):
    """C = A @ B, i8 operands, i32 result: on sm_80+ the CUDA target's register main loop
    on mma.sync m16n8k32 (IMMA), one BM x BN block of C per group."""
    m0, n0 = group_id(0) * BM, group_id(1) * BN
    acc = tile.zeros((BM, BN), i32)
    for k0 in tile.range(0, K, BK):
        a = tile.load_block(A, (m0, k0), (BM, BK))
        b = tile.load_block(B, (k0, n0), (BK, BN))
        acc = tile.dot(a, b, acc)
    tile.store_block(C, (m0, n0), acc)


LAYERNORM_COLS = 8192  # the tile kernel's row: one 8192-wide hidden state a group


@kernel(tile=(256,), shared=200 * KiB)
def layernorm_rows(x: f32[M, N], w: f32[N], b: f32[N], y: mut[f32[M, N]], eps: f32):
    """A layer norm written as tiles, one row a group: on CUDA its tiles live in
    registers (targets/cuda/blocked_tiles.py), the reductions in the fixed tree."""
    row = group_id(0)
    xs = tile.load_block(x, (row, 0), (1, LAYERNORM_COLS))
    mean = xs.sum() / N
    d = xs - mean
    var = (d * d).sum() / N
    ws = tile.load_block(w, (0,), (LAYERNORM_COLS,))
    bs = tile.load_block(b, (0,), (LAYERNORM_COLS,))
    tile.store_block(y, (row, 0), d / math.sqrt(var + eps) * ws[None, :] + bs[None, :])
