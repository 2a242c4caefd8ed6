"""Who is told about a failure: the layers that fail call :func:`report`, listeners such as
crash capture (``tessera/observe/crash.py``) subscribe with :func:`listen`.

Kernel launches and waits on other ranks sit below the observe package, so they cannot
call it; they report here instead, and know nothing of who listens. A listener must not
change the failure: whatever it raises is swallowed (and logged), and the original error
goes on to the user unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger("tessera")
_listeners: list[Callable[..., None]] = []
_quiet = threading.local()


def listen(listener: Callable[..., None]) -> Callable[..., None]:
    """Call ``listener(error, **context)`` on every reported failure."""
    if listener not in _listeners:
        _listeners.append(listener)
    return listener


def report(error: BaseException, **context: object) -> None:
    """Tell every listener about ``error`` (``context``: the kernel, grid and arguments of
    a failed launch). Never raises; inside :func:`expected` nobody is told."""
    if getattr(_quiet, "depth", 0):
        return
    for listener in _listeners:
        try:
            listener(error, **context)
        except Exception as exc:  # a capture must never mask the error it captures
            log.warning("could not record the failure (%s: %s)", type(exc).__name__, exc)


@contextlib.contextmanager
def expected() -> Iterator[None]:
    """Failures inside this block are handled by the caller (an autotune trial of a config
    that does not fit), so they are not reported (this thread)."""
    _quiet.depth = getattr(_quiet, "depth", 0) + 1
    try:
        yield
    finally:
        _quiet.depth -= 1
