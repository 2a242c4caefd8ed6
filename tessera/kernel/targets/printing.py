"""What a kernel's ``print`` writes and a failed ``assert`` says, the same on every target:
the lane's prefix, then the items as Python's print writes them (docs/language.md,
"Printing and asserting").

A grouped kernel's line starts ``[group (0,) lane (3,)]``, a flat kernel's ``[tile (3,)]``
(a flat kernel's instances are tiles, numbered as ``tile.id`` numbers them). The CPU
target prints through Numba's ``print``, which writes a value as Python writes the Python
number it boxes it into (an f32 0.1 is ``0.10000000149011612``); the debug target writes
:func:`value_text`, the same text. CUDA prints through ``vprintf``, as numba-cuda's
``print`` does, with C's formats (``%f`` for floats), and unordered.
"""

from __future__ import annotations

import numpy as np

from ...errors import KernelAssertionError, SourceLoc
from .. import ir


def prefix_template(kir: ir.KernelIR, grid_ndim: int) -> str:
    """The prefix with one ``{}`` per id: the group's ids, then the lane's (a grouped
    kernel), or the tile's (a flat one); literal braces doubled (``str.format``)."""
    if kir.grouped:
        return f"[group {_ids(grid_ndim)} lane {_ids(len(kir.tile_shape))}]"
    return f"[tile {_ids(grid_ndim)}]"


def _ids(n: int) -> str:
    return "({},)" if n == 1 else "(" + ", ".join(["{}"] * n) + ")"


def escape(text: str) -> str:
    """A constant string of a print, as literal text of a ``str.format`` template."""
    return text.replace("{", "{{").replace("}", "}}")


def template(kir: ir.KernelIR, grid_ndim: int, s: ir.Print) -> str:
    """The whole line of ``s`` as a ``str.format`` template, newline included: one
    ``{}`` per id of the prefix, then one per value item."""
    parts = [prefix_template(kir, grid_ndim)]
    parts += [escape(i) if isinstance(i, str) else "{}" for i in s.items]
    return " ".join(parts) + "\n"


def value_text(value: object) -> str:
    """A value as the CPU target's print writes it: as the Python bool, int or float
    it equals."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return str(float(value))


def printf_text(value: object) -> str:
    """A value as CUDA's printf writes it (numba-cuda's formats: ``%lld``, ``%f``,
    ``True``/``False``): the CUDA simulator's print."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{float(value):f}"


def assertion_failed(
    kir: ir.KernelIR, message: str, loc: SourceLoc, ids: tuple[int, ...], grid_ndim: int
) -> KernelAssertionError:
    """The error of a failed assert: ``ids`` are the group's then the lane's (a grouped
    kernel), or the tile's (a flat one), as :func:`prefix_template` orders them."""
    ids = tuple(int(i) for i in ids)
    if kir.grouped:
        who = f"lane {ids[grid_ndim:]} of group {ids[:grid_ndim]}"
    else:
        who = f"tile {ids}"
    return KernelAssertionError(kir.name, f"assertion failed: {message} ({who})", (("", loc),))
