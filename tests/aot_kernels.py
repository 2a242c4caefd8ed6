"""Kernels the ahead-of-time tests compile into a C module (tests/test_aot_*.py)."""

from __future__ import annotations

import runpy
from pathlib import Path

import tessera as ts
from tessera import (
    KiB,
    f16,
    f32,
    group_id,
    group_linear_id,
    kernel,
    mut,
    reduce_sum,
    tbarrier,
    tile,
    tshared,
)


@kernel(tile=(256,), shared=1 * KiB)
def block_sum(x: f32[n], partial: mut[f32[grid_groups]]):
    """The README's kernel."""
    s = tshared.alloc[f32](256)
    k = group_linear_id() * 256 + tile.linear_id()
    s[tile.linear_id()] = x[k] if k < n else 0.0
    tbarrier()
    total = reduce_sum(s)
    if tile.linear_id() == 0:
        partial[group_linear_id()] = total


# the tile GEMM with a fused bias + ReLU epilogue, as examples/gemm_tiles.py defines it
linear_relu = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "gemm_tiles.py"))[
    "linear_relu"
]


@kernel
def axpy(a: f32, x: f32[n], y: mut[f32[n]]):
    """A flat kernel: one lane per element."""
    i = tile.linear_id()
    if i < n:
        y[i] = a * x[i] + y[i]


@kernel
def scale_half(x: mut[f16[n]], s: f16, shift: ts.i32):
    """16-bit floats in and out, a 16-bit float scalar, an integer scalar."""
    i = tile.linear_id()
    if i < n:
        x[i] = x[i] * s + f32(shift)


@kernel
def empty(x: mut[f32[n]]):
    """Does nothing: what a launch costs."""
    i = tile.linear_id()
    if i < 0:
        x[0] = 0.0


@kernel(tile=(8, 8))
def tile_linear_bf16(
    A: ts.bf16[M, K], B: ts.bf16[K, N], C: mut[f32[M, N]], m: ts.i64, n: ts.i64, k: ts.i64
):
    """The seed's host-flow kernel (seed 004 §11.1): C = A @ B, one lane per element."""
    i = group_id(0) * 8 + tile.id(0)
    j = group_id(1) * 8 + tile.id(1)
    if i < m and j < n:
        acc = f32(0.0)
        for kk in range(k):
            acc += f32(A[i, kk]) * f32(B[kk, j])
        C[i, j] = acc
