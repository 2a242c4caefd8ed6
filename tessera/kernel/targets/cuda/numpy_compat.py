"""numba-cuda 0.30 on NumPy 2.5: the one name it still needs from an older NumPy.

numba-cuda 0.30.4 (in maintenance mode since; no later release) registers its overload
of ``np.row_stack`` whenever NumPy is 2.0 or newer, but NumPy 2.5 removed that alias of
``np.vstack``. Every first CUDA compile then fails with ``AttributeError: module 'numpy'
has no attribute 'row_stack'`` (seen on a GPU machine with NumPy 2.5.2). Tessera lends
NumPy the alias while it imports the numba-cuda module that registers it, then takes it
away again: the overload is registered for ``np.vstack`` (the same function), and user
code never sees a ``np.row_stack`` that its NumPy does not have. docs/targets.md.
"""

from __future__ import annotations

import importlib
import threading

import numpy as np

_ALIASES = {"row_stack": "vstack"}  # removed name -> the function it was an alias of
_REGISTERING_MODULES = ("numba.cuda.np.arrayobj",)
_lock = threading.Lock()


def load_registrations() -> None:
    """Import numba-cuda's NumPy registrations with the removed aliases lent to NumPy
    (nothing to lend, and nothing changed, on a NumPy that still has them)."""
    missing = {old: new for old, new in _ALIASES.items() if not hasattr(np, old)}
    with _lock:
        for old, new in missing.items():
            setattr(np, old, getattr(np, new))
        try:
            for module in _REGISTERING_MODULES:
                importlib.import_module(module)
        finally:
            for old in missing:
                delattr(np, old)
