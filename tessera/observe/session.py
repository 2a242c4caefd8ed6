"""What ``TESSERA_TRACE`` and ``TESSERA_METRICS`` turn on for the whole process, and NVTX
ranges when the ``nvtx`` package is installed: started when ``tessera`` is imported, the
files written when the process exits.

Processes that only start or watch the ranks (``tessera run``'s launcher and its
``tessera.runtime.rank_output`` wrappers) import tessera too, with the ranks' settings in their
environment; they :func:`stand_down`, so that the observers run only in the ranks and
nothing of theirs lands beside the ranks' files (a trace or metrics file, a
fatal-signal file)."""

from __future__ import annotations

import atexit

from ..config import get as setting
from . import crash
from .metrics import Metrics
from .nvtx import install as install_nvtx
from .observers import attach, detach
from .trace import Trace


def start() -> list:
    """Attach what the settings ask for; each is written (and detached) at exit."""
    started: list = []
    path = setting("trace")
    if path:
        started.append(Trace(path))
    path = setting("metrics")
    if path:
        started.append(Metrics(path))
    for observer in started:
        attach(observer)
    if started:
        atexit.register(stop, started)
    install_nvtx()
    return started


def stop(started: list) -> None:
    for observer in started:
        detach(observer)
        if isinstance(observer, Trace):
            observer.write()
        else:
            observer.close()


STARTED = start()


def stand_down() -> None:
    """This process runs no kernels of the job: detach what :func:`start` attached without
    writing it (no file was opened yet), and drop the fatal-signal file."""
    atexit.unregister(stop)
    for observer in STARTED:
        detach(observer)
    STARTED.clear()
    crash.forget_fatal_signals()
