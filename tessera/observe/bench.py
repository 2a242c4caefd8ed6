"""``tessera.bench(fn, *args)``: how long a call takes, as Triton's ``do_bench`` says it.

The loop is the autotuner's (``kernel/timing.py``): on a GPU target two CUDA events
recorded around each call on the current stream (Python's launch overhead left out), on
the others the host's clock around the call and a wait for every target's queued work.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import TesseraError
from ..kernel.kernel import Kernel
from ..kernel.timing import time_calls
from .tracebacks import entry_point


@dataclass(frozen=True)
class BenchResult:
    """Seconds per call: ``median``, ``min``, ``max``, and every rep's in ``times``."""

    median: float
    min: float
    max: float
    times: tuple[float, ...]
    events: bool  # timed with GPU events (else the host's clock)

    def __str__(self) -> str:
        clock = "GPU events" if self.events else "host clock"
        return (
            f"median {self.median * 1e3:.4f} ms, min {self.min * 1e3:.4f} ms, "
            f"max {self.max * 1e3:.4f} ms over {len(self.times)} reps ({clock})"
        )


@entry_point
def bench(
    fn: Callable, *args: object, warmup: int = 3, reps: int = 20, events: bool | None = None
) -> BenchResult:
    """Call ``fn(*args)`` ``warmup`` times untimed (the first call may compile), then
    ``reps`` times timed::

        r = tessera.bench(axpy[n], a, x, y)
        print(r.median)            # seconds

    ``events``: time with GPU events (True) or the host's clock (False). By default a
    kernel launch (``k[grid]``) is timed with events when its target is asynchronous (a
    GPU), and anything else with the host's clock, waiting for queued GPU work.
    """
    if type(warmup) is not int or warmup < 0:
        raise TesseraError(f"bench: warmup={warmup!r} must be an int >= 0")
    if type(reps) is not int or reps < 1:
        raise TesseraError(f"bench: reps={reps!r} must be an int >= 1")
    if events is None:
        events = _asynchronous_launch(fn, args)

    def run() -> None:
        fn(*args)

    for _ in range(warmup):
        run()
    times = time_calls(run, min_reps=reps, max_reps=reps, budget_s=0.0, events=events)
    return BenchResult(statistics.median(times), min(times), max(times), tuple(times), events)


def _asynchronous_launch(fn: Callable, args: tuple) -> bool:
    """Whether ``fn`` is a kernel launch (``k[grid]``) whose target runs asynchronously."""
    if isinstance(fn, functools.partial):
        kernel = getattr(fn.func, "__self__", None)
        if isinstance(kernel, Kernel):
            return kernel.target_for(args).timed_with_events()
    return False
