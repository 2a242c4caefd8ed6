"""What the traceback of a Tessera error shows (``TESSERA_TRACEBACK``, docs/debugging.md).

A KernelError or LaunchError is about the user's code: the kernel source it points at, or
the launch that passed a bad argument. The dozens of compiler frames it passed through on
its way out say nothing to the user and push the message off the screen. So every public
entry point (the decorator, ``k[grid](...)``, ``Kernel.inspect``, ...) hands the errors it
lets out to :func:`user_frames` and re-raises them with a bare ``raise``.

The traceback then holds the user's frames only: ``user_frames`` drops the frames the
error has collected so far, and a bare ``raise`` re-raises an exception with its own
``__traceback__`` without adding the frame it runs in (CPython 3.11 and later; older
versions keep the entry point's frames). ``TESSERA_TRACEBACK=full`` keeps everything.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from .config import get as setting
from .errors import TesseraError

F = TypeVar("F", bound=Callable)


def user_frames(error: BaseException) -> None:
    """Drop Tessera's frames (and the internal exceptions it was raised from) from
    ``error``, unless ``TESSERA_TRACEBACK=full``. The caller re-raises it with ``raise``."""
    if setting("traceback") == "full":
        return
    error.__traceback__ = None
    error.__cause__ = None
    error.__suppress_context__ = True


def entry_point(fn: F) -> F:
    """Decorate a public function or method: a TesseraError it raises reaches the caller
    with the caller's frames only (see the module docstring). Not for the launch path,
    which does the same inline (a wrapper costs a call per launch)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TesseraError as error:
            user_frames(error)
            raise

    return call
