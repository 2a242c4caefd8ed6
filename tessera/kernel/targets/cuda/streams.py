"""Streams, events and synchronisation for the CUDA target.

CUDA launches are asynchronous on the *current stream*: the default stream, or the one a
``with tessera.stream():`` block makes current. Named streams (the seeds'
``graph.stream("compute")``) are created once per process and reused::

    with tessera.stream("compute"):
        matmul[grid](a, b, c)          # queued on "compute"
    done = tessera.event().record()    # records on the current stream
    tessera.synchronize()              # waits for all GPU work

CPU and debug launches are synchronous: on those targets these calls only order Python.
numba-cuda is imported on first use.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from .runtime import cuda_module

_local = threading.local()
_named: dict[str, object] = {}
_lock = threading.Lock()


def _cuda():
    return cuda_module()


def current_stream() -> object:
    """The numba-cuda stream CUDA launches go to now (0 means the default stream)."""
    stack = getattr(_local, "streams", None)
    return stack[-1] if stack else 0


@contextlib.contextmanager
def stream(name: str | None = None) -> Iterator[object]:
    """Make a stream current for CUDA launches in this block (this thread).

    With a name, the same stream every time; without, a new one. Yields the numba-cuda
    stream (``.synchronize()``, ``.record()`` via events)."""
    if name is None:
        s = _cuda().stream()
    else:
        with _lock:
            s = _named.get(name)
            if s is None:
                s = _named[name] = _cuda().stream()
    stack = _local.__dict__.setdefault("streams", [])
    stack.append(s)
    try:
        yield s
    finally:
        stack.pop()


class Event:
    """A point in a stream's work: record it, wait for it, time between two."""

    def __init__(self) -> None:
        self._event = _cuda().event()

    def record(self, on: object | None = None) -> Event:
        """Record on ``on`` or the current stream; returns self."""
        self._event.record(current_stream() if on is None else on)
        return self

    def synchronize(self) -> None:
        self._event.synchronize()

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded and complete)."""
        return self._event.elapsed_time(end._event)


def event() -> Event:
    return Event()


_gpu_work = [False]  # set by the first CUDA launch of this process


def note_gpu_work() -> None:
    _gpu_work[0] = True


def gpu_work_queued() -> bool:
    """Whether this process has launched CUDA work (if not, no GPU driver is touched)."""
    return _gpu_work[0]


def synchronize_device() -> None:
    """Wait until all queued GPU work is done."""
    _cuda().synchronize()
