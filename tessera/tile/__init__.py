"""The in-kernel language (``from tessera import tile``).

Inside a ``@kernel`` these names are primitives of the kernel language. Each is declared
once in :mod:`tessera.tile.primitives` (what it takes, its type rule, whether it is a
group collective); docs/language.md lists them. Every primitive is reachable here; the
group-level ones are also exported at the top of the package (``ts.tbarrier`` is
``ts.tile.tbarrier``: one object, two spellings; docs/language.md gives the canonical
one).
"""

from . import blocks, primitives
from .blocks import *  # noqa: F403 - tile values, declared there
from .primitives import *  # noqa: F403 - the declarations, listed once there

__all__: list[str] = []  # in the forms type checkers follow
__all__ += primitives.__all__
__all__ += blocks.__all__
