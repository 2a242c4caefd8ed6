"""Where launches, compiles, collectives, autotune trials and graph modules report what
they do, for ``tessera.observe`` (profiles, traces, metrics files, NVTX ranges).

``observe/`` sits above ``kernel/``, which must not import it, so the registry lives down
here (it imports nothing of Tessera's) and ``observe/`` attaches its observers to it.
Launches are the hot path: with no observer attached, a launch pays one truth test of
:data:`OBSERVERS` and nothing else; only when something listens does it take
:func:`run_launch`, which times the launch and hands each observer a
:class:`LaunchRecord`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

OBSERVERS: list[Observer] = []  # truthy exactly when something observes
_lock = threading.Lock()
now = time.perf_counter  # the clock of every record (seconds)


class Observer:
    """What an observer may hear; every hook does nothing unless overridden.

    ``synchronous``: asynchronous (GPU) launches are waited for before they are timed, so
    a record holds the kernel's time, not the time it took to queue it.
    """

    synchronous = False

    def launch(self, record: LaunchRecord) -> None:
        """A launch finished."""

    def span(self, record: Span) -> None:
        """A compile stage, disk-cache load, collective, autotune trial or graph-module
        run finished."""

    def enter(self, kind: str, name: str, primitives: frozenset[str], target: object) -> None:
        """Something of ``kind`` ("launch", or a span's kind) named ``name`` starts: a
        launch of a kernel that calls ``primitives`` (by name) on ``target``; for the
        others ``primitives`` is empty and ``target`` None."""

    def leave(self) -> None:
        """The launch or collective last entered has finished."""


@dataclass(slots=True)
class LaunchRecord:
    kernel: object  # the Kernel (name, params, flops)
    target: object  # the Target it ran on
    grid: tuple[int, ...]
    args: tuple  # the values the program was called with: arrays first, in parameter order
    start: float  # now() when it started
    seconds: float  # its run time, compilation during it left out
    compiled: bool  # it built its program (False: the program came from the cache)
    compile_seconds: float = 0.0  # compilation during the run (a lazily compiled variant)
    program: object = None  # what ran: ``program.run(args, grid, parallel)`` runs it again
    parallel: bool = True


@dataclass(slots=True)
class Span:
    kind: str  # "compile", "cache load", "collective", "autotune trial", "graph module"
    name: str  # the kernel, collective, or module
    start: float
    seconds: float
    fields: dict = field(default_factory=dict)


BUILDING = ("compile", "cache load")  # making a program, not running it
_compiling = threading.local()
_compile_total = [0.0]  # seconds spent in outermost compile stages, for run_launch


# what run_launch needs, worked out when observers come and go rather than per launch
_listening: list[Observer] = []  # those with a launch hook
_ranging: list[Observer] = []  # those that enter and leave (NVTX)
_waiting = [False]  # some observer wants asynchronous launches waited for


def attach(observer: Observer) -> None:
    with _lock:
        OBSERVERS.append(observer)
        _update()


def detach(observer: Observer) -> None:
    with _lock:
        if observer in OBSERVERS:
            OBSERVERS.remove(observer)
        _update()


def _update() -> None:
    _listening[:] = [o for o in OBSERVERS if type(o).launch is not Observer.launch]
    _ranging[:] = [o for o in OBSERVERS if type(o).enter is not Observer.enter]
    _waiting[0] = any(o.synchronous for o in OBSERVERS)


def run_launch(kernel, target, program, args: tuple, grid: tuple, parallel: bool, built: bool):
    """Run ``program`` as an observed launch: ranges entered, timed, reported."""
    ranging = _ranging
    if ranging:
        for o in ranging:
            o.enter("launch", kernel.name, kernel.primitives, target)
    compiled_before = _compile_total[0]
    start = now()
    try:
        program.run(args, grid, parallel)
        if _waiting[0] and target.timed_with_events():
            target.synchronize()
        end = now()
    finally:
        if ranging:
            for o in reversed(ranging):
                o.leave()
    compiling = _compile_total[0] - compiled_before
    record = LaunchRecord(
        kernel,
        target,
        grid,
        args,
        start,
        end - start - compiling,
        built,
        compiling,
        program,
        parallel,
    )
    for o in _listening:
        o.launch(record)


def report(kind: str, name: str, start: float, **fields) -> None:
    """Report a span that began at ``start`` (``now()``) and ends now."""
    if OBSERVERS:
        record = Span(kind, name, start, now() - start, fields)
        for o in tuple(OBSERVERS):
            o.span(record)


@contextlib.contextmanager
def stage(kind: str, name: str, **fields) -> Iterator[dict]:
    """Report the block as a span (nothing when no observer listens). A compile or
    cache-load block (:data:`BUILDING`) that is not inside another is left out of the
    launch time it happens in. Yields the fields, which the block may add to."""
    if not OBSERVERS:
        yield fields
        return
    building = kind in BUILDING
    outer = building and not getattr(_compiling, "depth", 0)
    _compiling.depth = getattr(_compiling, "depth", 0) + building
    start = now()
    try:
        with entered(kind, name):
            yield fields
    finally:
        _compiling.depth -= building
        if outer:
            _compile_total[0] += now() - start
        report(kind, name, start, **fields)


@contextlib.contextmanager
def entered(kind: str, name: str) -> Iterator[None]:
    """Enter and leave the observers' ranges around a block (a collective's wait)."""
    ranging = tuple(_ranging)
    for o in ranging:
        o.enter(kind, name, NO_PRIMITIVES, None)
    try:
        yield
    finally:
        for o in reversed(ranging):
            o.leave()


NO_PRIMITIVES: frozenset[str] = frozenset()
