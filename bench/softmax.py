"""Row softmax, f32, one group per row: Tessera vs Numba ``prange`` over rows vs NumPy."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from . import kernels
from .common import Case, Record, measure, standalone

NAME = "softmax"


@njit(parallel=True)
def softmax_numba(x, y):
    rows, cols = x.shape
    for r in prange(rows):
        m = np.float32(-np.inf)
        for j in range(cols):
            m = max(m, x[r, j])
        s = np.float32(0.0)
        for j in range(cols):
            e = math.exp(x[r, j] - m)
            y[r, j] = e
            s += e
        for j in range(cols):
            y[r, j] /= s


def softmax_numpy(x, y):
    np.subtract(x, x.max(axis=1, keepdims=True), out=y)
    np.exp(y, out=y)
    y /= y.sum(axis=1, keepdims=True)


def run(quick: bool) -> list[Record]:
    rows, cols = (256, 1024) if quick else (4096, 1024)
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32) * 4
    outs = {tool: np.zeros_like(x) for tool in ("tessera", "numba", "numpy")}
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)

    def case(tool, fn):
        return Case(tool, fn, lambda: outs[tool], want, rtol=1e-4, atol=1e-7)

    cases = [
        case("tessera", lambda: kernels.softmax_rows[rows](x, outs["tessera"])),
        case("numba", lambda: softmax_numba(x, outs["numba"])),
        case("numpy", lambda: softmax_numpy(x, outs["numpy"])),
    ]
    return measure(NAME, "softmax rows", f"{rows}x{cols}", cases, quick, nbytes=8 * x.size)


if __name__ == "__main__":
    standalone(NAME, run)
