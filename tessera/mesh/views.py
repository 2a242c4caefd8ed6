"""Whether anyone still holds a view of a kept buffer.

``all_reduce_coalesced`` returns views of buffers it keeps, and may hand a buffer out
again only once no view of it is left. Every NumPy (or CuPy) view keeps a reference to
the array that owns its memory, so a kept array that nothing else refers to has no view
left: its reference count says so.
"""

from __future__ import annotations

import sys

import numpy as np


def outside_references(arrays: list) -> list[int]:
    """For each array in ``arrays``: how many references to it there are besides the list
    itself (0: nothing else holds it or any view of it)."""
    return [sys.getrefcount(a) - _OWN for a in arrays]


_OWN = 0
_OWN = outside_references([np.empty(1)])[0]  # what the list and this call account for
