"""What a user sees while a kernel compiles (docs/targets.md, "Compile feedback").

A compile is always logged (the ``tessera`` logger: "compiled kernel 'k' for cuda (sm_90)
in 3.10 s"). On a terminal, one that is still running after ``ANNOUNCE_AFTER_S`` seconds
also prints a line to stderr, and another when it ends, as Warp does::

    tessera: compiling 'attention' for cuda (sm_90)...
    tessera: compiled 'attention' in 3.1 s

Batch jobs (stderr not a terminal) get the log record only, never these lines.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator

log = logging.getLogger("tessera")
ANNOUNCE_AFTER_S = 2.0


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"tessera: {line}\n")
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass


@contextlib.contextmanager
def compiling(kernel: str, where: str, after: float | None = None) -> Iterator[None]:
    """Around one compile of ``kernel`` for ``where`` (``"cuda (sm_90)"``, ``"cpu
    (parallel variant)"``): the log record at the end, the terminal lines if it is slow."""
    start = time.perf_counter()
    shown = threading.Event()
    timer = None
    if _terminal():

        def announce() -> None:
            shown.set()
            _say(f"compiling '{kernel}' for {where}...")

        timer = threading.Timer(ANNOUNCE_AFTER_S if after is None else after, announce)
        timer.daemon = True
        timer.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        if timer is not None:
            timer.cancel()
        seconds = time.perf_counter() - start
        if ok:
            log.info("compiled kernel '%s' for %s in %.2f s", kernel, where, seconds)
        if shown.is_set():
            _say(f"{'compiled' if ok else 'failed to compile'} '{kernel}' in {seconds:.1f} s")
