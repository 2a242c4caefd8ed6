"""Launch overhead: ``k[1](x)`` of an empty flat kernel vs calling an empty ``numba.njit``
function, per call, over many calls."""

from __future__ import annotations

import numpy as np
from numba import njit

from . import kernels
from .common import Case, Record, measure, standalone

NAME = "launch"


@njit
def empty_numba(x):
    pass


def run(quick: bool) -> list[Record]:
    calls = 200 if quick else 5000
    x = np.zeros(16, np.float32)
    launch = kernels.empty[1]

    def tessera():
        for _ in range(calls):
            launch(x)

    def numba():
        for _ in range(calls):
            empty_numba(x)

    cases = [
        Case("tessera", tessera, inner=calls, first=lambda: launch(x)),
        Case("numba", numba, inner=calls, first=lambda: empty_numba(x)),
    ]
    return measure(NAME, "empty k[1](x)", f"{calls} calls", cases, quick)


if __name__ == "__main__":
    standalone(NAME, run)
