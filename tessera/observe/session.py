"""What ``TESSERA_TRACE`` and ``TESSERA_METRICS`` turn on for the whole process, and NVTX
ranges when the ``nvtx`` package is installed: started when ``tessera`` is imported, the
files written when the process exits."""

from __future__ import annotations

import atexit

from ..config import get as setting
from ..observers import attach, detach
from .metrics import Metrics
from .nvtx import install as install_nvtx
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
