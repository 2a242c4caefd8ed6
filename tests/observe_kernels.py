"""Small kernels the observability tests launch (defined fresh per call where a test
needs a kernel that has not compiled yet)."""

from __future__ import annotations

from tessera import KiB, f32, kernel, mut, reduce_sum, tbarrier, tile, tshared
from tessera.dtypes import Symbol

n = Symbol("n")


def make_axpy(**options):
    """A new ``axpy`` kernel object (its own in-memory cache), with ``options``."""

    @kernel(**options)
    def axpy(x: f32[n], y: mut[f32[n]], alpha: f32):
        i = tile.linear_id()
        if i < n:
            y[i] = alpha * x[i] + y[i]

    return axpy


def make_group_sum():
    @kernel(tile=(64,), shared=1 * KiB)
    def group_sum(x: f32[n], out: mut[f32[n]]):
        smem = tshared.alloc[f32](64)
        i = tile.linear_id()
        smem[i] = x[i]
        tbarrier()
        total = reduce_sum(smem)
        if i == 0:
            out[0] = total

    return group_sum
