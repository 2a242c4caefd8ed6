"""Timing repeated calls: the one loop that ``tessera.bench`` and the autotuner share.

On an asynchronous target (a GPU) a call is timed with two events recorded on the current
stream around it, which leaves Python's launch overhead out and waits for the kernel; on
the others with the host's clock, after waiting for every target's queued work.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .targets import event, synchronize


def time_calls(
    run: Callable[[], object],
    before: Callable[[], None] | None = None,
    *,
    min_reps: int = 3,
    max_reps: int = 50,
    budget_s: float = 0.2,
    events: bool = False,
) -> list[float]:
    """Seconds of each call of ``run``: at least ``min_reps`` calls, more while their
    total stays below ``budget_s``, at most ``max_reps``. ``before()`` runs ahead of each
    call, untimed (the autotuner restores the arguments there)."""
    times: list[float] = []
    spent = 0.0
    while len(times) < max_reps and (len(times) < min_reps or spent < budget_s):
        if before is not None:
            before()
        if events:
            begin = event().record()
            run()
            end = event().record()
            end.synchronize()
            elapsed = begin.elapsed_ms(end) / 1e3
        else:
            start = time.perf_counter()
            run()
            synchronize()
            elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
    return times
