"""Autotuned kernels shared by the autotune tests (also run in subprocesses)."""

from __future__ import annotations

import sys

import numpy as np

import tessera as ts
from tessera import f32, group_linear_id, i32, kernel, mut, tile

N = 1000


@kernel.autotune(space=dict(BM=[32, 64, 128], UNROLL=[1, 2]), key=["n"], tile=lambda c: (c.BM,))
def add_into(x: f32[n], y: mut[f32[n]]):
    """In place: y += x. Every config computes the same thing."""
    base = group_linear_id() * BM * UNROLL
    for u in range(UNROLL):
        i = base + u * BM + tile.linear_id()
        if i < n:
            y[i] += x[i]


def add_into_grid(c):
    return -(-N // (c.BM * c.UNROLL))


@kernel.autotune(space=dict(BM=[64, 128], WRONG=[0, 1]), key=["n"], tile=lambda c: (c.BM,))
def count_into(x: i32[n], y: mut[i32[n]]):
    """Configs with WRONG=1 compute something else: the output check must drop them."""
    i = group_linear_id() * BM + tile.linear_id()
    if i < n:
        y[i] += x[i] + WRONG


def run_add_into() -> dict:
    """One tuned launch in a fresh process; prints the counters for the parent test."""
    x = np.arange(N, dtype=np.float32)
    y = np.ones(N, np.float32)
    add_into[add_into_grid](x, y)
    assert np.array_equal(y, x + 1)
    return ts.stats()


if __name__ == "__main__":
    print(run_add_into(), add_into.best_config(np.zeros(N, np.float32), np.zeros(N, np.float32)))
    sys.stdout.flush()
