"""The in-kernel language (``from tessera import tile``).

Inside a ``@kernel`` these names are primitives of the kernel language; the table of what
each one does is in :mod:`tessera.tile.primitives` and docs/language.md.
"""

from .primitives import (
    REGISTRY,
    Primitive,
    atomic_add,
    cp_async,
    group_id,
    group_linear_id,
    group_tile_count,
    id,
    linear_id,
    load,
    reduce_max,
    reduce_min,
    reduce_sum,
    store,
    tshared,
)
from .primitives import barrier as tbarrier
from .primitives import max_ as max
from .primitives import min_ as min
from .primitives import range_ as range
from .primitives import sum_ as sum

__all__ = [
    "REGISTRY",
    "Primitive",
    "atomic_add",
    "cp_async",
    "group_id",
    "group_linear_id",
    "group_tile_count",
    "id",
    "linear_id",
    "load",
    "max",
    "min",
    "range",
    "reduce_max",
    "reduce_min",
    "reduce_sum",
    "store",
    "sum",
    "tbarrier",
    "tshared",
]
