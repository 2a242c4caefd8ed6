"""16x16 shared-tile matmul, f32: Tessera vs a Numba ``prange`` i-k-j loop vs NumPy ``@``
(BLAS, the roof)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import kernels
from .common import Case, Record, measure, standalone

NAME = "matmul"


@njit(parallel=True)
def matmul_numba(a, b, c):
    m, k_ = a.shape
    n = b.shape[1]
    for i in prange(m):
        for j in range(n):
            c[i, j] = 0.0
        for k in range(k_):
            aik = a[i, k]
            for j in range(n):
                c[i, j] += aik * b[k, j]


def run(quick: bool) -> list[Record]:
    s = 128 if quick else 512
    rng = np.random.default_rng(0)
    a = rng.random((s, s), dtype=np.float32)
    b = rng.random((s, s), dtype=np.float32)
    outs = {tool: np.zeros((s, s), np.float32) for tool in ("tessera", "numba", "numpy")}
    want = a.astype(np.float64) @ b.astype(np.float64)
    grid = (s // 16, s // 16)

    def case(tool, fn):
        return Case(tool, fn, lambda: outs[tool], want, rtol=1e-4)

    cases = [
        case("tessera", lambda: kernels.matmul[grid](a, b, outs["tessera"])),
        case("numba", lambda: matmul_numba(a, b, outs["numba"])),
        case("numpy", lambda: np.matmul(a, b, out=outs["numpy"])),
    ]
    return measure(NAME, "matmul 16x16 tiles", f"{s}^3", cases, quick, flops=2.0 * s**3)


if __name__ == "__main__":
    standalone(NAME, run)
