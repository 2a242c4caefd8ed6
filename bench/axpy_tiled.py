"""Double-buffered ``axpy_tiled``, f16 (512 elements a group): Tessera vs NumPy f16
``Y += alpha * X``. Numba has no float16 on the CPU, so NumPy is the baseline here."""

from __future__ import annotations

import numpy as np

from . import kernels
from .common import Case, Record, measure, standalone

NAME = "axpy_tiled"
PER_GROUP = 128 * 4


def run(quick: bool) -> list[Record]:
    m = 2**20 if quick else 2**24
    rng = np.random.default_rng(0)
    x = rng.random(m, dtype=np.float32).astype(np.float16)
    y0 = rng.random(m, dtype=np.float32).astype(np.float16)
    y = y0.copy()
    alpha = np.float16(0.5)
    want = (np.float32(alpha) * x.astype(np.float32) + y0.astype(np.float32)).astype(np.float16)

    def reset():
        y[:] = y0

    def numpy_axpy():
        y.__iadd__(alpha * x)

    cases = [
        Case(
            "tessera",
            lambda: kernels.axpy_tiled[m // PER_GROUP](x, y, alpha),
            lambda: y,
            want,
            rtol=1e-3,
            atol=1e-3,
            reset=reset,
        ),
        Case("numpy", numpy_axpy, lambda: y, want, rtol=1e-3, atol=1e-3, reset=reset),
    ]
    size = f"2^{m.bit_length() - 1}"
    return measure(NAME, "axpy_tiled f16", size, cases, quick, nbytes=6 * m)


if __name__ == "__main__":
    standalone(NAME, run)
