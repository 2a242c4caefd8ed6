"""Block reduction, groups of 256, f32: Tessera's shared-memory tree (the launch only, no
host-side sum of the partials) vs a Numba ``prange`` sum and NumPy's per-block sum."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import kernels
from .common import Case, Record, measure, standalone

NAME = "reduction"
G = 256


@njit(parallel=True)
def sum_numba(x):
    s = 0.0
    for i in prange(x.size):
        s += x[i]
    return s


def run(quick: bool) -> list[Record]:
    n = 2**20 if quick else 2**24
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    partial = np.zeros(n // G, np.float32)
    blocks = np.zeros(n // G, np.float32)
    total = np.zeros(1)
    want_blocks = x.astype(np.float64).reshape(-1, G).sum(axis=1)
    want_total = np.array([x.sum(dtype=np.float64)])

    def numba_sum():
        total[0] = sum_numba(x)

    cases = [
        Case(
            "tessera",
            lambda: kernels.block_reduce_tree[n // G](x, partial),
            lambda: partial,
            want_blocks,
        ),
        Case("numba", numba_sum, lambda: total, want_total, rtol=1e-6),
        Case(
            "numpy",
            lambda: np.sum(x.reshape(-1, G), axis=1, out=blocks),
            lambda: blocks,
            want_blocks,
        ),
    ]
    size = f"2^{n.bit_length() - 1}"
    return measure(NAME, f"reduce G={G}", size, cases, quick, nbytes=4 * n)


if __name__ == "__main__":
    standalone(NAME, run)
