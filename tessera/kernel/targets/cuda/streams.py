"""Streams, events and synchronisation for the CUDA target.

CUDA launches are asynchronous on the *current stream*: the default stream, or the one a
``with tessera.stream():`` block makes current. Named streams (the seeds'
``graph.stream("compute")``) are created once per process and reused::

    with tessera.stream("compute"):
        matmul[grid](a, b, c)          # queued on "compute"
    done = tessera.event().record()    # records on the current stream
    tessera.synchronize()              # waits for all GPU work

CPU and debug launches are synchronous: on those targets these calls only order Python.
Without a GPU (or under numba-cuda's simulator, whose events hold no times) an event is
timed on the host when it is recorded, and a stream is a :class:`HostStream`: the same
code runs, and times, on a machine with no GPU. numba-cuda is imported on first use.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator

from ....errors import TesseraError
from ....observe.stats import bump
from ... import stream_scope
from .runtime import cuda_module, simulating


class _Streams(threading.local):
    """Per thread the stack of current streams (a class default: reading it where no
    stream was ever made current raises nothing, which a ``getattr`` default would), and
    whether this thread is capturing a CUDA graph (then launches do not fence: a wait
    on an event recorded outside the capture would end it)."""

    streams: tuple | list = ()
    capturing: bool = False


_local = _Streams()
_named: dict[str, object] = {}
_lock = threading.Lock()


def _cuda():
    return cuda_module()


@functools.cache
def gpu_usable() -> bool:
    """Whether a CUDA GPU and its driver are there (the simulator is not one)."""
    try:
        return not simulating() and bool(_cuda().is_available())
    except Exception:  # no numba-cuda, a broken driver install
        return False


def _streams_usable() -> bool:
    return gpu_usable() or simulating()


class HostStream:
    """What ``tessera.stream()`` gives without a GPU: launches there are synchronous, so
    there is nothing to wait for."""

    def __init__(self, name: str | None) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<HostStream {self.name or '(unnamed)'}>"

    def synchronize(self) -> None:
        """Nothing to wait for: host launches finish before they return."""


def current_stream() -> object:
    """The numba-cuda stream CUDA launches go to now (0 means the default stream)."""
    stack = _local.streams
    return stack[-1] if stack else 0


@contextlib.contextmanager
def stream(name: str | None = None) -> Iterator[object]:
    """Make a stream current for CUDA launches in this block (this thread).

    With a name, the same stream every time; without, a new one. Yields the numba-cuda
    stream (``.synchronize()``, ``.record()`` via events)."""
    s = _new_stream(None) if name is None else named_stream(name)
    stack = _local.__dict__.setdefault("streams", [])
    stack.append(s)
    try:
        yield s
    finally:
        stack.pop()


def _new_stream(name: str | None) -> object:
    fencing_on[0] = True
    return _cuda().stream() if _streams_usable() else HostStream(name)


def named_stream(name: str) -> object:
    """The stream called ``name``: made on first use, the same one after."""
    with _lock:
        s = _named.get(name)
        if s is None:
            s = _named[name] = _new_stream(name)
        return s


def collective_stream() -> object:
    """The stream a collective on device arrays is enqueued on: the current stream of
    ``tessera.stream()``, else the one ``graph.stream(name)`` names, else 0 (the default
    stream)."""
    s = current_stream()
    if s == 0:
        name = stream_scope.current()
        if name is not None:
            s = named_stream(name)
    return s


class Event:
    """A point in a stream's work: record it, wait for it, time between two. On a GPU a
    CUDA event; elsewhere the host's clock read when it is recorded (host launches have
    finished by then, so the order is the same)."""

    def __init__(self) -> None:
        self._event = _cuda().event() if gpu_usable() else None
        self._host: float | None = None

    def record(self, on: object | None = None) -> Event:
        """Record on ``on`` or the current stream; returns self."""
        if self._event is None:
            self._host = time.perf_counter()
        else:
            self._event.record(current_stream() if on is None else on)
        return self

    def synchronize(self) -> None:
        if self._event is not None:
            self._event.synchronize()

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded and complete)."""
        if self._event is None or end._event is None:
            if self._host is None or end._host is None:
                raise TesseraError("elapsed_ms needs two recorded events: call .record() first")
            return (end._host - self._host) * 1e3
        return self._event.elapsed_time(end._event)


def event() -> Event:
    return Event()


_gpu_work = gpu_work = [False]  # set by the first CUDA launch of this process

# Fencing (CAPTURE.md §4): the named stream that last used each GPU array (by its data
# pointer). Work on another named stream that uses the array first waits, on the GPU, for
# an event recorded on that stream: a read after a write (and a write after a read) of one
# array across streams is ordered without a host synchronisation. The default stream is
# ordered with every named stream by CUDA itself (they are blocking streams).
_last_stream: dict[int, object] = {}
MAX_TRACKED = 1 << 16  # arrays remembered; the least recently used are forgotten
_fence_lock = threading.Lock()


fencing_on = [False]  # set once a named or new stream is made: launches fence from then on


def fencing() -> bool:
    """Whether any named or new stream has been made: until then launches skip fencing."""
    return fencing_on[0]


@contextlib.contextmanager
def capturing(on: object) -> Iterator[None]:
    """Inside this block this thread's launches go to stream ``on`` (being captured into a
    graph) and do not fence (graphs.py orders the capture after all earlier work)."""
    stack = _local.__dict__.setdefault("streams", [])
    stack.append(on)
    _local.capturing = True
    try:
        yield
    finally:
        _local.capturing = False
        stack.pop()


def fence_now() -> bool:
    """Whether a launch fences: streams exist and this thread is not capturing a graph."""
    return fencing_on[0] and not _local.capturing


def fence(on: object, pointers) -> int:
    """Order work about to be enqueued on stream ``on`` after the work already enqueued on
    other streams that used any of ``pointers`` (data pointers of the arrays it reads or
    writes); then note ``on`` as their last user. Returns how many waits were enqueued
    (``stats()["stream_waits"]`` counts them)."""
    if on == 0 or on is None or isinstance(on, HostStream):
        with _fence_lock:
            for p in pointers:
                _last_stream.pop(p, None)  # the default stream orders itself with all
        return 0
    waits = []
    with _fence_lock:
        for p in pointers:
            previous = _last_stream.get(p)
            if previous is not None and previous is not on and previous not in waits:
                waits.append(previous)
            _last_stream.pop(p, None)
            _last_stream[p] = on  # (re)inserted last: the oldest entries go first
        while len(_last_stream) > MAX_TRACKED:
            del _last_stream[next(iter(_last_stream))]
    for previous in waits:
        done = _cuda().event() if simulating() else _cuda().event(timing=False)
        done.record(previous)
        done.wait(on)
    if waits:
        bump("stream_waits", len(waits))
    return len(waits)


def note_gpu_work() -> None:
    _gpu_work[0] = True


def gpu_work_queued() -> bool:
    """Whether this process has launched CUDA work (if not, no GPU driver is touched)."""
    return _gpu_work[0]


def synchronize_device() -> None:
    """Wait until all queued GPU work is done."""
    _cuda().synchronize()
