"""Timing a config's launches, and judging its outputs: the measurements of a sweep."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

import numpy as np

from ..kernel.timing import time_calls


def time_launches(
    run: Callable[[], None],
    restore: Callable[[], None],
    min_reps: int = 3,
    max_reps: int = 50,
    budget_s: float = 0.2,
    events: bool = False,
) -> list[float]:
    """The default timing: restore, launch, wait for it; repeat within the budget. On a
    GPU (``events``) the time is read from CUDA events recorded around the launch on
    the current stream, which leaves out Python's launch overhead. The loop is
    ``tessera.bench``'s (kernel/timing.py)."""
    return time_calls(
        run, restore, min_reps=min_reps, max_reps=max_reps, budget_s=budget_s, events=events
    )


def progress(name: str, done: int, total: int) -> None:
    """A one-line progress bar on a terminal (nothing when stderr is a file)."""
    if not sys.stderr.isatty():
        return
    width = 24
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\rautotune {name}: [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def median(times: list[float]) -> float:
    return statistics.median(times) if times else float("inf")


def outputs_agree(reference: list, outputs: list, rtol: float, atol: float) -> str | None:
    """None if the outputs match the reference, else how they differ."""
    for ref, out in zip(reference, outputs):
        if ref.dtype.kind in "iub":
            if not np.array_equal(ref, out):
                return f"{int(np.count_nonzero(ref != out))} integer elements differ"
            continue
        r, o = ref.astype(np.float64), out.astype(np.float64)
        if not np.array_equal(np.isnan(r), np.isnan(o)):
            return "NaNs in different places"
        finite = ~np.isnan(r)
        if not np.allclose(o[finite], r[finite], rtol=rtol, atol=atol):
            worst = float(np.max(np.abs(o[finite] - r[finite]))) if finite.any() else 0.0
            return f"max abs difference {worst:.3g} beyond rtol={rtol}, atol={atol}"
    return None
