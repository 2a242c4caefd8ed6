"""Every ``TESSERA_*`` setting, typed and documented in one place.

Settings are read from the environment when first asked for and can be overridden for a
block of code with :func:`config`, which is how tests scope them::

    with tessera.config(target="cpu"):
        k[n](x, y)
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: str
    choices: tuple[str, ...] | None
    doc: str


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "target",
            "TESSERA_TARGET",
            "auto",
            ("auto", "cpu"),
            "Target for launches: 'auto' picks from the arrays, or force one target.",
        ),
        Setting(
            "parallel_threshold",
            "TESSERA_PARALLEL_THRESHOLD",
            "4096",
            None,
            "Launches with fewer lanes than this run on one core: starting the thread "
            "pool costs more than such a launch.",
        ),
    )
}

_overrides = threading.local()


def _stack() -> list[dict[str, str]]:
    if not hasattr(_overrides, "stack"):
        _overrides.stack = []
    return _overrides.stack


def get(name: str) -> str:
    """The current value of setting ``name`` (override, then environment, then default)."""
    for frame in reversed(_stack()):
        if name in frame:
            return frame[name]
    setting = SETTINGS[name]
    return os.environ.get(setting.env, setting.default)


def get_int(name: str) -> int:
    value = get(name)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{SETTINGS[name].env}={value!r} is not an integer") from None


@contextlib.contextmanager
def config(**settings: object) -> Iterator[None]:
    """Override settings inside a ``with`` block (thread-local)."""
    frame: dict[str, str] = {}
    for name, value in settings.items():
        if name not in SETTINGS:
            raise ValueError(f"unknown Tessera setting {name!r}; known: {sorted(SETTINGS)}")
        choices = SETTINGS[name].choices
        if choices is not None and str(value) not in choices:
            raise ValueError(f"setting {name}={value!r} must be one of {choices}")
        frame[name] = str(value)
    _stack().append(frame)
    try:
        yield
    finally:
        _stack().pop()
