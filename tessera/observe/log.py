"""Tessera's log: the ``tessera`` logger, ``TESSERA_LOG`` and the tail a crash capture keeps.

Tessera logs what takes time or decides something, never per launch (a launch's few
microseconds must not pay for a logging call): compiles with their seconds, disk-cache
hits and misses, autotune decisions and collective timeouts. Nothing is printed unless
asked for: ``TESSERA_LOG=info`` (or ``debug``) adds a stderr handler, and a program's own
``logging`` configuration sees the records like any library's::

    import logging
    logging.getLogger("tessera").setLevel(logging.INFO)

A small ring buffer (:data:`TAIL`) keeps the latest records so that a crash capture
(``crash.py``) can write the log tail that led to the failure.
"""

from __future__ import annotations

import collections
import logging
import sys

from ..config import get as setting

LOGGER = logging.getLogger("tessera")
FORMAT = "%(asctime)s tessera %(levelname)s: %(message)s"
TAIL_RECORDS = 200


class Tail(logging.Handler):
    """The latest :data:`TAIL_RECORDS` records, formatted. Where no other handler would
    see a WARNING (no handler anywhere on the logger's way to the root), it prints it as
    Python's last-resort handler would have: keeping a tail must not silence warnings."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=TAIL_RECORDS)
        self.setFormatter(logging.Formatter(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
            shown = getattr(record, "shown_as_warning", False)  # config.warn_once's records
            if record.levelno >= logging.WARNING and not shown and self._alone(record):
                print(record.getMessage(), file=sys.stderr)
        except Exception:  # a handler must never raise into the code that logs
            self.handleError(record)

    def _alone(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return False
            if not logger.propagate:
                break
            logger = logger.parent
        return True


TAIL = Tail()
_stderr: list[logging.Handler] = []


def install() -> None:
    """Attach the tail and, under ``TESSERA_LOG``, a stderr handler at that level (again
    after :func:`tessera.config.refresh`: the old stderr handler is replaced). The logger's
    level is lowered to INFO only when asked for (TESSERA_LOG, TESSERA_CRASH_DIR), so a
    program's own root handlers do not start printing Tessera's INFO records."""
    if TAIL not in LOGGER.handlers:
        LOGGER.addHandler(TAIL)
    for handler in _stderr:
        LOGGER.removeHandler(handler)
    _stderr.clear()
    level = setting("log")
    if level:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.setLevel(level)
        LOGGER.addHandler(handler)
        _stderr.append(handler)
        LOGGER.setLevel(min(logging.getLevelName(level), LOGGER.getEffectiveLevel()))
    elif setting("crash_dir") and LOGGER.getEffectiveLevel() > logging.INFO:
        LOGGER.setLevel(logging.INFO)  # the capture's log tail shows the compiles


def tail(lines: int = TAIL_RECORDS) -> list[str]:
    """The latest ``lines`` log records, oldest first."""
    return list(TAIL.lines)[-lines:]


install()
