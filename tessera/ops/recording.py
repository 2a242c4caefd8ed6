"""Steps of a graph's run that are not kernel launches (a collective), told to whoever
records the run: a captured step (capture/replay.py) replays them in their place among
the launches, which an observer records."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_local = threading.local()


@contextlib.contextmanager
def recording(steps: list) -> Iterator[list]:
    """Within this block, this thread's host steps are appended to ``steps``."""
    saved = getattr(_local, "steps", None)
    _local.steps = steps
    try:
        yield steps
    finally:
        _local.steps = saved


@dataclass(frozen=True)
class HostStep:
    name: str  # what it is (the collective's kind), for ``step.graphs``
    run: Callable[[], None]


def host_step(name: str, step: Callable[[], None]) -> None:
    """A step that ran (and that a replay must run again, in this place)."""
    steps = getattr(_local, "steps", None)
    if steps is not None:
        steps.append(HostStep(name, step))
