"""2-D 5-point stencil, f32, border copied: Tessera (flat 2-D grid) vs Numba ``prange`` over
rows vs NumPy slices."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import kernels
from .common import Case, Record, measure, standalone

NAME = "stencil"


@njit(parallel=True)
def stencil_numba(u, out):
    h, w = u.shape
    q = np.float32(0.25)
    for i in prange(h):
        if i == 0 or i == h - 1:
            for j in range(w):
                out[i, j] = u[i, j]
        else:
            out[i, 0] = u[i, 0]
            for j in range(1, w - 1):
                out[i, j] = q * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            out[i, w - 1] = u[i, w - 1]


def stencil_numpy(u, out):
    out[:] = u
    out[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])


def run(quick: bool) -> list[Record]:
    s = 512 if quick else 4096
    u = np.random.default_rng(0).random((s, s), dtype=np.float32)
    outs = {tool: np.zeros_like(u) for tool in ("tessera", "numba", "numpy")}
    want = u.astype(np.float64)
    want[1:-1, 1:-1] = 0.25 * (want[:-2, 1:-1] + want[2:, 1:-1] + want[1:-1, :-2] + want[1:-1, 2:])

    def case(tool, fn):
        return Case(tool, fn, lambda: outs[tool], want, rtol=1e-6, atol=1e-6)

    cases = [
        case("tessera", lambda: kernels.stencil5[(s, s)](u, outs["tessera"])),
        case("numba", lambda: stencil_numba(u, outs["numba"])),
        case("numpy", lambda: stencil_numpy(u, outs["numpy"])),
    ]
    return measure(NAME, "stencil5", f"{s}x{s}", cases, quick, nbytes=8 * u.size)


if __name__ == "__main__":
    standalone(NAME, run)
