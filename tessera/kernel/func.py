"""``@tessera.func``: helper functions that kernels call.

A helper is written in the kernel language and inlined into each kernel that calls it,
so it can use every primitive its caller may use (collectives included) and costs
nothing at run time. Array arguments are passed by reference; scalars by value.
Outside a kernel a helper is an ordinary Python function.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from ..errors import TesseraError
from .source import SourceInfo, SourceText, enclosing_names, source_info_of, source_text_of


class Func:
    """A helper function; call it from a kernel (it is inlined there)."""

    def __init__(self, fn: Callable):
        if not inspect.isfunction(fn):
            raise TesseraError(f"@tessera.func decorates a function, not {type(fn).__name__}")
        self.fn = fn
        self.name = fn.__name__
        self._info: SourceInfo | None = None
        self._enclosing = enclosing_names(fn)  # now: a factory's frame is gone later
        try:  # now: the file may be edited later (a helper typed at a prompt: when used)
            self._text: SourceText | None = source_text_of(fn, "helper")
        except TesseraError:
            self._text = None
        functools.update_wrapper(self, fn)

    def source_info(self) -> SourceInfo:
        if self._info is None:
            self._info = source_info_of(self.fn, "helper", self._enclosing, self._text)
        return self._info

    def __call__(self, *args: object) -> object:
        return self.fn(*args)

    def __repr__(self) -> str:
        return f"<tessera.func {self.name}>"


def func(fn: Callable) -> Func:
    """Declare a helper callable from kernels.

    >>> import tessera as ts
    >>> @ts.func
    ... def clamp(v, lo, hi):
    ...     return min(max(v, lo), hi)
    >>> clamp(5, 0, 3)
    3
    """
    return Func(fn)
