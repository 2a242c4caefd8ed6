"""Flat axpy ``y = alpha * x + y``, f32: Tessera vs Numba ``prange`` vs NumPy ``y += a * x``."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import kernels
from .common import Case, Record, measure, standalone

NAME = "axpy"


@njit(parallel=True)
def axpy_numba(x, y, alpha):
    for i in prange(x.size):
        y[i] = alpha * x[i] + y[i]


def run(quick: bool) -> list[Record]:
    n = 2**20 if quick else 2**24
    rng = np.random.default_rng(0)
    x = rng.random(n, dtype=np.float32)
    y0 = rng.random(n, dtype=np.float32)
    y = y0.copy()
    alpha = np.float32(0.5)
    expected = alpha * x + y0

    def reset():
        y[:] = y0

    def numpy_axpy():
        y.__iadd__(alpha * x)

    cases = [
        Case("tessera", lambda: kernels.axpy[n](x, y, alpha), lambda: y, expected, reset=reset),
        Case("numba", lambda: axpy_numba(x, y, alpha), lambda: y, expected, reset=reset),
        Case("numpy", numpy_axpy, lambda: y, expected, reset=reset),
    ]
    return measure(NAME, "axpy f32", f"2^{n.bit_length() - 1}", cases, quick, nbytes=12 * n)


if __name__ == "__main__":
    standalone(NAME, run)
