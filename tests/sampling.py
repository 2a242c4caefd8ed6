"""Inputs thinned for numba-cuda's simulator, which runs a Python thread an element."""

from __future__ import annotations

import os

import numpy as np


def for_target(x: np.ndarray, every: int = 7) -> np.ndarray:
    """``x`` whole, or under numba-cuda's simulator (a Python thread an element: minutes
    for 65,536) every ``every``-th element and every NaN and infinity: the simulator runs
    the plain path's code, which the whole runs on the other targets check element by
    element."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        return x
    keep = (np.arange(x.size) % every == 0) | ~np.isfinite(x.astype(np.float32))
    return np.ascontiguousarray(x[keep])
