"""What the traceback of a Tessera error shows (``TESSERA_TRACEBACK``, docs/debugging.md).

A KernelError or LaunchError is about the user's code: the kernel source it points at, or
the launch that passed a bad argument. The dozens of compiler frames it passed through on
its way out say nothing to the user and push the message off the screen. So every public
entry point (the decorator, ``k[grid](...)``, ``Kernel.inspect``, ...) hands the errors it
lets out to :func:`user_frames` and re-raises them with a bare ``raise``.

The traceback then holds the user's frames only: ``user_frames`` drops Tessera's frames
(its package, the code it generates, and the standard library's frames between them) from
those the error has collected so far, and a bare ``raise`` re-raises an exception with its
own ``__traceback__`` without adding the frame it runs in (CPython 3.11 and later; older
versions keep the entry point's frames). The user's frames that Tessera called back into
stay: the traced function of a ``@graph.module``, the function ``tessera.bench`` times.
``TESSERA_TRACEBACK=full`` keeps everything.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import types
from collections.abc import Callable
from typing import TypeVar

from ..config import get as setting
from ..errors import TesseraError

F = TypeVar("F", bound=Callable)
_PATHS = sysconfig.get_paths()
_TESSERA = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # the package
    "<tessera",  # the source it generates (linecache names)
)
_STDLIB = os.path.join(_PATHS["stdlib"], "")  # contextlib, functools, ... between its frames
_INSTALLED = (os.path.join(_PATHS["purelib"], ""), os.path.join(_PATHS["platlib"], ""))


def user_frames(error: BaseException) -> None:
    """Drop Tessera's frames (and the internal exceptions it was raised from) from
    ``error``, unless ``TESSERA_TRACEBACK=full``. The caller re-raises it with ``raise``."""
    if setting("traceback") == "full":
        return
    error.__traceback__ = _without_internal(error.__traceback__)
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


def _without_internal(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without Tessera's own frames (a new chain: the frames stay as they are)."""
    kept = []
    while tb is not None:
        if not _internal(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    chain = None
    for t in reversed(kept):
        chain = types.TracebackType(chain, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return chain


def internal_frame(filename: str) -> bool:
    """Whether a frame of ``filename`` is Tessera's (or the standard library's between
    them): the first frame outside is the user's call."""
    return _internal(filename)


def _internal(filename: str) -> bool:
    """Whether a frame of ``filename`` is Tessera's or the standard library's (whose
    site-packages folder holds users' code: kept)."""
    if filename.startswith(_TESSERA):
        return True
    return filename.startswith(_STDLIB) and not filename.startswith(_INSTALLED)
