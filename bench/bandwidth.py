"""Memory roof: a ``prange`` copy and a STREAM triad ``a = b + s * c`` over 256 MiB arrays,
f32, vs NumPy (``np.copyto``; ``np.multiply`` + ``np.add`` in place for the triad)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .common import Case, Record, measure, standalone

NAME = "bandwidth"


@njit(parallel=True)
def copy_numba(src, dst):
    for i in prange(src.size):
        dst[i] = src[i]


@njit(parallel=True)
def triad_numba(a, b, c, s):
    for i in prange(a.size):
        a[i] = b[i] + s * c[i]


def triad_numpy(a, b, c, s):
    np.multiply(c, s, out=a)
    a += b


def run(quick: bool) -> list[Record]:
    mib = 16 if quick else 256
    n = mib * 2**20 // 4
    rng = np.random.default_rng(0)
    b = rng.random(n, dtype=np.float32)
    c = rng.random(n, dtype=np.float32)
    a = np.zeros(n, np.float32)
    s = np.float32(3.0)
    want = b + s * c
    size = f"{mib} MiB"
    copy = measure(
        NAME,
        "copy",
        size,
        [
            Case("numba", lambda: copy_numba(b, a), lambda: a, b),
            Case("numpy", lambda: np.copyto(a, b), lambda: a, b),
        ],
        quick,
        nbytes=2 * 4 * n,
    )
    triad = measure(
        NAME,
        "triad",
        size,
        [
            Case("numba", lambda: triad_numba(a, b, c, s), lambda: a, want),
            Case("numpy", lambda: triad_numpy(a, b, c, s), lambda: a, want),
        ],
        quick,
        nbytes=3 * 4 * n,
    )
    return copy + triad


if __name__ == "__main__":
    standalone(NAME, run)
